//! `--metrics-listen ADDR` of the long-running `ordo kube schedule` and `ordo slurm drive`:
//! `GET /metrics` in the Prometheus text format (the `prometheus-client` crate, as `ordo
//! server`'s `/metrics`) and `GET /health`, JSON, status 200 while the loop passes and reaches
//! its cluster, 503 with the reason otherwise. Served on its own thread (its own small async
//! runtime) through `ordo server`'s listener, so a slow scrape never holds up a pass.

use anyhow::{Context, Result};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A gauge of floating-point values.
pub type FGauge = Gauge<f64, AtomicU64>;

/// What `/health` answers: whether the last pass reached the cluster, and when it was.
#[derive(Debug, Clone)]
struct Health {
    /// Why the loop is not healthy, while it is not.
    problem: Option<String>,
    /// When the last pass that reached the cluster ended.
    last_pass: Option<Instant>,
    /// Passes that reached the cluster.
    passes: u64,
}

/// The metrics and health of one loop, shared by the loop (which updates them) and the
/// endpoint (which reads them).
#[derive(Debug)]
pub struct Ops {
    registry: Mutex<Registry>,
    health: Mutex<Health>,
    /// Without a pass that reached the cluster for this long, `/health` answers 503.
    stale_after: Duration,
    /// `kube` or `slurm`, in `/health`'s answer.
    what: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ops {
    /// Metrics and health for a loop of `what` that passes at least every `stale_after`
    /// (3 intervals or more: `/health` says 503 past it). `/health` starts at 503 ("no pass
    /// yet") until the first pass reaches the cluster.
    pub fn new(what: &'static str, stale_after: Duration) -> Ops {
        Ops {
            registry: Mutex::new(Registry::default()),
            health: Mutex::new(Health { problem: Some("no pass yet".into()), last_pass: None, passes: 0 }),
            stale_after,
            what,
        }
    }

    /// A counter named `name` (`_total` is added by the encoder).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        let c = Counter::default();
        lock(&self.registry).register(name, help, c.clone());
        c
    }

    /// A gauge named `name`, in `unit` when given (its name then ends in the unit).
    pub fn gauge(&self, name: &str, help: &str, unit: Option<Unit>) -> FGauge {
        let g = FGauge::default();
        let mut r = lock(&self.registry);
        match unit {
            Some(u) => r.register_with_unit(name, help, u, g.clone()),
            None => r.register(name, help, g.clone()),
        }
        g
    }

    /// A pass reached the cluster: healthy again.
    pub fn pass_ok(&self) {
        let mut h = lock(&self.health);
        h.problem = None;
        h.last_pass = Some(Instant::now());
        h.passes += 1;
    }

    /// The cluster did not answer, or the loop cannot pass: unhealthy, saying why.
    pub fn problem(&self, why: impl Into<String>) {
        lock(&self.health).problem = Some(why.into());
    }

    /// The metrics as Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &lock(&self.registry));
        out
    }

    /// `/health`: whether healthy, and the answer's body.
    pub fn health(&self) -> (bool, serde_json::Value) {
        let h = lock(&self.health).clone();
        let age = h.last_pass.map(|t| t.elapsed());
        let problem = match (&h.problem, age) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(a)) if a > self.stale_after => Some(format!(
                "no pass for {:.0} s (more than {:.0} s)",
                a.as_secs_f64(),
                self.stale_after.as_secs_f64()
            )),
            (None, None) => Some("no pass yet".into()),
            (None, Some(_)) => None,
        };
        let body = serde_json::json!({
            "ok": problem.is_none(),
            "loop": self.what,
            "problem": problem,
            "passes": h.passes,
            "last_pass_age_s": age.map(|a| (a.as_secs_f64() * 1000.0).round() / 1000.0),
        });
        (problem.is_none(), body)
    }
}

/// Serves `/metrics` and `/health` of `ops` on `addr` (e.g. `127.0.0.1:9102`; port 0: any
/// free port) on a thread of its own; returns the address bound.
pub fn serve(addr: &str, ops: Arc<Ops>) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("--metrics-listen {addr}"))?;
    listener.set_nonblocking(true).context("--metrics-listen: a non-blocking socket")?;
    let bound = listener.local_addr().context("--metrics-listen: the address bound")?;
    let (m, h) = (ops.clone(), ops);
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m.clone();
                async move { ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], m.render()) }
            }),
        )
        .route(
            "/health",
            get(move || {
                let h = h.clone();
                async move {
                    let (ok, body) = h.health();
                    let code = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                    (code, axum::Json(body)).into_response()
                }
            }),
        );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("the metrics runtime")?;
    std::thread::Builder::new()
        .name("ordo-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                let opts = ordo_server::listen::ListenOptions {
                    tls: None,
                    header_timeout: Duration::from_secs(10),
                    max_connections: 64,
                    max_per_addr: 16,
                };
                let _ = ordo_server::listen::serve(listener, app, opts).await;
            })
        })
        .context("starting the metrics thread")?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_the_passes() {
        let ops = Ops::new("slurm", Duration::from_millis(50));
        let passes = ops.counter("ordo_slurm_passes", "Passes");
        let (ok, body) = ops.health();
        assert!(!ok && body["problem"] == "no pass yet", "{body}");
        ops.pass_ok();
        passes.inc();
        let (ok, body) = ops.health();
        assert!(ok && body["passes"] == 1, "{body}");
        assert!(ops.render().contains("ordo_slurm_passes_total 1"), "{}", ops.render());
        ops.problem("slurm unreachable: timeout");
        let (ok, body) = ops.health();
        assert!(!ok && body["problem"] == "slurm unreachable: timeout", "{body}");
        ops.pass_ok();
        std::thread::sleep(Duration::from_millis(80));
        let (ok, body) = ops.health();
        assert!(!ok && body["problem"].as_str().unwrap().starts_with("no pass for"), "{body}");
    }
}
