//! `las:...,compat=tiresias`: the Tiresias simulator's queue lists, kept as its `dlas_sim_jobs`
//! (`run_sim.py`) keeps them, so that a pass takes its decisions at its instants.
//!
//! The simulator holds one list per queue and, at every event (an arrival, an end, or its own
//! "queue jump"), in this order:
//! 1. drops the jobs that ended and appends the arrivals to the first queue;
//! 2. visits every job in arrival order: a job that ran since the last event and whose
//!    executed wall time x GPUs reached its queue's limit moves **one** queue down, appended at
//!    the back of the new list (behind its waiting jobs); with `solve_starvation` K > 0, a
//!    waiting job below the first queue that has waited K x its executed time (counted while
//!    it had run since its last promotion) goes back to the back of the first queue, its
//!    executed time reset;
//! 3. walks the lists in order from an empty cluster: each job that fits runs, the others wait;
//! 4. moves every waiting job behind the running ones of its list, keeping their order (so a
//!    job just preempted heads the waiting ones);
//! 5. asks to be woken at the earliest of: every running job's
//!    `event + (limit - executed) / GPUs` (whole seconds, rounded down: Python 2's integer
//!    division, under a `math.ceil` that changes nothing), every waiting job's
//!    `event + int(executed x K - waited)`; only the latest request counts.
//!
//! Here a job's place is its queue, the part of the list it is in (running part ahead, waiting
//! part behind) and a position within that part, so a pass ranks jobs by
//! `(queue, part, position)` without walking lists. Step 2 happens in [`Scheduler::advance`]
//! (the event), step 4 in the commits (`start` moves a job to the back of the running part,
//! `preempt` to the front of the waiting part, in the order the pass chose them), except for a
//! job demoted while running that keeps running: it moves to the running part at the next
//! event, behind the jobs started at this one (it was visited after them). Step 5 is
//! [`Scheduler::tiresias_wake`]; the simulator honours only the latest wake-up.

use crate::model::JobId;
use crate::policy::{LasParams, Order};
use crate::scheduler::{HashMap, Plan, Scheduler};
use crate::time::{Time, SECOND};
use std::collections::HashSet;

/// Where a job sits in the Tiresias simulator's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// The queue (`q_id`), 0 first.
    pub(crate) queue: usize,
    /// In the running part of its queue's list, ahead of the waiting part.
    pub(crate) ahead: bool,
    /// Position within that part, smaller first.
    pub(crate) pos: i64,
    /// Order of arrival (the simulator's `runnable_jobs` order).
    arrival: u64,
    /// The simulator's `last_pending_time` before the current wait: time waited since the last
    /// promotion while the job had run since it.
    waited: Time,
}

/// The lists of every waiting and running job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lists {
    place: HashMap<JobId, Place>,
    /// Next position at the back of a part (positions only grow).
    back: i64,
    /// The front of the waiting parts: jobs preempted at one instant go ahead of those
    /// preempted earlier, in the order the pass preempted them (`preempted_at`, `front_next`
    /// within it; `front_round` counts the instants).
    front_round: i64,
    preempted_at: Option<Time>,
    front_next: i64,
    arrivals: u64,
    /// The last instant whose event was processed (`advance` handles each instant once).
    event_at: Option<Time>,
    /// Jobs demoted while running at the last event, in the waiting part of their new queue.
    demoted: Vec<JobId>,
}

impl Lists {
    /// A position behind every one given so far.
    fn back_position(&mut self) -> i64 {
        self.back += 1;
        self.back
    }
}

/// `int(executed x K)` of the simulator in whole seconds, as milliseconds.
fn starve_limit(executed: Time, k: f64) -> Time {
    ((executed as f64 / SECOND as f64 * k).floor() * SECOND as f64) as Time
}

impl Scheduler {
    /// The `las` parameters when the order is `las:...,compat=tiresias`.
    pub(crate) fn tiresias_params(&self) -> Option<&LasParams> {
        match &self.policy.order {
            Order::Las(lp) if lp.compat_tiresias => Some(lp),
            _ => None,
        }
    }

