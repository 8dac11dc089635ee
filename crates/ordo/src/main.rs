//! The `ordo` binary: argument parsing and wiring only. Everything it prints is computed by the
//! library crates.

mod batch_cmd;
mod cli;
mod kube_cmd;
mod ops_http;
mod output;
mod periods_cmd;
mod progress;
mod report_cmd;
mod server_cmd;
mod slurm_cmd;
mod trace_cmd;
mod tune_cmd;

use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    match cli::run() {
        Ok(code) => code,
        // A reader that stopped early (`ordo trace convert --out - | head`) is not a failure.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes, `: `-separated, leaving out a cause whose text the message already
/// holds (errors that print their source in their own message, `"database {what}: {source}"`,
/// would otherwise repeat it once per level).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

/// Whether an error is a write to a pipe whose reader has gone (`ordo history | head -1`).
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// A closed pipe ends any command quietly, as with every Unix tool. Rust ignores SIGPIPE, so
/// `println!` on a closed pipe panics ("failed printing to stdout: Broken pipe"); resetting the
/// signal would need `unsafe` (forbidden here) and would also kill the server and agent on a
/// closed socket or job pipe. So a panic of exactly that kind ends the process quietly with
/// success, and every other panic is reported as usual.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
