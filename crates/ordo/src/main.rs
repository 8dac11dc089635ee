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

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
