//! The `ordo` binary: argument parsing and wiring only. Everything it prints is computed by the
//! library crates.

mod cli;
mod output;

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
