//! Quotas and shares: the most GPUs each user and group may hold running at once, the most
//! running elements of each job array (`--array 0-999%50`), and owners' weights for `fair` and
//! `priority`. The scheduler skips a job whose owner is at a limit (it blocks no one). Limits
//! may also be per GPU model (`max_running_gpus_by_model`): they narrow the pools a job may
//! use in a pass to those whose model has room, and skip it only when none of its pools has.

use crate::capacity::Allocation;
use crate::pools::{Elig, Pools};
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
    /// Most GPUs of one model a user's running jobs may hold, per user (the user's own
    /// entries merged over the defaults').
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_model_gpus: BTreeMap<u32, Vec<ModelLimit>>,
    /// The same for every user not in `user_model_gpus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_user_model_gpus: Vec<ModelLimit>,
    /// Most GPUs of one model a group's running jobs may hold, per group.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_model_gpus: BTreeMap<u32, Vec<ModelLimit>>,
    /// The same for every group not in `group_model_gpus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_group_model_gpus: Vec<ModelLimit>,
}

/// A limit on the GPUs of one model that an owner's running jobs hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelLimit {
    /// The GPU model (lowercased), for reasons.
    pub model: String,
    /// The pools whose GPUs are of that model (bit `p` for pool `p`, see
    /// [`Pools::pools_of_model`]).
    pub pools: u128,
    /// The most GPUs.
    pub limit: u64,
}

impl Quotas {
    /// Whether any GPU limit is set (in all or by model).
    pub fn limits_gpus(&self) -> bool {
        !self.user_gpus.is_empty()
            || self.default_user_gpus.is_some()
            || !self.group_gpus.is_empty()
            || self.default_group_gpus.is_some()
            || self.limits_models()
    }

    /// Whether any limit by GPU model is set.
    pub fn limits_models(&self) -> bool {
        !self.user_model_gpus.is_empty()
            || !self.default_user_model_gpus.is_empty()
            || !self.group_model_gpus.is_empty()
            || !self.default_group_model_gpus.is_empty()
    }

    /// A user's limits by GPU model.
    pub fn user_model_limits(&self, user: u32) -> &[ModelLimit] {
        self.user_model_gpus.get(&user).unwrap_or(&self.default_user_model_gpus)
    }

    /// A group's limits by GPU model.
    pub fn group_model_limits(&self, group: u32) -> &[ModelLimit] {
        self.group_model_gpus.get(&group).unwrap_or(&self.default_group_model_gpus)
    }

