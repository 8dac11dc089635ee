//! Fuzzes request-file validation: arbitrary bytes never panic; what loads is consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_batch::{load_bytes, LoadOptions, TokenMode};

fuzz_target!(|data: &[u8]| {
    for skip_bad in [false, true] {
        let opts = LoadOptions { skip_bad, tokens: TokenMode::Approx, threads: 1 };
        if let Ok(l) = load_bytes(std::path::Path::new("fuzz.jsonl"), data.to_vec(), &opts) {
            let mut ids = std::collections::HashSet::new();
            for r in &l.requests {
                assert!(r.line >= 1 && r.span.0 <= r.span.1 && r.span.1 <= data.len());
                assert!(ids.insert(r.custom_id.clone()), "custom_ids are unique");
            }
            assert!(skip_bad || l.skipped.is_empty());
        }
    }
});
