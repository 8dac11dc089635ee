//! The discrete-event engine. It owns time: an event heap ordered by (time, kind, sequence)
//! where, at equal times, job ends come before arrivals. After all events at one instant it asks
//! the scheduler for a plan once and commits it. The policy never runs its own loop.

use crate::metrics::{IdleCause, Metrics, RunIntegrals};
use ordo_core::deps::{DepState, Dependencies, Released};
use ordo_core::scheduler::{JobReq, SubmitError};
use ordo_core::{ClusterSpec, GpuIds, JobId, Placement, PolicySpec, Scheduler, Time, Workload};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

/// What to simulate: the cluster, the placement model and the policy.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The cluster.
    pub cluster: ClusterSpec,
    /// Placement model.
    pub placement: Placement,
    /// Policy.
    pub policy: PolicySpec,
    /// Time lost each time a preempted job restarts (reloading, warm-up); 0 by default.
    pub preemption_overhead: Time,
    /// What a preemption costs a job beyond the overhead (checkpointing) and the guards
    /// against thrashing; the default: every job resumes exactly where it stopped, no guard
    /// beyond twice the overhead.
    pub preemption: PreemptionRules,
    /// Check the scheduler's invariants after every pass (slow; for tests).
    pub check_invariants: bool,
    /// Give up with [`SimError::Deadline`] once this wall-clock instant has passed (checked
    /// every 256 passes). It can only stop a run, never change its result; `None`: no limit.
    pub deadline: Option<std::time::Instant>,
    /// Quotas and shares by user and group name (`--quotas FILE`), resolved against the
    /// workload's names and the cluster's GPUs; `None`: none.
    pub quotas: Option<ordo_core::QuotaConfig>,
    /// Give up with [`SimError::Beaten`] as soon as the run's mean job completion time is
    /// certain to exceed this many seconds (a lower bound from the jobs finished, running and
    /// waiting so far; checked up to about 64 times per run, less often while it stays far
    /// below the limit: `CHECK_GAPS`). Like `deadline` it can only stop a run, never change
    /// its result; `ordo tune` uses it to drop candidates that cannot win.
    pub give_up_above_mean_jct_s: Option<f64>,
    /// Relative speeds of job classes on GPU models (`--speeds`); empty: every speed 1.
    pub speeds: ordo_core::Speeds,
    /// Which accepted model a flexible job goes on (`--model-pick`); `None`: the default
    /// (`fastest`). Given, or with a speed matrix, or with a job that constrains its GPUs, the
    /// cluster's GPU models, memory and features are modelled (pools); otherwise the cluster is
    /// one kind, as before.
    pub model_pick: Option<ordo_core::ModelPick>,
    /// The cluster's network topology (`--topology FILE`), if known: a run whose nodes are in
    /// several units of a level takes longer by the topology's slowdown factors, under every
    /// placement ([`ordo_core::topology`]); `None`: not modelled.
    pub topology: Option<std::sync::Arc<ordo_core::Topology>>,
    /// Place gangs by the topology (`--placement topology`: consolidated placement, each gang
    /// in the lowest level with a unit that holds it; jobs' `required:` levels honoured).
    pub place_by_topology: bool,
}

impl SimConfig {
    /// A configuration with no preemption overhead and no invariant checks.
    pub fn new(cluster: ClusterSpec, placement: Placement, policy: PolicySpec) -> Self {
        SimConfig {
            cluster,
            placement,
            policy,
            preemption_overhead: 0,
            preemption: PreemptionRules::default(),
            check_invariants: false,
            deadline: None,
            quotas: None,
            give_up_above_mean_jct_s: None,
            speeds: ordo_core::Speeds::default(),
            model_pick: None,
            topology: None,
            place_by_topology: false,
        }
    }

    /// Whether a run of `w` models the cluster's kinds of node (see [`SimConfig::model_pick`]).
    pub fn typed(&self, w: &Workload) -> bool {
        self.model_pick.is_some()
            || !self.speeds.is_empty()
            || w.jobs.iter().any(|j| j.needs.as_ref().is_some_and(|n| n.constrains()))
            || self.quotas.as_ref().is_some_and(ordo_core::QuotaConfig::has_model_limits)
    }
}

/// A job that restarts from zero (`--checkpoint none`) is protected for this long after its
/// first preemption (or `--min-run` if longer), twice that after its second, and so on.
pub const ZERO_RESTART_FLOOR: Time = 60 * ordo_core::time::SECOND;

/// What a preemption costs a job beyond the restart overhead, and the guards against a job
/// preempted again and again before it makes progress (docs/POLICIES.md, "Checkpoints").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreemptionRules {
    /// How each job's work survives a preemption (`--checkpoint`); default: it resumes exactly
    /// where it stopped.
    pub checkpoint: ordo_core::CheckpointRules,
    /// A job is not preempted before its current run is this old (`--min-run`; at least twice
    /// the preemption overhead, whatever is given).
    pub min_run: Time,
    /// A job preempted this many times runs to its end from its next start
    /// (`--max-preemptions`); `None`: no limit.
    pub max_preemptions: Option<u32>,
    /// What each job declared itself (indexed by job id; an `ordo server` database keeps each
    /// job's `ordo submit --checkpoint` and `--min-run`): its rule, taken over the queue rules,
    /// and its own minimum run. `None`: no job declared anything.
    pub declared: Option<std::sync::Arc<[Option<Declared>]>>,
}

/// How one job declared it takes a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// Its checkpoint rule.
    pub checkpoint: ordo_core::Checkpoint,
    /// Its runs are not preempted before they are this old (0: no floor of its own).
    pub min_run: Time,
}

impl PreemptionRules {
    /// Whether these are the defaults (no loss beyond the overhead, no guard of their own).
    pub fn is_default(&self) -> bool {
        self.checkpoint.is_continuous()
            && self.min_run == 0
            && self.max_preemptions.is_none()
            && self.declared.is_none()
    }

    /// What job `i` declared, if anything.
    fn declared_of(&self, i: usize) -> Option<Declared> {
        self.declared.as_ref().and_then(|d| d.get(i).copied().flatten())
    }

    /// The rule of each job of `w` (its own where it declared one); empty where every job
    /// resumes exactly (the default).
    pub fn per_job(&self, w: &Workload) -> Vec<ordo_core::Checkpoint> {
        let declares = self
            .declared
            .as_ref()
            .is_some_and(|d| d.iter().flatten().any(|x| x.checkpoint != ordo_core::Checkpoint::Continuous));
        if self.checkpoint.is_continuous() && !declares {
            return Vec::new();
        }
        w.jobs
            .iter()
            .enumerate()
            .map(|(i, j)| self.declared_of(i).map_or_else(|| self.checkpoint.of(j.queue.as_deref()), |d| d.checkpoint))
            .collect()
    }

    /// The minimum run job `i` declared itself (0: none).
    pub fn own_min_run(&self, i: usize) -> Time {
        self.declared_of(i).map_or(0, |d| d.min_run)
    }
}

/// One uninterrupted run of a job on fixed GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSegment {
    /// Start.
    pub start: Time,
    /// End (completion, or the preemption that stopped it).
    pub end: Time,
    /// GPU indices on each node: `(node index, [gpu indices])`, stored compactly (consecutive
    /// nodes holding the same indices once; it serialises as the list of pairs).
    pub gpu_ids: GpuIds,
}

/// One job's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job.
    pub job: JobId,
    /// Submit time.
    pub submit: Time,
    /// First start.
    pub start: Time,
    /// Completion.
    pub end: Time,
    /// GPUs.
    pub gpus: u32,
    /// A fractional job's share of its one GPU in thousandths (1..=999); `None` for whole GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Its runs, in time order (more than one if it was preempted).
    pub segments: Vec<RunSegment>,
}

impl JobRecord {
    /// Where the job ran last, as `node:gpu+gpu` per node, nodes separated by spaces
    /// (e.g. `n0:0+1+2 n3:7`); a fractional job's share follows its GPU (`n0:1@250m`).
    pub fn placement_label(&self, cluster: &ClusterSpec) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let Some(seg) = self.segments.last() else { return out };
        for (k, (n, ids)) in seg.gpu_ids.iter().enumerate() {
            if k > 0 {
                out.push(' ');
            }
            out.push_str(cluster.nodes.get(n as usize).map_or("?", |x| x.name.as_str()));
            out.push(':');
            for (i, id) in ids.iter().enumerate() {
                let _ = write!(out, "{}{id}", if i > 0 { "+" } else { "" });
            }
            if let Some(m) = self.gpu_milli {
                let _ = write!(out, "@{m}m");
            }
        }
        out
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
    /// Jobs not run because a dependency of theirs can never be met (Slurm's
    /// `DependencyNeverSatisfied`): one they wait on ended the wrong way or was itself never
    /// run, or they wait on each other in a cycle.
    pub never_satisfied: Vec<Rejected>,
    /// The run's metrics.
    pub metrics: Metrics,
}

