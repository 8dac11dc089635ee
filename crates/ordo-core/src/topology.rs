//! Network topology: the cluster's nodes grouped into a tree of *levels* (an NVLink domain or
//! Slurm `block`, a leaf switch, a spine ...), lowest level first; where a gang lands in it;
//! and what spreading a gang over several units of a level costs it.
//!
//! One concern only: [`crate::capacity`] keeps free GPUs per node and asks this module where a
//! gang of more than one node goes when the cluster has a topology ([`TopoFree::route`]); the
//! engine asks [`Topology::crossed`] and [`Topology::factor`] how much slower a run is for
//! where it landed. A cluster without a topology never reaches this code, so it places and
//! records exactly as before.
//!
//! **Placement rule** (documented in docs/TOPOLOGY.md): a gang larger than one node goes into
//! the lowest level with a unit that holds it; among that level's units, the one with the
//! fewest free GPUs that still holds it (best fit, lowest index on ties), so that the emptiest
//! units stay whole for the gangs that need them (as Slurm's topology/block plugin and Kueue's
//! topology-aware scheduling choose). Inside the unit, its nodes are taken from the child units
//! with the most idle GPUs first (the fewest children), each child's nodes by the consolidated
//! rule: whole idle nodes, largest first, then the remainder on the node with the most free
//! GPUs; a gang of a fixed shape (`--nodes N`) takes the N nodes with the fewest free GPUs that
//! hold its share. A job that *requires* a level waits until one unit of that level (or a lower
//! one) holds it; any other gang that no unit holds is spread over the whole cluster by the
//! consolidated rule.

use crate::capacity::{Allocation, Capacity, Demand};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most levels a topology may have.
pub const MAX_LEVELS: usize = 8;

/// Whether `name` can name a level (and so be asked for, `required:NAME`): 1 to 64 ASCII
/// letters, digits, `-`, `_` or `.`. Every place that takes level names (topology files, node
/// labels, the server's levels, jobs' asks) checks them by this one rule.
pub fn is_level_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// What a job asks of the topology: a level its nodes must (or should) share a unit of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopoNeed {
    /// The level's index (0: lowest), or [`TopoNeed::NONE`].
    pub level: u8,
    /// Held until a unit of that level holds it (`required:`), rather than placed as low as it
    /// can go and spread when no unit holds it (`preferred:`, the default for every gang).
    pub required: bool,
}

impl Default for TopoNeed {
    fn default() -> Self {
        TopoNeed::NONE
    }
}

impl TopoNeed {
    /// No level asked.
    pub const NONE: TopoNeed = TopoNeed { level: u8::MAX, required: false };

    /// A required level.
    pub fn required(level: u8) -> Self {
        TopoNeed { level, required: true }
    }
}

/// A job's ask as written (`required:block`, `preferred:switch`), before it is resolved against
/// a cluster's level names ([`Topology::need`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopoAsk {
    /// The level's name, lowercased.
    pub level: String,
    /// `required:` (true) or `preferred:` (false).
    pub required: bool,
}

impl std::str::FromStr for TopoAsk {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (kind, level) = s.split_once(':').ok_or_else(|| {
            format!("topology ask `{s}`: expected `required:LEVEL` or `preferred:LEVEL` (such as `required:block`)")
        })?;
        let required = match kind.trim().to_ascii_lowercase().as_str() {
            "required" => true,
            "preferred" => false,
            other => return Err(format!("topology ask `{s}`: `{other}` is neither `required` nor `preferred`")),
        };
        let level = level.trim().to_ascii_lowercase();
        if !is_level_name(&level) {
            return Err(format!("topology ask `{s}`: the level name must be 1-64 letters, digits, `-`, `_` or `.`"));
        }
        Ok(TopoAsk { level, required })
    }
}

impl std::fmt::Display for TopoAsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", if self.required { "required" } else { "preferred" }, self.level)
    }
}

/// Why a topology could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// No level, or too many.
    #[error("a topology needs 1 to {MAX_LEVELS} levels; {0} given")]
    Levels(usize),
    /// Two levels share a name.
    #[error("level `{0}` is named twice")]
    DuplicateLevel(String),
    /// A unit sits under two different units of the next level (the message names both and
    /// a node that puts it under each).
    #[error("{0}")]
    TwoParents(String),
    /// A path does not have one entry per level.
    #[error("node `{node}`: {got} units given for {want} levels")]
    PathLength {
        /// The node.
        node: String,
        /// Entries given.
        got: usize,
        /// Levels.
        want: usize,
    },
    /// A slowdown factor below 1 or not finite.
    #[error("slowdown factor {0} for crossing {1}: expected a number from 1 to 100")]
    Factor(f64, String),
}

