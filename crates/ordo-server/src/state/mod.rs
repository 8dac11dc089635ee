//! The server's state machine: the database, the `ordo-core` scheduler over the nodes that are
//! up, and every state change (submit, start, end, cancel, node up/down, policy) as one transaction.

use crate::api::*;
use crate::auth::{Principal, Role};
use crate::config::{check_policy, ServerConfig};
use crate::db::{self, audit, ids_text, Ctx, DbError};
use crate::kinds;
use ordo_core::scheduler::{CommitError, JobReq};
use ordo_core::{
    Allocation, ClusterSpec, Demand, Elig, JobId, ModelPick, NodeSpec, Placement, PolicySpec, Pools, QuotaConfig,
    Reason, Scheduler, Speeds,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::Notify;

/// An API error: the HTTP status it maps to and a message for people.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: malformed or invalid request.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no valid token.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: valid token, not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// 404: unknown job or node.
    #[error("{0}")]
    NotFound(String),
    /// 409: conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// 422: can never be satisfied (e.g. more GPUs than any node).
    #[error("{0}")]
    Unprocessable(String),
    /// 429: too many failed token checks from this peer or for this token.
    #[error("{0}")]
    TooManyRequests(String),
    /// 500: the database failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A known node.
#[derive(Debug, Clone)]
struct Node {
    seq: i64,
    gpus: u32,
    fake: bool,
    gpu_model: Option<String>,
    /// Memory of each GPU, MiB, when its agent said.
    gpu_mem_mib: Option<u64>,
    /// Its features (lowercased, sorted).
    features: Vec<String>,
    /// Its place in the topology: its unit of each level it named.
    topology: BTreeMap<String, String>,
    up: bool,
    last_seen: i64,
    cpus: Option<u32>,
    mem_mib: Option<u64>,
    mem_limits: bool,
    /// The address other nodes reach it at (`ordo agent --addr`), when it gave one.
    addr: Option<String>,
    /// Why it takes no new work, when it does not: what its agent reports (`problem`: its work
    /// directory is full or cannot be written, a job's processes could not be killed). Its
    /// running jobs go on; the scheduler sees none of its GPUs until it clears.
    drain: Option<String>,
    /// An admin's cordon or drain (`state/maint.rs`).
    maint: Option<NodeMaint>,
}

impl Node {
    /// Whether the scheduler may start new work on it.
    fn takes_work(&self) -> bool {
        self.up && !self.paused()
    }

    /// As ordo-core sees it, named `name`, with `gpus` GPUs, `cpus` cores and `mem_mib` memory
    /// (what it offers less what hidden jobs hold), its GPU model, memory and features.
    fn spec(&self, name: &str, gpus: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            gpus,
            cpus,
            mem_mib,
            gpu_model: self.gpu_model.clone(),
            gpu_mem_mib: self.gpu_mem_mib,
            features: self.features.clone(),
        }
    }
}

/// The node pools of a typed cluster (nodes grouped by GPU model, memory and features, as the
/// scheduler groups them), for checks over nodes that are not all up: a submission against
/// every registered node, a registration against the kinds already known. An error when there
/// are more than `ordo_core::pools::MAX_POOLS` kinds.
fn kinds_of<'a>(nodes: impl Iterator<Item = (&'a str, &'a Node)>) -> Result<Pools, String> {
    let spec = ClusterSpec { nodes: nodes.map(|(name, n)| n.spec(name, n.gpus, None, None)).collect() };
    Pools::build(&spec, Placement::Consolidated, false, &Speeds::default(), ModelPick::default(), true)
}

/// Where `j` may run among `sched`'s node pools ([`JobReq::elig`]): any for a job that takes
/// any GPU; an error in words when no node of `sched` has what it asks (ordo-core's: it names
/// the model, memory or feature). The job's models are widened to the node models they match
/// (`a100` to `a100-sxm4-80gb`, see [`kinds::widen`]).
fn elig_of(sched: &Scheduler, j: &JobInfo) -> Result<Elig, String> {
    match j.needs() {
        None => Ok(Elig::ANY),
        Some(n) => sched.eligibility(&kinds::widen(&n, sched.capacity().keys())),
    }
}

