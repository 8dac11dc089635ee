//! Loads a trace and prints what was read and how long it took.
//!
//! `cargo run --release -p ordo-trace --example trace_stats -- PATH [FORMAT] [FROM_DAY] [TO_DAY]`

use ordo_trace::{load_path, Format, LoadOptions};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: trace_stats PATH [FORMAT] [FROM_DAY] [TO_DAY]");
        return ExitCode::from(2);
    };
    let format = match args.get(1).map(|s| s.parse::<Format>()).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let day = |i: usize| args.get(i).and_then(|s| s.parse::<f64>().ok());
    let opts = LoadOptions::new(format).with_window(day(2), day(3));
    let start = Instant::now();
    match load_path(path.as_ref(), &opts) {
        Ok(t) => {
            let took = start.elapsed();
            println!(
                "{}: format {}, {} rows, {} jobs, {} dropped (zero duration), {} dropped (outside window), loaded in {:.1} ms",
                t.source,
                t.format,
                t.rows,
                t.workload.jobs.len(),
                t.dropped_zero_duration,
                t.dropped_outside_window,
                took.as_secs_f64() * 1e3
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
