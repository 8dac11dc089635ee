//! Free resources and placement: where a job of `g` GPUs can go, under the pooled or the
//! consolidated placement model. Feasibility checks are O(max GPUs per node); choosing nodes is
//! O(nodes).

use crate::nodeset::NodeSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// How a job's GPUs may be spread over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Any free GPUs anywhere (the Tiresias simulator's `--scheme=count`): only the count matters.
    #[default]
    Pooled,
    /// A job of at most one node's GPUs goes on one node (best fit: the node with the fewest free
    /// GPUs that still holds it, lowest index on ties); a larger job takes whole idle nodes,
    /// largest first (as the Helios and Lucid simulators do).
    Consolidated,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Pooled => "pooled",
            Placement::Consolidated => "consolidated",
        })
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pooled" => Ok(Placement::Pooled),
            "consolidated" => Ok(Placement::Consolidated),
            _ => Err(format!("unknown placement `{s}`: expected `pooled` or `consolidated`")),
        }
    }
}

/// What one job asks of the cluster, as placement sees it. `Demand::gpus(g)` is a plain
/// whole-GPU ask; the other fields are 0 when not asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// GPUs (1 for a fractional job).
    pub gpus: u32,
    /// For a fractional job (`gpus == 1`): its share of one GPU in thousandths (1..=999);
    /// 0 for whole GPUs.
    pub milli: u32,
    /// CPU cores (0: not asked).
    pub cpus: u32,
    /// Memory in MiB (0: not asked).
    pub mem_mib: u64,
    /// A gang's shape under consolidated placement: its GPUs split evenly over exactly this
    /// many distinct nodes (`--nodes N --gpus-per-node K`: `gpus = N x K`). 0: the placement
    /// decides. Pooled placement counts GPUs only and ignores it.
    pub nodes: u32,
    /// Which node pools may hold it ([`crate::pools`]): bit `p` for pool `p`; 0: any. One
    /// [`Capacity`] is one pool and ignores it.
    pub pools: u128,
    /// Its row in the speed matrix ([`crate::speed::Speeds::row_of`]), for the choice among pools.
    pub row: u16,
    /// The topology level its nodes must or should share ([`crate::topology`]); only a
    /// capacity with a topology reads it.
    pub topo: crate::topology::TopoNeed,
}

impl Demand {
    /// A plain ask for `g` whole GPUs.
    pub fn gpus(g: u32) -> Self {
        Demand { gpus: g, ..Demand::default() }
    }

    /// An ask with its share normalised: a share is only kept for one GPU and below 1000.
    #[inline]
    pub fn new(gpus: u32, milli: Option<u32>, cpus: u32, mem_mib: u64) -> Self {
        let milli = crate::model::fractional_share(gpus, milli).unwrap_or(0);
        Demand { gpus, milli, cpus, mem_mib, nodes: 0, pools: 0, row: 0, topo: crate::topology::TopoNeed::NONE }
    }

    /// The same ask as a gang on exactly `nodes` nodes (0: any placement). A shape that does
    /// not divide the GPUs evenly, or with a fractional share, is kept as given; such a job is
    /// refused at submit.
    #[inline]
    pub fn on_nodes(self, nodes: u32) -> Self {
        Demand { nodes, ..self }
    }

    /// The same ask limited to the pools of `e` ([`crate::pools::Elig`]).
    #[inline]
    pub fn within(self, e: crate::pools::Elig) -> Self {
        Demand { pools: e.pools, row: e.row, ..self }
    }

    /// The same ask with a topology level.
    #[inline]
    pub fn with_topo(self, topo: crate::topology::TopoNeed) -> Self {
        Demand { topo, ..self }
    }

    /// The same ask on any pool (what it would need without its constraints).
    #[inline]
    pub fn anywhere(self) -> Self {
        Demand { pools: 0, ..self }
    }

    /// GPUs per node of a gang shape (`nodes >= 1`, whole GPUs, an even split).
    #[inline]
    pub fn per_node_gpus(&self) -> Option<u32> {
        (self.nodes >= 1 && self.gpus > 0 && self.milli == 0 && self.gpus.is_multiple_of(self.nodes))
            .then(|| self.gpus / self.nodes)
    }

    /// True for a whole-GPU ask with no CPU or memory (the fast paths).
    pub fn is_plain(&self) -> bool {
        self.milli == 0 && self.cpus == 0 && self.mem_mib == 0
    }

    /// Thousandths of each of its GPUs the job holds: its share, or 1000 for whole GPUs.
    pub fn milli_per_gpu(&self) -> u32 {
        if self.milli > 0 {
            self.milli
        } else {
            1000
        }
    }

    /// CPUs and memory a multi-node job needs on a node where it holds `k` of its GPUs: its
    /// asks in proportion to GPUs, rounded up (`ceil(cpus * k / gpus)`), so every node carries
    /// at least its share. A single-node job (or one without GPUs) needs all of it there.
    pub fn per_node(&self, k: u32) -> (u32, u64) {
        if self.gpus <= 1 || k >= self.gpus {
            return (self.cpus, self.mem_mib);
        }
        let g = self.gpus as u64;
        let c = (self.cpus as u64 * k as u64).div_ceil(g) as u32;
        let m = (self.mem_mib as u128 * k as u128).div_ceil(g as u128) as u64;
        (c, m)
    }
}

/// GPUs taken on each node: `(node index, GPU count)`, sorted by node, counts > 0 (a count of
/// 0 only for a GPU-less job that holds CPUs or memory on that node).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Allocation {
    /// `(node index, GPUs on that node)`.
    pub parts: Vec<(u32, u32)>,
    /// The exact GPUs, share, CPUs and memory, present when the cluster models fractional
    /// GPUs, CPUs or memory (see [`Capacity::is_detailed`]); `None` on count-only clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<Detail>>,
}

/// The node-level part of an [`Allocation`] on a detailed cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Detail {
    /// GPU indices taken on each part's node, in the order of `parts`.
    pub gpu_ids: Vec<Vec<u32>>,
    /// Thousandths of each listed GPU taken: 1000 for whole GPUs, the share of a fractional job.
    pub milli: u32,
    /// CPUs taken on each part's node.
    pub cpus: Vec<u32>,
    /// Memory (MiB) taken on each part's node.
    pub mem_mib: Vec<u64>,
}

impl Allocation {
    /// Total GPUs in the allocation.
    pub fn gpus(&self) -> u32 {
        self.parts.iter().map(|p| p.1).sum()
    }
}

/// Per-node state of a detailed cluster: each GPU's used thousandths, CPUs and memory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Detailed {
    /// `used.node(n)[gpu]`: thousandths of that GPU held (1000: a whole-GPU job holds it).
    used: Used,
    cpu_cap: Arc<[u32]>,
    cpu_free: Vec<u32>,
    mem_cap: Arc<[u64]>,
    mem_free: Vec<u64>,
}

/// Each GPU's used thousandths, all nodes in one vector (so that what-if clones copy one
/// block), node `n`'s GPUs at `off[n]..off[n + 1]`; the offsets are shared between clones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Used {
    off: Arc<[u32]>,
    v: Vec<u16>,
}

impl Used {
    fn new(node_gpus: &[u32]) -> Self {
        let mut off = Vec::with_capacity(node_gpus.len() + 1);
        let mut at = 0u32;
        off.push(0);
        for &g in node_gpus {
            at += g;
            off.push(at);
        }
        Used { off: off.into(), v: vec![0; at as usize] }
    }

    fn node(&self, n: usize) -> &[u16] {
        &self.v[self.off[n] as usize..self.off[n + 1] as usize]
    }