/// Why a run failed (an internal inconsistency; user input cannot cause one).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The run passed [`SimConfig::deadline`] and was abandoned.
    #[error("abandoned at t={time} ms of simulated time: the wall-clock deadline passed")]
    Deadline {
        /// Simulated time reached.
        time: Time,
    },
    /// The run's mean job completion time was certain to exceed
    /// [`SimConfig::give_up_above_mean_jct_s`], and the run was abandoned.
    #[error("abandoned at t={time} ms: the mean job completion time is already at least {lower_bound_s:.0} s")]
    Beaten {
        /// Simulated time reached.
        time: Time,
        /// The lower bound on the mean JCT (seconds) that passed the limit.
        lower_bound_s: f64,
    },
    /// The policy kept the scheduler busy far beyond any sensible run (e.g. jobs preempted and
    /// promoted back and forth at every instant): more passes than `1000 x (jobs + 10)`.
    #[error("abandoned at t={time} ms: {passes} scheduling passes, the policy keeps preempting and restarting jobs (thrashing)")]
    Runaway {
        /// Simulated time reached.
        time: Time,
        /// Passes made.
        passes: u64,
    },
    /// The cluster cannot be modelled (too many kinds of node).
    #[error("{0}")]
    Cluster(String),
    /// The scheduler refused a commit or broke an invariant.
    #[error("scheduler inconsistency at t={time} ms: {what}")]
    Inconsistent {
        /// When.
        time: Time,
        /// What.
        what: String,
    },
}

/// What an event in the heap is. Arrivals are not in the heap: they are read in submit order
/// from the workload, between the ends and the wake-ups of their instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    // Order matters: at one instant, ends free GPUs before arrivals join the queue, and
    // wake-ups come after both.
    End,
    // A change of policy ([`simulate_with_changes`]): after the instant's ends, before its
    // arrivals.
    Switch,
    Wake,
}

/// What the engine knows of a job while it runs.
#[derive(Debug, Clone, Default)]
struct Live {
    /// True work left (ms), not counting restart overhead.
    remaining: Time,
    /// Bumped at every start, so that the end event of a preempted run is recognised as stale.
    epoch: u32,
    /// Overhead charged at the start of the current run.
    overhead: Time,
    /// The job has ended, or was rejected at its arrival.
    done: bool,
    /// The job is running now.
    running: bool,
    /// Speed of the GPUs of its current (or last) run: base work per ms.
    speed: f64,
    /// Wall time of its earlier runs' work that survived (what a restart from zero loses).
    saved: Time,
    /// Its current run's slowdown for where it landed in the topology (1: none).
    spread: f64,
    /// The slowdown of the least spread placement its GPUs allow (within the smallest unit
    /// that holds them on the empty cluster).
    spread_best: f64,
}

/// A lower bound (seconds) on the mean JCT a run will report, from its state at `t`.
///
/// A job that ended counts its JCT; rejected ones count nothing. The jobs in the cluster now
/// (running or waiting) count the larger of two lower bounds on the sum of their ends: each on
/// its own (a running job at its planned end; a preempted one no earlier than that end, nor than
/// `t` plus its work left; one that never started at `t + runtime`), and all together on a
/// relaxation where the whole cluster works on one job at a time, preemptively, shortest work
/// first from `t` (every real schedule is one of that machine's schedules, and on one machine
/// shortest-work-first gives the least sum of ends). Jobs not yet submitted that are `sure` to
/// run and be counted whatever the policy count too: each at least its submit plus its run
/// time, and all together on the same machine from their submit times, shortest remaining work
/// first (the least sum of ends on one machine with release times); the jobs now and those to
/// come count the larger of (now's bound + the sure jobs' bound) and the machine's sum over
/// both. Another job not yet submitted takes at least its run time, unless it is rejected on
/// arrival or never runs (then the mean leaves it out), so those counted are the ones that
/// lower the mean most: the shortest, while below the mean so far. `future` is those jobs'
/// (run time, position in arrival order), shortest first; `total_milli` the cluster's GPUs in
/// thousandths. A job that arrived but still waits on its dependencies (`deps`) may yet never
/// run (a dependency that fails), so it counts like such a future job: at least `t + runtime`
/// less its submit time, only if that lowers the mean; one that will never run (`ended`
/// without a record) counts nothing.
#[allow(clippy::too_many_arguments)]
fn mean_jct_lower_bound(
    w: &Workload,
    records: &[Option<JobRecord>],
    live: &[Live],
    deps: &Dependencies,
    ended: &[Option<bool>],
    arrivals: &[u32],
    next_arrival: usize,
    sure: &[bool],
    future: &[(Time, u32)],
    total_milli: u64,
    t: Time,
    scratch: &mut BoundScratch,
) -> f64 {
    let BoundScratch { work, fut } = scratch;
    let (mut done_sum, mut n) = (0i128, 0u64);
    let (mut each_sum, mut submit_sum) = (0i128, 0i128);
    work.clear();
    // Arrived jobs held back by dependencies: their least JCT (ms).
    let mut held: Vec<i128> = Vec::new();
    for &i in &arrivals[..next_arrival] {
        let (job, l) = (&w.jobs[i as usize], &live[i as usize]);
        let (end, left) = match &records[i as usize] {
            Some(r) if l.done => {
                done_sum += i128::from(r.end - job.submit);
                n += 1;
                continue;
            }
            // Rejected, or never run because a dependency failed: counts nothing.
            None if l.done || ended[i as usize].is_some() => continue,
            None if deps.is_waiting(JobId(i)) => {
                held.push(i128::from(t + job.runtime - job.submit));
                continue;
            }
            Some(r) if l.running => (r.end, r.end - t),
            Some(r) => (r.end.max(t + l.remaining), l.remaining),
            None => (t + job.runtime, job.runtime),
        };
        each_sum += i128::from(end);
        submit_sum += i128::from(job.submit);
        work.push(u128::from(milli_of(job)) * left.max(0) as u128);
        n += 1;
    }
    work.sort_unstable();
    let m = u128::from(total_milli.max(1));
    let (mut cum, mut spt_sum) = (0u128, 0i128);
    for &x in work.iter() {
        cum += x;
        spt_sum += i128::from(t) + (cum / m) as i128;
    }
    // The jobs sure to come: the next `SRPT_JOBS` of them on the one machine too (a subset's
    // least sum of ends there is still a lower bound on its ends), so a check costs at most
    // O((W + SRPT_JOBS) log) however long the workload; the others each at their own least end.
    const SRPT_JOBS: usize = 20_000;
    fut.clear();
    let (mut fut_each, mut rest_each) = (0i128, 0i128);
    for &i in &arrivals[next_arrival..] {
        if sure[i as usize] {
            let job = &w.jobs[i as usize];
            if fut.len() < SRPT_JOBS {
                fut.push((job.submit, u128::from(milli_of(job)) * job.runtime.max(0) as u128));
                fut_each += i128::from(job.submit + job.runtime);
            } else {
                rest_each += i128::from(job.submit + job.runtime);
            }
            submit_sum += i128::from(job.submit);
            n += 1;
        }
    }
    let ends = rest_each
        + if fut.is_empty() {
            each_sum.max(spt_sum)
        } else {
            let both = srpt_ends(t, work, fut, m);
            let alone = srpt_ends(t, &[], fut, m);
            both.max(each_sum.max(spt_sum) + fut_each.max(alone))
        };
    let mut sum = done_sum + ends - submit_sum;
    if n == 0 {
        return 0.0; // every later job may be rejected, and the mean of no job is 0
    }
    held.sort_unstable();
    let mut held = held.into_iter().peekable();
    let mut future =
        future.iter().filter(|&&(_, pos)| pos as usize >= next_arrival).map(|&(r, _)| i128::from(r)).peekable();
    loop {
        // The least of the optional jobs left, held and future (both sorted).
        let x = match (held.peek(), future.peek()) {
            (Some(&h), Some(&f)) if h <= f => held.next(),
            (_, Some(_)) => future.next(),
            (Some(_), None) => held.next(),
            (None, None) => None,
        };
        let Some(x) = x else { break };
        if x * i128::from(n) >= sum {
            break; // this and every longer job would raise the mean
        }
        sum += x;
        n += 1;
    }
    sum as f64 / 1000.0 / n as f64
}

