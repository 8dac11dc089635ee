//! Criterion benchmark: validate, estimate tokens for and plan 1,000,000 requests generated here
//! (50 clients, 3 models, 20 shared system prompts, 10% embeddings), as `ordo batch plan` does.

use criterion::{criterion_group, criterion_main, Criterion};
use ordo_batch::{load_bytes, make_plan, Limits, LoadOptions, PlanOptions, Prices};
use std::fmt::Write;
use std::path::Path;

/// `n` request lines, deterministic.
pub fn generate(n: usize) -> Vec<u8> {
    let systems: Vec<String> = (0..20)
        .map(|k| {
            format!(
                "You are assistant number {k} of a reporting agency. Write a concise weekly summary for the client, \
                 using plain language, at most three bullet points, and one recommendation at the end."
            )
        })
        .collect();
    let models = ["gpt-4o-mini", "gpt-4o", "gpt-4.1-mini"];
    let mut s = String::with_capacity(n * 330);
    for i in 0..n {
        let client = (i * 7919) % 50;
        if i % 10 == 9 {
            let _ = writeln!(
                s,
                r#"{{"custom_id":"c{client}-{i}","method":"POST","url":"/v1/embeddings","body":{{"model":"text-embedding-3-small","input":"product note {i} for client {client}: sales {} units"}}}}"#,
                i % 977
            );
        } else {
            let _ = writeln!(
                s,
                r#"{{"custom_id":"c{client}-{i}","method":"POST","url":"/v1/chat/completions","body":{{"model":"{}","max_tokens":{},"messages":[{{"role":"system","content":"{}"}},{{"role":"user","content":"Week {}: visits {}, sign-ups {}, churn {}%. Summarise."}}]}}}}"#,
                models[i % 3],
                100 + i % 400,
                systems[i % 20],
                i % 52,
                1000 + i % 5000,
                i % 300,
                i % 9
            );
        }
    }
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let data = generate(1_000_000);
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.measurement_time(std::time::Duration::from_secs(20));
    g.bench_function("load_and_plan_1m_requests", |b| {
        b.iter(|| {
            let loaded = load_bytes(Path::new("bench.jsonl"), data.clone(), &LoadOptions::default()).expect("valid");
            let plan = make_plan(&loaded, &Limits::default(), &Prices::default(), &PlanOptions::default());
            assert_eq!(plan.requests, 1_000_000);
            plan
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