    /// When a job of `gpus` GPUs that may use the pools `pools` (every pool's bit set, not 0)
    /// could never start under the limits by model (each of its pools is of a model whose
    /// limit for its user or group is below `gpus`): whose limit, for the first such model.
    pub fn model_never(&self, user: u32, group: u32, gpus: u64, pools: u128) -> Option<(QuotaScope, &ModelLimit)> {
        if gpus == 0 || !self.limits_models() {
            return None;
        }
        let mut first = None;
        let mut closed = 0u128;
        for (scope, lims) in
            [(QuotaScope::User, self.user_model_limits(user)), (QuotaScope::Group, self.group_model_limits(group))]
        {
            for l in lims.iter().filter(|l| l.pools & pools != 0 && l.limit < gpus) {
                closed |= l.pools;
                first = first.or(Some((scope, l)));
            }
        }
        if pools != 0 && pools & !closed == 0 {
            first
        } else {
            None
        }
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

/// Running GPUs per (owner, pool), for limits by model.
type PoolCounts = HashMap<(u32, u8), u64>;

/// GPUs in `counts` of `owner` on the pools of `mask`.
fn held_on(counts: &PoolCounts, owner: u32, mask: u128) -> u64 {
    let mut m = mask;
    let mut sum = 0;
    while m != 0 {
        let p = m.trailing_zeros() as u8;
        sum += counts.get(&(owner, p)).copied().unwrap_or(0);
        m &= m - 1;
    }
    sum
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
    /// With limits by model: cluster node -> pool (empty on one pool), and every pool's bit.
    node_pool: Vec<u8>,
    all_pools: u128,
    /// With limits by model: running GPUs per (user, pool) and (group, pool).
    user_pool: PoolCounts,
    group_pool: PoolCounts,
}

/// What a pass has started so far, on top of what runs (or, `from_empty`, instead of it: a
/// preemptive pass ranks from an empty cluster).
#[derive(Debug, Default)]
pub(crate) struct PassUse {
    from_empty: bool,
    user: HashMap<u32, u64>,
    group: HashMap<u32, u64>,
    array: HashMap<u32, u32>,
    user_pool: PoolCounts,
    group_pool: PoolCounts,
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

    /// Sets the quotas on a cluster of pools `pools` with `running` jobs: with limits by model,
    /// their per-pool counts are rebuilt from the running jobs' allocations.
    pub(crate) fn set_quotas<'a>(
        &mut self,
        q: Quotas,
        pools: &Pools,
        running: impl Iterator<Item = (&'a JobReq, &'a Allocation)>,
    ) {
        self.q = q;
        self.user_pool.clear();
        self.group_pool.clear();
        self.node_pool.clear();
        self.all_pools = pools.all_pools();
        if !self.q.limits_models() {
            return;
        }
        if !pools.is_single() {
            self.node_pool = (0..pools.cap_per_node().len() as u32).map(|n| pools.pool_of(n) as u8).collect();
        }
        for (r, a) in running {
            self.count_pools(r, a, true);
        }
    }

    /// The pool of a cluster node (with limits by model).
    #[inline]
    fn pool(&self, node: u32) -> u8 {
        self.node_pool.get(node as usize).copied().unwrap_or(0)
    }

    /// Adds (or takes away) a running job's GPUs to its owners' per-pool counts.
    fn count_pools(&mut self, r: &JobReq, a: &Allocation, add: bool) {
        if r.gpus == 0 {
            return;
        }
        for &(n, k) in &a.parts {
            let p = self.pool(n);
            for (m, o) in [(&mut self.user_pool, r.user), (&mut self.group_pool, r.group)] {
                let e = m.entry((o, p)).or_default();
                *e = if add { *e + k as u64 } else { e.saturating_sub(k as u64) };
                if *e == 0 {
                    m.remove(&(o, p));
                }
            }
        }
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

    /// Counts a job that starts running on `a`.
    pub(crate) fn on_start(&mut self, r: &JobReq, a: &Allocation) {
        if self.q.limits_models() {
            self.count_pools(r, a, true);
        }
        // No entry for 0 GPUs: `on_stop` removes entries that reach 0, so none may hold 0.
        if r.gpus > 0 {
            *self.user_used.entry(r.user).or_default() += r.gpus as u64;
            *self.group_used.entry(r.group).or_default() += r.gpus as u64;
        }
        if r.array != 0 {
            *self.array_running.entry(r.array).or_default() += 1;
        }
    }

    /// Counts a job that stops running (ends or is preempted) from `a`.
    pub(crate) fn on_stop(&mut self, r: &JobReq, a: &Allocation) {
        if self.q.limits_models() {
            self.count_pools(r, a, false);
        }
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
                        model: None,
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
                return Some(Reason::Quota { scope: QuotaScope::User, id: r.user, holds, limit, need: g, model: None });
            }
        }
        if let Some(limit) = self.q.group_limit(r.group) {
            let holds = base(&self.group_used, r.group) + pass.group.get(&r.group).copied().unwrap_or(0);
            if holds + g > limit {
                return Some(Reason::Quota {
                    scope: QuotaScope::Group,
                    id: r.group,
                    holds,
                    limit,
                    need: g,
                    model: None,
                });
            }
        }
        None
    }

