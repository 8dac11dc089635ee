//! `ordo server` and `ordo agent` keep their own promises when an ordinary user pushes them
//! (issue: containment, bounded work, fencing): a job's processes all die with it before its GPU
//! is given to another job, however they forked; one user's dependency fan-out does not stall
//! the server nor restart another user's job; clients that hold connections open lock nobody
//! out; a paused or cut-off node never runs a job at the same time as its replacement; a job
//! that fills the agent's disk drains the node with its reason instead of failing every later
//! job; agent tokens read nothing but their node's work. Real server, agent and job processes
//! throughout; cgroups, tmpfs and network namespaces need root (skipped without it, except
//! under CI).

mod harness;

use harness::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn submit(url: &str, tok: &str, args: &[&str]) -> u64 {
    cli_json(url, tok, args)["id"].as_u64().expect("id")
}

fn wait_nodes(url: &str, admin: &str, n: usize) {
    wait_for(&format!("{n} nodes up"), Duration::from_secs(30), || {
        cli_json(url, admin, &["nodes"])
            .as_array()
            .is_some_and(|a| a.iter().filter(|x| x["state"] == "up").count() == n)
    });
}

/// Processes whose command line contains `marker`.
fn alive(marker: &str) -> Vec<String> {
    let out = Command::new("pgrep").args(["-a", "-f", marker]).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.contains("pgrep")).map(str::to_string).collect()
}

