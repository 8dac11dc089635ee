//! Node maintenance by an admin: cordon (no new work), drain (no new work, and the jobs still on
//! the node stopped and requeued at a deadline, if one is given) and resume. Kept in the
//! `node_maint` table (schema version 2) and the audit log; a node under maintenance is out of
//! the scheduler's view as one its agent drained is (`Node::takes_work`).

use super::*;

/// The longest drain deadline an admin may give: 366 days.
const MAX_DEADLINE_MS: i64 = 366 * 86_400_000;

impl Node {
    /// Whether an admin's or its agent's drain keeps new work off it while it is up.
    pub(super) fn paused(&self) -> bool {
        self.drain.is_some() || self.maint.is_some()
    }

    /// Why it takes no new work while up, in words (`None`: it takes work).
    pub(super) fn paused_why(&self) -> Option<String> {
        let admin = self.maint.as_ref().map(|m| {
            let what = match m.kind {
                MaintKind::Cordon => "cordoned",
                MaintKind::Drain => "drained",
            };
            format!("{what} by {}: {}", m.by, m.reason)
        });
        match (admin, &self.drain) {
            (Some(a), Some(d)) => Some(format!("{a}; its agent: {d}")),
            (Some(a), None) => Some(a),
            (None, Some(d)) => Some(d.clone()),
            (None, None) => None,
        }
    }

    /// One word for what it does now (`NodeInfo::status`), `busy` saying whether jobs are on it.
    pub(super) fn status(&self, busy: bool) -> &'static str {
        match (&self.maint, self.up) {
            (_, false) => "down",
            (Some(m), _) if m.kind == MaintKind::Cordon => "cordoned",
            (Some(_), _) if busy => "draining",
            (Some(_), _) => "drained",
            (None, _) if self.drain.is_some() => "problem",
            (None, _) => "up",
        }
    }
}

impl Core {
    /// Reads the admins' cordons and drains into the nodes (at load).
    pub(super) fn load_maint(&mut self) -> Result<(), ApiError> {
        let mut st = self
            .conn
            .prepare("SELECT node, kind, reason, actor, since, deadline FROM node_maint")
            .ctx("load node maintenance")?;
        let rows = st
            .query_map([], |r| {
                let kind = match r.get::<_, String>(1)?.as_str() {
                    "drain" => MaintKind::Drain,
                    _ => MaintKind::Cordon,
                };
                Ok((
                    r.get::<_, String>(0)?,
                    NodeMaint { kind, reason: r.get(2)?, by: r.get(3)?, since: r.get(4)?, deadline: r.get(5)? },
                ))
            })
            .ctx("load node maintenance")?
            .collect::<Result<Vec<_>, _>>()
            .ctx("load node maintenance")?;
        drop(st);
        for (node, m) in rows {
            if let Some(n) = self.nodes.get_mut(&node) {
                n.maint = Some(m);
            }
        }
        Ok(())
    }

