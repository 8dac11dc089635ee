//! `ordo kube schedule|queue|explain|import`: ordo as a Kubernetes scheduler for GPU pods, its
//! queue and reasons, and its audit log as a trace (wiring around the `ordo-kube` crate).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_core::PolicySpec;
use ordo_kube::client::{config, Kube};
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
    /// The ordering policy (every ordo policy; preemptive ones evict through the Eviction API).
    #[arg(long)]
    policy: PolicySpec,
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The spec.schedulerName of the pods ordo schedules.
    #[arg(long, default_value = "ordo")]
    scheduler_name: String,
    /// The extended resource that counts GPUs.
    #[arg(long, default_value = "nvidia.com/gpu")]
    gpu_resource: String,
    /// Only nodes with these labels form ordo's pool (k=v,k2=v2; default: every node).
    #[arg(long, default_value = "")]
    node_selector: String,
    /// Run-time estimate of a pod that gives none (no ordo.dev/estimate annotation, no
    /// activeDeadlineSeconds).
    #[arg(long, default_value = "24h", value_parser = crate::cli::parse_duration_arg)]
    default_estimate: i64,
}

#[derive(Args, Debug)]
struct ScheduleArgs {
    #[command(flatten)]
    common: Common,
    /// The JSON Lines audit log every decision is appended to.
    #[arg(long, default_value = "ordo-kube-audit.jsonl")]
    audit_log: PathBuf,
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
    /// The scheduler's audit log (`ordo kube schedule --audit-log`).
    #[arg(long, default_value = "ordo-kube-audit.jsonl")]
    audit_log: PathBuf,
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

fn engine_config(c: &Common) -> Result<EngineConfig> {
    let mut e = EngineConfig::new(&c.scheduler_name, c.policy.clone());
    e.gpu_resource = c.gpu_resource.clone();
    e.node_selector = node_selector(&c.node_selector)?;
    e.default_estimate_ms = c.default_estimate;
    Ok(e)
}

async fn connect(c: &Common) -> Result<Kube> {
    let cfg = config(c.kubeconfig.as_deref()).await?;
    Ok(Kube::new(cfg, &c.scheduler_name, ReadConfig { gpu_resource: c.gpu_resource.clone() })?)
}

async fn schedule(s: ScheduleArgs) -> Result<ExitCode> {
    let mut engine = engine_config(&s.common)?;
    engine.min_run_ms = s.min_run;
    let kube = connect(&s.common).await?;
    let cfg = RunConfig {
        engine,
        resync: Duration::from_millis(s.resync.max(1_000) as u64),
        audit_log: Some(s.audit_log.clone()),
        bind_concurrency: s.bind_concurrency,
        verbose: s.verbose,
    };
    eprintln!(
        "ordo kube: scheduling pods with schedulerName `{}` under {}; audit log {}",
        s.common.scheduler_name,
        s.common.policy,
        s.audit_log.display()
    );
    run_loop(kube, cfg, None, stop_signal()).await?;
    eprintln!("ordo kube: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Completes on SIGINT or SIGTERM (what Kubernetes sends a pod it stops).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn queue(v: ViewArgs) -> Result<ExitCode> {
    let kube = connect(&v.common).await?;
    let mut engine = snapshot(&kube, engine_config(&v.common)?).await?;
    let now = now_ms();
    let q = engine.queue(now);
    if v.json {
        println!("{}", serde_json::to_string_pretty(&q)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "scheduler `{}` under {}: {} open nodes, {} of {} GPUs free, {} pods running, {} waiting",
        q.scheduler,
        q.policy,
        q.open_nodes,
        q.free_gpus,
        q.gpus,
        q.running_pods,
        q.waiting.len()
    );
    if q.waiting.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:>4}  {:<40} {:<12} {:>4}  {:<16} why", "pos", "pod", "user", "gpus", "expected start");
    for l in &q.waiting {
        let what = match &l.gang {
            Some(g) => format!("gang {g} ({} pods)", l.pods.len()),
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
    let kube = connect(&e.view.common).await?;
    let mut engine = snapshot(&kube, engine_config(&e.view.common)?).await?;
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
    let log = ordo_kube::audit::read_log(&i.audit_log)?;
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
        "ordo kube import: {} jobs from {}; left out: {} pods never started, {} still running, {} evicted",
        st.jobs,
        i.audit_log.display(),
        st.never_started,
        st.still_running,
        st.evicted
    );
    Ok(ExitCode::SUCCESS)
}
