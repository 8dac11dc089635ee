//! Planning and splitting on small crafted files whose numbers are worked out by hand, and the
//! fair order on a file where one client has many requests and another a few.

mod common;

use ordo_batch::config::{BatchLimits, ModelPrice};
use ordo_batch::plan::Route;
use ordo_batch::{load_path, make_plan, Limits, LoadOptions, Order, PlanOptions, Prices};

fn emb(id: &str, n: usize) -> String {
    let ids: Vec<u32> = (0..n as u32).collect();
    serde_json::json!({"custom_id": id, "method": "POST", "url": "/v1/embeddings",
        "body": {"model": "emb-1", "input": ids}})
    .to_string()
}

fn hello(id: &str) -> String {
    serde_json::json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "hello world"}]}})
    .to_string()
}

#[test]
fn plan_groups_and_prices_by_hand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = vec![emb("e-1", 100), hello("c-1"), emb("e-2", 200), emb("e-3", 300), hello("c-2")];
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid file");
    let mut limits = Limits::uniform(60.0, 600.0, 1.0);
    limits.batch.min_requests = 3;
    let mut prices = Prices::default();
    prices.models.insert(
        "emb-1".into(),
        ModelPrice {
            input_per_mtok: 0.1,
            cached_input_per_mtok: None,
            output_per_mtok: 0.0,
            batch_multiplier: 0.5,
            cache_write_input_per_mtok: None,
        },
    );
    prices.models.insert(
        "gpt-4o*".into(),
        ModelPrice {
            input_per_mtok: 2.5,
            cached_input_per_mtok: Some(1.25),
            output_per_mtok: 10.0,
            batch_multiplier: 0.5,
            cache_write_input_per_mtok: None,
        },
    );
    let plan = make_plan(&loaded, &limits, &prices, &PlanOptions::default());
    assert_eq!(plan.groups.len(), 2);
    let e = &plan.groups[0];
    assert_eq!((e.endpoint, e.model.as_str(), e.requests), ("/v1/embeddings", "emb-1", 3));
    // Token-id inputs count exactly: 100 + 200 + 300.
    assert_eq!((e.input_tokens, e.output_tokens, e.cached_tokens), (600, 0, 0));
    assert_eq!(e.route, Route::Batch); // 3 requests >= min_requests
    let ec = e.cost.expect("priced");
    assert!((ec.live - 600.0 * 0.1 / 1e6).abs() < 1e-12);
    assert!((ec.planned - 600.0 * 0.1 / 1e6 * 0.5).abs() < 1e-12);
    // 3 requests at 60/min = 3 s; 600 tokens at 600/min = 60 s: tokens bind.
    assert!((e.live_seconds - 60.0).abs() < 1e-9, "{}", e.live_seconds);

    let c = &plan.groups[1];
    assert_eq!((c.endpoint, c.model.as_str(), c.requests), ("/v1/chat/completions", "gpt-4o", 2));
    // One message: 3 overhead + 3 reply priming + 2 ("hello world") = 8 each.
    assert_eq!((c.input_tokens, c.output_tokens), (16, 20));
    assert_eq!(c.route, Route::Live); // 2 < min_requests
    let cc = c.cost.expect("priced");
    // (16 x 2.5 + 20 x 10) / 1e6 = 240e-6 live; batch at half.
    assert!((cc.live - 240e-6).abs() < 1e-12, "{}", cc.live);
    assert!((cc.batch - 120e-6).abs() < 1e-12);
    assert!((cc.planned - 240e-6).abs() < 1e-12);
    assert!((plan.total_cost.planned - (30e-6 + 240e-6)).abs() < 1e-12);
    // A deadline shorter than the 24 h window rules batch files out.
    let opts = PlanOptions { deadline: Some(ordo_batch::deadline::Deadline::After(3600.0)), ..PlanOptions::default() };
    let p2 = make_plan(&loaded, &limits, &prices, &opts);
    assert!(p2.groups.iter().all(|g| g.route == Route::Live));
    assert_eq!(p2.late_requests, Some(0));
}

