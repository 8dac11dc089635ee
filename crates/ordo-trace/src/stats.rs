//! [`TraceStats`]: what a loaded trace holds (jobs, span, GPU sizes, run times, offered load,
//! top users and groups) and what loading dropped or repaired, for `ordo trace stats`.

use crate::timefmt::format_datetime;
use crate::LoadedTrace;
use ordo_core::time::{to_secs_f64, Time};
use ordo_core::words::{agree, count};
use ordo_core::ClusterSpec;
use serde::Serialize;
use std::fmt::Write;

/// Summary of a loaded trace. Serialises to the JSON of `ordo trace stats --json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TraceStats {
    /// Path or name of the trace.
    pub source: String,
    /// Format read.
    pub format: String,
    /// Data rows read.
    pub rows: usize,
    /// Jobs kept.
    pub jobs: usize,
    /// First submit in the trace's own time (a UTC date for wall-clock formats), if any job.
    pub first_submit: Option<String>,
    /// Seconds from the first to the last submit.
    pub span_secs: f64,
    /// Jobs by GPU count: `(bucket label, jobs)`, buckets `0`, `<1` (a fraction of one GPU),
    /// `1`, `2`, `3-4`, `5-8`, ..., only non-empty ones.
    pub gpu_histogram: Vec<(String, usize)>,
    /// Run-time percentiles in seconds: `(label, value)` for p10, p50, p90, p99, max and mean.
    pub runtime_secs: Vec<(String, f64)>,
    /// Jobs with a user estimate.
    pub with_estimate: usize,
    /// Total GPU-hours of work (fractional GPUs count their fraction).
    pub gpu_hours: f64,
    /// Offered load against the cluster: GPU-time of the jobs / (cluster GPUs x span), when a
    /// cluster was given and the span is non-zero.
    pub load: Option<f64>,
    /// The cluster the load is measured against (e.g. `64x8`) and its GPUs.
    pub cluster: Option<(String, u64)>,
    /// Jobs asking for more GPUs than the cluster's total (they can never run).
    pub larger_than_cluster: Option<usize>,
    /// Distinct users and groups.
    pub users: usize,
    /// Distinct groups.
    pub groups: usize,
    /// Top users by GPU-hours: `(name, jobs, GPU-hours)`, at most ten.
    pub top_users: Vec<(String, usize, f64)>,
    /// Top groups by GPU-hours: `(name, jobs, GPU-hours)`, at most ten.
    pub top_groups: Vec<(String, usize, f64)>,
    /// Rows not kept, by reason.
    pub dropped: Vec<(String, usize)>,
    /// Rows kept after a documented repair, by reason.
    pub repaired: Vec<(String, usize)>,
    /// Slurm job steps skipped.
    pub skipped_steps: usize,
    /// The first reasons of bad rows skipped with `--skip-bad`.
    pub bad_reasons: Vec<String>,
    /// The machine size from the trace header (SWF `MaxProcs`), if any.
    pub max_procs: Option<u64>,
    /// The cluster's GPUs by model: `(model, nodes, GPUs)`, most GPUs first; empty when no node
    /// names its model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_models: Vec<(String, usize, u64)>,
    /// Jobs that constrain their GPUs (models, memory or features).
    pub constrained: usize,
    /// What constrained jobs ask: `(models accepted, or the other constraint, jobs)`, most first,
    /// at most ten.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<(String, usize)>,
}

fn gpu_work(j: &ordo_core::Job) -> f64 {
    let g = match j.gpu_milli {
        Some(m) => f64::from(m) / 1000.0,
        None => f64::from(j.gpus),
    };
    g * to_secs_f64(j.runtime)
}

fn bucket(j: &ordo_core::Job) -> (u32, String) {
    if j.gpu_milli.is_some() {
        return (1, "<1".into());
    }
    match j.gpus {
        0 => (0, "0".into()),
        1 => (2, "1".into()),
        2 => (3, "2".into()),
        g => {
            let hi = g.next_power_of_two();
            let k = hi.trailing_zeros() + 2;
            (k, format!("{}-{}", hi / 2 + 1, hi))
        }
    }
}

fn percentile(sorted: &[Time], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
    to_secs_f64(sorted[i])
}

