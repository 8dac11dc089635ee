//! `ordo slurm import|drive|release`: measure an existing Slurm cluster from its accounting, and
//! drive its queue order through job priorities (wiring around the `ordo-slurm` crate).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_core::words::count;
use ordo_core::{ClusterSpec, Placement, PolicySpec};
use ordo_slurm::audit::{rfc3339, unix_now, AuditRecord};
use ordo_slurm::drive::check_policy;
use ordo_slurm::order::{cluster_from_nodes, keep_kinds};
use ordo_slurm::{
    release, Backend, DriveConfig, Driver, PlanSpec, ReleaseOutcome, SlurmCli, SlurmNode, SlurmRest, SlurmTopology,
    TopologyFrom,
};
use ordo_trace::{load_reader, write_generic, Format, LoadOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `ordo slurm ...`
#[derive(Args, Debug)]
pub struct SlurmArgs {
    #[command(subcommand)]
    cmd: SlurmCmd,
}

#[derive(Subcommand, Debug)]
enum SlurmCmd {
    /// Turn Slurm's accounting (sacct, a saved `sacct --parsable2` file, or the jobcomp/filetxt
    /// log) into an ordo trace for `ordo compare --trace`.
    Import(ImportArgs),
    /// Set the priorities of pending jobs so that Slurm starts them in the order an ordo policy
    /// chooses; every change goes to the audit log.
    Drive(Box<DriveArgs>),
    /// Hand back to Slurm every priority `drive` set (from its audit log).
    Release(ReleaseArgs),
    /// Print the ordo policy that emulates this controller's own order (its priority plugin,
    /// weights and scheduler, from `scontrol show config`), for replaying its history with
    /// `ordo compare --trace ... --policies P`, and what of its configuration ordo does not model.
    Policy(PolicyArgs),
    /// Print the cluster's network topology as `drive` places gangs by it: each level's units
    /// and their nodes, from `scontrol show topology` or a topology.conf file.
    Topology(TopologyArgs),
}

#[derive(Args, Debug)]
struct TopologyArgs {
    /// Read this topology.conf instead of running `scontrol show topology`.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Longest wait for scontrol.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    timeout: Duration,
}

fn topology_cmd(a: TopologyArgs) -> Result<ExitCode> {
    let t = match &a.topology {
        Some(p) => read_topology_file(p)?,
        None => match SlurmCli::new(a.timeout).topology()? {
            Some(t) => t,
            None => bail!(
                "`scontrol show topology` prints no topology: the controller has no TopologyPlugin (topology/tree or topology/block)"
            ),
        },
    };
    let levels: Vec<(String, ordo_slurm::topology::Units)> =
        t.levels.iter().enumerate().map(|(l, name)| (name.clone(), t.units(l))).collect();
    if a.json {
        let doc = serde_json::json!({
            "source": t.source,
            "levels": levels.iter().map(|(name, units)| serde_json::json!({
                "level": name,
                "units": units.iter().map(|(u, nodes)| serde_json::json!({"name": u, "nodes": nodes})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{} ({})", t.describe(), count(t.nodes().len(), "node"));
        for (name, units) in &levels {
            for (u, nodes) in units {
                println!("{name} {u}: {} ({})", nodes.join(","), count(nodes.len(), "node"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
struct PolicyArgs {
    /// Read this saved `scontrol show config` output instead of running scontrol.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn policy_cmd(a: PolicyArgs) -> Result<ExitCode> {
    let text = match &a.config {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => {
            // Slurm's clients wait for a controller that does not answer: at most 15 s.
            let out = std::process::Command::new("timeout")
                .args(["15", "scontrol", "show", "config"])
                .output()
                .context("running `scontrol show config` (is Slurm's client installed?)")?;
            if !out.status.success() {
                anyhow::bail!(
                    "`scontrol show config` failed: {} (give --config FILE with its saved output)",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let e = ordo_slurm::emulate::Emulation::from_config(&text)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        println!("{}", e.policy);
        println!("# from: {}", e.from.join(", "));
        if e.not_modelled.is_empty() {
            println!("# not modelled: nothing that changes the order");
        }
        for n in &e.not_modelled {
            println!("# not modelled: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
struct ImportArgs {
    /// Jobs from this time on (sacct -S syntax, e.g. 2024-05-01 or now-7days; default: all).
    #[arg(long)]
    since: Option<String>,
    /// Jobs up to this time (sacct -E syntax).
    #[arg(long)]
    until: Option<String>,
    /// Read this saved `sacct --parsable2` output instead of running sacct.
    #[arg(long, conflicts_with_all = ["jobcomp", "since", "until"])]
    sacct_file: Option<PathBuf>,
    /// Read this jobcomp/filetxt log (JobCompLoc) instead of running sacct.
    #[arg(long, conflicts_with_all = ["since", "until"])]
    jobcomp: Option<PathBuf>,
    /// Write the trace (ordo's generic CSV) here; default: standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The cluster (COUNTxGPUS groups) to report instead of reading it from sinfo.
    #[arg(long)]
    cluster: Option<String>,
    /// Only this partition.
    #[arg(long)]
    partition: Option<String>,
    /// Go on past bad rows (each is counted, the first ten reported) instead of stopping at the
    /// first.
    #[arg(long)]
    skip_bad: bool,
    /// Longest wait for one Slurm command.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Args, Debug)]
struct DriveArgs {
    /// The ordering policy (non-preemptive: fifo, sjf, sgf, with +easy or +conservative).
    #[arg(long)]
    policy: PolicySpec,
    /// Time between passes (e.g. 10s, 500ms, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    interval: Duration,
    /// Print the intended order with reasons; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// One pass, then exit (exit status 3 if Slurm did not answer).
    #[arg(long)]
    once: bool,
    /// Stop after this many passes (default: run until stopped).
    #[arg(long)]
    passes: Option<u64>,
    /// The JSON Lines audit log every change is appended to.
    #[arg(long, default_value = "ordo-slurm-audit.jsonl")]
    audit_log: PathBuf,
    /// Why the queue is ordered by this policy: required when the audit log's last policy is
    /// another (a change of order); kept in the log with the account that started `drive`.
    #[arg(long)]
    reason: Option<String>,
    /// Placement model used to plan: `consolidated` (as Slurm, a job of at most one node's GPUs
    /// on one node, larger ones on whole idle nodes), `pooled`, or `topology` (consolidated,
    /// each gang in the lowest level of the cluster's network topology that holds it, and a
    /// job's `--switches=1` held until one leaf switch holds it). Default: `topology` when the
    /// controller reports a topology (`scontrol show topology`) or --topology is given, else
    /// `consolidated`.
    #[arg(long, value_enum)]
    placement: Option<crate::cli::PlacementArg>,
    /// The cluster's topology.conf (`SwitchName=` or `BlockName=` lines), instead of the
    /// controller's `scontrol show topology` (needed with --rest: slurmrestd has no topology
    /// endpoint).
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Plan for this cluster (COUNTxGPUS groups) instead of the nodes sinfo reports.
    #[arg(long)]
    cluster: Option<String>,
    /// Order only the pending jobs whose first partition is one of these (comma-separated; default:
    /// every partition). Each partition is planned on its own nodes.
    #[arg(long, value_delimiter = ',')]
    partition: Option<Vec<String>>,
    /// The highest priority ordo gives (default: the highest Slurm accepts, 4294967293, less
    /// 1,000 left for priorities set by hand).
    #[arg(long)]
    priority_top: Option<u64>,
    /// The highest priority Slurm's own priority plugin may give a job: ordo's are all above it,
    /// so a new job waits below the ranked queue until ordo places it (default: from the
    /// controller's configuration: 4294901760 for priority/basic, the sum of the weights for
    /// priority/multifactor).
    #[arg(long)]
    priority_floor: Option<u64>,
    /// The most priority updates per second (halved while the controller answers slowly).
    #[arg(long, default_value_t = 200.0)]
    max_rate: f64,
    /// Serve Prometheus metrics at http://ADDR/metrics and the driver's health at
    /// http://ADDR/health (e.g. 0.0.0.0:9103; default: not served).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    conn: SlurmConn,
}

/// The driver's metrics (`--metrics-listen`), updated after each pass.
struct DriveMetrics {
    ops: std::sync::Arc<crate::ops_http::Ops>,
    passes: prometheus_client::metrics::counter::Counter,
    failures: prometheus_client::metrics::counter::Counter,
    changes: prometheus_client::metrics::counter::Counter,
    refused: prometheus_client::metrics::counter::Counter,
    reachable: crate::ops_http::FGauge,
    pending: crate::ops_http::FGauge,
    running: crate::ops_http::FGauge,
    left_alone: crate::ops_http::FGauge,
    beyond_range: crate::ops_http::FGauge,
    pass_s: crate::ops_http::FGauge,
    read_s: crate::ops_http::FGauge,
    latency_s: crate::ops_http::FGauge,
}

impl DriveMetrics {
    /// Registers the metrics and serves them on `addr`; `/health` answers 503 after three
    /// intervals (and a minute) without a pass that reached Slurm.
    fn serve(addr: &str, interval: Duration) -> Result<DriveMetrics> {
        use prometheus_client::registry::Unit;
        let ops = std::sync::Arc::new(crate::ops_http::Ops::new("slurm", interval * 3 + Duration::from_secs(60)));
        let m = DriveMetrics {
            passes: ops.counter("ordo_slurm_passes", "Passes that read Slurm and planned the order"),
            failures: ops.counter("ordo_slurm_pass_failures", "Passes stopped because Slurm did not answer or failed"),
            changes: ops.counter("ordo_slurm_priority_changes", "Priorities changed (with --dry-run: that would be)"),
            refused: ops.counter(
                "ordo_slurm_priority_changes_refused",
                "Changes not made: the job ended, started, was held or changed since the read",
            ),
            reachable: ops.gauge("ordo_slurm_reachable", "1 when the last pass reached Slurm", None),
            pending: ops.gauge("ordo_slurm_jobs_pending_ordered", "Pending jobs in ordo's order", None),
            running: ops.gauge("ordo_slurm_jobs_running", "Running jobs", None),
            left_alone: ops.gauge(
                "ordo_slurm_jobs_left_alone",
                "Pending jobs ordo leaves alone (held, set by hand)",
                None,
            ),
            beyond_range: ops.gauge(
                "ordo_slurm_jobs_beyond_range",
                "Pending jobs past the end of ordo's priority range (they keep Slurm's)",
                None,
            ),
            pass_s: ops.gauge(
                "ordo_slurm_last_pass_duration",
                "The last pass: read, plan and updates",
                Some(Unit::Seconds),
            ),
            read_s: ops.gauge(
                "ordo_slurm_last_read_duration",
                "The last pass's read of nodes and jobs",
                Some(Unit::Seconds),
            ),
            latency_s: ops.gauge(
                "ordo_slurm_update_latency",
                "The controller's median time per priority update in the last pass that sent any",
                Some(Unit::Seconds),
            ),
            ops,
        };
        let at = crate::ops_http::serve(addr, m.ops.clone())?;
        println!("{} metrics at http://{at}/metrics, health at http://{at}/health", stamp());
        Ok(m)
    }

    fn pass(&self, r: &ordo_slurm::PassReport) {
        let i = &r.intended;
        self.passes.inc();
        self.changes.inc_by(r.changes.len() as u64);
        self.refused.inc_by(r.failed.len() as u64);
        self.pending.set(i.order.len() as f64);
        self.running.set(i.running as f64);
        self.left_alone.set(i.left_alone.len() as f64);
        self.beyond_range.set(r.beyond_range as f64);
        self.pass_s.set((r.read_time + r.plan_time + r.update_time).as_secs_f64());
        self.read_s.set(r.read_time.as_secs_f64());
        if let Some(l) = r.latency {
            self.latency_s.set(l.as_secs_f64());
        }
        match &r.outage {
            None => {
                self.reachable.set(1.0);
                self.ops.pass_ok();
            }
            Some(e) => self.failed(&format!("slurm unreachable during the updates: {e}")),
        }
    }

    fn failed(&self, why: &str) {
        self.failures.inc();
        self.reachable.set(0.0);
        self.ops.problem(why);
    }
}

/// How `drive` and `release` reach Slurm.
#[derive(Args, Debug)]
struct SlurmConn {
    /// Longest wait for one Slurm command before Slurm counts as unreachable.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Talk to slurmrestd at this URL (e.g. http://127.0.0.1:6820, API v0.0.38) instead of
    /// running Slurm's command-line clients; the JWT comes from $SLURM_JWT or --rest-token-file.
    #[arg(long)]
    rest: Option<String>,
    /// The user the JWT belongs to (default: $USER, else root).
    #[arg(long)]
    rest_user: Option<String>,
    /// slurmrestd's OpenAPI version (v0.0.38 for Slurm 22.05, v0.0.42 for 24.11).
    #[arg(long, default_value = "v0.0.38")]
    rest_version: String,
    /// A file holding the JWT (`SLURM_JWT=...` as `scontrol token` prints, or the bare token).
    #[arg(long)]
    rest_token_file: Option<PathBuf>,
    /// With --rest and API v0.0.40 or later: read every job's full record at least this often.
    /// Between full reads a pass reads job states only (`GET /jobs/state`) and fetches the
    /// records of new and changed jobs, and of each job before changing it; what changes on a
    /// job without changing its state (a new time limit or dependency) is seen at the next full
    /// read. 0s: a full read every pass.
    #[arg(long, default_value = "5m", value_parser = parse_duration_or_zero)]
    rest_full_read: Duration,
}

#[derive(Args, Debug)]
struct ReleaseArgs {
    /// The audit log `drive` wrote.
    #[arg(long, default_value = "ordo-slurm-audit.jsonl")]
    audit_log: PathBuf,
    /// Say what would be released; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The most priority updates per second.
    #[arg(long, default_value_t = 200.0)]
    max_rate: f64,
    #[command(flatten)]
    conn: SlurmConn,
}

/// `10s`, `500ms`, `2m`, `1h`, or a plain number of seconds (the policy language's durations,
/// `ordo_core::policy::parse_duration`), more than 0 and at most a year.
fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic()) == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let ms = ordo_core::policy::parse_duration(s)
        .ok_or_else(|| format!("`{s}` is not a duration (e.g. 10s, 500ms, 2m, 1h)"))?;
    if ms <= 0 || ms > 86_400_000 * 365 {
        return Err(format!("`{s}`: must be more than 0 and at most a year"));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// Runs `ordo slurm ...`.
pub fn run(a: SlurmArgs) -> Result<ExitCode> {
    match a.cmd {
        SlurmCmd::Import(a) => import(a),
        SlurmCmd::Drive(a) => drive(*a),
        SlurmCmd::Release(a) => release_cmd(a),
        SlurmCmd::Policy(a) => policy_cmd(a),
        SlurmCmd::Topology(a) => topology_cmd(a),
    }
}

fn import(a: ImportArgs) -> Result<ExitCode> {
    let slurm = SlurmCli::new(a.timeout);
    let spin = crate::progress::spinner("reading Slurm accounting");
    let read = || -> Result<_> {
        let (text, name, format) = if let Some(p) = &a.sacct_file {
            (
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
                p.display().to_string(),
                Format::Sacct,
            )
        } else if let Some(p) = &a.jobcomp {
            (
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
                p.display().to_string(),
                Format::Jobcomp,
            )
        } else {
            let out =
                slurm.sacct(a.since.as_deref(), a.until.as_deref(), a.partition.as_deref()).context("running sacct")?;
            (out.into_bytes(), "sacct".to_string(), Format::Sacct)
        };
        let opts = LoadOptions { skip_bad: a.skip_bad, ..LoadOptions::new(format) };
        let t = load_reader(text.as_slice(), &name, &opts)?;
        Ok((t, name, format))
    };
    let read = read();
    spin.finish_and_clear();
    let (t, name, format) = read?;
    crate::trace_cmd::warn_skipped(&t);
    let mut w = t.workload;
    if let (Some(p), Format::Jobcomp) = (&a.partition, format) {
        // sacct filtered by partition itself; the jobcomp log holds every partition.
        w.jobs.retain(|j| j.queue.as_deref() == Some(p.as_str()));
        w.renumber();
    }
    match &a.out {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            write_generic(&w, std::io::BufWriter::new(f)).with_context(|| format!("writing {}", p.display()))?;
        }
        None => write_generic(&w, std::io::stdout().lock()).context("writing the trace")?,
    }
    // The cluster as `--cluster` takes it (None: not known) and in words.
    let mut topology_note = None;
    let mut topology_file = None;
    let (spec, cluster) = match &a.cluster {
        Some(c) => {
            let d = ClusterSpec::parse(c).context("--cluster")?.describe();
            (Some(d.clone()), format!("{d} (--cluster)"))
        }
        None => match slurm.nodes() {
            Ok(nodes) => {
                let (spec, words) = describe_all(&nodes, a.partition.as_deref(), a.out.as_deref(), &w.jobs)?;
                // The controller's topology, on the simulated nodes' names, beside the trace.
                match slurm.topology() {
                    Ok(None) => {}
                    Err(e) => topology_note = Some(format!("unknown ({e})")),
                    Ok(Some(t)) => match (&a.out, &spec) {
                        (Some(out), Some(spec)) => {
                            let (note, file) = write_topology(&t, &nodes, a.partition.as_deref(), out, spec)?;
                            topology_note = Some(note);
                            topology_file = file;
                        }
                        _ => {
                            topology_note = Some(format!(
                                "{} (with --out, written beside the trace for ordo compare)",
                                t.describe()
                            ))
                        }
                    },
                }
                (spec, words)
            }
            Err(e) => (None, format!("unknown ({e}); give --cluster")),
        },
    };
    let gpus: usize = w.jobs.iter().map(|j| j.gpus as usize).sum();
    let asks =
        |f: fn(&ordo_core::GpuNeeds) -> bool| w.jobs.iter().filter(|j| j.needs.as_deref().is_some_and(f)).count();
    let (typed, constrained) = (asks(|n| !n.models.is_empty()), asks(|n| !n.features.is_empty()));
    // The summary goes to stderr when the trace itself goes to stdout.
    let mut msg = format!(
        "read {} from {name}: {} written ({} asked in all, {}); dropped {} that never ran and {} with run time 0",
        count(t.rows, "accounting row"),
        count(w.jobs.len(), "job"),
        count(gpus, "GPU"),
        count(w.users.len(), "user"),
        t.dropped_never_ran,
        t.dropped_zero_duration,
    );
    if t.skipped_bad > 0 {
        msg.push_str(&format!("; skipped {}", count(t.skipped_bad, "bad row")));
    }
    if typed + constrained > 0 {
        msg.push_str(&format!(
            "\nGPU types and features: {typed} of {} asked for a GPU type, {constrained} for node features (columns gpu_model, features)",
            count(w.jobs.len(), "job")
        ));
    }
    if gpus == 0 && !w.jobs.is_empty() {
        // Every job at 0 GPUs: a comparison of GPU schedules on it would compare nothing.
        let why = match format {
            Format::Jobcomp => {
                "the jobcomp log records GPUs only where gres/gpu is an accounted TRES \
                 (AccountingStorageTRES=gres/gpu in slurm.conf); import with sacct instead, which \
                 also reads the GPUs a job asked for"
            }
            _ => "neither the GPUs allocated (AllocTRES) nor those asked for (ReqTRES) name gres/gpu",
        };
        eprintln!("warning: no job in {name} records a GPU (all {} at 0 GPUs): {why}", count(w.jobs.len(), "job"));
    }
    let started = w.jobs.iter().filter(|j| j.start.is_some()).count();
    msg.push_str(&format!(
        "\nstart times: {started} of {} (`ordo compare` shows the schedule as run beside the policies when every job has one)",
        count(w.jobs.len(), "job")
    ));
    msg.push_str(&format!("\ncluster: {cluster}\n"));
    if let Some(t) = &topology_note {
        msg.push_str(&format!("topology: {t}\n"));
    }
    match &a.out {
        Some(p) => {
            print!("{msg}");
            println!("{}", next_step(p, spec.as_deref(), topology_file.as_deref()));
        }
        None => eprint!("{msg}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The command to run next on the imported trace `out`: with `--cluster` when the cluster is
/// known (`spec`, as `--cluster` takes it); else one that runs as it is, on ordo's default
/// cluster, and how to give the real one.
fn next_step(out: &std::path::Path, spec: Option<&str>, topology: Option<&std::path::Path>) -> String {
    let trace = crate::cli::shell_word(&out.display().to_string());
    match spec {
        Some(c) => match topology {
            Some(t) => format!(
                "next: ordo compare --trace {trace} --cluster {c} --topology {} --placement consolidated,topology",
                crate::cli::shell_word(&t.display().to_string())
            ),
            None => format!("next: ordo compare --trace {trace} --cluster {c}"),
        },
        None => format!(
            "next: ordo compare --trace {trace}\n      (the cluster is not known here, so that runs on ordo's default 64x8; add --cluster COUNTxGPUS with your nodes, e.g. --cluster 16x8,4x4)"
        ),
    }
}

/// Writes the controller's topology `t` beside the trace `out` (`STEM.topology.conf`), on the
/// names the simulated cluster `spec` (what `describe_all` gave: COUNTxGPUS groups, or the cluster
/// file it wrote) gives Slurm's nodes of `partition`, in the same order. Returns what to say,
/// and the file where one was written.
fn write_topology(
    t: &SlurmTopology,
    nodes: &[SlurmNode],
    partition: Option<&str>,
    out: &std::path::Path,
    spec: &str,
) -> Result<(String, Option<PathBuf>)> {
    let name = out.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    let cluster_file = out.with_file_name(format!("{stem}.cluster.toml"));
    let simulated = match ClusterSpec::parse(spec) {
        Ok(c) => c,
        Err(_) => ordo_trace::load_cluster_toml(&cluster_file)
            .with_context(|| format!("reading back {}", cluster_file.display()))?,
    };
    let slurm_names: Vec<&str> = nodes
        .iter()
        .filter(|n| partition.is_none_or(|p| n.partitions.iter().any(|x| x == p)))
        .map(|n| n.name.as_str())
        .collect();
    if slurm_names.len() != simulated.nodes.len() {
        return Ok((format!("{} (not written: the simulated cluster's nodes are not sinfo's)", t.describe()), None));
    }
    let rename: std::collections::HashMap<&str, &str> =
        slurm_names.iter().copied().zip(simulated.nodes.iter().map(|n| n.name.as_str())).collect();
    let Some(text) = t.to_conf(&|n| rename.get(n).map(|s| s.to_string())) else {
        return Ok((
            format!("{} (not written: none of its nodes is in the cluster, or blocks of several sizes)", t.describe()),
            None,
        ));
    };
    let path = out.with_file_name(format!("{stem}.topology.conf"));
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok((format!("{}, written on the simulated nodes' names: {}", t.describe(), path.display()), Some(path)))
}

/// Every node (available or not) of `partition` (default: all) as COUNTxGPUS[:TYPE] groups:
/// the cluster for `compare`, as `--cluster` takes it (None when sinfo lists no node) and in
/// words. GPU types are kept where one of `jobs` asks for a type, and the node features some
/// job requires: ordo places a job's GPUs on nodes of one kind, so kinds no job asks about are
/// not told apart (as `ordo slurm drive` plans). Features do not fit in the COUNTxGPUS form:
/// where some are kept and the trace goes to `out`, the cluster is written beside it as a TOML
/// file (`STEM.cluster.toml`, which `ordo compare --trace out` also finds by itself) and
/// `--cluster` names that file.
fn describe_all(
    nodes: &[SlurmNode],
    partition: Option<&str>,
    out: Option<&std::path::Path>,
    jobs: &[ordo_core::Job],
) -> Result<(Option<String>, String)> {
    let all: Vec<SlurmNode> = nodes
        .iter()
        .filter(|n| partition.is_none_or(|p| n.partitions.iter().any(|x| x == p)))
        .map(|n| SlurmNode { state: "idle".into(), ..n.clone() })
        .collect();
    let refs: Vec<&SlurmNode> = all.iter().collect();
    let Some(full) = cluster_from_nodes(&refs, false) else {
        return Ok((None, "unknown (sinfo lists no nodes); give --cluster".into()));
    };
    let needs = || jobs.iter().filter_map(|j| j.needs.as_deref());
    let typed = needs().any(|n| !n.models.is_empty());
    let named: Vec<String> = needs().flat_map(|n| n.features.iter().cloned()).collect();
    let mut c = keep_kinds(&full, typed, &named);
    // A node with GPUs of several types (`a100+v100` to the driver) has no one model here.
    for n in &mut c.nodes {
        n.gpu_model = n.gpu_model.take().filter(|m| !m.contains('+'));
    }
    let mut words = format!("{} (from sinfo, {}", c.describe(), count(c.nodes.len(), "node"));
    let mut dropped: Vec<String> = Vec::new();
    if !typed && full.nodes.iter().any(|n| n.gpu_model.is_some()) {
        dropped.push("GPU types".into());
    }
    if full.nodes.iter().zip(&c.nodes).any(|(a, b)| a.features.len() > b.features.len()) {
        dropped.push("features".into());
    }
    if !dropped.is_empty() {
        words.push_str(&format!("; its {} left out: no job imported asks for them", dropped.join(" and ")));
    }
    words.push(')');
    if c.nodes.iter().all(|n| n.features.is_empty()) {
        return Ok((Some(c.describe()), words));
    }
    let Some(out) = out else {
        return Ok((
            Some(c.describe()),
            format!(
                "{words}; node features left out (with --out, a cluster file with them is written beside the trace)"
            ),
        ));
    };
    let name = out.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    let path = out.with_file_name(format!("{stem}.cluster.toml"));
    std::fs::write(&path, cluster_toml(&c)).with_context(|| format!("writing {}", path.display()))?;
    Ok((
        Some(crate::cli::shell_word(&path.display().to_string())),
        format!("{words}, with node features: {}", path.display()),
    ))
}

/// A cluster as a TOML cluster file (`ordo_trace::load_cluster_toml`): one group per run of
/// nodes alike in GPUs, GPU type and features. Names are written as JSON strings, which are
/// TOML basic strings too.
fn cluster_toml(c: &ClusterSpec) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let mut groups: Vec<(u32, &ordo_core::NodeSpec)> = Vec::new();
    for n in &c.nodes {
        match groups.last_mut() {
            Some((k, m)) if (m.gpus, &m.gpu_model, &m.features) == (n.gpus, &n.gpu_model, &n.features) => *k += 1,
            _ => groups.push((1, n)),
        }
    }
    let mut out = "# The cluster `ordo slurm import` read from sinfo: GPUs, GPU types and node features.\n".to_string();
    for (k, n) in groups {
        out.push_str(&format!("\n[[groups]]\ncount = {k}\ngpus = {}\n", n.gpus));
        if let Some(m) = &n.gpu_model {
            out.push_str(&format!("gpu_model = {}\n", q(m)));
        }
        if !n.features.is_empty() {
            let f: Vec<String> = n.features.iter().map(|f| q(f)).collect();
            out.push_str(&format!("features = [{}]\n", f.join(", ")));
        }
    }
    out
}

/// The Slurm connection: slurmrestd when `rest` is given, else the command-line clients.
fn backend(conn: &SlurmConn) -> Result<Box<dyn Backend>> {
    let SlurmConn { rest, rest_user: user, rest_token_file: token_file, rest_version, timeout, rest_full_read } = conn;
    let timeout = *timeout;
    let Some(url) = rest else {
        return Ok(Box::new(SlurmCli::new(timeout)));
    };
    let token = match token_file {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading --rest-token-file {}", p.display()))?,
        None => std::env::var("SLURM_JWT")
            .context("--rest needs a JWT: set SLURM_JWT (e.g. from `scontrol token`) or give --rest-token-file")?,
    };
    let token = token.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    if token.trim_start_matches("SLURM_JWT=").is_empty() {
        bail!("--rest: the JWT is empty");
    }
    let user = user.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "root".into());
    let mut rest = SlurmRest::new(url, &user, &token, rest_version, timeout);
    rest.full_read_every = *rest_full_read;
    Ok(Box::new(rest))
}

fn stamp() -> String {
    rfc3339(unix_now())
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// The line a pass prints: jobs ordered, updates, time and the controller's latency. Scripts
/// read `changed N priorities` in it.
fn pass_line(r: &ordo_slurm::PassReport, dry_run: bool) -> String {
    let i = &r.intended;
    let verb = if dry_run { "would change" } else { "changed" };
    let mut s = format!(
        "cluster {}, {} running, {} pending ordered, {} left alone",
        i.cluster,
        i.running,
        i.order.len(),
        i.left_alone.len()
    );
    if i.not_driven > 0 {
        s.push_str(&format!(", {} in partitions not driven here", i.not_driven));
    }
    s.push_str(&format!("; {verb} {}", count(r.changes.len(), "priority")));
    if !r.failed.is_empty() {
        s.push_str(&format!(" ({} not changed: ended, started, held or changed since the read)", r.failed.len()));
    }
    s.push_str(&format!(
        " in {} (read {}, plan {}",
        secs(r.read_time + r.plan_time + r.update_time),
        secs(r.read_time),
        secs(r.plan_time)
    ));
    if !r.changes.is_empty() && !dry_run {
        s.push_str(&format!(", updates {}", secs(r.update_time)));
    }
    s.push(')');
    if let Some(n) = &r.read_note {
        s.push_str(&format!("; {n}"));
    }
    if let Some(l) = r.latency {
        s.push_str(&format!("; controller {:.1} ms per update, at most {:.0}/s", l.as_secs_f64() * 1000.0, r.rate));
    }
    s
}

/// `drive`'s placement and where its topology comes from: `--placement topology` needs one
/// (the controller's, or `--topology FILE`); no `--placement` places by a topology when there
/// is one; `pooled` and `consolidated` use none.
fn drive_placement(
    arg: Option<crate::cli::PlacementArg>,
    file: Option<&std::path::Path>,
    cluster_given: bool,
) -> Result<(Placement, TopologyFrom, Option<SlurmTopology>)> {
    use crate::cli::PlacementArg;
    let given = file.map(read_topology_file).transpose()?;
    if cluster_given && (arg == Some(PlacementArg::Topology) || given.is_some()) {
        bail!("--cluster plans for nodes that are not Slurm's: a topology of Slurm's nodes does not apply to them; leave out --cluster");
    }
    Ok(match (arg, given) {
        (Some(p @ (PlacementArg::Pooled | PlacementArg::Consolidated)), Some(_)) => {
            bail!(
                "--topology places by the topology: use it with --placement topology (or no --placement), not {}",
                if p == PlacementArg::Pooled { "pooled" } else { "consolidated" }
            )
        }
        (Some(PlacementArg::Pooled), None) => (Placement::Pooled, TopologyFrom::Off, None),
        (Some(PlacementArg::Consolidated), None) => (Placement::Consolidated, TopologyFrom::Off, None),
        (_, Some(t)) => (Placement::Consolidated, TopologyFrom::Given, Some(t)),
        (Some(PlacementArg::Topology), None) => (Placement::Consolidated, TopologyFrom::SlurmRequired, None),
        (None, None) if cluster_given => (Placement::Consolidated, TopologyFrom::Off, None),
        (None, None) => (Placement::Consolidated, TopologyFrom::Slurm, None),
    })
}

/// A topology.conf file, read for Slurm's nodes.
fn read_topology_file(path: &std::path::Path) -> Result<SlurmTopology> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--topology: reading {}", path.display()))?;
    SlurmTopology::from_conf(&text, &path.display().to_string()).map_err(|e| anyhow::anyhow!("--topology {e}"))
}

fn drive(a: DriveArgs) -> Result<ExitCode> {
    check_policy(&a.policy)?;
    // A change of the policy ordering the queue says who made it and why (refused before Slurm
    // is touched when no reason is given); the record is written once the driver has started.
    let policy = a.policy.to_string();
    let reason = a.reason.as_deref().map(str::trim).unwrap_or("").to_string();
    if reason.len() > 4096 {
        bail!("--reason: at most 4,096 bytes (got {})", reason.len());
    }
    let before = ordo_slurm::audit::last_policy(&a.audit_log)?;
    let changed = !a.dry_run && before.as_deref() != Some(policy.as_str());
    if let (true, Some(b)) = (changed, &before) {
        if reason.is_empty() {
            bail!(
                "{} says the queue was last ordered by {b}; ordering it by {policy} is a change of policy: give --reason \
                 \"...\" (kept in the audit log with who made the change)",
                a.audit_log.display()
            );
        }
    }
    let cluster = a.cluster.as_deref().map(ClusterSpec::parse).transpose().context("--cluster")?;
    let (placement, topology_from, given) = drive_placement(a.placement, a.topology.as_deref(), cluster.is_some())?;
    let slurm = backend(&a.conn)?;
    let cfg = DriveConfig {
        plan: PlanSpec {
            policy: a.policy.clone(),
            placement,
            partitions: a.partition.clone(),
            model_memory: false,
            cluster,
            topology: given.map(std::sync::Arc::new),
        },
        topology: topology_from,
        priority_floor: a.priority_floor,
        priority_top: a.priority_top,
        dry_run: a.dry_run,
        audit_log: a.audit_log.clone(),
        max_rate: a.max_rate,
        max_batch: 100,
    };
    let mut driver = Driver::new(slurm.as_ref(), cfg)?;
    if changed {
        let rec = AuditRecord {
            policy: policy.clone(),
            actor: Some(ordo_server::runas::current_user().name),
            from_policy: before.clone(),
            ..AuditRecord::now("policy", 0, 0, None, reason.clone())
        };
        ordo_slurm::audit::append(&a.audit_log, &[rec])?;
    }
    let metrics = a.metrics_listen.as_deref().map(|addr| DriveMetrics::serve(addr, a.interval)).transpose()?;
    if a.dry_run {
        println!(
            "{} ordo slurm drive --dry-run: policy {}; printing the intended order, changing nothing",
            stamp(),
            a.policy
        );
    } else {
        println!(
            "{} ordo slurm drive: policy {}, a pass every {:?}, through {}; every priority change is appended to {}",
            stamp(),
            a.policy,
            a.interval,
            slurm.describe(),
            a.audit_log.display()
        );
        println!(
            "to hand control back to Slurm: stop this process, then run `ordo slurm release --audit-log {}`",
            a.audit_log.display()
        );
    }
    let mut outage: Option<Instant> = None;
    let mut last_summary: Option<String> = None;
    let mut shown_range = false;
    let mut pass = 0u64;
    loop {
        pass += 1;
        let t0 = Instant::now();
        match driver.pass() {
            Ok(r) => {
                if let Some(m) = &metrics {
                    m.pass(&r);
                }
                let resumed = outage.take().map(|since| {
                    println!("{} slurm reachable again after {:.0}s; resuming", stamp(), since.elapsed().as_secs_f64());
                });
                if let (false, Some(range)) = (shown_range, driver.range()) {
                    shown_range = true;
                    let plugin = driver
                        .controller_config()
                        .map_or("unknown through slurmrestd".to_string(), |c| c.priority_type.clone());
                    println!(
                        "{} priorities ordo gives: {} to {} (priority plugin: {plugin}; Slurm gives new jobs at most {}, so they wait below the ranked queue until ordo places them)",
                        stamp(),
                        range.floor + 1,
                        range.top,
                        range.floor
                    );
                    if let Some(t) = driver.topology() {
                        println!(
                            "{} topology: {}; gangs placed in the lowest level that holds them, a job's --switches=1 held until one switch holds it",
                            stamp(),
                            t.describe()
                        );
                    }
                }
                let i = &r.intended;
                let line = pass_line(&r, a.dry_run);
                // A quiet queue prints nothing pass after pass; any change in it is printed.
                let summary: String = line.split(" in ").next().unwrap_or(&line).to_string();
                if resumed.is_some()
                    || a.dry_run
                    || !r.changes.is_empty()
                    || r.outage.is_some()
                    || last_summary.as_deref() != Some(summary.as_str())
                {
                    println!("{} pass {pass}: {line}", stamp());
                }
                last_summary = Some(summary);
                for w in &i.warnings {
                    println!("  warning: {w}");
                }
                if a.dry_run {
                    println!(
                        "  {:>4}  {:>10}  {:>4}  {:>5}  {:>7}  {:>12}  {:>12}  reason",
                        "pos", "job", "gpus", "tasks", "limit", "priority", "new"
                    );
                    let new: std::collections::HashMap<u64, u64> = r.changes.iter().map(|c| (c.0, c.2)).collect();
                    for rk in &i.order {
                        let n = new.get(&rk.job).map_or("-".to_string(), u64::to_string);
                        let lim = rk.time_limit_min.map_or("none".to_string(), |m| format!("{m}m"));
                        println!(
                            "  {:>4}  {:>10}  {:>4}  {:>5}  {:>7}  {:>12}  {:>12}  {}",
                            rk.position, rk.job, rk.gpus, rk.tasks, lim, rk.priority, n, rk.reason
                        );
                    }
                    for (job, why) in &i.left_alone {
                        println!("  left alone: job {job}: {why}");
                    }
                } else {
                    if r.changes.len() <= 20 {
                        for (job, old, new) in &r.changes {
                            println!("  job {job}: priority {old} -> {new}");
                        }
                    }
                    for (job, e) in &r.failed {
                        println!("  job {job}: not changed: {e}");
                    }
                }
                if let Some(e) = &r.outage {
                    println!(
                        "{} slurm unreachable during the updates: {e}; stopped the pass, changing nothing more, retrying every {:?}",
                        stamp(),
                        a.interval
                    );
                    outage = Some(Instant::now());
                    if a.once {
                        return Ok(ExitCode::from(3));
                    }
                }
            }
            Err(e) if e.is_unreachable() => {
                if let Some(m) = &metrics {
                    m.failed(&format!("slurm unreachable: {e}"));
                }
                match &outage {
                    None => {
                        println!(
                            "{} slurm unreachable: {e}; changing nothing, retrying every {:?}",
                            stamp(),
                            a.interval
                        );
                        outage = Some(Instant::now());
                    }
                    Some(since) => {
                        println!("{} slurm still unreachable ({:.0}s): {e}", stamp(), since.elapsed().as_secs_f64())
                    }
                }
                if a.once {
                    return Ok(ExitCode::from(3));
                }
            }
            Err(e @ ordo_slurm::SlurmError::Policy(_)) | Err(e @ ordo_slurm::SlurmError::Io { .. }) => {
                bail!(e)
            }
            Err(e) => {
                if let Some(m) = &metrics {
                    m.failed(&format!("pass failed: {e}"));
                }
                println!("{} pass {pass} failed, nothing more changed: {e}", stamp());
                if a.once {
                    if matches!(e, ordo_slurm::SlurmError::Spawn { .. }) {
                        // No Slurm client here: Slurm did not answer (docs/SLURM.md: status 3).
                        eprintln!("error: {e}");
                        return Ok(ExitCode::from(3));
                    }
                    bail!(e);
                }
            }
        }
        if a.once || a.passes.is_some_and(|n| pass >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(a.interval.saturating_sub(t0.elapsed()));
    }
}

fn release_cmd(a: ReleaseArgs) -> Result<ExitCode> {
    let slurm = backend(&a.conn)?;
    let t0 = Instant::now();
    let out = match release(slurm.as_ref(), &a.audit_log, a.dry_run, a.max_rate, 200) {
        Ok(o) => o,
        Err(e) if e.is_unreachable() => {
            println!("slurm unreachable: {e}; what was released so far is in the audit log, run release again");
            return Ok(ExitCode::from(3));
        }
        Err(e) => return Err(e.into()),
    };
    if out.jobs.is_empty() {
        println!("{}: no priority set by ordo is outstanding; nothing to release", a.audit_log.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut released = 0;
    for (job, o) in &out.jobs {
        let line = match o {
            ReleaseOutcome::Released(_) => {
                released += 1;
                continue;
            }
            ReleaseOutcome::NotPending => continue,
            ReleaseOutcome::ChangedSince(now, ours) => {
                format!("priority is {now}, not the {ours} ordo set: changed by someone else, left alone")
            }
            ReleaseOutcome::Held => "held: left alone".into(),
            ReleaseOutcome::Failed(e) => format!("Slurm refused: {e}"),
        };
        println!("job {job}: {line}");
    }
    let not_pending = out.jobs.iter().filter(|o| o.1 == ReleaseOutcome::NotPending).count();
    let verb = if a.dry_run { "would release" } else { "released" };
    let plugin = out.plugin.as_deref().unwrap_or("unknown (slurmrestd): handled as priority/basic");
    println!(
        "{verb} {released} of {} ordo had set ({not_pending} no longer pending); {} {} so that they queue in submit order again (priority plugin: {plugin}); {}",
        count(out.jobs.len(), "job"),
        if a.dry_run { "would hand back" } else { "handed back" },
        count(out.renumbered, "other pending job"),
        secs(t0.elapsed())
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{cluster_toml, describe_all, parse_duration};
    use ordo_slurm::SlurmNode;
    use std::time::Duration;

    /// The dev cluster with typed GPUs and features (as `sinfo` gives it) becomes a cluster file
    /// beside the trace that reads back the same, and `--cluster` names it; without features,
    /// COUNTxGPUS:TYPE groups.
    #[test]
    fn import_writes_a_cluster_file_for_node_features() {
        let node = |name: &str, gpus: u32, t: &str, f: &[&str]| SlurmNode {
            name: name.into(),
            gpus,
            cpus: Some(2),
            mem_mib: Some(4000),
            state: "mixed".into(),
            partitions: vec!["gpu".into()],
            gpu_types: vec![t.into()],
            features: f.iter().map(|x| x.to_string()).collect(),
        };
        let nodes =
            [node("n1", 8, "a100", &["ib", "nvme"]), node("n2", 8, "a100", &["ib"]), node("n3", 4, "v100", &[])];
        let dir = std::env::temp_dir().join(format!("ordo-import-toml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("may.csv");
        let job = |models: &[&str], features: &[&str]| ordo_core::Job {
            needs: Some(Box::new(ordo_core::GpuNeeds {
                models: models.iter().map(|m| m.to_string()).collect(),
                features: features.iter().map(|m| m.to_string()).collect(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let jobs = [job(&["a100"], &[]), job(&[], &["ib", "nvme"])];
        let (spec, words) = describe_all(&nodes, None, Some(&out), &jobs).unwrap();
        let file = dir.join("may.cluster.toml");
        assert_eq!(spec.as_deref(), Some(file.display().to_string().as_str()), "{words}");
        let back = ordo_trace::load_cluster_toml(&file).unwrap();
        let got: Vec<(u32, Option<&str>, &[String])> =
            back.nodes.iter().map(|n| (n.gpus, n.gpu_model.as_deref(), n.features.as_slice())).collect();
        assert_eq!(
            got,
            vec![
                (8, Some("a100"), &["ib".to_string(), "nvme".to_string()][..]),
                (8, Some("a100"), &["ib".to_string()][..]),
                (4, Some("v100"), &[][..])
            ]
        );
        // Features no job requires are left out (no cluster file), and GPU types where no job
        // asks for one.
        let (spec, words) = describe_all(&nodes, None, Some(&out), &jobs[..1]).unwrap();
        assert_eq!(spec.as_deref(), Some("2x8:a100,1x4:v100"), "{words}");
        assert!(words.ends_with("its features left out: no job imported asks for them)"), "{words}");
        let (spec, words) = describe_all(&nodes, None, Some(&out), &[]).unwrap();
        assert_eq!(spec.as_deref(), Some("2x8,1x4"), "{words}");
        assert!(words.contains("its GPU types and features left out"), "{words}");
        assert!(cluster_toml(&ordo_core::ClusterSpec::parse("2x8:a100").unwrap())
            .contains("count = 2\ngpus = 8\ngpu_model = \"a100\""));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("400d").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
