//! The traces the field uses, each read from a small fixture written by hand in its published
//! layout (`tests/data/field/`; real data is not in the repository) with every field worked out
//! below: Helios (`cluster_log.csv`) and the Lucid simulator's `cluster_full_log.csv`, the Acme
//! traces (Seren, Kalos), Alibaba's spot GPU trace of 2026 and PAI's GPU trace of 2020 (four
//! tables joined, with measured GPU utilisation); their node lists; and their errors.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod support;

use ordo_trace::{load_cluster, load_path, load_reader, Format, LoadOptions, LoadedTrace};
use std::path::PathBuf;
use support::{group, job, user};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/field").join(rel)
}

fn load(rel: &str) -> LoadedTrace {
    load_path(&fixture(rel), &LoadOptions::default()).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const S: i64 = 1000;

#[test]
fn helios_cluster_log() {
    let t = load("helios/cluster_log.csv");
    assert_eq!(t.format, Format::Helios);
    // Five rows; the CPU job of run time 0 is dropped.
    assert_eq!((t.rows, t.dropped_zero_duration, t.workload.jobs.len()), (5, 1, 4));
    let w = &t.workload;
    // Day 0 is the first submit, 2020-06-09 18:41:01 UTC.
    assert_eq!(t.time_base, ordo_trace::parse_datetime(b"2020-06-09 18:41:01"));
    let a = job(w, "1425511");
    assert_eq!((a.submit, a.gpus, a.cpus, a.runtime, a.start, a.failed), (0, 1, Some(1), 36_848 * S, Some(0), false));
    assert_eq!((user(w, a), group(w, a)), ("uXBbc".to_string(), "vcJkd".to_string()));
    let b = job(w, "1425512");
    assert_eq!((b.submit, b.gpus, b.cpus, b.runtime, b.failed), (26 * S, 4, Some(16), 249 * S, true));
    // CANCELLED counts as unsuccessful, as Slurm's state does.
    assert!(job(w, "1425513").failed);
    // Submitted 18:50:00 (539 s after day 0), started 19:00:00 (1,139 s): queued 600 s.
    let d = job(w, "1425514");
    assert_eq!((d.submit, d.start, d.gpus, d.cpus, d.runtime), (539 * S, Some(1_139 * S), 16, Some(64), 3_600 * S));
    assert_eq!(group(w, d), "vcpDC");
}

#[test]
fn lucid_bundled_log() {
    // Lucid's `cluster_full_log.csv`: Helios's jobs with `jobname` and Lucid's workload profile.
    let t = load("lucid/cluster_full_log.csv");
    assert_eq!(t.format, Format::Helios);
    assert_eq!((t.rows, t.workload.jobs.len()), (3, 3));
    let w = &t.workload;
    let a = job(w, "765469");
    assert_eq!((a.submit, a.gpus, a.cpus, a.runtime, a.start), (0, 8, Some(48), 7_200 * S, None));
    assert_eq!((user(w, a), group(w, a)), ("uA".to_string(), "vcEwI".to_string()));
    let b = job(w, "765470");
    assert_eq!((b.submit, b.gpus, b.runtime, b.failed), (55 * S, 2, 600 * S, true));
    assert_eq!(job(w, "765471").submit, 145 * S);
}

#[test]
fn acme_seren_and_kalos() {
    let t = load("acme/trace_seren.csv");
    assert_eq!(t.format, Format::Acme);
    // The job cancelled before it started has no duration: it never ran.
    assert_eq!((t.rows, t.dropped_never_ran, t.workload.jobs.len()), (4, 1, 3));
    // Dates carry a UTC offset: 2023-03-01 00:18:22+08:00 is 2023-02-28 16:18:22 UTC.
    assert_eq!(t.time_base, ordo_trace::parse_datetime(b"2023-02-28 16:18:22"));
    let w = &t.workload;
    let a = job(w, "5778432");
    assert_eq!(
        (a.submit, a.start, a.gpus, a.cpus, a.runtime, a.failed),
        (0, Some(32 * S), 8, Some(128), 117 * S, true)
    );
    assert_eq!(
        (user(w, a), a.queue.as_deref(), group(w, a)),
        ("u5907".to_string(), Some("Other"), "default".to_string())
    );
    let b = job(w, "5778469");
    assert_eq!((b.submit, b.start, b.runtime, b.failed), (336 * S, Some(349 * S), 2_693 * S, false));
    let c = job(w, "5778471");
    assert_eq!((c.submit, c.start, c.gpus, c.cpus, c.runtime), (758 * S, Some(763 * S), 0, Some(4), 10 * S));
    assert_eq!(c.queue.as_deref(), Some("Debug"));

    let k = load("acme/trace_kalos.csv");
    assert_eq!((k.format, k.rows, k.workload.jobs.len()), (Format::Acme, 2, 2));
    let w = &k.workload;
    let a = job(w, "dlctk696s0jbvitv");
    // `duration` is read as published (18 s), not end - start (8 s).
    assert_eq!(
        (a.submit, a.start, a.gpus, a.cpus, a.runtime, a.mem_mib),
        (0, Some(10 * S), 64, Some(960), 18 * S, None)
    );
    let b = job(w, "dlc1t2ypl09b8qtp");
    assert_eq!((b.submit, b.start, b.runtime, b.failed), (1_664 * S, Some(1_676 * S), 82 * S, true));
}

#[test]
fn alibaba_2026_spot_jobs() {
    let t = load("alibaba2026/job_info_df.csv");
    assert_eq!(t.format, Format::Alibaba2026);
    assert_eq!((t.rows, t.workload.jobs.len()), (5, 5));
    let w = &t.workload;
    let a = job(w, "239255");
    assert_eq!((a.submit, a.gpus, a.cpus, a.runtime), (0, 1, Some(20), 2_764_799 * S));
    assert_eq!((user(w, a), group(w, a), a.queue.as_deref()), ("13".to_string(), "13".to_string(), Some("HP")));
    // GPUs and CPUs are per worker: 16 workers of 1 GPU and 15 CPUs.
    let c = job(w, "437260");
    assert_eq!(
        (c.submit, c.gpus, c.cpus, c.runtime, c.queue.as_deref()),
        (9_589_663 * S, 16, Some(240), 41_060 * S, Some("Spot"))
    );
    let d = job(w, "437261");
    assert_eq!((d.gpus, d.cpus), (94, Some(1_410)));
    // Half a GPU for one worker: a share of one GPU.
    let e = job(w, "437262");
    assert_eq!((e.gpus, e.gpu_milli, e.cpus), (1, Some(500), Some(4)));
}

#[test]
fn pai_2020_tables_joined_with_measured_activity() {
    let t = load("pai/pai_job_table.csv");
    assert_eq!(t.format, Format::Pai2020);
    // j4 never started (Waiting), j5 was still running when the trace ended, j6 has no task.
    assert_eq!(
        (t.rows, t.dropped_never_ran, t.dropped_outside_trace, t.dropped_unknown_size, t.workload.jobs.len()),
        (6, 1, 1, 1, 3)
    );
    // j3 asks 3 x 50% of a GPU = 1.5 GPUs: held as 2 whole GPUs, counted as a repair.
    assert_eq!(
        t.repaired,
        [("pai-2020: more than one GPU with a fraction (e.g. 1.5): rounded up to whole GPUs".to_string(), 1)]
    );
    let w = &t.workload;
    // j1: 2 workers x (50% GPU, 6 CPUs, 29.296875 GB) + 1 ps x (4 CPUs, 10 GB): 1 GPU, 16 CPUs,
    // 68.59375 GB = 70,240 MiB; instances ran 110-400 s: run time 290 s from its first start.
    let a = job(w, "j1");
    assert_eq!((a.submit, a.gpus, a.gpu_milli, a.cpus, a.mem_mib), (0, 1, None, Some(16), Some(70_240)));
    assert_eq!((a.runtime, a.start, user(w, a), a.failed), (290 * S, Some(10 * S), "u1".to_string(), false));
    let b = job(w, "j2");
    assert_eq!(
        (b.submit, b.gpus, b.cpus, b.mem_mib, b.runtime, b.start),
        (50 * S, 2, Some(8), Some(16_384), 150 * S, Some(50 * S))
    );
    let c = job(w, "j3");
    assert_eq!(
        (c.submit, c.gpus, c.gpu_milli, c.runtime, c.start, c.failed),
        (60 * S, 2, None, 5 * S, Some(65 * S), true)
    );
    // Measured GPU use, weighted by each instance's GPUs and time: j1's workers used 25% and
    // 50% of a GPU while holding 50% each for 290 s and 270 s: (0.25 x 290 + 0.5 x 270) /
    // (0.5 x 290 + 0.5 x 270) = 207.5 / 280 = 74.11% of what they held; the ps holds no GPU.
    // j2 used 150% of its 200% for 150 s: 75%. j3 has no sensor rows.
    let act = t.activity.as_ref().expect("the sensor table is beside the job table");
    let by = |name: &str| act[w.jobs.iter().position(|j| j.name == name).unwrap()];
    let a = by("j1").unwrap();
    assert!((a.mean_pct - 100.0 * 207.5 / 280.0).abs() < 1e-9 && a.samples == 2, "{a:?}");
    let b = by("j2").unwrap();
    assert!((b.mean_pct - 75.0).abs() < 1e-9 && b.samples == 1, "{b:?}");
    assert_eq!(by("j3"), None);
    // A window keeps each kept job's activity with it.
    let opts = LoadOptions { from_day: Some(155.0 / 86_400.0), ..LoadOptions::default() };
    let t = load_path(&fixture("pai/pai_job_table.csv"), &opts).unwrap();
    assert_eq!(t.workload.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["j3"]);
    assert_eq!(t.activity, Some(vec![None]));
}

#[test]
fn published_node_lists() {
    let c = load_cluster(fixture("alibaba2026/node_info_df.csv").to_str().unwrap()).unwrap();
    assert_eq!(c.nodes.iter().map(|n| n.gpus).collect::<Vec<_>>(), [4, 1, 1, 8]);
    assert_eq!(
        (c.nodes[3].name.as_str(), c.nodes[3].cpus, c.nodes[3].gpu_model.as_deref()),
        ("3", Some(128), Some("A100-SXM4-80GB"))
    );
    let c = load_cluster(fixture("pai/pai_machine_spec.csv").to_str().unwrap()).unwrap();
    assert_eq!(c.nodes.iter().map(|n| n.gpus).collect::<Vec<_>>(), [8, 2, 2, 0]);
    assert_eq!(
        (c.nodes[1].cpus, c.nodes[1].mem_mib, c.nodes[1].gpu_model.as_deref()),
        (Some(64), Some(512 * 1024), Some("P100"))
    );
    // Lucid: 2 + 1 nodes of 8 GPUs, named after their virtual cluster.
    let c = load_cluster(fixture("lucid/vc_config.csv").to_str().unwrap()).unwrap();
    assert_eq!(
        c.nodes.iter().map(|n| (n.name.as_str(), n.gpus)).collect::<Vec<_>>(),
        [("vcEwI-0", 8), ("vcEwI-1", 8), ("vcWoR-0", 8)]
    );
    // Helios: the day with the most GPUs (40) as 8-GPU nodes.
    let c = load_cluster(fixture("helios/cluster_gpu_number.csv").to_str().unwrap()).unwrap();
    assert_eq!((c.nodes.len(), c.total_gpus()), (5, 40));
}

fn err(text: &str, name: &str) -> String {
    load_reader(text.as_bytes(), name, &LoadOptions::default()).unwrap_err().to_string()
}

#[test]
fn bad_rows_name_file_line_field_and_what_was_expected() {
    let acme =
        "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time\n";
    assert_eq!(
        err(&format!("{acme}1,u,1,8,8,Other,COMPLETED,2023-03-01 00:18:22+25:00,,,10,0,80\n"), "seren.csv"),
        "seren.csv:2: field `submit_time`: expected a date and time `YYYY-MM-DD HH:MM:SS`, optionally with a UTC offset (`+08:00`), or seconds >= 0, found \"2023-03-01 00:18:22+25:00\""
    );
    assert_eq!(
        err(&format!("{acme}1,u,1,8,8,Other,COMPLETED,2023-03-01 00:18:22,soon,,10,0,80\n"), "seren.csv"),
        "seren.csv:2: field `start_time`: expected when the job really started: a date and time `YYYY-MM-DD HH:MM:SS` (a UTC offset allowed), or an empty cell, found \"soon\""
    );
    let spot = "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type\n";
    assert_eq!(
        err(&format!("{spot}7,1,A10,4,0.5,3,0,60,Spot\n"), "job_info_df.csv"),
        "job_info_df.csv:2: field `gpu_request`: expected a whole number of GPUs per worker >= 0, or a share of one GPU between 0 and 1 only with `worker_num` 1 (several workers holding a fraction of a GPU each have no such share), found \"0.5\""
    );
    assert_eq!(
        err(&format!("{spot}7,1,A10,4,1,0,0,60,Spot\n"), "job_info_df.csv"),
        "job_info_df.csv:2: field `worker_num`: expected a whole number of workers >= 1, found \"0\""
    );
    // PAI: a bad cell in a joined table names that table's file and line.
    let dir = std::env::temp_dir().join(format!("ordo-pai-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["pai_job_table.csv", "pai_task_table.csv", "pai_sensor_table.csv"] {
        std::fs::copy(fixture(&format!("pai/{f}")), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("pai_instance_table.csv"), "j1,worker,n0,w1a,i1,Terminated,110.0,100.0,m1\n").unwrap();
    let e = load_path(&dir.join("pai_job_table.csv"), &LoadOptions::default()).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}:1: field `end_time`: expected a time in seconds >= the instance's start_time, or an empty cell (still running), found \"100.0\"",
            dir.join("pai_instance_table.csv").display()
        )
    );
    std::fs::write(dir.join("pai_instance_table.csv"), "j1,worker,n0\n").unwrap();
    let e = load_path(&dir.join("pai_job_table.csv"), &LoadOptions::default()).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("{}:1: expected 9 fields (as in the header), found 3", dir.join("pai_instance_table.csv").display())
    );
    std::fs::remove_file(dir.join("pai_task_table.csv")).unwrap();
    let e = load_path(&dir.join("pai_job_table.csv"), &LoadOptions::default()).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: cannot read:", dir.join("pai_task_table.csv").display())), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // As a stream it cannot be joined.
    let e = load_reader(&b"j1,i1,u1,Terminated,1.0,2.0\n"[..], "x.csv", &LoadOptions::new(Format::Pai2020))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.csv: a PAI 2020 trace is read from the path of its pai_job_table.csv"), "{e}");
}
