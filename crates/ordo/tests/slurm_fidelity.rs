//! Does ordo's replay reproduce what a real Slurm ran? The second dev cluster of
//! `scripts/slurm-dev-cluster.sh start DIR --multifactor` (priority/multifactor with age and GPU
//! weights, sched/backfill) runs a few hundred short jobs; `ordo slurm policy` reads the
//! emulating policy from `scontrol show config`; the job completion log, imported, is replayed
//! under it and compared job by job with what Slurm really did (docs/SLURM.md, "How closely ordo
//! replays a Slurm"). `$ORDO_SLURM_MF_CONF` names that cluster's slurm.conf (`.ci/run` starts
//! it); skipped without it, except under `CI=true`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn slurm(conf: &Path, cmd: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("30")
        .arg(cmd)
        .args(args)
        .env("SLURM_CONF", conf)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn ordo(conf: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).env("SLURM_CONF", conf).output().unwrap();
    assert!(out.status.success(), "ordo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn csv(text: &str) -> Vec<HashMap<String, String>> {
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let head: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
    lines.map(|l| head.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect()
}

#[test]
fn ordo_replays_a_multifactor_backfill_slurm_within_ten_percent() {
    let Some(conf) = std::env::var_os("ORDO_SLURM_MF_CONF").map(PathBuf::from).filter(|p| p.is_file()) else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI must start the multifactor dev cluster (scripts/slurm-dev-cluster.sh start DIR --multifactor) and set ORDO_SLURM_MF_CONF"
        );
        eprintln!("skipped: no multifactor Slurm (scripts/slurm-dev-cluster.sh start DIR --multifactor; ORDO_SLURM_MF_CONF=DIR/slurm.conf)");
        return;
    };
    let dir = conf.parent().unwrap().to_path_buf();
    // The emulating policy, from the controller's own configuration.
    let policy = ordo(&conf, &["slurm", "policy"]);
    let policy = policy.lines().next().unwrap().trim().to_string();
    assert_eq!(policy, "priority:age=1000,fairshare=0,size=2000,qos=0,half_life=604800,max_age=600+conservative");
    // 200 jobs in 8 bursts 5 s apart: 1-8 GPUs, 2-15 s each, time limits of 1 or 2 minutes.
    let mut rng = fastrand::Rng::with_seed(3);
    let mut ids = Vec::new();
    for burst in 0..8 {
        for _ in 0..25 {
            let gpus = [1, 1, 1, 2, 2, 4, 8][rng.usize(..7)];
            let secs = rng.u32(2..=15);
            let limit = if rng.bool() { "1" } else { "2" };
            let id = slurm(
                &conf,
                "sbatch",
                &[
                    "--parsable",
                    "-N1",
                    "-o",
                    "/dev/null",
                    &format!("--gres=gpu:{gpus}"),
                    &format!("--time={limit}"),
                    "--wrap",
                    &format!("sleep {secs}"),
                ],
            );
            ids.push(id.trim().split(';').next().unwrap().parse::<u64>().unwrap());
        }
        if burst < 7 {
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    let t0 = Instant::now();
    while !slurm(&conf, "squeue", &["-h", "-o", "%i"]).trim().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(900), "the jobs did not finish in 15 minutes");
        std::thread::sleep(Duration::from_secs(2));
    }
    // The completion log, as ordo imports it; then the replay under the emulating policy.
    std::thread::sleep(Duration::from_secs(2));
    let trace = dir.join("fidelity.csv");
    ordo(
        &conf,
        &[
            "slurm",
            "import",
            "--jobcomp",
            dir.join("log/jobcomp.txt").to_str().unwrap(),
            "--out",
            trace.to_str().unwrap(),
        ],
    );
    let jobs_out = dir.join("fidelity-replay.csv");
    ordo(
        &conf,
        &[
            "simulate",
            "--quiet",
            "--trace",
            trace.to_str().unwrap(),
            "--cluster",
            "2x8,1x4",
            "--placement",
            "consolidated",
            "--policy",
            &policy,
            "--jobs-out",
            jobs_out.to_str().unwrap(),
        ],
    );
    let real: HashMap<String, (f64, f64)> = csv(&std::fs::read_to_string(&trace).unwrap())
        .into_iter()
        .filter(|r| ids.iter().any(|i| i.to_string() == r["job_id"]))
        .map(|r| (r["job_id"].clone(), (r["submit_time"].parse().unwrap(), r["start_time"].parse().unwrap())))
        .collect();
    assert_eq!(real.len(), ids.len(), "every job is in the completion log");
    // The replay's times count from the trace's first submission: compared as waits.
    let replay: HashMap<String, (f64, f64)> = csv(&std::fs::read_to_string(&jobs_out).unwrap())
        .into_iter()
        .map(|r| (r["job_id"].clone(), (r["submit_time"].parse().unwrap(), r["start_time"].parse().unwrap())))
        .collect();
    let (mut real_start, mut sim_start, mut real_wait, mut sim_wait, mut err) = (vec![], vec![], 0.0, 0.0, vec![]);
    for (id, &(submit, start)) in &real {
        let (sub, s) = replay[id];
        real_start.push(start);
        sim_start.push(s);
        real_wait += start - submit;
        sim_wait += s - sub;
        err.push(((s - sub) - (start - submit)).abs());
    }
    let n = real.len() as f64;
    err.sort_by(f64::total_cmp);
    let rho = ordo_report::periods::spearman(&real_start, &sim_start).unwrap();
    let gap = (sim_wait - real_wait) / real_wait;
    eprintln!(
        "fidelity: {} jobs, mean wait real {:.1} s, replayed {:.1} s ({:+.1}%), start error mean {:.1} s, median {:.1} s, p95 {:.1} s, max {:.1} s, start-order rank correlation {rho:.3}",
        real.len(),
        real_wait / n,
        sim_wait / n,
        gap * 100.0,
        err.iter().sum::<f64>() / n,
        err[err.len() / 2],
        err[(err.len() * 95) / 100],
        err[err.len() - 1]
    );
    // The same history on the before/after page, split after the fourth burst (one policy
    // throughout): the page carries the replay's fidelity for each half.
    let page = dir.join("fidelity-page.json");
    ordo(
        &conf,
        &[
            "before-after",
            "--trace",
            dir.join("log/jobcomp.txt").to_str().unwrap(),
            "--format",
            "jobcomp",
            "--cluster",
            "2x8,1x4",
            "--placement",
            "consolidated",
            "--at",
            "18s",
            "--before-policy",
            &policy,
            "--after-policy",
            &policy,
            "--out",
            page.to_str().unwrap(),
        ],
    );
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&page).unwrap()).unwrap();
    assert_eq!(p["verdict"], "same_policy");
    for f in p["fidelity"].as_array().unwrap() {
        assert!(f["rank_correlation"].as_f64().unwrap() > 0.9, "{f}");
    }
    eprintln!("before/after page: {}; fidelity {}", p["headline"], p["fidelity"]);
    assert!(real_wait / n > 30.0, "the jobs queued (mean wait {:.1} s)", real_wait / n);
    assert!(gap.abs() <= 0.10, "mean wait: real {:.1} s, replayed {:.1} s", real_wait / n, sim_wait / n);
    assert!(rho > 0.9, "start-order rank correlation {rho:.3}");
}
