//! What node agents say: registration, polls (heartbeat, reconciliation, work) and end reports;
//! nodes that fall silent are declared down.

use super::*;

/// Whether `who` may speak for `node`: only the agent token made for that very node
/// (`ordo admin token create NODE --agent`). Users and admins cannot act as a node, and one
/// node's agent cannot register, poll or report for another.
pub(crate) fn speaks_for(who: &Principal, node: &str, what: &str) -> Result<(), ApiError> {
    match who.role {
        Role::Agent if who.user == node => Ok(()),
        Role::Agent => Err(ApiError::Forbidden(format!(
            "this agent token belongs to node {}; it may not {what} for node {node}",
            who.user
        ))),
        _ => Err(ApiError::Forbidden(format!(
            "only node {node}'s own agent token may {what} for it (`ordo admin token create {node} --agent`)"
        ))),
    }
}

/// What an end report says of its process: the state it leaves the job in and how, in words
/// (`Pending`: the agent refused to start it, so it goes back to the queue). Kills the server
/// asked for (cancel, preemption, a gang being stopped) are the caller's to tell apart.
pub(super) fn reported_end(rep: &EndReport, time_limit_ms: i64) -> (JobState, String) {
    let (state, what) = reported_end_only(rep, time_limit_ms);
    // What happened besides (its output cut at the limit or lost to a full disk) goes with it.
    match (&rep.message, rep.outcome) {
        (Some(m), Outcome::Exited | Outcome::Timeout | Outcome::Killed | Outcome::LeaseExpired) if !m.is_empty() => {
            (state, format!("{what}; {m}"))
        }
        _ => (state, what),
    }
}

fn reported_end_only(rep: &EndReport, time_limit_ms: i64) -> (JobState, String) {
    let msg = || rep.message.clone().unwrap_or_default();
    match (rep.outcome, rep.exit_code) {
        (Outcome::Exited, Some(0)) => (JobState::Completed, "exited with code 0".to_string()),
        (Outcome::Exited, Some(c)) => (JobState::Failed, format!("exited with code {c}")),
        (Outcome::Exited, None) => {
            (JobState::Failed, format!("killed by signal {}", rep.signal.map(|s| s.to_string()).unwrap_or("?".into())))
        }
        (Outcome::Timeout, _) => (JobState::Timeout, format!("killed at its time limit of {time_limit_ms} ms")),
        (Outcome::Killed, _) => (JobState::Failed, "killed by the agent".to_string()),
        (Outcome::SpawnFailed, _) => (JobState::Failed, format!("could not start: {}", msg())),
        (Outcome::OutOfMemory, _) => (JobState::Failed, "out of memory".to_string()),
        (Outcome::Refused, _) => (JobState::Pending, format!("the agent refused it: {}", msg())),
        (Outcome::LeaseExpired, _) => (
            JobState::Pending,
            "its node lost contact with the server for longer than its lease, so its agent stopped it".to_string(),
        ),
    }
}

impl Core {
    /// Refuses a time an agent reports that the server's own clock makes impossible: before
    /// `earliest` (less the allowed clock skew) or after now (plus the skew).
    pub(super) fn plausible(&self, field: &str, t: i64, earliest: i64, now: i64) -> Result<(), ApiError> {
        let skew = self.cfg.max_clock_skew_ms;
        if t < earliest - skew || t > now + skew {
            let (d, how) = if t > now { (t - now, "after") } else { (now - t, "before") };
            return Err(ApiError::BadRequest(format!(
                "field `{field}`: {t} is {} {how} the server's clock; this time must lie between {} ms and now (within max_clock_skew = {})",
                fmt_rel(d),
                earliest,
                fmt_rel(skew)
            )));
        }
        Ok(())
    }

    /// Refuses a report about a run that `node` did not run.
    fn ran_on(&self, j: &JobInfo, node: &str) -> Result<(), ApiError> {
        match j.node.as_deref() {
            Some(n) if n == node => Ok(()),
            Some(n) => Err(ApiError::Forbidden(format!(
                "job {} runs (or last ran) on node {n}, not on {node}; a node may only report its own jobs",
                j.id
            ))),
            None => Err(ApiError::Forbidden(format!(
                "job {} has not run on any node; node {node} may only report its own jobs",
                j.id
            ))),
        }
    }

