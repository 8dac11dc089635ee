//! The scheduling pass: the policy's plan committed (starts, preemptions, changed reasons), with
//! the safety net that checks CPUs and memory on each node.

use super::*;

/// Most `skip` records (a waiting job's changed reason) one pass writes.
const SKIP_RECORDS_PER_PASS: usize = 500;

impl Core {
    /// One scheduling pass: asks the policy what to start and, under preemptive policies, what
    /// to stop; commits both (one transaction, with audit records of every start, preemption
    /// and changed skip reason). A preempted job is marked `preempting` and its agent told to
    /// stop it; its GPUs go to others only once it has stopped (see [`Core::report`]).
    /// Returns when the policy wants to be asked again even if nothing happens.
    pub fn pass(&mut self, now: i64) -> Result<Option<i64>, ApiError> {
        if self.sched.waiting_len() == 0 {
            return Ok(None);
        }
        self.sched.advance(now);
        // The fast plan decides. The explained one (the same starts, plus every waiting job's
        // reason, for the audit log's `skip` records) costs about the whole queue, so it runs
        // only when due: at most every 200 ms, and no more often than keeps it to a twentieth
        // of the time (at 100,000 pending jobs it takes milliseconds). Starts do not wait for it.
        let explain_at = self.last_explain + (20 * self.explain_cost_ms).max(200);
        let explain = now >= explain_at;
        // When the explained plan is due it decides alone (its starts are the fast plan's): one
        // walk of the queue per pass, not two.
        let plan = if explain {
            let t0 = std::time::Instant::now();
            let plan = self.sched.schedule(now, true);
            self.last_explain = now;
            self.remember_explained(&plan, now);
            self.explain_cost_ms = t0.elapsed().as_millis() as i64;
            plan
        } else {
            let fast = self.sched.schedule(now, false);
            let new_preempt = fast.preempt.iter().any(|j| self.preemptable(j.0 as JobNo));
            // Jobs already known to be blocked (CPUs, memory, GPUs being freed) are re-examined
            // at the throttled rate, not on every change.
            let fresh_starts = fast.starts.iter().any(|s| !self.blocked.contains_key(&(s.job.0 as JobNo)));
            if !fresh_starts && !new_preempt {
                return Ok(fast.wake_at.map(|w| w.min(explain_at)).or(Some(explain_at)));
            }
            fast
        };
        let preempts: Vec<JobNo> = plan.preempt.iter().map(|j| j.0 as JobNo).filter(|&j| self.preemptable(j)).collect();
        // At most SKIP_RECORDS_PER_PASS `skip` records per pass: a queue that changes all at
        // once (10,000 jobs released together) is recorded over the next passes, so that no pass
        // holds the state lock for a write of every waiting job.
        let changed: Vec<&(JobId, Reason)> = plan
            .waiting
            .iter()
            .filter(|(j, r)| self.last_reason.get(&(j.0 as JobNo)) != Some(&reason_key(r)))
            .take(SKIP_RECORDS_PER_PASS)
            .collect();
        if plan.starts.is_empty() && changed.is_empty() && preempts.is_empty() {
            return Ok(plan.wake_at);
        }
        let policy = self.policy.to_string();
        // The head: the first waiting job in queue order that does not start now; a start
        // behind it is a backfill. Only the jobs before the head are looked at.
        let starting: std::collections::HashSet<JobId> = plan.starts.iter().map(|s| s.job).collect();
        let mut in_order = std::collections::HashSet::new();
        let mut head = None;
        if !starting.is_empty() {
            for id in self.sched.waiting_ids_in_order() {
                if !starting.contains(&id) {
                    head = Some(id);
                    break;
                }
                in_order.insert(id);
            }
        }
        // Who each preemption is for: the first planned start on the preempted job's node.
        let mut preempt_rec = Vec::new();
        for &p in &preempts {
            let node = self.active[&p].node.clone();
            let for_job = plan
                .starts
                .iter()
                .find(|s| s.alloc.parts.iter().any(|(n, _)| self.sched_nodes.get(*n as usize) == node.as_ref()))
                .or(plan.starts.first())
                .map(|s| s.job.0 as JobNo);
            let why = self.preempt_reason(p, for_job, now);
            preempt_rec.push((p, for_job, why));
        }
        let mut started = Vec::new();
        let mut blocked = HashMap::new();
        let mut used = self.node_use();
        for s in &plan.starts {
            let id = s.job.0 as JobNo;
            let Some(j) = self.pending.get(&id) else { continue };
            let (n, _) = s.alloc.parts[0];
            let name = self.sched_nodes[n as usize].clone();
            if s.alloc.parts.len() > MAX_GANG_NODES as usize {
                // Split by the placement over more nodes than a job may have ranks: it waits
                // for larger nodes to be free.
                blocked.insert(
                    id,
                    format!(
                        "the placement would split it over {} nodes, more than {MAX_GANG_NODES}; it waits for larger nodes to be free",
                        s.alloc.parts.len()
                    ),
                );
                continue;
            }
            // A safety net: the core placed the job by its CPUs and memory too, so this should
            // never find the node short; if it does, the start waits rather than overcommits.
            if let Some(why) = self.lacks(&name, j, &used) {
                eprintln!(
                    "ordo server: debug: job {id} placed by the core on {name}, which the server finds short: {why}"
                );
                blocked.insert(id, why);
                continue;
            }
            let ids = match self.sched.start(s.job, &s.alloc, now) {
                Ok(ids) => ids,
                Err(CommitError::BadAllocation(_)) => {
                    // Planned on GPUs (or CPUs, memory) a preempted job still holds: it starts once
                    // those are free.
                    let on: Vec<String> = self
                        .active
                        .values()
                        .filter(|a| a.state == JobState::Preempting && a.node.as_deref() == Some(name.as_str()))
                        .map(|a| a.id.to_string())
                        .collect();
                    blocked.insert(
                        id,
                        format!(
                            "its GPUs, CPUs or memory on {name} are being freed: job {} is being preempted",
                            on.join(", ")
                        ),
                    );
                    continue;
                }
                Err(e) => return Err(internal("commit a planned start", e)),
            };
            let e = used.entry(name.clone()).or_default();
            e.0 += j.cpus.unwrap_or(0);
            e.1 += j.mem_mib.unwrap_or(0);
            // Each node's physical GPUs; a multi-node job gets one rank per node, rank 0 first.
            let mut ranks: Vec<Rank> = ids
                .iter()
                .map(|(n, sids)| {
                    let mut phys: Vec<u32> = sids.iter().map(|&i| self.phys[*n as usize][i as usize]).collect();
                    phys.sort_unstable();
                    Rank {
                        node: self.sched_nodes[*n as usize].clone(),
                        gpu_ids: phys,
                        started: false,
                        ended: false,
                        port: None,
                    }
                })
                .collect();
            let first = ranks.first().map(|r| (r.node.clone(), r.gpu_ids.clone()));
            let Some((name, phys)) = first else { return Err(internal("commit a planned start", "no GPUs")) };
            // One node: a plain job (a job the placement may split can still fit one node).
            if ranks.len() <= 1 {
                ranks.clear();
            }
            let backfill = head.is_some() && !in_order.contains(&s.job);
            started.push((id, name, phys, backfill, ranks));
        }
        // Jobs chosen but not started get a `skip` record when their reason is new.
        let newly_blocked: Vec<(JobNo, String)> = blocked
            .iter()
            .filter(|(id, _)| self.last_reason.get(id) != Some(&(5, 0)))
            .map(|(id, why)| (*id, why.clone()))
            .collect();
        if started.is_empty() && changed.is_empty() && preempt_rec.is_empty() && newly_blocked.is_empty() {
            self.blocked = blocked;
            return Ok(plan.wake_at.map_or(Some(now + 200), |w| Some(w.min(now + 200))));
        }
        let changed_shown: Vec<(JobNo, serde_json::Value)> = changed
            .iter()
            .map(|(j, r)| (j.0 as JobNo, serde_json::to_value(self.shown(r)).unwrap_or_default()))
            .collect();
        // A multi-node job's rendezvous address (`MASTER_ADDR`), for its start record; the
        // port is rank 0's agent's to choose (in rank 0's `running` record).
        let masters: HashMap<JobNo, String> =
            started.iter().filter(|s| !s.4.is_empty()).map(|(id, node, ..)| (*id, self.node_addr(node))).collect();
        let res = (|| -> Result<(), DbError> {
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            for (id, why) in &newly_blocked {
                audit(
                    &tx,
                    now,
                    "scheduler",
                    "skip",
                    Some(*id),
                    &policy,
                    &json!({"reason": "node_resources", "why": why}),
                )?;
            }
            for (id, for_job, why) in &preempt_rec {
                tx.prepare_cached("UPDATE jobs SET state='preempting' WHERE id=?1")
                    .and_then(|mut s| s.execute(params![*id as i64]))
                    .ctx("record preemption")?;
                let text = match for_job {
                    Some(k) => format!("preempted {id} for {k}: policy {policy}, {why}"),
                    None => format!("preempted {id}: policy {policy}, {why}"),
                };
                audit(&tx, now, "scheduler", "preempt", Some(*id), &policy, &json!({"for": for_job, "why": text}))?;
            }
            for (id, node, phys, backfill, ranks) in &started {
                let ranks_text = match ranks.is_empty() {
                    true => None,
                    false => Some(serde_json::to_string(ranks).map_err(|e| DbError {
                        what: format!("encode ranks: {e}"),
                        source: rusqlite::Error::InvalidQuery,
                    })?),
                };
                tx.prepare_cached(
                    "UPDATE jobs SET state='starting', start=?2, node=?3, gpu_ids=?4, attempts=attempts+1, ranks=?5 WHERE id=?1",
                )
                .and_then(|mut s| s.execute(params![*id as i64, now, node, ids_text(phys), ranks_text]))
                .ctx("record start")?;
                let mut d = json!({"node": node, "gpu_ids": phys});
                if !ranks.is_empty() {
                    d["ranks"] =
                        json!(ranks.iter().map(|r| json!({"node": r.node, "gpu_ids": r.gpu_ids})).collect::<Vec<_>>());
                    d["master_addr"] = json!(masters.get(id));
                }
                if *backfill {
                    d["backfill"] = json!({"ahead_of": head.map(|h| h.0)});
                }
                audit(&tx, now, "scheduler", "start", Some(*id), &policy, &d)?;
            }
            for (j, r) in &changed_shown {
                audit(&tx, now, "scheduler", "skip", Some(*j), &policy, r)?;
            }
            tx.commit().ctx("commit starts")
        })();
        if let Err(e) = res {
            // Memory ran ahead of the database: rebuild from what is committed.
            self.load(now)?;
            return Err(e.into());
        }
        for (j, r) in changed.into_iter().cloned() {
            self.last_reason.insert(j.0 as JobNo, reason_key(&r));
        }
        for (id, _) in newly_blocked {
            self.last_reason.insert(id, (5, 0));
        }
        for (id, _, _) in preempt_rec {
            if let Some(j) = self.active.get_mut(&id) {
                j.state = JobState::Preempting;
                self.to_wake.extend(j.run_nodes());
            }
        }
        self.blocked = blocked;
        let mut hide = false;
        for (id, node, phys, _, ranks) in started {
            self.last_reason.remove(&id);
            if let Some(mut j) = self.pending.remove(&id) {
                if let Some(c) = self.pending_per_user.get_mut(&j.user) {
                    *c = c.saturating_sub(1);
                }
                self.started_first(&j, now);
                j.state = JobState::Starting;
                j.start = Some(now);
                j.node = Some(node.clone());
                j.gpu_ids = phys;
                j.attempts += 1;
                self.to_wake.extend(ranks.iter().map(|r| r.node.clone()));
                j.ranks = ranks;
                j.gang_stop = None;
                hide |= self.hides(&j);
                self.active.insert(id, j);
            }
            self.to_wake.insert(node);
        }
        if hide {
            // A `--no-preempt` job started: take it (and its GPUs) out of the policy's reach.
            self.rebuild(now)?;
        }
        // While a preempted job stops, ask again soon (its end report also wakes the loop).
        let soon = (!self.blocked.is_empty()).then_some(now + 200);
        Ok(match (plan.wake_at, soon) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Whether the policy may now preempt this job: it runs (not already stopping, not being
    /// cancelled) and is not `--no-preempt` (those are hidden from the scheduler anyway).
    pub(super) fn preemptable(&self, id: JobNo) -> bool {
        self.active.get(&id).is_some_and(|j| {
            matches!(j.state, JobState::Running | JobState::Starting) && !j.cancel_requested && !j.no_preempt
        })
    }

    /// Why the policy preempts `id` (for `for_job`), in words, for the audit log.
    pub(super) fn preempt_reason(&self, id: JobNo, for_job: Option<JobNo>, now: i64) -> String {
        let attained = |k: JobNo| -> i64 {
            let p = self.sched.progress(jid(k)).unwrap_or_default();
            let run = self.sched.running_start(jid(k)).map_or(0, |s| now - s);
            let g = self.active.get(&k).or_else(|| self.pending.get(&k)).map_or(0, |j| j.gpus as i64);
            p.attained + g * run
        };
        let secs = |ms: i64| format!("{:.1}", ms as f64 / 1000.0);
        let ran = self.sched.running_start(jid(id)).map_or(0, |s| now - s);
        let other = for_job.map(|k| format!("job {k}")).unwrap_or_else(|| "a waiting job".into());
        let base = match &self.policy.order {
            ordo_core::policy::Order::Las(_) => format!(
                "least attained service: job {id} has {} GPU-s, {other} has {} GPU-s",
                secs(attained(id)),
                for_job.map_or("less".into(), |k| secs(attained(k)))
            ),
            ordo_core::policy::Order::Rr { quantum: Some(q) } => {
                format!("round robin: job {id} used its quantum of {} while {other} waits", fmt_rel(*q))
            }
            ordo_core::policy::Order::Srtf => {
                format!("shortest remaining time: {other} has less time left (by time limits) than job {id}")
            }
            ordo_core::policy::Order::Gittins(_) => {
                format!("{other} has a higher Gittins index than job {id} ({} GPU-s attained)", secs(attained(id)))
            }
            _ => format!("{other} ranks ahead of job {id}"),
        };
        // The run's protection: the server's min_run, or the job's own floor (its min_run, its
        // checkpoint interval or stop grace) when longer; tenths of a second below a minute.
        let floor =
            self.active.get(&id).and_then(|j| j.preempt.as_ref()).map_or(0, |p| p.run_floor()).max(self.cfg.min_run_ms);
        let floor = if floor < 60_000 { format!("{}s", secs(floor)) } else { fmt_rel(floor) };
        format!("{base}; job {id} ran {}s this time (protected for its first {floor})", secs(ran))
    }

    /// CPUs and memory asked by the active jobs of each node.
    pub(super) fn node_use(&self) -> HashMap<String, (u32, u64)> {
        let mut m: HashMap<String, (u32, u64)> = HashMap::new();
        for j in self.active.values() {
            if let Some(n) = &j.node {
                let e = m.entry(n.clone()).or_default();
                e.0 += j.cpus.unwrap_or(0);
                e.1 += j.mem_mib.unwrap_or(0);
            }
        }
        m
    }

    /// Why a job the core placed on `node` cannot start there now: the CPUs or memory it asks
    /// for are taken by the node's active jobs. The core places by CPUs and memory as well (see
    /// `job_req`), so this is a safety net that should never find a node short.
    pub(super) fn lacks(&self, node: &str, j: &JobInfo, used: &HashMap<String, (u32, u64)>) -> Option<String> {
        let n = self.nodes.get(node)?;
        let (uc, um) = used.get(node).copied().unwrap_or_default();
        if let (Some(want), Some(have)) = (j.cpus, n.cpus) {
            if uc + want > have {
                return Some(format!(
                    "{node} has the GPUs but not the CPUs: it needs {want} cores, {} of {have} are free there",
                    have.saturating_sub(uc)
                ));
            }
        }
        if let (Some(want), Some(have)) = (j.mem_mib, n.mem_mib) {
            if um + want > have {
                return Some(format!(
                    "{node} has the GPUs but not the memory: it needs {}, {} of {} are free there",
                    fmt_mib(want),
                    fmt_mib(have.saturating_sub(um)),
                    fmt_mib(have)
                ));
            }
        }
        None
    }
}
