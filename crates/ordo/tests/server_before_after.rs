//! `ordo before-after` on the history of a real `ordo server` with a real agent running real
//! job processes: an admin changes the policy with a reason between two periods of the same
//! work; the page quotes the change, replays the history as it changed to within the agent's
//! latency, and finds the order's part where shortest-first reordered the queue.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod harness;

use harness::*;
use serde_json::Value;
use std::time::Duration;

/// One period: a 4-GPU job of 2 s, then behind it a 4-GPU job of 4 s and two of 1 s (time
/// limits 10 s and 3 s: what sjf orders by), all on one node of 4 GPUs.
fn period(url: &str, tok: &str) -> Vec<u64> {
    let mut ids = Vec::new();
    for (secs, limit) in [("2", "10s"), ("4", "10s"), ("1", "3s"), ("1", "3s")] {
        let j = cli_json(url, tok, &["submit", "--gpus", "4", "--time", limit, "--", "sleep", secs]);
        ids.push(j["id"].as_u64().unwrap());
    }
    for &id in &ids {
        let j = wait_ended(url, tok, id, Duration::from_secs(60));
        assert_eq!(j["state"], "completed", "{j}");
    }
    ids
}

#[test]
fn a_real_servers_change_of_policy_is_replayed_within_the_agents_latency() {
    let dir = tempdir("before-after");
    let (_server, url) = server(&dir, "127.0.0.1:0", "fifo");
    let (admin, alice) = tokens(&dir);
    let _agent = agent(&dir, &url, "n1", 4);
    wait_for("the node", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|n| n.iter().any(|x| x["state"] == "up"))
    });
    period(&url, &alice);
    std::thread::sleep(Duration::from_millis(500));
    cli_json(&url, &admin, &["policy", "set", "sjf", "--reason", "short jobs wait behind long ones (ticket 4711)"]);
    std::thread::sleep(Duration::from_millis(500));
    period(&url, &alice);
    // The running server's database, read as it runs.
    let out = dir.join("page.json");
    let o = ordo(&["before-after", "--trace", dir.join("ordo.db").to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((r["change"]["actor"].as_str(), r["change"]["to"].as_str()), (Some("admin"), Some("sjf")));
    assert!(r["change"]["reason"].as_str().unwrap().contains("ticket 4711"));
    assert_eq!((r["periods"][0]["jobs"].as_u64(), r["periods"][1]["jobs"].as_u64()), (Some(4), Some(4)));
    // The same core decided: the replay's starts trail nothing but the agent's latency (its
    // poll, the process start), and the start order is the same.
    for f in r["fidelity"].as_array().unwrap() {
        assert!(f["mean_abs_start_error_s"].as_f64().unwrap() < 1.0, "{f}");
        assert!(f["rank_correlation"].as_f64().unwrap() > 0.9, "{f}");
    }
    // sjf ran the two 1 s jobs before the 4 s one: about 4 s less wait for each, 3 s more for
    // the long one, on the same jobs in both periods.
    let w = &r["effects"][0];
    for k in ["order_on_before", "order_on_after"] {
        let v = w[k]["value"].as_f64().unwrap();
        assert!((-2.5..=-1.0).contains(&v), "{k}: {w}");
    }
    eprintln!("{}", r["headline"]);
    eprintln!("fidelity: {}", r["fidelity"]);
}
