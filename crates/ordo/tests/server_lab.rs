//! The daily work of a lab on real processes (`ordo server` and `ordo agent` on loopback, fake
//! GPUs): a pipeline of dependencies through `ordo submit --after-ok/--after-not-ok`, and a
//! per-user GPU quota from the config file shown by `ordo explain`.

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
