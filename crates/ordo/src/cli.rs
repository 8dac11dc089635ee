//! Command-line definitions (clap) and the wiring of each subcommand.

use crate::output;
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig, SimOutput};
use ordo_trace::Format;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "ordo",
    version = env!("ORDO_VERSION"),
    about = "Measure, compare and improve the order in which a GPU cluster runs its jobs"
)]
struct Cli {
    /// No progress bars (they are also hidden when stderr is not a terminal).
    #[arg(long, global = true)]
    quiet: bool,
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
    /// Inspect and convert traces: `ordo trace stats FILE`, `ordo trace convert FILE --to generic`.
    Trace(crate::trace_cmd::TraceArgs),
    /// Meet an existing Slurm cluster: import its accounting, drive its queue order.
    Slurm(crate::slurm_cmd::SlurmArgs),
    /// Schedule a Kubernetes cluster's GPU pods (a second scheduler), show its queue, import its log.
    Kube(crate::kube_cmd::KubeArgs),
    #[command(flatten)]
    Server(crate::server_cmd::ServerCmd),
    /// Plan, split, pace, submit and report requests to AI APIs: `ordo batch plan|split|run|submit|status|fetch|cancel|report`.
    Batch(crate::batch_cmd::BatchArgs),
    /// Search orders x backfill x parameters on a workload; print the Pareto front and the
    /// recommended policy as config for `ordo server` and `ordo slurm drive`.
    Tune(crate::tune_cmd::TuneArgs),
    /// Write a self-contained HTML (or Markdown, JSON) report: every policy side by side, cost, equivalent GPUs.
    Report(crate::report_cmd::ReportArgs),
    /// Before and after a change of policy: what really changed, and how much of it the order made
    /// (each period's jobs replayed under the other's policy), with intervals and the replay's fidelity.
    BeforeAfter(crate::periods_cmd::BeforeAfterArgs),
    /// (packaging) Write shell completions (bash, zsh, fish) and man pages made from these
    /// definitions: `ordo generate --out DIR` writes DIR/completions and DIR/man.
    #[command(hide = true)]
    Generate {
        /// Where to write them.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Writes `out/completions/{ordo.bash,_ordo,ordo.fish}` and `out/man/ordo*.1` (a page per
/// command that is not hidden) from the clap definitions.
fn generate_assets(out: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let (comp, man) = (out.join("completions"), out.join("man"));
    for d in [&comp, &man] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "ordo", &comp)
            .with_context(|| format!("writing {shell} completions in {}", comp.display()))?;
    }
    clap_mangen::generate_to(Cli::command(), &man)
        .with_context(|| format!("writing man pages in {}", man.display()))?;
    let pages = std::fs::read_dir(&man)?.count();
    println!("wrote bash, zsh and fish completions to {} and {pages} man pages to {}", comp.display(), man.display());
    Ok(())
}

