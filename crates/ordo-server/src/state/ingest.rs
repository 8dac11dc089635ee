//! A large job array taken in steps, so that no hold of the state lock (nor any one commit)
//! grows with the array's size: its ids are reserved first (the `arrays` row and its last
//! element), its element rows are inserted `step` at a time, each step its own transaction,
//! and only then are its elements given to the scheduler, again `step` at a time. The
//! submitter is answered after the last step. An array whose rows are not all stored (the server
//! stopped meanwhile; it was never acknowledged) is removed when the state is loaded.

use super::*;
use crate::array::ArraySpec;

/// Arrays of more elements than this are taken in steps of this many.
pub const ARRAY_STEP: usize = 1_000;

/// An array being taken in (`Core::ingest_begin`), carried between the steps.
#[derive(Debug)]
pub struct Ingest {
    who: Principal,
    job: JobInfo,
    spec: ArraySpec,
    after: Vec<AfterDep>,
    /// The id of its first element (the array's id); element `k` has id `first + k`.
    first: JobNo,
    /// Elements whose rows are stored (the last one is stored with the reservation).
    stored: usize,
    /// Elements given to the scheduler.
    joined: usize,
    detail: serde_json::Value,
}

impl Ingest {
    /// The array's id.
    pub fn id(&self) -> JobNo {
        self.first
    }

    fn len(&self) -> usize {
        self.spec.indices.len()
    }
}

impl Core {
    /// Whether a submission is an array large enough to be taken in steps.
    pub fn ingests_in_steps(req: &SubmitRequest) -> bool {
        req.array
            .as_deref()
            .and_then(|s| crate::array::parse_array(s).ok())
            .is_some_and(|a| a.indices.len() > ARRAY_STEP)
    }

    /// Whether `id` is an element (or the id) of an array still being taken in: not yet a job
    /// anyone may act on or depend on.
    pub(super) fn ingesting_holds(&self, id: JobNo) -> bool {
        self.ingesting.range(..=id).next_back().is_some_and(|(_, &last)| id <= last)
    }

    /// The error for an action on an array still being taken in.
    pub(super) fn still_ingesting(id: JobNo) -> ApiError {
        ApiError::Conflict(format!("job {id} is part of an array still being submitted; try again in a moment"))
    }

    /// Checks the array as any submission, then reserves its ids: its `arrays` row and its last
    /// element's row, in one transaction (later submissions take ids after it).
    pub fn ingest_begin(&mut self, who: &Principal, req: SubmitRequest, now: i64) -> Result<Ingest, ApiError> {
        let (job, spec, after) = self.check_submission(who, req, now, &HashMap::new())?;
        let spec = spec.ok_or_else(|| internal("take an array in steps", "not an array"))?;
        let n = spec.indices.len();
        let policy = self.policy.to_string();
        let detail = json!({"gpus": job.gpus, "nodes": job.nodes, "cpus": job.cpus, "mem_mib": job.mem_mib,
                            "time_limit_ms": job.time_limit_ms, "no_preempt": job.no_preempt, "after": job.after});
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        let first: i64 =
            tx.query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM jobs", [], |r| r.get(0)).ctx("reserve ids")?;
        if first + n as i64 - 1 > u32::MAX as i64 {
            return Err(ApiError::Conflict("job ids exhausted (more than 2^32 jobs in this database)".into()));
        }
        tx.execute(
            "INSERT INTO arrays(id, user, spec, elements, max_running, submit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![first, who.user, spec.canonical(), n as i64, spec.max_running, now],
        )
        .ctx("insert array")?;
        let mut ing =
            Ingest { who: who.clone(), job, spec, after, first: first as JobNo, stored: 0, joined: 0, detail };
        insert_elements(&tx, &who.user, &ing.job, &ing.spec, ing.first, (n - 1, n), &ing.detail, &policy, now)?;
        tx.commit().ctx("commit an array's reservation")?;
        self.ingesting.insert(ing.first, ing.first + n as JobNo - 1);
        // Counted against the user's pending limit from now on.
        *self.pending_per_user.entry(who.user.clone()).or_default() += n;
        ing.stored = 0;
        Ok(ing)
    }

    /// Stores the next `step` elements' rows (and audit records) in one transaction. Returns
    /// whether every row is stored.
    pub fn ingest_store(&mut self, ing: &mut Ingest, step: usize, now: i64) -> Result<bool, ApiError> {
        self.ingest_alive(ing)?;
        let n = ing.len();
        let to = (ing.stored + step).min(n - 1);
        if to > ing.stored {
            let policy = self.policy.to_string();
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            insert_elements(
                &tx,
                &ing.who.user,
                &ing.job,
                &ing.spec,
                ing.first,
                (ing.stored, to),
                &ing.detail,
                &policy,
                now,
            )?;
            tx.commit().ctx("commit array elements")?;
            ing.stored = to;
        }
        Ok(ing.stored == n - 1)
    }

