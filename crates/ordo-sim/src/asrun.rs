//! The as-run row: the metrics of the schedule a real scheduler ran (an `ordo server`'s
//! database), computed with the very definitions of a simulated run, so it sits beside them.

use crate::engine::{JobRecord, RunSegment, SimConfig, SimOutput};
use crate::metrics::{IdleCause, Metrics, RunIntegrals};
use ordo_core::{Allocation, Capacity, ClusterSpec, GpuIds, Placement, PolicySpec, Time, Workload};
use std::collections::BTreeMap;

/// The name of the as-run row (its `policy`, and its `estimates`: what the real scheduler knew).
pub const AS_RUN: &str = "as-run";

/// One run of a job as it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealRun {
    /// Start (the workload's time scale).
    pub start: Time,
    /// End (completion, preemption or requeue).
    pub end: Time,
    /// The node it ran on (index into the cluster), when known.
    pub node: Option<u32>,
}

/// GPU time held against GPU time busy over a span, from measured job activity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BusyShare {
    /// Allocated GPU-time / (GPUs x span): the utilisation.
    pub allocated: f64,
    /// Busy GPU-time / (GPUs x span): what kernels really used. Jobs without samples count at
    /// the busy fraction of those with samples.
    pub busy: f64,
    /// Busy GPU-time / allocated GPU-time, over the jobs with samples.
    pub busy_of_allocated: f64,
    /// Share of the allocated GPU-time whose jobs had samples.
    pub measured: f64,
}

/// Why runs cannot be taken as a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsRunError {
    /// The runs do not match the workload's jobs.
    #[error("{0} runs for {1} jobs")]
    Count(usize, usize),
    /// A job's runs are out of order, overlap, end before they start, or do not add up to its
    /// run time.
    #[error("job {job}: {why}")]
    Job {
        /// The job's name.
        job: String,
        /// What is wrong.
        why: String,
    },
}

