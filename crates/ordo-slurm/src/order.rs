//! The order ordo wants for a Slurm queue: a snapshot of nodes and jobs goes into an
//! `ordo_core::Scheduler` (the simulator's code), and its plan becomes a ranked list with reasons.

use crate::parse::{JobState, SlurmJob, SlurmNode};
use ordo_core::scheduler::{JobReq, SubmitError};
use ordo_core::time::Time;
use ordo_core::{Allocation, ClusterSpec, JobId, NodeSpec, Placement, PolicySpec, Reason, Scheduler};
use serde::Serialize;
use std::collections::HashMap;

/// Estimate used for a job with no time limit (one year): it sorts last under `sjf` and never
/// backfills, as a job that may run for ever.
pub const UNLIMITED_ESTIMATE: Time = 365 * 86_400 * 1000;

/// One pending job's place in the intended order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ranked {
    /// 0-based position: 0 should start first.
    pub position: usize,
    /// Slurm job id.
    pub job: u64,
    /// GPUs asked for.
    pub gpus: u32,
    /// Time limit in minutes (`None`: unlimited).
    pub time_limit_min: Option<u64>,
    /// Slurm's priority now.
    pub priority: u64,
    /// Whether ordo's plan starts it now (resources are free for it).
    pub starts_now: bool,
    /// Why it is where it is, in words (from the core's [`Reason`]).
    pub reason: String,
}

/// The intended order of a whole queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intended {
    /// The policy that made it.
    pub policy: String,
    /// The cluster planned for, as `COUNTxGPUS` groups.
    pub cluster: String,
    /// Pending jobs ordo orders, first to start first.
    pub order: Vec<Ranked>,
    /// Pending jobs ordo leaves alone, with why (held, dependency, never fits).
    pub left_alone: Vec<(u64, String)>,
    /// Running jobs counted.
    pub running: usize,
    /// Things the operator should know (a running job that could not be mapped to nodes, ...).
    pub warnings: Vec<String>,
}

/// The cluster ordo plans for: available nodes with their GPUs, in Slurm's order.
pub fn cluster_from_nodes(nodes: &[SlurmNode]) -> Option<ClusterSpec> {
    let nodes: Vec<NodeSpec> = nodes
        .iter()
        .filter(|n| !n.unavailable())
        .map(|n| NodeSpec { name: n.name.clone(), gpus: n.gpus, cpus: n.cpus, mem_mib: n.mem_mib, gpu_model: None })
        .collect();
    (!nodes.is_empty()).then_some(ClusterSpec { nodes })
}

fn intern(names: &mut HashMap<String, u32>, name: &str) -> u32 {
    let next = names.len() as u32;
    *names.entry(name.to_string()).or_insert(next)
}

fn estimate(j: &SlurmJob) -> Time {
    j.time_limit_min.map_or(UNLIMITED_ESTIMATE, |m| (m as Time).saturating_mul(60_000).min(UNLIMITED_ESTIMATE))
}