    fn node_mut(&mut self, n: usize) -> &mut [u16] {
        &mut self.v[self.off[n] as usize..self.off[n + 1] as usize]
    }

    fn get(&self, n: usize) -> Option<&[u16]> {
        (n + 1 < self.off.len()).then(|| self.node(n))
    }
}

/// Free GPUs per node plus the indexes that make feasibility checks and placement cheap: the
/// nodes with each free count (a bitset per count), and under consolidated placement the idle
/// nodes of each size, so that the best-fit node or a multi-node job's nodes are found without
/// looking at every node (costs in docs/ARCHITECTURE.md, "Cost of each structure"). Cloning
/// copies the free counts and the bitsets (`n x (4 + (max GPUs per node + sizes) / 8)` bytes); a
/// scheduler's passes mostly avoid it by changing a scratch copy and rolling it back
/// ([`Capacity::begin_undo`], [`Capacity::rollback`]).
/// A *detailed* capacity (see [`Capacity::detailed`]) also tracks each GPU's used thousandths
/// and each node's CPUs and memory; its `free` counts GPUs no job holds any part of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    placement: Placement,
    /// GPUs of each node (never changes; shared between clones).
    cap: Arc<[u32]>,
    free: Vec<u32>,
    total_free: u64,
    total: u64,
    max_cap: u32,
    /// `by_free[f - 1]`: the nodes with exactly `f` free GPUs, `f` in `1..=max_cap`. Empty (no
    /// index) for a single node, where a node-level index has nothing to find, and for nodes of
    /// more than [`MAX_INDEXED_GPUS`] GPUs (then lookups scan the nodes).
    by_free: Vec<NodeSet>,
    /// Consolidated placement with an index: the idle nodes (all GPUs free) of each node size,
    /// largest size first.
    idle: Vec<(u32, NodeSet)>,
    /// Sum of the capacities of nodes that are entirely free.
    idle_cap: u64,
    /// Fractional GPUs, CPUs and memory, only when the cluster or its jobs use them.
    det: Option<Box<Detailed>>,
    /// While `logging` (between `begin_undo` and `rollback`): each node's free count before
    /// every change, in order.
    undo: Vec<(u32, u32)>,
    logging: bool,
    /// Free GPUs per unit of each topology level, when the cluster has a topology and
    /// placement is consolidated ([`Capacity::set_topology`]): gangs are then placed by
    /// [`crate::topology`].
    topo: Option<Box<crate::topology::TopoFree>>,
}

/// Largest node size (GPUs) the free-count index covers; clusters with larger nodes scan.
const MAX_INDEXED_GPUS: u32 = 1024;

impl Capacity {
    /// An empty (all free) cluster with the given GPUs per node.
    pub fn new(node_gpus: &[u32], placement: Placement) -> Self {
        let max_cap = node_gpus.iter().copied().max().unwrap_or(0);
        let n = node_gpus.len();
        let indexed = n > 1 && max_cap <= MAX_INDEXED_GPUS;
        let mut by_free = Vec::new();
        let mut idle: Vec<(u32, NodeSet)> = Vec::new();
        if indexed {
            by_free = (0..max_cap).map(|_| NodeSet::new(n)).collect();
            if placement == Placement::Consolidated {
                let mut sizes: Vec<u32> = node_gpus.iter().copied().filter(|&g| g > 0).collect();
                sizes.sort_unstable_by(|a, b| b.cmp(a));
                sizes.dedup();
                idle = sizes.into_iter().map(|g| (g, NodeSet::new(n))).collect();
            }
            for (i, &g) in node_gpus.iter().enumerate() {
                if g > 0 {
                    by_free[g as usize - 1].insert(i as u32);
                    if let Ok(k) = idle.binary_search_by(|e| g.cmp(&e.0)) {
                        idle[k].1.insert(i as u32);
                    }
                }
            }
        }
        let total: u64 = node_gpus.iter().map(|&g| g as u64).sum();
        Capacity {
            placement,
            cap: node_gpus.into(),
            free: node_gpus.to_vec(),
            total_free: total,
            total,
            max_cap,
            by_free,
            idle,
            idle_cap: total,
            det: None,
            undo: Vec::new(),
            logging: false,
            topo: None,
        }
    }

    /// Places gangs by `view`, the topology of this capacity's nodes (consolidated placement;
    /// ignored under pooled). Call it on an empty capacity.
    pub fn set_topology(&mut self, view: Arc<crate::topology::TopoView>) {
        if self.placement != Placement::Consolidated {
            return;
        }
        debug_assert_eq!(self.total_free, self.total, "set the topology on an empty capacity");
        self.topo = Some(Box::new(crate::topology::TopoFree::new(view, &self.cap)));
    }

    /// Why `d` waits for its required topology level, in words; `None` when that is not why.
    pub fn topology_why(&self, d: Demand) -> Option<String> {
        self.topo.as_ref().and_then(|t| t.why_not(self, d))
    }

    /// Whether node `n` has the CPUs and memory a part of `k` of `d`'s GPUs takes
    /// ([`Demand::per_node`]); always on a count-only capacity.
    #[inline]
    pub(crate) fn has_room(&self, n: usize, k: u32, d: Demand) -> bool {
        self.det.as_ref().is_none_or(|det| {
            let (c, m) = d.per_node(k);
            det.cpu_free[n] >= c && det.mem_free[n] >= m
        })
    }

    /// GPUs of its largest node.
    #[inline]
    pub fn max_node_gpus(&self) -> u32 {
        self.max_cap
    }

    /// What its topology says of `d` (`None`: no topology).
    #[inline]
    pub(crate) fn topo_route(&self, d: Demand) -> Option<crate::topology::Route> {
        self.topo.as_ref().map(|t| t.route(self, d))
    }

    /// A single virtual node of `total` GPUs with `free` of them free: the counter that pooled
    /// what-if planning uses, since which nodes a pooled job gets does not matter there.
    pub(crate) fn counter(total: u64, free: u64) -> Self {
        let mut c = Capacity::new(&[total as u32], Placement::Pooled);
        c.take_count((total - free) as u32);
        c
    }

    /// A copy of the free resources, without the undo log and not logging.
    pub(crate) fn snapshot(&mut self) -> Capacity {
        let undo = std::mem::take(&mut self.undo);
        let logging = std::mem::replace(&mut self.logging, false);
        let c = self.clone();
        self.undo = undo;
        self.logging = logging;
        c
    }

    /// Starts logging changes, so that [`Capacity::rollback`] can undo them (count-only
    /// capacities; a detailed one is never rolled back).
    pub(crate) fn begin_undo(&mut self) {
        debug_assert!(self.det.is_none(), "rollback is for count-only capacities");
        self.undo.clear();
        self.logging = true;
    }

    /// Undoes every change since [`Capacity::begin_undo`] and stops logging.
    pub(crate) fn rollback(&mut self) {
        self.logging = false;
        while let Some((n, old)) = self.undo.pop() {
            self.set_free(n as usize, old);
        }
    }

    /// How many changes are logged since [`Capacity::begin_undo`]: a mark for
    /// [`Capacity::rollback_to`].
    pub(crate) fn undo_len(&self) -> usize {
        self.undo.len()
    }

    /// Undoes the changes logged after `mark` (an [`Capacity::undo_len`]), logging on.
    pub(crate) fn rollback_to(&mut self, mark: usize) {
        let logging = std::mem::replace(&mut self.logging, false);
        while self.undo.len() > mark {
            let (n, old) = self.undo.pop().expect("longer than the mark");
            self.set_free(n as usize, old);
        }
        self.logging = logging;
    }