    /// The limits by model of `r`'s user and group, with what each holds of them now.
    fn model_limits<'a>(
        &'a self,
        r: &'a JobReq,
        pass: &'a PassUse,
    ) -> impl Iterator<Item = (QuotaScope, u32, &'a ModelLimit, u64)> + 'a {
        let owners = [
            (QuotaScope::User, r.user, self.q.user_model_limits(r.user), &self.user_pool, &pass.user_pool),
            (QuotaScope::Group, r.group, self.q.group_model_limits(r.group), &self.group_pool, &pass.group_pool),
        ];
        owners.into_iter().flat_map(move |(scope, id, lims, run, passed)| {
            lims.iter().map(move |l| {
                let base = if pass.from_empty { 0 } else { held_on(run, id, l.pools) };
                (scope, id, l, base + held_on(passed, id, l.pools))
            })
        })
    }

    /// [`Limits::check`] and the limits by model: `Err` why `r` may not start now; `Ok(None)`
    /// it may as it is; `Ok(Some(n))` only as `n`, its pools narrowed to those whose models'
    /// limits have room for it (a job that accepts several models still starts on one with
    /// room). A job that fits in `cap` (what the pass has left) only on pools its limits close,
    /// or that no pool left open could ever hold, is at its limit as well: it is skipped and
    /// blocks no one, as at any other limit.
    pub(crate) fn admit(&self, r: &JobReq, pass: &PassUse, cap: &Pools) -> Result<Option<JobReq>, Reason> {
        if let Some(why) = self.check(r, pass) {
            return Err(why);
        }
        if r.gpus == 0 || !self.q.limits_models() {
            return Ok(None);
        }
        let elig = if r.elig.pools == 0 { self.all_pools } else { r.elig.pools };
        let g = r.gpus as u64;
        let mut closed = 0u128;
        let mut first = None;
        for (scope, id, l, holds) in self.model_limits(r, pass) {
            if l.pools & elig != 0 && holds + g > l.limit {
                closed |= l.pools;
                first = first.or(Some(Reason::Quota {
                    scope,
                    id,
                    holds,
                    limit: l.limit,
                    need: g,
                    model: Some(l.model.clone()),
                }));
            }
        }
        match first {
            None => Ok(None),
            Some(why) if elig & !closed == 0 => Err(why),
            Some(why) => {
                let n = JobReq { elig: Elig { pools: elig & !closed, ..r.elig }, ..*r };
                if !cap.can_ever_fit_for(n.demand()) || (!cap.fits_for(n.demand()) && cap.fits_for(r.demand())) {
                    return Err(why);
                }
                Ok(Some(n))
            }
        }
    }

    /// Whether the running job `r` on `a` stays within its limits (a preemptive pass ranking
    /// it from an empty cluster), by model counting the GPUs it holds on each model.
    pub(crate) fn keeps(&self, r: &JobReq, a: &Allocation, pass: &PassUse) -> bool {
        if self.check(r, pass).is_some() {
            return false;
        }
        if r.gpus == 0 || !self.q.limits_models() {
            return true;
        }
        self.model_limits(r, pass).all(|(_, _, l, holds)| {
            let on = self.gpus_on(a, l.pools);
            on == 0 || holds + on <= l.limit
        })
    }

    /// GPUs of `a` on the pools of `mask`.
    fn gpus_on(&self, a: &Allocation, mask: u128) -> u64 {
        a.parts.iter().filter(|&&(n, _)| mask & (1u128 << self.pool(n)) != 0).map(|&(_, k)| k as u64).sum()
    }

    /// Records that the pass starts (or, from empty, keeps) `r` on `a`.
    pub(crate) fn take(&self, r: &JobReq, a: &Allocation, pass: &mut PassUse) {
        if !self.active() {
            return;
        }
        if self.q.limits_models() && r.gpus > 0 {
            for &(n, k) in &a.parts {
                let p = self.pool(n);
                *pass.user_pool.entry((r.user, p)).or_default() += k as u64;
                *pass.group_pool.entry((r.group, p)).or_default() += k as u64;
            }
        }
        *pass.user.entry(r.user).or_default() += r.gpus as u64;
        *pass.group.entry(r.group).or_default() += r.gpus as u64;
        if r.array != 0 {
            *pass.array.entry(r.array).or_default() += 1;
        }
    }

    /// Checks the running counts against the running jobs (for `sanity_check`).
    pub(crate) fn check_counts<'a>(
        &self,
        running: impl Iterator<Item = (&'a JobReq, &'a Allocation)>,
    ) -> Result<(), String> {
        let by_model = self.q.limits_models();
        let mut l = Limits { node_pool: self.node_pool.clone(), ..Limits::default() };
        for (r, a) in running {
            l.on_start(r, a);
            if by_model {
                l.count_pools(r, a, true);
            }
        }
        if l.user_used != self.user_used || l.group_used != self.group_used || l.array_running != self.array_running {
            return Err("quota counts differ from the running jobs".into());
        }
        if l.user_pool != self.user_pool || l.group_pool != self.group_pool {
            return Err("quota counts by GPU model differ from the running jobs".into());
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
    /// Most GPUs of each GPU model held by running jobs at once: model name (any case) -> a
    /// count or a share of that model's GPUs in the cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_running_gpus_by_model: BTreeMap<String, GpuLimit>,
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
    /// Most GPUs of each GPU model held by the group's running jobs at once (as for a user).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_running_gpus_by_model: BTreeMap<String, GpuLimit>,
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
/// [quotas.users.alice.max_running_gpus_by_model]
/// a100 = 8       # at most 8 A100s at once
/// v100 = "25%"   # and a quarter of the cluster's V100s
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
        for (path, m) in self.by_model() {
            let mut lower: BTreeMap<String, &str> = BTreeMap::new();
            for k in m.keys() {
                if k.trim().is_empty() {
                    return Err(format!("{path}.max_running_gpus_by_model: a GPU model name is empty"));
                }
                if let Some(other) = lower.insert(k.to_ascii_lowercase(), k) {
                    return Err(format!(
                        "{path}.max_running_gpus_by_model.{k}: the same model as `{other}` (model names are compared lowercased)"
                    ));
                }
            }
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

    /// Every owner's limits by model, with the path of its table (`quotas.users.alice`).
    fn by_model(&self) -> impl Iterator<Item = (String, &BTreeMap<String, GpuLimit>)> {
        [
            ("quotas.default_user".to_string(), &self.default_user.max_running_gpus_by_model),
            ("quotas.default_group".to_string(), &self.default_group.max_running_gpus_by_model),
        ]
        .into_iter()
        .chain(self.users.iter().map(|(n, l)| (format!("quotas.users.{n}"), &l.max_running_gpus_by_model)))
        .chain(self.groups.iter().map(|(n, l)| (format!("quotas.groups.{n}"), &l.max_running_gpus_by_model)))
        .filter(|(_, m)| !m.is_empty())
    }

    /// Whether any limit by GPU model is configured (the simulator then models GPU kinds).
    pub fn has_model_limits(&self) -> bool {
        self.by_model().next().is_some()
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

    /// The limits by index for a cluster of `total_gpus` GPUs in the pools `pools` (the
    /// scheduler's [`crate::Scheduler::capacity`]): `user` and `group` give the index of a
    /// name (`None`: no job of that name, its entry is not needed). Limits by model are
    /// resolved against the pools' models by `matches` (a name given, a node's model: the rule
    /// that matches jobs' models to nodes, [`crate::pools::same_model`] in ordo-core), a share
    /// being of that model's GPUs; the error names the field of a model no node has
    /// (`quotas.users.alice.max_running_gpus_by_model.h100`).
    pub fn resolve(
        &self,
        total_gpus: u64,
        pools: &Pools,
        matches: impl Fn(&str, &str) -> bool,
        user: impl Fn(&str) -> Option<u32>,
        group: impl Fn(&str) -> Option<u32>,
    ) -> Result<Quotas, String> {
        self.resolve_on(total_gpus, pools, &matches, &user, &group, true)
    }

    /// [`QuotaConfig::resolve`] for a cluster whose nodes come and go (the server's nodes that
    /// are up): a limit on a model no node has limits nothing until one has it.
    pub fn resolve_present(
        &self,
        total_gpus: u64,
        pools: &Pools,
        matches: impl Fn(&str, &str) -> bool,
        user: impl Fn(&str) -> Option<u32>,
        group: impl Fn(&str) -> Option<u32>,
    ) -> Quotas {
        match self.resolve_on(total_gpus, pools, &matches, &user, &group, false) {
            Ok(q) => q,
            Err(e) => unreachable!("lenient resolution has no error: {e}"),
        }
    }

    fn resolve_on(
        &self,
        total_gpus: u64,
        pools: &Pools,
        matches: &dyn Fn(&str, &str) -> bool,
        user: &dyn Fn(&str) -> Option<u32>,
        group: &dyn Fn(&str) -> Option<u32>,
        strict: bool,
    ) -> Result<Quotas, String> {
        // Every table is resolved (named owners with no job too), so that a wrong model is
        // always an error.
        let models = |path: &str, m: &BTreeMap<String, GpuLimit>| -> Result<BTreeMap<String, ModelLimit>, String> {
            let mut out = BTreeMap::new();
            for (name, l) in m {
                let lower = name.to_ascii_lowercase();
                let mask = pools.pools_of_model(&lower, matches);
                if mask == 0 && !strict {
                    continue;
                }
                if mask == 0 {
                    let mut have: Vec<&str> = pools.keys().iter().map(|k| k.model_name()).collect();
                    have.sort();
                    have.dedup();
                    return Err(format!(
                        "{path}.max_running_gpus_by_model.{name}: no node has GPUs of model `{name}` (the cluster has {})",
                        have.join(", ")
                    ));
                }
                let limit = l.on(pools.total_of(mask));
                out.insert(lower.clone(), ModelLimit { model: lower, pools: mask, limit });
            }
            Ok(out)
        };
        let merged = |def: &BTreeMap<String, ModelLimit>, own: BTreeMap<String, ModelLimit>| -> Vec<ModelLimit> {
            let mut all = def.clone();
            all.extend(own);
            all.into_values().collect()
        };
        let def_user = models("quotas.default_user", &self.default_user.max_running_gpus_by_model)?;
        let def_group = models("quotas.default_group", &self.default_group.max_running_gpus_by_model)?;
        let mut q = Quotas {
            default_user_gpus: self.default_user.max_running_gpus.map(|l| l.on(total_gpus)),
            default_group_gpus: self.default_group.max_running_gpus.map(|l| l.on(total_gpus)),
            default_user_model_gpus: def_user.values().cloned().collect(),
            default_group_model_gpus: def_group.values().cloned().collect(),
            ..Quotas::default()
        };
        for (name, l) in &self.users {
            let by_model = models(&format!("quotas.users.{name}"), &l.max_running_gpus_by_model)?;
            let Some(u) = user(name) else { continue };
            if let Some(g) = l.max_running_gpus {
                q.user_gpus.insert(u, g.on(total_gpus));
            }
            if let Some(s) = l.share {
                q.user_share.insert(u, s);
            }
            if !by_model.is_empty() {
                q.user_model_gpus.insert(u, merged(&def_user, by_model));
            }
        }
        for (name, l) in &self.groups {
            let by_model = models(&format!("quotas.groups.{name}"), &l.max_running_gpus_by_model)?;
            let Some(gi) = group(name) else { continue };
            if let Some(g) = l.max_running_gpus {
                q.group_gpus.insert(gi, g.on(total_gpus));
            }
            if let Some(s) = l.share {
                q.group_share.insert(gi, s);
            }
            if !by_model.is_empty() {
                q.group_model_gpus.insert(gi, merged(&def_group, by_model));
            }
        }
        Ok(q)
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
        let pools = Pools::from_capacity(crate::Capacity::new(&[8, 8], crate::Placement::Pooled));
        let q = c
            .resolve(
                16,
                &pools,
                crate::pools::same_model,
                |n| (n == "alice").then_some(4),
                |g| (g == "vision").then_some(1),
            )
            .unwrap();
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

    use crate::model::{ClusterSpec, GpuNeeds, JobId};
    use crate::scheduler::{JobReq, Scheduler};
    use crate::speed::{ModelPick, Speeds};

    /// 1 node of 4 A100 then 1 node of 4 V100, fifo, placement in cluster order.
    fn typed(policy: &str) -> Scheduler {
        let c = ClusterSpec::parse("1x4:a100,1x4:v100").unwrap();
        Scheduler::typed(
            &c,
            crate::Placement::Consolidated,
            policy.parse().unwrap(),
            &Speeds::default(),
            ModelPick::First,
        )
        .unwrap()
    }

    fn by_model(pairs: &[(&str, GpuLimit)]) -> BTreeMap<String, GpuLimit> {
        pairs.iter().map(|(m, l)| (m.to_string(), *l)).collect()
    }

    #[test]
    fn model_limits_resolve_against_the_pools_and_name_bad_fields() {
        let s = typed("fifo");
        let mut c = QuotaConfig::default();
        c.default_user.max_running_gpus_by_model = by_model(&[("v100", GpuLimit::Count(1))]);
        c.users.insert(
            "alice".into(),
            OwnerLimits {
                max_running_gpus_by_model: by_model(&[("A100", GpuLimit::Count(2)), ("v100", GpuLimit::Fraction(0.5))]),
                ..Default::default()
            },
        );
        c.users.insert(
            "bob".into(),
            OwnerLimits { max_running_gpus_by_model: by_model(&[("a100", GpuLimit::Count(3))]), ..Default::default() },
        );
        assert_eq!(c.check(), Ok(()));
        assert!(c.has_model_limits());
        let q = c
            .resolve(
                8,
                s.capacity(),
                crate::pools::same_model,
                |n| ["alice", "bob"].iter().position(|x| *x == n).map(|i| i as u32),
                |_| None,
            )
            .unwrap();
        let lim = |m: &str, pools: u128, limit: u64| ModelLimit { model: m.into(), pools, limit };
        // Alice's own limits; 50% of the 4 V100s is 2.
        assert_eq!(q.user_model_limits(0), &[lim("a100", 1, 2), lim("v100", 2, 2)]);
        // Bob's own a100 limit over the default v100 one.
        assert_eq!(q.user_model_limits(1), &[lim("a100", 1, 3), lim("v100", 2, 1)]);
        // Anyone else: the default.
        assert_eq!(q.user_model_limits(7), &[lim("v100", 2, 1)]);
        assert!(q.limits_gpus() && q.limits_models());
        // A model no node has: the error names the field.
        c.users.get_mut("alice").unwrap().max_running_gpus_by_model.insert("h100".into(), GpuLimit::Count(1));
        let e = c.resolve(8, s.capacity(), crate::pools::same_model, |_| Some(0), |_| None).unwrap_err();
        assert!(e.starts_with("quotas.users.alice.max_running_gpus_by_model.h100: no node has GPUs of model"), "{e}");
        assert!(e.contains("a100, v100"), "{e}");
        // The same model twice in different case.
        c.users.get_mut("alice").unwrap().max_running_gpus_by_model.insert("a100".into(), GpuLimit::Count(1));
        assert!(c
            .check()
            .unwrap_err()
            .contains("quotas.users.alice.max_running_gpus_by_model.a100: the same model as `A100`"));
        // An untyped cluster has no models.
        let plain =
            Scheduler::new(&ClusterSpec::uniform(2, 4), crate::Placement::Consolidated, "fifo".parse().unwrap());
        let mut c = QuotaConfig::default();
        c.default_group.max_running_gpus_by_model = by_model(&[("a100", GpuLimit::Count(1))]);
        let e = c.resolve(8, plain.capacity(), crate::pools::same_model, |_| Some(0), |_| Some(0)).unwrap_err();
        assert!(e.starts_with("quotas.default_group.max_running_gpus_by_model.a100"), "{e}");
    }

    fn req(id: u32, gpus: u32, user: u32) -> JobReq {
        JobReq { user, group: user, ..JobReq::new(JobId(id), 0, gpus, 1000) }
    }

    fn pass(s: &mut Scheduler, now: i64) -> crate::Plan {
        let p = s.schedule(now, true);
        for st in &p.starts {
            s.start(st.job, &st.alloc, now).unwrap();
        }
        s.sanity_check().unwrap();
        p
    }

    fn reason(p: &crate::Plan, id: u32) -> Reason {
        p.waiting.iter().find(|(j, _)| j.0 == id).map(|(_, r)| r.clone()).unwrap()
    }

    #[test]
    fn a_model_limit_narrows_a_flexible_job_and_skips_a_pinned_one() {
        for policy in ["fifo", "fifo+easy", "fifo+conservative", "sjf", "las"] {
            // User 0 may hold 2 A100s. Job 0 (u0, 2, any) goes on the A100 node (cluster
            // order). Job 1 (u0, 2, any): 2 + 2 > 2 A100s, so only V100s: node 1. Job 2 (u0,
            // 2, A100 only): at her A100 limit, skipped with it as reason. Job 3 (u1, 2, A100
            // only) is not limited: the last 2 A100s.
            let mut s = typed(policy);
            let q = Quotas {
                user_model_gpus: [(0, vec![ModelLimit { model: "a100".into(), pools: 1, limit: 2 }])].into(),
                ..Quotas::default()
            };
            s.set_quotas(q);
            let a100 = s.eligibility(&GpuNeeds { models: vec!["A100".into()], ..GpuNeeds::default() }).unwrap();
            s.submit(req(0, 2, 0), 0).unwrap();
            s.submit(req(1, 2, 0), 0).unwrap();
            s.submit(JobReq { elig: a100, ..req(2, 2, 0) }, 0).unwrap();
            s.submit(JobReq { elig: a100, ..req(3, 2, 1) }, 0).unwrap();
            let p = pass(&mut s, 0);
            let at: Vec<(u32, Vec<(u32, u32)>)> = p.starts.iter().map(|s| (s.job.0, s.alloc.parts.clone())).collect();
            assert_eq!(at, vec![(0, vec![(0, 2)]), (1, vec![(1, 2)]), (3, vec![(0, 2)])], "{policy}");
            assert_eq!(
                reason(&p, 2),
                Reason::Quota {
                    scope: QuotaScope::User,
                    id: 0,
                    holds: 2,
                    limit: 2,
                    need: 2,
                    model: Some("a100".into())
                },
                "{policy}"
            );
            assert_eq!(
                s.model_quota_never(&JobReq { elig: a100, ..req(9, 3, 0) }).map(|(sc, l)| (sc, l.limit)),
                Some((QuotaScope::User, 2))
            );
            assert_eq!(s.model_quota_never(&req(9, 3, 0)), None, "V100s have no limit");
            // Job 0 ends: she holds no A100, job 2 takes them (job 3's are still held).
            s.finish(JobId(0), 5).unwrap();
            let p = pass(&mut s, 5);
            assert_eq!(
                p.starts.iter().map(|s| (s.job.0, s.alloc.parts.clone())).collect::<Vec<_>>(),
                vec![(2, vec![(0, 2)])],
                "{policy}"
            );
        }
    }

    #[test]
    fn group_model_limits_count_running_jobs_set_before() {
        // Quotas set while jobs run count them at once: group 3 holds 2 A100s, its limit is 2.
        let mut s = typed("fifo");
        s.submit(JobReq { group: 3, ..req(0, 2, 0) }, 0).unwrap();
        pass(&mut s, 0);
        s.set_quotas(Quotas {
            default_group_model_gpus: vec![ModelLimit { model: "a100".into(), pools: 1, limit: 2 }],
            ..Quotas::default()
        });
        s.sanity_check().unwrap();
        // Job 1 (u1 of group 3, 4 GPUs, any): the V100 node. Job 2 (same group, 1 GPU): both
        // models full for it (A100 by the limit, V100 by job 1): it waits, and says the limit.
        s.submit(JobReq { group: 3, ..req(1, 4, 1) }, 1).unwrap();
        s.submit(JobReq { group: 3, ..req(2, 1, 1) }, 1).unwrap();
        let p = pass(&mut s, 1);
        assert_eq!(
            p.starts.iter().map(|s| (s.job.0, s.alloc.parts.clone())).collect::<Vec<_>>(),
            vec![(1, vec![(1, 4)])]
        );
        // Job 2 would fit on the A100s, which its group's limit closes: that is its reason.
        assert_eq!(
            reason(&p, 2),
            Reason::Quota { scope: QuotaScope::Group, id: 3, holds: 2, limit: 2, need: 1, model: Some("a100".into()) }
        );
        s.finish(JobId(1), 2).unwrap();
        s.sanity_check().unwrap();
        let p = pass(&mut s, 2);
        assert_eq!(
            p.starts.iter().map(|s| (s.job.0, s.alloc.parts.clone())).collect::<Vec<_>>(),
            vec![(2, vec![(1, 1)])]
        );
    }
}
