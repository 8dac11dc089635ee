//! Checks against the real Philly trace in `shared/traces` (outside the repository).
//!
//! The trace directory is `$ORDO_TRACES`, or `../shared/traces` beside the repository root. If
//! the file is absent the tests fail when `CI=true` and are skipped (with a message) otherwise.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_trace::{load_path, Format, LoadOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// The Philly trace's path, or `None` (after saying why) when it is absent outside CI.
fn philly_rfold() -> Option<PathBuf> {
    let dir = match std::env::var_os("ORDO_TRACES") {
        Some(d) => PathBuf::from(d),
        // crates/ordo-trace -> repository root -> ../shared/traces
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
    };
    let path = dir.join("philly/philly_rfold.csv");
    if path.is_file() {
        return Some(path);
    }
    let what = format!("{} not found (set ORDO_TRACES to the traces directory)", path.display());
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("real-trace test: {what}; CI must have the shared traces");
    }
    // Straight to stderr, not `eprintln!`, so the test harness's capture does not hide it.
    let _ = writeln!(std::io::stderr(), "skipped: {what}");
    None
}

#[test]
fn philly_whole_file() {
    let Some(path) = philly_rfold() else { return };
    let start = Instant::now();
    let t = load_path(&path, &LoadOptions::default()).unwrap();
    eprintln!("loaded {} ({} rows, {} jobs) in {:?}", path.display(), t.rows, t.workload.jobs.len(), start.elapsed());
    assert_eq!(t.format, Format::Philly);
    assert_eq!(t.rows, 111_549);
    assert_eq!(t.dropped_zero_duration, 10);
    assert_eq!(t.dropped_outside_window, 0);
    assert_eq!(t.workload.jobs.len(), 111_539);
    let jobs = &t.workload.jobs;
    assert_eq!(jobs[0].submit, 0);
    assert!(jobs.iter().all(|j| (1..=128).contains(&j.gpus)));
    assert_eq!(t.workload.users, ["default"]);
    // About 129 days of arrivals.
    let last = jobs.last().map_or(0, |j| j.submit);
    assert!((128..=130).contains(&(last / 86_400_000)), "{last}");
}

#[test]
fn philly_days_42_to_49() {
    let Some(path) = philly_rfold() else { return };
    let opts = LoadOptions::new(Format::Auto).with_window(Some(42.0), Some(49.0));
    let t = load_path(&path, &opts).unwrap();
    assert_eq!(t.workload.jobs.len(), 7_729);
    assert_eq!(t.rows, 111_549);
    assert_eq!(t.rows, 7_729 + t.dropped_zero_duration + t.dropped_outside_window);
    let jobs = &t.workload.jobs;
    assert_eq!(jobs[0].submit, 0);
    assert!(jobs.last().is_some_and(|j| j.submit < 7 * 86_400_000));
    assert!(jobs.iter().enumerate().all(|(i, j)| j.id.idx() == i));
}
