//! `ordo trace stats|convert`, and the trace selection flags (`--from/--to`, `--max-jobs`,
//! `--scale-load`, `--users/--groups`, `--skip-bad`) and cluster specs every command shares.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use ordo_core::{ClusterSpec, NodeSpec};
use ordo_trace::stats::TraceStats;
use ordo_trace::{load_path, Format, LoadOptions, LoadedTrace};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Which part of a trace to read, and how to transform it.
#[derive(Args, Debug, Clone, Default)]
pub struct SelectArgs {
    /// Keep jobs submitted at or after this point: days from the trace's day 0 (`42`, `1.5`)
    /// or, for wall-clock traces, a UTC date/time (`2017-10-09`, `2017-10-09T07:00:00`).
    #[arg(long, alias = "from-day")]
    pub from: Option<String>,
    /// Keep jobs submitted before this point (days or a date/time, as --from).
    #[arg(long, visible_alias = "until", alias = "to-day")]
    pub to: Option<String>,
    /// Keep at most this many jobs (the earliest submitted, after the window).
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Divide submit times by X (0.001 to 1000) to raise the offered load X-fold (run times unchanged).
    #[arg(long, value_name = "X")]
    pub scale_load: Option<f64>,
    /// Keep only jobs of these users (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub users: Vec<String>,
    /// Keep only jobs of these groups (comma-separated; virtual clusters, accounts).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
    /// Skip bad rows instead of stopping at the first; report how many and the first ten.
    #[arg(long)]
    pub skip_bad: bool,
}

/// A window bound: days, or a wall-clock time.
enum Bound {
    Day(f64),
    At(ordo_core::Time),
}

fn bound(flag: &str, s: &str) -> Result<Bound> {
    if let Ok(d) = s.trim().parse::<f64>() {
        if !d.is_finite() {
            bail!("{flag} {s}: expected a finite number of days or a date such as 2017-10-09");
        }
        return Ok(Bound::Day(d));
    }
    match ordo_trace::parse_datetime(s.as_bytes()) {
        Some(t) => Ok(Bound::At(t)),
        None => {
            bail!("{flag} `{s}`: expected days (e.g. 42) or a UTC date/time (e.g. 2017-10-09 or 2017-10-09T07:00:00)")
        }
    }
}

impl SelectArgs {
    /// True when any selection or transform was asked for.
    pub fn any(&self) -> bool {
        self.from.is_some()
            || self.to.is_some()
            || self.max_jobs.is_some()
            || self.scale_load.is_some()
            || !self.users.is_empty()
            || !self.groups.is_empty()
            || self.skip_bad
    }

    /// The load options for `format`.
    pub fn options(&self, format: Format) -> Result<LoadOptions> {
        let mut o = LoadOptions::new(format);
        if let Some(s) = &self.from {
            match bound("--from", s)? {
                Bound::Day(d) => o.from_day = Some(d),
                Bound::At(t) => o.from_time = Some(t),
            }
        }
        if let Some(s) = &self.to {
            match bound("--to", s)? {
                Bound::Day(d) => o.to_day = Some(d),
                Bound::At(t) => o.to_time = Some(t),
            }
        }
        o.max_jobs = self.max_jobs;
        o.scale_load = self.scale_load;
        o.users = self.users.clone();
        o.groups = self.groups.clone();
        o.skip_bad = self.skip_bad;
        Ok(o)
    }

    /// `--from` in days, if given in days.
    pub fn start_day(&self) -> Option<f64> {
        self.from.as_deref().and_then(|s| s.trim().parse().ok())
    }

    /// `--to` in days, if given in days.
    pub fn end_day(&self) -> Option<f64> {
        self.to.as_deref().and_then(|s| s.trim().parse().ok())
    }
}

