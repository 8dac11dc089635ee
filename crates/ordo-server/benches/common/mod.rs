//! What the server benchmarks share: an in-process server on a fresh database on a free
//! loopback port, and percentiles.
#![allow(dead_code)]

use ordo_server::ServerConfig;
use std::path::Path;

/// Starts a server on `dir/ordo.db` on a free loopback port (heartbeat 1 s, nodes never time
/// out, no practical cap on a user's pending jobs: the mixed load's queue passes the default
/// 100,000 within 20 s); returns its URL once it accepts connections.
pub fn start_server(dir: &Path) -> String {
    start_server_with(ServerConfig {
        db: dir.join("ordo.db"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        heartbeat_ms: 1_000,
        node_timeout_ms: 600_000,
        max_pending_per_user: 10_000_000,
        ..ServerConfig::default()
    })
}

/// Starts a server with `cfg`; returns its URL once it accepts connections.
pub fn start_server_with(cfg: ServerConfig) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = ordo_server::run(cfg, |url| {
            let _ = tx.send(url);
        });
        eprintln!("server stopped: {r:?}");
    });
    rx.recv().expect("server address")
}

/// The `p` quantile (0..=1) of `v` (sorted in place); NaN when empty.
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}