/// How much slower a gang runs when its nodes are spread over several units of a level: for
/// each level, the factor its run time is multiplied by when it crosses that level (its nodes
/// are in more than one unit of it), per job class ([`crate::GpuNeeds::class`]), with a
/// default for jobs of no listed class. A gang that crosses several levels pays each of their
/// factors (multiplied). Default: [`Slowdown::published`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slowdown {
    /// Factor per level (index = level) for jobs of no listed class.
    pub default: Vec<f64>,
    /// `(class, factor per level)`, classes lowercased.
    pub classes: Vec<(String, Vec<f64>)>,
}

/// Factors for crossing the lowest level by job class, from Gavel's published throughput
/// measurements (Narayanan et al., OSDI 2020; `scheduler/physical_cluster_throughputs.json` in
/// github.com/stanford-futuredata/gavel): the throughput of each distributed job (2, 4 and 8
/// workers, every batch size) on V100s within one server over its throughput spread over
/// servers (`v100` / `v100_unconsolidated`), the median per model family. `default` is the median
/// over all 57 distributed entries. docs/TOPOLOGY.md shows the computation.
pub const GAVEL_V100: [(&str, f64); 5] =
    [("default", 2.35), ("resnet50", 1.06), ("transformer", 1.86), ("resnet18", 2.65), ("lm", 4.34)];

impl Slowdown {
    /// The defaults for `levels` levels: crossing the lowest level (the fast domain: an NVLink
    /// block, a server group on one switch) costs [`GAVEL_V100`]'s factor for the job's class;
    /// crossing a higher level costs nothing more (no published measurement of it; a
    /// non-blocking fabric above the lowest level). Set your own per level in the topology file.
    pub fn published(levels: usize) -> Self {
        let row = |f: f64| (0..levels).map(|l| if l == 0 { f } else { 1.0 }).collect::<Vec<f64>>();
        Slowdown {
            default: row(GAVEL_V100[0].1),
            classes: GAVEL_V100[1..].iter().map(|&(c, f)| (c.to_string(), row(f))).collect(),
        }
    }

    /// No slowdown at all (every factor 1).
    pub fn none(levels: usize) -> Self {
        Slowdown { default: vec![1.0; levels], classes: Vec::new() }
    }

    fn row(&self, class: Option<&str>) -> &[f64] {
        self.row_at(self.row_index(class))
    }

    /// The index of `class`'s row ([`crate::JobReq::spread_row`]): 0 for the default row (no
    /// class, or one not listed), `k + 1` for the `k`-th listed class.
    pub fn row_index(&self, class: Option<&str>) -> u8 {
        class
            .and_then(|c| self.classes.iter().position(|(k, _)| k.eq_ignore_ascii_case(c)))
            .and_then(|k| u8::try_from(k + 1).ok())
            .unwrap_or(0)
    }

    fn row_at(&self, index: u8) -> &[f64] {
        match index.checked_sub(1) {
            Some(k) => self.classes.get(k as usize).map_or(&self.default[..], |(_, r)| &r[..]),
            None => &self.default[..],
        }
    }

    /// Checks every factor (1 to 100, finite).
    pub fn check(&self, levels: &[String]) -> Result<(), TopologyError> {
        for row in std::iter::once(&self.default).chain(self.classes.iter().map(|(_, r)| r)) {
            for (l, &f) in row.iter().enumerate() {
                if !(1.0..=100.0).contains(&f) {
                    return Err(TopologyError::Factor(f, levels.get(l).cloned().unwrap_or_default()));
                }
            }
        }
        Ok(())
    }
}

/// A cluster's topology: for each level (lowest first), the unit each node is in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    levels: Vec<String>,
    /// `unit_of[l][node]`.
    unit_of: Vec<Vec<u32>>,
    /// `names[l][unit]`.
    names: Vec<Vec<String>>,
    /// What crossing each level costs.
    pub slowdown: Slowdown,
}

