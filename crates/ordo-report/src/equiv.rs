//! "Equivalent GPUs": how many nodes like the cluster's most common one the baseline policy
//! needs added to reach a target mean JCT, found by simulation (exponential, then k-ary search).

use ordo_core::{ClusterSpec, NodeSpec, Topology};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The cluster's most common node shape (GPUs, CPUs, memory, GPU model); ties: the first seen.
pub fn common_node(c: &ClusterSpec) -> Option<&NodeSpec> {
    let key = |n: &NodeSpec| (n.gpus, n.cpus, n.mem_mib, n.gpu_model.clone());
    let mut counts: Vec<(usize, usize)> = Vec::new(); // (first index, count)
    for (i, n) in c.nodes.iter().enumerate() {
        match counts.iter_mut().find(|(f, _)| key(&c.nodes[*f]) == key(n)) {
            Some(e) => e.1 += 1,
            None => counts.push((i, 1)),
        }
    }
    let best = counts.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    c.nodes.get(best.0)
}

/// `c` plus `extra` copies of its most common node, named `extra0`, `extra1`, ...
pub fn with_extra_nodes(c: &ClusterSpec, extra: u32) -> ClusterSpec {
    let mut out = c.clone();
    if let Some(n) = common_node(c).cloned() {
        for i in 0..extra {
            out.nodes.push(NodeSpec { name: format!("extra{i}"), ..n.clone() });
        }
    }
    out
}

/// `t` for `cluster`, a cluster of `t`'s nodes followed by added ones
/// ([`with_extra_nodes`]): each added node is in no unit of any level (a unit of its own), so
/// a gang placed on added nodes crosses every level, as a node cabled outside the fabric would.
pub fn with_extra_topology(t: &Topology, cluster: &ClusterSpec) -> Result<Topology, String> {
    let levels = t.levels().to_vec();
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let paths: Vec<Vec<Option<String>>> = (0..names.len())
        .map(|i| {
            (0..levels.len())
                .map(|l| (i < t.nodes()).then(|| t.unit_name(l, t.unit_of(l, i as u32)).to_string()))
                .collect()
        })
        .collect();
    let mut out = Topology::from_paths(levels, &names, &paths).map_err(|e| e.to_string())?;
    out.slowdown = t.slowdown.clone();
    Ok(out)
}

/// One simulated cluster size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Nodes added.
    pub extra_nodes: u32,
    /// GPUs added.
    pub extra_gpus: u64,
    /// The baseline's mean JCT on that cluster, seconds.
    pub mean_jct_s: f64,
}

/// The outcome of [`search`]: the smallest passing count found, and every probe made.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome {
    /// Smallest number of added nodes whose mean JCT met the target; `None` if even `cap` did not.
    pub extra_nodes: Option<u32>,
    /// `(added nodes, mean JCT)` of every evaluation, in ascending node count.
    pub probes: Vec<(u32, f64)>,
}