/// The schedule `runs` (one list per job of `w`, in time order) as a [`SimOutput`] on
/// `cluster`, with the metrics every simulated run has (docs/METRICS.md): waits, completion
/// times, utilisation, and idle capacity by cause (whether a waiting job fitted the idle GPUs
/// by count under `placement`, given the nodes jobs really held). Its `policy` and
/// `estimates` are [`AS_RUN`]. Each job's runs must add up to its run time.
pub fn as_run(
    w: &Workload,
    cluster: &ClusterSpec,
    placement: Placement,
    runs: &[Vec<RealRun>],
) -> Result<SimOutput, AsRunError> {
    if runs.len() != w.jobs.len() {
        return Err(AsRunError::Count(runs.len(), w.jobs.len()));
    }
    for (j, r) in w.jobs.iter().zip(runs) {
        let bad = |why: String| AsRunError::Job { job: j.name.clone(), why };
        if r.is_empty() {
            return Err(bad("no run".into()));
        }
        if r.iter().any(|x| x.end < x.start) || r.windows(2).any(|p| p[1].start < p[0].end) {
            return Err(bad("runs end before they start or overlap".into()));
        }
        let total: Time = r.iter().map(|x| x.end - x.start).sum();
        if total != j.runtime {
            return Err(bad(format!("runs add up to {total} ms, its run time is {} ms", j.runtime)));
        }
    }
    // Events: (time, kind, job, run): at one instant ends, then arrivals, then starts.
    let mut ev: Vec<(Time, u8, usize, usize)> = Vec::with_capacity(w.jobs.len() * 3);
    for (i, (j, r)) in w.jobs.iter().zip(runs).enumerate() {
        ev.push((j.submit, 1, i, 0));
        for (k, x) in r.iter().enumerate() {
            // A run reported to start before its submit (clocks) starts at its submit.
            ev.push((x.start.max(j.submit), 2, i, k));
            ev.push((x.end.max(j.submit), 0, i, k));
        }
    }
    ev.sort_unstable();
    let node_gpus: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
    let mut cap = Capacity::new(&node_gpus, placement);
    let total_milli = cluster.total_gpus() * 1000;
    let first = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last = w.jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let mut integ = RunIntegrals::new(first, last);
    let mut waiting: BTreeMap<u32, u32> = BTreeMap::new();
    let add = |m: &mut BTreeMap<u32, u32>, g: u32| *m.entry(g).or_default() += 1;
    let remove = |m: &mut BTreeMap<u32, u32>, g: u32| {
        if let Some(c) = m.get_mut(&g) {
            *c -= 1;
            if *c == 0 {
                m.remove(&g);
            }
        }
    };
    // What each running run holds in `cap` (none when its node is unknown or the records give
    // a node more GPUs than it has).
    let mut held: Vec<Option<Allocation>> = vec![None; w.jobs.len()];
    let (mut busy, mut running, mut waiting_n) = (0u64, 0u64, 0u64);
    let (mut prev, mut cause) = (first, IdleCause::EmptyQueue);
    let mut i = 0;
    while i < ev.len() {
        let t = ev[i].0;
        integ.advance(
            prev,
            t,
            busy.min(total_milli),
            total_milli,
            running,
            waiting_n,
            waiting.keys().next().map(|&g| g as u64 * 1000),
            cause,
        );
        prev = t;
        while i < ev.len() && ev[i].0 == t {
            let (_, kind, j, k) = ev[i];
            let g = w.jobs[j].gpus;
            match kind {
                0 => {
                    busy -= g as u64 * 1000;
                    running -= 1;
                    if let Some(a) = held[j].take() {
                        cap.give(&a);
                    }
                    if k + 1 < runs[j].len() {
                        add(&mut waiting, g);
                        waiting_n += 1;
                    }
                }
                1 => {
                    add(&mut waiting, g);
                    waiting_n += 1;
                }
                _ => {
                    remove(&mut waiting, g);
                    waiting_n -= 1;
                    busy += g as u64 * 1000;
                    running += 1;
                    if let Some(n) = runs[j][k].node.filter(|&n| (n as usize) < node_gpus.len()) {
                        let a = Allocation { parts: vec![(n, g)], detail: None };
                        if cap.can_take(&a) {
                            cap.take(&a);
                            held[j] = Some(a);
                        }
                    }
                }
            }
            i += 1;
        }
        let idle = total_milli.saturating_sub(busy);
        cause = if waiting.is_empty() {
            IdleCause::EmptyQueue
        } else if idle == 0 {
            IdleCause::Fragmentation
        } else if waiting.keys().take_while(|&&g| g as u64 * 1000 <= idle).any(|&g| cap.fits(g)) {
            IdleCause::HeadOfLine
        } else {
            IdleCause::Fragmentation
        };
    }
    integ.events = ev.len() as u64;
    let records: Vec<JobRecord> = w
        .jobs
        .iter()
        .zip(runs)
        .map(|(j, r)| JobRecord {
            job: j.id,
            submit: j.submit,
            start: r[0].start.max(j.submit),
            end: r[r.len() - 1].end.max(j.submit),
            gpus: j.gpus,
            gpu_milli: None,
            preemptions: r.len() as u32 - 1,
            segments: r
                .iter()
                .map(|x| RunSegment {
                    start: x.start.max(j.submit),
                    end: x.end.max(j.submit),
                    gpu_ids: x.node.map(|n| GpuIds::from_pairs([(n, &[][..])])).unwrap_or_default(),
                })
                .collect(),
        })
        .collect();
    // Metrics read the policy only for its name and what it knows (both replaced below).
    let fifo: PolicySpec = "fifo".parse().expect("built-in policy name");
    let cfg = SimConfig::new(cluster.clone(), placement, fifo);
    let mut metrics = Metrics::compute(w, &records, &integ, &cfg, false, 0, 0);
    metrics.policy = AS_RUN.into();
    metrics.estimates = AS_RUN.into();
    metrics.sched_passes = 0;
    Ok(SimOutput { records, rejected: vec![], never_satisfied: vec![], metrics })
}