impl Topology {
    /// Builds a topology from each node's path: `paths[node][level]` is the name of the unit of
    /// that level the node is in (names are per level: block `b1` and switch `b1` differ), or
    /// `None` when the node is in no unit of that level (it is then a unit of its own, named
    /// after the node, and never shares that level with another node). Each unit must have
    /// one parent: every node in block `b1` must be in the same switch.
    pub fn from_paths(
        levels: Vec<String>,
        node_names: &[String],
        paths: &[Vec<Option<String>>],
    ) -> Result<Topology, TopologyError> {
        let levels: Vec<String> = levels.into_iter().map(|l| l.to_ascii_lowercase()).collect();
        if levels.is_empty() || levels.len() > MAX_LEVELS {
            return Err(TopologyError::Levels(levels.len()));
        }
        for (i, l) in levels.iter().enumerate() {
            if levels[..i].contains(l) {
                return Err(TopologyError::DuplicateLevel(l.clone()));
            }
        }
        let n = node_names.len();
        let mut unit_of = vec![Vec::with_capacity(n); levels.len()];
        let mut names: Vec<Vec<String>> = vec![Vec::new(); levels.len()];
        let mut index: Vec<std::collections::HashMap<String, u32>> = vec![Default::default(); levels.len()];
        for (node, name) in node_names.iter().enumerate() {
            let path = paths.get(node).map_or(&[][..], |p| &p[..]);
            if !path.is_empty() && path.len() != levels.len() {
                return Err(TopologyError::PathLength { node: name.clone(), got: path.len(), want: levels.len() });
            }
            for l in 0..levels.len() {
                let unit = path.get(l).cloned().flatten().unwrap_or_else(|| format!("({name})"));
                let u = *index[l].entry(unit.clone()).or_insert_with(|| {
                    names[l].push(unit);
                    names[l].len() as u32 - 1
                });
                unit_of[l].push(u);
            }
        }
        // One parent per unit.
        for l in 0..levels.len().saturating_sub(1) {
            let mut parent: Vec<Option<(u32, usize)>> = vec![None; names[l].len()];
            for node in 0..n {
                let (u, p) = (unit_of[l][node], unit_of[l + 1][node]);
                match parent[u as usize] {
                    None => parent[u as usize] = Some((p, node)),
                    Some((q, other)) if q != p => {
                        return Err(TopologyError::TwoParents(format!(
                            "{} `{}` is under two units of level {}, `{}` (node `{}`) and `{}` (node `{}`); each \
                             unit has one parent",
                            levels[l],
                            names[l][u as usize],
                            levels[l + 1],
                            names[l + 1][q as usize],
                            node_names[other],
                            names[l + 1][p as usize],
                            node_names[node]
                        )))
                    }
                    _ => {}
                }
            }
        }
        let slowdown = Slowdown::published(levels.len());
        Ok(Topology { levels, unit_of, names, slowdown })
    }

    /// The level names, lowest first.
    pub fn levels(&self) -> &[String] {
        &self.levels
    }

    /// Nodes it describes.
    pub fn nodes(&self) -> usize {
        self.unit_of.first().map_or(0, Vec::len)
    }

    /// Units of level `l`.
    pub fn units(&self, l: usize) -> usize {
        self.names.get(l).map_or(0, Vec::len)
    }

    /// The name of unit `u` of level `l`.
    pub fn unit_name(&self, l: usize, u: u32) -> &str {
        &self.names[l][u as usize]
    }

    /// The unit of level `l` node `node` is in.
    pub fn unit_of(&self, l: usize, node: u32) -> u32 {
        self.unit_of[l][node as usize]
    }

    /// A level's index by name.
    pub fn level_index(&self, name: &str) -> Option<usize> {
        self.levels.iter().position(|l| l.eq_ignore_ascii_case(name))
    }

    /// Resolves a job's ask against the level names.
    pub fn need(&self, ask: &TopoAsk) -> Result<TopoNeed, String> {
        match self.level_index(&ask.level) {
            Some(l) => Ok(TopoNeed { level: l as u8, required: ask.required }),
            None => Err(format!(
                "topology level `{}` is not one of this cluster's levels ({})",
                ask.level,
                self.levels.join(", ")
            )),
        }
    }

    /// How many levels a run on `nodes` (cluster indices) crosses: 0 when all of them are in
    /// one unit of the lowest level (or on one node), `l` when the lowest level whose one unit
    /// holds them all is `l`, and the number of levels when no unit does.
    pub fn crossed(&self, nodes: impl IntoIterator<Item = u32> + Clone) -> usize {
        let mut it = nodes.clone().into_iter();
        let Some(first) = it.next() else { return 0 };
        let first = first as usize;
        if it.next().is_none() {
            return 0;
        }
        for l in 0..self.levels.len() {
            let u = self.unit_of[l].get(first).copied();
            if nodes.clone().into_iter().all(|n| self.unit_of[l].get(n as usize).copied() == u) {
                return l;
            }
        }
        self.levels.len()
    }

    /// The factor a run's time is multiplied by for crossing `crossed` levels, for a job of
    /// `class`: the product of the factors of the levels crossed.
    pub fn factor(&self, class: Option<&str>, crossed: usize) -> f64 {
        self.slowdown.row(class).iter().take(crossed).product()
    }

    /// [`Topology::factor`] by the class's row index ([`Slowdown::row_index`]).
    pub fn factor_at(&self, row: u8, crossed: usize) -> f64 {
        self.slowdown.row_at(row).iter().take(crossed).product()
    }

