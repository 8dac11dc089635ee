//! GPU models and node features end to end with real processes on loopback: two agents with
//! fake GPUs of different models (`ordo agent --gpu-model --gpu-mem --feature`), jobs asking for
//! each model (`ordo submit --gpu-model`) that run only on its node, a job array that carries
//! its constraint, a job asking a model no node has refused at submit, a constrained job blocked
//! while the other model is free saying so in `ordo explain` and `/metrics`, its constraint kept
//! across a server restart; and hostile agents: 10,000 features, a 1 MB model name and more
//! kinds of node than the scheduler models are refused without harm.

mod harness;

use harness::*;
use serde_json::{json, Value};
use std::time::Duration;

fn submit(url: &str, tok: &str, args: &[&str]) -> u64 {
    cli_json(url, tok, args)["id"].as_u64().expect("id")
}

/// `ordo CMD` as text (connection flags before any `--`): its status, standard output and error.
fn cli_text(url: &str, tok: &str, args: &[&str]) -> (bool, String, String) {
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut a: Vec<&str> = args[..at].to_vec();
    a.extend(["--server", url, "--token", tok]);
    a.extend(&args[at..]);
    let out = ordo(&a);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_nodes(url: &str, admin: &str, n: usize) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("{n} nodes up"), Duration::from_secs(30), || {
        last = cli_json(url, admin, &["nodes"]);
        last.as_array().is_some_and(|a| a.iter().filter(|x| x["state"] == "up").count() == n)
    });
    last
}