/// The runs of a workload whose jobs carry when they really started ([`ordo_core::Job::start`],
/// e.g. Slurm's `Start` in an imported trace): one run each, from its start for its run time, on
/// a node not known. `Err(n)`: `n` jobs carry no start.
pub fn runs_from_starts(w: &Workload) -> Result<Vec<Vec<RealRun>>, usize> {
    let without = w.jobs.iter().filter(|j| j.start.is_none()).count();
    if without > 0 {
        return Err(without);
    }
    Ok(w.jobs
        .iter()
        .map(|j| {
            let start = j.start.unwrap_or(j.submit);
            vec![RealRun { start, end: start.saturating_add(j.runtime), node: None }]
        })
        .collect())
}

/// Why `runs` (one list per job of `w`) cannot have run on `cluster` under `placement`, so that
/// an as-run row there would not be what ran: a job the cluster could never hold (the policies'
/// rows reject it), or more GPUs held at one instant than the cluster has. `None` when they fit.
pub fn misfit(w: &Workload, cluster: &ClusterSpec, placement: Placement, runs: &[Vec<RealRun>]) -> Option<String> {
    let node_gpus: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
    let cap = Capacity::new(&node_gpus, placement);
    let never = w.jobs.iter().filter(|j| !cap.can_ever_fit(j.gpus)).count();
    if never > 0 {
        return Some(format!(
            "{never} of {} jobs never fit this cluster under {placement} placement (the policies' rows reject them)",
            w.jobs.len()
        ));
    }
    // Whole GPUs held over time: at one instant ends before starts.
    let mut ev: Vec<(Time, i64)> = Vec::with_capacity(w.jobs.len() * 2);
    for (j, r) in w.jobs.iter().zip(runs) {
        for x in r {
            ev.push((x.start.max(j.submit), i64::from(j.gpus)));
            ev.push((x.end.max(j.submit), -i64::from(j.gpus)));
        }
    }
    ev.sort_unstable();
    let (mut held, mut peak) = (0i64, 0i64);
    for (_, g) in ev {
        held += g;
        peak = peak.max(held);
    }
    let total = cluster.total_gpus();
    (peak as u64 > total)
        .then(|| format!("the jobs as run held up to {peak} GPUs at once, more than this cluster's {total}"))
}