    /// An empty detailed cluster: GPUs per node, and CPUs and memory per node (`None`: not
    /// modelled, never a limit). Placement then tracks each GPU's shares and each node's CPUs
    /// and memory.
    pub fn detailed(node_gpus: &[u32], cpus: &[Option<u32>], mem_mib: &[Option<u64>], placement: Placement) -> Self {
        let mut c = Capacity::new(node_gpus, placement);
        let cpu_cap: Arc<[u32]> =
            (0..node_gpus.len()).map(|n| cpus.get(n).copied().flatten().unwrap_or(u32::MAX)).collect();
        let mem_cap: Arc<[u64]> =
            (0..node_gpus.len()).map(|n| mem_mib.get(n).copied().flatten().unwrap_or(u64::MAX)).collect();
        c.det = Some(Box::new(Detailed {
            used: Used::new(node_gpus),
            cpu_free: cpu_cap.to_vec(),
            cpu_cap,
            mem_free: mem_cap.to_vec(),
            mem_cap,
        }));
        c
    }

    /// Whether this capacity tracks fractional GPUs, CPUs and memory per node (its allocations
    /// then carry a [`Detail`]).
    #[inline]
    pub fn is_detailed(&self) -> bool {
        self.det.is_some()
    }

    /// The same cluster with everything free.
    pub fn empty_like(&self) -> Capacity {
        let mut c = Capacity::new(&self.cap, self.placement);
        if let Some(d) = &self.det {
            let cpus: Vec<Option<u32>> = d.cpu_cap.iter().map(|&x| Some(x)).collect();
            let mem: Vec<Option<u64>> = d.mem_cap.iter().map(|&x| Some(x)).collect();
            c = Capacity::detailed(&self.cap, &cpus, &mem, self.placement);
        }
        c.topo = self.topo.as_ref().map(|t| Box::new(t.emptied()));
        c
    }

    /// Thousandths of GPU `gpu` of node `node` held now (detailed capacities only; 0 otherwise).
    pub fn gpu_used(&self, node: u32, gpu: u32) -> u32 {
        self.det
            .as_ref()
            .and_then(|d| d.used.get(node as usize).and_then(|u| u.get(gpu as usize)))
            .map_or(0, |&u| u as u32)
    }

    /// Free CPUs and memory of a node (detailed capacities; `u32::MAX`/`u64::MAX` where not
    /// modelled or not detailed).
    pub fn node_free_cpu_mem(&self, node: u32) -> (u32, u64) {
        self.det.as_ref().map_or((u32::MAX, u64::MAX), |d| (d.cpu_free[node as usize], d.mem_free[node as usize]))
    }

    /// CPUs and memory (MiB) of the whole cluster, counting the nodes that model them (0 where
    /// none does).
    pub fn total_cpus_mem(&self) -> (u64, u64) {
        let Some(det) = &self.det else { return (0, 0) };
        let c = det.cpu_cap.iter().filter(|&&c| c != u32::MAX).map(|&c| c as u64).sum();
        let m = det.mem_cap.iter().filter(|&&m| m != u64::MAX).sum();
        (c, m)
    }

    /// The placement model in force.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Free GPUs in the whole cluster.
    #[inline]
    pub fn total_free(&self) -> u64 {
        self.total_free
    }

    /// GPUs in the whole cluster.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// GPUs of each node.
    pub fn cap_per_node(&self) -> &[u32] {
        &self.cap
    }

    /// Free GPUs on each node.
    pub fn free(&self) -> &[u32] {
        &self.free
    }

    /// Whether a job of `g` GPUs could ever run on this cluster when it is empty.
    pub fn can_ever_fit(&self, g: u32) -> bool {
        self.can_ever_fit_for(Demand::gpus(g))
    }

    /// Whether a job asking `d` could ever run on this cluster when it is empty.
    #[inline]
    pub fn can_ever_fit_for(&self, d: Demand) -> bool {
        if let Some(t) = &self.topo {
            if !t.can_ever(self, d) {
                return false;
            }
        }
        if let Some((n, k)) = self.shape(d) {
            // Enough nodes that hold `k` GPUs (and their share of CPUs and memory) when empty.
            let holds = (0..self.cap.len()).filter(|&i| {
                self.cap[i] >= k
                    && self.det.as_ref().is_none_or(|det| {
                        let (c, m) = d.per_node(k);
                        det.cpu_cap[i] >= c && det.mem_cap[i] >= m
                    })
            });
            return holds.take(n as usize).count() == n as usize;
        }
        let Some(det) = &self.det else { return d.gpus as u64 <= self.total };
        if d.gpus as u64 > self.total {
            return false;
        }
        if d.gpus <= self.max_cap {
            let need = d.gpus.max(if d.milli > 0 { 1 } else { 0 });
            return (0..self.cap.len())
                .any(|n| self.cap[n] >= need && det.cpu_cap[n] >= d.cpus && det.mem_cap[n] >= d.mem_mib);
        }
        self.empty_like().fits_for(d)
    }

    /// Whether a job of `g` GPUs fits now.
    #[inline]
    pub fn fits(&self, g: u32) -> bool {
        if self.det.is_some() {
            return self.fits_detailed(Demand::gpus(g));
        }
        self.fits_count(g)
    }

    /// Whether a job asking `d` fits now.
    #[inline]
    pub fn fits_for(&self, d: Demand) -> bool {
        use crate::topology::Route;
        // Count-only: fewer free GPUs than it asks rules it out under every rule (the cheap
        // check first; EASY's shadow asks it after each job it gives back).
        if self.det.is_none() && self.total_free < u64::from(d.gpus) {
            return false;
        }
        if self.topo.is_some() && !(d.topo.required && d.topo.level != u8::MAX) {
            // No required level: the topology only says where it goes (`Placed`), or leaves
            // it to the capacity's own rule (`Plain`), so it fits if either does; the rule is
            // asked first, being cheaper than routing over the units.
            return self.fits_plain(d) || matches!(self.topo_route(d), Some(Route::Placed(_)));
        }
        if let Some(r) = self.topo_route(d) {
            match r {
                Route::Placed(_) => return true,
                Route::Held => return false,
                Route::Plain => {}
            }
        }
        self.fits_plain(d)
    }

    /// Whether `d` fits by the capacity's own rule, whatever the topology.
    fn fits_plain(&self, d: Demand) -> bool {
        if let Some((n, k)) = self.shape(d) {
            return self.fits_shaped(n, k, d);
        }
        match &self.det {
            None => self.fits_count(d.gpus),
            Some(_) => {
                let fits = self.fits_detailed(d);
                debug_assert_eq!(fits, self.place_detailed(d).is_some(), "fits and place disagree on {d:?}");
                fits
            }
        }
    }

    /// Whether `place_detailed(d)` would find a place, without choosing the best one: the
    /// first node that holds it will do (the common single-node cases).
    fn fits_detailed(&self, d: Demand) -> bool {
        let det = self.det.as_ref().expect("detailed");
        let room = |n: usize, k: u32| {
            let (c, m) = d.per_node(k);
            det.cpu_free[n] >= c && det.mem_free[n] >= m
        };
        if d.gpus == 0 {
            return (d.cpus == 0 && d.mem_mib == 0) || (0..self.cap.len()).any(|n| room(n, 0));
        }
        if d.milli > 0 {
            return (0..self.cap.len()).any(|n| {
                room(n, 1)
                    && (self.free[n] > 0 || det.used.node(n).iter().any(|&u| u > 0 && u as u32 + d.milli <= 1000))
            });
        }
        if !self.fits_count(d.gpus) {
            return false;
        }
        if d.gpus <= self.max_cap && (0..self.cap.len()).any(|n| self.free[n] >= d.gpus && room(n, d.gpus)) {
            return true;
        }
        if d.gpus <= self.max_cap && self.placement == Placement::Consolidated {
            return false;
        }
        self.place_detailed(d).is_some()
    }

