//! Free resources and placement: where a job of `g` GPUs can go, under the pooled or the
//! consolidated placement model. Feasibility checks are O(max GPUs per node); choosing nodes is
//! O(nodes).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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

/// GPUs taken on each node: `(node index, GPU count)`, sorted by node, counts > 0.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Allocation {
    /// `(node index, GPUs on that node)`.
    pub parts: Vec<(u32, u32)>,
}

impl Allocation {
    /// Total GPUs in the allocation.
    pub fn gpus(&self) -> u32 {
        self.parts.iter().map(|p| p.1).sum()
    }
}

/// Free GPUs per node plus the indexes that make feasibility checks cheap. Cloning it is cheap
/// (a few small vectors), which what-if planning (backfill shadows, reservation profiles) relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    placement: Placement,
    cap: Vec<u32>,
    free: Vec<u32>,
    total_free: u64,
    total: u64,
    max_cap: u32,
    /// `by_free[f]` = number of nodes with exactly `f` free GPUs (consolidated only; pooled
    /// feasibility needs just the total, and skipping it keeps what-if clones small).
    by_free: Vec<u32>,
    /// Sum of the capacities of nodes that are entirely free.
    idle_cap: u64,
}

impl Capacity {
    /// An empty (all free) cluster with the given GPUs per node.
    pub fn new(node_gpus: &[u32], placement: Placement) -> Self {
        let max_cap = node_gpus.iter().copied().max().unwrap_or(0);
        let mut by_free = Vec::new();
        if placement == Placement::Consolidated {
            by_free = vec![0u32; max_cap as usize + 1];
            for &g in node_gpus {
                by_free[g as usize] += 1;
            }
        }
        let total: u64 = node_gpus.iter().map(|&g| g as u64).sum();
        Capacity {
            placement,
            cap: node_gpus.to_vec(),
            free: node_gpus.to_vec(),
            total_free: total,
            total,
            max_cap,
            by_free,
            idle_cap: total,
        }
    }

