//! The scheduler: waiting and running jobs, free GPUs, and `schedule(now) -> Plan`.
//! Proposing a plan (`&self`) is separate from committing it (`start`, `finish`), as in Nomad:
//! the simulator, the server and the Slurm driver each apply plans their own way.

use crate::capacity::{Allocation, Demand, Placement};
use crate::gpuids::GpuIds;
use crate::model::{ClusterSpec, JobId};
use crate::policy::{Backfill, PolicySpec};
use crate::pools::{scaled, Elig, Pools};
use crate::profile::{Held, Profile};
use crate::quota::PassUse;
use crate::speed::{ModelPick, Speeds};
use crate::sumset::SumSet;
use crate::time::Time;
use crate::whatif::{Scratch, WhatIf};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound::{Excluded, Included};

/// A fast, fixed hasher for job ids: deterministic iteration order across runs and processes
/// (std's default hasher is seeded randomly) and much cheaper than SipHash on small keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHash(u64);

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by job id with [`IdHash`].
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHash>>;

/// What the scheduler needs to know about a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobReq {
    /// Job id (unique among jobs given to this scheduler).
    pub id: JobId,
    /// Submit time.
    pub submit: Time,
    /// GPUs requested.
    pub gpus: u32,
    /// The run-time estimate the policy may use (user estimate, or true run time as an oracle).
    pub estimate: Time,
    /// User index (for fairness and priority policies).
    pub user: u32,
    /// Group index.
    pub group: u32,
    /// Static priority (higher first where a policy reads it, e.g. `priority`'s QOS factor).
    pub priority: i64,
    /// For a job that asks a fraction of one GPU (`gpus == 1`): its share in thousandths
    /// (1..=999). Several such jobs share one GPU while their shares add up to at most 1000.
    pub gpu_milli: Option<u32>,
    /// CPU cores asked (0: not asked). Limits placement where nodes model CPUs.
    pub cpus: u32,
    /// Memory asked in MiB (0: not asked). Limits placement where nodes model memory.
    pub mem_mib: u64,
    /// A gang's shape: its GPUs split evenly over exactly this many nodes, all started at once
    /// (consolidated placement; see [`Demand::nodes`]). 0: the placement decides.
    pub nodes: u32,
    /// The job array it belongs to (0: none), for the array's limit on running elements
    /// ([`Scheduler::set_array_limit`]).
    pub array: u32,
    /// Which node pools it may use and its speed row ([`Scheduler::eligibility`]); `Elig::ANY`
    /// by default.
    pub elig: Elig,
    /// The topology level its nodes must or should share ([`Scheduler::topology_need`]);
    /// `TopoNeed::NONE` by default.
    pub topo: crate::topology::TopoNeed,
    /// Its row of the topology's slowdown factors ([`Scheduler::spread_row`]): a gang placed
    /// across units is planned to end as late as the slowdown makes it. 0 (the default row)
    /// by default.
    pub spread_row: u8,
}

impl JobReq {
    /// A whole-GPU request with user and group 0 and no CPU or memory ask.
    pub fn new(id: JobId, submit: Time, gpus: u32, estimate: Time) -> Self {
        JobReq {
            id,
            submit,
            gpus,
            estimate,
            user: 0,
            group: 0,
            priority: 0,
            gpu_milli: None,
            cpus: 0,
            mem_mib: 0,
            nodes: 0,
            array: 0,
            elig: Elig::ANY,
            topo: crate::topology::TopoNeed::NONE,
            spread_row: 0,
        }
    }

    /// What placement must find for it.
    #[inline]
    pub fn demand(&self) -> Demand {
        Demand::new(self.gpus, self.gpu_milli, self.cpus, self.mem_mib)
            .on_nodes(self.nodes)
            .within(self.elig)
            .with_topo(self.topo)
    }
}

/// How far a job has got: what it has run so far (across preemptions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Wall time run so far, not counting the current run.
    pub executed: Time,
    /// Attained service so far (GPUs x time run), GPU-milliseconds, not counting the current run.
    pub attained: i64,
    /// When it last became waiting (submit, or its last preemption).
    pub waiting_since: Time,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Of `executed`, the time whose work preemptions lost (jobs that restart from zero or from
    /// an older checkpoint, [`crate::checkpoint`]): the work done is `executed - lost`.
    pub lost: Time,
    /// LAS: attained service and executed time at the last starvation promotion (service below
    /// these does not count towards the queue).
    pub las_base: (i64, Time),
    /// LAS: when it entered its current queue (as far as recorded at the last commit).
    pub queue_entry: Time,
    /// LAS: time spent waiting in a lower queue since the last promotion (before the current
    /// wait).
    pub starved: Time,
}

/// A decision to start a job now on the given GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Where it goes.
    pub alloc: Allocation,
}

/// Why a waiting job did not start. Every "no" is a value the CLI, the audit log and
/// `explain` can show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// The first job in order that does not fit: not enough free GPUs (or no node that holds it).
    Resources {
        /// GPUs it needs.
        need: u32,
        /// GPUs free in the cluster.
        free: u64,
    },
    /// Strict order: it waits behind a job that does not fit.
    Priority {
        /// The blocked job ahead of it.
        behind: JobId,
    },
    /// It fits now, but starting it would delay the reservation of an earlier job.
    Reserved {
        /// The job holding the reservation.
        for_job: JobId,
        /// When that reservation starts.
        until: Time,
    },
    /// The first job in order that does not fit where nodes' shared GPUs, CPUs or memory decide
    /// (clusters that model them): why, in words (e.g. "not enough free CPU on any node that
    /// has 2 free GPUs").
    NodeFit {
        /// GPUs it needs (1 for a fractional job).
        need: u32,
        /// Why no node holds it now.
        why: String,
    },
    /// It does not fit now (or only at the cost of an earlier reservation); it holds its own
    /// reservation to start at `start` (conservative backfill).
    Reservation {
        /// Reserved start time (by estimates).
        start: Time,
    },
    /// Preemptive policies: jobs ahead of it by the policy's priority hold the GPUs it needs.
    Outranked {
        /// GPUs it needs.
        need: u32,
    },
    /// The first job in order that does not fit because of what it accepts (GPU model, memory,
    /// features) while GPUs it does not accept are free: in words, e.g. "needs 4 GPUs of a100:
    /// 2 free there; 8 free GPUs of v100 do not qualify".
    Constraint {
        /// GPUs it needs.
        need: u32,
        /// What it needs and what is free that does not qualify.
        why: String,
    },
    /// Its user, group or array is at a limit ([`crate::Quotas`], an array's `%N`): it is
    /// skipped and blocks no one.
    Quota {
        /// Whose limit.
        scope: crate::quota::QuotaScope,
        /// The user, group or array index.
        id: u32,
        /// What that owner holds now (GPUs; running elements for an array), this pass's starts
        /// included.
        holds: u64,
        /// The limit.
        limit: u64,
        /// What this job would add.
        need: u64,
        /// A limit on the GPUs of one model (`max_running_gpus_by_model`): that model; the job
        /// accepts no other model whose limit has room. `None`: the limit on all GPUs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
}

/// The scheduler's proposal for `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Jobs to start now, in the order the policy chose them.
    pub starts: Vec<Start>,
    /// For every job left waiting, in policy order, why (only when asked to explain).
    pub waiting: Vec<(JobId, Reason)>,
    /// Running jobs to stop and put back in the queue (preemptive policies), applied before
    /// the starts.
    pub preempt: Vec<JobId>,
    /// Ask to be called again at this time even if nothing happens (a job crosses a priority
    /// threshold, or a starvation guard fires).
    pub wake_at: Option<Time>,
}

/// Why a submission was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The job needs more GPUs than the cluster (or, consolidated, than it can ever hold).
    #[error("job {job} needs {gpus} GPUs but the cluster has {total}")]
    NeverFits {
        /// The job.
        job: JobId,
        /// GPUs asked for.
        gpus: u32,
        /// GPUs in the cluster.
        total: u64,
    },
    /// The job's share, CPUs or memory fit on no node of the cluster, even empty.
    #[error("job {job} can never be placed: {why}")]
    NeverPlaced {
        /// The job.
        job: JobId,
        /// Why no node can hold it.
        why: String,
    },
    /// The id is already known.
    #[error("job {0} was already submitted")]
    Duplicate(JobId),
}

/// Why a commit was refused (a caller bug, never user input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Not waiting.
    #[error("job {0} is not waiting")]
    NotWaiting(JobId),
    /// Not running.
    #[error("job {0} is not running")]
    NotRunning(JobId),
    /// Preempting is only for preemptive policies.
    #[error("job {0} cannot be preempted under a non-preemptive policy")]
    NotPreemptive(JobId),
    /// The allocation is not free or has the wrong size.
    #[error("allocation for job {0} is not free or does not match its GPU count")]
    BadAllocation(JobId),
}

#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) req: JobReq,
    pub(crate) start: Time,
    pub(crate) expected_end: Time,
    pub(crate) alloc: Allocation,
    gpu_ids: GpuIds,
}

pub(crate) type QueueKey = ((i64, i64), JobId);

/// `run_key_of`'s pool of a running job without GPUs, and of one over several pools.
const NO_POOL: u32 = u32::MAX;
const SPANNING: u32 = u32::MAX - 1;

/// EASY's backfill groups: (GPUs, gang nodes, pools accepted, speed row, estimate class). Jobs
/// of one group are placed alike (the pool a job gets depends on its pools and speed row).
pub(crate) type BucketKey = (u32, u32, u128, u16, u32);

/// A run of EASY groups: (GPUs, gang nodes, pools accepted, speed row).
pub(crate) type Prefix = (u32, u32, u128, u16);

/// The groups of one [`Prefix`], by estimate class, and the speed their jobs are planned at
/// (the slowest of the pools they accept for their row: fixed by the cluster).
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) speed: f64,
    pub(crate) classes: BTreeMap<u32, BTreeSet<(QueueKey, Time)>>,
}

/// A waiting job's EASY run.
/// The topology ask travels in the high byte of the prefix's gang nodes (a gang has fewer
/// than 2^24 nodes), so that jobs of one run are placed alike: [`prefix_demand`] reads it back.
fn prefix_of(r: &JobReq) -> Prefix {
    let t = &r.topo;
    let code = if t.level == u8::MAX { 0 } else { 1 + 2 * t.level as u32 + u32::from(t.required) };
    (r.gpus, r.nodes | (code << 24), r.elig.pools, r.elig.row)
}

/// The demand of a run's jobs from its prefix's GPUs and packed gang nodes ([`prefix_of`]).
#[inline]
fn prefix_demand(g: u32, packed: u32) -> Demand {
    let code = packed >> 24;
    let topo = if code == 0 {
        crate::topology::TopoNeed::NONE
    } else {
        crate::topology::TopoNeed { level: ((code - 1) / 2) as u8, required: (code - 1) % 2 == 1 }
    };
    Demand::gpus(g).on_nodes(packed & 0x00ff_ffff).with_topo(topo)
}

/// EASY on several count-only pools: the tail of a run of groups (one GPU count, gang, pools
/// and speed row; estimate classes from `from` on) whose every job runs past the reservation
/// and would be refused, parked until a start in pool `on`, where its jobs would go.
struct ParkedTail {
    prefix: (u32, u32, u128, u16),
    /// The run's index in the pass (see `easy_backfill_indexed`).
    pi: u32,
    from: u32,
    speed: f64,
    on: u32,
}

/// Conservative backfill's standing reservations: a profile of free GPUs over future time with
/// every running job (until its estimated end) and every waiting job's reservation taken out.
#[derive(Debug, Clone)]
struct Reservations {
    profile: Profile,
    /// Waiting job -> (reserved start, reserved end, what it holds in the profile).
    res: HashMap<JobId, (Time, Time, Held)>,
    /// (reserved start, queue key, job): which jobs are due, in policy order among equals.
    by_start: BTreeSet<(Time, QueueKey)>,
}

