//! The scheduler against a real kube-apiserver: order under fifo, sjf+easy and las (with
//! eviction), gangs all or none, reasons in pod conditions and Events, nodes removed, cordoned
//! and added. Each test has its own namespace, node pool and scheduler name.
#![allow(clippy::unwrap_used)]

mod common;
use common::{bound, Cluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_keeps_strict_order_and_says_why_pods_wait() {
    let Some(c) = Cluster::new("fifo").await else { return };
    c.node("n1", 4).await;
    let s = c.start("fifo").await;
    c.pod("a", 2, json!({})).await;
    c.wait_for("a bound", 20, |s| bound(s) == ["a"]).await;
    // b needs 4 GPUs (2 free): it waits; c needs 1 and would fit, but strict FIFO keeps it
    // behind b; d is deleted while it waits.
    c.pod("b", 4, json!({})).await;
    c.pod("c", 1, json!({})).await;
    c.pod("d", 1, json!({})).await;
    c.wait_for("reasons for b and c", 20, |s| s["b"].1.is_some() && s["c"].1.is_some()).await;
    let b = c.message("b").await.unwrap();
    assert!(
        b.starts_with(
            "needs 4 nvidia.com/gpu, 1 CPU and 1Gi of memory on one node; the most free on any node is 2; position 1"
        ),
        "{b}"
    );
    assert!(b.contains("expected start"), "{b}");
    let m = c.message("c").await.unwrap();
    assert!(m.starts_with(&format!("waiting behind {}/b under fifo", c.name)), "{m}");
    assert!(m.contains("position 2"), "{m}");
    let failed =
        |(t, r, m): &(String, String, String)| t == "Warning" && r == "FailedScheduling" && m.contains("needs 4");
    let ev = c.events_once("b", 20, failed).await;
    assert!(ev.iter().any(failed), "{ev:?}");
    let waiting =
        |(t, r, m): &(String, String, String)| t == "Normal" && r == "Waiting" && m.contains("waiting behind");
    let ev = c.events_once("c", 20, waiting).await;
    assert!(ev.iter().any(waiting), "{ev:?}");
    assert_eq!(bound(&c.state().await), ["a"]);
    c.force_delete("d").await;
    // a ends: b starts (alone: it takes the node), then c once b ends.
    c.set_phase("a", "Running").await;
    c.set_phase("a", "Succeeded").await;
    c.wait_for("b bound", 20, |s| s["b"].0.is_some()).await;
    assert!(c.state().await["c"].0.is_none());
    c.assert_no_overcommit().await;
    c.set_phase("b", "Succeeded").await;
    c.wait_for("c bound", 20, |s| s["c"].0.is_some()).await;
    let n1 = c.node_name("n1");
    let scheduled = |(_, r, m): &(String, String, String)| r == "Scheduled" && m.contains(&n1);
    assert!(c.events_once("a", 20, scheduled).await.iter().any(scheduled));
    s.stop().await;
    // The audit log has the decisions in the server's record shape.
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    let kinds: Vec<&str> = log.iter().map(|r| r.kind.as_str()).collect();
    for k in ["policy", "node", "submit", "start", "skip", "end"] {
        assert!(kinds.contains(&k), "no `{k}` record in {kinds:?}");
    }
    assert!(log.iter().all(|r| r.policy == "fifo"));
    let starts: Vec<String> =
        log.iter().filter(|r| r.kind == "start").map(|r| r.detail["pods"][0].as_str().unwrap().to_string()).collect();
    assert_eq!(starts, [format!("{}/a", c.name), format!("{}/b", c.name), format!("{}/c", c.name)]);
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sjf_easy_backfills_only_what_keeps_the_heads_reservation() {
    let Some(c) = Cluster::new("sjfeasy").await else { return };
    c.node("n1", 4).await;
    let s = c.start("sjf+easy").await;
    c.pod("r", 3, json!({"ordo.dev/estimate": "30m"})).await;
    c.wait_for("r bound", 20, |s| s["r"].0.is_some()).await;
    // sjf order: h (10m, 4 GPUs) first: it waits for r; s (20m) ends before r's estimate and
    // backfills; l (2h) would delay h, so it waits, reserved.
    c.pod("h", 4, json!({"ordo.dev/estimate": "10m"})).await;
    c.wait_for("h's reason", 20, |s| s["h"].1.is_some()).await;
    c.pod("l", 1, json!({"ordo.dev/estimate": "2h"})).await;
    c.wait_for("l's reason", 20, |s| s["l"].1.is_some()).await;
    c.pod("s", 1, json!({"ordo.dev/estimate": "20m"})).await;
    c.wait_for("s bound", 20, |s| s["s"].0.is_some()).await;
    let st = c.state().await;
    assert!(st["h"].0.is_none() && st["l"].0.is_none(), "{st:#?}");
    let l = st["l"].1.clone().unwrap();
    assert!(l.contains(&format!("reserved for {}/h under sjf+easy", c.name)), "{l}");
    c.assert_no_overcommit().await;
    s.stop().await;
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    let s_start = log.iter().find(|r| r.kind == "start" && r.detail["pods"][0] == format!("{}/s", c.name)).unwrap();
    assert_eq!(s_start.detail["backfill"], true, "{s_start:?}");
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn las_evicts_the_pod_with_the_most_service_for_a_new_one() {
    let Some(c) = Cluster::new("las").await else { return };
    c.node("n1", 2).await;
    // Queues split at 1 GPU-second of attained service.
    let s = c.start("las:thresholds=1").await;
    c.pod("old", 2, json!({})).await;
    c.wait_for("old bound", 20, |s| s["old"].0.is_some()).await;
    c.set_phase("old", "Running").await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // new has no service: it outranks old, which is evicted; new is bound once old is gone.
    c.pod("new", 1, json!({})).await;
    c.wait_for("old evicted", 20, |s| s["old"].2).await;
    let new = format!("{}/new", c.name);
    let preempted =
        |(_, r, m): &(String, String, String)| r == "Preempted" && m.contains("under las") && m.contains(&new);
    let ev = c.events_once("old", 20, preempted).await;
    assert!(ev.iter().any(preempted), "{ev:?}");
    assert!(c.state().await["new"].0.is_none(), "new bound before old left its GPUs");
    c.force_delete("old").await;
    c.wait_for("new bound", 20, |s| s.get("new").is_some_and(|p| p.0.is_some())).await;
    c.assert_no_overcommit().await;
    s.stop().await;
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    assert!(log.iter().any(|r| r.kind == "preempt" && r.detail["pods"][0] == format!("{}/old", c.name)));
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_is_bound_all_or_none() {
    let Some(c) = Cluster::new("gang").await else { return };
    c.node("n1", 4).await;
    c.node("n2", 4).await;
    let s = c.start("fifo").await;
    c.pod("x", 4, json!({})).await;
    c.wait_for("x bound", 20, |s| s["x"].0.is_some()).await;
    let g = json!({"ordo.dev/gang": "train", "ordo.dev/gang-size": "3"});
    c.pod("g-0", 2, g.clone()).await;
    c.pod("g-1", 2, g.clone()).await;
    c.wait_for("the incomplete gang's reason", 20, |s| s["g-0"].1.is_some()).await;
    let m = c.message("g-0").await.unwrap();
    assert!(m.contains(&format!("gang {}/train has 2 of its 3 pods", c.name)), "{m}");
    // Complete, but 6 GPUs across whole idle nodes while x holds one: none is bound.
    c.pod("g-2", 2, g.clone()).await;
    c.wait_for("the gang's reason", 20, |s| s["g-2"].1.as_deref().is_some_and(|m| m.contains("gang of 3 pods"))).await;
    let st = c.state().await;
    assert!(["g-0", "g-1", "g-2"].iter().all(|p| st[*p].0.is_none()), "{st:#?}");
    c.set_phase("x", "Succeeded").await;
    // All three, in one pass: the scheduler makes a gang's bindings concurrently, so the API
    // server may show them a moment apart (a CI run here read two of three); its audit log
    // says whether one decision started the whole gang.
    c.wait_for("the whole gang bound", 20, |s| ["g-0", "g-1", "g-2"].iter().all(|p| s[*p].0.is_some())).await;
    c.assert_no_overcommit().await;
    s.stop().await;
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    let names: Vec<String> = ["g-0", "g-1", "g-2"].iter().map(|p| format!("{}/{p}", c.name)).collect();
    let starts: Vec<&serde_json::Value> =
        log.iter().filter(|r| r.kind == "start" && r.detail["gang"].is_string()).map(|r| &r.detail).collect();
    assert_eq!(starts.len(), 1, "one start for the gang: {starts:?}");
    let pods = starts[0]["pods"].as_array().expect("pods");
    assert!(names.iter().all(|n| pods.iter().any(|p| p == n.as_str())), "{starts:?}");
    let in_part = |r: &&ordo_kube::audit::AuditRecord| r.detail["why"].as_str().is_some_and(|w| w.contains("in part"));
    assert!(!log.iter().any(|r| r.kind == "start" && in_part(&r)), "a gang bound in part");
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_removed_cordoned_and_added() {
    let Some(c) = Cluster::new("nodes").await else { return };
    c.node("n1", 2).await;
    c.node("n2", 4).await;
    let s = c.start("fifo").await;
    c.pod("x", 4, json!({})).await;
    c.wait_for("x bound", 20, |s| s["x"].0.is_some()).await;
    assert_eq!(c.node_of("x").await.unwrap(), c.node_name("n2"));
    // n2 goes away (its pods with it, as far as ordo is concerned).
    c.delete_node("n2").await;
    c.pod("y", 4, json!({})).await;
    c.wait_for("y's reason", 20, |s| s["y"].1.is_some()).await;
    let m = c.message("y").await.unwrap();
    assert!(m.contains("no open node of the pool is that large (the largest has 2 nvidia.com/gpu)"), "{m}");
    // y never fits, so it does not block z under fifo.
    c.pod("z", 2, json!({})).await;
    c.wait_for("z bound", 20, |s| s["z"].0.is_some()).await;
    // A cordoned node takes nothing new.
    c.cordon("n1", true).await;
    c.set_phase("z", "Succeeded").await;
    c.pod("w", 1, json!({})).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(c.state().await["w"].0.is_none());
    // A new node: y and w go there.
    c.node("n3", 8).await;
    c.wait_for("y and w bound", 20, |s| s["y"].0.is_some() && s["w"].0.is_some()).await;
    assert_eq!(c.node_of("y").await.unwrap(), c.node_name("n3"));
    c.assert_no_overcommit().await;
    s.stop().await;
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_scheduler_rebuilds_from_the_api_server_and_binds_nothing_twice() {
    let Some(c) = Cluster::new("restart").await else { return };
    c.node("n1", 4).await;
    let s = c.start("fifo").await;
    c.pod("a", 2, json!({})).await;
    c.pod("b", 2, json!({})).await;
    c.wait_for("a and b bound", 20, |s| bound(s) == ["a", "b"]).await;
    c.pod("c", 2, json!({})).await;
    c.wait_for("c's reason", 20, |s| s["c"].1.is_some()).await;
    s.stop().await;
    // While no scheduler runs: d arrives.
    c.pod("d", 1, json!({})).await;
    let s = c.start("fifo").await;
    // The new scheduler lists the pods: a and b hold the node, so c and d wait.
    c.wait_for("d's reason", 20, |s| s["d"].1.is_some()).await;
    let st = s.stats();
    assert_eq!((st.stats.binds, st.stats.conflicts), (0, 0), "{st:?}");
    assert_eq!(bound(&c.state().await), ["a", "b"]);
    c.set_phase("a", "Succeeded").await;
    c.wait_for("c bound", 20, |s| s["c"].0.is_some()).await;
    // The API server shows the binding before the scheduler has counted the answer: wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.stats().stats.binds == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let st = s.stats();
    assert_eq!((st.stats.binds, st.stats.conflicts), (1, 0), "{st:?}");
    c.assert_no_overcommit().await;
    s.stop().await;
    // One audit log across both runs: ids continue, each pod started once.
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    assert!(log.windows(2).all(|w| w[1].id == w[0].id + 1));
    let starts: Vec<&str> =
        log.iter().filter(|r| r.kind == "start").filter_map(|r| r.detail["pods"][0].as_str()).collect();
    assert_eq!(starts, [format!("{}/a", c.name), format!("{}/b", c.name), format!("{}/c", c.name)]);
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_refused_with_409_leaves_the_pod_where_the_other_scheduler_put_it() {
    let Some(c) = Cluster::new("conflict").await else { return };
    c.node("n1", 4).await;
    c.node("n2", 4).await;
    c.pod("p", 4, json!({})).await;
    // ordo decides from what it listed...
    let kube = c.kube().await;
    let mut engine = ordo_kube::run::snapshot(&kube, c.engine_config("fifo")).await.unwrap();
    let out = engine.pass(ordo_kube::run::now_ms());
    assert_eq!(out.binds.len(), 1, "{:?}", out.binds);
    let p = out.binds[0].clone();
    // ...but another scheduler binds p first, to the other node.
    let elsewhere = if p.node == c.node_name("n1") { c.node_name("n2") } else { c.node_name("n1") };
    let other = ordo_kube::client::Kube::new(
        ordo_kube::client::config(Some(&c.dir.join("kubeconfig"))).await.unwrap(),
        "other",
        ordo_kube::objects::ReadConfig::new("nvidia.com/gpu"),
    )
    .unwrap();
    other.bind(&c.name, "p", &p.uid, &elsewhere).await.unwrap();
    let (bound_now, conflicts) = ordo_kube::run::bind_all(&kube, &mut engine, out.binds, 4).await;
    assert!(bound_now.is_empty());
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].kind, "conflict");
    assert_eq!(conflicts[0].detail["now_on"], elsewhere.as_str());
    assert!(conflicts[0].detail["why"].as_str().unwrap().contains("409"), "{:?}", conflicts[0]);
    assert_eq!(engine.stats().conflicts, 1);
    // ordo now counts p where the other scheduler put it: a 4-GPU pod fits only on the node
    // ordo first chose, and nothing is bound twice.
    let again = engine.pass(ordo_kube::run::now_ms());
    assert!(again.binds.is_empty(), "{:?}", again.binds);
    engine.sanity_check().unwrap();
    assert_eq!(c.node_of("p").await.unwrap(), elsewhere);
    let q = engine.queue(ordo_kube::run::now_ms());
    assert_eq!((q.free_gpus, q.running_pods), (4, 1), "{q:?}");
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_manifests_are_accepted_by_the_api_server() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
    let Some(c) = Cluster::new("deploy").await else { return };
    // Server-side apply, dry run: validated and admitted by the API server, nothing changed.
    let pp = PatchParams::apply("ordo-tests").dry_run().force();
    let mut kinds = Vec::new();
    for file in ["deployment.yaml", "rbac.yaml"] {
        let path = format!("{}/../../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for d in docs {
            let obj: DynamicObject = serde_json::from_value(d.clone()).unwrap();
            let tm = obj.types.clone().unwrap();
            let gvk = GroupVersionKind::try_from(&tm).unwrap();
            let ar = ApiResource::from_gvk(&gvk);
            let api: Api<DynamicObject> = match d["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(c.admin.clone(), ns, &ar),
                None => Api::all_with(c.admin.clone(), &ar),
            };
            if tm.kind == "Namespace" {
                // Made for real (the namespaced objects need it); kept, as namespaces are here.
                let _ = api.create(&PostParams::default(), &obj).await;
            } else {
                let name = obj.metadata.name.clone().unwrap();
                api.patch(&name, &pp, &Patch::Apply(&obj))
                    .await
                    .unwrap_or_else(|e| panic!("{file}: {} refused: {e}", tm.kind));
            }
            kinds.push(tm.kind);
        }
    }
    for k in ["ClusterRole", "ServiceAccount", "ClusterRoleBinding", "Namespace", "Deployment", "PersistentVolumeClaim"]
    {
        assert!(kinds.iter().any(|x| x == k), "no {k} in deploy/: {kinds:?}");
    }
    c.cleanup().await;
}

/// `--topology-labels`: nodes labelled with blocks (alternating in name order, so placement
/// without the labels would cross them) and one zone. A gang lands inside one block; a gang
/// that requires a block waits while none holds it, its pods' condition and Event giving
/// ordo-core's reason, and lands inside the block that frees up; a level the labels do not
/// give is said in the pod's condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_land_within_a_labelled_block_and_a_required_block_waits_with_the_reason() {
    let Some(c) = Cluster::new("topology").await else { return };
    for (n, block) in [("n1", "a"), ("n2", "b"), ("n3", "a"), ("n4", "b")] {
        c.node_with(n, 8, json!({"example.com/block": block, "topology.kubernetes.io/zone": "z1"}), json!([])).await;
    }
    let block_of = |node: &str| {
        let i = ["n1", "n2", "n3", "n4"].iter().position(|n| c.node_name(n) == node).unwrap();
        ["a", "b", "a", "b"][i]
    };
    let mut engine = c.engine_config("fifo");
    engine.topology_labels = "example.com/block=block,topology.kubernetes.io/zone=zone".parse().unwrap();
    let s = c
        .start_with(ordo_kube::run::RunConfig {
            engine,
            resync: std::time::Duration::from_secs(600),
            audit_log: Some(c.tmp.join("audit.jsonl")),
            bind_concurrency: 16,
            verbose: false,
        })
        .await;
    // x (4 GPUs) takes part of one block's node.
    c.pod("x", 4, json!({})).await;
    c.wait_for("x bound", 20, |s| s["x"].0.is_some()).await;
    let x_block = block_of(&c.node_of("x").await.unwrap());
    // g (2 x 8 GPUs, no ask): the other block's two nodes.
    let g = json!({"ordo.dev/gang": "g", "ordo.dev/gang-size": "2"});
    c.pod("g-0", 8, g.clone()).await;
    c.pod("g-1", 8, g).await;
    c.wait_for("g bound", 20, |s| s["g-0"].0.is_some() && s["g-1"].0.is_some()).await;
    let g_blocks = [block_of(&c.node_of("g-0").await.unwrap()), block_of(&c.node_of("g-1").await.unwrap())];
    assert_eq!(g_blocks[0], g_blocks[1], "g crosses blocks");
    assert_ne!(g_blocks[0], x_block, "g went to x's block, which has 12 free");
    // r requires one block: x's block has 12 free, the other none; it waits with the reason.
    let r = json!({"ordo.dev/gang": "r", "ordo.dev/gang-size": "2", "ordo.dev/topology": "required:block"});
    c.pod("r-0", 8, r.clone()).await;
    c.pod("r-1", 8, r).await;
    // u names a level the labels do not give.
    c.pod("u", 1, json!({"ordo.dev/topology": "required:rack"})).await;
    c.wait_for("r's and u's reasons", 20, |s| s["r-0"].1.is_some() && s["r-1"].1.is_some() && s["u"].1.is_some()).await;
    let st = c.state().await;
    assert!(st["r-0"].0.is_none() && st["r-1"].0.is_none() && st["u"].0.is_none(), "{st:#?}");
    for p in ["r-0", "r-1"] {
        let m = st[p].1.clone().unwrap();
        assert!(
            m.starts_with(
                "gang of 2 pods needs 16 GPUs within one block; the most free in any block is 12; position 1"
            ),
            "{p}: {m}"
        );
    }
    assert_eq!(
        st["u"].1.as_deref(),
        Some(
            "ordo.dev/topology `required:rack`: topology level `rack` is not one of this cluster's levels (block, zone); it waits until it names one of them"
        )
    );
    let failed = |(t, r, m): &(String, String, String)| {
        t == "Warning" && r == "FailedScheduling" && m.contains("within one block")
    };
    let ev = c.events_once("r-0", 20, failed).await;
    assert!(ev.iter().any(failed), "{ev:?}");
    // x ends: its block is whole again, and r lands inside it.
    c.set_phase("x", "Succeeded").await;
    c.wait_for("r bound", 20, |s| s["r-0"].0.is_some() && s["r-1"].0.is_some()).await;
    let r_nodes = [c.node_of("r-0").await.unwrap(), c.node_of("r-1").await.unwrap()];
    assert_ne!(r_nodes[0], r_nodes[1]);
    assert_eq!([block_of(&r_nodes[0]), block_of(&r_nodes[1])], [x_block, x_block]);
    assert!(c.state().await["u"].0.is_none());
    c.assert_no_overcommit().await;
    s.stop().await;
    let log = ordo_kube::audit::read_log(&c.tmp.join("audit.jsonl")).unwrap();
    let policy = log.iter().find(|r| r.kind == "policy").unwrap();
    assert_eq!(policy.detail["topology_labels"], "example.com/block=block,topology.kubernetes.io/zone=zone");
    assert!(!log.iter().any(|r| r.kind == "topology"), "the labels are consistent");
    c.cleanup().await;
}