/// The numbers (ns since the epoch) a job appended to `file`, one per line.
fn stamps(file: &Path) -> Vec<u128> {
    std::fs::read_to_string(file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// A: a job that leaves processes behind in every way a user can (`setsid`, a double fork, a
/// background child), stopped every way a job stops (cancel, time limit, its command exiting,
/// with a memory limit): nothing of it survives, and the job waiting for its one GPU starts only
/// after its last process is gone.
#[test]
fn a_jobs_processes_all_die_with_it_before_its_gpu_is_given_again() {
    if !needs(is_root(), "root, for the agent's cgroups") {
        return;
    }
    let dir = tempdir("contain");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent(&dir, &url, "gpu1", 1);
    wait_nodes(&url, &admin, 1);
    for (case, flags, main) in [
        ("cancel", vec![], "sleep 600"),
        ("timelimit", vec!["--time", "3s"], "sleep 600"),
        ("exit0", vec![], "sleep 2; exit 0"),
        ("mem", vec!["--mem", "1G"], "sleep 600"),
    ] {
        let mark = dir.join(format!("escapee-{case}"));
        let start = dir.join(format!("next-{case}"));
        let _ = std::fs::remove_file(&mark);
        // The escapee stamps the time every 50 ms for as long as it lives; the double fork and
        // the background `sleep` carry the marker too.
        let script = format!(
            "setsid sh -c 'while :; do date +%s%N >> {m}; sleep 0.05; done' </dev/null >/dev/null 2>&1 & \
             (sh -c 'sleep 601 {m}' &) ; sleep 602 {m} & sleep 0.5; {main}",
            m = mark.display()
        );
        let mut args = vec!["submit", "--gpus", "1"];
        args.extend(flags.iter().copied());
        args.extend(["--", "sh", "-c", &script]);
        let a = submit(&url, &alice, &args);
        let next_cmd = format!("date +%s%N > {}", start.display());
        let b = submit(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", &next_cmd]);
        wait_for(&format!("{case}: the escapee runs"), Duration::from_secs(30), || stamps(&mark).len() >= 3);
        assert!(!alive(&mark.display().to_string()).is_empty());
        if case == "cancel" || case == "mem" {
            cli_json(&url, &alice, &["cancel", &a.to_string()]);
        }
        let ja = wait_ended(&url, &alice, a, Duration::from_secs(60));
        let jb = wait_ended(&url, &alice, b, Duration::from_secs(60));
        assert_eq!(jb["state"], "completed", "{case}: {jb}");
        let next_started: u128 = std::fs::read_to_string(&start).expect("the next job ran").trim().parse().expect("ns");
        let last = *stamps(&mark).last().expect("stamps");
        assert!(
            last < next_started,
            "{case}: the escapee of job {a} ({}) still ran at {last}, after job {b} got its GPU at {next_started}",
            ja["state"]
        );
        let left = alive(&mark.display().to_string());
        assert!(left.is_empty(), "{case}: processes of job {a} outlived it: {left:?}");
        let n = stamps(&mark).len();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(stamps(&mark).len(), n, "{case}: nothing stamps after the job ended");
    }
}

/// B: one user's dependency fan-out (3,000 jobs after one, 3,000 after all of those), released
/// by a cancel, neither stalls the server (another user's reads answered promptly
/// throughout) nor disturbs another user's running job (before: the state was frozen ~38 s,
/// every node declared down, and the other user's job restarted from scratch).
#[test]
fn a_dependency_fan_out_does_not_stall_the_server_or_restart_others_jobs() {
    let dir = tempdir("fanout");
    let (admin, alice) = tokens(&dir);
    let bob = token(&dir.join("ordo.db"), "bob", None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent(&dir, &url, "gpu1", 2);
    wait_nodes(&url, &admin, 1);
    let mine = submit(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "120"]);
    wait_for("alice's job runs", Duration::from_secs(30), || job_state(&url, &alice, mine)["state"] == "running");
    let x = submit(&url, &bob, &["submit", "--gpus", "1", "--", "sleep", "600"]);
    let xs = x.to_string();
    let a = submit(&url, &bob, &["submit", "--gpus", "1", "--array", "0-2999", "--after-ok", &xs, "--", "true"]);
    let b = submit(
        &url,
        &bob,
        &["submit", "--gpus", "1", "--array", "0-2999", "--after-any", &a.to_string(), "--", "true"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (url, alice, stop) = (url.clone(), alice.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let (st, _) = api(&url, &alice, "GET", &format!("/v1/jobs/{mine}"), None);
                assert_eq!(st, 200);
                took.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(50));
            }
            took
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    cli_json(&url, &bob, &["cancel", &xs]);
    let last_a = a + 2999;
    wait_for("every element of A cancelled", Duration::from_secs(60), || {
        job_state(&url, &bob, last_a)["state"] == "cancelled"
    });
    wait_for("B released", Duration::from_secs(60), || {
        let j = job_state(&url, &bob, b + 2999);
        j["state"] != "pending" || !j["wait"]["text"].as_str().unwrap_or("").starts_with("waits for")
    });
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    answered_promptly(probe.join().expect("probe"), "reads during the fan-out");
    let j = job_state(&url, &alice, mine);
    assert_eq!((j["state"].as_str(), j["restarts"].as_u64()), (Some("running"), Some(0)), "{j}");
    let nodes = cli_json(&url, &admin, &["nodes"]);
    assert_eq!(nodes[0]["state"], "up", "{nodes}");
    let audit = cli_json(&url, &admin, &["audit", "--limit", "100000"]);
    let downs = audit.as_array().expect("audit").iter().filter(|r| r["detail"]["event"] == "down").count();
    assert_eq!(downs, 0, "no node was declared down");
}

/// Connections that never finish their headers, renewed as the server closes them, or requests
/// whose body comes one byte every few seconds.
struct Flood {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Flood {
    /// Keeps `n` connections to `addr` open, each sending `head` and then one byte of `drip`
    /// every 5 s; reconnects those the server closes. Returns (when stopped) how many
    /// connections it opened in all.
    fn start(addr: &str, n: usize, head: String, drip: u8) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, s2) = (addr.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let open = |addr: &str| -> Option<std::net::TcpStream> {
                let mut t = std::net::TcpStream::connect(addr).ok()?;
                t.write_all(head.as_bytes()).ok()?;
                t.set_nonblocking(true).ok()?;
                Some(t)
            };
            let mut conns: Vec<Option<std::net::TcpStream>> = (0..n).map(|_| open(&addr)).collect();
            let mut opened = n;
            let mut last_drip = Instant::now();
            let mut buf = [0u8; 4096];
            while !s2.load(Ordering::Relaxed) {
                let drip_now = last_drip.elapsed() > Duration::from_secs(5);
                for c in conns.iter_mut() {
                    let closed = match c {
                        None => true,
                        Some(t) => match t.read(&mut buf) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                drip_now && t.write_all(&[drip]).is_err()
                            }
                            Err(_) => true,
                        },
                    };
                    if closed {
                        *c = open(&addr);
                        opened += 1;
                    }
                }
                if drip_now {
                    last_drip = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            opened
        });
        Flood { stop, thread: Some(thread) }
    }

    fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(|t| t.join().expect("flood")).unwrap_or(0)
    }
}

/// A stall (a request queued behind the slow clients, or behind a frozen state) lasts as long
/// as the server's timeouts (5-10 s) or the work it waits for (38 s before the fan-out fix);
/// one slow answer on a busy 2-core machine lasts about a second. So: every request answered
/// within 3 s, and nine in ten within one second.
fn answered_promptly(mut took: Vec<Duration>, what: &str) {
    assert!(took.len() > 10, "{what}: only {} requests", took.len());
    took.sort();
    let (p90, max) = (took[took.len() * 9 / 10], took[took.len() - 1]);
    assert!(max < Duration::from_secs(3), "{what}: the slowest answer took {max:?}");
    assert!(p90 < Duration::from_secs(1), "{what}: one in ten answers took {p90:?} or more");
}

/// Every 200 ms for `secs` seconds, a user's request and an agent-token request must each be
/// answered (200), promptly (see [`answered_promptly`]).
fn answered_throughout(url: &str, user: &str, agent_tok: &str, secs: u64, what: &str) {
    let t0 = Instant::now();
    let mut took = Vec::new();
    while t0.elapsed() < Duration::from_secs(secs) {
        for (tok, path) in [(user, "/v1/jobs"), (agent_tok, "/v1/whoami")] {
            let t = Instant::now();
            let (st, body) = api(url, tok, "GET", path, None);
            assert_eq!(st, 200, "{what}: {path} answered {st}: {body}");
            took.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    answered_promptly(took, what);
}

/// C: 4,200 connections that never finish their headers (the default max_connections is
/// 4,096), then 4,200 POSTs with a valid user token whose bodies come one byte every 5 s:
/// another user's request and an agent's request are both answered promptly throughout,
/// and the agent's node stays up (before: 12 of 14 valid requests failed, and the slow bodies
/// held every slot indefinitely).
#[test]
fn clients_that_hold_connections_open_lock_nobody_out() {
    let dir = tempdir("slowloris");
    let (admin, alice) = tokens(&dir);
    let mallory = token(&dir.join("ordo.db"), "mallory", None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent(&dir, &url, "gpu1", 1);
    wait_nodes(&url, &admin, 1);
    let gpu1 = std::fs::read_to_string(dir.join("token-gpu1")).expect("token");
    let addr = url.trim_start_matches("http://").to_string();
    let flood = Flood::start(&addr, 4_200, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n".into(), b'X');
    std::thread::sleep(Duration::from_secs(3));
    answered_throughout(&url, &alice, &gpu1, 12, "slow headers");
    let opened = flood.stop();
    assert!(opened >= 4_200, "{opened}");
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {mallory}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    );
    let flood = Flood::start(&addr, 4_200, head, b' ');
    std::thread::sleep(Duration::from_secs(3));
    answered_throughout(&url, &alice, &gpu1, 14, "slow bodies");
    flood.stop();
    let nodes = cli_json(&url, &admin, &["nodes"]);
    assert_eq!(nodes[0]["state"], "up", "{nodes}");
    // Mallory's slow bodies were cut off (408) or refused past her limit (429), not stored.
    let q = cli_json(&url, &admin, &["queue"]);
    assert!(q["jobs"].as_array().is_some_and(|j| j.iter().all(|j| j["user"] != "mallory")), "{q}");
}

/// The lines a gang's ranks write: `RANK RESTARTS NS` (ns since the epoch).
fn rank_lines(file: &Path) -> Vec<(u64, u64, u128)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// For each rank: its earlier runs all ended before its next run began.
fn runs_never_overlap(lines: &[(u64, u64, u128)], what: &str) {
    for rank in lines.iter().map(|l| l.0).collect::<std::collections::BTreeSet<_>>() {
        let mut runs: std::collections::BTreeMap<u64, (u128, u128)> = Default::default();
        for &(_, restarts, t) in lines.iter().filter(|l| l.0 == rank) {
            let e = runs.entry(restarts).or_insert((t, t));
            e.0 = e.0.min(t);
            e.1 = e.1.max(t);
        }
        let v: Vec<(u64, (u128, u128))> = runs.into_iter().collect();
        assert!(v.len() >= 2, "{what}: rank {rank} ran only once: {v:?}");
        for w in v.windows(2) {
            assert!(
                w[0].1 .1 < w[1].1 .0,
                "{what}: rank {rank}'s run {} still ran at {} after run {} began at {}",
                w[0].0,
                w[0].1 .1,
                w[1].0,
                w[1].1 .0
            );
        }
    }
}

fn pid_of(p: &Proc) -> String {
    p.0.id().to_string()
}

/// D: the agent of rank 1 of a two-node job is paused (SIGSTOP) for longer than the lease and
/// its grace: the job is restarted on two other nodes only once rank 1's old processes are
/// dead (its supervisor killed them when the lease ran out), so no rank ever runs twice at once
/// (before: the old rank 1 ran on until SIGCONT, ~6 s beside its replacement).
#[test]
fn a_paused_node_never_runs_a_gang_beside_its_replacement() {
    if !needs(is_root(), "root, for the agent's cgroups") {
        return;
    }
    let dir = tempdir("pause");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server_with(&dir, "127.0.0.1:0", "fifo", &["--fence-grace", "1s"]);
    let agents: Vec<(String, Proc)> =
        (1..=3).map(|i| format!("gpu{i}")).map(|n| (n.clone(), agent(&dir, &url, &n, 1))).collect();
    wait_nodes(&url, &admin, 3);
    let log = dir.join("ranks.log");
    let script = format!(
        "while :; do echo \"$ORDO_NODE_RANK $ORDO_RESTARTS $(date +%s%N)\" >> {}; sleep 0.05; done",
        log.display()
    );
    let id = submit(&url, &alice, &["submit", "--nodes", "2", "--gpus", "2", "--", "sh", "-c", &script]);
    wait_for("both ranks run", Duration::from_secs(30), || {
        let l = rank_lines(&log);
        l.iter().any(|x| x.0 == 0) && l.iter().any(|x| x.0 == 1)
    });
    let j = job_state(&url, &alice, id);
    let rank1 = j["ranks"][1]["node"].as_str().expect("rank 1's node").to_string();
    let (_, paused) = agents.iter().find(|(n, _)| *n == rank1).expect("its agent");
    Command::new("kill").args(["-STOP", &pid_of(paused)]).status().expect("kill -STOP");
    // Lease 1.5 s + grace 1 s: the job is requeued and runs again on the two other nodes.
    wait_for("the gang runs again", Duration::from_secs(30), || {
        rank_lines(&log).iter().filter(|x| x.1 >= 1).map(|x| x.0).collect::<std::collections::BTreeSet<_>>().len() == 2
    });
    std::thread::sleep(Duration::from_secs(4));
    Command::new("kill").args(["-CONT", &pid_of(paused)]).status().expect("kill -CONT");
    std::thread::sleep(Duration::from_secs(2));
    cli_json(&url, &alice, &["cancel", &id.to_string()]);
    wait_ended(&url, &alice, id, Duration::from_secs(30));
    runs_never_overlap(&rank_lines(&log), "SIGSTOP of rank 1's agent");
}

/// Removes a network namespace and its veth pair when dropped.
struct NetNs {
    name: String,
    host_if: String,
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// E: an agent in a network namespace is cut off from the server (its link taken down): its
/// job is stopped by its supervisor when the lease runs out, and runs again on another node
/// only after that (never two runs at once); then the link comes back and the agent rejoins.
#[test]
fn a_node_cut_off_stops_its_job_before_it_runs_elsewhere() {
    let tools = ["/usr/sbin/ip", "/sbin/ip"].iter().any(|p| Path::new(p).exists())
        && ["/usr/bin/nsenter", "/bin/nsenter"].iter().any(|p| Path::new(p).exists());
    if !needs(is_root() && tools, "root, iproute2 (`ip`) and util-linux (`nsenter`), for network namespaces") {
        return;
    }
    let dir = tempdir("netns");
    let (admin, alice) = tokens(&dir);
    let n = std::process::id() % 200 + 20;
    let ns = NetNs { name: format!("ordo-t{}", std::process::id()), host_if: format!("oh{}", std::process::id()) };
    let peer_if = format!("on{}", std::process::id());
    ip(&["netns", "add", &ns.name]);
    ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &peer_if]);
    ip(&["link", "set", &peer_if, "netns", &ns.name]);
    let (host_ip, ns_ip) = (format!("10.231.{n}.1"), format!("10.231.{n}.2"));
    ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &ns.host_if]);
    ip(&["link", "set", &ns.host_if, "up"]);
    ip(&["netns", "exec", &ns.name, "ip", "addr", "add", &format!("{ns_ip}/30"), "dev", &peer_if]);
    ip(&["netns", "exec", &ns.name, "ip", "link", "set", &peer_if, "up"]);
    ip(&["netns", "exec", &ns.name, "ip", "link", "set", "lo", "up"]);
    let (_srv, url) = server_with(
        &dir,
        &format!("{host_ip}:0"),
        "fifo",
        &["--allow-non-loopback", "--allow-plain-http", "--fence-grace", "1s"],
    );
    // gpu1 in the namespace's network only (`nsenter --net`: `ip netns exec` would also mount a
    // fresh /sys, without the cgroup hierarchies).
    let tok = token(&dir.join("ordo.db"), "gpu1", Some("--agent"));
    let tok_file = secret_file(&dir.join("token-gpu1"), &tok);
    let log = std::fs::File::create(dir.join("agent-gpu1.log")).expect("log");
    let _cut = Proc(
        Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", ns.name))
            .args([ORDO, "agent", "--server", &url, "--name", "gpu1", "--gpus", "1"])
            .args(["--grace", "500ms", "--run-as", &whoami()])
            .arg("--token-file")
            .arg(&tok_file)
            .arg("--work-dir")
            .arg(dir.join("work-gpu1"))
            .stderr(log)
            .spawn()
            .expect("agent in the namespace"),
    );
    wait_nodes(&url, &admin, 1);
    let stampf = dir.join("runs.log");
    let script =
        format!("while :; do echo \"0 $ORDO_RESTARTS $(date +%s%N)\" >> {}; sleep 0.05; done", stampf.display());
    let id = submit(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", &script]);
    wait_for("the job runs on gpu1", Duration::from_secs(30), || !rank_lines(&stampf).is_empty());
    let _gpu2 = agent(&dir, &url, "gpu2", 1);
    wait_nodes(&url, &admin, 2);
    ip(&["link", "set", &ns.host_if, "down"]);
    wait_for("the job runs again on gpu2", Duration::from_secs(30), || rank_lines(&stampf).iter().any(|x| x.1 >= 1));
    let j = job_state(&url, &alice, id);
    assert_eq!(j["node"], "gpu2", "{j}");
    ip(&["link", "set", &ns.host_if, "up"]);
    wait_nodes(&url, &admin, 2);
    cli_json(&url, &alice, &["cancel", &id.to_string()]);
    wait_ended(&url, &alice, id, Duration::from_secs(30));
    runs_never_overlap(&rank_lines(&stampf), "gpu1 cut off");
}

/// Unmounts a filesystem when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// F: a job prints 300 MB into an agent's 64 MB work directory: it ends with its record saying
/// its output was lost to a full disk, the node drains itself with that reason (`ordo nodes`,
/// `ordo explain` of a job that waits), no later job is sent there to fail, and once space is
/// freed the node takes work again (before: every later job on that node failed with "the
/// supervisor ended without a status").
#[test]
fn a_job_that_fills_the_agents_disk_drains_the_node_with_its_reason() {
    if !needs(is_root(), "root, to mount a small tmpfs") {
        return;
    }
    let dir = tempdir("disk");
    let (admin, alice) = tokens(&dir);
    let small = dir.join("small");
    std::fs::create_dir_all(&small).expect("dir");
    let st =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"]).arg(&small).status().expect("mount");
    assert!(st.success(), "mount tmpfs");
    let _m = Mount(small.clone());
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let work = small.join("work");
    let tok = token(&dir.join("ordo.db"), "gpu1", Some("--agent"));
    let tok_file = secret_file(&dir.join("token-gpu1"), &tok);
    let log = std::fs::File::create(dir.join("agent-gpu1.log")).expect("log");
    let _agent = Proc(
        Command::new(ORDO)
            .args(["agent", "--server", &url, "--name", "gpu1", "--gpus", "1", "--run-as", &whoami()])
            .arg("--token-file")
            .arg(&tok_file)
            .arg("--work-dir")
            .arg(&work)
            .stderr(log)
            .spawn()
            .expect("agent"),
    );
    wait_nodes(&url, &admin, 1);
    let big = submit(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", "head -c 300000000 /dev/zero"]);
    let j = wait_ended(&url, &alice, big, Duration::from_secs(60));
    assert_eq!(j["state"], "completed", "{j}");
    let why = j["end_reason"].as_str().expect("end reason");
    assert!(why.contains("output lost") && why.contains("No space left"), "{why}");
    wait_for("the node drains itself", Duration::from_secs(10), || {
        cli_json(&url, &admin, &["nodes"])[0]["drain"].as_str().is_some_and(|d| d.contains("free"))
    });
    let text = String::from_utf8(ordo(&["nodes", "--server", &url, "--token", &admin]).stdout).expect("utf-8");
    assert!(text.contains("problem") && text.contains("takes no new work"), "{text}");
    let later = submit(&url, &alice, &["submit", "--gpus", "1", "--", "true"]);
    std::thread::sleep(Duration::from_secs(2));
    let w = job_state(&url, &alice, later);
    assert_eq!(w["state"], "pending", "{w}");
    assert!(
        w["wait"]["text"].as_str().is_some_and(|t| t.contains("taking no new work") || t.contains("take no new work")),
        "{w}"
    );
    // Space freed: the node takes work again, and the job runs.
    std::fs::remove_file(work.join(format!("job-{big}.out"))).expect("remove the output");
    let j = wait_ended(&url, &alice, later, Duration::from_secs(60));
    assert_eq!(j["state"], "completed", "{j}");
    assert!(cli_json(&url, &admin, &["nodes"])[0]["drain"].is_null());
}

/// G: an agent token reads nothing but its node's work; names with bidirectional overrides
/// are shown escaped; a TLS key other users may read is refused.
#[test]
fn agent_tokens_read_only_their_work_names_cannot_reorder_text_keys_must_be_private() {
    let dir = tempdir("misc");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent_with(&dir, &url, "gpu1", 1, &["--no-cgroup"]);
    wait_nodes(&url, &admin, 1);
    let gpu1 = std::fs::read_to_string(dir.join("token-gpu1")).expect("token");
    let id = submit(&url, &alice, &["submit", "--name", "evil\u{202e}txt.exe", "--", "sleep", "30"]);
    for path in [
        "/v1/jobs",
        &format!("/v1/jobs/{id}"),
        "/v1/history",
        "/v1/audit",
        "/v1/nodes",
        "/metrics",
        "/v1/usage",
        "/v1/gpus",
    ] {
        let (st, body) = api(&url, &gpu1, "GET", path, None);
        assert_eq!(st, 403, "{path}: {body}");
    }
    let (st, _) = api(&url, &gpu1, "GET", "/v1/whoami", None);
    assert_eq!(st, 200);
    let out = ordo(&["queue", "--server", &url, "--token", &admin]);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("evil\\u{202e}") && !text.contains('\u{202e}'), "{text}");
    // A key readable by every user is refused, with how to fix it (before its contents are read).
    let key = dir.join("server.key");
    std::fs::write(&key, "not even a key").expect("key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = Command::new(ORDO)
        .args(["server", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&key)
        .arg("--tls-key")
        .arg(&key)
        .arg("--db")
        .arg(dir.join("tls.db"))
        .output()
        .expect("server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("chmod 600"), "{err}");
}