/// The waiting jobs of one `priority` class, in (submit, id) order.
pub(crate) type PriorityClass = BTreeMap<(Time, JobId), JobReq>;

/// Scheduler state for one cluster under one policy.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pub(crate) policy: PolicySpec,
    pub(crate) cap: Pools,
    /// Relative speeds of job classes on GPU models (rows for [`Scheduler::eligibility`]).
    speeds: std::sync::Arc<Speeds>,
    /// `owner[node][gpu]`: which job holds that GPU.
    owner: Vec<Vec<Option<JobId>>>,
    pub(crate) queue: BTreeMap<QueueKey, JobReq>,
    pub(crate) waiting: HashMap<JobId, (i64, i64)>,
    pub(crate) running: HashMap<JobId, Running>,
    /// Running jobs by expected end, each with its GPUs and its pool (EASY's shadow under
    /// pooled placement reads only the count, per pool, without looking the job up).
    pub(crate) by_end: BTreeMap<(Time, JobId), (u32, u32)>,
    /// Progress of every waiting or running job.
    pub(crate) progress: HashMap<JobId, Progress>,
    /// What finished jobs taught (for policies that learn service distributions).
    pub(crate) history: crate::dynamic::History,
    /// Standing reservations (conservative backfill only).
    cons: Option<Reservations>,
    /// Preemptive orders: a job is not preempted before its current run is this old.
    pub(crate) min_run: Time,
    /// Preemptive orders: a job preempted this many times is not preempted again (it keeps its
    /// GPUs until it ends); `None`: no limit.
    pub(crate) max_preemptions: Option<u32>,
    /// Preemptive orders: jobs whose runs are protected longer than `min_run` (until their
    /// first checkpoint, or longer after each restart from zero; set by the caller).
    pub(crate) run_floor: HashMap<JobId, Time>,
    /// Waiting jobs sorted by their dynamic key, kept between passes when those keys are fixed
    /// while a job waits (see `waiting_keys_static`), with each job's key.
    /// Grouped by (GPU count, pools accepted), so a pass can skip every group larger than the
    /// GPUs left (in its pools, on a cluster of several).
    pub(crate) dyn_wait: BTreeMap<(u32, u128), BTreeSet<(crate::dynamic::Key, JobId)>>,
    pub(crate) dyn_key: HashMap<JobId, crate::dynamic::Key>,
    /// Running jobs by their stored key (where waiting keys are kept sorted) with their GPUs,
    /// so that a pass can sum the GPUs of a range of them; the stored key, until when it holds
    /// and the pool set that holds it (`NO_POOL`, `SPANNING`), and those validity ends in time
    /// order (a key that never expires is not among them).
    pub(crate) run_keys: SumSet<(crate::dynamic::Key, JobId)>,
    pub(crate) run_key_of: HashMap<JobId, (crate::dynamic::Key, Time, u32)>,
    pub(crate) run_expiry: BTreeSet<(Time, JobId)>,
    /// On a cluster of several pools: `run_keys` split by the pool that holds each job's GPUs
    /// (`run_keys_pool[p]`; empty on one pool), and how many stored running jobs hold GPUs of
    /// more than one pool (then the split does not describe them, and passes take the general
    /// path).
    pub(crate) run_keys_pool: Vec<SumSet<(crate::dynamic::Key, JobId)>>,
    pub(crate) run_spanning: usize,
    /// Waiting jobs by (GPUs, gang nodes, pools, speed row), then estimate class: lets EASY
    /// skip whole groups of jobs that cannot backfill (too big for the free GPUs, or too long
    /// for the head's reservation), and a run's past classes at once. Each entry carries the
    /// job's estimate, so the scan rejects a job that would run past the reservation without
    /// looking it up.
    pub(crate) buckets: BTreeMap<Prefix, Run>,
    /// Groups in `buckets` (estimate classes of all runs).
    pub(crate) n_groups: usize,
    /// `priority`: waiting jobs by (user, GPUs, static priority); `qssf`: by (user, group, 0).
    /// Each class in (submit, id) order, which is its key order at any instant (merged lazily
    /// by `schedule_dynamic`).
    pub(crate) by_class: BTreeMap<(u32, u32, i64), PriorityClass>,
    /// Per-user and per-group accounting for `priority` and `qssf`.
    pub(crate) accounts: crate::dynamic::Accounts,
    /// `+maxwait`: waiting jobs by the instant their total wait reaches the guard (fixed while
    /// a job waits), so a pass finds the next promotion without looking at every job.
    pub(crate) wait_due: BTreeSet<(Time, JobId)>,
    /// `srtf+maxwait`, `las+maxwait` (see `Scheduler::guard_indexed`): `wait_due` split into
    /// jobs that never ran (due at `submit + max_wait`, so in submit order) and jobs that ran
    /// before, with each waiting job's due instant.
    pub(crate) due_fresh: BTreeSet<(Time, JobId)>,
    pub(crate) due_resumed: BTreeSet<(Time, JobId)>,
    pub(crate) due_of: HashMap<JobId, Time>,
    /// With those indexes, `dyn_wait` holds only the jobs not yet past the guard at this
    /// instant (`advance` takes out the ones that passed it since), so a pass does not skip
    /// over every overdue job of every group (under overload most of the queue).
    pub(crate) overdue_until: Time,
    /// `las` with promotion (see `Scheduler::promote_indexed`): a waiting job's key changes
    /// once while it waits, when its promotion falls due (fixed when it starts waiting). The
    /// waiting jobs that can be promoted, by the instant the general pass wakes for that
    /// (`promo_wake`), with the instant they are promoted and that wake (`promo_of`); `promoted` holds by
    /// their key the waiting jobs promoted by `promoted_until` (`advance` moves them there
    /// from `dyn_wait`), so `dyn_wait` and `promoted` together hold every waiting job once.
    pub(crate) promo_wake: BTreeSet<(Time, JobId)>,
    pub(crate) promo_of: HashMap<JobId, (Time, Time)>,
    pub(crate) promoted: BTreeSet<(crate::dynamic::Key, JobId)>,
    pub(crate) promoted_until: Time,
    /// Copies of `cap` that passes change and roll back instead of cloning `cap`.
    pub(crate) scratch: Scratch,
    /// Quotas, array limits and shares, with what running jobs hold against them.
    pub(crate) limits: crate::quota::Limits,
    /// `las:...,compat=tiresias`: the Tiresias simulator's queue lists (`tiresias.rs`).
    pub(crate) tiresias: crate::tiresias::Lists,
    /// The topology gangs are placed by ([`Scheduler::set_topology`]), if any.
    pub(crate) topology: Option<std::sync::Arc<crate::topology::Topology>>,
}

/// Estimate class: jobs in class `c >= 1` have estimates in `[2^(c-1), 2^c)` ms.
fn est_class(est: Time) -> u32 {
    64 - (est.max(1) as u64).leading_zeros()
}

/// Smallest estimate in class `c`.
fn class_min(c: u32) -> Time {
    1i64 << (c - 1).min(62)
}

impl Scheduler {
    /// A scheduler for an empty cluster whose GPUs are all alike to it: GPU models, memory and
    /// features are not modelled (the cluster is one pool), as before typed clusters. See
    /// [`Scheduler::typed`] for a cluster of several kinds.
    pub fn new(cluster: &ClusterSpec, placement: Placement, policy: PolicySpec) -> Self {
        Self::build(cluster, placement, policy, &Speeds::default(), ModelPick::default(), false)
            .expect("one kind of node is one pool")
    }

    /// A scheduler for an empty typed cluster: nodes grouped into pools by GPU model, GPU
    /// memory and features ([`crate::pools`]), job speeds from `speeds`, flexible jobs placed by
    /// `pick`. Errors when the cluster has too many kinds of node.
    pub fn typed(
        cluster: &ClusterSpec,
        placement: Placement,
        policy: PolicySpec,
        speeds: &Speeds,
        pick: ModelPick,
    ) -> Result<Self, String> {
        Self::build(cluster, placement, policy, speeds, pick, true)
    }

    fn build(
        cluster: &ClusterSpec,
        placement: Placement,
        policy: PolicySpec,
        speeds: &Speeds,
        pick: ModelPick,
        by_kind: bool,
    ) -> Result<Self, String> {
        let gpus: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
        // Per-node CPUs and memory (and later fractional GPUs) cost extra state: only clusters
        // that model them pay it.
        let detailed = cluster.nodes.iter().any(|n| n.cpus.is_some() || n.mem_mib.is_some());
        let cap = Pools::build(cluster, placement, detailed, speeds, pick, by_kind)?;
        let standing = policy.order.is_static() && policy.max_wait.is_none();
        let cons = (policy.backfill == Backfill::Conservative && standing).then(|| Reservations {
            profile: Profile::new(0, &cap),
            res: HashMap::default(),
            by_start: BTreeSet::new(),
        });
        let run_keys_pool = if cap.is_single() { Vec::new() } else { vec![SumSet::default(); cap.keys().len()] };
        let mut history = crate::dynamic::History::default();
        if let crate::policy::Order::Gittins(gp) = &policy.order {
            history.set_window(gp.window);
        }
        Ok(Scheduler {
            policy,
            cap,
            speeds: std::sync::Arc::new(speeds.clone()),
            owner: gpus.iter().map(|&g| vec![None; g as usize]).collect(),
            queue: BTreeMap::new(),
            waiting: HashMap::default(),
            running: HashMap::default(),
            by_end: BTreeMap::new(),
            progress: HashMap::default(),
            history,
            cons,
            min_run: 0,
            max_preemptions: None,
            run_floor: HashMap::default(),
            dyn_wait: BTreeMap::new(),
            by_class: BTreeMap::new(),
            dyn_key: HashMap::default(),
            run_keys: SumSet::default(),
            run_key_of: HashMap::default(),
            run_expiry: BTreeSet::new(),
            run_keys_pool,
            run_spanning: 0,
            buckets: BTreeMap::new(),
            n_groups: 0,
            wait_due: BTreeSet::new(),
            due_fresh: BTreeSet::new(),
            due_resumed: BTreeSet::new(),
            due_of: HashMap::default(),
            overdue_until: Time::MIN,
            promo_wake: BTreeSet::new(),
            promo_of: HashMap::default(),
            promoted: BTreeSet::new(),
            promoted_until: Time::MIN,
            accounts: crate::dynamic::Accounts::default(),
            scratch: Scratch::default(),
            limits: crate::quota::Limits::default(),
            tiresias: crate::tiresias::Lists::default(),
            topology: None,
        })
    }

    /// Places gangs by `topology` from now on (consolidated placement on count-only pools:
    /// [`crate::topology`]): a gang goes into the lowest level with a unit that holds it, and a
    /// job that requires a level waits for a unit of it. Call it before the first job is
    /// submitted. Errors when the topology does not describe the cluster's nodes.
    pub fn set_topology(&mut self, topology: std::sync::Arc<crate::topology::Topology>) -> Result<(), String> {
        if !self.queue.is_empty() || !self.running.is_empty() {
            return Err("the topology is set before any job is submitted".to_string());
        }
        let n = self.cap.cap_per_node().len();
        if topology.nodes() != n {
            return Err(format!("the topology describes {} nodes; the cluster has {n}", topology.nodes()));
        }
        self.cap.set_topology(&topology);
        if let Some(c) = self.cons.as_mut() {
            c.profile = Profile::new(0, &self.cap);
        }
        self.scratch.reset();
        self.topology = Some(topology);
        Ok(())
    }

