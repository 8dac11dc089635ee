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
        // No entry for 0 GPUs: `on_stop` removes entries that reach 0, so none may hold 0.
        if r.gpus > 0 {
            *self.user_used.entry(r.user).or_default() += r.gpus as u64;
            *self.group_used.entry(r.group).or_default() += r.gpus as u64;
        }
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

/// A GPU limit as configured: a count, or a share of the cluster's GPUs (`"33%"`, `"1/3"`),
/// rounded down.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GpuLimit {
    /// So many GPUs.
    Count(u64),
    /// This fraction (0 < f <= 1) of the cluster's GPUs.
    Fraction(f64),
}

impl GpuLimit {
    /// The limit on a cluster of `total` GPUs.
    pub fn on(self, total: u64) -> u64 {
        match self {
            GpuLimit::Count(n) => n,
            // A hair above, so that 1/3 of 24 is 8 and not 7.999...
            GpuLimit::Fraction(f) => (total as f64 * f + 1e-9).floor() as u64,
        }
    }

    /// Parses `24`, `"33%"` or `"1/3"`.
    pub fn parse(s: &str) -> Result<GpuLimit, String> {
        let t = s.trim();
        let bad = || format!("`{s}` is not a GPU count, a percentage of the cluster (`33%`) or a fraction (`1/3`)");
        let f = if let Some(p) = t.strip_suffix('%') {
            p.trim().parse::<f64>().map_err(|_| bad())? / 100.0
        } else if let Some((a, b)) = t.split_once('/') {
            let (a, b): (f64, f64) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
            a / b
        } else {
            return t.parse::<u64>().map(GpuLimit::Count).map_err(|_| bad());
        };
        if !(f.is_finite() && f > 0.0 && f <= 1.0) {
            return Err(format!("`{s}`: a share of the cluster must be above 0 and at most 100%"));
        }
        Ok(GpuLimit::Fraction(f))
    }
}

