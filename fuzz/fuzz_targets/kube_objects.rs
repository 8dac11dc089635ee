//! Fuzzes `ordo kube`'s readers of pods and nodes and its node-affinity evaluation: bytes are a
//! pod and a node as JSON (split at the first NUL). Whatever the API server could hand over
//! (any labels, selector, affinity operators and values, taints, tolerations, quantities), reading
//! never panics, and the verdict is consistent: a qualifying node's filtering taints are all
//! tolerated and its selector pairs all present; a refusal says why in words.

#![no_main]

use k8s_openapi::api::core::v1::{Node, Pod};
use libfuzzer_sys::fuzz_target;
use ordo_kube::objects::{node_info, pod_info, ReadConfig};

fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (pod, node) = (&data[..cut], data.get(cut + 1..).unwrap_or(&[]));
    let read = ReadConfig::new("nvidia.com/gpu");
    let Ok(p) = serde_json::from_slice::<Pod>(pod) else { return };
    let Ok(p) = pod_info(&p, &read) else { return };
    let Ok(n) = serde_json::from_slice::<Node>(node) else { return };
    let Ok(n) = node_info(&n, &read) else { return };
    match p.qualifies(&n) {
        Ok(()) => {
            for t in &n.taints {
                assert!(p.constraints.tolerations.iter().any(|o| o.tolerates(t)), "untolerated {t} passed");
            }
            for (k, v) in &p.constraints.node_selector {
                assert_eq!(n.labels.get(k), Some(v));
            }
        }
        Err(why) => assert!(!why.to_string().is_empty()),
    }
});