/// Reads `--cluster`: `64x8`, `32x8,16x4`, a TOML file of node groups, an Alibaba node list
/// CSV, or `trace` (`None`: build it from the trace header, see [`cluster_from_trace`]).
pub fn cluster_arg(s: &str) -> Result<Option<ClusterSpec>> {
    if s.trim() == "trace" {
        return Ok(None);
    }
    Ok(Some(ordo_trace::load_cluster(s.trim())?))
}

/// The cluster an SWF header describes: `MaxProcs` (else `MaxNodes`) nodes of one processor
/// each (a processor is the allocation unit).
pub fn cluster_from_trace(t: &LoadedTrace) -> Result<ClusterSpec> {
    let Some(p) = t.max_procs else {
        bail!("--cluster trace: {} has no machine size in its header (SWF `; MaxProcs:`); give --cluster", t.source)
    };
    if p > 1_000_000 {
        bail!("--cluster trace: MaxProcs {p} is too large (at most 1,000,000)");
    }
    let nodes = (0..p).map(|i| NodeSpec::new(format!("p{i}"), 1)).collect();
    Ok(ClusterSpec { nodes })
}

/// The cluster a trace declares, and where it came from, when it declares one: a cluster file
/// beside it (`NAME.cluster.toml` for a trace `NAME.csv` or `NAME.swf.gz`, else `cluster.toml`
/// in its folder; the node list published with the trace: `openb_node_list_gpu_node.csv` for an
/// Alibaba 2023 pod list, `node_info_df.csv` for Alibaba 2026, `pai_machine_spec.csv` for PAI
/// 2020, Lucid's `vc_config.csv` or else Helios's `cluster_gpu_number.csv` for a Helios log),
/// else an SWF header's `MaxProcs` (or `MaxNodes`). `None`: it declares none.
pub fn declared_cluster(t: &LoadedTrace, path: &std::path::Path) -> Result<Option<(ClusterSpec, String)>> {
    let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    let mut candidates = vec![dir.join(format!("{stem}.cluster.toml")), dir.join("cluster.toml")];
    // The node lists published with the traces.
    let published: &[&str] = match t.format {
        Format::Alibaba => &["openb_node_list_gpu_node.csv"],
        Format::Alibaba2026 => &["node_info_df.csv"],
        Format::Pai2020 => &["pai_machine_spec.csv"],
        Format::Helios => &["vc_config.csv", "cluster_gpu_number.csv"],
        _ => &[],
    };
    candidates.extend(published.iter().map(|f| dir.join(f)));
    for c in candidates {
        if c.is_file() {
            let spec = ordo_trace::load_cluster(&c.to_string_lossy())
                .with_context(|| format!("the trace's cluster file {}", c.display()))?;
            return Ok(Some((spec, format!("the trace's own, from {} beside it; --cluster to change", c.display()))));
        }
    }
    if let Some(p) = t.max_procs {
        let spec = cluster_from_trace(t)?;
        return Ok(Some((
            spec,
            format!("the trace's own: {p} processors from its header, one per node; --cluster to change"),
        )));
    }
    Ok(None)
}

/// A built-in workload as a loaded trace, on the scenario's own cluster: its `max_procs` is that
/// cluster's GPUs when every node has one GPU (as an SWF header declares a machine), else none.
fn generated(scenario: ordo_sim::workload::Scenario, seed: u64, jobs: Option<usize>) -> LoadedTrace {
    let mut p = ordo_sim::workload::WorkloadParams::default_for(scenario);
    p.seed = seed;
    if let Some(n) = jobs {
        p.jobs = n;
    }
    let cluster = scenario.cluster();
    let workload = ordo_sim::workload::generate(&p, cluster.total_gpus());
    LoadedTrace {
        rows: workload.jobs.len(),
        workload,
        source: format!("built-in workload `{scenario}` (seed {seed})"),
        format: Format::Generic,
        dropped_zero_duration: 0,
        dropped_outside_window: 0,
        dropped_never_ran: 0,
        dropped_outside_trace: 0,
        dropped_unknown_size: 0,
        dropped_filtered: 0,
        dropped_max_jobs: 0,
        skipped_bad: 0,
        bad_reasons: Vec::new(),
        repaired: Vec::new(),
        skipped_steps: 0,
        max_procs: cluster.nodes.iter().all(|n| n.gpus == 1).then(|| cluster.total_gpus()),
        time_base: Some(0),
        server: None,
        activity: None,
    }
}

