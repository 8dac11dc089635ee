//! What users do to their jobs: cancel, hold, release and priority, with the access rules. Each
//! change is one transaction with its audit record.

use super::*;

impl Core {
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
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
            let waited = self.waits_on_deps(id);
            self.deps.remove(jid(id));
            if !self.held.remove(&id) && j.held_by.is_none() && !waited {
                // The scheduler has no "withdraw": rebuild it without the job.
                self.rebuild(now)?;
            }
            self.deps_ended(id, false, now)?;
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
    pub(super) fn changeable(&self, who: &Principal, id: JobNo, what: &str) -> Result<String, ApiError> {
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
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
}
