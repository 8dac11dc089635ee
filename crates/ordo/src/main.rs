//! The `ordo` binary: argument parsing and wiring only. Everything it prints is computed by the
//! library crates.

mod batch_cmd;
mod cli;
mod output;
mod progress;
mod report_cmd;
mod server_cmd;
mod slurm_cmd;
mod trace_cmd;
mod tune_cmd;

use std::process::ExitCode;

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        // A reader that stopped early (`ordo trace convert --out - | head`) is not a failure.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
