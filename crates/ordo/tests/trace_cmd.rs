//! `ordo trace stats` agrees with the job counts in `shared/traces/README.md`; `ordo trace
//! convert` to generic and back keeps every job; selection flags and errors on the CLI.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ordo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().unwrap()
}

fn stats_json(path: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["trace", "stats", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = ordo(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The first number (commas allowed) in the `jobs` column of the README row naming `file`.
fn readme_count(readme: &str, file: &str) -> u64 {
    let row = readme
        .lines()
        .find(|l| l.starts_with(&format!("| `{file}`")))
        .unwrap_or_else(|| panic!("{file} not in README"));
    let jobs_cell = row.split('|').nth(3).unwrap();
    let digits: String =
        jobs_cell.trim().chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[test]
fn stats_agree_with_the_readme_counts() {
    let Some(readme) = common::trace("README.md") else { return };
    let readme = std::fs::read_to_string(readme).unwrap();
    for file in [
        "philly/philly_rfold.csv",
        "philly/philly_vc.csv",
        "alibaba/openb_pod_list_default.csv",
        "swf/KTH-SP2-1996-2.1-cln.swf.gz",
        "swf/lublin_256.swf",
        "tiresias/60_job.csv",
    ] {
        let Some(path) = common::trace(file) else { return };
        let want = readme_count(&readme, file);
        let s = stats_json(&path, &[]);
        assert_eq!(s["rows"].as_u64(), Some(want), "{file}");
        let dropped: u64 = s["dropped"].as_array().unwrap().iter().map(|d| d[1].as_u64().unwrap()).sum();
        assert_eq!(s["jobs"].as_u64().unwrap() + dropped, want, "{file}");
    }
    // The node list: 1,213 nodes, 6,212 GPUs.
    let (Some(pods), Some(nodes)) =
        (common::trace("alibaba/openb_pod_list_default.csv"), common::trace("alibaba/openb_node_list_gpu_node.csv"))
    else {
        return;
    };
    assert_eq!(readme_count(&readme, "alibaba/openb_node_list_gpu_node.csv"), 1_213);
    let s = stats_json(&pods, &["--cluster", nodes.to_str().unwrap()]);
    assert_eq!(s["cluster"][1].as_u64(), Some(6_212));
    assert!(s["cluster"][0].as_str().unwrap().starts_with("1213 nodes: "), "{}", s["cluster"]);
    // SWF: the cluster from the header.
    let Some(kth) = common::trace("swf/KTH-SP2-1996-2.1-cln.swf.gz") else { return };
    let s = stats_json(&kth, &["--cluster", "trace"]);
    assert_eq!((s["max_procs"].as_u64(), s["cluster"][1].as_u64()), (Some(100), Some(100)));
    let load = s["load"].as_f64().unwrap();
    assert!(load > 0.1 && load < 1.5, "{load}");
}

#[test]
fn stats_text_and_selection() {
    let Some(path) = common::trace("philly/philly_rfold.csv") else { return };
    let p = path.to_str().unwrap();
    let out = ordo(&["trace", "stats", p, "--from", "42", "--to", "49", "--cluster", "64x8"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("111549 read, 7,729 jobs kept"), "{text}");
    assert!(text.contains("dropped 10: run time 0"), "{text}");
    assert!(text.contains("dropped 103810: submitted outside the window"), "{text}");
    assert!(text.contains("load:") && text.contains("of cluster 64x8 (512 GPUs)"), "{text}");
    let s = stats_json(&path, &["--max-jobs", "1000", "--scale-load", "2"]);
    assert_eq!(s["jobs"].as_u64(), Some(1000));
}

#[test]
fn convert_to_generic_and_back_keeps_every_job() {
    let Some(path) = common::trace("alibaba/openb_pod_list_default.csv") else { return };
    let dir = std::env::temp_dir().join(format!("ordo-trace-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first: PathBuf = dir.join("pods.csv");
    let second: PathBuf = dir.join("pods2.csv");
    let jsonl: PathBuf = dir.join("pods.jsonl");
    let run = |from: &Path, to: &str, out: &Path| {
        let o = ordo(&["trace", "convert", from.to_str().unwrap(), "--to", to, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(&path, "generic", &first);
    run(&first, "jsonl", &jsonl);
    run(&jsonl, "generic", &second);
    let a = std::fs::read_to_string(&first).unwrap();
    let b = std::fs::read_to_string(&second).unwrap();
    assert_eq!(a.lines().count(), 7_255 + 1);
    assert!(a == b, "generic -> jsonl -> generic changed the file");
    assert!(
        a.lines().any(|l| l.starts_with("openb-pod-0001,") && l.ends_with(",6,12288,460,LS,,")),
        "fields kept (after and state empty)"
    );
}

#[test]
fn bad_input_exits_non_zero_with_the_error() {
    let dir = std::env::temp_dir().join(format!("ordo-trace-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.csv");
    std::fs::write(&p, "job_id,submit_time,num_gpu,duration\na,0,1,10\nb,5,two,10\nc,9,1,10\n").unwrap();
    let o = ordo(&["trace", "stats", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:3: field `num_gpu`: expected a whole number of GPUs >= 0, found \"two\"",
            p.display()
        )),
        "{err}"
    );
    let o = ordo(&["trace", "stats", p.to_str().unwrap(), "--skip-bad", "--json"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("skipped 1 bad row (--skip-bad); the first reason:"), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["jobs"].as_u64(), Some(2));
    // The same flags on a simulation command.
    let o = ordo(&["simulate", "--trace", p.to_str().unwrap(), "--skip-bad", "--policy", "fifo"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ordo(&["simulate", "--trace", p.to_str().unwrap(), "--from", "yesterday"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--from `yesterday`: expected days"));
}
