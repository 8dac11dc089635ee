//! Benchmark through the real HTTP API on loopback: durable submissions per second (every
//! answer comes after its SQLite commit, synchronous=FULL), and submit-to-start latency on an
//! idle cluster (a real agent runs each job as a process; the job stamps its own start time).
//! Run: `cargo bench -p ordo-server --bench api` (prints figures; no criterion: each sample is
//! a full request through the network stack, so the spread is the result).

mod common;

use common::*;

use ordo_server::agent::{AgentConfig, GpuSpec};
use ordo_server::api::*;
use ordo_server::auth::{create_token, Role};
use ordo_server::client::Client;
use ordo_server::supervise::{supervise, SuperviseArgs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn nanos() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as i128
}

fn throughput(dir: &Path) {
    let url = start_server(dir);
    let db = dir.join("ordo.db");
    let user = create_token(&db, "bench", Role::User).expect("token");
    let node = create_token(&db, "n1", Role::Agent).expect("token");
    let c = Client::new(&url, Some(node), Duration::from_secs(30));
    c.post::<_, RegisterResponse>(
        "/v1/agent/register",
        &RegisterRequest {
            node: "n1".into(),
            gpus: 8,
            fake: true,
            gpu_model: None,
            cpus: None,
            mem_mib: None,
            mem_limits: false,
            clock: None,
            addr: None,
            gpu_mem_mib: None,
            features: Vec::new(),
            topology: Default::default(),
        },
    )
    .expect("register");
    let threads = 32;
    let per = 250;
    // Warm the token cache (argon2 runs once per token).
    let c = Client::new(&url, Some(user.clone()), Duration::from_secs(30));
    let _: QueueResponse = c.get("/v1/jobs").expect("queue");
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let c = Client::new(&url, Some(user.clone()), Duration::from_secs(60));
            std::thread::spawn(move || {
                for _ in 0..per {
                    let r: SubmitResponse = c
                        .post(
                            "/v1/jobs",
                            &SubmitRequest {
                                name: None,
                                command: vec!["true".into()],
                                cwd: None,
                                gpus: 1,
                                cpus: None,
                                mem_mib: None,
                                time_limit_ms: Some(60_000),
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
                                topology: None,
                                preempt: None,
                            },
                        )
                        .expect("submit");
                    assert!(r.id > 0);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().expect("thread");
    }
    let secs = t0.elapsed().as_secs_f64();
    let n = threads * per;
    println!("durable submissions: {n} from {threads} clients in {secs:.2} s = {:.0}/s", n as f64 / secs);
}

fn latency(dir: &Path, samples: usize) {
    let url = start_server(dir);
    let db = dir.join("ordo.db");
    let user = create_token(&db, "bench", Role::User).expect("token");
    let node = create_token(&db, "n1", Role::Agent).expect("token");
    let exe = std::env::current_exe().expect("exe").to_string_lossy().into_owned();
    let acfg = AgentConfig {
        server: url.clone(),
        token: node,
        name: "n1".into(),
        gpus: GpuSpec::Fake(8),
        work_dir: dir.join("work"),
        grace_ms: 1000,
        supervisor: vec![exe, "__supervise".into()],
        cpus: None,
        mem_mib: None,
        run_as: ordo_server::runas::RunAs::Agent,
        pass_env: vec!["PATH".into()],
        ca_pem: None,
        activity: ordo_server::activity::ActivitySource::Off,
        activity_every_ms: 5_000,
        addr: None,
        master_ports: Default::default(),
        // Jobs contained as in production where this machine allows it (root, cgroups).
        contain: ordo_server::cgroup::Containment::find().is_ok(),
        max_output: 1 << 30,
        min_free_mib: 16,
        gpu_model: None,
        gpu_mem_mib: None,
        features: Vec::new(),
        topology: Default::default(),
    };
    std::thread::spawn(move || ordo_server::agent::run(acfg));
    let c = Client::new(&url, Some(user), Duration::from_secs(30));
    let stamp = dir.join("stamps.txt");
    let script = format!("date +%s%N >> {}", stamp.display());
    while c.get::<Vec<NodeInfo>>("/v1/nodes").expect("nodes").is_empty() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples {
        let t = nanos();
        let _: SubmitResponse = c
            .post(
                "/v1/jobs",
                &SubmitRequest {
                    name: None,
                    command: vec!["sh".into(), "-c".into(), script.clone()],
                    cwd: None,
                    gpus: 1,
                    cpus: None,
                    mem_mib: None,
                    time_limit_ms: Some(60_000),
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
                    topology: None,
                    preempt: None,
                },
            )
            .expect("submit");
        let started = loop {
            let text = std::fs::read_to_string(&stamp).unwrap_or_default();
            if let Some(l) = text.lines().nth(i) {
                break l.trim().parse::<i128>().expect("stamp");
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        lat.push((started - t) as f64 / 1e6);
        // Let the job end so the cluster is idle again.
        std::thread::sleep(Duration::from_millis(20));
    }
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    println!(
        "submit-to-start on an idle cluster ({samples} jobs, time to the job's own first instruction): p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, mean {mean:.1} ms",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.9),
        pct(&mut lat, 0.99)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__supervise") {
        // The agent's job supervisor, run from this same binary (and its `agent-exec`).
        let me = std::env::current_exe().expect("bench binary").to_string_lossy().into_owned();
        let a = SuperviseArgs::parse(&args[2..], vec![me, "__exec".into()]).expect("supervisor options");
        std::process::exit(supervise(&a));
    }
    if args.get(1).map(String::as_str) == Some("__exec") {
        let join: Vec<PathBuf> =
            args[2..].chunks(2).take_while(|c| c[0] == "--join").map(|c| PathBuf::from(&c[1])).collect();
        let cmd = &args[2 + 2 * join.len() + 1..];
        std::process::exit(ordo_server::supervise::exec_as(&join, None, cmd));
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let base = std::env::temp_dir().join(format!("ordo-api-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    for d in ["tput", "lat"] {
        std::fs::create_dir_all(base.join(d)).expect("dir");
    }
    throughput(&base.join("tput"));
    latency(&base.join("lat"), 200);
    let _ = std::fs::remove_dir_all(&base);
}