    /// The topology gangs are placed by, if any.
    pub fn topology(&self) -> Option<&crate::topology::Topology> {
        self.topology.as_deref()
    }

    /// A job's topology ask resolved against the levels ([`JobReq::topo`]); an error in words
    /// when the cluster has no such level. Without a topology every ask is ignored.
    pub fn topology_need(&self, ask: &crate::topology::TopoAsk) -> Result<crate::topology::TopoNeed, String> {
        match &self.topology {
            Some(t) => t.need(ask),
            None => Ok(crate::topology::TopoNeed::NONE),
        }
    }

    /// A job's row of the topology's slowdown factors ([`JobReq::spread_row`]) by its class
    /// ([`crate::GpuNeeds::class`]); 0 without a topology.
    pub fn spread_row(&self, class: Option<&str>) -> u8 {
        self.topology.as_ref().map_or(0, |t| t.slowdown.row_index(class))
    }

    /// How fast `req` runs on `alloc`: the speed of its slowest GPU model there, divided by the
    /// topology's slowdown for the levels `alloc` crosses (a gang spread over several units).
    pub(crate) fn run_speed(&self, req: &JobReq, alloc: &Allocation) -> f64 {
        self.cap.speed_on(req.elig.row, alloc) / spread_factor(self.topology.as_deref(), req, alloc)
    }

    /// [`easy_backfill_one`] for `req`, planned on the slowest pool it accepts and, on a
    /// topology, on the nodes it would get.
    fn easy_backfill(
        &self,
        req: &JobReq,
        now: Time,
        head: Demand,
        shadow: Time,
        cap: &mut Pools,
        shadow_cap: &mut Pools,
    ) -> Option<Allocation> {
        easy_backfill_one(req, self.plan_estimate(req), now, head, shadow, cap, shadow_cap, self.topology.as_deref())
    }

    /// Where a job with `needs` may run ([`JobReq::elig`]): the pools that satisfy its models,
    /// memory and features, and its row in the speed matrix. An error in words when no node
    /// of the cluster satisfies them (the job can never run).
    pub fn eligibility(&self, needs: &crate::model::GpuNeeds) -> Result<Elig, String> {
        self.cap.eligible(needs, self.speeds.row_of(needs.class.as_deref()))
    }

    /// A waiting job's key under a static order; `tput` reads the job's gain from the fastest
    /// GPU it accepts over the slowest (in thousandths, most first).
    pub(crate) fn static_key(&self, req: &JobReq) -> (i64, i64) {
        match self.policy.order {
            crate::policy::Order::Tput => (-((self.cap.gain(req.demand()) * 1000.0).round() as i64), req.submit),
            ref o => o.key(req.submit, req.gpus, req.estimate),
        }
    }

    /// The speed matrix in force.
    pub fn speeds(&self) -> &Speeds {
        &self.speeds
    }

    /// The estimate planning uses for a waiting job: on the slowest GPU it accepts, so that a
    /// backfilled job is never planned shorter than it may run.
    #[inline]
    pub(crate) fn plan_estimate(&self, req: &JobReq) -> Time {
        planned(&self.cap, req)
    }

    /// The policy in force.
    pub fn policy(&self) -> &PolicySpec {
        &self.policy
    }

    /// Preemptive orders: protects a job from preemption until its current run has lasted
    /// `min_run` (set it to at least twice the time a restart loses, so every run does some work).
    pub fn set_min_run(&mut self, min_run: Time) {
        self.min_run = min_run.max(0);
    }

    /// Preemptive orders: a job preempted `max` times keeps its GPUs from its next start until
    /// it ends (a bound on thrashing for jobs that lose work at each preemption); `None`: no
    /// limit (the default).
    pub fn set_max_preemptions(&mut self, max: Option<u32>) {
        self.max_preemptions = max;
    }

    /// Preemptive orders: protects `job`'s runs (this one, if it runs, and the next ones)
    /// until each has lasted `floor`, or `min_run` if longer; 0 removes the protection.
    pub fn set_run_floor(&mut self, job: JobId, floor: Time) {
        if floor > 0 {
            self.run_floor.insert(job, floor);
        } else {
            self.run_floor.remove(&job);
        }
    }

    /// Whether some guard beyond the plain order protects running jobs (fast paths that rank
    /// running jobs in runs do not apply).
    pub(crate) fn guards_runs(&self) -> bool {
        self.min_run > 0 || self.max_preemptions.is_some() || !self.run_floor.is_empty()
    }

    /// Whether a running job may not be preempted at `now`: its run is younger than `min_run`
    /// or its own floor (`set_run_floor`), or it has been preempted `max_preemptions` times.
    pub(crate) fn pinned(&self, id: JobId, now: Time) -> bool {
        let floor = self.run_floor.get(&id).map_or(self.min_run, |&f| f.max(self.min_run));
        (floor > 0 && self.running.get(&id).is_some_and(|r| now - r.start < floor))
            || self.max_preemptions.is_some_and(|m| self.progress.get(&id).is_some_and(|p| p.preemptions >= m))
    }

    /// Sets the quotas and shares (replacing any earlier ones); call it before submitting jobs.
    /// Jobs running now count against the new limits at once; none is stopped for it. Under
    /// conservative backfill, standing reservations do not know quotas: with a GPU limit (or
    /// an array limit) set, every pass plans afresh. Limits by GPU model
    /// ([`crate::Quotas::user_model_gpus`]) count the GPUs of each pool a running job holds, and
    /// narrow the pools a waiting job may use in a pass to those whose model has room for it.
    pub fn set_quotas(&mut self, q: crate::Quotas) {
        let gpu_limits = q.limits_gpus();
        self.limits.set_quotas(q, &self.cap, self.running.values().map(|r| (&r.req, &r.alloc)));
        if gpu_limits {
            self.cons = None;
        }
    }

    /// The quotas and shares in force.
    pub fn quotas(&self) -> &crate::Quotas {
        &self.limits.q
    }

    /// Limits a job array to `max_running` elements running at once (`None`: no limit). Jobs
    /// carry their array in [`JobReq::array`].
    pub fn set_array_limit(&mut self, array: u32, max_running: Option<u32>) {
        if max_running.is_some() {
            self.cons = None;
        }
        self.limits.set_array(array, max_running);
    }

    /// When `req` could never start under the limits by GPU model (each pool it accepts that
    /// could ever hold it is of a model whose limit for its user or group is below its GPUs):
    /// whose limit, and which.
    pub fn model_quota_never(&self, req: &JobReq) -> Option<(crate::QuotaScope, &crate::quota::ModelLimit)> {
        if !self.limits.q.limits_models() {
            return None;
        }
        let mut m = if req.elig.pools == 0 { self.cap.all_pools() } else { req.elig.pools };
        let mut pools = 0u128;
        while m != 0 {
            let p = 1u128 << m.trailing_zeros();
            if self.cap.can_ever_fit_for(Demand { pools: p, ..req.demand() }) {
                pools |= p;
            }
            m &= m - 1;
        }
        self.limits.q.model_never(req.user, req.group, req.gpus as u64, pools)
    }

    /// GPUs a user's running jobs hold (counted where quotas or array limits are tracked: always).
    pub fn user_gpus(&self, user: u32) -> u64 {
        self.limits.user_holds(user)
    }

    /// A job's progress (waiting or running jobs only).
    pub fn progress(&self, job: JobId) -> Option<Progress> {
        self.progress.get(&job).copied()
    }

    /// Free GPUs now.
    pub fn capacity(&self) -> &Pools {
        &self.cap
    }

    /// Number of waiting jobs.
    pub fn waiting_len(&self) -> usize {
        self.queue.len()
    }

    /// Whether `job` waits in the queue.
    pub fn is_waiting(&self, job: JobId) -> bool {
        self.waiting.contains_key(&job)
    }

    /// Number of running jobs.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// GPUs of the smallest waiting job, if any wait.
    pub fn waiting_ids_in_order(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queue.keys().map(|&(_, id)| id)
    }

    /// Why a gang job can never be placed, whatever runs: its GPUs do not split evenly.
    fn gang_refusal(req: &JobReq) -> Option<String> {
        (req.nodes > 0 && (req.gpus == 0 || !req.gpus.is_multiple_of(req.nodes) || req.demand().milli > 0)).then(|| {
            format!(
                "a gang of {} nodes needs whole GPUs in a multiple of {} (it asks {})",
                req.nodes, req.nodes, req.gpus
            )
        })
    }

    /// Whether [`Scheduler::submit`] takes a job of whole GPUs whatever runs: the cluster alone
    /// decides (enough GPUs, a gang that splits, empty nodes it fits). `false` for a job asking
    /// a share of a GPU, which `submit` judges only after the cluster starts tracking shares.
    pub fn accepts(&self, req: &JobReq) -> bool {
        req.demand().milli == 0
            && req.gpus as u64 <= self.cap.total()
            && Self::gang_refusal(req).is_none()
            && self.cap.can_ever_fit_for(req.demand())
    }

    /// Adds a waiting job at `now`. Refuses a job that can never fit. Under conservative
    /// backfill the job gets its reservation here: the earliest slot that delays no other.
    pub fn submit(&mut self, req: JobReq, now: Time) -> Result<(), SubmitError> {
        if req.gpus as u64 > self.cap.total() {
            return Err(SubmitError::NeverFits { job: req.id, gpus: req.gpus, total: self.cap.total() });
        }
        if self.waiting.contains_key(&req.id) || self.running.contains_key(&req.id) {
            return Err(SubmitError::Duplicate(req.id));
        }
        if let Some(why) = Self::gang_refusal(&req) {
            return Err(SubmitError::NeverPlaced { job: req.id, why });
        }
        if req.demand().milli > 0 && !self.cap.is_detailed() {
            self.make_detailed(now);
        }
        if !self.cap.can_ever_fit_for(req.demand()) {
            let why = self.cap.empty_like().why_not(req.demand());
            return Err(SubmitError::NeverPlaced { job: req.id, why });
        }
        self.refresh_run_keys(now);
        let key = self.static_key(&req);
        self.queue.insert((key, req.id), req);
        self.class_insert(&req);
        self.progress.insert(req.id, Progress { waiting_since: now, queue_entry: now, ..Progress::default() });
        self.tiresias_submit(req.id);
        self.bucket_insert(&req, key);
        self.waiting.insert(req.id, key);
        self.index_due(req.id, req.submit);
        self.index_waiting(req.id, now);
        self.account_submit(&req, now);
        if let Some(c) = &mut self.cons {
            c.profile.trim(now);
            c.reserve(now, (key, req.id), &req, planned(&self.cap, &req), self.topology.as_deref());
        }
        Ok(())
    }

    /// Commits a start decided by [`Scheduler::schedule`]: takes the GPUs and returns the GPU
    /// indices given on each node.
    pub fn start(&mut self, job: JobId, alloc: &Allocation, now: Time) -> Result<Vec<(u32, Vec<u32>)>, CommitError> {
        let ids = self.start_ids(job, alloc, now)?;
        Ok(ids.iter().map(|(n, g)| (n, g.to_vec())).collect())
    }

    /// [`Scheduler::start`], returning the GPU indices given on each node compactly (consecutive
    /// nodes with the same indices stored once): what the simulator keeps per run.
    pub fn start_ids(&mut self, job: JobId, alloc: &Allocation, now: Time) -> Result<GpuIds, CommitError> {
        self.start_inner(job, alloc, now, None)
    }