    #[inline]
    fn fits_count(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        match self.placement {
            Placement::Pooled => self.total_free >= g as u64,
            Placement::Consolidated => {
                if g <= self.max_cap {
                    self.best_fit_node(g).is_some()
                } else {
                    // Cheap necessary condition first, then the exact one (by counts where the
                    // free-count index is kept).
                    self.idle_cap + self.max_cap as u64 > g as u64 && self.fits_multi_node(g)
                }
            }
        }
    }

    /// Chooses where a job of `g` GPUs would go now, without taking anything. `None` if it does
    /// not fit. Deterministic: ties go to the lowest node index.
    #[inline]
    pub fn place(&self, g: u32) -> Option<Allocation> {
        if self.det.is_some() {
            return self.place_detailed(Demand::gpus(g));
        }
        self.place_count(g)
    }

    /// Chooses where a job asking `d` would go now (see [`Capacity::place`]). On a count-only
    /// capacity the share, CPUs and memory are not modelled and only the GPU count matters.
    #[inline]
    pub fn place_for(&self, d: Demand) -> Option<Allocation> {
        if let Some(r) = self.topo_route(d) {
            use crate::topology::Route;
            match r {
                Route::Placed(a) => return Some(a),
                Route::Held => return None,
                Route::Plain => {}
            }
        }
        if let Some((n, k)) = self.shape(d) {
            return self.place_shaped(n, k, d);
        }
        match &self.det {
            None => self.place_count(d.gpus),
            Some(_) => self.place_detailed(d),
        }
    }

    /// The gang shape `(nodes, GPUs per node)` placement must honour: a demand with
    /// [`Demand::nodes`] under consolidated placement (pooled placement counts GPUs only).
    #[inline]
    fn shape(&self, d: Demand) -> Option<(u32, u32)> {
        if d.nodes == 0 || self.placement != Placement::Consolidated {
            return None;
        }
        Some(d.per_node_gpus().map_or((d.nodes, u32::MAX), |k| (d.nodes, k)))
    }

    /// How many nodes have at least `k` free GPUs (`1 <= k <= max_cap`), from the free-count
    /// index's member counts.
    fn nodes_with_free(&self, k: u32) -> u64 {
        (k..=self.max_cap).map(|f| u64::from(self.by_free[f as usize - 1].len())).sum()
    }

    /// Whether [`Capacity::place_shaped`] finds a place. On a count-only capacity with the
    /// free-count index, by counting the nodes with at least `k` free (O(G)), without choosing
    /// them and building the allocation.
    fn fits_shaped(&self, n: u32, k: u32, d: Demand) -> bool {
        if self.det.is_none() && !self.by_free.is_empty() && k >= 1 {
            if k > self.max_cap || u64::from(n) * u64::from(k) > self.total_free {
                return false;
            }
            return self.nodes_with_free(k) >= u64::from(n);
        }
        self.place_shaped(n, k, d).is_some()
    }

