//! The numbers a decision-maker reads, as `ordo compare`, `report` and `tune` print them: the
//! headline names its measure and never offers an oracle as the answer, the offered load is
//! shown and warned about, a trace runs on its own cluster, estimates are read where jobs have
//! them, idle capacity is split by cause, and messages read right.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod run;

use run::{ok, ordo};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(&ordo(args))).unwrap()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-numbers-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(d: &std::path::Path, name: &str, text: &str) -> String {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn the_headline_answer_can_run_and_an_oracle_is_only_a_bound() {
    // The built-in backlog has no estimates: srtf reads true run times.
    let v = json(&["compare", "--json", "--policies", "fifo,sgf,srtf"]);
    assert_eq!(v["results"][2]["estimates"], "oracle");
    assert_eq!((v["best"].as_str(), v["bound"].as_str()), (Some("sgf"), Some("srtf")));
    let h = v["headline"].as_str().unwrap();
    assert!(h.starts_with("Same cluster, same jobs: sgf instead of fifo: utilisation over the makespan "), "{h}");
    assert!(h.contains("Bound, not deployable: srtf reads every job's true run time (oracle)"), "{h}");
    // The report says the same words.
    let d = dir("headline");
    let out = d.join("r.json");
    ok(&ordo(&["report", "--quiet", "--policies", "fifo,sgf,srtf", "--no-equivalent", "--out", out.to_str().unwrap()]));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((r["headline"].as_str(), r["best"].as_str()), (Some(h), Some("sgf")));
}

#[test]
fn tune_never_recommends_an_oracle() {
    // The four jobs of tests/data/tune_srtf.csv without estimates: srtf would be best, but it
    // reads true run times; the recommendation is the best policy that needs none.
    let d = dir("tune");
    let t = write(
        &d,
        "t.csv",
        "job_id,submit_time,num_gpu,duration\nlong,0,1,1000\nmedium,10,1,300\nshort,10,1,100\ntiny,10,1,20\n",
    );
    let v = json(&["tune", "--quiet", "--json", "--trace", &t, "--cluster", "1x1", "--budget", "10m"]);
    assert_eq!((v["bound"]["policy"].as_str(), v["bound"]["estimates"].as_str()), (Some("srtf"), Some("oracle")));
    let rec = &v["recommended"];
    assert_ne!(rec["estimates"], "oracle", "{rec}");
    assert!(rec["mean_jct_s"].as_f64().unwrap() > 495.0, "{rec}");
    assert_ne!(v["non_preemptive"]["estimates"], "oracle");
    let s = ok(&ordo(&["tune", "--quiet", "--trace", &t, "--cluster", "1x1", "--budget", "10m"]));
    assert!(s.contains("bound, not deployable: srtf:"), "{s}");
    assert!(!s.contains("recommended (mean-jct): srtf"), "{s}");
}

#[test]
fn the_measure_is_named_and_a_figure_above_the_bound_is_explained() {
    // Arrivals over [0, 10] s keep both GPUs busy, so utilisation over the arrival window is
    // 100%; b runs until 1010 s, so utilisation over the makespan is at most 1205 / 2020.
    let d = dir("measure");
    let t = write(&d, "t.csv", "job_id,submit_time,num_gpu,duration\na,0,2,100\nb,10,1,1000\nc,10,1,5\n");
    let s = ok(&ordo(&["compare", "--trace", &t, "--cluster", "1x2", "--policies", "fifo,sgf"]));
    assert!(s.contains("utilisation over the makespan (util(mkspan)) <= 59.7%"), "{s}");
    assert!(
        s.contains("utilisation over the arrival window (util) is a different measure, not under this bound"),
        "{s}"
    );
    let head = s.lines().find(|l| l.contains("instead of") || l.contains("already the best")).unwrap();
    assert!(head.contains("utilisation over the arrival window"), "{head}");
}

#[test]
fn offered_load_is_shown_and_warned_about_in_compare_report_and_tune() {
    let d = dir("load");
    // 200 GPU-s of work arriving over 10 s on one GPU: 2000%.
    let high = write(&d, "high.csv", "job_id,submit_time,num_gpu,duration\na,0,1,100\nb,10,1,100\n");
    let s = ok(&ordo(&["compare", "--trace", &high, "--cluster", "1x1", "--policies", "fifo,sgf"]));
    assert!(s.contains("load:    offered load 2000.0% of the cluster's capacity"), "{s}");
    assert!(s.contains("warning: the offered load is 2000.0%, above 100%"), "{s}");
    let v = json(&["compare", "--json", "--trace", &high, "--cluster", "1x1", "--policies", "fifo"]);
    assert_eq!(v["results"][0]["offered_load"], 20.0);
    assert!(v["load"]["warning"].as_str().unwrap().contains("above 100%"));
    // The same work over 1,000 s on 8 GPUs: 2.5%, below 30%.
    let low = write(&d, "low.csv", "job_id,submit_time,num_gpu,duration\na,0,1,100\nb,1000,1,100\n");
    let s = ok(&ordo(&["compare", "--trace", &low, "--cluster", "1x8", "--policies", "fifo"]));
    assert!(s.contains("offered load 2.5%") && s.contains("below 30%"), "{s}");
    // The report says the same, in its JSON and on its page.
    let report = |name: &str| {
        let out = d.join(name);
        ok(&ordo(&[
            "report",
            "--quiet",
            "--trace",
            &low,
            "--cluster",
            "1x8",
            "--policies",
            "fifo",
            "--out",
            out.to_str().unwrap(),
        ]));
        std::fs::read_to_string(&out).unwrap()
    };
    let r: Value = serde_json::from_str(&report("r.json")).unwrap();
    assert!((r["load"]["offered_load"].as_f64().unwrap() - 0.025).abs() < 1e-12);
    let page = report("r.html");
    assert!(page.contains("offered load 2.5%") && page.contains("below 30%"), "report lacks the load");
    let s = ok(&ordo(&["tune", "--quiet", "--trace", &low, "--cluster", "1x8", "--max-configs", "3"]));
    assert!(s.contains("load:        offered load 2.5%") && s.contains("below 30%"), "{s}");
}

#[test]
fn a_trace_runs_on_its_own_cluster_unless_told_otherwise() {
    let d = dir("own");
    // An SWF log of a 16-processor machine: its header says so.
    let swf = "; MaxNodes: 16\n; MaxProcs: 16\n1 0 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n2 10 0 50 16 -1 -1 16 60 -1 1 2 1 -1 1 -1 -1 -1\n";
    let p = write(&d, "log.swf", swf);
    let v = json(&["compare", "--json", "--trace", &p, "--policies", "fifo"]);
    assert_eq!(v["results"][0]["gpus"], 16);
    assert!(v["input"]["cluster_from"].as_str().unwrap().contains("16 processors from its header"), "{v}");
    let v = json(&["compare", "--json", "--trace", &p, "--policies", "fifo", "--cluster", "2x8"]);
    assert_eq!(
        (v["results"][0]["gpus"].as_u64(), v["input"]["cluster_from"].as_str()),
        (Some(16), Some("given by --cluster"))
    );
    // A cluster file beside a trace: NAME.cluster.toml.
    let t = write(&d, "jobs.csv", "job_id,submit_time,num_gpu,duration\na,0,4,100\nb,5,4,100\n");
    write(&d, "jobs.cluster.toml", "[[groups]]\ncount = 3\ngpus = 4\n");
    let v = json(&["compare", "--json", "--trace", &t, "--policies", "fifo"]);
    assert_eq!(v["results"][0]["cluster"], "3x4");
    assert!(v["input"]["cluster_from"].as_str().unwrap().contains("jobs.cluster.toml"), "{v}");
    // The cluster file docs/TRACES.md's Alibaba example uses is in the repository.
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/clusters/alibaba4x8.toml");
    let v = json(&["compare", "--json", "--trace", &t, "--policies", "fifo", "--cluster", example.to_str().unwrap()]);
    assert_eq!(v["results"][0]["cluster"], "4x8");
    // A node list of many node groups is summarised on the cluster line, not listed group by
    // group (1,366 characters for the Alibaba node list).
    let mut nodes = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    for i in 0..60 {
        nodes.push_str(&format!("n{i},96000,786432,{},A10\n", [8, 4, 2][i % 3]));
    }
    let list = write(&d, "nodes.csv", &nodes);
    let s = ok(&ordo(&["compare", "--trace", &t, "--policies", "fifo", "--cluster", &list]));
    let line = s.lines().find(|l| l.starts_with("cluster:")).unwrap();
    assert!(line.starts_with("cluster: 60 nodes: 20x8,20x4,20x2 (280 GPUs)") && line.len() < 120, "{line}");
    // A trace that declares nothing runs on 64x8 and says so.
    let bare = dir("bare");
    let t = write(&bare, "jobs.csv", "job_id,submit_time,num_gpu,duration\na,0,4,100\nb,5,4,100\n");
    let s = ok(&ordo(&["compare", "--trace", &t, "--policies", "fifo"]));
    assert!(
        s.contains("cluster: 64x8 (512 GPUs), pooled placement; ordo's default: the trace declares no cluster"),
        "{s}"
    );
}

#[test]
fn estimates_are_read_where_jobs_have_them() {
    // Three jobs on one processor; x runs first. a has no requested time (field 9 = -1): it is
    // given the largest, 100 s, so sjf runs b (60 s) before it; a job's true run time is never
    // read. With truth for a (5 s), sjf would run a first.
    let d = dir("estimates");
    let swf = "; MaxProcs: 1\n1 0 0 100 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1\n2 1 0 5 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n3 2 0 50 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1\n";
    let p = write(&d, "partial.swf", swf);
    let v = json(&["compare", "--json", "--trace", &p, "--policies", "fifo,sjf"]);
    let sjf = &v["results"][1];
    assert_eq!((sjf["estimates"].as_str(), sjf["jobs_without_estimate"].as_u64()), (Some("user"), Some(1)));
    // Mean JCT: x 100, b 100 + 50 - 2 = 148, a 155 - 1 = 154.
    assert!((sjf["mean_jct_s"].as_f64().unwrap() - (100.0 + 148.0 + 154.0) / 3.0).abs() < 1e-9, "{sjf}");
    assert!(v["bound"].is_null(), "no oracle: {v}");
    let s = ok(&ordo(&["compare", "--trace", &p, "--policies", "fifo,sjf"]));
    assert!(
        s.contains("estimates: 1 job of 3 carry no run-time estimate; policies that read estimates give them the largest in the trace, 1.7m"),
        "{s}"
    );
    assert!(!s.contains("oracle"), "{s}");
}

#[test]
fn idle_capacity_is_split_by_cause_and_the_mixed_workload_moves_utilisation_by_20_points() {
    let v = json(&["compare", "--json", "--workload", "mixed"]);
    assert_eq!(v["results"][0]["cluster"], "32x8");
    assert_eq!(v["results"][0]["placement"], "consolidated");
    let why = &v["why"];
    let gain = why["gain_pp"].as_f64().unwrap();
    assert!(gain >= 20.0, "the mixed workload's headline gain is {gain} pp");
    // The causes add up to the gain (no restart overhead here).
    let sum: f64 = why["causes"].as_array().unwrap().iter().map(|c| c["gain_pp"].as_f64().unwrap()).sum();
    assert!((sum - gain).abs() < 1e-6, "causes {sum} vs gain {gain}");
    let fifo = &v["results"][0]["idle_causes"];
    assert!(fifo["head_of_line_gpu_hours"].as_f64().unwrap() > 1000.0, "{fifo}");
    let s = ok(&ordo(&["compare", "--workload", "mixed", "--policies", "fifo,sgf"]));
    assert!(
        s.contains("why:     Of fifo's ") && s.contains("were head-of-line blocking (a waiting job fit the idle GPUs)"),
        "{s}"
    );
    // The default backlog shows a much smaller effect.
    let v = json(&["compare", "--json"]);
    assert!(v["why"]["gain_pp"].as_f64().unwrap() < 10.0);
}

#[test]
fn messages_read_right() {
    // A bad cluster spec is said once.
    let e = String::from_utf8(ordo(&["compare", "--cluster", "64y8"]).stderr).unwrap();
    assert_eq!(e.matches("64y8").count(), 1, "{e}");
    assert!(e.starts_with("error: --cluster: cluster spec term `64y8`"), "{e}");
    // Every error starts with `error:` (clap's and ordo's alike).
    for args in [&["compare", "--policies", "lifo"][..], &["compare", "--trace", "/nonexistent.csv"], &["report"]] {
        let e = String::from_utf8(ordo(args).stderr).unwrap();
        assert!(e.starts_with("error: "), "{args:?}: {e}");
    }
    // One job, not "1 jobs".
    let d = dir("messages");
    let t = write(&d, "big.csv", "job_id,submit_time,num_gpu,duration\na,0,4,100\nb,5,16,100\n");
    let s = ok(&ordo(&["compare", "--trace", &t, "--cluster", "1x8", "--policies", "fifo"]));
    assert!(s.contains("warning: 1 job can never run on this cluster"), "{s}");
    // The Slurm driver's refusal names every order it accepts.
    let e = String::from_utf8(ordo(&["slurm", "drive", "--once", "--policy", "las"]).stderr).unwrap();
    assert!(e.contains("priority") && e.contains("fair") && e.contains("+maxwait"), "{e}");
    // No Slurm client: Slurm did not answer, exit status 3 (docs/SLURM.md).
    let empty = dir("nopath");
    let out = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["slurm", "drive", "--once", "--policy", "fifo", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    // That start recorded its policy (fifo) and who started it. Another policy on the same log
    // is a change of order: refused without a reason, before Slurm is asked anything ...
    let log = d.join("audit.jsonl");
    let recs = ordo_slurm::audit::read_audit_log(&log).unwrap();
    assert_eq!((recs.len(), recs[0].action.as_str(), recs[0].policy.as_str()), (1, "policy", "fifo"), "{recs:?}");
    let drive = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ordo"))
            .args(["slurm", "drive", "--once", "--policy", "sjf", "--audit-log"])
            .arg(&log)
            .args(extra)
            .env("PATH", &empty)
            .output()
            .unwrap()
    };
    let out = drive(&[]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("last ordered by fifo") && e.contains("--reason"), "{e}");
    assert_eq!(ordo_slurm::audit::read_audit_log(&log).unwrap().len(), 1, "a refused change writes nothing");
    // ... and recorded with it: who, from which policy, why.
    let out = drive(&["--reason", "short jobs waited behind long ones"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let recs = ordo_slurm::audit::read_audit_log(&log).unwrap();
    let r = recs.last().unwrap();
    assert_eq!(
        (r.action.as_str(), r.policy.as_str(), r.from_policy.as_deref(), r.reason.as_str()),
        ("policy", "sjf", Some("fifo"), "short jobs waited behind long ones")
    );
    assert!(r.actor.as_deref().is_some_and(|a| !a.is_empty()), "{r:?}");
    // The same policy again is no change: no reason needed, nothing recorded.
    assert_eq!(drive(&[]).status.code(), Some(3));
    assert_eq!(ordo_slurm::audit::read_audit_log(&log).unwrap().len(), 2);
    // `ordo policy` alone shows the policy (it asks the server), it is not a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["policy"])
        .env("ORDO_TOKEN", "t")
        .env("ORDO_SERVER", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!e.contains("Usage") && e.contains("/v1/policy"), "{e}");
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    let d = dir("pipe");
    let mut csv = String::from("job_id,submit_time,num_gpu,duration\n");
    for i in 0..50_000 {
        csv.push_str(&format!("j{i},{i},1,100\n"));
    }
    let t = write(&d, "many.csv", &csv);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["trace", "convert", &t, "--to", "generic", "--out", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    use std::io::Read;
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(child.stdout.take()); // `| head` exits
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
