//! Criterion benchmarks: whole simulations on the real Philly trace (days [42, 49), every
//! policy; the whole trace under fifo, sjf and fifo+easy) and on the built-in workloads.
//! The trace comes from `$ORDO_TRACES` (default `../shared/traces` beside the repository); without
//! it only the built-in workloads are measured.

#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig};
use ordo_trace::{load_path, Format, LoadOptions};
use std::path::PathBuf;
use std::time::Duration;

const ALL: [&str; 12] = [
    "fifo",
    "sjf",
    "sgf",
    "fifo+easy",
    "sjf+easy",
    "sgf+easy",
    "fifo+conservative",
    "sjf+conservative",
    "sgf+conservative",
    "srtf",
    "las",
    "gittins",
];

fn philly(window: Option<(f64, f64)>) -> Option<Workload> {
    let dir = std::env::var_os("ORDO_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"));
    let path = dir.join("philly/philly_rfold.csv");
    if !path.is_file() {
        eprintln!("skipping Philly benchmarks: {} not found (set ORDO_TRACES)", path.display());
        return None;
    }
    let opts = LoadOptions::new(Format::Philly).with_window(window.map(|w| w.0), window.map(|w| w.1));
    Some(load_path(&path, &opts).unwrap().workload)
}

fn run(c: &mut Criterion, group: &str, w: &Workload, policies: &[&str], placement: Placement) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    for p in policies {
        let cfg = SimConfig {
            preemption_overhead: 0,
            preemption: Default::default(),
            cluster: ClusterSpec::uniform(64, 8),
            placement,
            policy: p.parse::<PolicySpec>().unwrap(),
            check_invariants: false,
            deadline: None,
            quotas: None,
            give_up_above_mean_jct_s: None,
            speeds: ordo_core::Speeds::default(),
            model_pick: None,
            topology: None,
            place_by_topology: false,
        };
        g.bench_with_input(BenchmarkId::from_parameter(p), w, |b, w| b.iter(|| simulate(w, &cfg).unwrap()));
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    for s in [Scenario::Backlog, Scenario::Online] {
        let w = generate(&WorkloadParams::default_for(s), 512);
        run(c, &format!("builtin-{s}"), &w, &ALL, Placement::Pooled);
    }
    if let Some(w) = philly(Some((42.0, 49.0))) {
        run(c, "philly-window-pooled", &w, &ALL, Placement::Pooled);
        run(c, "philly-window-consolidated", &w, &ALL, Placement::Consolidated);
    }
    if let Some(w) = philly(None) {
        run(c, "philly-whole-pooled", &w, &["fifo", "sjf", "fifo+easy"], Placement::Pooled);
    }
}

criterion_group!(sim, benches);
criterion_main!(sim);