/// The least sum of ends (ms, each rounded down) of jobs on one machine that does `m` units of
/// work per ms, preemptively, from `start`: `now` are jobs there at `start` (work units),
/// `fut` jobs (release time, work units) in release order. Shortest remaining work first is
/// optimal there.
fn srpt_ends(start: Time, now: &[u128], fut: &[(Time, u128)], m: u128) -> i128 {
    // Time from `start` in work units (a release before `start` counts from it: earlier ends,
    // still a lower bound).
    let at = |t: Time| u128::from((t - start).max(0) as u64) * m;
    let mut heap: BinaryHeap<Reverse<u128>> = now.iter().map(|&x| Reverse(x)).collect();
    let mut cur = 0u128;
    let mut sum = 0i128;
    for &(release, x) in fut {
        let r = at(release);
        // Finish what ends before this release, then work on the shortest until it.
        while let Some(&Reverse(top)) = heap.peek() {
            if cur + top > r {
                break;
            }
            heap.pop();
            cur += top;
            sum += i128::from(start) + (cur / m) as i128;
        }
        if r > cur {
            if let Some(Reverse(top)) = heap.pop() {
                heap.push(Reverse(top - (r - cur)));
            }
            cur = r;
        }
        heap.push(Reverse(x));
    }
    while let Some(Reverse(top)) = heap.pop() {
        cur += top;
        sum += i128::from(start) + (cur / m) as i128;
    }
    sum
}

/// Scratch buffers of [`mean_jct_lower_bound`], kept between its calls: the jobs in the cluster
/// (work units) and those sure to come (submit, work units).
#[derive(Default)]
struct BoundScratch {
    work: Vec<u128>,
    fut: Vec<(Time, u128)>,
}

/// When the bound of a raced run comes back below its limit, the next check waits this many
/// times `bound_every` passes, by how close it came (the first row whose fraction of the limit
/// it reached): a check costs O((jobs in the cluster + jobs to come) log) however cheap the
/// run's passes, and a bound far below its limit seldom passes it within a few intervals;
/// close to it, checks come twice as often. Deterministic (the bound and the limit only).
const CHECK_GAPS: [(f64, f64); 5] = [(0.95, 0.5), (0.9, 1.0), (0.75, 2.0), (0.5, 4.0), (0.0, 8.0)];

fn inconsistent(t: Time) -> impl Fn(ordo_core::scheduler::CommitError) -> SimError {
    move |e| SimError::Inconsistent { time: t, what: e.to_string() }
}

/// Replays `w` under `cfg`. Deterministic: the same inputs give the same output.
pub fn simulate(w: &Workload, cfg: &SimConfig) -> Result<SimOutput, SimError> {
    simulate_with_changes(w, cfg, &[])
}

