//! The engine alone (no API server): random pods on random nodes, the kubelet played by ending
//! each bound pod after its estimate. Invariants: no node holds more GPUs than it has, no pod
//! is bound twice, every pod that fits some node it qualifies for ends exactly once, each pod is
//! bound only to a node it qualifies for (nodeSelector, node affinity, taints), ordo-core stays
//! consistent, and the same input gives the same bindings.
#![allow(clippy::unwrap_used)]

mod fixtures;

use ordo_kube::affinity::{Requirement, Taint, Term, Toleration};
use ordo_kube::objects::{NodeInfo, PodInfo};
use ordo_kube::{Engine, EngineConfig};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Runs the engine to the end; returns every binding as (time, pod, node).
fn run(policy: &str, nodes: &[u32], pods: &[(u32, i64)]) -> Vec<(i64, String, String)> {
    let nodes: Vec<NodeInfo> = nodes.iter().enumerate().map(|(i, &g)| fixtures::node(i as u32, g)).collect();
    let pods = pods.iter().enumerate().map(|(i, &(g, est))| fixtures::pod(i as u32, g, est)).collect();
    run_on(policy, nodes, pods)
}

/// Runs the engine over these nodes and pods to the end; returns every binding.
fn run_on(policy: &str, nodes: Vec<NodeInfo>, all: Vec<PodInfo>) -> Vec<(i64, String, String)> {
    run_with(EngineConfig::new("ordo", policy.parse().unwrap()), nodes, all)
}

/// [`run_on`] with the engine's settings given.
fn run_with(cfg: EngineConfig, nodes: Vec<NodeInfo>, all: Vec<PodInfo>) -> Vec<(i64, String, String)> {
    let policy = cfg.policy.to_string();
    let mut e = Engine::new(cfg);
    let cap: BTreeMap<String, u32> = nodes.iter().map(|n| (n.name.clone(), n.alloc.gpus)).collect();
    let node_of: HashMap<String, NodeInfo> = nodes.iter().map(|n| (n.name.clone(), n.clone())).collect();
    e.nodes_listed(nodes.clone());
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
            if let Err(why) = by_uid[&b.uid].qualifies(&node_of[&b.node]) {
                panic!("{} bound to {}, which does not qualify: {why}", b.uid, b.node);
            }
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
    for p in &all {
        if nodes.iter().any(|n| n.alloc.gpus >= p.ask.gpus && p.qualifies(n).is_ok()) {
            assert!(ended.contains(&p.uid), "{} ({} GPUs) never ended under {policy}", p.uid, p.ask.gpus);
        } else {
            assert!(!ended.contains(&p.uid), "{} ran where it does not fit or qualify", p.uid);
        }
    }
    binds
}

/// Node `i` of `gpus` GPUs: GPU model `a` (80 GiB) or `b` (16 GiB), maybe tainted
/// `dedicated=infer:NoSchedule`.
fn typed_node(i: u32, gpus: u32, model_a: bool, tainted: bool) -> NodeInfo {
    let mut n = fixtures::node(i, gpus);
    let (model, mem) = if model_a { ("a", "81920") } else { ("b", "16384") };
    n.labels.insert("gpu".into(), model.into());
    n.labels.insert("nvidia.com/gpu.memory".into(), mem.into());
    n.gpu_model = Some(model.into());
    if tainted {
        n.taints.push(Taint { key: "dedicated".into(), value: "infer".into(), effect: "NoSchedule".into() });
    }
    n
}

