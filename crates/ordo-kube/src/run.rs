//! The scheduling loop: what the watches see goes into the engine; after each batch of changes
//! (or when the policy asks to be woken) one pass, whose bindings, evictions, conditions,
//! Events and audit records are applied here.

use crate::audit::{AuditError, AuditLog, Draft};
use crate::client::{Kube, KubeError};
use crate::engine::{Bind, Engine, EngineConfig, Evict, Note, Stats};
use crate::watch::{self, Seen};
use futures::StreamExt;
use serde_json::json;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The engine's configuration.
    pub engine: EngineConfig,
    /// Full relist of pods and nodes this often (besides relists after a watch expired).
    pub resync: Duration,
    /// The audit log (JSON Lines), if any.
    pub audit_log: Option<PathBuf>,
    /// Bindings in flight at once.
    pub bind_concurrency: usize,
    /// Log each pass that binds or evicts to stderr.
    pub verbose: bool,
}

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The API server.
    #[error(transparent)]
    Kube(#[from] KubeError),
    /// The audit log could not be written (the scheduler stops rather than decide unrecorded).
    #[error(transparent)]
    Audit(#[from] AuditError),
}

/// A pod condition or Event to write, off the scheduling loop.
#[derive(Debug)]
enum Write {
    Note(Note),
    Event { ns: String, name: String, uid: String, warning: bool, reason: &'static str, text: String },
}

/// Milliseconds since the epoch now (the shell's clock; the engine only ever gets it given).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Pass statistics the loop publishes after every pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    /// The engine's counters.
    pub stats: Stats,
    /// Relists of pods and nodes (lists after the first).
    pub watch_errors: u64,
    /// Duration of the last pass's decision (the engine, not the API calls), microseconds.
    pub last_pass_us: u64,
    /// This scheduler's pods waiting for a node after the last pass.
    pub waiting_pods: u64,
    /// This scheduler's pods bound and not ended after the last pass.
    pub bound_pods: u64,
}

/// Runs the scheduler until `shutdown` completes. `publish`, if given, receives counters after
/// every pass (tests and benchmarks read them).
pub async fn run(
    kube: Kube,
    cfg: RunConfig,
    publish: Option<tokio::sync::watch::Sender<Published>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let mut audit = match &cfg.audit_log {
        Some(p) => Some(AuditLog::open(p)?),
        None => None,
    };
    let mut engine = Engine::new(cfg.engine.clone());
    let policy = engine.policy().to_string();
    if let Some(a) = audit.as_mut() {
        let mut detail = json!({"to": policy, "scheduler": cfg.engine.scheduler_name, "gpu_resource": cfg.engine.gpu_resource,
                "node_selector": cfg.engine.node_selector});
        if !cfg.engine.topology_labels.is_empty() {
            detail["topology_labels"] = json!(cfg.engine.topology_labels.to_string());
        }
        let d = Draft { actor: "scheduler".into(), kind: "policy", unit: None, detail };
        a.append(vec![d], now_ms(), &policy)?;
    }
    let (tx, mut rx) = unbounded_channel();
    let labels: Vec<String> = cfg.engine.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    watch::spawn_pods(kube.client(), kube.read.clone(), cfg.resync, tx.clone());
    watch::spawn_nodes(kube.client(), kube.read.clone(), labels.join(","), cfg.resync, tx);
    let writes = spawn_writer(kube.clone());
    let mut published = Published::default();
    let mut wake: Option<i64> = None;
    tokio::pin!(shutdown);
    loop {
        let sleep = match wake {
            Some(w) => Duration::from_millis((w - now_ms()).clamp(0, 60_000) as u64),
            None => Duration::from_secs(60),
        };
        tokio::select! {
            _ = &mut shutdown => break,
            m = rx.recv() => {
                let Some(m) = m else { break };
                apply(&mut engine, m, &mut published);
                // Everything already seen goes into this pass.
                while let Ok(m) = rx.try_recv() {
                    apply(&mut engine, m, &mut published);
                }
            }
            _ = tokio::time::sleep(sleep) => {}
        }
        if !engine.synced() {
            continue;
        }
        let now = now_ms();
        let t0 = Instant::now();
        let out = engine.pass(now);
        published.last_pass_us = t0.elapsed().as_micros() as u64;
        wake = out.wake_at;
        for w in &out.warnings {
            eprintln!("{w}");
        }
        if let Some(a) = audit.as_mut() {
            a.append(out.audit, now, &policy)?;
        }
        let (nb, ne) = (out.binds.len(), out.evictions.len());
        for e in out.evictions {
            evict(&kube, &mut engine, e, &writes).await;
        }
        let (bound, conflicts) = bind_all(&kube, &mut engine, out.binds, cfg.bind_concurrency).await;
        for b in bound {
            let _ = writes.send(Write::Event {
                text: format!("Successfully assigned {}/{} to {}", b.namespace, b.name, b.node),
                ns: b.namespace,
                name: b.name,
                uid: b.uid,
                warning: false,
                reason: "Scheduled",
            });
        }
        if !conflicts.is_empty() {
            if let Some(a) = audit.as_mut() {
                a.append(conflicts, now_ms(), &policy)?;
            }
            // Pass again at once over what the API server says now.
            wake = Some(now_ms());
        }
        for n in out.notes {
            let _ = writes.send(Write::Note(n));
        }
        if cfg.verbose && (nb > 0 || ne > 0) {
            eprintln!(
                "ordo kube: pass: bound {nb} pods, evicted {ne} ({} µs to decide, {} ms in all)",
                published.last_pass_us,
                t0.elapsed().as_millis()
            );
        }
        published.stats = engine.stats();
        (published.waiting_pods, published.bound_pods) = engine.pod_counts();
        if let Some(p) = &publish {
            let _ = p.send(published);
        }
    }
    Ok(())
}

fn apply(engine: &mut Engine, m: Seen, published: &mut Published) {
    let now = now_ms();
    match m {
        Seen::Pod(p) => engine.pod_event(*p, now),
        Seen::PodGone(uid) => engine.pod_gone(&uid, now),
        Seen::Pods(all) => engine.pods_listed(all, now),
        Seen::Node(n) => engine.node_event(n),
        Seen::NodeGone(n) => engine.node_gone(&n),
        Seen::Nodes(all) => engine.nodes_listed(all),
        Seen::Error(e) => {
            published.watch_errors += 1;
            eprintln!("ordo kube: watch: {e}");
        }
    }
}

async fn evict(kube: &Kube, engine: &mut Engine, e: Evict, writes: &UnboundedSender<Write>) {
    match kube.evict(&e.namespace, &e.name).await {
        Ok(()) => {
            let _ = writes.send(Write::Event {
                ns: e.namespace,
                name: e.name,
                uid: e.uid,
                warning: false,
                reason: "Preempted",
                text: e.why,
            });
        }
        Err(err) => {
            eprintln!("ordo kube: {err}");
            engine.evict_failed(&e.uid);
        }
    }
}

/// Makes the bindings, `concurrency` at a time; a refused one goes back to the engine. Returns
/// the bindings made, and audit records of the conflicts (409: another scheduler bound the pod
/// first; the engine then knows where the API server says the pod is).
pub async fn bind_all(
    kube: &Kube,
    engine: &mut Engine,
    binds: Vec<Bind>,
    concurrency: usize,
) -> (Vec<Bind>, Vec<Draft>) {
    let results: Vec<(Bind, Result<(), KubeError>)> = futures::stream::iter(binds)
        .map(|b| async move {
            let r = kube.bind(&b.namespace, &b.name, &b.uid, &b.node).await;
            (b, r)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut drafts = Vec::new();
    let mut bound = Vec::new();
    for (b, r) in results {
        match r {
            Ok(()) => bound.push(b),
            Err(e) => {
                let conflict = e.code() == Some(409);
                let now_on = if conflict { kube.get_pod(&b.namespace, &b.name).await.ok().flatten() } else { None };
                if conflict {
                    drafts.push(Draft {
                        actor: "scheduler".into(),
                        kind: "conflict",
                        unit: Some(b.uid.clone()),
                        detail: json!({"pod": format!("{}/{}", b.namespace, b.name), "uid": b.uid, "node": b.node,
                            "now_on": now_on.as_ref().and_then(|p| p.node.clone()), "why": e.to_string()}),
                    });
                } else {
                    eprintln!("ordo kube: {e}");
                }
                // A pod bound elsewhere stays known where it is; one not bound waits again.
                let now_on = now_on.filter(|p| p.uid == b.uid);
                engine.bind_failed(&b.uid, conflict, now_on);
            }
        }
    }
    (bound, drafts)
}

/// An engine over what the API server holds now (one list of pods and nodes), for
/// `ordo kube queue` and `explain`: the same state a running scheduler rebuilds at start.
pub async fn snapshot(kube: &Kube, cfg: EngineConfig) -> Result<Engine, KubeError> {
    let labels: Vec<String> = cfg.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let (pods, nodes) = kube.list(&labels.join(",")).await?;
    let mut engine = Engine::new(cfg);
    let now = now_ms();
    engine.nodes_listed(nodes);
    engine.pods_listed(pods, now);
    Ok(engine)
}

/// The task that writes conditions and Events, eight at a time, so that the scheduling loop
/// never waits for them.
fn spawn_writer(kube: Kube) -> UnboundedSender<Write> {
    let (tx, rx) = unbounded_channel::<Write>();
    tokio::spawn(async move {
        let s = futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|w| (w, rx)) });
        s.for_each_concurrent(8, |w| {
            let kube = kube.clone();
            async move {
                let r = match w {
                    Write::Note(n) => {
                        let r = kube.set_waiting(&n.namespace, &n.name, &n.text, n.shortage, n.first).await;
                        if r.is_ok() && n.event {
                            let reason = if n.shortage { "FailedScheduling" } else { "Waiting" };
                            kube.event(&n.namespace, &n.name, &n.uid, n.shortage, reason, &n.text).await
                        } else {
                            r
                        }
                    }
                    Write::Event { ns, name, uid, warning, reason, text } => {
                        kube.event(&ns, &name, &uid, warning, reason, &text).await
                    }
                };
                // A pod deleted meanwhile (404) is no news.
                if let Err(e) = r {
                    if e.code() != Some(404) {
                        eprintln!("ordo kube: {e}");
                    }
                }
            }
        })
        .await;
    });
    tx
}
