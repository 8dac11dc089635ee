//! The order ordo wants for a Slurm queue: each partition's nodes, with every job running on
//! them whatever its partition, go into an `ordo_core::Scheduler` (the simulator's code) with
//! the partition's pending jobs (an array's tasks one by one), and the plans become one ranked
//! list with reasons.
//!
//! Partitions are planned one by one: a job is ordered only among the jobs of its partitions, on
//! their nodes. Partitions that share nodes each count every job running there, but not each
//! other's pending jobs. The ranked lists are merged by position (the first of each partition,
//! then the second of each, ...), so every partition's own order is kept.

use crate::job::{JobState, SlurmJob, SlurmNode};
use ordo_core::scheduler::{JobReq, SubmitError};
use ordo_core::time::Time;
use ordo_core::words::count;
use ordo_core::{Allocation, ClusterSpec, JobId, NodeSpec, Placement, PolicySpec, Reason, Scheduler};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Estimate used for a job with no time limit (one year): it sorts last under `sjf` and never
/// backfills, as a job that may run for ever.
pub const UNLIMITED_ESTIMATE: Time = 365 * 86_400 * 1000;

/// Most tasks of one job array planned one by one (an array's pending record may stand for
/// many more; beyond this they make no difference to where its next task goes).
pub const MAX_TASKS_PLANNED: u64 = 1000;

/// One pending job record's place in the intended order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ranked {
    /// 0-based position: 0 should start first.
    pub position: usize,
    /// Slurm job id (for an array's pending tasks, the id of their record).
    pub job: u64,
    /// GPUs asked (per task for an array).
    pub gpus: u32,
    /// Tasks: 1, or an array's pending tasks (all at this record's priority).
    pub tasks: u64,
    /// Time limit in minutes (`None`: unlimited).
    pub time_limit_min: Option<u64>,
    /// Slurm's priority now.
    pub priority: u64,
    /// Whether ordo's plan starts it (or an array's next task) now.
    pub starts_now: bool,
    /// The partition where it has this position.
    pub partition: String,
    /// Why it is where it is, in words (from the core's [`Reason`]).
    pub reason: String,
}

/// The intended order of a whole queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intended {
    /// The policy that made it.
    pub policy: String,
    /// The clusters planned for, per partition, as `COUNTxGPUS` groups.
    pub cluster: String,
    /// Pending jobs ordo orders, first to start first.
    pub order: Vec<Ranked>,
    /// Pending jobs ordo leaves alone, with why (held, dependency, never fits, set by hand, ...).
    pub left_alone: Vec<(u64, String)>,
    /// Pending jobs of partitions this driver does not drive (another driver's, or none).
    pub not_driven: usize,
    /// Running jobs counted (on the nodes of the partitions planned).
    pub running: usize,
    /// Things the operator should know (a running job that could not be mapped to nodes, ...).
    pub warnings: Vec<String>,
}

/// What to plan for.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The (non-preemptive) policy.
    pub policy: PolicySpec,
    /// Placement model.
    pub placement: Placement,
    /// The partitions this driver orders (`None`: all). A pending job is ordered by the driver
    /// of the partition it lists first, so drivers of disjoint partition sets never touch the
    /// same job.
    pub partitions: Option<Vec<String>>,
    /// Whether memory limits placement (Slurm's `SelectTypeParameters` name memory).
    pub model_memory: bool,
    /// A cluster to plan for instead of the nodes Slurm reports (all partitions as one).
    pub cluster: Option<ClusterSpec>,
}

/// Pending jobs the caller wants left alone, with why (set by hand, niced, ...).
pub type Skip = HashMap<u64, String>;

