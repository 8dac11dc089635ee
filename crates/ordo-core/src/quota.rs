//! Quotas and shares: the most GPUs each user and group may hold running at once, the most
//! running elements of each job array (`--array 0-999%50`), and owners' weights for `fair` and
//! `priority`. The scheduler skips a job whose owner is at a limit (it blocks no one).

use crate::scheduler::{HashMap, JobReq, Reason};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Limits and shares by user and group index (as in [`crate::Workload`] or the server's
/// users). Absent entries fall back to the defaults; no limit where both are absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Quotas {
    /// Most GPUs a user may hold in running jobs, per user.
    pub user_gpus: BTreeMap<u32, u64>,
    /// The same for every user not in `user_gpus`.
    pub default_user_gpus: Option<u64>,
    /// Most GPUs a group's running jobs may hold, per group.
    pub group_gpus: BTreeMap<u32, u64>,
    /// The same for every group not in `group_gpus`.
    pub default_group_gpus: Option<u64>,
    /// A user's weight for `fair` and `priority` (default 1).
    pub user_share: BTreeMap<u32, f64>,
    /// A group's weight (default 1): every user of the group counts it too, so a group of
    /// share 2 gets twice the weight of a group of share 1.
    pub group_share: BTreeMap<u32, f64>,
}

impl Quotas {
    /// Whether any GPU limit is set.
    pub fn limits_gpus(&self) -> bool {
        !self.user_gpus.is_empty()
            || self.default_user_gpus.is_some()
            || !self.group_gpus.is_empty()
            || self.default_group_gpus.is_some()
    }

    /// A user's GPU limit.
    pub fn user_limit(&self, user: u32) -> Option<u64> {
        self.user_gpus.get(&user).copied().or(self.default_user_gpus)
    }

    /// A group's GPU limit.
    pub fn group_limit(&self, group: u32) -> Option<u64> {
        self.group_gpus.get(&group).copied().or(self.default_group_gpus)
    }

    /// The weight of a job's owner: its user's share times its group's.
    pub fn weight(&self, user: u32, group: u32) -> f64 {
        let u = self.user_share.get(&user).copied().unwrap_or(1.0);
        let g = self.group_share.get(&group).copied().unwrap_or(1.0);
        (u * g).max(1e-9)
    }

    /// A group's weight alone (for `fair:by=group`).
    pub fn group_weight(&self, group: u32) -> f64 {
        self.group_share.get(&group).copied().unwrap_or(1.0).max(1e-9)
    }
}

/// What a limit applies to, in [`Reason::Quota`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaScope {
    /// A user's running GPUs.
    User,
    /// A group's running GPUs.
    Group,
    /// A job array's running elements.
    Array,
}

/// Limits in force plus what running jobs hold against them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    pub(crate) q: Quotas,
    /// Array id -> most running elements.
    array_max: HashMap<u32, u32>,
    user_used: HashMap<u32, u64>,
    group_used: HashMap<u32, u64>,
    array_running: HashMap<u32, u32>,
}

/// What a pass has started so far, on top of what runs (or, `from_empty`, instead of it: a
/// preemptive pass ranks from an empty cluster).
#[derive(Debug, Default)]
pub(crate) struct PassUse {
    from_empty: bool,
    user: HashMap<u32, u64>,
    group: HashMap<u32, u64>,
    array: HashMap<u32, u32>,
}

impl PassUse {
    /// Counting on top of running jobs.
    pub(crate) fn new() -> Self {
        PassUse::default()
    }

    /// Counting from nothing (running jobs kept by the pass are added with `take`).
    pub(crate) fn empty() -> Self {
        PassUse { from_empty: true, ..PassUse::default() }
    }
}

