//! `batch run` in time, with a controllable clock ([`TestClock`]: real speed, but a closed
//! window is jumped over instead of waited for): sends only inside the daily window, pausing
//! across days; earliest deadline first, with the late requests named before sending; and a
//! client stopped at its `--max-cost`, also across a resumed run.

mod common;

use jiff::Timestamp;
use ordo_batch::budget::Budget;
use ordo_batch::clock::TestClock;
use ordo_batch::deadline::Deadline;
use ordo_batch::run::{preview, RunOptions};
use ordo_batch::testserver::{ServerConfig, TestServer};
use ordo_batch::window::Window;
use ordo_batch::{load_path, Limits, LoadOptions, ModelPrice, Prices};
use std::path::Path;
use std::sync::Arc;

/// The timing-sensitive tests run one at a time (the machine is small and shared).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// `(custom_id, at)` of the progress file, in the order they were taken.
fn sends(progress: &Path) -> Vec<(String, Timestamp)> {
    std::fs::read_to_string(progress)
        .expect("progress")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            (v["sent"].as_str().expect("sent").to_string(), ts(v["at"].as_str().expect("at")))
        })
        .collect()
}

fn opts(server: &TestServer, dir: &Path, start: Timestamp) -> RunOptions {
    let mut o = RunOptions::new(&server.url, &dir.join("out.jsonl"));
    o.quiet = true;
    o.clock = Arc::new(TestClock::new(start));
    o
}

#[test]
fn window_pacing_sends_only_inside_the_window_and_pauses_across_days() {
    let _s = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 70;
    let lines: Vec<String> = (0..n).map(|i| common::chat(["a", "b"][i % 2], i, 6, 10)).collect();
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let server = TestServer::start(ServerConfig::default()).expect("server");
    // One second a day, 22:00:00-22:00:01 in Bucharest (UTC+2 in January); 30 requests a second.
    let window = Window::parse("22:00:00-22:00:01", Some("Europe/Bucharest")).expect("window");
    let limits = Limits::uniform(1800.0, 1e9, 0.1);
    // The clock starts 2 s before the first window opens.
    let mut o = opts(&server, dir.path(), ts("2025-01-15T19:59:58Z"));
    o.window = Some(window.clone());
    o.concurrency = 4;
    let p = preview(&loaded, &limits, &o).expect("preview");
    assert_eq!(p.first_send, "2025-01-15T20:00:00Z");
    assert!(
        p.last_send.starts_with("2025-01-17T20:00:00"),
        "70 requests at 30/s take three one-second windows: {}",
        p.last_send
    );
    let s = ordo_batch::run(&loaded, &limits, &Prices::default(), &o).expect("run");
    assert_eq!((s.ok, s.failed), (n, 0));
    let sent = sends(&o.progress);
    assert_eq!(sent.len(), n);
    for (id, at) in &sent {
        assert!(window.is_open(*at), "{id} sent at {at}, outside the window");
    }
    let days: std::collections::BTreeSet<i8> =
        sent.iter().map(|(_, at)| window.tz().to_datetime(*at).date().day()).collect();
    assert_eq!(
        days.into_iter().collect::<Vec<_>>(),
        vec![15, 16, 17],
        "paused after each window, resumed the next day"
    );
    assert_eq!(server.counts().processed.len(), n);
}

