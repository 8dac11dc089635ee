//! Dependencies in the server (`--after-ok`, `--after-any`, `--after-not-ok`): a job waiting on
//! others stays out of the scheduler until they end as it asks, or is cancelled when they can't.

use super::*;
use ordo_core::{Dep, DepState};

/// Most dependencies one job may list.
const MAX_AFTER: usize = 256;

/// Whether a job that ended in `state` ended successfully (what `after_ok` waits for).
fn success(state: JobState) -> bool {
    state == JobState::Completed
}

impl Core {
    /// How a job ended, for the dependencies on it: `None` while it has not ended,
    /// `Some(true)` when it completed, `Some(false)` for any other end. An unknown job is an
    /// error (404) naming the field.
    fn end_of(&self, job: JobNo) -> Result<Option<bool>, ApiError> {
        if self.pending.contains_key(&job) || self.active.contains_key(&job) {
            return Ok(None);
        }
        match db::load_job(&self.conn, job)? {
            Some(j) => Ok(Some(success(j.state))),
            None => Err(ApiError::NotFound(format!("field `after`: no job {job}"))),
        }
    }

    /// The dependencies as the scheduler keeps them: one on an array's id (its first element's)
    /// stands for one on every element of the array, as in Slurm (`--after-ok 123` on array 123
    /// waits for all its elements to complete; `--after-not-ok`, for all to end unsuccessfully);
    /// one on an element (`123_7`, sent as its own id) or on another job is kept. Sorted, each once.
    pub(super) fn expand_after(&self, after: &[AfterDep]) -> Result<Vec<AfterDep>, ApiError> {
        let mut out = Vec::with_capacity(after.len());
        for d in after {
            let mut st = self
                .conn
                .prepare_cached("SELECT id FROM jobs WHERE array_id = ?1 ORDER BY array_index")
                .ctx("array elements")?;
            let elements = st
                .query_map([d.job as i64], |r| r.get::<_, i64>(0))
                .ctx("array elements")?
                .collect::<Result<Vec<_>, _>>()
                .ctx("array elements")?;
            if elements.is_empty() {
                out.push(*d);
            } else {
                out.extend(elements.into_iter().map(|e| AfterDep { kind: d.kind, job: e as JobNo }));
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Checks a submission's dependencies: known jobs, not too many, none already ended the
    /// wrong way (409: the job could never run; for an array, any element that did). Returns
    /// them expanded ([`Core::expand_after`]), for [`Core::add_expanded_deps`].
    pub(super) fn check_after(&self, after: &[AfterDep]) -> Result<Vec<AfterDep>, ApiError> {
        if after.len() > MAX_AFTER {
            return Err(ApiError::BadRequest(format!(
                "field `after`: {} dependencies, at most {MAX_AFTER}",
                after.len()
            )));
        }
        let expanded = self.expand_after(after)?;
        for d in &expanded {
            if let Some(ok) = self.end_of(d.job)? {
                if !d.kind.met_by(ok) {
                    return Err(ApiError::Conflict(format!(
                        "field `after`: job {} already ended {}, so `{}` on it can never be met (DependencyNeverSatisfied)",
                        d.job,
                        if ok { "successfully" } else { "unsuccessfully" },
                        api_kind(d.kind)
                    )));
                }
            }
        }
        Ok(expanded)
    }

    /// Records a pending job's dependencies as submitted (an array's id standing for its
    /// elements, [`Core::expand_after`]); returns whether it waits on them (then it stays out of
    /// the scheduler), or the dependency that can never be met (its job and how it ended).
    pub(super) fn add_deps(&mut self, id: JobNo, after: &[AfterDep]) -> Result<DepState, ApiError> {
        if after.is_empty() {
            return Ok(DepState::Met);
        }
        let after = self.expand_after(after)?;
        self.add_expanded_deps(id, &after)
    }

    /// [`Core::add_deps`] of dependencies already expanded (once for all elements of an array
    /// submitted with them).
    pub(super) fn add_expanded_deps(&mut self, id: JobNo, after: &[AfterDep]) -> Result<DepState, ApiError> {
        if after.is_empty() {
            return Ok(DepState::Met);
        }
        let mut ended: HashMap<JobId, Option<bool>> = HashMap::new();
        for d in after {
            // A job that was deleted from the database counts as ended unsuccessfully.
            ended.insert(jid(d.job), self.end_of(d.job).unwrap_or(Some(false)));
        }
        let deps: Vec<Dep> = after.iter().map(|d| Dep { kind: d.kind, job: jid(d.job) }).collect();
        Ok(self.deps.add(jid(id), &deps, |j| ended.get(&j).copied().flatten()))
    }

    /// Whether a pending job waits on dependencies (it is then out of the scheduler).
    pub(super) fn waits_on_deps(&self, id: JobNo) -> bool {
        self.deps.is_waiting(jid(id))
    }

    /// A job ended (`ok`: completed): jobs whose last dependency it was join the scheduler's
    /// queue; jobs it makes never satisfiable are cancelled with `DependencyNeverSatisfied`
    /// (one transaction), and so, in turn, are theirs.
    pub(super) fn deps_ended(&mut self, id: JobNo, ok: bool, now: i64) -> Result<(), ApiError> {
        let released = self.deps.ended(jid(id), ok);
        self.apply_released(released, now)
    }

    /// Carries out what an end released (see [`Core::deps_ended`]).
    fn apply_released(&mut self, released: ordo_core::deps::Released, now: i64) -> Result<(), ApiError> {
        for r in released.ready {
            let id = r.0 as JobNo;
            let Some(j) = self.pending.get(&id) else { continue };
            if j.held_by.is_some() {
                continue; // joins at `ordo release`
            }
            let max_up = self.nodes.values().filter(|n| n.takes_work()).map(|n| n.gpus).max().unwrap_or(0);
            let req = job_req(&self.cfg.quotas, j, id, j.submit, j.time_limit_ms);
            if j.gpus > max_up || self.sched.submit(req, now).is_err() {
                self.held.insert(id);
            }
        }
        if released.never.is_empty() {
            return Ok(());
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        let mut gone = Vec::new();
        for (w, d, ok) in &released.never {
            let why = format!(
                "DependencyNeverSatisfied: {} on job {}, which ended {}",
                api_kind(d.kind),
                d.job.0,
                if *ok { "successfully" } else { "unsuccessfully" }
            );
            tx.execute(
                "UPDATE jobs SET state='cancelled', end_time=?2, end_reason=?3 WHERE id=?1 AND state='pending'",
                params![w.0 as i64, now, why],
            )
            .ctx("cancel job")?;
            audit(
                &tx,
                now,
                "scheduler",
                "cancel",
                Some(w.0 as JobNo),
                &policy,
                &json!({"why": "DependencyNeverSatisfied", "kind": d.kind, "on": d.job.0, "on_ok": ok}),
            )?;
            gone.push(w.0 as JobNo);
        }
        tx.commit().ctx("commit dependency cancels")?;
        for id in gone {
            if let Some(j) = self.pending.remove(&id) {
                if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                    *c = c.saturating_sub(1);
                }
            }
            self.held.remove(&id);
            self.last_reason.remove(&id);
        }
        Ok(())
    }

    /// Rebuilds the dependencies of pending jobs from the database (at start): jobs whose
    /// dependencies ended the wrong way meanwhile are cancelled.
    pub(super) fn load_deps(&mut self, now: i64) -> Result<(), ApiError> {
        self.deps = ordo_core::Dependencies::default();
        let mut with: Vec<(JobNo, Vec<AfterDep>)> =
            self.pending.values().filter(|j| !j.after.is_empty()).map(|j| (j.id, j.after.clone())).collect();
        with.sort_by_key(|(id, _)| *id);
        for (id, after) in with {
            if let DepState::Never { on, ok } = self.add_deps(id, &after)? {
                // Cancelled now; jobs waiting on it have larger ids, so they see it ended.
                let never = ordo_core::deps::Released { never: vec![(jid(id), on, ok)], ..Default::default() };
                self.apply_released(never, now)?;
            }
        }
        Ok(())
    }

    /// What `explain` says of a job waiting on dependencies.
    pub(super) fn deps_text(&self, id: JobNo) -> Option<String> {
        let unmet = self.deps.unmet(jid(id));
        let first = unmet.first()?;
        let more = match unmet.len() {
            1 => String::new(),
            n => format!(" (and {} more: {})", n - 1, ids_of(&unmet[1..])),
        };
        Some(format!(
            "waits for job {} to {} ({}){more}; it joins the queue then",
            first.job.0,
            first.kind.wants(),
            api_kind(first.kind)
        ))
    }
}

/// The API's name of a dependency kind (`after_ok`).
fn api_kind(k: ordo_core::DepKind) -> String {
    serde_json::to_value(k).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| k.to_string())
}

fn ids_of(deps: &[Dep]) -> String {
    deps.iter().map(|d| d.job.0.to_string()).collect::<Vec<_>>().join(", ")
}
