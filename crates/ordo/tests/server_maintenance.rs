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

/// `ordo` as `tok`, expecting it to fail: its stderr.
fn refused(url: &str, tok: &str, args: &[&str]) -> String {
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--server", url, "--token", tok]);
    let out = ordo(&a);
    assert!(!out.status.success(), "ordo {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn node(url: &str, tok: &str, name: &str) -> serde_json::Value {
    let n = cli_json(url, tok, &["nodes"]);
    n.as_array().expect("nodes").iter().find(|n| n["name"] == name).cloned().expect("node listed")
}

fn job(url: &str, tok: &str, id: u64) -> serde_json::Value {
    let q = cli_json(url, tok, &["queue"]);
    q["jobs"].as_array().expect("jobs").iter().find(|j| j["id"] == id).cloned().unwrap_or_default()
}

/// An admin cordons a node (no new work, its job goes on), resumes it (it takes work again),
/// drains a node with a deadline (its job is stopped once the deadline passes, requeued with
/// its run time kept, never started there again, and runs elsewhere); users may not; the state
/// and reason are in `ordo nodes`, `ordo explain`, /metrics and the audit log, and survive a
/// restart of the server (before: no such command; stopping the agent was the only way).
#[test]
fn an_admin_cordons_drains_with_a_deadline_and_resumes_a_node() {
    let dir = tempdir("node-maint");
    let (admin, alice) = tokens(&dir);
    let (srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _a1 = agent_with(&dir, &url, "gpu1", 1, &["--no-cgroup"]);
    let _a2 = agent_with(&dir, &url, "gpu2", 1, &["--no-cgroup"]);
    wait_for("two nodes up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"])
            .as_array()
            .is_some_and(|a| a.iter().filter(|n| n["status"] == "up").count() == 2)
    });
    let a = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "300"])["id"].as_u64().expect("id");
    wait_for("a runs", Duration::from_secs(30), || job(&url, &alice, a)["state"] == "running");
    let on = job(&url, &alice, a)["node"].as_str().expect("node").to_string();
    let other = if on == "gpu1" { "gpu2" } else { "gpu1" };

    // Users may not; a reason is required.
    let e = refused(&url, &alice, &["node", "cordon", other, "--reason", "mine now"]);
    assert!(e.contains("only admins may cordon, drain or resume a node"), "{e}");
    let e = refused(&url, &admin, &["node", "cordon", other]);
    assert!(e.contains("--reason: required"), "{e}");
    let e = refused(&url, &admin, &["node", "cordon", "nosuch", "--reason", "x"]);
    assert!(e.contains("no node named \"nosuch\""), "{e}");

    // Cordon the free node: a new job waits, and says why.
    let n = cli_json(&url, &admin, &["node", "cordon", other, "--reason", "BIOS update"]);
    assert_eq!(n["status"], "cordoned", "{n}");
    assert_eq!(n["maint"]["by"], "admin");
    let b = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "300"])["id"].as_u64().expect("id");
    std::thread::sleep(Duration::from_millis(1500));
    let jb = cli_json(&url, &alice, &["explain", &b.to_string()]);
    assert_eq!(jb["state"], "pending", "{jb}");
    let why = jb["wait"]["text"].as_str().expect("why");
    assert!(why.contains(&format!("{other} (cordoned by admin: BIOS update)")), "{why}");
    assert_eq!(job(&url, &alice, a)["state"], "running", "a cordon leaves running jobs alone");
    let metrics = raw_get(&url, &admin, "/metrics");
    assert!(metrics.contains(&format!("ordo_node_status{{node=\"{other}\",status=\"cordoned\"}} 1")), "{metrics}");
    assert!(metrics.contains("ordo_node_maintenance_info{"), "{metrics}");
    let text = ordo(&["nodes", "--server", &url, "--token", &alice]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains(&format!("{other}: cordoned by admin at ")) && text.contains("BIOS update"), "{text}");

    // Resume: b starts there.
    let n = cli_json(&url, &admin, &["node", "resume", other]);
    assert_eq!(n["status"], "up", "{n}");
    wait_for("b runs on the resumed node", Duration::from_secs(30), || {
        let j = job(&url, &alice, b);
        j["state"] == "running" && j["node"] == other
    });

    // Drain a's node with a deadline: a is stopped after it, requeued with its run time, and
    // waits (b holds the other node) rather than start again on the drained node.
    let n = cli_json(&url, &admin, &["node", "drain", &on, "--reason", "kernel upgrade", "--deadline", "2s"]);
    assert_eq!(n["status"], "draining", "{n}");
    assert!(n["maint"]["deadline"].as_i64().is_some(), "{n}");
    wait_for("a requeued", Duration::from_secs(30), || job(&url, &alice, a)["state"] == "pending");
    let ja = job(&url, &alice, a);
    assert_eq!(ja["restarts"], 1, "{ja}");
    assert!(ja["executed_ms"].as_i64().expect("executed") >= 1500, "its run time kept: {ja}");
    wait_for("the node drained", Duration::from_secs(10), || node(&url, &admin, &on)["status"] == "drained");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(job(&url, &alice, a)["state"], "pending", "a does not start on the drained node");
    // b ends: a runs on the other node.
    cli_json(&url, &alice, &["cancel", &b.to_string()]);
    wait_for("a runs elsewhere", Duration::from_secs(30), || {
        let j = job(&url, &alice, a);
        j["state"] == "running" && j["node"] == other
    });
    let audit = cli_json(&url, &admin, &["audit", "--limit", "1000"]);
    let events: Vec<String> = audit
        .as_array()
        .expect("audit")
        .iter()
        .filter(|r| r["kind"] == "node" && r["actor"] == "admin")
        .map(|r| r["detail"]["event"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(events, ["cordon", "resume", "drain"], "{audit}");

    // A restart of the server keeps the drain.
    drop(srv);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let n = node(&url, &admin, &on);
    assert_eq!(n["maint"]["kind"], "drain", "{n}");
    assert_eq!(n["maint"]["reason"], "kernel upgrade", "{n}");
}

/// `ordo policy set` says what a change does before it does it: with --dry-run nothing changes
/// and the running job it would preempt is named with how long it ran; without --preempt-now a
/// preempting change is refused; with it, it is made and recorded (before: `ordo policy set las`
/// preempted a job that had run 391 s, without a word).
#[test]
fn a_policy_change_that_preempts_needs_preempt_now_and_a_dry_run_changes_nothing() {
    let dir = tempdir("policy-dry");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server_with(&dir, "127.0.0.1:0", "fifo", &["--min-run", "0s"]);
    let _a1 = agent_with(&dir, &url, "gpu1", 1, &["--no-cgroup"]);
    wait_for("gpu1 up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["status"] == "up"))
    });
    let a = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "300"])["id"].as_u64().expect("id");
    wait_for("a runs", Duration::from_secs(30), || job(&url, &alice, a)["state"] == "running");
    std::thread::sleep(Duration::from_millis(2000));
    let b = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "300"])["id"].as_u64().expect("id");
    std::thread::sleep(Duration::from_millis(500));

    let r = cli_json(&url, &admin, &["policy", "set", "las:thresholds=1", "--dry-run"]);
    assert_eq!(r["applied"], false, "{r}");
    assert_eq!(r["policy"], "fifo", "{r}");
    let p = r["preempt"].as_array().expect("preempt");
    assert_eq!(p.len(), 1, "{r}");
    assert_eq!(p[0]["job"], a.to_string());
    assert!(p[0]["ran_ms"].as_i64().expect("ran") >= 1000, "{r}");
    assert_eq!(r["start"][0]["job"], b.to_string(), "{r}");
    let text = String::from_utf8_lossy(
        &ordo(&["policy", "set", "las:thresholds=1", "--dry-run", "--server", &url, "--token", &admin]).stdout,
    )
    .into_owned();
    assert!(text.contains(&format!("would preempt 1 running job at once: {a} (alice, ran ")), "{text}");
    assert_eq!(cli_json(&url, &admin, &["policy", "show"])["policy"], "fifo", "a dry run changes nothing");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(job(&url, &alice, a)["state"], "running");
    assert_eq!(job(&url, &alice, a)["restarts"], 0);

    let e = refused(&url, &admin, &["policy", "set", "las:thresholds=1", "--reason", "long jobs held the GPUs"]);
    assert!(e.contains(&format!(" would preempt 1 running job at once: {a} of alice (ran ")), "{e}");
    assert!(e.contains("--preempt-now"), "{e}");
    assert_eq!(cli_json(&url, &admin, &["policy", "show"])["policy"], "fifo");
    // A change that preempts nothing needs no flag.
    assert_eq!(cli_json(&url, &admin, &["policy", "set", "sjf", "--reason", "try shortest first"])["applied"], true);

    let r = cli_json(
        &url,
        &admin,
        &["policy", "set", "las:thresholds=1", "--preempt-now", "--reason", "long jobs held the GPUs"],
    );
    assert_eq!(r["applied"], true, "{r}");
    assert!(r["policy"].as_str().expect("policy").starts_with("las:thresholds=1"), "{r}");
    wait_for("a preempted and b started", Duration::from_secs(30), || {
        job(&url, &alice, b)["state"] == "running" && job(&url, &alice, a)["state"] == "pending"
    });
    let audit = cli_json(&url, &admin, &["audit", "--limit", "1000"]);
    let rec = audit.as_array().expect("audit").iter().rev().find(|r| r["kind"] == "policy").cloned().expect("policy");
    assert!(rec["detail"]["to"].as_str().expect("to").starts_with("las:thresholds=1"), "{rec}");
    assert_eq!(rec["detail"]["preempts"][0], a.to_string(), "{rec}");
    assert_eq!(
        (rec["actor"].as_str(), rec["detail"]["reason"].as_str()),
        (Some("admin"), Some("long jobs held the GPUs"))
    );
}