/// Where the jobs come from, and the cluster they run on.
#[derive(Args, Debug, Clone)]
pub struct InputArgs {
    /// Built-in generated workload (used when no --trace is given).
    #[arg(long, value_enum, default_value = "backlog")]
    workload: WorkloadArg,
    /// Seed for the built-in workload.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Number of jobs in the built-in workload (default: the scenario's own).
    #[arg(long)]
    jobs: Option<usize>,
    /// A trace file to replay instead of a built-in workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Trace format.
    #[arg(long, default_value = "auto")]
    format: Format,
    /// Which jobs of the trace to keep and how to transform them.
    #[command(flatten)]
    select: crate::trace_cmd::SelectArgs,
    /// The cluster: COUNTxGPUS groups (`64x8`, `32x8,16x4`), a TOML file of node groups, an
    /// Alibaba node list CSV, or `trace` (an SWF trace's `MaxProcs`). Default: the trace's own
    /// cluster where it declares one (SWF `MaxProcs`/`MaxNodes`, a cluster file beside it; see
    /// docs/TRACES.md), the scenario's for built-in workloads, else 64x8.
    #[arg(long)]
    cluster: Option<String>,
    /// How a job's GPUs may be spread over nodes: `pooled` (GPU counts only), `consolidated`
    /// (a job on one node when it fits one, larger ones on whole idle nodes), or `topology`
    /// (consolidated, with each gang in the lowest level of the network topology that holds
    /// it, and jobs' `required:` levels honoured; needs --topology or a workload that has one;
    /// docs/TOPOLOGY.md). Default: pooled; the `mixed`, `gangs` and `nodelocal` workloads:
    /// consolidated. `compare` takes several, comma-separated, and runs each policy under each.
    #[arg(long, value_delimiter = ',')]
    placement: Vec<PlacementArg>,
    /// The cluster's network topology: Slurm's topology.conf (`SwitchName=`/`BlockName=`
    /// lines) or ordo's TOML (docs/TOPOLOGY.md). Every run then charges gangs spread over
    /// several units of a level the topology's slowdown, and reports the GPU-hours lost to
    /// spread placement; `--placement topology` places by it. The `gangs` and `nodelocal`
    /// workloads carry their own.
    #[arg(long)]
    topology: Option<PathBuf>,
    /// The topology level every gang (a job on more than one node) must or should share where
    /// its trace row asks none: `required:LEVEL` (it waits for a unit of that level that holds
    /// it) or `preferred:LEVEL`. Under --placement topology only.
    #[arg(long, value_name = "required:LEVEL|preferred:LEVEL")]
    pub(crate) gang_topology: Option<ordo_core::TopoAsk>,
    /// Shuffle the order of jobs submitted at the same instant with this seed (to see how much
    /// a result depends on tie order; by default ties keep the order of the input).
    #[arg(long)]
    shuffle_ties: Option<u64>,
    /// Time lost each time a preempted job restarts, e.g. `30s` (preemptive policies).
    #[arg(long, default_value = "0", value_parser = parse_duration_arg)]
    preemption_overhead: ordo_core::Time,
    /// How a preempted job's work survives (preemptive policies): `continuous` (it resumes
    /// where it stopped; the default), `none` (it restarts from zero), `every:30m` (from its
    /// last periodic checkpoint), `signal:2m` (it saves when told: loses nothing, restarts 2m
    /// later). `QUEUE=RULE` sets one queue's (partition, QoS); repeat the flag for several.
    #[arg(long = "checkpoint", value_name = "[QUEUE=]RULE")]
    checkpoint: Vec<String>,
    /// Preemptive policies: a job is not preempted before its current run is this old (at
    /// least twice --preemption-overhead in any case), e.g. `10m`.
    #[arg(long, value_parser = parse_duration_arg)]
    min_run: Option<ordo_core::Time>,
    /// Preemptive policies: a job preempted this many times runs to its end from its next start
    /// (bounds the work lost by jobs that cannot checkpoint).
    #[arg(long)]
    max_preemptions: Option<u32>,
    /// Replace every job's run-time estimate by its true run time times a seeded random factor:
    /// `lognormal:SIGMA` draws exp(N(0, SIGMA^2)) per job (seed: --seed). Shows how policies
    /// that read estimates degrade when estimates are wrong.
    #[arg(long)]
    estimate_noise: Option<EstimateNoise>,
    /// Per-user and per-group GPU limits and shares: the `[quotas]` table of a TOML file (a
    /// server's config file works as it is; docs/SERVER.md, "Quotas and shares"). Users and
    /// groups are the trace's `user` and `group` columns. Limits by GPU model
    /// (`max_running_gpus_by_model`) turn on typed GPUs.
    #[arg(long)]
    quotas: Option<PathBuf>,
    /// Relative speed of each job class on each GPU model (a TOML throughput matrix, as
    /// Gavel's; docs/TRACES.md, "GPU models and constraints"). A job's run time on a model is
    /// its run time on the model it was measured on (`measured_on`) times that model's speed,
    /// divided by the speed where it runs. Turns on typed GPUs.
    #[arg(long)]
    speeds: Option<PathBuf>,
    /// Which GPU model a job that accepts several goes on: `fastest` (for its class; the
    /// default), `slowest` (keeps fast GPUs for jobs that need or gain most), `first` (cluster
    /// order, heterogeneity-agnostic), `relative` (where its speed is highest relative to other
    /// classes': comparative advantage). Turns on typed GPUs.
    #[arg(long)]
    model_pick: Option<ordo_core::ModelPick>,
}

/// `s` quoted for a POSIX shell when it holds anything but plain path characters (for the
/// commands ordo suggests).
pub(crate) fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub(crate) fn parse_duration_arg(s: &str) -> Result<ordo_core::Time, String> {
    ordo_core::policy::parse_duration(s).ok_or_else(|| format!("`{s}`: expected a duration such as 30s, 5m, 1h"))
}

/// `--estimate-noise lognormal:SIGMA`.
#[derive(Debug, Clone, Copy)]
struct EstimateNoise(f64);

