//! Day-to-day operation without destroying work: an agent restarted (or upgraded) mid-job
//! takes its running jobs over instead of killing them. Real server, agent and job processes.

mod harness;

use harness::*;
use std::process::Command;
use std::time::Duration;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// An agent stopped (SIGTERM, as `systemctl restart` does, and then kill -9) while its job runs,
/// and started again: the job goes on, uninterrupted, runs exactly once, and completes (before:
/// the node went down and its jobs were requeued and restarted from the beginning).
#[test]
fn an_agent_restart_keeps_its_running_jobs() {
    if !needs(is_root(), "root, for the agent's cgroups") {
        return;
    }
    let dir = tempdir("agent-restart");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let work = dir.join("work-gpu1");
    let start_agent = || {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent-gpu1.log")).expect("log");
        Proc(
            Command::new(ORDO)
                .args(["agent", "--server", &url, "--name", "gpu1", "--gpus", "1", "--grace", "500ms"])
                .args(["--run-as", &whoami()])
                .arg("--token-file")
                .arg(dir.join("token-gpu1"))
                .arg("--work-dir")
                .arg(&work)
                .stderr(log)
                .spawn()
                .expect("agent"),
        )
    };
    let tok = token(&dir.join("ordo.db"), "gpu1", Some("--agent"));
    secret_file(&dir.join("token-gpu1"), &tok);
    let stamps = dir.join("ticks");
    let script =
        format!("for i in $(seq 1 40); do echo \"$ORDO_RESTARTS $i\" >> {}; sleep 0.1; done", stamps.display());
    for how in ["TERM", "KILL"] {
        let mut agent = start_agent();
        wait_for("gpu1 up", Duration::from_secs(30), || {
            cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["state"] == "up"))
        });
        let _ = std::fs::remove_file(&stamps);
        let id =
            cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", &script])["id"].as_u64().expect("id");
        wait_for("the job ticks", Duration::from_secs(30), || {
            std::fs::read_to_string(&stamps).is_ok_and(|t| t.lines().count() >= 5)
        });
        Command::new("kill").args([&format!("-{how}"), &agent.0.id().to_string()]).status().expect("kill");
        let _ = agent.0.wait();
        std::thread::sleep(Duration::from_millis(300));
        let _again = start_agent();
        let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
        assert_eq!(j["state"], "completed", "{how}: {j}");
        assert_eq!(j["restarts"], 0, "{how}: the job was not restarted: {j}");
        let ticks: Vec<String> = std::fs::read_to_string(&stamps).expect("ticks").lines().map(str::to_string).collect();
        let want: Vec<String> = (1..=40).map(|i| format!("0 {i}")).collect();
        assert_eq!(ticks, want, "{how}: it ran once, every tick in order, none twice");
        drop(_again);
        std::thread::sleep(Duration::from_millis(300));
    }
}

mod browser;