/// A GET with a token: the answer's body.
fn raw_get(url: &str, tok: &str, path: &str) -> String {
    let (status, out) = raw_http(
        url,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200, "{out}");
    out
}

/// `ordo logs`: a job's output, read on its node by its agent and passed on by the server:
/// standard output and error, `--follow` on a running job until it ends (every line once, in
/// order), the owner and admins only, one element of an array rather than the array (before:
/// no such command; the output sat in the agent's work directory on the node).
#[test]
fn ordo_logs_reads_a_jobs_output_from_its_node_and_follows_it() {
    let dir = tempdir("logs");
    let (admin, alice) = tokens(&dir);
    let bob = token(&dir.join("ordo.db"), "bob", None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _a1 = agent_with(&dir, &url, "gpu1", 2, &["--no-cgroup"]);
    wait_for("gpu1 up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["status"] == "up"))
    });
    let script = "for i in $(seq 1 30); do echo line $i; echo warn $i >&2; sleep 0.1; done";
    let id = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", script])["id"].as_u64().expect("id");
    wait_for("it runs", Duration::from_secs(30), || job(&url, &alice, id)["state"] == "running");
    let out = ordo(&["logs", &id.to_string(), "--follow", "--server", &url, "--token", &alice]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "--follow prints every line once, in order");
    let err = ordo(&["logs", &id.to_string(), "--err", "--server", &url, "--token", &admin]);
    let want: String = (1..=30).map(|i| format!("warn {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&err.stdout), want, "an admin reads standard error");
    assert!(String::from_utf8_lossy(&err.stderr).contains(&format!("job-{id}.err")), "it names the file");
    let j = cli_json(&url, &alice, &["logs", &id.to_string()]);
    assert_eq!((j["node"].as_str(), j["ended"].as_bool()), (Some("gpu1"), Some(true)), "{j}");
    let ex = ordo(&["explain", &id.to_string(), "--server", &url, "--token", &alice]);
    let ex = String::from_utf8_lossy(&ex.stdout).into_owned();
    assert!(
        ex.contains(&format!("output: on node gpu1, job-{id}.out and job-{id}.err")) && ex.contains("ordo logs"),
        "{ex}"
    );
    let e = refused(&url, &bob, &["logs", &id.to_string()]);
    assert!(e.contains("only its owner or an admin may read its output"), "{e}");
    let arr = cli_json(
        &url,
        &alice,
        &["submit", "--gpus", "1", "--array", "0-1", "--", "sh", "-c", "echo element $ORDO_ARRAY_INDEX"],
    )["id"]
        .as_u64()
        .expect("id");
    wait_ended(&url, &alice, arr + 1, Duration::from_secs(30));
    let e = refused(&url, &alice, &["logs", &arr.to_string()]);
    assert!(e.contains("is an array: name one element"), "{e}");
    let one = ordo(&["logs", &format!("{arr}_1"), "--server", &url, "--token", &alice]);
    assert_eq!(String::from_utf8_lossy(&one.stdout), "element 1\n");
    // A job that waits on another has not started: it has no output yet.
    let blocker = cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sleep", "60"])["id"].as_u64().expect("id");
    let never = cli_json(&url, &alice, &["submit", "--gpus", "1", "--after-ok", &blocker.to_string(), "--", "true"])
        ["id"]
        .as_u64()
        .expect("id");
    let e = refused(&url, &alice, &["logs", &never.to_string()]);
    assert!(e.contains("has not started: it has no output yet"), "{e}");
    cli_json(&url, &alice, &["cancel", &blocker.to_string()]);
}

/// `ordo submit --output PATH`: the job's standard output and error, together, also go to PATH
/// on its node (`%j` its id, `%a` an element's index), created by `ordo agent-tee` as the job's
/// user; `ordo logs` still shows them (before: no such option).
#[test]
fn submit_output_writes_the_jobs_output_to_the_path_given() {
    let dir = tempdir("output");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _a1 = agent_with(&dir, &url, "gpu1", 2, &["--no-cgroup"]);
    wait_for("gpu1 up", Duration::from_secs(30), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["status"] == "up"))
    });
    let outdir = dir.join("results");
    std::fs::create_dir_all(&outdir).expect("dir");
    let pattern = format!("{}/out-%j.txt", outdir.display());
    let id = cli_json(
        &url,
        &alice,
        &["submit", "--gpus", "1", "--output", &pattern, "--", "sh", "-c", "echo one; echo two >&2; echo three"],
    )["id"]
        .as_u64()
        .expect("id");
    let j = wait_ended(&url, &alice, id, Duration::from_secs(30));
    assert_eq!(j["state"], "completed", "{j}");
    assert_eq!(j["output"], pattern.as_str(), "{j}");
    let file = outdir.join(format!("out-{id}.txt"));
    wait_for("the copy is written", Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.lines().count() == 3)
    });
    let mut lines: Vec<String> =
        std::fs::read_to_string(&file).expect("output file").lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["one", "three", "two"], "both streams in the file");
    let logs = ordo(&["logs", &id.to_string(), "--server", &url, "--token", &alice]);
    assert_eq!(String::from_utf8_lossy(&logs.stdout).lines().count(), 3, "ordo logs still shows it");
    // An array's elements, each its own file; a path that cannot be opened is said in the output.
    let arr = cli_json(
        &url,
        &alice,
        &[
            "submit",
            "--gpus",
            "1",
            "--array",
            "0-1",
            "--output",
            &format!("{}/el-%A_%a.txt", outdir.display()),
            "--",
            "sh",
            "-c",
            "echo element $ORDO_ARRAY_INDEX",
        ],
    )["id"]
        .as_u64()
        .expect("id");
    wait_ended(&url, &alice, arr + 1, Duration::from_secs(30));
    for i in 0..2 {
        let f = outdir.join(format!("el-{arr}_{i}.txt"));
        wait_for("the element's file", Duration::from_secs(10), || {
            std::fs::read_to_string(&f).is_ok_and(|t| t == format!("element {i}\n"))
        });
    }
    let bad =
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--output", "/nonexistent-dir/x.txt", "--", "echo", "hi"])
            ["id"]
            .as_u64()
            .expect("id");
    wait_ended(&url, &alice, bad, Duration::from_secs(30));
    let logs = ordo(&["logs", &bad.to_string(), "--server", &url, "--token", &alice]);
    let text = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(text.contains("--output /nonexistent-dir/x.txt: cannot open it") && text.contains("hi"), "{text}");
}
