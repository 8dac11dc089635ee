//! Rate benchmark: `batch run` against the local test server at several configured request
//! rates; prints the rate the server measured after the initial bucket, and its deviation.

use ordo_batch::testserver::{ServerConfig, TestServer};
use ordo_batch::{load_path, Limits, LoadOptions, Prices, RunOptions};
use std::io::Write;

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let dir = std::env::temp_dir().join(format!("ordo-batch-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    println!("{:>12} {:>9} {:>14} {:>10} {:>6}", "configured/s", "requests", "measured/s", "deviation", "429s");
    for rate in [100.0f64, 300.0, 600.0] {
        let n = (rate * 5.0) as usize;
        let path = dir.join(format!("r{rate}.jsonl"));
        let mut f = std::fs::File::create(&path).expect("create");
        for i in 0..n {
            let line = serde_json::json!({"custom_id": format!("c{}-{i}", i % 7), "method": "POST",
                "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini", "max_tokens": 16,
                "messages": [{"role": "user", "content": format!("request {i}")}]}});
            writeln!(f, "{line}").expect("write");
        }
        drop(f);
        let loaded = load_path(&path, &LoadOptions::default()).expect("valid");
        let burst_s = 0.1;
        let limits = Limits::uniform(rate * 60.0, 1e12, burst_s);
        let server = TestServer::start(ServerConfig {
            requests_per_minute: rate * 60.0,
            burst_seconds: burst_s * 2.0,
            ..ServerConfig::default()
        })
        .expect("server");
        let out = dir.join(format!("out{rate}.jsonl"));
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(dir.join(format!("out{rate}.jsonl.progress")));
        let mut opts = RunOptions::new(&server.url, &out);
        opts.quiet = true;
        opts.concurrency = 32;
        let s = ordo_batch::run(&loaded, &limits, &Prices::default(), &opts).expect("run");
        assert_eq!(s.ok, n);
        let c = server.counts();
        let mut t = c.processed_at.clone();
        t.sort_by(f64::total_cmp);
        let burst = (rate * burst_s).max(1.0) as usize;
        let measured = (n - burst) as f64 / (t[n - 1] - t[0]);
        println!(
            "{:>12.0} {:>9} {:>14.1} {:>9.2}% {:>6}",
            rate,
            n,
            measured,
            (measured / rate - 1.0) * 100.0,
            c.limit_429
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