    /// A node (re)registers: it is up from now with the GPUs it reports.
    pub fn register(&mut self, who: &Principal, req: &RegisterRequest, now: i64) -> Result<RegisterResponse, ApiError> {
        speaks_for(who, &req.node, "register")?;
        // What its GPUs are, kept as the scheduler compares them (lowercased model, sorted
        // features); every name bounded, so that no agent can bloat the state.
        let gpu_model = req.gpu_model.as_deref().map(kinds::model_name).transpose();
        let gpu_model = gpu_model.map_err(kinds::bad_field("gpu_model"))?;
        let features = kinds::feature_list(&req.features).map_err(kinds::bad_field("features"))?;
        let topology =
            crate::topo::place(&req.topology, &self.cfg.topology_levels).map_err(kinds::bad_field("topology"))?;
        if let Some(m) = req.gpu_mem_mib {
            kinds::gpu_mem(m).map_err(kinds::bad_field("gpu_mem_mib"))?;
        }
        if let Some(t) = req.clock {
            let skew = t - now;
            if skew.abs() > self.cfg.max_clock_skew_ms {
                return Err(ApiError::BadRequest(format!(
                    "field `clock`: the agent's clock is {} {} the server's (more than max_clock_skew = {}); synchronise the clocks (NTP) and start the agent again",
                    fmt_rel(skew.abs()),
                    if skew > 0 { "ahead of" } else { "behind" },
                    fmt_rel(self.cfg.max_clock_skew_ms)
                )));
            }
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
        if let Some(a) = &req.addr {
            bounded("addr", a, MAX_GPU_MODEL_BYTES)?;
            if a.is_empty() || !a.chars().all(|c| c.is_ascii_alphanumeric() || ".:-_[]".contains(c)) {
                return Err(ApiError::BadRequest(format!("field `addr`: `{a}` is not a host name or IP address")));
            }
        }
        let seq = match self.nodes.get(&req.node) {
            Some(n) => n.seq,
            None => self.nodes.values().map(|n| n.seq).max().unwrap_or(0) + 1,
        };
        let node = Node {
            seq,
            gpus: req.gpus,
            fake: req.fake,
            gpu_model,
            gpu_mem_mib: req.gpu_mem_mib,
            features,
            topology,
            up: true,
            last_seen: now,
            cpus: req.cpus,
            mem_mib: req.mem_mib,
            mem_limits: req.mem_limits,
            addr: req.addr.clone(),
            drain: self.nodes.get(&req.node).and_then(|n| n.drain.clone()),
            maint: self.nodes.get(&req.node).and_then(|n| n.maint.clone()),
        };
        let changed = self
            .nodes
            .get(&req.node)
            .filter(|n| {
                n.up && n.gpus == req.gpus
                    && n.fake == req.fake
                    && n.gpu_model == node.gpu_model
                    && n.gpu_mem_mib == node.gpu_mem_mib
                    && n.features == node.features
                    && n.topology == node.topology
                    && n.cpus == req.cpus
                    && n.mem_mib == req.mem_mib
                    && n.mem_limits == req.mem_limits
                    && n.addr == req.addr
            })
            .is_none();
        if changed {
            // A new kind of node (GPU model, memory, features) must keep the cluster within the
            // kinds ordo-core models: counted over every registered node, up or not, so that no
            // set of nodes coming up later can pass the limit either.
            let others = self.nodes.iter().filter(|(name, _)| **name != req.node).map(|(k, n)| (k.as_str(), n));
            if let Err(e) = kinds_of(others.chain([(req.node.as_str(), &node)])) {
                return Err(ApiError::Unprocessable(format!(
                    "node {} cannot register as GPU model {}, GPU memory {} and features [{}]: {e}. Give such nodes the \
                     same --gpu-model, --gpu-mem and --feature",
                    req.node,
                    node.gpu_model.as_deref().unwrap_or("unknown"),
                    node.gpu_mem_mib.map_or("unknown".to_string(), fmt_mib),
                    node.features.join(",")
                )));
            }
            // Its place must keep every unit of the topology under one parent, with every node
            // registered (up or not), so that any set of them coming up later can be placed by it.
            let others = self.nodes.iter().filter(|(name, _)| **name != req.node).map(|(k, n)| (k.as_str(), n));
            let mut all: Vec<(&str, &Node)> = others.chain([(req.node.as_str(), &node)]).collect();
            all.sort_by_key(|(_, n)| n.seq);
            if let Err(e) = crate::topo::build(&self.cfg.topology_levels, all.iter().map(|(k, n)| (*k, &n.topology))) {
                return Err(ApiError::Unprocessable(format!(
                    "node {} cannot register at topology place [{}]: {e}. Give each unit one parent (ordo agent                      --topology)",
                    req.node,
                    crate::topo::place_text(&node.topology).unwrap_or_default()
                )));
            }
            let policy = self.policy.to_string();
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            tx.execute(
                "INSERT OR REPLACE INTO nodes(name, seq, gpus, fake, gpu_model, state, last_seen, cpus, mem_mib, mem_limits, addr, gpu_mem_mib, features, topology)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'up', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    req.node,
                    seq,
                    req.gpus,
                    req.fake as i64,
                    node.gpu_model,
                    now,
                    req.cpus,
                    req.mem_mib.map(|m| m as i64),
                    req.mem_limits as i64,
                    req.addr,
                    node.gpu_mem_mib.map(|m| m as i64),
                    db::list_text(&node.features),
                    crate::topo::place_text(&node.topology)
                ],
            )
            .ctx("register node")?;
            let mut detail = json!({"event": "up", "gpus": req.gpus, "fake": req.fake, "gpu_model": node.gpu_model,
                        "gpu_mem_mib": node.gpu_mem_mib, "features": node.features,
                        "cpus": req.cpus, "mem_mib": req.mem_mib, "mem_limits": req.mem_limits, "addr": req.addr});
            // Its place, when it has one (records of other nodes unchanged).
            if !node.topology.is_empty() {
                detail["topology"] = json!(node.topology);
            }
            audit(&tx, now, &format!("node:{}", req.node), "node", None, &policy, &detail)?;
            tx.commit().ctx("commit registration")?;
        }
        self.nodes.insert(req.node.clone(), node);
        if changed {
            self.rebuild(now)?;
        }
        Ok(RegisterResponse {
            heartbeat_ms: self.cfg.heartbeat_ms,
            node_timeout_ms: self.cfg.node_timeout_ms,
            lease_ms: Some(self.cfg.node_timeout_ms),
            fence_grace_ms: Some(self.cfg.fence_grace_ms),
        })
    }

