//! `--topology`, `--placement topology` and `--gang-topology` as a user runs them: the built-in
//! `gangs` workload where placing by the topology wins, Slurm's topology.conf and ordo's TOML
//! read for a cluster, and bad files refused with the file, the line and what was expected.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use std::process::{Command, Output};

fn ordo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().expect("ordo runs")
}

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-topology-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn compare_runs_each_policy_under_each_placement_and_topology_wins_on_gangs() {
    let out = ordo(&[
        "compare",
        "--workload",
        "gangs",
        "--placement",
        "pooled,consolidated,topology",
        "--policies",
        "fifo,fifo+easy",
        "--json",
    ]);
    let v = json(&out);
    let rows = v["results"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "fifo @pooled",
            "fifo @consolidated",
            "fifo @topology",
            "fifo+easy @pooled",
            "fifo+easy @consolidated",
            "fifo+easy @topology"
        ]
    );
    for order in rows.chunks(3) {
        let jct = |r: &serde_json::Value| r["mean_jct_s"].as_f64().unwrap();
        let p99 = |r: &serde_json::Value| r["p99_jct_s"].as_f64().unwrap();
        let lost = |r: &serde_json::Value| r["spread"]["lost_gpu_hours"].as_f64().unwrap();
        assert!(p99(&order[2]) < p99(&order[0]) && p99(&order[2]) < p99(&order[1]), "{order:?}");
        // The mean under fifo; under fifo+easy topology placement keeps the head's reservation
        // (it plans spread gangs with their slowdown) and its mean is not the lowest
        // (docs/TOPOLOGY.md, "Evidence").
        if order[2]["policy"] == "fifo @topology" {
            assert!(jct(&order[2]) < jct(&order[0]) && jct(&order[2]) < jct(&order[1]), "{order:?}");
        }
        assert!(lost(&order[2]) < lost(&order[1]) && lost(&order[2]) < lost(&order[0]));
        assert_eq!(order[2]["placement"], "topology");
    }
    // The table names the topology and the spread columns.
    let out = ordo(&["compare", "--workload", "gangs", "--placement", "consolidated,topology", "--policies", "fifo"]);
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("network: topology of 2 levels (block, switch"), "{s}");
    assert!(s.contains("spread GPU-h") && s.contains("gangs spread"), "{s}");
    // Elsewhere one placement only.
    let out = ordo(&["simulate", "--workload", "gangs", "--placement", "consolidated,topology", "--policy", "fifo"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("one placement here"));
}

#[test]
fn slurm_topology_conf_and_toml_files_are_read_for_the_cluster() {
    let conf = tmp(
        "topology.conf",
        "# leaf switches\nSwitchName=s0 Nodes=n[0-3]\nSwitchName=s1 Nodes=n[4-7]\nSwitchName=spine Switches=s[0-1]\n",
    );
    let toml = tmp(
        "topo.toml",
        "levels = [\"block\"]\n[units.block]\nb0 = \"n[0-3]\"\nb1 = \"n[4-7]\"\n[slowdown]\nblock = 1.5\n",
    );
    for (file, level) in [(&conf, "switch"), (&toml, "block")] {
        let ask = format!("required:{level}");
        let v = json(&ordo(&[
            "simulate",
            "--workload",
            "mixed",
            "--jobs",
            "200",
            "--cluster",
            "8x8",
            "--topology",
            file.to_str().unwrap(),
            "--placement",
            "topology",
            "--gang-topology",
            &ask,
            "--policy",
            "fifo+easy",
            "--json",
        ]));
        let m = &v["results"][0];
        assert_eq!(m["placement"], "topology");
        assert_eq!(m["spread"]["levels"][0], level);
        // Every gang of at most 32 GPUs (one unit) stays in its unit; larger ones cannot run.
        let rejected = v["rejected"].as_array().unwrap();
        assert!(!rejected.is_empty() && rejected.iter().all(|r| r[1].as_u64().unwrap() > 32), "{v}");
        assert_eq!(m["spread"]["gang_runs_by_crossed"][1], 0, "{m}");
    }
}