/// Pod `i` with constraint `k` of a small menu: none, nodeSelector gpu=a, gpu NotIn [a],
/// gpu=a tolerating the taint, tolerating everything, memory Gt 20000.
fn typed_pod(i: u32, gpus: u32, est: i64, k: u8) -> PodInfo {
    let mut p = fixtures::pod(i, gpus, est);
    let req = |key: &str, op: &str, v: &[&str]| {
        Some(vec![Term {
            exprs: vec![Requirement {
                key: key.into(),
                operator: op.into(),
                values: v.iter().map(|s| s.to_string()).collect(),
            }],
            fields: vec![],
        }])
    };
    let c = &mut p.constraints;
    match k {
        1 => drop(c.node_selector.insert("gpu".into(), "a".into())),
        2 => c.required = req("gpu", "NotIn", &["a"]),
        3 => {
            c.node_selector.insert("gpu".into(), "a".into());
            c.tolerations.push(Toleration {
                key: "dedicated".into(),
                operator: "Equal".into(),
                value: "infer".into(),
                effect: "NoSchedule".into(),
            });
        }
        4 => c.tolerations.push(Toleration { operator: "Exists".into(), ..Toleration::default() }),
        5 => c.required = req("nvidia.com/gpu.memory", "Gt", &["20000"]),
        _ => {}
    }
    p
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Nodes of two GPU models, some tainted; pods with nodeSelectors, node affinity and
    /// tolerations: each is bound only where it qualifies, and every one that fits a node it
    /// qualifies for ends.
    #[test]
    fn pods_are_bound_only_where_they_qualify(
        policy in prop::sample::select(vec!["fifo", "sjf+easy", "fifo+conservative", "las"]),
        nodes in prop::collection::vec((prop::sample::select(vec![2u32, 4, 8]), any::<bool>(), prop::bool::weighted(0.3)), 1..5),
        pods in prop::collection::vec((prop::sample::select(vec![1u32, 1, 2, 4, 8]), 1_000i64..600_000, 0u8..6), 1..24),
    ) {
        let n: Vec<NodeInfo> = nodes.iter().enumerate().map(|(i, &(g, a, t))| typed_node(i as u32, g, a, t)).collect();
        let p: Vec<PodInfo> = pods.iter().enumerate().map(|(i, &(g, est, k))| typed_pod(i as u32, g, est, k)).collect();
        let a = run_on(policy, n.clone(), p.clone());
        let b = run_on(policy, n, p);
        prop_assert_eq!(a, b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Nodes of one size labelled in blocks of two (some nodes unlabelled: a block of their
    /// own) and zones of two blocks, pods alone and gangs of two, some gangs asking
    /// `required:block` or `preferred:block`: every invariant of `run_with` holds, every pod
    /// ends, each gang that requires a block is bound within one, and the same input gives the
    /// same bindings.
    #[test]
    fn topology_labels_keep_every_invariant_and_required_gangs_stay_in_a_block(
        policy in prop::sample::select(vec!["fifo", "sjf+easy", "fifo+conservative", "las"]),
        gpus in prop::sample::select(vec![2u32, 4, 8]),
        labelled in prop::collection::vec(prop::bool::weighted(0.85), 2..8),
        pods in prop::collection::vec((1u32..=8, 1_000i64..600_000, 0u8..4), 1..16),
    ) {
        // Pairs of nodes share a block; a node without the label is its own unit, so a
        // required gang needs a pair both labelled: node 0 and 1 always are.
        let nodes: Vec<NodeInfo> = labelled
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let mut n = fixtures::node(i as u32, gpus);
                if l || i < 2 {
                    n.labels.insert("example.com/block".into(), format!("b{}", i / 2));
                }
                n.labels.insert("topology.kubernetes.io/zone".into(), format!("z{}", i / 4));
                n
            })
            .collect();
        let mut all = Vec::new();
        let mut strict = Vec::new();
        for (i, &(g, est, kind)) in pods.iter().enumerate() {
            let g = g.min(gpus);
            let base = 10 * i as u32;
            match kind {
                0 => all.push(fixtures::pod(base, g, est)),
                k => {
                    // Gangs of whole nodes: a gang whose pods split the nodes unevenly (two pods
                    // of 5 GPUs on 8-GPU nodes) is placed as 8 + 2 GPUs and waits, saying its
                    // pods cannot be split, with or without a topology (docs/KUBERNETES.md).
                    let g = gpus;
                    let ask = [None, Some("required:block"), Some("preferred:block")][k as usize - 1];
                    let name = format!("g{i}");
                    for j in 0..2 {
                        let mut p = fixtures::pod(base + j, g, est);
                        p.namespace = "ns".into();
                        p.gang = Some(ordo_kube::objects::GangRef { name: name.clone(), size: 2 });
                        p.topology = ask.map(|a| a.parse().unwrap());
                        if k == 2 {
                            strict.push((p.uid.clone(), name.clone()));
                        }
                        all.push(p);
                    }
                }
            }
        }
        let mut cfg = EngineConfig::new("ordo", policy.parse().unwrap());
        cfg.topology_labels = "example.com/block=block,topology.kubernetes.io/zone=zone".parse().unwrap();
        let a = run_with(cfg.clone(), nodes.clone(), all.clone());
        // A gang that requires a block: each run of it (its pods bound at one time) in one.
        let block = |node: &str| nodes.iter().find(|n| n.name == node).unwrap().labels.get("example.com/block").cloned();
        let mut runs: BTreeMap<(String, i64), Vec<Option<String>>> = BTreeMap::new();
        for (t, uid, node) in &a {
            if let Some((_, g)) = strict.iter().find(|(u, _)| u == uid) {
                runs.entry((g.clone(), *t)).or_default().push(block(node));
            }
        }
        for ((g, t), blocks) in &runs {
            prop_assert_eq!(blocks.len(), 2, "gang {} at {}", g, t);
            prop_assert!(blocks[0].is_some() && blocks[0] == blocks[1], "gang {} at {} across {:?}", g, t, blocks);
        }
        prop_assert_eq!(a, run_with(cfg, nodes, all));
    }
}

/// A gang's GPUs come from nodes of one kind: over two 4-GPU nodes of different GPU models a
/// gang of two 4-GPU pods waits and says why; over two of one model it is bound.
#[test]
fn a_gang_is_placed_on_one_gpu_model_and_says_so_when_there_is_none() {
    for (same, bound) in [(false, false), (true, true)] {
        let mut e = Engine::new(EngineConfig::new("ordo", "fifo".parse().unwrap()));
        e.nodes_listed(vec![typed_node(0, 4, true, false), typed_node(1, 4, same, false)]);
        let gang: Vec<PodInfo> = (0..2)
            .map(|i| {
                let mut p = fixtures::pod(i, 4, 60_000);
                p.namespace = "ns".into();
                p.gang = Some(ordo_kube::objects::GangRef { name: "g".into(), size: 2 });
                p
            })
            .collect();
        e.pods_listed(gang, 1_000_000);
        let out = e.pass(1_000_000);
        assert_eq!(out.binds.len() == 2, bound, "{:?}", out.binds);
        if !bound {
            let q = e.queue(1_000_000);
            assert_eq!(
                q.waiting[0].wait.text,
                "gang of 2 pods needs 8 nvidia.com/gpu in all on nodes of one kind (one GPU model and memory, the same qualifying sets), and the most on one kind is 4; it waits until there are more"
            );
        }
    }
}

/// The reasons a pod's conditions give when no node qualifies, or only full ones do (nodes
/// counted under the first check they fail, the most common first).
#[test]
fn a_pod_says_which_terms_the_nodes_fail() {
    let mut e = Engine::new(EngineConfig::new("ordo", "fifo".parse().unwrap()));
    e.nodes_listed(vec![typed_node(0, 4, true, false), typed_node(1, 4, false, false), typed_node(2, 4, false, true)]);
    // Model a with more than 80 GiB: no node (node 0 has 80 GiB, node 1 is model b, node 2 is
    // tainted, which is checked first); gpu=a: node 0, which a 4-GPU pod fills.
    let mut never = typed_pod(0, 1, 60_000, 1);
    never.constraints.required = Some(vec![Term {
        exprs: vec![Requirement {
            key: "nvidia.com/gpu.memory".into(),
            operator: "Gt".into(),
            values: vec!["81920".into()],
        }],
        fields: vec![],
    }]);
    let big = typed_pod(1, 4, 3_600_000, 1);
    let small = typed_pod(2, 1, 60_000, 1);
    e.pods_listed(vec![never, big, small], 1_000_000);
    let out = e.pass(1_000_000);
    assert_eq!(
        out.binds.iter().map(|b| (b.uid.as_str(), b.node.as_str())).collect::<Vec<_>>(),
        [("uid-000001", "node-000")]
    );
    let q = e.queue(1_000_000);
    let text = |uid: &str| {
        let name = format!("team-{}/job-{:06}", uid[4..].parse::<u32>().unwrap() % 7, uid[4..].parse::<u32>().unwrap());
        q.waiting.iter().find(|l| l.pods == [name.clone()]).map(|l| l.wait.text.clone()).unwrap()
    };
    assert_eq!(
        text("uid-000000"),
        "0/3 nodes qualify: 1 node affinity nvidia.com/gpu.memory Gt 81920 not met, 1 node selector gpu=a not met, 1 untolerated taint dedicated=infer:NoSchedule; it waits until one does"
    );
    // Node 1 has room but another model; node 2 is tainted (checked first).
    assert!(
        text("uid-000002").starts_with(
            "0/2 nodes with room qualify: 1 node selector gpu=a not met, 1 untolerated taint dedicated=infer:NoSchedule; needs 1 nvidia.com/gpu, 4 CPU and 32Gi of memory on one node; the most free on any qualifying node is 0; position 1"
        ),
        "{}",
        text("uid-000002")
    );
}

/// An incomplete gang that arrives just after an explained pass, while nothing else waits,
/// still says why it waits at the next explained pass: the engine asks to be woken for it
/// (it once asked for nothing, and the gang's pods stayed silent until some other event).
#[test]
fn an_incomplete_gang_says_why_without_another_event() {
    let mut e = Engine::new(EngineConfig::new("ordo", "fifo".parse().unwrap()));
    e.nodes_listed(vec![fixtures::node(0, 4), fixtures::node(1, 4)]);
    let t0 = 1_000_000;
    let x = fixtures::pod(0, 4, 3_600_000);
    e.pods_listed(vec![x.clone()], t0);
    let out = e.pass(t0);
    assert!(out.explained);
    assert_eq!(out.binds.len(), 1, "{:?}", out.binds);
    let mut bound = x;
    bound.node = Some(out.binds[0].node.clone());
    e.pod_event(bound, t0);
    let gang = |i: u32| {
        let mut p = fixtures::pod(i, 2, 60_000);
        p.namespace = "ns".into();
        p.gang = Some(ordo_kube::objects::GangRef { name: "train".into(), size: 3 });
        p
    };
    e.pod_event(gang(1), t0 + 100);
    e.pod_event(gang(2), t0 + 100);
    let out = e.pass(t0 + 100);
    assert!(!out.explained && out.notes.is_empty());
    let wake = out.wake_at.expect("a pass is due to say why the gang waits");
    assert!(wake <= t0 + 1_100, "woken at {wake}");
    let out = e.pass(wake);
    assert!(out.explained);
    let texts: Vec<&str> = out.notes.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts.iter().all(|t| t.contains("gang ns/train has 2 of its 3 pods")), "{texts:?}");
    // Said: no further wake-up for it.
    assert_eq!(e.pass(wake + 5_000).wake_at, None);
}

