//! Metrics of one run. Every field is defined exactly in docs/METRICS.md; keep the two in step.

use crate::engine::{JobRecord, SimConfig};
use ordo_core::time::{to_secs_f64, SECOND};
use ordo_core::{Order, Time, Workload};
use serde::{Deserialize, Serialize};

/// Why GPUs sat idle during an interval (docs/METRICS.md, "Idle capacity by cause").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleCause {
    /// No job waited.
    EmptyQueue,
    /// Jobs waited and at least one of them fits the idle GPUs under the placement now: the
    /// order (or a reservation) kept it waiting.
    HeadOfLine,
    /// Jobs waited and none of them fits the idle GPUs under the placement (too few idle GPUs,
    /// or idle GPUs spread over nodes).
    Fragmentation,
    /// Jobs waited, none of them fits the idle GPUs, but one would if it accepted their GPU
    /// model, memory or node features: constraints, not the order, hold them idle.
    Constrained,
}

impl IdleCause {
    fn index(self) -> usize {
        self as usize
    }
}

/// Time integrals gathered while the simulation runs (thousandths of a GPU x milliseconds, so
/// that fractional jobs count their share; job-milliseconds).
#[derive(Debug, Clone, Default)]
pub struct RunIntegrals {
    window: (Time, Time),
    /// Busy GPU-ms inside the arrival window.
    busy_in_window: i128,
    /// Idle GPU-ms by [`IdleCause`], over the whole run and inside the arrival window.
    idle_by_cause: [i128; 4],
    idle_by_cause_in_window: [i128; 4],
    /// Idle GPU-ms while nothing ran or waited since the last time something did: counted as
    /// empty-queue idle once a job runs or waits again, dropped if none does (the run is over,
    /// and the makespan ends at the last job's end).
    pending_idle: i128,
    /// Whether any job has run or waited yet (before that, no interval counts).
    begun: bool,
    /// Idle GPU-ms while at least one job waited.
    idle_while_waiting: i128,
    /// Idle GPU-ms while a waiting job's GPU count was at most the idle GPUs.
    idle_while_fit: i128,
    /// Integral of the queue length (job-ms).
    queue_len: i128,
    /// Events processed.
    pub events: u64,
    /// Scheduling passes.
    pub passes: u64,
}

impl RunIntegrals {
    /// Integrals over the arrival window `[first, last]`.
    pub fn new(first_submit: Time, last_submit: Time) -> Self {
        RunIntegrals { window: (first_submit, last_submit), ..Default::default() }
    }

    /// Accounts for `[from, to)`, during which `busy` thousandths of a GPU (of `total`) were
    /// allocated, `running` jobs ran and `waiting` jobs waited, the smallest waiting job asked
    /// for `min_waiting` thousandths, and idle GPUs were idle for `cause`.
    #[allow(clippy::too_many_arguments)]
    pub fn advance(
        &mut self,
        from: Time,
        to: Time,
        busy: u64,
        total: u64,
        running: u64,
        waiting: u64,
        min_waiting: Option<u64>,
        cause: IdleCause,
    ) {
        if to <= from {
            return;
        }
        let quiet = running == 0 && waiting == 0;
        if quiet {
            if self.begun {
                self.pending_idle += total as i128 * (to - from) as i128;
            }
        } else {
            self.begun = true;
            self.idle_by_cause[IdleCause::EmptyQueue.index()] += std::mem::take(&mut self.pending_idle);
        }
        let dt = (to - from) as i128;
        let (w0, w1) = self.window;
        let (a, b) = (from.max(w0), to.min(w1));
        let idle = (total - busy) as i128;
        if b > a {
            self.busy_in_window += busy as i128 * (b - a) as i128;
            self.idle_by_cause_in_window[cause.index()] += idle * (b - a) as i128;
        }
        if !quiet {
            self.idle_by_cause[cause.index()] += idle * dt;
        }
        if waiting > 0 {
            self.idle_while_waiting += idle * dt;
            if min_waiting.is_some_and(|g| g as i128 <= idle) {
                self.idle_while_fit += idle * dt;
            }
        }
        self.queue_len += waiting as i128 * dt;
    }
}

