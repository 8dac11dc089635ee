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
    /// A gang's rank to start on `node` (the agent's assignment), with its peers.
    pub(super) fn gang_assign(&self, j: &JobInfo, rank: usize) -> GangAssign {
        let nodes: Vec<String> = j.ranks.iter().map(|r| r.node.clone()).collect();
        let head = &nodes[0];
        GangAssign {
            rank: rank as u32,
            master_addr: self.nodes.get(head).and_then(|n| n.addr.clone()).unwrap_or_else(|| head.clone()),
            master_port: master_port(j.id),
            world_size: j.gpus,
            nodes,
        }
    }

    /// A poll's reconciliation of the gang ranks placed on `node` with what its agent runs
    /// (`has`: job -> start time): ranks that started are confirmed (the job runs from its
    /// first), ranks that vanished end their gang (requeued or failed, per its policy), and
    /// ranks of a gang being stopped that never started count as stopped.
    pub(super) fn gang_poll(&mut self, node: &str, has: &HashMap<JobNo, i64>, now: i64) -> Result<(), ApiError> {
        let mut confirm = Vec::new();
        let mut gone = Vec::new();
        for j in self.active.values().filter(|j| !j.ranks.is_empty()) {
            let Some(r) = j.rank_on(node) else { continue };
            let rank = &j.ranks[r];
            if rank.ended {
                continue;
            }
            match (has.get(&j.id), rank.started) {
                (Some(&t), false) => {
                    self.plausible("started_at", t, j.start.unwrap_or(now), now)?;
                    confirm.push((j.id, r, t));
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
            for &(id, r, t) in &confirm {
                let Some(j) = self.active.get_mut(&id) else { continue };
                j.ranks[r].started = true;
                let first = j.state == JobState::Starting;
                if first {
                    j.state = JobState::Running;
                    j.start = Some(t);
                }
                rows.push((id, r, t, first, ranks_json(j)?.0));
            }
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            for (id, r, t, first, ranks) in rows {
                if first {
                    tx.execute(
                        "UPDATE jobs SET state='running', start=?2, ranks=?3 WHERE id=?1",
                        params![id as i64, t, ranks],
                    )
                    .ctx("confirm start")?;
                } else {
                    tx.execute("UPDATE jobs SET ranks=?2 WHERE id=?1", params![id as i64, ranks])
                        .ctx("confirm rank")?;
                }
                audit(
                    &tx,
                    now,
                    &format!("node:{node}"),
                    "running",
                    Some(id),
                    &policy,
                    &json!({"started_at": t, "rank": r, "node": node}),
                )?;
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
