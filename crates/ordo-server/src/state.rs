//! The server's state machine: the database, the `ordo-core` scheduler over the nodes that are
//! up, and every state change (submit, start, end, cancel, node up/down, policy) as one transaction.

use crate::api::*;
use crate::auth::{Principal, Role};
use crate::config::{check_policy, ServerConfig};
use crate::db::{self, audit, ids_text, Ctx, DbError};
use ordo_core::scheduler::{CommitError, JobReq};
use ordo_core::{Allocation, Capacity, ClusterSpec, Demand, JobId, NodeSpec, Placement, PolicySpec, Reason, Scheduler};
use rusqlite::{params, Connection};
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
    up: bool,
    last_seen: i64,
    cpus: Option<u32>,
    mem_mib: Option<u64>,
    mem_limits: bool,
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
    /// Running `--no-preempt` jobs under a preemptive policy: kept out of the scheduler, whose
    /// nodes are shrunk by their GPUs, so the policy can never choose to preempt them.
    hidden: BTreeSet<JobNo>,
    /// Waiting jobs the policy chose to start but the server could not yet: their GPUs are
    /// still being freed by a preempted job, or the node lacks the CPUs or memory they ask.
    blocked: HashMap<JobNo, String>,
}

fn jid(id: JobNo) -> JobId {
    JobId(id as u32)
}

