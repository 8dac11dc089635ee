//! Multi-node (gang) jobs: one job, one rank per node, all started in the same pass. A rank's
//! agent confirms and reports its own rank; the job ends once every rank has stopped: completed
//! when all exited 0, else as its first failing rank says (the other ranks are killed first),
//! requeued (or failed, per `on_node_failure`) when a rank's node died.

use super::agents::reported_end;
use super::*;

/// Whether a gang is being stopped: cancelled, preempted, or a rank failed or lost its node.
pub(super) fn stopping(j: &JobInfo) -> bool {
    j.cancel_requested || j.state == JobState::Preempting || j.gang_stop.is_some()
}

fn ranks_json(j: &JobInfo) -> Result<(String, Option<String>), ApiError> {
    let ranks = serde_json::to_string(&j.ranks).map_err(|e| internal("encode ranks", e))?;
    let stop = match &j.gang_stop {
        Some(s) => Some(serde_json::to_string(s).map_err(|e| internal("encode gang stop", e))?),
        None => None,
    };
    Ok((ranks, stop))
}

impl Core {
    /// A gang's rank to start on `node` (the agent's assignment), with its peers. Rank 0 gets
    /// no port (its agent chooses one); the others are only sent once rank 0's is known.
    pub(super) fn gang_assign(&self, j: &JobInfo, rank: usize) -> GangAssign {
        let nodes: Vec<String> = j.ranks.iter().map(|r| r.node.clone()).collect();
        GangAssign {
            rank: rank as u32,
            master_addr: self.node_addr(&nodes[0]),
            master_port: if rank == 0 { None } else { j.ranks.first().and_then(|r| r.port) },
            world_size: j.gpus,
            nodes,
        }
    }

    /// The address other nodes reach `node` at (`ordo agent --addr`), else its name: a gang's
    /// `MASTER_ADDR` when its rank 0 runs there.
    pub(super) fn node_addr(&self, node: &str) -> String {
        self.nodes.get(node).and_then(|n| n.addr.clone()).unwrap_or_else(|| node.to_string())
    }

    /// Checks the rendezvous ports a poll of `node` reports (`running[].port`) before anything
    /// of the poll is applied: only for rank 0 of a multi-node job that this node runs, not a
    /// privileged port, never changed once reported, and never a port another gang's rank 0 on
    /// this node already has. Reports for jobs the node no longer runs (or an earlier run's,
    /// `stale`) are left alone: those processes are killed.
    pub(super) fn check_ports(
        &self,
        node: &str,
        running: &[RunningJob],
        stale: &BTreeSet<JobNo>,
    ) -> Result<(), ApiError> {
        if running.iter().all(|r| r.port.is_none()) {
            return Ok(());
        }
        // The ports the rank 0s on this node hold (one look at the active jobs per poll).
        let mut seen: HashMap<u16, JobNo> = self
            .active
            .values()
            .filter_map(|k| {
                k.ranks.first().filter(|x| x.node == node && !x.ended).and_then(|x| x.port).map(|p| (p, k.id))
            })
            .collect();
        for r in running {
            let Some(p) = r.port else { continue };
            if p < MIN_MASTER_PORT {
                return Err(ApiError::BadRequest(format!(
                    "field `running[].port`: {p} for job {} is below {MIN_MASTER_PORT} (a privileged port)",
                    r.job
                )));
            }
            let Some(j) = self.active.get(&r.job).filter(|_| !stale.contains(&r.job)) else { continue };
            if j.ranks.is_empty() {
                return Err(ApiError::BadRequest(format!(
                    "field `running[].port`: job {} runs on one node; only rank 0 of a multi-node job has a rendezvous port",
                    r.job
                )));
            }
            if j.rank_on(node) != Some(0) {
                return Err(ApiError::Forbidden(format!(
                    "job {}'s rank 0 runs on node {}, not on {node}; a node may only report the rendezvous port of a rank 0 it runs",
                    r.job, j.ranks[0].node
                )));
            }
            if let Some(q) = j.ranks[0].port.filter(|&q| q != p) {
                return Err(ApiError::BadRequest(format!(
                    "field `running[].port`: job {}'s MASTER_PORT is {q}, reported before; it cannot change to {p}",
                    r.job
                )));
            }
            if let Some(&k) = seen.get(&p).filter(|&&k| k != r.job) {
                return Err(ApiError::BadRequest(format!(
                    "field `running[].port`: port {p} on node {node} is already job {k}'s MASTER_PORT; it cannot be job {}'s too",
                    r.job
                )));
            }
            seen.insert(p, r.job);
        }
        Ok(())
    }

