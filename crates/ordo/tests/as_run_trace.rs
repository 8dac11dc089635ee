//! The as-run row of an imported Slurm history: `ordo slurm import` keeps each job's `Start`
//! (the trace's `start_time`), and `ordo compare` shows what the cluster really ran beside the
//! policies, with every figure worked out by hand below. When the row would not be what ran
//! (jobs without a start, a cluster the jobs did not fit, moved submit times), it is left out
//! with a note.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod run;

use run::{ok, ordo};
use serde_json::Value;
use std::path::PathBuf;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-asrun-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// On one node of 4 GPUs: A (4 GPUs) submitted at 0 s ran 0-10 s; B (2 GPUs) submitted at 2 s
/// ran 10-14 s; C (2 GPUs) submitted at 4 s ran 12-14 s (Slurm started it 2 s after it could
/// have). D was cancelled while pending: it never ran.
const SACCT: &str = "\
JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority
11|ann|ml|gpu|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T10:00:10|00:00:10|00:01:00|cpu=4,gres/gpu=4,node=1|cpu=4,gres/gpu=4|COMPLETED|1
11.batch|||||2024-03-01T10:00:00|2024-03-01T10:00:10|00:00:10||cpu=4,gres/gpu=4,node=1||COMPLETED|
12|bob|ml|gpu|2024-03-01T10:00:02|2024-03-01T10:00:10|2024-03-01T10:00:14|00:00:04|00:01:00|cpu=2,gres/gpu=2,node=1|cpu=2,gres/gpu=2|COMPLETED|1
13|ann|ml|gpu|2024-03-01T10:00:04|2024-03-01T10:00:12|2024-03-01T10:00:14|00:00:02|00:01:00|cpu=2,gres/gpu=2,node=1|cpu=2,gres/gpu=2|COMPLETED|1
14|bob|ml|gpu|2024-03-01T10:00:05|None|2024-03-01T10:00:06|00:00:00|00:01:00||cpu=1,gres/gpu=1|CANCELLED by 0|1
";

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

