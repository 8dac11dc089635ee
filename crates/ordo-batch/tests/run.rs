//! `batch run` against the real local OpenAI-compatible test server (axum on 127.0.0.1:0):
//! pacing by the server's own count, 429/Retry-After and 500 retries, answers exactly once.

mod common;

use ordo_batch::testserver::{ServerConfig, TestServer};
use ordo_batch::{load_path, Limits, LoadOptions, Prices, RunOptions};
use std::collections::HashSet;
use std::time::Duration;

/// The timing-sensitive tests run one at a time (the machine is small and shared).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn limits(rpm: f64, tpm: f64, burst_s: f64) -> Limits {
    Limits::uniform(rpm, tpm, burst_s)
}

fn output_ids(path: &std::path::Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .expect("output")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("output line is JSON");
            (
                v["custom_id"].as_str().expect("custom_id").to_string(),
                v["response"]["status_code"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The most requests the server processed in any window of `w` seconds.
fn max_in_window(times: &[f64], w: f64) -> usize {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    let (mut best, mut j) = (0, 0);
    for i in 0..t.len() {
        while t[i] - t[j] > w {
            j += 1;
        }
        best = best.max(i - j + 1);
    }
    best
}

#[test]
fn run_keeps_to_the_request_rate_by_the_servers_count() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 400;
    let lines: Vec<String> = (0..n).map(|i| common::chat(["a", "b", "c"][i % 3], i, 10, 20)).collect();
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    // 12,000 requests a minute = 200/s; bucket of 0.1 s = 20 requests.
    let l = limits(12_000.0, 1e9, 0.1);
    // The server enforces the same rate; its bucket is 0.4 s deeper to absorb arrival jitter
    // (a stalled server thread sees requests bunched).
    let server = TestServer::start(ServerConfig {
        requests_per_minute: 12_000.0,
        burst_seconds: 0.5,
        api_key: Some("sk-test-123".into()),
        ..ServerConfig::default()
    })
    .expect("server");
    let mut opts = RunOptions::new(&server.url, &dir.path().join("out.jsonl"));
    opts.api_key = Some(ordo_batch::run::ApiKey::new("sk-test-123"));
    opts.quiet = true;
    opts.concurrency = 16;
    let s = ordo_batch::run(&loaded, &l, &Prices::default(), &opts).expect("run");
    let c = server.counts();
    assert_eq!(c.unauthorized, 0);
    assert_eq!(c.limit_429, 0, "the server never saw its limit exceeded");
    assert_eq!((s.ok, s.failed), (n, 0));
    assert_eq!(c.processed.len(), n);
    assert!(c.processed.values().all(|&k| k == 1));
    // Rate after the initial burst of 20: (n - 20) requests over the span of processing times.
    let mut t = c.processed_at.clone();
    t.sort_by(f64::total_cmp);
    let rate = (n - 20) as f64 / (t[n - 1] - t[0]);
    eprintln!("measured {rate:.1} requests/s against 200/s configured");
    assert!(rate <= 200.0 * 1.10, "too fast: {rate}");
    assert!(rate >= 200.0 * 0.60, "far too slow: {rate}");
    // In any one-second window: at most rate x 1 s + the client's bucket (20), plus 40 for
    // arrival jitter at the server.
    let peak = max_in_window(&c.processed_at, 1.0);
    assert!(peak <= 200 + 20 + 40, "{peak} in one second");
    let out = output_ids(&opts.output);
    assert_eq!(out.len(), n);
    assert!(out.iter().all(|(_, st)| *st == 200));
}

#[test]
fn run_keeps_to_the_token_rate() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 120;
    let lines: Vec<String> = (0..n).map(|i| common::chat("t", i, 40, 100)).collect();
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let per_req: u64 = loaded.requests.iter().map(|r| r.input_tokens + 100).sum::<u64>() / n as u64;
    // Tokens bind: about 100 requests' worth of tokens a second.
    let tpm = per_req as f64 * 100.0 * 60.0;
    let l = limits(1e9, tpm, 0.1);
    let server =
        TestServer::start(ServerConfig { tokens_per_minute: tpm, burst_seconds: 0.2, ..ServerConfig::default() })
            .expect("server");
    let mut opts = RunOptions::new(&server.url, &dir.path().join("out.jsonl"));
    opts.quiet = true;
    let t0 = std::time::Instant::now();
    let s = ordo_batch::run(&loaded, &l, &Prices::default(), &opts).expect("run");
    let took = t0.elapsed().as_secs_f64();
    let c = server.counts();
    assert_eq!(c.limit_429, 0);
    assert_eq!(s.ok, n);
    // About (120 - 10) / 100 = 1.1 s; generous bounds for a shared machine.
    assert!(took >= 0.9, "{took}");
    assert!(took <= 10.0, "{took}");
}

#[test]
fn run_retries_429_with_retry_after_and_500s_answering_each_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 150;
    let lines: Vec<String> = (0..n).map(|i| common::chat("r", i, 5, 10)).collect();
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let server = TestServer::start(ServerConfig {
        fail_500_every: Some(7),
        force_429_every: Some(11),
        retry_after: Duration::from_millis(150),
        ..ServerConfig::default()
    })
    .expect("server");
    let mut opts = RunOptions::new(&server.url, &dir.path().join("out.jsonl"));
    opts.quiet = true;
    opts.backoff_base = Duration::from_millis(20);
    let t0 = std::time::Instant::now();
    let s = ordo_batch::run(&loaded, &limits(1e9, 1e12, 1.0), &Prices::default(), &opts).expect("run");
    let c = server.counts();
    assert!(c.errors_500 > 0 && c.forced_429 > 0);
    assert_eq!(s.retries_429, c.forced_429);
    assert_eq!(s.retries_other, c.errors_500);
    assert_eq!((s.ok, s.failed), (n, 0));
    assert!(c.processed.values().all(|&k| k == 1) && c.processed.len() == n);
    let out = output_ids(&opts.output);
    let ids: HashSet<&str> = out.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!((out.len(), ids.len()), (n, n));
    // Every 429 paused sending for its Retry-After (150 ms).
    assert!(t0.elapsed() >= Duration::from_millis(150));
}