    /// Gives the next `step` stored elements to the scheduler (or to the dependencies that hold
    /// them). Returns whether every element has joined; the array is then an ordinary one.
    pub fn ingest_join(&mut self, ing: &mut Ingest, step: usize, now: i64) -> Result<bool, ApiError> {
        if !self.ingesting.contains_key(&ing.first) {
            // The state was reloaded meanwhile (a failed group commit): the load took the
            // array in whole if all its rows were committed, and removed it if not.
            let stored: i64 = self
                .conn
                .query_row("SELECT COUNT(*) FROM jobs WHERE array_id = ?1", params![ing.first as i64], |r| r.get(0))
                .ctx("read an array")?;
            return if stored as usize == ing.len() { Ok(true) } else { self.ingest_alive(ing).map(|()| false) };
        }
        let n = ing.len();
        if ing.joined == 0 {
            self.add_array(ing.first, &ing.spec);
        }
        let max_up = self.nodes.values().filter(|n| n.takes_work()).map(|n| n.gpus).max().unwrap_or(0);
        let to = (ing.joined + step).min(n);
        for k in ing.joined..to {
            let eid = ing.first + k as JobNo;
            let mut info = ing.job.clone();
            info.id = eid;
            info.submit = ing.job.submit;
            info.array = Some(ArrayMember { id: ing.first, index: ing.spec.indices[k] });
            let waits = matches!(self.add_expanded_deps(eid, &ing.after), Ok(ordo_core::DepState::Waiting { .. }));
            if !waits
                && (outgrows(&info, max_up)
                    || !queue_in(&mut self.sched, &self.cfg.quotas, &info, eid, info.submit, info.time_limit_ms, now))
            {
                self.held.insert(eid);
            }
            self.pending.insert(eid, info);
        }
        ing.joined = to;
        if to == n {
            self.ingesting.remove(&ing.first);
        }
        Ok(to == n)
    }

    /// Takes back an array whose steps failed: its stored rows and its `arrays` row deleted (it
    /// was never acknowledged), its joined elements out of the scheduler.
    pub fn ingest_abort(&mut self, ing: &Ingest, now: i64) {
        let last = ing.first + ing.len() as JobNo - 1;
        if self.ingesting.remove(&ing.first).is_none() {
            // The state was reloaded meanwhile (a failed group commit): the load removed it.
            return;
        }
        for k in 0..ing.joined {
            let eid = ing.first + k as JobNo;
            self.pending.remove(&eid);
            self.held.remove(&eid);
            let _ = self.sched.withdraw(jid(eid), now);
        }
        if let Some(c) = self.pending_per_user.get_mut(&ing.who.user) {
            *c = c.saturating_sub(ing.len());
        }
        self.arrays.remove(&ing.first);
        let gone = begin(&mut self.conn, self.group, &mut self.writes).and_then(|tx| {
            tx.execute("DELETE FROM jobs WHERE id BETWEEN ?1 AND ?2", params![ing.first as i64, last as i64])
                .ctx("remove an array's elements")?;
            tx.execute("DELETE FROM arrays WHERE id = ?1", params![ing.first as i64]).ctx("remove an array")?;
            tx.commit().ctx("commit an array's removal")?;
            Ok(())
        });
        if let Err(e) = gone {
            // The next load removes it (its rows are incomplete or its elements not acknowledged).
            eprintln!("ordo server: array {}: could not remove its stored elements: {e}", ing.first);
        }
        let _ = self.rebuild(now);
    }

    fn ingest_alive(&self, ing: &Ingest) -> Result<(), ApiError> {
        if self.ingesting.contains_key(&ing.first) {
            Ok(())
        } else {
            Err(ApiError::Conflict(format!(
                "array {}: its submission was not stored (the server's state was reloaded after a failed commit)",
                ing.first
            )))
        }
    }

