//! Names the commit the binary is built from, for `ordo --version`: `ORDO_VERSION` is set to
//! `0.1.0 (commit 0123456789ab, 2026-12-04)` from git, or from `$ORDO_COMMIT` where there is no
//! repository (a source tarball, a container build), else `0.1.0 (commit unknown)`. A few
//! lines of `git` rather than a crate: the binary needs the hash and date only.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=ORDO_COMMIT");
    let commit = match git(&["log", "-1", "--format=%h %cs", "--abbrev=12"]) {
        Some(line) => {
            // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points at (a
            // commit), and packed refs.
            let dirs = [git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"])];
            for dir in dirs.into_iter().flatten().map(PathBuf::from) {
                for f in ["HEAD", "packed-refs"] {
                    if dir.join(f).exists() {
                        println!("cargo:rerun-if-changed={}", dir.join(f).display());
                    }
                }
            }
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
                    if std::path::Path::new(&p).exists() {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
            }
            let (hash, date) = line.split_once(' ').unwrap_or((&line, ""));
            format!("commit {hash}, {date}")
        }
        None => match std::env::var("ORDO_COMMIT") {
            Ok(c) if !c.trim().is_empty() => format!("commit {}", c.trim()),
            _ => "commit unknown".to_string(),
        },
    };
    println!("cargo:rustc-env=ORDO_VERSION={version} ({commit})");
}
