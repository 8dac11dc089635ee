//! An ordered set whose entries carry a weight (GPUs), with sums over key ranges: what lets a
//! preemptive pass keep a whole run of running jobs in one step instead of one job at a time.

/// Entries per block before it is split in two.
const MAX_BLOCK: usize = 64;

/// Sorted entries `(key, weight)` in blocks of at most [`MAX_BLOCK`], each block's weight sum
/// kept beside it. Insert and remove cost O(log n + block); the sum of the weights below a key,
/// and the first entry at which a running sum passes a threshold, cost O(n / block + block)
/// (a scan of the block sums, a few hundred additions for 100,000 entries).
#[derive(Debug, Clone)]
pub(crate) struct SumSet<T> {
    /// Non-empty blocks in key order; every key of a block is below every key of the next.
    blocks: Vec<Vec<(T, u32)>>,
    /// `sums[b]`: weight of block `b`.
    sums: Vec<u64>,
    len: usize,
}

impl<T> Default for SumSet<T> {
    fn default() -> Self {
        SumSet { blocks: Vec::new(), sums: Vec::new(), len: 0 }
    }
}

impl<T: Ord + Copy> SumSet<T> {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The block that holds `key` or would: the first whose last key is `>= key` (the last
    /// block when `key` is above every key).
    fn block_of(&self, key: &T) -> usize {
        let b = self.blocks.partition_point(|blk| blk.last().is_some_and(|e| e.0 < *key));
        b.min(self.blocks.len().saturating_sub(1))
    }

    /// Sum of every entry's weight.
    pub(crate) fn total(&self) -> u64 {
        self.sums.iter().sum()
    }

    /// Adds `key` with `weight`; returns false (and changes nothing) if it is there already.
    pub(crate) fn insert(&mut self, key: T, weight: u32) -> bool {
        if self.blocks.is_empty() {
            self.blocks.push(vec![(key, weight)]);
            self.sums.push(weight as u64);
            self.len = 1;
            return true;
        }
        let b = self.block_of(&key);
        let blk = &mut self.blocks[b];
        let i = match blk.binary_search_by(|e| e.0.cmp(&key)) {
            Ok(_) => return false,
            Err(i) => i,
        };
        blk.insert(i, (key, weight));
        self.sums[b] += weight as u64;
        self.len += 1;
        if blk.len() > MAX_BLOCK {
            let tail = blk.split_off(blk.len() / 2);
            let tail_sum: u64 = tail.iter().map(|e| e.1 as u64).sum();
            self.sums[b] -= tail_sum;
            self.blocks.insert(b + 1, tail);
            self.sums.insert(b + 1, tail_sum);
        }
        true
    }

    /// Removes `key`; returns its weight if it was there.
    pub(crate) fn remove(&mut self, key: &T) -> Option<u32> {
        if self.blocks.is_empty() {
            return None;
        }
        let b = self.block_of(key);
        let blk = &mut self.blocks[b];
        let i = blk.binary_search_by(|e| e.0.cmp(key)).ok()?;
        let (_, w) = blk.remove(i);
        self.sums[b] -= w as u64;
        self.len -= 1;
        if blk.is_empty() {
            self.blocks.remove(b);
            self.sums.remove(b);
        }
        Some(w)
    }

    /// Position of the first entry `>= key`: `(block, index)`, or one past the end.
    fn lower_bound(&self, key: &T) -> (usize, usize) {
        let b = self.blocks.partition_point(|blk| blk.last().is_some_and(|e| e.0 < *key));
        if b == self.blocks.len() {
            return (b, 0);
        }
        (b, self.blocks[b].partition_point(|e| e.0 < *key))
    }

    /// Sum of the weights of the entries below position `(b, i)`.
    fn sum_before(&self, (b, i): (usize, usize)) -> u64 {
        let whole: u64 = self.sums[..b].iter().sum();
        let part: u64 = self.blocks.get(b).map_or(0, |blk| blk[..i].iter().map(|e| e.1 as u64).sum());
        whole + part
    }

    /// Sum of the weights of the entries `< key`.
    pub(crate) fn sum_below(&self, key: &T) -> u64 {
        self.sum_before(self.lower_bound(key))
    }

    /// The first entry whose weight, added to those of every entry before it, exceeds
    /// `threshold`, with the sum of the weights before it; `None` if the total does not exceed it.
    pub(crate) fn first_exceeding(&self, threshold: u64) -> Option<(T, u64)> {
        let mut acc = 0u64;
        for (b, &s) in self.sums.iter().enumerate() {
            if acc + s <= threshold {
                acc += s;
                continue;
            }
            for &(k, w) in &self.blocks[b] {
                if acc + w as u64 > threshold {
                    return Some((k, acc));
                }
                acc += w as u64;
            }
        }
        None
    }

    /// The entries `>= key`, in order.
    pub(crate) fn iter_from(&self, key: &T) -> impl Iterator<Item = (T, u32)> + '_ {
        let (b, i) = self.lower_bound(key);
        self.blocks
            .iter()
            .skip(b)
            .enumerate()
            .flat_map(move |(k, blk)| blk[if k == 0 { i } else { 0 }..].iter().copied())
    }

    /// Every entry, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (T, u32)> + '_ {
        self.blocks.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    #[test]
    fn matches_a_btreemap() {
        let mut s: SumSet<(u32, u32)> = SumSet::default();
        let mut m: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut next = || rng.random::<u64>();
        for step in 0..30_000 {
            let k = ((next() % 3_000) as u32, (next() % 3) as u32);
            let w = (next() % 9) as u32;
            if step % 3 == 2 {
                assert_eq!(s.remove(&k), m.remove(&k));
            } else {
                let fresh = !m.contains_key(&k);
                assert_eq!(s.insert(k, w), fresh);
                m.entry(k).or_insert(w);
            }
            assert_eq!(s.len(), m.len());
            let q = ((next() % 3_100) as u32, 1);
            let below: u64 = m.range(..q).map(|(_, &w)| w as u64).sum();
            assert_eq!(s.sum_below(&q), below);
            let t = next() % (m.values().map(|&w| w as u64).sum::<u64>() + 5);
            let mut acc = 0;
            let want = m.iter().find_map(|(&k, &w)| {
                if acc + w as u64 > t {
                    return Some((k, acc));
                }
                acc += w as u64;
                None
            });
            assert_eq!(s.first_exceeding(t), want);
            if step % 500 == 0 {
                assert!(s.iter_from(&q).eq(m.range(q..).map(|(&k, &w)| (k, w))));
                assert!(s.iter().eq(m.iter().map(|(&k, &w)| (k, w))));
            }
        }
    }
}