    /// GPUs of the largest unit of level `l`, on a cluster of `node_gpus`.
    pub fn largest_unit(&self, l: usize, node_gpus: &[u32]) -> u64 {
        let mut sum = vec![0u64; self.units(l)];
        for (n, &g) in node_gpus.iter().enumerate().take(self.nodes()) {
            sum[self.unit_of[l][n] as usize] += g as u64;
        }
        sum.into_iter().max().unwrap_or(0)
    }

    /// A pool's view: its nodes (cluster indices, ascending, in the pool's own order), with
    /// their units renumbered densely per level.
    pub fn view(&self, nodes: &[u32], node_gpus: &[u32]) -> TopoView {
        let levels = self.levels.len();
        let mut unit_of = vec![Vec::with_capacity(nodes.len()); levels];
        let mut names = vec![Vec::new(); levels];
        for l in 0..levels {
            let mut local: std::collections::HashMap<u32, u32> = Default::default();
            for &n in nodes {
                let g = self.unit_of[l].get(n as usize).copied().unwrap_or(u32::MAX);
                let next = local.len() as u32;
                let u = *local.entry(g).or_insert(next);
                if u == next {
                    names[l].push(if g == u32::MAX {
                        format!("(node {n})")
                    } else {
                        self.names[l][g as usize].clone()
                    });
                }
                unit_of[l].push(u);
            }
        }
        TopoView::new(self.levels.clone(), unit_of, names, node_gpus)
    }
}

/// A pool's topology, in the pool's node numbering (see [`Topology::view`]).
#[derive(Debug, PartialEq, Eq)]
pub struct TopoView {
    levels: Vec<String>,
    /// `unit_of[l][node]`.
    unit_of: Vec<Vec<u32>>,
    /// `names[l][unit]`.
    names: Vec<Vec<String>>,
    /// `members[l][unit]`: its nodes, ascending.
    members: Vec<Vec<Vec<u32>>>,
    /// `children[l][unit]`: the units of level `l - 1` inside it (empty at level 0).
    children: Vec<Vec<Vec<u32>>>,
    /// `gpus[l][unit]`: its GPUs.
    gpus: Vec<Vec<u64>>,
    /// GPUs of every node, when all nodes have as many (the fast path of whole-node gangs).
    uniform: Option<u32>,
}

impl TopoView {
    fn new(levels: Vec<String>, unit_of: Vec<Vec<u32>>, names: Vec<Vec<String>>, node_gpus: &[u32]) -> Self {
        let mut members: Vec<Vec<Vec<u32>>> = names.iter().map(|u| vec![Vec::new(); u.len()]).collect();
        let mut gpus: Vec<Vec<u64>> = names.iter().map(|u| vec![0; u.len()]).collect();
        let mut children: Vec<Vec<Vec<u32>>> = names.iter().map(|u| vec![Vec::new(); u.len()]).collect();
        for l in 0..levels.len() {
            for (n, &u) in unit_of[l].iter().enumerate() {
                members[l][u as usize].push(n as u32);
                gpus[l][u as usize] += node_gpus.get(n).copied().unwrap_or(0) as u64;
                if l > 0 {
                    let c = unit_of[l - 1][n];
                    let ch = &mut children[l][u as usize];
                    if !ch.contains(&c) {
                        ch.push(c);
                    }
                }
            }
        }
        let uniform = node_gpus.first().copied().filter(|&g| g > 0 && node_gpus.iter().all(|&x| x == g));
        TopoView { levels, unit_of, names, members, children, gpus, uniform }
    }
}

/// Free GPUs per unit of each level, kept by [`Capacity`] as its nodes' free counts change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoFree {
    view: Arc<TopoView>,
    /// `free[l][unit]`.
    free: Vec<Vec<u64>>,
    /// `idle[l][unit]`: GPUs of its nodes that are entirely free.
    idle: Vec<Vec<u64>>,
}

/// What the topology says about a placement.
pub(crate) enum Route {
    /// Not a topology matter (one node, pooled, or nothing fits in any unit and the job may
    /// spread): the capacity's own rule decides.
    Plain,
    /// Placed within a unit.
    Placed(Allocation),
    /// It requires a level and no unit of it (or lower) holds it now.
    Held,
}

impl TopoFree {
    /// All free, on a capacity of `node_gpus`.
    pub fn new(view: Arc<TopoView>, node_gpus: &[u32]) -> Self {
        let free = view.gpus.clone();
        let idle = view.gpus.clone();
        debug_assert!(view.unit_of.iter().all(|u| u.len() == node_gpus.len()));
        TopoFree { view, free, idle }
    }

    /// The same units, every node free.
    pub(crate) fn emptied(&self) -> Self {
        TopoFree { view: self.view.clone(), free: self.view.gpus.clone(), idle: self.view.gpus.clone() }
    }