/// Finds the smallest `k` in `1..=cap` with `eval(k) <= target`, assuming `eval` does not rise
/// with `k` (more nodes never slow the baseline down): first `1, 2, 4, ...` (capped at `cap`),
/// then a `width`-ary search between the last failing and the first passing count. Each round's
/// `width` evaluations run in parallel (rayon).
pub fn search<E, F>(target: f64, cap: u32, width: usize, eval: F) -> Result<SearchOutcome, E>
where
    E: Send,
    F: Fn(u32) -> Result<f64, E> + Sync,
{
    let width = width.max(1);
    let mut probes: Vec<(u32, f64)> = Vec::new();
    let run = |ks: Vec<u32>, probes: &mut Vec<(u32, f64)>| -> Result<Vec<(u32, f64)>, E> {
        let got: Vec<(u32, f64)> = ks.par_iter().map(|&k| eval(k).map(|j| (k, j))).collect::<Result<Vec<_>, E>>()?;
        probes.extend(got.iter().copied());
        Ok(got)
    };
    let (mut lo, mut hi) = (0u32, None::<u32>);
    // Exponential phase.
    let mut next = 1u32;
    while hi.is_none() && lo < cap {
        let mut ks = Vec::with_capacity(width);
        while ks.len() < width && next <= cap && lo < cap {
            ks.push(next);
            if next == cap {
                break;
            }
            next = next.saturating_mul(2).min(cap);
        }
        if ks.is_empty() {
            break;
        }
        let got = run(ks, &mut probes)?;
        match got.iter().filter(|(_, j)| *j <= target).map(|(k, _)| *k).min() {
            Some(k) => {
                hi = Some(k);
                lo = got.iter().filter(|(x, j)| *x < k && *j > target).map(|(x, _)| *x).max().unwrap_or(lo);
            }
            None => lo = got.iter().map(|(k, _)| *k).max().unwrap_or(lo),
        }
    }
    // k-ary phase between lo (fails, or 0) and hi (passes).
    while let Some(h) = hi {
        if h - lo <= 1 {
            break;
        }
        let span = (h - lo) as u64;
        let mut ks: Vec<u32> = (1..=width as u64)
            .map(|i| lo + (span * i / (width as u64 + 1)) as u32)
            .filter(|&k| k > lo && k < h)
            .collect();
        ks.dedup();
        if ks.is_empty() {
            ks.push(lo + 1);
        }
        let got = run(ks, &mut probes)?;
        if let Some(k) = got.iter().filter(|(_, j)| *j <= target).map(|(k, _)| *k).min() {
            hi = Some(k);
        }
        let h = hi.unwrap_or(h);
        lo = got.iter().filter(|(x, j)| *x < h && *j > target).map(|(x, _)| *x).max().unwrap_or(lo).max(lo);
    }
    probes.sort_by_key(|p| p.0);
    probes.dedup_by_key(|p| p.0);
    Ok(SearchOutcome { extra_nodes: hi, probes })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grown topology keeps every unit and factor of the original, and each added node is
    /// a unit of its own at every level.
    #[test]
    fn added_nodes_join_no_unit() {
        let c = ClusterSpec::uniform(4, 8);
        let names: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();
        let path = |b: &str, s: &str| vec![Some(b.to_string()), Some(s.to_string())];
        let paths = vec![path("b0", "s0"), path("b0", "s0"), path("b1", "s0"), path("b1", "s0")];
        let mut t = Topology::from_paths(vec!["block".into(), "switch".into()], &names, &paths).unwrap();
        t.slowdown.default = vec![3.0, 1.5];
        let grown = with_extra_nodes(&c, 2);
        let g = with_extra_topology(&t, &grown).unwrap();
        assert_eq!((g.nodes(), g.slowdown.clone()), (6, t.slowdown.clone()));
        assert_eq!(g.crossed([0, 1]), 0);
        assert_eq!(g.crossed([0, 2]), 1);
        assert_eq!(g.crossed([4, 5]), 2, "two added nodes share no unit");
        assert_eq!(g.crossed([0, 4]), 2);
        assert_eq!(g.largest_unit(0, &[8; 6]), 16);
    }

    #[test]
    fn finds_the_smallest_passing_count() {
        // Mean JCT 1000 / (1 + k): the target 1000 / 38 is first met at k = 37.
        for width in [1, 2, 3, 8] {
            let out = search::<(), _>(1000.0 / 38.0, 100, width, |k| Ok(1000.0 / (1.0 + k as f64))).unwrap();
            assert_eq!(out.extra_nodes, Some(37), "width {width}");
            assert!(out.probes.iter().any(|p| p.0 == 36) && out.probes.iter().any(|p| p.0 == 37));
        }
        // Never reached below the cap.
        let out = search::<(), _>(0.5, 20, 2, |k| Ok(1000.0 / (1.0 + k as f64))).unwrap();
        assert_eq!(out.extra_nodes, None);
        assert_eq!(out.probes.last().map(|p| p.0), Some(20));
        // Met at once.
        let out = search::<(), _>(600.0, 20, 2, |k| Ok(1000.0 / (1.0 + k as f64))).unwrap();
        assert_eq!(out.extra_nodes, Some(1));
    }

    #[test]
    fn extra_nodes_copy_the_most_common_node() {
        let c = ClusterSpec::parse("1x4,3x8").unwrap();
        assert_eq!(common_node(&c).map(|n| n.gpus), Some(8));
        let d = with_extra_nodes(&c, 2);
        assert_eq!(d.total_gpus(), 4 + 24 + 16);
        assert_eq!(d.nodes[5].name, "extra1");
    }
}