/// Node `i` of 8 GPUs in block `block` (label `example.com/block`, none when empty) and zone
/// `zone` (`topology.kubernetes.io/zone`).
fn placed_node(i: u32, block: &str, zone: &str) -> NodeInfo {
    let mut n = fixtures::node(i, 8);
    if !block.is_empty() {
        n.labels.insert("example.com/block".into(), block.into());
    }
    n.labels.insert("topology.kubernetes.io/zone".into(), zone.into());
    n
}

fn topo_config(labels: &str) -> EngineConfig {
    let mut cfg = EngineConfig::new("ordo", "fifo".parse().unwrap());
    cfg.topology_labels = labels.parse().unwrap();
    cfg
}

/// Gang `name` of 2 pods of 8 GPUs (uids from `first`), asking `ask` (`ordo.dev/topology`).
fn gang_of_two(first: u32, name: &str, ask: Option<&str>) -> Vec<PodInfo> {
    (first..first + 2)
        .map(|i| {
            let mut p = fixtures::pod(i, 8, 3_600_000);
            p.namespace = "ns".into();
            p.gang = Some(ordo_kube::objects::GangRef { name: name.into(), size: 2 });
            p.topology = ask.map(|a| a.parse().unwrap());
            p
        })
        .collect()
}

/// The block of each bound node, by the nodes' labels.
fn blocks_of(binds: &[ordo_kube::engine::Bind], nodes: &[NodeInfo]) -> Vec<String> {
    binds.iter().map(|b| nodes.iter().find(|n| n.name == b.node).unwrap().labels["example.com/block"].clone()).collect()
}