    /// Node `n` (of `cap` GPUs) went from `old` to `new` free GPUs.
    #[inline]
    pub(crate) fn on_change(&mut self, n: usize, cap: u32, old: u32, new: u32) {
        let was_idle = old == cap;
        let is_idle = new == cap;
        for l in 0..self.free.len() {
            let u = self.view.unit_of[l][n] as usize;
            self.free[l][u] = self.free[l][u] + new as u64 - old as u64;
            if was_idle != is_idle {
                if is_idle {
                    self.idle[l][u] += cap as u64;
                } else {
                    self.idle[l][u] -= cap as u64;
                }
            }
        }
    }

    /// Where `d` goes on `c` by the topology (see the module's rule).
    pub(crate) fn route(&self, c: &Capacity, d: Demand) -> Route {
        let max_cap = c.max_node_gpus();
        let shaped = d.per_node_gpus().filter(|_| d.nodes >= 1);
        let multi = match shaped {
            Some(_) => d.nodes > 1,
            None => d.nodes == 0 && d.gpus > max_cap,
        };
        // A detailed capacity places a gang's CPUs and memory with its GPUs (a share of a GPU is
        // never a gang); a count-only one leaves demands with more than GPUs to its own rule.
        let plain = if c.is_detailed() { d.milli == 0 } else { d.is_plain() };
        if !multi || !plain {
            return Route::Plain;
        }
        if d.nodes > 0 && shaped.is_none() {
            return Route::Plain; // an uneven shape: refused by the capacity's own rule
        }
        let levels = self.free.len();
        // A required level bounds the search; any other gang tries every level, lowest first.
        let top = if d.topo.required && d.topo.level != u8::MAX {
            (d.topo.level as usize).min(levels - 1)
        } else {
            levels - 1
        };
        let g = d.gpus as u64;
        if c.total_free() >= g {
            // The units that may hold it, found from the top down: a unit holds no more free
            // GPUs than its parent, so only the children of the top's candidates are looked at.
            let ok = |l: usize, u: u32| {
                let u = u as usize;
                self.free[l][u] >= g && (shaped.is_some() || self.idle[l][u] + max_cap as u64 > g)
            };
            let mut cands: Vec<Vec<(u64, u32)>> = vec![Vec::new(); levels];
            cands[levels - 1] =
                (0..self.free[levels - 1].len() as u32).filter(|&u| ok(levels - 1, u)).map(|u| (0, u)).collect();
            for l in (0..levels - 1).rev() {
                let (lower, upper) = cands.split_at_mut(l + 1);
                for &(_, p) in &upper[0] {
                    lower[l]
                        .extend(self.view.children[l + 1][p as usize].iter().filter(|&&u| ok(l, u)).map(|&u| (0, u)));
                }
            }
            for (l, level) in cands.iter_mut().enumerate().take(top + 1) {
                for e in level.iter_mut() {
                    e.0 = self.free[l][e.1 as usize];
                }
                level.sort_unstable();
                for &(_, u) in level.iter() {
                    if let Some(a) = self.place_in(c, l, u, d, shaped) {
                        return Route::Placed(a);
                    }
                }
            }
        }
        if d.topo.required && d.topo.level != u8::MAX {
            Route::Held
        } else {
            Route::Plain
        }
    }

    /// The nodes of unit `u` of level `l`, children with the most idle GPUs first.
    fn ordered_members(&self, l: usize, u: u32) -> Vec<u32> {
        if l == 0 {
            return self.view.members[0][u as usize].clone();
        }
        let mut ch = self.view.children[l][u as usize].clone();
        ch.sort_by_key(|&c| (std::cmp::Reverse(self.idle[l - 1][c as usize]), c));
        ch.iter().flat_map(|&c| self.ordered_members(l - 1, c)).collect()
    }

    /// Visits the nodes of unit `u` of level `l` in [`TopoFree::ordered_members`]'s order,
    /// skipping the children without an idle node when `idle_only`, until `f` says stop
    /// (false). Returns false when stopped.
    fn walk(&self, l: usize, u: u32, idle_only: bool, f: &mut impl FnMut(u32) -> bool) -> bool {
        if l == 0 {
            return self.view.members[0][u as usize].iter().all(|&n| f(n));
        }
        let mut ch: Vec<u32> = self.view.children[l][u as usize].clone();
        if idle_only {
            ch.retain(|&c| self.idle[l - 1][c as usize] > 0);
        }
        ch.sort_by_key(|&c| (std::cmp::Reverse(self.idle[l - 1][c as usize]), c));
        ch.into_iter().all(|c| self.walk(l - 1, c, idle_only, f))
    }