    /// A gang of `n` nodes with `k` GPUs each (and, on a detailed capacity, each node's share
    /// of the CPUs and memory): the nodes with the fewest free GPUs that hold `k`, lowest index
    /// on ties (best fit, as for one node). All of it or nothing. With the free-count index
    /// this costs O(G + n); without, a scan of the nodes.
    fn place_shaped(&self, n: u32, k: u32, d: Demand) -> Option<Allocation> {
        if k == u32::MAX || k > self.max_cap || (n as u64) * (k as u64) > self.total_free {
            return None;
        }
        let mut parts: Vec<(u32, u32)> = Vec::with_capacity(n as usize);
        match &self.det {
            None if !self.by_free.is_empty() => {
                'f: for f in k..=self.max_cap {
                    for i in self.by_free[f as usize - 1].iter_from(0) {
                        parts.push((i, k));
                        if parts.len() == n as usize {
                            break 'f;
                        }
                    }
                }
            }
            det => {
                let room = |i: usize| {
                    det.as_ref().is_none_or(|det| {
                        let (c, m) = d.per_node(k);
                        det.cpu_free[i] >= c && det.mem_free[i] >= m
                    })
                };
                let mut fit: Vec<usize> = (0..self.cap.len()).filter(|&i| self.free[i] >= k && room(i)).collect();
                if fit.len() < n as usize {
                    return None;
                }
                fit.sort_by_key(|&i| (self.free[i], i));
                parts.extend(fit.into_iter().take(n as usize).map(|i| (i as u32, k)));
            }
        }
        if parts.len() < n as usize {
            return None;
        }
        parts.sort_unstable();
        let alloc = Allocation { parts, detail: None };
        match &self.det {
            None => Some(alloc),
            // The lowest free GPUs of each node, with its share of the CPUs and memory.
            Some(_) => self.complete(&alloc, d),
        }
    }

    fn place_count(&self, g: u32) -> Option<Allocation> {
        if g == 0 {
            return Some(Allocation::default());
        }
        if g <= self.max_cap {
            if let Some(n) = self.best_fit_node(g) {
                return Some(Allocation { parts: vec![(n, g)], detail: None });
            }
        }
        if self.placement == Placement::Consolidated {
            // Cheap necessary condition first (jobs larger than a node are a small minority).
            if g <= self.max_cap || self.idle_cap + self.max_cap as u64 <= g as u64 {
                return None;
            }
            return self.place_multi_node(g);
        }
        if self.total_free < g as u64 {
            return None;
        }
        // Pooled, larger than any one node's free GPUs: fewest nodes, most free first, lowest
        // index on ties.
        let mut left = g;
        let mut parts = Vec::new();
        if self.by_free.is_empty() {
            let mut order: Vec<u32> = (0..self.cap.len() as u32).filter(|&n| self.free[n as usize] > 0).collect();
            order.sort_by_key(|&n| (std::cmp::Reverse(self.free[n as usize]), n));
            for n in order {
                if left == 0 {
                    break;
                }
                let take = left.min(self.free[n as usize]);
                parts.push((n, take));
                left -= take;
            }
        } else {
            'nodes: for f in (1..=self.max_cap).rev() {
                for n in self.by_free[f as usize - 1].iter_from(0) {
                    let take = left.min(f);
                    parts.push((n, take));
                    left -= take;
                    if left == 0 {
                        break 'nodes;
                    }
                }
            }
        }
        debug_assert_eq!(left, 0, "the free total said yes");
        parts.sort_unstable();
        Some(Allocation { parts, detail: None })
    }

    /// Detailed placement. A fractional job goes on the shared GPU with the least room left
    /// that still holds its share (best fit; lowest node, then GPU, on ties) on a node with the
    /// CPUs and memory it asks; failing that, on the lowest free GPU of the node with the fewest
    /// free GPUs that has one (and the CPUs and memory). A whole-GPU job of at most one node
    /// goes on the node with the fewest free GPUs that holds it and its CPUs and memory; a
    /// GPU-less job that asks CPUs or memory on the node with the fewest free CPUs that holds
    /// it. Larger jobs follow the count-only rules, each node holding `k` of the job's GPUs
    /// also giving [`Demand::per_node`]`(k)`. GPUs within a node: lowest free indices.
    fn place_detailed(&self, d: Demand) -> Option<Allocation> {
        let det = self.det.as_ref().expect("detailed");
        let room = |n: usize, k: u32| {
            let (c, m) = d.per_node(k);
            det.cpu_free[n] >= c && det.mem_free[n] >= m
        };
        let build = |parts: Vec<(u32, u32)>, milli: u32, fixed: Option<u32>| {
            let mut gpu_ids = Vec::with_capacity(parts.len());
            let mut cpus = Vec::with_capacity(parts.len());
            let mut mem = Vec::with_capacity(parts.len());
            for &(n, k) in &parts {
                let ids: Vec<u32> = match fixed {
                    Some(i) => vec![i],
                    None => det
                        .used
                        .node(n as usize)
                        .iter()
                        .enumerate()
                        .filter(|(_, &u)| u == 0)
                        .map(|(i, _)| i as u32)
                        .take(k as usize)
                        .collect(),
                };
                gpu_ids.push(ids);
                let (c, m) = d.per_node(k);
                cpus.push(c);
                mem.push(m);
            }
            Allocation { parts, detail: Some(Box::new(Detail { gpu_ids, milli, cpus, mem_mib: mem })) }
        };
        if d.gpus == 0 {
            if d.cpus == 0 && d.mem_mib == 0 {
                return Some(Allocation::default());
            }
            let n =
                (0..self.cap.len()).filter(|&n| room(n, 0)).min_by_key(|&n| (det.cpu_free[n], det.mem_free[n], n))?;
            return Some(build(vec![(n as u32, 0)], 1000, None));
        }
        if d.milli > 0 {
            // Best fit on a GPU already shared.
            let mut best: Option<(u32, usize, u32)> = None;
            for n in 0..self.cap.len() {
                if self.free[n] == self.cap[n] || !room(n, 1) {
                    continue;
                }
                for (i, &u) in det.used.node(n).iter().enumerate() {
                    let u = u as u32;
                    if u > 0 && u + d.milli <= 1000 {
                        let left = 1000 - u - d.milli;
                        if best.is_none_or(|b| left < b.0) {
                            best = Some((left, n, i as u32));
                        }
                    }
                }
            }
            if let Some((_, n, i)) = best {
                return Some(build(vec![(n as u32, 1)], d.milli, Some(i)));
            }
            let n =
                (0..self.cap.len()).filter(|&n| self.free[n] > 0 && room(n, 1)).min_by_key(|&n| (self.free[n], n))?;
            return Some(build(vec![(n as u32, 1)], d.milli, None));
        }
        if !self.fits_count(d.gpus) {
            return None;
        }
        let g = d.gpus;
        if g <= self.max_cap {
            let best =
                (0..self.cap.len()).filter(|&n| self.free[n] >= g && room(n, g)).min_by_key(|&n| (self.free[n], n));
            if let Some(n) = best {
                return Some(build(vec![(n as u32, g)], 1000, None));
            }
            if self.placement == Placement::Consolidated {
                return None;
            }
        }
        let mut parts = Vec::new();
        let mut left = g;
        // How many of the job's GPUs node `n` can hold, its CPU and memory share included.
        let most = |n: usize, upto: u32| {
            let mut k = upto.min(self.free[n]);
            while k > 0 && !room(n, k) {
                k -= 1;
            }
            k
        };
        if self.placement == Placement::Consolidated {
            let mut idle: Vec<usize> =
                (0..self.cap.len()).filter(|&n| self.free[n] == self.cap[n] && self.cap[n] > 0).collect();
            idle.sort_by_key(|&n| (std::cmp::Reverse(self.cap[n]), n));
            for &n in &idle {
                let c = self.cap[n];
                if left >= c && room(n, c) {
                    parts.push((n as u32, c));
                    left -= c;
                }
            }
            if left > 0 {
                let used = |n: usize| parts.iter().any(|&(m, _)| m as usize == n);
                let best = (0..self.cap.len())
                    .filter(|&n| !used(n) && self.free[n] >= left && room(n, left))
                    .max_by_key(|&n| (self.free[n], std::cmp::Reverse(n)))?;
                parts.push((best as u32, left));
            }
        } else {
            let mut order: Vec<usize> = (0..self.cap.len()).filter(|&n| self.free[n] > 0).collect();
            order.sort_by_key(|&n| (std::cmp::Reverse(self.free[n]), n));
            for n in order {
                if left == 0 {
                    break;
                }
                let k = most(n, left);
                if k > 0 {
                    parts.push((n as u32, k));
                    left -= k;
                }
            }
            if left > 0 {
                return None;
            }
        }
        parts.sort_unstable();
        Some(build(parts, 1000, None))
    }

    /// Gives a count-only allocation of whole GPUs its [`Detail`] on this detailed capacity: the
    /// lowest free GPUs of each node, and the job's CPUs and memory per node. `None` for a
    /// fractional ask or a node without enough free GPUs.
    pub fn complete(&self, alloc: &Allocation, d: Demand) -> Option<Allocation> {
        let det = self.det.as_ref()?;
        if d.milli > 0 {
            return None;
        }
        let mut dt = Detail { milli: 1000, ..Detail::default() };
        for &(n, k) in &alloc.parts {
            let used = det.used.get(n as usize)?;
            let ids: Vec<u32> =
                used.iter().enumerate().filter(|(_, &u)| u == 0).map(|(i, _)| i as u32).take(k as usize).collect();
            if ids.len() != k as usize {
                return None;
            }
            dt.gpu_ids.push(ids);
            let (c, m) = d.per_node(k);
            dt.cpus.push(c);
            dt.mem_mib.push(m);
        }
        Some(Allocation { parts: alloc.parts.clone(), detail: Some(Box::new(dt)) })
    }

    /// Why a job asking `d` does not fit now, in words (for `explain`).
    pub fn why_not(&self, d: Demand) -> String {
        if let Some(w) = self.topology_why(d) {
            return w;
        }
        if let Some((n, k)) = self.shape(d) {
            if k == u32::MAX {
                return format!("{} GPUs do not split evenly over {n} nodes", d.gpus);
            }
            let have = (0..self.cap.len()).filter(|&i| self.free[i] >= k).count();
            return format!(
                "needs {n} nodes with {k} free GPUs each{}, all at once; {} {} {k} free now",
                if d.cpus > 0 || d.mem_mib > 0 { " and their share of CPUs and memory" } else { "" },
                crate::words::count(have, "node"),
                crate::words::agree(have, "has", "have"),
            );
        }
        let Some(det) = &self.det else {
            return format!("not enough free GPUs: needs {}, {} free", d.gpus, self.total_free);
        };
        let gpu_ok = |n: usize| -> bool {
            if d.milli > 0 {
                self.free[n] > 0 || det.used.node(n).iter().any(|&u| u > 0 && u as u32 + d.milli <= 1000)
            } else {
                self.free[n] >= d.gpus.min(self.cap[n]).max(if d.gpus > 0 { 1 } else { 0 })
            }
        };
        let what = match (d.milli, d.gpus) {
            (m, _) if m > 0 => format!("{m} thousandths of a GPU free"),
            (_, 1) => "a free GPU".to_string(),
            (_, g) => format!("{g} free GPUs"),
        };
        let with_gpu: Vec<usize> = (0..self.cap.len()).filter(|&n| gpu_ok(n)).collect();
        if with_gpu.is_empty() {
            return format!("no node has {what}");
        }
        if d.gpus > self.max_cap {
            return format!(
                "needs {} GPUs over several nodes, each with its CPU and memory share; not enough free now",
                d.gpus
            );
        }
        let (c, m) = (d.cpus, d.mem_mib);
        if !with_gpu.iter().any(|&n| det.cpu_free[n] >= c) {
            return format!("not enough free CPU on any node that has {what} (needs {c} CPUs)");
        }
        if !with_gpu.iter().any(|&n| det.cpu_free[n] >= c && det.mem_free[n] >= m) {
            return format!("not enough free memory on any node that has {what} and the CPUs (needs {m} MiB)");
        }
        format!("no node has {what} together with {c} CPUs and {m} MiB free")
    }

    /// Whether [`Capacity::place_multi_node`] finds a place. With the free-count index, by
    /// counts alone: how many idle nodes of each size it takes (as many as the remainder holds,
    /// largest size first) and whether a node it did not take holds what is left; on a cluster
    /// of one-GPU nodes every multi-GPU job asks this, and building the allocation cost more.
    fn fits_multi_node(&self, g: u32) -> bool {
        if self.by_free.is_empty() {
            return self.place_multi_node(g).is_some();
        }
        // The idle nodes of size `c` taken with `left` to place: as in `place_multi_node`.
        let take = |left: u32, c: u32, set: &NodeSet| if left < c { 0 } else { (left / c).min(set.len()) };
        let left = self.idle.iter().fold(g, |left, (c, set)| left - take(left, *c, set) * c);
        if left == 0 {
            return true;
        }
        if left > self.max_cap {
            return false;
        }
        let holding = self.nodes_with_free(left);
        // Taken idle nodes hold their size free: those of at least `left` are not candidates.
        let mut rest = g;
        let mut taken = 0u64;
        for (c, set) in &self.idle {
            let k = take(rest, *c, set);
            rest -= k * c;
            if *c >= left {
                taken += u64::from(k);
            }
        }
        holding > taken
    }

    /// Consolidated placement of a job larger than one node (as the Helios simulator's
    /// `consolidate` placer): whole idle nodes, largest first, lowest index on ties, while the
    /// remainder is at least a whole node; the remainder goes on the node with the most free
    /// GPUs among the others (lowest index on ties), if it holds it.
    fn place_multi_node(&self, g: u32) -> Option<Allocation> {
        let mut left = g;
        let mut parts = Vec::new();
        if self.by_free.is_empty() {
            let mut idle: Vec<u32> = (0..self.cap.len() as u32)
                .filter(|&n| self.free[n as usize] == self.cap[n as usize] && self.cap[n as usize] > 0)
                .collect();
            idle.sort_by_key(|&n| (std::cmp::Reverse(self.cap[n as usize]), n));
            for &n in &idle {
                let c = self.cap[n as usize];
                if left >= c {
                    parts.push((n, c));
                    left -= c;
                }
            }
            if left > 0 {
                let used = |n: u32| parts.iter().any(|&(m, _)| m == n);
                let best = (0..self.cap.len() as u32)
                    .filter(|&n| !used(n) && self.free[n as usize] >= left)
                    .max_by_key(|&n| (self.free[n as usize], std::cmp::Reverse(n)))?;
                parts.push((best, left));
            }
            parts.sort_unstable();
            return Some(Allocation { parts, detail: None });
        }
        // Indexed: the idle nodes of each size in index order, largest size first; a size
        // larger than what is left is skipped whole.
        for (c, set) in &self.idle {
            if left < *c {
                continue;
            }
            for n in set.iter_from(0) {
                parts.push((n, *c));
                left -= c;
                if left < *c {
                    break;
                }
            }
        }
        parts.sort_unstable();
        if left > 0 {
            // The most free GPUs first, lowest index first: the first node not already taken.
            let taken = |n: u32| parts.binary_search_by_key(&n, |p| p.0).is_ok();
            let best = (left..=self.max_cap)
                .rev()
                .find_map(|f| self.by_free[f as usize - 1].iter_from(0).find(|&n| !taken(n)))?;
            let at = parts.partition_point(|p| p.0 < best);
            parts.insert(at, (best, left));
        }
        Some(Allocation { parts, detail: None })
    }

    /// The node a job of `g` GPUs (`1..=max_cap`) goes on: the fewest free GPUs that hold it,
    /// lowest index on ties.
    fn best_fit_node(&self, g: u32) -> Option<u32> {
        debug_assert!(g >= 1);
        if !self.by_free.is_empty() {
            return (g..=self.max_cap).find_map(|f| self.by_free[f as usize - 1].first_from(0));
        }
        let mut best: Option<(u32, u32)> = None;
        for (n, &f) in self.free.iter().enumerate() {
            if f >= g && best.is_none_or(|(bf, _)| f < bf) {
                best = Some((f, n as u32));
                if f == g {
                    break;
                }
            }
        }
        best.map(|(_, n)| n)
    }

    /// Gives `g` GPUs back to a single-node capacity (the pooled counters of what-if planning).
    pub(crate) fn give_count(&mut self, g: u32) {
        debug_assert_eq!(self.free.len(), 1);
        let f = self.free[0];
        assert!(f + g <= self.cap[0], "giving back {g} GPUs with {f} of {} free", self.cap[0]);
        self.set_free(0, f + g);
    }

    /// Takes `g` GPUs from a single-node capacity (the pooled counters of what-if planning).
    pub(crate) fn take_count(&mut self, g: u32) {
        debug_assert_eq!(self.free.len(), 1);
        let f = self.free[0];
        assert!(f >= g, "taking {g} GPUs with only {f} free");
        self.set_free(0, f - g);
    }

    /// Whether every part of `alloc` is free on its node now. On a detailed capacity the
    /// allocation must carry its [`Detail`], whose GPUs, share, CPUs and memory must be free.
    #[inline]
    pub fn can_take(&self, alloc: &Allocation) -> bool {
        if self.det.is_some() {
            // Per GPU: a share may go on a GPU that is not free but has room.
            return self.can_take_detailed(alloc);
        }
        alloc.parts.iter().all(|&(n, k)| (n as usize) < self.free.len() && self.free[n as usize] >= k)
    }

    #[inline(never)]
    fn can_take_detailed(&self, alloc: &Allocation) -> bool {
        let det = self.det.as_ref().expect("detailed");
        let Some(dt) = &alloc.detail else { return alloc.parts.is_empty() };
        if dt.gpu_ids.len() != alloc.parts.len()
            || dt.cpus.len() != alloc.parts.len()
            || dt.mem_mib.len() != alloc.parts.len()
        {
            return false;
        }
        alloc.parts.iter().enumerate().all(|(p, &(n, k))| {
            let n = n as usize;
            n < self.cap.len()
                && dt.gpu_ids[p].len() == k as usize
                && dt.gpu_ids[p]
                    .iter()
                    .all(|&i| det.used.node(n).get(i as usize).is_some_and(|&u| u as u32 + dt.milli <= 1000))
                && det.cpu_free[n] >= dt.cpus[p]
                && det.mem_free[n] >= dt.mem_mib[p]
        })
    }

    /// Takes `alloc`. Panics (a bug, never user input) if it is not free: callers check first.
    #[inline]
    pub fn take(&mut self, alloc: &Allocation) {
        if self.det.is_some() {
            assert!(self.can_take(alloc), "taking an allocation that is not free: {alloc:?}");
            self.apply_detail(alloc, true);
            return;
        }
        for &(n, k) in &alloc.parts {
            self.take_part(n, k);
        }
    }

    /// Takes `k` GPUs of node `n` (count-only: not on a detailed capacity).
    #[inline]
    pub(crate) fn take_part(&mut self, n: u32, k: u32) {
        debug_assert!(self.det.is_none());
        let f = self.free[n as usize];
        assert!(f >= k, "taking {k} GPUs on node {n} with only {f} free");
        self.set_free(n as usize, f - k);
    }

    /// Gives back `k` GPUs of node `n` (count-only: not on a detailed capacity).
    #[inline]
    pub(crate) fn give_part(&mut self, n: u32, k: u32) {
        debug_assert!(self.det.is_none());
        let f = self.free[n as usize];
        assert!(f + k <= self.cap[n as usize], "giving back more GPUs than node {n} has");
        self.set_free(n as usize, f + k);
    }

    /// Gives `alloc` back.
    #[inline]
    pub fn give(&mut self, alloc: &Allocation) {
        if self.det.is_some() {
            self.apply_detail(alloc, false);
            return;
        }
        for &(n, k) in &alloc.parts {
            self.give_part(n, k);
        }
    }

    #[inline(never)]
    fn apply_detail(&mut self, alloc: &Allocation, take: bool) {
        let Some(dt) = &alloc.detail else {
            assert!(alloc.parts.is_empty(), "an allocation without detail on a detailed cluster");
            return;
        };
        for (p, &(n, _)) in alloc.parts.iter().enumerate() {
            let n = n as usize;
            let mut free_delta: i64 = 0;
            {
                let det = self.det.as_mut().expect("detailed");
                for &i in &dt.gpu_ids[p] {
                    let u = &mut det.used.node_mut(n)[i as usize];
                    let before = *u as u32;
                    let after = if take {
                        before + dt.milli
                    } else {
                        before.checked_sub(dt.milli).expect("giving back a share that is not held")
                    };
                    assert!(after <= 1000, "GPU {i} of node {n} over 1000 thousandths");
                    *u = after as u16;
                    if before == 0 && after > 0 {
                        free_delta -= 1;
                    } else if before > 0 && after == 0 {
                        free_delta += 1;
                    }
                }
                if take {
                    det.cpu_free[n] -= dt.cpus[p];
                    det.mem_free[n] -= dt.mem_mib[p];
                } else {
                    det.cpu_free[n] += dt.cpus[p];
                    det.mem_free[n] += dt.mem_mib[p];
                    assert!(
                        det.cpu_free[n] <= det.cpu_cap[n] && det.mem_free[n] <= det.mem_cap[n],
                        "giving back more CPU or memory than node {n} has"
                    );
                }
            }
            if free_delta != 0 {
                let f = (self.free[n] as i64 + free_delta) as u32;
                self.set_free(n, f);
            }
        }
    }

    /// Like [`Capacity::take`] but for what-if states: a pooled state only counts GPUs, so the
    /// allocation's nodes do not matter there; a consolidated (or detailed) state takes the
    /// exact nodes. Returns false (and changes nothing) if it cannot.
    pub fn take_what_if(&mut self, alloc: &Allocation) -> bool {
        match self.placement {
            Placement::Pooled if self.det.is_none() => {
                let g = alloc.gpus() as u64;
                if self.total_free < g {
                    return false;
                }
                // Any nodes will do in a pooled what-if; take from the fullest-free first so the
                // per-node vector stays consistent with the count.
                let a = self.place(g as u32).expect("total free suffices");
                self.take(&a);
                true
            }
            _ => {
                if !self.can_take(alloc) {
                    return false;
                }
                self.take(alloc);
                true
            }
        }
    }

    fn set_free(&mut self, n: usize, new: u32) {
        let old = self.free[n];
        if old == new {
            return;
        }
        if self.logging {
            self.undo.push((n as u32, old));
        }
        let cap = self.cap[n];
        if !self.by_free.is_empty() {
            if old > 0 {
                self.by_free[old as usize - 1].remove(n as u32);
            }
            if new > 0 {
                self.by_free[new as usize - 1].insert(n as u32);
            }
        }
        if old == cap {
            self.idle_cap -= cap as u64;
            if let Ok(k) = self.idle.binary_search_by(|e| cap.cmp(&e.0)) {
                self.idle[k].1.remove(n as u32);
            }
        }
        if new == cap {
            self.idle_cap += cap as u64;
            if let Ok(k) = self.idle.binary_search_by(|e| cap.cmp(&e.0)) {
                self.idle[k].1.insert(n as u32);
            }
        }
        if let Some(t) = &mut self.topo {
            t.on_change(n, cap, old, new);
        }
        self.total_free = self.total_free - old as u64 + new as u64;
        self.free[n] = new;
    }

    /// Element-wise minimum of free resources with `other` (same cluster): the resources free
    /// in both (on a detailed capacity, each GPU's larger use, each node's smaller free CPUs
    /// and memory).
    pub fn min_with(&mut self, other: &Capacity) {
        if let (true, Some(od)) = (self.det.is_some(), other.det.as_ref()) {
            let mut det = self.det.take().expect("checked");
            // Flat, element by element (the GPUs of all nodes are one vector): conservative
            // backfill on a detailed cluster takes this minimum over every step of a window.
            for (u, &o) in det.used.v.iter_mut().zip(&od.used.v) {
                *u = (*u).max(o);
            }
            for (c, &o) in det.cpu_free.iter_mut().zip(&od.cpu_free) {
                *c = (*c).min(o);
            }
            for (m, &o) in det.mem_free.iter_mut().zip(&od.mem_free) {
                *m = (*m).min(o);
            }
            for n in 0..self.cap.len() {
                let f = det.used.node(n).iter().filter(|&&u| u == 0).count() as u32;
                if f != self.free[n] {
                    self.set_free(n, f);
                }
            }
            self.det = Some(det);
            return;
        }
        for n in 0..self.free.len() {
            let m = self.free[n].min(other.free[n]);
            if m != self.free[n] {
                self.set_free(n, m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn consolidated_best_fit_and_whole_nodes() {
        let mut c = Capacity::new(&[8, 8, 8], Placement::Consolidated);
        let a = c.place(3).unwrap();
        assert_eq!(a.parts, vec![(0, 3)]);
        c.take(&a);
        // Best fit: node 0 has 5 free, the tightest that holds 4.
        assert_eq!(c.place(4).unwrap().parts, vec![(0, 4)]);
        // 16 GPUs need two idle nodes.
        assert_eq!(c.place(16).unwrap().parts, vec![(1, 8), (2, 8)]);
        // 21 = two idle nodes + 5 on node 0 (the remainder goes on the node with most free).
        assert_eq!(c.place(21).unwrap().parts, vec![(0, 5), (1, 8), (2, 8)]);
        assert!(!c.fits(22));
        c.take(&Allocation { parts: vec![(1, 1)], detail: None });
        // Idle: node 2 only; node 1 has 7 free, node 0 has 5.
        assert!(!c.fits(16));
        assert!(c.fits(15));
        assert_eq!(c.place(7).unwrap().parts, vec![(1, 7)]);
        assert_eq!(c.place(8).unwrap().parts, vec![(2, 8)]);
    }

    /// The same cluster without the free-count index: every lookup scans the nodes, as it did
    /// before the index existed.
    fn unindexed(node_gpus: &[u32], placement: Placement) -> Capacity {
        let mut c = Capacity::new(node_gpus, placement);
        c.by_free.clear();
        c.idle.clear();
        c
    }

    #[test]
    fn the_index_places_as_a_scan_of_every_node() {
        // Seeded random takes and gives on heterogeneous clusters: the indexed capacity chooses
        // exactly the nodes the scans choose, its fit checks (by counts, for jobs larger than a
        // node and for gangs) agree with placing, and rolling back restores it exactly.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut rnd = |m: u64| rng.random_range(0..m);
        for placement in [Placement::Pooled, Placement::Consolidated] {
            for nodes in [vec![8u32; 70], vec![1; 200], [vec![8; 30], vec![4; 20], vec![2; 15], vec![0; 3]].concat()] {
                let mut a = Capacity::new(&nodes, placement);
                let mut b = unindexed(&nodes, placement);
                let start = a.clone();
                a.begin_undo();
                let mut held: Vec<Allocation> = Vec::new();
                for _ in 0..3_000 {
                    if rnd(3) > 0 || held.is_empty() {
                        let range = if rnd(10) == 0 { 120 } else { 9 };
                        let g = 1 + rnd(range) as u32;
                        let pa = a.place(g);
                        assert_eq!(pa, b.place(g), "{placement} {g} GPUs");
                        assert_eq!(a.fits(g), pa.is_some());
                        // Gangs of a fixed shape: counting finds what placing finds.
                        if placement == Placement::Consolidated {
                            let (n, k) = (1 + rnd(40) as u32, 1 + rnd(9) as u32);
                            let d = Demand::gpus(n * k);
                            let shaped = b.place_shaped(n, k, d);
                            assert_eq!(a.place_shaped(n, k, d), shaped, "{n} nodes of {k} GPUs");
                            assert_eq!(a.fits_shaped(n, k, d), shaped.is_some(), "{n} nodes of {k} GPUs");
                        }
                        if let Some(al) = pa {
                            a.take(&al);
                            b.take(&al);
                            held.push(al);
                        }
                    } else {
                        let al = held.swap_remove(rnd(held.len() as u64) as usize);
                        a.give(&al);
                        b.give(&al);
                    }
                    assert_eq!(a.free, b.free);
                }
                a.rollback();
                assert_eq!(a, start);
            }
        }
    }

    #[test]
    fn pooled_counts_only() {
        let mut c = Capacity::new(&[8, 8], Placement::Pooled);
        c.take(&Allocation { parts: vec![(0, 5), (1, 5)], detail: None });
        assert!(c.fits(6));
        let a = c.place(6).unwrap();
        assert_eq!(a.gpus(), 6);
        c.take(&a);
        assert_eq!(c.total_free(), 0);
        assert!(!c.fits(1));
    }

    fn frac(m: u32) -> Demand {
        Demand::new(1, Some(m), 0, 0)
    }

    fn ids(a: &Allocation) -> (u32, Vec<u32>, u32) {
        let d = a.detail.as_ref().expect("detailed allocation");
        (a.parts[0].0, d.gpu_ids[0].clone(), d.milli)
    }

    #[test]
    fn fractional_jobs_share_a_gpu_best_fit() {
        let mut c = Capacity::detailed(&[2, 2], &[], &[], Placement::Consolidated);
        // A fresh GPU on the fullest node (all equal: node 0), lowest index.
        let a = c.place_for(frac(300)).unwrap();
        assert_eq!(ids(&a), (0, vec![0], 300));
        c.take(&a);
        assert_eq!(c.free(), &[1, 2]);
        // 600 goes on the shared GPU (room 700), not a fresh one.
        let b = c.place_for(frac(600)).unwrap();
        assert_eq!(ids(&b), (0, vec![0], 600));
        c.take(&b);
        assert_eq!(c.gpu_used(0, 0), 900);
        // 200 does not fit in the 100 left: a fresh GPU on the fullest node with one (node 0).
        let d = c.place_for(frac(200)).unwrap();
        assert_eq!(ids(&d), (0, vec![1], 200));
        c.take(&d);
        assert_eq!(c.free(), &[0, 2]);
        // 100 fits exactly on GPU 0 (best fit: room 0 beats room 700 on GPU 1).
        let e = c.place_for(frac(100)).unwrap();
        assert_eq!(ids(&e), (0, vec![0], 100));
        c.take(&e);
        assert_eq!(c.gpu_used(0, 0), 1000);
        // A whole 2-GPU job cannot use node 0 (both GPUs partly held); node 1 is free.
        assert_eq!(c.place(2).unwrap().parts, vec![(1, 2)]);
        // A shared GPU becomes free for whole jobs only when its last sharer leaves.
        c.give(&a);
        c.give(&b);
        assert_eq!(c.free(), &[0, 2]);
        c.give(&e);
        assert_eq!(c.free(), &[1, 2]);
        assert_eq!(c.place(1).unwrap().parts, vec![(0, 1)]);
        c.give(&d);
        assert_eq!(c.free(), &[2, 2]);
        assert_eq!(c, Capacity::detailed(&[2, 2], &[], &[], Placement::Consolidated));
    }

    #[test]
    fn cpu_and_memory_limit_nodes() {
        let mut c =
            Capacity::detailed(&[4, 4], &[Some(8), Some(32)], &[Some(1000), Some(64_000)], Placement::Consolidated);
        let big = Demand::new(1, None, 16, 0);
        // Node 0 has only 8 CPUs: the job goes on node 1 although node 0 comes first.
        let a = c.place_for(big).unwrap();
        assert_eq!(a.parts, vec![(1, 1)]);
        c.take(&a);
        assert_eq!(c.node_free_cpu_mem(1), (16, 64_000));
        let b = c.place_for(big).unwrap();
        c.take(&b);
        // Node 1 has GPUs but no CPUs left; node 0 has GPUs but too few CPUs.
        assert!(!c.fits_for(big));
        assert!(c.why_not(big).contains("not enough free CPU on any node"), "{}", c.why_not(big));
        // Memory: 2000 MiB fits only node 1, which has no CPUs for 1 more.
        let mem = Demand::new(1, None, 1, 2000);
        assert!(!c.fits_for(mem));
        assert!(c.why_not(mem).contains("memory") || c.why_not(mem).contains("CPU"), "{}", c.why_not(mem));
        // A GPU-less job with CPUs goes on the node with the fewest free CPUs that holds it.
        let cpu_only = Demand::new(0, None, 4, 0);
        let d = c.place_for(cpu_only).unwrap();
        assert_eq!(d.parts, vec![(0, 0)]);
        // Never: more CPUs than any node.
        assert!(!c.can_ever_fit_for(Demand::new(1, None, 33, 0)));
        assert!(c.can_ever_fit_for(Demand::new(1, None, 32, 0)));
        c.give(&a);
        c.give(&b);
        assert!(c.fits_for(big));
    }

    #[test]
    fn multi_node_jobs_split_cpus_in_proportion() {
        let d = Demand::new(6, None, 10, 100);
        // 4 of 6 GPUs: ceil(10*4/6) = 7 CPUs, ceil(100*4/6) = 67 MiB.
        assert_eq!(d.per_node(4), (7, 67));
        assert_eq!(d.per_node(2), (4, 34));
        assert_eq!(d.per_node(6), (10, 100));
        let c = Capacity::detailed(&[4, 4], &[Some(6), Some(8)], &[], Placement::Consolidated);
        // The whole idle node 0 would need 7 CPUs (it has 6): node 1 takes 4, node 0 the rest.
        let a = c.place_for(d).unwrap();
        assert_eq!(a.parts, vec![(0, 2), (1, 4)]);
        assert_eq!(a.detail.as_ref().unwrap().cpus, vec![4, 7]);
        let p = Capacity::detailed(&[4, 4], &[Some(6), Some(8)], &[], Placement::Pooled);
        // Pooled: most free first; node 0 holds 3 (5 CPUs; 4 would need 7), node 1 the rest.
        let a = p.place_for(d).unwrap();
        assert_eq!(a.parts, vec![(0, 3), (1, 3)]);
        assert_eq!(a.detail.as_ref().unwrap().cpus, vec![5, 5]);
    }

    #[test]
    fn min_with_keeps_the_larger_use() {
        let mut a = Capacity::detailed(&[2], &[Some(4)], &[], Placement::Pooled);
        let mut b = a.clone();
        let x = a.place_for(frac(500)).unwrap();
        a.take(&x);
        let y = b.place_for(Demand::new(1, None, 3, 0)).unwrap();
        b.take(&y);
        a.min_with(&b);
        assert_eq!(a.gpu_used(0, 0), 1000);
        assert_eq!(a.free(), &[1]);
        assert_eq!(a.node_free_cpu_mem(0).0, 1);
    }
}