#[test]
fn bad_topology_input_is_refused_with_file_line_and_why() {
    let unknown = tmp("unknown.conf", "SwitchName=s0 Nodes=n[0-3]\nSwitchName=s1 Nodes=gpu9\n");
    let out = ordo(&["compare", "--cluster", "8x8", "--topology", unknown.to_str().unwrap(), "--policies", "fifo"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown.conf:2: switch `s1`: node `gpu9` is not a node of the cluster"), "{err}");

    let cycle = tmp("cycle.conf", "SwitchName=a Switches=b\nSwitchName=b Switches=a\n");
    let err =
        String::from_utf8_lossy(&ordo(&["compare", "--cluster", "8x8", "--topology", cycle.to_str().unwrap()]).stderr)
            .to_string();
    assert!(err.contains("cycle.conf:1: switches form a cycle: a -> b -> a"), "{err}");

    let out = ordo(&["compare", "--cluster", "8x8", "--placement", "topology"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--placement topology: give the cluster's topology with --topology FILE"));

    let out = ordo(&["compare", "--workload", "gangs", "--gang-topology", "required:rack"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--gang-topology: topology level `rack` is not one of this cluster's levels (block, switch)"));
    let out = ordo(&["compare", "--workload", "gangs", "--gang-topology", "block"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected `required:LEVEL` or `preferred:LEVEL`"));
}

#[test]
fn a_traces_topology_column_asks_per_job_and_survives_conversion() {
    let trace = tmp(
        "asks.csv",
        "job_id,submit_time,num_gpu,duration,job_class,topology\n\
         a,0,8,10,lm,\n\
         b,0,16,100,lm,required:block\n\
         c,0,16,100,lm,preferred:block\n",
    );
    let conf = tmp("asks.conf", "BlockName=b0 Nodes=n[0-1]\nBlockName=b1 Nodes=n[2-3]\n");
    let (trace_arg, conf_arg) = (trace.to_str().unwrap(), conf.to_str().unwrap());
    let on_blocks = |cmd: &str, extra: &[&str]| {
        let mut args = vec![
            cmd,
            "--trace",
            trace_arg,
            "--cluster",
            "4x8",
            "--topology",
            conf_arg,
            "--placement",
            "topology",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&ordo(&args))
    };
    let v = on_blocks("simulate", &["--policy", "fifo"]);
    // a on n0; b takes the whole block b1 (n2, n3); c waits for a to end, then takes b0.
    let m = &v["results"][0];
    assert_eq!(m["jobs"], 3, "{v}");
    assert_eq!(m["spread"]["gang_runs_by_crossed"], serde_json::json!([2, 0]), "{m}");
    // Written back as generic and JSON Lines, the asks are kept.
    for (to, ext) in [("generic", "csv"), ("jsonl", "jsonl")] {
        let out = std::env::temp_dir().join(format!("ordo-topology-cli-{}/asks-out.{ext}", std::process::id()));
        let o = ordo(&["trace", "convert", trace.to_str().unwrap(), "--to", to, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("required:block") && text.contains("preferred:block"), "{text}");
    }
    // --gang-topology fills in only the gangs without an ask of their own: every level exists.
    let v = on_blocks("compare", &["--gang-topology", "required:block", "--policies", "fifo"]);
    assert!(v.get("unsatisfiable").is_none_or(|u| u.as_array().unwrap().is_empty()), "{v}");
    assert_eq!(v["results"][0]["jobs"], 3, "{v}");
    let bad = tmp("bad-asks.csv", "job_id,submit_time,num_gpu,duration,topology\na,0,8,10,block\n");
    let o = ordo(&["compare", "--trace", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "bad-asks.csv:2: field `topology`: expected a topology ask: `required:LEVEL` or `preferred:LEVEL`"
        ),
        "{err}"
    );
}