/// Allocated against busy GPU-time over the span the headline utilisation uses (the arrival
/// window, or the makespan when every job arrived at once), from each job's mean busy % (`None`:
/// not measured). `None` when no job was measured.
pub fn busy_share(out: &SimOutput, busy_pct: &[Option<f64>]) -> Option<BusyShare> {
    let m = &out.metrics;
    let first = out.records.iter().map(|r| r.submit).min()?;
    let last_submit = out.records.iter().map(|r| r.submit).max()?;
    let last_end = out.records.iter().map(|r| r.end).max()?;
    let (a, b) = if m.utilization_window.is_some() { (first, last_submit) } else { (first, last_end) };
    if b <= a || m.gpus == 0 {
        return None;
    }
    let (mut held, mut held_measured, mut busy_measured) = (0f64, 0f64, 0f64);
    for r in &out.records {
        let gpus = r.gpus as f64;
        let t: Time = r.segments.iter().map(|s| (s.end.min(b) - s.start.max(a)).max(0)).sum();
        let gt = gpus * t as f64;
        held += gt;
        if let Some(p) = busy_pct.get(r.job.idx()).copied().flatten() {
            held_measured += gt;
            busy_measured += gt * p / 100.0;
        }
    }
    if held_measured <= 0.0 {
        return None;
    }
    let cap = m.gpus as f64 * (b - a) as f64;
    let frac = busy_measured / held_measured;
    Some(BusyShare {
        allocated: held / cap,
        busy: held * frac / cap,
        busy_of_allocated: frac,
        measured: held_measured / held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_core::{Job, JobId};

    fn job(i: u32, submit: Time, gpus: u32, runtime: Time) -> Job {
        Job {
            id: JobId(i),
            name: i.to_string(),
            user: 0,
            group: 0,
            submit,
            gpus,
            cpus: None,
            mem_mib: None,
            runtime,
            estimate: None,
            priority: None,
            gpu_milli: None,
            queue: None,
            after: vec![],
            failed: false,
            start: None,
            needs: None,
        }
    }

    /// Worked out by hand on one node of 4 GPUs: job 0 (4 GPUs, 0..10 s), job 1 (2 GPUs,
    /// submitted at 2 s, ran 10..14 s), job 2 (2 GPUs, submitted at 4 s, ran 14..16 s after a
    /// first run 11..12 s: preempted once).
    #[test]
    fn a_small_schedule_by_hand() {
        let s = 1000;
        let w = Workload {
            jobs: vec![job(0, 0, 4, 10 * s), job(1, 2 * s, 2, 4 * s), job(2, 4 * s, 2, 3 * s)],
            users: vec!["u".into()],
            groups: vec!["g".into()],
        };
        let cluster = ClusterSpec::uniform(1, 4);
        let run = |a: Time, b: Time| RealRun { start: a * s, end: b * s, node: Some(0) };
        let runs = vec![vec![run(0, 10)], vec![run(10, 14)], vec![run(11, 12), run(14, 16)]];
        let out = as_run(&w, &cluster, Placement::Consolidated, &runs).unwrap();
        let m = &out.metrics;
        assert_eq!((m.policy.as_str(), m.estimates.as_str()), (AS_RUN, AS_RUN));
        // JCT: 10, 12, 12 s; waits: 0, 8, 12 - 3 = 9 s.
        assert!((m.mean_jct_s - 34.0 / 3.0).abs() < 1e-9, "{}", m.mean_jct_s);
        assert!((m.mean_wait_s - 17.0 / 3.0).abs() < 1e-9, "{}", m.mean_wait_s);
        assert_eq!((m.makespan_s, m.preemptions, m.preempted_jobs), (16.0, 1, 1));
        // Work 40 + 8 + 6 = 54 GPU-s over 4 GPUs x 16 s.
        assert!((m.utilization_makespan - 54.0 / 64.0).abs() < 1e-9);
        // Arrival window 0..4 s: job 0 holds all 4 GPUs: 100%.
        assert_eq!(m.utilization_window, Some(1.0));
        // Idle: 10..11 s, 2 GPUs idle while job 2 (2 GPUs) waits and fits: head-of-line, 2 GPU-s;
        // 12..14 s likewise (job 2 waits again after its preemption), 4 GPU-s; 14..16 s nothing waits
        // and 2 GPUs idle: empty queue, 4 GPU-s.
        let h = |x: f64| x * 3600.0;
        assert!((h(m.idle_causes.head_of_line_gpu_hours) - 6.0).abs() < 1e-9, "{:?}", m.idle_causes);
        assert!((h(m.idle_causes.empty_queue_gpu_hours) - 4.0).abs() < 1e-9, "{:?}", m.idle_causes);
        assert_eq!(m.idle_causes.fragmentation_gpu_hours, 0.0);
        // Busy: job 0 at 50%, job 1 at 100%, job 2 unmeasured; over the makespan? No: over the
        // arrival window 0..4 s, where only job 0 ran: allocated 100%, busy 50%.
        let b = busy_share(&out, &[Some(50.0), Some(100.0), None]).unwrap();
        assert_eq!((b.allocated, b.busy, b.busy_of_allocated, b.measured), (1.0, 0.5, 0.5, 1.0));
        // Runs that do not add up are refused.
        let bad = vec![vec![run(0, 10)], vec![run(10, 13)], vec![run(11, 12), run(14, 16)]];
        assert!(as_run(&w, &cluster, Placement::Consolidated, &bad).unwrap_err().to_string().contains("job 1"));
    }
}