impl Limits {
    /// Whether anything limits a job (otherwise checks are skipped).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        !self.array_max.is_empty() || self.q.limits_gpus()
    }

    pub(crate) fn set_array(&mut self, array: u32, max_running: Option<u32>) {
        match max_running {
            Some(m) => {
                self.array_max.insert(array, m);
            }
            None => {
                self.array_max.remove(&array);
            }
        }
    }

    /// Counts a job that starts running.
    pub(crate) fn on_start(&mut self, r: &JobReq) {
        *self.user_used.entry(r.user).or_default() += r.gpus as u64;
        *self.group_used.entry(r.group).or_default() += r.gpus as u64;
        if r.array != 0 {
            *self.array_running.entry(r.array).or_default() += 1;
        }
    }

    /// Counts a job that stops running (ends or is preempted).
    pub(crate) fn on_stop(&mut self, r: &JobReq) {
        fn sub<V: Copy + PartialEq + Default + std::ops::Sub<Output = V> + PartialOrd>(
            m: &mut HashMap<u32, V>,
            k: u32,
            v: V,
        ) {
            if let Some(x) = m.get_mut(&k) {
                *x = if *x > v { *x - v } else { V::default() };
                if *x == V::default() {
                    m.remove(&k);
                }
            }
        }
        sub(&mut self.user_used, r.user, r.gpus as u64);
        sub(&mut self.group_used, r.group, r.gpus as u64);
        if r.array != 0 {
            sub(&mut self.array_running, r.array, 1);
        }
    }

    /// GPUs a user holds in running jobs.
    pub(crate) fn user_holds(&self, user: u32) -> u64 {
        self.user_used.get(&user).copied().unwrap_or(0)
    }

    /// Why `r` may not start now, given what the pass started (`None`: it may).
    pub(crate) fn check(&self, r: &JobReq, pass: &PassUse) -> Option<Reason> {
        if !self.active() {
            return None;
        }
        let base = |m: &HashMap<u32, u64>, k: u32| if pass.from_empty { 0 } else { m.get(&k).copied().unwrap_or(0) };
        let g = r.gpus as u64;
        if r.array != 0 {
            if let Some(&max) = self.array_max.get(&r.array) {
                let run = if pass.from_empty { 0 } else { self.array_running.get(&r.array).copied().unwrap_or(0) };
                let holds = (run + pass.array.get(&r.array).copied().unwrap_or(0)) as u64;
                if holds + 1 > max as u64 {
                    return Some(Reason::Quota {
                        scope: QuotaScope::Array,
                        id: r.array,
                        holds,
                        limit: max as u64,
                        need: 1,
                    });
                }
            }
        }
        if g == 0 {
            return None;
        }
        if let Some(limit) = self.q.user_limit(r.user) {
            let holds = base(&self.user_used, r.user) + pass.user.get(&r.user).copied().unwrap_or(0);
            if holds + g > limit {
                return Some(Reason::Quota { scope: QuotaScope::User, id: r.user, holds, limit, need: g });
            }
        }
        if let Some(limit) = self.q.group_limit(r.group) {
            let holds = base(&self.group_used, r.group) + pass.group.get(&r.group).copied().unwrap_or(0);
            if holds + g > limit {
                return Some(Reason::Quota { scope: QuotaScope::Group, id: r.group, holds, limit, need: g });
            }
        }
        None
    }

    /// Records that the pass starts (or, from empty, keeps) `r`.
    pub(crate) fn take(&self, r: &JobReq, pass: &mut PassUse) {
        if !self.active() {
            return;
        }
        *pass.user.entry(r.user).or_default() += r.gpus as u64;
        *pass.group.entry(r.group).or_default() += r.gpus as u64;
        if r.array != 0 {
            *pass.array.entry(r.array).or_default() += 1;
        }
    }

    /// Checks the running counts against the running jobs (for `sanity_check`).
    pub(crate) fn check_counts<'a>(&self, running: impl Iterator<Item = &'a JobReq>) -> Result<(), String> {
        let mut l = Limits::default();
        for r in running {
            l.on_start(r);
        }
        if l.user_used != self.user_used || l.group_used != self.group_used || l.array_running != self.array_running {
            return Err("quota counts differ from the running jobs".into());
        }
        Ok(())
    }
}