    /// A poll's reconciliation of the gang ranks placed on `node` with what its agent runs
    /// (`has`: job -> start time and, for rank 0, its rendezvous port, checked by
    /// [`Core::check_ports`]): ranks that started are confirmed (the job runs from its first;
    /// rank 0's port is recorded and the other ranks' nodes woken to start theirs), ranks that
    /// vanished end their gang (requeued or failed, per its policy), and ranks of a gang being
    /// stopped that never started count as stopped.
    pub(super) fn gang_poll(
        &mut self,
        node: &str,
        has: &HashMap<JobNo, (i64, Option<u16>)>,
        now: i64,
    ) -> Result<(), ApiError> {
        let mut confirm = Vec::new();
        let mut gone = Vec::new();
        for j in self.active.values().filter(|j| !j.ranks.is_empty()) {
            let Some(r) = j.rank_on(node) else { continue };
            let rank = &j.ranks[r];
            if rank.ended {
                continue;
            }
            match (has.get(&j.id), rank.started) {
                (Some(&(t, port)), false) => {
                    self.plausible("started_at", t, j.start.unwrap_or(now), now)?;
                    confirm.push((j.id, r, t, port.filter(|_| r == 0)));
                }
                (None, true) => gone.push((
                    j.id,
                    r,
                    "the agent no longer runs it (it restarted?)".to_string(),
                    Some(GangStop {
                        state: JobState::Pending,
                        reason: format!("rank {r} on {node}: the agent no longer runs it (it restarted?)"),
                        exit_code: None,
                    }),
                )),
                (None, false) if stopping(j) => gone.push((j.id, r, "stopped before it started".to_string(), None)),
                _ => {}
            }
        }
        if !confirm.is_empty() {
            let policy = self.policy.to_string();
            let mut rows = Vec::new();
            for &(id, r, t, port) in &confirm {
                let Some(j) = self.active.get_mut(&id) else { continue };
                j.ranks[r].started = true;
                let first = j.state == JobState::Starting;
                if first {
                    j.state = JobState::Running;
                    j.start = Some(t);
                }
                let mut d = json!({"started_at": t, "rank": r, "node": node});
                match port {
                    Some(p) => {
                        // The rendezvous is known: the other ranks may start now.
                        j.ranks[r].port = Some(p);
                        d["master_port"] = json!(p);
                    }
                    // Rank 0 started without telling its port: the other ranks could never
                    // meet it. It is killed (the job is stopped) and the job fails.
                    None if r == 0 && !stopping(j) => {
                        let reason = format!(
                            "rank 0 on {node}: its agent reported no MASTER_PORT (an agent older than the server?)"
                        );
                        d["stops_job"] = json!(reason);
                        j.gang_stop = Some(GangStop { state: JobState::Failed, reason, exit_code: None });
                    }
                    None => {}
                }
                if r == 0 {
                    self.to_wake.extend(j.ranks.iter().filter(|x| !x.started && !x.ended).map(|x| x.node.clone()));
                }
                let (ranks, stop) = ranks_json(j)?;
                rows.push((id, t, first, ranks, stop, d));
            }
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            for (id, t, first, ranks, stop, d) in rows {
                if first {
                    tx.execute(
                        "UPDATE jobs SET state='running', start=?2, ranks=?3, gang_stop=?4 WHERE id=?1",
                        params![id as i64, t, ranks, stop],
                    )
                    .ctx("confirm start")?;
                } else {
                    tx.execute("UPDATE jobs SET ranks=?2, gang_stop=?3 WHERE id=?1", params![id as i64, ranks, stop])
                        .ctx("confirm rank")?;
                }
                audit(&tx, now, &format!("node:{node}"), "running", Some(id), &policy, &d)?;
            }
            tx.commit().ctx("commit rank confirmations")?;
        }
        for (id, r, what, stop) in gone {
            self.gang_rank_ended(id, r, &what, stop, &format!("node:{node}"), now)?;
        }
        Ok(())
    }

