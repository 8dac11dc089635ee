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
