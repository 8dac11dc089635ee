//! The order ordo wants for a Slurm queue: each partition's nodes, with every job running on
//! them whatever its partition, go into an `ordo_core::Scheduler` (the simulator's code) with
//! the partition's pending jobs (an array's tasks one by one), and the plans become one ranked
//! list with reasons.
//!
//! Partitions are planned one by one: a job is ordered only among the jobs of its partitions, on
//! their nodes. Partitions that share nodes each count every job running there, but not each
//! other's pending jobs. The ranked lists are merged by position (the first of each partition,
//! then the second of each, ...), so every partition's own order is kept.
//!
//! Typed GPUs and features: a node's GPU type (`gpu:a100:8`) and active features, a job's
//! typed request (`--gres=gpu:a100:2`) and `--constraint` go into the core's typed scheduler
//! (`Scheduler::typed`: node pools, `JobReq::elig`), so a job is only planned on nodes Slurm may
//! give it. Only the kinds some pending job of the partition asks about are told apart (GPU
//! types when one asks for a type, the features its constraints name): a queue that asks for
//! none is planned on one pool, as before, and untyped jobs may span nodes of every kind.
//!
//! Topology: with [`PlanSpec::topology`] (the controller's `topology/tree` or `topology/block`,
//! [`crate::topology`]) and consolidated placement, each partition's scheduler places gangs by
//! the topology of its nodes (`Scheduler::set_topology`), and a job's `--switches=N`
//! ([`switch_ask`]) becomes its topology ask: `required:switch` for 1 switch (held, as Slurm
//! holds it, until one leaf switch holds it; once it has waited its `Wait4Switch`, Slurm places
//! it anywhere, so ordo then only prefers one switch), `preferred:switch` for more.

use crate::job::{JobState, SlurmJob, SlurmNode};
use crate::topology::SlurmTopology;
use ordo_core::scheduler::{JobReq, SubmitError};
use ordo_core::time::Time;
use ordo_core::words::count;
use ordo_core::{
    Allocation, ClusterSpec, Elig, GpuNeeds, JobId, ModelPick, NodeSpec, Placement, PolicySpec, Reason, Scheduler,
    Speeds, TopoAsk,
};
use ordo_trace::Constraint;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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
    /// The topology gangs were placed by, in words (`None`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
}

/// What to plan for.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The (non-preemptive) policy.
    pub policy: PolicySpec,
    /// Placement model.
    pub placement: Placement,
    /// The cluster's topology: with consolidated placement, gangs are placed by it and
    /// `--switches` asks honoured (`None`: no topology). Not used with `cluster`.
    pub topology: Option<Arc<SlurmTopology>>,
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
/// `memory` is true), GPU types and active features, in Slurm's order. A node whose GPUs are of
/// several types has them joined with `+` as its model (`a100+v100`): a job asking for one of
/// them is not planned there (ordo models one GPU model per node).
pub fn cluster_from_nodes(nodes: &[&SlurmNode], memory: bool) -> Option<ClusterSpec> {
    let nodes: Vec<NodeSpec> = nodes
        .iter()
        .filter(|n| !n.unavailable())
        .map(|n| NodeSpec {
            name: n.name.clone(),
            gpus: n.gpus,
            cpus: n.cpus,
            mem_mib: if memory { n.mem_mib } else { None },
            gpu_model: (!n.gpu_types.is_empty()).then(|| n.gpu_types.join("+")),
            gpu_mem_mib: None,
            features: n.features.clone(),
        })
        .collect();
    (!nodes.is_empty()).then_some(ClusterSpec { nodes })
}

/// What a pending job asks of the nodes beyond their GPUs' number: GPU types (any of them) and
/// a constraint.
#[derive(Debug, Clone, Default)]
struct Asks {
    types: Vec<String>,
    constraint: Option<Constraint>,
}

impl Asks {
    fn any(&self) -> bool {
        !self.types.is_empty() || self.constraint.is_some()
    }

    /// In words, for reasons: `asks a100, constraint ib&nvme`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.types.is_empty() {
            parts.push(format!("GPU type {}", self.types.join(" or ")));
        }
        if let Some(c) = &self.constraint {
            parts.push(format!("constraint {c}"));
        }
        format!("asks {}", parts.join(", "))
    }
}

