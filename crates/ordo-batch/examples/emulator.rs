//! Runs the test server on its own: OpenAI-compatible live endpoints and emulators of OpenAI's
//! and Anthropic's batch APIs on 127.0.0.1, to try `ordo batch` without an account.
//!
//! `cargo run --release -p ordo-batch --features test-server --example emulator -- [PORT] [--fail-every N] [--expire-first N] [--key KEY]`

use ordo_batch::testserver::{ServerConfig, TestServer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = ServerConfig::default();
    let mut port: u16 = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{a}: expected {what}"));
        match a.as_str() {
            "--fail-every" => cfg.batch_fail_every = Some(value("a number")?.parse()?),
            "--expire-first" => cfg.batch_expire_first = value("a number")?.parse()?,
            "--key" => cfg.api_key = Some(value("a key")?),
            "--polls-per-step" => cfg.polls_per_step = value("a number")?.parse()?,
            p => port = p.parse().map_err(|_| format!("unknown argument {p:?}"))?,
        }
    }
    let server = TestServer::start_on(port, cfg)?;
    println!("{}", server.url);
    // Serve until killed.
    loop {
        std::thread::park();
    }
}