fn compare_json(args: &[&str]) -> (Value, String) {
    let mut a = vec!["compare"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = ordo(&a);
    let v = serde_json::from_str(&ok(&out)).unwrap();
    (v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn policies(v: &Value) -> Vec<String> {
    v["results"].as_array().unwrap().iter().map(|r| r["policy"].as_str().unwrap().to_string()).collect()
}

#[test]
fn an_imported_slurm_history_has_an_as_run_row_worked_out_by_hand() {
    let dir = tempdir("golden");
    let sacct = dir.join("sacct.txt");
    std::fs::write(&sacct, SACCT).unwrap();
    let trace = dir.join("t.csv");
    let t = trace.to_str().unwrap();
    ok(&ordo(&["slurm", "import", "--sacct-file", sacct.to_str().unwrap(), "--cluster", "1x4", "--out", t]));
    // The trace keeps each job's start, rebased like the submit times.
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.lines().next().unwrap().ends_with(",state,start_time"), "{text}");
    assert!(text.contains("\n12,2.000,2,4.000,bob,ml,60.000,1,2,,,gpu,,,10.000\n"), "{text}");

    let (v, _) = compare_json(&["--trace", t, "--cluster", "1x4", "--policies", "fifo,sjf"]);
    assert_eq!(policies(&v), ["as-run", "fifo", "sjf"]);
    assert_eq!(v["baseline"], "as-run");
    let r = &v["results"][0];
    assert_eq!(
        (r["jobs"].as_u64(), r["cluster"].as_str(), r["placement"].as_str()),
        (Some(3), Some("1x4"), Some("pooled"))
    );
    // JCT: 10, 12, 10 s; waits: 0, 8, 8 s; makespan 14 s.
    assert!(close(&r["mean_jct_s"], 32.0 / 3.0), "{r}");
    assert!(close(&r["mean_wait_s"], 16.0 / 3.0), "{r}");
    assert!(close(&r["max_wait_s"], 8.0), "{r}");
    assert!(close(&r["makespan_s"], 14.0), "{r}");
    // Work 40 + 8 + 4 = 52 GPU-s on 4 GPUs x 14 s; in the arrival window (0-4 s) A holds all 4.
    assert!(close(&r["utilization_makespan"], 52.0 / 56.0), "{r}");
    assert!(close(&r["utilization_window"], 1.0), "{r}");
    // 10-12 s: B holds 2 GPUs, 2 idle while C (2 GPUs) waits and fits: head-of-line, 4 GPU-s.
    assert!(close(&r["idle_causes"]["head_of_line_gpu_hours"], 4.0 / 3600.0), "{r}");
    assert!(close(&r["idle_causes"]["empty_queue_gpu_hours"], 0.0), "{r}");
    assert!(close(&r["idle_causes"]["fragmentation_gpu_hours"], 0.0), "{r}");
    // fifo starts C at 10 s beside B: waits 0, 8, 6 s; JCT 10, 12, 8 s.
    let f = &v["results"][1];
    assert!(close(&f["mean_jct_s"], 10.0) && close(&f["mean_wait_s"], 14.0 / 3.0), "{f}");
    assert!(v["as_run"]["lines"][0].as_str().unwrap().starts_with("the schedule the cluster really ran"), "{v}");
    assert_eq!(v["as_run"]["policy"], Value::Null);

    // The table and the report say it the same way.
    let table = ok(&ordo(&["compare", "--trace", t, "--cluster", "1x4", "--policies", "fifo"]));
    assert!(table.lines().any(|l| l.starts_with("as-run ")), "{table}");
    assert!(table.contains("as-run:  the schedule the cluster really ran"), "{table}");
    assert!(table.contains("fifo instead of the schedule as it ran (as-run)"), "{table}");
    let md = dir.join("r.md");
    ok(&ordo(&[
        "report",
        "--trace",
        t,
        "--cluster",
        "1x4",
        "--policies",
        "fifo",
        "--no-equivalent",
        "--out",
        md.to_str().unwrap(),
        "--quiet",
    ]));
    let page = std::fs::read_to_string(&md).unwrap();
    assert!(page.contains("**As run:** the schedule the cluster really ran"), "{page}");

    // A selection keeps the as-run row of the jobs it keeps: A and B only.
    let (v, _) = compare_json(&["--trace", t, "--cluster", "1x4", "--policies", "fifo", "--max-jobs", "2"]);
    let r = &v["results"][0];
    assert_eq!((r["policy"].as_str(), r["jobs"].as_u64()), (Some("as-run"), Some(2)));
    assert!(close(&r["mean_jct_s"], 11.0), "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_as_run_row_where_it_would_not_be_what_ran() {
    let dir = tempdir("left-out");
    let trace = dir.join("t.csv");
    let t = trace.to_str().unwrap();
    let write =
        |rows: &str| std::fs::write(&trace, format!("job_id,submit_time,num_gpu,duration,start_time\n{rows}")).unwrap();
    // One job without a start: what ran is not known for every job.
    write("a,0,4,10,0\nb,2,2,4,10\nc,4,2,2,\n");
    let (v, err) = compare_json(&["--trace", t, "--cluster", "1x4", "--policies", "fifo"]);
    assert_eq!(policies(&v), ["fifo"]);
    assert!(err.contains("note: no as-run row: 1 of 3 jobs carries no start time"), "{err}");
    // A cluster the jobs could not have run on: a job larger than it, or more GPUs at once.
    write("a,0,4,10,0\nb,2,2,4,10\nc,4,2,2,12\n");
    let (v, err) = compare_json(&["--trace", t, "--cluster", "1x3", "--policies", "fifo"]);
    assert_eq!(policies(&v), ["fifo"]);
    assert!(err.contains("no as-run row: 1 of 3 jobs never fit this cluster under pooled placement"), "{err}");
    write("a,0,4,10,0\nb,2,2,4,9\nc,4,2,2,12\n");
    let (v, err) = compare_json(&["--trace", t, "--cluster", "1x4", "--policies", "fifo"]);
    assert_eq!(policies(&v), ["fifo"]);
    assert!(
        err.contains("no as-run row: the jobs as run held up to 6 GPUs at once, more than this cluster's 4"),
        "{err}"
    );
    // ... and on the cluster they ran on, the row is there.
    let (v, _) = compare_json(&["--trace", t, "--cluster", "1x6", "--policies", "fifo"]);
    assert_eq!(policies(&v), ["as-run", "fifo"]);
    // Moved submit times: the start times no longer go with them.
    let (v, err) = compare_json(&["--trace", t, "--cluster", "1x6", "--policies", "fifo", "--scale-load", "2"]);
    assert_eq!(policies(&v), ["fifo"]);
    assert!(err.contains("start time dropped: --scale-load moved the submit times"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// PAI 2020's tables (the hand-made fixture of `ordo-trace`'s tests): the jobs' first instance
/// starts give the as-run row, and the sensor table's measured GPU use shows beside it, worked
/// out by hand. Arrival window 0-60 s on the 12 GPUs of `pai_machine_spec.csv`: j1 holds 1 GPU
/// 10-60 s (50 GPU-s, measured busy 74.107%), j2 2 GPUs 50-60 s (20 GPU-s, busy 75%), j3 starts
/// at 65 s. Allocated 70 / 720 = 9.7%; busy (50 x 0.74107 + 20 x 0.75) / 720 = 7.2%, which is
/// 74.4% of what jobs held; every held GPU-second was measured.
#[test]
fn pai_measured_gpu_activity_beside_the_as_run_row() {
    let trace =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ordo-trace/tests/data/field/pai/pai_job_table.csv");
    let out = ordo(&["compare", "--trace", trace.to_str().unwrap(), "--policies", "fifo"]);
    let text = ok(&out);
    assert!(text.contains("pai_machine_spec.csv beside it"), "{text}");
    assert!(
        text.contains("as-run:  GPU activity as the trace measured it: allocated 9.7%, actually busy 7.2% (utilisation over the arrival window; the GPUs did work during 74.4% of the GPU-time jobs held, measured for 100.0% of it)."),
        "{text}"
    );
    let (v, _) = compare_json(&["--trace", trace.to_str().unwrap(), "--policies", "fifo"]);
    let busy = &v["as_run"]["busy"];
    assert!(close(&busy["allocated"], 70.0 / 720.0), "{busy}");
    assert!(close(&busy["busy_of_allocated"], (50.0 * 207.5 / 280.0 + 20.0 * 0.75) / 70.0), "{busy}");
    assert!(close(&busy["measured"], 1.0), "{busy}");
}

/// `compare --reclaim-after` on the same tables, worked out by hand: j1 (1 GPU, 290 s, measured
/// busy 74.1%) and j2 (2 GPUs, 150 s, busy 75%) are under an 80% threshold and run longer than
/// 20 s, so the rule cuts both to 20 s: (290 - 20) x 1 + (150 - 20) x 2 = 530 GPU-s given back
/// of 600 (j3, 2 GPUs for 5 s, has no sensor rows: not measured). Nothing waits on 12 GPUs, so
/// fifo's mean JCT goes from (290 + 150 + 5) / 3 to (20 + 20 + 5) / 3 = 15 s. A trace without
/// measured activity is refused.
#[test]
fn reclaim_after_gives_back_idle_gpu_hours_worked_out_by_hand() {
    let trace =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ordo-trace/tests/data/field/pai/pai_job_table.csv");
    let t = trace.to_str().unwrap();
    let (v, _) =
        compare_json(&["--trace", t, "--policies", "fifo", "--reclaim-after", "20s", "--idle-threshold", "80"]);
    let r = &v["reclaim"];
    assert_eq!(
        (r["jobs_measured"].as_u64(), r["jobs_idle"].as_u64(), r["jobs_reclaimed"].as_u64()),
        (Some(2), Some(2), Some(2)),
        "{r}"
    );
    assert!(close(&r["gpu_hours_returned"], 530.0 / 3600.0) && close(&r["gpu_hours_total"], 600.0 / 3600.0), "{r}");
    assert!(close(&r["mean_jct_before_s"], 445.0 / 3.0) && close(&r["mean_jct_after_s"], 15.0), "{r}");
    assert!(v.get("as_run").is_none(), "no as-run row under the rule: {v}");
    // Under 70% nothing is idle.
    let (v, _) =
        compare_json(&["--trace", t, "--policies", "fifo", "--reclaim-after", "20s", "--idle-threshold", "70"]);
    assert_eq!(v["reclaim"]["jobs_reclaimed"], 0);
    let text =
        ok(&ordo(&["compare", "--trace", t, "--policies", "fifo", "--reclaim-after", "20s", "--idle-threshold", "80"]));
    assert!(text.contains("giving back 0.147 GPU-hours (88.3% of the jobs' 0.167)"), "{text}");
    let out = ordo(&["compare", "--reclaim-after", "1h"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("this input has no measured GPU activity"), "{err}");
}
