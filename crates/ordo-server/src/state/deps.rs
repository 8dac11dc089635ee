//! Dependencies in the server (`--after-ok`, `--after-any`, `--after-not-ok`): a job waiting on
//! others stays out of the scheduler until they end as it asks, or is cancelled when they can't.

use super::*;
use ordo_core::{Dep, DepState};

/// Most dependencies one job may list.
const MAX_AFTER: usize = 256;

/// Most jobs released by dependencies that one hold of the state lock moves (see
/// [`Core::deps_ended`]).
pub const BACKLOG_STEP: usize = 500;

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
    /// waits for all its elements to complete; `--after-not-ok`, for all to end unsuccessfully):
    /// the array is declared a group of `ordo_core::Dependencies` (its elements and how those that
    /// ended ended, read once), and the dependency stays one entry, however many elements it
    /// has. One on an element (`123_7`, sent as its own id) or on another job is kept. Sorted,
    /// each once.
    pub(super) fn expand_after(&mut self, after: &[AfterDep]) -> Result<Vec<AfterDep>, ApiError> {
        let mut out = after.to_vec();
        out.sort_unstable();
        out.dedup();
        for d in &out {
            self.ensure_group(d.job)?;
        }
        Ok(out)
    }

    /// Declares array `id` a dependency group if it is an array and not declared yet.
    fn ensure_group(&mut self, id: JobNo) -> Result<(), ApiError> {
        if self.deps.is_group(jid(id)) {
            return Ok(());
        }
        let mut st = self
            .conn
            .prepare_cached("SELECT id, state FROM jobs WHERE array_id = ?1 ORDER BY array_index")
            .ctx("array elements")?;
        let elements = st
            .query_map([id as i64], |r| Ok((r.get::<_, i64>(0)? as JobNo, r.get::<_, String>(1)?)))
            .ctx("array elements")?
            .collect::<Result<Vec<_>, _>>()
            .ctx("array elements")?;
        drop(st);
        if elements.is_empty() {
            return Ok(());
        }
        let ended: HashMap<JobId, bool> = elements
            .iter()
            .filter(|(e, _)| !self.pending.contains_key(e) && !self.active.contains_key(e))
            .map(|(e, state)| (jid(*e), JobState::parse(state).is_some_and(success)))
            .collect();
        let members: Vec<JobId> = elements.iter().map(|(e, _)| jid(*e)).collect();
        self.deps.add_group(jid(id), &members, |j| ended.get(&j).copied());
        Ok(())
    }

    /// Checks a submission's dependencies: known jobs, not too many, none already ended the
    /// wrong way (409: the job could never run; for an array, any element that did). Returns
    /// them as kept ([`Core::expand_after`]), for [`Core::add_expanded_deps`].
    pub(super) fn check_after(&mut self, after: &[AfterDep]) -> Result<Vec<AfterDep>, ApiError> {
        if after.len() > MAX_AFTER {
            return Err(ApiError::BadRequest(format!(
                "field `after`: {} dependencies, at most {MAX_AFTER}",
                after.len()
            )));
        }
        if let Some(d) = after.iter().find(|d| self.ingesting_holds(d.job)) {
            return Err(Self::still_ingesting(d.job));
        }
        let expanded = self.expand_after(after)?;
        for d in &expanded {
            let dep = Dep { kind: d.kind, job: jid(d.job) };
            let settled = if self.deps.is_group(dep.job) {
                self.deps.settled(dep, &|_| None)
            } else {
                self.end_of(d.job)?.map(|ok| d.kind.met_by(ok))
            };
            if settled == Some(false) {
                let what = if self.deps.is_group(dep.job) {
                    format!("an element of array {} already ended the wrong way", d.job)
                } else {
                    format!("job {} already ended the wrong way", d.job)
                };
                return Err(ApiError::Conflict(format!(
                    "field `after`: {what}, so `{}` on it can never be met (DependencyNeverSatisfied)",
                    api_kind(d.kind)
                )));
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
        for d in after.iter().filter(|d| !self.deps.is_group(jid(d.job))) {
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
    /// queue; jobs it makes never satisfiable are cancelled with `DependencyNeverSatisfied`, and
    /// so, in turn, are theirs. The dependencies themselves are settled at once (O(jobs
    /// touched)); the jobs' moves are carried out in steps of at most [`BACKLOG_STEP`] per hold
    /// of the state lock ([`Core::drain_backlog`]), so that one user's fan-out never holds it
    /// long.
    pub(super) fn deps_ended(&mut self, id: JobNo, ok: bool, now: i64) -> Result<(), ApiError> {
        let released = self.deps.ended(jid(id), ok);
        self.defer_released(released);
        self.drain_backlog(now, BACKLOG_STEP)?;
        Ok(())
    }

    /// Queues what an end released for [`Core::drain_backlog`].
    fn defer_released(&mut self, released: ordo_core::deps::Released) {
        for r in released.ready {
            self.backlog.push_back((r.0 as JobNo, None));
        }
        for (w, d, ok) in released.never {
            self.doomed.insert(w.0 as JobNo);
            self.backlog.push_back((w.0 as JobNo, Some((d, ok))));
        }
    }

    /// Whether jobs released by dependencies still wait to be moved (see [`Core::deps_ended`]).
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Carries out up to `max` of the moves dependencies released: a job whose dependencies are
    /// all met joins the scheduler's queue; one that can never run is cancelled (one
    /// transaction for the step). Returns how many are left.
    pub fn drain_backlog(&mut self, now: i64, max: usize) -> Result<usize, ApiError> {
        if self.backlog.is_empty() {
            return Ok(0);
        }
        let take = max.min(self.backlog.len());
        let step: Vec<(JobNo, Option<(Dep, bool)>)> = self.backlog.drain(..take).collect();
        let max_up = self.nodes.values().filter(|n| n.takes_work()).map(|n| n.gpus).max().unwrap_or(0);
        let mut never = Vec::new();
        for (id, what) in step {
            match what {
                Some((d, ok)) => never.push((jid(id), d, ok)),
                None => {
                    let Some(j) = self.pending.get(&id) else { continue };
                    if j.held_by.is_some() {
                        continue; // joins at `ordo release`
                    }
                    let queued = j.gpus <= max_up
                        && job_req(&self.cfg.quotas, &self.sched, j, id, j.submit, j.time_limit_ms).is_ok_and(|req| {
                            // A rebuild since the release has queued it already.
                            matches!(
                                self.sched.submit(req, now),
                                Ok(()) | Err(ordo_core::scheduler::SubmitError::Duplicate(_))
                            )
                        });
                    if !queued {
                        self.held.insert(id);
                    }
                }
            }
        }
        self.cancel_never(&never, now)?;
        Ok(self.backlog.len())
    }

    /// Cancels jobs whose dependencies can never be met (`DependencyNeverSatisfied`), in one
    /// transaction, and settles what depends on them since.
    fn cancel_never(&mut self, never: &[(JobId, Dep, bool)], now: i64) -> Result<(), ApiError> {
        if never.is_empty() {
            return Ok(());
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        let mut gone = Vec::new();
        for (w, d, ok) in never {
            let on = if self.deps.is_group(d.job) { "array" } else { "job" };
            let why = format!(
                "DependencyNeverSatisfied: {} on {on} {}, which ended {}",
                api_kind(d.kind),
                d.job.0,
                if *ok { "successfully" } else { "unsuccessfully" }
            );
            let changed = tx
                .prepare_cached(
                    "UPDATE jobs SET state='cancelled', end_time=?2, end_reason=?3 WHERE id=?1 AND state='pending'",
                )
                .and_then(|mut st| st.execute(params![w.0 as i64, now, why]))
                .ctx("cancel job")?;
            if changed == 0 {
                // Cancelled by its owner meanwhile.
                continue;
            }
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
        for &id in &gone {
            self.doomed.remove(&id);
            if let Some(j) = self.pending.remove(&id) {
                if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                    *c = c.saturating_sub(1);
                }
            }
            self.held.remove(&id);
            self.last_reason.remove(&id);
        }
        // Dependencies added on these jobs while they waited to be cancelled are settled now
        // (those added before were settled with the end that doomed them).
        for id in gone {
            let released = self.deps.ended(jid(id), false);
            self.defer_released(released);
        }
        Ok(())
    }

    /// Rebuilds the dependencies of pending jobs from the database (at start): jobs whose
    /// dependencies ended the wrong way meanwhile are cancelled.
    pub(super) fn load_deps(&mut self, now: i64) -> Result<(), ApiError> {
        self.deps = ordo_core::Dependencies::default();
        self.backlog.clear();
        self.doomed.clear();
        let mut with: Vec<(JobNo, Vec<AfterDep>)> =
            self.pending.values().filter(|j| !j.after.is_empty()).map(|j| (j.id, j.after.clone())).collect();
        with.sort_by_key(|(id, _)| *id);
        for (id, after) in with {
            if let DepState::Never { on, ok } = self.add_deps(id, &after)? {
                // Cancelled now (before the server serves anyone: no step limit); jobs waiting
                // on it have larger ids, so they see it ended.
                self.cancel_never(&[(jid(id), on, ok)], now)?;
                self.drain_backlog(now, usize::MAX)?;
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
        let what = match self.deps.group_counts(first.job) {
            Some((left, ok, failed)) => {
                let n = left + ok + failed;
                format!(
                    "array {}'s elements to {} ({}): {left} of its {n} element{} {} not ended",
                    first.job.0,
                    first.kind.wants(),
                    api_kind(first.kind),
                    if n == 1 { "" } else { "s" },
                    if left == 1 { "has" } else { "have" }
                )
            }
            None => format!("job {} to {} ({})", first.job.0, first.kind.wants(), api_kind(first.kind)),
        };
        Some(format!("waits for {what}{more}; it joins the queue then"))
    }
}

/// The API's name of a dependency kind (`after_ok`).
fn api_kind(k: ordo_core::DepKind) -> String {
    serde_json::to_value(k).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| k.to_string())
}

fn ids_of(deps: &[Dep]) -> String {
    deps.iter().map(|d| d.job.0.to_string()).collect::<Vec<_>>().join(", ")
}
