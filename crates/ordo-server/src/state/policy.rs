//! Changing the policy: what the new policy's first decision would do (a dry run), and the
//! rule that a change which preempts running jobs at once is made only when the admin says so
//! (`preempt_now`). The check is made at the moment of the change; later preemptions are the
//! policy's ordinary work (docs/SERVER.md, "Maintenance").

use super::*;

/// How many of the queue's first jobs a policy change shows before and after.
const ORDER_SHOWN: usize = 20;

impl Core {
    /// Changes the policy (admins only), preempting at once if the new policy does; recorded
    /// with who did it and why. Returns the policy in force.
    pub fn set_policy(&mut self, who: &Principal, name: &str, reason: &str, now: i64) -> Result<String, ApiError> {
        let req = PolicyChange {
            policy: name.to_string(),
            dry_run: false,
            preempt_now: true,
            reason: Some(reason.to_string()),
        };
        self.change_policy(who, &req, now).map(|c| c.policy)
    }

    /// `PUT /v1/policy`: plans the queue under the new policy as it stands now and says what
    /// that plan does: the running jobs it preempts, the waiting jobs it starts, how the
    /// queue's order changes. With `dry_run` nothing changes. A change whose first plan
    /// preempts running jobs is refused (409, naming them) unless `preempt_now` is given.
    pub fn change_policy(&mut self, who: &Principal, req: &PolicyChange, now: i64) -> Result<PolicyChanged, ApiError> {
        if who.role != Role::Admin {
            return Err(ApiError::Forbidden("only admins may change the policy".into()));
        }
        bounded("policy", &req.policy, MAX_POLICY_BYTES)?;
        let reason = req.reason.as_deref().map(str::trim).unwrap_or("");
        bounded("reason", reason, MAX_MESSAGE_BYTES)?;
        if reason.is_empty() && !req.dry_run {
            return Err(ApiError::BadRequest(
                "field `reason`: required for a change of policy: say why the order changes (it is kept in the \
                 audit log with who made it; a dry run needs none)"
                    .into(),
            ));
        }
        let p: PolicySpec = req.policy.parse().map_err(|e| ApiError::BadRequest(format!("field `policy`: {e}")))?;
        check_policy(&p).map_err(|e| ApiError::BadRequest(format!("field `policy`: {e}")))?;
        let before = Self::policy_order(&self.sched, &self.sched.schedule(now, true));
        let old = std::mem::replace(&mut self.policy, p.clone());
        let tried = self.rebuild(now).map(|()| self.sched.schedule(now, true));
        let plan = match tried {
            Ok(plan) => plan,
            Err(e) => {
                self.policy = old;
                self.rebuild(now)?;
                return Err(e);
            }
        };
        let after = Self::policy_order(&self.sched, &plan);
        let mut answer = self.policy_effects(&before, &after, &plan, now);
        answer.asked = p.to_string();
        let refuse = !req.dry_run && !answer.preempt.is_empty() && !req.preempt_now;
        if req.dry_run || refuse {
            self.policy = old;
            self.rebuild(now)?;
            answer.policy = self.policy.to_string();
            if refuse {
                let jobs: Vec<String> = answer
                    .preempt
                    .iter()
                    .map(|e| format!("{} of {} (ran {})", e.job, e.user, fmt_rel(e.ran_ms.unwrap_or(0))))
                    .collect();
                return Err(ApiError::Conflict(format!(
                    "policy {} would preempt {} at once: {}; nothing was changed. Give --preempt-now \
                     (preempt_now) to change it anyway, or --dry-run to see all it would do",
                    answer.asked,
                    ordo_core::words::count(jobs.len(), "running job"),
                    jobs.join(", ")
                )));
            }
            return Ok(answer);
        }
        let from = old.to_string();
        let to = p.to_string();
        let recorded = (|| -> Result<(), ApiError> {
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('policy', ?1)", params![to])
                .ctx("store policy")?;
            let preempt: Vec<&str> = answer.preempt.iter().map(|e| e.job.as_str()).collect();
            audit(
                &tx,
                now,
                &who.user,
                "policy",
                None,
                &to,
                &json!({"from": from, "to": to, "preempts": preempt, "reason": reason}),
            )?;
            tx.commit().ctx("commit policy")?;
            Ok(())
        })();
        if let Err(e) = recorded {
            self.policy = old;
            self.rebuild(now)?;
            return Err(e);
        }
        self.last_reason.clear();
        answer.policy = to;
        answer.applied = true;
        Ok(answer)
    }

    /// What a plan made under a new policy does, against the queue's order before.
    fn policy_effects(&self, before: &[JobId], after: &[JobId], plan: &ordo_core::Plan, now: i64) -> PolicyChanged {
        let name = |id: JobId| {
            let no = id.0 as JobNo;
            self.pending.get(&no).or_else(|| self.active.get(&no)).map(|j| (j.id_text(), j.user.clone()))
        };
        let effect = |id: JobId, ran: Option<i64>| {
            name(id).map(|(job, user)| PolicyEffect { job, user, ran_ms: ran }).unwrap_or(PolicyEffect {
                job: id.0.to_string(),
                user: String::new(),
                ran_ms: ran,
            })
        };
        let preempt = plan
            .preempt
            .iter()
            .map(|&id| {
                let ran = self.active.get(&(id.0 as JobNo)).and_then(|j| j.start).map(|s| (now - s).max(0));
                effect(id, ran)
            })
            .collect();
        let start = plan.starts.iter().map(|s| effect(s.job, None)).collect();
        let place: HashMap<JobId, usize> = before.iter().enumerate().map(|(i, &j)| (j, i)).collect();
        let reordered = after.iter().enumerate().filter(|(i, j)| place.get(j).is_some_and(|p| p != i)).count();
        let shown =
            |v: &[JobId]| v.iter().take(ORDER_SHOWN).map(|&id| name(id).map_or(id.0.to_string(), |n| n.0)).collect();
        PolicyChanged {
            policy: String::new(),
            applied: false,
            asked: String::new(),
            preempt,
            start,
            reordered,
            order_before: shown(before),
            order_after: shown(after),
        }
    }
}
