//! Hashes: a small, fast, chained 64-bit hash for prompt-prefix blocks (equal hashes mean equal
//! prefixes), and BLAKE2b digests that identify submitted content (idempotency keys).

use blake2::{Blake2b512, Digest};

const K: u64 = 0x517c_c1b7_2722_0a95;

/// Continue `state` over `bytes` (FxHash-style mixing, 8 bytes at a time).
pub(crate) fn mix(mut state: u64, bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        state = (state.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    for &b in chunks.remainder() {
        state = (state.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
    }
    state
}

/// Finish a hash (adds the length so that "a" and "a\0" differ).
pub(crate) fn finish(state: u64, len: usize) -> u64 {
    let h = (state ^ len as u64).wrapping_mul(K);
    h ^ (h >> 29)
}

/// A BLAKE2b digest of several byte strings, each prefixed by its length (so that the split
/// between them counts), as 32 hex digits (128 bits).
pub(crate) fn digest(fields: &[&[u8]]) -> String {
    let mut h = Blake2b512::new();
    for f in fields {
        h.update((f.len() as u64).to_le_bytes());
        h.update(f);
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_depend_on_every_byte_and_on_the_split() {
        let a = digest(&[b"ab", b"c"]);
        assert_eq!(a.len(), 32);
        assert_ne!(a, digest(&[b"a", b"bc"]));
        assert_ne!(a, digest(&[b"ab", b"d"]));
        assert_eq!(a, digest(&[b"ab", b"c"]));
    }
}