/// Replays `w` under `cfg`, its policy changed to each of `changes` at its time, as an `ordo
/// server` changes it (`ordo policy set`): the scheduler is built again under the new policy,
/// after the instant's ends and before its arrivals, with the running jobs first (each
/// holding its GPUs, its estimate what is left of it) and then the waiting jobs in (submit,
/// id) order; a pass follows at once. Non-preemptive policies only (a preemptive one ranks by
/// service it would have to be given back). The times must be increasing.
pub fn simulate_with_changes(
    w: &Workload,
    cfg: &SimConfig,
    changes: &[(Time, PolicySpec)],
) -> Result<SimOutput, SimError> {
    if !changes.is_empty() {
        if let Some(p) = std::iter::once(&cfg.policy).chain(changes.iter().map(|c| &c.1)).find(|p| p.order.preemptive())
        {
            return Err(SimError::Cluster(format!(
                "policy changes are replayed for non-preemptive policies only; {p} preempts"
            )));
        }
        if changes.windows(2).any(|c| c[1].0 <= c[0].0) {
            return Err(SimError::Cluster("policy changes must come in increasing time order".into()));
        }
    }
    let typed = cfg.typed(w);
    let topo_placed = cfg.topology.as_ref().filter(|_| cfg.place_by_topology);
    if topo_placed.is_some() && cfg.placement != Placement::Consolidated {
        return Err(SimError::Cluster("placement by topology is consolidated placement".into()));
    }
    let build = |policy: PolicySpec| -> Result<Scheduler, SimError> {
        let mut s = if typed {
            let pick = cfg.model_pick.unwrap_or_default();
            Scheduler::typed(&cfg.cluster, cfg.placement, policy, &cfg.speeds, pick).map_err(SimError::Cluster)?
        } else {
            Scheduler::new(&cfg.cluster, cfg.placement, policy)
        };
        if let Some(t) = topo_placed {
            s.set_topology(t.clone()).map_err(SimError::Cluster)?;
        }
        Ok(s)
    };
    let mut sched = build(cfg.policy.clone())?;
    // Typed runs: each job's pools and speed row, or why no node can ever serve it; and its
    // work in base units (its run time on the model it was measured on, times that speed).
    let mut eligs: Vec<ordo_core::Elig> = Vec::new();
    let mut never_serves: HashMap<u32, String> = HashMap::new();
    if typed {
        eligs = w
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| match &j.needs {
                None => ordo_core::Elig::ANY,
                Some(n) => sched.eligibility(n).unwrap_or_else(|why| {
                    never_serves.insert(i as u32, why);
                    ordo_core::Elig::ANY
                }),
            })
            .collect();
    }
    // Placed by topology: each job's ask resolved against the levels (an unknown level: the
    // job is never served, with the reason).
    let mut topo_needs: Vec<ordo_core::TopoNeed> = Vec::new();
    if topo_placed.is_some() {
        topo_needs = w
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| match j.needs.as_ref().and_then(|n| n.topology.as_ref()) {
                None => ordo_core::TopoNeed::NONE,
                Some(ask) => sched.topology_need(ask).unwrap_or_else(|why| {
                    never_serves.insert(i as u32, why);
                    ordo_core::TopoNeed::NONE
                }),
            })
            .collect();
    }
    // Placed by topology: each job's row of the slowdown factors, which the scheduler plans a
    // spread gang's end with.
    let spread_rows: Vec<u8> = match topo_placed {
        Some(_) => w.jobs.iter().map(|j| sched.spread_row(j.needs.as_ref().and_then(|n| n.class.as_deref()))).collect(),
        None => Vec::new(),
    };
    let mut spread = cfg.topology.as_ref().map(|t| empty_spread(t));
    let mut spread_lost_gpu_ms = 0f64;
    // Per job: bit 0 counted as a gang, bit 1 counted as spread beyond its least.
    let mut spread_seen = vec![0u8; if cfg.topology.is_some() { w.jobs.len() } else { 0 }];
    // GPUs of the largest unit of each level: a gang of more crosses that level wherever it goes.
    let largest: Vec<u64> = cfg.topology.as_ref().map_or(Vec::new(), |t| {
        let gpus: Vec<u32> = cfg.cluster.nodes.iter().map(|n| n.gpus).collect();
        (0..t.levels().len()).map(|l| t.largest_unit(l, &gpus)).collect()
    });
    let least_crossed = |g: u32| largest.iter().position(|&u| u >= g as u64).unwrap_or(largest.len());
    let base_runtime = |j: &ordo_core::Job| -> Time {
        match j.needs.as_ref().and_then(|n| n.measured_on.as_deref().map(|m| (n.class.as_deref(), m))) {
            Some((class, m)) if !cfg.speeds.is_empty() => {
                let s = cfg.speeds.of(class, Some(m));
                if s == 1.0 {
                    j.runtime
                } else {
                    (j.runtime as f64 * s).round() as Time
                }
            }
            _ => j.runtime,
        }
    };
    // Quotas, and the guards every preemptive run has (the guards per job are set below).
    let configure = |sched: &mut Scheduler| -> Result<(), SimError> {
        if let Some(q) = &cfg.quotas {
            let index = |names: &[String], n: &str| names.iter().position(|x| x == n).map(|i| i as u32);
            let q = q
                .resolve(
                    cfg.cluster.total_gpus(),
                    sched.capacity(),
                    ordo_core::pools::same_model,
                    |u| index(&w.users, u),
                    |g| index(&w.groups, g),
                )
                .map_err(|e| SimError::Cluster(format!("--quotas: {e}")))?;
            sched.set_quotas(q);
        }
        // Every restart loses the overhead; a run protected for twice that always does some work.
        sched.set_min_run(cfg.preemption.min_run.max(2 * cfg.preemption_overhead));
        sched.set_max_preemptions(cfg.preemption.max_preemptions);
        Ok(())
    };
    configure(&mut sched)?;
    // Jobs waiting on others join the queue once their dependencies are met; `ended` says how
    // each job ended (`Some(true)`: successfully) once it has, or was never run.
    let mut deps = Dependencies::default();
    let mut ended: Vec<Option<bool>> = vec![None; w.jobs.len()];
    let mut never_satisfied: Vec<Rejected> = Vec::new();
    // How each job checkpoints (empty: every job resumes exactly where it stopped), and the
    // GPU-milliseconds preemptions cost: restart overheads and work done then lost.
    let rules = cfg.preemption.per_job(w);
    let mut lost_gpu_ms: f64 = 0.0;
    // Guards that make lost work bounded (docs/POLICIES.md, "Checkpoints and thrashing"): a job
    // that checkpoints every `c` is not preempted before its run has saved once (`c` after the
    // restart overhead); one that saves on a signal taking `g`, before twice the overhead and
    // `g`; one that restarts from zero is protected twice as long after each restart
    // (`zero_floor`, then double, ...), so it ends after a number of preemptions logarithmic in
    // its run time.
    let zero_floor = cfg.preemption.min_run.max(ZERO_RESTART_FLOOR);
    for (i, rule) in rules.iter().enumerate() {
        let floor = match *rule {
            ordo_core::Checkpoint::Every(c) => c + cfg.preemption_overhead,
            // Its restarts cost the overhead and the save: protected for twice both, so every
            // run does some work.
            ordo_core::Checkpoint::Signal(g) => 2 * (cfg.preemption_overhead + g),
            _ => 0,
        };
        // A minimum run the job declared itself protects its runs as long.
        let floor = floor.max(cfg.preemption.own_min_run(i));
        if floor > 0 {
            sched.set_run_floor(JobId(i as u32), floor);
        }
    }
    // Jobs that declared only a minimum run (no rule: `rules` is empty).
    if rules.is_empty() {
        for i in 0..w.jobs.len() {
            let m = cfg.preemption.own_min_run(i);
            if m > 0 {
                sched.set_run_floor(JobId(i as u32), m);
            }
        }
    }
    // Busy and total capacity in thousandths of a GPU, so that a 250-milli job counts 0.25.
    let total_milli = cfg.cluster.total_gpus() * 1000;
    // Events: (time, kind, sequence, job, run epoch), earliest first: ends and wake-ups only,
    // so the heap holds about one event per running job.
    type Event = (Time, Kind, u64, JobId, u32);
    let mut heap: BinaryHeap<Reverse<Event>> = BinaryHeap::new();
    let mut seq = 0u64;
    // A change is an event with the change's index as its epoch (no job: a workload without
    // jobs has none to move).
    for (k, (at, _)) in changes.iter().enumerate().filter(|_| !w.jobs.is_empty()) {
        heap.push(Reverse((*at, Kind::Switch, seq, JobId(0), k as u32)));
        seq += 1;
    }
    // Arrivals in (submit, index) order; a renumbered workload is in that order already.
    let arrivals: Vec<u32> = if w.jobs.windows(2).all(|p| p[0].submit <= p[1].submit) {
        (0..w.jobs.len() as u32).collect()
    } else {
        let mut a: Vec<u32> = (0..w.jobs.len() as u32).collect();
        a.sort_by_key(|&i| (w.jobs[i as usize].submit, i));
        a
    };
    let mut next_arrival = 0usize;
    let first_submit = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last_submit = w.jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let mut integ = RunIntegrals::new(first_submit, last_submit);
    let mut records: Vec<Option<JobRecord>> = vec![None; w.jobs.len()];
    let mut live: Vec<Live> = w.jobs.iter().map(|j| Live { remaining: base_runtime(j), ..Live::default() }).collect();
    let mut rejected = Vec::new();
    // Multiset of waiting jobs' sizes (thousandths of a GPU): the smallest one tells whether
    // idle GPUs could have served a waiting job.
    let mut waiting_sizes: BTreeMap<u64, u32> = BTreeMap::new();
    let add_size = |m: &mut BTreeMap<u64, u32>, g: u64| *m.entry(g).or_default() += 1;
    let remove_size = |m: &mut BTreeMap<u64, u32>, g: u64| {
        if let Some(c) = m.get_mut(&g) {
            *c -= 1;
            if *c == 0 {
                m.remove(&g);
            }
        }
    };
    // Waiting jobs' distinct demands, smallest first (thousandths of a GPU, then the demand):
    // after each pass, whether one of them fits the idle GPUs tells why idle GPUs sit idle.
    type DemandKey = (u64, u32, u32, u32, u64, u128);
    let mut waiting_demands: BTreeMap<DemandKey, u32> = BTreeMap::new();
    let demand_key = |j: &ordo_core::Job| -> DemandKey {
        let d = ordo_core::Demand::new(j.gpus, j.gpu_milli, j.cpus.unwrap_or(0), j.mem_mib.unwrap_or(0));
        let pools = eligs.get(j.id.idx()).map_or(0, |e| e.pools);
        (milli_of(j), d.gpus, d.milli, d.cpus, d.mem_mib, pools)
    };
    let mut cause = IdleCause::EmptyQueue;
    // A job without an estimate, in a workload where others have one, is given the largest
    // estimate (a site's default time limit); with no estimate at all, policies read the true
    // run time (oracle).
    let default_estimate =
        if w.jobs.iter().any(|j| j.estimate.is_none()) { w.jobs.iter().filter_map(|j| j.estimate).max() } else { None };
    let mut wakes: BTreeSet<Time> = BTreeSet::new();
    // `las:...,compat=tiresias`: as the Tiresias simulator, only the wake-up asked for by the
    // latest pass counts (it recomputes its next queue jump at every event).
    let latest_wake_only = matches!(&cfg.policy.order, ordo_core::Order::Las(lp) if lp.compat_tiresias);
    let mut wake_due: Option<Time> = None;
    let mut busy: u64 = 0;
    let mut prev_t = first_submit;
    let mut passes = 0u64;
    let mut events = 0u64;
    // The mean-JCT bound scans every job: at most about 64 times per run (128 close to the
    // limit), whatever its size; fewer while it stays far below the limit (`CHECK_GAPS`).
    let bound_every = (w.jobs.len() as u64 / 32).max(32);
    let mut next_bound = bound_every;
    // With `check_invariants`: the highest bound seen, checked against the final mean below.
    let mut highest_bound = 0f64;
    let mut bound_scratch = BoundScratch::default();
    let req_of = |id: JobId| {
        let job = &w.jobs[id.idx()];
        JobReq {
            id,
            submit: job.submit,
            gpus: job.gpus,
            estimate: job.estimate.or(default_estimate).unwrap_or(job.runtime),
            user: job.user,
            group: job.group,
            priority: job.priority.unwrap_or(0),
            gpu_milli: job.gpu_milli,
            cpus: job.cpus.unwrap_or(0),
            mem_mib: job.mem_mib.unwrap_or(0),
            nodes: 0,
            array: 0,
            elig: eligs.get(id.idx()).copied().unwrap_or_default(),
            topo: topo_needs.get(id.idx()).copied().unwrap_or_default(),
            spread_row: spread_rows.get(id.idx()).copied().unwrap_or_default(),
        }
    };
    // The bound reads run times at speed 1: with a speed matrix a job may run faster, so there
    // is no bound (and no early give-up).
    // So does a topology: a run may restart on a less spread placement and end before the end
    // planned for it.
    let bounded = (cfg.give_up_above_mean_jct_s.is_some() || cfg.check_invariants)
        && cfg.speeds.is_empty()
        && cfg.topology.is_none();
    // Jobs certain to run and be counted, whatever the policy: no dependency, whole GPUs, no
    // CPUs or memory asked, within every quota, and taken by the cluster (what decides a
    // rejection depends on the cluster, not on what runs). The bound counts them before they
    // arrive.
    let sure: Vec<bool> = if bounded {
        w.jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                j.after.is_empty()
                    && !never_serves.contains_key(&(i as u32))
                    && j.gpu_milli.is_none()
                    && j.cpus.is_none()
                    && j.mem_mib.is_none()
                    && over_quota(&sched, w, j, &req_of(JobId(i as u32))).is_none()
                    && sched.accepts(&req_of(JobId(i as u32)))
            })
            .collect()
    } else {
        Vec::new()
    };
    // The other jobs' (run time, arrival position), shortest first, for the bound's optional
    // future jobs.
    let future: Vec<(Time, u32)> = if bounded {
        let mut f: Vec<(Time, u32)> = arrivals
            .iter()
            .enumerate()
            .filter(|&(_, &i)| !sure[i as usize])
            .map(|(pos, &i)| (w.jobs[i as usize].runtime, pos as u32))
            .collect();
        f.sort_unstable();
        f
    } else {
        Vec::new()
    };

    loop {
        let next_event = heap.peek().map(|e| e.0 .0);
        let next_submit = arrivals.get(next_arrival).map(|&i| w.jobs[i as usize].submit);
        let t = match (next_event, next_submit) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => break,
            },
        };
        let min_waiting = waiting_sizes.keys().next().copied();
        let (running, waiting) = (sched.running_len() as u64, sched.waiting_len() as u64);
        integ.advance(prev_t, t, busy, total_milli, running, waiting, min_waiting, cause);
        prev_t = t;
        let mut happened = false;
        // Ends at `t`, then arrivals at `t` (in submit order), then wake-ups at `t`. Jobs that
        // join the queue now (arrivals, and jobs whose last dependency an end just met) are
        // submitted after every event of the instant, in that order.
        let mut to_submit: Vec<JobId> = Vec::new();
        let mut arrivals_done = false;
        loop {
            let (id, kind, epoch) = match heap.peek() {
                Some(&Reverse((et, kind, _, id, epoch))) if et == t && (kind != Kind::Wake || arrivals_done) => {
                    heap.pop();
                    (id, Some(kind), epoch)
                }
                _ if !arrivals_done => match arrivals.get(next_arrival) {
                    Some(&i) if w.jobs[i as usize].submit == t => {
                        next_arrival += 1;
                        (JobId(i), None, 0)
                    }
                    _ => {
                        arrivals_done = true;
                        continue;
                    }
                },
                _ => break,
            };
            let job = &w.jobs[id.idx()];
            match kind {
                Some(Kind::End) => {
                    if epoch != live[id.idx()].epoch || sched.running_start(id).is_none() {
                        continue; // the run this end belonged to was preempted
                    }
                    happened = true;
                    events += 1;
                    let started = sched.running_start(id).unwrap_or(t);
                    sched.finish(id, t).map_err(inconsistent(t))?;
                    lost_gpu_ms += live[id.idx()].overhead as f64 * milli_of(job) as f64 / 1000.0;
                    let l = &live[id.idx()];
                    spread_lost_gpu_ms += spread_loss(t - started - l.overhead, l, milli_of(job));
                    live[id.idx()].done = true;
                    live[id.idx()].running = false;
                    busy -= milli_of(job);
                    if let Some(r) = records[id.idx()].as_mut() {
                        r.end = t;
                        if let Some(seg) = r.segments.last_mut() {
                            seg.end = t;
                        }
                    }
                    ended[id.idx()] = Some(!job.failed);
                    let released = deps.ended(id, !job.failed);
                    let mut out =
                        Outcomes { ended: &mut ended, to_submit: &mut to_submit, never: &mut never_satisfied };
                    out.apply(w, &records, released);
                }
                None => {
                    happened = true;
                    events += 1;
                    if job.after.is_empty() {
                        to_submit.push(id);
                        continue;
                    }
                    match deps.add(id, &job.after, |j| ended[j.idx()]) {
                        DepState::Met => to_submit.push(id),
                        DepState::Waiting { .. } => {}
                        DepState::Never { on, ok } => {
                            let released = Released { never: vec![(id, on, ok)], ..Released::default() };
                            let mut out =
                                Outcomes { ended: &mut ended, to_submit: &mut to_submit, never: &mut never_satisfied };
                            out.apply(w, &records, released);
                            let released = deps.ended(id, false);
                            out.apply(w, &records, released);
                        }
                    }
                }
                Some(Kind::Switch) => {
                    happened = true;
                    let mut next = build(changes[epoch as usize].1.clone())?;
                    configure(&mut next)?;
                    let moved = |e: SubmitError| SimError::Inconsistent {
                        time: t,
                        what: format!("moving a job to the new policy's scheduler: {e}"),
                    };
                    // Running jobs by the start of their run, each on the GPUs it holds, its
                    // estimate what is left of it (as the server builds its scheduler again).
                    let mut run: Vec<(Time, JobId)> = live
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| l.running)
                        .filter_map(|(i, _)| {
                            let seg = records[i].as_ref()?.segments.last()?;
                            Some((seg.start, JobId(i as u32)))
                        })
                        .collect();
                    run.sort_unstable();
                    for (start, j) in run {
                        let mut req = req_of(j);
                        req.estimate = (start + req.estimate - t).max(1);
                        next.submit(req, t).map_err(moved)?;
                        let held = records[j.idx()]
                            .as_ref()
                            .and_then(|r| r.segments.last())
                            .map(|s| s.gpu_ids.clone())
                            .unwrap_or_default();
                        let parts = held.iter().map(|(n, ids)| (n, ids.len() as u32)).collect();
                        next.start_holding(j, &ordo_core::Allocation { parts, detail: None }, &held, t)
                            .map_err(inconsistent(t))?;
                    }
                    let mut waiting: Vec<JobId> = sched.waiting_ids_in_order().collect();
                    waiting.sort_by_key(|j| (w.jobs[j.idx()].submit, j.0));
                    for j in waiting {
                        next.submit(req_of(j), t).map_err(moved)?;
                    }
                    sched = next;
                }
                Some(Kind::Wake) => {
                    wakes.remove(&t);
                    happened |= !latest_wake_only || wake_due == Some(t);
                }
            }
        }
        let mut next = 0;
        while let Some(&id) = to_submit.get(next) {
            next += 1;
            let job = &w.jobs[id.idx()];
            let req = req_of(id);
            // A job larger than its user's or group's GPU quota could never start.
            let submitted = match over_quota(&sched, w, job, &req) {
                Some(why) => Err(Rejected { job: id, gpus: job.gpus, why }),
                None if never_serves.contains_key(&id.0) => Err(Rejected {
                    job: id,
                    gpus: job.gpus,
                    why: format!("never satisfiable: {}", never_serves[&id.0]),
                }),
                None => match sched.submit(req, t) {
                    Ok(()) => Ok(()),
                    Err(e @ (SubmitError::NeverFits { .. } | SubmitError::NeverPlaced { .. })) => {
                        Err(Rejected { job: id, gpus: job.gpus, why: e.to_string() })
                    }
                    Err(e) => return Err(SimError::Inconsistent { time: t, what: e.to_string() }),
                },
            };
            match submitted {
                Ok(()) => {
                    add_size(&mut waiting_sizes, milli_of(job));
                    *waiting_demands.entry(demand_key(job)).or_default() += 1;
                }
                Err(r) => {
                    live[id.idx()].done = true;
                    rejected.push(r);
                    // Never run: its dependents see it as ended unsuccessfully.
                    ended[id.idx()] = Some(false);
                    let released = deps.ended(id, false);
                    Outcomes { ended: &mut ended, to_submit: &mut to_submit, never: &mut never_satisfied }
                        .apply(w, &records, released);
                }
            }
        }
        if !happened {
            continue; // only ends of runs that were preempted: nothing to decide
        }
        sched.advance(t);
        let plan = sched.schedule(t, false);
        if cfg.check_invariants {
            // Explaining must not change the decisions (the fast paths skip what explain shows).
            let explained = sched.schedule(t, true);
            if explained.starts != plan.starts || explained.preempt != plan.preempt {
                return Err(SimError::Inconsistent { time: t, what: "schedule(explain) decided differently".into() });
            }
        }
        passes += 1;
        if passes > 1_000 * (w.jobs.len() as u64 + 10) {
            return Err(SimError::Runaway { time: t, passes });
        }
        if passes.is_multiple_of(256) && cfg.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(SimError::Deadline { time: t });
        }
        for &id in &plan.preempt {
            let job = &w.jobs[id.idx()];
            let start = sched.running_start(id).ok_or_else(|| SimError::Inconsistent {
                time: t,
                what: format!("preempting job {id}, which is not running"),
            })?;
            let rule = rules.get(id.idx()).copied().unwrap_or_default();
            let l = &mut live[id.idx()];
            // Useful run time (after the restart overhead) and the part of it that survives.
            let useful = (t - start - l.overhead).max(0);
            let kept = rule.kept(useful);
            if rule.loses_work() {
                let overhead = (t - start) - useful;
                sched.preempt_keeping(id, t, |_| kept.map(|k| overhead + k)).map_err(inconsistent(t))?;
            } else {
                sched.preempt(id, t).map_err(inconsistent(t))?;
            }
            spread_lost_gpu_ms += spread_loss(useful, l, milli_of(job));
            let lost_wall = match kept {
                Some(k) => (t - start) - k,
                None => (t - start) + std::mem::take(&mut l.saved),
            };
            l.saved += kept.unwrap_or(0);
            if kept.is_none() {
                let k = sched.progress(id).map_or(1, |p| p.preemptions).clamp(1, 40);
                let floor = zero_floor.saturating_mul(1 << (k - 1)).max(cfg.preemption.own_min_run(id.idx()));
                sched.set_run_floor(id, floor);
            }
            lost_gpu_ms += lost_wall as f64 * milli_of(job) as f64 / 1000.0;
            busy -= milli_of(job);
            add_size(&mut waiting_sizes, milli_of(job));
            *waiting_demands.entry(demand_key(job)).or_default() += 1;
            l.running = false;
            // Work done in this run that survives: its length less the restart overhead it
            // began with, less what its checkpointing loses, at the speed of the GPUs it ran
            // on (base units). A job that restarts from zero has all its work left again.
            match kept {
                Some(ran) => {
                    l.remaining -=
                        if l.speed == 1.0 { ran } else { ((ran as f64 * l.speed).floor() as Time).min(l.remaining) }
                }
                None => l.remaining = base_runtime(job),
            }
            if let Some(r) = records[id.idx()].as_mut() {
                r.preemptions += 1;
                if let Some(seg) = r.segments.last_mut() {
                    seg.end = t;
                }
            }
        }
        for s in plan.starts {
            let job = &w.jobs[s.job.idx()];
            let gpu_ids = sched.start_ids(s.job, &s.alloc, t).map_err(inconsistent(t))?;
            busy += milli_of(job);
            remove_size(&mut waiting_sizes, milli_of(job));
            let k = demand_key(job);
            if let Some(c) = waiting_demands.get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    waiting_demands.remove(&k);
                }
            }
            let l = &mut live[s.job.idx()];
            l.epoch += 1;
            l.running = true;
            let rec = records[s.job.idx()].get_or_insert_with(|| JobRecord {
                job: s.job,
                submit: job.submit,
                start: t,
                end: t,
                gpus: job.gpus,
                gpu_milli: job.share_milli(),
                preemptions: 0,
                // Most jobs run once: room for one run (a first push would reserve four).
                segments: Vec::with_capacity(1),
            });
            l.overhead = if rec.segments.is_empty() {
                0
            } else {
                cfg.preemption_overhead + rules.get(s.job.idx()).map_or(0, |c| c.extra_overhead())
            };
            l.speed = if typed { sched.capacity().speed_on(eligs[s.job.idx()].row, &s.alloc) } else { 1.0 };
            l.spread = 1.0;
            l.spread_best = 1.0;
            if let (Some(t), Some(sp)) = (&cfg.topology, spread.as_mut()) {
                // A run spread over several units of a level runs slower by the level's factor.
                if s.alloc.parts.len() > 1 {
                    let crossed = t.crossed(s.alloc.parts.iter().map(|p| p.0));
                    let least = least_crossed(job.gpus).min(crossed);
                    sp.gang_runs_by_crossed[crossed] += 1;
                    let class = job.needs.as_ref().and_then(|n| n.class.as_deref());
                    l.spread = t.factor(class, crossed);
                    l.spread_best = t.factor(class, least);
                    l.speed /= l.spread;
                    let seen = &mut spread_seen[s.job.idx()];
                    if *seen & 1 == 0 {
                        *seen |= 1;
                        sp.gangs += 1;
                    }
                    if crossed > least && *seen & 2 == 0 {
                        *seen |= 2;
                        sp.spread_gangs += 1;
                    }
                }
            }
            let end = t + l.overhead + ordo_core::pools::scaled(l.remaining, l.speed);
            rec.end = end;
            rec.segments.push(RunSegment { start: t, end, gpu_ids });
            heap.push(Reverse((end, Kind::End, seq, s.job, l.epoch)));
            seq += 1;
        }
        wake_due = plan.wake_at.filter(|&at| at > t);
        if let Some(at) = plan.wake_at.filter(|&at| at > t) {
            if wakes.insert(at) {
                heap.push(Reverse((at, Kind::Wake, seq, JobId(0), 0)));
                seq += 1;
            }
        }
        let idle = total_milli - busy;
        cause = if waiting_demands.is_empty() {
            IdleCause::EmptyQueue
        } else if idle == 0 {
            IdleCause::Fragmentation // nothing idle: the cause counts nothing
        } else {
            let cap = sched.capacity();
            let fits =
                waiting_demands.keys().take_while(|k| k.0 <= idle).any(|&(_, gpus, milli, cpus, mem_mib, pools)| {
                    cap.fits_for(ordo_core::Demand {
                        gpus,
                        milli,
                        cpus,
                        mem_mib,
                        nodes: 0,
                        pools,
                        row: 0,
                        topo: ordo_core::TopoNeed::NONE,
                    })
                });
            // None fits: had a constrained one accepted any GPU, would it have?
            let refused = || {
                waiting_demands.keys().take_while(|k| k.0 <= idle).any(|&(_, gpus, milli, cpus, mem_mib, pools)| {
                    pools != 0
                        && cap.fits_for(ordo_core::Demand {
                            gpus,
                            milli,
                            cpus,
                            mem_mib,
                            nodes: 0,
                            pools: 0,
                            row: 0,
                            topo: ordo_core::TopoNeed::NONE,
                        })
                })
            };
            if fits {
                IdleCause::HeadOfLine
            } else if typed && refused() {
                IdleCause::Constrained
            } else {
                IdleCause::Fragmentation
            }
        };
        if cfg.check_invariants {
            sched.sanity_check().map_err(|what| SimError::Inconsistent { time: t, what })?;
        }
        // The bound the limit reads is the one the invariant checks test: at the end of a pass.
        let limit = cfg.give_up_above_mean_jct_s.filter(|_| bounded && passes >= next_bound);
        if bounded && (cfg.check_invariants || limit.is_some()) {
            let lb = mean_jct_lower_bound(
                w,
                &records,
                &live,
                &deps,
                &ended,
                &arrivals,
                next_arrival,
                &sure,
                &future,
                total_milli,
                t,
                &mut bound_scratch,
            );
            highest_bound = highest_bound.max(lb);
            if let Some(limit) = limit {
                if lb > limit * (1.0 + 1e-12) {
                    return Err(SimError::Beaten { time: t, lower_bound_s: lb });
                }
                let gap = CHECK_GAPS.iter().find(|&&(at, _)| lb >= limit * at).map_or(1.0, |&(_, gap)| gap);
                next_bound = passes + ((gap * bound_every as f64) as u64).max(1);
            }
        }
    }
    // Jobs still waiting on dependencies when every other job has ended wait on each other.
    for (i, j) in w.jobs.iter().enumerate() {
        if deps.is_waiting(JobId(i as u32)) {
            let on: Vec<String> = deps.unmet(JobId(i as u32)).iter().map(|d| name_of(&w.jobs[d.job.idx()])).collect();
            never_satisfied.push(Rejected {
                job: JobId(i as u32),
                gpus: j.gpus,
                why: format!(
                    "dependency never satisfied: it waits on jobs that wait on it in turn ({})",
                    on.join(", ")
                ),
            });
        }
    }
    if sched.waiting_len() > 0 || sched.running_len() > 0 {
        return Err(SimError::Inconsistent {
            time: prev_t,
            what: format!("{} jobs still waiting and {} running at the end", sched.waiting_len(), sched.running_len()),
        });
    }
    // Jobs that never ran (rejected) leave a gap; closing the gaps reuses the same allocation.
    records.retain(Option::is_some);
    let records: Vec<JobRecord> = records.into_iter().map(|r| r.expect("kept")).collect();
    let oracle = cfg.policy.needs_estimate() && w.jobs.iter().all(|j| j.estimate.is_none()) && !w.jobs.is_empty();
    integ.events = events;
    integ.passes = passes;
    let mut metrics = Metrics::compute(w, &records, &integ, cfg, oracle, rejected.len(), never_satisfied.len());
    metrics.preemption_lost_gpu_hours = lost_gpu_ms / 3_600_000.0;
    if topo_placed.is_some() {
        metrics.placement = "topology".to_string();
    }
    if let Some(mut sp) = spread {
        sp.lost_gpu_hours = spread_lost_gpu_ms / 3_600_000.0;
        metrics.spread = Some(sp);
    }
    if cfg.check_invariants && highest_bound > metrics.mean_jct_s * (1.0 + 1e-9) + 1e-9 {
        return Err(SimError::Inconsistent {
            time: prev_t,
            what: format!("mean JCT lower bound {highest_bound} s above the run's mean JCT {} s", metrics.mean_jct_s),
        });
    }
    never_satisfied.sort_by_key(|r| r.job);
    Ok(SimOutput { records, rejected, never_satisfied, metrics })
}