impl std::str::FromStr for EstimateNoise {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let sigma = s
            .strip_prefix("lognormal:")
            .and_then(|x| x.parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x >= 0.0 && *x <= 10.0)
            .ok_or_else(|| format!("`{s}`: expected lognormal:SIGMA with 0 <= SIGMA <= 10, e.g. lognormal:0.5"))?;
        Ok(EstimateNoise(sigma))
    }
}

/// `--placement`: how a job's GPUs may be spread over nodes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlacementArg {
    Pooled,
    Consolidated,
    Topology,
}

impl PlacementArg {
    /// The core's placement model (`topology` is consolidated placement with a topology).
    pub(crate) fn placement(self) -> Placement {
        match self {
            PlacementArg::Pooled => Placement::Pooled,
            PlacementArg::Consolidated | PlacementArg::Topology => Placement::Consolidated,
        }
    }

    /// Its name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PlacementArg::Pooled => "pooled",
            PlacementArg::Consolidated => "consolidated",
            PlacementArg::Topology => "topology",
        }
    }
}

/// `--workload`: a built-in scenario.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(crate) enum WorkloadArg {
    Online,
    Backlog,
    Mixed,
    Longlog,
    Gangs,
    Nodelocal,
}

impl WorkloadArg {
    /// The scenario it names.
    pub(crate) fn scenario(self) -> Scenario {
        match self {
            WorkloadArg::Online => Scenario::Online,
            WorkloadArg::Backlog => Scenario::Backlog,
            WorkloadArg::Mixed => Scenario::Mixed,
            WorkloadArg::Longlog => Scenario::LongLog,
            WorkloadArg::Gangs => Scenario::Gangs,
            WorkloadArg::Nodelocal => Scenario::NodeLocal,
        }
    }
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Comma-separated policies; the first named `fifo` (or else the first) is the baseline.
    #[arg(long, default_value = DEFAULT_POLICIES)]
    policies: PolicyList,
    /// Replay as if an `ordo server` reclaim rule had been in force: a job whose measured mean
    /// GPU busy % (an `ordo server` database, Alibaba PAI 2020) is under --idle-threshold is
    /// cancelled this long after its start (the rule's `idle_after` plus its grace), e.g. `1h`.
    /// Prints the GPU-hours it gives back and the waits it cuts (docs/REPORT.md).
    #[arg(long, value_parser = parse_duration_arg)]
    reclaim_after: Option<ordo_core::Time>,
    /// With --reclaim-after: the busy % under which a job counts as idle.
    #[arg(long, default_value_t = 5.0)]
    idle_threshold: f64,
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
    #[arg(long, default_value = DEFAULT_POLICIES)]
    policies: PolicyList,
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
    pub preemption_overhead: ordo_core::Time,
    /// `--checkpoint`, `--min-run`, `--max-preemptions`.
    pub preemption: ordo_sim::PreemptionRules,
    /// `--quotas FILE`, read and checked.
    pub quotas: Option<ordo_core::QuotaConfig>,
    /// From an `ordo server`'s database: the schedule as it ran (its row) and its words.
    pub as_run: Option<(SimOutput, ordo_report::AsRun)>,
    /// The policy that server ran (simulated beside the others).
    pub server_policy: Option<PolicySpec>,
    /// `--speeds FILE`, read and checked against the cluster's GPU models.
    pub speeds: ordo_core::Speeds,
    /// `--model-pick`.
    pub model_pick: Option<ordo_core::ModelPick>,
    /// Each job's measured mean GPU busy %, where the input measured it (an `ordo server`
    /// database, Alibaba PAI 2020).
    pub busy: Option<Vec<Option<f64>>>,
    /// An `ordo server` database's changes of policy (its audit log), in time order.
    pub changes: Vec<ordo_trace::PolicyChangeRecord>,
    /// For a trace in wall-clock time: the time (ms since the Unix epoch, UTC) that became 0.
    pub time_base: Option<ordo_core::Time>,
    /// The cluster's network topology (`--topology`, or the built-in workload's).
    pub topology: Option<std::sync::Arc<ordo_core::Topology>>,
    /// `--placement topology`.
    pub place_by_topology: bool,
    /// Every `--placement` given (`compare` runs each policy under each); the first is
    /// `placement` and `place_by_topology`.
    pub placements: Vec<PlacementArg>,
}