#[test]
fn permanent_errors_are_written_not_retried() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let lines: Vec<String> = (0..3).map(|i| common::chat("k", i, 5, 10)).collect();
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let server =
        TestServer::start(ServerConfig { api_key: Some("right".into()), ..ServerConfig::default() }).expect("server");
    let mut opts = RunOptions::new(&server.url, &dir.path().join("out.jsonl"));
    opts.quiet = true;
    opts.api_key = Some(ordo_batch::run::ApiKey::new("wrong"));
    let s = ordo_batch::run(&loaded, &limits(1e9, 1e12, 1.0), &Prices::default(), &opts).expect("run");
    assert_eq!((s.ok, s.failed, s.attempts), (0, 3, 3));
    assert_eq!(server.counts().unauthorized, 3);
    let text = std::fs::read_to_string(&opts.output).expect("output");
    assert!(text.contains("\"status_code\":401"));
    assert!(!text.contains("wrong"), "the key is never written");
}

#[test]
fn a_model_waiting_for_its_limit_does_not_hold_back_another() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let line = |model: &str, i: usize| {
        serde_json::json!({"custom_id": format!("{model}-{i}"), "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}})
        .to_string()
    };
    // The slow model first in the file: 4 requests at 1 a second; then 60 for a fast model.
    let mut lines: Vec<String> = (0..4).map(|i| line("slow", i)).collect();
    lines.extend((0..60).map(|i| line("fast", i)));
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let mut l = limits(1e9, 1e12, 0.1);
    l.models.insert("slow".into(), ordo_batch::ModelLimits { requests_per_minute: 60.0, tokens_per_minute: 1e12 });
    let server = TestServer::start(ServerConfig::default()).expect("server");
    let mut opts = RunOptions::new(&server.url, &dir.path().join("out.jsonl"));
    opts.quiet = true;
    // Two workers: were they to wait for the slow model's bucket, both would be stuck on it.
    opts.concurrency = 2;
    opts.order = ordo_batch::Order::Input;
    let s = ordo_batch::run(&loaded, &l, &Prices::default(), &opts).expect("run");
    assert_eq!(s.ok, 64);
    // The output is written in answer order: every fast request is answered before the last
    // slow one (which cannot go before 3 s).
    let out = output_ids(&opts.output);
    let last_slow = out.iter().rposition(|(id, _)| id.starts_with("slow")).expect("slow answered");
    let last_fast = out.iter().rposition(|(id, _)| id.starts_with("fast")).expect("fast answered");
    assert!(last_fast < last_slow, "{out:?}");
}