    /// A job's place in the lists (every waiting and running job has one).
    pub(crate) fn tiresias_place(&self, id: JobId) -> Place {
        self.tiresias.place.get(&id).copied().expect("every queued job has a place in the lists")
    }

    /// An arrival joins the back of the first queue's list.
    pub(crate) fn tiresias_submit(&mut self, id: JobId) {
        if self.tiresias_params().is_none() {
            return;
        }
        let l = &mut self.tiresias;
        let pos = l.back_position();
        let arrival = l.arrivals;
        l.arrivals += 1;
        l.place.insert(id, Place { queue: 0, ahead: false, pos, arrival, waited: 0 });
    }

    /// A start: the job moves to the back of its list's running part; a wait that followed a
    /// run since its last promotion counts towards starvation.
    pub(crate) fn tiresias_start(&mut self, id: JobId, now: Time) {
        if self.tiresias_params().is_none() {
            return;
        }
        let p = self.progress.get(&id).copied().unwrap_or_default();
        let l = &mut self.tiresias;
        let pos = l.back_position();
        let Some(pl) = l.place.get_mut(&id) else { return };
        if p.executed > p.las_base.1 {
            pl.waited += now - p.waiting_since;
        }
        if !pl.ahead {
            pl.ahead = true;
            pl.pos = pos;
        }
    }

    /// A preemption: a job of the running part goes to the front of the waiting part, behind
    /// the jobs preempted before it at this instant. A job demoted at this event (appended
    /// behind the waiting ones) stays where it is.
    pub(crate) fn tiresias_preempt(&mut self, id: JobId, now: Time) {
        if self.tiresias_params().is_none() {
            return;
        }
        let l = &mut self.tiresias;
        if l.preempted_at != Some(now) {
            l.preempted_at = Some(now);
            l.front_round += 1;
            l.front_next = 0;
        }
        let pos = -(l.front_round << 32) + l.front_next;
        let Some(pl) = l.place.get_mut(&id) else { return };
        if pl.ahead {
            pl.ahead = false;
            pl.pos = pos;
            l.front_next += 1;
        }
    }

    /// The lists' invariants: every waiting and running job has one place, no two the same.
    pub(crate) fn tiresias_check(&self) -> Result<(), String> {
        if self.tiresias_params().is_none() {
            return Ok(());
        }
        let l = &self.tiresias;
        let jobs = self.queue.len() + self.running.len();
        if l.place.len() != jobs {
            return Err(format!("{} jobs in the Tiresias lists, {jobs} waiting or running", l.place.len()));
        }
        let mut seen = HashSet::new();
        for (id, p) in &l.place {
            if !self.waiting.contains_key(id) && !self.running.contains_key(id) {
                return Err(format!("job {id} in the Tiresias lists is neither waiting nor running"));
            }
            if !seen.insert((p.queue, p.ahead, p.pos)) {
                return Err(format!("two jobs at place {:?} of the Tiresias lists", (p.queue, p.ahead, p.pos)));
            }
        }
        Ok(())
    }

    /// An end leaves the lists.
    pub(crate) fn tiresias_finish(&mut self, id: JobId) {
        self.tiresias.place.remove(&id);
    }