/// The cluster as the scheduler of one partition sees it: GPU types only where some job asks for
/// one, and only the features some job's constraint names (fewer kinds of node, fewer pools;
/// `asks` are the partition's pending jobs').
fn kinds_asked(cluster: &ClusterSpec, asks: &[&Asks]) -> ClusterSpec {
    let typed = asks.iter().any(|a| !a.types.is_empty());
    let named: Vec<String> = asks.iter().filter_map(|a| a.constraint.as_ref()).flat_map(Constraint::names).collect();
    keep_kinds(cluster, typed, &named)
}

/// `cluster` with its nodes' GPU models only when `typed`, and only the features `named`
/// (compared lowercased): the kinds of node that some job tells apart. ordo places a job's GPUs
/// on nodes of one kind (the core's pools), where Slurm may spread an untyped job over nodes of
/// several: kinds no job asks about are not told apart.
pub fn keep_kinds(cluster: &ClusterSpec, typed: bool, named: &[String]) -> ClusterSpec {
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| NodeSpec {
            gpu_model: if typed { n.gpu_model.clone() } else { None },
            features: n.features.iter().filter(|f| named.iter().any(|x| x.eq_ignore_ascii_case(f))).cloned().collect(),
            ..n.clone()
        })
        .collect();
    ClusterSpec { nodes }
}

/// Where a job with `asks` may run on `sched`'s pools: the core's eligibility for its types and
/// the features its constraint requires, narrowed to the pools whose features satisfy the
/// constraint itself where it has alternatives (`|`). An error in words when no node may.
fn eligibility(sched: &Scheduler, asks: &Asks) -> Result<Elig, String> {
    let required = asks.constraint.as_ref().map(Constraint::required).unwrap_or_default();
    let needs = GpuNeeds { models: asks.types.clone(), features: required, ..GpuNeeds::default() };
    let mut elig = sched.eligibility(&needs)?;
    let Some(c) = asks.constraint.as_ref().filter(|c| !c.is_conjunction()) else { return Ok(elig) };
    let keys = sched.capacity().keys();
    let all: u128 = if keys.len() >= 128 { u128::MAX } else { (1u128 << keys.len()) - 1 };
    let base = if elig.pools == 0 { all } else { elig.pools };
    let mut mask = 0u128;
    for (p, k) in keys.iter().enumerate() {
        if base & (1u128 << p) != 0 && c.holds(&|f| k.features.iter().any(|x| x == f)) {
            mask |= 1u128 << p;
        }
    }
    if mask == 0 {
        let of = if asks.types.is_empty() {
            String::new()
        } else {
            format!(" with GPUs of type {}", asks.types.join(" or "))
        };
        return Err(format!("no node{of} has features that satisfy `{c}`"));
    }
    elig.pools = if mask == all { 0 } else { mask };
    Ok(elig)
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

/// A reason, with what a typed or constrained job asks.
fn with_asks(text: String, asks: &Asks) -> String {
    if asks.any() {
        format!("{text}; {}", asks.describe())
    } else {
        text
    }
}

/// For a job no node can hold on a cluster of several kinds: that ordo plans a job on nodes of
/// one kind, and the kinds (`; ordo plans a job on nodes of one kind: 16 GPUs a100 [ib], 4
/// GPUs v100`). Empty for one kind.
fn kinds_note(sched: &Scheduler) -> String {
    let cap = sched.capacity();
    if cap.is_single() {
        return String::new();
    }
    let kinds: Vec<String> = cap
        .keys()
        .iter()
        .enumerate()
        .map(|(p, k)| {
            let feats = if k.features.is_empty() { String::new() } else { format!(" [{}]", k.features.join(",")) };
            format!("{} {}{feats}", count(cap.pool_total(p) as usize, "GPU"), k.model_name())
        })
        .collect();
    format!("; ordo plans a job on nodes of one kind: {}", kinds.join(", "))
}

/// The pending jobs one partition plans: record indices into `jobs`, what each asks, running
/// array tasks (for throttles).
struct Pending<'a> {
    jobs: &'a [SlurmJob],
    members: &'a [usize],
    asks: &'a HashMap<usize, Asks>,
    array_running: &'a HashMap<u64, u64>,
}

