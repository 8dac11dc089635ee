//! The GPUs one run of a job held, stored compactly: consecutive nodes on which the job holds
//! the same GPU indices form one run of four numbers or so, so a gang of 1,024 one-GPU nodes
//! costs 16 bytes rather than 1,024 small vectors (docs/ARCHITECTURE.md, "Cost of each
//! structure"). It reads, prints and serialises as the list of `(node, [gpu indices])` it
//! stands for.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// GPU indices on each node: `(node index, [gpu indices])` in the order given, stored as runs
/// `[first node, nodes, k, gpu_1 .. gpu_k]` of consecutive nodes (each one above the last)
/// holding the same `k` GPU indices.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct GpuIds(Box<[u32]>);

impl GpuIds {
    /// An empty builder, to which pairs are pushed one by one without a vector per node.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// An empty builder with room for `nodes` pairs holding `gpus` indices in all (what a start
    /// of that shape pushes when no two consecutive nodes merge into one run).
    pub fn builder_for(nodes: usize, gpus: usize) -> Builder {
        Builder { out: Vec::with_capacity(3 * nodes + gpus), run: None }
    }

    /// Stores `(node, ids)` pairs in their order.
    pub fn from_pairs<'a, I>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (u32, &'a [u32])>,
    {
        let mut b = Builder::default();
        for (node, ids) in pairs {
            b.push(node, ids);
        }
        b.finish()
    }

    /// The `(node, ids)` pairs, in their order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { rest: &self.0, node: 0, left: 0, ids: &[] }
    }

    /// Number of nodes (pairs).
    pub fn len(&self) -> usize {
        self.runs().map(|(_, n, _)| n as usize).sum()
    }

    /// True when it holds no node.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes it holds on the heap (what a run's record costs beyond its fixed size).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[u32]>(&self.0)
    }

    /// The runs: (first node, nodes, ids).
    fn runs(&self) -> impl Iterator<Item = (u32, u32, &[u32])> {
        let mut rest: &[u32] = &self.0;
        std::iter::from_fn(move || {
            let (&[node, n, k], tail) = rest.split_first_chunk::<3>()?;
            let (ids, tail) = tail.split_at(k as usize);
            rest = tail;
            Some((node, n, ids))
        })
    }
}

impl From<Vec<(u32, Vec<u32>)>> for GpuIds {
    fn from(v: Vec<(u32, Vec<u32>)>) -> Self {
        GpuIds::from_pairs(v.iter().map(|(n, ids)| (*n, ids.as_slice())))
    }
}

impl From<&[(u32, Vec<u32>)]> for GpuIds {
    fn from(v: &[(u32, Vec<u32>)]) -> Self {
        GpuIds::from_pairs(v.iter().map(|(n, ids)| (*n, ids.as_slice())))
    }
}

/// Builds a [`GpuIds`] pair by pair ([`GpuIds::builder`]).
#[derive(Debug, Default)]
pub struct Builder {
    out: Vec<u32>,
    /// Where the run being extended starts in `out`, and its last node.
    run: Option<(usize, u32)>,
}

impl Builder {
    /// Appends the GPU indices `ids` held on `node`.
    pub fn push(&mut self, node: u32, ids: &[u32]) {
        let out = &mut self.out;
        if let Some((at, last)) = self.run {
            let k = out[at + 2] as usize;
            if last.checked_add(1) == Some(node) && out[at + 3..at + 3 + k] == *ids {
                out[at + 1] += 1;
                self.run = Some((at, node));
                return;
            }
        }
        self.run = Some((out.len(), node));
        out.extend([node, 1, ids.len() as u32]);
        out.extend_from_slice(ids);
    }

    /// The pairs pushed so far.
    pub fn finish(self) -> GpuIds {
        GpuIds(self.out.into_boxed_slice())
    }
}

/// Iterator over the `(node, ids)` pairs of a [`GpuIds`].
#[derive(Debug)]
pub struct Iter<'a> {
    rest: &'a [u32],
    node: u32,
    left: u32,
    ids: &'a [u32],
}

impl<'a> Iterator for Iter<'a> {
    type Item = (u32, &'a [u32]);
    fn next(&mut self) -> Option<Self::Item> {
        while self.left == 0 {
            let (&[node, n, k], tail) = self.rest.split_first_chunk::<3>()?;
            let (ids, tail) = tail.split_at(k as usize);
            (self.node, self.left, self.ids, self.rest) = (node, n, ids, tail);
        }
        let node = self.node;
        self.left -= 1;
        self.node = self.node.wrapping_add(1);
        Some((node, self.ids))
    }
}

impl<'a> IntoIterator for &'a GpuIds {
    type Item = (u32, &'a [u32]);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for GpuIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for GpuIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for GpuIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<(u32, Vec<u32>)>::deserialize(d).map(GpuIds::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(g: &GpuIds) -> Vec<(u32, Vec<u32>)> {
        g.iter().map(|(n, ids)| (n, ids.to_vec())).collect()
    }

    #[test]
    fn round_trips_any_list_and_merges_consecutive_nodes() {
        let cases: Vec<Vec<(u32, Vec<u32>)>> = vec![
            vec![],
            vec![(3, vec![])],
            vec![(0, vec![0]), (1, vec![0]), (2, vec![0]), (5, vec![0]), (6, vec![0])],
            vec![(7, vec![0, 1, 2]), (8, vec![0, 1, 2]), (9, vec![0, 1]), (10, vec![0, 1])],
            vec![(4, vec![1]), (3, vec![1]), (2, vec![1])],
            vec![(u32::MAX, vec![0]), (0, vec![0])],
            vec![(1, vec![2, 3]), (1, vec![2, 3])],
        ];
        for v in cases {
            let g = GpuIds::from(v.clone());
            assert_eq!(pairs(&g), v);
            assert_eq!(g.len(), v.len());
            assert_eq!(g.is_empty(), v.is_empty());
            let json = serde_json::to_string(&g).unwrap();
            assert_eq!(json, serde_json::to_string(&v).unwrap());
            assert_eq!(serde_json::from_str::<GpuIds>(&json).unwrap(), g);
            assert_eq!(
                format!("{g:?}"),
                format!("{:?}", v.iter().map(|(n, i)| (*n, i.as_slice())).collect::<Vec<_>>())
            );
        }
        // 1,024 one-GPU nodes in a row: one run of four numbers.
        let wide: Vec<(u32, Vec<u32>)> = (0..1024).map(|n| (n, vec![0])).collect();
        assert_eq!(GpuIds::from(wide).heap_bytes(), 16);
    }
}
