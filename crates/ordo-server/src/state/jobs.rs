//! What users do to their jobs: cancel, hold, release and priority, with the access rules. Each
//! change is one transaction with its audit records. Each applies to one job, to one element of
//! an array (`123_7`) or to every element of an array it concerns (`123`, the array's id):
//! the access rules are checked for every element before anything changes, all of it is one
//! transaction, and the scheduler is rebuilt once.

use super::arrays::Target;
use super::*;
use crate::array::JobRef;

/// Adds `"array": ID` to an audit record's detail when the change was made to a whole array.
fn with_array(mut detail: serde_json::Value, array: Option<JobNo>) -> serde_json::Value {
    if let Some(a) = array {
        detail["array"] = json!(a);
    }
    detail
}

impl Core {
    /// Cancels a job: a pending one at once, a running one by asking its agent to kill it. A
    /// job that is an array's id names the whole array.
    pub fn cancel(&mut self, who: &Principal, id: JobNo, now: i64) -> Result<JobState, ApiError> {
        self.cancel_ref(who, JobRef::Job(id), now).map(|(s, _)| s)
    }

    /// Cancels a job, an element or a whole array (its elements that have not ended); returns
    /// the state of the first one (`cancelled`, or still running while its agent kills it) and
    /// how many were cancelled.
    pub fn cancel_ref(&mut self, who: &Principal, r: JobRef, now: i64) -> Result<(JobState, usize), ApiError> {
        let (ids, array) = self.picked(r, |_| true, "")?;
        let states = self.cancel_many(who, &ids, array, now)?;
        Ok((states[0], states.len()))
    }

    pub(super) fn cancel_many(
        &mut self,
        who: &Principal,
        ids: &[JobNo],
        array: Option<JobNo>,
        now: i64,
    ) -> Result<Vec<JobState>, ApiError> {
        for &id in ids {
            let owner = self.owner(id)?;
            if who.role != Role::Admin && who.user != owner {
                return Err(ApiError::Forbidden(format!(
                    "job {id} belongs to {owner}; only its owner or an admin may cancel it"
                )));
            }
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for &id in ids {
            let pending = self.pending.contains_key(&id);
            if pending {
                tx.prepare_cached("UPDATE jobs SET state='cancelled', end_time=?2, end_reason=?3 WHERE id=?1")
                    .and_then(|mut s| {
                        s.execute(params![id as i64, now, format!("cancelled by {} before it started", who.user)])
                    })
                    .ctx("cancel job")?;
            } else {
                tx.prepare_cached("UPDATE jobs SET cancel_requested=1 WHERE id=?1")
                    .and_then(|mut s| s.execute(params![id as i64]))
                    .ctx("cancel job")?;
            }
            let detail = json!({"was": if pending { "pending" } else { "running" }});
            audit(&tx, now, &who.user, "cancel", Some(id), &policy, &with_array(detail, array))?;
        }
        tx.commit().ctx("commit cancel")?;
        let mut states = Vec::with_capacity(ids.len());
        let mut rebuild = false;
        let mut ended = Vec::new();
        for &id in ids {
            if let Some(j) = self.pending.remove(&id) {
                if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                    *c = c.saturating_sub(1);
                }
                self.last_reason.remove(&id);
                let queued = self.queued(&j);
                self.deps.remove(jid(id));
                self.held.remove(&id);
                // Taken out of the scheduler's queue (O(log) per job), not rebuilt.
                rebuild |= queued && self.sched.withdraw(jid(id), now).is_err();
                ended.push(id);
                states.push(JobState::Cancelled);
            } else {
                let j = self.active.get_mut(&id).expect("checked");
                j.cancel_requested = true;
                // Every node it runs on (a multi-node job's ranks) is told to kill it.
                self.to_wake.extend(j.run_nodes());
                states.push(j.state);
            }
        }
        if rebuild {
            self.rebuild(now)?;
        }
        for id in ended {
            self.deps_ended(id, false, now)?;
        }
        Ok(states)
    }

