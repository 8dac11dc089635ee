//! Helpers shared by the integration tests.

use std::io::Write;
use std::path::PathBuf;

/// A file under the real traces directory (`$ORDO_TRACES`, default `../shared/traces` beside the
/// repository), or `None` after saying why when it is absent. Under `CI=true` absence fails.
pub fn trace(rel: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("ORDO_TRACES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
    };
    let path = dir.join(rel);
    if path.is_file() {
        return Some(path);
    }
    let what = format!("{} not found (set ORDO_TRACES to the traces directory)", path.display());
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("real-trace test: {what}; CI must have the shared traces");
    }
    let _ = writeln!(std::io::stderr(), "skipped: {what}");
    None
}