/// The scheduler's request for a job: its GPUs, CPUs and memory, the given estimate and its
/// stored priority. This is the one place that turns a job into what `ordo-core` sees; with the
/// nodes' CPUs and memory in the core's cluster (see `Core::cluster_spec`), the core places a
/// job only on a node that has the GPUs, CPUs and memory it asks for.
fn job_req(j: &JobInfo, id: JobNo, submit: i64, estimate: i64) -> JobReq {
    let mut r = JobReq::new(jid(id), submit, j.gpus, estimate);
    r.priority = j.priority;
    r.cpus = j.cpus.unwrap_or(0);
    r.mem_mib = j.mem_mib.unwrap_or(0);
    // Policies that share between users (fair, priority, rr, qssf) compare user indices only
    // for equality; a stable hash of the name serves as one (the server has no groups: a
    // user is their own group).
    r.user = user_index(&j.user);
    r.group = r.user;
    r
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
/// memory does not limit them).
fn node_holds(n: &Node, j: &JobInfo) -> bool {
    node_holds_ask(n, j.gpus, j.cpus, j.mem_mib)
}

/// Whether an empty `n` holds `gpus` GPUs with the CPUs and memory asked.
fn node_holds_ask(n: &Node, gpus: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> bool {
    n.gpus >= gpus
        && !matches!((cpus, n.cpus), (Some(w), Some(h)) if w > h)
        && !matches!((mem_mib, n.mem_mib), (Some(w), Some(h)) if w > h)
}

/// What placement must find for a job (the demand of its `job_req`).
fn demand(j: &JobInfo) -> Demand {
    Demand::new(j.gpus, None, j.cpus.unwrap_or(0), j.mem_mib.unwrap_or(0))
}

/// A running job's allocation on `cap`: `j.gpus` GPUs on scheduler node `n`. On a detailed
/// capacity (nodes that report CPUs or memory) it carries the detail `Scheduler::start` needs:
/// the node's lowest free GPUs and the job's CPUs and memory there; count-only otherwise (and
/// where the node lacks them, so that the start is refused and the job treated as a conflict).
fn alloc_on(cap: &Capacity, n: u32, j: &JobInfo) -> Allocation {
    let alloc = Allocation { parts: vec![(n, j.gpus)], detail: None };
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
        _ => (4, 0),
    }
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
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

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
            hidden: BTreeSet::new(),
            blocked: HashMap::new(),
        };
        core.load(now)?;
        Ok(core)
    }

    fn load(&mut self, now: i64) -> Result<(), ApiError> {
        self.nodes.clear();
        let mut st = self
            .conn
            .prepare(
                "SELECT name, seq, gpus, fake, gpu_model, state, cpus, mem_mib, mem_limits FROM nodes ORDER BY seq",
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
                        up: r.get::<_, String>(5)? == "up",
                        last_seen: now,
                        cpus: r.get(6)?,
                        mem_mib: r.get::<_, Option<i64>>(7)?.map(|m| m as u64),
                        mem_limits: r.get::<_, i64>(8)? != 0,
                    },
                ))
            })
            .ctx("load nodes")?
            .collect::<Result<Vec<_>, _>>()
            .ctx("load nodes")?;
        drop(st);
        self.nodes = rows.into_iter().collect();
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
            .filter(|j| !matches!(j.node.as_ref().and_then(|n| self.nodes.get(n)), Some(n) if n.up))
            .map(|j| j.id)
            .collect();
        if !stray.is_empty() {
            self.requeue_jobs(&stray, now, "scheduler", "its node is not up")?;
        }
        self.rebuild(now)
    }

    /// Whether a running job is kept out of the scheduler (see `Core::hidden`).
    fn hides(&self, j: &JobInfo) -> bool {
        j.no_preempt && self.policy.order.preemptive()
    }

    /// The cluster the scheduler sees: the nodes that are up, in registration order, with their
    /// CPUs and memory, each less the GPUs, CPUs and memory of its hidden (`--no-preempt`) jobs.
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
                        if self.hides(j) && j.node.as_deref() == Some(name.as_str()) {
                            gpus += j.gpus;
                            cpus += j.cpus.unwrap_or(0);
                            mem += j.mem_mib.unwrap_or(0);
                        }
                    }
                    NodeSpec {
                        name: (*name).clone(),
                        gpus: n.gpus.saturating_sub(gpus),
                        cpus: n.cpus.map(|c| c.saturating_sub(cpus)),
                        mem_mib: n.mem_mib.map(|m| m.saturating_sub(mem)),
                        gpu_model: n.gpu_model.clone(),
                    }
                })
                .collect(),
        }
    }

    /// Rebuilds the scheduler over the nodes that are up: jobs preempted earlier first (their
    /// attained service replayed, see below), then running jobs (on their GPUs), then waiting
    /// jobs in submit order.
    fn rebuild(&mut self, now: i64) -> Result<(), ApiError> {
        let up: Vec<(&String, &Node)> = {
            let mut v: Vec<_> = self.nodes.iter().filter(|(_, n)| n.up).collect();
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
        let mut sched = Scheduler::new(&spec, Placement::Consolidated, self.policy.clone());
        sched.set_min_run(self.cfg.min_run_ms);
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
                if j.gpus > max_up || sched.submit(job_req(j, j.id, j.submit, j.time_limit_ms), t0).is_err() {
                    continue;
                }
                // Placed by all it asks (GPUs, CPUs, memory), as the core would place it.
                let alloc = sched.capacity().place_for(demand(j));
                let ok = alloc.is_some_and(|a| sched.start(jid(j.id), &a, t0).is_ok())
                    && sched.preempt(jid(j.id), now).is_ok();
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
            let Some(&n) = j.node.as_ref().and_then(|n| index.get(n)) else {
                conflicts.push(j.id);
                continue;
            };
            let ok = j.gpu_ids.len() == j.gpus as usize
                && j.gpu_ids.iter().all(|&p| (p as usize) < used[n as usize].len() && !used[n as usize][p as usize]);
            if !ok {
                conflicts.push(j.id);
                continue;
            }
            if self.hides(j) {
                for &p in &j.gpu_ids {
                    used[n as usize][p as usize] = true;
                }
                hidden.insert(j.id);
                continue;
            }
            // Its GPUs on its node, with its CPUs and memory there where the capacity is detailed.
            let alloc = alloc_on(sched.capacity(), n, j);
            let committed = if preemptive {
                // At its real start (and, when it ran before, after its earlier service), so
                // attained service and the `min_run` protection count from the right time.
                let s = j.start.unwrap_or(now).min(now);
                let t0 = s - j.executed_ms;
                let before = sched.submit(job_req(j, j.id, j.submit, j.time_limit_ms), t0).is_ok()
                    && (j.executed_ms == 0
                        || (sched.start(jid(j.id), &alloc, t0).is_ok() && sched.preempt(jid(j.id), s).is_ok()));
                if before {
                    sched.start(jid(j.id), &alloc, s)
                } else {
                    Err(CommitError::NotWaiting(jid(j.id)))
                }
            } else {
                let left = (j.start.unwrap_or(now) + j.time_limit_ms - now).max(1);
                match sched.submit(job_req(j, j.id, j.submit, left), now) {
                    Ok(()) => sched.start(jid(j.id), &alloc, now),
                    Err(_) => Err(CommitError::NotWaiting(jid(j.id))),
                }
            }
            .map(|ids| {
                let mut phys = j.gpu_ids.clone();
                phys.sort_unstable();
                for (s, p) in ids[0].1.iter().zip(phys) {
                    pairs[n as usize][*s as usize] = Some(p);
                    used[n as usize][p as usize] = true;
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
        // Jobs held by a user stay out of the scheduler (they neither start nor block others).
        for j in pend.into_iter().filter(|j| j.held_by.is_none()) {
            if j.gpus > max_up || sched.submit(job_req(j, j.id, j.submit, j.time_limit_ms), now).is_err() {
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
        let tx = self.conn.transaction().ctx("begin")?;
        let mut moves = Vec::new();
        for &id in ids {
            let Some(j) = self.active.get(&id) else { continue };
            let ran = match j.state {
                JobState::Running | JobState::Preempting => {
                    (now - self.sched.running_start(jid(id)).or(j.start).unwrap_or(now)).max(0)
                }
                _ => 0,
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
                    "UPDATE jobs SET state='pending', node=NULL, gpu_ids=NULL, start=NULL, restarts=restarts+1,
                     executed_ms=executed_ms+?2 WHERE id=?1",
                    params![id as i64, ran],
                )
                .ctx("requeue job")?;
                audit(
                    &tx,
                    now,
                    actor,
                    "requeue",
                    Some(id),
                    &policy,
                    &json!({"why": why, "node": j.node, "ran_ms": ran, "restarts": j.restarts + 1}),
                )?;
            } else {
                tx.execute(
                    "UPDATE jobs SET state=?2, end_time=?3, end_reason=?4 WHERE id=?1",
                    params![id as i64, state.as_str(), now, reason],
                )
                .ctx("end job")?;
                audit(&tx, now, actor, "end", Some(id), &policy, &json!({"state": state, "why": reason}))?;
            }
            moves.push((id, state, reason, ran));
        }
        tx.commit().ctx("commit requeue")?;
        // GPUs, CPUs or memory were freed: blocked jobs are looked at again in the next pass.
        self.blocked.clear();
        for (id, state, reason, ran) in moves {
            let Some(mut j) = self.active.remove(&id) else { continue };
            if preempted && state == JobState::Pending && self.sched.preempt(jid(id), now).is_ok() {
                // Back in the scheduler's queue with its progress.
            } else {
                let _ = self.sched.finish(jid(id), now);
                if preempted {
                    // The policy changed to a non-preemptive one meanwhile: resubmit.
                    let _ = self.sched.submit(job_req(&j, id, j.submit, j.time_limit_ms), now);
                }
            }
            j.state = state;
            if state == JobState::Pending {
                j.node = None;
                j.gpu_ids.clear();
                j.start = None;
                j.restarts += 1;
                j.executed_ms += ran;
                *self.pending_per_user.entry(j.user.clone()).or_default() += 1;
                self.pending.insert(id, j);
            } else {
                j.end = Some(now);
                j.end_reason = Some(reason);
            }
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

    /// Adds a job; returns once it is committed.
    pub fn submit(&mut self, who: &Principal, req: SubmitRequest, now: i64) -> Result<JobNo, ApiError> {
        self.submit_batch(vec![(who.clone(), req)], now).pop().expect("one result per submission")
    }

    /// Adds several jobs in one transaction (group commit: concurrent submissions share one
    /// disk sync). Each result comes only after the commit; an invalid submission is refused
    /// alone, a failed commit refuses all.
    pub fn submit_batch(&mut self, items: Vec<(Principal, SubmitRequest)>, now: i64) -> Vec<Result<JobNo, ApiError>> {
        let mut extra: HashMap<String, usize> = HashMap::new();
        let checked: Vec<Result<(Principal, JobInfo), ApiError>> = items
            .into_iter()
            .map(|(who, req)| {
                let n = extra.get(&who.user).copied().unwrap_or(0);
                let r = self.check_submission(&who, req, now, n);
                if r.is_ok() {
                    *extra.entry(who.user.clone()).or_default() += 1;
                }
                r.map(|j| (who, j))
            })
            .collect();
        let policy = self.policy.to_string();
        let committed = (|| -> Result<Vec<JobNo>, ApiError> {
            let tx = self.conn.transaction().ctx("begin")?;
            let mut ids = Vec::new();
            for (who, j) in checked.iter().flatten() {
                let command = serde_json::to_string(&j.command).map_err(|e| internal("encode command", e))?;
                tx.prepare_cached(
                    "INSERT INTO jobs(user, name, command, cwd, gpus, cpus, mem_mib, time_limit_ms, priority, on_node_failure, state, submit, no_preempt)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        who.user,
                        j.name,
                        command,
                        j.cwd,
                        j.gpus,
                        j.cpus,
                        j.mem_mib.map(|m| m as i64),
                        j.time_limit_ms,
                        j.priority,
                        if j.on_node_failure == OnNodeFailure::Fail { "fail" } else { "requeue" },
                        now,
                        j.no_preempt as i64
                    ])
                })
                .ctx("insert job")?;
                let id = tx.last_insert_rowid() as JobNo;
                if id > u32::MAX as u64 {
                    return Err(ApiError::Conflict("job ids exhausted (more than 2^32 jobs in this database)".into()));
                }
                audit(
                    &tx,
                    now,
                    &who.user,
                    "submit",
                    Some(id),
                    &policy,
                    &json!({"gpus": j.gpus, "cpus": j.cpus, "mem_mib": j.mem_mib, "time_limit_ms": j.time_limit_ms, "no_preempt": j.no_preempt}),
                )?;
                ids.push(id);
            }
            tx.commit().ctx("commit submissions")?;
            Ok(ids)
        })();
        let mut ids = match committed {
            Ok(ids) => ids.into_iter(),
            Err(e) => {
                let msg = e.to_string();
                return checked
                    .into_iter()
                    .map(|r| r.and_then(|_| Err(internal("submission not stored", &msg))))
                    .collect();
            }
        };
        let max_up = self.nodes.values().filter(|n| n.up).map(|n| n.gpus).max().unwrap_or(0);
        checked
            .into_iter()
            .map(|r| {
                let (who, mut info) = r?;
                let id = ids.next().expect("one id per valid submission");
                info.id = id;
                if info.gpus > max_up || self.sched.submit(job_req(&info, id, now, info.time_limit_ms), now).is_err() {
                    self.held.insert(id);
                }
                *self.pending_per_user.entry(who.user.clone()).or_default() += 1;
                self.pending.insert(id, info);
                Ok(id)
            })
            .collect()
    }

    fn check_submission(
        &self,
        who: &Principal,
        req: SubmitRequest,
        now: i64,
        queued: usize,
    ) -> Result<JobInfo, ApiError> {
        if who.role == Role::Agent {
            return Err(ApiError::Forbidden("agent tokens cannot submit jobs".into()));
        }
        if req.command.is_empty() || req.command[0].is_empty() {
            return Err(ApiError::BadRequest("field `command`: give the program to run (a non-empty list)".into()));
        }
        let bytes: usize = req.command.iter().map(|a| a.len() + 1).sum();
        if bytes > self.cfg.max_command_bytes {
            return Err(ApiError::BadRequest(format!(
                "field `command`: {bytes} bytes, more than the limit of {}",
                self.cfg.max_command_bytes
            )));
        }
        if req.command.iter().any(|a| a.contains('\0')) {
            return Err(ApiError::BadRequest("field `command`: arguments may not contain NUL".into()));
        }
        if req.gpus == 0 {
            return Err(ApiError::BadRequest("field `gpus`: at least 1 (the server schedules GPU jobs)".into()));
        }
        let limit = req.time_limit_ms.unwrap_or(self.cfg.default_time_limit_ms);
        if limit <= 0 || limit > self.cfg.max_time_limit_ms {
            return Err(ApiError::BadRequest(format!(
                "field `time_limit_ms`: {limit} is outside 1..={} ms",
                self.cfg.max_time_limit_ms
            )));
        }
        let name = req.name.clone().unwrap_or_else(|| {
            std::path::Path::new(&req.command[0])
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        if name.len() > 200 {
            return Err(ApiError::BadRequest("field `name`: at most 200 bytes".into()));
        }
        let max_node = self.nodes.values().map(|n| n.gpus).max();
        match max_node {
            None => {
                return Err(ApiError::Unprocessable(
                    "no node has registered yet, so no job can be placed; start `ordo agent` on a GPU machine first"
                        .into(),
                ))
            }
            Some(m) if req.gpus > m => {
                return Err(ApiError::Unprocessable(format!(
                "the job needs {} GPUs but the largest node has {m} ({} nodes, {} GPUs in all); a job runs on one node",
                req.gpus,
                self.nodes.len(),
                self.nodes.values().map(|n| n.gpus as u64).sum::<u64>()
            )))
            }
            _ => {}
        }
        self.check_cpus_mem(req.gpus, req.cpus, req.mem_mib)?;
        let mine = self.pending_per_user.get(&who.user).copied().unwrap_or(0) + queued;
        if mine >= self.cfg.max_pending_per_user {
            return Err(ApiError::Conflict(format!(
                "user {} already has {mine} pending jobs (limit {})",
                who.user, self.cfg.max_pending_per_user
            )));
        }
        let onf = req.on_node_failure.unwrap_or_default();
        Ok(JobInfo {
            id: 0,
            user: who.user.clone(),
            name,
            command: req.command,
            cwd: req.cwd,
            gpus: req.gpus,
            cpus: req.cpus,
            mem_mib: req.mem_mib,
            time_limit_ms: limit,
            priority: req.priority.unwrap_or(0),
            on_node_failure: onf,
            state: JobState::Pending,
            submit: now,
            start: None,
            end: None,
            node: None,
            gpu_ids: vec![],
            exit_code: None,
            end_reason: None,
            attempts: 0,
            cancel_requested: false,
            held_by: None,
            no_preempt: req.no_preempt.unwrap_or(false),
            restarts: 0,
            executed_ms: 0,
            wait: None,
        })
    }

    /// Refuses CPUs or memory that no registered node offers (or more than the configured
    /// per-job limits), alone or together with the GPUs asked. Nodes that did not report CPUs
    /// or memory do not limit them.
    fn check_cpus_mem(&self, gpus: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> Result<(), ApiError> {
        if cpus == Some(0) {
            return Err(ApiError::BadRequest("field `cpus`: at least 1 when given".into()));
        }
        if mem_mib == Some(0) {
            return Err(ApiError::BadRequest("field `mem_mib`: at least 1 when given".into()));
        }
        if let (Some(c), Some(limit)) = (cpus, self.cfg.max_job_cpus) {
            if c > limit {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {c} CPU cores but the server's limit (max_job_cpus) is {limit}"
                )));
            }
        }
        if let (Some(m), Some(limit)) = (mem_mib, self.cfg.max_job_mem_mib) {
            if m > limit {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {} of memory but the server's limit (max_job_mem) is {}",
                    fmt_mib(m),
                    fmt_mib(limit)
                )));
            }
        }
        let known = |f: fn(&Node) -> Option<u64>| -> Option<u64> {
            if self.nodes.values().any(|n| f(n).is_none()) {
                None
            } else {
                self.nodes.values().filter_map(f).max()
            }
        };
        if let (Some(c), Some(most)) = (cpus, known(|n| n.cpus.map(u64::from))) {
            if c as u64 > most {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {c} CPU cores but the largest node offers {most}; a job runs on one node"
                )));
            }
        }
        if let (Some(m), Some(most)) = (mem_mib, known(|n| n.mem_mib)) {
            if m > most {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {} of memory but the largest node offers {}; a job runs on one node",
                    fmt_mib(m),
                    fmt_mib(most)
                )));
            }
        }
        if (cpus.is_some() || mem_mib.is_some()) && !self.nodes.values().any(|n| node_holds_ask(n, gpus, cpus, mem_mib))
        {
            let ask = ask_text(gpus, cpus, mem_mib);
            return Err(ApiError::Unprocessable(format!(
                "no registered node offers {ask} together; a job runs on one node"
            )));
        }
        Ok(())
    }

    /// One scheduling pass: asks the policy what to start and, under preemptive policies, what
    /// to stop; commits both (one transaction, with audit records of every start, preemption
    /// and changed skip reason). A preempted job is marked `preempting` and its agent told to
    /// stop it; its GPUs go to others only once it has stopped (see [`Core::report`]).
    /// Returns when the policy wants to be asked again even if nothing happens.
    pub fn pass(&mut self, now: i64) -> Result<Option<i64>, ApiError> {
        if self.sched.waiting_len() == 0 {
            return Ok(None);
        }
        self.sched.advance(now);
        // The fast plan decides; the explained one (same starts, plus every waiting job's
        // reason, for the audit log) runs when something starts, and otherwise at most every
        // 200 ms, so a long queue does not slow every submission down.
        let fast = self.sched.schedule(now, false);
        let new_preempt = fast.preempt.iter().any(|j| self.preemptable(j.0 as JobNo));
        // Jobs already known to be blocked (CPUs, memory, GPUs being freed) are re-examined at
        // the throttled rate, not on every change.
        let fresh_starts = fast.starts.iter().any(|s| !self.blocked.contains_key(&(s.job.0 as JobNo)));
        if !fresh_starts && !new_preempt && now - self.last_explain < 200 {
            return Ok(fast.wake_at.map(|w| w.min(self.last_explain + 200)).or(Some(self.last_explain + 200)));
        }
        self.last_explain = now;
        let plan = self.sched.schedule(now, true);
        let preempts: Vec<JobNo> = plan.preempt.iter().map(|j| j.0 as JobNo).filter(|&j| self.preemptable(j)).collect();
        let changed: Vec<&(JobId, Reason)> = plan
            .waiting
            .iter()
            .filter(|(j, r)| self.last_reason.get(&(j.0 as JobNo)) != Some(&reason_key(r)))
            .collect();
        if plan.starts.is_empty() && changed.is_empty() && preempts.is_empty() {
            return Ok(plan.wake_at);
        }
        let policy = self.policy.to_string();
        let head = plan.waiting.first().map(|(j, _)| *j);
        let pos: HashMap<JobId, usize> = if plan.starts.is_empty() {
            HashMap::new()
        } else {
            self.sched.waiting_ids_in_order().enumerate().map(|(i, j)| (j, i)).collect()
        };
        let head_pos = head.and_then(|h| pos.get(&h).copied());
        // Who each preemption is for: the first planned start on the preempted job's node.
        let mut preempt_rec = Vec::new();
        for &p in &preempts {
            let node = self.active[&p].node.clone();
            let for_job = plan
                .starts
                .iter()
                .find(|s| s.alloc.parts.iter().any(|(n, _)| self.sched_nodes.get(*n as usize) == node.as_ref()))
                .or(plan.starts.first())
                .map(|s| s.job.0 as JobNo);
            let why = self.preempt_reason(p, for_job, now);
            preempt_rec.push((p, for_job, why));
        }
        let mut started = Vec::new();
        let mut blocked = HashMap::new();
        let mut used = self.node_use();
        for s in &plan.starts {
            let id = s.job.0 as JobNo;
            let Some(j) = self.pending.get(&id) else { continue };
            let (n, _) = s.alloc.parts[0];
            let name = self.sched_nodes[n as usize].clone();
            // A safety net: the core placed the job by its CPUs and memory too, so this should
            // never find the node short; if it does, the start waits rather than overcommits.
            if let Some(why) = self.lacks(&name, j, &used) {
                eprintln!(
                    "ordo server: debug: job {id} placed by the core on {name}, which the server finds short: {why}"
                );
                blocked.insert(id, why);
                continue;
            }
            let ids = match self.sched.start(s.job, &s.alloc, now) {
                Ok(ids) => ids,
                Err(CommitError::BadAllocation(_)) => {
                    // Planned on GPUs (or CPUs, memory) a preempted job still holds: it starts once
                    // those are free.
                    let on: Vec<String> = self
                        .active
                        .values()
                        .filter(|a| a.state == JobState::Preempting && a.node.as_deref() == Some(name.as_str()))
                        .map(|a| a.id.to_string())
                        .collect();
                    blocked.insert(
                        id,
                        format!(
                            "its GPUs, CPUs or memory on {name} are being freed: job {} is being preempted",
                            on.join(", ")
                        ),
                    );
                    continue;
                }
                Err(e) => return Err(internal("commit a planned start", e)),
            };
            let e = used.entry(name.clone()).or_default();
            e.0 += j.cpus.unwrap_or(0);
            e.1 += j.mem_mib.unwrap_or(0);
            let (n, sids) = &ids[0];
            let mut phys: Vec<u32> = sids.iter().map(|&i| self.phys[*n as usize][i as usize]).collect();
            phys.sort_unstable();
            let backfill = matches!((pos.get(&s.job), head_pos), (Some(p), Some(h)) if *p > h);
            started.push((id, name, phys, backfill));
        }
        // Jobs chosen but not started get a `skip` record when their reason is new.
        let newly_blocked: Vec<(JobNo, String)> = blocked
            .iter()
            .filter(|(id, _)| self.last_reason.get(id) != Some(&(5, 0)))
            .map(|(id, why)| (*id, why.clone()))
            .collect();
        if started.is_empty() && changed.is_empty() && preempt_rec.is_empty() && newly_blocked.is_empty() {
            self.blocked = blocked;
            return Ok(plan.wake_at.map_or(Some(now + 200), |w| Some(w.min(now + 200))));
        }
        let changed_shown: Vec<(JobNo, serde_json::Value)> = changed
            .iter()
            .map(|(j, r)| (j.0 as JobNo, serde_json::to_value(self.shown(r)).unwrap_or_default()))
            .collect();
        let res = (|| -> Result<(), DbError> {
            let tx = self.conn.transaction().ctx("begin")?;
            for (id, why) in &newly_blocked {
                audit(
                    &tx,
                    now,
                    "scheduler",
                    "skip",
                    Some(*id),
                    &policy,
                    &json!({"reason": "node_resources", "why": why}),
                )?;
            }
            for (id, for_job, why) in &preempt_rec {
                tx.prepare_cached("UPDATE jobs SET state='preempting' WHERE id=?1")
                    .and_then(|mut s| s.execute(params![*id as i64]))
                    .ctx("record preemption")?;
                let text = match for_job {
                    Some(k) => format!("preempted {id} for {k}: policy {policy}, {why}"),
                    None => format!("preempted {id}: policy {policy}, {why}"),
                };
                audit(&tx, now, "scheduler", "preempt", Some(*id), &policy, &json!({"for": for_job, "why": text}))?;
            }
            for (id, node, phys, backfill) in &started {
                tx.prepare_cached(
                    "UPDATE jobs SET state='starting', start=?2, node=?3, gpu_ids=?4, attempts=attempts+1 WHERE id=?1",
                )
                .and_then(|mut s| s.execute(params![*id as i64, now, node, ids_text(phys)]))
                .ctx("record start")?;
                let mut d = json!({"node": node, "gpu_ids": phys});
                if *backfill {
                    d["backfill"] = json!({"ahead_of": head.map(|h| h.0)});
                }
                audit(&tx, now, "scheduler", "start", Some(*id), &policy, &d)?;
            }
            for (j, r) in &changed_shown {
                audit(&tx, now, "scheduler", "skip", Some(*j), &policy, r)?;
            }
            tx.commit().ctx("commit starts")
        })();
        if let Err(e) = res {
            // Memory ran ahead of the database: rebuild from what is committed.
            self.load(now)?;
            return Err(e.into());
        }
        for (j, r) in changed.into_iter().cloned() {
            self.last_reason.insert(j.0 as JobNo, reason_key(&r));
        }
        for (id, _) in newly_blocked {
            self.last_reason.insert(id, (5, 0));
        }
        for (id, _, _) in preempt_rec {
            if let Some(j) = self.active.get_mut(&id) {
                j.state = JobState::Preempting;
                if let Some(n) = j.node.clone() {
                    self.to_wake.insert(n);
                }
            }
        }
        self.blocked = blocked;
        let mut hide = false;
        for (id, node, phys, _) in started {
            self.last_reason.remove(&id);
            if let Some(mut j) = self.pending.remove(&id) {
                if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                    *c = c.saturating_sub(1);
                }
                j.state = JobState::Starting;
                j.start = Some(now);
                j.node = Some(node.clone());
                j.gpu_ids = phys;
                j.attempts += 1;
                hide |= self.hides(&j);
                self.active.insert(id, j);
            }
            self.to_wake.insert(node);
        }
        if hide {
            // A `--no-preempt` job started: take it (and its GPUs) out of the policy's reach.
            self.rebuild(now)?;
        }
        // While a preempted job stops, ask again soon (its end report also wakes the loop).
        let soon = (!self.blocked.is_empty()).then_some(now + 200);
        Ok(match (plan.wake_at, soon) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Whether the policy may now preempt this job: it runs (not already stopping, not being
    /// cancelled) and is not `--no-preempt` (those are hidden from the scheduler anyway).
    fn preemptable(&self, id: JobNo) -> bool {
        self.active.get(&id).is_some_and(|j| {
            matches!(j.state, JobState::Running | JobState::Starting) && !j.cancel_requested && !j.no_preempt
        })
    }

    /// Why the policy preempts `id` (for `for_job`), in words, for the audit log.
    fn preempt_reason(&self, id: JobNo, for_job: Option<JobNo>, now: i64) -> String {
        let attained = |k: JobNo| -> i64 {
            let p = self.sched.progress(jid(k)).unwrap_or_default();
            let run = self.sched.running_start(jid(k)).map_or(0, |s| now - s);
            let g = self.active.get(&k).or_else(|| self.pending.get(&k)).map_or(0, |j| j.gpus as i64);
            p.attained + g * run
        };
        let secs = |ms: i64| format!("{:.1}", ms as f64 / 1000.0);
        let ran = self.sched.running_start(jid(id)).map_or(0, |s| now - s);
        let other = for_job.map(|k| format!("job {k}")).unwrap_or_else(|| "a waiting job".into());
        let base = match &self.policy.order {
            ordo_core::policy::Order::Las(_) => format!(
                "least attained service: job {id} has {} GPU-s, {other} has {} GPU-s",
                secs(attained(id)),
                for_job.map_or("less".into(), |k| secs(attained(k)))
            ),
            ordo_core::policy::Order::Rr { quantum: Some(q) } => {
                format!("round robin: job {id} used its quantum of {} while {other} waits", fmt_rel(*q))
            }
            ordo_core::policy::Order::Srtf => {
                format!("shortest remaining time: {other} has less time left (by time limits) than job {id}")
            }
            ordo_core::policy::Order::Gittins(_) => {
                format!("{other} has a higher Gittins index than job {id} ({} GPU-s attained)", secs(attained(id)))
            }
            _ => format!("{other} ranks ahead of job {id}"),
        };
        format!("{base}; job {id} ran {}s this time (min_run {})", secs(ran), fmt_rel(self.cfg.min_run_ms))
    }

    /// CPUs and memory asked by the active jobs of each node.
    fn node_use(&self) -> HashMap<String, (u32, u64)> {
        let mut m: HashMap<String, (u32, u64)> = HashMap::new();
        for j in self.active.values() {
            if let Some(n) = &j.node {
                let e = m.entry(n.clone()).or_default();
                e.0 += j.cpus.unwrap_or(0);
                e.1 += j.mem_mib.unwrap_or(0);
            }
        }
        m
    }

    /// Why a job the core placed on `node` cannot start there now: the CPUs or memory it asks
    /// for are taken by the node's active jobs. The core places by CPUs and memory as well (see
    /// `job_req`), so this is a safety net that should never find a node short.
    fn lacks(&self, node: &str, j: &JobInfo, used: &HashMap<String, (u32, u64)>) -> Option<String> {
        let n = self.nodes.get(node)?;
        let (uc, um) = used.get(node).copied().unwrap_or_default();
        if let (Some(want), Some(have)) = (j.cpus, n.cpus) {
            if uc + want > have {
                return Some(format!(
                    "{node} has the GPUs but not the CPUs: it needs {want} cores, {} of {have} are free there",
                    have.saturating_sub(uc)
                ));
            }
        }
        if let (Some(want), Some(have)) = (j.mem_mib, n.mem_mib) {
            if um + want > have {
                return Some(format!(
                    "{node} has the GPUs but not the memory: it needs {}, {} of {} are free there",
                    fmt_mib(want),
                    fmt_mib(have.saturating_sub(um)),
                    fmt_mib(have)
                ));
            }
        }
        None
    }

    /// Cancels a job: a pending one at once, a running one by asking its agent to kill it.
    pub fn cancel(&mut self, who: &Principal, id: JobNo, now: i64) -> Result<JobState, ApiError> {
        let owner = if let Some(j) = self.pending.get(&id).or_else(|| self.active.get(&id)) {
            j.user.clone()
        } else {
            return match db::load_job(&self.conn, id)? {
                Some(j) => Err(ApiError::Conflict(format!("job {id} already ended ({})", j.state.as_str()))),
                None => Err(ApiError::NotFound(format!("no job {id}"))),
            };
        };
        if who.role != Role::Admin && who.user != owner {
            return Err(ApiError::Forbidden(format!(
                "job {id} belongs to {owner}; only its owner or an admin may cancel it"
            )));
        }
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        let pending = self.pending.contains_key(&id);
        if pending {
            tx.execute(
                "UPDATE jobs SET state='cancelled', end_time=?2, end_reason=?3 WHERE id=?1",
                params![id as i64, now, format!("cancelled by {} before it started", who.user)],
            )
            .ctx("cancel job")?;
        } else {
            tx.execute("UPDATE jobs SET cancel_requested=1 WHERE id=?1", params![id as i64]).ctx("cancel job")?;
        }
        audit(
            &tx,
            now,
            &who.user,
            "cancel",
            Some(id),
            &policy,
            &json!({"was": if pending { "pending" } else { "running" }}),
        )?;
        tx.commit().ctx("commit cancel")?;
        if pending {
            let j = self.pending.remove(&id).expect("checked");
            if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                *c = c.saturating_sub(1);
            }
            self.last_reason.remove(&id);
            if !self.held.remove(&id) {
                // The scheduler has no "withdraw": rebuild it without the job.
                self.rebuild(now)?;
            }
            Ok(JobState::Cancelled)
        } else {
            let j = self.active.get_mut(&id).expect("checked");
            j.cancel_requested = true;
            if let Some(n) = j.node.clone() {
                self.to_wake.insert(n);
            }
            Ok(j.state)
        }
    }

    /// The owner of a job that has not ended, checking that `who` may change it (its owner or
    /// an admin; never an agent).
    fn changeable(&self, who: &Principal, id: JobNo, what: &str) -> Result<String, ApiError> {
        let owner = match self.pending.get(&id).or_else(|| self.active.get(&id)) {
            Some(j) => j.user.clone(),
            None => {
                return match db::load_job(&self.conn, id)? {
                    Some(j) => Err(ApiError::Conflict(format!("job {id} already ended ({})", j.state.as_str()))),
                    None => Err(ApiError::NotFound(format!("no job {id}"))),
                }
            }
        };
        if who.role == Role::Agent || (who.role != Role::Admin && who.user != owner) {
            return Err(ApiError::Forbidden(format!(
                "job {id} belongs to {owner}; only its owner or an admin may {what} it"
            )));
        }
        Ok(owner)
    }

    /// Holds a pending job (its owner or an admin): it stays pending but leaves the scheduler's
    /// queue, so it neither starts nor blocks others, until [`Core::release`].
    pub fn hold(&mut self, who: &Principal, id: JobNo, now: i64) -> Result<JobInfo, ApiError> {
        self.changeable(who, id, "hold")?;
        let Some(j) = self.pending.get(&id) else {
            return Err(ApiError::Conflict(format!(
                "job {id} is {}; only a pending job can be held",
                self.active[&id].state.as_str()
            )));
        };
        if let Some(by) = &j.held_by {
            return Err(ApiError::Conflict(format!("job {id} is already held (by {by})")));
        }
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.execute("UPDATE jobs SET held_by=?2 WHERE id=?1", params![id as i64, who.user]).ctx("hold job")?;
        audit(&tx, now, &who.user, "hold", Some(id), &policy, &json!({"by": who.user, "role": who.role.as_str()}))?;
        tx.commit().ctx("commit hold")?;
        if let Some(j) = self.pending.get_mut(&id) {
            j.held_by = Some(who.user.clone());
        }
        self.last_reason.remove(&id);
        // The scheduler has no "withdraw": rebuild it without the job.
        self.held.remove(&id);
        self.rebuild(now)?;
        self.job(id, now)
    }

    /// Releases a held job (its owner or an admin; a hold an admin put on someone else's job
    /// only an admin may release): it goes back to the queue at its submit-time place.
    pub fn release(&mut self, who: &Principal, id: JobNo, now: i64) -> Result<JobInfo, ApiError> {
        let owner = self.changeable(who, id, "release")?;
        let by = match self.pending.get(&id).and_then(|j| j.held_by.clone()) {
            Some(by) => by,
            None => return Err(ApiError::Conflict(format!("job {id} is not held"))),
        };
        if by != owner && who.role != Role::Admin {
            return Err(ApiError::Forbidden(format!(
                "job {id} was held by the admin {by}; only an admin may release it"
            )));
        }
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.execute("UPDATE jobs SET held_by=NULL WHERE id=?1", params![id as i64]).ctx("release job")?;
        audit(&tx, now, &who.user, "release", Some(id), &policy, &json!({"held_by": by, "role": who.role.as_str()}))?;
        tx.commit().ctx("commit release")?;
        if let Some(j) = self.pending.get_mut(&id) {
            j.held_by = None;
        }
        self.rebuild(now)?;
        self.job(id, now)
    }

    /// Changes a job's static priority. Its owner may lower it (or leave it); only an admin may
    /// raise it. Allowed while the job has not ended; recorded with the old and new value.
    pub fn set_priority(&mut self, who: &Principal, id: JobNo, priority: i64, now: i64) -> Result<JobInfo, ApiError> {
        self.changeable(who, id, "change the priority of")?;
        let pending = self.pending.contains_key(&id);
        let old = self.pending.get(&id).or_else(|| self.active.get(&id)).map(|j| j.priority).expect("checked");
        if priority > old && who.role != Role::Admin {
            return Err(ApiError::Forbidden(format!(
                "job {id} has priority {old}; only an admin may raise it (to {priority}); its owner may only lower it"
            )));
        }
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.execute("UPDATE jobs SET priority=?2 WHERE id=?1", params![id as i64, priority]).ctx("set priority")?;
        audit(
            &tx,
            now,
            &who.user,
            "priority",
            Some(id),
            &policy,
            &json!({"from": old, "to": priority, "role": who.role.as_str()}),
        )?;
        tx.commit().ctx("commit priority")?;
        if let Some(j) = self.pending.get_mut(&id).or_else(|| self.active.get_mut(&id)) {
            j.priority = priority;
        }
        if pending && old != priority {
            // The scheduler reads priority at submission: rebuild it with the new one.
            self.last_reason.remove(&id);
            self.rebuild(now)?;
        }
        self.job(id, now)
    }

    /// A node (re)registers: it is up from now with the GPUs it reports.
    pub fn register(&mut self, who: &Principal, req: &RegisterRequest, now: i64) -> Result<RegisterResponse, ApiError> {
        if who.role == Role::User {
            return Err(ApiError::Forbidden("registering a node needs an agent or admin token".into()));
        }
        if !crate::auth::valid_name(&req.node) {
            return Err(ApiError::BadRequest(format!("field `node`: `{}` is not a valid node name", req.node)));
        }
        if req.gpus == 0 || req.gpus > 1024 {
            return Err(ApiError::BadRequest(format!("field `gpus`: {} is outside 1..=1024", req.gpus)));
        }
        if matches!(req.cpus, Some(c) if c == 0 || c > 65_536) {
            return Err(ApiError::BadRequest(format!("field `cpus`: {:?} is outside 1..=65536", req.cpus)));
        }
        if req.mem_mib == Some(0) {
            return Err(ApiError::BadRequest("field `mem_mib`: at least 1".into()));
        }
        let seq = match self.nodes.get(&req.node) {
            Some(n) => n.seq,
            None => self.nodes.values().map(|n| n.seq).max().unwrap_or(0) + 1,
        };
        let changed = self
            .nodes
            .get(&req.node)
            .filter(|n| {
                n.up && n.gpus == req.gpus
                    && n.fake == req.fake
                    && n.gpu_model == req.gpu_model
                    && n.cpus == req.cpus
                    && n.mem_mib == req.mem_mib
                    && n.mem_limits == req.mem_limits
            })
            .is_none();
        if changed {
            let policy = self.policy.to_string();
            let tx = self.conn.transaction().ctx("begin")?;
            tx.execute(
                "INSERT OR REPLACE INTO nodes(name, seq, gpus, fake, gpu_model, state, last_seen, cpus, mem_mib, mem_limits)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'up', ?6, ?7, ?8, ?9)",
                params![
                    req.node,
                    seq,
                    req.gpus,
                    req.fake as i64,
                    req.gpu_model,
                    now,
                    req.cpus,
                    req.mem_mib.map(|m| m as i64),
                    req.mem_limits as i64
                ],
            )
            .ctx("register node")?;
            audit(
                &tx,
                now,
                &format!("node:{}", req.node),
                "node",
                None,
                &policy,
                &json!({"event": "up", "gpus": req.gpus, "fake": req.fake, "gpu_model": req.gpu_model,
                        "cpus": req.cpus, "mem_mib": req.mem_mib, "mem_limits": req.mem_limits}),
            )?;
            tx.commit().ctx("commit registration")?;
        }
        self.nodes.insert(
            req.node.clone(),
            Node {
                seq,
                gpus: req.gpus,
                fake: req.fake,
                gpu_model: req.gpu_model.clone(),
                up: true,
                last_seen: now,
                cpus: req.cpus,
                mem_mib: req.mem_mib,
                mem_limits: req.mem_limits,
            },
        );
        if changed {
            self.rebuild(now)?;
        }
        Ok(RegisterResponse { heartbeat_ms: self.cfg.heartbeat_ms, node_timeout_ms: self.cfg.node_timeout_ms })
    }

    /// A poll from an agent: heartbeat, then reconciliation of what it runs with what the
    /// database says, then its work (jobs to start, jobs to kill).
    pub fn poll(&mut self, who: &Principal, req: &PollRequest, now: i64) -> Result<PollResponse, ApiError> {
        if who.role == Role::User {
            return Err(ApiError::Forbidden("polling needs an agent or admin token".into()));
        }
        match self.nodes.get_mut(&req.node) {
            Some(n) if n.up => n.last_seen = now,
            _ => {
                return Err(ApiError::Conflict(format!(
                    "node {} is not registered or was marked down; register again",
                    req.node
                )))
            }
        }
        let has: HashMap<JobNo, i64> = req.running.iter().map(|r| (r.job, r.started_at)).collect();
        let mine: Vec<JobNo> =
            self.active.values().filter(|j| j.node.as_deref() == Some(req.node.as_str())).map(|j| j.id).collect();
        let mut confirm = Vec::new();
        let mut lost = Vec::new();
        let mut never_started = Vec::new();
        let mut stopped = Vec::new();
        for &id in &mine {
            let j = &self.active[&id];
            match (has.get(&id), j.state) {
                (Some(&t), JobState::Starting) => confirm.push((id, t)),
                (None, JobState::Running) => lost.push(id),
                (None, JobState::Starting) if j.cancel_requested => never_started.push(id),
                // Preempted before its process started, or its stop report is lost: it has
                // stopped, so it goes back to the queue.
                (None, JobState::Preempting) if !j.cancel_requested => stopped.push(id),
                (None, JobState::Preempting) => never_started.push(id),
                _ => {}
            }
        }
        if !confirm.is_empty() {
            let policy = self.policy.to_string();
            let tx = self.conn.transaction().ctx("begin")?;
            for &(id, t) in &confirm {
                tx.execute("UPDATE jobs SET state='running', start=?2 WHERE id=?1", params![id as i64, t])
                    .ctx("confirm start")?;
                audit(
                    &tx,
                    now,
                    &format!("node:{}", req.node),
                    "running",
                    Some(id),
                    &policy,
                    &json!({"started_at": t}),
                )?;
            }
            tx.commit().ctx("commit confirmations")?;
            for (id, t) in confirm {
                if let Some(j) = self.active.get_mut(&id) {
                    j.state = JobState::Running;
                    j.start = Some(t);
                }
            }
        }
        if !lost.is_empty() {
            self.requeue_jobs(
                &lost,
                now,
                &format!("node:{}", req.node),
                "the agent no longer runs it (it restarted?)",
            )?;
            self.rebuild(now)?;
        }
        if !stopped.is_empty() {
            self.requeue(&stopped, now, "scheduler", "preempted (it was not running on its node)", true)?;
        }
        for id in never_started {
            self.end_job(id, JobState::Cancelled, None, now, "cancelled before its process started".into(), &req.node)?;
        }
        let mut resp = PollResponse::default();
        for r in &req.running {
            match self.active.get(&r.job) {
                Some(j) if j.node.as_deref() == Some(req.node.as_str()) => {
                    if j.cancel_requested || j.state == JobState::Preempting {
                        resp.kill.push(r.job);
                    }
                }
                _ => resp.kill.push(r.job),
            }
        }
        let mut starts: Vec<&JobInfo> = self
            .active
            .values()
            .filter(|j| {
                j.node.as_deref() == Some(req.node.as_str())
                    && j.state == JobState::Starting
                    && !j.cancel_requested
                    && !has.contains_key(&j.id)
            })
            .collect();
        starts.sort_by_key(|j| j.id);
        resp.start = starts
            .into_iter()
            .map(|j| Assignment {
                job: j.id,
                user: j.user.clone(),
                name: j.name.clone(),
                command: j.command.clone(),
                cwd: j.cwd.clone(),
                gpu_ids: j.gpu_ids.clone(),
                time_limit_ms: j.time_limit_ms,
                attempt: j.attempts,
                restarts: j.restarts,
                cpus: j.cpus,
                mem_mib: j.mem_mib,
            })
            .collect();
        Ok(resp)
    }

    fn end_job(
        &mut self,
        id: JobNo,
        state: JobState,
        exit_code: Option<i32>,
        now: i64,
        reason: String,
        node: &str,
    ) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.prepare_cached("UPDATE jobs SET state=?2, end_time=?3, exit_code=?4, end_reason=?5 WHERE id=?1")
            .and_then(|mut s| s.execute(params![id as i64, state.as_str(), now, exit_code, reason]))
            .ctx("record end")?;
        audit(
            &tx,
            now,
            &format!("node:{node}"),
            "end",
            Some(id),
            &policy,
            &json!({"state": state, "exit_code": exit_code, "why": reason}),
        )?;
        tx.commit().ctx("commit end")?;
        self.active.remove(&id);
        self.blocked.clear();
        if self.hidden.remove(&id) {
            // A `--no-preempt` job the scheduler did not see: give its node back whole.
            return self.rebuild(now);
        }
        self.sched.finish(jid(id), now).map_err(|e| internal("finish job", e))?;
        Ok(())
    }

    /// An agent reports that a job's process ended.
    pub fn report(&mut self, who: &Principal, rep: &EndReport, now: i64) -> Result<(), ApiError> {
        if who.role == Role::User {
            return Err(ApiError::Forbidden("reporting needs an agent or admin token".into()));
        }
        if let Some(j) = self.pending.get(&rep.job) {
            // Requeued because its node fell silent, but this very run ended after all (the
            // report was held up): take its result rather than running the job again.
            if rep.attempt != 0 && rep.attempt == j.attempts {
                return self.end_late(rep, now);
            }
            return Ok(());
        }
        let Some(j) = self.active.get(&rep.job) else {
            // Already ended or unknown: nothing to do (reports are retried).
            return Ok(());
        };
        if rep.attempt != 0 && rep.attempt != j.attempts {
            return Ok(());
        }
        if j.node.as_deref() != Some(rep.node.as_str()) {
            return Ok(());
        }
        let (state, reason) = match (rep.outcome, rep.exit_code) {
            (Outcome::Exited, Some(0)) => (JobState::Completed, "exited with code 0".to_string()),
            (Outcome::Exited, Some(c)) => (JobState::Failed, format!("exited with code {c}")),
            (Outcome::Exited, None) => (
                JobState::Failed,
                format!("killed by signal {}", rep.signal.map(|s| s.to_string()).unwrap_or("?".into())),
            ),
            (Outcome::Timeout, _) => (JobState::Timeout, format!("killed at its time limit of {} ms", j.time_limit_ms)),
            (Outcome::Killed, _) if j.cancel_requested => (JobState::Cancelled, "cancelled while running".to_string()),
            (Outcome::Killed, _) if j.state == JobState::Preempting => {
                let id = rep.job;
                return self.requeue(&[id], now, &format!("node:{}", rep.node), "preempted; it stopped", true);
            }
            (Outcome::Killed, _) => (JobState::Failed, "killed by the agent".to_string()),
            (Outcome::SpawnFailed, _) => {
                (JobState::Failed, format!("could not start: {}", rep.message.clone().unwrap_or_default()))
            }
            (Outcome::OutOfMemory, _) => (
                JobState::Failed,
                format!("out of memory (limit {})", j.mem_mib.map(fmt_mib).unwrap_or_else(|| "?".into())),
            ),
            (Outcome::Refused, _) => {
                let id = rep.job;
                let why = format!("the agent refused it: {}", rep.message.clone().unwrap_or_default());
                self.requeue_jobs(&[id], now, &format!("node:{}", rep.node), &why)?;
                return self.rebuild(now);
            }
        };
        self.end_job(rep.job, state, rep.exit_code, rep.ended_at.min(now).max(j.start.unwrap_or(0)), reason, &rep.node)
    }

    /// Records the end of a job that was requeued while its report was held up.
    fn end_late(&mut self, rep: &EndReport, now: i64) -> Result<(), ApiError> {
        let (state, reason) = match (rep.outcome, rep.exit_code) {
            (Outcome::Exited, Some(0)) => (JobState::Completed, "exited with code 0 (reported late)".to_string()),
            (Outcome::Exited, c) => (JobState::Failed, format!("exited with {c:?} (reported late)")),
            (Outcome::Timeout, _) => (JobState::Timeout, "killed at its time limit (reported late)".to_string()),
            // A kill or failed start of a requeued run: the job simply runs again.
            _ => return Ok(()),
        };
        let policy = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.execute(
            "UPDATE jobs SET state=?2, start=?3, end_time=?4, exit_code=?5, end_reason=?6, node=?7 WHERE id=?1",
            params![
                rep.job as i64,
                state.as_str(),
                rep.started_at,
                rep.ended_at.min(now),
                rep.exit_code,
                reason,
                rep.node
            ],
        )
        .ctx("record late end")?;
        audit(
            &tx,
            now,
            &format!("node:{}", rep.node),
            "end",
            Some(rep.job),
            &policy,
            &json!({"state": state, "exit_code": rep.exit_code, "why": reason}),
        )?;
        tx.commit().ctx("commit late end")?;
        let j = self.pending.remove(&rep.job).expect("checked by caller");
        if let Some(c) = self.pending_per_user.get_mut(&j.user) {
            *c = c.saturating_sub(1);
        }
        self.last_reason.remove(&rep.job);
        if !self.held.remove(&rep.job) {
            self.rebuild(now)?;
        }
        Ok(())
    }

    /// Marks nodes silent for longer than the time-out as down and requeues (or fails) their jobs.
    pub fn check_nodes(&mut self, now: i64) -> Result<(), ApiError> {
        let late: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up && now - n.last_seen > self.cfg.node_timeout_ms as i64)
            .map(|(k, _)| k.clone())
            .collect();
        if late.is_empty() {
            return Ok(());
        }
        for name in &late {
            let policy = self.policy.to_string();
            let tx = self.conn.transaction().ctx("begin")?;
            tx.execute(
                "UPDATE nodes SET state='down', last_seen=?2 WHERE name=?1",
                params![name, self.nodes[name].last_seen],
            )
            .ctx("mark node down")?;
            audit(
                &tx,
                now,
                "scheduler",
                "node",
                None,
                &policy,
                &json!({"event": "down", "node": name, "silent_ms": now - self.nodes[name].last_seen}),
            )?;
            tx.commit().ctx("commit node down")?;
            if let Some(n) = self.nodes.get_mut(name) {
                n.up = false;
            }
            let jobs: Vec<JobNo> =
                self.active.values().filter(|j| j.node.as_deref() == Some(name.as_str())).map(|j| j.id).collect();
            self.requeue_jobs(&jobs, now, "scheduler", &format!("node {name} stopped sending heartbeats"))?;
        }
        self.rebuild(now)
    }

    /// Changes the policy (admins only); recorded with who did it.
    pub fn set_policy(&mut self, who: &Principal, name: &str, now: i64) -> Result<String, ApiError> {
        if who.role != Role::Admin {
            return Err(ApiError::Forbidden("only admins may change the policy".into()));
        }
        let p: PolicySpec = name.parse().map_err(|e| ApiError::BadRequest(format!("field `policy`: {e}")))?;
        check_policy(&p).map_err(|e| ApiError::BadRequest(format!("field `policy`: {e}")))?;
        let old = self.policy.to_string();
        let tx = self.conn.transaction().ctx("begin")?;
        tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('policy', ?1)", params![p.to_string()])
            .ctx("store policy")?;
        audit(&tx, now, &who.user, "policy", None, &p.to_string(), &json!({"from": old, "to": p.to_string()}))?;
        tx.commit().ctx("commit policy")?;
        self.policy = p;
        self.last_reason.clear();
        self.rebuild(now)?;
        Ok(self.policy.to_string())
    }

    /// A waiting job's reason as the API and the audit log show it. On a detailed capacity
    /// (nodes that report CPUs or memory) the core gives `node_fit` for every job that does not
    /// fit; where no node has the GPUs free at all, whatever the CPUs and memory, that is a
    /// plain shortage of GPUs, shown as `resources` as on a count-only cluster.
    fn shown(&self, r: &Reason) -> Reason {
        let cap = self.sched.capacity();
        match r {
            Reason::NodeFit { need, .. } if !cap.fits(*need) => {
                Reason::Resources { need: *need, free: cap.total_free() }
            }
            _ => r.clone(),
        }
    }

    fn wait_info(&self, id: JobNo, reason: Option<&Reason>, ahead: usize, now: i64) -> WaitInfo {
        let mut w = self.wait_info_now(id, reason, ahead, now);
        let j = &self.pending[&id];
        if j.restarts > 0 {
            let times = if j.restarts == 1 { "1 time".to_string() } else { format!("{} times", j.restarts) };
            let resume = if j.no_preempt || !self.policy.order.preemptive() {
                "it restarts when it gets GPUs again".to_string()
            } else {
                format!(
                    "it resumes when the policy ranks it ahead of running jobs again ({} GPU-s attained so far)",
                    j.executed_ms * j.gpus as i64 / 1000
                )
            };
            w.text = format!("preempted or requeued {times}; {resume}; now: {}", w.text);
        }
        w
    }

    fn wait_info_now(&self, id: JobNo, reason: Option<&Reason>, ahead: usize, now: i64) -> WaitInfo {
        let at = |t: i64| format!("in {}", fmt_rel(t - now));
        if let Some(b) = self.blocked.get(&id) {
            return WaitInfo {
                text: format!("chosen by the policy, but {b}"),
                detail: None,
                ahead,
                expected_start: None,
            };
        }
        let Some(r) = reason else {
            let j = &self.pending[&id];
            let text = if let Some(by) = &j.held_by {
                format!("held by {by} (it starts only after `ordo release {id}`)")
            } else if self.held.contains(&id) && self.nodes.values().any(|n| n.up && node_holds(n, j)) {
                let np: Vec<String> = self.hidden.iter().map(|h| h.to_string()).collect();
                format!(
                    "needs {} on one node, but --no-preempt jobs ({}) hold GPUs, CPUs or memory on every node large enough; it waits until they end",
                    ask_text(j.gpus, j.cpus, j.mem_mib),
                    np.join(", ")
                )
            } else if self.held.contains(&id) {
                format!("no node that is up can hold {} (on one node)", ask_text(j.gpus, j.cpus, j.mem_mib))
            } else {
                "starts at the next scheduling pass".to_string()
            };
            return WaitInfo { text, detail: None, ahead, expected_start: None };
        };
        let r = &self.shown(r);
        let (text, expected) = match r {
            Reason::Resources { need, free } => {
                let e = self.earliest_fit(demand(&self.pending[&id]), now);
                (
                    format!(
                        "not enough free GPUs: needs {need} on one node, {free} free in the cluster{}",
                        e.map(|t| format!("; expected to start {} (by time limits)", at(t))).unwrap_or_default()
                    ),
                    e,
                )
            }
            Reason::NodeFit { why, .. } => {
                let e = self.earliest_fit(demand(&self.pending[&id]), now);
                (
                    format!(
                        "no node can hold it now: {why}{}",
                        e.map(|t| format!("; expected to start {} (by time limits)", at(t))).unwrap_or_default()
                    ),
                    e,
                )
            }
            Reason::Priority { behind } => {
                (format!("waits behind job {behind} ({} keeps strict order)", self.policy), None)
            }
            Reason::Reserved { for_job, until } => (
                format!(
                    "it fits now, but the GPUs are reserved for job {for_job}, which starts {} at the latest",
                    at(*until)
                ),
                None,
            ),
            Reason::Reservation { start } => (format!("holds a reservation to start {}", at(*start)), Some(*start)),
            Reason::Outranked { need } => (
                format!(
                    "outranked: jobs ahead of it by {} hold the GPUs it needs ({need} on one node); it starts when they end or fall behind it",
                    self.policy
                ),
                None,
            ),
        };
        WaitInfo { text, detail: Some(r.clone()), ahead, expected_start: expected }
    }

    /// The earliest time (by running jobs' time limits) at which a job asking `d` fits: the
    /// jobs the core holds are taken on an empty copy of its cluster (GPUs, and on a detailed
    /// capacity CPUs and memory), then given back in the order of their time limits.
    fn earliest_fit(&self, d: Demand, now: i64) -> Option<i64> {
        let cap = self.sched.capacity();
        if cap.fits_for(d) {
            return Some(now);
        }
        let idx: HashMap<&str, u32> =
            self.sched_nodes.iter().enumerate().map(|(i, n)| (n.as_str(), i as u32)).collect();
        let mut what_if = cap.empty_like();
        let mut ends: Vec<(i64, JobNo, Allocation)> = Vec::new();
        // Hidden (`--no-preempt`) jobs are not in the core: their nodes are shrunk instead.
        for j in self.active.values().filter(|j| !self.hidden.contains(&j.id)) {
            let Some(&n) = j.node.as_deref().and_then(|n| idx.get(n)) else { continue };
            let a = alloc_on(&what_if, n, j);
            if what_if.take_what_if(&a) {
                ends.push(((j.start.unwrap_or(now) + j.time_limit_ms).max(now + 1), j.id, a));
            }
        }
        ends.sort_unstable_by_key(|(t, id, _)| (*t, *id));
        for (t, _, a) in ends {
            what_if.give(&a);
            if what_if.fits_for(d) {
                return Some(t);
            }
        }
        None
    }

    /// The queue: active jobs, then pending jobs in the policy's order with reasons.
    pub fn queue(&self, now: i64) -> QueueResponse {
        let plan = self.sched.schedule(now, true);
        let reasons: HashMap<JobId, &Reason> = plan.waiting.iter().map(|(j, r)| (*j, r)).collect();
        let mut jobs: Vec<JobInfo> = self.active.values().cloned().collect();
        jobs.sort_by_key(|j| j.id);
        for (i, id) in Self::policy_order(&self.sched, &plan).into_iter().enumerate() {
            let no = id.0 as JobNo;
            if let Some(j) = self.pending.get(&no) {
                let mut j = j.clone();
                j.wait = Some(self.wait_info(no, reasons.get(&id).copied(), i, now));
                jobs.push(j);
            }
        }
        let n = self.sched.waiting_len();
        for (k, &id) in self.held.iter().enumerate() {
            if let Some(j) = self.pending.get(&id) {
                let mut j = j.clone();
                j.wait = Some(self.wait_info(id, None, n + k, now));
                jobs.push(j);
            }
        }
        let mut on_hold: Vec<&JobInfo> = self.pending.values().filter(|j| j.held_by.is_some()).collect();
        on_hold.sort_by_key(|j| (j.submit, j.id));
        let n = n + self.held.len();
        for (k, j) in on_hold.into_iter().enumerate() {
            let mut j = j.clone();
            j.wait = Some(self.wait_info(j.id, None, n + k, now));
            jobs.push(j);
        }
        QueueResponse { policy: self.policy.to_string(), jobs }
    }

    /// The waiting jobs in the order the policy runs them: those it starts now, then those it
    /// leaves waiting (in its order, which for dynamic orders such as `las` is the order at
    /// this instant), then any others in queue order.
    fn policy_order(sched: &Scheduler, plan: &ordo_core::Plan) -> Vec<JobId> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(sched.waiting_len());
        let first = plan.starts.iter().map(|s| s.job).chain(plan.waiting.iter().map(|(j, _)| *j));
        for id in first.chain(sched.waiting_ids_in_order()) {
            if seen.insert(id) {
                out.push(id);
            }
        }
        out
    }

    /// One job, with why it waits when it does.
    pub fn job(&self, id: JobNo, now: i64) -> Result<JobInfo, ApiError> {
        if let Some(j) = self.active.get(&id) {
            return Ok(j.clone());
        }
        if let Some(j) = self.pending.get(&id) {
            let mut j = j.clone();
            let plan = self.sched.schedule(now, true);
            let reason = plan.waiting.iter().find(|(k, _)| k.0 as JobNo == id).map(|(_, r)| r);
            let ahead = if j.held_by.is_some() {
                self.sched.waiting_len() + self.held.len()
            } else if self.held.contains(&id) {
                self.sched.waiting_len()
            } else {
                Self::policy_order(&self.sched, &plan).iter().position(|k| k.0 as JobNo == id).unwrap_or(0)
            };
            j.wait = Some(self.wait_info(id, reason, ahead, now));
            return Ok(j);
        }
        db::load_job(&self.conn, id)?.ok_or_else(|| ApiError::NotFound(format!("no job {id}")))
    }

    /// Finished jobs, most recent first.
    pub fn history(&self, user: Option<&str>, limit: usize) -> Result<Vec<JobInfo>, ApiError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {} FROM jobs WHERE state IN ('completed','failed','cancelled','timeout') AND (?1 IS NULL OR user = ?1)
                 ORDER BY end_time DESC, id DESC LIMIT ?2",
                db::JOB_COLS
            ))
            .ctx("history")?;
        let rows = st.query_map(params![user, limit as i64], db::job_from_row).ctx("history")?;
        Ok(rows.collect::<Result<Vec<_>, _>>().ctx("history")?)
    }

    /// The nodes.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let mut v: Vec<(&String, &Node)> = self.nodes.iter().collect();
        v.sort_by_key(|(_, n)| n.seq);
        v.into_iter()
            .map(|(name, n)| {
                let mut jobs: Vec<&JobInfo> = self.active.values().filter(|j| j.node.as_ref() == Some(name)).collect();
                jobs.sort_by_key(|j| j.id);
                let used: u32 = jobs.iter().map(|j| j.gpus).sum();
                NodeInfo {
                    name: name.clone(),
                    gpus: n.gpus,
                    fake: n.fake,
                    gpu_model: n.gpu_model.clone(),
                    state: if n.up { "up" } else { "down" }.into(),
                    last_seen: n.last_seen,
                    free_gpus: if n.up { n.gpus.saturating_sub(used) } else { 0 },
                    jobs: jobs.iter().map(|j| j.id).collect(),
                    cpus: n.cpus,
                    mem_mib: n.mem_mib,
                    used_cpus: jobs.iter().map(|j| j.cpus.unwrap_or(0)).sum(),
                    used_mem_mib: jobs.iter().map(|j| j.mem_mib.unwrap_or(0)).sum(),
                    mem_limits: n.mem_limits,
                }
            })
            .collect()
    }

    /// Audit records, oldest first.
    pub fn audit(&self, job: Option<JobNo>, since: Option<i64>, limit: usize) -> Result<Vec<AuditRecord>, ApiError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, time, actor, kind, job, policy, detail FROM audit
                 WHERE (?1 IS NULL OR job = ?1) AND (?2 IS NULL OR time >= ?2) ORDER BY id LIMIT ?3",
            )
            .ctx("audit")?;
        let rows = st
            .query_map(params![job.map(|j| j as i64), since, limit as i64], |r| {
                let d: String = r.get(6)?;
                Ok(AuditRecord {
                    id: r.get(0)?,
                    time: r.get(1)?,
                    actor: r.get(2)?,
                    kind: r.get(3)?,
                    job: r.get::<_, Option<i64>>(4)?.map(|j| j as JobNo),
                    policy: r.get(5)?,
                    detail: serde_json::from_str(&d).unwrap_or(serde_json::Value::String(d)),
                })
            })
            .ctx("audit")?;
        Ok(rows.collect::<Result<Vec<_>, _>>().ctx("audit")?)
    }
}
