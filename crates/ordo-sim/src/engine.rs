//! The discrete-event engine. It owns time: an event heap ordered by (time, kind, sequence)
//! where, at equal times, job ends come before arrivals. After all events at one instant it asks
//! the scheduler for a plan once and commits it. The policy never runs its own loop.

use crate::metrics::{Metrics, RunIntegrals};
use ordo_core::scheduler::{JobReq, SubmitError};
use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, Scheduler, Time, Workload};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// What to simulate: the cluster, the placement model and the policy.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The cluster.
    pub cluster: ClusterSpec,
    /// Placement model.
    pub placement: Placement,
    /// Policy.
    pub policy: PolicySpec,
    /// Check the scheduler's invariants after every pass (slow; for tests).
    pub check_invariants: bool,
}

/// One job's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job.
    pub job: JobId,
    /// Submit time.
    pub submit: Time,
    /// Start time.
    pub start: Time,
    /// End time.
    pub end: Time,
    /// GPUs.
    pub gpus: u32,
    /// GPU indices given on each node: `(node index, [gpu indices])`.
    pub gpu_ids: Vec<(u32, Vec<u32>)>,
}

impl JobRecord {
    /// Where the job ran, as `node:gpu+gpu` per node, nodes separated by spaces
    /// (e.g. `n0:0+1+2 n3:7`).
    pub fn placement_label(&self, cluster: &ClusterSpec) -> String {
        let nodes: Vec<String> = self
            .gpu_ids
            .iter()
            .map(|(n, ids)| {
                let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
                let name = cluster.nodes.get(*n as usize).map_or("?", |x| x.name.as_str());
                format!("{name}:{}", ids.join("+"))
            })
            .collect();
        nodes.join(" ")
    }
}

/// A job that could not be simulated, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// The job.
    pub job: JobId,
    /// GPUs it asked for.
    pub gpus: u32,
    /// Why.
    pub why: String,
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct SimOutput {
    /// One record per job that ran, in job-id order.
    pub records: Vec<JobRecord>,
    /// Jobs that could never run on this cluster (reported, never silently dropped).
    pub rejected: Vec<Rejected>,
    /// The run's metrics.
    pub metrics: Metrics,
}

/// Why a run failed (an internal inconsistency; user input cannot cause one).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scheduler refused a commit or broke an invariant.
    #[error("scheduler inconsistency at t={time} ms: {what}")]
    Inconsistent {
        /// When.
        time: Time,
        /// What.
        what: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    // Order matters: at one instant, ends free GPUs before arrivals join the queue.
    End,
    Arrival,
}

/// Replays `w` under `cfg`. Deterministic: the same inputs give the same output.
pub fn simulate(w: &Workload, cfg: &SimConfig) -> Result<SimOutput, SimError> {
    let mut sched = Scheduler::new(&cfg.cluster, cfg.placement, cfg.policy);
    let total_gpus = cfg.cluster.total_gpus();
    let mut heap: BinaryHeap<Reverse<(Time, Kind, u64, JobId)>> = BinaryHeap::with_capacity(w.jobs.len() * 2);
    let mut seq = 0u64;
    for j in &w.jobs {
        heap.push(Reverse((j.submit, Kind::Arrival, seq, j.id)));
        seq += 1;
    }
    let first_submit = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last_submit = w.jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let mut integ = RunIntegrals::new(first_submit, last_submit);
    let mut records: Vec<Option<JobRecord>> = vec![None; w.jobs.len()];
    let mut rejected = Vec::new();
    // Multiset of waiting jobs' GPU counts: the smallest one tells whether idle GPUs could
    // have served a waiting job.
    let mut waiting_sizes: BTreeMap<u32, u32> = BTreeMap::new();
    let mut busy: u64 = 0;
    let mut prev_t = first_submit;
    let mut passes = 0u64;
    let mut events = 0u64;

    while let Some(&Reverse((t, _, _, _))) = heap.peek() {
        let min_waiting = waiting_sizes.keys().next().copied();
        integ.advance(prev_t, t, busy, total_gpus, sched.waiting_len() as u64, min_waiting);
        prev_t = t;
        while let Some(&Reverse((et, kind, _, id))) = heap.peek() {
            if et != t {
                break;
            }
            heap.pop();
            events += 1;
            let job = &w.jobs[id.idx()];
            match kind {
                Kind::End => {
                    sched.finish(id, t).map_err(|e| SimError::Inconsistent { time: t, what: e.to_string() })?;
                    busy -= job.gpus as u64;
                }
                Kind::Arrival => {
                    let req = JobReq { id, submit: job.submit, gpus: job.gpus, estimate: job.estimate_or_oracle() };
                    match sched.submit(req, t) {
                        Ok(()) => *waiting_sizes.entry(job.gpus).or_default() += 1,
                        Err(e @ SubmitError::NeverFits { .. }) => {
                            rejected.push(Rejected { job: id, gpus: job.gpus, why: e.to_string() })
                        }
                        Err(e) => return Err(SimError::Inconsistent { time: t, what: e.to_string() }),
                    }
                }
            }
        }
        let plan = sched.schedule(t, false);
        if cfg.check_invariants {
            // Explaining must not change the decisions (the fast paths skip what explain shows).
            let explained = sched.schedule(t, true);
            if explained.starts != plan.starts {
                return Err(SimError::Inconsistent { time: t, what: "schedule(explain) decided differently".into() });
            }
        }
        passes += 1;
        for s in plan.starts {
            let job = &w.jobs[s.job.idx()];
            let gpu_ids =
                sched.start(s.job, &s.alloc, t).map_err(|e| SimError::Inconsistent { time: t, what: e.to_string() })?;
            busy += job.gpus as u64;
            if let Some(c) = waiting_sizes.get_mut(&job.gpus) {
                *c -= 1;
                if *c == 0 {
                    waiting_sizes.remove(&job.gpus);
                }
            }
            let end = t + job.runtime;
            heap.push(Reverse((end, Kind::End, seq, s.job)));
            seq += 1;
            records[s.job.idx()] =
                Some(JobRecord { job: s.job, submit: job.submit, start: t, end, gpus: job.gpus, gpu_ids });
        }
        if cfg.check_invariants {
            sched.sanity_check().map_err(|what| SimError::Inconsistent { time: t, what })?;
        }
    }
    if sched.waiting_len() > 0 || sched.running_len() > 0 {
        return Err(SimError::Inconsistent {
            time: prev_t,
            what: format!("{} jobs still waiting and {} running at the end", sched.waiting_len(), sched.running_len()),
        });
    }
    let records: Vec<JobRecord> = records.into_iter().flatten().collect();
    let oracle = cfg.policy.needs_estimate() && w.jobs.iter().any(|j| j.estimate.is_none());
    integ.events = events;
    integ.passes = passes;
    let metrics = Metrics::compute(w, &records, &integ, &cfg.cluster, cfg, oracle, rejected.len());
    Ok(SimOutput { records, rejected, metrics })
}

