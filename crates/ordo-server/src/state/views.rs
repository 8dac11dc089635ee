//! Read-only views: the queue in policy order with each job's reason and expected start, one
//! job, history, nodes and the audit log.

use super::*;

impl Core {
    /// What placement must find for a pending job on the scheduler's nodes: [`demand`] within
    /// the pools of the kinds it accepts.
    pub(super) fn demand_of(&self, j: &JobInfo) -> Demand {
        let d = demand(j).within(elig_of(&self.sched, j).unwrap_or(Elig::ANY));
        // Its topology ask, on the topology of the nodes up now.
        match j.topology.as_ref().and_then(|a| a.parse::<ordo_core::TopoAsk>().ok()) {
            Some(a) => d.with_topo(self.sched.topology_need(&a).unwrap_or_default()),
            None => d,
        }
    }

    /// A waiting job's reason as the API and the audit log show it. On a detailed capacity
    /// (nodes that report CPUs or memory) the core gives `node_fit` for every job that does not
    /// fit; where no node has the GPUs free at all, whatever the CPUs and memory, that is a
    /// plain shortage of GPUs, shown as `resources` as on a count-only cluster.
    pub(super) fn shown(&self, r: &Reason) -> Reason {
        let cap = self.sched.capacity();
        match r {
            Reason::NodeFit { need, .. } if !cap.fits_for(ordo_core::Demand::gpus(*need)) => {
                Reason::Resources { need: *need, free: cap.total_free() }
            }
            _ => r.clone(),
        }
    }

    pub(super) fn wait_info(&self, id: JobNo, reason: Option<&Reason>, ahead: usize, now: i64) -> WaitInfo {
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
        if let Some(d) = self.drained_note() {
            w.text = format!("{}; {d}", w.text);
        }
        w
    }

