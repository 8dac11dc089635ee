//! The real Alibaba GPU trace (fractional GPUs, CPUs, memory) on the cluster from its own node
//! list: every run validates, and fractional pods really share GPUs.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{Placement, PolicySpec};
use ordo_sim::engine::validate;
use ordo_sim::{simulate, SimConfig};
use ordo_trace::{load_cluster_nodes, load_path, Format, LoadOptions};

// The traces-directory lookup (skip, or fail under CI) is shared with the `ordo` crate's tests.
#[path = "../../ordo/tests/common/mod.rs"]
mod common;
use common::trace;

#[test]
fn alibaba_trace_shares_gpus_and_validates() {
    let (Some(pods), Some(nodes)) =
        (trace("alibaba/openb_pod_list_default.csv"), trace("alibaba/openb_node_list_gpu_node.csv"))
    else {
        return;
    };
    let cluster = load_cluster_nodes(&nodes).unwrap();
    assert_eq!(cluster.nodes.len(), 1_213);
    let w = load_path(&pods, &LoadOptions::new(Format::Auto)).unwrap().workload;
    let fractional = w.jobs.iter().filter(|j| j.gpu_milli.is_some_and(|m| m < 1000)).count();
    assert!(fractional > 1_000, "only {fractional} fractional pods read");
    // The whole cluster, and its first four 8-GPU nodes (32 GPUs), where pods queue and pack
    // tightly.
    let mut small = cluster.clone();
    small.nodes = cluster.nodes.iter().filter(|n| n.gpus == 8).take(4).cloned().collect();
    for (cluster, policy) in [
        (&cluster, "fifo"),
        (&cluster, "fifo+easy"),
        (&cluster, "sjf+conservative"),
        (&small, "fifo+easy"),
        (&small, "sjf"),
    ] {
        let gpus = cluster.total_gpus();
        let policy: PolicySpec = policy.parse().unwrap();
        let cfg = SimConfig::new(cluster.clone(), Placement::Consolidated, policy.clone());
        let out = simulate(&w, &cfg).unwrap();
        validate(&w, cluster, &out, 0).unwrap();
        assert_eq!(out.records.len() + out.rejected.len(), w.jobs.len());
        // Peak number of pods holding GPUs at once: with shares it exceeds the GPU count
        // only if fractional pods shared GPUs.
        let mut ev: Vec<(i64, i32)> = Vec::new();
        let mut shared_gpu = std::collections::BTreeMap::<(u32, u32), Vec<(i64, i64)>>::new();
        for r in &out.records {
            let j = &w.jobs[r.job.idx()];
            for s in &r.segments {
                let n: usize = s.gpu_ids.iter().map(|(_, ids)| ids.len()).sum();
                if n == 0 || s.end <= s.start {
                    continue;
                }
                ev.push((s.start, n as i32));
                ev.push((s.end, -(n as i32)));
                if j.gpu_milli.is_some() {
                    for (node, ids) in &s.gpu_ids {
                        shared_gpu.entry((node, ids[0])).or_default().push((s.start, s.end));
                    }
                }
            }
        }
        ev.sort();
        let (mut now, mut peak) = (0i64, 0i64);
        for (_, d) in ev {
            now += d as i64;
            peak = peak.max(now);
        }
        // Some GPU was held by two fractional pods at the same instant.
        let overlapped = shared_gpu.values_mut().any(|iv| {
            iv.sort();
            iv.windows(2).any(|p| p[1].0 < p[0].1)
        });
        assert!(overlapped, "{policy}: no two fractional pods ever shared a GPU");
        if gpus < 100 {
            // More pods hold GPUs at once than there are GPUs: only possible by sharing.
            assert!(peak as u64 > gpus, "{policy}: peak {peak} GPU holders on {gpus} GPUs");
        }
        // Utilisation counts shares: it cannot exceed 1.
        assert!(out.metrics.utilization_makespan <= 1.0);
        eprintln!(
            "{policy} on {} nodes: {} ran, {} rejected, peak {peak} pods on {gpus} GPUs, util(mkspan) {:.3}",
            cluster.nodes.len(),
            out.records.len(),
            out.rejected.len(),
            out.metrics.utilization_makespan
        );
    }
}