/// Computes the order ordo's (non-preemptive) `policy` gives the pending jobs of `jobs` on `cluster` at `now`
/// (Unix seconds). Running jobs are committed first on the nodes Slurm gave them (by name; a
/// job on a node the cluster lacks is placed wherever the core's placement puts it, with a
/// warning), then orderable pending jobs are submitted in Slurm's submit order, and one
/// explained scheduling pass gives the plan. The order is: jobs the plan starts now (in its
/// order), then waiting jobs in policy order (under `+conservative`, by reserved start).
pub fn intended_order(
    jobs: &[SlurmJob],
    cluster: &ClusterSpec,
    placement: Placement,
    policy: &PolicySpec,
    now: i64,
) -> Intended {
    let now_ms = now.saturating_mul(1000);
    let mut sched = Scheduler::new(cluster, placement, policy.clone());
    let index: HashMap<&str, u32> =
        cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as u32)).collect();
    let mut warnings = Vec::new();
    let mut slurm_id: Vec<u64> = Vec::new();
    let (mut users, mut groups) = (HashMap::new(), HashMap::new());
    let mut running: Vec<&SlurmJob> = jobs.iter().filter(|j| j.state == JobState::Running).collect();
    running.sort_by_key(|j| (j.start, j.id));
    let mut n_running = 0;
    for j in running {
        let id = JobId(slurm_id.len() as u32);
        let start_ms = j.start.saturating_mul(1000).min(now_ms);
        let req = JobReq {
            user: intern(&mut users, &j.user),
            group: intern(&mut groups, &j.account),
            ..JobReq::new(id, j.submit.saturating_mul(1000).min(start_ms), j.gpus, estimate(j))
        };
        if let Err(e) = sched.submit(req, start_ms) {
            warnings.push(format!("running job {}: {e}; not counted", j.id));
            continue;
        }
        slurm_id.push(j.id);
        let mut parts: Vec<(u32, u32)> = Vec::new();
        let mut mapped = true;
        for (name, g) in &j.alloc {
            match index.get(name.as_str()) {
                Some(&n) if *g > 0 => parts.push((n, *g)),
                Some(_) => {}
                None => mapped = false,
            }
        }
        parts.sort_unstable();
        let alloc = Allocation { parts, detail: None };
        let ok = mapped && alloc.gpus() == j.gpus && sched.start(id, &alloc, start_ms).is_ok();
        if !ok {
            // Not on known nodes (or the GPUs there look taken): count its GPUs anyway.
            let placed = sched.capacity().place(j.gpus).map(|a| sched.start(id, &a, start_ms));
            match placed {
                Some(Ok(_)) => warnings.push(format!(
                    "running job {} ({} GPUs on {:?}) not mapped to the cluster's nodes; counted where there was room",
                    j.id, j.gpus, j.alloc
                )),
                _ => {
                    warnings
                        .push(format!("running job {} ({} GPUs) does not fit what is free; not counted", j.id, j.gpus));
                    // Leave it waiting in the scheduler would distort the order: rebuild without it.
                    return intended_order(
                        &jobs.iter().filter(|x| x.id != j.id).cloned().collect::<Vec<_>>(),
                        cluster,
                        placement,
                        policy,
                        now,
                    )
                    .with_warnings(warnings);
                }
            }
        }
        n_running += 1;
    }
    let mut left_alone = Vec::new();
    let mut pending: Vec<&SlurmJob> = jobs.iter().filter(|j| j.state == JobState::Pending).collect();
    pending.sort_by_key(|j| (j.submit, j.id));
    let mut by_slurm: HashMap<u32, &SlurmJob> = HashMap::new();
    for j in pending {
        if !j.orderable() {
            let why =
                if j.priority == 0 { "held (priority 0)".to_string() } else { format!("waits on `{}`", j.reason) };
            left_alone.push((j.id, why));
            continue;
        }
        let id = JobId(slurm_id.len() as u32);
        let req = JobReq {
            user: intern(&mut users, &j.user),
            group: intern(&mut groups, &j.account),
            ..JobReq::new(id, j.submit.saturating_mul(1000), j.gpus, estimate(j))
        };
        match sched.submit(req, now_ms) {
            Ok(()) => {
                slurm_id.push(j.id);
                by_slurm.insert(id.0, j);
            }
            Err(SubmitError::NeverFits { gpus, total, .. }) => {
                left_alone.push((j.id, format!("asks for {gpus} GPUs; the cluster planned for has {total}")));
            }
            Err(e) => left_alone.push((j.id, e.to_string())),
        }
    }
    let plan = sched.schedule(now_ms, true);
    let sid = |id: JobId| slurm_id.get(id.idx()).copied().unwrap_or(0);
    let mut order: Vec<(JobId, bool, String, Time)> = Vec::new();
    for s in &plan.starts {
        let nodes: Vec<String> = s
            .alloc
            .parts
            .iter()
            .map(|&(n, g)| format!("{}:{g}", cluster.nodes.get(n as usize).map_or("?", |x| x.name.as_str())))
            .collect();
        order.push((s.job, true, format!("starts now (fits: {})", nodes.join(",")), now_ms));
    }
    let mut waiting: Vec<(JobId, String, Time)> = plan
        .waiting
        .iter()
        .map(|(id, r)| {
            let (text, at) = match r {
                Reason::Resources { need, free } => {
                    (format!("first in line; waits for resources (needs {need} GPUs, {free} free)"), Time::MIN)
                }
                Reason::NodeFit { why, .. } => (format!("first in line; waits for resources ({why})"), Time::MIN),
                Reason::Priority { behind } => (format!("waits behind job {} (strict order)", sid(*behind)), Time::MIN),
                Reason::Reserved { for_job, until } => (
                    format!("fits now but would delay job {}'s reservation at {}", sid(*for_job), until / 1000),
                    Time::MIN,
                ),
                Reason::Reservation { start } => (format!("reserved to start at {}", start / 1000), *start),
                Reason::Outranked { need } => (format!("outranked (needs {need} GPUs held by jobs ahead)"), Time::MIN),
                Reason::Quota { holds, limit, .. } => (format!("at a quota ({holds} of {limit} held)"), Time::MIN),
            };
            (*id, text, at)
        })
        .collect();
    if policy.backfill == ordo_core::Backfill::Conservative {
        waiting.sort_by_key(|w| w.2); // stable: policy order among equal starts
    }
    order.extend(waiting.into_iter().map(|(id, t, at)| (id, false, t, at)));
    let order = order
        .into_iter()
        .enumerate()
        .filter_map(|(position, (id, starts_now, reason, _))| {
            let j = by_slurm.get(&id.0)?;
            Some(Ranked {
                position,
                job: j.id,
                gpus: j.gpus,
                time_limit_min: j.time_limit_min,
                priority: j.priority,
                starts_now,
                reason,
            })
        })
        .collect();
    Intended {
        policy: policy.to_string(),
        cluster: cluster.describe(),
        order,
        left_alone,
        running: n_running,
        warnings,
    }
}