pub(crate) fn load_input(a: &InputArgs) -> Result<Input> {
    if a.placement.len() > 1 {
        bail!("--placement: one placement here (`ordo compare` takes several)");
    }
    load_input_placements(a)
}

/// [`load_input`] with any number of placements (`compare`).
pub(crate) fn load_input_placements(a: &InputArgs) -> Result<Input> {
    // Read first: a bad quota file or flag fails before a large trace is loaded.
    let mut preemption = ordo_sim::PreemptionRules {
        min_run: a.min_run.unwrap_or(0),
        max_preemptions: a.max_preemptions,
        ..Default::default()
    };
    for c in &a.checkpoint {
        preemption.checkpoint.add(c).map_err(|e| anyhow::anyhow!("--checkpoint {e}"))?;
    }
    let quotas = a.quotas.as_deref().map(ordo_trace::load_quotas).transpose().context("--quotas")?;
    let speeds = a.speeds.as_deref().map(ordo_trace::load_speeds).transpose().context("--speeds")?.unwrap_or_default();
    let cluster_arg = match &a.cluster {
        Some(c) => crate::trace_cmd::cluster_arg(c).context("--cluster")?,
        None => None,
    };
    let explicit = |c: &ClusterSpec| (c.clone(), "given by --cluster".to_string());
    let mut server = None;
    let mut time_base = None;
    let mut activity: Option<Vec<Option<ordo_trace::JobBusy>>> = None;
    let (workload, mut source, (cluster, cluster_from), placement) = match &a.trace {
        Some(path) => {
            let mut t = crate::trace_cmd::load(path, a.format, &a.select)?;
            crate::trace_cmd::report_other_drops(&t);
            server = t.server.take().map(|s| (s, cluster_arg.is_none()));
            activity = t.activity.take();
            time_base = t.time_base.filter(|_| t.format.wall_clock());
            let cluster = match (&cluster_arg, &a.cluster) {
                (Some(c), _) => explicit(c),
                (None, Some(_)) => {
                    (crate::trace_cmd::cluster_from_trace(&t)?, "from the trace header (--cluster trace)".into())
                }
                (None, None) => match server.as_ref().map(|(s, _)| s.cluster.clone()) {
                    Some(c) => (c, "the server's own nodes, from its database; --cluster to change".into()),
                    None => match crate::trace_cmd::declared_cluster(&t, path)? {
                        Some(found) => found,
                        None => (
                            ClusterSpec::uniform(64, 8),
                            "ordo's default: the trace declares no cluster; give --cluster".into(),
                        ),
                    },
                },
            };
            let info = output::InputInfo {
                source: path.display().to_string(),
                format: t.format.to_string(),
                rows: t.rows,
                jobs: t.workload.jobs.len(),
                dropped_zero_duration: t.dropped_zero_duration,
                dropped_outside_window: t.dropped_outside_window,
                from_day: a.select.start_day(),
                to_day: a.select.end_day(),
                estimates: None,
                cluster_from: String::new(),
            };
            // The server places each job on one node.
            let placement = if server.is_some() { Placement::Consolidated } else { Placement::Pooled };
            (t.workload, info, cluster, a.placement.first().map_or(placement, |p| p.placement()))
        }
        None => {
            if a.select.any() {
                bail!("--from/--to, --max-jobs, --scale-load, --users/--groups and --skip-bad select part of a trace; give --trace PATH");
            }
            if a.cluster.is_some() && cluster_arg.is_none() {
                bail!("--cluster trace reads the cluster from a trace header; give --trace PATH");
            }
            let scenario = a.workload.scenario();
            let placement = a.placement.first().map_or(scenario.placement(), |p| p.placement());
            let (cluster, placement) = match &cluster_arg {
                Some(c) => (explicit(c), placement),
                None => ((scenario.cluster(), format!("the `{scenario}` workload's cluster")), placement),
            };
            let mut p = WorkloadParams::default_for(scenario);
            p.seed = a.seed;
            if let Some(n) = a.jobs {
                p.jobs = n;
            }
            let w = generate(&p, cluster.0.total_gpus());
            let info = output::InputInfo {
                source: format!("built-in workload `{scenario}` (seed {})", a.seed),
                format: "generated".into(),
                rows: w.jobs.len(),
                jobs: w.jobs.len(),
                dropped_zero_duration: 0,
                dropped_outside_window: 0,
                from_day: None,
                to_day: None,
                estimates: None,
                cluster_from: String::new(),
            };
            (w, info, cluster, placement)
        }
    };
    source.cluster_from = cluster_from;
    let mut workload = workload;
    // The topology: a file for this cluster, or the built-in workload's on its own cluster.
    let topology = match (&a.topology, &a.trace, &a.cluster) {
        (Some(path), _, _) => {
            Some(ordo_trace::load_topology(path, &cluster).map_err(|e| anyhow::anyhow!("--topology {e}"))?)
        }
        (None, None, None) => a.workload.scenario().topology(),
        _ => None,
    };
    let place_by_topology = a.placement.first() == Some(&PlacementArg::Topology);
    if a.placement.contains(&PlacementArg::Topology) && topology.is_none() {
        bail!("--placement topology: give the cluster's topology with --topology FILE (docs/TOPOLOGY.md)");
    }
    if let Some(ask) = &a.gang_topology {
        let t = topology.as_ref().context("--gang-topology: give the cluster's topology with --topology FILE")?;
        t.need(ask).map_err(|e| anyhow::anyhow!("--gang-topology: {e}"))?;
        ordo_sim::transform::ask_gangs(&mut workload, cluster.max_node_gpus(), ask);
    }
    if let Some(seed) = a.shuffle_ties {
        ordo_sim::transform::shuffle_ties(&mut workload, seed);
    }
    if let Some(EstimateNoise(sigma)) = a.estimate_noise {
        ordo_sim::transform::noisy_estimates(&mut workload, sigma, a.seed);
        source.estimates = Some(format!("noisy: true run time x exp(N(0, {sigma}^2)), seed {}", a.seed));
    } else {
        source.estimates = estimates_note(&workload);
    }
    let mut server_policy = None;
    let mut as_run = None;
    let mut changes = Vec::new();
    let mut busy: Option<Vec<Option<f64>>> =
        activity.as_ref().map(|a| a.iter().map(|b| b.map(|b| b.mean_pct)).collect());
    if let Some((s, own_cluster)) = server {
        if s.busy.iter().any(Option::is_some) {
            busy = Some(s.busy.iter().map(|b| b.map(|b| b.mean_pct)).collect());
        }
        server_policy = s.policy.as_deref().and_then(|p| p.parse::<PolicySpec>().ok());
        as_run = as_run_row(&workload, &cluster, placement, &s, own_cluster)?;
        changes = s.changes;
        // What each job declared (`ordo submit --checkpoint`, `--min-run`) is replayed with it.
        if s.declared.iter().any(Option::is_some) {
            let d: Vec<Option<ordo_sim::Declared>> = s
                .declared
                .iter()
                .map(|x| x.map(|(checkpoint, min_run)| ordo_sim::Declared { checkpoint, min_run }))
                .collect();
            preemption.declared = Some(d.into());
        }
    } else if workload.jobs.iter().any(|j| j.start.is_some()) {
        as_run = trace_as_run_row(&workload, &cluster, placement, activity.as_deref())?;
    }
    if !speeds.is_empty() {
        let models: Vec<String> = cluster.gpu_models().iter().map(|m| m.to_ascii_lowercase()).collect();
        if models.is_empty() {
            bail!(
                "--speeds: the cluster names no GPU models (give them with --cluster 16x8:a100,... or a cluster file)"
            );
        }
        speeds.check_models(&models).map_err(|e| anyhow::anyhow!("--speeds: {e}"))?;
        check_measured_on(&workload, &speeds)?;
    }
    Ok(Input {
        workload,
        cluster,
        placement,
        source,
        preemption_overhead: a.preemption_overhead,
        preemption,
        quotas,
        as_run,
        server_policy,
        speeds,
        model_pick: a.model_pick,
        busy,
        changes,
        time_base,
        topology: topology.map(std::sync::Arc::new),
        place_by_topology,
        placements: a.placement.clone(),
    })
}

