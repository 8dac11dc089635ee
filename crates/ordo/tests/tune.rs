//! `ordo tune` end to end: it finds the known best policy of a hand-built trace, its config
//! snippets are accepted unchanged by the server's config parser and the Slurm driver's check,
//! and the same seed gives the same search.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::PolicySpec;
use std::path::PathBuf;
use std::process::Command;

fn ordo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().expect("ordo runs")
}

fn data(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name).display().to_string()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-tune-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = ordo(args);
    assert!(out.status.success(), "ordo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

// tests/data/tune_srtf.csv, on one GPU (`--cluster 1x1`), one user, each job's estimate its
// true run time (so policies reading estimates are not oracles and may be recommended):
//   long   submitted at 0,  runs 1000 s
//   medium submitted at 10, runs 300 s
//   short  submitted at 10, runs 100 s
//   tiny   submitted at 10, runs 20 s
// On one machine with preemption, shortest remaining processing time first minimises the total
// completion time, and with distinct lengths any schedule that runs a longer job while a
// shorter one waits is strictly worse (exchange argument). srtf (exact estimates) does exactly
// that: at t=10 it preempts `long` (990 s left) and runs tiny, short, medium, then long:
// ends 30, 130, 430, 1420, JCTs 20 + 120 + 420 + 1420 = 1980, mean 495 s. Every other order
// differs: fifo/las/gittins (before any job ends) keep `long` running, rr:quantum and the
// fine LAS ladders interleave the short jobs. `srtf+maxwait=D` ties (no job waits 6 h) and
// loses the tie to the simpler name. The best non-preemptive order cannot touch `long` before
// t=1000 and then runs the rest shortest first: sjf, JCTs 1000 + 1010 + 1110 + 1410, mean
// 1132.5 s (sjf+easy, sjf+conservative tie and lose to the simpler name; sgf, fair, priority,
// rr, qssf run them by submit order, 1272.5 s).
#[test]
fn tune_finds_the_known_best_policy_and_its_deployable_fallback() {
    let trace = data("tune_srtf.csv");
    let v = json(&["tune", "--quiet", "--json", "--trace", &trace, "--cluster", "1x1", "--budget", "10m"]);
    assert_eq!(v["stopped"], "exhausted", "the whole space fits the budget on 4 jobs");
    assert_eq!(v["evaluated"], v["all"].as_array().unwrap().len());
    assert_eq!(v["stopped_early"], v["dropped"].as_array().unwrap().len());
    let tried = v["evaluated"].as_u64().unwrap() + v["stopped_early"].as_u64().unwrap();
    assert!(tried > 1000, "{tried}");
    // Without racing every run goes to the end (on 4 jobs racing rarely gets to check: runs
    // are checked every 32 passes), and the choice is the same.
    let all =
        json(&["tune", "--quiet", "--json", "--trace", &trace, "--cluster", "1x1", "--budget", "10m", "--no-race"]);
    assert_eq!(all["stopped_early"], 0);
    assert_eq!(all["evaluated"].as_u64().unwrap(), tried);
    for key in ["recommended", "non_preemptive"] {
        assert_eq!(all[key]["policy"], v[key]["policy"], "{key}");
    }
    assert_eq!(v["baseline"]["policy"], "fifo");
    assert_eq!(v["baseline"]["mean_jct_s"], 1272.5);
    assert_eq!(v["recommended"]["p99_wait_s"], 420.0);
    assert_eq!(v["recommended"]["policy"], "srtf");
    assert_eq!(v["recommended"]["mean_jct_s"], 495.0);
    assert_eq!(v["non_preemptive"]["policy"], "sjf");
    assert_eq!(v["non_preemptive"]["mean_jct_s"], 1132.5);
    // No configuration beats srtf's mean JCT, and only srtf variants reach it.
    for e in v["all"].as_array().unwrap() {
        let jct = e["mean_jct_s"].as_f64().unwrap();
        assert!(jct >= 495.0, "{e}");
        if jct == 495.0 {
            assert!(e["policy"].as_str().unwrap().starts_with("srtf"), "{e}");
        }
    }
    // The front is led by srtf: best mean JCT and best p99 wait.
    assert_eq!(v["front"][0]["policy"], "srtf");
    // Slurm's driver refuses preemption, so it gets sjf with a note saying why.
    let deploy = v["deploy"].as_array().unwrap();
    let slurm = deploy.iter().find(|d| d["target"] == "ordo slurm drive").unwrap();
    assert_eq!(slurm["policy"], "sjf");
    assert_eq!(slurm["snippet"], "ordo slurm drive --policy 'sjf'");
    assert!(slurm["note"].as_str().unwrap().contains("srtf"), "{slurm}");
}

#[test]
fn hand_computed_fifo_baseline() {
    // fifo: long 0..1000, medium 1000..1300, short ..1400, tiny ..1420:
    // JCTs 1000 + 1290 + 1390 + 1410 = 5090, mean 1272.5 s; p99 wait (nearest rank, 4 jobs) 1390 s.
    let v = json(&[
        "tune",
        "--quiet",
        "--json",
        "--trace",
        &data("tune_srtf.csv"),
        "--cluster",
        "1x1",
        "--max-configs",
        "1",
    ]);
    assert_eq!(v["baseline"]["mean_jct_s"], 1272.5);
    assert_eq!(v["baseline"]["p99_wait_s"], 1390.0);
    assert_eq!(v["stopped"], "max-configs");
    assert_eq!(v["evaluated"], 1);
}

/// Feeds the snippets as printed (text output) back to the server's config parser, the policy
/// parser and the Slurm driver's check.
#[test]
fn printed_snippets_are_accepted_unchanged() {
    let out = ordo(&["tune", "--quiet", "--trace", &data("tune_srtf.csv"), "--cluster", "1x1", "--budget", "10m"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // The snippet lines, as a user copies them: indented under their target's heading.
    let snippet = |head: &str, start: &str| {
        let lines: Vec<&str> = text.lines().collect();
        let i = lines.iter().position(|l| l.starts_with(head)).unwrap_or_else(|| panic!("no `{head}` in\n{text}"));
        let l = lines[i + 1..].iter().find(|l| l.trim_start().starts_with(start)).unwrap();
        assert!(l.starts_with("    "), "{l}");
        l.trim().to_string()
    };
    // The server: a line of its TOML config file.
    let toml_line = snippet("ordo server", "policy = ");
    let path = tmp("server.toml");
    std::fs::write(&path, format!("{toml_line}\n")).unwrap();
    let cfg = ordo_server::config::ServerConfig::from_file(&path).unwrap_or_else(|e| panic!("{toml_line}: {e}"));
    assert!(cfg.policy_given);
    let expected: PolicySpec = if ordo_server::config::check_policy(&"srtf".parse().unwrap()).is_ok() {
        "srtf".parse().unwrap()
    } else {
        "sjf".parse().unwrap()
    };
    assert_eq!(cfg.policy, expected, "{text}");
    // The Slurm driver: the command line's --policy value.
    let cmd = snippet("ordo slurm drive", "ordo slurm drive --policy");
    let policy = cmd.strip_prefix("ordo slurm drive --policy '").and_then(|s| s.strip_suffix('\'')).unwrap();
    let spec: PolicySpec = policy.parse().unwrap();
    assert_eq!(spec.to_string(), policy, "the name round-trips");
    ordo_slurm::drive::check_policy(&spec).unwrap();
    assert_eq!(policy, "sjf");
    assert!(text.contains("Pareto front"), "{text}");
    assert!(text.contains("recommended (mean-jct): srtf"), "{text}");
}

fn without_timing(mut v: serde_json::Value) -> serde_json::Value {
    let o = v.as_object_mut().unwrap();
    o.remove("elapsed_s");
    o.remove("configs_per_minute");
    for key in ["all", "front", "dropped"] {
        for e in o[key].as_array_mut().unwrap() {
            e.as_object_mut().unwrap().remove("sim_s");
        }
    }
    for key in ["baseline", "recommended", "non_preemptive", "bound"] {
        if let Some(e) = o[key].as_object_mut() {
            e.remove("sim_s");
        }
    }
    v
}

#[test]
fn same_seed_same_search() {
    let run = |seed: &str| {
        without_timing(json(&[
            "tune",
            "--quiet",
            "--json",
            "--workload",
            "online",
            "--jobs",
            "150",
            "--cluster",
            "4x8",
            "--seed",
            seed,
            "--max-configs",
            "80",
            "--budget",
            "10m",
        ]))
    };
    let (a, b) = (run("3"), run("3"));
    assert_eq!(a["stopped"], "max-configs");
    assert_eq!(a["evaluated"].as_u64().unwrap() + a["stopped_early"].as_u64().unwrap(), 80);
    assert_eq!(a, b);
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["all"].as_array().unwrap().iter().map(|e| e["policy"].as_str().unwrap().to_string()).collect()
    };
    // Another seed draws other random candidates (and another built-in workload).
    let c = run("4");
    assert_ne!(names(&a), names(&c));
}

#[test]
fn constraints_filter_and_bad_values_are_named() {
    let trace = data("tune_srtf.csv");
    // An absolute p99-wait bound below what any policy reaches: nothing is feasible.
    let v = json(&[
        "tune",
        "--quiet",
        "--json",
        "--trace",
        &trace,
        "--cluster",
        "1x1",
        "--max-configs",
        "40",
        "--max-p99-wait",
        "1s",
    ]);
    assert_eq!(v["feasible"], 0);
    assert!(v["recommended"].is_null());
    assert!(v["front"].as_array().unwrap().is_empty());
    // Relative to FIFO: FIFO itself is feasible at 1.0x.
    let v = json(&[
        "tune",
        "--quiet",
        "--json",
        "--trace",
        &trace,
        "--cluster",
        "1x1",
        "--max-configs",
        "40",
        "--max-p99-wait",
        "1.0x",
        "--min-fairness",
        "0.8",
    ]);
    assert!(v["feasible"].as_u64().unwrap() >= 1);
    assert!(v["all"].as_array().unwrap().iter().any(|e| e["policy"] == "fifo"));
    for (flag, bad) in [("--max-p99-wait", "soon"), ("--min-fairness", "2"), ("--objective", "p50"), ("--budget", "0s")]
    {
        let out = ordo(&["tune", "--trace", &trace, "--cluster", "1x1", flag, bad]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(bad), "{flag} {bad}: {err}");
    }
}

/// Issue 31: on the `gangs` workload (a cluster with a network topology) the placement is a
/// dimension of the search: consolidated, topology and `required:switch` for gangs (no block
/// holds the largest gangs, so `required:block` is left out, saying so); every configuration
/// names its rule, the recommendation names the combination and the flags that run it, and
/// `ordo simulate` with those flags gives the same mean JCT. Without a topology there is no
/// such dimension.
#[test]
fn tune_searches_the_placement_on_a_topology() {
    let base = ["tune", "--quiet", "--workload", "gangs", "--jobs", "300", "--max-configs", "40", "--budget", "10m"];
    let v = json(&[&base[..], &["--json"]].concat());
    let t = &v["topology"];
    let rules = ["consolidated", "topology", "topology (required:switch)"];
    assert_eq!(t["levels"], serde_json::json!(["block", "switch"]));
    assert_eq!(t["rules"], serde_json::json!(rules));
    let left = t["left_out"].as_array().unwrap();
    assert!(left.len() == 1 && left[0].as_str().unwrap().starts_with("required:block: "), "{left:?}");
    assert_eq!(v["baseline"]["policy"], "fifo");
    assert_eq!(v["baseline"]["placement"], "consolidated");
    let all = v["all"].as_array().unwrap();
    for r in rules {
        let under: Vec<&serde_json::Value> = all.iter().filter(|e| e["placement"] == r).collect();
        assert!(under.len() >= 5, "{r}: {} configurations", under.len());
        assert!(under.iter().all(|e| e["spread_lost_gpu_hours"].as_f64().is_some()), "{r}");
    }
    // The same policies under each rule (the grid tries each under all three in turn).
    let fifo: Vec<&serde_json::Value> = all.iter().filter(|e| e["policy"] == "fifo").collect();
    assert_eq!(fifo.len(), 3);
    let lost = |e: &serde_json::Value| e["spread_lost_gpu_hours"].as_f64().unwrap();
    assert!(lost(fifo[1]) < lost(fifo[0]), "placing by the topology loses less to spreading");
    // Best per rule: the lowest mean JCT under it among deployable runs.
    for rb in t["best_by_rule"].as_array().unwrap() {
        let best = &rb["best"];
        let min = all
            .iter()
            .filter(|e| e["placement"] == rb["rule"] && e["estimates"] != "oracle")
            .map(|e| e["mean_jct_s"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        assert_eq!(best["mean_jct_s"].as_f64().unwrap(), min, "{rb}");
    }
    // The recommendation names its rule and its flags; simulate with them agrees.
    let rec = &v["recommended"];
    let rule = rec["placement"].as_str().unwrap();
    let flags = t["recommended_flags"].as_str().unwrap();
    let want = match rule {
        "consolidated" => "--placement consolidated",
        "topology" => "--placement topology",
        _ => "--placement topology --gang-topology required:switch",
    };
    assert_eq!(flags, want);
    let policy = rec["policy"].as_str().unwrap();
    let mut args = vec!["simulate", "--workload", "gangs", "--jobs", "300", "--policy", policy, "--json"];
    args.extend(flags.split(' '));
    let sim = json(&args);
    assert_eq!(sim["results"][0]["mean_jct_s"], rec["mean_jct_s"], "{policy} {flags}");
    // The table says the same.
    let out = ordo(&base);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("placement rules searched: consolidated, topology, topology (required:switch)"), "{text}");
    assert!(text.contains(&format!("recommended (mean-jct): {policy} @{rule}:")), "{text}");
    assert!(text.contains(&format!("placement:   run the recommendation with {flags}")), "{text}");
    assert!(text.contains("spread GPU-h"), "{text}");
    // Without a topology: no placement dimension.
    let v = json(&["tune", "--quiet", "--json", "--workload", "online", "--jobs", "100", "--max-configs", "20"]);
    assert!(v.get("topology").is_none());
    assert!(v["all"].as_array().unwrap().iter().all(|e| e.get("placement").is_none()));
    assert_eq!(v["space_size"], 2544);
}
