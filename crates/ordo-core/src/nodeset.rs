//! A set of node indices as a two-level bitset, the index behind placement's lookups: insert,
//! remove and membership in O(1); the first member at or after an index in O(1 + n / 4096).

/// Node indices `0..n` in a bitset, with a summary bit per 64-bit word that says whether the
/// word has any member, so that finding the next member skips 4,096 empty nodes per check.
/// Cloning copies `n / 8` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct NodeSet {
    /// Bit `i % 64` of `words[i / 64]`: node `i` is a member.
    words: Vec<u64>,
    /// Bit `w % 64` of `summary[w / 64]`: `words[w]` is not zero.
    summary: Vec<u64>,
    len: u32,
}

impl NodeSet {
    /// An empty set for node indices `0..n`.
    pub(crate) fn new(n: usize) -> Self {
        let words = n.div_ceil(64);
        NodeSet { words: vec![0; words], summary: vec![0; words.div_ceil(64)], len: 0 }
    }

    /// Number of members.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Whether the set has no member.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `i` (which must be below the set's `n`).
    #[inline]
    pub(crate) fn insert(&mut self, i: u32) {
        let w = (i / 64) as usize;
        let bit = 1u64 << (i % 64);
        if self.words[w] & bit == 0 {
            self.words[w] |= bit;
            self.summary[w / 64] |= 1u64 << (w % 64);
            self.len += 1;
        }
    }

    /// Removes `i` if it is a member.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) {
        let w = (i / 64) as usize;
        let bit = 1u64 << (i % 64);
        if self.words[w] & bit != 0 {
            self.words[w] &= !bit;
            if self.words[w] == 0 {
                self.summary[w / 64] &= !(1u64 << (w % 64));
            }
            self.len -= 1;
        }
    }

    /// Whether `i` is a member.
    #[cfg(test)]
    pub(crate) fn contains(&self, i: u32) -> bool {
        self.words.get((i / 64) as usize).is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    /// The smallest member `>= from`.
    #[inline]
    pub(crate) fn first_from(&self, from: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let w = (from / 64) as usize;
        let m = self.words.get(w)? & (!0u64 << (from % 64));
        if m != 0 {
            return Some(w as u32 * 64 + m.trailing_zeros());
        }
        // The next non-empty word after `w`, found through the summary.
        let next = w + 1;
        let mut s = next / 64;
        let mut mask = if next.is_multiple_of(64) { !0u64 } else { !0u64 << (next % 64) };
        while s < self.summary.len() {
            let m = self.summary[s] & mask;
            if m != 0 {
                let w = s * 64 + m.trailing_zeros() as usize;
                return Some(w as u32 * 64 + self.words[w].trailing_zeros());
            }
            mask = !0;
            s += 1;
        }
        None
    }

    /// The members `>= from`, in ascending order.
    pub(crate) fn iter_from(&self, from: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(self.first_from(from), move |&i| i.checked_add(1).and_then(|j| self.first_from(j)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeSet;

    #[test]
    fn matches_a_btreeset() {
        // A seeded walk of inserts and removes over 10,000 nodes (several summary words).
        let n = 10_000u32;
        let mut s = NodeSet::new(n as usize);
        let mut b = BTreeSet::new();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for step in 0..40_000 {
            let x: u64 = rng.random();
            let i = (x % n as u64) as u32;
            if step % 3 == 0 {
                s.remove(i);
                b.remove(&i);
            } else {
                s.insert(i);
                b.insert(i);
            }
            let from = ((x >> 20) % (n as u64 + 10)) as u32;
            assert_eq!(s.first_from(from), b.range(from..).next().copied(), "from {from}");
            assert_eq!(s.len() as usize, b.len());
            assert_eq!(s.contains(i), b.contains(&i));
        }
        assert!(s.iter_from(0).eq(b.iter().copied()));
        assert!(s.iter_from(5_000).eq(b.range(5_000..).copied()));
    }

    #[test]
    fn far_apart_members_and_edges() {
        let mut s = NodeSet::new(300_000);
        assert_eq!(s.first_from(0), None);
        s.insert(299_999);
        s.insert(4_095);
        s.insert(4_096);
        assert_eq!(s.first_from(0), Some(4_095));
        assert_eq!(s.first_from(4_096), Some(4_096));
        assert_eq!(s.first_from(4_097), Some(299_999));
        assert_eq!(s.first_from(300_000), None);
        s.remove(4_095);
        s.remove(4_096);
        assert_eq!(s.first_from(0), Some(299_999));
        assert!(!s.is_empty());
        assert_eq!(NodeSet::new(0).first_from(0), None);
    }
}