/// The as-run row of an `ordo server`'s database: only on the server's own cluster and with the
/// submit times as they were (else it would not be what ran); says why when it is left out.
fn as_run_row(
    w: &Workload,
    cluster: &ClusterSpec,
    placement: Placement,
    s: &ordo_trace::ServerRecord,
    own_cluster: bool,
) -> Result<Option<(SimOutput, ordo_report::AsRun)>> {
    let why_not = if !own_cluster {
        Some("--cluster is not the server's own")
    } else if s.runs.is_empty() && !w.jobs.is_empty() {
        Some("--scale-load moved the submit times")
    } else if placement != Placement::Consolidated {
        Some("--placement is not the server's (consolidated)")
    } else {
        None
    };
    if let Some(why) = why_not {
        eprintln!("note: no as-run row: {why}, so the schedule the server ran does not apply");
        return Ok(None);
    }
    let runs: Vec<Vec<ordo_sim::asrun::RealRun>> = s
        .runs
        .iter()
        .map(|r| r.iter().map(|x| ordo_sim::asrun::RealRun { start: x.start, end: x.end, node: x.node }).collect())
        .collect();
    let out = ordo_sim::asrun::as_run(w, cluster, placement, &runs).context("the schedule as run")?;
    let busy: Vec<Option<f64>> = s.busy.iter().map(|b| b.map(|b| b.mean_pct)).collect();
    let share = ordo_sim::asrun::busy_share(&out, &busy);
    let words = ordo_report::AsRun::new(&out.metrics, s.policy.clone(), s.policies.clone(), share);
    Ok(Some((out, words)))
}

