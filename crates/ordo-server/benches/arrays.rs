//! Benchmark through the real HTTP API on loopback: how long a 10,000-element job array
//! (`--array 0-9999%50`) takes to be accepted, from the request to its durable answer (every
//! element a job row with its audit record, all in one SQLite transaction, synchronous=FULL,
//! and queued in the scheduler). Each round submits one more array as a new user, so the
//! queue grows by 10,000 each round (to 100,000 after 10). Run:
//! `cargo bench -p ordo-server --bench arrays` (prints figures; no criterion: each sample is a
//! full request through the network stack and a disk sync).

mod common;

use common::*;

use ordo_server::api::*;
use ordo_server::auth::{create_token, Role};
use ordo_server::client::Client;
use std::time::{Duration, Instant};

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("ordo-arrays-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = start_server(&dir);
    let db = dir.join("ordo.db");
    let node = create_token(&db, "n1", Role::Agent).expect("token");
    Client::new(&url, Some(node), Duration::from_secs(30))
        .post::<_, RegisterResponse>(
            "/v1/agent/register",
            &RegisterRequest { node: "n1".into(), gpus: 8, fake: true, ..RegisterRequest::default() },
        )
        .expect("register");
    let mut ms = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let user = create_token(&db, &format!("user{round}"), Role::User).expect("token");
        let c = Client::new(&url, Some(user), Duration::from_secs(60));
        // Warm the token cache and the connection.
        let _: Vec<NodeInfo> = c.get("/v1/nodes").expect("nodes");
        let req = SubmitRequest {
            command: vec!["true".into()],
            gpus: 1,
            time_limit_ms: Some(60_000),
            array: Some("0-9999%50".into()),
            ..SubmitRequest::default()
        };
        let t = Instant::now();
        let r: SubmitResponse = c.post("/v1/jobs", &req).expect("submit");
        let took = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(r.elements, Some(10_000));
        println!(
            "round {round}: 10,000-element array accepted in {took:.1} ms (queue then {} jobs)",
            (round + 1) * 10_000
        );
        ms.push(took);
    }
    let worst = ms.iter().cloned().fold(0.0, f64::max);
    println!(
        "10,000-element array, durable acceptance over {rounds} rounds: median {:.1} ms, min {:.1} ms, max {worst:.1} ms",
        pct(&mut ms, 0.5),
        pct(&mut ms.clone(), 0.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