/// Idle GPU-hours by cause over a span (docs/METRICS.md, "Idle capacity by cause"); the four
/// add up to the idle GPU-hours of the span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdleCauses {
    /// The span, hours.
    pub span_h: f64,
    /// Idle while jobs waited and one of them fit the idle GPUs under the placement: capacity
    /// the order (head-of-line blocking, or a reservation) left unused.
    pub head_of_line_gpu_hours: f64,
    /// Idle while jobs waited and none of them fit the idle GPUs under the placement.
    pub fragmentation_gpu_hours: f64,
    /// Idle while no job waited.
    pub empty_queue_gpu_hours: f64,
    /// Idle while jobs waited, none fit the idle GPUs, and one would have fit had it accepted
    /// their GPU model, memory or features (constrained-idle; 0 on untyped runs).
    #[serde(default)]
    pub constrained_gpu_hours: f64,
}

impl IdleCauses {
    fn from_integrals(idle: &[i128; 4], span: Time) -> IdleCauses {
        let h = |x: i128| x as f64 / 1000.0 / 3_600_000.0;
        IdleCauses {
            span_h: span as f64 / 3_600_000.0,
            head_of_line_gpu_hours: h(idle[IdleCause::HeadOfLine.index()]),
            fragmentation_gpu_hours: h(idle[IdleCause::Fragmentation.index()]),
            empty_queue_gpu_hours: h(idle[IdleCause::EmptyQueue.index()]),
            constrained_gpu_hours: h(idle[IdleCause::Constrained.index()]),
        }
    }

    /// All idle GPU-hours of the span.
    pub fn total_gpu_hours(&self) -> f64 {
        self.head_of_line_gpu_hours
            + self.fragmentation_gpu_hours
            + self.empty_queue_gpu_hours
            + self.constrained_gpu_hours
    }

    /// Each cause as a share of the span's capacity (`gpus` x span): head-of-line,
    /// fragmentation, empty queue, constrained. Utilisation over the span is 1 minus their sum.
    pub fn shares(&self, gpus: u64) -> [f64; 4] {
        let cap = gpus as f64 * self.span_h;
        if cap <= 0.0 {
            return [0.0; 4];
        }
        [
            self.head_of_line_gpu_hours / cap,
            self.fragmentation_gpu_hours / cap,
            self.empty_queue_gpu_hours / cap,
            self.constrained_gpu_hours / cap,
        ]
    }
}

/// One GPU model's use over a run's makespan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelUse {
    /// The model as the cluster names it.
    pub model: String,
    /// Its GPUs.
    pub gpus: u64,
    /// Held GPU-time over (its GPUs x the makespan).
    pub utilization: f64,
}

/// Each GPU model's use: GPU-time held on its nodes (a fractional job counts its share) over
/// its GPUs x `makespan`.
fn by_model(cluster: &ordo_core::ClusterSpec, w: &Workload, records: &[JobRecord], makespan: Time) -> Vec<ModelUse> {
    let mut models: Vec<(String, u64, i128)> = Vec::new();
    let mut of_node: Vec<usize> = Vec::with_capacity(cluster.nodes.len());
    for n in &cluster.nodes {
        let m = n.gpu_model.clone().unwrap_or_else(|| "unknown".into());
        let i = match models.iter().position(|x| x.0 == m) {
            Some(i) => i,
            None => {
                models.push((m, 0, 0));
                models.len() - 1
            }
        };
        models[i].1 += u64::from(n.gpus);
        of_node.push(i);
    }
    for r in records {
        let share = w.jobs[r.job.idx()].share_milli().map_or(1000, i128::from);
        for seg in &r.segments {
            for (node, ids) in seg.gpu_ids.iter() {
                if let Some(&i) = of_node.get(node as usize) {
                    models[i].2 += ids.len() as i128 * share * i128::from(seg.end - seg.start) / 1000;
                }
            }
        }
    }
    models
        .into_iter()
        .map(|(model, gpus, held)| ModelUse {
            model,
            gpus,
            utilization: if gpus > 0 && makespan > 0 { held as f64 / (gpus as f64 * makespan as f64) } else { 0.0 },
        })
        .collect()
}