    /// An agent's end report for its rank of a gang.
    pub(super) fn gang_report(&mut self, rep: &EndReport, now: i64) -> Result<(), ApiError> {
        let j = &self.active[&rep.job];
        let Some(r) = j.rank_on(&rep.node) else {
            return Err(ApiError::Forbidden(format!(
                "job {} has no rank on node {}; a node may only report its own jobs",
                rep.job, rep.node
            )));
        };
        self.plausible("started_at", rep.started_at, j.start.unwrap_or(now), now)?;
        self.plausible("ended_at", rep.ended_at, j.start.unwrap_or(now), now)?;
        let (what, stop) = match reported_end(rep, j.time_limit_ms) {
            _ if rep.outcome == Outcome::Killed && stopping(j) => {
                ("killed (the job is being stopped)".to_string(), None)
            }
            (JobState::Completed, what) => (what, None),
            (state, what) => {
                let reason = format!("rank {r} on {}: {what}", rep.node);
                let exit_code = if rep.outcome == Outcome::Exited { rep.exit_code } else { None };
                (what, Some(GangStop { state, reason, exit_code }))
            }
        };
        self.gang_rank_ended(rep.job, r, &what, stop, &format!("node:{}", rep.node), now)
    }

    /// Rank `r` of gang `id` stopped (`what`: how). `stop`, when it is the first, decides how
    /// the job ends and has every other rank killed. Once every rank has stopped, the job ends.
    pub(super) fn gang_rank_ended(
        &mut self,
        id: JobNo,
        r: usize,
        what: &str,
        stop: Option<GangStop>,
        actor: &str,
        now: i64,
    ) -> Result<(), ApiError> {
        let policy = self.policy.to_string();
        let Some(j) = self.active.get_mut(&id) else { return Ok(()) };
        if j.ranks.get(r).is_none_or(|x| x.ended) {
            return Ok(());
        }
        j.ranks[r].ended = true;
        let first = stop.is_some() && !stopping(j);
        if first {
            j.gang_stop = stop;
        }
        let node = j.ranks[r].node.clone();
        let others: Vec<String> = j.ranks.iter().filter(|x| !x.ended).map(|x| x.node.clone()).collect();
        let (ranks, gs) = ranks_json(j)?;
        let mut d = json!({"rank": r, "node": node, "what": what});
        if first {
            d["stops_job"] = json!(j.gang_stop.as_ref().map(|s| s.reason.clone()));
            d["kills_ranks_on"] = json!(others);
        }
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        tx.execute("UPDATE jobs SET ranks=?2, gang_stop=?3 WHERE id=?1", params![id as i64, ranks, gs])
            .ctx("record rank end")?;
        audit(&tx, now, actor, "rank_end", Some(id), &policy, &d)?;
        tx.commit().ctx("commit rank end")?;
        if first {
            self.to_wake.extend(others.iter().cloned());
        }
        if others.is_empty() {
            self.gang_finish(id, now)?;
        }
        Ok(())
    }

    /// Every rank of gang `id` has stopped: the job ends, or goes back to the queue.
    fn gang_finish(&mut self, id: JobNo, now: i64) -> Result<(), ApiError> {
        let Some(j) = self.active.get(&id) else { return Ok(()) };
        let node = j.ranks.first().map(|r| r.node.clone()).unwrap_or_default();
        let started = j.ranks.iter().any(|r| r.started);
        if j.cancel_requested {
            let why = if started { "cancelled while running" } else { "cancelled before its process started" };
            return self.end_job(id, JobState::Cancelled, None, now, why.into(), &node);
        }
        if j.state == JobState::Preempting {
            self.requeue(&[id], now, "scheduler", "preempted; every rank stopped", true)?;
            return self.rebuild(now);
        }
        match j.gang_stop.clone() {
            None => self.end_job(id, JobState::Completed, Some(0), now, "every rank exited with code 0".into(), &node),
            Some(s) if s.state == JobState::Pending => {
                self.requeue_jobs(&[id], now, "scheduler", &s.reason)?;
                self.rebuild(now)
            }
            Some(s) => self.end_job(id, s.state, s.exit_code, now, s.reason, &node),
        }
    }

    /// Gangs with a rank on a node that is not up (found when the server starts): those ranks
    /// are stopped, which ends (or requeues) their job once the others are killed.
    pub(super) fn gang_strays(&mut self, now: i64) -> Result<(), ApiError> {
        let mut gone = Vec::new();
        for j in self.active.values().filter(|j| !j.ranks.is_empty()) {
            for (r, x) in j.ranks.iter().enumerate() {
                if !x.ended && !self.nodes.get(&x.node).is_some_and(|n| n.up) {
                    gone.push((j.id, r, x.node.clone()));
                }
            }
        }
        for (id, r, node) in gone {
            let stop = GangStop {
                state: JobState::Pending,
                reason: format!("rank {r}'s node {node} is not up"),
                exit_code: None,
            };
            self.gang_rank_ended(id, r, "its node is not up", Some(stop), "scheduler", now)?;
        }
        Ok(())
    }
}
