//! `ordo batch report` on a file whose costs are worked out by hand: per client live, batch,
//! planned; the actual cost of a results file from its usage, beside the estimate; every
//! number in the HTML is the JSON's.

use ordo_batch::plan::{make_plan, PlanOptions, Route};
use ordo_batch::report::{BatchReport, Results};
use ordo_batch::{load_path, Limits, LoadOptions, ModelPrice, Prices};
use serde_json::{json, Value};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn costs_per_client_and_actual_cost_by_hand() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Token-id prompts count exactly and have no text (no prefix cache).
    let line = |id: &str, n: usize, max: u64| {
        json!({"custom_id": id, "method": "POST", "url": "/v1/completions",
               "body": {"model": "m", "max_tokens": max, "prompt": vec![7; n]}})
        .to_string()
    };
    let lines = [line("a-1", 100, 50), line("a-2", 100, 50), line("b-1", 1000, 10), line("a-3", 100, 50)];
    let file = dir.path().join("r.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let mut limits = Limits::default();
    limits.batch.min_requests = 3;
    let mut prices = Prices { currency: "EUR".into(), ..Prices::default() };
    prices.models.insert(
        "m".into(),
        ModelPrice {
            input_per_mtok: 2.0,
            cached_input_per_mtok: None,
            output_per_mtok: 8.0,
            batch_multiplier: 0.5,
            cache_write_input_per_mtok: None,
        },
    );
    let plan = make_plan(&loaded, &limits, &prices, &PlanOptions::default());
    // A results file as `ordo batch fetch` writes it: a-1 answered with 20 output tokens, b-1
    // failed, a-2 answered reporting 60 of its prompt tokens cached.
    let results = dir.path().join("results.jsonl");
    let ok = |id: &str, prompt: u64, cached: u64, out: u64| {
        json!({"id": null, "custom_id": id, "error": null, "response": {"status_code": 200, "request_id": null,
               "body": {"usage": {"prompt_tokens": prompt, "completion_tokens": out, "prompt_tokens_details": {"cached_tokens": cached}}}}})
        .to_string()
    };
    let failed = json!({"custom_id": "b-1", "response": null, "error": {"code": "batch_expired", "message": "late"}})
        .to_string();
    std::fs::write(&results, [ok("a-1", 100, 0, 20), failed, ok("a-2", 100, 60, 50)].join("\n")).expect("write");
    let r = BatchReport::build(
        "t",
        &loaded,
        &plan,
        &prices,
        256,
        &[Results { path: results.clone(), route: Route::Batch }],
    )
    .expect("report");

    // a: 3 x (100 x 2 + 50 x 8) / 1e6 = 1800e-6 live, half by batch; b: (1000 x 2 + 10 x 8) / 1e6.
    let a = &r.by_client[0];
    let b = &r.by_client[1];
    assert_eq!((a.client.as_str(), a.requests, b.client.as_str(), b.requests), ("a", 3, "b", 1));
    let (ac, bc) = (a.cost.expect("priced"), b.cost.expect("priced"));
    assert!(close(ac.live, 1800e-6) && close(ac.batch, 900e-6) && close(ac.planned, 900e-6), "{ac:?}");
    assert!(close(bc.live, 2080e-6) && close(bc.batch, 1040e-6), "{bc:?}");
    assert!(close(r.total.planned, 1940e-6));
    assert_eq!(a.route, Route::Batch, "4 requests >= min_requests 3");
    // Actual, batch price: a-1 (100 x 2 + 20 x 8) x 0.5 = 180e-6; a-2 (40 x 2 + 60 x 2 + 50 x 8)
    // x 0.5 = 300e-6 (no cached price given: cached tokens at the input price). Estimate: 300e-6 each.
    assert_eq!(r.actual.len(), 1);
    let x = &r.actual[0];
    assert_eq!((x.client.as_str(), x.answered, x.usage.input, x.usage.cached, x.usage.output), ("a", 2, 140, 60, 70));
    assert!(close(x.actual, 480e-6) && close(x.estimate, 600e-6), "{x:?}");
    assert!(r.headline.contains("Actual for 2 answered requests"), "{}", r.headline);

    // Every number the HTML shows carries its JSON path and the JSON's value.
    let html = r.page().html().expect("html");
    let json: Value = serde_json::to_value(&r).expect("json");
    let mut checked = 0;
    for part in html.split("data-key=\"").skip(1) {
        let key = &part[..part.find('"').expect("key end")];
        let rest = &part[part.find("data-value=\"").expect("value") + 12..];
        let value: f64 = rest[..rest.find('"').expect("value end")].parse().expect("number");
        let mut v = &json;
        for k in key.split('.') {
            v = match k.parse::<usize>() {
                Ok(i) if v.is_array() => &v[i],
                _ => &v[k],
            };
        }
        let want = v.as_f64().unwrap_or_else(|| panic!("{key} is not a number in the JSON"));
        assert!(close(want, value), "{key}: HTML {value}, JSON {want}");
        checked += 1;
    }
    assert!(checked > 40, "{checked} numbers checked");
    let md = r.page().markdown();
    assert!(md.contains("| a | m | batch | 3 |") && md.contains("Actual cost from the providers' usage"), "{md}");
}

#[test]
fn a_results_file_of_another_input_is_refused_by_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("r.jsonl");
    std::fs::write(
        &file,
        r#"{"custom_id":"a-1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}"#,
    )
    .expect("write");
    let loaded = load_path(&file, &LoadOptions::default()).expect("valid");
    let plan = make_plan(&loaded, &Limits::default(), &Prices::default(), &PlanOptions::default());
    let results = dir.path().join("out.jsonl");
    std::fs::write(&results, "{\"custom_id\":\"a-1\",\"error\":null}\n{\"custom_id\":\"zz-9\",\"error\":null}\n")
        .expect("write");
    let e = BatchReport::build(
        "t",
        &loaded,
        &plan,
        &Prices::default(),
        256,
        &[Results { path: results, route: Route::Live }],
    )
    .expect_err("refused")
    .to_string();
    assert!(e.contains("out.jsonl:2: custom_id \"zz-9\" is not a request of"), "{e}");
}
