//! Issue 18's speed target, measured against the real dev Slurm (`scripts/slurm-dev-cluster.sh`):
//! after 10 arrivals among 5,000 and among 20,000 pending jobs, how many priorities a `sjf`
//! pass changes and how long it takes, through `scontrol` and through slurmrestd.
//!
//! Through slurmrestd from API v0.0.40 on, the first pass reads every record and the measured
//! ones read job states and the records of new and changed jobs (`--rest-full-read`).
//!
//! Run: `SLURM_CONF=DIR/slurm.conf cargo bench -p ordo-slurm --bench drive_at_scale` (as root, on
//! the dev cluster only: it fills the cluster, submits up to 20,000 jobs and cancels them at the
//! end). `ORDO_BENCH_SIZES=5000,20000` and `ORDO_BENCH_ROUNDS=3` change what it does;
//! `ORDO_BENCH_REST=URL ORDO_BENCH_REST_VERSION=v0.0.42` point it at another slurmrestd (the
//! Slurm 24.11 dev cluster, `scripts/slurm24-dev-cluster.sh`, with its `bin/` first in PATH and
//! `SLURM_CONF` naming its slurm.conf). Prints one
//! line per pass and the medians; no criterion: each sample is a whole pass against a real
//! controller.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark may stop on a broken expectation

use ordo_slurm::client::{run, run_with_timeout, Backend};
use ordo_slurm::order::PlanSpec;
use ordo_slurm::{DriveConfig, Driver, PassReport, SlurmCli, SlurmRest};
use std::path::{Path, PathBuf};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A seeded generator (xorshift): the same queue each run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Submits one pending 4-GPU job per time limit (minutes), four `sbatch` at a time; returns
/// their ids.
fn submit(limits: &[u64]) -> Vec<u64> {
    let input: String = limits.iter().map(|l| format!("{l}\n")).collect();
    let out = run(
        "xargs",
        &[
            "-P",
            "4",
            "-I{}",
            "sbatch",
            "--parsable",
            "-o",
            "/dev/null",
            "-D",
            "/tmp",
            "--gres=gpu:4",
            "--time={}",
            "--wrap",
            "sleep 1",
        ],
        &[],
        Some(&input),
        Duration::from_secs(3600),
    )
    .expect("xargs sbatch");
    assert!(out.success, "sbatch failed: {}", out.stderr);
    out.stdout.lines().filter_map(|l| l.trim().split(';').next()?.parse().ok()).collect()
}

fn cancel(ids: &[u64]) {
    for chunk in ids.chunks(5000) {
        let s: Vec<String> = chunk.iter().map(u64::to_string).collect();
        let refs: Vec<&str> = s.iter().map(String::as_str).collect();
        let _ = run_with_timeout("scancel", &refs, T);
    }
}

fn pass(slurm: &dyn Backend, log: &Path) -> PassReport {
    let cfg = DriveConfig {
        plan: PlanSpec {
            policy: "sjf".parse().unwrap(),
            placement: ordo_core::Placement::Consolidated,
            partitions: None,
            model_memory: false,
            cluster: None,
            topology: None,
        },
        topology: ordo_slurm::drive::TopologyFrom::Off,
        priority_floor: None,
        priority_top: None,
        dry_run: false,
        audit_log: log.to_path_buf(),
        max_rate: 100_000.0,
        max_batch: 1000,
    };
    let mut d = Driver::new(slurm, cfg).expect("driver");
    let r = d.pass().expect("pass");
    assert!(r.outage.is_none(), "outage during the bench: {:?}", r.outage);
    r
}