    /// [`Scheduler::start_ids`] on the very GPUs `held` names (on a count-only cluster, where
    /// the scheduler otherwise gives the lowest free ones): a job already running elsewhere,
    /// moved into this scheduler as it runs (a change of policy replayed midway). Refused with
    /// [`CommitError::BadAllocation`] when `held` does not match `alloc` or a GPU is taken.
    pub fn start_holding(
        &mut self,
        job: JobId,
        alloc: &Allocation,
        held: &GpuIds,
        now: Time,
    ) -> Result<GpuIds, CommitError> {
        if alloc.detail.is_none() {
            let fits = alloc.parts.iter().all(|&(n, k)| {
                let owners = self.owner.get(n as usize);
                held.iter().find(|(m, _)| *m == n).is_some_and(|(_, ids)| {
                    ids.len() == k as usize
                        && ids.iter().all(|&i| owners.and_then(|o| o.get(i as usize)).is_some_and(Option::is_none))
                })
            }) && held.iter().count() == alloc.parts.len();
            if !fits {
                return Err(CommitError::BadAllocation(job));
            }
        }
        self.start_inner(job, alloc, now, Some(held))
    }

    fn start_inner(
        &mut self,
        job: JobId,
        alloc: &Allocation,
        now: Time,
        held: Option<&GpuIds>,
    ) -> Result<GpuIds, CommitError> {
        let &key = self.waiting.get(&job).ok_or(CommitError::NotWaiting(job))?;
        let req = self.queue[&(key, job)];
        // A count-only allocation (built by a caller that does not track GPU indices) on a
        // detailed cluster: the lowest free GPUs of its nodes, with the job's CPUs and memory.
        let completed;
        let alloc = if self.cap.is_detailed() && alloc.detail.is_none() && !alloc.parts.is_empty() {
            completed = self.cap.complete(alloc, req.demand()).ok_or(CommitError::BadAllocation(job))?;
            &completed
        } else {
            alloc
        };
        if alloc.gpus() != req.gpus || !self.cap.can_take(alloc) || !matches_demand(&self.cap, alloc, req.demand()) {
            return Err(CommitError::BadAllocation(job));
        }
        self.refresh_run_keys(now);
        self.las_commit(job, now, true);
        self.tiresias_start(job, now);
        self.account_start(&req, now);
        self.limits.on_start(&req, alloc);
        self.unindex_waiting(job, key, &req);
        self.cap.take(alloc);
        self.scratch.apply(|c| c.take(alloc));
        // The reservation becomes the running job. If it starts off its reserved slot (the plan
        // was made afresh while a job overran its estimate), the standing reservations no longer
        // describe the future: rebuild them once the job is recorded as running.
        // A resumed job is expected to need what its estimate leaves after what it already ran,
        // at the speed of the GPUs it got (a reservation planned it on the slowest it accepts),
        // slowed by the topology where its nodes are spread over several units.
        let done = self.progress.get(&job).map_or(0, |p| p.executed - p.lost);
        let expected_end = now + scaled((req.estimate - done).max(1), self.run_speed(&req, alloc));
        let mut off_slot = false;
        if let Some(c) = &mut self.cons {
            if let Some((t0, t1, held)) = c.res.remove(&job) {
                c.by_start.remove(&(t0, (key, job)));
                off_slot = t0 != now || t1 != expected_end || held.differs(&self.cap, alloc);
            }
        }
        let mut gpu_ids = GpuIds::builder_for(alloc.parts.len(), alloc.gpus() as usize);
        if let Some(d) = &alloc.detail {
            // Detailed: the capacity chose the GPUs; whole ones get an owner, shared ones are
            // told apart by their used thousandths.
            for (p, &(n, _)) in alloc.parts.iter().enumerate() {
                if d.milli == 1000 {
                    for &i in &d.gpu_ids[p] {
                        self.owner[n as usize][i as usize] = Some(job);
                    }
                }
                gpu_ids.push(n, &d.gpu_ids[p]);
            }
        }
        let mut ids = Vec::new();
        for &(n, k) in alloc.parts.iter().filter(|_| alloc.detail.is_none()) {
            ids.clear();
            // The GPUs it already holds (checked free by `start_holding`).
            if let Some((_, given)) = held.and_then(|h| h.iter().find(|(m, _)| *m == n)) {
                for &i in given {
                    self.owner[n as usize][i as usize] = Some(job);
                }
                gpu_ids.push(n, given);
                continue;
            }
            for (i, slot) in self.owner[n as usize].iter_mut().enumerate() {
                if ids.len() == k as usize {
                    break;
                }
                if slot.is_none() {
                    *slot = Some(job);
                    ids.push(i as u32);
                }
            }
            debug_assert_eq!(ids.len(), k as usize);
            gpu_ids.push(n, &ids);
        }
        let gpu_ids = gpu_ids.finish();
        self.by_end.insert((expected_end, job), (req.gpus, self.cap.pool_of_alloc(alloc)));
        self.running
            .insert(job, Running { req, start: now, expected_end, alloc: alloc.clone(), gpu_ids: gpu_ids.clone() });
        self.store_run_key(job, now);
        if off_slot {
            self.rebuild_reservations(now);
        }
        Ok(gpu_ids)
    }

    /// Takes a waiting job out of every index of waiting jobs (the queue, its class, its
    /// backfill group, its dynamic key, its promotion and its guard): what starting it and
    /// withdrawing it share.
    fn unindex_waiting(&mut self, job: JobId, key: (i64, i64), req: &JobReq) {
        if let Some(k) = self.dyn_key.remove(&job) {
            let group = (req.gpus, req.elig.pools);
            if let Some(set) = self.dyn_wait.get_mut(&group) {
                set.remove(&(k, job));
                if set.is_empty() {
                    self.dyn_wait.remove(&group);
                }
            }
            self.promoted.remove(&(k, job));
        }
        if let Some((_, wake)) = self.promo_of.remove(&job) {
            self.promo_wake.remove(&(wake, job));
        }
        if let Some(w) = self.policy.max_wait {
            let executed = self.progress.get(&job).map_or(0, |p| p.executed);
            self.wait_due.remove(&(req.submit + executed + w, job));
            if let Some(due) = self.due_of.remove(&job) {
                self.due_fresh.remove(&(due, job));
                self.due_resumed.remove(&(due, job));
            }
        }
        self.waiting.remove(&job);
        self.queue.remove(&(key, job));
        self.class_remove(req);
        let b = prefix_of(req);
        let c = est_class(req.estimate);
        if let Some(run) = self.buckets.get_mut(&b) {
            if let Some(set) = run.classes.get_mut(&c) {
                set.remove(&((key, job), req.estimate));
                if set.is_empty() {
                    run.classes.remove(&c);
                    self.n_groups -= 1;
                    if run.classes.is_empty() {
                        self.buckets.remove(&b);
                    }
                }
            }
        }
    }

    /// Files a waiting job in its EASY group.
    fn bucket_insert(&mut self, req: &JobReq, key: (i64, i64)) {
        let b = prefix_of(req);
        let run = self.buckets.entry(b).or_insert_with(|| {
            let demand = Demand { pools: b.2, row: b.3, ..prefix_demand(b.0, b.1) };
            Run { speed: self.cap.slowest(demand), classes: BTreeMap::new() }
        });
        let set = run.classes.entry(est_class(req.estimate)).or_insert_with(|| {
            self.n_groups += 1;
            BTreeSet::new()
        });
        set.insert(((key, req.id), req.estimate));
    }

    /// Takes a waiting job out of the scheduler, as if it had never been submitted (it was
    /// cancelled, or held): O(log W) for the job's indexes, and under conservative backfill the
    /// standing reservations are made afresh in policy order (the job's slot is free for the
    /// others), as when a job ends before its estimate. What it
    /// attained before (a preempted job's service) is forgotten: to bring such a job back,
    /// replay it (submit, start and preempt at its past instants). Refused for a job that is
    /// not waiting.
    pub fn withdraw(&mut self, job: JobId, now: Time) -> Result<(), CommitError> {
        let &key = self.waiting.get(&job).ok_or(CommitError::NotWaiting(job))?;
        let req = self.queue[&(key, job)];
        self.refresh_run_keys(now);
        self.unindex_waiting(job, key, &req);
        self.progress.remove(&job);
        let mut held_slot = false;
        if let Some(c) = &mut self.cons {
            if let Some((t0, _, _)) = c.res.remove(&job) {
                c.by_start.remove(&(t0, (key, job)));
                held_slot = true;
            }
        }
        if held_slot {
            self.rebuild_reservations(now);
        }
        Ok(())
    }

    /// Commits a preemption decided by [`Scheduler::schedule`]: stops the running job, frees its
    /// GPUs and puts it back in the queue with its progress kept.
    pub fn preempt(&mut self, job: JobId, now: Time) -> Result<(), CommitError> {
        self.preempt_keeping(job, now, Some)
    }

    /// [`Scheduler::preempt`] for a job that may lose work (see [`crate::checkpoint`]):
    /// `kept(ran)` says how much of the `ran` ms its current run lasted survives (SRTF's
    /// estimate of the work left counts only that); `None`: it restarts from zero, losing every
    /// earlier run too. Executed time and attained service (LAS, waiting guards) count the
    /// whole run either way: it is the service the job received.
    pub fn preempt_keeping(
        &mut self,
        job: JobId,
        now: Time,
        kept: impl FnOnce(Time) -> Option<Time>,
    ) -> Result<(), CommitError> {
        if !self.policy.order.preemptive() {
            return Err(CommitError::NotPreemptive(job));
        }
        if !self.running.contains_key(&job) {
            return Err(CommitError::NotRunning(job));
        }
        self.refresh_run_keys(now);
        self.drop_run_key(job);
        self.las_commit(job, now, false);
        self.tiresias_preempt(job, now);
        let r = self.running.remove(&job).ok_or(CommitError::NotRunning(job))?;
        self.by_end.remove(&(r.expected_end, job));
        self.release(job, &r);
        self.account_stop(&r.req, now, None);
        self.limits.on_stop(&r.req, &r.alloc);
        let p = self.progress.entry(job).or_default();
        let ran = now - r.start;
        p.executed += ran;
        p.lost = match kept(ran) {
            Some(k) => p.lost + ran - k.clamp(0, ran),
            None => p.executed,
        };
        p.attained += r.req.gpus as i64 * (now - r.start);
        p.waiting_since = now;
        p.preemptions += 1;
        let key = self.static_key(&r.req);
        self.queue.insert((key, job), r.req);
        self.class_insert(&r.req);
        self.waiting.insert(job, key);
        self.bucket_insert(&r.req, key);
        self.index_due(job, r.req.submit);
        self.index_waiting(job, now);
        Ok(())
    }

    /// A waiting job's class in `by_class` (kept under `priority` and `qssf` only): the jobs
    /// whose keys differ only by submit time at any instant.
    fn class_of(&self, req: &JobReq) -> Option<(u32, u32, i64)> {
        match self.policy.order {
            // Every multifactor term but age is the user's, the size's or the static priority's.
            crate::policy::Order::Priority(_) => Some((req.user, req.gpus, req.priority)),
            // The prediction is the user's mean, else the group's, else everyone's.
            crate::policy::Order::Qssf => Some((req.user, req.group, 0)),
            _ => None,
        }
    }

    /// Adds a waiting job to its class (see `class_of`).
    fn class_insert(&mut self, req: &JobReq) {
        if let Some(c) = self.class_of(req) {
            self.by_class.entry(c).or_default().insert((req.submit, req.id), *req);
        }
    }

    /// Takes a job out of its class.
    fn class_remove(&mut self, req: &JobReq) {
        let Some(c) = self.class_of(req) else { return };
        if let Some(set) = self.by_class.get_mut(&c) {
            set.remove(&(req.submit, req.id));
            if set.is_empty() {
                self.by_class.remove(&c);
            }
        }
    }

