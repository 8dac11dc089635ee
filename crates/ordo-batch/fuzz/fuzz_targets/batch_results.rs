//! Fuzzes the reading of provider answers: result lines of both providers and batch objects
//! never panic, and what is read is consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_batch::provider::Provider;
use ordo_batch::results::normalize;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n') {
        for p in [Provider::OpenAi, Provider::Anthropic] {
            if let Ok(n) = normalize(p, line) {
                assert_eq!(n.line["custom_id"].as_str(), Some(n.custom_id.as_str()));
                assert_eq!(
                    n.ok,
                    n.line["error"].is_null()
                        && n.line["response"]["status_code"].as_u64().is_some_and(|s| (200..300).contains(&s))
                );
            }
        }
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        for p in [Provider::OpenAi, Provider::Anthropic] {
            if let Some(r) = p.parse_batch(&v) {
                assert!(r.counts.processing <= r.counts.total);
                assert!(!r.ended || r.counts.processing == 0 || p == Provider::Anthropic);
            }
        }
        let _ = ordo_batch::usage::Usage::of(&v);
    }
});