/// One partition's plan: `(job record index, starts now, reason)` in its order, one entry per
/// record (an array's record at its first task's place).
struct PartitionPlan {
    order: Vec<(usize, bool, String)>,
    running: BTreeSet<u64>,
    never_fits: Vec<(usize, String)>,
}

/// The topology ask of a job's `--switches` at `now` (Unix seconds): `required:switch` for one
/// switch until it has waited its `Wait4Switch` (from its submit time), `preferred:switch`
/// after that or for more than one switch; `None` without `--switches`.
pub fn switch_ask(j: &SlurmJob, now: i64) -> Option<TopoAsk> {
    if j.switches == 0 {
        return None;
    }
    let waited = j.switch_wait_s > 0 && now.saturating_sub(j.submit) >= j.switch_wait_s as i64;
    Some(TopoAsk { level: "switch".into(), required: j.switches == 1 && !waited })
}

/// A reason, with the job's `--switches` and what ordo makes of it.
fn with_switches(text: String, j: &SlurmJob, ask: Option<&TopoAsk>) -> String {
    match ask {
        Some(a) => format!("{text}; --switches={} ({a})", j.switches),
        None => text,
    }
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
                gpu_types: n.gpu_model.iter().cloned().collect(),
                features: n.features.clone(),
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
    // What each job asks of the nodes; a constraint ordo cannot read leaves its job alone.
    let mut asks: HashMap<usize, Asks> = HashMap::new();
    mine.retain(|&i| {
        let j = &jobs[i];
        match j.constraint.as_deref().map(Constraint::parse).transpose() {
            Ok(c) => {
                asks.insert(i, Asks { types: j.gpu_types.clone(), constraint: c.flatten() });
                true
            }
            Err(e) => {
                left_alone.push((j.id, format!("ordo cannot read its {e}")));
                false
            }
        }
    });
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
    let mut used_topology = false;
    for (name, pnodes) in &parts {
        let members: Vec<usize> =
            mine.iter().copied().filter(|&i| single || jobs[i].partitions.iter().any(|p| p == name)).collect();
        let Some(cluster) = cluster_from_nodes(pnodes, spec.model_memory) else {
            if !members.is_empty() {
                warnings.push(format!("partition `{name}` has no available node; its jobs wait"));
            }
            continue;
        };
        let mut desc = if single { cluster.describe() } else { format!("{name} {}", cluster.describe()) };
        let topology = topology_of(spec, &cluster);
        if let (Some(t), Some(_)) = (&spec.topology, &topology) {
            desc.push_str(&format!(" by topology ({})", t.levels.join(", ")));
            used_topology = true;
        }
        descriptions.push(desc);
        let queue = Pending { jobs, members: &members, asks: &asks, array_running: &array_running };
        let plan = plan_partition(&queue, &cluster, topology, spec, now, &mut warnings);
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
        topology: spec.topology.as_ref().filter(|_| used_topology).map(|t| t.describe()),
    }
}

/// The topology `spec` places `cluster`'s gangs by: only with consolidated placement, on
/// Slurm's own nodes (not a `cluster` given instead), where the topology names some of them.
fn topology_of(spec: &PlanSpec, cluster: &ClusterSpec) -> Option<Result<ordo_core::Topology, String>> {
    if spec.placement != Placement::Consolidated || spec.cluster.is_some() {
        return None;
    }
    spec.topology.as_ref()?.for_cluster(cluster)
}

