//! The `ordo` binary: argument parsing and wiring only. Everything it prints is computed by the
//! library crates.

mod batch_cmd;
mod cli;
mod kube_cmd;
mod ops_http;
mod output;
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
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
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