/// Empty spread counts for `t`'s levels.
fn empty_spread(t: &ordo_core::Topology) -> crate::metrics::SpreadStats {
    crate::metrics::SpreadStats {
        levels: t.levels().to_vec(),
        gang_runs_by_crossed: vec![0; t.levels().len() + 1],
        ..Default::default()
    }
}

/// GPU-milliseconds a run of `useful` wall time (after its restart overhead) spent beyond what
/// it would have taken in the least spread placement its GPUs allow (`Live::spread` over
/// `Live::spread_best`).
fn spread_loss(useful: Time, l: &Live, milli: u64) -> f64 {
    if l.spread <= l.spread_best || useful <= 0 {
        return 0.0;
    }
    useful as f64 * (1.0 - l.spread_best / l.spread) * milli as f64 / 1000.0
}

/// Why a job can never start under the quotas (more GPUs than its user's or group's limit, or
/// than their limits on every GPU model it accepts).
fn over_quota(sched: &Scheduler, w: &Workload, job: &ordo_core::Job, req: &JobReq) -> Option<String> {
    let q = sched.quotas();
    let name = |names: &[String], i: u32| names.get(i as usize).cloned().unwrap_or_else(|| i.to_string());
    let gpus = job.gpus as u64;
    if let Some(l) = q.user_limit(job.user).filter(|&l| gpus > l) {
        return Some(format!("needs {gpus} GPUs, more than user {}'s quota of {l}", name(&w.users, job.user)));
    }
    if let Some(l) = q.group_limit(job.group).filter(|&l| gpus > l) {
        return Some(format!("needs {gpus} GPUs, more than group {}'s quota of {l}", name(&w.groups, job.group)));
    }
    if let Some((scope, l)) = sched.model_quota_never(req) {
        let whose = match scope {
            ordo_core::QuotaScope::Group => format!("group {}", name(&w.groups, job.group)),
            _ => format!("user {}", name(&w.users, job.user)),
        };
        return Some(format!(
            "needs {} GPUs, more than {whose}'s quota of {} {} GPUs, on every model it accepts",
            job.gpus, l.limit, l.model
        ));
    }
    None
}