/// The as-run row of a trace whose jobs carry when they really started (`start_time`, written
/// by `ordo slurm import` from Slurm's `Start`; Helios, Acme and PAI 2020 publish it): each job
/// from its start for its run time, with the GPU activity the trace measured, if any. Left
/// out, saying why, when some jobs carry no start, or when the schedule cannot have run on
/// `cluster` (a job it could never hold, more GPUs held at once than it has): the row would
/// then describe a cluster the jobs did not run on.
fn trace_as_run_row(
    w: &Workload,
    cluster: &ClusterSpec,
    placement: Placement,
    activity: Option<&[Option<ordo_trace::JobBusy>]>,
) -> Result<Option<(SimOutput, ordo_report::AsRun)>> {
    let why_not = match ordo_sim::asrun::runs_from_starts(w) {
        Err(without) => Err(format!(
            "{} of {} {} no start time (the trace's `start_time` column), so what ran is not known for all of them",
            output::thousands(without as f64),
            output::count(w.jobs.len(), "job"),
            ordo_core::words::agree(without, "carries", "carry")
        )),
        Ok(runs) => match ordo_sim::asrun::misfit(w, cluster, placement, &runs) {
            Some(why) => Err(format!(
                "{why}: they did not run on this cluster (give --cluster as it was; `ordo slurm import` prints it)"
            )),
            None => Ok(runs),
        },
    };
    let runs = match why_not {
        Ok(runs) => runs,
        Err(why) => {
            eprintln!("note: no as-run row: {why}");
            return Ok(None);
        }
    };
    let out = ordo_sim::asrun::as_run(w, cluster, placement, &runs).context("the schedule as run")?;
    // A trace that measured its jobs' GPU activity (PAI 2020's sensor table): allocated against
    // really busy, as for an `ordo server`'s database.
    let share = activity.and_then(|a| {
        let busy: Vec<Option<f64>> = a.iter().map(|b| b.map(|b| b.mean_pct)).collect();
        ordo_sim::asrun::busy_share(&out, &busy)
    });
    let words = ordo_report::AsRun::from_trace(&out.metrics, share);
    Ok(Some((out, words)))
}

/// The policies to simulate: those given, and the one an `ordo server` ran (from its database)
/// when it is not among them, first.
pub(crate) fn policies_for(input: &Input, given: &[PolicySpec]) -> Vec<PolicySpec> {
    let mut v = given.to_vec();
    if let Some(p) = &input.server_policy {
        if !v.contains(p) {
            v.insert(0, p.clone());
        }
    }
    v
}

/// The simulated runs with the as-run row first, when there is one.
pub(crate) fn with_as_run(input: &Input, mut outs: Vec<SimOutput>) -> Vec<SimOutput> {
    if let Some((o, _)) = &input.as_run {
        outs.insert(0, o.clone());
    }
    outs
}

/// What policies that read run-time estimates get from this workload, when not every job has
/// an estimate and not none (then the `estimates` column says `oracle`).
fn estimates_note(w: &Workload) -> Option<String> {
    let without = w.jobs.iter().filter(|j| j.estimate.is_none()).count();
    let largest = w.jobs.iter().filter_map(|j| j.estimate).max()?;
    (without > 0).then(|| {
        format!(
            "{} of {} carry no run-time estimate; policies that read estimates give them the largest in the trace, {} (as a default time limit would)",
            output::count(without, "job"),
            output::thousands(w.jobs.len() as f64),
            output::dur(ordo_core::time::to_secs_f64(largest))
        )
    })
}

