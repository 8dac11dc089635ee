//! `ordo server` and `ordo agent` tried as a hostile but realistic user would: another node's
//! token, forged node names and times, a job that looks for the agent's credentials, a user who
//! jumps the queue, huge fields, control characters in names, a closed pipe. Real processes on
//! loopback throughout.

mod harness;

use harness::*;
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn submit_in(dir: &Path, url: &str, tok: &str, args: &[&str]) -> u64 {
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let out = Command::new(ORDO)
        .args(&args[..at])
        .args(["--server", url, "--token", tok, "--json"])
        .args(&args[at..])
        .current_dir(dir)
        .output()
        .expect("ordo submit");
    assert!(out.status.success(), "submit from {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("json")["id"].as_u64().expect("id")
}

/// A: an agent started with no --work-dir (a relative default) in one directory, and jobs
/// submitted from two others: each runs once, in its submitter's directory, and is recorded as
/// completed (the supervisor finds its status file by an absolute path).
#[test]
fn jobs_submitted_from_other_directories_than_the_agents_complete_once() {
    let dir = tempdir("dirs");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let agent_home = dir.join("agent-home");
    std::fs::create_dir_all(&agent_home).expect("dir");
    let tok = token(&dir.join("ordo.db"), "gpu1", Some("--agent"));
    let tok_file = secret_file(&dir.join("gpu1.token"), &tok);
    let log = std::fs::File::create(dir.join("agent.log")).expect("log");
    let _agent = Proc(
        Command::new(ORDO)
            .args(["agent", "--server", &url, "--name", "gpu1", "--gpus", "8", "--run-as", &whoami()])
            .arg("--token-file")
            .arg(&tok_file)
            .current_dir(&agent_home)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("agent"),
    );
    wait_for("the agent", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| !a.is_empty())
    });
    let mut ids = Vec::new();
    for sub in ["home-a", "elsewhere/b"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).expect("dir");
        ids.push((d.clone(), submit_in(&d, &url, &alice, &["submit", "--", "sh", "-c", "echo ran >> F"])));
    }
    for (d, id) in ids {
        let j = wait_ended(&url, &alice, id, Duration::from_secs(30));
        assert_eq!(j["state"], "completed", "{j}");
        let f = std::fs::read_to_string(d.join("F")).expect("the job wrote F in its submitter's directory");
        assert_eq!(f, "ran\n", "ran exactly once");
    }
    // Its output went to the agent's default work directory, found by absolute path.
    assert!(agent_home.join("ordo-agent-gpu1").is_dir());
}