/// All the server's state; one lock guards it.
#[derive(Debug)]
pub struct Core {
    conn: Connection,
    cfg: ServerConfig,
    policy: PolicySpec,
    sched: Scheduler,
    nodes: BTreeMap<String, Node>,
    /// Scheduler node index -> node name (the nodes that were up at the last rebuild).
    sched_nodes: Vec<String>,
    /// Scheduler node index -> scheduler GPU index -> physical GPU index.
    phys: Vec<Vec<u32>>,
    /// Pending jobs no node that is up can hold (kept out of the scheduler until one can).
    held: BTreeSet<JobNo>,
    pending: HashMap<JobNo, JobInfo>,
    active: HashMap<JobNo, JobInfo>,
    /// Each waiting job's last audited reason, as (kind, blocking job): a `skip` record is
    /// written when it changes, not when only free counts or reservation times move.
    last_reason: HashMap<JobNo, (u8, u32)>,
    pending_per_user: HashMap<String, usize>,
    node_notify: HashMap<String, Arc<Notify>>,
    /// Nodes that have new work since the caller last took this list.
    to_wake: BTreeSet<String>,
    /// When the last explained pass ran.
    last_explain: i64,
    /// How long it took, ms.
    explain_cost_ms: i64,
    /// Group commit (the server): state changes go into one open transaction that
    /// [`Core::commit`] makes durable for all of them at once; else each commits by itself.
    group: bool,
    /// State changes made so far (each one transaction or savepoint).
    writes: u64,
    /// Running `--no-preempt` jobs under a preemptive policy: kept out of the scheduler, whose
    /// nodes are shrunk by their GPUs, so the policy can never choose to preempt them.
    hidden: BTreeSet<JobNo>,
    /// Waiting jobs the policy chose to start but the server could not yet: their GPUs are
    /// still being freed by a preempted job, or the node lacks the CPUs or memory they ask.
    blocked: HashMap<JobNo, String>,
    /// Pending jobs waiting on other jobs' ends (kept out of the scheduler until then).
    deps: ordo_core::Dependencies,
    /// Jobs whose dependencies were settled and that wait to be moved, in steps (`deps.rs`):
    /// into the scheduler's queue (`None`), or cancelled as never satisfiable (the dependency
    /// and how its job ended).
    backlog: std::collections::VecDeque<(JobNo, Option<(ordo_core::Dep, bool)>)>,
    /// The jobs of `backlog` that will be cancelled: never given to the scheduler meanwhile.
    doomed: std::collections::HashSet<JobNo>,
    /// GPU activity: samples, per-job figures, series, allocated-but-idle (`activity.rs`).
    live: activity::Live,
    /// Job arrays with elements that have not ended, by id (`arrays.rs`).
    arrays: HashMap<JobNo, arrays::ArrayMeta>,
    /// The last explained plan (every waiting job's reason and place), which the views (a job,
    /// the queue, `/metrics`) read rather than each planning the whole queue under the state
    /// lock: made by the scheduling pass (at most every 200 ms), or by a view when older than
    /// [`EXPLAINED_MAX_AGE_MS`].
    explained: std::cell::RefCell<Option<Arc<Explained>>>,
    /// Arrays being taken in steps (`ingest.rs`): first id -> last id.
    ingesting: BTreeMap<JobNo, JobNo>,
    /// Requests for jobs' output for each node's agent's next poll (`logs.rs`).
    log_asks: HashMap<String, Vec<LogAsk>>,
}

/// How old an explained plan the views may show, ms.
const EXPLAINED_MAX_AGE_MS: i64 = 1_000;

/// How old an explained plan the views show even when the state changed since, ms.
const EXPLAINED_MIN_AGE_MS: i64 = 200;

/// An explained plan as the views read it.
#[derive(Debug)]
pub(super) struct Explained {
    /// When it was made.
    at: i64,
    /// The state's change count then ([`Core::writes`]).
    writes: u64,
    /// Every waiting job in the order the policy runs them (see `Core::policy_order`).
    order: Vec<JobId>,
    /// Each waiting job's place in `order`.
    place: HashMap<JobId, usize>,
    /// Why each job left waiting waits.
    reasons: HashMap<JobId, Reason>,
}

fn jid(id: JobNo) -> JobId {
    JobId(id as u32)
}

/// The scheduler's request for a job: its GPUs, CPUs and memory, the GPUs it accepts, the given
/// estimate and its stored priority. This is the one place that turns a job into what
/// `ordo-core` sees; with the nodes' CPUs, memory, GPU models and features in the core's
/// cluster (see `Core::cluster_spec`), the core places a job only on a node that has the GPUs
/// (of a kind it accepts), CPUs and memory it asks for. An error when no node of `sched` has
/// GPUs it accepts ([`elig_of`]): the job is then kept out of the scheduler.
fn job_req(
    q: &QuotaConfig,
    sched: &Scheduler,
    j: &JobInfo,
    id: JobNo,
    submit: i64,
    estimate: i64,
) -> Result<JobReq, String> {
    let mut r = any_kind_req(q, j, id, submit, estimate);
    r.elig = elig_of(sched, j)?;
    // Its topology ask, on the levels of the nodes up now (ignored while there is no topology).
    if let Some(a) = &j.topology {
        let ask: ordo_core::TopoAsk = a.parse()?;
        r.topo = sched.topology_need(&ask)?;
    }
    Ok(r)
}

/// [`job_req`] on any kind of node (`Elig::ANY`).
fn any_kind_req(q: &QuotaConfig, j: &JobInfo, id: JobNo, submit: i64, estimate: i64) -> JobReq {
    let mut r = JobReq::new(jid(id), submit, j.gpus, estimate);
    r.priority = j.priority;
    r.cpus = j.cpus.unwrap_or(0);
    r.mem_mib = j.mem_mib.unwrap_or(0);
    // Policies that share between users (fair, priority, rr, qssf) compare user indices only
    // for equality; a stable hash of the name serves as one. A user's group is the one of the
    // `[quotas]` groups that lists them, else they are their own group.
    r.user = user_index(&j.user);
    r.group = group_index(q, &j.user);
    // An array's limit on running elements (`%N`) is the core's, by the array's id.
    r.array = j.array.map_or(0, |a| a.id as u32);
    // A multi-node job: its GPUs split evenly over exactly this many nodes (gang placement);
    // else (0) the placement decides, over several nodes when it is larger than any.
    r.nodes = gang_nodes(j);
    r
}