    /// `+maxwait`: records when a waiting job (submitted at `submit`) becomes overdue: its total
    /// wait `now - submit - executed` reaches the guard at `submit + executed + max_wait`.
    fn index_due(&mut self, job: JobId, submit: Time) {
        if let Some(w) = self.policy.max_wait {
            let executed = self.progress.get(&job).map_or(0, |p| p.executed);
            let due = submit + executed + w;
            self.wait_due.insert((due, job));
            if self.guard_indexed() {
                self.due_of.insert(job, due);
                if executed == 0 {
                    self.due_fresh.insert((due, job));
                } else {
                    self.due_resumed.insert((due, job));
                }
            }
        }
    }

    /// Adds a waiting job to the sorted set of dynamic keys, where those are kept.
    fn index_waiting(&mut self, job: JobId, now: Time) {
        if !self.waiting_keys_indexed() && !self.promote_indexed() {
            return;
        }
        let req = self.queue[&(self.waiting[&job], job)];
        // Past the guard already (a job that ran because it was overdue): in neither set.
        let overdue = self.due_of.get(&job).is_some_and(|&due| due <= self.overdue_until);
        // Promoted already (it starved before it last ran), or due by the instant `advance`
        // reached: keyed as from its promotion on.
        let mut promoted = None;
        if let Some((at, wake)) = self.promotion(&req) {
            self.promo_of.insert(job, (at, wake));
            self.promo_wake.insert((wake, job));
            promoted = Some(at).filter(|&at| at <= now.max(self.promoted_until));
        }
        let k = self.unguarded_key(&req, promoted.map_or(now, |at| now.max(at)), false);
        self.dyn_key.insert(job, k);
        if !overdue {
            if promoted.is_some() {
                self.promoted.insert((k, job));
            } else {
                self.dyn_wait.entry((req.gpus, req.elig.pools)).or_default().insert((k, job));
            }
        }
    }

    /// `guard_indexed`: takes the jobs whose guard fell due since the last call out of
    /// `dyn_wait` (they rank by the guard now, read from `due_fresh` / `due_resumed`).
    fn drop_overdue(&mut self, now: Time) {
        if !self.guard_indexed() || now <= self.overdue_until {
            return;
        }
        let after = (self.overdue_until, JobId(u32::MAX));
        let upto = (now, JobId(u32::MAX));
        let due: Vec<JobId> = (self.due_fresh.range((Excluded(after), Included(upto))))
            .chain(self.due_resumed.range((Excluded(after), Included(upto))))
            .map(|&(_, id)| id)
            .collect();
        for id in due {
            let (Some(&k), Some(&key)) = (self.dyn_key.get(&id), self.waiting.get(&id)) else { continue };
            let req = &self.queue[&(key, id)];
            let group = (req.gpus, req.elig.pools);
            if let Some(set) = self.dyn_wait.get_mut(&group) {
                set.remove(&(k, id));
                if set.is_empty() {
                    self.dyn_wait.remove(&group);
                }
            }
            self.promoted.remove(&(k, id));
        }
        self.overdue_until = now;
    }

    /// Stores a running job's key (where running keys are kept sorted).
    fn store_run_key(&mut self, job: JobId, now: Time) {
        if !self.run_keys_stored() || !self.running.contains_key(&job) {
            return;
        }
        self.drop_run_key(job);
        let (k, until) = self.run_key(job, now);
        let r = &self.running[&job];
        let gpus = r.req.gpus;
        // Its pool's set: `NO_POOL` without GPUs, `SPANNING` over several pools.
        let mut pool = NO_POOL;
        if !self.run_keys_pool.is_empty() {
            let mask = self.cap.pools_in(&r.alloc);
            match mask.count_ones() {
                0 => {}
                1 => pool = mask.trailing_zeros(),
                _ => pool = SPANNING,
            }
        }
        self.run_keys.insert((k, job), gpus);
        self.run_key_of.insert(job, (k, until, pool));
        // A key that never expires (`Time::MAX`) is not indexed by expiry.
        if until != Time::MAX {
            self.run_expiry.insert((until, job));
        }
        match pool {
            NO_POOL => {}
            SPANNING => self.run_spanning += 1,
            p => {
                self.run_keys_pool[p as usize].insert((k, job), gpus);
            }
        }
    }

    /// Forgets a running job's stored key (the job must still be in `running`).
    fn drop_run_key(&mut self, job: JobId) {
        if let Some((k, until, pool)) = self.run_key_of.remove(&job) {
            self.run_keys.remove(&(k, job));
            if until != Time::MAX {
                self.run_expiry.remove(&(until, job));
            }
            match pool {
                NO_POOL => {}
                SPANNING => self.run_spanning -= 1,
                p => {
                    self.run_keys_pool[p as usize].remove(&(k, job));
                }
            }
        }
    }

    /// Brings time-dependent bookkeeping up to `now` (running jobs that crossed a priority
    /// threshold since the last commit). Optional: `schedule` is correct without it, only
    /// slower after a wake-up with no other event. Except under `las:...,compat=tiresias`,
    /// where it is the Tiresias simulator's event (once per instant): demotions and
    /// starvation promotions happen here, and a pass without it keeps every job's queue.
    pub fn advance(&mut self, now: Time) {
        self.tiresias_event(now);
        self.refresh_run_keys(now);
        self.drop_overdue(now);
        self.move_promoted(now);
    }

