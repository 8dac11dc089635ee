//! Benchmark against a real kube-apiserver (`ORDO_K8S_DIR`, see docs/KUBERNETES.md): 1,000
//! pending pods of 1 GPU on 100 nodes of 16 GPUs, from the scheduler's start to every pod bound (the
//! list, the pass, 1,000 `pods/binding` calls). Prints each run and the median; skips with a
//! message when no API server is given.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use futures::StreamExt;
use ordo_kube::run::RunConfig;
use serde_json::json;
use std::time::{Duration, Instant};

const NODES: u32 = 100;
const PODS: u32 = 1_000;
const RUNS: usize = 3;

async fn one_run(run: usize) -> (Duration, u64) {
    let c = common::Cluster::new(&format!("bench{run}")).await.unwrap();
    futures::stream::iter(0..NODES)
        .for_each_concurrent(16, |i| {
            let c = &c;
            async move { c.node(&format!("n{i:03}"), 16).await }
        })
        .await;
    futures::stream::iter(0..PODS)
        .for_each_concurrent(32, |i| {
            let c = &c;
            async move { c.pod(&format!("p{i:04}"), 1, json!({"ordo.dev/estimate": "1h"})).await }
        })
        .await;
    let t0 = Instant::now();
    let s = c
        .start_with(RunConfig {
            engine: c.engine_config("fifo"),
            resync: Duration::from_secs(600),
            audit_log: Some(c.tmp.join("audit.jsonl")),
            bind_concurrency: 32,
            verbose: false,
        })
        .await;
    let mut stats = s.stats.clone();
    // The loop publishes after a pass's bindings have all been answered.
    stats.wait_for(|p| p.stats.binds >= PODS as u64).await.unwrap();
    let took = t0.elapsed();
    let pass_us = s.stats().last_pass_us;
    assert_eq!(s.stats().stats.conflicts, 0);
    let bound = c.state().await.values().filter(|v| v.0.is_some()).count();
    assert_eq!(bound, PODS as usize, "not every pod is bound");
    c.assert_no_overcommit().await;
    s.stop().await;
    c.cleanup().await;
    (took, pass_us)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if std::env::var_os("ORDO_K8S_DIR").is_none() {
        eprintln!("bind: skipped: set ORDO_K8S_DIR to a running `scripts/k8s-dev-apiserver.sh start DIR`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut times = Vec::new();
    for run in 0..RUNS {
        let (took, pass_us) = rt.block_on(one_run(run));
        println!(
            "bind: run {run}: {PODS} pending pods on {NODES} nodes bound in {} ms (the last pass decided in {} ms)",
            took.as_millis(),
            pass_us / 1000
        );
        times.push(took);
    }
    times.sort();
    println!("bind: median of {RUNS}: {} ms", times[RUNS / 2].as_millis());
}