/// A job's name for messages (its id in the trace, else its index).
fn name_of(j: &ordo_core::Job) -> String {
    if j.name.is_empty() {
        j.id.to_string()
    } else {
        j.name.clone()
    }
}

/// Where the effects of a dependency's end go: how jobs ended, jobs to submit now, jobs never
/// run.
struct Outcomes<'a> {
    ended: &'a mut [Option<bool>],
    to_submit: &'a mut Vec<JobId>,
    never: &'a mut Vec<Rejected>,
}

impl Outcomes<'_> {
    /// Applies what an end released: jobs whose dependencies are met join the queue now; jobs
    /// that can never run are recorded with why (and count as ended unsuccessfully).
    fn apply(&mut self, w: &Workload, records: &[Option<JobRecord>], r: Released) {
        self.to_submit.extend(r.ready);
        for (j, d, ok) in r.never {
            self.ended[j.idx()] = Some(false);
            let other = &w.jobs[d.job.idx()];
            let how = match (ok, records[d.job.idx()].is_some()) {
                (true, _) => "completed",
                (false, true) => "ended unsuccessfully",
                (false, false) => "was never run",
            };
            let why = format!(
                "dependency never satisfied: {} wanted job {} to {}, it {how}",
                d.kind,
                name_of(other),
                d.kind.wants()
            );
            self.never.push(Rejected { job: j, gpus: w.jobs[j.idx()].gpus, why });
        }
    }
}