    /// The placement model in force.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Free GPUs in the whole cluster.
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
        match self.placement {
            Placement::Pooled => g as u64 <= self.total,
            Placement::Consolidated => g as u64 <= self.total,
        }
    }

    /// Whether a job of `g` GPUs fits now.
    pub fn fits(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        match self.placement {
            Placement::Pooled => self.total_free >= g as u64,
            Placement::Consolidated => {
                if g <= self.max_cap {
                    self.by_free[g as usize..].iter().any(|&c| c > 0)
                } else {
                    // Cheap necessary condition first; the exact check is rare (jobs larger
                    // than a node are a small minority).
                    self.idle_cap + self.max_cap as u64 > g as u64 && self.place_multi_node(g).is_some()
                }
            }
        }
    }

    /// Chooses where a job of `g` GPUs would go now, without taking anything. `None` if it does
    /// not fit. Deterministic: ties go to the lowest node index.
    pub fn place(&self, g: u32) -> Option<Allocation> {
        if !self.fits(g) {
            return None;
        }
        if g == 0 {
            return Some(Allocation::default());
        }
        if g <= self.max_cap {
            if let Some(n) = self.best_fit_node(g) {
                return Some(Allocation { parts: vec![(n, g)] });
            }
        }
        if self.placement == Placement::Consolidated {
            return self.place_multi_node(g);
        }
        // Pooled, larger than any one node's free GPUs: fewest nodes, most free first, lowest
        // index on ties.
        let mut order: Vec<u32> = (0..self.cap.len() as u32).filter(|&n| self.free[n as usize] > 0).collect();
        order.sort_by_key(|&n| (std::cmp::Reverse(self.free[n as usize]), n));
        let mut left = g;
        let mut parts = Vec::new();
        for n in order {
            if left == 0 {
                break;
            }
            let take = left.min(self.free[n as usize]);
            parts.push((n, take));
            left -= take;
        }
        debug_assert_eq!(left, 0, "fits() said yes");
        parts.sort_unstable();
        Some(Allocation { parts })
    }

    /// Consolidated placement of a job larger than one node (as the Helios simulator's
    /// `consolidate` placer): whole idle nodes, largest first, lowest index on ties, while the
    /// remainder is at least a whole node; the remainder goes on the node with the most free
    /// GPUs among the others (lowest index on ties), if it holds it.
    fn place_multi_node(&self, g: u32) -> Option<Allocation> {
        let mut idle: Vec<u32> = (0..self.cap.len() as u32)
            .filter(|&n| self.free[n as usize] == self.cap[n as usize] && self.cap[n as usize] > 0)
            .collect();
        idle.sort_by_key(|&n| (std::cmp::Reverse(self.cap[n as usize]), n));
        let mut left = g;
        let mut parts = Vec::new();
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
        Some(Allocation { parts })
    }

    fn best_fit_node(&self, g: u32) -> Option<u32> {
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

    /// Takes `g` GPUs from a single-node capacity (the pooled counters of what-if planning).
    pub(crate) fn take_count(&mut self, g: u32) {
        debug_assert_eq!(self.free.len(), 1);
        let f = self.free[0];
        assert!(f >= g, "taking {g} GPUs with only {f} free");
        self.set_free(0, f - g);
    }

    /// Whether every part of `alloc` is free on its node now.
    pub fn can_take(&self, alloc: &Allocation) -> bool {
        alloc.parts.iter().all(|&(n, k)| (n as usize) < self.free.len() && self.free[n as usize] >= k)
    }

    /// Takes `alloc`. Panics (a bug, never user input) if it is not free: callers check first.
    pub fn take(&mut self, alloc: &Allocation) {
        for &(n, k) in &alloc.parts {
            let f = self.free[n as usize];
            assert!(f >= k, "taking {k} GPUs on node {n} with only {f} free");
            self.set_free(n as usize, f - k);
        }
    }

    /// Gives `alloc` back.
    pub fn give(&mut self, alloc: &Allocation) {
        for &(n, k) in &alloc.parts {
            let f = self.free[n as usize];
            assert!(f + k <= self.cap[n as usize], "giving back more GPUs than node {n} has");
            self.set_free(n as usize, f + k);
        }
    }

    /// Like [`Capacity::take`] but for what-if states: a pooled state only counts GPUs, so the
    /// allocation's nodes do not matter there; a consolidated state takes the exact nodes.
    /// Returns false (and changes nothing) if it cannot.
    pub fn take_what_if(&mut self, alloc: &Allocation) -> bool {
        match self.placement {
            Placement::Pooled => {
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
            Placement::Consolidated => {
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
        let cap = self.cap[n];
        if !self.by_free.is_empty() {
            self.by_free[old as usize] -= 1;
            self.by_free[new as usize] += 1;
        }
        if old == cap {
            self.idle_cap -= cap as u64;
        }
        if new == cap {
            self.idle_cap += cap as u64;
        }
        self.total_free = self.total_free - old as u64 + new as u64;
        self.free[n] = new;
    }

    /// Element-wise minimum of free GPUs with `other` (same cluster): the resources free in both.
    pub fn min_with(&mut self, other: &Capacity) {
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
        c.take(&Allocation { parts: vec![(1, 1)] });
        // Idle: node 2 only; node 1 has 7 free, node 0 has 5.
        assert!(!c.fits(16));
        assert!(c.fits(15));
        assert_eq!(c.place(7).unwrap().parts, vec![(1, 7)]);
        assert_eq!(c.place(8).unwrap().parts, vec![(2, 8)]);
    }

    #[test]
    fn pooled_counts_only() {
        let mut c = Capacity::new(&[8, 8], Placement::Pooled);
        c.take(&Allocation { parts: vec![(0, 5), (1, 5)] });
        assert!(c.fits(6));
        let a = c.place(6).unwrap();
        assert_eq!(a.gpus(), 6);
        c.take(&a);
        assert_eq!(c.total_free(), 0);
        assert!(!c.fits(1));
    }
}