    /// A whole-node gang on nodes of one size `cap`: the first `g / cap` idle nodes in walk
    /// order, and the remainder on the node with the most free GPUs after them (the next idle
    /// one if any, else a scan), as the general rule chooses.
    fn place_uniform(&self, c: &Capacity, l: usize, u: u32, g: u32, cap: u32) -> Option<Allocation> {
        let free = c.free();
        let (k, r) = ((g / cap) as usize, g % cap);
        let want = k + usize::from(r > 0);
        let mut idle: Vec<u32> = Vec::with_capacity(want);
        self.walk(l, u, true, &mut |n| {
            if free[n as usize] == cap {
                idle.push(n);
            }
            idle.len() < want
        });
        let mut parts: Vec<(u32, u32)> = idle.iter().take(k).map(|&n| (n, cap)).collect();
        if parts.len() < k {
            return None;
        }
        if r > 0 {
            let rest = match idle.get(k) {
                Some(&n) => n,
                None => {
                    let mut best: Option<(u32, u32)> = None;
                    let taken: std::collections::HashSet<u32> = idle.iter().copied().collect();
                    self.walk(l, u, false, &mut |n| {
                        let f = free[n as usize];
                        if f >= r && !taken.contains(&n) && best.is_none_or(|b| f > b.0) {
                            best = Some((f, n));
                        }
                        true
                    });
                    best?.1
                }
            };
            parts.push((rest, r));
        }
        parts.sort_unstable();
        Some(Allocation { parts, detail: None })
    }