impl Intended {
    fn with_warnings(mut self, mut w: Vec<String>) -> Self {
        w.append(&mut self.warnings);
        self.warnings = w;
        self
    }
}

/// Priorities that make Slurm take the jobs of `order` (pairs of job and current priority) in
/// that order: strictly descending from `top`. If the current priorities already descend
/// strictly along the order, nothing changes (so a steady queue causes no churn); otherwise
/// every job gets `top - position`, and only those whose value differs are returned as
/// `(job, old, new)`. `top` is raised to the queue length if smaller, so no priority is 0.
pub fn assign_priorities(order: &[(u64, u64)], top: u32) -> Vec<(u64, u64, u32)> {
    let already = order.windows(2).all(|w| w[0].1 > w[1].1) && order.iter().all(|&(_, p)| p > 0);
    if already {
        return Vec::new();
    }
    let top = top.max(order.len() as u32);
    order
        .iter()
        .enumerate()
        .filter_map(|(i, &(job, old))| {
            let new = top - i as u32;
            (old != new as u64).then_some((job, old, new))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn priorities_descend_and_do_not_churn() {
        assert!(assign_priorities(&[(1, 30), (2, 20), (3, 10)], 100).is_empty());
        let c = assign_priorities(&[(1, 10), (2, 20), (3, 30)], 100);
        assert_eq!(c, vec![(1, 10, 100), (2, 20, 99), (3, 30, 98)]);
        let c = assign_priorities(&[(1, 100), (2, 99), (3, 99)], 100);
        assert_eq!(c, vec![(3, 99, 98)]);
        let c = assign_priorities(&[(1, 5), (2, 5)], 1);
        assert_eq!(c, vec![(1, 5, 2), (2, 5, 1)]);
        assert!(assign_priorities(&[], 10).is_empty());
    }
}