    /// A poll from an agent: heartbeat, then reconciliation of what it runs with what the
    /// database says, then its work (jobs to start, jobs to kill).
    pub fn poll(&mut self, who: &Principal, req: &PollRequest, now: i64) -> Result<PollResponse, ApiError> {
        speaks_for(who, &req.node, "poll")?;
        if req.running.len() > MAX_POLL_JOBS {
            return Err(ApiError::BadRequest(format!(
                "field `running`: {} jobs, more than {MAX_POLL_JOBS}",
                req.running.len()
            )));
        }
        if let Some(p) = &req.problem {
            bounded("problem", p, MAX_MESSAGE_BYTES)?;
        }
        let drain_changed = match self.nodes.get_mut(&req.node) {
            Some(n) if n.up => {
                n.last_seen = now;
                n.drain != req.problem
            }
            _ => {
                return Err(ApiError::Conflict(format!(
                    "node {} is not registered or was marked down; register again",
                    req.node
                )))
            }
        };
        if drain_changed {
            self.set_drain(&req.node, req.problem.clone(), now)?;
        }
        // Processes of an earlier run of a multi-node job, still being stopped: not this run's.
        let stale: BTreeSet<JobNo> = req
            .running
            .iter()
            .filter(|r| {
                r.attempt != 0
                    && self.active.get(&r.job).is_some_and(|j| !j.ranks.is_empty() && j.attempts != r.attempt)
            })
            .map(|r| r.job)
            .collect();
        self.check_ports(&req.node, &req.running, &stale)?;
        let has: HashMap<JobNo, i64> = req.running.iter().map(|r| (r.job, r.started_at)).collect();
        let mine: Vec<JobNo> = self
            .active
            .values()
            .filter(|j| j.ranks.is_empty() && j.node.as_deref() == Some(req.node.as_str()))
            .map(|j| j.id)
            .collect();
        let mut confirm = Vec::new();
        let mut lost = Vec::new();
        let mut never_started = Vec::new();
        let mut stopped = Vec::new();
        for &id in &mine {
            let j = &self.active[&id];
            match (has.get(&id), j.state) {
                (Some(&t), JobState::Starting) => {
                    self.plausible("started_at", t, j.start.unwrap_or(now), now)?;
                    confirm.push((id, t));
                }
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
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
        // Multi-node jobs' ranks on this node.
        let fresh: HashMap<JobNo, (i64, Option<u16>)> =
            req.running.iter().filter(|r| !stale.contains(&r.job)).map(|r| (r.job, (r.started_at, r.port))).collect();
        self.gang_poll(&req.node, &fresh, now)?;
        let mut resp = PollResponse::default();
        for r in &req.running {
            match self.active.get(&r.job) {
                Some(j) if j.ranks.is_empty() && j.node.as_deref() == Some(req.node.as_str()) => {
                    if j.cancel_requested || j.state == JobState::Preempting {
                        resp.kill.push(r.job);
                    }
                }
                Some(j) if !j.ranks.is_empty() && j.rank_on(&req.node).is_some() => {
                    if gang::stopping(j) || stale.contains(&r.job) {
                        resp.kill.push(r.job);
                    }
                }
                _ => resp.kill.push(r.job),
            }
        }
        let mut starts: Vec<(&JobInfo, usize)> = self
            .active
            .values()
            .filter_map(|j| {
                let r = j.rank_on(&req.node)?;
                let fresh = match j.ranks.get(r) {
                    // A gang's rank starts while its job starts or runs (others confirmed);
                    // ranks other than 0 once rank 0's agent has told its rendezvous port.
                    Some(x) => !x.started && !x.ended && !gang::stopping(j) && (r == 0 || j.ranks[0].port.is_some()),
                    None => j.state == JobState::Starting && !j.cancel_requested,
                };
                (fresh && !has.contains_key(&j.id)).then_some((j, r))
            })
            .collect();
        starts.sort_by_key(|(j, _)| j.id);
        resp.start = starts
            .into_iter()
            .map(|(j, r)| Assignment {
                job: j.id,
                user: j.user.clone(),
                name: j.name.clone(),
                command: j.command.clone(),
                cwd: j.cwd.clone(),
                gpu_ids: j.ranks.get(r).map_or_else(|| j.gpu_ids.clone(), |x| x.gpu_ids.clone()),
                time_limit_ms: j.time_limit_ms,
                attempt: j.attempts,
                restarts: j.restarts,
                cpus: j.cpus,
                mem_mib: j.mem_mib,
                umask: j.umask,
                array: j.array,
                array_count: j.array.and_then(|a| self.array_count(a.id)),
                gang: (!j.ranks.is_empty()).then(|| self.gang_assign(j, r)),
                output: j.output_path().map(|p| match (&j.cwd, p.starts_with('/')) {
                    (Some(cwd), false) => format!("{}/{p}", cwd.trim_end_matches('/')),
                    _ => p,
                }),
                stop_signal: j.preempt.as_ref().and_then(|p| p.signal.clone()),
                stop_grace_ms: j.preempt.as_ref().and_then(|p| p.grace_ms()),
            })
            .collect();
        resp.logs = self.take_log_asks(&req.node);
        Ok(resp)
    }

    /// A node's agent reports a problem that keeps it from taking new work, or that it cleared:
    /// recorded in the audit log, and the scheduler rebuilt without (or with) the node.
    fn set_drain(&mut self, node: &str, why: Option<String>, now: i64) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        let event = if why.is_some() { "drain" } else { "resume" };
        audit(
            &tx,
            now,
            &format!("node:{node}"),
            "node",
            None,
            &policy,
            &json!({"event": event, "node": node, "why": why}),
        )?;
        tx.commit().ctx("commit node drain")?;
        if let Some(n) = self.nodes.get_mut(node) {
            n.drain = why;
        }
        self.blocked.clear();
        self.rebuild(now)
    }

    pub(super) fn end_job(
        &mut self,
        id: JobNo,
        state: JobState,
        exit_code: Option<i32>,
        now: i64,
        reason: String,
        node: &str,
    ) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
            self.rebuild(now)?;
        } else {
            self.sched.finish(jid(id), now).map_err(|e| internal("finish job", e))?;
        }
        self.deps_ended(id, state == JobState::Completed, now)
    }

    /// An agent reports that a job's process ended.
    pub fn report(&mut self, who: &Principal, rep: &EndReport, now: i64) -> Result<(), ApiError> {
        speaks_for(who, &rep.node, "report")?;
        if let Some(m) = &rep.message {
            bounded("message", m, MAX_MESSAGE_BYTES)?;
        }
        if rep.ended_at < rep.started_at {
            return Err(ApiError::BadRequest(format!(
                "field `ended_at`: {} is before `started_at` ({})",
                rep.ended_at, rep.started_at
            )));
        }
        if let Some(j) = self.pending.get(&rep.job) {
            if j.nodes != 1 {
                // A multi-node job's run ends only once all its ranks have: a late report of a
                // requeued run changes nothing (the job runs again).
                return Ok(());
            }
            // Requeued because its node fell silent, but this very run ended after all (the
            // report was held up): take its result rather than running the job again. Only
            // the node that ran it may say so.
            if rep.attempt != 0 && rep.attempt == j.attempts {
                self.ran_on(j, &rep.node)?;
                self.plausible("started_at", rep.started_at, j.submit, now)?;
                self.plausible("ended_at", rep.ended_at, rep.started_at, now)?;
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
        if !j.ranks.is_empty() {
            return self.gang_report(rep, now);
        }
        self.ran_on(j, &rep.node)?;
        self.plausible("started_at", rep.started_at, j.start.unwrap_or(now), now)?;
        self.plausible("ended_at", rep.ended_at, j.start.unwrap_or(now), now)?;
        let (state, reason) = match rep.outcome {
            Outcome::Killed if j.cancel_requested => (JobState::Cancelled, "cancelled while running".to_string()),
            Outcome::Killed if j.state == JobState::Preempting => {
                let id = rep.job;
                return self.requeue(&[id], now, &format!("node:{}", rep.node), "preempted; it stopped", true);
            }
            Outcome::OutOfMemory => (
                JobState::Failed,
                format!("out of memory (limit {})", j.mem_mib.map(fmt_mib).unwrap_or_else(|| "?".into())),
            ),
            _ => match reported_end(rep, j.time_limit_ms) {
                (JobState::Pending, why) => {
                    let id = rep.job;
                    self.requeue_jobs(&[id], now, &format!("node:{}", rep.node), &why)?;
                    return self.rebuild(now);
                }
                end => end,
            },
        };
        self.end_job(rep.job, state, rep.exit_code, rep.ended_at.min(now).max(j.start.unwrap_or(0)), reason, &rep.node)
    }

    /// Records the end of a job that was requeued while its report was held up.
    pub(super) fn end_late(&mut self, rep: &EndReport, now: i64) -> Result<(), ApiError> {
        let (state, reason) = match (rep.outcome, rep.exit_code) {
            (Outcome::Exited, Some(0)) => (JobState::Completed, "exited with code 0 (reported late)".to_string()),
            (Outcome::Exited, c) => (JobState::Failed, format!("exited with {c:?} (reported late)")),
            (Outcome::Timeout, _) => (JobState::Timeout, "killed at its time limit (reported late)".to_string()),
            // A kill or failed start of a requeued run: the job simply runs again.
            _ => return Ok(()),
        };
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
        self.deps_ended(rep.job, state == JobState::Completed, now)
    }

    /// Marks nodes silent for longer than the lease and its grace as down and requeues (or
    /// fails) their jobs: by then each of those jobs' supervisors has killed it, since its agent
    /// had no answer to a poll for longer than the lease (fencing, docs/SERVER.md).
    pub fn check_nodes(&mut self, now: i64) -> Result<(), ApiError> {
        self.check_nodes_seen(now, &HashMap::new())
    }

    /// [`Core::check_nodes`], where `seen` holds, by node, when the server last heard from its
    /// agent off the state lock (a request that waited for the lock still proves the node was
    /// alive when it arrived: the liveness path never waits behind the scheduling path).
    pub fn check_nodes_seen(&mut self, now: i64, seen: &HashMap<String, i64>) -> Result<(), ApiError> {
        self.drain_deadlines(now)?;
        let limit = (self.cfg.node_timeout_ms + self.cfg.fence_grace_ms) as i64;
        for (name, n) in self.nodes.iter_mut() {
            if let Some(&t) = seen.get(name) {
                n.last_seen = n.last_seen.max(t);
            }
        }
        let late: Vec<String> =
            self.nodes.iter().filter(|(_, n)| n.up && now - n.last_seen > limit).map(|(k, _)| k.clone()).collect();
        if late.is_empty() {
            return Ok(());
        }
        for name in &late {
            let policy = self.policy.to_string();
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
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
            let jobs: Vec<JobNo> = self
                .active
                .values()
                .filter(|j| j.ranks.is_empty() && j.node.as_deref() == Some(name.as_str()))
                .map(|j| j.id)
                .collect();
            self.requeue_jobs(&jobs, now, "scheduler", &format!("node {name} stopped sending heartbeats"))?;
            // A multi-node job with a rank there: that rank is gone; the others are killed and
            // the job requeued (or failed, per `on_node_failure`) once they have stopped.
            let gangs: Vec<(JobNo, usize)> = self
                .active
                .values()
                .filter(|j| !j.ranks.is_empty())
                .filter_map(|j| j.rank_on(name).filter(|&r| !j.ranks[r].ended).map(|r| (j.id, r)))
                .collect();
            for (id, r) in gangs {
                let stop = GangStop {
                    state: JobState::Pending,
                    reason: format!("node {name} (rank {r}) stopped sending heartbeats"),
                    exit_code: None,
                };
                self.gang_rank_ended(id, r, "its node stopped sending heartbeats", Some(stop), "scheduler", now)?;
            }
        }
        self.rebuild(now)
    }
}