    /// The jobs a change applies to: the job or element named, or the elements of the array
    /// named that `keep` picks (409, the array "has `none`", when it picks none), with the
    /// array's id in the second case.
    fn picked(
        &self,
        r: JobRef,
        keep: impl Fn(&JobInfo) -> bool,
        none: &str,
    ) -> Result<(Vec<JobNo>, Option<JobNo>), ApiError> {
        match self.resolve(r)? {
            Target::One(id) => Ok((vec![id], None)),
            Target::Array(a, ids) => {
                let ids: Vec<JobNo> = ids
                    .into_iter()
                    .filter(|id| self.pending.get(id).or_else(|| self.active.get(id)).is_some_and(&keep))
                    .collect();
                if ids.is_empty() {
                    return Err(ApiError::Conflict(format!("array {a} has {none}")));
                }
                Ok((ids, Some(a)))
            }
        }
    }

    /// The owner of a job that has not ended (409 when it has, 404 when there is no such job).
    fn owner(&self, id: JobNo) -> Result<String, ApiError> {
        match self.pending.get(&id).or_else(|| self.active.get(&id)) {
            Some(j) => Ok(j.user.clone()),
            None => match db::load_job(&self.conn, id)? {
                Some(j) => Err(ApiError::Conflict(format!("job {id} already ended ({})", j.state.as_str()))),
                None => Err(ApiError::NotFound(format!("no job {id}"))),
            },
        }
    }

    /// The owner of a job that has not ended, checking that `who` may change it (its owner or
    /// an admin; never an agent).
    pub(super) fn changeable(&self, who: &Principal, id: JobNo, what: &str) -> Result<String, ApiError> {
        let owner = self.owner(id)?;
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
        self.hold_ref(who, JobRef::Job(id), now)
    }

