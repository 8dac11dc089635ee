//! Fuzzes the OpenAI-to-Anthropic conversion: any JSON body converts or is refused by field,
//! never panics, and what converts has what Anthropic requires.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    match ordo_batch::convert::chat_to_anthropic(&body) {
        Ok(p) => {
            assert!(p["max_tokens"].as_u64().is_some_and(|m| m >= 1));
            let msgs = p["messages"].as_array().expect("messages");
            assert!(!msgs.is_empty());
            assert!(msgs.iter().all(|m| m["role"] == "user" || m["role"] == "assistant"));
        }
        Err(e) => assert!(e.starts_with("field `body"), "{e}"),
    }
});
