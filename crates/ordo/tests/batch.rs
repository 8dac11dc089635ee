//! `ordo batch` end to end: the real `ordo` binary against the local OpenAI-compatible test
//! server. A run killed with SIGKILL half-way resumes without sending any custom_id twice.

use ordo_batch::testserver::{ServerConfig, TestServer};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "sk-ordo-test-5f3a";

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-batch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn chat(client: &str, i: usize) -> String {
    serde_json::json!({"custom_id": format!("{client}-{i}"), "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "max_tokens": 20,
                 "messages": [{"role": "user", "content": format!("Report {i} for {client}: numbers {}", i * 7)}]}})
    .to_string()
}

fn ordo() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ordo"));
    c.env("ORDO_API_KEY", KEY);
    c
}

fn output_ids(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("complete JSON output line");
            v["custom_id"].as_str().expect("custom_id").to_string()
        })
        .collect()
}

#[test]
fn malformed_line_gives_its_number_and_nothing_is_sent() {
    let dir = tmpdir("bad");
    let server = TestServer::start(ServerConfig::default()).expect("server");
    let mut lines: Vec<String> = (0..5).map(|i| chat("a", i)).collect();
    lines[2] =
        r#"{"custom_id": "a-2", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini"}"#
            .into();
    let file = dir.join("r.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let out = ordo()
        .args(["batch", "run"])
        .arg(&file)
        .args(["--endpoint", &server.url, "--quiet"])
        .output()
        .expect("run ordo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("r.jsonl:3:") && err.contains("not valid JSON"), "{err}");
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(server.counts().received.is_empty(), "nothing may be sent");
    // A missing field is named.
    lines[2] =
        r#"{"custom_id": "a-2", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini"}}"#
            .into();
    std::fs::write(&file, lines.join("\n")).expect("write");
    let out = ordo().args(["batch", "plan"]).arg(&file).output().expect("run ordo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("r.jsonl:3: field `body.messages`: missing"), "{err}");
    // --skip-bad sends the other four.
    let out = ordo()
        .args(["batch", "run"])
        .arg(&file)
        .args(["--endpoint", &server.url, "--quiet", "--skip-bad"])
        .output()
        .expect("run ordo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.counts().processed.len(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_shows_the_fair_order_for_two_clients() {
    let dir = tmpdir("plan");
    let mut lines: Vec<String> = (0..300).map(|i| chat("big", i)).collect();
    lines.extend((0..5).map(|i| chat("small", i)));
    let file = dir.join("r.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let out = ordo().args(["batch", "plan", "--json"]).arg(&file).output().expect("run ordo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let order: Vec<&str> = v["order_preview"].as_array().expect("preview").iter().filter_map(|x| x.as_str()).collect();
    assert_eq!(&order[..4], &["big-0", "small-0", "big-1", "small-1"], "{order:?}");
    let small = v["clients"].as_array().expect("clients").iter().find(|c| c["client"] == "small").expect("small");
    assert!(small["done_planned_s"].as_f64() < small["done_input_order_s"].as_f64());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_2000_killed_half_way_resumes_without_sending_any_request_twice() {
    let dir = tmpdir("kill");
    let n = 2000;
    let lines: Vec<String> = (0..n).map(|i| chat(["acme", "globex", "initech"][i % 3], i)).collect();
    let file = dir.join("r.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    // Limits: 24,000 requests a minute (400/s), bucket 0.1 s; the server enforces the same rate
    // with 0.4 s more bucket for arrival jitter, and checks the key.
    std::fs::write(
        dir.join("limits.toml"),
        "[default]\nrequests_per_minute = 24000\ntokens_per_minute = 100000000\n[run]\nburst_seconds = 0.1\n",
    )
    .expect("limits");
    let server = TestServer::start(ServerConfig {
        requests_per_minute: 24_000.0,
        tokens_per_minute: 1e8,
        burst_seconds: 0.5,
        api_key: Some(KEY.into()),
        latency: Duration::from_millis(5),
        ..ServerConfig::default()
    })
    .expect("server");
    let out = dir.join("out.jsonl");
    let args = |extra: &[&str]| {
        let mut c = ordo();
        c.args(["batch", "run"]).arg(&file).args(["--endpoint", &server.url, "--concurrency", "16", "--quiet"]);
        c.arg("--limits").arg(dir.join("limits.toml")).arg("--output").arg(&out).args(extra);
        c
    };
    // 1. Start, and kill -9 once about a third has been answered.
    let mut child = args(&[]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn ordo");
    let t0 = Instant::now();
    while server.counts().processed.len() < 700 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the first run made no progress");
        if let Ok(Some(st)) = child.try_wait() {
            panic!("ordo exited early: {st}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let at_kill = server.counts().processed.len();
    assert!(at_kill < n, "killed before the end");
    std::thread::sleep(Duration::from_millis(300)); // let in-flight requests land at the server
                                                    // 2. Resume.
    let res = args(&["--json"]).output().expect("rerun");
    assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&res.stdout).expect("summary json");
    let unknown: HashSet<String> = summary["unknown_skipped"]
        .as_array()
        .expect("unknown list")
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect();
    let c = server.counts();
    assert_eq!(c.unauthorized, 0);
    assert_eq!(c.limit_429, 0, "the server's own count: limits never exceeded");
    // No custom_id reached the server twice.
    let twice: Vec<(&String, &u64)> = c.received.iter().filter(|(_, &k)| k > 1).collect();
    assert!(twice.is_empty(), "sent twice: {twice:?}");
    // Every id is in the output exactly once, except those in flight at the kill (reported).
    let ids = output_ids(&out);
    let mut count: HashMap<&str, usize> = HashMap::new();
    for i in &ids {
        *count.entry(i).or_default() += 1;
    }
    assert!(count.values().all(|&k| k == 1), "an id answered twice in the output");
    assert!(unknown.len() <= 16, "at most --concurrency requests can be in flight: {}", unknown.len());
    assert_eq!(ids.len() + unknown.len(), n);
    assert!(unknown.iter().all(|u| !count.contains_key(u.as_str())));
    eprintln!("killed at {at_kill} answered; {} in flight (outcome unknown, not resent)", unknown.len());
    let stderr = String::from_utf8_lossy(&res.stderr);
    if !unknown.is_empty() {
        assert!(stderr.contains("--resend-unknown"), "{stderr}");
    }
    assert!(!stderr.contains(KEY) && !String::from_utf8_lossy(&res.stdout).contains(KEY), "the key is never printed");
    // 3. --resend-unknown completes the file (at-least-once for those only).
    let res = args(&["--resend-unknown"]).output().expect("third run");
    assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
    let ids = output_ids(&out);
    let set: HashSet<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!((ids.len(), set.len()), (n, n), "every custom_id answered exactly once");
    let c = server.counts();
    for (id, k) in &c.received {
        assert!(*k == 1 || unknown.contains(id), "{id} sent {k} times");
    }
    assert_eq!(c.limit_429, 0);
    let progress = std::fs::read_to_string(dir.join("out.jsonl.progress")).expect("progress file");
    assert!(progress.lines().count() >= n);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_names_late_requests_up_front_and_stops_a_client_at_its_max_cost() {
    let dir = tmpdir("when");
    let lines: Vec<String> = (0..12).map(|i| chat(["acme", "globex"][i % 2], i)).collect();
    let file = dir.join("r.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    // 60 requests a minute: one a second; a 3 s deadline leaves most late.
    std::fs::write(
        dir.join("limits.toml"),
        "[default]\nrequests_per_minute = 60\ntokens_per_minute = 1000000\n[run]\nburst_seconds = 1\n",
    )
    .expect("limits");
    std::fs::write(
        dir.join("prices.toml"),
        "currency = \"EUR\"\n[models.\"gpt-4o-mini\"]\ninput_per_mtok = 1000000\noutput_per_mtok = 1000000\n",
    )
    .expect("prices");
    // A window open from an hour ago to two hours from now (UTC).
    let hour = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() / 3600 % 24;
    let window = format!("{:02}:00-{:02}:00", (hour + 23) % 24, (hour + 2) % 24);
    let out = ordo()
        .args(["batch", "plan"])
        .arg(&file)
        .arg("--limits")
        .arg(dir.join("limits.toml"))
        .args(["--deadline", "3s", "--window", &window, "--tz", "UTC"])
        .output()
        .expect("run ordo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("deadlines: earliest first; 8 requests cannot be sent before their deadline"), "{text}");
    assert!(text.contains(&format!("window: live calls only {window} UTC")), "{text}");
    // --tz needs --window.
    let out = ordo().args(["batch", "plan"]).arg(&file).args(["--tz", "UTC"]).output().expect("run ordo");
    assert_eq!(out.status.code(), Some(2));
    // acme may spend about two requests' worth (tokens priced at 1 EUR each).
    let server =
        TestServer::start(ServerConfig { api_key: Some(KEY.into()), ..ServerConfig::default() }).expect("server");
    let out = ordo()
        .args(["batch", "run"])
        .arg(&file)
        .args(["--endpoint", &server.url, "--quiet", "--concurrency", "1", "--max-cost", "acme=60"])
        .arg("--prices")
        .arg(dir.join("prices.toml"))
        .output()
        .expect("run ordo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("max-cost: acme stopped at") && err.contains("EUR"), "{err}");
    let c = server.counts();
    let acme = c.processed.keys().filter(|k| k.starts_with("acme")).count();
    assert!((1..6).contains(&acme), "acme sent {acme}");
    assert_eq!(c.processed.keys().filter(|k| k.starts_with("globex")).count(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_writes_html_markdown_and_json_with_the_same_numbers() {
    let dir = tmpdir("report");
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/batch");
    let mut texts = Vec::new();
    for ext in ["html", "md", "json"] {
        let out = dir.join(format!("report.{ext}"));
        let res = ordo()
            .args(["batch", "report"])
            .arg(ex.join("requests.jsonl"))
            .arg("--limits")
            .arg(ex.join("limits.toml"))
            .arg("--prices")
            .arg(ex.join("prices.toml"))
            .arg("--out")
            .arg(&out)
            .output()
            .expect("run ordo");
        let stdout = String::from_utf8_lossy(&res.stdout);
        assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
        assert!(stdout.contains("Planned 0.0014 USD") && stdout.contains("(-60.5%)"), "{stdout}");
        texts.push(std::fs::read_to_string(&out).expect("report written"));
    }
    assert!(texts[0].starts_with("<!DOCTYPE html>") && texts[0].contains("<svg"));
    assert!(texts[1].starts_with("# ordo batch report") && texts[1].contains("| acme | gpt-4o-mini | batch | 8 |"));
    let v: serde_json::Value = serde_json::from_str(&texts[2]).expect("json");
    let planned = v["total"]["planned"].as_f64().expect("number");
    assert!(
        texts[0].contains(&format!("data-key=\"total.planned\" data-value=\"{planned}\"")),
        "the HTML shows the JSON's number"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