/// `compare --reclaim-after`: replaces the input's workload by the one the reclaim rule would
/// have left (idle jobs cut `after` their start, `ordo_sim::reclaim`) and runs the first policy
/// on the workload as it was, for the waits the rule cuts (the comparison runs it on the cut
/// one). The as-run row goes (it is what ran without the rule).
fn reclaimed(
    input: &mut Input,
    policies: &[PolicySpec],
    after: ordo_core::Time,
    threshold: f64,
) -> Result<(ordo_sim::reclaim::ReclaimSummary, ordo_sim::Metrics)> {
    if !(threshold.is_finite() && (0.0..=100.0).contains(&threshold)) {
        bail!("--idle-threshold {threshold}: expected a busy percentage from 0 to 100");
    }
    if after <= 0 {
        bail!("--reclaim-after: expected a positive duration such as 30m, 2h");
    }
    let Some(busy) = input.busy.as_ref().filter(|b| b.iter().any(Option::is_some)) else {
        bail!(
            "--reclaim-after: this input has no measured GPU activity (an `ordo server` database whose agents sampled their GPUs, or Alibaba PAI 2020 with its sensor table)"
        )
    };
    let (cut, summary) = ordo_sim::reclaim::reclaim(&input.workload, busy, threshold, after);
    let first = policies.first().context("no policy")?;
    let before = simulate(&input.workload, &config(input, first))?.metrics;
    input.workload = cut;
    input.as_run = None;
    Ok((summary, before))
}

pub(crate) fn config(input: &Input, policy: &PolicySpec) -> SimConfig {
    let mut c = SimConfig::new(input.cluster.clone(), input.placement, policy.clone());
    c.preemption_overhead = input.preemption_overhead;
    c.preemption = input.preemption.clone();
    c.quotas = input.quotas.clone();
    c.speeds = input.speeds.clone();
    c.model_pick = input.model_pick;
    c.topology = input.topology.clone();
    c.place_by_topology = input.place_by_topology;
    c
}

/// Every `measured_on` model of the trace has a speed in the matrix (its row's, or the default
/// row's): otherwise its run time could not be converted.
fn check_measured_on(w: &Workload, speeds: &ordo_core::Speeds) -> Result<()> {
    let mut bad: Option<(String, String, usize)> = None;
    for j in &w.jobs {
        let Some(n) = &j.needs else { continue };
        let Some(m) = &n.measured_on else { continue };
        let row = speeds.row_of(n.class.as_deref());
        if !speeds.has(row, m) {
            match &mut bad {
                Some(b) => b.2 += 1,
                None => bad = Some((if j.name.is_empty() { j.id.to_string() } else { j.name.clone() }, m.clone(), 1)),
            }
        }
    }
    if let Some((job, m, n)) = bad {
        bail!(
            "--speeds: job {job} was measured on `{m}`, which its class's row of the speed matrix does not list \
             ({} in all); add `{m}` to the matrix",
            ordo_core::words::count(n, "such job")
        );
    }
    Ok(())
}

/// A comma-separated list of policies (parameters may contain commas: `las:thresholds=60,promote=8`).
#[derive(Debug, Clone)]
pub(crate) struct PolicyList(pub(crate) Vec<PolicySpec>);

/// The policies `compare`, `bench` and `report` run by default.
pub(crate) const DEFAULT_POLICIES: &str = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative,srtf,las";

impl std::str::FromStr for PolicyList {
    type Err = ordo_core::policy::PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicySpec::parse_list(s).map(PolicyList)
    }
}

/// What [`run_all`] keeps of each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Everything (`report` draws its series from the job records).
    Records,
    /// The metrics, rejected and never-satisfied jobs only (`compare`): each run's job records
    /// are dropped as soon as it ends, so that runs in parallel do not hold every policy's
    /// records at once.
    Metrics,
}

/// Runs every policy, in parallel over the machine's cores (rayon); results come back in input
/// order.
/// With several `--placement`s (`compare`), every policy under each, policy by policy, each
/// run named `POLICY @PLACEMENT`.
pub(crate) fn run_all(input: &Input, policies: &[PolicySpec], keep: Keep) -> Result<Vec<SimOutput>> {
    use rayon::prelude::*;
    let runs = runs_of(input, policies);
    let bar = crate::progress::bar(runs.len() as u64, "simulating");
    let outs = runs
        .par_iter()
        .map(|&(p, pl)| {
            let cfg = run_config(input, p, pl);
            let mut out = simulate(&input.workload, &cfg).with_context(|| format!("policy {p}"));
            if let Ok(o) = &mut out {
                if let Some(pl) = pl {
                    o.metrics.policy = format!("{} @{}", o.metrics.policy, pl.name());
                }
                if keep == Keep::Metrics {
                    o.records = Vec::new();
                }
            }
            bar.inc(1);
            out
        })
        .collect();
    bar.finish_and_clear();
    outs
}