    /// The nodes that are up but take no new work, with why (`None` when there are none).
    pub(super) fn drained_note(&self) -> Option<String> {
        let d: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|(name, n)| n.up.then(|| n.paused_why())?.map(|why| format!("{name} ({why})")))
            .collect();
        (!d.is_empty()).then(|| format!("taking no new work: {}", d.join("; ")))
    }

    /// For a job no node that takes work can hold, while a drained node could: says so.
    fn drained_holder(&self, j: &JobInfo) -> Option<String> {
        (self.held.contains(&j.id)
            && !self.nodes.values().any(|n| n.takes_work() && node_holds(n, j))
            && self.nodes.values().any(|n| n.up && n.paused() && node_holds(n, j)))
        .then(|| format!("only nodes that take no new work now can hold {}", ask_text(j.gpus, j.cpus, j.mem_mib)))
    }

    pub(super) fn wait_info_now(&self, id: JobNo, reason: Option<&Reason>, ahead: usize, now: i64) -> WaitInfo {
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
            } else if let Some(t) = self.deps_text(id) {
                t
            } else if self.doomed.contains(&id) {
                "a job it depends on ended so that its dependencies can never be met; it is being cancelled (DependencyNeverSatisfied)".to_string()
            } else if self.backlog.iter().any(|(j, _)| *j == id) {
                "its dependencies were just met; it joins the queue within a moment".to_string()
            } else if let Some(d) = self.drained_holder(j) {
                d
            } else if let Some(n) =
                j.needs().filter(|_| !self.nodes.values().any(|n| n.takes_work() && node_accepts(n, j)))
            {
                let why = elig_of(&self.sched, j).err().map(|w| format!(": {w}")).unwrap_or_default();
                format!(
                    "no node that is up and takes work has GPUs it accepts ({}){why}; it waits until one registers",
                    n.describe()
                )
            } else if self.held.contains(&id) && self.nodes.values().any(|n| n.takes_work() && node_holds(n, j)) {
                let np: Vec<String> = self.hidden.iter().map(|h| h.to_string()).collect();
                format!(
                    "needs {} on one node, but --no-preempt jobs ({}) hold GPUs, CPUs or memory on every node large enough; it waits until they end",
                    ask_text(j.gpus, j.cpus, j.mem_mib),
                    np.join(", ")
                )
            } else if let Some(w) = self
                .held
                .contains(&id)
                .then(|| self.sched.capacity().empty_like().topology_why(self.demand_of(j)))
                .flatten()
            {
                format!(
                    "no unit of the topology level it requires can hold it, even with every GPU free: {w}; it waits \
                     until the nodes up can"
                )
            } else if self.held.contains(&id) && j.nodes == 0 {
                format!("the nodes that are up cannot hold {} between them", ask_text(j.gpus, j.cpus, j.mem_mib))
            } else if self.held.contains(&id) {
                format!("no node that is up can hold {} ({})", ask_text(j.gpus, j.cpus, j.mem_mib), gang_where(j))
            } else {
                "starts at the next scheduling pass".to_string()
            };
            return WaitInfo { text, detail: None, ahead, expected_start: None };
        };
        let r = &self.shown(r);
        // Where it must fit: one node, or a multi-node job's nodes.
        let on = gang_where(&self.pending[&id]);
        let (text, expected) = match r {
            Reason::Resources { need, free } => {
                let e = self.earliest_fit(self.demand_of(&self.pending[&id]), now);
                (
                    format!(
                        "not enough free GPUs: needs {need} {on}, {free} free in the cluster{}",
                        e.map(|t| format!("; expected to start {} (by time limits)", at(t))).unwrap_or_default()
                    ),
                    e,
                )
            }
            Reason::NodeFit { why, .. } => {
                let e = self.earliest_fit(self.demand_of(&self.pending[&id]), now);
                (
                    format!(
                        "no node can hold it now: {why}{}",
                        e.map(|t| format!("; expected to start {} (by time limits)", at(t))).unwrap_or_default()
                    ),
                    e,
                )
            }
            Reason::Constraint { why, .. } => {
                let e = self.earliest_fit(self.demand_of(&self.pending[&id]), now);
                (
                    format!(
                        "its GPU constraint holds it: {why}{}",
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
            Reason::Quota { scope, holds, limit, need, model, .. } => {
                (self.quota_text(&self.pending[&id], *scope, *holds, *limit, *need, model.as_deref()), None)
            }
            Reason::Outranked { need } => (
                format!(
                    "outranked: jobs ahead of it by {} hold the GPUs it needs ({need} {on}); it starts when they end or fall behind it",
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
    pub(super) fn earliest_fit(&self, d: Demand, now: i64) -> Option<i64> {
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
            let parts: Option<Vec<(u32, u32)>> =
                placed(j).into_iter().map(|(n, g)| idx.get(n).map(|&i| (i, g.len() as u32))).collect();
            let Some(parts) = parts.filter(|p| !p.is_empty()) else { continue };
            let a = alloc_on(&what_if, parts, j);
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

    /// The last explained plan (see `Core::explained`), made afresh when it is older than
    /// [`EXPLAINED_MAX_AGE_MS`] or when the state changed since it was made; with `stale_ok`,
    /// a plan younger than [`EXPLAINED_MIN_AGE_MS`] serves even so when it has `job` (a job's
    /// view, `/metrics`): those plan the whole queue at most five times a second however often
    /// they are asked, and a job just submitted is still explained at once.
    pub(super) fn explained(&self, now: i64, stale_ok: bool, job: Option<JobId>) -> Arc<Explained> {
        if let Some(e) = self.explained.borrow().as_ref() {
            let age = (now - e.at).abs();
            let current = e.writes == self.writes
                || (stale_ok && age <= EXPLAINED_MIN_AGE_MS && job.is_none_or(|j| e.place.contains_key(&j)));
            if age <= EXPLAINED_MAX_AGE_MS && current {
                return e.clone();
            }
        }
        let plan = self.sched.schedule(now, true);
        self.remember_explained(&plan, now)
    }

    /// Keeps an explained plan made at `now` for the views.
    pub(super) fn remember_explained(&self, plan: &ordo_core::Plan, now: i64) -> Arc<Explained> {
        let order = Self::policy_order(&self.sched, plan);
        let place = order.iter().enumerate().map(|(i, &j)| (j, i)).collect();
        let reasons = plan.waiting.iter().cloned().collect();
        let e = Arc::new(Explained { at: now, writes: self.writes, order, place, reasons });
        *self.explained.borrow_mut() = Some(e.clone());
        e
    }

    /// The queue: active jobs, then pending jobs in the policy's order with reasons (as of the
    /// last explained plan, at most a second old; jobs queued since come after, in queue order).
    pub fn queue(&self, now: i64) -> QueueResponse {
        let ex = self.explained(now, false, None);
        let mut jobs: Vec<JobInfo> = self.active.values().cloned().collect();
        jobs.sort_by_key(|j| j.id);
        let newer = self.sched.waiting_ids_in_order().filter(|id| !ex.place.contains_key(id));
        for (i, id) in ex.order.iter().copied().chain(newer).enumerate() {
            let no = id.0 as JobNo;
            if let Some(j) = self.pending.get(&no).filter(|_| self.sched.is_waiting(id)) {
                let mut j = j.clone();
                j.wait = Some(self.wait_info(no, ex.reasons.get(&id), i, now));
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
        let n_hold = on_hold.len();
        for (k, j) in on_hold.into_iter().enumerate() {
            let mut j = j.clone();
            j.wait = Some(self.wait_info(j.id, None, n + k, now));
            jobs.push(j);
        }
        // Every other pending job: waiting on other jobs' ends, or just released or doomed by
        // them (see `deps.rs`), with why.
        let n = n + n_hold;
        let mut outside: Vec<&JobInfo> = self
            .pending
            .values()
            .filter(|j| j.held_by.is_none() && !self.held.contains(&j.id) && !self.sched.is_waiting(jid(j.id)))
            .collect();
        outside.sort_by_key(|j| (j.submit, j.id));
        for (k, j) in outside.into_iter().enumerate() {
            let mut j = j.clone();
            j.wait = Some(self.wait_info(j.id, None, n + k, now));
            jobs.push(j);
        }
        // What the running jobs' GPUs really do (pending jobs have no figures).
        let n = self.active.len();
        let _ = self.attach_activity(&mut jobs[..n]);
        let arrays = self.array_summaries(&jobs);
        QueueResponse { policy: self.policy.to_string(), jobs, arrays }
    }

    /// The waiting jobs in the order the policy runs them: those it starts now, then those it
    /// leaves waiting (in its order, which for dynamic orders such as `las` is the order at
    /// this instant), then any others in queue order.
    pub(super) fn policy_order(sched: &Scheduler, plan: &ordo_core::Plan) -> Vec<JobId> {
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
            let mut j = j.clone();
            j.activity = self.job_activity(id)?;
            return Ok(j);
        }
        if let Some(j) = self.pending.get(&id) {
            let mut j = j.clone();
            let ex = self.explained(now, true, self.sched.is_waiting(jid(id)).then_some(jid(id)));
            let reason = ex.reasons.get(&jid(id));
            let ahead = if j.held_by.is_some() {
                self.sched.waiting_len() + self.held.len()
            } else if self.held.contains(&id) {
                self.sched.waiting_len()
            } else {
                // Queued since the plan was made: behind every job it placed.
                ex.place.get(&jid(id)).copied().unwrap_or(ex.order.len())
            };
            j.wait = Some(self.wait_info(id, reason, ahead, now));
            return Ok(j);
        }
        let mut j = db::load_job(&self.conn, id)?.ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?;
        j.activity = self.job_activity(id)?;
        Ok(j)
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
        let mut jobs = rows.collect::<Result<Vec<_>, _>>().ctx("history")?;
        drop(st);
        self.attach_activity(&mut jobs)?;
        Ok(jobs)
    }

    /// The nodes.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let mut v: Vec<(&String, &Node)> = self.nodes.iter().collect();
        v.sort_by_key(|(_, n)| n.seq);
        v.into_iter()
            .map(|(name, n)| {
                let mut jobs: Vec<&JobInfo> = self.active.values().filter(|j| j.rank_on(name).is_some()).collect();
                jobs.sort_by_key(|j| j.id);
                let used: u32 = jobs
                    .iter()
                    .map(|j| {
                        placed(j).into_iter().find(|(n, _)| *n == name.as_str()).map_or(0, |(_, g)| g.len() as u32)
                    })
                    .sum();
                let (busy_pct, idle_jobs) = self.node_activity(name);
                NodeInfo {
                    name: name.clone(),
                    gpus: n.gpus,
                    fake: n.fake,
                    gpu_model: n.gpu_model.clone(),
                    gpu_mem_mib: n.gpu_mem_mib,
                    features: n.features.clone(),
                    topology: n.topology.clone(),
                    state: if n.up { "up" } else { "down" }.into(),
                    drain: n.drain.clone(),
                    maint: n.maint.clone(),
                    status: n.status(!jobs.is_empty()).into(),
                    last_seen: n.last_seen,
                    free_gpus: if n.up { n.gpus.saturating_sub(used) } else { 0 },
                    jobs: jobs.iter().map(|j| j.id).collect(),
                    job_ids: jobs.iter().map(|j| j.id_text()).collect(),
                    cpus: n.cpus,
                    mem_mib: n.mem_mib,
                    used_cpus: jobs.iter().map(|j| j.cpus.unwrap_or(0)).sum(),
                    used_mem_mib: jobs.iter().map(|j| j.mem_mib.unwrap_or(0)).sum(),
                    mem_limits: n.mem_limits,
                    busy_pct,
                    idle_jobs,
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

/// Where a job must fit, for people: `on one node`, or `over 2 nodes (8 on each)`.
fn gang_where(j: &JobInfo) -> String {
    if j.nodes > 1 {
        format!("over {} nodes ({} on each)", j.nodes, per_node_gpus(j))
    } else {
        "on one node".into()
    }
}