/// B: one node's agent token cannot speak for another node, register a phantom node, nor
/// report times the server's clock makes impossible; users and admins cannot act as nodes.
#[test]
fn an_agent_token_speaks_only_for_its_own_node() {
    let dir = tempdir("nodeid");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _g1 = agent(&dir, &url, "gpu1", 1);
    let _g2 = agent(&dir, &url, "gpu2", 1);
    wait_for("two nodes", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.len() == 2)
    });
    let results = dir.join("runs.txt");
    let script = format!("echo $ORDO_JOB_ID $ORDO_NODE >> {}; sleep 3", results.display());
    let j1 = cli_json(&url, &alice, &["submit", "--", "sh", "-c", &script])["id"].as_u64().expect("id");
    let j2 = cli_json(&url, &alice, &["submit", "--", "sh", "-c", &script])["id"].as_u64().expect("id");
    wait_for("both running", Duration::from_secs(20), || {
        [j1, j2].iter().all(|&j| job_state(&url, &alice, j)["state"] == "running")
    });
    let on = |j: u64| job_state(&url, &alice, j)["node"].as_str().expect("node").to_string();
    let (mine, theirs) = if on(j1) == "gpu1" { (j1, j2) } else { (j2, j1) };
    assert_eq!(on(theirs), "gpu2");
    let g1 = std::fs::read_to_string(dir.join("token-gpu1")).expect("gpu1's token");
    let now = harness_now();
    let end = |node: &str, job: u64, ended: i64| {
        json!({"node": node, "job": job, "attempt": 1, "outcome": "exited", "exit_code": 0,
               "started_at": now - 1000, "ended_at": ended})
    };
    // gpu1's token reports gpu2's job as done: as gpu2, and as itself.
    let (st, e) = api(&url, &g1, "POST", "/v1/agent/report", Some(&end("gpu2", theirs, now)));
    assert_eq!(st, 403, "{e}");
    assert!(e["error"].as_str().expect("error").contains("belongs to node gpu1"), "{e}");
    let (st, e) = api(&url, &g1, "POST", "/v1/agent/report", Some(&end("gpu1", theirs, now)));
    assert_eq!(st, 403, "{e}");
    // ... polls as gpu2 with an empty list (which would requeue gpu2's job) ...
    let (st, _) = api(&url, &g1, "POST", "/v1/agent/poll", Some(&json!({"node": "gpu2", "running": []})));
    assert_eq!(st, 403);
    // ... registers a phantom node with 1,024 GPUs.
    let evil = json!({"node": "evil", "gpus": 1024, "fake": true});
    assert_eq!(api(&url, &g1, "POST", "/v1/agent/register", Some(&evil)).0, 403);
    // Users and admins are not nodes either.
    assert_eq!(api(&url, &alice, "POST", "/v1/agent/register", Some(&evil)).0, 403);
    assert_eq!(api(&url, &admin, "POST", "/v1/agent/register", Some(&evil)).0, 403);
    // Its own job, with an end in 1970 or an hour from now: refused by the server's clock.
    for t in [2, now + 3_600_000] {
        let (st, e) = api(&url, &g1, "POST", "/v1/agent/report", Some(&end("gpu1", mine, t)));
        assert_eq!(st, 400, "ended_at {t}: {e}");
        assert!(e["error"].as_str().expect("error").contains("ended_at"), "{e}");
    }
    // An agent whose clock is a day off cannot register.
    let skewed = json!({"node": "gpu1", "gpus": 1, "fake": true, "clock": now - 86_400_000});
    let (st, e) = api(&url, &g1, "POST", "/v1/agent/register", Some(&skewed));
    assert_eq!(st, 400, "{e}");
    assert!(e["error"].as_str().expect("error").contains("clock"), "{e}");
    // Nothing of that reached the jobs: both complete, each ran exactly once, no phantom node.
    for j in [j1, j2] {
        assert_eq!(wait_ended(&url, &alice, j, Duration::from_secs(30))["state"], "completed");
    }
    let runs = std::fs::read_to_string(&results).expect("runs");
    assert_eq!(runs.lines().count(), 2, "{runs}");
    let nodes = cli_json(&url, &admin, &["nodes"]);
    assert!(nodes.as_array().expect("array").iter().all(|n| n["name"] != "evil"), "{nodes}");
}

