//! Helpers shared by ordo-batch's integration tests: request lines and temporary files.
//! Nothing here decides a result; the tests assert on what the real code does.

#![allow(dead_code)]

use std::path::PathBuf;

/// A chat request line for `client`, number `i`, with a user message of `words` words.
pub fn chat(client: &str, i: usize, words: usize, max_tokens: u64) -> String {
    let content: Vec<String> = (0..words).map(|w| format!("w{}", (w * 7 + i) % 50)).collect();
    serde_json::json!({
        "custom_id": format!("{client}-{i}"),
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "max_tokens": max_tokens,
                 "messages": [{"role": "user", "content": content.join(" ")}]}
    })
    .to_string()
}

/// Write lines to a new file in `dir`.
pub fn write(dir: &std::path::Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n") + "\n").expect("write request file");
    p
}
