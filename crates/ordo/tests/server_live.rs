//! The live views end to end with real processes on loopback: an agent's fake GPUs report
//! activity from a file, an idle notebook is flagged allocated-but-idle (nodes, explain, audit,
//! webhook), `/metrics` needs a token and carries what the Grafana dashboard reads, and the web
//! dashboard works in a real headless Chromium (log in, a waiting job's reason, the idle GPU
//! flagged, hold and release, escaping, a screenshot).

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod browser;
mod harness;
mod png;

use harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// A webhook receiver on loopback: every POST body, as JSON, arrives on the channel.
fn webhook() -> (String, Receiver<Value>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut r = BufReader::new(s);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let _ = r.get_mut().write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if let Ok(v) = serde_json::from_slice(&body) {
                let _ = tx.send(v);
            }
        }
    });
    (url, rx)
}

fn submit(url: &str, tok: &str, gpus: u32, name: &str, secs: u32) -> u64 {
    let v = cli_json(
        url,
        tok,
        &["submit", "--gpus", &gpus.to_string(), "--time", "10m", "--name", name, "--", "sleep", &secs.to_string()],
    );
    v["id"].as_u64().unwrap()
}

fn gpus_of(url: &str, tok: &str, id: u64) -> Vec<u64> {
    job_state(url, tok, id)["gpu_ids"].as_array().unwrap().iter().map(|g| g.as_u64().unwrap()).collect()
}

fn wait_running(url: &str, tok: &str, ids: &[u64]) {
    for &id in ids {
        wait_for(&format!("job {id} to run"), Duration::from_secs(20), || {
            job_state(url, tok, id)["state"] == "running"
        });
    }
}

/// Writes the activity file: `busy` GPUs at 90% (40 GB), `idle` ones at 1% (1.5 GB).
fn activity(path: &Path, busy: &[u64], idle: &[u64]) {
    let mut t = String::from("# gpu util_pct mem_used_mib power_w\n");
    for g in busy {
        t.push_str(&format!("{g} 90 40000 350\n"));
    }
    for g in idle {
        t.push_str(&format!("{g} 1 1500 70\n"));
    }
    std::fs::write(path, t).unwrap();
}

fn get(url: &str, tok: Option<&str>, path: &str) -> (u16, String) {
    let auth = tok.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw_http(url, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"))
}

/// A cluster of one node `gpu1` (4 fake GPUs whose activity comes from a file), alice's busy job
/// on 2 GPUs and bob's idle notebook on 1, flagged allocated-but-idle after 2 s.
struct Lab {
    dir: std::path::PathBuf,
    url: String,
    admin: String,
    alice: String,
    bob: String,
    busy: u64,
    notebook: u64,
    _procs: Vec<Proc>,
}

fn lab(tag: &str, extra: &[&str]) -> Lab {
    let dir = tempdir(tag);
    let mut flags = vec!["--idle-after", "2s"];
    flags.extend(extra);
    let (srv, url) = server_with(&dir, "127.0.0.1:0", "fifo", &flags);
    let (admin, alice) = tokens(&dir);
    let bob = token(&dir.join("ordo.db"), "bob", None);
    let act = dir.join("activity.txt");
    std::fs::write(&act, "").unwrap();
    let file = format!("file:{}", act.display());
    let agent = agent_with(
        &dir,
        &url,
        "gpu1",
        4,
        &[
            "--gpu-activity",
            &file,
            "--activity-every",
            "1s",
            "--gpu-model",
            "a100",
            "--gpu-mem",
            "80G",
            "--feature",
            "ib",
        ],
    );
    wait_for("node gpu1", Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|n| !n.is_empty())
    });
    let busy = submit(&url, &alice, 2, "train", 300);
    let notebook = submit(&url, &bob, 1, "notebook", 300);
    wait_running(&url, &admin, &[busy, notebook]);
    activity(&act, &gpus_of(&url, &admin, busy), &gpus_of(&url, &admin, notebook));
    Lab { dir, url, admin, alice, bob, busy, notebook, _procs: vec![srv, agent] }
}

fn wait_flagged(l: &Lab) {
    wait_for("the notebook flagged allocated-but-idle", Duration::from_secs(30), || {
        cli_json(&l.url, &l.admin, &["nodes"])[0]["idle_jobs"] == json!([l.notebook])
    });
}