/// The cluster ordo plans for: available nodes with their GPUs (and CPUs, and memory when
/// `memory` is true), in Slurm's order.
pub fn cluster_from_nodes(nodes: &[&SlurmNode], memory: bool) -> Option<ClusterSpec> {
    let nodes: Vec<NodeSpec> = nodes
        .iter()
        .filter(|n| !n.unavailable())
        .map(|n| NodeSpec {
            name: n.name.clone(),
            gpus: n.gpus,
            cpus: n.cpus,
            mem_mib: if memory { n.mem_mib } else { None },
            gpu_model: None,
            gpu_mem_mib: None,
            features: Vec::new(),
        })
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

/// A reason, with an array's pending tasks named.
fn with_tasks(text: String, j: &SlurmJob) -> String {
    match j.tasks() {
        1 => text,
        n => format!("{text} (array: {n} tasks pending)"),
    }
}

/// One partition's plan: `(job record index, starts now, reason)` in its order, one entry per
/// record (an array's record at its first task's place).
struct PartitionPlan {
    order: Vec<(usize, bool, String)>,
    running: BTreeSet<u64>,
    never_fits: Vec<(usize, String)>,
}

/// Computes the order `spec.policy` gives the pending jobs of `jobs` at `now` (Unix seconds):
/// each partition planned on its own nodes, the plans merged (see the module documentation).
/// Pending jobs that are held, wait on a dependency or begin time, are in `skip`, or that no
/// node of their partitions can ever hold, are left alone and listed with why.
pub fn intended_order(jobs: &[SlurmJob], nodes: &[SlurmNode], spec: &PlanSpec, now: i64, skip: &Skip) -> Intended {
    let mut warnings = Vec::new();
    let mut left_alone: Vec<(u64, String)> = Vec::new();
    let mut not_driven = 0usize;
    // The partitions to plan and their nodes.
    let mut parts: BTreeMap<String, Vec<&SlurmNode>> = BTreeMap::new();
    let given: Vec<SlurmNode>;
    let single = spec.cluster.is_some();
    if let Some(c) = &spec.cluster {
        given = c
            .nodes
            .iter()
            .map(|n| SlurmNode {
                name: n.name.clone(),
                gpus: n.gpus,
                cpus: n.cpus,
                mem_mib: n.mem_mib,
                state: "idle".into(),
                partitions: Vec::new(),
            })
            .collect();
        parts.insert(String::new(), given.iter().collect());
    } else {
        for n in nodes {
            for p in &n.partitions {
                parts.entry(p.clone()).or_default().push(n);
            }
        }
        if let Some(want) = &spec.partitions {
            for p in want {
                if !parts.contains_key(p) {
                    warnings.push(format!("partition `{p}` has no node in sinfo"));
                }
            }
            parts.retain(|p, _| want.contains(p));
        }
    }
    let driven = |j: &SlurmJob| match &spec.partitions {
        None => true,
        Some(want) => single || want.iter().any(|p| p == j.first_partition()),
    };
    // Pending records this driver orders.
    let mut mine: Vec<usize> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        if j.state != JobState::Pending {
            continue;
        }
        if !driven(j) {
            not_driven += 1;
            continue;
        }
        if let Some(why) = skip.get(&j.id) {
            left_alone.push((j.id, why.clone()));
        } else if !j.orderable() {
            let why =
                if j.priority == 0 { "held (priority 0)".to_string() } else { format!("waits on `{}`", j.reason) };
            left_alone.push((j.id, why));
        } else {
            mine.push(i);
        }
    }
    mine.sort_by_key(|&i| (jobs[i].submit, jobs[i].id));
    // Running tasks per array (for throttles).
    let mut array_running: HashMap<u64, u64> = HashMap::new();
    for j in jobs.iter().filter(|j| j.state == JobState::Running) {
        if let Some(a) = &j.array {
            *array_running.entry(a.array_job_id).or_default() += 1;
        }
    }
    let mut plans: Vec<(String, PartitionPlan)> = Vec::new();
    let mut descriptions = Vec::new();
    let mut planned: BTreeSet<usize> = BTreeSet::new();
    for (name, pnodes) in &parts {
        let members: Vec<usize> =
            mine.iter().copied().filter(|&i| single || jobs[i].partitions.iter().any(|p| p == name)).collect();
        let Some(cluster) = cluster_from_nodes(pnodes, spec.model_memory) else {
            if !members.is_empty() {
                warnings.push(format!("partition `{name}` has no available node; its jobs wait"));
            }
            continue;
        };
        descriptions.push(if single { cluster.describe() } else { format!("{name} {}", cluster.describe()) });
        let plan = plan_partition(jobs, &members, &cluster, spec, now, &array_running, &mut warnings);
        planned.extend(plan.order.iter().map(|o| o.0));
        plans.push((name.clone(), plan));
    }
    // Jobs no planned partition can hold.
    for &i in &mine {
        if planned.contains(&i) {
            continue;
        }
        let why = plans
            .iter()
            .find_map(|(_, p)| p.never_fits.iter().find(|(k, _)| *k == i).map(|(_, w)| w.clone()))
            .unwrap_or_else(|| {
                let throttled = jobs[i].array.as_ref().and_then(|a| {
                    let run = array_running.get(&a.array_job_id).copied().unwrap_or(0);
                    a.throttle.filter(|&t| run >= u64::from(t)).map(|t| (t, run))
                });
                match throttled {
                    Some((t, run)) => format!("array throttle: {run} of its tasks run, at most {t} at once"),
                    None => format!("none of its partitions ({}) is planned here", jobs[i].partitions.join(",")),
                }
            });
        left_alone.push((jobs[i].id, why));
    }
    // Merge: by position in its partition's order, then by partition, submit and id.
    let mut best: HashMap<usize, (usize, usize, bool, String)> = HashMap::new();
    for (pi, (_, plan)) in plans.iter().enumerate() {
        for (pos, (i, starts, reason)) in plan.order.iter().enumerate() {
            let e = best.entry(*i).or_insert((usize::MAX, usize::MAX, false, String::new()));
            if (pos, pi) < (e.0, e.1) {
                *e = (pos, pi, *starts, reason.clone());
            }
        }
    }
    let mut merged: Vec<(usize, (usize, usize, bool, String))> = best.into_iter().collect();
    merged.sort_by_key(|(i, (pos, pi, _, _))| (*pos, *pi, jobs[*i].submit, jobs[*i].id));
    let several = plans.iter().filter(|(_, p)| !p.order.is_empty()).count() > 1;
    let order = merged
        .into_iter()
        .enumerate()
        .map(|(position, (i, (_, pi, starts_now, reason)))| {
            let j = &jobs[i];
            let partition = plans[pi].0.clone();
            Ranked {
                position,
                job: j.id,
                gpus: j.gpus,
                tasks: j.tasks(),
                time_limit_min: j.time_limit_min,
                priority: j.priority,
                starts_now,
                reason: if several { format!("in {partition}: {reason}") } else { reason },
                partition,
            }
        })
        .collect();
    let running: BTreeSet<u64> = plans.iter().flat_map(|(_, p)| p.running.iter().copied()).collect();
    Intended {
        policy: spec.policy.to_string(),
        cluster: descriptions.join("; "),
        order,
        left_alone,
        not_driven,
        running: running.len(),
        warnings,
    }
}

