//! Checks against the real traces in `shared/traces` (outside the repository): every file reads
//! with the right number of rows and jobs, and a few known rows come out field by field.
//!
//! The trace directory is `$ORDO_TRACES`, or `../shared/traces` beside the repository root. If
//! a file is absent the tests fail when `CI=true` and are skipped (with a message) otherwise.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_trace::{load_cluster_nodes, load_path, write_generic, Format, LoadOptions, LoadedTrace};

// The traces-directory lookup (skip or fail under CI) is shared with the `ordo` crate's tests.
#[path = "../../ordo/tests/common/mod.rs"]
mod common;
mod support;
use common::trace;
use support::{group, job, user};

fn load(rel: &str) -> Option<LoadedTrace> {
    let path = trace(rel)?;
    Some(load_path(&path, &LoadOptions::default()).unwrap())
}

fn consistent(t: &LoadedTrace) {
    assert_eq!(t.rows, t.workload.jobs.len() + t.dropped_total());
    assert!(t.workload.jobs.iter().enumerate().all(|(i, j)| j.id.idx() == i && j.runtime > 0));
    assert_eq!(t.workload.jobs.first().map(|j| j.submit), Some(0));
    assert!(t.workload.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
}

#[test]
fn philly_rfold_whole_file() {
    let Some(t) = load("philly/philly_rfold.csv") else { return };
    consistent(&t);
    assert_eq!(t.format, Format::Philly);
    assert_eq!((t.rows, t.dropped_zero_duration, t.workload.jobs.len()), (111_549, 10, 111_539));
    assert_eq!(t.dropped_total(), 10);
    let w = &t.workload;
    assert!(w.jobs.iter().all(|j| (1..=128).contains(&j.gpus)));
    assert_eq!(w.users, ["default"]);
    // `0,0.0,CLOS,1,1,3613033.0` and `1,266563.0,CLOS,1,1,3222990.0`
    let j = job(w, "0");
    assert_eq!((j.submit, j.gpus, j.runtime, j.estimate, j.gpu_milli), (0, 1, 3_613_033_000, None, None));
    let j = job(w, "1");
    assert_eq!((j.submit, j.gpus, j.runtime), (266_563_000, 1, 3_222_990_000));
    let last = w.jobs.last().map_or(0, |j| j.submit);
    assert!((128..=130).contains(&(last / 86_400_000)), "{last}");
}

#[test]
fn philly_rfold_days_42_to_49() {
    let Some(path) = trace("philly/philly_rfold.csv") else { return };
    let opts = LoadOptions::new(Format::Auto).with_window(Some(42.0), Some(49.0));
    let t = load_path(&path, &opts).unwrap();
    consistent(&t);
    assert_eq!(t.workload.jobs.len(), 7_729);
    assert_eq!(t.rows, 111_549);
    assert!(t.workload.jobs.last().is_some_and(|j| j.submit < 7 * 86_400_000));
}

#[test]
fn philly_vc() {
    let Some(t) = load("philly/philly_vc.csv") else { return };
    consistent(&t);
    assert_eq!(t.format, Format::PhillyVc);
    assert_eq!((t.rows, t.workload.jobs.len()), (82_247, 82_247));
    let w = &t.workload;
    assert_eq!(w.groups.len(), 15);
    // Earliest submit 2017-09-04 10:30:41 UTC.
    assert_eq!(t.time_base, Some(1_504_521_041_000));
    // Line 2: `2017-10-09 07:01:55,66.0,1,66.0,11cb48`.
    let j = job(w, "line2");
    assert_eq!(j.submit, (1_507_532_515 - 1_504_521_041) * 1000);
    assert_eq!((j.gpus, j.runtime, j.estimate), (1, 66_000, None));
    assert_eq!((group(w, j), user(w, j)), ("11cb48".to_string(), "11cb48".to_string()));
    // Line 4: `2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0`.
    let j = job(w, "line4");
    assert_eq!((j.runtime, group(w, j)), (860_662_000, "6c71a0".to_string()));
}

#[test]
fn philly_vc_wall_clock_window() {
    let Some(path) = trace("philly/philly_vc.csv") else { return };
    // Days count from the earliest submit (2017-09-04 10:30:41); a date window is absolute.
    let by_day = load_path(&path, &LoadOptions::default().with_window(Some(0.0), Some(1.0))).unwrap();
    let by_date = load_path(
        &path,
        &LoadOptions {
            from_time: ordo_trace::parse_datetime(b"2017-09-04 10:30:41"),
            to_time: ordo_trace::parse_datetime(b"2017-09-05 10:30:41"),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(!by_day.workload.jobs.is_empty());
    assert_eq!(by_day.workload.jobs, by_date.workload.jobs);
    assert_eq!(by_day.dropped_outside_window, by_date.dropped_outside_window);
    let groups = LoadOptions { groups: vec!["11cb48".into()], ..LoadOptions::default() };
    let t = load_path(&path, &groups).unwrap();
    assert_eq!((t.workload.jobs.len(), t.dropped_filtered), (16_091, 82_247 - 16_091));
    assert_eq!(t.workload.groups, ["11cb48"]);
}

#[test]
fn alibaba_pods_and_nodes() {
    let Some(t) = load("alibaba/openb_pod_list_default.csv") else { return };
    consistent(&t);
    assert_eq!(t.format, Format::Alibaba);
    // 897 pods are Pending with no scheduled_time: they never ran.
    assert_eq!((t.rows, t.dropped_never_ran, t.workload.jobs.len()), (8_152, 897, 7_255));
    let w = &t.workload;
    // `openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061`
    let j = job(w, "openb-pod-0001");
    assert_eq!((j.submit, j.gpus, j.gpu_milli), (427_061_000, 1, Some(460)));
    assert_eq!((j.cpus, j.mem_mib, j.queue.as_deref()), (Some(6), Some(12_288), Some("LS")));
    assert_eq!(j.runtime, (12_902_960 - 427_061) * 1000);
    // `openb-pod-8151,3152,5600,1,590,,BE,Failed,12901761,12901792,12901762`: 3152 milli -> 4 CPUs.
    let j = job(w, "openb-pod-8151");
    assert_eq!((j.cpus, j.gpu_milli, j.runtime, j.queue.as_deref()), (Some(4), Some(590), 30_000, Some("BE")));
    // `openb-pod-0000`: a whole GPU.
    let j = job(w, "openb-pod-0000");
    assert_eq!((j.gpus, j.gpu_milli, j.cpus), (1, None, Some(12)));
    assert!(w.jobs.iter().all(|j| j.name != "openb-pod-0061"), "pending pod kept");
    assert_eq!(w.jobs.iter().filter(|j| j.gpu_milli.is_some()).count(), 2_573);

    let Some(nodes) = trace("alibaba/openb_node_list_gpu_node.csv") else { return };
    let c = load_cluster_nodes(&nodes).unwrap();
    assert_eq!((c.nodes.len(), c.total_gpus()), (1_213, 6_212));
    let n = &c.nodes[0];
    assert_eq!((n.name.as_str(), n.gpus, n.cpus, n.mem_mib), ("openb-node-0000", 2, Some(64), Some(262_144)));
    assert_eq!(n.gpu_model.as_deref(), Some("P100"));
}

#[test]
fn swf_kth_gz() {
    let Some(t) = load("swf/KTH-SP2-1996-2.1-cln.swf.gz") else { return };
    consistent(&t);
    assert_eq!(t.format, Format::Swf);
    assert_eq!(t.rows, 28_476);
    assert_eq!((t.dropped_zero_duration, t.dropped_unknown_size, t.workload.jobs.len()), (8, 1, 28_467));
    assert_eq!(t.max_procs, Some(100));
    let w = &t.workload;
    // `15 599850 192180 3477 4 -1 -1 4 53940 -1 1 12 12 -1 -1 -1 -1 -1`: the first job.
    let j = job(w, "15");
    assert_eq!((j.submit, j.runtime, j.gpus, j.estimate), (0, 3_477_000, 4, Some(53_940_000)));
    assert_eq!((user(w, j), group(w, j), j.queue.clone()), ("12".to_string(), "12".to_string(), None));
    assert_eq!(t.time_base, Some(599_850_000));
    let j = job(w, "16");
    assert_eq!((j.submit, j.runtime, j.gpus, j.estimate), (172_000, 2_488_000, 25, Some(3_600_000)));
    assert!(w.has_estimates());
}

#[test]
fn swf_lublin() {
    let Some(t) = load("swf/lublin_256.swf") else { return };
    consistent(&t);
    assert_eq!((t.rows, t.workload.jobs.len()), (10_000, 10_000));
    assert_eq!(t.max_procs, Some(256)); // from `; MaxNodes: 256` (no MaxProcs line)
    let w = &t.workload;
    // `1 5094 -1 12072 16 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1`
    let j = job(w, "1");
    assert_eq!((j.submit, j.runtime, j.gpus, j.estimate), (0, 12_072_000, 16, None));
    assert_eq!((user(w, j), j.queue.as_deref()), ("default".to_string(), Some("0")));
    // `2 5170 -1 2 1 ...`
    assert_eq!(job(w, "2").submit, 76_000);
    assert!(w.jobs.iter().all(|j| j.gpus <= 256));
}

#[test]
fn tiresias() {
    let Some(t) = load("tiresias/60_job.csv") else { return };
    consistent(&t);
    assert_eq!(t.format, Format::Tiresias);
    assert_eq!((t.rows, t.workload.jobs.len()), (60, 60));
    // `1,8,30,133,vgg11,147,23`
    let j = job(&t.workload, "1");
    assert_eq!((j.gpus, j.submit, j.runtime), (8, 30_000, 147_000));
}

/// Converting each real trace to generic and reading it back keeps every job.
#[test]
fn real_traces_round_trip_through_generic() {
    for rel in ["philly/philly_vc.csv", "alibaba/openb_pod_list_default.csv", "swf/KTH-SP2-1996-2.1-cln.swf.gz"] {
        let Some(t) = load(rel) else { return };
        let mut out = Vec::new();
        write_generic(&t.workload, &mut out).unwrap();
        let back = ordo_trace::load_reader(&out[..], "back.csv", &LoadOptions::default()).unwrap();
        assert_eq!(back.format, Format::Generic);
        assert_eq!(back.rows, t.workload.jobs.len(), "{rel}");
        assert!(back.workload == t.workload, "{rel}: the jobs read back differ");
    }
}