    /// The simulator's event at `now` (once per instant): the jobs demoted at the last event
    /// that kept running join their list's running part; then, in arrival order, running jobs
    /// move one queue down where their executed time x GPUs reached the limit, and waiting
    /// ones starved long enough go back to the first queue.
    pub(crate) fn tiresias_event(&mut self, now: Time) {
        let Some(lp) = self.tiresias_params() else { return };
        let (thresholds, k) = (lp.thresholds.clone(), lp.promote);
        if self.tiresias.event_at.is_some_and(|t| t >= now) {
            return;
        }
        self.tiresias.event_at = Some(now);
        let mut settled = std::mem::take(&mut self.tiresias.demoted);
        settled.sort_by_key(|id| self.tiresias.place.get(id).map(|p| p.pos));
        for id in settled {
            if self.running.contains_key(&id) {
                let pos = self.tiresias.back_position();
                if let Some(pl) = self.tiresias.place.get_mut(&id) {
                    pl.ahead = true;
                    pl.pos = pos;
                }
            }
        }
        let mut demoted: Vec<(u64, JobId)> = Vec::new();
        for r in self.running.values() {
            let id = r.req.id;
            let pl = self.tiresias_place(id);
            let Some(&limit) = thresholds.get(pl.queue) else { continue };
            let p = self.progress.get(&id).copied().unwrap_or_default();
            let executed = p.executed + (now - r.start) - p.las_base.1;
            if executed * r.req.gpus as i64 >= limit {
                demoted.push((pl.arrival, id));
            }
        }
        demoted.sort_unstable();
        for &(_, id) in &demoted {
            let pos = self.tiresias.back_position();
            if let Some(pl) = self.tiresias.place.get_mut(&id) {
                pl.queue += 1;
                pl.ahead = false;
                pl.pos = pos;
            }
        }
        self.tiresias.demoted = demoted.into_iter().map(|(_, id)| id).collect();
        if k <= 0.0 {
            return;
        }
        let mut promoted: Vec<(u64, JobId)> = Vec::new();
        for req in self.queue.values() {
            let pl = self.tiresias_place(req.id);
            let p = self.progress.get(&req.id).copied().unwrap_or_default();
            let executed = p.executed - p.las_base.1;
            if pl.queue > 0 && p.executed > 0 && executed > 0 {
                let waited = pl.waited + (now - p.waiting_since);
                if waited >= starve_limit(executed, k) {
                    promoted.push((pl.arrival, req.id));
                }
            }
        }
        promoted.sort_unstable();
        for (_, id) in promoted {
            let pos = self.tiresias.back_position();
            if let Some(p) = self.progress.get_mut(&id) {
                p.las_base = (p.attained, p.executed);
            }
            if let Some(pl) = self.tiresias.place.get_mut(&id) {
                pl.queue = 0;
                pl.ahead = false;
                pl.pos = pos;
                pl.waited = 0;
            }
        }
    }

    /// The simulator's next queue jump after a pass at `now` that commits `plan`: the earliest
    /// demotion it computes for a job running after the pass, or promotion for a job waiting
    /// after it.
    pub(crate) fn tiresias_wake(&self, now: Time, plan: &Plan, lp: &LasParams) -> Option<Time> {
        let mut wake: Option<Time> = None;
        let mut at = |t: Time| {
            if t > now {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        let preempted: HashSet<JobId> = plan.preempt.iter().copied().collect();
        let running = self
            .running
            .values()
            .filter(|r| !preempted.contains(&r.req.id))
            .map(|r| (r.req.id, r.req.gpus, now - r.start))
            .chain(plan.starts.iter().map(|s| (s.job, s.alloc.gpus(), 0)));
        for (id, gpus, current) in running {
            let pl = self.tiresias_place(id);
            let Some(&limit) = lp.thresholds.get(pl.queue) else { continue };
            if gpus == 0 {
                continue;
            }
            let p = self.progress.get(&id).copied().unwrap_or_default();
            let executed = p.executed + current - p.las_base.1;
            at(now + (limit - executed).div_euclid(SECOND * gpus as i64) * SECOND);
        }
        if lp.promote > 0.0 {
            let started: HashSet<JobId> = plan.starts.iter().map(|s| s.job).collect();
            let waiting = self
                .queue
                .values()
                .map(|r| r.id)
                .filter(|id| !started.contains(id))
                .chain(plan.preempt.iter().copied());
            for id in waiting {
                let pl = self.tiresias_place(id);
                let mut p = self.progress.get(&id).copied().unwrap_or_default();
                if let Some(r) = self.running.get(&id) {
                    // Preempted by this plan: it waits from now, its run counted.
                    p.executed += now - r.start;
                    p.waiting_since = now;
                }
                let executed = p.executed - p.las_base.1;
                if pl.queue > 0 && p.executed > 0 && executed > 0 {
                    let waited = pl.waited + (now - p.waiting_since);
                    let left = starve_limit(executed, lp.promote) - waited;
                    if left > 0 {
                        at(now + left);
                    }
                }
            }
        }
        wake
    }
}