    /// The waiting jobs promoted after `promoted_until` and by `now` (some may have been put
    /// in `promoted` when they were queued, or be past the guard).
    pub(crate) fn promoted_since_advance(&self, now: Time) -> impl Iterator<Item = JobId> + '_ {
        let after = (self.promoted_until, JobId(u32::MAX));
        self.promo_wake
            .range((Excluded(after), Included((now, JobId(u32::MAX)))))
            .map(|&(_, id)| id)
            .filter(move |id| self.promo_of[id].0 <= now)
    }

    /// `promote_indexed`: moves the waiting jobs promoted since the last call from `dyn_wait`
    /// to `promoted`, under their new key.
    fn move_promoted(&mut self, now: Time) {
        if !self.promote_indexed() || now <= self.promoted_until {
            return;
        }
        let due: Vec<JobId> = self.promoted_since_advance(now).collect();
        for id in due {
            let (Some(&old), Some(&key)) = (self.dyn_key.get(&id), self.waiting.get(&id)) else { continue };
            let req = self.queue[&(key, id)];
            // Not in `dyn_wait`: promoted when it was queued (in `promoted` already), or past
            // the guard.
            let group = (req.gpus, req.elig.pools);
            let Some(set) = self.dyn_wait.get_mut(&group) else { continue };
            if !set.remove(&(old, id)) {
                continue;
            }
            if set.is_empty() {
                self.dyn_wait.remove(&group);
            }
            let k = self.unguarded_key(&req, now, false);
            self.promoted.insert((k, id));
            self.dyn_key.insert(id, k);
        }
        self.promoted_until = now;
    }

    /// Re-keys running jobs whose stored key stopped holding by `now`.
    fn refresh_run_keys(&mut self, now: Time) {
        if self.run_expiry.is_empty() {
            return;
        }
        let due: Vec<JobId> = self.run_expiry.range(..=(now, JobId(u32::MAX))).map(|&(_, id)| id).collect();
        for id in due {
            self.store_run_key(id, now);
        }
    }

    fn release(&mut self, job: JobId, r: &Running) {
        self.cap.give(&r.alloc);
        self.scratch.apply(|c| c.give(&r.alloc));
        if r.alloc.detail.as_ref().is_some_and(|d| d.milli < 1000) {
            return; // shared GPUs have no single owner
        }
        for (n, ids) in &r.gpu_ids {
            for &i in ids {
                debug_assert_eq!(self.owner[n as usize][i as usize], Some(job));
                self.owner[n as usize][i as usize] = None;
            }
        }
    }

    /// Commits the end of a running job at `now`: frees its GPUs. Under conservative backfill,
    /// a job that ends earlier or later than estimated makes every reservation be recomputed in
    /// policy order.
    pub fn finish(&mut self, job: JobId, now: Time) -> Result<(), CommitError> {
        self.run_floor.remove(&job);
        if !self.running.contains_key(&job) {
            return Err(CommitError::NotRunning(job));
        }
        self.refresh_run_keys(now);
        self.drop_run_key(job);
        let r = self.running.remove(&job).ok_or(CommitError::NotRunning(job))?;
        let off_estimate = r.expected_end != now;
        let p = self.progress.remove(&job).unwrap_or_default();
        self.tiresias_finish(job);
        let served = p.attained + r.req.gpus as i64 * (now - r.start);
        // Only Gittins reads the distribution of finished jobs' service; keeping it sorted costs
        // a sort per finished job early on, so other policies skip it.
        if matches!(self.policy.order, crate::policy::Order::Gittins(_)) {
            self.history.record(served, now);
        }
        self.account_stop(&r.req, now, Some(served));
        self.limits.on_stop(&r.req, &r.alloc);
        self.by_end.remove(&(r.expected_end, job));
        self.release(job, &r);
        if off_estimate && self.cons.is_some() {
            self.rebuild_reservations(now);
        }
        Ok(())
    }

    /// Rebuilds conservative backfill's profile from the facts at `now` (free GPUs, running jobs'
    /// estimated ends, overrunning jobs expected to end any moment) and gives every waiting job,
    /// in policy order, the earliest slot that delays no earlier one.
    fn rebuild_reservations(&mut self, now: Time) {
        let Some(c) = &mut self.cons else { return };
        let topo = self.topology.as_deref();
        c.profile = Profile::new(now, &self.cap);
        for &(t, id) in self.by_end.keys() {
            // A job due to end at this very instant frees its GPUs now (its end event comes in
            // this instant, before the pass). One already past its estimate is expected any
            // moment; its real end will rebuild the reservations again. Either way every
            // reservation lands on an instant at which an event happens.
            let free_at = if t < now { now + 1 } else { t };
            c.profile.give_from(free_at, &self.running[&id].alloc);
        }
        c.res.clear();
        // Every reservation afresh: the index by start is built once from them all (sorted in
        // bulk), not entry by entry.
        let mut starts = Vec::with_capacity(self.queue.len());
        for (&k, req) in &self.queue {
            let slow = |a: &Allocation| spread_factor(topo, req, a);
            let (t, end, held) = c.profile.reserve(now, req.demand(), planned(&self.cap, req), req.estimate, &slow);
            c.res.insert(k.1, (t, end, held));
            starts.push((t, k));
        }
        c.by_start = BTreeSet::from_iter(starts);
    }

    /// Switches a count-only capacity to a detailed one (the first fractional job arrived):
    /// running jobs keep the GPUs they hold, now recorded by index.
    fn make_detailed(&mut self, now: Time) {
        let mut cap = self.cap.detailed_like();
        let mut ids: Vec<JobId> = self.running.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let r = self.running.get_mut(&id).expect("listed");
            let parts = r.gpu_ids.iter().map(|(n, g)| (n, g.len() as u32)).collect::<Vec<_>>();
            let k = parts.len();
            r.alloc = Allocation {
                parts,
                detail: Some(Box::new(crate::capacity::Detail {
                    gpu_ids: r.gpu_ids.iter().map(|(_, g)| g.to_vec()).collect(),
                    milli: 1000,
                    cpus: vec![0; k],
                    mem_mib: vec![0; k],
                })),
            };
            cap.take(&r.alloc);
        }
        self.cap = cap;
        self.scratch.reset();
        if self.cons.is_some() {
            self.rebuild_reservations(now);
        }
    }

    /// The start time of a running job.
    pub fn running_start(&self, job: JobId) -> Option<Time> {
        self.running.get(&job).map(|r| r.start)
    }

    /// Checks the scheduler's own invariants: each GPU has at most one owner, owners match
    /// running allocations, free counts match. Returns a description of the first violation.
    pub fn sanity_check(&self) -> Result<(), String> {
        let mut held = 0u64;
        let free = self.cap.free();
        for (n, gpus) in self.owner.iter().enumerate() {
            let busy = gpus.iter().filter(|o| o.is_some()).count() as u32;
            // GPUs held only by fractional jobs have no owner but are not free either.
            let shared = (0..gpus.len() as u32)
                .filter(|&i| gpus[i as usize].is_none() && self.cap.gpu_used(n as u32, i) > 0)
                .count() as u32;
            for (i, o) in gpus.iter().enumerate() {
                if o.is_some() && self.cap.is_detailed() && self.cap.gpu_used(n as u32, i as u32) != 1000 {
                    return Err(format!("node {n}: GPU {i} owned by job {} but not wholly used", o.expect("some")));
                }
            }
            if gpus.len() as u32 - busy - shared != free[n] {
                return Err(format!("node {n}: free count {} but {busy} of {} GPUs owned", free[n], gpus.len()));
            }
            for o in gpus.iter().flatten() {
                if !self.running.contains_key(o) {
                    return Err(format!("node {n}: GPU owned by job {o}, which is not running"));
                }
            }
            held += busy as u64;
        }
        let want: u64 = self.running.values().filter(|r| r.req.demand().milli == 0).map(|r| r.req.gpus as u64).sum();
        if self.cap.is_detailed() {
            // Each GPU's used thousandths are the sum of its holders' shares.
            let mut used: HashMap<(u32, u32), u32> = HashMap::default();
            for r in self.running.values() {
                if let Some(d) = &r.alloc.detail {
                    for (p, &(n, _)) in r.alloc.parts.iter().enumerate() {
                        for &i in &d.gpu_ids[p] {
                            *used.entry((n, i)).or_default() += d.milli;
                        }
                    }
                }
            }
            for (n, gpus) in self.owner.iter().enumerate() {
                for i in 0..gpus.len() as u32 {
                    let want = used.get(&(n as u32, i)).copied().unwrap_or(0);
                    if want > 1000 || self.cap.gpu_used(n as u32, i) != want {
                        return Err(format!(
                            "node {n} GPU {i}: {} thousandths used, running jobs hold {want}",
                            self.cap.gpu_used(n as u32, i)
                        ));
                    }
                }
            }
        }
        if held != want {
            return Err(format!("{held} GPUs owned but running jobs hold {want}"));
        }
        self.scratch.check(&self.cap)?;
        if self.queue.len() != self.waiting.len() {
            return Err("queue and waiting set differ".into());
        }
        self.limits.check_counts(self.running.values().map(|r| (&r.req, &r.alloc)))?;
        // Waiting jobs kept sorted by key (`dyn_wait`, and `promoted` under promotion).
        let sorted = self.dyn_wait.values().map(|s| s.len()).sum::<usize>() + self.promoted.len();
        if self.guard_indexed()
            && (self.due_of.len() != self.queue.len()
                || self.due_fresh.len() + self.due_resumed.len() != self.queue.len()
                || self.dyn_key.len() != self.queue.len()
                || sorted != self.due_of.values().filter(|&&d| d > self.overdue_until).count())
        {
            return Err(format!(
                "{} due instants ({} + {} indexed), {} indexed keys ({} not past the guard) for {} waiting jobs",
                self.due_of.len(),
                self.due_fresh.len(),
                self.due_resumed.len(),
                self.dyn_key.len(),
                sorted,
                self.queue.len()
            ));
        }
        if self.promote_indexed()
            && (self.dyn_key.len() != self.queue.len()
                || (!self.guard_indexed() && sorted != self.queue.len())
                || self.promo_of.len() != self.promo_wake.len())
        {
            return Err(format!(
                "{} indexed keys, {} + {} kept sorted, {} promotion instants for {} waiting jobs",
                self.dyn_key.len(),
                self.dyn_wait.values().map(|s| s.len()).sum::<usize>(),
                self.promoted.len(),
                self.promo_of.len(),
                self.queue.len()
            ));
        }
        if self.run_keys_stored()
            && (self.run_keys.len() != self.running.len()
                || self.run_expiry.len() != self.run_key_of.values().filter(|e| e.1 != Time::MAX).count())
        {
            return Err(format!("{} stored running keys for {} running jobs", self.run_keys.len(), self.running.len()));
        }
        if self.run_keys_stored() && !self.run_keys_pool.is_empty() {
            let split: usize = self.run_keys_pool.iter().map(SumSet::len).sum();
            let gpu_less = self.running.values().filter(|r| r.alloc.parts.is_empty()).count();
            if split + self.run_spanning + gpu_less != self.running.len() {
                return Err(format!(
                    "{split} running keys by pool, {} spanning pools, {gpu_less} without GPUs, for {} running jobs",
                    self.run_spanning,
                    self.running.len()
                ));
            }
        }
        self.tiresias_check()?;
        if let Some(c) = &self.cons {
            if c.res.len() != self.queue.len() || c.by_start.len() != self.queue.len() {
                return Err(format!("{} reservations for {} waiting jobs", c.res.len(), self.queue.len()));
            }
        }
        Ok(())
    }

    /// Proposes what to start now under the policy. Pure: reads state, changes nothing.
    /// With `explain`, also says why every job left waiting waits.
    pub fn schedule(&self, now: Time, explain: bool) -> Plan {
        if !self.policy.order.is_static() || self.policy.max_wait.is_some() {
            return self.schedule_dynamic(now, explain);
        }
        match &self.cons {
            // Conservative without standing reservations (quotas or array limits in force,
            // which reservations do not model): planned afresh.
            None if self.policy.backfill == Backfill::Conservative => {
                self.schedule_conservative_afresh(now, explain, self.queue.values())
            }
            None => self.schedule_in_order(now, explain, self.queue.values(), true),
            Some(c) => {
                // Standing reservations hold unless a running job overran its estimate (its GPUs
                // are still busy where the profile expected them free): then plan afresh.
                let overrun = self.by_end.first_key_value().is_some_and(|(&(t, _), _)| t < now);
                match (!overrun).then(|| self.due_reservations(c, now, explain)).flatten() {
                    Some(plan) => plan,
                    None => self.schedule_conservative_afresh(now, explain, self.queue.values()),
                }
            }
        }
    }

    /// Strict order, then (EASY) backfill behind the first blocked job.
    /// Waiting jobs in `order` (policy order, computed by the caller). `indexed`: the order is
    /// the static queue order, so EASY may use its (GPUs, estimate class) index.
    pub(crate) fn schedule_in_order<'a>(
        &'a self,
        now: Time,
        explain: bool,
        order: impl IntoIterator<Item = &'a JobReq>,
        indexed: bool,
    ) -> Plan {
        let mut plan = Plan::default();
        let mut cap = self.what_if();
        let mut order = order.into_iter();
        // Quotas: a job whose owner (or array) is at a limit is skipped and blocks no one.
        let limited = self.limits.active();
        let mut used = PassUse::new();
        let head = loop {
            let Some(req) = order.next() else { return plan };
            let admitted = if limited {
                let Some(r) = self.admitted(req, &used, &cap, explain, &mut plan) else { continue };
                r
            } else {
                Cow::Borrowed(req)
            };
            let req: &JobReq = &admitted;
            match cap.place_for(req.demand()) {
                Some(a) => {
                    cap.take(&a);
                    self.limits.take(req, &a, &mut used);
                    plan.starts.push(Start { job: req.id, alloc: a });
                }
                None => break *req,
            }
        };
        if explain {
            plan.waiting.push((head.id, blocked(&cap, &head)));
        }
        if self.policy.backfill == Backfill::None {
            if explain {
                for r in order {
                    let why = if limited { self.limits.admit(r, &used, &cap).err() } else { None };
                    plan.waiting.push((r.id, why.unwrap_or(Reason::Priority { behind: head.id })));
                }
            }
            return plan;
        }
        // EASY: the head's reservation is the earliest estimated end after which it fits.
        let mut started: Vec<(Time, &Allocation)> = plan
            .starts
            .iter()
            .map(|s| {
                let r = self.queue_req(s.job);
                (now + scaled(r.estimate, self.run_speed(r, &s.alloc)), &s.alloc)
            })
            .collect();
        started.sort_by_key(|e| e.0);
        // Pooled (count-only) placement: the shadow state only needs a count.
        let pooled = cap.counts_only();
        // Several pools, pooled, count-only: a count per pool (a job's GPUs are all in one).
        let per_pool = !pooled && cap.placement() == Placement::Pooled && !cap.is_detailed();
        let mut shadow_cap = if pooled {
            self.scratch.counter(cap.total(), cap.total_free())
        } else if per_pool {
            // Several pools, pooled: a counter per pool (`cap` already has this pass's starts).
            WhatIf::Owned(cap.pool_counters())
        } else {
            let mut s = self.what_if();
            for st in &plan.starts {
                s.take(&st.alloc);
            }
            s
        };
        let mut shadow = None;
        let mut started = started.into_iter().peekable();
        let mut running = self.by_end.iter().peekable();
        loop {
            let take_running = match (running.peek(), started.peek()) {
                (Some(a), Some(b)) => a.0 .0 <= b.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            // Once the head fits, every other job that ends by the shadow time ends before the
            // head starts: the shadow state holds them all, whatever order they are kept in (a
            // job started this pass and one started earlier may end at the same instant).
            if let Some(s) = shadow {
                let next =
                    if take_running { running.peek().expect("peeked").0 .0 } else { started.peek().expect("peeked").0 };
                if next > s {
                    break;
                }
            }
            // Pooled: a count is all the shadow needs (a running job's GPUs, kept in `by_end`).
            let t = if take_running {
                let (&(t, id), &(g, pool)) = running.next().expect("peeked");
                if pooled {
                    shadow_cap.give_count(g);
                } else if per_pool {
                    shadow_cap.give_pool_count(pool as usize, g);
                } else {
                    shadow_cap.give(&self.running[&id].alloc);
                }
                t
            } else {
                let (t, alloc) = started.next().expect("peeked");
                if pooled {
                    shadow_cap.give_count(alloc.gpus());
                } else {
                    shadow_cap.give(alloc);
                }
                t
            };
            if shadow.is_none() && shadow_cap.fits_for(head.demand()) {
                // A job overrunning its estimate is expected to end "any moment now".
                shadow = Some(t.max(now + 1));
            }
        }
        let Some(shadow) = shadow else {
            // Cannot happen: the head fits an empty cluster (checked at submit).
            debug_assert!(false, "no shadow time for job {}", head.id);
            return plan;
        };
        let head_key = (self.waiting[&head.id], head.id);
        if !explain && indexed && !cap.is_detailed() {
            self.easy_backfill_indexed(now, &head, head_key, shadow, &mut cap, &mut shadow_cap, &mut plan, &mut used);
            return plan;
        }
        // Once fewer GPUs are free than the smallest waiting job asks for, no later job can
        // backfill: the plain pass stops there (the explaining one goes on, to say why each
        // waits). Counts only: not on a cluster that tracks shares, CPUs or memory.
        let smallest = self.buckets.keys().next().map_or(0, |&(g, ..)| u64::from(g));
        let stop_early = !explain && !cap.is_detailed();
        for req in order {
            if stop_early && cap.total_free() < smallest {
                break;
            }
            let admitted = if limited {
                let Some(r) = self.admitted(req, &used, &cap, explain, &mut plan) else { continue };
                r
            } else {
                Cow::Borrowed(req)
            };
            let req: &JobReq = &admitted;
            if !cap.fits_for(req.demand()) {
                if explain {
                    plan.waiting.push((req.id, blocked(&cap, req)));
                }
                continue;
            }
            match self.easy_backfill(req, now, head.demand(), shadow, &mut cap, &mut shadow_cap) {
                Some(a) => {
                    self.limits.take(req, &a, &mut used);
                    plan.starts.push(Start { job: req.id, alloc: a })
                }
                None if explain => plan.waiting.push((req.id, Reason::Reserved { for_job: head.id, until: shadow })),
                None => {}
            }
        }
        plan
    }

    /// EASY's backfill scan without explanations: the same decisions as the plain scan (tests
    /// compare them), but it visits only (GPUs, estimate class) groups that could still
    /// backfill, merged in queue order.
    #[allow(clippy::too_many_arguments)]
    fn easy_backfill_indexed(
        &self,
        now: Time,
        head: &JobReq,
        head_key: QueueKey,
        shadow: Time,
        cap: &mut Pools,
        shadow_cap: &mut Pools,
        plan: &mut Plan,
        used: &mut PassUse,
    ) {
        use std::collections::BinaryHeap;
        use std::ops::Bound::{Excluded, Unbounded};
        // A job this short ends before the reservation. The index groups jobs by their
        // estimates at speed 1 (and by pools and speed row).
        let limit = shadow - now;
        let extra = |sc: &Pools| sc.total_free().saturating_sub(head.gpus as u64);
        // A group whose jobs do not fit now never will in this pass (`cap` only shrinks): under
        // consolidated placement that is no node with `g` free, even when `g` are free in all.
        // Groups are by pools accepted too, so that a group of constrained jobs whose pools
        // are full is skipped whole.
        let fits =
            |g: u32, nodes: u32, pools: u128, cap: &Pools| cap.fits_for(Demand { pools, ..prefix_demand(g, nodes) });
        // A group's jobs are planned at one speed, the slowest of the pools they accept for
        // their speed row (`planned`): `scaled(t, speed)` is a job's planned run time, exactly.
        // `short`: the group's shortest job ends before the reservation (`scaled(class_min(c),
        // speed) <= limit`), fixed for the pass.
        let may = |g: u32, nodes: u32, pools: u128, short: bool, cap: &Pools, sc: &Pools| {
            fits(g, nodes, pools, cap) && (short || (g as u64) <= extra(sc))
        };
        // A group whose every job runs past the reservation (`scaled(class_min(c), speed) > limit`) and
        // whose job was just refused is *parked*: its later jobs would be refused alike, since
        // the refusal depends only on what the group's jobs share (GPUs, nodes, pools, speed
        // row: where the job would go) and on `cap` and `shadow_cap`. Only a start in the pool
        // the refused job would have gone to (`on`) can change that: a job goes to the first
        // pool of its order with room, and a start elsewhere takes room from a pool that had
        // none for the job or comes after its pool, and can only take from the head's share at
        // the shadow time. Such a start resumes the groups parked on its pool after the started
        // job's place in the queue (their jobs before it were refused at the old state, as the
        // plain scan refuses them). Heap entries carry their group's epoch; a parked or resumed
        // group's old entry is stale.
        struct Group<'s> {
            key: BucketKey,
            speed: f64,
            set: &'s BTreeSet<(QueueKey, Time)>,
            // Made when the group's first job is read (most groups never are).
            it: Option<std::collections::btree_set::Range<'s, (QueueKey, Time)>>,
            // Its run's index among the runs this pass made groups of (`n_runs`).
            pi: u32,
            // Its shortest job ends before the reservation (see `may`).
            short: bool,
            epoch: u32,
            parked: bool,
            refused: bool,
            on: u32,
        }
        // The runs the pass made groups of, numbered, so that a sweep asks whether a run still
        // fits once for all its groups.
        let mut n_runs = 0u32;
        // On several pools, sized for every group at once (a typed pass makes dozens: growing
        // them pass after pass cost more than the allocation); on one, a few.
        let many = if cap.is_single() { self.n_groups.min(8) } else { self.n_groups };
        let mut groups: Vec<Group<'_>> = Vec::with_capacity(many);
        // First entries, heapified once built.
        let mut firsts = Vec::with_capacity(many);
        let free = cap.total_free();
        let pooled = cap.placement() == Placement::Pooled;
        let by_model = self.limits.q.limits_models();
        // Groups with a job past the reservation refused at the present state (`refused`; the
        // parked ones among them): a later job of theirs past it is refused alike, unread.
        let mut watched: Vec<usize> = Vec::new();
        // Several count-only pools (typed, pooled): whether a job past the reservation is
        // refused is known by counts, before any job is read: the pool it would go to (the
        // first of its pools with room in `cap`) and whether the head still fits at the shadow
        // time once its GPUs leave that pool (`shadow_cap`'s counters), as `easy_backfill_one`
        // decides on the real allocation. `Some(pool)`: refused, and where it would have gone.
        let counters = pooled && !cap.is_single() && !cap.is_detailed();
        let refused_at = |d: Demand, cap: &Pools, sc: &Pools| -> Option<u32> {
            let q = cap.first_fit_pool(d)?;
            (!sc.fits_after_taking(q, d.gpus, head.demand())).then_some(q as u32)
        };
        // Buckets come by (GPUs, nodes, pools, row), then estimate class: a run of one prefix
        // shares where its jobs would go, so whether they fit now, their speed and (several
        // pools) whether a past job is refused are worked out once per run. Past jobs form the
        // run's tail (classes from the first whose shortest job ends past the reservation); a
        // tail that cannot take part is left whole: when its GPUs exceed what the head leaves
        // (for the rest of the pass), or, parked on the pool its jobs would go to, until a
        // start there (`tails`).
        let mut tails: Vec<ParkedTail> = Vec::new();
        // The most GPUs any group asks.
        let mut max_g = 0u32;
        for (&prefix, run) in &self.buckets {
            let (g, nodes, pools, row) = prefix;
            // Runs come in GPU order (a count-only cluster here): none from here on fits.
            if g as u64 > free {
                break;
            }
            if !fits(g, nodes, pools, cap) {
                continue;
            }
            let pi = n_runs;
            n_runs += 1;
            let speed = run.speed;
            // Whether the run's past jobs are refused (and where they would go): one answer for
            // the run, worked out at its first past class.
            let mut tail_refused: Option<Option<u32>> = None;
            for (&c, set) in &run.classes {
                let short = scaled(class_min(c), speed) <= limit;
                if !short {
                    if g as u64 > extra(shadow_cap) {
                        break;
                    }
                    // Every job from here on runs past the reservation and would be refused
                    // (not under limits by model: see below).
                    let demand = Demand { pools, row, ..prefix_demand(g, nodes) };
                    let refused = *tail_refused.get_or_insert_with(|| {
                        (counters && !by_model).then(|| refused_at(demand, cap, shadow_cap)).flatten()
                    });
                    if let Some(on) = refused {
                        tails.push(ParkedTail { prefix, pi, from: c, speed, on });
                        break;
                    }
                }
                // Usually every job of the group comes after the head (only jobs this pass
                // starts ahead of it come before): then the first is it, found without search.
                let (first, it) = match set.first() {
                    Some(&f) if f.0 > head_key => (Some(f), None),
                    _ => {
                        let mut it = set.range((Excluded((head_key, Time::MAX)), Unbounded));
                        (it.next().copied(), Some(it))
                    }
                };
                if let Some(k) = first {
                    max_g = max_g.max(g);
                    firsts.push(std::cmp::Reverse((k, groups.len(), 0u32)));
                    groups.push(Group {
                        key: (g, nodes, pools, row, c),
                        speed,
                        set,
                        it,
                        pi,
                        short,
                        epoch: 0,
                        parked: false,
                        refused: false,
                        on: 0,
                    });
                }
            }
        }
        let mut heap = BinaryHeap::from(firsts);
        let limited = self.limits.active();
        while let Some(std::cmp::Reverse(((key, est), b, epoch))) = heap.pop() {
            if groups[b].parked || groups[b].epoch != epoch {
                continue;
            }
            let ((g, nodes, pools, _, c), speed) = (groups[b].key, groups[b].speed);
            if !may(g, nodes, pools, groups[b].short, cap, shadow_cap) {
                continue; // thresholds only fall within a pass: the group is done
            }
            let gr = &mut groups[b];
            let set = gr.set;
            if let Some(&k) = gr.it.get_or_insert_with(|| set.range((Excluded((key, est)), Unbounded))).next() {
                heap.push(std::cmp::Reverse((k, b, epoch)));
            }
            if !fits(g, nodes, pools, cap) {
                continue;
            }
            let past = now + scaled(est, speed) > shadow;
            // Pooled: a job past the reservation needs the head's GPUs to be left at the
            // shadow time (`easy_backfill_one` checks the same), known without the job itself.
            // A refused group's later jobs are skipped unless limits by model may narrow them
            // (another owner's job may go where the refused one could not).
            if past && ((pooled && (g as u64) > extra(shadow_cap)) || (groups[b].refused && !by_model)) {
                continue;
            }
            let req = &self.queue[&key];
            let admitted = if limited {
                let Some(r) = self.admitted(req, used, cap, false, plan) else { continue };
                r
            } else {
                Cow::Borrowed(req)
            };
            // A job its owner's limits by model narrowed does not stand for its group: another
            // owner's job of the group may go where it may not.
            let narrowed = matches!(admitted, Cow::Owned(_));
            let req: &JobReq = &admitted;
            // Refused by counts (several pools), without choosing its nodes.
            let known = if counters && past && !narrowed { refused_at(req.demand(), cap, shadow_cap) } else { None };
            debug_assert!(
                known.is_none() || self.easy_backfill(req, now, head.demand(), shadow, cap, shadow_cap).is_none(),
                "counts refuse job {} but easy_backfill_one takes it",
                req.id
            );
            let got = match known {
                Some(_) => None,
                None => self.easy_backfill(req, now, head.demand(), shadow, cap, shadow_cap),
            };
            match got {
                Some(a) => {
                    let pool = cap.pool_of_alloc(&a);
                    self.limits.take(req, &a, used);
                    plan.starts.push(Start { job: req.id, alloc: a });
                    watched.retain(|&p| {
                        let gr = &mut groups[p];
                        if gr.on != pool {
                            return true;
                        }
                        gr.refused = false;
                        if gr.parked {
                            gr.parked = false;
                            gr.epoch += 1;
                            let it = gr.it.insert(gr.set.range((Excluded((key, Time::MAX)), Unbounded)));
                            if let Some(&k) = it.next() {
                                heap.push(std::cmp::Reverse((k, p, gr.epoch)));
                            }
                        }
                        false
                    });
                    // Parked tails on that pool: their groups from the started job on, unless
                    // they can no longer take part (too big for what the head leaves, or their
                    // pools full: for the rest of the pass) or their jobs are still refused by
                    // counts, now parked on the pool they would now go to.
                    tails.retain_mut(|t| {
                        if t.on != pool {
                            return true;
                        }
                        let (g, nodes, pools, row) = t.prefix;
                        let demand = Demand { pools, row, ..prefix_demand(g, nodes) };
                        if g as u64 > extra(shadow_cap) || !fits(g, nodes, pools, cap) {
                            return false;
                        }
                        if let Some(on) = refused_at(demand, cap, shadow_cap) {
                            t.on = on;
                            return true;
                        }
                        let Some(run) = self.buckets.get(&t.prefix) else { return false };
                        for (&c, set) in run.classes.range(t.from..) {
                            let mut it = set.range((Excluded((key, Time::MAX)), Unbounded));
                            if let Some(&k) = it.next() {
                                max_g = max_g.max(g);
                                heap.push(std::cmp::Reverse((k, groups.len(), 0u32)));
                                groups.push(Group {
                                    key: (g, nodes, pools, row, c),
                                    speed: t.speed,
                                    set,
                                    it: Some(it),
                                    pi: t.pi,
                                    short: false,
                                    epoch: 0,
                                    parked: false,
                                    refused: false,
                                    on: 0,
                                });
                            }
                        }
                        false
                    });
                    // A start only lowers what `may` reads: the groups it rules out go now,
                    // not one pop at a time (often all of them, the start having taken the
                    // only free GPUs they could use). Nothing to drop while the pool keeps what
                    // every group asks and the head's share is untouched.
                    if heap.len() > 8 && (past || cap.pool_free(pool as usize) < u64::from(max_g)) {
                        // `may`, with each run's fit asked once (0: not yet asked).
                        let mut fit = vec![0u8; n_runs as usize];
                        let room = extra(shadow_cap);
                        heap.retain(|std::cmp::Reverse((_, p, e))| {
                            let gr = &groups[*p];
                            if gr.parked || gr.epoch != *e || !(gr.short || u64::from(gr.key.0) <= room) {
                                return false;
                            }
                            let f = &mut fit[gr.pi as usize];
                            if *f == 0 {
                                let (g, nodes, pools, ..) = gr.key;
                                *f = if fits(g, nodes, pools, cap) { 1 } else { 2 };
                            }
                            *f == 1
                        });
                    }
                }
                None if past && !narrowed => {
                    // Where it would have gone (it fits: `fits` said so); nowhere: it never
                    // will in this pass.
                    let gr = &mut groups[b];
                    gr.on = known
                        .unwrap_or_else(|| cap.place_for(req.demand()).map_or(u32::MAX, |a| cap.pool_of_alloc(&a)));
                    gr.refused = true;
                    // Not under limits by model: a later job of the group may be narrowed
                    // away from the pool this one would have taken, and fit elsewhere.
                    gr.parked = !by_model && scaled(class_min(c), speed) > limit;
                    watched.push(b);
                }
                None => {}
            }
        }
        // Starts come out in queue order, as from the plain scan.
    }

    /// A waiting job as the limits let it start in this pass (its pools narrowed by limits by
    /// GPU model, see `Limits::admit`), or `None` when a limit holds it: then, explaining, why
    /// goes into `plan`.
    pub(crate) fn admitted<'r>(
        &self,
        req: &'r JobReq,
        used: &PassUse,
        cap: &Pools,
        explain: bool,
        plan: &mut Plan,
    ) -> Option<Cow<'r, JobReq>> {
        match self.limits.admit(req, used, cap) {
            Ok(None) => Some(Cow::Borrowed(req)),
            Ok(Some(n)) => Some(Cow::Owned(n)),
            Err(why) => {
                if explain {
                    plan.waiting.push((req.id, why));
                }
                None
            }
        }
    }

    /// A what-if copy of the capacity for a pass (see [`Scratch`]).
    pub(crate) fn what_if(&self) -> WhatIf<'_> {
        self.scratch.what_if(&self.cap)
    }

    pub(crate) fn queue_req(&self, job: JobId) -> &JobReq {
        &self.queue[&(self.waiting[&job], job)]
    }

    /// Conservative backfill with standing reservations: start the jobs whose reserved slot has
    /// come. `None` if a due job cannot take its GPUs (the reservations are stale).
    fn due_reservations(&self, c: &Reservations, now: Time, explain: bool) -> Option<Plan> {
        let mut plan = Plan::default();
        // A what-if copy only serves the due jobs after the first (usually none): the first is
        // placed on the capacity itself, and a copy is made and taken from only when another
        // follows (taking and rolling back a wide gang node by node cost as much as its start).
        let mut cap: Option<WhatIf<'_>> = None;
        let mut due = c.by_start.range(..=(now, ((i64::MAX, i64::MAX), JobId(u32::MAX)))).peekable();
        while let Some(&(t, key)) = due.next() {
            debug_assert!(t <= now);
            let req = &self.queue[&key];
            let a = c.res[&key.1].2.place(cap.as_deref().unwrap_or(&self.cap), req.demand())?;
            if due.peek().is_some() {
                cap.get_or_insert_with(|| self.what_if()).take(&a);
            }
            plan.starts.push(Start { job: req.id, alloc: a });
        }
        if explain {
            for (key, req) in &self.queue {
                let (t, _, _) = c.res[&key.1];
                if t > now {
                    plan.waiting.push((req.id, Reason::Reservation { start: t }));
                }
            }
        }
        Some(plan)
    }

    /// Conservative backfill planned from scratch at `now` (used while a job overruns its
    /// estimate): every waiting job, in order, reserves the earliest slot that delays no
    /// reservation before it; those whose slot is now start.
    pub(crate) fn schedule_conservative_afresh<'a>(
        &'a self,
        now: Time,
        explain: bool,
        order: impl IntoIterator<Item = &'a JobReq>,
    ) -> Plan {
        let mut plan = Plan::default();
        let mut c =
            Reservations { profile: Profile::new(now, &self.cap), res: HashMap::default(), by_start: BTreeSet::new() };
        for &(t, id) in self.by_end.keys() {
            c.profile.give_from(t.max(now + 1), &self.running[&id].alloc);
        }
        let mut now_cap = self.what_if();
        let limited = self.limits.active();
        let mut used = PassUse::new();
        for req in order {
            let key = (self.waiting[&req.id], req.id);
            // A job whose owner is at a limit gets no reservation: it is planned again once
            // the limit lets it (each pass plans afresh while quotas are in force). Limits by
            // model narrow its pools: it reserves on the models with room now.
            let admitted = if limited {
                let Some(r) = self.admitted(req, &used, &now_cap, explain, &mut plan) else { continue };
                r
            } else {
                Cow::Borrowed(req)
            };
            let req: &JobReq = &admitted;
            // With no GPU free only GPU-less jobs can start now; other reservations only matter
            // to `explain`, so skip them when not asked. (Not on a detailed cluster: there a
            // fractional job may still start on a shared GPU, and GPU-less jobs need CPUs, so
            // every earlier reservation must be in the profile.)
            if !explain && now_cap.total_free() == 0 && req.gpus > 0 && !now_cap.is_detailed() {
                continue;
            }
            let (t, held) = c.reserve(now, key, req, self.plan_estimate(req), self.topology.as_deref());
            if t == now {
                let a = held.place(&now_cap, req.demand()).expect("the profile says it fits now");
                now_cap.take(&a);
                self.limits.take(req, &a, &mut used);
                plan.starts.push(Start { job: req.id, alloc: a });
            } else if explain {
                plan.waiting.push((req.id, Reason::Reservation { start: t }));
            }
        }
        plan
    }
}

