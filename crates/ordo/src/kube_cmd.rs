//! `ordo kube schedule|queue|explain|import`: ordo as a Kubernetes scheduler for GPU pods, its
//! queue and reasons, and its audit log as a trace (wiring around the `ordo-kube` crate).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_core::words::count;
use ordo_core::PolicySpec;
use ordo_kube::client::{config, Kube, Settings};
use ordo_kube::objects::ReadConfig;
use ordo_kube::run::{now_ms, run as run_loop, snapshot, RunConfig};
use ordo_kube::words::clock;
use ordo_kube::EngineConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `ordo kube ...`
#[derive(Args, Debug)]
pub struct KubeArgs {
    #[command(subcommand)]
    cmd: KubeCmd,
}

#[derive(Subcommand, Debug)]
enum KubeCmd {
    /// Schedule the pods whose spec.schedulerName is --scheduler-name: order them with an ordo
    /// policy, place them on the nodes' GPUs, CPU and memory, bind them; say why pods wait.
    Schedule(ScheduleArgs),
    /// The waiting pods in the policy's order, with reasons and expected starts.
    Queue(ViewArgs),
    /// One pod (NAMESPACE/NAME): where it is, or why it waits.
    Explain(ExplainArgs),
    /// Turn the scheduler's audit log into an ordo trace for `ordo compare --trace`.
    Import(ImportArgs),
}

/// What every command that talks to the API server needs.
#[derive(Args, Debug, Clone)]
struct Common {
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The spec.schedulerName of the pods ordo schedules.
    #[arg(long, default_value = "ordo")]
    scheduler_name: String,
    /// The namespace of the ConfigMap `ordo-scheduler-NAME` in which the scheduler records its
    /// policy and settings, which `queue` and `explain` read.
    #[arg(long, default_value = "ordo-system")]
    config_namespace: String,
    /// The extended resource that counts GPUs (default: nvidia.com/gpu; `queue` and `explain`:
    /// the scheduler's, from its ConfigMap).
    #[arg(long)]
    gpu_resource: Option<String>,
    /// The node label that names a node's GPU model (default: nvidia.com/gpu.product, as NVIDIA
    /// GPU feature discovery sets it; `queue` and `explain`: the scheduler's).
    #[arg(long)]
    gpu_model_label: Option<String>,
    /// Only nodes with these labels form ordo's pool (k=v,k2=v2; default: every node; `queue`
    /// and `explain`: the scheduler's).
    #[arg(long)]
    node_selector: Option<String>,
    /// Run-time estimate of a pod that gives none (no ordo.dev/estimate annotation, no
    /// activeDeadlineSeconds; default: 24h; `queue` and `explain`: the scheduler's).
    #[arg(long, value_parser = crate::cli::parse_duration_arg)]
    default_estimate: Option<i64>,
    /// Place gangs by the topology the nodes' labels give: LABEL[=LEVEL],... lowest level first
    /// (e.g. nvidia.com/gpu.clique=block,example.com/rack=rack,topology.kubernetes.io/zone=zone;
    /// LEVEL defaults to block, zone, region for those well-known labels, else the label's name);
    /// pods ask a level with the annotation ordo.dev/topology: required:LEVEL or
    /// preferred:LEVEL (default: no topology; `queue` and `explain`: the scheduler's).
    #[arg(long, value_name = "LABEL[=LEVEL],...")]
    topology_labels: Option<String>,
}

const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
const DEFAULT_ESTIMATE_MS: i64 = 24 * 3_600_000;

#[derive(Args, Debug)]
struct ScheduleArgs {
    /// The ordering policy (every ordo policy; preemptive ones evict through the Eviction API).
    #[arg(long)]
    policy: PolicySpec,
    #[command(flatten)]
    common: Common,
    /// The JSON Lines audit log every decision is appended to (default:
    /// $XDG_STATE_HOME/ordo/kube-audit.jsonl, else ~/.local/state/ordo/kube-audit.jsonl).
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics and the scheduler's health at
    /// http://ADDR/health (e.g. 0.0.0.0:9102; default: not served).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// A full relist of pods and nodes this often (watches relist by themselves when they expire).
    #[arg(long, default_value = "5m", value_parser = crate::cli::parse_duration_arg)]
    resync: i64,
    /// Preemptive policies: a pod is not evicted before it has run this long.
    #[arg(long, default_value = "0s", value_parser = crate::cli::parse_duration_arg)]
    min_run: i64,
    /// Bindings in flight at once.
    #[arg(long, default_value_t = 32)]
    bind_concurrency: usize,
    /// Log each pass that binds or evicts to stderr.
    #[arg(long, short)]
    verbose: bool,
}

