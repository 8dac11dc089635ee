//! `/metrics` in the Prometheus text format (the `prometheus-client` crate): queue, GPUs allocated
//! and really busy, allocated-but-idle, per-user GPUs, pass and submit-to-start latencies, outcomes.

use crate::activity_api::GpuStatus;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// What the server measures as it goes (latencies), shared by the state and the scrape.
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// Scheduling passes with jobs waiting, seconds.
    pub pass: Histogram,
    /// From submit to a job's first start, seconds.
    pub submit_to_start: Histogram,
    /// How long the state lock was held each time it was taken, seconds.
    pub lock_hold: Histogram,
    /// The longest hold of the state lock since the server started, seconds.
    pub lock_longest: Gauge<f64, AtomicU64>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            // 0.1 ms to 6.6 s.
            pass: Histogram::new(exponential_buckets(0.000_1, 4.0, 9)),
            // 0.1 s to 29 h.
            submit_to_start: Histogram::new(exponential_buckets(0.1, 4.0, 11)),
            // 10 µs to 2.6 s.
            lock_hold: Histogram::new(exponential_buckets(0.000_01, 4.0, 10)),
            lock_longest: Gauge::default(),
        }
    }
}

/// The state's figures at one instant, taken under the state lock and encoded outside it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Pending jobs by why they wait (`resources`, `priority`, `reserved`, `held`, ...).
    pub pending_by_reason: BTreeMap<&'static str, u64>,
    /// Active jobs by state (`starting`, `running`, `preempting`).
    pub active_by_state: BTreeMap<&'static str, u64>,
    /// GPUs on nodes that are up.
    pub gpus_total: u64,
    /// GPUs held by jobs.
    pub gpus_allocated: u64,
    /// Sum of the busy fractions of the GPUs with a fresh sample.
    pub gpus_busy: f64,
    /// GPUs with a fresh sample.
    pub gpus_sampled: u64,
    /// GPUs held by jobs flagged allocated-but-idle.
    pub gpus_allocated_idle: u64,
    /// Jobs flagged allocated-but-idle.
    pub jobs_allocated_idle: u64,
    /// GPUs held by running jobs per (user, group).
    pub running_gpus: BTreeMap<(String, String), u64>,
    /// Every GPU of every known node.
    pub gpus: Vec<GpuStatus>,
    /// Nodes: name, up, last heartbeat (ms since the epoch), GPUs.
    pub nodes: Vec<(String, bool, i64, u32)>,
    /// Nodes: name, status (`NodeInfo::status`), an admin's cordon or drain: kind, by, reason.
    pub node_status: Vec<(String, &'static str, Option<MaintLabels>)>,
    /// Every known node's kind: what its GPUs are.
    pub node_kinds: Vec<NodeKind>,
}

/// What a node's GPUs are, for `ordo_node_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeKind {
    /// Node name.
    pub node: String,
    /// GPU model (`unknown` when its agent gave none).
    pub gpu_model: String,
    /// Memory of each GPU, MiB, when known.
    pub gpu_mem_mib: Option<u64>,
    /// Features, comma-separated.
    pub features: String,
    /// Fake GPUs.
    pub fake: bool,
}

