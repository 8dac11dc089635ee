//! The Rust version the workspace declares (and the README names) is one the locked
//! dependencies accept: at least the highest `rust-version` any of them declares.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use std::path::PathBuf;
use std::process::Command;

/// `1.88` or `1.88.0` as `[1, 88, 0]`.
fn version(s: &str) -> Vec<u64> {
    let mut v: Vec<u64> = s.split('.').map(|x| x.parse().unwrap()).collect();
    v.resize(3, 0);
    v
}

#[test]
fn declared_rust_version_covers_the_locked_dependencies() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Only the packages built for this machine: a fresh machine has downloaded no others
    // (Windows-only crates, say), and `--offline` cannot read their manifests.
    let rustc = Command::new("rustc").arg("-vV").output().unwrap();
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    let host = rustc.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", host])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut needed: Vec<(Vec<u64>, String)> = m["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_string())
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), format!("{} {}", p["name"], p["version"]))))
        .collect();
    needed.sort();
    let (max, who) = needed.last().cloned().unwrap();
    let declared: Vec<&serde_json::Value> = m["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_null())
        .map(|p| &p["rust_version"])
        .collect();
    for d in &declared {
        let d = d.as_str().expect("every workspace crate declares rust-version");
        let want = max.iter().map(u64::to_string).collect::<Vec<_>>().join(".");
        assert!(version(d) >= max, "rust-version {d} is below {who}'s {want}");
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let d = declared[0].as_str().unwrap();
    assert!(readme.contains(&format!("Rust {d} or newer")), "README does not name Rust {d}");
}
