//! Scale benchmarks at the size of real clusters (`cargo bench -p ordo-sim --bench scale`):
//! generated `online` workloads of 200,000 jobs on 25,000 one-GPU nodes and 1,000,000 jobs on
//! 10,000 x 8 GPUs under each policy, the `longlog` workload (122,000 gangs of 32-1,024 GPUs
//! over two years on 1,024 one-GPU nodes, offered load 0.74), and a growth run that doubles
//! jobs and nodes four times and prints the time and memory ratio per doubling. Wall time, CPU
//! time and peak memory per run; one run each (these take seconds, so criterion's ten samples
//! would take hours here). `ORDO_SCALE=quick` runs only the growth series for `fifo` and
//! `fifo+easy`; `ORDO_SCALE=longlog` only `longlog`, three runs per policy (median);
//! `ORDO_SCALE=typed` only the typed cluster (200,000 jobs on 25,000 one-GPU nodes of four GPU
//! models, 30% of the jobs constrained, a speed matrix) beside the same jobs untyped, three runs
//! per policy (median). `ORDO_SCALE_POLICIES=fifo,fifo+easy` runs only the policies named;
//! `ORDO_SCALE_REPEAT=1` one run where three are the default (under a profiler).

#![allow(clippy::unwrap_used)]

use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig};
use std::time::Instant;

/// Resets the process's peak resident memory (VmHWM) where Linux allows it.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory since the last reset, MiB (Linux).
fn peak_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU time of this thread, seconds (Linux).
fn cpu_s() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|x| x.parse::<f64>().ok()).map_or(f64::NAN, |ns| ns / 1e9)
}

fn online(jobs: usize, cluster: &ClusterSpec) -> Workload {
    let p = WorkloadParams { jobs, ..WorkloadParams::default_for(Scenario::Online) };
    generate(&p, cluster.total_gpus())
}

/// Simulates once; returns (wall s, CPU s, peak MiB while it ran, mean JCT s).
fn run(w: &Workload, cluster: &ClusterSpec, policy: &str) -> (f64, f64, f64, f64) {
    let cfg = SimConfig::new(cluster.clone(), Placement::Pooled, policy.parse::<PolicySpec>().unwrap());
    run_cfg(w, &cfg)
}

fn run_cfg(w: &Workload, cfg: &SimConfig) -> (f64, f64, f64, f64) {
    reset_peak();
    let (c0, t0) = (cpu_s(), Instant::now());
    let out = simulate(w, cfg).unwrap();
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
    (wall, cpu, peak_mib(), out.metrics.mean_jct_s)
}

fn size(jobs: usize, cluster: &str, policies: &[&str]) {
    let c = ClusterSpec::parse(cluster).unwrap();
    let w = online(jobs, &c);
    println!("\n{jobs} jobs on {cluster} (online, seed 1)");
    println!("{:<20} {:>9} {:>9} {:>9} {:>12}", "policy", "wall s", "cpu s", "peak MiB", "mean JCT s");
    for p in policies {
        let (wall, cpu, peak, jct) = run(&w, &c, p);
        println!("{p:<20} {wall:>9.2} {cpu:>9.2} {peak:>9.0} {jct:>12.0}");
    }
}

/// `longlog` (seed 1) under each policy, `repeat` runs each: the median wall and CPU time and
/// the highest peak.
fn longlog(policies: &[&str], repeat: usize) {
    let c = Scenario::LongLog.cluster();
    let w = generate(&WorkloadParams::default_for(Scenario::LongLog), c.total_gpus());
    println!("\n{} jobs on 1024x1 (longlog, seed 1), median of {repeat}", w.jobs.len());
    println!("{:<20} {:>9} {:>9} {:>9} {:>12}", "policy", "wall s", "cpu s", "peak MiB", "mean JCT s");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for p in policies {
        let runs: Vec<_> = (0..repeat.max(1)).map(|_| run(&w, &c, p)).collect();
        let wall = median(runs.iter().map(|r| r.0).collect());
        let cpu = median(runs.iter().map(|r| r.1).collect());
        let peak = runs.iter().map(|r| r.2).fold(0.0, f64::max);
        println!("{p:<20} {wall:>9.2} {cpu:>9.2} {peak:>9.0} {:>12.0}", runs[0].3);
    }
}