/// Checks a run's output against the invariants in docs/ARCHITECTURE.md: every job that could
/// fit ran exactly once, start >= submit, end = start + run time, its GPUs match its request,
/// no GPU was held by two jobs at once, and no node ever ran over its capacity.
pub fn validate(w: &Workload, cluster: &ClusterSpec, out: &SimOutput) -> Result<(), String> {
    let mut seen = vec![false; w.jobs.len()];
    for r in &out.records {
        let j = w.jobs.get(r.job.idx()).ok_or_else(|| format!("record for unknown job {}", r.job))?;
        if std::mem::replace(&mut seen[r.job.idx()], true) {
            return Err(format!("job {} ran twice", r.job));
        }
        if r.start < j.submit {
            return Err(format!("job {} started at {} before its submit {}", r.job, r.start, j.submit));
        }
        if r.end != r.start + j.runtime {
            return Err(format!("job {} ran {} ms, not its run time {}", r.job, r.end - r.start, j.runtime));
        }
        let n: usize = r.gpu_ids.iter().map(|(_, ids)| ids.len()).sum();
        if n != j.gpus as usize {
            return Err(format!("job {} got {n} GPUs, asked for {}", r.job, j.gpus));
        }
    }
    for rej in &out.rejected {
        if std::mem::replace(&mut seen[rej.job.idx()], true) {
            return Err(format!("job {} both ran and was rejected", rej.job));
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(format!("job {i} neither ran nor was rejected"));
    }
    // Per GPU, intervals must not overlap.
    // (node, gpu) -> intervals (start, end, job) during which it was held.
    type Held = BTreeMap<(u32, u32), Vec<(Time, Time, JobId)>>;
    let mut per_gpu: Held = BTreeMap::new();
    for r in &out.records {
        for (node, ids) in &r.gpu_ids {
            let cap = cluster
                .nodes
                .get(*node as usize)
                .map(|n| n.gpus)
                .ok_or_else(|| format!("job {} on unknown node {node}", r.job))?;
            for &g in ids {
                if g >= cap {
                    return Err(format!("job {} on GPU {g} of node {node}, which has {cap}", r.job));
                }
                if r.end > r.start {
                    per_gpu.entry((*node, g)).or_default().push((r.start, r.end, r.job));
                }
            }
        }
    }
    for ((node, g), mut iv) in per_gpu {
        iv.sort();
        for w2 in iv.windows(2) {
            if w2[1].0 < w2[0].1 {
                return Err(format!("GPU {g} of node {node} held by jobs {} and {} at once", w2[0].2, w2[1].2));
            }
        }
    }
    Ok(())
}
