//! The scheduler: waiting and running jobs, free GPUs, and `schedule(now) -> Plan`.
//! Proposing a plan (`&self`) is separate from committing it (`start`, `finish`), as in Nomad:
//! the simulator, the server and the Slurm driver each apply plans their own way.

use crate::capacity::{Allocation, Capacity, Placement};
use crate::model::{ClusterSpec, JobId};
use crate::policy::{Backfill, PolicySpec};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

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
    /// It does not fit now (or only at the cost of an earlier reservation); it holds its own
    /// reservation to start at `start` (conservative backfill).
    Reservation {
        /// Reserved start time (by estimates).
        start: Time,
    },
}

/// The scheduler's proposal for `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Jobs to start now, in the order the policy chose them.
    pub starts: Vec<Start>,
    /// For every job left waiting, in policy order, why (only when asked to explain).
    pub waiting: Vec<(JobId, Reason)>,
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
    /// The allocation is not free or has the wrong size.
    #[error("allocation for job {0} is not free or does not match its GPU count")]
    BadAllocation(JobId),
}

#[derive(Debug, Clone)]
struct Running {
    req: JobReq,
    start: Time,
    expected_end: Time,
    alloc: Allocation,
    gpu_ids: Vec<(u32, Vec<u32>)>,
}

type QueueKey = ((i64, i64), JobId);

/// Scheduler state for one cluster under one policy.
#[derive(Debug, Clone)]
pub struct Scheduler {
    policy: PolicySpec,
    cap: Capacity,
    /// `owner[node][gpu]`: which job holds that GPU.
    owner: Vec<Vec<Option<JobId>>>,
    queue: BTreeSet<QueueKey>,
    waiting: HashMap<JobId, (JobReq, (i64, i64))>,
    running: HashMap<JobId, Running>,
    by_end: BTreeSet<(Time, JobId)>,
}