/// Sweeps intervals `(start, end, job, ..)` (ends before starts at equal times) and returns the
/// first instant at which the sum of `amount` exceeds `cap`, with the jobs holding then.
fn peak_over<T>(iv: &[T], amount: impl Fn(&T) -> u64, cap: u64) -> Result<(Option<Time>, String), String>
where
    T: Interval,
{
    let mut ev: Vec<(Time, bool, usize)> = Vec::with_capacity(iv.len() * 2);
    for (i, x) in iv.iter().enumerate() {
        ev.push((x.start(), true, i));
        ev.push((x.end(), false, i));
    }
    ev.sort_unstable();
    let mut sum = 0u64;
    let mut holding: BTreeSet<usize> = BTreeSet::new();
    for (t, start, i) in ev {
        if start {
            sum += amount(&iv[i]);
            holding.insert(i);
            if sum > cap {
                let who: Vec<String> = holding.iter().map(|&k| iv[k].job().to_string()).collect();
                return Ok((Some(t), who.join(", ")));
            }
        } else {
            sum -= amount(&iv[i]);
            holding.remove(&i);
        }
    }
    Ok((None, String::new()))
}

/// A held interval as `validate` records it.
trait Interval {
    fn start(&self) -> Time;
    fn end(&self) -> Time;
    fn job(&self) -> JobId;
}

impl Interval for (Time, Time, JobId, u64) {
    fn start(&self) -> Time {
        self.0
    }
    fn end(&self) -> Time {
        self.1
    }
    fn job(&self) -> JobId {
        self.2
    }
}

impl Interval for (Time, Time, JobId, u64, u64) {
    fn start(&self) -> Time {
        self.0
    }
    fn end(&self) -> Time {
        self.1
    }
    fn job(&self) -> JobId {
        self.2
    }
}

/// Whether a node satisfies a job's GPU model, memory and feature constraints.
pub fn serves(n: &ordo_core::GpuNeeds, node: &ordo_core::NodeSpec) -> bool {
    let model = node.gpu_model.as_deref().map(str::to_ascii_lowercase);
    (n.models.is_empty() || model.as_ref().is_some_and(|m| n.models.iter().any(|x| x.eq_ignore_ascii_case(m))))
        && (n.min_mem_mib == 0 || node.gpu_mem_mib.is_some_and(|m| m >= n.min_mem_mib))
        && n.features.iter().all(|f| node.features.iter().any(|x| x.eq_ignore_ascii_case(f)))
}

/// A job's size in thousandths of a GPU: its share if fractional, else 1000 per GPU.
pub fn milli_of(j: &ordo_core::Job) -> u64 {
    j.share_milli().map_or(j.gpus as u64 * 1000, u64::from)
}

/// Checks a run's output against the invariants in docs/ARCHITECTURE.md: every job that could
/// fit ran to completion exactly once; it never ran before its submit; its runs do not overlap
/// and their useful time (each restart loses `overhead` first) adds up to its run time; each run
/// holds exactly the GPUs it asked for; no GPU was held by two whole-GPU jobs at once and no
/// GPU's shares add up to more than 1000 thousandths at any instant; no node ran over its
/// GPUs, or over its CPUs or memory where it models them (a job holding `k` of its `g` GPUs on
/// a node takes `ceil(cpus * k / g)` CPUs and `ceil(mem * k / g)` MiB there, all of them on a
/// single node).
pub fn validate(w: &Workload, cluster: &ClusterSpec, out: &SimOutput, overhead: Time) -> Result<(), String> {
    validate_with(w, cluster, out, overhead, &ordo_core::Speeds::default())
}

/// [`validate`] for a run with a speed matrix: each run's work counts at the speed of the
/// slowest GPU model it held (within a millisecond per run of rounding), and a job that
/// constrains its GPUs ran only on nodes that satisfy it.
pub fn validate_with(
    w: &Workload,
    cluster: &ClusterSpec,
    out: &SimOutput,
    overhead: Time,
    speeds: &ordo_core::Speeds,
) -> Result<(), String> {
    validate_preemption(w, cluster, out, overhead, speeds, &PreemptionRules::default())
}