    /// Holds a job, an element, or every pending element of an array not yet held; returns the
    /// (first) job held.
    pub fn hold_ref(&mut self, who: &Principal, r: JobRef, now: i64) -> Result<JobInfo, ApiError> {
        let (ids, array) = self.picked(
            r,
            |j| j.state == JobState::Pending && j.held_by.is_none(),
            "no pending element that is not held",
        )?;
        for &id in &ids {
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
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for &id in &ids {
            tx.prepare_cached("UPDATE jobs SET held_by=?2 WHERE id=?1")
                .and_then(|mut s| s.execute(params![id as i64, who.user]))
                .ctx("hold job")?;
            let detail = json!({"by": who.user, "role": who.role.as_str()});
            audit(&tx, now, &who.user, "hold", Some(id), &policy, &with_array(detail, array))?;
        }
        tx.commit().ctx("commit hold")?;
        let mut rebuild = false;
        for &id in &ids {
            let queued = self.pending.get(&id).is_some_and(|j| self.queued(j));
            if let Some(j) = self.pending.get_mut(&id) {
                j.held_by = Some(who.user.clone());
            }
            self.last_reason.remove(&id);
            self.held.remove(&id);
            rebuild |= queued && self.sched.withdraw(jid(id), now).is_err();
        }
        if rebuild {
            self.rebuild(now)?;
        }
        self.job(ids[0], now)
    }

    /// Releases a held job (its owner or an admin; a hold an admin put on someone else's job
    /// only an admin may release): it goes back to the queue at its submit-time place.
    pub fn release(&mut self, who: &Principal, id: JobNo, now: i64) -> Result<JobInfo, ApiError> {
        self.release_ref(who, JobRef::Job(id), now)
    }

    /// Releases a job, an element, or every held element of an array; returns the (first)
    /// job released.
    pub fn release_ref(&mut self, who: &Principal, r: JobRef, now: i64) -> Result<JobInfo, ApiError> {
        let (ids, array) = self.picked(r, |j| j.held_by.is_some(), "no held element")?;
        let mut holds = Vec::with_capacity(ids.len());
        for &id in &ids {
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
            holds.push(by);
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (&id, by) in ids.iter().zip(&holds) {
            tx.prepare_cached("UPDATE jobs SET held_by=NULL WHERE id=?1")
                .and_then(|mut s| s.execute(params![id as i64]))
                .ctx("release job")?;
            let detail = json!({"held_by": by, "role": who.role.as_str()});
            audit(&tx, now, &who.user, "release", Some(id), &policy, &with_array(detail, array))?;
        }
        tx.commit().ctx("commit release")?;
        let mut rebuild = false;
        for &id in &ids {
            if let Some(j) = self.pending.get_mut(&id) {
                j.held_by = None;
            }
            rebuild |= !self.enqueue(id, now);
        }
        if rebuild {
            self.rebuild(now)?;
        }
        self.job(ids[0], now)
    }

    /// Changes a job's static priority. Its owner may lower it (or leave it); only an admin may
    /// raise it. Allowed while the job has not ended; recorded with the old and new value.
    pub fn set_priority(&mut self, who: &Principal, id: JobNo, priority: i64, now: i64) -> Result<JobInfo, ApiError> {
        self.set_priority_ref(who, JobRef::Job(id), priority, now)
    }

    /// Sets the priority of a job, an element, or every element of an array that has not
    /// ended (refused as a whole if it would raise any one's and `who` is not an admin).
    pub fn set_priority_ref(
        &mut self,
        who: &Principal,
        r: JobRef,
        priority: i64,
        now: i64,
    ) -> Result<JobInfo, ApiError> {
        let (ids, array) = self.picked(r, |_| true, "")?;
        let mut olds = Vec::with_capacity(ids.len());
        for &id in &ids {
            self.changeable(who, id, "change the priority of")?;
            let old = self.pending.get(&id).or_else(|| self.active.get(&id)).map(|j| j.priority).expect("checked");
            if priority > old && who.role != Role::Admin {
                return Err(ApiError::Forbidden(format!(
                    "job {id} has priority {old}; only an admin may raise it (to {priority}); its owner may only lower it"
                )));
            }
            olds.push(old);
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (&id, old) in ids.iter().zip(&olds) {
            tx.prepare_cached("UPDATE jobs SET priority=?2 WHERE id=?1")
                .and_then(|mut s| s.execute(params![id as i64, priority]))
                .ctx("set priority")?;
            let detail = json!({"from": old, "to": priority, "role": who.role.as_str()});
            audit(&tx, now, &who.user, "priority", Some(id), &policy, &with_array(detail, array))?;
        }
        tx.commit().ctx("commit priority")?;
        let mut rebuild = false;
        for (&id, &old) in ids.iter().zip(&olds) {
            let queued = self.pending.get(&id).is_some_and(|j| self.queued(j));
            if let Some(j) = self.pending.get_mut(&id).or_else(|| self.active.get_mut(&id)) {
                j.priority = priority;
            }
            if queued && old != priority {
                // The scheduler reads priority at submission: the job is taken out and queued
                // again with the new one (or, where that cannot keep what it attained, the
                // scheduler is rebuilt).
                self.last_reason.remove(&id);
                rebuild |= self.sched.withdraw(jid(id), now).is_err() || !self.enqueue(id, now);
            }
        }
        if rebuild {
            self.rebuild(now)?;
        }
        self.job(ids[0], now)
    }

    /// Whether a pending job should be in the scheduler's queue: not held, not waiting on (or
    /// doomed by) its dependencies, not kept out because no node can hold it. (One whose
    /// dependencies were just met may not be there yet: `withdraw` then says so, and the
    /// caller rebuilds.)
    fn queued(&self, j: &JobInfo) -> bool {
        j.held_by.is_none()
            && !self.deps.is_waiting(jid(j.id))
            && !self.doomed.contains(&j.id)
            && !self.held.contains(&j.id)
    }

    /// Puts a pending job (not held, not waiting on dependencies) back in the scheduler's queue,
    /// as a rebuild would: at its submit time's place, from now on. `false` when that would
    /// not be what a rebuild does (it ran before, so its attained service must be replayed):
    /// the caller then rebuilds.
    fn enqueue(&mut self, id: JobNo, now: i64) -> bool {
        let Some(j) = self.pending.get(&id) else { return true };
        if j.held_by.is_some() || self.deps.is_waiting(jid(id)) || self.doomed.contains(&id) {
            return true;
        }
        if j.executed_ms > 0 {
            return false;
        }
        let max_up = self.nodes.values().filter(|n| n.takes_work()).map(|n| n.gpus).max().unwrap_or(0);
        if outgrows(j, max_up) || !queue_in(&mut self.sched, &self.cfg.quotas, j, id, j.submit, j.time_limit_ms, now) {
            self.held.insert(id);
        }
        true
    }
}
