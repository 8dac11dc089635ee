//! Criterion benchmark of the report's own work, apart from the simulations it is given: time
//! series, CDFs, size classes and owners (`Report::build`), then the HTML with its SVG charts,
//! for the Philly window (days [42, 49), 13 policies) or, without the trace, the built-in
//! `online` workload. The simulations run once, outside the measurement.

#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_report::{render, InputInfo, Report, ReportOptions};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig};
use ordo_trace::{load_path, Format, LoadOptions};
use std::path::PathBuf;
use std::time::Duration;

const ALL: &str = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative,srtf,las,gittins,fair,priority,qssf,rr";

fn workload() -> (String, Workload) {
    let dir = std::env::var_os("ORDO_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"));
    let path = dir.join("philly/philly_rfold.csv");
    if path.is_file() {
        let opts = LoadOptions::new(Format::Philly).with_window(Some(42.0), Some(49.0));
        return ("philly-42-49".into(), load_path(&path, &opts).unwrap().workload);
    }
    eprintln!("Philly trace not found at {} (set ORDO_TRACES): using the built-in online workload", path.display());
    ("online".into(), generate(&WorkloadParams::default_for(Scenario::Online), 512))
}

fn bench(c: &mut Criterion) {
    let (name, w) = workload();
    let outs: Vec<_> = PolicySpec::parse_list(ALL)
        .unwrap()
        .into_iter()
        .map(|p| simulate(&w, &SimConfig::new(ClusterSpec::uniform(64, 8), Placement::Pooled, p)).unwrap())
        .collect();
    let input = InputInfo::whole(&name, "bench", w.jobs.len());
    let opts = ReportOptions::default();
    let mut g = c.benchmark_group("report");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    g.bench_function(format!("build+html/{name}/13 policies"), |b| {
        b.iter(|| {
            let r = Report::build(&input, &w, &outs, &opts, None).unwrap();
            render::html(&r).unwrap().len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