#[derive(Args, Debug)]
struct ViewArgs {
    /// The ordering policy (default: the one the scheduler runs, from its ConfigMap).
    #[arg(long)]
    policy: Option<PolicySpec>,
    #[command(flatten)]
    common: Common,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The pod, as NAMESPACE/NAME.
    pod: String,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Args, Debug)]
struct ImportArgs {
    /// The scheduler's audit log (`ordo kube schedule --audit-log`; default: its default).
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Write the trace (ordo's generic CSV) here; default: standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: KubeArgs) -> Result<ExitCode> {
    match a.cmd {
        KubeCmd::Import(i) => import(i),
        KubeCmd::Schedule(s) => runtime()?.block_on(schedule(s)),
        KubeCmd::Queue(v) => runtime()?.block_on(queue(v)),
        KubeCmd::Explain(e) => runtime()?.block_on(explain(e)),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

fn node_selector(s: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            bail!("--node-selector: expected k=v[,k2=v2], found `{part}`");
        };
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// The settings the engine runs with: those given, else `recorded` (the scheduler's, from its
/// ConfigMap), else the defaults.
fn settings(c: &Common, policy: String, recorded: Option<&Settings>) -> Settings {
    Settings {
        policy,
        gpu_resource: c
            .gpu_resource
            .clone()
            .or_else(|| recorded.map(|r| r.gpu_resource.clone()))
            .unwrap_or_else(|| DEFAULT_GPU_RESOURCE.into()),
        gpu_model_label: c
            .gpu_model_label
            .clone()
            .or_else(|| recorded.map(|r| r.gpu_model_label.clone()))
            .unwrap_or_else(|| ordo_kube::objects::DEFAULT_GPU_MODEL_LABEL.into()),
        node_selector: c
            .node_selector
            .clone()
            .or_else(|| recorded.map(|r| r.node_selector.clone()))
            .unwrap_or_default(),
        default_estimate_ms: c
            .default_estimate
            .or_else(|| recorded.map(|r| r.default_estimate_ms))
            .unwrap_or(DEFAULT_ESTIMATE_MS),
        topology_labels: c
            .topology_labels
            .clone()
            .or_else(|| recorded.map(|r| r.topology_labels.clone()))
            .unwrap_or_default(),
        started: String::new(),
        ordo_version: env!("CARGO_PKG_VERSION").into(),
    }
}

fn engine_config(scheduler_name: &str, s: &Settings) -> Result<EngineConfig> {
    let policy: PolicySpec = s.policy.parse().map_err(|e| anyhow::anyhow!("policy `{}`: {e}", s.policy))?;
    let mut e = EngineConfig::new(scheduler_name, policy);
    e.gpu_resource = s.gpu_resource.clone();
    e.node_selector = node_selector(&s.node_selector)?;
    e.default_estimate_ms = s.default_estimate_ms;
    e.topology_labels = s.topology_labels.parse().map_err(|m| anyhow::anyhow!("--topology-labels: {m}"))?;
    Ok(e)
}

async fn connect(c: &Common, read: ReadConfig) -> Result<Kube> {
    let cfg = config(c.kubeconfig.as_deref()).await?;
    Ok(Kube::new(cfg, &c.scheduler_name, read)?)
}

/// How the pods and nodes are read under settings `s`.
fn read_config(s: &Settings) -> ReadConfig {
    ReadConfig { gpu_resource: s.gpu_resource.clone(), gpu_model_label: s.gpu_model_label.clone() }
}

/// The audit log's default path: `$XDG_STATE_HOME/ordo/kube-audit.jsonl`, else
/// `~/.local/state/ordo/kube-audit.jsonl` (the XDG base directories' place for state).
fn default_audit_log() -> Result<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = match (non_empty("XDG_STATE_HOME"), non_empty("HOME")) {
        (Some(d), _) => d,
        (None, Some(h)) => h.join(".local/state"),
        (None, None) => bail!("neither $XDG_STATE_HOME nor $HOME is set: give --audit-log FILE"),
    };
    Ok(dir.join("ordo").join("kube-audit.jsonl"))
}

async fn schedule(s: ScheduleArgs) -> Result<ExitCode> {
    let mut settings = settings(&s.common, s.policy.to_string(), None);
    settings.started = ordo_slurm::audit::rfc3339(ordo_slurm::audit::unix_now());
    let mut engine = engine_config(&s.common.scheduler_name, &settings)?;
    engine.min_run_ms = s.min_run;
    settings.topology_labels = engine.topology_labels.to_string();
    let audit_log = match &s.audit_log {
        Some(p) => p.clone(),
        None => {
            let p = default_audit_log()?;
            if let Some(dir) = p.parent() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .with_context(|| format!("creating {} for the audit log", dir.display()))?;
            }
            if std::path::Path::new("ordo-kube-audit.jsonl").is_file() {
                eprintln!(
                    "ordo kube: ./ordo-kube-audit.jsonl is the audit log of an earlier version; this one appends to {} (give --audit-log ordo-kube-audit.jsonl to go on there)",
                    p.display()
                );
            }
            p
        }
    };
    let ops = match &s.metrics_listen {
        Some(addr) => {
            // The loop passes at least once a minute.
            let ops = std::sync::Arc::new(crate::ops_http::Ops::new("kube", Duration::from_secs(180)));
            ops.problem("waiting for the first list of pods and nodes from the API server");
            let at = crate::ops_http::serve(addr, ops.clone())?;
            eprintln!("ordo kube: metrics at http://{at}/metrics, health at http://{at}/health");
            Some(ops)
        }
        None => None,
    };
    let kube = connect(&s.common, read_config(&settings)).await?;
    let ns = &s.common.config_namespace;
    if let Err(e) = kube.record_settings(ns, &settings).await {
        eprintln!(
            "ordo kube: warning: {e}; `ordo kube queue` and `explain` then need --policy (create namespace {ns} and grant the Role in deploy/rbac.yaml, or give --config-namespace)"
        );
    }
    let cfg = RunConfig {
        engine,
        resync: Duration::from_millis(s.resync.max(1_000) as u64),
        audit_log: Some(audit_log.clone()),
        bind_concurrency: s.bind_concurrency,
        verbose: s.verbose,
    };
    eprintln!(
        "ordo kube: scheduling pods with schedulerName `{}` under {}; audit log {}",
        s.common.scheduler_name,
        s.policy,
        audit_log.display()
    );
    if !settings.topology_labels.is_empty() {
        eprintln!("ordo kube: gangs placed by the topology of node labels {}", settings.topology_labels);
    }
    let publish = ops.map(|ops| {
        let (tx, rx) = tokio::sync::watch::channel(ordo_kube::run::Published::default());
        tokio::spawn(publish_metrics(rx, ops));
        tx
    });
    run_loop(kube, cfg, publish, ordo_server::http::stop_signal()).await?;
    eprintln!("ordo kube: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Turns the loop's counters, published after every pass, into metrics and health: healthy
/// after a pass, unless a watch failed since the last list of pods (the API server is not
/// answering; the watch relists when it answers again).
async fn publish_metrics(
    mut rx: tokio::sync::watch::Receiver<ordo_kube::run::Published>,
    ops: std::sync::Arc<crate::ops_http::Ops>,
) {
    use prometheus_client::registry::Unit;
    let counter = |name: &str, help: &str| ops.counter(name, help);
    let passes = counter("ordo_kube_passes", "Scheduling passes");
    let binds = counter("ordo_kube_pods_bound", "Pods bound (as ordered)");
    let conflicts =
        counter("ordo_kube_bind_conflicts", "Bindings refused because another scheduler bound the pod (409)");
    let evictions = counter("ordo_kube_evictions", "Evictions ordered (preemptive policies)");
    let rebuilds = counter("ordo_kube_rebuilds", "Rebuilds of the scheduling state from the pods and nodes");
    let lists = counter("ordo_kube_pod_lists", "Full lists of pods (the first, and each relist)");
    let errors = counter("ordo_kube_watch_errors", "Errors of the pod and node watches");
    let waiting = ops.gauge("ordo_kube_pods_waiting", "This scheduler's pods waiting for a node", None);
    let bound = ops.gauge("ordo_kube_pods_running", "This scheduler's pods bound and not ended", None);
    let decide =
        ops.gauge("ordo_kube_last_pass_decision", "The last pass's decision (not its API calls)", Some(Unit::Seconds));
    let mut last = ordo_kube::run::Published::default();
    while rx.changed().await.is_ok() {
        let p = *rx.borrow_and_update();
        let (s, l) = (p.stats, last.stats);
        passes.inc_by(s.passes.saturating_sub(l.passes));
        binds.inc_by(s.binds.saturating_sub(l.binds));
        conflicts.inc_by(s.conflicts.saturating_sub(l.conflicts));
        evictions.inc_by(s.evictions.saturating_sub(l.evictions));
        rebuilds.inc_by(s.rebuilds.saturating_sub(l.rebuilds));
        lists.inc_by(s.pod_lists.saturating_sub(l.pod_lists));
        errors.inc_by(p.watch_errors.saturating_sub(last.watch_errors));
        waiting.set(p.waiting_pods as f64);
        bound.set(p.bound_pods as f64);
        decide.set(p.last_pass_us as f64 / 1e6);
        if p.watch_errors > last.watch_errors && s.pod_lists == l.pod_lists {
            ops.problem(format!(
                "a watch of the API server failed ({} errors so far) and has not listed again",
                p.watch_errors
            ));
        } else {
            ops.pass_ok();
        }
        last = p;
    }
}

/// The engine config of a view: `--policy` and the settings given, else the scheduler's from
/// its ConfigMap; and a client that reads pods with its GPU resource.
async fn view_engine(v: &ViewArgs) -> Result<(Kube, EngineConfig)> {
    let c = &v.common;
    let kube = connect(c, ReadConfig::new(c.gpu_resource.as_deref().unwrap_or(DEFAULT_GPU_RESOURCE))).await?;
    let all_given = v.policy.is_some()
        && c.gpu_resource.is_some()
        && c.gpu_model_label.is_some()
        && c.node_selector.is_some()
        && c.default_estimate.is_some()
        && c.topology_labels.is_some();
    let recorded = if all_given {
        None
    } else {
        match kube.read_settings(&c.config_namespace).await {
            Ok(r) => r,
            Err(e) if v.policy.is_some() => {
                eprintln!("ordo kube: warning: {e}; using the settings given and the defaults");
                None
            }
            Err(e) => return Err(e).context("reading the scheduler's policy (or give --policy)"),
        }
    };
    let policy = match (&v.policy, &recorded) {
        (Some(p), _) => p.to_string(),
        (None, Some(r)) => r.policy.clone(),
        (None, None) => bail!(
            "no ConfigMap {}/{} records the policy of scheduler `{}` (`ordo kube schedule` writes it at start): give --policy, or --config-namespace and --scheduler-name as the scheduler has them",
            c.config_namespace,
            ordo_kube::client::settings_name(&c.scheduler_name),
            c.scheduler_name
        ),
    };
    let s = settings(c, policy, recorded.as_ref());
    let read = read_config(&s);
    let same = read.gpu_resource == kube.read.gpu_resource && read.gpu_model_label == kube.read.gpu_model_label;
    let kube = if same { kube } else { connect(c, read).await? };
    Ok((kube, engine_config(&c.scheduler_name, &s)?))
}

async fn queue(v: ViewArgs) -> Result<ExitCode> {
    let (kube, cfg) = view_engine(&v).await?;
    let mut engine = snapshot(&kube, cfg).await?;
    let now = now_ms();
    let q = engine.queue(now);
    if v.json {
        println!("{}", serde_json::to_string_pretty(&q)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "scheduler `{}` under {}: {}, {} of {} free, {} running, {} waiting",
        q.scheduler,
        q.policy,
        count(q.open_nodes, "open node"),
        q.free_gpus,
        count(q.gpus as usize, "GPU"),
        count(q.running_pods, "pod"),
        q.waiting.len()
    );
    if q.waiting.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:>4}  {:<40} {:<12} {:>4}  {:<16} why", "pos", "pod", "user", "gpus", "expected start");
    for l in &q.waiting {
        let what = match &l.gang {
            Some(g) => format!("gang {g} ({})", count(l.pods.len(), "pod")),
            None => l.pods.first().cloned().unwrap_or_default(),
        };
        let at = l.wait.expected_start.map(|t| clock(t, now)).unwrap_or_else(|| "-".into());
        println!("{:>4}  {:<40} {:<12} {:>4}  {:<16} {}", l.position, what, l.user, l.gpus, at, l.wait.text);
    }
    Ok(ExitCode::SUCCESS)
}

async fn explain(e: ExplainArgs) -> Result<ExitCode> {
    if e.pod.split_once('/').is_none_or(|(ns, n)| ns.is_empty() || n.is_empty()) {
        bail!("expected the pod as NAMESPACE/NAME, found `{}`", e.pod);
    }
    let (kube, cfg) = view_engine(&e.view).await?;
    let mut engine = snapshot(&kube, cfg).await?;
    let Some(x) = engine.explain(&e.pod, now_ms()) else {
        bail!("no pod {} that has not ended", e.pod);
    };
    if e.view.json {
        println!("{}", serde_json::to_string_pretty(&x)?);
    } else {
        println!("{}: {}: {}", x.pod, x.state, x.text);
        if let Some(c) = &x.condition {
            if *c != x.text {
                println!("  its PodScheduled condition says: {c}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn import(i: ImportArgs) -> Result<ExitCode> {
    let audit_log = match i.audit_log {
        Some(p) => p,
        None => default_audit_log()?,
    };
    let log = ordo_kube::audit::read_log(&audit_log)?;
    let (w, st) = ordo_kube::import::workload(&log);
    match &i.out {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            ordo_trace::write_generic(&w, std::io::BufWriter::new(f))
                .with_context(|| format!("writing {}", p.display()))?;
        }
        None => ordo_trace::write_generic(&w, std::io::stdout().lock()).context("writing the trace")?,
    }
    eprintln!(
        "ordo kube import: {} from {}; left out: {} never started, {} still running, {} evicted",
        count(st.jobs, "job"),
        audit_log.display(),
        count(st.never_started, "pod"),
        st.still_running,
        st.evicted
    );
    Ok(ExitCode::SUCCESS)
}