impl Scheduler {
    /// A scheduler for an empty cluster.
    pub fn new(cluster: &ClusterSpec, placement: Placement, policy: PolicySpec) -> Self {
        let gpus: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
        Scheduler {
            policy,
            cap: Capacity::new(&gpus, placement),
            owner: gpus.iter().map(|&g| vec![None; g as usize]).collect(),
            queue: BTreeSet::new(),
            waiting: HashMap::new(),
            running: HashMap::new(),
            by_end: BTreeSet::new(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> PolicySpec {
        self.policy
    }

    /// Free GPUs now.
    pub fn capacity(&self) -> &Capacity {
        &self.cap
    }

    /// Number of waiting jobs.
    pub fn waiting_len(&self) -> usize {
        self.queue.len()
    }

    /// Number of running jobs.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// GPUs of the smallest waiting job, if any wait.
    pub fn waiting_ids_in_order(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queue.iter().map(|&(_, id)| id)
    }

    /// Adds a waiting job. Refuses a job that can never fit.
    pub fn submit(&mut self, req: JobReq) -> Result<(), SubmitError> {
        if !self.cap.can_ever_fit(req.gpus) {
            return Err(SubmitError::NeverFits {
                job: req.id,
                gpus: req.gpus,
                total: self.cap.total(),
            });
        }
        if self.waiting.contains_key(&req.id) || self.running.contains_key(&req.id) {
            return Err(SubmitError::Duplicate(req.id));
        }
        let key = self.policy.order.key(req.submit, req.gpus, req.estimate);
        self.queue.insert((key, req.id));
        self.waiting.insert(req.id, (req, key));
        Ok(())
    }

    /// Commits a start decided by [`Scheduler::schedule`]: takes the GPUs and returns the GPU
    /// indices given on each node.
    pub fn start(
        &mut self,
        job: JobId,
        alloc: &Allocation,
        now: Time,
    ) -> Result<Vec<(u32, Vec<u32>)>, CommitError> {
        let &(req, key) = self.waiting.get(&job).ok_or(CommitError::NotWaiting(job))?;
        if alloc.gpus() != req.gpus || !self.cap.can_take(alloc) {
            return Err(CommitError::BadAllocation(job));
        }
        self.waiting.remove(&job);
        self.queue.remove(&(key, job));
        self.cap.take(alloc);
        let mut gpu_ids = Vec::with_capacity(alloc.parts.len());
        for &(n, k) in &alloc.parts {
            let mut ids = Vec::with_capacity(k as usize);
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
            gpu_ids.push((n, ids));
        }
        let expected_end = now + req.estimate;
        self.by_end.insert((expected_end, job));
        self.running.insert(
            job,
            Running {
                req,
                start: now,
                expected_end,
                alloc: alloc.clone(),
                gpu_ids: gpu_ids.clone(),
            },
        );
        Ok(gpu_ids)
    }

    /// Commits the end of a running job: frees its GPUs.
    pub fn finish(&mut self, job: JobId) -> Result<(), CommitError> {
        let r = self
            .running
            .remove(&job)
            .ok_or(CommitError::NotRunning(job))?;
        self.by_end.remove(&(r.expected_end, job));
        self.cap.give(&r.alloc);
        for (n, ids) in &r.gpu_ids {
            for &i in ids {
                debug_assert_eq!(self.owner[*n as usize][i as usize], Some(job));
                self.owner[*n as usize][i as usize] = None;
            }
        }
        Ok(())
    }

    /// The start time of a running job.
    pub fn running_start(&self, job: JobId) -> Option<Time> {
        self.running.get(&job).map(|r| r.start)
    }

    /// Checks the scheduler's own invariants: each GPU has at most one owner, owners match
    /// running allocations, free counts match. Returns a description of the first violation.
    pub fn sanity_check(&self) -> Result<(), String> {
        let mut held = 0u64;
        for (n, gpus) in self.owner.iter().enumerate() {
            let busy = gpus.iter().filter(|o| o.is_some()).count() as u32;
            if gpus.len() as u32 - busy != self.cap.free()[n] {
                return Err(format!(
                    "node {n}: free count {} but {busy} of {} GPUs owned",
                    self.cap.free()[n],
                    gpus.len()
                ));
            }
            for o in gpus.iter().flatten() {
                if !self.running.contains_key(o) {
                    return Err(format!(
                        "node {n}: GPU owned by job {o}, which is not running"
                    ));
                }
            }
            held += busy as u64;
        }
        let want: u64 = self.running.values().map(|r| r.req.gpus as u64).sum();
        if held != want {
            return Err(format!("{held} GPUs owned but running jobs hold {want}"));
        }
        if self.queue.len() != self.waiting.len() {
            return Err("queue and waiting set differ".into());
        }
        Ok(())
    }

    /// Proposes what to start now under the policy. Pure: reads state, changes nothing.
    /// With `explain`, also says why every job left waiting waits.
    pub fn schedule(&self, now: Time, explain: bool) -> Plan {
        match self.policy.backfill {
            Backfill::None | Backfill::Easy => self.schedule_in_order(now, explain),
            Backfill::Conservative => self.schedule_conservative(now, explain),
        }
    }

    /// Strict order, then (EASY) backfill behind the first blocked job.
    fn schedule_in_order(&self, now: Time, explain: bool) -> Plan {
        let mut plan = Plan::default();
        let mut cap = self.cap.clone();
        let mut order = self.queue.iter().map(|&(_, id)| &self.waiting[&id].0);
        let head = loop {
            let Some(req) = order.next() else { return plan };
            match cap.place(req.gpus) {
                Some(a) => {
                    cap.take(&a);
                    plan.starts.push(Start {
                        job: req.id,
                        alloc: a,
                    });
                }
                None => break *req,
            }
        };
        if explain {
            plan.waiting.push((
                head.id,
                Reason::Resources {
                    need: head.gpus,
                    free: cap.total_free(),
                },
            ));
        }
        if self.policy.backfill == Backfill::None {
            if explain {
                plan.waiting
                    .extend(order.map(|r| (r.id, Reason::Priority { behind: head.id })));
            }
            return plan;
        }
        // EASY: the head's reservation is the earliest estimated end after which it fits.
        let mut ends: Vec<(Time, &Allocation)> = plan
            .starts
            .iter()
            .map(|s| (now + self.waiting[&s.job].0.estimate, &s.alloc))
            .collect();
        ends.sort_by_key(|e| e.0);
        let mut shadow_cap = cap.clone();
        let mut shadow = None;
        let mut started = ends.into_iter().peekable();
        let mut running = self
            .by_end
            .iter()
            .map(|&(t, id)| (t, &self.running[&id].alloc))
            .peekable();
        loop {
            let next = match (running.peek(), started.peek()) {
                (Some(a), Some(b)) => {
                    if a.0 <= b.0 {
                        running.next()
                    } else {
                        started.next()
                    }
                }
                (Some(_), None) => running.next(),
                (None, Some(_)) => started.next(),
                (None, None) => None,
            };
            let Some((t, alloc)) = next else { break };
            shadow_cap.give(alloc);
            if shadow_cap.fits(head.gpus) {
                // A job overrunning its estimate is expected to end "any moment now".
                shadow = Some(t.max(now + 1));
                break;
            }
        }
        let Some(shadow) = shadow else {
            // Cannot happen: the head fits an empty cluster (checked at submit).
            debug_assert!(false, "no shadow time for job {}", head.id);
            return plan;
        };
        for req in order {
            let Some(a) = cap.place(req.gpus) else {
                if explain {
                    plan.waiting.push((
                        req.id,
                        Reason::Resources {
                            need: req.gpus,
                            free: cap.total_free(),
                        },
                    ));
                }
                continue;
            };
            let ok = if now + req.estimate <= shadow {
                true
            } else {
                // It would still run at the shadow time: allowed only if the head still fits then.
                let mut after = shadow_cap.clone();
                after.take_what_if(&a) && after.fits(head.gpus) && {
                    shadow_cap = after;
                    true
                }
            };
            if ok {
                cap.take(&a);
                plan.starts.push(Start {
                    job: req.id,
                    alloc: a,
                });
            } else if explain {
                plan.waiting.push((
                    req.id,
                    Reason::Reserved {
                        for_job: head.id,
                        until: shadow,
                    },
                ));
            }
        }
        plan
    }

    /// Conservative backfill: every waiting job, in order, reserves the earliest slot that
    /// delays no reservation before it; those whose slot is now start.
    fn schedule_conservative(&self, now: Time, explain: bool) -> Plan {
        let mut plan = Plan::default();
        let pooled = self.cap.placement() == Placement::Pooled;
        let mut profile = Profile::new(now, &self.cap, pooled);
        for &(t, id) in &self.by_end {
            profile.release(t.max(now + 1), &self.running[&id].alloc);
        }
        let mut now_cap = self.cap.clone();
        for &(_, id) in &self.queue {
            let req = &self.waiting[&id].0;
            // Past this point nothing else can start now; later reservations only matter to
            // `explain`, so stop early when not asked.
            if !explain && now_cap.total_free() == 0 {
                break;
            }
            let (t, alloc) = profile.reserve(req.gpus, req.estimate.max(1));
            if t == now {
                let a = if pooled {
                    now_cap.place(req.gpus).expect("profile says it fits now")
                } else {
                    alloc
                };
                now_cap.take(&a);
                plan.starts.push(Start { job: id, alloc: a });
            } else if explain {
                plan.waiting.push((id, Reason::Reservation { start: t }));
            }
        }
        plan
    }
}

/// Free GPUs over future time, as a step function: `segs[i]` holds from its time until the next
/// segment's. The last segment lasts forever. For pooled placement the profile counts GPUs in a
/// single virtual node, since which nodes a pooled job gets does not matter.
#[derive(Debug)]
struct Profile {
    segs: Vec<(Time, Capacity)>,
    pooled: bool,
}

impl Profile {
    fn new(now: Time, cap: &Capacity, pooled: bool) -> Self {
        let first = if pooled {
            let mut c = Capacity::new(&[cap.total() as u32], Placement::Pooled);
            c.take(&Allocation {
                parts: vec![(0, (cap.total() - cap.total_free()) as u32)],
            });
            c
        } else {
            cap.clone()
        };
        Profile {
            segs: vec![(now, first)],
            pooled,
        }
    }

    fn collapse(&self, alloc: &Allocation) -> Allocation {
        if self.pooled {
            Allocation {
                parts: vec![(0, alloc.gpus())],
            }
        } else {
            alloc.clone()
        }
    }

    /// Index of the segment starting at `t`, splitting one if needed.
    fn split_at(&mut self, t: Time) -> usize {
        match self.segs.binary_search_by_key(&t, |s| s.0) {
            Ok(i) => i,
            Err(i) => {
                let c = self.segs[i - 1].1.clone();
                self.segs.insert(i, (t, c));
                i
            }
        }
    }

    /// Resources in `alloc` come free from `t` on.
    fn release(&mut self, t: Time, alloc: &Allocation) {
        let a = self.collapse(alloc);
        let i = self.split_at(t);
        for s in &mut self.segs[i..] {
            s.1.give(&a);
        }
    }

    /// Finds the earliest time a job of `g` GPUs fits for `d`, reserves it there, and returns
    /// that time and the allocation chosen.
    fn reserve(&mut self, g: u32, d: Time) -> (Time, Allocation) {
        let mut found = None;
        for i in 0..self.segs.len() {
            if !self.segs[i].1.fits(g) {
                continue;
            }
            let t = self.segs[i].0;
            let mut m = self.segs[i].1.clone();
            let mut j = i + 1;
            while j < self.segs.len() && self.segs[j].0 < t + d && m.fits(g) {
                m.min_with(&self.segs[j].1);
                j += 1;
            }
            if let Some(a) = m.place(g) {
                found = Some((t, a));
                break;
            }
        }
        let (t, a) = found.expect("the last segment is the empty cluster, where every job fits");
        let i = self.split_at(t);
        let end = self.split_at(t + d);
        for s in &mut self.segs[i..end] {
            s.1.take(&a);
        }
        (t, a)
    }
}
