//! Where pods may go, against a real kube-apiserver: nodes labelled with two GPU models and one
//! tainted node; pods with a nodeSelector, required node affinity of every operator (and
//! matchFields), tolerations. Each pod lands only on a node that qualifies; a pod no node
//! qualifies for stays pending with the unmet terms in its condition, and one whose qualifying
//! nodes are full while others have room says why those others do not qualify.
#![allow(clippy::unwrap_used)]

mod common;
use common::Cluster;
use serde_json::{json, Value};

const PRODUCT: &str = "nvidia.com/gpu.product";
const A100: &str = "NVIDIA-A100-SXM4-80GB";
const V100: &str = "Tesla-V100-SXM2-16GB";

fn required(exprs: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": exprs}
    ]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pod_lands_only_where_its_selector_affinity_and_tolerations_allow() {
    let Some(c) = Cluster::new("select").await else { return };
    c.node_with(
        "a100",
        4,
        json!({PRODUCT: A100, "nvidia.com/gpu.memory": "81920", "zone": "z1", "cores": "many"}),
        json!([]),
    )
    .await;
    c.node_with(
        "v100",
        8,
        json!({PRODUCT: V100, "nvidia.com/gpu.memory": "16384", "zone": "z2", "cores": "64"}),
        json!([]),
    )
    .await;
    c.node_with(
        "infer",
        4,
        json!({PRODUCT: A100, "nvidia.com/gpu.memory": "81920", "dedicated": "infer"}),
        json!([{"key": "dedicated", "value": "infer", "effect": "NoSchedule"},
               {"key": "soft", "effect": "PreferNoSchedule"}]),
    )
    .await;
    let (a100, v100, infer) = (c.node_name("a100"), c.node_name("v100"), c.node_name("infer"));
    let s = c.start("fifo").await;
    let tolerate_infer = json!([{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]);
    // (pod, spec, the nodes it may land on)
    let cases: Vec<(&str, Value, Vec<&String>)> = vec![
        ("sel-a100", json!({"nodeSelector": {PRODUCT: A100}}), vec![&a100]),
        ("sel-v100", json!({"nodeSelector": {PRODUCT: V100}}), vec![&v100]),
        (
            "in",
            json!({"affinity": required(json!([{"key": PRODUCT, "operator": "In", "values": [V100, "H100"]}]))}),
            vec![&v100],
        ),
        (
            "notin",
            json!({"affinity": required(json!([{"key": PRODUCT, "operator": "NotIn", "values": [A100]}]))}),
            vec![&v100],
        ),
        (
            "exists",
            json!({"affinity": required(json!([{"key": "dedicated", "operator": "Exists"}])), "tolerations": tolerate_infer}),
            vec![&infer],
        ),
        (
            "doesnotexist",
            json!({"affinity": required(json!([{"key": "zone", "operator": "DoesNotExist"}])),
                "tolerations": [{"operator": "Exists"}]}),
            vec![&infer],
        ),
        (
            "gt",
            json!({"affinity": required(json!([{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]))}),
            vec![&a100],
        ),
        (
            "lt",
            json!({"affinity": required(json!([{"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["40000"]}]))}),
            vec![&v100],
        ),
        // `cores: many` on the A100 node is no integer: Gt does not hold there.
        (
            "gt-not-int",
            json!({"affinity": required(json!([{"key": "cores", "operator": "Gt", "values": ["32"]}]))}),
            vec![&v100],
        ),
        (
            "fields",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [a100.clone()]}]}]}}}}),
            vec![&a100],
        ),
        // Two terms, ORed: zone z2, or the infer node's label (which it tolerates).
        (
            "or",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                {"matchExpressions": [{"key": "dedicated", "operator": "In", "values": ["infer"]}]}]}}},
                "tolerations": tolerate_infer}),
            vec![&v100, &infer],
        ),
        (
            "tolerate-all",
            json!({"nodeSelector": {PRODUCT: A100}, "tolerations": [{"operator": "Exists"}]}),
            vec![&a100, &infer],
        ),
        ("plain", json!({}), vec![&a100, &v100]),
    ];
    for (name, spec, _) in &cases {
        c.pod_with(name, 1, spec.clone()).await;
    }
    c.pod_with("never", 1, json!({"nodeSelector": {PRODUCT: "NVIDIA-H100-80GB-HBM3"}})).await;
    c.wait_for("every pod that qualifies somewhere bound", 30, |st| {
        cases.iter().all(|(n, _, _)| st.get(*n).is_some_and(|p| p.0.is_some()))
    })
    .await;
    let st = c.state().await;
    for (name, _, allowed) in &cases {
        let node = st[*name].0.clone().unwrap();
        assert!(allowed.contains(&&node), "{name} bound to {node}, not one of {allowed:?}");
    }
    c.wait_for("never's reason", 20, |st| st["never"].1.is_some()).await;
    let st = c.state().await;
    assert!(st["never"].0.is_none());
    assert_eq!(
        st["never"].1.as_deref().unwrap(),
        "0/3 nodes qualify: 2 node selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 not met, 1 untolerated taint dedicated=infer:NoSchedule; it waits until one does"
    );
    let failed = |(t, r, m): &(String, String, String)| {
        t == "Warning" && r == "FailedScheduling" && m.starts_with("0/3 nodes qualify")
    };
    assert!(c.events_once("never", 20, failed).await.iter().any(failed));
    // A node that qualifies joins: the pod is bound there.
    c.node_with("h100", 8, json!({PRODUCT: "NVIDIA-H100-80GB-HBM3"}), json!([])).await;
    c.wait_for("never bound once an H100 node exists", 20, |st| st["never"].0.is_some()).await;
    assert_eq!(c.node_of("never").await.unwrap(), c.node_name("h100"));
    c.assert_no_overcommit().await;
    s.stop().await;
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_nodes_are_full_says_why_the_nodes_with_room_do_not_qualify() {
    let Some(c) = Cluster::new("selroom").await else { return };
    c.node_with("a100", 2, json!({PRODUCT: A100}), json!([])).await;
    c.node_with("v100", 4, json!({PRODUCT: V100}), json!([])).await;
    c.node_with(
        "infer",
        4,
        json!({PRODUCT: A100}),
        json!([{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]),
    )
    .await;
    let s = c.start("fifo+easy").await;
    c.pod_with("first", 2, json!({"nodeSelector": {PRODUCT: A100}})).await;
    c.wait_for("first bound", 20, |st| st["first"].0.is_some()).await;
    assert_eq!(c.node_of("first").await.unwrap(), c.node_name("a100"));
    c.pod_with("second", 1, json!({"nodeSelector": {PRODUCT: A100}})).await;
    c.wait_for("second's reason", 20, |st| st["second"].1.is_some()).await;
    let m = c.message("second").await.unwrap();
    let want = format!(
        "0/2 nodes with room qualify: 1 node selector {PRODUCT}={A100} not met, 1 untolerated taint dedicated=infer:NoExecute; needs 1 nvidia.com/gpu, 1 CPU and 1Gi of memory on one node; the most free on any qualifying node is 0; position 1"
    );
    assert!(m.starts_with(&want), "{m}");
    // Its expected start is when first's time limit (the default estimate, 24h) frees the A100
    // node, not now (when the other nodes have room).
    assert!(m.contains("; expected start 20"), "{m}");
    // A pod without constraints backfills on a node with room: it cannot delay second, which
    // only the A100 node serves.
    c.pod_with("plain", 1, json!({})).await;
    c.wait_for("plain bound", 20, |st| st["plain"].0.is_some()).await;
    assert_eq!(c.node_of("plain").await.unwrap(), c.node_name("v100"));
    c.set_phase("first", "Succeeded").await;
    c.wait_for("second bound", 20, |st| st["second"].0.is_some()).await;
    assert_eq!(c.node_of("second").await.unwrap(), c.node_name("a100"));
    c.assert_no_overcommit().await;
    s.stop().await;
    c.cleanup().await;
}