/// Plans one partition: every job running on its nodes committed where Slurm put it, its
/// pending records submitted (arrays task by task) in submit order, one explained pass.
fn plan_partition(
    jobs: &[SlurmJob],
    members: &[usize],
    cluster: &ClusterSpec,
    spec: &PlanSpec,
    now: i64,
    array_running: &HashMap<u64, u64>,
    warnings: &mut Vec<String>,
) -> PartitionPlan {
    let now_ms = now.saturating_mul(1000);
    let mut sched = Scheduler::new(cluster, spec.placement, spec.policy.clone());
    let index: HashMap<&str, u32> =
        cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as u32)).collect();
    let (mut users, mut groups) = (HashMap::new(), HashMap::new());
    let mut next = 0u32;
    let mut running = BTreeSet::new();
    let detailed = sched.capacity().is_detailed();
    // Running jobs, one part per node so each node's share is exact; in start order.
    // With a cluster given instead of Slurm's nodes (`spec.cluster`), node names need not
    // match: every running job is counted, where the core finds room.
    let anywhere = spec.cluster.is_some();
    let mut on_nodes: Vec<&SlurmJob> = jobs
        .iter()
        .filter(|j| {
            j.state == JobState::Running && (anywhere || j.alloc.iter().any(|(n, _)| index.contains_key(n.as_str())))
        })
        .collect();
    on_nodes.sort_by_key(|j| (j.start, j.id));
    for j in on_nodes {
        let start_ms = j.start.saturating_mul(1000).min(now_ms);
        let whole = [(String::new(), j.gpus)];
        let mapped = j.alloc.iter().all(|(n, _)| index.contains_key(n.as_str()));
        let parts: &[(String, u32)] = if anywhere && !mapped { &whole } else { &j.alloc };
        let k = parts.len().max(1) as u64;
        for (name, g) in parts {
            // The node of this part; `u32::MAX` (no such node) makes the core place it.
            let node = index.get(name.as_str()).copied().unwrap_or(u32::MAX);
            if node == u32::MAX && !anywhere {
                continue;
            }
            let cpus = j.cpus.div_ceil(k as u32);
            let mem = if spec.model_memory { j.mem_mib.div_ceil(k) } else { 0 };
            if *g == 0 && (!detailed || cpus == 0 && mem == 0) {
                continue;
            }
            let id = JobId(next);
            let req = JobReq {
                user: intern(&mut users, &j.user),
                group: intern(&mut groups, &j.account),
                cpus,
                mem_mib: mem,
                ..JobReq::new(id, j.submit.saturating_mul(1000).min(start_ms), *g, estimate(j))
            };
            // Where Slurm put it; else, where Slurm's numbers and ordo's model disagree (CPUs
            // rounded per node, a node oversubscribed), wherever the core finds room: counted
            // somewhere rather than not at all.
            let cap = sched.capacity();
            let part = Allocation { parts: vec![(node, *g)], detail: None };
            let there = if node == u32::MAX {
                None
            } else if detailed {
                cap.complete(&part, req.demand())
            } else {
                Some(part)
            };
            let alloc = match there.filter(|a| cap.can_take(a)) {
                Some(a) => a,
                None => match cap.place_for(req.demand()) {
                    Some(a) => {
                        warnings.push(if node == u32::MAX {
                            format!(
                                "running job {} ({} on {:?}) not on the cluster's nodes; counted where there was room",
                                j.id,
                                count(*g as usize, "GPU"),
                                j.alloc
                            )
                        } else {
                            format!(
                                "running job {} ({}, {} on {name}) does not fit there in ordo's model; counted where there was room",
                                j.id,
                                count(*g as usize, "GPU"),
                                count(cpus as usize, "CPU")
                            )
                        });
                        a
                    }
                    None => {
                        warnings.push(format!(
                            "running job {} ({} on {name}) does not fit what is free; not counted",
                            j.id,
                            count(*g as usize, "GPU")
                        ));
                        continue;
                    }
                },
            };
            if let Err(e) = sched.submit(req, start_ms) {
                warnings.push(format!("running job {} on {name}: {e}; not counted", j.id));
                continue;
            }
            next += 1;
            if let Err(e) = sched.start(id, &alloc, start_ms) {
                warnings.push(format!("running job {} on {name}: {e}", j.id));
            }
            running.insert(j.id);
        }
    }
    // Pending records, arrays task by task.
    let mut record_of: HashMap<u32, usize> = HashMap::new();
    let mut never_fits = Vec::new();
    for &i in members {
        let j = &jobs[i];
        let mut tasks = j.tasks().min(MAX_TASKS_PLANNED);
        if let Some(a) = &j.array {
            if let Some(t) = a.throttle {
                let run = array_running.get(&a.array_job_id).copied().unwrap_or(0);
                tasks = tasks.min(u64::from(t).saturating_sub(run));
            }
        }
        for _ in 0..tasks {
            let id = JobId(next);
            next += 1;
            let req = JobReq {
                user: intern(&mut users, &j.user),
                group: intern(&mut groups, &j.account),
                cpus: if detailed { j.cpus } else { 0 },
                mem_mib: if spec.model_memory { j.mem_mib } else { 0 },
                ..JobReq::new(id, j.submit.saturating_mul(1000), j.gpus, estimate(j))
            };
            match sched.submit(req, now_ms) {
                Ok(()) => {
                    record_of.insert(id.0, i);
                }
                Err(SubmitError::NeverFits { gpus, total, .. }) => {
                    never_fits.push((
                        i,
                        format!("asks for {}; the nodes planned for have {total}", count(gpus as usize, "GPU")),
                    ));
                    break;
                }
                Err(e) => {
                    never_fits.push((i, e.to_string()));
                    break;
                }
            }
        }
    }
    let plan = sched.schedule(now_ms, true);
    let slurm_id = |id: JobId| record_of.get(&id.0).map_or(0, |&i| jobs[i].id);
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let mut order: Vec<(usize, bool, String)> = Vec::new();
    for s in &plan.starts {
        let Some(&i) = record_of.get(&s.job.0) else { continue };
        if seen.insert(i) {
            let nodes: Vec<String> = s
                .alloc
                .parts
                .iter()
                .map(|&(n, g)| format!("{}:{g}", cluster.nodes.get(n as usize).map_or("?", |x| x.name.as_str())))
                .collect();
            order.push((i, true, with_tasks(format!("starts now (fits: {})", nodes.join(",")), &jobs[i])));
        }
    }
    let mut waiting: Vec<(usize, String, Time)> = Vec::new();
    for (id, r) in &plan.waiting {
        let Some(&i) = record_of.get(&id.0) else { continue };
        let (text, at) = match r {
            Reason::Resources { need, free } => (
                format!("first in line; waits for resources (needs {}, {free} free)", count(*need as usize, "GPU")),
                Time::MIN,
            ),
            Reason::NodeFit { why, .. } => (format!("first in line; waits for resources ({why})"), Time::MIN),
            Reason::Constraint { why, .. } => (format!("first in line; waits for GPUs it accepts ({why})"), Time::MIN),
            Reason::Priority { behind } => {
                (format!("waits behind job {} (strict order)", slurm_id(*behind)), Time::MIN)
            }
            Reason::Reserved { for_job, until } => (
                format!("fits now but would delay job {}'s reservation at {}", slurm_id(*for_job), until / 1000),
                Time::MIN,
            ),
            Reason::Reservation { start } => (format!("reserved to start at {}", start / 1000), *start),
            Reason::Outranked { need } => {
                (format!("outranked (needs {} held by jobs ahead)", count(*need as usize, "GPU")), Time::MIN)
            }
            Reason::Quota { holds, limit, .. } => (format!("at a quota ({holds} of {limit} held)"), Time::MIN),
        };
        waiting.push((i, text, at));
    }
    if spec.policy.backfill == ordo_core::Backfill::Conservative {
        waiting.sort_by_key(|w| w.2); // stable: policy order among equal starts
    }
    for (i, text, _) in waiting {
        if seen.insert(i) {
            order.push((i, false, with_tasks(text, &jobs[i])));
        }
    }
    PartitionPlan { order, running, never_fits }
}