/// Loads a trace for a command, saying on stderr what was skipped, dropped or repaired beyond
/// what the report itself shows.
pub fn load(path: &std::path::Path, format: Format, select: &SelectArgs) -> Result<LoadedTrace> {
    let opts = select.options(format)?;
    let spin = crate::progress::spinner(&format!("reading {}", path.display()));
    let t = load_path(path, &opts);
    spin.finish_and_clear();
    let t = t?;
    warn_skipped(&t);
    Ok(t)
}

/// Says on stderr how many bad rows `--skip-bad` skipped, and the first reasons.
pub fn warn_skipped(t: &LoadedTrace) {
    if t.skipped_bad > 0 {
        eprintln!(
            "warning: {}: skipped {} (--skip-bad); the first {}:",
            t.source,
            ordo_core::words::count(t.skipped_bad, "bad row"),
            ordo_core::words::noun(t.bad_reasons.len(), "reason")
        );
        for r in &t.bad_reasons {
            eprintln!("  {r}");
        }
    }
}

/// Prints to stderr the drops and repairs a command's table does not show.
pub fn report_other_drops(t: &LoadedTrace) {
    let mut other: Vec<String> = Vec::new();
    for (why, n) in t.drops() {
        if !why.starts_with("run time 0") && !why.starts_with("submitted outside") && !why.starts_with("bad row") {
            other.push(format!("dropped {n}: {why}"));
        }
    }
    for (why, n) in &t.repaired {
        other.push(format!("repaired {n}: {why}"));
    }
    if t.skipped_steps > 0 {
        other.push(format!("skipped {} Slurm job steps", t.skipped_steps));
    }
    if !other.is_empty() {
        eprintln!("note: {}: {}", t.source, other.join("; "));
    }
}

/// `ordo trace ...`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    cmd: TraceCmd,
}

#[derive(Subcommand, Debug)]
enum TraceCmd {
    /// What a trace holds: jobs, span, GPU sizes, run times, load, top users and groups, and
    /// every dropped or repaired row by reason.
    Stats(StatsArgs),
    /// Rewrite a trace as ordo's generic CSV, JSON Lines or SWF.
    Convert(ConvertArgs),
}

#[derive(Args, Debug)]
struct StatsArgs {
    /// The trace file.
    file: PathBuf,
    /// Trace format (auto, generic, jsonl, philly, philly-vc, alibaba, swf, tiresias, helios, sacct, jobcomp).
    #[arg(long, default_value = "auto")]
    format: Format,
    #[command(flatten)]
    select: SelectArgs,
    /// Measure the offered load against this cluster (`64x8`, a TOML or node-list file, `trace`).
    #[arg(long)]
    cluster: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq)]
enum OutFormat {
    Generic,
    Jsonl,
    Swf,
}

/// [`SelectArgs`] for `trace convert`, where `--to` names the output format: the end of the
/// window is `--until` (or `--to-day`).
#[derive(Args, Debug, Clone)]
struct ConvertSelectArgs {
    /// Keep jobs submitted at or after this point (days or a UTC date/time).
    #[arg(long, alias = "from-day")]
    from: Option<String>,
    /// Keep jobs submitted before this point (days or a UTC date/time).
    #[arg(long, alias = "to-day")]
    until: Option<String>,
    /// Keep at most this many jobs (the earliest submitted, after the window).
    #[arg(long)]
    max_jobs: Option<usize>,
    /// Divide submit times by X (0.001 to 1000) to raise the offered load X-fold.
    #[arg(long, value_name = "X")]
    scale_load: Option<f64>,
    /// Keep only jobs of these users (comma-separated).
    #[arg(long, value_delimiter = ',')]
    users: Vec<String>,
    /// Keep only jobs of these groups (comma-separated).
    #[arg(long, value_delimiter = ',')]
    groups: Vec<String>,
    /// Skip bad rows instead of stopping at the first; report how many and the first ten.
    #[arg(long)]
    skip_bad: bool,
}