impl<'de> Deserialize<'de> for GpuLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = GpuLimit;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a GPU count (24), a percentage of the cluster (\"33%\") or a fraction (\"1/3\")")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<GpuLimit, E> {
                Ok(GpuLimit::Count(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<GpuLimit, E> {
                u64::try_from(v).map(GpuLimit::Count).map_err(|_| E::custom(format!("{v} is negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GpuLimit, E> {
                GpuLimit::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// One user's (or every user's) limits and share as configured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerLimits {
    /// Most GPUs held by running jobs at once.
    #[serde(default)]
    pub max_running_gpus: Option<GpuLimit>,
    /// Most pending jobs (the server refuses submissions past it; the simulator has no use
    /// for it).
    #[serde(default)]
    pub max_pending_jobs: Option<u64>,
    /// Weight for `fair` and `priority` (default 1).
    #[serde(default)]
    pub share: Option<f64>,
}

/// One group's limits and share, and (for the server) its members.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupLimits {
    /// The server's users in this group (a user is in at most one). The simulator takes
    /// groups from the trace and ignores this.
    #[serde(default)]
    pub members: Vec<String>,
    /// Most GPUs held by the group's running jobs at once.
    #[serde(default)]
    pub max_running_gpus: Option<GpuLimit>,
    /// Most pending jobs of the group's users together (server).
    #[serde(default)]
    pub max_pending_jobs: Option<u64>,
    /// Weight of the group (every member's weight is multiplied by it).
    #[serde(default)]
    pub share: Option<f64>,
}

/// The `[quotas]` table of the server's configuration, and of `--quotas FILE` for the
/// simulator: limits by name, resolved against a cluster and its users with
/// [`QuotaConfig::resolve`].
///
/// ```toml
/// [quotas.default_user]
/// max_running_gpus = "1/3"
/// [quotas.users.alice]
/// max_running_gpus = 32
/// share = 2
/// [quotas.groups.vision]
/// members = ["alice", "bob"]
/// max_running_gpus = 64
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Limits of every user not in `users`.
    #[serde(default)]
    pub default_user: OwnerLimits,
    /// Limits by user name.
    #[serde(default)]
    pub users: BTreeMap<String, OwnerLimits>,
    /// Limits of every group not in `groups`.
    #[serde(default)]
    pub default_group: OwnerLimits,
    /// Limits (and members) by group name.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupLimits>,
}

impl QuotaConfig {
    /// Checks values that the types let through: shares above 0, pending limits of at least
    /// 1, a user in at most one group. The error names the field (`quotas.users.alice.share`).
    pub fn check(&self) -> Result<(), String> {
        let share = |path: &str, s: Option<f64>| match s {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(format!("{path}.share: {v} is not a weight above 0")),
            _ => Ok(()),
        };
        let pending = |path: &str, p: Option<u64>| match p {
            Some(0) => Err(format!("{path}.max_pending_jobs: must be at least 1 (0 would refuse every job)")),
            _ => Ok(()),
        };
        let owners = [
            ("quotas.default_user".to_string(), &self.default_user),
            ("quotas.default_group".into(), &self.default_group),
        ]
        .into_iter()
        .chain(self.users.iter().map(|(n, l)| (format!("quotas.users.{n}"), l)));
        for (path, l) in [("quotas.default_user", &self.default_user), ("quotas.default_group", &self.default_group)] {
            if l.share.is_some() {
                return Err(format!(
                    "{path}.share: a share for everyone weighs nothing (owners without one count 1); give shares per user or group"
                ));
            }
        }
        for (path, l) in owners {
            share(&path, l.share)?;
            pending(&path, l.max_pending_jobs)?;
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (g, l) in &self.groups {
            let path = format!("quotas.groups.{g}");
            share(&path, l.share)?;
            pending(&path, l.max_pending_jobs)?;
            for m in &l.members {
                if let Some(other) = seen.insert(m, g) {
                    return Err(format!("{path}.members: user `{m}` is already a member of group `{other}`"));
                }
            }
        }
        Ok(())
    }

    /// Whether anything is configured.
    pub fn is_empty(&self) -> bool {
        *self == QuotaConfig::default()
    }

    /// The group a user belongs to by `members` (the server's groups).
    pub fn group_of(&self, user: &str) -> Option<&str> {
        self.groups.iter().find(|(_, g)| g.members.iter().any(|m| m == user)).map(|(n, _)| n.as_str())
    }

    /// The most pending jobs a user may have (its own entry, else the default).
    pub fn max_pending(&self, user: &str) -> Option<u64> {
        self.users.get(user).and_then(|l| l.max_pending_jobs).or(self.default_user.max_pending_jobs)
    }

    /// The most pending jobs of a group's users together.
    pub fn group_max_pending(&self, group: &str) -> Option<u64> {
        self.groups.get(group).and_then(|l| l.max_pending_jobs).or(self.default_group.max_pending_jobs)
    }

    /// The limits by index for a cluster of `total_gpus` GPUs: `user` and `group` give the
    /// index of a name (`None`: no job of that name, its entry is not needed).
    pub fn resolve(
        &self,
        total_gpus: u64,
        user: impl Fn(&str) -> Option<u32>,
        group: impl Fn(&str) -> Option<u32>,
    ) -> Quotas {
        let mut q = Quotas {
            default_user_gpus: self.default_user.max_running_gpus.map(|l| l.on(total_gpus)),
            default_group_gpus: self.default_group.max_running_gpus.map(|l| l.on(total_gpus)),
            ..Quotas::default()
        };
        for (name, l) in &self.users {
            let Some(u) = user(name) else { continue };
            if let Some(g) = l.max_running_gpus {
                q.user_gpus.insert(u, g.on(total_gpus));
            }
            if let Some(s) = l.share {
                q.user_share.insert(u, s);
            }
        }
        for (name, l) in &self.groups {
            let Some(gi) = group(name) else { continue };
            if let Some(g) = l.max_running_gpus {
                q.group_gpus.insert(gi, g.on(total_gpus));
            }
            if let Some(s) = l.share {
                q.group_share.insert(gi, s);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_limits_parse_and_round_down() {
        assert_eq!(GpuLimit::parse("24"), Ok(GpuLimit::Count(24)));
        assert_eq!(GpuLimit::parse("1/3").unwrap().on(24), 8);
        assert_eq!(GpuLimit::parse("33%").unwrap().on(24), 7);
        assert_eq!(GpuLimit::parse("100%").unwrap().on(512), 512);
        assert!(GpuLimit::parse("0%").is_err());
        assert!(GpuLimit::parse("150%").is_err());
        assert!(GpuLimit::parse("x").unwrap_err().contains("not a GPU count"));
    }

    #[test]
    fn configs_resolve_by_name_and_check() {
        let mut c = QuotaConfig::default();
        c.default_user.max_running_gpus = Some(GpuLimit::Fraction(0.5));
        c.users.insert(
            "alice".into(),
            OwnerLimits { max_running_gpus: Some(GpuLimit::Count(3)), share: Some(2.0), ..Default::default() },
        );
        c.users
            .insert("nobody".into(), OwnerLimits { max_running_gpus: Some(GpuLimit::Count(1)), ..Default::default() });
        c.groups.insert(
            "vision".into(),
            GroupLimits {
                members: vec!["alice".into()],
                max_running_gpus: Some(GpuLimit::Count(6)),
                ..Default::default()
            },
        );
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.group_of("alice"), Some("vision"));
        let q = c.resolve(16, |n| (n == "alice").then_some(4), |g| (g == "vision").then_some(1));
        assert_eq!(q.default_user_gpus, Some(8));
        assert_eq!(q.user_gpus, [(4, 3)].into());
        assert_eq!(q.group_gpus, [(1, 6)].into());
        assert_eq!(q.weight(4, 1), 2.0);
        c.groups.insert("nlp".into(), GroupLimits { members: vec!["alice".into()], ..Default::default() });
        assert!(c.check().unwrap_err().contains("already a member"), "{:?}", c.check());
        c.groups.remove("nlp");
        c.users.get_mut("alice").unwrap().share = Some(0.0);
        assert!(c.check().unwrap_err().starts_with("quotas.users.alice.share"));
    }
}