/// The metrics of one run. JSON keys are stable; units are in the names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Policy name, e.g. `sjf+easy`.
    pub policy: String,
    /// Placement model.
    pub placement: String,
    /// What the policy knew of run times: `none` (it reads none), `learned` (from finished
    /// jobs), `user` (the users' estimates; a job without one, in a workload where others have
    /// one, is given the largest estimate, as a site's default time limit would), `oracle`
    /// (the workload has no estimates, so it read each job's true run time).
    pub estimates: String,
    /// Jobs without a user estimate (whatever the policy reads).
    pub jobs_without_estimate: usize,
    /// Cluster description, e.g. `64x8`.
    pub cluster: String,
    /// GPUs in the cluster.
    pub gpus: u64,
    /// Jobs that ran.
    pub jobs: usize,
    /// Jobs that could never fit the cluster (not run, reported).
    pub rejected_jobs: usize,
    /// Jobs not run because a dependency could never be met (reported).
    #[serde(default)]
    pub never_satisfied_jobs: usize,
    /// Mean job completion time (end - submit), seconds.
    pub mean_jct_s: f64,
    /// Median JCT, seconds.
    pub p50_jct_s: f64,
    /// 95th percentile JCT, seconds.
    pub p95_jct_s: f64,
    /// 99th percentile JCT, seconds.
    pub p99_jct_s: f64,
    /// Largest JCT, seconds.
    pub max_jct_s: f64,
    /// Mean wait (start - submit), seconds.
    pub mean_wait_s: f64,
    /// 95th percentile wait, seconds.
    pub p95_wait_s: f64,
    /// 99th percentile wait, seconds.
    pub p99_wait_s: f64,
    /// Largest wait, seconds.
    pub max_wait_s: f64,
    /// Mean bounded slowdown: mean of max(1, JCT / max(run time, 10 s)).
    pub mean_bounded_slowdown: f64,
    /// Makespan: last end - first submit, seconds.
    pub makespan_s: f64,
    /// Allocated GPU-time inside [first submit, last submit] / (GPUs x that span); null when the
    /// span is zero (all jobs submitted at once).
    pub utilization_window: Option<f64>,
    /// Total GPU-time of all jobs / (GPUs x makespan).
    pub utilization_makespan: f64,
    /// GPU-hours left idle while at least one job waited.
    pub idle_while_waiting_gpu_hours: f64,
    /// The part of `idle_while_waiting_gpu_hours` during which the smallest waiting job asked for
    /// no more GPUs than were idle (it would have fit by count).
    pub idle_while_fit_gpu_hours: f64,
    /// Idle GPU-hours by cause from first submit to last end (they add up to
    /// `gpus` x makespan minus the GPU-hours allocated).
    pub idle_causes: IdleCauses,
    /// The same inside the arrival window (the span of `utilization_window`); null when it is
    /// empty.
    pub idle_causes_window: Option<IdleCauses>,
    /// Typed runs: each GPU model's GPUs and the share of their GPU-time held by jobs over the
    /// makespan (docs/METRICS.md); empty on untyped runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub utilization_by_model: Vec<ModelUse>,
    /// Offered load: total GPU-time of all jobs / (GPUs x arrival window); null when every job
    /// is submitted at once (then the work is a backlog of `total_gpu_hours / gpus` hours).
    pub offered_load: Option<f64>,
    /// Mean number of waiting jobs over the makespan.
    pub mean_queue_len: f64,
    /// Jain's fairness index of mean bounded slowdown across users (1 = equal).
    pub fairness_users: f64,
    /// Jain's fairness index of mean bounded slowdown across groups.
    pub fairness_groups: f64,
    /// Total GPU-hours of work (GPUs x run time).
    pub total_gpu_hours: f64,
    /// Lower bound on the makespan: max(total GPU-time / GPUs, max(submit + run time) - first submit).
    pub makespan_lower_bound_s: f64,
    /// Utilisation the lower bound allows: total GPU-time / (GPUs x makespan lower bound).
    pub utilization_upper_bound: f64,
    /// Preemptions over all jobs (preemptive policies).
    pub preemptions: u64,
    /// Jobs preempted at least once.
    pub preempted_jobs: usize,
    /// GPU-hours preemptions cost: restart overheads and work done and then lost (by jobs that
    /// restart from zero or from an older checkpoint; `--checkpoint`). 0 without preemption.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preemption_lost_gpu_hours: f64,
    /// Runs on a cluster with a topology (`--topology`): where gangs landed and what spreading
    /// them cost (docs/TOPOLOGY.md); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<SpreadStats>,
    /// Events the engine processed.
    pub events: u64,
    /// Scheduling passes (one per distinct event time).
    pub sched_passes: u64,
}