/// [`validate_with`] for a run whose jobs may lose work at a preemption (`rules`, the run's
/// [`SimConfig::preemption`]): the work of each run that survives under its job's checkpoint
/// rule, plus its last run's, adds up to its run time; a job that restarts from zero counts
/// its last run only. Also checks `max_preemptions`.
pub fn validate_preemption(
    w: &Workload,
    cluster: &ClusterSpec,
    out: &SimOutput,
    overhead: Time,
    speeds: &ordo_core::Speeds,
    rules: &PreemptionRules,
) -> Result<(), String> {
    let mut seen = vec![false; w.jobs.len()];
    // (node, gpu) -> intervals (start, end, job, thousandths) during which it was held.
    type Held = BTreeMap<(u32, u32), Vec<(Time, Time, JobId, u64)>>;
    let mut per_gpu: Held = BTreeMap::new();
    // node -> intervals (start, end, job, cpus, MiB) on nodes that model CPUs or memory.
    type NodeHeld = BTreeMap<u32, Vec<(Time, Time, JobId, u64, u64)>>;
    let mut per_node: NodeHeld = BTreeMap::new();
    let detailed = cluster.nodes.iter().any(|n| n.cpus.is_some() || n.mem_mib.is_some());
    for r in &out.records {
        let j = w.jobs.get(r.job.idx()).ok_or_else(|| format!("record for unknown job {}", r.job))?;
        if std::mem::replace(&mut seen[r.job.idx()], true) {
            return Err(format!("job {} ran twice", r.job));
        }
        let (first, last) = match (r.segments.first(), r.segments.last()) {
            (Some(f), Some(l)) => (f, l),
            _ => return Err(format!("job {} has no run", r.job)),
        };
        if first.start < j.submit || r.start != first.start || r.end != last.end {
            return Err(format!("job {}: runs from {} to {}, submitted {}", r.job, first.start, last.end, j.submit));
        }
        if r.segments.len() != r.preemptions as usize + 1 {
            return Err(format!("job {}: {} runs but {} preemptions", r.job, r.segments.len(), r.preemptions));
        }
        if let Some(m) = rules.max_preemptions.filter(|&m| r.preemptions > m) {
            return Err(format!("job {} was preempted {} times, at most {m} allowed", r.job, r.preemptions));
        }
        let rule = rules.checkpoint.of(j.queue.as_deref());
        let mut useful = 0;
        let mut useful_base = 0f64;
        let class = j.needs.as_ref().and_then(|n| n.class.as_deref());
        for (i, seg) in r.segments.iter().enumerate() {
            if seg.end < seg.start || (i > 0 && seg.start < r.segments[i - 1].end) {
                return Err(format!("job {}: runs overlap or go backwards", r.job));
            }
            let lost = if i == 0 { 0 } else { overhead + rule.extra_overhead() };
            // The work of this run that counts: all of it in the last run, what the job's
            // checkpoint rule keeps in a preempted one (nothing, and nothing before either, for
            // a job that restarts from zero).
            let ran = (seg.end - seg.start - lost).max(0);
            let kept = if i + 1 == r.segments.len() { Some(ran) } else { rule.kept(ran) };
            if kept.is_none() {
                useful = 0;
                useful_base = 0.0;
            }
            let kept = kept.unwrap_or(0);
            useful += kept;
            if !speeds.is_empty() {
                let s = seg
                    .gpu_ids
                    .iter()
                    .map(|(n, _)| speeds.of(class, cluster.nodes.get(n as usize).and_then(|x| x.gpu_model.as_deref())))
                    .fold(f64::INFINITY, f64::min);
                let s = if s.is_finite() { s } else { 1.0 };
                useful_base += kept as f64 * s;
            }
            if let Some(n) = j.needs.as_ref().filter(|n| n.constrains()) {
                for (node, _) in seg.gpu_ids.iter() {
                    let spec = cluster
                        .nodes
                        .get(node as usize)
                        .ok_or_else(|| format!("job {} on unknown node {node}", r.job))?;
                    if !serves(n, spec) {
                        return Err(format!(
                            "job {} (needs {}) ran on node {}, which does not serve it",
                            r.job,
                            n.describe(),
                            spec.name
                        ));
                    }
                }
            }
            let n: usize = seg.gpu_ids.iter().map(|(_, ids)| ids.len()).sum();
            if n != j.gpus as usize {
                return Err(format!("job {} got {n} GPUs, asked for {}", r.job, j.gpus));
            }
            let share = milli_of(j).min(1000);
            let demand = ordo_core::Demand::new(j.gpus, j.gpu_milli, j.cpus.unwrap_or(0), j.mem_mib.unwrap_or(0));
            if j.gpus == 0 && (demand.cpus > 0 || demand.mem_mib > 0) && detailed && seg.gpu_ids.len() != 1 {
                return Err(format!("job {} asks CPUs or memory but ran on {} nodes", r.job, seg.gpu_ids.len()));
            }
            for (node, ids) in &seg.gpu_ids {
                if seg.end > seg.start {
                    let (c, m) = demand.per_node(ids.len() as u32);
                    per_node.entry(node).or_default().push((seg.start, seg.end, r.job, c as u64, m));
                }
                let cap = cluster
                    .nodes
                    .get(node as usize)
                    .map(|n| n.gpus)
                    .ok_or_else(|| format!("job {} on unknown node {node}", r.job))?;
                for &g in ids {
                    if g >= cap {
                        return Err(format!("job {} on GPU {g} of node {node}, which has {cap}", r.job));
                    }
                    if seg.end > seg.start {
                        per_gpu.entry((node, g)).or_default().push((seg.start, seg.end, r.job, share));
                    }
                }
            }
        }
        if speeds.is_empty() {
            if useful != j.runtime {
                return Err(format!("job {} did {useful} ms of work, its run time is {}", r.job, j.runtime));
            }
        } else {
            let base = match j.needs.as_ref().and_then(|n| n.measured_on.as_deref()) {
                Some(m) => (j.runtime as f64 * speeds.of(class, Some(m))).round(),
                None => j.runtime as f64,
            };
            let slack = r.segments.len() as f64 * 2.0 * speeds.max() + 1.0;
            if (useful_base - base).abs() > slack {
                return Err(format!("job {} did {useful_base:.0} ms of base work, its base run time is {base}", r.job));
            }
        }
    }
    for rej in out.rejected.iter().chain(&out.never_satisfied) {
        if std::mem::replace(&mut seen[rej.job.idx()], true) {
            return Err(format!("job {} ran, or was rejected or never satisfied, twice", rej.job));
        }
    }
    // Dependencies: a job runs only after every job it waits on ended the way it wants (a job
    // never run counts as ended unsuccessfully, before anything that waits on it); a job never
    // run waits on one that ended the wrong way, or on one never run itself (a chain or cycle).
    let mut end_of: HashMap<JobId, (Time, bool)> =
        out.records.iter().map(|r| (r.job, (r.end, !w.jobs[r.job.idx()].failed))).collect();
    let never_run: BTreeSet<JobId> = out.rejected.iter().chain(&out.never_satisfied).map(|r| r.job).collect();
    end_of.extend(never_run.iter().map(|&j| (j, (Time::MIN, false))));
    for r in &out.records {
        for d in &w.jobs[r.job.idx()].after {
            match end_of.get(&d.job) {
                Some(&(end, ok)) if end <= r.start && d.kind.met_by(ok) => {}
                Some(&(end, ok)) => {
                    return Err(format!(
                        "job {} started at {} but its {} dependency on job {} ended at {end} (successfully: {ok})",
                        r.job, r.start, d.kind, d.job
                    ))
                }
                None => return Err(format!("job {} ran but job {} it waits on ({}) never ran", r.job, d.job, d.kind)),
            }
        }
    }
    let never: BTreeSet<JobId> = out.never_satisfied.iter().map(|r| r.job).collect();
    for n in &out.never_satisfied {
        let deps = &w.jobs[n.job.idx()].after;
        let broken =
            deps.iter().any(|d| never.contains(&d.job) || end_of.get(&d.job).is_none_or(|&(_, ok)| !d.kind.met_by(ok)));
        if !broken {
            return Err(format!("job {} was reported never satisfied, but its dependencies were all met", n.job));
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(format!("job {i} neither ran nor was rejected"));
    }
    for ((node, g), iv) in per_gpu {
        let (t, who) = peak_over(&iv, |x| x.3, 1000)?;
        if let Some(t) = t {
            return Err(format!(
                "GPU {g} of node {node} held by jobs {who} at once at t={t} ms (over 1000 thousandths)"
            ));
        }
    }
    for (node, iv) in per_node {
        let spec = &cluster.nodes[node as usize];
        for (what, cap, f) in [
            ("CPUs", spec.cpus.map(u64::from), (|x: &(Time, Time, JobId, u64, u64)| x.3) as fn(&_) -> u64),
            ("MiB of memory", spec.mem_mib, |x| x.4),
        ] {
            let Some(cap) = cap else { continue };
            let (t, who) = peak_over(&iv, f, cap)?;
            if let Some(t) = t {
                return Err(format!("node {node} ran over its {cap} {what} at t={t} ms (jobs {who})"));
            }
        }
    }
    Ok(())
}
