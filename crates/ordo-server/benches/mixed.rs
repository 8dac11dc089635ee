//! Durable submissions while the cluster is busy: 8 agents start and end about 100 short jobs a
//! second while 32 clients submit as fast as they can through the HTTP API. Prints submissions
//! per second and acknowledgement latency (each answer comes after its SQLite commit,
//! synchronous=FULL), and the jobs the agents started and ended meanwhile.
//!
//! The agents speak the agent protocol (register, long poll listing their jobs, end reports) as
//! `ordo agent` does, but end each job after 40 ms without a process behind it: the load on the
//! server is that of real agents, and this 2-core machine's CPU goes to the server rather than
//! to forking. Cluster: 8 one-GPU nodes for the churn, plus one two-GPU node that takes the first
//! measured job and never ends it, so that the measured two-GPU jobs queue behind it under
//! `fifo+easy` and the churn backfills past them (the queue grows to the number of measured
//! submissions, e.g. 50,000+).
//!
//! Run: `cargo bench -p ordo-server --bench mixed [-- SECONDS]` (default 10 s of measurement).

mod common;

use common::*;

use ordo_server::api::*;
use ordo_server::auth::{create_token, Role};
use ordo_server::client::Client;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB_MS: i64 = 40;
const CHURN_PER_S: u64 = 100;

/// One agent: runs what it is given for `JOB_MS` (never, when `sink`), then reports its end.
fn agent(
    url: String,
    token: String,
    node: String,
    gpus: u32,
    sink: bool,
    stop: Arc<AtomicBool>,
    ended: Arc<AtomicU64>,
) {
    let c = Client::new(&url, Some(token), Duration::from_secs(30));
    let reg = RegisterRequest {
        node: node.clone(),
        gpus,
        fake: true,
        gpu_model: None,
        cpus: None,
        mem_mib: None,
        mem_limits: false,
        clock: Some(now_ms()),
        addr: None,
        gpu_mem_mib: None,
        features: Vec::new(),
        topology: Default::default(),
    };
    c.post::<_, RegisterResponse>("/v1/agent/register", &reg).expect("register");
    // job -> (started at, attempt)
    let mut running: BTreeMap<JobNo, (i64, u32)> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let now = now_ms();
        let due: Vec<JobNo> =
            running.iter().filter(|(_, (t, _))| !sink && now - t >= JOB_MS).map(|(j, _)| *j).collect();
        for j in due {
            let (t, attempt) = running.remove(&j).expect("running");
            let rep = EndReport {
                node: node.clone(),
                job: j,
                attempt,
                outcome: Outcome::Exited,
                exit_code: Some(0),
                signal: None,
                started_at: t,
                ended_at: now_ms(),
                message: None,
            };
            c.post::<_, serde_json::Value>("/v1/agent/report", &rep).expect("report");
            ended.fetch_add(1, Ordering::Relaxed);
        }
        let next_end = running.values().map(|(t, _)| t + JOB_MS).min();
        let wait = match next_end {
            Some(t) if !sink => (t - now_ms()).clamp(0, 1000) as u64,
            _ => 200,
        };
        let req = PollRequest {
            node: node.clone(),
            running: running
                .iter()
                .map(|(j, (t, _))| RunningJob { job: *j, started_at: *t, attempt: 0, port: None })
                .collect(),
            wait_ms: wait,
            problem: None,
        };
        let resp: PollResponse = c.post("/v1/agent/poll", &req).expect("poll");
        for a in resp.start {
            running.entry(a.job).or_insert((now_ms(), a.attempt));
        }
        for k in resp.kill {
            running.remove(&k);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let secs: u64 = args.iter().skip(1).find_map(|a| a.parse().ok()).unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("ordo-mixed-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = start_server(&dir);
    let db = dir.join("ordo.db");
    let user = create_token(&db, "bench", Role::User).expect("token");
    let churner = create_token(&db, "churn", Role::User).expect("token");
    let stop = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicU64::new(0));
    let mut agents = Vec::new();
    for i in 0..9 {
        let (name, gpus, sink) = if i < 8 { (format!("n{i}"), 1, false) } else { ("sink".to_string(), 2, true) };
        let tok = create_token(&db, &name, Role::Agent).expect("token");
        let (url, stop, ended) = (url.clone(), stop.clone(), ended.clone());
        agents.push(std::thread::spawn(move || agent(url, tok, name, gpus, sink, stop, ended)));
    }
    let c = Client::new(&url, Some(user.clone()), Duration::from_secs(30));
    while c.get::<Vec<NodeInfo>>("/v1/nodes").expect("nodes").len() < 9 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = |gpus: u32, limit: i64| SubmitRequest {
        name: None,
        command: vec!["true".into()],
        cwd: None,
        gpus,
        cpus: None,
        mem_mib: None,
        time_limit_ms: Some(limit),
        priority: None,
        on_node_failure: None,
        no_preempt: None,
        umask: None,
        after: vec![],
        array: None,
        nodes: None,
        output: None,
        gpu_models: Vec::new(),
        gpu_mem_mib: None,
        features: Vec::new(),
        preempt: None,
        topology: None,
    };
    // The churn: 100 one-GPU jobs a second, 40 ms each.
    let churn = {
        let (url, stop) = (url.clone(), stop.clone());
        std::thread::spawn(move || {
            let c = Client::new(&url, Some(churner), Duration::from_secs(30));
            let t0 = Instant::now();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _: SubmitResponse = c.post("/v1/jobs", &job(1, 10_000)).expect("churn submit");
                n += 1;
                let due = t0 + Duration::from_micros(n * 1_000_000 / CHURN_PER_S);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        })
    };
    // Warm up: let the churn reach its rate.
    std::thread::sleep(Duration::from_secs(2));
    let ended0 = ended.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(secs);
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let (url, user) = (url.clone(), user.clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, Some(user), Duration::from_secs(60));
                let mut lat = Vec::new();
                while Instant::now() < until {
                    let s = Instant::now();
                    let _: SubmitResponse = c.post("/v1/jobs", &job(2, 3_600_000)).expect("submit");
                    lat.push(s.elapsed().as_secs_f64() * 1000.0);
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = clients.into_iter().flat_map(|h| h.join().expect("client")).collect();
    let wall = t0.elapsed().as_secs_f64();
    let churned = ended.load(Ordering::Relaxed) - ended0;
    stop.store(true, Ordering::Relaxed);
    let _ = churn.join();
    let n = lat.len();
    println!(
        "mixed load, {secs} s: {n} durable submissions by 32 clients = {:.0} /s; ack p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms; meanwhile the agents ended {churned} jobs = {:.0} /s; queue at the end: {} pending",
        n as f64 / wall,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.9),
        pct(&mut lat, 0.99),
        churned as f64 / wall,
        n
    );
    for a in agents {
        let _ = a.join();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