/// Gives a waiting job to `sched` as [`job_req`] makes it; `false` when `sched` cannot take it
/// (no node of a kind it accepts, or none that can ever hold it): the caller keeps it out.
fn queue_in(
    sched: &mut Scheduler,
    q: &QuotaConfig,
    j: &JobInfo,
    id: JobNo,
    submit: i64,
    estimate: i64,
    now: i64,
) -> bool {
    guard_runs(sched, j, id);
    job_req(q, sched, j, id, submit, estimate).is_ok_and(|r| sched.submit(r, now).is_ok())
}

/// Tells the core how long each run of `j` is protected from preemption beyond the server's
/// `min_run`: its own `--min-run`, and for `--checkpoint every:T` until it has saved once.
fn guard_runs(sched: &mut Scheduler, j: &JobInfo, id: JobNo) {
    if let Some(p) = &j.preempt {
        sched.set_run_floor(jid(id), p.run_floor());
    }
}

/// Of `ran` ms a preempted run of `j` lasted, how much survives by its checkpoint rule (`None`:
/// it restarts from zero). A job that saves on its stop signal keeps all of it.
fn kept_of(j: &JobInfo, ran: i64) -> Option<i64> {
    j.preempt.as_ref().and_then(|p| p.rule().ok()).unwrap_or_default().kept(ran)
}

/// The core's gang shape of a job: its node count for a multi-node job, 0 (any) otherwise.
fn gang_nodes(j: &JobInfo) -> u32 {
    if j.nodes > 1 {
        j.nodes
    } else {
        0
    }
}

/// GPUs a job needs on each of its nodes (all of them for a job the placement splits).
fn per_node_gpus(j: &JobInfo) -> u32 {
    j.gpus / j.nodes.max(1)
}

/// Whether no node of the largest size that is up (`max_up` GPUs) can hold a node's share of
/// `j`. A job the placement splits over nodes (`nodes` 0) is the core's to refuse (when the
/// GPUs that are up are too few in all).
fn outgrows(j: &JobInfo, max_up: u32) -> bool {
    j.nodes != 0 && per_node_gpus(j) > max_up
}

/// A job's GPUs on each of its nodes in its current run: `(node, GPU indices)`, rank order.
fn placed(j: &JobInfo) -> Vec<(&str, &[u32])> {
    if j.ranks.is_empty() {
        j.node.as_deref().map(|n| (n, j.gpu_ids.as_slice())).into_iter().collect()
    } else {
        j.ranks.iter().map(|r| (r.node.as_str(), r.gpu_ids.as_slice())).collect()
    }
}

/// The lowest rendezvous port an agent may report (below it: privileged ports).
const MIN_MASTER_PORT: u16 = 1024;

/// The core's group index of a user: their `[quotas]` group's, else their own user index.
fn group_index(q: &QuotaConfig, user: &str) -> u32 {
    match q.group_of(user) {
        Some(g) => group_name_index(g),
        None => user_index(user),
    }
}

/// The core's index of a `[quotas]` group name (apart from user names).
fn group_name_index(group: &str) -> u32 {
    user_index(&format!("group:{group}"))
}

