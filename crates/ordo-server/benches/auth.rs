//! A valid token's first request while 200 requests with wrong secrets for existing token ids
//! arrive at once (the attack that stalled argon2 checks before tokens were stored as digests).
//! Each round uses a token never seen by the server before (no cache can help it) and a fresh
//! burst of 200 bad requests on 200 connections; prints the median and worst time of the valid
//! request, and how the bad ones were answered (401, then 429 past the per-peer limit).
//!
//! Run: `cargo bench -p ordo-server --bench auth [-- ROUNDS]` (default 20).

mod common;

use common::*;

use ordo_server::auth::{create_token, Role};
use std::io::{Read, Write};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn get(addr: &str, token: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let req =
        format!("GET /v1/policy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = args.iter().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20);
    let dir = std::env::temp_dir().join(format!("ordo-auth-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = start_server(&dir);
    let addr = url.trim_start_matches("http://").to_string();
    let db = dir.join("ordo.db");
    let mut times = Vec::new();
    let (mut c401, mut c429) = (0, 0);
    for _ in 0..rounds {
        let good = create_token(&db, "admin", Role::Admin).expect("token");
        let victim = create_token(&db, "victim", Role::User).expect("token");
        let id = victim.split('_').nth(1).expect("id").to_string();
        let bad = format!("ordo_{id}_{}", "f".repeat(48));
        let go = Arc::new(Barrier::new(201));
        let attackers: Vec<_> = (0..200)
            .map(|_| {
                let (addr, bad, go) = (addr.clone(), bad.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    get(&addr, &bad)
                })
            })
            .collect();
        go.wait();
        let t = Instant::now();
        let st = get(&addr, &good);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(st, 200, "the valid token was refused");
        for a in attackers {
            match a.join().expect("attacker") {
                401 => c401 += 1,
                429 => c429 += 1,
                other => panic!("a bad token got {other}"),
            }
        }
        // Let the per-peer window of failures pass only partly: later rounds meet 429s.
    }
    times.sort_by(|a, b| a.total_cmp(b));
    println!(
        "valid token's first request while 200 bad ones arrive ({rounds} rounds): median {:.1} ms, worst {:.1} ms; bad requests answered 401: {c401}, 429: {c429}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
