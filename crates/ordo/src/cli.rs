//! Command-line definitions (clap) and the wiring of each subcommand.

use crate::output;
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig, SimOutput};
use ordo_trace::{load_path, Format, LoadOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "ordo",
    version,
    about = "Measure, compare and improve the order in which a GPU cluster runs its jobs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Replay one workload under several policies and compare them side by side.
    Compare(CompareArgs),
    /// Replay one workload under one policy; optionally write every job's schedule as CSV.
    Simulate(SimulateArgs),
    /// Time the simulator: median wall time per policy, events per second, peak memory.
    Bench(BenchArgs),
}

/// Where the jobs come from, and the cluster they run on.
#[derive(Args, Debug, Clone)]
pub struct InputArgs {
    /// Built-in generated workload (used when no --trace is given).
    #[arg(long, value_enum, default_value = "backlog")]
    workload: WorkloadArg,
    /// Seed for the built-in workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of jobs in the built-in workload (default: the scenario's own).
    #[arg(long)]
    jobs: Option<usize>,
    /// A trace file to replay instead of a built-in workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Trace format.
    #[arg(long, default_value = "auto")]
    format: Format,
    /// Keep jobs that arrive on or after this day of the trace (days from the trace's time 0).
    #[arg(long)]
    from_day: Option<f64>,
    /// Keep jobs that arrive before this day of the trace.
    #[arg(long)]
    to_day: Option<f64>,
    /// The cluster: COUNTxGPUS groups, e.g. `64x8` or `32x8,16x4`.
    #[arg(long, default_value = "64x8")]
    cluster: String,
    /// How a job's GPUs may be spread over nodes.
    #[arg(long, default_value = "pooled")]
    placement: Placement,
    /// Shuffle the order of jobs submitted at the same instant with this seed (to see how much
    /// a result depends on tie order; by default ties keep the order of the input).
    #[arg(long)]
    shuffle_ties: Option<u64>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum WorkloadArg {
    Online,
    Backlog,
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Comma-separated policies; the first named `fifo` (or else the first) is the baseline.
    #[arg(long, value_delimiter = ',', default_value = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative")]
    policies: Vec<PolicySpec>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct SimulateArgs {
    #[command(flatten)]
    input: InputArgs,
    /// The policy.
    #[arg(long, default_value = "fifo")]
    policy: PolicySpec,
    /// Write every job's submit, start, end, wait and placement to this CSV file.
    #[arg(long)]
    jobs_out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct BenchArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Policies to time.
    #[arg(long, value_delimiter = ',', default_value = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative")]
    policies: Vec<PolicySpec>,
    /// Runs per policy (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A loaded workload with a description of where it came from.
pub struct Input {
    pub workload: Workload,
    pub cluster: ClusterSpec,
    pub placement: Placement,
    pub source: output::InputInfo,
}

fn load_input(a: &InputArgs) -> Result<Input> {
    let cluster = ClusterSpec::parse(&a.cluster).context("--cluster")?;
    let (workload, source) = match &a.trace {
        Some(path) => {
            let opts = LoadOptions { format: a.format, from_day: a.from_day, to_day: a.to_day };
            let t = load_path(path, &opts)?;
            let info = output::InputInfo {
                source: path.display().to_string(),
                format: t.format.to_string(),
                rows: t.rows,
                jobs: t.workload.jobs.len(),
                dropped_zero_duration: t.dropped_zero_duration,
                dropped_outside_window: t.dropped_outside_window,
                from_day: a.from_day,
                to_day: a.to_day,
            };
            (t.workload, info)
        }
        None => {
            if a.from_day.is_some() || a.to_day.is_some() {
                bail!("--from-day/--to-day select part of a trace; give --trace PATH");
            }
            let scenario = match a.workload {
                WorkloadArg::Online => Scenario::Online,
                WorkloadArg::Backlog => Scenario::Backlog,
            };
            let mut p = WorkloadParams::default_for(scenario);
            p.seed = a.seed;
            if let Some(n) = a.jobs {
                p.jobs = n;
            }
            let w = generate(&p, cluster.total_gpus());
            let info = output::InputInfo {
                source: format!("built-in workload `{scenario}` (seed {})", a.seed),
                format: "generated".into(),
                rows: w.jobs.len(),
                jobs: w.jobs.len(),
                dropped_zero_duration: 0,
                dropped_outside_window: 0,
                from_day: None,
                to_day: None,
            };
            (w, info)
        }
    };
    let mut workload = workload;
    if let Some(seed) = a.shuffle_ties {
        ordo_sim::transform::shuffle_ties(&mut workload, seed);
    }
    Ok(Input { workload, cluster, placement: a.placement, source })
}

fn config(input: &Input, policy: PolicySpec) -> SimConfig {
    SimConfig { cluster: input.cluster.clone(), placement: input.placement, policy, check_invariants: false }
}

/// Runs every policy, in parallel over the machine's cores; results come back in input order.
fn run_all(input: &Input, policies: &[PolicySpec]) -> Result<Vec<SimOutput>> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(policies.len().max(1));
    let mut slots: Vec<Option<Result<SimOutput>>> = (0..policies.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        for (t, chunk) in slots.chunks_mut(policies.len().div_ceil(threads).max(1)).enumerate() {
            let base = t * policies.len().div_ceil(threads).max(1);
            s.spawn(move || {
                for (i, slot) in chunk.iter_mut().enumerate() {
                    let p = policies[base + i];
                    *slot = Some(simulate(&input.workload, &config(input, p)).with_context(|| format!("policy {p}")));
                }
            });
        }
    });
    slots.into_iter().map(|s| s.expect("every slot filled")).collect()
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Compare(a) => {
            if a.policies.is_empty() {
                bail!("--policies: give at least one policy");
            }
            let input = load_input(&a.input)?;
            let outs = run_all(&input, &a.policies)?;
            let report = output::Comparison::new(&input.source, &outs);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_table());
            }
        }
        Cmd::Simulate(a) => {
            let input = load_input(&a.input)?;
            let out = simulate(&input.workload, &config(&input, a.policy))?;
            if let Some(path) = &a.jobs_out {
                output::write_jobs_csv(path, &input.workload, &input.cluster, &out)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let report = output::Comparison::new(&input.source, std::slice::from_ref(&out));
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_table());
                if let Some(path) = &a.jobs_out {
                    println!("wrote {} job rows to {}", out.records.len(), path.display());
                }
            }
        }
        Cmd::Bench(a) => {
            let input = load_input(&a.input)?;
            let mut rows = Vec::new();
            for &p in &a.policies {
                let mut times = Vec::with_capacity(a.repeat);
                let mut last = None;
                for _ in 0..a.repeat.max(1) {
                    let t0 = Instant::now();
                    let out = simulate(&input.workload, &config(&input, p))?;
                    times.push(t0.elapsed().as_secs_f64());
                    last = Some(out);
                }
                let out = last.expect("at least one run");
                rows.push(output::BenchRow::new(p, &times, &out));
            }
            let b = output::Bench { input: input.source, rows, peak_rss_mib: output::peak_rss_mib() };
            if a.json {
                println!("{}", serde_json::to_string_pretty(&b)?);
            } else {
                print!("{}", b.render_table());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