#[test]
fn activity_idle_flag_webhook_and_metrics() {
    let (hook, notices) = webhook();
    let l = lab("live", &["--idle-webhook", &hook]);
    let waiting = submit(&l.url, &l.alice, 4, "big", 1);
    wait_flagged(&l);
    // Everywhere a user looks.
    let nodes = ordo(&["nodes", "--server", &l.url, "--token", &l.alice]);
    let text = String::from_utf8_lossy(&nodes.stdout);
    assert!(text.contains(&format!("job {} is ALLOCATED-BUT-IDLE", l.notebook)), "{text}");
    let explain = ordo(&["explain", &l.notebook.to_string(), "--server", &l.url, "--token", &l.bob]);
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("ALLOCATED-BUT-IDLE") && text.contains("busy 1% (p10 1%"), "{text}");
    let j = job_state(&l.url, &l.admin, l.busy);
    assert_eq!(j["activity"]["mean_busy_pct"], 90.0, "{j}");
    assert_eq!(j["activity"]["peak_mem_mib"], 40000);
    let audit = cli_json(&l.url, &l.admin, &["audit", "--job", &l.notebook.to_string()]);
    let rec = audit.as_array().unwrap().iter().find(|r| r["kind"] == "idle").expect("an idle record");
    assert_eq!(rec["detail"]["event"], "allocated_but_idle");
    // The owner's webhook.
    let n = notices.recv_timeout(Duration::from_secs(20)).expect("a webhook notice");
    assert_eq!(
        (n["event"].as_str(), n["job"].as_u64(), n["user"].as_str()),
        (Some("allocated_but_idle"), Some(l.notebook), Some("bob"))
    );
    assert!(n["text"].as_str().unwrap().contains("of bob holds 1 GPU(s) on gpu1"), "{n}");

    // /metrics: a token unless metrics_public.
    let (st, body) = get(&l.url, None, "/metrics");
    assert_eq!(st, 401, "{body}");
    let (st, resp) = get(&l.url, Some(&l.alice), "/metrics");
    assert_eq!(st, 200, "{resp}");
    assert!(
        resp.contains("Content-Type: text/plain; version=0.0.4")
            || resp.contains("content-type: text/plain; version=0.0.4"),
        "{resp}"
    );
    let busy_gpu = gpus_of(&l.url, &l.admin, l.busy)[0];
    for line in [
        "ordo_gpus_total 4.0".to_string(),
        "ordo_gpus_allocated 3.0".into(),
        "ordo_gpus_allocated_idle 1.0".into(),
        "ordo_jobs_allocated_idle 1.0".into(),
        "ordo_jobs_pending{reason=\"resources\"} 1.0".into(),
        "ordo_running_gpus{user=\"alice\",group=\"alice\"} 2.0".into(),
        "ordo_running_gpus{user=\"bob\",group=\"bob\"} 1.0".into(),
        format!("ordo_gpu_busy_ratio{{node=\"gpu1\",gpu=\"{busy_gpu}\"}} 0.9"),
        "ordo_node_up{node=\"gpu1\"} 1.0".into(),
        "ordo_node_info{node=\"gpu1\",gpu_model=\"a100\",gpu_memory_mib=\"81920\",features=\"ib\",fake=\"true\"} 1.0"
            .into(),
        "ordo_jobs_ended_total{state=\"completed\"} 0".into(),
        "ordo_job_submit_to_start_seconds_count 2".into(),
    ] {
        assert!(resp.lines().any(|x| x == line), "no `{line}` in /metrics:\n{resp}");
    }
    assert!(resp.lines().any(|x| x.starts_with("ordo_scheduling_pass_duration_seconds_count ")), "{resp}");
    // The Grafana dashboard reads only metrics that exist.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana/ordo-dashboard.json"))
            .unwrap(),
    )
    .unwrap();
    let mut names = std::collections::BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let e = t["expr"].as_str().unwrap();
            let found: Vec<String> = e
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("ordo_"))
                .map(String::from)
                .collect();
            assert!(!found.is_empty(), "panel {} reads no ordo metric: {e}", p["title"]);
            names.extend(found);
        }
    }
    for n in &names {
        let present = resp.lines().any(|x| x.starts_with(&format!("{n} ")) || x.starts_with(&format!("{n}{{")));
        assert!(present, "the Grafana dashboard reads {n}, which /metrics does not serve");
    }
    assert!(names.len() >= 12, "{names:?}");

    // The series and shares the dashboard draws.
    // The series takes the state every 10 s: wait for a tick with the node up (the bucket's
    // means may include the tick at start, before the node registered: the shares are exact).
    let mut last = Value::Null;
    wait_for("a tick of the utilisation series with GPUs up", Duration::from_secs(25), || {
        let (_, u) = api(&l.url, &l.alice, "GET", "/v1/utilization?span=1d", None);
        last = u["points"].as_array().unwrap().last().cloned().unwrap_or(Value::Null);
        last["gpus"].as_f64().unwrap_or(0.0) > 0.0
    });
    let share = |k: &str| last[k].as_f64().unwrap() / last["gpus"].as_f64().unwrap();
    assert!((share("allocated") - 0.75).abs() < 1e-9, "3 of 4 GPUs held: {last}");
    assert!((share("busy") - (0.9 + 0.9 + 0.01) / 4.0).abs() < 1e-9, "{last}");
    assert!((share("idle_allocated") - 0.25).abs() < 1e-9, "{last}");
    let (_, us) = api(&l.url, &l.alice, "GET", "/v1/usage?span=1d", None);
    let names: Vec<&str> = us["users"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob"], "alice holds 2 GPUs, bob 1: {us}");
    let (st, _) = api(&l.url, &l.alice, "GET", "/v1/usage?span=99d", None);
    assert_eq!(st, 400);
    // An agent token speaks only for its own node's activity; a user's never.
    let (st, e) = api(&l.url, &l.alice, "POST", "/v1/agent/activity", Some(&json!({"node": "gpu1", "gpus": []})));
    assert_eq!(st, 403, "{e}");

    // Ended, the busy job keeps its figures in history.
    cli_json(&l.url, &l.alice, &["cancel", &l.busy.to_string()]);
    cli_json(&l.url, &l.alice, &["cancel", &waiting.to_string()]);
    wait_ended(&l.url, &l.admin, l.busy, Duration::from_secs(20));
    let out = ordo(&["history", "--server", &l.url, "--token", &l.alice]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|x| x.contains("train") && x.contains("busy 90% (p10 90%, peak 39.1 GiB)")), "{text}");
    let _ = std::fs::remove_dir_all(&l.dir);
}