/// An admin's cordon or drain as labels: kind, by, reason.
pub type MaintLabels = (&'static str, String, String);

type Labels = Vec<(&'static str, String)>;

fn gauge_family(
    reg: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Family<Labels, Gauge<f64, AtomicU64>> {
    let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, f.clone()),
        None => reg.register(name, help, f.clone()),
    }
    f
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: f64) {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(v);
    reg.register(name, help, g);
}

/// Encodes the snapshot, the job outcomes (ended jobs by state, from the database) and the
/// latencies as Prometheus text. Every name starts with `ordo_` (docs/SERVER.md lists them).
pub fn render(s: &Snapshot, outcomes: &BTreeMap<String, u64>, t: &Telemetry) -> String {
    let mut reg = Registry::default();
    let pending = gauge_family(&mut reg, "ordo_jobs_pending", "Pending jobs by the reason they wait", None);
    for (reason, n) in &s.pending_by_reason {
        pending.get_or_create(&vec![("reason", reason.to_string())]).set(*n as f64);
    }
    let active = gauge_family(&mut reg, "ordo_jobs_active", "Jobs holding GPUs, by state", None);
    for (state, n) in &s.active_by_state {
        active.get_or_create(&vec![("state", state.to_string())]).set(*n as f64);
    }
    gauge(&mut reg, "ordo_gpus_total", "GPUs on nodes that are up", s.gpus_total as f64);
    gauge(&mut reg, "ordo_gpus_allocated", "GPUs held by jobs", s.gpus_allocated as f64);
    gauge(
        &mut reg,
        "ordo_gpus_busy",
        "Busy GPUs: the sum of the busy fractions (NVML utilization.gpu) of the GPUs with a fresh sample",
        s.gpus_busy,
    );
    gauge(
        &mut reg,
        "ordo_gpus_sampled",
        "GPUs with a fresh activity sample (ordo_gpus_busy counts only these)",
        s.gpus_sampled as f64,
    );
    gauge(
        &mut reg,
        "ordo_gpus_allocated_idle",
        "GPUs held by jobs flagged allocated-but-idle (under the idle threshold for idle_after)",
        s.gpus_allocated_idle as f64,
    );
    gauge(&mut reg, "ordo_jobs_allocated_idle", "Jobs flagged allocated-but-idle", s.jobs_allocated_idle as f64);
    let per_user = gauge_family(&mut reg, "ordo_running_gpus", "GPUs held by running jobs, by user and group", None);
    for ((user, group), n) in &s.running_gpus {
        per_user.get_or_create(&vec![("user", user.clone()), ("group", group.clone())]).set(*n as f64);
    }
    let busy = gauge_family(&mut reg, "ordo_gpu_busy_ratio", "A GPU's busy fraction in its latest fresh sample", None);
    let mem = gauge_family(&mut reg, "ordo_gpu_memory_used", "A GPU's device memory in use", Some(Unit::Bytes));
    let power = gauge_family(&mut reg, "ordo_gpu_power", "A GPU's power draw", Some(Unit::Other("watts".into())));
    let held = gauge_family(&mut reg, "ordo_gpu_allocated", "1 when a job holds the GPU", None);
    let idle = gauge_family(
        &mut reg,
        "ordo_gpu_allocated_idle",
        "1 when the job holding the GPU is flagged allocated-but-idle",
        None,
    );
    for g in &s.gpus {
        let l: Labels = vec![("node", g.node.clone()), ("gpu", g.gpu.to_string())];
        held.get_or_create(&l).set(g.job.is_some() as u8 as f64);
        idle.get_or_create(&l).set(g.idle as u8 as f64);
        if let Some(x) = &g.sample {
            busy.get_or_create(&l).set(x.util_pct / 100.0);
            if let Some(m) = x.mem_used_mib {
                mem.get_or_create(&l).set(m as f64 * 1_048_576.0);
            }
            if let Some(p) = x.power_w {
                power.get_or_create(&l).set(p);
            }
        }
    }
    let up = gauge_family(&mut reg, "ordo_node_up", "1 when the node's agent is up (heartbeats arrive)", None);
    let seen = gauge_family(
        &mut reg,
        "ordo_node_last_heartbeat_timestamp",
        "When the node's agent last polled (each poll is a heartbeat), Unix time",
        Some(Unit::Seconds),
    );
    let node_gpus = gauge_family(&mut reg, "ordo_node_gpus", "GPUs the node registered", None);
    for (name, is_up, last, gpus) in &s.nodes {
        let l: Labels = vec![("node", name.clone())];
        up.get_or_create(&l).set(*is_up as u8 as f64);
        seen.get_or_create(&l).set(*last as f64 / 1000.0);
        node_gpus.get_or_create(&l).set(*gpus as f64);
    }
    let status = gauge_family(
        &mut reg,
        "ordo_node_status",
        "1 for the node's status: up, down, cordoned, draining, drained or problem (its agent drained it)",
        None,
    );
    let maint = gauge_family(
        &mut reg,
        "ordo_node_maintenance_info",
        "1 for a node an admin cordoned or drained, with who did it and why",
        None,
    );
    for (name, st, m) in &s.node_status {
        status.get_or_create(&vec![("node", name.clone()), ("status", st.to_string())]).set(1.0);
        if let Some((kind, by, why)) = m {
            let l: Labels =
                vec![("node", name.clone()), ("kind", kind.to_string()), ("by", by.clone()), ("reason", why.clone())];
            maint.get_or_create(&l).set(1.0);
        }
    }
    let info = gauge_family(
        &mut reg,
        "ordo_node_info",
        "1 for every known node, with its GPUs' model (unknown when its agent gave none), memory per GPU in MiB (empty when unknown), its features and whether its GPUs are fake",
        None,
    );
    for k in &s.node_kinds {
        let l: Labels = vec![
            ("node", k.node.clone()),
            ("gpu_model", k.gpu_model.clone()),
            ("gpu_memory_mib", k.gpu_mem_mib.map(|m| m.to_string()).unwrap_or_default()),
            ("features", k.features.clone()),
            ("fake", k.fake.to_string()),
        ];
        info.get_or_create(&l).set(1.0);
    }
    let ended = Family::<Labels, Counter>::default();
    reg.register("ordo_jobs_ended", "Jobs that ended, by final state (all the database holds)", ended.clone());
    for (state, n) in outcomes {
        ended.get_or_create(&vec![("state", state.clone())]).inc_by(*n);
    }
    reg.register_with_unit(
        "ordo_scheduling_pass_duration",
        "Scheduling passes made with jobs waiting, since the server started",
        Unit::Seconds,
        t.pass.clone(),
    );
    reg.register_with_unit(
        "ordo_job_submit_to_start",
        "From submission to a job's first start, since the server started",
        Unit::Seconds,
        t.submit_to_start.clone(),
    );
    reg.register_with_unit(
        "ordo_state_lock_hold",
        "How long the server's state lock was held each time it was taken (every request, pass and agent message), since the server started",
        Unit::Seconds,
        t.lock_hold.clone(),
    );
    reg.register_with_unit(
        "ordo_state_lock_longest_hold",
        "The longest hold of the server's state lock since the server started",
        Unit::Seconds,
        t.lock_longest.clone(),
    );
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_text::encode(&mut out, &reg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity_api::GpuSample;

    #[test]
    fn names_units_and_values() {
        let mut s = Snapshot { gpus_total: 8, gpus_allocated: 3, gpus_busy: 1.25, ..Snapshot::default() };
        s.pending_by_reason.insert("resources", 4);
        s.running_gpus.insert(("alice".into(), "alice".into()), 2);
        s.gpus.push(GpuStatus {
            node: "n1".into(),
            gpu: 0,
            up: true,
            job: Some(7),
            user: Some("alice".into()),
            sample: Some(GpuSample {
                gpu: 0,
                util_pct: 50.0,
                sm_pct: None,
                mem_used_mib: Some(2),
                mem_total_mib: None,
                power_w: Some(120.5),
            }),
            sampled_at: Some(1),
            idle: false,
        });
        s.nodes.push(("n1".into(), true, 1_500, 8));
        s.node_kinds.push(NodeKind {
            node: "n1".into(),
            gpu_model: "a100".into(),
            gpu_mem_mib: Some(81_920),
            features: "ib,nvme".into(),
            fake: true,
        });
        let t = Telemetry::default();
        t.pass.observe(0.002);
        t.submit_to_start.observe(3.0);
        let out = render(&s, &[("completed".to_string(), 5u64)].into(), &t);
        for line in [
            "ordo_jobs_pending{reason=\"resources\"} 4.0",
            "ordo_gpus_total 8.0",
            "ordo_gpus_busy 1.25",
            "ordo_running_gpus{user=\"alice\",group=\"alice\"} 2.0",
            "ordo_gpu_busy_ratio{node=\"n1\",gpu=\"0\"} 0.5",
            "ordo_gpu_memory_used_bytes{node=\"n1\",gpu=\"0\"} 2097152.0",
            "ordo_gpu_power_watts{node=\"n1\",gpu=\"0\"} 120.5",
            "ordo_node_last_heartbeat_timestamp_seconds{node=\"n1\"} 1.5",
            "ordo_node_info{node=\"n1\",gpu_model=\"a100\",gpu_memory_mib=\"81920\",features=\"ib,nvme\",fake=\"true\"} 1.0",
            "ordo_jobs_ended_total{state=\"completed\"} 5",
            "ordo_scheduling_pass_duration_seconds_count 1",
            "ordo_job_submit_to_start_seconds_bucket{le=\"6.4\"} 1",
            "# TYPE ordo_job_submit_to_start_seconds histogram",
        ] {
            assert!(out.lines().any(|l| l == line), "no line `{line}` in:\n{out}");
        }
        assert!(!out.contains("# EOF"), "Prometheus text, not OpenMetrics");
    }
}