/// Plans one partition: every job running on its nodes committed where Slurm put it, its
/// pending records submitted (arrays task by task) in submit order, one explained pass.
/// `topology`: its nodes' topology ([`topology_of`]), if gangs are placed by one.
fn plan_partition(
    q: &Pending<'_>,
    cluster: &ClusterSpec,
    topology: Option<Result<ordo_core::Topology, String>>,
    spec: &PlanSpec,
    now: i64,
    warnings: &mut Vec<String>,
) -> PartitionPlan {
    let (jobs, members, array_running) = (q.jobs, q.members, q.array_running);
    let now_ms = now.saturating_mul(1000);
    let no_asks = Asks::default();
    let asks_of = |i: usize| q.asks.get(&i).unwrap_or(&no_asks);
    let asked: Vec<&Asks> = members.iter().map(|&i| asks_of(i)).collect();
    let kinds = kinds_asked(cluster, &asked);
    let (mut sched, typed) =
        match Scheduler::typed(&kinds, spec.placement, spec.policy.clone(), &Speeds::default(), ModelPick::First) {
            Ok(s) => (s, true),
            Err(e) => {
                warnings.push(format!("{e}: jobs that ask for a GPU type or features are left alone"));
                (Scheduler::new(cluster, spec.placement, spec.policy.clone()), false)
            }
        };
    let kinds_note = kinds_note(&sched);
    // The topology of this partition's nodes (in the order of `kinds`, the scheduler's, which
    // is `cluster`'s), set before any job is submitted.
    match topology {
        Some(Ok(t)) => {
            if let Err(e) = sched.set_topology(Arc::new(t)) {
                warnings.push(format!("topology not used: {e}"));
            }
        }
        Some(Err(e)) => warnings.push(format!("topology not used: {e}")),
        None => {}
    }
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
            // Counted where Slurm runs it; placed by ordo only when its nodes are not known.
            let elig = if node == u32::MAX && !j.gpu_types.is_empty() {
                eligibility(&sched, &Asks { types: j.gpu_types.clone(), constraint: None }).unwrap_or(Elig::ANY)
            } else {
                Elig::ANY
            };
            let req = JobReq {
                user: intern(&mut users, &j.user),
                group: intern(&mut groups, &j.account),
                cpus,
                mem_mib: mem,
                elig,
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
    let mut switch_asks: HashMap<usize, TopoAsk> = HashMap::new();
    for &i in members {
        let j = &jobs[i];
        let asks = asks_of(i);
        let elig = match (asks.any(), typed) {
            (false, _) => Elig::ANY,
            (true, true) => match eligibility(&sched, asks) {
                Ok(e) => e,
                Err(why) => {
                    never_fits.push((i, format!("{}: {why}", asks.describe())));
                    continue;
                }
            },
            (true, false) => {
                never_fits.push((i, format!("{}: not modelled in this partition (see the warning)", asks.describe())));
                continue;
            }
        };
        // `--switches`, where the cluster has switches (Slurm ignores it elsewhere).
        let ask = switch_ask(j, now).filter(|a| sched.topology().is_some_and(|t| t.level_index(&a.level).is_some()));
        let topo = ask.as_ref().map_or(Ok(ordo_core::TopoNeed::NONE), |a| sched.topology_need(a));
        let topo = match topo {
            Ok(t) => t,
            Err(e) => {
                never_fits.push((i, e));
                continue;
            }
        };
        if let Some(a) = ask {
            switch_asks.insert(i, a);
        }
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
                elig,
                topo,
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
                Err(SubmitError::NeverPlaced { why, .. }) => {
                    let why = if asks.any() { format!("{why}; {}", asks.describe()) } else { why };
                    let why = with_switches(why, j, switch_asks.get(&i));
                    never_fits.push((i, format!("can never be placed: {why}{kinds_note}")));
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
            let text = with_asks(format!("starts now (fits: {})", nodes.join(",")), asks_of(i));
            let text = with_switches(text, &jobs[i], switch_asks.get(&i));
            order.push((i, true, with_tasks(text, &jobs[i])));
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
            Reason::Quota { holds, limit, model, .. } => {
                let of = model.as_ref().map_or(String::new(), |m| format!(" for {m}"));
                (format!("at a quota{of} ({holds} of {limit} held)"), Time::MIN)
            }
        };
        // The constraint reason says what the job asks already.
        let text = if matches!(r, Reason::Constraint { .. }) { text } else { with_asks(text, asks_of(i)) };
        let text = with_switches(text, &jobs[i], switch_asks.get(&i));
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