/// With `--topology-labels`, a gang of two whole nodes lands within one block (the blocks
/// alternate in node order, so the consolidated rule alone takes nodes of two blocks: checked
/// too, without the labels).
#[test]
fn a_gang_lands_within_one_labelled_block() {
    let nodes: Vec<NodeInfo> =
        ["a", "b", "a", "b"].iter().enumerate().map(|(i, b)| placed_node(i as u32, b, "z1")).collect();
    let mut by_labels = Vec::new();
    for labels in ["example.com/block=block,topology.kubernetes.io/zone", ""] {
        let mut e = Engine::new(topo_config(labels));
        e.nodes_listed(nodes.clone());
        e.pods_listed(gang_of_two(0, "g", None), 1_000_000);
        let out = e.pass(1_000_000);
        e.sanity_check().unwrap();
        assert_eq!(out.binds.len(), 2, "{:?}", out.binds);
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        by_labels.push(blocks_of(&out.binds, &nodes));
    }
    assert_eq!(by_labels[0], ["a", "a"], "with the labels: one block");
    assert_eq!(by_labels[1], ["a", "b"], "without: the first idle nodes, across blocks");
}

/// A gang that requires a block waits while no block holds it, its pods' condition giving
/// ordo-core's reason, while the same gang preferring a block is spread; it is bound within
/// one block once one has room. A level the labels do not give is said, not a panic.
#[test]
fn a_gang_that_requires_a_block_waits_with_the_reason_and_lands_within_one() {
    let labels = "example.com/block=block,topology.kubernetes.io/zone=zone";
    let nodes: Vec<NodeInfo> =
        ["a", "a", "b", "b"].iter().enumerate().map(|(i, b)| placed_node(i as u32, b, "z1")).collect();
    let t0 = 1_000_000;
    // Pods of 4 GPUs bound on node-000 (block a) and node-002 (block b): 12 free in each block.
    let running: Vec<PodInfo> = [0u32, 2]
        .iter()
        .map(|&n| {
            let mut p = fixtures::pod(100 + n, 4, 3_600_000);
            p.node = Some(format!("node-{n:03}"));
            p.bound_ms = Some(t0 - 1000);
            p
        })
        .collect();
    for (ask, bound) in [("preferred:block", true), ("required:block", false)] {
        let mut e = Engine::new(topo_config(labels));
        e.nodes_listed(nodes.clone());
        let mut pods = running.clone();
        pods.extend(gang_of_two(0, "g", Some(ask)));
        e.pods_listed(pods, t0);
        let out = e.pass(t0);
        e.sanity_check().unwrap();
        if bound {
            assert_eq!(blocks_of(&out.binds, &nodes), ["a", "b"], "{ask}: spread, as no block holds it");
            continue;
        }
        assert!(out.binds.is_empty(), "{ask}: {:?}", out.binds);
        let texts: Vec<&str> = out.notes.iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        for t in &texts {
            assert!(
                t.starts_with(
                    "gang of 2 pods needs 16 GPUs within one block; the most free in any block is 12; position 1"
                ),
                "{t}"
            );
        }
        assert!(out.notes.iter().all(|n| n.shortage && n.event));
        // The pod on node-000 ends: block a is free for it.
        e.pod_gone("uid-000100", t0 + 5_000);
        let out = e.pass(t0 + 5_000);
        e.sanity_check().unwrap();
        assert_eq!(blocks_of(&out.binds, &nodes), ["a", "a"]);
        let mut on: Vec<&str> = out.binds.iter().map(|b| b.node.as_str()).collect();
        on.sort();
        assert_eq!(on, ["node-000", "node-001"]);
    }
    // A level the labels do not give: held, saying so.
    let mut e = Engine::new(topo_config(labels));
    e.nodes_listed(nodes.clone());
    e.pods_listed(gang_of_two(0, "g", Some("required:rack")), t0);
    let out = e.pass(t0);
    assert!(out.binds.is_empty());
    let texts: Vec<&str> = out.notes.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(
        texts,
        ["ordo.dev/topology `required:rack`: topology level `rack` is not one of this cluster's levels (block, zone); it waits until it names one of them"; 2]
    );
}