/// Where the runs of gangs (jobs on more than one node) landed in the topology, and what
/// spreading them over several units of a level cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpreadStats {
    /// The topology's levels, lowest first.
    pub levels: Vec<String>,
    /// Runs of gangs by the number of levels they crossed: `[0]` within one unit of the lowest
    /// level, `[l]` within one unit of level `l` but not of `l - 1`, `[levels]` over several
    /// units of the top level.
    pub gang_runs_by_crossed: Vec<u64>,
    /// GPU-hours lost to spread placement: GPUs x the run time gangs spent beyond what they
    /// would have taken in the least spread placement their size allows (within the smallest
    /// unit that holds them on the empty cluster; a gang larger than any unit of a level
    /// crosses it wherever it goes, and that is not counted).
    pub lost_gpu_hours: f64,
    /// Gangs (jobs whose runs were on more than one node) whose runs crossed more levels than
    /// their size needs.
    pub spread_gangs: u64,
    /// Gangs in all.
    pub gangs: u64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// Nearest-rank percentiles of unsorted values (each as [`percentile`] gives on the sorted
/// values), highest `ps` first; `values` is reordered. Selection, not a sort: O(n) per
/// percentile, so a million-job run does not pay two full sorts for five numbers.
fn percentiles_unsorted<const N: usize>(values: &mut [f64], ps: [f64; N]) -> [f64; N] {
    let mut out = [0.0; N];
    let mut upto = values.len(); // ranks below `upto` are all in values[..upto]
    for (o, &p) in out.iter_mut().zip(&ps) {
        if values.is_empty() {
            break;
        }
        let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
        let k = rank.clamp(1, values.len()) - 1;
        debug_assert!(k < upto, "percentiles are asked highest first");
        let (_, v, _) = values[..upto].select_nth_unstable_by(k, f64::total_cmp);
        *o = *v;
        upto = k + 1;
    }
    out
}

