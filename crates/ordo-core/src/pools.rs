//! Typed clusters: the nodes grouped into *pools* of one kind (GPU model, GPU memory and node
//! features), one [`Capacity`] each, and which pools a job may use ([`Elig`]). A job's GPUs
//! all come from one pool (as Gavel runs a job on one worker type): the eligible pools are
//! tried in the order of the [`ModelPick`] rule for the job's row of the speed matrix, and the
//! first that holds it now takes it. A cluster of one kind is one pool, and every call goes
//! straight to its capacity: homogeneous clusters place exactly as before.
//!
//! Node indices are the cluster's everywhere outside this file; each pool numbers its own
//! nodes in the cluster's order, so that its allocations map back without re-sorting.

use crate::capacity::{Allocation, Capacity, Demand, Detail, Placement};
use crate::model::{ClusterSpec, GpuNeeds};
use crate::speed::{ModelPick, Speeds};
use std::borrow::Cow;
use std::sync::Arc;

/// Most pools a cluster may have (bits of [`Elig::pools`]).
pub const MAX_POOLS: usize = 128;

/// Where a job may run: a set of pools (bit `p` for pool `p`; 0: any) and its row in the
/// speed matrix. `Elig::ANY` on a homogeneous cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Elig {
    /// Eligible pools; 0: any.
    pub pools: u128,
    /// Row in the speed matrix ([`Speeds::row_of`]).
    pub row: u16,
}

impl Elig {
    /// Any pool, default row.
    pub const ANY: Elig = Elig { pools: 0, row: 0 };

    /// True when it limits the pools.
    pub fn constrained(&self) -> bool {
        self.pools != 0
    }
}

/// What the nodes of one pool share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// GPU model (lowercased), if known.
    pub model: Option<String>,
    /// Memory per GPU, MiB, if known.
    pub mem_mib: Option<u64>,
    /// Node features, lowercased and sorted.
    pub features: Vec<String>,
}

impl PoolKey {
    /// The model name, or `unknown model`.
    pub fn model_name(&self) -> &str {
        self.model.as_deref().unwrap_or("unknown model")
    }

    /// Whether its GPUs are of `model` (lowercased), by [`same_model`].
    #[inline]
    pub fn is_model(&self, model: &str) -> bool {
        self.model.as_deref().is_some_and(|m| same_model(model, m))
    }
}

#[derive(Debug)]
struct Map {
    keys: Vec<PoolKey>,
    /// Cluster node -> (pool, index in the pool). Empty for a single pool (the identity).
    at: Vec<(u32, u32)>,
    /// Pool -> its nodes' cluster indices, ascending. Empty for a single pool.
    nodes: Vec<Vec<u32>>,
    /// `speed[row][pool]`.
    speed: Vec<Vec<f64>>,
    /// `order[row]`: pools in the order the pick rule tries them.
    order: Vec<Vec<u8>>,
    /// Every speed is 1.
    unit_speed: bool,
}

/// The cluster's free resources, pool by pool (see the module's documentation). Cloning copies
/// every pool's capacity; the layout is shared.
#[derive(Debug, Clone)]
pub struct Pools {
    parts: Vec<Capacity>,
    map: Arc<Map>,
    /// Each part is a counter of its pool's free GPUs ([`Pools::pool_counters`]): allocations
    /// count against their pool, whatever their nodes.
    counters: bool,
}

impl PartialEq for Pools {
    fn eq(&self, other: &Self) -> bool {
        self.parts == other.parts
    }
}

impl Eq for Pools {}

/// Whether a model name asked for (by a job or a quota, lowercased) names a node's model
/// (lowercased): ordo-core's rule, the same name. (The server first widens a family name such
/// as `a100` to the registered `a100-sxm4-80gb`; see ordo-server's `kinds.rs`.)
#[inline]
pub fn same_model(asked: &str, node: &str) -> bool {
    asked == node
}

/// The pool key of a node.
fn key_of(n: &crate::model::NodeSpec) -> PoolKey {
    let mut features: Vec<String> = n.features.iter().map(|f| f.to_ascii_lowercase()).collect();
    features.sort();
    features.dedup();
    PoolKey { model: n.gpu_model.as_ref().map(|m| m.to_ascii_lowercase()), mem_mib: n.gpu_mem_mib, features }
}