#[test]
fn deadlines_go_earliest_first_and_the_late_ones_are_named_before_sending() {
    let _s = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let start = ts("2025-01-15T10:00:00Z");
    // 12 requests. Deadlines in reverse file order (r-0 last), except r-9, r-10, r-11: all due
    // 0.25 s after the start, and r-3 with none (default: --deadline 1h).
    let mut lines = Vec::new();
    for i in 0..12 {
        let due =
            if i >= 9 { "2025-01-15T10:00:00.25Z".to_string() } else { format!("2025-01-15T10:00:{:02}Z", 30 - i) };
        let mut v: serde_json::Value = serde_json::from_str(&common::chat("c", i, 4, 10)).expect("json");
        v["custom_id"] = format!("r-{i}").into();
        if i != 3 {
            v["body"]["metadata"] = serde_json::json!({"deadline": due});
        }
        lines.push(v.to_string());
    }
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let server = TestServer::start(ServerConfig::default()).expect("server");
    // 10 requests a second; bucket one request deep: the fluid model sends request k at k/10 s.
    let limits = Limits::uniform(600.0, 1e9, 0.1);
    let mut o = opts(&server, dir.path(), start);
    o.concurrency = 1;
    o.default_deadline = Some(Deadline::After(3600.0));
    o.order = ordo_batch::Order::Input;
    // EDF: r-9, r-10, r-11 (0.25 s; file order breaks the tie) at 0, 0.1, 0.2 s: all in time...
    // then r-8 (22 s), r-7 ... r-0 (30 s), r-3 (1 h) last. Make three of them late: due at 0.15 s.
    let p = preview(&loaded, &limits, &o).expect("preview");
    assert!(p.late.is_empty(), "{:?}", p.late);
    let mut lines2 = lines.clone();
    for l in lines2.iter_mut().skip(9) {
        *l = l.replace("10:00:00.25Z", "10:00:00.15Z");
    }
    let file = common::write(dir.path(), "r.jsonl", &lines2);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let p = preview(&loaded, &limits, &o).expect("preview");
    // Sent at 0, 0.1 and 0.2 s: r-11 (0.2 s) misses 0.15 s by 0.05 s.
    let late: Vec<&str> = p.late.iter().map(|l| l.custom_id.as_str()).collect();
    assert_eq!(late, vec!["r-11"]);
    // (The test clock runs at real speed: the prediction starts a little after `start`.)
    assert!(p.late[0].late_s >= 0.05 - 1e-9 && p.late[0].late_s < 0.5, "{:?}", p.late);
    let s = ordo_batch::run(&loaded, &limits, &Prices::default(), &o).expect("run");
    assert_eq!(s.late.len(), 1, "the run reports the same");
    let order: Vec<String> = sends(&o.progress).into_iter().map(|x| x.0).collect();
    let want: Vec<String> = ["r-9", "r-10", "r-11", "r-8", "r-7", "r-6", "r-5", "r-4", "r-2", "r-1", "r-0", "r-3"]
        .iter()
        .map(|x| x.to_string())
        .collect();
    assert_eq!(order, want, "earliest deadline first");
}

#[test]
fn max_cost_stops_a_client_before_it_overspends_also_across_runs() {
    let _s = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // 8 identical requests per client: same tokens each.
    let mut lines = Vec::new();
    for c in ["acme", "globex"] {
        for i in 0..8 {
            lines.push(serde_json::json!({"custom_id": format!("{c}-{i}"), "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "Summarise the week."}]}})
            .to_string());
        }
    }
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let input = loaded.requests[0].input_tokens as f64;
    // One currency unit per token: a request costs at most input + 20, and the server answers
    // 5 tokens, so it costs input + 5.
    let mut prices = Prices::default();
    prices.models.insert(
        "m".into(),
        ModelPrice {
            input_per_mtok: 1e6,
            cached_input_per_mtok: None,
            output_per_mtok: 1e6,
            batch_multiplier: 0.5,
            cache_write_input_per_mtok: None,
        },
    );
    let server = TestServer::start(ServerConfig::default()).expect("server");
    let mut o = opts(&server, dir.path(), ts("2025-01-15T10:00:00Z"));
    o.concurrency = 1;
    // acme may spend 3 answers and the most the 4th could cost: exactly 4 requests go.
    let limit = 3.0 * (input + 5.0) + (input + 20.0);
    o.budget = Budget::parse(&[format!("acme={limit}")]).expect("budget");
    let limits = Limits::uniform(1e6, 1e9, 1.0);
    let s = ordo_batch::run(&loaded, &limits, &prices, &o).expect("run");
    let sent = |c: &str| server.counts().processed.keys().filter(|k| k.starts_with(c)).count();
    assert_eq!((sent("acme"), sent("globex")), (4, 8));
    assert_eq!(s.over_budget.len(), 1);
    let ob = &s.over_budget[0];
    assert_eq!((ob.client.as_str(), ob.not_sent), ("acme", 4));
    assert!((ob.spent - 4.0 * (input + 5.0)).abs() < 1e-9, "{ob:?}");
    // Resumed with the same limit: the spend of the first run counts, nothing more goes.
    let s = ordo_batch::run(&loaded, &limits, &prices, &o).expect("resume");
    assert_eq!((sent("acme"), s.over_budget[0].not_sent), (4, 4));
    // A higher limit lets exactly two more go.
    o.budget = Budget::parse(&[format!("acme={}", limit + 2.0 * (input + 5.0))]).expect("budget");
    ordo_batch::run(&loaded, &limits, &prices, &o).expect("resume");
    assert_eq!(sent("acme"), 6);
    // Without prices a limited client cannot be guarded: refused before anything is sent.
    let e = ordo_batch::run(&loaded, &limits, &Prices::default(), &o).expect_err("no price").to_string();
    assert!(e.contains("--max-cost") && e.contains("no price"), "{e}");
}