/// Nearest-rank percentile of sorted values: the smallest value with at least `p`% of values
/// at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index (sum x)^2 / (n sum x^2); 1 for no or all-zero values.
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || s2 == 0.0 {
        1.0
    } else {
        s * s / (xs.len() as f64 * s2)
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Bounded slowdown of one job with a 10 s bound.
pub fn bounded_slowdown(jct: Time, runtime: Time) -> f64 {
    (jct as f64 / runtime.max(10 * SECOND) as f64).max(1.0)
}

fn per_owner_mean(n: usize, records: &[JobRecord], owner: impl Fn(&JobRecord) -> usize, value: &[f64]) -> Vec<f64> {
    let mut sum = vec![0.0; n];
    let mut cnt = vec![0usize; n];
    for (r, v) in records.iter().zip(value) {
        let o = owner(r);
        sum[o] += v;
        cnt[o] += 1;
    }
    sum.iter().zip(&cnt).filter(|(_, &c)| c > 0).map(|(s, &c)| s / c as f64).collect()
}

impl Metrics {
    /// The utilisation headlines, reports and the tuner compare: over the arrival window, or
    /// over the makespan when the window is empty (every job submitted at one instant).
    pub fn headline_utilisation(&self) -> f64 {
        self.utilization_window.unwrap_or(self.utilization_makespan)
    }

    /// The idle causes over the span the headline utilisation uses (the arrival window, else
    /// the makespan).
    pub fn headline_idle_causes(&self) -> &IdleCauses {
        match (&self.idle_causes_window, self.utilization_window) {
            (Some(c), Some(_)) => c,
            _ => &self.idle_causes,
        }
    }

    /// True when the policy read true run times (no real scheduler could run it as is).
    pub fn clairvoyant(&self) -> bool {
        self.estimates == "oracle"
    }

    /// Computes the metrics of a finished run on `cfg.cluster`; `oracle` when the policy read
    /// true run times because no job has an estimate.
    pub fn compute(
        w: &Workload,
        records: &[JobRecord],
        integ: &RunIntegrals,
        cfg: &SimConfig,
        oracle: bool,
        rejected: usize,
        never_satisfied: usize,
    ) -> Metrics {
        let cluster = &cfg.cluster;
        let gpus = cluster.total_gpus();
        let ran = |r: &JobRecord| &w.jobs[r.job.idx()];
        let mut jct: Vec<f64> = records.iter().map(|r| to_secs_f64(r.end - r.submit)).collect();
        // Wait: all the time a job spent not running, before its first start and after each
        // preemption (for jobs never preempted, start - submit).
        let mut wait: Vec<f64> = records
            .iter()
            .map(|r| {
                let ran: Time = r.segments.iter().map(|s| s.end - s.start).sum();
                to_secs_f64(r.end - r.submit - ran)
            })
            .collect();
        let bsld: Vec<f64> = records.iter().map(|r| bounded_slowdown(r.end - r.submit, ran(r).runtime)).collect();
        let fair_users = jain(&per_owner_mean(w.users.len().max(1), records, |r| ran(r).user as usize, &bsld));
        let fair_groups = jain(&per_owner_mean(w.groups.len().max(1), records, |r| ran(r).group as usize, &bsld));
        let (mean_jct, mean_wait) = (mean(&jct), mean(&wait));
        let [max_jct, p99_jct, p95_jct, p50_jct] = percentiles_unsorted(&mut jct, [100.0, 99.0, 95.0, 50.0]);
        let [max_wait, p99_wait, p95_wait] = percentiles_unsorted(&mut wait, [100.0, 99.0, 95.0]);
        let first = records.iter().map(|r| r.submit).min().unwrap_or(0);
        let last_end = records.iter().map(|r| r.end).max().unwrap_or(first);
        let makespan = last_end - first;
        // With a speed matrix a job's run time depends on where it ran: the work is the GPU time
        // it held, and the bound's fastest finish its run time at the matrix's highest speed.
        let typed_speeds = !cfg.speeds.is_empty();
        let work: i128 = if typed_speeds {
            records
                .iter()
                .map(|r| {
                    let held: i128 = r.segments.iter().map(|s| (s.end - s.start) as i128).sum();
                    match ran(r).share_milli() {
                        Some(m) => m as i128 * held / 1000,
                        None => ran(r).gpus as i128 * held,
                    }
                })
                .sum()
        } else {
            records.iter().map(|r| ran(r).gpu_time()).sum()
        };
        let fastest = |t: Time| if typed_speeds { ordo_core::pools::scaled(t, cfg.speeds.max()) } else { t };
        let latest_finish = records.iter().map(|r| r.submit + fastest(ran(r).runtime)).max().unwrap_or(first) - first;
        let lb = ((work as f64 / gpus.max(1) as f64).ceil() as Time).max(latest_finish);
        let (w0, w1) = integ.window;
        let estimates = if !cfg.policy.needs_estimate() {
            match cfg.policy.order {
                Order::Gittins(_) | Order::Qssf => "learned",
                _ => "none",
            }
        } else if oracle {
            "oracle"
        } else {
            "user"
        };
        let gpu_h = |x: i128| x as f64 / 3_600_000.0;
        Metrics {
            policy: cfg.policy.to_string(),
            placement: cfg.placement.to_string(),
            estimates: estimates.to_string(),
            jobs_without_estimate: w.jobs.iter().filter(|j| j.estimate.is_none()).count(),
            cluster: cluster.summary(),
            gpus,
            jobs: records.len(),
            rejected_jobs: rejected,
            never_satisfied_jobs: never_satisfied,
            mean_jct_s: mean_jct,
            p50_jct_s: p50_jct,
            p95_jct_s: p95_jct,
            p99_jct_s: p99_jct,
            max_jct_s: max_jct,
            mean_wait_s: mean_wait,
            p95_wait_s: p95_wait,
            p99_wait_s: p99_wait,
            max_wait_s: max_wait,
            mean_bounded_slowdown: mean(&bsld),
            makespan_s: to_secs_f64(makespan),
            utilization_window: (w1 > w0)
                .then(|| integ.busy_in_window as f64 / 1000.0 / (gpus as f64 * (w1 - w0) as f64)),
            utilization_makespan: if makespan > 0 { work as f64 / (gpus as f64 * makespan as f64) } else { 0.0 },
            idle_causes: IdleCauses::from_integrals(&integ.idle_by_cause, makespan),
            idle_causes_window: (w1 > w0).then(|| IdleCauses::from_integrals(&integ.idle_by_cause_in_window, w1 - w0)),
            utilization_by_model: if cfg.typed(w) && cluster.nodes.iter().any(|n| n.gpu_model.is_some()) {
                by_model(cluster, w, records, makespan)
            } else {
                Vec::new()
            },
            offered_load: (w1 > w0 && gpus > 0).then(|| work as f64 / (gpus as f64 * (w1 - w0) as f64)),
            idle_while_waiting_gpu_hours: gpu_h(integ.idle_while_waiting / 1000),
            idle_while_fit_gpu_hours: gpu_h(integ.idle_while_fit / 1000),
            mean_queue_len: if makespan > 0 { integ.queue_len as f64 / makespan as f64 } else { 0.0 },
            fairness_users: fair_users,
            fairness_groups: fair_groups,
            total_gpu_hours: gpu_h(work),
            makespan_lower_bound_s: to_secs_f64(lb),
            utilization_upper_bound: if lb > 0 { work as f64 / (gpus as f64 * lb as f64) } else { 0.0 },
            preemptions: records.iter().map(|r| r.preemptions as u64).sum(),
            preempted_jobs: records.iter().filter(|r| r.preemptions > 0).count(),
            preemption_lost_gpu_hours: 0.0,
            spread: None,
            events: integ.events,
            sched_passes: integ.passes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
    }

    #[test]
    fn selected_percentiles_match_the_sorted_ones() {
        // Unsorted values with repeats, of several lengths (1 to 1,001), against a full sort.
        let mut x = 12345u64;
        for n in [1usize, 2, 3, 10, 99, 100, 101, 1001] {
            let mut v: Vec<f64> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((x >> 33) % 50) as f64 * 0.5
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let got = percentiles_unsorted(&mut v, [100.0, 99.0, 95.0, 50.0]);
            let want = [100.0, 99.0, 95.0, 50.0].map(|p| percentile(&sorted, p));
            assert_eq!(got, want, "n = {n}");
        }
        assert_eq!(percentiles_unsorted(&mut [], [100.0, 50.0]), [0.0, 0.0]);
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[2.0, 2.0, 2.0]), 1.0);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }
}
