//! The engine alone (no API server): random pods on random nodes, the kubelet played by ending
//! each bound pod after its estimate. Invariants: no node holds more GPUs than it has, no pod
//! is bound twice, every pod that fits some node ends exactly once, ordo-core stays consistent,
//! and the same input gives the same bindings.
#![allow(clippy::unwrap_used)]

mod fixtures;

use ordo_kube::{Engine, EngineConfig};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Runs the engine to the end; returns every binding as (time, pod, node).
fn run(policy: &str, nodes: &[u32], pods: &[(u32, i64)]) -> Vec<(i64, String, String)> {
    let mut e = Engine::new(EngineConfig::new("ordo", policy.parse().unwrap()));
    let cap: BTreeMap<String, u32> = nodes.iter().enumerate().map(|(i, &g)| (format!("node-{i:03}"), g)).collect();
    e.nodes_listed(nodes.iter().enumerate().map(|(i, &g)| fixtures::node(i as u32, g)).collect());
    let all: Vec<_> = pods.iter().enumerate().map(|(i, &(g, est))| fixtures::pod(i as u32, g, est)).collect();
    let by_uid: HashMap<String, _> = all.iter().map(|p| (p.uid.clone(), p.clone())).collect();
    let mut now = 1_000_000;
    e.pods_listed(all.clone(), now);
    let mut running: BTreeMap<String, (String, i64)> = BTreeMap::new(); // uid -> (node, ends at)
    let mut ended: HashSet<String> = HashSet::new();
    let mut binds = Vec::new();
    let mut quiet = 0;
    for _ in 0..10_000 {
        let out = e.pass(now);
        e.sanity_check().unwrap();
        let evicted = !out.evictions.is_empty();
        for ev in out.evictions {
            assert!(running.remove(&ev.uid).is_some(), "evicted {} which does not run", ev.uid);
            assert!(ended.insert(ev.uid.clone()));
            e.pod_gone(&ev.uid, now);
        }
        for b in &out.binds {
            assert!(!running.contains_key(&b.uid) && !ended.contains(&b.uid), "{} bound twice", b.uid);
            let mut p = by_uid[&b.uid].clone();
            p.node = Some(b.node.clone());
            running.insert(b.uid.clone(), (b.node.clone(), now + p.estimate_ms.unwrap()));
            binds.push((now, b.uid.clone(), b.node.clone()));
            e.pod_event(p, now);
        }
        for (node, gpus) in &cap {
            let used: u32 = running.iter().filter(|(_, (n, _))| n == node).map(|(u, _)| by_uid[u].ask.gpus).sum();
            assert!(used <= *gpus, "{node}: {used} GPUs bound of {gpus}");
        }
        // Next: the earliest end, or the engine's wake-up.
        let next_end = running.values().map(|(_, t)| *t).min();
        // Nothing runs and three passes in a row changed nothing: what waits never fits.
        quiet = if running.is_empty() && out.binds.is_empty() && !evicted { quiet + 1 } else { 0 };
        let next = match (next_end, out.wake_at) {
            _ if quiet >= 3 => break,
            (Some(a), Some(b)) => a.min(b).max(now + 1),
            (Some(a), None) => a.max(now + 1),
            (None, Some(b)) => b.max(now + 1),
            (None, None) => now + 1,
        };
        now = next;
        let done: Vec<String> = running.iter().filter(|(_, (_, t))| *t <= now).map(|(u, _)| u.clone()).collect();
        for uid in done {
            running.remove(&uid);
            assert!(ended.insert(uid.clone()));
            e.pod_gone(&uid, now);
        }
    }
    let largest = nodes.iter().copied().max().unwrap_or(0);
    for p in &all {
        if p.ask.gpus <= largest {
            assert!(ended.contains(&p.uid), "{} ({} GPUs) never ended under {policy}", p.uid, p.ask.gpus);
        }
    }
    binds
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_the_same_input_gives_the_same_bindings(
        policy in prop::sample::select(vec!["fifo", "sjf+easy", "fifo+conservative", "las"]),
        nodes in prop::collection::vec(prop::sample::select(vec![2u32, 4, 8]), 1..4),
        pods in prop::collection::vec((prop::sample::select(vec![1u32, 1, 2, 4, 8, 16]), 1_000i64..600_000), 1..24),
    ) {
        let a = run(policy, &nodes, &pods);
        let b = run(policy, &nodes, &pods);
        prop_assert_eq!(a, b);
    }
}