/// The reclaim rule end to end (`[reclaim]` in the server's config file): bob's idle notebook,
/// flagged after 2 s, is cancelled by the server once the 3 s grace has passed (its agent kills
/// its process; it ends `cancelled`), with an audit record of the evidence and a webhook notice;
/// `explain` says when beforehand; alice's busy job runs on.
#[test]
fn an_idle_job_is_reclaimed_after_its_grace() {
    let (hook, notices) = webhook();
    let cfg_dir = tempdir("reclaim-config");
    let conf = cfg_dir.join("server.toml");
    std::fs::write(&conf, "[reclaim]\naction = \"cancel\"\ngrace = \"3s\"\nexempt_users = [\"carol\"]\n").unwrap();
    let l = lab("reclaim", &["--config", conf.to_str().unwrap(), "--idle-webhook", &hook]);
    wait_flagged(&l);
    let explain = ordo(&["explain", &l.notebook.to_string(), "--server", &l.url, "--token", &l.bob]);
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("RECLAIM: the server's reclaim rule will cancel it at")
            || job_state(&l.url, &l.bob, l.notebook)["cancel_requested"] == true,
        "{text}"
    );
    wait_ended(&l.url, &l.admin, l.notebook, Duration::from_secs(30));
    let j = job_state(&l.url, &l.admin, l.notebook);
    assert_eq!(j["state"], "cancelled", "{j}");
    assert_eq!(job_state(&l.url, &l.admin, l.busy)["state"], "running", "the busy job runs on");
    let audit = cli_json(&l.url, &l.admin, &["audit", "--job", &l.notebook.to_string()]);
    let rec = audit.as_array().unwrap().iter().find(|r| r["kind"] == "reclaim").expect("a reclaim record");
    assert_eq!((rec["actor"].as_str(), rec["detail"]["action"].as_str()), (Some("reclaim"), Some("cancel")), "{rec}");
    assert!(rec["detail"]["samples"].as_u64().unwrap() >= 2 && rec["detail"]["busy_pct"] == 1.0, "{rec}");
    let mut events = vec![];
    while let Ok(n) = notices.recv_timeout(Duration::from_secs(20)) {
        events.push(n["event"].as_str().unwrap_or_default().to_string());
        if n["event"] == "reclaimed" {
            assert_eq!((n["job"].as_u64(), n["user"].as_str()), (Some(l.notebook), Some("bob")), "{n}");
            break;
        }
    }
    assert!(events.contains(&"reclaimed".to_string()), "webhook events: {events:?}");
    cli_json(&l.url, &l.alice, &["cancel", &l.busy.to_string()]);
    let _ = std::fs::remove_dir_all(&l.dir);
    let _ = std::fs::remove_dir_all(&cfg_dir);
}