    /// At load: removes the arrays whose elements are not all stored (a submission in steps
    /// that the server did not finish: never acknowledged), with an audit record each.
    pub(super) fn remove_incomplete_arrays(&mut self, now: i64) -> Result<(), ApiError> {
        let broken: Vec<(i64, i64, i64, String)> = {
            let mut st = self
                .conn
                .prepare(
                    "SELECT a.id, a.elements, (SELECT COUNT(*) FROM jobs j WHERE j.array_id = a.id), a.user FROM arrays a
                     WHERE a.elements > (SELECT COUNT(*) FROM jobs j WHERE j.array_id = a.id)",
                )
                .ctx("find incomplete arrays")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .ctx("find incomplete arrays")?
                .collect::<Result<Vec<_>, _>>()
                .ctx("find incomplete arrays")?;
            rows
        };
        if broken.is_empty() {
            return Ok(());
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (id, elements, stored, user) in &broken {
            tx.execute("DELETE FROM jobs WHERE array_id = ?1", params![id]).ctx("remove an incomplete array")?;
            tx.execute("DELETE FROM arrays WHERE id = ?1", params![id]).ctx("remove an incomplete array")?;
            audit(
                &tx,
                now,
                "scheduler",
                "cancel",
                Some(*id as JobNo),
                &policy,
                &json!({"why": format!(
                    "array {id} of {user}: its submission did not complete before the server stopped (it was never acknowledged); its {stored} stored elements of {elements} were removed"
                )}),
            )?;
        }
        tx.commit().ctx("commit the removal of incomplete arrays")?;
        Ok(())
    }
}

/// Inserts elements `from..to` (by position in the spec) of the array whose first element has
/// id `first`, with an audit record each, in two statements over the list of their indices
/// (`json_each`), whatever their number. `detail` is the submission's audit detail.
#[allow(clippy::too_many_arguments)]
pub(super) fn insert_elements(
    tx: &rusqlite::Savepoint<'_>,
    user: &str,
    j: &JobInfo,
    spec: &ArraySpec,
    first: JobNo,
    (from, to): (usize, usize),
    detail: &serde_json::Value,
    policy: &str,
    now: i64,
) -> Result<(), ApiError> {
    let command = serde_json::to_string(&j.command).map_err(|e| internal("encode command", e))?;
    let after = match j.after.is_empty() {
        true => None,
        false => Some(serde_json::to_string(&j.after).map_err(|e| internal("encode after", e))?),
    };
    let indices = serde_json::to_string(&spec.indices[from..to]).map_err(|e| internal("encode array", e))?;
    let base = first as i64 + from as i64;
    tx.prepare_cached(
        "INSERT INTO jobs(id, user, name, command, cwd, gpus, cpus, mem_mib, time_limit_ms, priority, on_node_failure, state, submit, no_preempt, umask, after, array_id, array_index, nodes, output, gpu_models, gpu_mem_mib, features)
         SELECT ?1 + key, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'pending', ?12, ?13, ?14, ?15, ?18, value, ?16, ?19, ?20, ?21, ?22 FROM json_each(?17)",
    )
    .and_then(|mut st| {
        st.execute(params![
            base,
            user,
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
            j.no_preempt as i64,
            j.umask,
            after,
            j.nodes,
            indices,
            first as i64,
            j.output,
            db::list_text(&j.gpu_models),
            j.gpu_mem_mib.map(|m| m as i64),
            db::list_text(&j.features)
        ])
    })
    .ctx("insert array elements")?;
    if let Some(p) = &j.preempt {
        let p = serde_json::to_string(p).map_err(|e| internal("encode preempt", e))?;
        tx.prepare_cached("UPDATE jobs SET preempt = ?1 WHERE id >= ?2 AND id < ?3")
            .and_then(|mut st| st.execute(params![p, base, base + (to - from) as i64]))
            .ctx("store array elements' checkpoints")?;
    }
    if let Some(t) = &j.topology {
        tx.prepare_cached("UPDATE jobs SET topology = ?1 WHERE id >= ?2 AND id < ?3")
            .and_then(|mut st| st.execute(params![t, base, base + (to - from) as i64]))
            .ctx("store array elements' topology asks")?;
    }
    // The first element's record names the array's spec and size; every one its array and index.
    let mut d0 = detail.clone();
    d0["array_spec"] = json!(spec.canonical());
    d0["elements"] = json!(spec.indices.len());
    d0["array"] = json!(first);
    let mut rest = detail.clone();
    rest["array"] = json!(first);
    tx.prepare_cached(
        "INSERT INTO audit(time, actor, kind, job, policy, detail)
         SELECT ?1, ?2, 'submit', ?3 + key, ?4, json_set(CASE ?8 + key WHEN 0 THEN ?5 ELSE ?6 END, '$.index', value) FROM json_each(?7)",
    )
    .and_then(|mut st| st.execute(params![now, user, base, policy, d0.to_string(), rest.to_string(), indices, from as i64]))
    .ctx("write audit records")?;
    Ok(())
}
