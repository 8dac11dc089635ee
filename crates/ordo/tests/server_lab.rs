//! The daily work of a lab on real processes (`ordo server` and `ordo agent` on loopback, fake
//! GPUs): a pipeline of dependencies through `ordo submit --after-ok/--after-not-ok`, a
//! per-user GPU quota from the config file shown by `ordo explain`, and job arrays
//! (`ordo submit --array 0-5%2`) with their limit, `ordo queue`, cancel and access rules.

mod harness;

use harness::*;
use std::time::Duration;

fn submit(url: &str, tok: &str, flags: &[&str], script: &str) -> u64 {
    let mut args = vec!["submit", "--gpus", "1", "--time", "1m"];
    args.extend(flags);
    args.extend(["--", "sh", "-c", script]);
    cli_json(url, tok, &args)["id"].as_u64().expect("id")
}

#[test]
fn a_pipeline_and_a_quota_on_real_processes() {
    let dir = tempdir("lab");
    let (admin, alice) = tokens(&dir);
    let cfg = dir.join("ordo.toml");
    std::fs::write(&cfg, "[quotas.default_user]\nmax_running_gpus = 2\n").expect("config");
    let cfg = cfg.to_string_lossy().into_owned();
    let (_srv, url) = server_with(&dir, "127.0.0.1:0", "fifo", &["--config", &cfg]);
    let _agent = agent(&dir, &url, "n1", 4);
    wait_for("the node", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|n| n.len() == 1)
    });

    // Quota: alice may hold 2 GPUs; her third job waits though 2 GPUs are free.
    let long: Vec<u64> = (0..3).map(|_| submit(&url, &alice, &[], "sleep 3")).collect();
    wait_for("two running", Duration::from_secs(20), || {
        long[..2].iter().all(|&id| job_state(&url, &alice, id)["state"] == "running")
    });
    let third = job_state(&url, &alice, long[2]);
    assert_eq!(third["state"], "pending");
    let text = third["wait"]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("user alice holds 2 of their 2 GPUs"), "{third}");
    // Another user is not held back by alice's quota.
    let bob = token(&dir.join("ordo.db"), "bob", None);
    let b = submit(&url, &bob, &[], "true");
    assert_eq!(wait_ended(&url, &bob, b, Duration::from_secs(20))["state"], "completed");

    // A pipeline: prep fails, so train (after-ok) is cancelled and alert (after-not-ok) runs.
    let prep = submit(&url, &bob, &[], "sleep 0.5; exit 1");
    let p = prep.to_string();
    let train = submit(&url, &bob, &["--after-ok", &p], "true");
    let alert = submit(&url, &bob, &["--after-not-ok", &p], "true");
    let t = job_state(&url, &bob, train);
    let text = t["wait"]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with(&format!("waits for job {prep} to complete successfully")), "{t}");
    assert_eq!(wait_ended(&url, &bob, prep, Duration::from_secs(20))["state"], "failed");
    let t = wait_ended(&url, &bob, train, Duration::from_secs(20));
    assert_eq!(t["state"], "cancelled");
    assert!(t["end_reason"].as_str().unwrap_or_default().starts_with("DependencyNeverSatisfied"), "{t}");
    assert_eq!(wait_ended(&url, &bob, alert, Duration::from_secs(20))["state"], "completed");
    let audit = cli_json(&url, &admin, &["audit", "--job", &train.to_string()]);
    assert!(
        audit
            .as_array()
            .expect("array")
            .iter()
            .any(|r| r["kind"] == "cancel" && r["detail"]["why"] == "DependencyNeverSatisfied"),
        "{audit}"
    );
    for id in long {
        assert_eq!(wait_ended(&url, &alice, id, Duration::from_secs(30))["state"], "completed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The most elements running at once, from `start I T` / `end I T` lines (T in ns).
fn most_at_once(log: &str) -> usize {
    let mut ev: Vec<(i128, i32)> = log
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let d = match *w.first()? {
                "start" => 1,
                "end" => -1,
                _ => return None,
            };
            Some((w.get(2)?.parse().ok()?, d))
        })
        .collect();
    // At the same instant an end counts before a start.
    ev.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in ev {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn a_job_array_on_real_processes() {
    let dir = tempdir("lab-array");
    let (admin, alice) = tokens(&dir);
    let bob = token(&dir.join("ordo.db"), "bob", None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent(&dir, &url, "n1", 4);
    wait_for("the node", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|n| n.len() == 1)
    });

    // Six elements, at most two at once, on a node with 4 free GPUs: each logs its start and
    // end and what its environment says.
    let log = dir.join("array.log");
    let script = format!(
        "echo \"start $ORDO_ARRAY_INDEX $(date +%s%N)\" >> {l}; sleep 0.5; \
         echo \"env $ORDO_ARRAY_INDEX $ORDO_ARRAY_JOB_ID $ORDO_ARRAY_TASK_COUNT $ORDO_JOB_ID\" >> {l}; \
         echo \"end $ORDO_ARRAY_INDEX $(date +%s%N)\" >> {l}",
        l = log.display()
    );
    let r = cli_json(
        &url,
        &alice,
        &["submit", "--gpus", "1", "--time", "1m", "--array", "0-5%2", "--", "sh", "-c", &script],
    );
    let id = r["id"].as_u64().expect("id");
    assert_eq!(r["elements"], 6, "{r}");
    // Dependencies: on the array's id (every element), and on one element (`ID_1`).
    let dep = |name: &str, on: String| {
        let sh = format!("echo \"{name} $(date +%s%N)\" >> {}", log.display());
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--time", "1m", "--after-ok", &on, "--", "sh", "-c", &sh])
            ["id"]
            .as_u64()
            .expect("id")
    };
    let after_all = dep("after-all", id.to_string());
    let after_one = dep("after-one", format!("{id}_1"));
    assert_eq!(job_state(&url, &alice, after_one)["after"][0]["job"], id + 1);
    // `ordo queue` shows the array on one line; `--expand` each element.
    let q = ordo(&["queue", "--server", &url, "--token", &alice]);
    let text = String::from_utf8_lossy(&q.stdout);
    assert!(text.contains(&format!("{id}[0-5%2]")) && text.contains("array"), "{text}");
    let q = ordo(&["queue", "--expand", "--server", &url, "--token", &alice]);
    let text = String::from_utf8_lossy(&q.stdout);
    assert!((0..6).all(|i| text.contains(&format!("{id}_{i} "))), "{text}");
    for i in 0..6 {
        let e = wait_ended(&url, &alice, id + i, Duration::from_secs(60));
        assert_eq!(e["state"], "completed", "{e}");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    for i in 0..6 {
        let starts = text.lines().filter(|l| l.starts_with(&format!("start {i} "))).count();
        assert_eq!(starts, 1, "element {i} ran once: {text}");
        let env = format!("env {i} {id} 6 {}", id + i as u64);
        assert!(text.lines().any(|l| l == env), "{env}: {text}");
    }
    for d in [after_all, after_one] {
        assert_eq!(wait_ended(&url, &alice, d, Duration::from_secs(60))["state"], "completed");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let at = |prefix: &str| -> u128 {
        let l = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}: {text}"));
        l.rsplit(' ').next().and_then(|t| t.parse().ok()).expect("time")
    };
    let last_end = (0..6).map(|i| at(&format!("end {i} "))).max().expect("ends");
    assert!(at("after-all ") >= last_end, "after-ok on the array ran before its last element ended: {text}");
    assert!(at("after-one ") >= at("end 1 "), "after-ok on element 1 ran before it ended: {text}");
    let most = most_at_once(&text);
    assert!((1..=2).contains(&most), "{most} ran at once: {text}");
    // `explain ID_INDEX` names the element; the audit log has its submission.
    let e = cli_json(&url, &alice, &["explain", &format!("{id}_3")]);
    assert_eq!((e["id"].as_u64(), e["array"]["index"].as_u64()), (Some(id + 3), Some(3)));
    let audit = cli_json(&url, &admin, &["audit", "--job", &format!("{id}_0")]);
    assert!(
        audit
            .as_array()
            .expect("records")
            .iter()
            .any(|r| r["kind"] == "submit" && r["detail"]["array_spec"] == "0-5%2"),
        "{audit}"
    );

    // Cancel: another user may not (403), one element, then the whole array.
    let long =
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--time", "1m", "--array", "0-3%1", "--", "sleep", "30"]);
    let id = long["id"].as_u64().expect("id");
    wait_for("an element running", Duration::from_secs(20), || job_state(&url, &alice, id)["state"] == "running");
    let a = id.to_string();
    fails_with(&url, &bob, &["cancel", &a], "403");
    fails_with(&url, &bob, &["cancel", &format!("{id}_2")], "403");
    fails_with(&url, &bob, &["hold", &a], "403");
    let one = cli_json(&url, &alice, &["cancel", &format!("{id}_3")]);
    assert_eq!((one["state"].as_str(), one["cancelled"].as_u64()), (Some("cancelled"), Some(1)), "{one}");
    assert_eq!(job_state(&url, &alice, id + 3)["state"], "cancelled");
    assert_eq!(job_state(&url, &alice, id + 2)["state"], "pending");
    let all = cli_json(&url, &alice, &["cancel", &a]);
    assert_eq!(all["cancelled"], 3, "{all}");
    for i in 0..4 {
        assert_eq!(wait_ended(&url, &alice, id + i, Duration::from_secs(20))["state"], "cancelled");
    }
    fails_with(&url, &alice, &["cancel", &a], "409");
    // A bad spec is refused by the server with the field named (the CLI checks it first too).
    let (st, body) = api(
        &url,
        &alice,
        "POST",
        "/v1/jobs",
        Some(&serde_json::json!({"command": ["true"], "gpus": 1, "array": "9-1"})),
    );
    assert_eq!(st, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or_default().starts_with("field `array`: `9-1`: the range is reversed"),
        "{body}"
    );
    fails_with(&url, &alice, &["submit", "--array", "0-9%0", "--", "true"], "%0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rendezvous of a 2-node job: rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 connects
/// (retrying until rank 0 listens) and both write what they got; each writes its variables.
/// Rank 0 keeps listening for the seconds its optional second argument says.
const RENDEZVOUS: &str = r#"
import os, socket, sys, time
e = os.environ
out, rank = sys.argv[1], int(e["ORDO_NODE_RANK"])
hold = float(sys.argv[2]) if len(sys.argv) > 2 else 0
addr, port = e["MASTER_ADDR"], int(e["MASTER_PORT"])
with open(f"{out}/env-{rank}", "w") as f:
    for k in ["ORDO_NODELIST", "ORDO_NODE_RANK", "ORDO_NNODES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "ORDO_NODE", "ORDO_GPUS", "LOCAL_WORLD_SIZE"]:
        f.write(f"{k}={e.get(k, '')}\n")
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    s.settimeout(30)
    c, _ = s.accept()
    msg = c.recv(100).decode()
    c.sendall(("hello " + msg).encode())
    c.close()
    open(f"{out}/got-0", "w").write(msg)
    time.sleep(hold)
else:
    for _ in range(300):
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit(7)
    c.sendall(b"rank 1")
    open(f"{out}/got-1", "w").write(c.recv(100).decode())
"#;

fn env_of(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn alive(pid_file: &std::path::Path) -> bool {
    let pid = std::fs::read_to_string(pid_file).unwrap_or_default();
    let pid = pid.trim();
    !pid.is_empty() && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_two_node_job_rendezvous_over_tcp_and_a_dead_agent_stops_every_rank() {
    if !needs(std::process::Command::new("python3").arg("-V").output().is_ok(), "python3 for the rendezvous script") {
        return;
    }
    let dir = tempdir("gang");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    // Another process listens on the first port of the agents' rendezvous range: it is never
    // handed out. (The agents share this machine, so they share its ports.)
    let held = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("a port to hold");
    let lo = held.local_addr().expect("addr").port();
    let hi = lo.saturating_add(40);
    let range = format!("{lo}-{hi}");
    let mut agents: Vec<(String, harness::Proc)> = ["g1", "g2", "g3"]
        .iter()
        .map(|n| (n.to_string(), agent_with(&dir, &url, n, 2, &["--addr", "127.0.0.1", "--master-ports", &range])))
        .collect();
    wait_for("three nodes", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|n| n.len() == 3)
    });

    // Two ranks on two of the three nodes meet over TCP on loopback; the job completes.
    let out = dir.join("rdv");
    std::fs::create_dir_all(&out).expect("dir");
    let script = dir.join("rdv.py");
    std::fs::write(&script, RENDEZVOUS).expect("script");
    let (o, s) = (out.to_string_lossy().into_owned(), script.to_string_lossy().into_owned());
    let args = ["submit", "--nodes", "2", "--gpus-per-node", "2", "--time", "1m", "--", "python3", &s, &o];
    let id = cli_json(&url, &alice, &args)["id"].as_u64().expect("id");
    let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
    assert_eq!(j["state"], "completed", "{j}");
    assert_eq!(std::fs::read_to_string(out.join("got-0")).unwrap_or_default(), "rank 1");
    assert_eq!(std::fs::read_to_string(out.join("got-1")).unwrap_or_default(), "hello rank 1");
    let ranks: Vec<String> =
        j["ranks"].as_array().expect("ranks").iter().map(|r| r["node"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(ranks.len(), 2);
    assert_ne!(ranks[0], ranks[1]);
    // MASTER_PORT is the port rank 0's agent found free and reported: in its range, not the
    // held one.
    let port = j["ranks"][0]["port"].as_u64().expect("rank 0's port");
    assert!(port != lo as u64 && (lo as u64..=hi as u64).contains(&port), "{port} in {range}, {lo} held: {j}");
    for r in 0..2 {
        let e = env_of(&out.join(format!("env-{r}")));
        let want = [
            ("ORDO_NODELIST", ranks.join(",")),
            ("ORDO_NODE_RANK", r.to_string()),
            ("ORDO_NNODES", "2".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
            ("WORLD_SIZE", "4".into()),
            ("CUDA_VISIBLE_DEVICES", "0,1".into()),
            ("ORDO_NODE", ranks[r].clone()),
        ];
        for (k, v) in want {
            assert_eq!(e.get(k), Some(&v), "rank {r}: {k} in {e:?}");
        }
    }
    let audit = cli_json(&url, &admin, &["audit", "--job", &id.to_string()]);
    let kinds: Vec<&str> = audit.as_array().expect("array").iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "rank_end").count(), 2, "{kinds:?}");

    // Two gangs at once whose rank 0s share a node: each gets a port of its own (rank 0 of
    // each listens on it for 3 s, so the same port twice would fail one of them), both meet.
    let pair: Vec<(u64, std::path::PathBuf)> = (0..2)
        .map(|k| {
            let out = dir.join(format!("rdv-pair-{k}"));
            std::fs::create_dir_all(&out).expect("dir");
            let o = out.to_string_lossy().into_owned();
            let args = ["submit", "--nodes", "2", "--gpus-per-node", "1", "--time", "1m", "--", "python3", &s, &o, "3"];
            (cli_json(&url, &alice, &args)["id"].as_u64().expect("id"), out)
        })
        .collect();
    let ended: Vec<serde_json::Value> =
        pair.iter().map(|(id, _)| wait_ended(&url, &alice, *id, Duration::from_secs(60))).collect();
    for (j, (_, out)) in ended.iter().zip(&pair) {
        assert_eq!(j["state"], "completed", "{j}");
        assert_eq!(std::fs::read_to_string(out.join("got-1")).unwrap_or_default(), "hello rank 1");
    }
    assert_eq!(ended[0]["ranks"][0]["node"], ended[1]["ranks"][0]["node"], "rank 0s on one node: {ended:?}");
    let ports: Vec<u64> = ended.iter().map(|j| j["ranks"][0]["port"].as_u64().expect("port")).collect();
    assert_ne!(ports[0], ports[1], "{ended:?}");
    assert!(ports.iter().all(|&p| p != lo as u64), "{ports:?}");
    for (&p, (_, out)) in ports.iter().zip(&pair) {
        assert_eq!(env_of(&out.join("env-1")).get("MASTER_PORT"), Some(&p.to_string()));
    }
    drop(held);

    // --gpus 3 without --nodes on 2-GPU nodes: split by the placement, 2 + 1, one rank each
    // with its own GPU count; the ranks meet as any gang's.
    let out = dir.join("rdv-split");
    std::fs::create_dir_all(&out).expect("dir");
    let o = out.to_string_lossy().into_owned();
    let id = cli_json(&url, &alice, &["submit", "--gpus", "3", "--time", "1m", "--", "python3", &s, &o])["id"]
        .as_u64()
        .expect("id");
    let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
    assert_eq!((j["state"].as_str(), j["nodes"].as_u64()), (Some("completed"), Some(0)), "{j}");
    let counts: Vec<usize> =
        j["ranks"].as_array().expect("ranks").iter().map(|r| r["gpu_ids"].as_array().map_or(0, Vec::len)).collect();
    assert_eq!(counts, vec![2, 1], "{j}");
    for (r, k) in counts.iter().enumerate() {
        let e = env_of(&out.join(format!("env-{r}")));
        for (var, want) in [("WORLD_SIZE", 3), ("LOCAL_WORLD_SIZE", *k), ("ORDO_GPUS", *k)] {
            assert_eq!(e.get(var), Some(&want.to_string()), "rank {r}: {var} in {e:?}");
        }
    }
    assert_eq!(std::fs::read_to_string(out.join("got-1")).unwrap_or_default(), "hello rank 1");

    // kill -9 of one rank's agent mid-run: the other rank is killed, the job requeued and run
    // again on the two nodes left, never two copies at once; cancel then kills both ranks.
    let pids = dir.join("pids");
    std::fs::create_dir_all(&pids).expect("dir");
    let p = pids.to_string_lossy().into_owned();
    let script = format!("echo $$ > {p}/pid-$ORDO_RESTARTS-$ORDO_NODE_RANK; exec sleep 60");
    let args = ["submit", "--nodes", "2", "--gpus-per-node", "2", "--time", "5m", "--", "sh", "-c", &script];
    let id = cli_json(&url, &alice, &args)["id"].as_u64().expect("id");
    let pid = |run: u32, rank: u32| pids.join(format!("pid-{run}-{rank}"));
    wait_for("both ranks running", Duration::from_secs(30), || alive(&pid(0, 0)) && alive(&pid(0, 1)));
    let j = job_state(&url, &alice, id);
    let victim = j["ranks"][0]["node"].as_str().expect("rank 0's node").to_string();
    let at = agents.iter().position(|(n, _)| *n == victim).expect("agent");
    let (_, mut dead) = agents.remove(at);
    dead.0.kill().expect("kill -9 the agent");
    let _ = dead.0.wait();
    wait_for("the requeued job to run again", Duration::from_secs(60), || {
        let j = job_state(&url, &alice, id);
        j["restarts"] == 1 && j["state"] == "running"
    });
    wait_for("both new ranks", Duration::from_secs(30), || alive(&pid(1, 0)) && alive(&pid(1, 1)));
    assert!(!alive(&pid(0, 0)) && !alive(&pid(0, 1)), "the first run's ranks are gone");
    let j = job_state(&url, &alice, id);
    assert!(j["ranks"].as_array().expect("ranks").iter().all(|r| r["node"] != victim.as_str()), "{j}");
    let audit = cli_json(&url, &admin, &["audit", "--job", &id.to_string()]);
    let requeue = audit.as_array().expect("array").iter().find(|r| r["kind"] == "requeue").cloned().unwrap_or_default();
    assert!(requeue["detail"]["why"].as_str().unwrap_or("").contains("stopped sending heartbeats"), "{requeue}");
    cli_json(&url, &alice, &["cancel", &id.to_string()]);
    assert_eq!(wait_ended(&url, &alice, id, Duration::from_secs(30))["state"], "cancelled");
    wait_for("both ranks killed", Duration::from_secs(10), || !alive(&pid(1, 0)) && !alive(&pid(1, 1)));
    drop(agents);
    let _ = std::fs::remove_dir_all(&dir);
}
