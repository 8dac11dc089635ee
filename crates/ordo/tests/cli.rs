//! The `ordo` binary as a user runs it.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod common;

use std::process::Command;

fn ordo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().expect("ordo runs")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn compare_with_no_arguments_runs_the_built_in_default() {
    let out = ordo(&["compare"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("fifo") && s.contains("sjf+easy"), "{s}");
    assert!(s.contains("instead of fifo"), "headline missing:\n{s}");
}

#[test]
fn compare_json_has_the_documented_keys() {
    let out = ordo(&["compare", "--json", "--policies", "fifo,sjf+easy"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["results"][0];
    for k in [
        "policy",
        "jobs",
        "mean_jct_s",
        "p99_wait_s",
        "makespan_s",
        "utilization_window",
        "utilization_makespan",
        "idle_while_waiting_gpu_hours",
        "estimates",
    ] {
        assert!(r.get(k).is_some(), "key {k} missing in {r}");
    }
    assert_eq!(v["results"][1]["estimates"], "oracle");
    // sjf+easy read true run times: a bound beside the headline, not its answer.
    let h = v["headline"].as_str().unwrap();
    assert_eq!((v["best"].as_str(), v["bound"].as_str()), (Some("fifo"), Some("sjf+easy")), "{h}");
    assert!(h.contains("Bound, not deployable: sjf+easy reads every job's true run time (oracle)"), "{h}");
    for k in ["idle_causes", "offered_load", "jobs_without_estimate"] {
        assert!(r.get(k).is_some(), "key {k} missing in {r}");
    }
}

#[test]
fn same_input_gives_byte_identical_output() {
    let a = ordo(&["compare", "--json", "--workload", "online", "--seed", "7"]);
    let b = ordo(&["compare", "--json", "--workload", "online", "--seed", "7"]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let c = ordo(&["compare", "--json", "--workload", "online", "--seed", "8"]);
    assert_ne!(a.stdout, c.stdout, "another seed, another workload");
}

#[test]
fn malformed_trace_line_names_file_line_and_field() {
    let path = tmp("bad.csv");
    std::fs::write(&path, "job_id,submit_time,num_gpu,duration\n1,0,2,100\n2,5,two,100\n").unwrap();
    let out = ordo(&["compare", "--trace", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.csv:3") && err.contains("num_gpu") && err.contains("two"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_flags_are_errors_not_panics() {
    for args in [
        &["compare", "--cluster", "64y8"][..],
        &["compare", "--policies", "lifo"],
        &["compare", "--placement", "scattered"],
        &["compare", "--trace", "/nonexistent/trace.csv"],
        &["compare", "--from-day", "3"],
    ] {
        let out = ordo(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn simulate_writes_every_job() {
    let path = tmp("jobs.csv");
    let trace = tmp("t.csv");
    std::fs::write(&trace, "job_id,submit_time,num_gpu,duration,user\na,0,4,100,ann\nb,10,4,50,bob\nc,20,8,10,ann\n")
        .unwrap();
    let out = ordo(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--cluster",
        "1x8",
        "--policy",
        "fifo",
        "--jobs-out",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "job_id,user,group,num_gpu,gpu_milli,submit_time,start_time,end_time,wait_s,first_wait_s,jct_s,preemptions,placement"
    );
    // a: 0-100 on GPUs 0-3; b: 10-60 on GPUs 4-7; c (8 GPUs) waits for both: 100-110.
    assert_eq!(lines[1], "a,ann,default,4,,0,0,100,0,0,100,0,n0:0+1+2+3");
    assert_eq!(lines[2], "b,bob,default,4,,10,10,60,0,0,50,0,n0:4+5+6+7");
    assert_eq!(lines[3], "c,ann,default,8,,20,100,110,80,80,90,0,n0:0+1+2+3+4+5+6+7");
}

#[test]
fn jobs_csv_counts_preemptions_and_the_whole_wait() {
    // srtf on one GPU: a (100 s) runs from 0; b (10 s) arrives at 20 and preempts it; a resumes
    // at 30 and ends at 110. a waited 10 s in all (first start at 0), b none.
    let path = tmp("preempt_jobs.csv");
    let trace = tmp("preempt.csv");
    std::fs::write(&trace, "job_id,submit_time,num_gpu,duration\na,0,1,100\nb,20,1,10\n").unwrap();
    let (t, p) = (trace.to_str().unwrap(), path.to_str().unwrap());
    let out = ordo(&["simulate", "--trace", t, "--cluster", "1x1", "--policy", "srtf", "--jobs-out", p]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[1], "a,default,default,1,,0,0,110,10,0,110,1,n0:0");
    assert_eq!(lines[2], "b,default,default,1,,20,20,30,0,0,10,0,n0:0");
}

#[test]
fn checkpoint_rules_reach_the_simulator_and_bad_ones_are_named() {
    // As above, with `--checkpoint`: a checkpoints every 15 s of work, so at 20 s it keeps 15 s
    // and has 85 s left: it resumes at 30 s and ends at 115 s. Restarting from zero: at 130 s.
    let trace = tmp("ckpt.csv");
    std::fs::write(&trace, "job_id,submit_time,num_gpu,duration\na,0,1,100\nb,20,1,10\n").unwrap();
    let t = trace.to_str().unwrap();
    for (rule, end) in [("every:15s", "115"), ("none", "130"), ("continuous", "110")] {
        let path = tmp(&format!("ckpt_{}.csv", rule.replace(':', "_")));
        let p = path.to_str().unwrap();
        let args =
            ["simulate", "--trace", t, "--cluster", "1x1", "--policy", "srtf", "--checkpoint", rule, "--jobs-out", p];
        let out = ordo(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let csv = std::fs::read_to_string(&path).unwrap();
        let a: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!((a[0], a[7], a[11]), ("a", end, "1"), "{rule}");
    }
    for (bad, says) in [
        ("every:0", "`every:0`: the interval must be more than 0"),
        ("sometimes", "expected continuous, none, every:DURATION or signal:DURATION"),
        ("=none", "the queue name before `=` is empty"),
    ] {
        let out = ordo(&["compare", "--checkpoint", bad]);
        assert!(!out.status.success(), "{bad} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--checkpoint") && err.contains(says) && !err.contains("panicked"), "{bad}: {err}");
    }
}

#[test]
fn jobs_csv_shows_fractional_shares() {
    // One GPU: a (600) and b (400) share it from t=0; c (1 whole GPU) waits until both end.
    let path = tmp("frac_jobs.csv");
    let trace = tmp("frac.csv");
    std::fs::write(&trace, "job_id,submit_time,num_gpu,gpu_milli,duration\na,0,1,600,10\nb,0,1,400,20\nc,1,1,,5\n")
        .unwrap();
    let t = trace.to_str().unwrap();
    let p = path.to_str().unwrap();
    let out = ordo(&["simulate", "--trace", t, "--cluster", "1x1", "--policy", "fifo", "--jobs-out", p]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[1], "a,default,default,1,600,0,0,10,0,0,10,0,n0:0@600m");
    assert_eq!(lines[2], "b,default,default,1,400,0,0,20,0,0,20,0,n0:0@400m");
    assert_eq!(lines[3], "c,default,default,1,,1,20,25,19,19,24,0,n0:0");
}

#[test]
fn philly_window_compare_runs() {
    let Some(p) = common::trace("philly/philly_rfold.csv") else { return };
    let out = ordo(&[
        "compare",
        "--trace",
        p.to_str().unwrap(),
        "--from-day",
        "42",
        "--to-day",
        "49",
        "--json",
        "--policies",
        "fifo,sjf,fifo+easy",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["input"]["jobs"], 7729);
    assert_eq!(v["input"]["dropped_zero_duration"], 10);
    assert_eq!(v["results"][0]["jobs"], 7729);
}