/// The estimate planning uses for a waiting job: on the slowest GPU it accepts, so that a
/// backfilled job is never planned shorter than it may run (its own estimate at speed 1).
#[inline]
fn planned(cap: &Pools, req: &JobReq) -> Time {
    if cap.unit_speed() {
        return req.estimate;
    }
    scaled(req.estimate, cap.slowest(req.demand()))
}

/// Why a waiting job that does not fit waits: free GPUs on a count-only cluster, the node-level
/// cause on a detailed one.
pub(crate) fn blocked(cap: &Pools, req: &JobReq) -> Reason {
    if let Some(why) = cap.constraint_why(req.demand()) {
        return Reason::Constraint { need: req.gpus, why };
    }
    if req.topo.required {
        if let Some(why) = cap.topology_why(req.demand()) {
            return Reason::NodeFit { need: req.gpus, why };
        }
    }
    if cap.is_detailed() {
        Reason::NodeFit { need: req.gpus, why: cap.why_not(req.demand()) }
    } else {
        Reason::Resources { need: req.gpus, free: cap.total_free() }
    }
}

/// Whether a detailed allocation gives the job exactly what it asks: its share (or whole GPUs)
/// and, on each node, the CPUs and memory of [`Demand::per_node`]. Count-only: always.
fn matches_demand(cap: &Pools, alloc: &Allocation, d: Demand) -> bool {
    if !cap.is_detailed() {
        return true;
    }
    let Some(dt) = &alloc.detail else { return alloc.parts.is_empty() && d.gpus == 0 && d.cpus == 0 && d.mem_mib == 0 };
    dt.milli == d.milli_per_gpu()
        && dt.cpus.len() == alloc.parts.len()
        && dt.mem_mib.len() == alloc.parts.len()
        && alloc.parts.iter().enumerate().all(|(p, &(_, k))| (dt.cpus[p], dt.mem_mib[p]) == d.per_node(k))
}