/// FNV-1a of a user name: the same index for the same name across restarts.
fn user_index(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// What a job asks for, for people: `2 GPUs`, `1 GPU, 8 CPUs and 16G of memory`.
fn ask_text(gpus: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> String {
    let mut parts = vec![format!("{gpus} GPU{}", if gpus == 1 { "" } else { "s" })];
    if let Some(c) = cpus {
        parts.push(format!("{c} CPUs"));
    }
    if let Some(m) = mem_mib {
        parts.push(format!("{} of memory", fmt_mib(m)));
    }
    match parts.len() {
        1 => parts.remove(0),
        _ => {
            let last = parts.pop().unwrap_or_default();
            format!("{} and {last}", parts.join(", "))
        }
    }
}

/// Whether an empty `n` holds all that `j` asks for (a node that does not report CPUs or
/// memory does not limit them), with GPUs of a kind it accepts.
fn node_holds(n: &Node, j: &JobInfo) -> bool {
    node_holds_ask(n, j.gpus, j.cpus, j.mem_mib) && node_accepts(n, j)
}

/// Whether `n`'s GPUs are of a kind `j` accepts (GPU model, memory, features).
fn node_accepts(n: &Node, j: &JobInfo) -> bool {
    j.needs().is_none_or(|needs| kinds::accepts(&needs, n.gpu_model.as_deref(), n.gpu_mem_mib, &n.features))
}

/// Whether an empty `n` holds `gpus` GPUs with the CPUs and memory asked.
fn node_holds_ask(n: &Node, gpus: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> bool {
    n.gpus >= gpus
        && !matches!((cpus, n.cpus), (Some(w), Some(h)) if w > h)
        && !matches!((mem_mib, n.mem_mib), (Some(w), Some(h)) if w > h)
}

/// What placement must find for a job (the demand of its `job_req`), on any kind of node (see
/// `Core::demand_of` for the kinds it accepts).
fn demand(j: &JobInfo) -> Demand {
    Demand::new(j.gpus, None, j.cpus.unwrap_or(0), j.mem_mib.unwrap_or(0)).on_nodes(gang_nodes(j))
}

/// A running job's allocation on `cap`: `j.gpus` GPUs on scheduler node `n`. On a detailed
/// capacity (nodes that report CPUs or memory) it carries the detail `Scheduler::start` needs:
/// the node's lowest free GPUs and the job's CPUs and memory there; count-only otherwise (and
/// where the node lacks them, so that the start is refused and the job treated as a conflict).
fn alloc_on(cap: &ordo_core::Pools, parts: Vec<(u32, u32)>, j: &JobInfo) -> Allocation {
    let alloc = Allocation { parts, detail: None };
    if cap.is_detailed() {
        cap.complete(&alloc, demand(j)).unwrap_or(alloc)
    } else {
        alloc
    }
}

fn internal(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::Db(DbError { what: format!("{what}: {e}"), source: rusqlite::Error::InvalidQuery })
}

/// What a reason says, without the numbers that move on every pass (free GPUs, times).
fn reason_key(r: &Reason) -> (u8, u32) {
    match r {
        Reason::Resources { .. } => (0, 0),
        Reason::Priority { behind } => (1, behind.0),
        Reason::Reserved { for_job, .. } => (2, for_job.0),
        Reason::Reservation { .. } => (3, 0),
        Reason::Quota { scope, .. } => (5, *scope as u32),
        _ => (4, 0),
    }
}

/// Where one state change is written: a savepoint, rolled back as a whole if it is dropped
/// before its `commit`. Under group commit it sits inside the open group transaction (begun
/// here when none is open), so its `commit` makes nothing durable yet: that is
/// [`Core::commit`]'s, once for every change since the last one. Otherwise it is a transaction
/// of its own. (A function of the fields it needs, so that a caller may read the rest of the
/// state while the savepoint is open.)
fn begin<'a>(conn: &'a mut Connection, group: bool, writes: &mut u64) -> Result<rusqlite::Savepoint<'a>, DbError> {
    if group && conn.is_autocommit() {
        conn.execute_batch("BEGIN IMMEDIATE").ctx("begin")?;
    }
    *writes += 1;
    conn.savepoint().ctx("begin")
}

/// `512M`, `16G`: a size in MiB for people.
pub fn fmt_mib(m: u64) -> String {
    if m >= 1024 && m.is_multiple_of(1024) {
        format!("{}G", m / 1024)
    } else {
        format!("{m}M")
    }
}

/// `+5m`, `+2h10m`: a relative time for people.
pub fn fmt_rel(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 2 * 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

mod activity;
pub use activity::group_of;
pub use deps::BACKLOG_STEP;
mod agents;
pub(crate) use agents::speaks_for as speaks_for_node;
mod arrays;
mod deps;
mod gang;
mod ingest;
pub use ingest::{Ingest, ARRAY_STEP};
mod jobs;
mod logs;
mod maint;
mod pass;
mod policy;
mod quotas;
mod submit;
mod views;

impl Core {
    /// Opens the state from the database (creating it), rebuilding the scheduler: running jobs
    /// are committed on their recorded GPUs, waiting jobs resubmitted in submit order. Nodes get
    /// one time-out from now to reconnect.
    pub fn open(cfg: ServerConfig, now: i64) -> Result<Core, ApiError> {
        let conn = db::open(&cfg.db)?;
        let stored = db::meta_get(&conn, "policy")?;
        let policy = match (&stored, cfg.policy_given) {
            (Some(p), false) => p
                .parse::<PolicySpec>()
                .map_err(|e| ApiError::BadRequest(format!("policy stored in {}: {e}", cfg.db.display())))?,
            _ => cfg.policy.clone(),
        };
        check_policy(&policy).map_err(ApiError::BadRequest)?;
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('policy', ?1)", params![policy.to_string()])
            .ctx("store policy")?;
        let sched = Scheduler::new(&ClusterSpec { nodes: vec![] }, Placement::Consolidated, policy.clone());
        let mut core = Core {
            conn,
            cfg,
            policy,
            sched,
            nodes: BTreeMap::new(),
            sched_nodes: vec![],
            phys: vec![],
            held: BTreeSet::new(),
            pending: HashMap::new(),
            active: HashMap::new(),
            last_reason: HashMap::new(),
            pending_per_user: HashMap::new(),
            node_notify: HashMap::new(),
            to_wake: BTreeSet::new(),
            last_explain: i64::MIN / 2,
            explain_cost_ms: 0,
            group: false,
            writes: 0,
            hidden: BTreeSet::new(),
            blocked: HashMap::new(),
            deps: ordo_core::Dependencies::default(),
            backlog: Default::default(),
            doomed: Default::default(),
            live: activity::Live::default(),
            arrays: HashMap::new(),
            explained: Default::default(),
            ingesting: BTreeMap::new(),
            log_asks: HashMap::new(),
        };
        core.load(now)?;
        core.load_activity()?;
        Ok(core)
    }

    fn load(&mut self, now: i64) -> Result<(), ApiError> {
        self.ingesting.clear();
        self.remove_incomplete_arrays(now)?;
        self.nodes.clear();
        let mut st = self
            .conn
            .prepare(
                "SELECT name, seq, gpus, fake, gpu_model, state, cpus, mem_mib, mem_limits, addr, gpu_mem_mib, features,
                        topology
                 FROM nodes ORDER BY seq",
            )
            .ctx("load nodes")?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Node {
                        seq: r.get(1)?,
                        gpus: r.get(2)?,
                        fake: r.get::<_, i64>(3)? != 0,
                        gpu_model: r.get(4)?,
                        gpu_mem_mib: r.get::<_, Option<i64>>(10)?.map(|m| m as u64),
                        features: db::text_list(r.get(11)?),
                        topology: r
                            .get::<_, Option<String>>(12)?
                            .and_then(|t| crate::topo::parse_place(&t).ok())
                            .unwrap_or_default(),
                        up: r.get::<_, String>(5)? == "up",
                        last_seen: now,
                        cpus: r.get(6)?,
                        mem_mib: r.get::<_, Option<i64>>(7)?.map(|m| m as u64),
                        mem_limits: r.get::<_, i64>(8)? != 0,
                        addr: r.get(9)?,
                        drain: None,
                        maint: None,
                    },
                ))
            })
            .ctx("load nodes")?
            .collect::<Result<Vec<_>, _>>()
            .ctx("load nodes")?;
        drop(st);
        self.nodes = rows.into_iter().collect();
        self.load_maint()?;
        self.pending.clear();
        self.active.clear();
        self.pending_per_user.clear();
        for j in db::load_jobs_in(&self.conn, &[JobState::Pending])? {
            *self.pending_per_user.entry(j.user.clone()).or_default() += 1;
            self.pending.insert(j.id, j);
        }
        for j in db::load_jobs_in(&self.conn, &[JobState::Starting, JobState::Running, JobState::Preempting])? {
            self.active.insert(j.id, j);
        }
        // Active jobs on nodes that are down or unknown (should not happen: a node goes down in
        // the same transaction that requeues its jobs) go back to the queue.
        let stray: Vec<JobNo> = self
            .active
            .values()
            .filter(|j| {
                j.ranks.is_empty() && !matches!(j.node.as_ref().and_then(|n| self.nodes.get(n)), Some(n) if n.up)
            })
            .map(|j| j.id)
            .collect();
        if !stray.is_empty() {
            self.requeue_jobs(&stray, now, "scheduler", "its node is not up")?;
        }
        self.load_deps(now)?;
        self.load_arrays()?;
        self.rebuild(now)?;
        self.gang_strays(now)
    }

    /// Whether a running job is kept out of the scheduler (see `Core::hidden`).
    /// So is a multi-node job with a rank on a node that is down (it is being stopped): its
    /// GPUs on the nodes that are up stay taken until its other ranks have stopped.
    /// So is a job on a node that takes no new work (drained): the scheduler does not see that
    /// node, and the job's end gives it nothing back until the node takes work again.
    fn hides(&self, j: &JobInfo) -> bool {
        (j.no_preempt && self.policy.order.preemptive())
            || j.ranks.iter().any(|r| !self.nodes.get(&r.node).is_some_and(|n| n.up))
            || placed(j).iter().any(|(node, _)| self.nodes.get(*node).is_some_and(|n| n.paused()))
    }

    /// The cluster the scheduler sees: the nodes that are up, in registration order, with their
    /// CPUs and memory, each less the GPUs, CPUs and memory of its hidden (`--no-preempt`) jobs,
    /// and their GPU model, GPU memory and features (the scheduler groups them into pools).
    /// The one place that builds the core's `ClusterSpec` from registered nodes. A node that
    /// reports CPUs or memory makes the core's capacity detailed: it then places every job by
    /// GPUs, CPUs and memory together (see `job_req`).
    fn cluster_spec(&self, up: &[(&String, &Node)]) -> ClusterSpec {
        ClusterSpec {
            nodes: up
                .iter()
                .map(|(name, n)| {
                    let (mut gpus, mut cpus, mut mem) = (0u32, 0u32, 0u64);
                    for j in self.active.values() {
                        if !self.hides(j) {
                            continue;
                        }
                        if let Some((_, g)) = placed(j).into_iter().find(|(n, _)| *n == name.as_str()) {
                            gpus += g.len() as u32;
                            cpus += j.cpus.unwrap_or(0);
                            mem += j.mem_mib.unwrap_or(0);
                        }
                    }
                    n.spec(
                        name,
                        n.gpus.saturating_sub(gpus),
                        n.cpus.map(|c| c.saturating_sub(cpus)),
                        n.mem_mib.map(|m| m.saturating_sub(mem)),
                    )
                })
                .collect(),
        }
    }

    /// Rebuilds the scheduler over the nodes that are up: jobs preempted earlier first (their
    /// attained service replayed, see below), then running jobs (on their GPUs), then waiting
    /// jobs in submit order.
    fn rebuild(&mut self, now: i64) -> Result<(), ApiError> {
        let up: Vec<(&String, &Node)> = {
            let mut v: Vec<_> = self.nodes.iter().filter(|(_, n)| n.takes_work()).collect();
            v.sort_by_key(|(_, n)| n.seq);
            v
        };
        let spec = self.cluster_spec(&up);
        let preemptive = self.policy.order.preemptive();
        let max_up = spec.max_node_gpus();
        let index: HashMap<String, u32> = up.iter().enumerate().map(|(i, (n, _))| ((*n).clone(), i as u32)).collect();
        let node_gpus: Vec<u32> = spec.nodes.iter().map(|n| n.gpus).collect();
        let phys_gpus: Vec<u32> = up.iter().map(|(_, n)| n.gpus).collect();
        self.sched_nodes = up.iter().map(|(n, _)| (*n).clone()).collect();
        // Typed: nodes of one GPU model, GPU memory and feature set are a pool, and a job's
        // constraint limits it to the pools that satisfy it (a cluster of one kind is one pool,
        // as before). Registration keeps the kinds under ordo-core's limit.
        let mut sched = Scheduler::typed(
            &spec,
            Placement::Consolidated,
            self.policy.clone(),
            &Speeds::default(),
            ModelPick::default(),
        )
        .map_err(|e| internal("build the scheduler", e))?;
        // The topology of the nodes up, in the scheduler's order (registration keeps every unit
        // under one parent, so this holds; should it not, gangs are placed without it).
        match crate::topo::build(&self.cfg.topology_levels, up.iter().map(|(n, node)| (n.as_str(), &node.topology))) {
            Ok(Some(t)) => sched.set_topology(Arc::new(t)).map_err(|e| internal("set the topology", e))?,
            Ok(None) => {}
            Err(e) => eprintln!("ordo server: the nodes' topology is ignored: {e}"),
        }
        sched.set_min_run(self.cfg.min_run_ms);
        self.set_array_limits(&mut sched);
        if !self.cfg.quotas.is_empty() {
            let total = phys_gpus.iter().map(|&g| g as u64).sum();
            let q = &self.cfg.quotas;
            // Limits by model are on the models of the nodes up now, matched as jobs' models are
            // (`a100` covers `a100-sxm4-80gb`); one on a model no node up has limits nothing.
            sched.set_quotas(q.resolve_present(
                total,
                sched.capacity(),
                kinds::model_matches,
                |u| Some(user_index(u)),
                |g| Some(group_name_index(g)),
            ));
        }
        let mut pairs: Vec<Vec<Option<u32>>> = node_gpus.iter().map(|&g| vec![None; g as usize]).collect();
        let mut used: Vec<Vec<bool>> = phys_gpus.iter().map(|&g| vec![false; g as usize]).collect();
        let mut conflicts = Vec::new();
        // Preemptive policies rank by attained service, which the core keeps per job: a job
        // preempted earlier gets it back by replaying its history through the public API
        // (submitted and started `executed` ago, preempted now), on an empty cluster.
        let mut replayed = BTreeSet::new();
        if preemptive {
            let mut back: Vec<&JobInfo> =
                self.pending.values().filter(|j| j.executed_ms > 0 && j.held_by.is_none()).collect();
            back.sort_by_key(|j| (j.submit, j.id));
            for j in back {
                let t0 = now - j.executed_ms;
                guard_runs(&mut sched, j, j.id);
                let Ok(req) = job_req(&self.cfg.quotas, &sched, j, j.id, j.submit, j.time_limit_ms) else { continue };
                if outgrows(j, max_up) || sched.submit(req, t0).is_err() {
                    continue;
                }
                // Placed by all it asks (GPUs of a kind it accepts, CPUs, memory), as the core
                // would place it.
                let alloc = sched.capacity().place_for(req.demand());
                // Its work lost to earlier preemptions stays lost (SRTF's work left).
                let lost = j.lost_ms;
                let ok = alloc.is_some_and(|a| sched.start(jid(j.id), &a, t0).is_ok())
                    && sched.preempt_keeping(jid(j.id), now, |ran| Some(ran - lost)).is_ok();
                if !ok {
                    return Err(internal("replay a preempted job's service", format!("job {}", j.id)));
                }
                replayed.insert(j.id);
            }
        }
        let mut hidden = BTreeSet::new();
        let mut act: Vec<&JobInfo> = self.active.values().collect();
        act.sort_by_key(|j| (j.start.unwrap_or(0), j.id));
        for j in act {
            // Its nodes (one, or a multi-node job's ranks) with its GPUs on each.
            let mut on: Vec<(u32, Vec<u32>)> = Vec::new();
            let hide = self.hides(j);
            for (node, ids) in placed(j) {
                match index.get(node) {
                    Some(&n) if !on.iter().any(|(m, _)| *m == n) => on.push((n, ids.to_vec())),
                    // A hidden job on a node the scheduler does not see (down, or drained)
                    // holds nothing there.
                    None if hide => {}
                    _ => {
                        on.clear();
                        break;
                    }
                }
            }
            let count: usize = on.iter().map(|(_, ids)| ids.len()).sum();
            // (A hidden job holds only what it holds on the nodes the scheduler sees.)
            let partial = hide;
            let ok = (partial || (!on.is_empty() && count == j.gpus as usize))
                && on.iter().all(|(n, ids)| {
                    let u = &used[*n as usize];
                    let mut seen = BTreeSet::new();
                    ids.iter().all(|&p| (p as usize) < u.len() && !u[p as usize] && seen.insert(p))
                });
            if !ok {
                conflicts.push(j.id);
                continue;
            }
            if hide {
                for (n, ids) in &on {
                    for &p in ids {
                        used[*n as usize][p as usize] = true;
                    }
                }
                hidden.insert(j.id);
                continue;
            }
            // Its GPUs on its nodes, with its CPUs and memory there where the capacity is detailed.
            let alloc = alloc_on(sched.capacity(), on.iter().map(|(n, ids)| (*n, ids.len() as u32)).collect(), j);
            // A running job keeps its GPUs whatever its node is now: when its node no longer
            // satisfies its constraint (it registered again as another kind) it is taken as it
            // runs, any kind.
            let req = |sched: &Scheduler, estimate: i64| {
                let mut r = any_kind_req(&self.cfg.quotas, j, j.id, j.submit, estimate);
                r.elig = elig_of(sched, j).unwrap_or(Elig::ANY);
                r
            };
            let committed = if preemptive {
                // At its real start (and, when it ran before, after its earlier service), so
                // attained service and the `min_run` protection count from the right time.
                let s = j.start.unwrap_or(now).min(now);
                let t0 = s - j.executed_ms;
                guard_runs(&mut sched, j, j.id);
                let lost = j.lost_ms;
                let before = sched.submit(req(&sched, j.time_limit_ms), t0).is_ok()
                    && (j.executed_ms == 0
                        || (sched.start(jid(j.id), &alloc, t0).is_ok()
                            && sched.preempt_keeping(jid(j.id), s, |ran| Some(ran - lost)).is_ok()));
                if before {
                    sched.start(jid(j.id), &alloc, s)
                } else {
                    Err(CommitError::NotWaiting(jid(j.id)))
                }
            } else {
                let left = (j.start.unwrap_or(now) + j.time_limit_ms - now).max(1);
                match sched.submit(req(&sched, left), now) {
                    Ok(()) => sched.start(jid(j.id), &alloc, now),
                    Err(_) => Err(CommitError::NotWaiting(jid(j.id))),
                }
            }
            .map(|ids| {
                for (n, sids) in ids {
                    let Some((_, phys)) = on.iter().find(|(m, _)| *m == n) else { continue };
                    let mut phys = phys.clone();
                    phys.sort_unstable();
                    for (s, p) in sids.iter().zip(phys) {
                        pairs[n as usize][*s as usize] = Some(p);
                        used[n as usize][p as usize] = true;
                    }
                }
            })
            .is_ok();
            if !committed {
                conflicts.push(j.id);
            }
        }
        self.phys = pairs
            .into_iter()
            .zip(used)
            .map(|(p, u)| {
                let mut free = u.iter().enumerate().filter(|(_, &b)| !b).map(|(i, _)| i as u32);
                p.into_iter().map(|x| x.unwrap_or_else(|| free.next().expect("as many free as unmapped"))).collect()
            })
            .collect();
        self.held.clear();
        self.hidden = hidden;
        let mut pend: Vec<&JobInfo> = self.pending.values().filter(|j| !replayed.contains(&j.id)).collect();
        pend.sort_by_key(|j| (j.submit, j.id));
        // Jobs held by a user, or waiting on other jobs, stay out of the scheduler (they neither
        // start nor block others).
        for j in pend
            .into_iter()
            .filter(|j| j.held_by.is_none() && !self.deps.is_waiting(jid(j.id)) && !self.doomed.contains(&j.id))
        {
            if outgrows(j, max_up) || !queue_in(&mut sched, &self.cfg.quotas, j, j.id, j.submit, j.time_limit_ms, now) {
                self.held.insert(j.id);
            }
        }
        self.sched = sched;
        self.last_reason.retain(|k, _| self.pending.contains_key(k));
        self.blocked.retain(|k, _| self.pending.contains_key(k));
        if !conflicts.is_empty() {
            // A job recorded on GPUs that no longer exist or are taken twice: run it again.
            self.requeue_jobs(&conflicts, now, "scheduler", "its recorded GPUs are no longer available")?;
            return self.rebuild(now);
        }
        Ok(())
    }

    /// Puts active jobs back in the queue (or fails them, per job option) in one transaction.
    /// A job that ran keeps the run time as attained service (`executed_ms`) and counts a
    /// restart. With `preempted`, the scheduler takes the job back through its `preempt` (its
    /// progress kept, no rebuild needed); otherwise the caller rebuilds the scheduler.
    fn requeue_jobs(&mut self, ids: &[JobNo], now: i64, actor: &str, why: &str) -> Result<(), ApiError> {
        self.requeue(ids, now, actor, why, false)
    }

    fn requeue(&mut self, ids: &[JobNo], now: i64, actor: &str, why: &str, preempted: bool) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        let mut moves = Vec::new();
        for &id in ids {
            let Some(j) = self.active.get(&id) else { continue };
            let ran = match j.state {
                JobState::Running | JobState::Preempting => {
                    (now - self.sched.running_start(jid(id)).or(j.start).unwrap_or(now)).max(0)
                }
                _ => 0,
            };
            // A preempted job's work since its last checkpoint is lost (all of it, for a job that
            // restarts from zero: this run and the work its earlier runs had kept); a node failure
            // loses the same.
            let lost = match kept_of(j, ran) {
                Some(k) => ran - k.clamp(0, ran),
                None => j.executed_ms - j.lost_ms + ran,
            };
            let fail = !preempted && (j.on_node_failure == OnNodeFailure::Fail || j.cancel_requested);
            let (state, reason) = if j.cancel_requested {
                (JobState::Cancelled, format!("cancelled; {why}"))
            } else if fail {
                (JobState::Failed, format!("node failure: {why}"))
            } else {
                (JobState::Pending, String::new())
            };
            if state == JobState::Pending {
                tx.execute(
                    "UPDATE jobs SET state='pending', gpu_ids=NULL, start=NULL, restarts=restarts+1,
                     executed_ms=executed_ms+?2, lost_ms=lost_ms+?3, ranks=NULL, gang_stop=NULL WHERE id=?1",
                    params![id as i64, ran, lost],
                )
                .ctx("requeue job")?;
                let mut detail = json!({"why": why, "node": j.node, "nodes": j.run_nodes(), "ran_ms": ran, "restarts": j.restarts + 1});
                if let Some(p) = &j.preempt {
                    // What its checkpoint rule made of the run (audit records of others unchanged).
                    detail["checkpoint"] = json!(p.checkpoint.as_deref().unwrap_or("continuous"));
                    detail["lost_ms"] = json!(lost);
                }
                audit(&tx, now, actor, "requeue", Some(id), &policy, &detail)?;
            } else {
                tx.execute(
                    "UPDATE jobs SET state=?2, end_time=?3, end_reason=?4 WHERE id=?1",
                    params![id as i64, state.as_str(), now, reason],
                )
                .ctx("end job")?;
                audit(&tx, now, actor, "end", Some(id), &policy, &json!({"state": state, "why": reason}))?;
            }
            moves.push((id, state, reason, ran, lost));
        }
        tx.commit().ctx("commit requeue")?;
        let ended: Vec<JobNo> =
            moves.iter().filter(|(_, state, ..)| *state != JobState::Pending).map(|(id, ..)| *id).collect();
        // GPUs, CPUs or memory were freed: blocked jobs are looked at again in the next pass.
        self.blocked.clear();
        for (id, state, reason, ran, lost) in moves {
            let Some(mut j) = self.active.remove(&id) else { continue };
            // The core counts the same loss (more than this run: it restarts from zero).
            let kept = |r: i64| (lost <= ran).then_some(r - lost);
            if preempted && state == JobState::Pending && self.sched.preempt_keeping(jid(id), now, kept).is_ok() {
                // Back in the scheduler's queue with its progress.
            } else {
                let _ = self.sched.finish(jid(id), now);
                if preempted {
                    // The policy changed to a non-preemptive one meanwhile: resubmit.
                    let _ = queue_in(&mut self.sched, &self.cfg.quotas, &j, id, j.submit, j.time_limit_ms, now);
                }
            }
            j.state = state;
            if state == JobState::Pending {
                // `node` stays: the node of its last run, which alone may report that run's end.
                j.gpu_ids.clear();
                j.ranks.clear();
                j.gang_stop = None;
                j.start = None;
                j.restarts += 1;
                j.executed_ms += ran;
                j.lost_ms += lost;
                *self.pending_per_user.entry(j.user.clone()).or_default() += 1;
                self.pending.insert(id, j);
            } else {
                j.end = Some(now);
                j.end_reason = Some(reason);
            }
        }
        for id in ended {
            self.deps_ended(id, false, now)?;
        }
        Ok(())
    }

    /// The policy in force.
    pub fn policy(&self) -> &PolicySpec {
        &self.policy
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The database connection (for token checks).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The wake-up signal of a node's long poll.
    pub fn node_notify(&mut self, node: &str) -> Arc<Notify> {
        self.node_notify.entry(node.to_string()).or_default().clone()
    }

    /// Nodes with new work since the last call.
    pub fn take_wakes(&mut self) -> Vec<Arc<Notify>> {
        let names: Vec<String> = std::mem::take(&mut self.to_wake).into_iter().collect();
        names.iter().map(|n| self.node_notify(n)).collect()
    }

    /// Writes one audit record of something done outside the job state (token changes).
    pub fn record(&mut self, actor: &str, kind: &str, detail: &serde_json::Value, now: i64) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        audit(&tx, now, actor, kind, None, &policy, detail)?;
        tx.commit().ctx("commit audit record")?;
        Ok(())
    }

    /// Switches group commit on (the server does, with a task that calls [`Core::commit`]
    /// whenever [`Core::writes`] moved).
    pub fn set_group_commit(&mut self, on: bool) -> Result<(), ApiError> {
        if !on {
            self.commit()?;
        }
        self.group = on;
        Ok(())
    }

    /// State changes made so far: a change is durable once [`Core::commit`] has returned a
    /// number at least this large.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Commits the open group transaction (one disk sync for every change in it) and returns
    /// the number of changes now durable. If the commit fails, nothing of the group is stored:
    /// it is rolled back and the state is rebuilt from the database, and the error returned
    /// (the changes made up to [`Core::writes`] are then lost and must be answered as such).
    /// Before the process stops (SIGTERM, SIGINT): commits the open group of changes and folds
    /// the write-ahead log into the database file (`wal_checkpoint(TRUNCATE)`). Returns whether
    /// the log could be folded whole (a reader holding an old snapshot keeps part of it; nothing
    /// is lost either way).
    pub fn stop(&mut self) -> Result<bool, ApiError> {
        self.commit()?;
        let busy: i64 = self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).ctx("checkpoint")?;
        Ok(busy == 0)
    }

    pub fn commit(&mut self) -> Result<u64, ApiError> {
        if self.conn.is_autocommit() {
            return Ok(self.writes);
        }
        match self.conn.execute_batch("COMMIT").ctx("commit") {
            Ok(()) => Ok(self.writes),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                self.load(crate::api::now_ms())?;
                Err(e.into())
            }
        }
    }
}
