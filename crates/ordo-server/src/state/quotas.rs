//! Quotas in the server: pending-job limits checked at submission, and what a job held back
//! by a running-GPU limit (`Reason::Quota`) is told in `queue` and `explain`.

use super::*;
use ordo_core::QuotaScope;

impl Core {
    /// Refuses a submission past a pending-job limit: the server's `max_pending_per_user`, the
    /// user's `[quotas]` `max_pending_jobs`, or their group's (all its members together).
    /// `queued`: jobs accepted earlier in the same batch, by user; `adding`: the jobs this
    /// submission adds (an array's elements).
    pub(super) fn check_pending_limits(
        &self,
        user: &str,
        queued: &HashMap<String, usize>,
        adding: usize,
    ) -> Result<(), ApiError> {
        let adding = adding as u64;
        let more = |n: u64| if adding == 1 { String::new() } else { format!("; {n} more would pass it") };
        let pending = |u: &str| {
            self.pending_per_user.get(u).copied().unwrap_or(0) as u64 + queued.get(u).copied().unwrap_or(0) as u64
        };
        let mine = pending(user);
        if mine + adding > self.cfg.max_pending_per_user as u64 {
            return Err(ApiError::Conflict(format!(
                "user {user} already has {mine} pending jobs (limit {}){}",
                self.cfg.max_pending_per_user,
                more(adding)
            )));
        }
        let q = &self.cfg.quotas;
        if let Some(m) = q.max_pending(user).filter(|&m| mine + adding > m) {
            return Err(ApiError::Conflict(format!(
                "quota: user {user} already has {mine} pending jobs, their limit is {m} (quotas max_pending_jobs){}",
                more(adding)
            )));
        }
        if let Some(g) = q.group_of(user) {
            if let Some(m) = q.group_max_pending(g) {
                let members = &q.groups[g].members;
                let held: u64 = members.iter().map(|u| pending(u)).sum();
                if held + adding > m {
                    return Err(ApiError::Conflict(format!(
                        "quota: group {g} (of user {user}) already has {held} pending jobs, its limit is {m} (quotas max_pending_jobs){}",
                        more(adding)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Refuses (422) a job asking more GPUs than its user's or group's `max_running_gpus`, or
    /// than their `max_running_gpus_by_model` on every model it accepts that could hold it (as
    /// resolved on the nodes that are up): it could never start. `nodes`: its gang shape.
    pub(super) fn check_gpu_quota(
        &self,
        user: &str,
        gpus: u32,
        nodes: u32,
        needs: &ordo_core::GpuNeeds,
    ) -> Result<(), ApiError> {
        if !self.nodes.values().any(|n| n.up) {
            return Ok(()); // shares of no GPUs say nothing yet
        }
        let q = self.sched.quotas();
        let g = gpus as u64;
        if let Some(l) = q.user_limit(user_index(user)).filter(|&l| g > l) {
            return Err(ApiError::Unprocessable(format!(
                "the job needs {}, more than user {user}'s quota of {l} (max_running_gpus): it could never start",
                ordo_core::words::count(g as usize, "GPU")
            )));
        }
        if let Some(l) = q.group_limit(group_index(&self.cfg.quotas, user)).filter(|&l| g > l) {
            let group = self.cfg.quotas.group_of(user).unwrap_or(user);
            return Err(ApiError::Unprocessable(format!(
                "the job needs {}, more than group {group}'s quota of {l} (max_running_gpus): it could never start",
                ordo_core::words::count(g as usize, "GPU")
            )));
        }
        if q.limits_models() {
            let mut r = JobReq::new(jid(0), 0, gpus, 0);
            r.user = user_index(user);
            r.group = group_index(&self.cfg.quotas, user);
            r.nodes = if nodes > 1 { nodes } else { 0 };
            // No node up serves it: nothing to say yet (its kind may be down).
            let Ok(elig) = self.sched.eligibility(&kinds::widen(needs, self.sched.capacity().keys())) else {
                return Ok(());
            };
            r.elig = elig;
            if let Some((scope, l)) = self.sched.model_quota_never(&r) {
                let whose = match scope {
                    QuotaScope::Group => format!("group {}", self.cfg.quotas.group_of(user).unwrap_or(user)),
                    _ => format!("user {user}"),
                };
                return Err(ApiError::Unprocessable(format!(
                    "the job needs {}, more than {whose}'s quota of {} {} GPUs (max_running_gpus_by_model), and no other model it accepts could hold it: it could never start",
                    ordo_core::words::count(g as usize, "GPU"),
                    l.limit,
                    l.model
                )));
            }
        }
        Ok(())
    }

    /// What `explain` says of a job skipped at a limit: whose limit, what they hold of it (of
    /// one GPU model for `max_running_gpus_by_model`).
    pub(super) fn quota_text(
        &self,
        j: &JobInfo,
        scope: QuotaScope,
        holds: u64,
        limit: u64,
        need: u64,
        model: Option<&str>,
    ) -> String {
        let q = &self.cfg.quotas;
        let (gpus, field) = match model {
            Some(m) => (format!("{m} GPUs"), "max_running_gpus_by_model"),
            None => (ordo_core::words::count(limit as usize, "GPU"), "max_running_gpus"),
        };
        let of = |limit: u64| if model.is_some() { format!("{limit} {gpus}") } else { gpus.clone() };
        let other = if model.is_some() { " and no other model it accepts has room" } else { "" };
        match scope {
            QuotaScope::User => format!(
                "quota: user {} holds {holds} of their {} ({field}); this job needs {need} more{other}, it starts when their running jobs free them",
                j.user,
                of(limit)
            ),
            QuotaScope::Group => format!(
                "quota: group {} (of user {}) holds {holds} of its {} ({field}); this job needs {need} more{other}, it starts when the group's running jobs free them",
                q.group_of(&j.user).unwrap_or("?"),
                j.user,
                of(limit)
            ),
            QuotaScope::Array => format!(
                "array limit: {holds} of at most {limit} elements of its array run; it starts when one of them ends"
            ),
        }
    }
}
