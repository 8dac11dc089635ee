//! `ordo report`: replays one workload under several policies and writes the report of
//! crates/ordo-report as HTML (self-contained), Markdown or JSON, with cost and equivalent GPUs.

use crate::cli::{
    load_input_placements, policies_for, run_all, run_config, runs_of, with_as_run, InputArgs, Keep, PolicyList,
    DEFAULT_POLICIES,
};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ordo_report::{render, OwnerBy, Price, Report, ReportOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `ordo report` arguments.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Where to write the report (`-`: standard output).
    #[arg(long)]
    out: PathBuf,
    /// Comma-separated policies; the first named `fifo` (or else the first) is the baseline.
    #[arg(long, default_value = DEFAULT_POLICIES)]
    policies: PolicyList,
    /// Output format (`--format` names the trace format); default: from the --out extension
    /// (`.md`, `.json`), else html.
    #[arg(long, value_enum)]
    out_format: Option<OutFormat>,
    /// Price of one GPU-hour, to put idle capacity in money (with --currency).
    #[arg(long)]
    gpu_hour_price: Option<f64>,
    /// Three-letter currency code for --gpu-hour-price (EUR, USD, CHF, ...).
    #[arg(long)]
    currency: Option<String>,
    /// Share and slowdown per user or per group (default: user, or group when the workload has a
    /// single user and several groups, as the Philly trace).
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Users or groups shown by name (the rest are summed as "(others)").
    #[arg(long, default_value_t = 8)]
    top: usize,
    /// Skip the equivalent-GPU search (it simulates the baseline on larger clusters).
    #[arg(long)]
    no_equivalent: bool,
    /// The equivalent-GPU search stops at this many times the cluster's nodes.
    #[arg(long, default_value_t = 16)]
    equivalent_cap: u32,
    /// Title at the top of the report.
    #[arg(long, default_value = "ordo report")]
    title: String,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutFormat {
    Html,
    Md,
    Json,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum By {
    User,
    Group,
}

fn out_format(a: &ReportArgs) -> OutFormat {
    out_format_of(a.out_format, &a.out)
}

/// The format given, else the one `out`'s extension names (html by default).
pub(crate) fn out_format_of(given: Option<OutFormat>, out: &Path) -> OutFormat {
    if let Some(f) = given {
        return f;
    }
    match out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("md" | "markdown") => OutFormat::Md,
        Some("json") => OutFormat::Json,
        _ => OutFormat::Html,
    }
}

fn price(a: &ReportArgs) -> Result<Option<Price>> {
    match (a.gpu_hour_price, &a.currency) {
        (None, None) => Ok(None),
        (Some(p), Some(c)) => Ok(Some(Price::new(p, c).context("--gpu-hour-price/--currency")?)),
        (Some(_), None) => bail!("--gpu-hour-price needs --currency CODE (e.g. --currency EUR)"),
        (None, Some(_)) => bail!("--currency needs --gpu-hour-price P (e.g. --gpu-hour-price 2.10)"),
    }
}

/// Runs `ordo report`.
pub fn run(a: ReportArgs) -> Result<()> {
    if a.policies.0.is_empty() {
        bail!("--policies: give at least one policy");
    }
    for (i, p) in a.policies.0.iter().enumerate() {
        if a.policies.0[..i].contains(p) {
            bail!("--policies: `{p}` is named twice");
        }
    }
    if a.top == 0 {
        bail!("--top: give at least 1");
    }
    if a.equivalent_cap < 2 {
        bail!("--equivalent-cap: give at least 2 (twice the cluster)");
    }
    let price = price(&a)?;
    let format = out_format(&a);
    // Several placements, as `compare` takes them: every policy under each (`POLICY @PLACEMENT`).
    let input = load_input_placements(&a.input)?;
    let policies = policies_for(&input, &a.policies.0);
    let simulated = run_all(&input, &policies, Keep::Records)?;
    let opts = ReportOptions {
        title: a.title.clone(),
        by: match a.by {
            Some(By::User) => OwnerBy::User,
            Some(By::Group) => OwnerBy::Group,
            None if input.workload.users.len() <= 1 && input.workload.groups.len() > 1 => OwnerBy::Group,
            None => OwnerBy::User,
        },
        top: a.top,
        price,
        as_run: input.as_run.as_ref().map(|(_, words)| words.clone()),
        generated_at: generated_at()?,
        ordo_version: env!("CARGO_PKG_VERSION").to_string(),
        ..ReportOptions::default()
    };
    let equivalent = if a.no_equivalent {
        None
    } else {
        // Among the simulated policies (the schedule as run cannot be replayed on more GPUs).
        let results: Vec<_> = simulated.iter().map(|o| o.metrics.clone()).collect();
        let h = ordo_report::headline(&results);
        let spinner = crate::progress::spinner("equivalent GPUs: simulating larger clusters");
        let tick = || spinner.inc(1);
        let (policy, placement) = runs_of(&input, &policies)[h.baseline];
        let e = ordo_report::equivalent_gpus(
            &input.workload,
            &run_config(&input, policy, placement),
            (&results[h.baseline].policy, results[h.baseline].mean_jct_s),
            &results[h.best].policy,
            results[h.best].mean_jct_s,
            a.equivalent_cap,
            &tick,
        );
        spinner.finish_and_clear();
        Some(e?)
    };
    let outs = with_as_run(&input, simulated);
    let report = Report::build(&input.source, &input.workload, &outs, &opts, equivalent)?;
    let text = match format {
        OutFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        OutFormat::Md => render::markdown(&report).map_err(anyhow::Error::msg)?,
        OutFormat::Html => render::html(&report).map_err(anyhow::Error::msg)?,
    };
    write_out(&a.out, &text)?;
    if a.out != Path::new("-") && !crate::progress::quiet_flag() {
        eprintln!("wrote {} ({} KiB): {}", a.out.display(), text.len().div_ceil(1024), report.headline);
    }
    Ok(())
}

/// When the report is made, RFC 3339 in UTC: now, or `$SOURCE_DATE_EPOCH` (Unix seconds) when
/// set, for reproducible pages (reproducible-builds.org's convention).
pub(crate) fn generated_at() -> Result<String> {
    let t = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|t| *t >= 0)
            .with_context(|| format!("SOURCE_DATE_EPOCH `{v}`: expected Unix seconds (a whole number >= 0)"))?,
        Err(_) => ordo_slurm::audit::unix_now(),
    };
    Ok(ordo_slurm::audit::rfc3339(t))
}

pub(crate) fn write_out(path: &Path, text: &str) -> Result<()> {
    if path == Path::new("-") {
        std::io::stdout().write_all(text.as_bytes()).context("writing the report to standard output")?;
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