    /// `POST /v1/nodes/{name}/maintenance`: an admin cordons, drains or resumes a node.
    /// Recorded in the audit log; the scheduler is rebuilt without (or with) the node. Returns
    /// the node as `GET /v1/nodes` shows it.
    pub fn node_maintenance(
        &mut self,
        who: &Principal,
        node: &str,
        req: &NodeMaintRequest,
        now: i64,
    ) -> Result<NodeInfo, ApiError> {
        if who.role != Role::Admin {
            return Err(ApiError::Forbidden("only admins may cordon, drain or resume a node".into()));
        }
        bounded("node", node, 200)?;
        if !self.nodes.contains_key(node) {
            return Err(ApiError::NotFound(format!("no node named {node:?} has registered")));
        }
        let kind = match req.action.as_str() {
            "cordon" => Some(MaintKind::Cordon),
            "drain" => Some(MaintKind::Drain),
            "resume" => None,
            other => {
                bounded("action", other, 64)?;
                return Err(ApiError::BadRequest(format!(
                    "field `action`: {other:?}; expected cordon, drain or resume"
                )));
            }
        };
        let reason = req.reason.as_deref().map(str::trim).unwrap_or("");
        bounded("reason", reason, MAX_MESSAGE_BYTES)?;
        let deadline = match (kind, req.deadline_ms) {
            (_, None) => None,
            (Some(MaintKind::Drain), Some(ms)) if (0..=MAX_DEADLINE_MS).contains(&ms) => Some(now + ms),
            (Some(MaintKind::Drain), Some(ms)) => {
                return Err(ApiError::BadRequest(format!(
                    "field `deadline_ms`: {ms}; expected 0 to {MAX_DEADLINE_MS} (366 days)"
                )))
            }
            (_, Some(_)) => {
                return Err(ApiError::BadRequest("field `deadline_ms`: only a drain has a deadline".into()))
            }
        };
        if kind.is_some() && reason.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "field `reason`: required to {} a node (say why, for whoever looks at it next)",
                req.action
            )));
        }
        let maint =
            kind.map(|kind| NodeMaint { kind, reason: reason.to_string(), by: who.user.clone(), since: now, deadline });
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        match &maint {
            Some(m) => tx.execute(
                "INSERT OR REPLACE INTO node_maint(node, kind, reason, actor, since, deadline) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![node, m.kind.as_str(), m.reason, m.by, m.since, m.deadline],
            ),
            None => tx.execute("DELETE FROM node_maint WHERE node=?1", params![node]),
        }
        .ctx("record node maintenance")?;
        audit(
            &tx,
            now,
            &who.user,
            "node",
            None,
            &policy,
            &json!({"event": req.action, "node": node, "why": reason, "deadline": deadline}),
        )?;
        tx.commit().ctx("commit node maintenance")?;
        if let Some(n) = self.nodes.get_mut(node) {
            n.maint = maint;
        }
        self.blocked.clear();
        self.rebuild(now)?;
        self.drain_deadlines(now)?;
        self.nodes().into_iter().find(|n| n.name == node).ok_or_else(|| internal("node maintenance", "node vanished"))
    }

    /// Stops the jobs still on nodes whose drain deadline has passed: each is preempted (its
    /// agent kills it; once it reports it stopped, it is requeued with its run time kept), so
    /// it never runs on its next node while still running here. Called with every liveness
    /// check and after each maintenance change.
    pub(super) fn drain_deadlines(&mut self, now: i64) -> Result<(), ApiError> {
        let due: Vec<(&String, &NodeMaint)> = self
            .nodes
            .iter()
            .filter_map(|(name, n)| n.maint.as_ref().map(|m| (name, m)))
            .filter(|(_, m)| m.kind == MaintKind::Drain && m.deadline.is_some_and(|d| d <= now))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let mut stop: Vec<(JobNo, String)> = Vec::new();
        for (name, m) in due {
            for j in self.active.values() {
                let running = matches!(j.state, JobState::Running | JobState::Starting);
                if running && !j.cancel_requested && j.rank_on(name).is_some() {
                    stop.push((j.id, format!("node {name} drained by {}: {} (its deadline passed)", m.by, m.reason)));
                }
            }
        }
        if stop.is_empty() {
            return Ok(());
        }
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (id, why) in &stop {
            tx.prepare_cached("UPDATE jobs SET state='preempting' WHERE id=?1")
                .and_then(|mut s| s.execute(params![*id as i64]))
                .ctx("record a drain's stop")?;
            audit(&tx, now, "scheduler", "preempt", Some(*id), &policy, &json!({"for": null, "why": why}))?;
        }
        tx.commit().ctx("commit a drain's stops")?;
        for (id, _) in stop {
            if let Some(j) = self.active.get_mut(&id) {
                j.state = JobState::Preempting;
                self.to_wake.extend(j.run_nodes());
            }
        }
        Ok(())
    }
}