/// Two nodes: `gpu-a` (2 fake a100 GPUs of 80G, features ib and nvme) and `gpu-v` (2 fake v100
/// GPUs of 32G). Jobs land on the model they ask for; the rest of the promises of GPU models as
/// a user sees them.
#[test]
fn jobs_for_a_model_run_on_its_node_and_the_rest_is_refused_or_explained() {
    let dir = tempdir("typed");
    let (admin, alice) = tokens(&dir);
    let (srv, url) = server(&dir, "127.0.0.1:0", "fifo+easy");
    let _a = agent_with(&dir, &url, "gpu-a", 2, &["--gpu-model", "A100", "--gpu-mem", "80G", "--feature", "ib,nvme"]);
    let _v = agent_with(&dir, &url, "gpu-v", 2, &["--gpu-model", "v100", "--gpu-mem", "32G"]);
    let nodes = wait_nodes(&url, &admin, 2);
    let kind = |name: &str| {
        let n = nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap().clone();
        (n["gpu_model"].clone(), n["gpu_mem_mib"].clone(), n["features"].clone())
    };
    assert_eq!(kind("gpu-a"), (json!("a100"), json!(81920), json!(["ib", "nvme"])));
    assert_eq!(kind("gpu-v"), (json!("v100"), json!(32768), Value::Null));
    let (ok, table, _) = cli_text(&url, &admin, &["nodes"]);
    assert!(ok && table.contains("fake a100, 80G, ib,nvme") && table.contains("fake v100, 32G"), "{table}");

    // Jobs for each model, submitted interleaved, each writing where it ran.
    let mut jobs = Vec::new();
    for i in 0..3 {
        for model in ["a100", "v100"] {
            let out = dir.join(format!("ran-{model}-{i}"));
            let cmd = format!("echo $ORDO_NODE > {}; sleep 0.3", out.display());
            let id = submit(&url, &alice, &["submit", "--gpus", "1", "--gpu-model", model, "--", "sh", "-c", &cmd]);
            jobs.push((id, model, out));
        }
    }
    let ib = submit(&url, &alice, &["submit", "--gpus", "2", "--feature", "ib", "--", "true"]);
    let mem = submit(&url, &alice, &["submit", "--gpus", "1", "--gpu-mem", "40G", "--", "true"]);
    let arr = submit(&url, &alice, &["submit", "--gpus", "1", "--gpu-model", "v100", "--array", "0-3", "--", "true"]);
    for (id, model, out) in &jobs {
        let j = wait_ended(&url, &alice, *id, Duration::from_secs(60));
        assert_eq!(j["state"], "completed", "{j}");
        let node = if *model == "a100" { "gpu-a" } else { "gpu-v" };
        assert_eq!(j["node"], node, "job {id} for {model}: {j}");
        assert_eq!(std::fs::read_to_string(out).unwrap().trim(), node, "the job's own ORDO_NODE");
        assert_eq!(j["gpu_models"], json!([model]));
    }
    for (id, node) in [(ib, "gpu-a"), (mem, "gpu-a")] {
        let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
        assert_eq!((j["state"].as_str(), j["node"].as_str()), (Some("completed"), Some(node)), "{j}");
    }
    for e in arr..arr + 4 {
        let j = wait_ended(&url, &alice, e, Duration::from_secs(60));
        assert_eq!((j["node"].as_str(), &j["gpu_models"]), (Some("gpu-v"), &json!(["v100"])), "element {e}: {j}");
    }

    // A model no node has: refused at submit, naming it; nothing stored.
    let before = cli_json(&url, &admin, &["history", "--limit", "1000"]).as_array().unwrap().len();
    let (ok, _, err) = cli_text(&url, &alice, &["submit", "--gpus", "1", "--gpu-model", "h100", "--", "true"]);
    assert!(
        !ok && err.contains("422") && err.contains("no node has a GPU of model h100 (the cluster has a100, v100)"),
        "{err}"
    );
    let (ok, _, err) = cli_text(&url, &alice, &["submit", "--gpus", "1", "--feature", "nvlink", "--", "true"]);
    assert!(!ok && err.contains("422") && err.contains("no node has feature `nvlink`"), "{err}");
    let (ok, _, err) = cli_text(&url, &alice, &["submit", "--gpus", "1", "--gpu-mem", "0", "--", "true"]);
    assert!(!ok && err.contains("--gpu-mem `0`"), "checked before sending: {err}");
    let q = cli_json(&url, &alice, &["queue"]);
    assert!(q["jobs"].as_array().unwrap().is_empty(), "{q}");
    assert_eq!(cli_json(&url, &admin, &["history", "--limit", "1000"]).as_array().unwrap().len(), before);

    // gpu-a busy with a long a100 job; another a100 job waits while gpu-v's 2 GPUs are free.
    let long =
        submit(&url, &alice, &["submit", "--gpus", "2", "--gpu-model", "a100", "--time", "5m", "--", "sleep", "300"]);
    wait_for("the long a100 job runs", Duration::from_secs(30), || job_state(&url, &alice, long)["state"] == "running");
    let blocked = submit(&url, &alice, &["submit", "--gpus", "2", "--gpu-model", "a100", "--", "true"]);
    let (ok, text, _) = cli_text(&url, &alice, &["explain", &blocked.to_string()]);
    assert!(ok, "{text}");
    assert!(text.contains("runs only on GPUs of: a100"), "{text}");
    assert!(
        text.contains(
            "why it waits: its GPU constraint holds it: needs 2 GPUs of a100 [ib,nvme]: 0 free there; 2 free GPUs of v100 do not qualify"
        ),
        "{text}"
    );
    let j = job_state(&url, &alice, blocked);
    assert_eq!(j["wait"]["detail"]["reason"], "constraint", "{j}");
    let (st, m) = raw_http(
        &url,
        &format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(st, 200, "{m}");
    assert!(m.contains("ordo_jobs_pending{reason=\"constraint\"} 1"), "{m}");
    assert!(
        m.contains("ordo_node_info{node=\"gpu-a\",gpu_model=\"a100\",gpu_memory_mib=\"81920\",features=\"ib,nvme\",fake=\"true\"} 1"),
        "{m}"
    );
    assert!(
        m.contains(
            "ordo_node_info{node=\"gpu-v\",gpu_model=\"v100\",gpu_memory_mib=\"32768\",features=\"\",fake=\"true\"} 1"
        ),
        "{m}"
    );
    // A v100 job starts at once beside it (EASY: the blocked job reserves only a100 GPUs).
    let other = submit(&url, &alice, &["submit", "--gpus", "2", "--gpu-model", "v100", "--", "true"]);
    let j = wait_ended(&url, &alice, other, Duration::from_secs(60));
    assert_eq!((j["state"].as_str(), j["node"].as_str()), (Some("completed"), Some("gpu-v")), "{j}");

    // The server restarts: the waiting job keeps its constraint and its reason.
    drop(srv);
    std::thread::sleep(Duration::from_millis(700));
    let (_srv, url2) = server(&dir, url.trim_start_matches("http://"), "fifo+easy");
    assert_eq!(url2, url);
    wait_nodes(&url, &admin, 2);
    let j = job_state(&url, &alice, blocked);
    assert_eq!((j["state"].as_str(), &j["gpu_models"]), (Some("pending"), &json!(["a100"])), "{j}");
    wait_for("the reason after the restart", Duration::from_secs(20), || {
        job_state(&url, &alice, blocked)["wait"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("2 free GPUs of v100 do not qualify")
    });
    cli_json(&url, &alice, &["cancel", &long.to_string()]);
    let j = wait_ended(&url, &alice, blocked, Duration::from_secs(60));
    assert_eq!((j["state"].as_str(), j["node"].as_str()), (Some("completed"), Some("gpu-a")), "{j}");
}

/// Hostile agents, through the API as any program could send it: a registration with 10,000
/// features or a 1 MB GPU model name is refused (400) and leaves no trace, the server keeps
/// serving; the real agent checks its own flags before it registers; and an agent that would
/// make more kinds of node than the scheduler models (`ordo_core::pools::MAX_POOLS`) is
/// refused (422) and stops, saying why.
#[test]
fn hostile_agents_cannot_bloat_the_server_nor_pass_the_kinds_it_models() {
    let dir = tempdir("typed-hostile");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let db = dir.join("ordo.db");
    let evil = token(&db, "evil", Some("--agent"));
    let features: Vec<String> = (0..10_000).map(|i| format!("f{i}")).collect();
    let body = json!({"node": "evil", "gpus": 1, "fake": true, "features": features});
    let (st, e) = api(&url, &evil, "POST", "/v1/agent/register", Some(&body));
    assert_eq!((st, e["error"].as_str()), (400, Some("field `features`: 10000 features, more than the limit of 32")));
    let body = json!({"node": "evil", "gpus": 1, "fake": true, "gpu_model": "a".repeat(1_000_000)});
    assert!(body.to_string().len() < 1 << 20, "under the body limit: the check, not the limit, refuses it");
    let (st, e) = api(&url, &evil, "POST", "/v1/agent/register", Some(&body));
    assert_eq!((st, e["error"].as_str()), (400, Some("field `gpu_model`: 1000000 bytes, more than the limit of 128")));
    let body = json!({"node": "evil", "gpus": 1, "fake": true, "gpu_model": "a100\u{1b}[2J"});
    let (st, e) = api(&url, &evil, "POST", "/v1/agent/register", Some(&body));
    assert!(st == 400 && e["error"].as_str().unwrap().contains("has the character '\\u{1b}'"), "{st} {e}");
    assert!(cli_json(&url, &admin, &["nodes"]).as_array().unwrap().is_empty(), "no node registered");
    let audit = cli_json(&url, &admin, &["audit"]);
    assert!(audit.as_array().unwrap().iter().all(|r| r["kind"] != "node"), "{audit}");
    // The real agent refuses bad flags itself, before it registers.
    let many: Vec<String> = (0..33).map(|i| format!("f{i}")).collect();
    let tok = secret_file(&dir.join("evil.token"), &evil);
    let out = ordo(&[
        "agent",
        "--server",
        &url,
        "--name",
        "evil",
        "--gpus",
        "1",
        "--no-cgroup",
        "--token-file",
        tok.to_str().unwrap(),
        "--feature",
        &many.join(","),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--feature: 33 features, more than the limit of 32"), "{err}");

    // As many kinds as the scheduler models, each a node of its own (registered through the
    // API, then silent: nodes that are down count too); one more kind is refused.
    let max = ordo_core::pools::MAX_POOLS;
    for i in 0..max {
        let name = format!("n{i}");
        let (st, t) = api(&url, &admin, "POST", "/v1/admin/tokens", Some(&json!({"user": name, "role": "agent"})));
        assert_eq!(st, 200, "{t}");
        let tok = t["token"].as_str().unwrap().to_string();
        let body = json!({"node": name, "gpus": 1, "fake": true, "gpu_model": format!("m{i}")});
        let (st, e) = api(&url, &tok, "POST", "/v1/agent/register", Some(&body));
        assert_eq!(st, 200, "{name}: {e}");
    }
    let mut a = agent_with(&dir, &url, "gpu1", 1, &["--gpu-model", "one-too-many"]);
    let status = {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(s) = a.0.try_wait().unwrap() {
                break s;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the agent did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let log = std::fs::read_to_string(dir.join("agent-gpu1.log")).unwrap();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("422") && log.contains(&format!("more than {max} kinds of node")) && log.contains("--gpu-model"),
        "{log}"
    );
    // A node of a kind already known registers, and the server still places work.
    let _b = agent_with(&dir, &url, "gpu2", 1, &["--gpu-model", "m5"]);
    wait_for("gpu2 up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"]).as_array().unwrap().iter().any(|n| n["name"] == "gpu2" && n["state"] == "up")
    });
    let id = submit(&url, &alice, &["submit", "--gpus", "1", "--gpu-model", "m5", "--", "true"]);
    let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
    assert_eq!((j["state"].as_str(), j["node"].as_str()), (Some("completed"), Some("gpu2")), "{j}");
}