fn harness_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// C: with the agent as root, a job runs as its submitter's Unix account (uid, gid, groups),
/// gets a clean environment, cannot read the agent's token (neither from its environment, its
/// files nor any process's command line), and its output belongs to its submitter with their
/// umask. A submitter without an account is refused with the reason; uid 0 only by --run-as.
#[test]
fn jobs_run_as_their_submitter_and_never_see_the_agents_credentials() {
    let account = std::env::var("ORDO_TEST_ACCOUNT").unwrap_or_else(|_| "ordotest".into());
    let is_root = whoami() == "root";
    if !needs(is_root, "run-as-submitter test: needs root (the agent switches accounts only as root)") {
        return;
    }
    let uid_of = Command::new("id").args(["-u", &account]).output().expect("id");
    if !needs(
        uid_of.status.success(),
        &format!("run-as-submitter test: no Unix account `{account}` (useradd -M {account}; .ci/run creates it)"),
    ) {
        return;
    }
    let uid: u32 = String::from_utf8_lossy(&uid_of.stdout).trim().parse().expect("uid");
    let dir = tempdir("runas");
    let out_dir = dir.join("shared");
    std::fs::create_dir_all(&out_dir).expect("dir");
    set_mode(&out_dir, 0o777);
    let db = dir.join("ordo.db");
    let admin = token(&db, "admin", Some("--admin"));
    let user = token(&db, &account, None);
    let stranger = token(&db, "nosuchaccount9", None);
    let rooty = token(&db, "root", None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    // The agent takes its token from ORDO_TOKEN, which it removes at start.
    let agent_tok = token(&db, "n1", Some("--agent"));
    let token_file = secret_file(&dir.join("n1.token"), &agent_tok);
    let _agent = root_agent(&dir, &url, &agent_tok, &admin, 2);
    let o = out_dir.display();
    let script = format!(
        "id -u > {o}/uid; id -g > {o}/gid; env > {o}/env; \
         cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' > {o}/cmdlines; \
         cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > {o}/environs; \
         if cat {} > {o}/stolen 2>/dev/null; then echo read; else echo denied; fi > {o}/token-file; \
         echo hello",
        token_file.display()
    );
    // Submitted with umask 027 (the CLI sends its own).
    let sub = Command::new("sh")
        .args(["-c", "umask 027; exec \"$0\" \"$@\""])
        .arg(ORDO)
        .args(["submit", "--server", &url, "--token", &user, "--json", "--", "sh", "-c", &script])
        .current_dir(&out_dir)
        .output()
        .expect("submit");
    assert!(sub.status.success(), "{}", String::from_utf8_lossy(&sub.stderr));
    let id = serde_json::from_slice::<Value>(&sub.stdout).expect("json")["id"].as_u64().expect("id");
    let j = wait_ended(&url, &admin, id, Duration::from_secs(30));
    assert_eq!(j["state"], "completed", "{j}");
    let read = |f: &str| std::fs::read_to_string(out_dir.join(f)).unwrap_or_default();
    assert_eq!(read("uid").trim(), uid.to_string(), "the job ran as {account}");
    assert_ne!(read("gid").trim(), "0");
    let env = read("env");
    assert!(env.contains(&format!("USER={account}")), "{env}");
    assert!(!env.contains("ORDO_TOKEN") && !env.contains(&agent_tok), "the agent's token reached the job: {env}");
    assert!(!read("cmdlines").contains(&agent_tok), "a command line holds the agent's token");
    assert!(!read("environs").contains(&agent_tok), "a process environment the job can read holds the agent's token");
    assert_eq!(read("token-file").trim(), "denied", "the job read the agent's token file");
    // The output file is the submitter's, with their umask (0666 & !027 = 0640).
    let out = dir.join("work").join(format!("job-{id}.out"));
    let meta = std::fs::metadata(&out).expect("output file");
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o640), "{}", out.display());
    assert_eq!(std::fs::read_to_string(&out).expect("out"), "hello\n");
    // No account: refused with the reason, not run as anyone else.
    let id = cli_json(&url, &stranger, &["submit", "--", "true"])["id"].as_u64().expect("id");
    let j = wait_ended(&url, &admin, id, Duration::from_secs(30));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(j["end_reason"].as_str().expect("reason").contains("no Unix account `nosuchaccount9`"), "{j}");
    // An ordo user named `root` does not become root.
    let id = cli_json(&url, &rooty, &["submit", "--", "true"])["id"].as_u64().expect("id");
    let j = wait_ended(&url, &admin, id, Duration::from_secs(30));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(j["end_reason"].as_str().expect("reason").contains("never run as root"), "{j}");
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// C: an agent refuses a token on its command line (every process could read it in `ps`), and
/// a token file that others may read.
#[test]
fn an_agent_refuses_a_token_in_argv_or_in_a_readable_file() {
    let dir = tempdir("argv");
    let out = ordo(&["agent", "--token", "ordo_1_secret", "--gpus", "1", "--name", "n1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("visible to every process"));
    let f = dir.join("tok");
    std::fs::write(&f, "ordo_1_secret\n").expect("write");
    set_mode(&f, 0o644);
    let out = ordo(&["agent", "--token-file", f.to_str().expect("utf-8"), "--gpus", "1", "--name", "n1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// G, H, I: huge fields are refused and nothing is stored; names with a newline or an escape
/// sequence are shown escaped, so they can neither forge a row nor drive the terminal; a closed
/// pipe ends the CLI quietly.
#[test]
fn fields_are_bounded_names_are_escaped_and_a_closed_pipe_is_quiet() {
    let dir = tempdir("fields");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _a = agent(&dir, &url, "n1", 2);
    wait_for("the agent", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| !a.is_empty())
    });
    let big = "x".repeat(1_900_000);
    let (st, e) = api(&url, &alice, "POST", "/v1/jobs", Some(&json!({"gpus": 1, "command": ["true"], "cwd": big})));
    assert_eq!(st, 413, "{e}");
    assert!(e["error"].is_string(), "a too-large body is answered in JSON: {e}");
    let cwd = format!("/{}", "d".repeat(5000));
    let (st, e) = api(&url, &alice, "POST", "/v1/jobs", Some(&json!({"gpus": 1, "command": ["true"], "cwd": cwd})));
    assert_eq!(st, 400, "{e}");
    assert!(e["error"].as_str().expect("error").contains("cwd"), "{e}");
    let n1 = std::fs::read_to_string(dir.join("token-n1")).expect("token");
    let reg = json!({"node": "n1", "gpus": 2, "fake": true, "gpu_model": "g".repeat(10_000)});
    let (st, e) = api(&url, &n1, "POST", "/v1/agent/register", Some(&reg));
    assert_eq!(st, 400, "{e}");
    // How a job takes a preemption: bounded, checked, unknown keys refused.
    for (preempt, says) in [
        (json!({"checkpoint": "c".repeat(10_000)}), "longer than 64 bytes"),
        (json!({"checkpoint": "signal:100d"}), "more than the 600 s allowed"),
        (json!({"signal": "KILL\u{1b}[31m"}), "is not one of TERM"),
        (json!({"min_run_ms": -5}), "min_run_ms"),
        (json!({"min_run_ms": i64::MAX}), "min_run_ms"),
        (json!({"grace_ms": 1}), "unknown field"),
    ] {
        let (st, e) =
            api(&url, &alice, "POST", "/v1/jobs", Some(&json!({"gpus": 1, "command": ["true"], "preempt": preempt})));
        assert!(st == 400 || st == 422, "{preempt}: {st} {e}");
        let msg = e["error"].as_str().expect("error");
        assert!(msg.contains(says) && !msg.contains('\u{1b}'), "{preempt}: {e}");
    }
    let (st, e) = api(&url, &alice, "GET", "/v1/history?limit=lots", None);
    assert_eq!(st, 400);
    assert!(e["error"].is_string(), "a bad query string is answered in JSON: {e}");
    assert!(cli_json(&url, &admin, &["history"]).as_array().expect("array").is_empty(), "nothing was stored");
    let nodes = cli_json(&url, &admin, &["nodes"]);
    assert!(nodes[0]["gpu_model"].is_null(), "{nodes}");

    // A name that would forge a history row, and one with an escape sequence.
    let forged = "x\n    99  running    alice      FORGED";
    let a = cli_json(&url, &alice, &["submit", "--name", forged, "--", "true"])["id"].as_u64().expect("id");
    let b = cli_json(&url, &alice, &["submit", "--name", "\u{1b}[31mred", "--", "true"])["id"].as_u64().expect("id");
    for j in [a, b] {
        wait_ended(&url, &alice, j, Duration::from_secs(30));
    }
    for args in [vec!["history"], vec!["explain", &a.to_string()], vec!["explain", &b.to_string()], vec!["audit"]] {
        let mut all = args.clone();
        all.extend(["--server", &url, "--token", &admin]);
        let out = ordo(&all);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(!text.contains('\u{1b}'), "{args:?}: raw escape in output: {text:?}");
        assert!(!text.lines().any(|l| l.contains("FORGED") && !l.contains("\\n")), "{args:?}: forged row:\n{text}");
    }

    // `ordo history --json | head -c 1`: more output than a pipe holds, reader gone after one
    // byte; the CLI ends quietly (no panic, no error message).
    for i in 0..150 {
        let _ = cli_json(&url, &alice, &["submit", "--name", &format!("job{i}"), "--", "true"]);
    }
    wait_for("150 jobs to end", Duration::from_secs(60), || {
        cli_json(&url, &admin, &["history", "--limit", "1000"]).as_array().is_some_and(|a| a.len() >= 152)
    });
    let mut child = Command::new(ORDO)
        .args(["history", "--limit", "1000", "--json", "--server", &url, "--token", &admin])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("history");
    let mut first = [0u8; 1];
    child.stdout.take().expect("stdout").read_exact(&mut first).expect("one byte");
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "{:?}: {err}", out.status);
}

/// J: settings that make no sense are refused; the database is readable by its owner only; a
/// busy port leaves no database behind.
#[test]
fn bad_settings_are_refused_the_database_is_private_and_a_busy_port_creates_nothing() {
    let dir = tempdir("settings");
    let out = ordo(&["server", "--db", dir.join("a.db").to_str().expect("utf-8"), "--policy", "rr:quantum=0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 1ms"), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = dir.join("ordo.toml");
    std::fs::write(&cfg, "max_pending_per_user = 0\n").expect("write");
    let out =
        ordo(&["server", "--config", cfg.to_str().expect("utf-8"), "--db", dir.join("a.db").to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_pending_per_user"));
    assert!(!dir.join("a.db").exists(), "a refused start creates no database");

    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("ordo.db")).expect("db").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the database holds token hashes and every command: owner only");
    let busy = url.trim_start_matches("http://").to_string();
    let other = dir.join("other.db");
    let out = ordo(&["server", "--db", other.to_str().expect("utf-8"), "--listen", &busy]);
    assert!(!out.status.success(), "a second server on a busy port must fail");
    assert!(!other.exists(), "starting on a busy port created {}", other.display());
}

/// `--output PATH` is opened as the job's user, never as the root agent: a file in a directory
/// only root may write is refused (said in the job's output, which `ordo logs` still shows), a
/// file in a directory the user may write is created there, owned by the user.
#[test]
fn submit_output_is_opened_as_the_jobs_user() {
    let account = std::env::var("ORDO_TEST_ACCOUNT").unwrap_or_else(|_| "ordotest".into());
    if !needs(whoami() == "root", "--output as the job's user: needs root (the agent switches accounts only as root)") {
        return;
    }
    let uid_of = Command::new("id").args(["-u", &account]).output().expect("id");
    if !needs(uid_of.status.success(), &format!("--output as the job's user: no Unix account `{account}`")) {
        return;
    }
    let uid: u32 = String::from_utf8_lossy(&uid_of.stdout).trim().parse().expect("uid");
    let dir = tempdir("output-as-user");
    set_mode(&dir, 0o755);
    let shared = dir.join("shared");
    let rootonly = dir.join("rootonly");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::create_dir_all(&rootonly).expect("dir");
    set_mode(&shared, 0o777);
    set_mode(&rootonly, 0o755);
    let db = dir.join("ordo.db");
    let admin = token(&db, "admin", Some("--admin"));
    let user = token(&db, &account, None);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let agent_tok = token(&db, "n1", Some("--agent"));
    let _agent = root_agent(&dir, &url, &agent_tok, &admin, 1);
    let refused_path = rootonly.join("x.txt");
    let ok_path = shared.join("y.txt");
    for (path, allowed) in [(&refused_path, false), (&ok_path, true)] {
        let p = path.display().to_string();
        let id = cli_json(&url, &user, &["submit", "--output", &p, "--", "echo", "hello"])["id"].as_u64().expect("id");
        let j = wait_ended(&url, &user, id, Duration::from_secs(30));
        assert_eq!(j["state"], "completed", "{j}");
        let logs = ordo(&["logs", &id.to_string(), "--server", &url, "--token", &user]);
        let text = String::from_utf8_lossy(&logs.stdout).into_owned();
        assert!(text.contains("hello"), "{text}");
        if allowed {
            wait_for("the file", Duration::from_secs(10), || {
                std::fs::read_to_string(path).is_ok_and(|t| t == "hello\n")
            });
            use std::os::unix::fs::MetadataExt;
            assert_eq!(std::fs::metadata(path).expect("meta").uid(), uid, "created as the job's user");
        } else {
            assert!(text.contains("cannot open it as this job's user") && text.contains("Permission denied"), "{text}");
            assert!(!path.exists(), "nothing created where only root may write");
        }
    }
}

/// Node n1's agent as this (root) process's account, its token from ORDO_TOKEN (which it removes
/// at start), running each job as its submitter's account; returns once it has registered.
fn root_agent(dir: &Path, url: &str, agent_tok: &str, admin: &str, gpus: u32) -> Proc {
    let log = std::fs::File::create(dir.join("agent.log")).expect("log");
    let agent = Proc(
        Command::new(ORDO)
            .args(["agent", "--server", url, "--name", "n1", "--gpus", &gpus.to_string()])
            .arg("--work-dir")
            .arg(dir.join("work"))
            .env("ORDO_TOKEN", agent_tok)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("agent"),
    );
    wait_for("the agent", Duration::from_secs(20), || {
        cli_json(url, admin, &["nodes"]).as_array().is_some_and(|a| !a.is_empty())
    });
    agent
}