/// Labels that put a block in two zones give no topology: said once in the log and the audit
/// log, gangs are placed without it, and one that requires a level waits saying why; fixed
/// labels give it back.
#[test]
fn labels_with_a_unit_under_two_parents_are_reported_and_scheduling_goes_on() {
    let mut nodes: Vec<NodeInfo> =
        ["a", "b", "a", "b"].iter().enumerate().map(|(i, b)| placed_node(i as u32, b, "z1")).collect();
    nodes[2].labels.insert("topology.kubernetes.io/zone".into(), "z2".into());
    let mut e = Engine::new(topo_config("example.com/block,topology.kubernetes.io/zone"));
    e.nodes_listed(nodes.clone());
    let t0 = 1_000_000;
    let mut pods = gang_of_two(0, "plain", None);
    pods.extend(gang_of_two(2, "strict", Some("required:block")));
    e.pods_listed(pods, t0);
    let out = e.pass(t0);
    e.sanity_check().unwrap();
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(
        out.warnings[0].contains(
            "give no topology: block `a` is under two units of level zone, `z1` (node `node-000`) and `z2` (node `node-002`); each unit has one parent"
        ),
        "{}",
        out.warnings[0]
    );
    assert_eq!(out.audit.iter().filter(|d| d.kind == "topology").count(), 1);
    // The gang without an ask is bound (the first idle nodes, as without topology); the one
    // that requires a block waits, saying why.
    assert_eq!(out.binds.iter().map(|b| b.node.as_str()).collect::<Vec<_>>(), ["node-000", "node-001"]);
    let strict: Vec<&str> =
        out.notes.iter().filter(|n| n.uid.as_str() >= "uid-000002").map(|n| n.text.as_str()).collect();
    assert_eq!(strict.len(), 2);
    assert!(
        strict[0].starts_with("ordo.dev/topology `required:block`, but the nodes' topology labels give no topology (block `a` is under two units"),
        "{}",
        strict[0]
    );
    // Reported once, not at every rebuild.
    e.nodes_listed(nodes.clone());
    let out = e.pass(t0 + 1_000);
    assert!(out.warnings.is_empty() && !out.audit.iter().any(|d| d.kind == "topology"), "{:?}", out.warnings);
    // Fixed: the topology is back (said), and the strict gang waits for a block (the plain
    // gang holds a node of each), then is placed within one.
    nodes[2].labels.insert("topology.kubernetes.io/zone".into(), "z1".into());
    e.node_event(nodes[2].clone());
    let out = e.pass(t0 + 2_000);
    e.sanity_check().unwrap();
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("give a topology again"), "{}", out.warnings[0]);
    assert!(out.binds.is_empty(), "{:?}", out.binds);
    let strict: Vec<&str> = out.notes.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(strict.len(), 2);
    assert!(
        strict[0].starts_with("gang of 2 pods needs 16 GPUs within one block; the most free in any block is 8"),
        "{}",
        strict[0]
    );
    e.pod_gone("uid-000000", t0 + 3_000);
    e.pod_gone("uid-000001", t0 + 3_000);
    let out = e.pass(t0 + 3_000);
    e.sanity_check().unwrap();
    assert_eq!(blocks_of(&out.binds, &nodes), ["a", "a"]);
}