impl Pools {
    /// The pools of `cluster`: one per distinct (GPU model, GPU memory, features), in order of
    /// first appearance (`by_kind` false: one pool, kinds not modelled). `detailed`: track
    /// shares, CPUs and memory per node. Errors when the cluster has more than [`MAX_POOLS`]
    /// kinds of node.
    pub fn build(
        cluster: &ClusterSpec,
        placement: Placement,
        detailed: bool,
        speeds: &Speeds,
        pick: ModelPick,
        by_kind: bool,
    ) -> Result<Pools, String> {
        let plain = PoolKey { model: None, mem_mib: None, features: Vec::new() };
        let mut keys: Vec<PoolKey> = Vec::new();
        let mut of_node: Vec<u32> = Vec::with_capacity(cluster.nodes.len());
        let mut index: std::collections::HashMap<PoolKey, u32> = std::collections::HashMap::new();
        for n in &cluster.nodes {
            let k = if by_kind { key_of(n) } else { plain.clone() };
            let p = match index.get(&k) {
                Some(&p) => p,
                None => {
                    if keys.len() == MAX_POOLS {
                        return Err(format!(
                            "the cluster has more than {MAX_POOLS} kinds of node (distinct GPU model, GPU memory and \
                             features); ordo models at most {MAX_POOLS}"
                        ));
                    }
                    keys.push(k.clone());
                    index.insert(k, keys.len() as u32 - 1);
                    keys.len() as u32 - 1
                }
            };
            of_node.push(p);
        }
        if keys.is_empty() {
            keys.push(plain);
        }
        let single = keys.len() == 1;
        let mut nodes: Vec<Vec<u32>> = vec![Vec::new(); keys.len()];
        let mut at = Vec::with_capacity(if single { 0 } else { cluster.nodes.len() });
        for (i, &p) in of_node.iter().enumerate() {
            if !single {
                at.push((p, nodes[p as usize].len() as u32));
            }
            nodes[p as usize].push(i as u32);
        }
        let parts: Vec<Capacity> = nodes
            .iter()
            .map(|ids| {
                let gpus: Vec<u32> = ids.iter().map(|&i| cluster.nodes[i as usize].gpus).collect();
                if detailed {
                    let cpus: Vec<Option<u32>> = ids.iter().map(|&i| cluster.nodes[i as usize].cpus).collect();
                    let mem: Vec<Option<u64>> = ids.iter().map(|&i| cluster.nodes[i as usize].mem_mib).collect();
                    Capacity::detailed(&gpus, &cpus, &mem, placement)
                } else {
                    Capacity::new(&gpus, placement)
                }
            })
            .collect();
        let rows = speeds.classes().len();
        let speed: Vec<Vec<f64>> =
            (0..rows).map(|r| keys.iter().map(|k| speeds.speed(r as u16, k.model.as_deref())).collect()).collect();
        let mean_speed: Vec<f64> =
            (0..keys.len()).map(|p| speed.iter().map(|r| r[p]).sum::<f64>() / rows.max(1) as f64).collect();
        let order = speed
            .iter()
            .map(|row| {
                let mut o: Vec<u8> = (0..keys.len() as u8).collect();
                match pick {
                    ModelPick::First => {}
                    ModelPick::Fastest => o.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize])),
                    ModelPick::Slowest => o.sort_by(|&a, &b| row[a as usize].total_cmp(&row[b as usize])),
                    ModelPick::Relative => {
                        // Comparative advantage: its speed there over the mean speed of every
                        // row there, highest first; ties by its own speed.
                        let adv = |p: u8| row[p as usize] / mean_speed[p as usize];
                        o.sort_by(|&a, &b| adv(b).total_cmp(&adv(a)).then(row[b as usize].total_cmp(&row[a as usize])));
                    }
                }
                o
            })
            .collect();
        let unit_speed = speed.iter().flatten().all(|&s| s == 1.0);
        if single {
            nodes = Vec::new();
        }
        Ok(Pools { parts, map: Arc::new(Map { keys, at, nodes, speed, order, unit_speed }), counters: false })
    }

    /// One pool holding `cap` as it is.
    pub fn from_capacity(cap: Capacity) -> Pools {
        // One layout shared by every single pool: what-if planning builds one per pass.
        static SINGLE: std::sync::OnceLock<Arc<Map>> = std::sync::OnceLock::new();
        let map = SINGLE.get_or_init(|| {
            Arc::new(Map {
                keys: vec![PoolKey { model: None, mem_mib: None, features: Vec::new() }],
                at: Vec::new(),
                nodes: Vec::new(),
                speed: vec![vec![1.0]],
                order: vec![vec![0]],
                unit_speed: true,
            })
        });
        Pools { parts: vec![cap], map: Arc::clone(map), counters: false }
    }

    /// A single virtual node of `total` GPUs with `free` free (see [`Capacity::counter`]).
    pub(crate) fn counter(total: u64, free: u64) -> Pools {
        Pools::from_capacity(Capacity::counter(total, free))
    }

    /// True for a cluster of one kind of node.
    #[inline]
    pub fn is_single(&self) -> bool {
        self.parts.len() == 1
    }

    /// Pooled placement on one count-only pool: what-if planning may count GPUs only.
    #[inline]
    pub fn counts_only(&self) -> bool {
        self.is_single() && self.placement() == Placement::Pooled && !self.is_detailed()
    }

    /// Every speed of the matrix is 1 (estimates need no scaling).
    #[inline]
    pub fn unit_speed(&self) -> bool {
        self.map.unit_speed
    }

    /// The pools' keys, by pool index.
    pub fn keys(&self) -> &[PoolKey] {
        &self.map.keys
    }

    /// The pool an allocation's GPUs come from (its first node's; 0 for no GPUs).
    pub fn pool_of_alloc(&self, alloc: &Allocation) -> u32 {
        alloc.parts.first().map_or(0, |part| self.pool_of(part.0))
    }

    /// The pool of a cluster node.
    pub fn pool_of(&self, node: u32) -> u32 {
        if self.is_single() {
            0
        } else {
            self.map.at.get(node as usize).map_or(0, |a| a.0)
        }
    }

    /// Free GPUs of one pool.
    pub fn pool_free(&self, p: usize) -> u64 {
        self.parts.get(p).map_or(0, Capacity::total_free)
    }

    /// GPUs of one pool.
    pub fn pool_total(&self, p: usize) -> u64 {
        self.parts.get(p).map_or(0, Capacity::total)
    }

    /// The pools whose GPUs are of `model` (any case) by the rule `matches` (asked, node's
    /// model; [`same_model`] in ordo-core), bit `p` for pool `p`; 0 when no node has it.
    pub fn pools_of_model(&self, model: &str, matches: impl Fn(&str, &str) -> bool) -> u128 {
        let m = model.to_ascii_lowercase();
        let hit = |k: &PoolKey| k.model.as_deref().is_some_and(|n| matches(&m, n));
        self.map.keys.iter().enumerate().filter(|(_, k)| hit(k)).fold(0, |acc, (p, _)| acc | 1u128 << p)
    }

    /// Every pool's bit.
    pub fn all_pools(&self) -> u128 {
        if self.parts.len() == MAX_POOLS {
            u128::MAX
        } else {
            (1u128 << self.parts.len()) - 1
        }
    }

    /// The pools of an allocation's nodes (bit `p` for pool `p`).
    pub fn pools_in(&self, a: &Allocation) -> u128 {
        a.parts.iter().fold(0, |m, &(n, _)| m | 1u128 << self.pool_of(n))
    }

    /// GPUs of the pools in `mask`.
    pub fn total_of(&self, mask: u128) -> u64 {
        (0..self.parts.len()).filter(|&p| mask & (1u128 << p) != 0).map(|p| self.pool_total(p)).sum()
    }

    /// Which pools a job with `needs` may use, with its speed row; an error in words when no
    /// node of the cluster satisfies them.
    pub fn eligible(&self, needs: &GpuNeeds, row: u16) -> Result<Elig, String> {
        let row = if (row as usize) < self.map.speed.len() { row } else { 0 };
        if !needs.constrains() {
            return Ok(Elig { pools: 0, row });
        }
        let models: Vec<String> = needs.models.iter().map(|m| m.to_ascii_lowercase()).collect();
        let feats: Vec<String> = needs.features.iter().map(|f| f.to_ascii_lowercase()).collect();
        let model_ok = |k: &PoolKey| models.is_empty() || models.iter().any(|m| k.is_model(m));
        let mem_ok = |k: &PoolKey| needs.min_mem_mib == 0 || k.mem_mib.is_some_and(|m| m >= needs.min_mem_mib);
        let feat_ok = |k: &PoolKey| feats.iter().all(|f| k.features.contains(f));
        let mut mask = 0u128;
        for (p, k) in self.map.keys.iter().enumerate() {
            if model_ok(k) && mem_ok(k) && feat_ok(k) {
                mask |= 1 << p;
            }
        }
        if mask == 0 {
            return Err(self.never_why(&models, needs.min_mem_mib, &feats));
        }
        Ok(Elig { pools: if mask == self.all_pools() { 0 } else { mask }, row })
    }

    /// Why no pool satisfies a constraint, naming the part no node has.
    fn never_why(&self, models: &[String], min_mem: u64, feats: &[String]) -> String {
        let keys = &self.map.keys;
        let have: Vec<&str> = {
            let mut v: Vec<&str> = keys.iter().map(PoolKey::model_name).collect();
            v.dedup();
            v
        };
        if !models.is_empty() && !keys.iter().any(|k| models.iter().any(|m| k.is_model(m))) {
            return format!("no node has a GPU of model {} (the cluster has {})", models.join(" or "), have.join(", "));
        }
        if let Some(f) = feats.iter().find(|f| !keys.iter().any(|k| k.features.contains(f))) {
            return format!("no node has feature `{f}`");
        }
        if min_mem > 0 && !keys.iter().any(|k| k.mem_mib.is_some_and(|m| m >= min_mem)) {
            let largest = keys.iter().filter_map(|k| k.mem_mib).max();
            return format!(
                "no node has GPUs with at least {} of memory ({})",
                crate::words::mib(min_mem),
                largest.map_or("no node says its GPUs' memory".to_string(), |m| format!(
                    "the largest known is {}",
                    crate::words::mib(m)
                ))
            );
        }
        "no node has all of it together (model, memory and features)".to_string()
    }

    /// The pools a demand may use, in the order placement tries them.
    #[inline]
    pub(crate) fn candidates(&self, d: Demand) -> impl Iterator<Item = usize> + '_ {
        let order = self.map.order.get(d.row as usize).unwrap_or(&self.map.order[0]);
        order.iter().map(|&p| p as usize).filter(move |&p| d.pools == 0 || d.pools & (1u128 << p) != 0)
    }

    /// A pool's allocation in cluster node indices.
    fn to_cluster(&self, p: usize, mut a: Allocation) -> Allocation {
        if !self.is_single() {
            for part in &mut a.parts {
                part.0 = self.map.nodes[p][part.0 as usize];
            }
        }
        a
    }

    /// `alloc` (cluster indices) split by pool, in each pool's indices. `None` if a node is out
    /// of range or the detail does not match the parts.
    fn split(&self, alloc: &Allocation) -> Option<Vec<(usize, Allocation)>> {
        let mut out: Vec<(usize, Allocation)> = Vec::new();
        if let Some(d) = &alloc.detail {
            if d.gpu_ids.len() != alloc.parts.len()
                || d.cpus.len() != alloc.parts.len()
                || d.mem_mib.len() != alloc.parts.len()
            {
                return None;
            }
        }
        for (i, &(n, k)) in alloc.parts.iter().enumerate() {
            let &(p, local) = self.map.at.get(n as usize)?;
            let p = p as usize;
            let slot = match out.iter().position(|o| o.0 == p) {
                Some(s) => s,
                None => {
                    let detail =
                        alloc.detail.as_ref().map(|d| Box::new(Detail { milli: d.milli, ..Detail::default() }));
                    out.push((p, Allocation { parts: Vec::new(), detail }));
                    out.len() - 1
                }
            };
            let a = &mut out[slot].1;
            a.parts.push((local, k));
            if let (Some(dst), Some(src)) = (a.detail.as_mut(), alloc.detail.as_ref()) {
                dst.gpu_ids.push(src.gpu_ids[i].clone());
                dst.cpus.push(src.cpus[i]);
                dst.mem_mib.push(src.mem_mib[i]);
            }
        }
        Some(out)
    }

    /// Pool allocations (cluster indices) merged into one, sorted by node.
    fn merge(parts: Vec<Allocation>) -> Allocation {
        let detailed = parts.iter().any(|a| a.detail.is_some());
        let mut rows: Vec<(u32, u32, Vec<u32>, u32, u64)> = Vec::new();
        let mut milli = 1000;
        for a in parts {
            let d = a.detail.map(|d| *d);
            if let Some(d) = &d {
                milli = d.milli;
            }
            for (i, (n, k)) in a.parts.into_iter().enumerate() {
                let (ids, c, m) =
                    d.as_ref().map_or((Vec::new(), 0, 0), |d| (d.gpu_ids[i].clone(), d.cpus[i], d.mem_mib[i]));
                rows.push((n, k, ids, c, m));
            }
        }
        rows.sort_by_key(|r| r.0);
        let mut out = Allocation { parts: rows.iter().map(|r| (r.0, r.1)).collect(), detail: None };
        if detailed {
            let mut d = Detail { milli, ..Detail::default() };
            for (_, _, ids, c, m) in rows {
                d.gpu_ids.push(ids);
                d.cpus.push(c);
                d.mem_mib.push(m);
            }
            out.detail = Some(Box::new(d));
        }
        out
    }

    /// A copy of the free resources, without the undo log and not logging.
    pub(crate) fn snapshot(&mut self) -> Pools {
        Pools {
            parts: self.parts.iter_mut().map(Capacity::snapshot).collect(),
            map: self.map.clone(),
            counters: self.counters,
        }
    }

    /// Starts logging changes for [`Pools::rollback`] (count-only capacities).
    pub(crate) fn begin_undo(&mut self) {
        self.parts.iter_mut().for_each(Capacity::begin_undo);
    }

    /// Undoes every change since [`Pools::begin_undo`].
    pub(crate) fn rollback(&mut self) {
        self.parts.iter_mut().for_each(Capacity::rollback);
    }

    /// Marks for [`Pools::rollback_to`]: each pool's changes logged since
    /// [`Pools::begin_undo`].
    pub(crate) fn undo_marks(&self) -> Vec<usize> {
        self.parts.iter().map(Capacity::undo_len).collect()
    }

    /// Undoes the changes logged after `marks` (from [`Pools::undo_marks`]), logging on.
    pub(crate) fn rollback_to(&mut self, marks: &[usize]) {
        for (c, &m) in self.parts.iter_mut().zip(marks) {
            c.rollback_to(m);
        }
    }

    /// Free GPUs of node `n` (count-only, node-level: not pooled counters).
    pub(crate) fn node_free(&self, n: u32) -> u32 {
        debug_assert!(!self.counters);
        if self.is_single() {
            return self.parts[0].free()[n as usize];
        }
        let (p, local) = self.map.at[n as usize];
        self.parts[p as usize].free()[local as usize]
    }

    /// Node `n`'s pool and its index there (count-only, node-level).
    fn node_part(&mut self, n: u32) -> (&mut Capacity, u32) {
        debug_assert!(!self.counters && !self.is_detailed());
        if self.is_single() {
            return (&mut self.parts[0], n);
        }
        let (p, local) = self.map.at[n as usize];
        (&mut self.parts[p as usize], local)
    }

    /// Takes `k` GPUs of node `n` (count-only, node-level).
    pub(crate) fn take_node(&mut self, n: u32, k: u32) {
        let (c, local) = self.node_part(n);
        c.take_part(local, k);
    }

    /// Gives back `k` GPUs of node `n` (count-only, node-level).
    pub(crate) fn give_node(&mut self, n: u32, k: u32) {
        let (c, local) = self.node_part(n);
        c.give_part(local, k);
    }

    /// Whether the pools track shares, CPUs and memory per node.
    #[inline]
    pub fn is_detailed(&self) -> bool {
        self.parts[0].is_detailed()
    }

    /// The same layout, empty and detailed (tracking shares, CPUs and memory where the nodes
    /// model them, which a count-only capacity did not).
    pub(crate) fn detailed_like(&self) -> Pools {
        let parts = self
            .parts
            .iter()
            .map(|c| {
                let n = c.cap_per_node().len();
                Capacity::detailed(c.cap_per_node(), &vec![None; n], &vec![None; n], c.placement())
            })
            .collect();
        Pools { parts, map: self.map.clone(), counters: false }
    }

    /// Why `d` waits for its required topology level ([`Capacity::topology_why`]) on the first
    /// of its pools; `None` when that is not why.
    pub fn topology_why(&self, d: Demand) -> Option<String> {
        let p = if self.is_single() { 0 } else { self.candidates(d).next()? };
        self.parts[p].topology_why(d)
    }

    /// Places gangs by `t` ([`Capacity::set_topology`]), each pool by its own nodes' view.
    pub fn set_topology(&mut self, t: &crate::topology::Topology) {
        let single = self.is_single();
        for (p, c) in self.parts.iter_mut().enumerate() {
            let nodes: Vec<u32> =
                if single { (0..c.cap_per_node().len() as u32).collect() } else { self.map.nodes[p].clone() };
            let view = t.view(&nodes, c.cap_per_node());
            c.set_topology(Arc::new(view));
        }
    }

    /// The same cluster with everything free.
    pub fn empty_like(&self) -> Pools {
        Pools {
            parts: self.parts.iter().map(Capacity::empty_like).collect(),
            map: self.map.clone(),
            counters: self.counters,
        }
    }

    /// Pooled what-if planning on several pools: each pool's free GPUs as a counter (which
    /// nodes a pooled job gets does not matter there), so giving back a running job costs its
    /// pool, not its nodes. Count-only pooled capacities only.
    pub(crate) fn pool_counters(&self) -> Pools {
        let parts = self.parts.iter().map(|c| Capacity::counter(c.total(), c.total_free())).collect();
        Pools { parts, map: self.map.clone(), counters: true }
    }

    /// The pool a job asking `d` would go to now ([`Pools::place_for`] takes the first of its
    /// pools, in the pick rule's order, that holds it), without choosing its nodes.
    pub(crate) fn first_fit_pool(&self, d: Demand) -> Option<usize> {
        if self.is_single() {
            return self.parts[0].fits_for(d).then_some(0);
        }
        self.candidates(d).find(|&p| self.parts[p].fits_for(d))
    }

    /// Counters ([`Pools::pool_counters`]): whether `g` GPUs can be taken from pool `q` and a
    /// job asking `head` still fits afterwards, on one of its pools. The same answer as
    /// `can_take`, `take`, `fits_for(head)` on an allocation of `g` GPUs in `q`, by counts.
    pub(crate) fn fits_after_taking(&self, q: usize, g: u32, head: Demand) -> bool {
        debug_assert!(self.counters || self.is_single());
        let Some(fq) = self.parts[q].total_free().checked_sub(g as u64) else { return false };
        let h = head.gpus as u64;
        if self.is_single() {
            return fq >= h;
        }
        self.candidates(head).any(|p| if p == q { fq >= h } else { self.parts[p].total_free() >= h })
    }

    /// GPUs of `alloc` per pool (counters).
    pub(crate) fn gpus_by_pool(&self, alloc: &Allocation) -> Vec<(usize, u32)> {
        let mut v: Vec<(usize, u32)> = Vec::new();
        for &(n, k) in &alloc.parts {
            let p = self.pool_of(n) as usize;
            match v.iter_mut().find(|x| x.0 == p) {
                Some(x) => x.1 += k,
                None => v.push((p, k)),
            }
        }
        v
    }

    #[inline]
    fn local(&self, node: u32) -> Option<(usize, u32)> {
        if self.is_single() {
            Some((0, node))
        } else {
            self.map.at.get(node as usize).map(|&(p, l)| (p as usize, l))
        }
    }

    /// Thousandths of a GPU held now (detailed capacities).
    pub fn gpu_used(&self, node: u32, gpu: u32) -> u32 {
        self.local(node).map_or(0, |(p, l)| self.parts[p].gpu_used(l, gpu))
    }

    /// Free CPUs and memory of a node (see [`Capacity::node_free_cpu_mem`]).
    pub fn node_free_cpu_mem(&self, node: u32) -> (u32, u64) {
        self.local(node).map_or((0, 0), |(p, l)| self.parts[p].node_free_cpu_mem(l))
    }

    /// CPUs and memory of the whole cluster (see [`Capacity::total_cpus_mem`]).
    pub fn total_cpus_mem(&self) -> (u64, u64) {
        self.parts.iter().map(Capacity::total_cpus_mem).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// The placement model in force.
    #[inline]
    pub fn placement(&self) -> Placement {
        self.parts[0].placement()
    }

    /// GPUs of the largest node in any pool.
    pub fn max_node_gpus(&self) -> u32 {
        self.parts.iter().map(Capacity::max_node_gpus).max().unwrap_or(0)
    }

    /// Free GPUs in the whole cluster.
    #[inline]
    pub fn total_free(&self) -> u64 {
        if self.is_single() {
            return self.parts[0].total_free();
        }
        self.parts.iter().map(Capacity::total_free).sum()
    }

    /// GPUs in the whole cluster.
    pub fn total(&self) -> u64 {
        self.parts.iter().map(Capacity::total).sum()
    }

    /// GPUs of each node, in cluster order.
    pub fn cap_per_node(&self) -> Cow<'_, [u32]> {
        self.per_node(Capacity::cap_per_node)
    }

    /// Free GPUs of each node, in cluster order.
    pub fn free(&self) -> Cow<'_, [u32]> {
        self.per_node(Capacity::free)
    }

    fn per_node<'a>(&'a self, f: impl Fn(&'a Capacity) -> &'a [u32]) -> Cow<'a, [u32]> {
        if self.is_single() {
            return Cow::Borrowed(f(&self.parts[0]));
        }
        Cow::Owned(self.map.at.iter().map(|&(p, l)| f(&self.parts[p as usize])[l as usize]).collect())
    }

    /// Whether a job asking `d` could ever run here, on one of its pools, when it is empty.
    #[inline]
    pub fn can_ever_fit_for(&self, d: Demand) -> bool {
        if self.is_single() {
            return self.parts[0].can_ever_fit_for(d);
        }
        self.candidates(d).any(|p| self.parts[p].can_ever_fit_for(d))
    }

    /// Whether a job asking `d` fits now on one of its pools.
    #[inline(always)]
    pub fn fits_for(&self, d: Demand) -> bool {
        if self.is_single() {
            return self.parts[0].fits_for(d);
        }
        self.fits_for_pools(d)
    }

    /// [`Pools::fits_for`] on several pools (kept out of line: the one-pool path is inlined).
    #[inline(never)]
    fn fits_for_pools(&self, d: Demand) -> bool {
        if self.placement() == Placement::Pooled && !self.is_detailed() {
            // Pooled count-only pools: a count per pool decides.
            let g = d.gpus as u64;
            return g == 0 || self.candidates(d).any(|p| self.parts[p].total_free() >= g);
        }
        self.candidates(d).any(|p| self.parts[p].fits_for(d))
    }

    /// Where a job asking `d` would go now: the first of its pools, in the pick rule's order,
    /// that holds it (see [`Capacity::place_for`] within a pool).
    #[inline(always)]
    pub fn place_for(&self, d: Demand) -> Option<Allocation> {
        if self.is_single() {
            return self.parts[0].place_for(d);
        }
        self.place_for_pools(d)
    }

    #[inline(never)]
    fn place_for_pools(&self, d: Demand) -> Option<Allocation> {
        self.candidates(d).find_map(|p| self.parts[p].place_for(d).map(|a| self.to_cluster(p, a)))
    }

    /// Gives a count-only allocation its [`Detail`] (see [`Capacity::complete`]).
    pub fn complete(&self, alloc: &Allocation, d: Demand) -> Option<Allocation> {
        if self.is_single() {
            return self.parts[0].complete(alloc, d);
        }
        let mut done = Vec::new();
        for (p, a) in self.split(alloc)? {
            done.push(self.to_cluster(p, self.parts[p].complete(&a, d)?));
        }
        Some(Pools::merge(done))
    }

    /// Why a job asking `d` does not fit now, in words: its constraint when GPUs it does not
    /// accept are free, else the node-level cause.
    pub fn why_not(&self, d: Demand) -> String {
        if self.is_single() {
            return self.parts[0].why_not(d);
        }
        match self.constraint_why(d) {
            Some(w) => w,
            None => {
                let p = self.candidates(d).next().unwrap_or(0);
                self.parts[p].why_not(d)
            }
        }
    }

    /// When a constrained job does not fit but would without its constraint: what it needs and
    /// which free GPUs do not qualify ("needs a100: 0 of 16 free; 4 free GPUs of v100 do not
    /// qualify"). `None` otherwise.
    pub fn constraint_why(&self, d: Demand) -> Option<String> {
        if self.is_single() || d.pools == 0 || self.fits_for(d) || !self.fits_for(d.anywhere()) {
            return None;
        }
        let elig: Vec<usize> = self.candidates(d).collect();
        let mut names: Vec<String> = Vec::new();
        for &p in &elig {
            let k = &self.map.keys[p];
            let mut n = k.model_name().to_string();
            if !k.features.is_empty() {
                n = format!("{n} [{}]", k.features.join(","));
            }
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names.sort();
        let free_there: u64 = elig.iter().map(|&p| self.parts[p].total_free()).sum();
        let mut others: Vec<(String, u64)> = Vec::new();
        for (p, c) in self.parts.iter().enumerate() {
            if elig.contains(&p) || c.total_free() == 0 {
                continue;
            }
            let k = &self.map.keys[p];
            let name = k.model_name().to_string();
            match others.iter_mut().find(|o| o.0 == name) {
                Some(o) => o.1 += c.total_free(),
                None => others.push((name, c.total_free())),
            }
        }
        let other_free: u64 = others.iter().map(|o| o.1).sum();
        let other_names: Vec<String> = others.into_iter().map(|o| o.0).collect();
        Some(format!(
            "needs {} {} of {}: {} free there; {} of {} do not qualify",
            d.gpus,
            if d.gpus == 1 { "GPU" } else { "GPUs" },
            names.join(" or "),
            free_there,
            crate::words::count(other_free as usize, "free GPU"),
            other_names.join(", "),
        ))
    }

    /// Gives `g` GPUs back to a counter (see [`Capacity::give_count`]).
    pub(crate) fn give_count(&mut self, g: u32) {
        self.parts[0].give_count(g);
    }

    /// Counters ([`Pools::pool_counters`]): gives `g` GPUs back to pool `p`.
    pub(crate) fn give_pool_count(&mut self, p: usize, g: u32) {
        debug_assert!(self.counters);
        self.parts[p].give_count(g);
    }

    /// Takes `g` GPUs from a counter (see [`Capacity::take_count`]).
    pub(crate) fn take_count(&mut self, g: u32) {
        self.parts[0].take_count(g);
    }

    /// Whether every part of `alloc` is free now.
    #[inline(always)]
    pub fn can_take(&self, alloc: &Allocation) -> bool {
        if !self.counters && self.is_single() {
            return self.parts[0].can_take(alloc);
        }
        self.can_take_pools(alloc)
    }

    #[inline(never)]
    fn can_take_pools(&self, alloc: &Allocation) -> bool {
        if self.counters {
            return self.gpus_by_pool(alloc).iter().all(|&(p, g)| self.parts[p].total_free() >= g as u64);
        }
        if self.is_single() {
            return self.parts[0].can_take(alloc);
        }
        if !self.is_detailed() {
            return alloc.parts.iter().all(|&(n, k)| {
                self.map.at.get(n as usize).is_some_and(|&(p, l)| self.parts[p as usize].free()[l as usize] >= k)
            });
        }
        self.split(alloc).is_some_and(|s| s.iter().all(|(p, a)| self.parts[*p].can_take(a)))
    }

    /// Takes `alloc` (which must be free).
    #[inline(always)]
    pub fn take(&mut self, alloc: &Allocation) {
        if !self.counters && self.is_single() {
            return self.parts[0].take(alloc);
        }
        self.take_pools(alloc)
    }

    #[inline(never)]
    fn take_pools(&mut self, alloc: &Allocation) {
        if self.counters {
            for &(n, k) in &alloc.parts {
                let p = self.pool_of(n) as usize;
                self.parts[p].take_count(k);
            }
            return;
        }
        if self.is_single() {
            return self.parts[0].take(alloc);
        }
        if !self.is_detailed() {
            // Count-only: node by node, without splitting the allocation.
            for &(n, k) in &alloc.parts {
                let (p, local) = self.map.at[n as usize];
                self.parts[p as usize].take_part(local, k);
            }
            return;
        }
        for (p, a) in self.split(alloc).expect("an allocation on this cluster's nodes") {
            self.parts[p].take(&a);
        }
    }

    /// Gives `alloc` back.
    #[inline(always)]
    pub fn give(&mut self, alloc: &Allocation) {
        if !self.counters && self.is_single() {
            return self.parts[0].give(alloc);
        }
        self.give_pools(alloc)
    }

    #[inline(never)]
    fn give_pools(&mut self, alloc: &Allocation) {
        if self.counters {
            for &(n, k) in &alloc.parts {
                let p = self.pool_of(n) as usize;
                self.parts[p].give_count(k);
            }
            return;
        }
        if self.is_single() {
            return self.parts[0].give(alloc);
        }
        if !self.is_detailed() {
            for &(n, k) in &alloc.parts {
                let (p, local) = self.map.at[n as usize];
                self.parts[p as usize].give_part(local, k);
            }
            return;
        }
        for (p, a) in self.split(alloc).expect("an allocation on this cluster's nodes") {
            self.parts[p].give(&a);
        }
    }

    /// [`Capacity::take_what_if`] pool by pool: all of it or nothing.
    pub fn take_what_if(&mut self, alloc: &Allocation) -> bool {
        if self.counters {
            if !self.can_take(alloc) {
                return false;
            }
            self.take(alloc);
            return true;
        }
        if self.is_single() {
            return self.parts[0].take_what_if(alloc);
        }
        let Some(split) = self.split(alloc) else { return false };
        let ok = split.iter().all(|(p, a)| {
            let c = &self.parts[*p];
            if c.placement() == Placement::Pooled && !c.is_detailed() {
                c.total_free() >= a.gpus() as u64
            } else {
                c.can_take(a)
            }
        });
        if ok {
            for (p, a) in &split {
                let taken = self.parts[*p].take_what_if(a);
                debug_assert!(taken);
            }
        }
        ok
    }

    /// Element-wise minimum of free resources with `other` (same layout).
    pub fn min_with(&mut self, other: &Pools) {
        for (a, b) in self.parts.iter_mut().zip(&other.parts) {
            a.min_with(b);
        }
    }

    /// Speed of a job of row `row` on the GPUs of `alloc`: the slowest of its pools (a job
    /// spread over models goes at the pace of its slowest GPU); 1 without a matrix.
    pub fn speed_on(&self, row: u16, alloc: &Allocation) -> f64 {
        if self.map.unit_speed {
            return 1.0;
        }
        if alloc.parts.is_empty() {
            return 1.0;
        }
        let speeds = self.map.speed.get(row as usize).unwrap_or(&self.map.speed[0]);
        alloc.parts.iter().map(|&(n, _)| speeds[self.pool_of(n) as usize]).fold(f64::INFINITY, f64::min)
    }

    /// Speed of row `row` on pool `p`.
    pub fn pool_speed(&self, row: u16, p: usize) -> f64 {
        let speeds = self.map.speed.get(row as usize).unwrap_or(&self.map.speed[0]);
        speeds.get(p).copied().unwrap_or(1.0)
    }

    /// How much faster a demand runs on the fastest pool it may use than on the slowest (1 on
    /// one pool or without a matrix).
    pub fn gain(&self, d: Demand) -> f64 {
        if self.map.unit_speed {
            return 1.0;
        }
        let (lo, hi) = self
            .candidates(d)
            .map(|p| self.pool_speed(d.row, p))
            .fold((f64::INFINITY, 0f64), |(lo, hi), s| (lo.min(s), hi.max(s)));
        if lo.is_finite() && lo > 0.0 {
            hi / lo
        } else {
            1.0
        }
    }

    /// The slowest speed among the pools a demand may use (what planning assumes before the
    /// pool is chosen, so that no estimate comes out short).
    pub fn slowest(&self, d: Demand) -> f64 {
        if self.map.unit_speed {
            return 1.0;
        }
        let s = self.candidates(d).map(|p| self.pool_speed(d.row, p)).fold(f64::INFINITY, f64::min);
        if s.is_finite() {
            s
        } else {
            1.0
        }
    }
}

