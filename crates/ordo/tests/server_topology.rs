//! The cluster's topology end to end with real processes on loopback: a server with levels
//! (`ordo server --topology-levels block,switch`), four agents that declare their place
//! (`ordo agent --topology block=b0,switch=s0`), a multi-node job placed within one block while
//! a plain placement would spread it, a job that requires a block waiting with the reason in
//! `ordo explain` and starting once a block frees, and agents whose place is refused (a level
//! the server does not have, a block under two switches).

mod harness;

use harness::*;
use serde_json::Value;
use std::time::Duration;

fn submit(url: &str, tok: &str, args: &[&str]) -> u64 {
    cli_json(url, tok, args)["id"].as_u64().expect("id")
}

fn ranks(j: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        j["ranks"].as_array().expect("ranks").iter().map(|r| r["node"].as_str().expect("node").to_string()).collect();
    v.sort();
    v
}

fn wait_state(url: &str, tok: &str, id: u64, state: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("job {id} {state}"), Duration::from_secs(60), || {
        last = job_state(url, tok, id);
        last["state"] == state
    });
    last
}

#[test]
fn gangs_are_placed_within_a_block_and_a_required_block_waits_for_one() {
    let dir = tempdir("topology");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server_with(&dir, "127.0.0.1:0", "fifo+easy", &["--topology-levels", "block,switch"]);
    let mut agents = Vec::new();
    // The blocks interleave with the nodes' order: b0 is n1 and n3, b1 n2 and n4.
    for (n, p) in [("n1", "block=b0"), ("n2", "block=b1"), ("n3", "block=b0"), ("n4", "block=b1")] {
        agents.push(agent_with(&dir, &url, n, 4, &["--topology", &format!("{p},switch=s0")]));
    }
    wait_for("4 nodes up", Duration::from_secs(30), || {
        let n = cli_json(&url, &admin, &["nodes"]);
        n.as_array().is_some_and(|a| a.iter().filter(|x| x["state"] == "up").count() == 4)
    });
    let out = ordo(&["nodes", "--server", &url, "--token", &admin]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("[block=b1,switch=s0]"), "{table}");

    // Three GPUs of n1 busy: block b0 has 5 free, b1 8.
    let small = submit(&url, &alice, &["submit", "--gpus", "3", "--", "sleep", "60"]);
    assert_eq!(wait_state(&url, &alice, small, "running")["node"], "n1");
    // Two nodes x 4 GPUs: within block b1 (plain consolidated placement takes the lowest idle
    // nodes, n2 and n3, across the blocks).
    let gang = submit(&url, &alice, &["submit", "--nodes", "2", "--gpus", "8", "--", "sleep", "3"]);
    assert_eq!(ranks(&wait_state(&url, &alice, gang, "running")), ["n2", "n4"]);
    // Two nodes x 2 GPUs required within one block, while b1 runs the first: n1 and n3 hold 5
    // free GPUs but n1 only 1, so it waits, saying why (not a shortage: n3 alone has 4 free).
    let req =
        submit(&url, &alice, &["submit", "--nodes", "2", "--gpus", "4", "--topology", "required:block", "--", "true"]);
    let j = job_state(&url, &alice, req);
    assert_eq!((j["state"].as_str(), j["topology"].as_str()), (Some("pending"), Some("required:block")), "{j}");
    let out = ordo(&["explain", &req.to_string(), "--server", &url, "--token", &alice]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("needs 2 nodes with 2 GPUs free each within one block; the most free in any block is 5 GPUs"),
        "{text}"
    );
    // Once the first gang ends, block b1 holds it.
    assert_eq!(wait_ended(&url, &alice, gang, Duration::from_secs(60))["state"], "completed");
    let j = wait_ended(&url, &alice, req, Duration::from_secs(60));
    assert_eq!((j["state"].as_str(), ranks(&j)), (Some("completed"), vec!["n2".to_string(), "n4".to_string()]));

    // Places the server refuses: the agent says why and stops.
    for (name, place, want) in [
        ("n5", "rack=r1", "level `rack` is not one of the server's topology levels (block, switch)"),
        ("n6", "block=b0,switch=s9", "block `b0` is under two units of level switch"),
    ] {
        let mut a = agent_with(&dir, &url, name, 4, &["--topology", place]);
        let log = dir.join(format!("agent-{name}.log"));
        wait_for(&format!("agent {name} refused"), Duration::from_secs(30), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains(want))
        });
        let status = a.0.wait().expect("the agent stops");
        assert!(!status.success(), "agent {name} exits with an error");
    }
    // Hostile registrations through the API: 10,000 levels from a node's own token, a 100 kB
    // unit name, and a user's token speaking for a node. Refused, nothing kept.
    let n7 = token(&dir.join("ordo.db"), "n7", Some("--agent"));
    let many: serde_json::Map<String, Value> = (0..10_000).map(|i| (format!("l{i}"), Value::from("u"))).collect();
    let big = serde_json::json!({"block": "u".repeat(100_000)});
    for (tok, topology, status, want) in [
        (&n7, Value::Object(many), 400, "10000 entries, more than the limit of 8"),
        (&n7, big, 400, "more than the limit of 64"),
        (&alice, serde_json::json!({"block": "b0"}), 403, ""),
    ] {
        let body = serde_json::json!({"node": "n7", "gpus": 4, "fake": true, "topology": topology});
        let (st, answer) = api(&url, tok, "POST", "/v1/agent/register", Some(&body));
        assert_eq!(st, status, "{answer}");
        assert!(answer.to_string().contains(want), "{answer}");
    }
    let n = cli_json(&url, &admin, &["nodes"]);
    assert_eq!(n.as_array().map(Vec::len), Some(4), "refused agents are not nodes: {n}");
    drop(agents);
    let _ = std::fs::remove_dir_all(&dir);
}