/// The runs [`run_all`] makes, in its order: each policy, under each `--placement` when
/// several are given (`None`: the input's one placement).
pub(crate) fn runs_of<'a>(input: &Input, policies: &'a [PolicySpec]) -> Vec<(&'a PolicySpec, Option<PlacementArg>)> {
    let each: Vec<Option<PlacementArg>> =
        if input.placements.len() > 1 { input.placements.iter().copied().map(Some).collect() } else { vec![None] };
    policies.iter().flat_map(|p| each.iter().map(move |&pl| (p, pl))).collect()
}

/// The configuration of one run of [`runs_of`].
pub(crate) fn run_config(input: &Input, policy: &PolicySpec, placement: Option<PlacementArg>) -> SimConfig {
    let mut cfg = config(input, policy);
    if let Some(pl) = placement {
        cfg.placement = pl.placement();
        cfg.place_by_topology = pl == PlacementArg::Topology;
    }
    cfg
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    crate::progress::set_quiet(cli.quiet);
    match cli.cmd {
        Cmd::Slurm(a) => return crate::slurm_cmd::run(a),
        Cmd::Kube(a) => return crate::kube_cmd::run(a),
        Cmd::Server(c) => return crate::server_cmd::run(c),
        Cmd::Trace(a) => return crate::trace_cmd::run(a),
        Cmd::Batch(a) => return crate::batch_cmd::run(a),
        Cmd::Tune(a) => return crate::tune_cmd::run(a),
        Cmd::Report(a) => crate::report_cmd::run(a)?,
        Cmd::BeforeAfter(a) => crate::periods_cmd::run(a)?,
        Cmd::Generate { out } => generate_assets(&out)?,
        Cmd::Compare(a) => {
            if a.policies.0.is_empty() {
                bail!("--policies: give at least one policy");
            }
            let mut input = load_input_placements(&a.input)?;
            let policies = policies_for(&input, &a.policies.0);
            let reclaim = match a.reclaim_after {
                None => None,
                Some(after) => Some(reclaimed(&mut input, &policies, after, a.idle_threshold)?),
            };
            let outs = with_as_run(&input, run_all(&input, &policies, Keep::Metrics)?);
            let mut report = output::Comparison::new(&input.source, &input.workload, &outs);
            report.as_run = input.as_run.as_ref().map(|(_, words)| words.clone());
            // No as-run row under the rule: the first result is the first policy's, on the cut jobs.
            report.reclaim =
                reclaim.map(|(summary, before)| output::Reclaimed::new(summary, &before, &outs[0].metrics));
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_table());
            }
        }
        Cmd::Simulate(a) => {
            let input = load_input(&a.input)?;
            let spin = crate::progress::spinner(&format!("simulating {}", a.policy));
            let out = simulate(&input.workload, &config(&input, &a.policy));
            spin.finish_and_clear();
            let out = out?;
            if let Some(path) = &a.jobs_out {
                output::write_jobs_csv(path, &input.workload, &input.cluster, &out)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let report = output::Comparison::new(&input.source, &input.workload, std::slice::from_ref(&out));
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
            let bar = crate::progress::bar((a.policies.0.len() * a.repeat.max(1)) as u64, "timing");
            for p in &a.policies.0 {
                output::reset_peak_rss();
                let mut times = Vec::with_capacity(a.repeat);
                let mut cpu = Vec::with_capacity(a.repeat);
                let mut last = None;
                for _ in 0..a.repeat.max(1) {
                    // The previous run's output goes first, so the peak is one run's.
                    drop(last.take());
                    let (c0, t0) = (output::thread_cpu_s(), Instant::now());
                    let out = simulate(&input.workload, &config(&input, p))?;
                    times.push(t0.elapsed().as_secs_f64());
                    cpu.push(c0.zip(output::thread_cpu_s()).map(|(a, b)| b - a));
                    last = Some(out);
                    bar.inc(1);
                }
                let out = last.expect("at least one run");
                rows.push(output::BenchRow::new(p, &times, &cpu, &out, output::peak_rss_mib()));
            }
            bar.finish_and_clear();
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