fn top(names: &[String], index: impl Fn(&ordo_core::Job) -> u32, t: &LoadedTrace) -> Vec<(String, usize, f64)> {
    let mut acc: Vec<(usize, f64)> = vec![(0, 0.0); names.len()];
    for j in &t.workload.jobs {
        if let Some(a) = acc.get_mut(index(j) as usize) {
            a.0 += 1;
            a.1 += gpu_work(j) / 3600.0;
        }
    }
    let mut v: Vec<(String, usize, f64)> =
        names.iter().zip(acc).map(|(n, (jobs, h))| (n.clone(), jobs, h)).filter(|x| x.1 > 0).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    v.truncate(10);
    v
}

impl TraceStats {
    /// Summarises `t`, measuring the load against `cluster` when given.
    pub fn new(t: &LoadedTrace, cluster: Option<&ClusterSpec>) -> Self {
        let jobs = &t.workload.jobs;
        let span = jobs.iter().map(|j| j.submit).max().unwrap_or(0) - jobs.iter().map(|j| j.submit).min().unwrap_or(0);
        let mut hist: Vec<(u32, String, usize)> = Vec::new();
        for j in jobs {
            let (k, label) = bucket(j);
            match hist.iter_mut().find(|h| h.0 == k) {
                Some(h) => h.2 += 1,
                None => hist.push((k, label, 1)),
            }
        }
        hist.sort_by_key(|h| h.0);
        let mut rt: Vec<Time> = jobs.iter().map(|j| j.runtime).collect();
        rt.sort_unstable();
        let mean = if rt.is_empty() { 0.0 } else { rt.iter().map(|&r| to_secs_f64(r)).sum::<f64>() / rt.len() as f64 };
        let work: f64 = jobs.iter().map(gpu_work).sum();
        let total = cluster.map(ClusterSpec::total_gpus);
        let load = match total {
            Some(g) if g > 0 && span > 0 => Some(work / (g as f64 * to_secs_f64(span))),
            _ => None,
        };
        let first_submit = t.time_base.map(|b| {
            if t.format.wall_clock() {
                format_datetime(b)
            } else {
                format!("{:.3} s", to_secs_f64(b))
            }
        });
        let mut cluster_models: Vec<(String, usize, u64)> = Vec::new();
        for n in cluster.map_or(&[][..], |c| &c.nodes[..]) {
            let Some(m) = &n.gpu_model else { continue };
            match cluster_models.iter_mut().find(|x| x.0 == *m) {
                Some(x) => {
                    x.1 += 1;
                    x.2 += u64::from(n.gpus);
                }
                None => cluster_models.push((m.clone(), 1, u64::from(n.gpus))),
            }
        }
        cluster_models.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let mut constraints: Vec<(String, usize)> = Vec::new();
        let mut constrained = 0;
        for n in jobs.iter().filter_map(|j| j.needs.as_ref()).filter(|n| n.constrains()) {
            constrained += 1;
            let d = n.describe();
            match constraints.iter_mut().find(|x| x.0 == d) {
                Some(x) => x.1 += 1,
                None => constraints.push((d, 1)),
            }
        }
        constraints.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        constraints.truncate(10);
        TraceStats {
            cluster_models,
            constrained,
            constraints,
            source: t.source.clone(),
            format: t.format.to_string(),
            rows: t.rows,
            jobs: jobs.len(),
            first_submit,
            span_secs: to_secs_f64(span),
            gpu_histogram: hist.into_iter().map(|(_, l, n)| (l, n)).collect(),
            runtime_secs: vec![
                ("p10".into(), percentile(&rt, 0.10)),
                ("p50".into(), percentile(&rt, 0.50)),
                ("p90".into(), percentile(&rt, 0.90)),
                ("p99".into(), percentile(&rt, 0.99)),
                ("max".into(), rt.last().map_or(0.0, |&r| to_secs_f64(r))),
                ("mean".into(), mean),
            ],
            with_estimate: jobs.iter().filter(|j| j.estimate.is_some()).count(),
            gpu_hours: work / 3600.0,
            load,
            cluster: cluster.map(|c| (c.summary(), c.total_gpus())),
            larger_than_cluster: total.map(|g| jobs.iter().filter(|j| u64::from(j.gpus) > g).count()),
            users: t.workload.users.len(),
            groups: t.workload.groups.len(),
            top_users: top(&t.workload.users, |j| j.user, t),
            top_groups: top(&t.workload.groups, |j| j.group, t),
            dropped: t.drops().into_iter().map(|(r, n)| (r.to_string(), n)).collect(),
            repaired: t.repaired.clone(),
            skipped_steps: t.skipped_steps,
            bad_reasons: t.bad_reasons.clone(),
            max_procs: t.max_procs,
        }
    }

