//! Criterion benchmark: one pass of `ordo kube`'s engine (ordo-core's `Scheduler` plus the
//! pod bookkeeping, reasons and audit records) with 10,000 pending pods on 100 nodes of 8 GPUs;
//! `typed`: the nodes of two GPU models (labels), every tenth tainted, and 30% of the pods with a
//! nodeSelector on a model (some tolerating every taint).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ordo_kube::{Engine, EngineConfig};

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;

const PRODUCT: &str = "nvidia.com/gpu.product";

fn model(i: u32) -> &'static str {
    if i.is_multiple_of(2) {
        "NVIDIA-A100-SXM4-80GB"
    } else {
        "Tesla-V100-SXM2-32GB"
    }
}

fn node(i: u32, typed: bool) -> ordo_kube::objects::NodeInfo {
    let mut n = fixtures::node(i, 8);
    if typed {
        n.labels.insert(PRODUCT.into(), model(i).into());
        n.gpu_model = Some(model(i).into());
        if i % 10 == 9 {
            n.taints.push(ordo_kube::affinity::Taint {
                key: "dedicated".into(),
                value: "infer".into(),
                effect: "NoSchedule".into(),
            });
        }
    }
    n
}

fn pod(i: u32, gpus: u32, est_min: i64, typed: bool) -> ordo_kube::objects::PodInfo {
    let mut p = fixtures::pod(i, gpus, est_min * 60_000);
    if typed && i % 10 < 3 {
        p.constraints.node_selector.insert(PRODUCT.into(), model(i / 10).into());
        if i.is_multiple_of(20) {
            p.constraints
                .tolerations
                .push(ordo_kube::affinity::Toleration { operator: "Exists".into(), ..Default::default() });
        }
    }
    p
}

/// An engine over 100 nodes full of running pods, with `pending` pods waiting, and the uids
/// of the pods it bound.
fn loaded(policy: &str, pending: u32, typed: bool) -> (Engine, Vec<String>) {
    let mut e = Engine::new(EngineConfig::new("ordo", policy.parse().expect("policy")));
    e.nodes_listed((0..100).map(|i| node(i, typed)).collect());
    let pods = (0..800 + pending).map(|i| pod(i, shape(i).0, shape(i).1, typed)).collect();
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
    for (policy, typed) in [("fifo", false), ("sjf+easy", false), ("las", false), ("fifo", true), ("sjf+easy", true)] {
        let tag = if typed { "_typed" } else { "" };
        // The common pass: one running pod ended, one new pod arrived. Passes 1 ms apart: the
        // explained plan (every waiting pod's reason, for conditions) runs at most once a
        // second, so this is the deciding pass. Passes a minute apart: every one explained.
        for (what, step) in [("decide", 1), ("decide_and_explain", 60_000)] {
            let (mut e, mut running) = loaded(policy, 10_000, typed);
            let mut now = 2_000_000;
            let mut next = 10_800;
            g.bench_function(BenchmarkId::new(format!("{what}_10000_pending{tag}"), policy), |b| {
                b.iter(|| {
                    now += step;
                    if !running.is_empty() {
                        let uid = running.remove(0);
                        e.pod_gone(&uid, now);
                    }
                    e.pod_event(pod(next, shape(next).0, shape(next).1, typed), now);
                    next += 1;
                    let out = e.pass(now);
                    running.extend(out.binds.into_iter().map(|b| b.uid));
                    out.notes.len()
                })
            });
        }
        // After a relist of the nodes: ordo-core's state rebuilt from every pod and node.
        let (mut e, _) = loaded(policy, 10_000, typed);
        let mut now = 2_000_000;
        g.bench_function(BenchmarkId::new(format!("rebuild_10000_pending{tag}"), policy), |b| {
            b.iter(|| {
                now += 1;
                e.nodes_listed((0..100).map(|i| node(i, typed)).collect());
                e.pass(now).notes.len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