/// 200,000 `online` jobs on 25,000 one-GPU nodes of four models; 30% of the jobs, by a fixed hash
/// of their index, constrained to some of the models; three job classes with their own speeds. Each
/// policy typed, and on the same jobs without constraints on the untyped cluster (as before
/// typed clusters): the median of `repeat` runs each.
fn typed(policies: &[&str], repeat: usize) {
    use ordo_core::{GpuNeeds, ModelPick, Speeds};
    let models = ["t4", "v100", "a100", "h100"];
    let spec: Vec<String> = models.iter().map(|m| format!("6250x1:{m}")).collect();
    let c = ClusterSpec::parse(&spec.join(",")).unwrap();
    let plain = online(200_000, &ClusterSpec::uniform(25_000, 1));
    let mut w = plain.clone();
    let accepts: [&[&str]; 4] = [&["a100", "h100"], &["v100", "a100"], &["h100"], &["t4", "v100"]];
    let mut constrained = 0;
    for (i, j) in w.jobs.iter_mut().enumerate() {
        let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let mut n =
            GpuNeeds { class: Some(format!("c{}", h % 3)), measured_on: Some("v100".into()), ..GpuNeeds::default() };
        if h % 100 < 30 {
            n.models = accepts[(h / 100 % 4) as usize].iter().map(|m| m.to_string()).collect();
            constrained += 1;
        }
        j.needs = Some(Box::new(n));
    }
    let mut speeds = Speeds::default();
    for (class, row) in [("*", [0.4, 1.0, 2.0, 3.0]), ("c1", [0.5, 1.0, 1.5, 2.0]), ("c2", [0.3, 1.0, 2.5, 4.0])] {
        for (m, v) in models.iter().zip(row) {
            speeds.set(class, m, v).unwrap();
        }
    }
    println!("\n200000 jobs on 25000x1 of four models ({constrained} constrained), online seed 1; median of {repeat}");
    println!(
        "{:<20} {:>9} {:>9} {:>9} {:>12}   {:>9} {:>9} {:>9}",
        "policy", "wall s", "cpu s", "peak MiB", "mean JCT s", "untyped", "cpu s", "peak MiB"
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let u = ClusterSpec::uniform(25_000, 1);
    for p in policies {
        let mut cfg = SimConfig::new(c.clone(), Placement::Pooled, p.parse::<PolicySpec>().unwrap());
        cfg.speeds = speeds.clone();
        cfg.model_pick = Some(ModelPick::Fastest);
        let runs: Vec<_> = (0..repeat.max(1)).map(|_| run_cfg(&w, &cfg)).collect();
        let base: Vec<_> = (0..repeat.max(1)).map(|_| run(&plain, &u, p)).collect();
        println!(
            "{p:<20} {:>9.2} {:>9.2} {:>9.0} {:>12.0}   {:>9.2} {:>9.2} {:>9.0}",
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1).collect()),
            runs.iter().map(|r| r.2).fold(0.0, f64::max),
            runs[0].3,
            median(base.iter().map(|r| r.0).collect()),
            median(base.iter().map(|r| r.1).collect()),
            base.iter().map(|r| r.2).fold(0.0, f64::max),
        );
    }
}

fn growth(policies: &[&str]) {
    // 25,000 jobs on 250 x 8 GPUs, doubled four times up to 400,000 jobs on 4,000 x 8.
    println!("\ngrowth: jobs and nodes doubled four times (online, seed 1, x8-GPU nodes)");
    println!(
        "{:<20} {:>8} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "policy", "jobs", "nodes", "wall s", "cpu s", "peak MiB", "x time", "x mem"
    );
    for p in policies {
        let mut prev: Option<(f64, f64)> = None;
        for k in 0..5u32 {
            let (jobs, nodes) = (25_000usize << k, 250u32 << k);
            let c = ClusterSpec::uniform(nodes, 8);
            let w = online(jobs, &c);
            let (wall, cpu, peak, _) = run(&w, &c, p);
            let ratio = |now: f64, before: Option<f64>| before.map_or("-".to_string(), |b| format!("{:.2}", now / b));
            println!(
                "{p:<20} {jobs:>8} {nodes:>6} {wall:>9.2} {cpu:>9.2} {peak:>9.0} {:>8} {:>8}",
                ratio(cpu, prev.map(|x| x.0)),
                ratio(peak, prev.map(|x| x.1))
            );
            prev = Some((cpu, peak));
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    let every = ["fifo", "sjf", "sgf", "fifo+easy", "sjf+easy", "fifo+conservative", "srtf", "las"];
    // `ORDO_SCALE_POLICIES=fifo,fifo+easy` runs only those of the list.
    let only = std::env::var("ORDO_SCALE_POLICIES").ok();
    let all: Vec<&str> =
        every.into_iter().filter(|p| only.as_deref().is_none_or(|o| o.split(',').any(|x| x.trim() == *p))).collect();
    // `ORDO_SCALE_REPEAT=1`: one run per policy where three are the default (for profilers).
    let repeat = std::env::var("ORDO_SCALE_REPEAT").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    match std::env::var("ORDO_SCALE").as_deref() {
        Ok("quick") => return growth(&["fifo", "fifo+easy"]),
        Ok("longlog") => return longlog(&all, repeat),
        Ok("typed") => return typed(&all, repeat),
        _ => {}
    }
    longlog(&all, 1);
    size(200_000, "25000x1", &all);
    typed(&all, 1);
    size(1_000_000, "10000x8", &all);
    growth(&["fifo", "fifo+easy", "fifo+conservative", "srtf"]);
}