    /// A human-readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "trace:    {} ({})", self.source, self.format);
        let _ = writeln!(s, "rows:     {} read, {} kept", self.rows, count(self.jobs, "job"));
        for (why, n) in &self.dropped {
            let _ = writeln!(s, "          dropped {n}: {why}");
        }
        for (why, n) in &self.repaired {
            let _ = writeln!(s, "          repaired {n}: {why}");
        }
        if self.skipped_steps > 0 {
            let _ = writeln!(s, "          skipped {} (not jobs)", count(self.skipped_steps, "Slurm job step"));
        }
        for r in &self.bad_reasons {
            let _ = writeln!(s, "          bad row: {r}");
        }
        let first = self.first_submit.as_deref().unwrap_or("-");
        let _ = writeln!(s, "span:     {:.2} days of arrivals, first at {first}", self.span_secs / 86_400.0);
        if let Some(p) = self.max_procs {
            let _ = writeln!(s, "machine:  {p} processors (trace header)");
        }
        let _ = writeln!(
            s,
            "work:     {:.1} GPU-hours; {} of {} {} an estimate",
            self.gpu_hours,
            self.with_estimate,
            count(self.jobs, "job"),
            agree(self.with_estimate, "carries", "carry")
        );
        if let Some((c, g)) = &self.cluster {
            match self.load {
                Some(l) => {
                    let _ = writeln!(
                        s,
                        "load:     {:.1}% of cluster {c} ({}) over the span",
                        l * 100.0,
                        count(*g as usize, "GPU")
                    );
                }
                None => {
                    let _ = writeln!(s, "load:     - (span is 0) on cluster {c} ({})", count(*g as usize, "GPU"));
                }
            }
            if let Some(n) = self.larger_than_cluster.filter(|&n| n > 0) {
                let _ = writeln!(
                    s,
                    "          {} {} for more GPUs than the cluster has",
                    count(n, "job"),
                    agree(n, "asks", "ask")
                );
            }
        }
        if !self.cluster_models.is_empty() {
            let _ = writeln!(s, "\nGPU models of the cluster:");
            for (m, nodes, g) in &self.cluster_models {
                let _ = writeln!(s, "  {m:<16} {:>14}  {:>12}", count(*nodes, "node"), count(*g as usize, "GPU"));
            }
        }
        if self.constrained > 0 {
            let pct = self.constrained as f64 * 100.0 / self.jobs.max(1) as f64;
            let _ = writeln!(
                s,
                "\nconstrained: {} of {} ({pct:.1}%) accept only some GPUs; most asked:",
                ordo_core::words::group_digits(&self.constrained.to_string()),
                count(self.jobs, "job")
            );
            for (what, n) in &self.constraints {
                let _ = writeln!(s, "  {what:<40} {n:>8}");
            }
        }
        let _ = writeln!(s, "\nGPUs per job:");
        for (label, n) in &self.gpu_histogram {
            let pct = if self.jobs > 0 { *n as f64 * 100.0 / self.jobs as f64 } else { 0.0 };
            let _ = writeln!(s, "  {label:>9}  {n:>8}  {pct:5.1}%");
        }
        let _ = writeln!(s, "\nrun time (s):");
        let line: Vec<String> = self.runtime_secs.iter().map(|(l, v)| format!("{l} {v:.0}")).collect();
        let _ = writeln!(s, "  {}", line.join("  "));
        for (title, count, list) in [("users", self.users, &self.top_users), ("groups", self.groups, &self.top_groups)]
        {
            let _ = writeln!(s, "\ntop {title} by GPU-hours ({count} in all):");
            for (name, jobs, h) in list {
                let _ = writeln!(s, "  {name:<24} {jobs:>8} jobs  {h:>12.1} GPU-h");
            }
        }
        s
    }
}