    fn place_in(&self, c: &Capacity, l: usize, u: u32, d: Demand, shaped: Option<u32>) -> Option<Allocation> {
        let det = c.is_detailed();
        if let (None, Some(cap), false) = (shaped, self.view.uniform, det) {
            return self.place_uniform(c, l, u, d.gpus, cap);
        }
        let free = c.free();
        let cap = c.cap_per_node();
        let nodes = self.ordered_members(l, u);
        let mut parts: Vec<(u32, u32)> = Vec::new();
        if let Some(k) = shaped {
            // The nodes with the fewest free GPUs that hold k, in member order on ties.
            let mut fit: Vec<(u32, usize, u32)> = nodes
                .iter()
                .enumerate()
                .filter(|(_, &n)| free[n as usize] >= k && c.has_room(n as usize, k, d))
                .map(|(i, &n)| (free[n as usize], i, n))
                .collect();
            if fit.len() < d.nodes as usize {
                return None;
            }
            fit.sort_unstable();
            parts.extend(fit.into_iter().take(d.nodes as usize).map(|(_, _, n)| (n, k)));
        } else {
            let mut left = d.gpus;
            let mut idle: Vec<(std::cmp::Reverse<u32>, usize, u32)> = nodes
                .iter()
                .enumerate()
                .filter(|(_, &n)| cap[n as usize] > 0 && free[n as usize] == cap[n as usize])
                .map(|(i, &n)| (std::cmp::Reverse(cap[n as usize]), i, n))
                .collect();
            idle.sort_unstable();
            for &(std::cmp::Reverse(k), _, n) in &idle {
                if left >= k && c.has_room(n as usize, k, d) {
                    parts.push((n, k));
                    left -= k;
                }
            }
            if left > 0 {
                let taken = |n: u32| parts.iter().any(|p| p.0 == n);
                let best = nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, &n)| !taken(n) && free[n as usize] >= left && c.has_room(n as usize, left, d))
                    .max_by_key(|(i, &n)| (free[n as usize], std::cmp::Reverse(*i)))?;
                parts.push((*best.1, left));
            }
        }
        parts.sort_unstable();
        let alloc = Allocation { parts, detail: None };
        if det {
            // The lowest free GPUs of each node, with its share of the CPUs and memory.
            c.complete(&alloc, d)
        } else {
            Some(alloc)
        }
    }

    /// Whether `d`'s required level can ever hold it (on the empty cluster).
    pub(crate) fn can_ever(&self, c: &Capacity, d: Demand) -> bool {
        if !d.topo.required || d.topo.level == u8::MAX || d.milli > 0 || (!c.is_detailed() && !d.is_plain()) {
            return true;
        }
        let empty = Capacity::empty_like(c);
        !matches!(empty.topo_route(d), Some(Route::Held))
    }

    /// Why `d` is held by its required level, in words: "needs 16 GPUs within one block; the
    /// most free in any block is 12". `None` when that is not why.
    pub(crate) fn why_not(&self, c: &Capacity, d: Demand) -> Option<String> {
        if !matches!(self.route(c, d), Route::Held) {
            return None;
        }
        let l = (d.topo.level as usize).min(self.free.len() - 1);
        let name = &self.view.levels[l];
        let most = self.free[l].iter().copied().max().unwrap_or(0);
        let largest = self.view.gpus[l].iter().copied().max().unwrap_or(0);
        let mut s = match d.per_node_gpus().filter(|_| d.nodes >= 1) {
            Some(k) => format!(
                "needs {} with {} free each within one {name}; the most free in any {name} is {}",
                crate::words::count(d.nodes as usize, "node"),
                crate::words::count(k as usize, "GPU"),
                crate::words::count(most as usize, "GPU"),
            ),
            None => format!(
                "needs {} within one {name}; the most free in any {name} is {}",
                crate::words::count(d.gpus as usize, "GPU"),
                most
            ),
        };
        if largest < d.gpus as u64 {
            s.push_str(&format!(" and the largest has {largest}"));
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Placement;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    /// 8 nodes of 4 GPUs: blocks of 2 nodes, switches of 2 blocks.
    fn topo() -> Topology {
        let paths: Vec<Vec<Option<String>>> =
            (0..8).map(|i| vec![Some(format!("b{}", i / 2)), Some(format!("s{}", i / 4))]).collect();
        Topology::from_paths(vec!["block".into(), "switch".into()], &names(8), &paths).unwrap()
    }

    fn cap(t: &Topology) -> Capacity {
        let g = [4u32; 8];
        let mut c = Capacity::new(&g, Placement::Consolidated);
        let nodes: Vec<u32> = (0..8).collect();
        c.set_topology(Arc::new(t.view(&nodes, &g)));
        c
    }

    #[test]
    fn asks_parse_and_say_what_is_wrong() {
        let a: TopoAsk = "required:Block".parse().unwrap();
        assert_eq!(a, TopoAsk { level: "block".into(), required: true });
        assert_eq!(a.to_string(), "required:block");
        assert!("preferred:switch".parse::<TopoAsk>().is_ok());
        assert!("block".parse::<TopoAsk>().unwrap_err().contains("required:LEVEL"));
        assert!("maybe:block".parse::<TopoAsk>().unwrap_err().contains("neither"));
        assert!("required:".parse::<TopoAsk>().is_err());
    }

    #[test]
    fn a_unit_in_two_parents_is_refused_naming_both() {
        let paths = vec![vec![Some("b0".into()), Some("s0".into())], vec![Some("b0".into()), Some("s1".into())]];
        let e = Topology::from_paths(vec!["block".into(), "switch".into()], &names(2), &paths).unwrap_err();
        assert_eq!(
            e.to_string(),
            "block `b0` is under two units of level switch, `s0` (node `n0`) and `s1` (node `n1`); each unit has \
             one parent"
        );
    }

    #[test]
    fn crossed_levels_and_factors() {
        let t = topo();
        assert_eq!(t.crossed([3]), 0);
        assert_eq!(t.crossed([2, 3]), 0);
        assert_eq!(t.crossed([1, 2]), 1);
        assert_eq!(t.crossed([0, 7]), 2);
        assert_eq!(t.factor(None, 0), 1.0);
        assert_eq!(t.factor(None, 1), 2.35);
        assert_eq!(t.factor(Some("ResNet50"), 2), 1.06);
    }

    #[test]
    fn gangs_go_to_the_lowest_level_best_fit_unit() {
        let t = topo();
        let mut c = cap(&t);
        // Block b0 half used, b1 whole: an 8-GPU gang takes the whole free block b1, not the
        // first free nodes (n1, n2 would cross blocks).
        c.take(&Allocation { parts: vec![(0, 4)], detail: None });
        let a = c.place_for(Demand::gpus(8)).unwrap();
        assert_eq!(a.parts, vec![(2, 4), (3, 4)]);
        // A 16-GPU gang: no block holds it; switch s1 (16 free) does, s0 (12 free) does not.
        let a = c.place_for(Demand::gpus(16)).unwrap();
        assert_eq!(a.parts, vec![(4, 4), (5, 4), (6, 4), (7, 4)]);
        // 12 GPUs: best fit is switch s0 (12 free, exactly), not s1.
        let a = c.place_for(Demand::gpus(12)).unwrap();
        assert_eq!(a.parts, vec![(1, 4), (2, 4), (3, 4)]);
        // Without a topology the consolidated rule takes the lowest idle nodes.
        let mut plain = Capacity::new(&[4; 8], Placement::Consolidated);
        plain.take(&Allocation { parts: vec![(0, 4)], detail: None });
        assert_eq!(plain.place_for(Demand::gpus(8)).unwrap().parts, vec![(1, 4), (2, 4)]);
    }

    #[test]
    fn a_required_level_holds_the_job_and_says_why() {
        let t = topo();
        let mut c = cap(&t);
        c.take(&Allocation { parts: vec![(0, 4), (2, 4), (4, 4), (6, 4)], detail: None });
        let need = Demand { topo: TopoNeed::required(0), ..Demand::gpus(8) };
        assert!(!c.fits_for(need));
        assert!(c.place_for(need).is_none());
        assert_eq!(c.why_not(need), "needs 8 GPUs within one block; the most free in any block is 4");
        // Preferred (or no ask): spread over two blocks of one switch.
        let a = c.place_for(Demand::gpus(8)).unwrap();
        assert_eq!(t.crossed(a.parts.iter().map(|p| p.0)), 1);
        // A required level no unit can ever hold.
        let big = Demand { topo: TopoNeed::required(0), ..Demand::gpus(12) };
        assert!(!c.can_ever_fit_for(big));
        assert!(c.can_ever_fit_for(Demand { topo: TopoNeed::required(1), ..Demand::gpus(12) }));
    }

    #[test]
    fn shaped_gangs_stay_in_one_unit() {
        let t = topo();
        let mut c = cap(&t);
        c.take(&Allocation { parts: vec![(0, 2), (1, 3)], detail: None });
        // 2 nodes x 2 GPUs: block b0 holds it (n0 2 free, n1 1 free: no); b1 has 2 idle nodes.
        let d = Demand::gpus(4).on_nodes(2);
        let a = c.place_for(d).unwrap();
        assert_eq!(t.crossed(a.parts.iter().map(|p| p.0)), 0);
        c.give(&Allocation { parts: vec![(1, 3)], detail: None });
        // Now b0 (n0: 2 free, n1: 4 free; 6 free in all) is the best fit.
        assert_eq!(c.place_for(d).unwrap().parts, vec![(0, 2), (1, 2)]);
    }

    #[test]
    fn detailed_capacities_place_gangs_with_their_cpus_within_a_unit() {
        let t = topo();
        let g = [4u32; 8];
        // 32 CPUs per node, except n4 and n5 (block b2) with 8.
        let cpus: Vec<Option<u32>> = (0..8).map(|i| Some(if i == 4 || i == 5 { 8 } else { 32 })).collect();
        let mem = vec![Some(65_536u64); 8];
        let mut c = Capacity::detailed(&g, &cpus, &mem, Placement::Consolidated);
        c.set_topology(Arc::new(t.view(&(0..8).collect::<Vec<u32>>(), &g)));
        // Block b0 half used: an 8-GPU gang with 16 CPUs per node goes to the next whole block
        // with the CPUs (b1), its GPUs and CPUs given per node.
        let one = c.place_for(Demand { cpus: 4, ..Demand::gpus(1) }).unwrap();
        assert_eq!(one.parts, vec![(0, 1)]);
        c.take(&one);
        let d = Demand { cpus: 32, mem_mib: 1024, ..Demand::gpus(8) };
        let a = c.place_for(d).unwrap();
        assert_eq!(a.parts, vec![(2, 4), (3, 4)]);
        let det = a.detail.as_ref().unwrap();
        assert_eq!(det.gpu_ids, vec![vec![0, 1, 2, 3], vec![0, 1, 2, 3]]);
        assert_eq!(det.cpus, vec![16, 16]);
        c.take(&a);
        // b2 (n4, n5) has the GPUs but not the CPUs: the next gang goes to b3, not across blocks.
        let a = c.place_for(d).unwrap();
        assert_eq!(a.parts, vec![(6, 4), (7, 4)]);
        c.take(&a);
        // Required within one block: b2 lacks the CPUs and b0 the GPUs; held, never spread.
        let need = Demand { topo: TopoNeed::required(0), ..d };
        assert!(c.place_for(need).is_none());
        assert!(!c.fits_for(need));
        assert!(c.can_ever_fit_for(need));
        // Without a CPU ask it fits b2.
        let gpus_only = Demand { topo: TopoNeed::required(0), ..Demand::gpus(8) };
        assert_eq!(c.place_for(gpus_only).unwrap().parts, vec![(4, 4), (5, 4)]);
        // A shaped gang (2 nodes x 2 GPUs, 4 CPUs each) stays in one block too.
        let shaped = Demand { cpus: 8, ..Demand::gpus(4).on_nodes(2) };
        let a = c.place_for(shaped).unwrap();
        assert_eq!(t.crossed(a.parts.iter().map(|p| p.0)), 0);
        assert_eq!(a.detail.as_ref().unwrap().cpus, vec![4, 4]);
    }

    #[test]
    fn rollback_keeps_the_unit_sums() {
        let t = topo();
        let mut c = cap(&t);
        let before = c.clone();
        c.begin_undo();
        c.take(&Allocation { parts: vec![(0, 4), (5, 1)], detail: None });
        c.rollback();
        assert_eq!(c, before);
    }
}