/// The factor `req`'s run time is multiplied by on `alloc` under topology `t`: the slowdown of
/// the levels its nodes cross (1 on one node, within one unit of the lowest level, or without
/// a topology).
fn spread_factor(t: Option<&crate::topology::Topology>, req: &JobReq, alloc: &Allocation) -> f64 {
    match t {
        Some(t) if alloc.parts.len() > 1 => t.factor_at(req.spread_row, t.crossed(alloc.parts.iter().map(|p| p.0))),
        _ => 1.0,
    }
}

/// EASY's test for one waiting job that fits now: it may start if it ends by the head's
/// reservation (`shadow`), or if the head still fits at the shadow time once the job's GPUs are
/// taken out of `shadow_cap` (counts for pooled placement, the job's real nodes for
/// consolidated). Its end is planned on the nodes it would get: a gang spread over several
/// units of `topo`'s levels runs longer by their slowdown. On yes, takes the job out of `cap`
/// (and, if it runs past the shadow time, out of `shadow_cap`) and returns its allocation; on
/// no, changes nothing.
#[allow(clippy::too_many_arguments)]
fn easy_backfill_one(
    req: &JobReq,
    estimate: Time,
    now: Time,
    head: Demand,
    shadow: Time,
    cap: &mut Pools,
    shadow_cap: &mut Pools,
    topo: Option<&crate::topology::Topology>,
) -> Option<Allocation> {
    let past_shadow = now + estimate > shadow;
    // A detailed cluster (shares, CPUs, memory), or one of several pools, checks the exact
    // nodes even when pooled.
    let pooled = cap.counts_only();
    // Pooled: a count decides, before the (costlier) choice of nodes.
    if past_shadow && pooled && shadow_cap.total_free() < (req.gpus + head.gpus) as u64 {
        return None;
    }
    let a = cap.place_for(req.demand())?;
    // Spread over units, it may run past the shadow time where its estimate alone would not.
    let past_shadow = past_shadow || now + scaled(estimate, 1.0 / spread_factor(topo, req, &a)) > shadow;
    if past_shadow {
        if pooled {
            let taken = shadow_cap.take_what_if(&a);
            debug_assert!(taken);
        } else {
            if !shadow_cap.can_take(&a) {
                return None;
            }
            shadow_cap.take(&a);
            if !shadow_cap.fits_for(head) {
                shadow_cap.give(&a);
                return None;
            }
        }
    }
    cap.take(&a);
    Some(a)
}

impl Reservations {
    /// Reserves the earliest slot from `now` for a waiting job and records it.
    /// `estimate`: on the slowest pool it accepts (a per-pool profile plans it on the pool it
    /// reserves, from `req.estimate`).
    /// `topo`: a gang spread over several of its units is planned with its slowdown.
    fn reserve(
        &mut self,
        now: Time,
        key: QueueKey,
        req: &JobReq,
        estimate: Time,
        topo: Option<&crate::topology::Topology>,
    ) -> (Time, Held) {
        let slow = |a: &Allocation| spread_factor(topo, req, a);
        let (t, end, held) = self.profile.reserve(now, req.demand(), estimate, req.estimate, &slow);
        self.res.insert(key.1, (t, end, held.clone()));
        self.by_start.insert((t, key));
        (t, held)
    }
}
