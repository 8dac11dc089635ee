//! Benchmark through the real HTTP API on loopback: a user's dependency fan-out (issue: one
//! user's action must not stall the server). As one user: `X` (1 GPU, runs), `A` = an array of
//! N elements each `--after-ok X`, `B` = an array of N elements `--after-any A` (every element
//! of B waits for every element of A), then `X` is cancelled: every element of A can never run
//! and is cancelled, and every element of B joins the queue. Meanwhile two nodes' agents poll
//! (as `ordo agent` does, every 200 ms) and another user reads a job every 20 ms. Prints, for
//! N = 1,000, 3,000 and 10,000 (or the sizes given): how long the submissions and the cascade
//! took, the longest hold of the server's state lock (`ordo_state_lock_longest_hold_seconds`),
//! the slowest read and poll answer (beyond the poll's own wait) while it ran, and whether
//! any node was declared down. Run: `cargo bench -p ordo-server --bench fanout [N ...]`.
//! `-- --single 100000`: how long a user's change to one waiting job (cancel, hold, release,
//! priority) takes with that many jobs waiting.

mod common;

use common::*;

use ordo_core::DepKind;
use ordo_server::api::*;
use ordo_server::auth::{create_token, Role};
use ordo_server::client::Client;
use ordo_server::ServerConfig;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's longest state-lock hold so far, from `/metrics`, seconds.
fn longest_hold(c: &Client) -> f64 {
    let text = c.get_text("/metrics").expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("ordo_state_lock_longest_hold_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .expect("ordo_state_lock_longest_hold_seconds in /metrics")
}

fn run(n: usize) {
    let dir = std::env::temp_dir().join(format!("ordo-fanout-bench-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = start_server_with(ServerConfig {
        db: dir.join("ordo.db"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        heartbeat_ms: 200,
        node_timeout_ms: 3_000,
        fence_grace_ms: 1_000,
        max_pending_per_user: 10_000_000,
        ..ServerConfig::default()
    });
    let db = dir.join("ordo.db");
    let admin =
        Client::new(&url, Some(create_token(&db, "admin", Role::Admin).expect("token")), Duration::from_secs(120));
    let stop = Arc::new(AtomicBool::new(false));
    let down = Arc::new(AtomicBool::new(false));
    let slowest_poll_us = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for node in ["n1", "n2"] {
        let c = Client::new(&url, Some(create_token(&db, node, Role::Agent).expect("token")), Duration::from_secs(120));
        let reg = RegisterRequest { node: node.into(), gpus: 1, fake: true, ..RegisterRequest::default() };
        c.post::<_, RegisterResponse>("/v1/agent/register", &reg).expect("register");
        let (stop, down, slowest) = (stop.clone(), down.clone(), slowest_poll_us.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let req = PollRequest { node: node.into(), running: vec![], wait_ms: 200, problem: None };
                let t = Instant::now();
                match c.post::<_, PollResponse>("/v1/agent/poll", &req) {
                    Ok(_) => {}
                    Err(e) if e.status() == Some(409) => {
                        down.store(true, Ordering::Relaxed);
                        let _ = c.post::<_, RegisterResponse>("/v1/agent/register", &reg);
                    }
                    Err(e) => panic!("poll: {e}"),
                }
                // Beyond the 200 ms the server may hold a poll with nothing to do.
                let extra = t.elapsed().saturating_sub(Duration::from_millis(200));
                slowest.fetch_max(extra.as_micros() as u64, Ordering::Relaxed);
            }
        }));
    }
    let bob = Client::new(&url, Some(create_token(&db, "bob", Role::User).expect("token")), Duration::from_secs(300));
    let alice =
        Client::new(&url, Some(create_token(&db, "alice", Role::User).expect("token")), Duration::from_secs(300));
    let mine = alice
        .post::<_, SubmitResponse>(
            "/v1/jobs",
            &SubmitRequest { command: vec!["true".into()], gpus: 1, ..SubmitRequest::default() },
        )
        .expect("alice's job")
        .id;
    let slowest_read_us = Arc::new(AtomicU64::new(0));
    {
        let (stop, slowest) = (stop.clone(), slowest_read_us.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let _: JobInfo = alice.get(&format!("/v1/jobs/{mine}")).expect("read a job");
                slowest.fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    let job = |after: Vec<AfterDep>, array: Option<String>| SubmitRequest {
        command: vec!["true".into()],
        gpus: 1,
        time_limit_ms: Some(60_000),
        after,
        array,
        ..SubmitRequest::default()
    };
    let t = Instant::now();
    let x = bob.post::<_, SubmitResponse>("/v1/jobs", &job(vec![], None)).expect("X").id;
    let spec = format!("0-{}", n - 1);
    let a = bob
        .post::<_, SubmitResponse>(
            "/v1/jobs",
            &job(vec![AfterDep { kind: DepKind::AfterOk, job: x }], Some(spec.clone())),
        )
        .expect("A")
        .id;
    let b = bob
        .post::<_, SubmitResponse>("/v1/jobs", &job(vec![AfterDep { kind: DepKind::AfterAny, job: a }], Some(spec)))
        .expect("B")
        .id;
    let submitted = t.elapsed();
    let t = Instant::now();
    let _: serde_json::Value = bob
        .post("/v1/jobs/{x}/cancel".replace("{x}", &x.to_string()).as_str(), &serde_json::json!({}))
        .expect("cancel X");
    // Until the last element of A is cancelled and the last of B has joined the queue.
    let last_a = a + n as u64 - 1;
    let last_b = b + n as u64 - 1;
    loop {
        let ja: JobInfo = bob.get(&format!("/v1/jobs/{last_a}")).expect("A's last");
        let jb: JobInfo = bob.get(&format!("/v1/jobs/{last_b}")).expect("B's last");
        if ja.state == JobState::Cancelled && jb.wait.as_ref().is_some_and(|w| !w.text.starts_with("waits for array")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let cascade = t.elapsed();
    // One more poll round, so that a stall at the very end is seen too.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for h in threads {
        let _ = h.join();
    }
    println!(
        "{n} x {n}: submitted in {:.2} s, cascade (cancel X: {n} cancelled, {n} released) {:.2} s; longest state-lock hold {:.1} ms; slowest read {:.1} ms, slowest poll answer beyond its wait {:.1} ms; node declared down: {}",
        submitted.as_secs_f64(),
        cascade.as_secs_f64(),
        longest_hold(&admin) * 1000.0,
        slowest_read_us.load(Ordering::Relaxed) as f64 / 1000.0,
        slowest_poll_us.load(Ordering::Relaxed) as f64 / 1000.0,
        if down.load(Ordering::Relaxed) { "YES" } else { "no" }
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `pending` jobs waiting (arrays of 10,000 under `fifo+easy`), how long a user's change
/// to one waiting job takes (median and worst of 20 each, request to durable answer): a cancel,
/// a hold, a release and a priority change, each of which used to rebuild the whole scheduler.
fn single_changes(pending: usize) {
    let dir = std::env::temp_dir().join(format!("ordo-fanout-bench-{}-single", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = start_server(&dir);
    let db = dir.join("ordo.db");
    let node = Client::new(&url, Some(create_token(&db, "n1", Role::Agent).expect("token")), Duration::from_secs(60));
    node.post::<_, RegisterResponse>(
        "/v1/agent/register",
        &RegisterRequest { node: "n1".into(), gpus: 8, fake: true, ..RegisterRequest::default() },
    )
    .expect("register");
    let u = Client::new(&url, Some(create_token(&db, "carol", Role::User).expect("token")), Duration::from_secs(120));
    let a = Client::new(&url, Some(create_token(&db, "root", Role::Admin).expect("token")), Duration::from_secs(120));
    let mut first = 0;
    for _ in 0..pending.div_ceil(10_000) {
        let r: SubmitResponse = u
            .post(
                "/v1/jobs",
                &SubmitRequest {
                    command: vec!["true".into()],
                    gpus: 1,
                    time_limit_ms: Some(60_000),
                    array: Some("0-9999".into()),
                    ..SubmitRequest::default()
                },
            )
            .expect("array");
        if first == 0 {
            first = r.id;
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut times: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for k in 0..20u64 {
        let id = first + 1_000 + k * 17;
        let mut timed = |what: &'static str, f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            times.entry(what).or_default().push(t.elapsed().as_secs_f64() * 1000.0);
        };
        timed("hold", &mut || {
            let _: JobInfo = u.post(&format!("/v1/jobs/{id}/hold"), &serde_json::json!({})).expect("hold");
        });
        timed("release", &mut || {
            let _: JobInfo = u.post(&format!("/v1/jobs/{id}/release"), &serde_json::json!({})).expect("release");
        });
        timed("priority", &mut || {
            let _: JobInfo =
                a.post(&format!("/v1/jobs/{id}/priority"), &serde_json::json!({"priority": 5})).expect("priority");
        });
        timed("cancel", &mut || {
            let _: serde_json::Value =
                u.post(&format!("/v1/jobs/{id}/cancel"), &serde_json::json!({})).expect("cancel");
        });
    }
    for (what, mut v) in times {
        println!(
            "one job's {what} with {pending} pending: median {:.1} ms, worst {:.1} ms (request to durable answer)",
            pct(&mut v, 0.5),
            pct(&mut v, 1.0)
        );
    }
    println!("longest state-lock hold in that server: {:.1} ms", longest_hold(&a) * 1000.0);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(n) = std::env::args().skip_while(|a| a != "--single").nth(1).and_then(|v| v.parse().ok()) {
        single_changes(n);
        return;
    }
    let mut sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![1_000, 3_000, 10_000];
    }
    for n in sizes {
        run(n);
    }
}