/// The dashboard, clicked in headless Chromium: an array element's Cancel cancels that element
/// only (before: the whole array, running elements included); "Cancel array" asks first and does
/// nothing when declined; every job is named as users name it (`4_1`); jobs waiting on a
/// dependency are in the queue and the pending count; admins see every running job and the
/// nodes that are down.
#[test]
fn the_dashboard_cancels_one_element_asks_before_an_array_and_shows_every_pending_job() {
    let dir = tempdir("dash-array");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent_with(&dir, &url, "gpu1", 2, &["--no-cgroup"]);
    wait_for("gpu1 up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["state"] == "up"))
    });
    let arr = cli_json(&url, &alice, &["submit", "--gpus", "1", "--array", "0-3%2", "--", "sleep", "300"])["id"]
        .as_u64()
        .expect("id");
    let after = cli_json(&url, &alice, &["submit", "--gpus", "1", "--after-ok", &arr.to_string(), "--", "true"])["id"]
        .as_u64()
        .expect("id");
    wait_for("two elements run", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["queue"])["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().filter(|j| j["state"] == "running").count() == 2)
    });
    // The CLI lists the dependent job too, with why it waits.
    let q = cli_json(&url, &alice, &["queue"]);
    let dep = q["jobs"].as_array().expect("jobs").iter().find(|j| j["id"] == after).cloned().expect("listed");
    assert!(dep["wait"]["text"].as_str().expect("why").starts_with(&format!("waits for array {arr}")), "{dep}");
    let Some(mut b) = browser::Browser::start(1400, 1600, &dir.join("chromium.log")) else { return };
    b.goto(&format!("{url}/"));
    b.wait("the login form", "document.querySelector('#login button')?.disabled === false", Duration::from_secs(30));
    b.eval("document.getElementById('token').focus(); 1");
    b.call("Input.insertText", serde_json::json!({"text": alice}));
    b.eval("document.querySelector('#login button').click(); 1");
    b.wait("the data", "document.body.dataset.loaded === 'yes'", Duration::from_secs(20));
    // Elements named `ID_INDEX`; the dependent job is in the queue and counted as pending
    // (elements 2 and 3 wait, and the dependent job: 3).
    let e1 = format!("{arr}_1");
    assert_eq!(b.eval(&format!("!!document.querySelector('#mine tr[data-job=\"{e1}\"]')")), serde_json::json!(true));
    assert_eq!(
        b.eval(&format!("!!document.querySelector('#queue tr[data-job=\"{after}\"]')")),
        serde_json::json!(true)
    );
    let pending = b.eval(
        "[...document.querySelectorAll('#summary .card')].find(c => c.textContent.includes('pending jobs')).querySelector('b').textContent",
    );
    assert_eq!(pending, serde_json::json!("3"));
    // Cancel on element 1's row: element 1 alone.
    b.eval(&format!("document.querySelector('#mine tr[data-job=\"{e1}\"] button.cancel').click(); 1"));
    wait_for("element 1 cancelled", Duration::from_secs(10), || {
        job_state(&url, &alice, arr + 1)["state"] == "cancelled"
    });
    std::thread::sleep(Duration::from_secs(1));
    for (e, st) in [(arr, "running"), (arr + 2, "running")] {
        let j = job_state(&url, &alice, e);
        assert_eq!(j["state"], st, "element {}: {j}", e - arr);
    }
    assert_eq!(job_state(&url, &alice, arr + 3)["state"], "pending");
    // "Cancel array", declined: nothing happens; accepted: every element not ended.
    b.wait(
        "a row of element 0",
        &format!("!!document.querySelector('#mine tr[data-job=\"{arr}_0\"] button.cancel-array')"),
        Duration::from_secs(10),
    );
    b.eval(&format!("window.confirm = () => false; document.querySelector('#mine tr[data-job=\"{arr}_0\"] button.cancel-array').click(); 1"));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(job_state(&url, &alice, arr)["state"], "running");
    b.eval(&format!("window.confirm = () => true; document.querySelector('#mine tr[data-job=\"{arr}_0\"] button.cancel-array').click(); 1"));
    wait_for("the array cancelled", Duration::from_secs(10), || {
        (0..4).all(|i| job_state(&url, &alice, arr + i)["state"] == "cancelled")
    });
    // An admin sees every running job, and the nodes down.
    let bob_job = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "300"])["id"].as_u64().expect("id");
    wait_for("it runs", Duration::from_secs(20), || job_state(&url, &admin, bob_job)["state"] == "running");
    b.eval("document.getElementById('logout').click(); 1");
    b.eval("document.getElementById('token').focus(); 1");
    b.call("Input.insertText", serde_json::json!({"text": admin}));
    b.eval("document.querySelector('#login button').click(); 1");
    b.wait(
        "the admin's data",
        &format!("!!document.querySelector('#running tr[data-job=\"{bob_job}\"]')"),
        Duration::from_secs(20),
    );
    let down = b.eval(
        "[...document.querySelectorAll('#summary .card')].find(c => c.textContent.includes('nodes down')).querySelector('b').textContent",
    );
    assert_eq!(down, serde_json::json!("0"));
}