impl From<ConvertSelectArgs> for SelectArgs {
    fn from(c: ConvertSelectArgs) -> Self {
        SelectArgs {
            from: c.from,
            to: c.until,
            max_jobs: c.max_jobs,
            scale_load: c.scale_load,
            users: c.users,
            groups: c.groups,
            skip_bad: c.skip_bad,
        }
    }
}

#[derive(Args, Debug)]
struct ConvertArgs {
    /// The trace file (or --workload).
    #[arg(required_unless_present = "workload", conflicts_with = "workload")]
    file: Option<PathBuf>,
    /// Write a built-in generated workload instead of reading a trace (e.g. `longlog`, to replay
    /// it as SWF with `--trace`). An SWF written from a workload whose cluster has one GPU per
    /// node (`longlog`) declares it as `MaxProcs`.
    #[arg(long, value_enum)]
    workload: Option<crate::cli::WorkloadArg>,
    /// Seed for --workload.
    #[arg(long, default_value_t = 1, requires = "workload")]
    seed: u64,
    /// Number of jobs for --workload (default: the scenario's own).
    #[arg(long, requires = "workload")]
    jobs: Option<usize>,
    /// Input trace format.
    #[arg(long, default_value = "auto")]
    format: Format,
    #[command(flatten)]
    select: ConvertSelectArgs,
    /// Output format.
    #[arg(long)]
    to: OutFormat,
    /// Output file (`-` for standard output).
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ordo trace ...`.
pub fn run(a: TraceArgs) -> Result<ExitCode> {
    match a.cmd {
        TraceCmd::Stats(a) => {
            let t = load(&a.file, a.format, &a.select)?;
            let cluster = match a.cluster.as_deref().map(cluster_arg).transpose().context("--cluster")? {
                Some(Some(c)) => Some(c),
                Some(None) => Some(cluster_from_trace(&t)?),
                None => None,
            };
            let s = TraceStats::new(&t, cluster.as_ref());
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", s.render());
            }
        }
        TraceCmd::Convert(a) => {
            let t = match (&a.file, a.workload) {
                (Some(file), _) => load(file, a.format, &a.select.clone().into())?,
                (None, Some(w)) => {
                    if SelectArgs::from(a.select.clone()).any() {
                        bail!("--from/--until, --max-jobs, --scale-load, --users/--groups and --skip-bad select part of a trace, not of --workload");
                    }
                    generated(w.scenario(), a.seed, a.jobs)
                }
                (None, None) => bail!("give a trace file or --workload"),
            };
            report_other_drops(&t);
            let to_stdout = a.out.as_os_str() == "-";
            let sink: Box<dyn Write> = if to_stdout {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(std::io::BufWriter::new(
                    std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?,
                ))
            };
            let what = || format!("writing {}", a.out.display());
            match a.to {
                OutFormat::Generic => ordo_trace::write_generic(&t.workload, sink).with_context(what)?,
                OutFormat::Jsonl => ordo_trace::write_jsonl(&t.workload, sink).with_context(what)?,
                OutFormat::Swf => ordo_trace::write_swf(&t.workload, t.max_procs, sink).with_context(what)?,
            }
            if !to_stdout {
                eprintln!(
                    "wrote {} ({} read from {}) to {} as {}",
                    ordo_core::words::count(t.workload.jobs.len(), "job"),
                    ordo_core::words::count(t.rows, "row"),
                    t.source,
                    a.out.display(),
                    a.to.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
