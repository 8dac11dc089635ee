//! The first hour: `cargo run --release` (the README's first command) must not build again what
//! `cargo test --workspace --release` built, nor the other way round. Both resolve every crate's
//! features for the whole workspace; they differ only when a dev-dependency turns on a feature
//! of a crate the binary also uses (crates/ordo/Cargo.toml turns those on for the binary too).
//! This compares the two resolutions with `cargo tree` (offline, from Cargo.lock).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Every package (name and version) with the sets of features it is built with.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    // `cargo test` runs tests with $CARGO set to itself.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--workspace", "--offline", "--locked", "--prefix", "none", "-e", edges, "-f", "{p} [{f}]"])
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree -e {edges}: {}", String::from_utf8_lossy(&out.stderr));
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        let (Some(open), true) = (line.rfind(" ["), line.ends_with(']')) else { continue };
        let words: Vec<&str> = line[..open].split(' ').collect();
        // `name vX.Y.Z`, then `(path)` or `(proc-macro)`: the host build is a separate unit.
        let key = format!(
            "{} {}{}",
            words[0],
            words.get(1).unwrap_or(&""),
            if line.contains("(proc-macro)") { " (host)" } else { "" }
        );
        m.entry(key).or_default().insert(line[open + 2..line.len() - 1].to_string());
    }
    m
}

#[test]
fn run_and_test_builds_resolve_the_same_features() {
    let run = features("normal,build");
    let test = features("normal,build,dev");
    let differ: Vec<String> = run
        .iter()
        .filter_map(|(k, f)| test.get(k).filter(|t| *t != f).map(|t| format!("{k}: {f:?} -> {t:?}")))
        .collect();
    assert!(
        differ.is_empty(),
        "crates the binary's build and the test build resolve differently (turn the dev-dependency's \
         features on for the binary too, in crates/ordo/Cargo.toml):\n{}",
        differ.join("\n")
    );
    assert!(run.len() > 200, "cargo tree listed {} packages", run.len());
}