fn line(what: &str, pending: usize, r: &PassReport) -> f64 {
    let total = r.read_time + r.plan_time + r.update_time;
    println!(
        "{what:<22} {pending:>6} pending: {} ordered, changed {} priorities in {:.2}s (read {:.2}s, plan {:.2}s, updates {:.2}s; controller {})",
        r.intended.order.len(),
        r.changes.len(),
        total.as_secs_f64(),
        r.read_time.as_secs_f64(),
        r.plan_time.as_secs_f64(),
        r.update_time.as_secs_f64(),
        r.latency.map_or("-".to_string(), |l| format!("{:.2} ms per update", l.as_secs_f64() * 1000.0)),
    );
    if let Some(n) = &r.read_note {
        println!("{:<22} {:>6}          {n}", "", "");
    }
    total.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let Some(conf) = std::env::var_os("SLURM_CONF").map(PathBuf::from) else {
        println!("skipped: no SLURM_CONF (start the dev cluster: scripts/slurm-dev-cluster.sh start DIR)");
        return;
    };
    let nodes = run_with_timeout("sinfo", &["-h", "-N", "-o", "%N|%G"], Duration::from_secs(5)).unwrap_or_default();
    let mut nodes: Vec<&str> = nodes.lines().map(str::trim).collect();
    nodes.dedup();
    if nodes != ["n1|gpu:a100:8", "n2|gpu:a100:8", "n3|gpu:v100:4"] {
        println!("skipped: the Slurm that answers is not the dev cluster ({nodes:?})");
        return;
    }
    let sizes: Vec<usize> = std::env::var("ORDO_BENCH_SIZES")
        .unwrap_or_else(|_| "5000,20000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("ORDO_BENCH_SIZES: numbers"))
        .collect();
    let rounds: usize = std::env::var("ORDO_BENCH_ROUNDS").map_or(3, |r| r.parse().expect("ORDO_BENCH_ROUNDS"));
    let token = std::fs::read_to_string(conf.parent().unwrap().join("token.env")).expect("token.env beside SLURM_CONF");
    let cli = SlurmCli::new(T);
    // ORDO_BENCH_REST / ORDO_BENCH_REST_VERSION: another slurmrestd (the 24.11 dev cluster's:
    // http://127.0.0.1:6920, v0.0.42, with its bin/ first in PATH and its slurm.conf).
    let url = std::env::var("ORDO_BENCH_REST").unwrap_or_else(|_| "http://127.0.0.1:6820".into());
    let version = std::env::var("ORDO_BENCH_REST_VERSION").unwrap_or_else(|_| "v0.0.38".into());
    let rest = SlurmRest::new(&url, "root", &token, &version, T);
    // ORDO_BENCH_AUDIT: an audit log to go on from (the priorities it says ordo set stay ordo's).
    let (log, keep_log) = match std::env::var_os("ORDO_BENCH_AUDIT") {
        Some(p) => (PathBuf::from(p), true),
        None => (std::env::temp_dir().join(format!("ordo-bench-audit-{}.jsonl", std::process::id())), false),
    };
    if !keep_log {
        let _ = std::fs::remove_file(&log);
    }
    let mut rng = Rng(0x5eed_1e52);
    let mut limit = || 1 + rng.next() % 600;

    // Jobs left by an interrupted run are used again (and cancelled at the end).
    let left = run_with_timeout("squeue", &["-h", "-t", "PD,R", "-o", "%i|%T"], T).expect("squeue");
    let mut all: Vec<u64> = Vec::new();
    let mut blockers: Vec<u64> = Vec::new();
    for l in left.lines() {
        if let Some((id, state)) = l.trim().split_once('|') {
            let id: u64 = id.parse().expect("job id");
            if state == "RUNNING" {
                blockers.push(id)
            } else {
                all.push(id)
            }
        }
    }
    // Three blockers hold all 20 GPUs for the whole run.
    let fresh = blockers.is_empty();
    all.splice(0..0, blockers);
    for g in if fresh { vec![8, 8, 4] } else { Vec::new() } {
        let out = run_with_timeout(
            "sbatch",
            &[
                "--parsable",
                "-o",
                "/dev/null",
                "-D",
                "/tmp",
                &format!("--gres=gpu:{g}"),
                "--time=600",
                "--wrap",
                "sleep 3600",
            ],
            T,
        )
        .expect("sbatch");
        all.push(out.trim().parse().expect("job id"));
    }
    let mut summary = Vec::new();
    for &size in &sizes {
        let want = size.saturating_sub(all.len() - 3);
        let limits: Vec<u64> = (0..want).map(|_| limit()).collect();
        let t0 = std::time::Instant::now();
        all.extend(submit(&limits));
        println!("submitted {want} jobs in {:.1}s", t0.elapsed().as_secs_f64());
        line("lay out (scontrol)", all.len() - 3, &pass(&cli, &log));
        line("again, no change", all.len() - 3, &pass(&cli, &log));
        for (name, backend) in [("scontrol", &cli as &dyn Backend), ("slurmrestd", &rest as &dyn Backend)] {
            if name == "slurmrestd" {
                // Its first read reads every record; the passes after it read job states only.
                line("first read (slurmrestd)", all.len() - 3, &pass(backend, &log));
            }
            let (mut secs, mut updates) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let limits: Vec<u64> = (0..10).map(|_| limit()).collect();
                all.extend(submit(&limits));
                let r = pass(backend, &log);
                secs.push(line(&format!("10 arrivals ({name})"), all.len() - 3, &r));
                updates.push(r.changes.len() as f64);
            }
            summary.push(format!(
                "{name:<10} {:>6} pending, 10 arrivals: median {} updates (max {}), median {:.2}s per pass",
                all.len() - 3,
                median(updates.clone()),
                updates.iter().copied().fold(0.0, f64::max),
                median(secs)
            ));
        }
    }
    println!("\nsummary (this machine; medians of {rounds} passes):");
    for s in &summary {
        println!("  {s}");
    }
    cancel(&all);
    if !keep_log {
        let _ = std::fs::remove_file(&log);
    }
}
