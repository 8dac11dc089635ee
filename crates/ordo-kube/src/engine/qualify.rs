//! Which open nodes of the pool each waiting pod or gang may use (its nodeSelector, required
//! node affinity and tolerations, evaluated by [`crate::affinity`] on every open node), and how
//! that reaches ordo-core: each distinct set of qualifying nodes that is not the whole pool is a
//! synthetic node feature `kube-req:N`, given to the nodes of the set, and required by the units
//! limited to it (ordo-core's `GpuNeeds::features`, turned into `JobReq::elig`).

use super::*;
use crate::affinity::{summarize, Constraints, Unmet};

/// The prefix of the synthetic node features that stand for a set of qualifying nodes.
pub const FEATURE_PREFIX: &str = "kube-req:";

/// The open nodes a unit may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Qual {
    /// Every open node (nothing to tell ordo-core).
    Any,
    /// These open nodes (indices in name order), not all of them.
    Nodes(Vec<u32>),
    /// No open node.
    NoNode,
}

/// Evaluates units against the open nodes, once per distinct set of constraints.
pub(crate) struct Qualifier<'a> {
    open: Vec<&'a NodeInfo>,
    tainted: bool,
    cache: HashMap<&'a Constraints, Vec<bool>>,
}

impl<'a> Qualifier<'a> {
    /// Over the open nodes `open`, in ordo-core's node order.
    pub(crate) fn new(open: Vec<&'a NodeInfo>) -> Self {
        let tainted = open.iter().any(|n| !n.taints.is_empty());
        Qualifier { open, tainted, cache: HashMap::new() }
    }

    /// The open nodes where every pod of a unit qualifies.
    pub(crate) fn qual(&mut self, pods: &[&'a PodInfo]) -> Qual {
        if !self.tainted && pods.iter().all(|p| p.constraints.selects_nothing()) {
            return Qual::Any;
        }
        let mut ok = vec![true; self.open.len()];
        for p in pods {
            let open = &self.open;
            let v = self
                .cache
                .entry(&p.constraints)
                .or_insert_with(|| open.iter().map(|n| p.qualifies(n).is_ok()).collect());
            for (o, v) in ok.iter_mut().zip(v.iter()) {
                *o &= *v;
            }
        }
        if ok.iter().all(|&o| o) {
            Qual::Any
        } else if !ok.iter().any(|&o| o) {
            Qual::NoNode
        } else {
            Qual::Nodes(ok.iter().enumerate().filter(|(_, o)| **o).map(|(i, _)| i as u32).collect())
        }
    }
}

/// Why a unit's pods cannot go to each of `nodes`: the first check that fails for the first pod
/// it fails for (nodes where all of them qualify are left out).
pub(crate) fn unmet_on<'n>(pods: &[&PodInfo], nodes: impl IntoIterator<Item = &'n NodeInfo>) -> Vec<Unmet> {
    nodes.into_iter().filter_map(|n| pods.iter().find_map(|p| p.qualifies(n).err())).collect()
}

/// `0/3 nodes qualify: 2 node selector gpu=a100 not met, 1 untolerated taint ...` (always
/// "nodes", as kube-scheduler's `0/3 nodes are available`).
pub(crate) fn none_qualify(of: usize, unmet: &[Unmet], what: &str) -> String {
    format!("0/{of} nodes {what}: {}", summarize(unmet))
}

/// The synthetic feature of requirement set `id`.
pub(crate) fn feature(id: u32) -> String {
    format!("{FEATURE_PREFIX}{id}")
}

/// A kind of node for ordo-core (one pool): GPU model (lowercased), GPU memory, features.
pub(crate) type Kind<'a> = (Option<String>, Option<u64>, &'a Vec<String>);

/// The kind of node `n` with features `f`.
pub(crate) fn kind_of<'a>(n: &NodeInfo, f: &'a Vec<String>) -> Kind<'a> {
    (n.gpu_model.as_ref().map(|m| m.to_ascii_lowercase()), n.gpu_mem_mib, f)
}