#[test]
fn metrics_public_and_nvml_without_a_driver() {
    let dir = tempdir("public");
    let (_srv, url) = server_with(&dir, "127.0.0.1:0", "fifo", &["--metrics-public"]);
    let (st, body) = get(&url, None, "/metrics");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("ordo_gpus_total 0.0"), "{body}");
    let (st, _) = get(&url, None, "/v1/jobs");
    assert_eq!(st, 401, "the API still needs a token");
    // An agent asked for NVML activity on a machine without the driver stops at start, saying so.
    if let Err(why) = ordo_server::activity::nvml_available() {
        let tok = secret_file(&dir.join("tok"), "ordo_1_x");
        let out = ordo(&[
            "agent",
            "--server",
            &url,
            "--gpus",
            "2",
            "--gpu-activity",
            "nvml",
            "--token-file",
            tok.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("--gpu-activity nvml: no NVIDIA driver found"), "{err}");
        eprintln!("no NVIDIA driver here ({why}): the agent refuses --gpu-activity nvml, as it should");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counts pixels of one colour (within a few levels) in an RGB(A) screenshot.
fn pixels_of(px: &[u8], bpp: usize, rgb: (u8, u8, u8)) -> usize {
    let near = |a: u8, b: u8| a.abs_diff(b) <= 6;
    px.chunks(bpp).filter(|p| near(p[0], rgb.0) && near(p[1], rgb.1) && near(p[2], rgb.2)).count()
}

#[test]
fn dashboard_in_headless_chromium() {
    let l = lab("dash", &[]);
    // A waiting job, and one whose name is markup.
    let big = submit(&l.url, &l.alice, 4, "big", 1);
    let evil = "<img src=x onerror=\"document.title='pwned'\">";
    let evil_id = submit(&l.url, &l.bob, 4, evil, 1);
    wait_flagged(&l);
    let Some(mut b) = browser::Browser::start(1400, 2000, &l.dir.join("chromium.log")) else { return };
    b.goto(&format!("{}/", l.url));
    // The button is enabled once the script has taken the form.
    b.wait("the login form", "document.querySelector('#login button')?.disabled === false", Duration::from_secs(30));
    // A wrong token is refused, with the server's words.
    b.eval(
        "document.getElementById('token').value = 'ordo_999_nope'; document.querySelector('#login button').click(); 1",
    );
    b.wait(
        "the refusal",
        "document.getElementById('login-error').textContent.includes('refused')",
        Duration::from_secs(10),
    );
    // Log in as alice, typing the token as a user would.
    b.eval("document.getElementById('token').focus(); 1");
    b.call("Input.insertText", json!({"text": l.alice}));
    b.eval("document.querySelector('#login button').click(); 1");
    b.wait("the data", "document.body.dataset.loaded === 'yes'", Duration::from_secs(20));
    assert_eq!(b.eval("document.getElementById('who').textContent"), json!("alice (user)"));
    // The waiting job's reason, in policy order.
    let why = b.eval(&format!("document.querySelector('#queue tr[data-job=\"{big}\"] .why').textContent"));
    assert!(why.as_str().unwrap().contains("not enough free GPUs: needs 4 on one node, 1 free"), "{why}");
    // First in line, expected to start when the running jobs' time limits (10 min) run out.
    let cell = |b: &mut browser::Browser, job: u64, n: u32| {
        b.eval(&format!("document.querySelector('#queue tr[data-job=\"{job}\"] td:nth-child({n})').textContent"))
    };
    assert_eq!(cell(&mut b, big, 1), json!("1"));
    assert_eq!(cell(&mut b, evil_id, 1), json!("2"));
    let start = cell(&mut b, big, 7);
    assert!(start.as_str().unwrap().starts_with("in 9m") || start.as_str().unwrap().starts_with("in 10m"), "{start}");
    // The idle GPU flagged, the busy ones not.
    let nb_gpu = gpus_of(&l.url, &l.admin, l.notebook)[0];
    let cls = |b: &mut browser::Browser, g: u64| {
        b.eval(&format!("document.querySelector('.cell[data-node=\"gpu1\"][data-gpu=\"{g}\"]').className"))
    };
    assert_eq!(cls(&mut b, nb_gpu), json!("cell idle"));
    for g in gpus_of(&l.url, &l.admin, l.busy) {
        assert_eq!(cls(&mut b, g), json!("cell busy"));
    }
    assert_eq!(b.eval(&format!("!!document.querySelector('#idle tr[data-job=\"{}\"]')", l.notebook)), json!(true));
    // The node's GPUs: model, memory, features.
    assert_eq!(
        b.eval("document.querySelector('.node[data-node=\"gpu1\"] .kind').textContent"),
        json!("fake a100 · 80.0 GiB · ib")
    );
    // Markup in a name is shown as text, never run.
    let shown =
        b.eval(&format!("document.querySelector('#queue tr[data-job=\"{evil_id}\"] td:nth-child(4)').textContent"));
    assert_eq!(shown, json!(evil));
    assert_eq!(b.eval("document.querySelectorAll('img').length"), json!(0));
    assert_eq!(b.eval("document.title"), json!("ordo"));
    // The token is in no URL and nowhere in the page.
    let page = b.eval("location.href + document.documentElement.outerHTML");
    assert!(!page.as_str().unwrap().contains(&l.alice), "the token is in the page or its URL");
    // My jobs: alice's only; hold and release her waiting job from the page.
    assert_eq!(b.eval(&format!("!!document.querySelector('#mine tr[data-job=\"{}\"]')", l.notebook)), json!(false));
    b.eval(&format!("document.querySelector('#mine tr[data-job=\"{big}\"] button.hold').click(); 1"));
    wait_for("the hold", Duration::from_secs(10), || job_state(&l.url, &l.admin, big)["held_by"] == "alice");
    b.wait(
        "the release button",
        &format!("!!document.querySelector('#mine tr[data-job=\"{big}\"] button.release')"),
        Duration::from_secs(10),
    );
    b.eval(&format!("document.querySelector('#mine tr[data-job=\"{big}\"] button.release').click(); 1"));
    wait_for("the release", Duration::from_secs(10), || job_state(&l.url, &l.admin, big)["held_by"].is_null());
    // Charts and shares drawn.
    b.wait(
        "the charts",
        "document.querySelectorAll('#chart-day svg circle, #chart-day svg polyline').length >= 2",
        Duration::from_secs(10),
    );
    assert_eq!(b.eval("document.querySelectorAll('#share-users tr').length"), json!(2));
    assert_eq!(b.eval("!!document.querySelector('#chart-2w svg')"), json!(true));
    // The screenshot: 1,400 px wide, the idle GPU red and the busy ones green.
    let shot = b.screenshot();
    // Kept in the repository's target/ for a look (made here: a build elsewhere, with
    // CARGO_TARGET_DIR, leaves none).
    let target = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("dashboard-screenshot.png"), &shot).unwrap();
    let (w, h, bpp, px) = png::png_pixels(&shot);
    assert_eq!(w, 1400);
    assert!(h >= 900, "{h} px tall");
    let idle_red = pixels_of(&px, bpp, (0xc6, 0x28, 0x28));
    let busy_green = pixels_of(&px, bpp, (0x2e, 0x7d, 0x32));
    assert!(idle_red >= 30 * 20, "the idle GPU cell is red: {idle_red} pixels");
    assert!(busy_green >= 2 * 30 * 20, "two busy GPU cells are green: {busy_green} pixels");
    // Cancel from the page.
    b.eval(&format!("document.querySelector('#mine tr[data-job=\"{big}\"] button.cancel').click(); 1"));
    wait_for("the cancel", Duration::from_secs(10), || job_state(&l.url, &l.admin, big)["state"] == "cancelled");
    // Logging out forgets the token.
    b.eval("document.getElementById('logout').click(); 1");
    assert_eq!(b.eval("sessionStorage.getItem('ordo-token')"), Value::Null);
    assert_eq!(b.eval("document.getElementById('app').hidden"), json!(true));
    let _ = std::fs::remove_dir_all(&l.dir);
}
