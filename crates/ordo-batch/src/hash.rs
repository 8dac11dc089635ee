//! A small, fast, deterministic 64-bit hash used for prompt-prefix blocks.
//! Chained: the hash of a block depends on every byte before it, so equal hashes mean equal prefixes.

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