/// `t` (a base run time or estimate) on a GPU of `speed`: `t / speed`, rounded up, at least 1
/// for a positive `t`; unchanged at speed 1.
#[inline]
pub fn scaled(t: crate::time::Time, speed: f64) -> crate::time::Time {
    if speed == 1.0 || t <= 0 {
        return t;
    }
    ((t as f64 / speed).ceil() as crate::time::Time).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeSpec;

    fn cluster(spec: &str) -> ClusterSpec {
        ClusterSpec::parse(spec).unwrap()
    }

    #[test]
    fn one_kind_is_one_pool() {
        let p =
            Pools::build(&cluster("4x8"), Placement::Consolidated, false, &Speeds::default(), ModelPick::Fastest, true)
                .unwrap();
        assert!(p.is_single());
        assert_eq!(p.eligible(&GpuNeeds::default(), 0).unwrap(), Elig::ANY);
        let c = Capacity::new(&[8, 8, 8, 8], Placement::Consolidated);
        assert_eq!(p.place_for(Demand::gpus(12)), c.place_for(Demand::gpus(12)));
    }

    #[test]
    fn constraints_pick_pools_and_map_nodes() {
        // Nodes interleaved: v100, a100, v100, a100.
        let mut c = ClusterSpec { nodes: Vec::new() };
        for (i, m) in ["v100", "a100", "v100", "a100"].iter().enumerate() {
            let mut n = NodeSpec::new(format!("n{i}"), 4);
            n.gpu_model = Some(m.to_string());
            c.nodes.push(n);
        }
        let mut s = Speeds::default();
        s.set("*", "v100", 1.0).unwrap();
        s.set("*", "a100", 2.0).unwrap();
        let mut p = Pools::build(&c, Placement::Consolidated, false, &s, ModelPick::Fastest, true).unwrap();
        assert_eq!(p.keys().len(), 2);
        // Fastest first: a flexible job goes on an a100 node (cluster node 1).
        let a = p.place_for(Demand::gpus(4)).unwrap();
        assert_eq!(a.parts, vec![(1, 4)]);
        assert_eq!(p.speed_on(0, &a), 2.0);
        p.take(&a);
        let a2 = p.place_for(Demand::gpus(4)).unwrap();
        assert_eq!(a2.parts, vec![(3, 4)]);
        p.take(&a2);
        // Only v100 left: an a100 job does not fit and says why.
        let needs = GpuNeeds { models: vec!["A100".into()], ..GpuNeeds::default() };
        let e = p.eligible(&needs, 0).unwrap();
        assert!(e.constrained());
        let d = Demand::gpus(2).within(e);
        assert!(!p.fits_for(d));
        let why = p.constraint_why(d).unwrap();
        assert!(why.contains("a100") && why.contains("8 free GPUs of v100 do not qualify"), "{why}");
        // A gang of 8 cannot span the two a100 nodes' pool when they are busy, nor the models.
        assert_eq!(p.free().to_vec(), vec![4, 0, 4, 0]);
        p.give(&a);
        assert!(p.fits_for(d));
        // Slowest first: a flexible job goes on v100.
        let q = Pools::build(&c, Placement::Consolidated, false, &s, ModelPick::Slowest, true).unwrap();
        assert_eq!(q.place_for(Demand::gpus(4)).unwrap().parts, vec![(0, 4)]);
        // Unknown model: an error naming it.
        let bad = GpuNeeds { models: vec!["h100".into()], ..GpuNeeds::default() };
        assert!(p.eligible(&bad, 0).unwrap_err().contains("h100"));
        let mem = GpuNeeds { min_mem_mib: 100 * 1024, ..GpuNeeds::default() };
        assert!(p.eligible(&mem, 0).unwrap_err().contains("100 GiB"));
    }

    #[test]
    fn scaling_rounds_up() {
        assert_eq!(scaled(1000, 1.0), 1000);
        assert_eq!(scaled(1000, 3.0), 334);
        assert_eq!(scaled(1, 10.0), 1);
        assert_eq!(scaled(0, 2.0), 0);
    }
}
