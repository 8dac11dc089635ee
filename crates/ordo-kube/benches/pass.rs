//! Criterion benchmark: one pass of `ordo kube`'s engine (ordo-core's `Scheduler` plus the
//! pod bookkeeping, reasons and audit records) with 10,000 pending pods on 100 nodes of 8 GPUs.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ordo_kube::objects::{Ask, NodeInfo, Phase, PodInfo};
use ordo_kube::{Engine, EngineConfig};
use std::collections::BTreeMap;

const GI: u64 = 1 << 30;

fn node(i: u32) -> NodeInfo {
    NodeInfo {
        name: format!("node-{i:03}"),
        alloc: Ask { gpus: 8, cpu_milli: 128_000, mem_bytes: 1024 * GI },
        cordoned: false,
        ready: true,
        labels: BTreeMap::new(),
        taints: vec![],
        invalid: None,
    }
}

fn pod(i: u32, gpus: u32, est_min: i64) -> PodInfo {
    PodInfo {
        uid: format!("uid-{i:06}"),
        namespace: format!("team-{}", i % 7),
        name: format!("job-{i:06}"),
        scheduler: "ordo".into(),
        node: None,
        phase: Phase::Pending,
        terminating: false,
        created_ms: i as i64,
        bound_ms: None,
        ask: Ask { gpus, cpu_milli: 4_000 * gpus as u64, mem_bytes: 32 * GI * gpus as u64 },
        gang: None,
        user: format!("user-{}", i % 13),
        estimate_ms: Some(est_min * 60_000),
        priority: 0,
        node_selector: BTreeMap::new(),
        affinity: false,
        tolerations: vec![],
        invalid: None,
        waiting_message: None,
        owner: None,
    }
}

/// An engine over 100 nodes full of running pods, with `pending` pods waiting, and the uids
/// of the pods it bound.
fn loaded(policy: &str, pending: u32) -> (Engine, Vec<String>) {
    let mut e = Engine::new(EngineConfig::new("ordo", policy.parse().expect("policy")));
    e.nodes_listed((0..100).map(node).collect());
    let pods = (0..800 + pending).map(|i| pod(i, shape(i).0, shape(i).1)).collect();
    e.pods_listed(pods, 1_000_000);
    let out = e.pass(1_000_000);
    (e, out.binds.into_iter().map(|b| b.uid).collect())
}

/// GPUs and estimate (minutes) of pod `i`: 1, 2, 4 or 8 GPUs, 1 minute to 4 hours.
fn shape(i: u32) -> (u32, i64) {
    let x = (i as u64 + 7).wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ([1, 1, 1, 2, 2, 4, 8][(x >> 33) as usize % 7], 1 + (x >> 40) as i64 % 240)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("kube_pass");
    g.sample_size(20);
    for policy in ["fifo", "sjf+easy", "las"] {
        // The common pass: one running pod ended, one new pod arrived. Passes 1 ms apart: the
        // explained plan (every waiting pod's reason, for conditions) runs at most once a
        // second, so this is the deciding pass. Passes a minute apart: every one explained.
        for (what, step) in [("decide", 1), ("decide_and_explain", 60_000)] {
            let (mut e, mut running) = loaded(policy, 10_000);
            let mut now = 2_000_000;
            let mut next = 10_800;
            g.bench_function(BenchmarkId::new(format!("{what}_10000_pending"), policy), |b| {
                b.iter(|| {
                    now += step;
                    if !running.is_empty() {
                        let uid = running.remove(0);
                        e.pod_gone(&uid, now);
                    }
                    e.pod_event(pod(next, shape(next).0, shape(next).1), now);
                    next += 1;
                    let out = e.pass(now);
                    running.extend(out.binds.into_iter().map(|b| b.uid));
                    out.notes.len()
                })
            });
        }
        // After a relist of the nodes: ordo-core's state rebuilt from every pod and node.
        let (mut e, _) = loaded(policy, 10_000);
        let mut now = 2_000_000;
        g.bench_function(BenchmarkId::new("rebuild_10000_pending", policy), |b| {
            b.iter(|| {
                now += 1;
                e.nodes_listed((0..100).map(node).collect());
                e.pass(now).notes.len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