/// Requirement sets: each distinct set of qualifying nodes gets an id, in the order first seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReqSets {
    /// The nodes (ordo-core indices) of each set.
    pub(crate) sets: Vec<Vec<u32>>,
    ids: HashMap<Vec<u32>, u32>,
}

impl ReqSets {
    /// The id of `nodes`, a new one if it was not seen.
    pub(crate) fn id(&mut self, nodes: Vec<u32>) -> u32 {
        if let Some(&id) = self.ids.get(&nodes) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(nodes.clone());
        self.ids.insert(nodes, id);
        id
    }

    /// The id of `nodes` if it was seen.
    pub(crate) fn known(&self, nodes: &[u32]) -> Option<u32> {
        self.ids.get(nodes).copied()
    }

    /// Drops the latest sets until ordo-core can tell the kinds of node apart: at most
    /// [`ordo_core::pools::MAX_POOLS`] distinct (GPU model, GPU memory, features) over `open`.
    /// Returns how many sets remain (units of the others cannot be limited to their nodes).
    pub(crate) fn fit_kinds(&mut self, open: &[&NodeInfo]) -> usize {
        let kinds = |k: usize| {
            let f = self.node_features(open.len(), k);
            let set: HashSet<Kind<'_>> = open.iter().zip(&f).map(|(n, f)| kind_of(n, f)).collect();
            set.len()
        };
        let mut keep = self.sets.len();
        while keep > 0 && kinds(keep) > ordo_core::pools::MAX_POOLS {
            keep -= 1;
        }
        keep
    }

    /// Each node's features (`n` nodes): the ids of the first `keep` sets it is in.
    pub(crate) fn node_features(&self, n: usize, keep: usize) -> Vec<Vec<String>> {
        let mut f = vec![Vec::new(); n];
        for (id, set) in self.sets.iter().enumerate().take(keep) {
            for &i in set {
                if let Some(v) = f.get_mut(i as usize) {
                    v.push(feature(id as u32));
                }
            }
        }
        f
    }
}

impl Engine {
    /// The open nodes of the pool in ordo-core's order (by name).
    pub(crate) fn open_nodes(&self) -> Vec<&NodeInfo> {
        self.nodes.values().filter(|n| n.open()).collect()
    }

    /// Why a unit limited to requirement set `id` does not start where there is room: when no
    /// open node with room for its largest pod qualifies but some do have room,
    /// `0/2 nodes with room qualify: 2 node selector ... not met`. Room is what ordo-core holds
    /// free now (GPUs, and CPU and memory).
    pub(crate) fn room_words(&self, u: &Unit, id: u32) -> Option<String> {
        let set = self.req_sets.sets.get(id as usize)?;
        let pods: Vec<&PodInfo> = u.pods.iter().filter_map(|p| self.pods.get(p)).collect();
        let ask = pods.iter().map(|p| p.ask).max_by_key(|a| (a.gpus, a.cpu_milli, a.mem_bytes))?;
        let cap = self.core.capacity();
        let room = |i: usize| {
            let (cpu, mem) = cap.node_free_cpu_mem(i as u32);
            // CPU and memory read u32::MAX/u64::MAX where not modelled.
            cap.free().get(i).is_some_and(|&f| f >= ask.gpus) && cpu as u64 >= ask.cpu_milli && mem >= ask.mem_mib_up()
        };
        if set.iter().any(|&i| room(i as usize)) {
            return None;
        }
        let others: Vec<&NodeInfo> = (0..self.node_names.len())
            .filter(|&i| room(i))
            .filter_map(|i| self.nodes.get(&self.node_names[i]))
            .collect();
        if others.is_empty() {
            return None;
        }
        let unmet = unmet_on(&pods, others.iter().copied());
        Some(none_qualify(others.len(), &unmet, "with room qualify"))
    }
}