#[test]
fn shared_prefix_is_counted_as_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let system = "Rule: report exact numbers from the table. ".repeat(150); // 43 x 150 = 6,450 bytes
    let line = |i: usize| {
        serde_json::json!({"custom_id": format!("p-{i}"), "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o", "max_tokens": 5, "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": format!("week {i}")}]}})
        .to_string()
    };
    let file = common::write(dir.path(), "p.jsonl", &[line(1), line(2), line(3)]);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let prices = Prices::default();
    let cached = ordo_batch::plan::cached_tokens(&loaded.requests, &prices.cache);
    assert_eq!(cached[0], 0, "the first request has nothing to share with");
    // The prompt text is "system\n" + 6,450 bytes + "\n" + "user\n" + "week N" + "\n": 6,470
    // bytes; the shared part ("... week ") is 6,468 bytes, floor(6,468 / 256) = 25 whole blocks
    // = 6,400 bytes; cached tokens
    // are 6,400 x tokens/byte of the request, rounded down to 128s.
    let r = &loaded.requests[1];
    assert_eq!(r.text_bytes, 7 + 6450 + 1 + 5 + 6 + 1);
    let expect = ((6400.0 * r.input_tokens as f64 / r.text_bytes as f64).floor() as u64) / 128 * 128;
    assert!(expect >= 1024);
    assert_eq!(cached[1], expect);
    assert_eq!(cached[2], expect);
}

#[test]
fn split_respects_request_and_byte_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lines = Vec::new();
    for i in 0..25 {
        lines.push(common::chat("a", i, 20, 16));
    }
    for i in 0..5 {
        lines.push(emb(&format!("e-{i}"), 10));
    }
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let max_line = lines.iter().map(|l| l.len() + 1).max().unwrap_or(0) as u64;
    // At most 10 requests, and at most 4 lines' worth of bytes, per file.
    let limits = BatchLimits { max_requests_per_file: 10, max_bytes_per_file: 4 * max_line, ..BatchLimits::default() };
    let out = dir.path().join("out");
    let sum = ordo_batch::split(&loaded, &limits, &out, false).expect("split");
    let mut seen = std::collections::HashSet::new();
    for f in &sum.files {
        let text = std::fs::read_to_string(out.join(&f.file)).expect("read batch file");
        let n = text.lines().count();
        assert_eq!(n, f.requests);
        assert!(
            n as u64 <= 10 && text.len() as u64 <= limits.max_bytes_per_file,
            "{}: {n} lines, {} bytes",
            f.file,
            text.len()
        );
        assert_eq!(text.len() as u64, f.bytes);
        let mut models = std::collections::HashSet::new();
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            assert!(seen.insert(v["custom_id"].as_str().expect("id").to_string()), "written twice");
            models.insert(v["body"]["model"].as_str().expect("model").to_string());
        }
        assert_eq!(models.len(), 1, "one model per file");
    }
    assert_eq!(seen.len(), 30);
    assert!(out.join("manifest.json").exists());
    // Refuses to write over the files unless forced.
    assert!(ordo_batch::split(&loaded, &limits, &out, false).is_err());
    assert!(ordo_batch::split(&loaded, &limits, &out, true).is_ok());
    // With a byte limit below one line: an error naming the line.
    let tiny = BatchLimits { max_bytes_per_file: 50, ..BatchLimits::default() };
    let e = ordo_batch::split(&loaded, &tiny, &dir.path().join("o2"), false).expect_err("too large").to_string();
    assert!(e.contains("r.jsonl:1:") && e.contains("max_bytes_per_file"), "{e}");
}

#[test]
fn plan_on_two_clients_shows_the_fair_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    // "big" has 2,000 requests first in the file, "small" has 10 at the end.
    let mut lines: Vec<String> = (0..2000).map(|i| common::chat("big", i, 30, 50)).collect();
    lines.extend((0..10).map(|i| common::chat("small", i, 30, 50)));
    let file = common::write(dir.path(), "two.jsonl", &lines);
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let limits = Limits::uniform(600.0, 1e9, 1.0);
    let plan = make_plan(&loaded, &limits, &Prices::default(), &PlanOptions::default());
    assert_eq!(plan.order, Order::Fair);
    let small = plan.clients.iter().find(|c| c.client == "small").expect("small client");
    let big = plan.clients.iter().find(|c| c.client == "big").expect("big client");
    assert_eq!((small.requests, big.requests), (10, 2000));
    // In file order "small" waits for all of "big" (2,000 requests at 10/s = 200 s); in the fair
    // order it alternates with "big" and is done within its first ~20 requests.
    assert!(small.done_input_order_s >= 199.0, "{}", small.done_input_order_s);
    assert!(small.done_planned_s <= 2.1, "{}", small.done_planned_s);
    assert!(big.done_planned_s >= 200.0);
    let first: Vec<&str> = plan.order_preview.iter().map(|s| s.split('-').next().unwrap_or("")).collect();
    assert_eq!(&first[..4], &["big", "small", "big", "small"], "{:?}", plan.order_preview);
    let text = plan.to_string();
    assert!(text.contains("small") && text.contains("done (plan)"), "{text}");
}
