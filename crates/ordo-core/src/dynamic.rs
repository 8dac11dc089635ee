//! Dynamic and preemptive orders: keys that change while jobs wait or run (`srtf`, `las`,
//! `gittins`, `fair`, `priority`, `qssf`, `+maxwait`), the preemptive pass, what jobs teach.

use crate::capacity::{Allocation, Demand};
use crate::model::JobId;
use crate::policy::{Backfill, FairBy, FairParams, GittinsParams, LasParams, Order, PriorityParams};
use crate::pools::Pools;
use crate::scheduler::{HashMap, JobReq, Plan, Progress, Reason, Scheduler, Start};
use crate::time::Time;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// A sort key: smaller runs first; ties go to the lower job id.
pub(crate) type Key = [i64; 5];

/// Service (GPU-milliseconds) of recently finished jobs, sorted with prefix sums, for indices
/// computed from the distribution of job sizes. Learned online: only jobs that have finished.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    recent: VecDeque<i64>,
    window: usize,
    sorted: Vec<i64>,
    /// `prefix[i]` = sum of `sorted[..i]`.
    prefix: Vec<i128>,
    since_rebuild: usize,
}

impl History {
    /// Records a finished job's service.
    pub(crate) fn record(&mut self, service: i64, _now: Time) {
        let window = if self.window == 0 { usize::MAX } else { self.window };
        self.recent.push_back(service.max(0));
        while self.recent.len() > window {
            self.recent.pop_front();
        }
        self.since_rebuild += 1;
        // Rebuilding sorts the window: do it at once while the history is small, and after each
        // 1% of growth once it is large (the distribution barely moves in between).
        if self.since_rebuild * 100 >= self.recent.len() || self.recent.len() < 2_000 {
            self.rebuild();
        }
    }

    pub(crate) fn set_window(&mut self, window: usize) {
        self.window = window;
    }

    fn rebuild(&mut self) {
        self.sorted = self.recent.iter().copied().collect();
        self.sorted.sort_unstable();
        self.prefix = Vec::with_capacity(self.sorted.len() + 1);
        let mut acc = 0i128;
        self.prefix.push(0);
        for &x in &self.sorted {
            acc += x as i128;
            self.prefix.push(acc);
        }
        self.since_rebuild = 0;
    }

    /// Gittins index of a job that has attained `a` GPU-ms, with look-ahead `delta`:
    /// P(S <= a + delta | S > a) / E[min(S - a, delta) | S > a], over the finished jobs' service
    /// S. Higher runs first. 0 when nothing larger than `a` has been seen (or no history).
    pub(crate) fn gittins(&self, a: i64, delta: i64) -> f64 {
        let n = self.sorted.len();
        let i = self.sorted.partition_point(|&x| x <= a);
        if i == n {
            return 0.0;
        }
        let j = self.sorted.partition_point(|&x| x <= a.saturating_add(delta));
        let above = (n - i) as f64;
        let p = (j - i) as f64 / above;
        // E[min(S - a, delta)] over S > a: jobs ending within delta contribute S - a, the rest
        // delta.
        // The same f64 as the i128's (both round the same integer), without the slow i128
        // conversion where the sum fits an i64 (always, short of 9.2e18 GPU-ms in the window).
        let sum = self.prefix[j] - self.prefix[i];
        let sum = i64::try_from(sum).map_or(sum as f64, |x| x as f64);
        let within = sum - (j - i) as f64 * a as f64;
        let e = (within + (n - j) as f64 * delta as f64) / above;
        if e <= 0.0 {
            0.0
        } else {
            p / e
        }
    }
}

/// One user's fair-share usage for `priority`: GPU-milliseconds decayed with the half-life, as
/// of a time, and the GPUs the user has running since then.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    value: f64,
    as_of: Time,
    running: u64,
    /// The user's group (of its latest job), for its share.
    group: u32,
}

impl Usage {
    /// Decayed usage at `now` (not before `as_of`): the old value decays by 2^(-dt/H), and `r`
    /// GPUs running throughout accrue r * H/ln2 * (1 - 2^(-dt/H)).
    fn at(&self, now: Time, half_life: Time) -> f64 {
        let dt = (now - self.as_of).max(0) as f64;
        let h = half_life.max(1) as f64;
        let decay = (-dt / h).exp2();
        self.value * decay + self.running as f64 * h / std::f64::consts::LN_2 * (1.0 - decay)
    }

    fn advance(&mut self, now: Time, half_life: Time) {
        if now > self.as_of {
            self.value = self.at(now, half_life);
            self.as_of = now;
        }
    }
}

/// What `priority` and `qssf` learn from commits: per-user decayed usage, and the GPU-time of
/// finished jobs per user, per group and overall (sum, count).
#[derive(Debug, Clone, Default)]
pub(crate) struct Accounts {
    /// `rr`: per user, the number of the turn it last took (turns are numbered from 1).
    turn_of: HashMap<u32, u64>,
    /// `rr`: turns taken so far.
    turns: u64,
    usage: HashMap<u32, Usage>,
    by_user: HashMap<u32, (i128, u64)>,
    by_group: HashMap<u32, (i128, u64)>,
    all: (i128, u64),
}

impl Accounts {
    /// The turn a user last took (0: never).
    fn last_turn(&self, user: u32) -> u64 {
        self.turn_of.get(&user).copied().unwrap_or(0)
    }

    fn turns(&self) -> u64 {
        self.turns
    }

    /// `qssf`'s prediction of a job's GPU-time: the mean over the same user's finished jobs,
    /// else the same group's, else all finished jobs, else 0.
    fn predict(&self, req: &JobReq) -> i64 {
        let mean = |(sum, n): (i128, u64)| (n > 0).then(|| (sum / n as i128) as i64);
        self.by_user
            .get(&req.user)
            .copied()
            .and_then(mean)
            .or_else(|| self.by_group.get(&req.group).copied().and_then(mean))
            .or_else(|| mean(self.all))
            .unwrap_or(0)
    }
}

/// Facts computed once per scheduling pass.
#[derive(Debug, Default)]
struct PassCtx {
    /// `priority`: each user's fair-share factor at `now` (users with no usage: 1.0).
    fairshare: HashMap<u32, f64>,
    /// `gittins`: the index of a job with no service yet (most waiting jobs), once per pass.
    gittins_fresh: f64,
    /// `gittins`: its LAS queues (Tiresias's limits), built once per pass, not once per key.
    gittins_lp: Option<LasParams>,
}

/// Maps a float to an i64 with the same order (for keys).
fn ord_f64(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    if b < 0 {
        b ^ i64::MAX
    } else {
        b
    }
}

impl Scheduler {
    /// Executed wall time and attained service of a waiting or running job at `now`.
    fn served(&self, id: JobId, now: Time) -> (Time, i64, Progress) {
        let p = self.progress.get(&id).copied().unwrap_or_default();
        match self.running.get(&id) {
            Some(r) => (p.executed + (now - r.start), p.attained + r.req.gpus as i64 * (now - r.start), p),
            None => (p.executed, p.attained, p),
        }
    }

    /// LAS queue of a job at `now` and its rank within the queue (smaller first), as the
    /// Tiresias simulator keeps its queue lists: running jobs stay ahead of waiting ones, in the
    /// order they started running there (started, or demoted into the queue while running);
    /// a job stopped by preemption goes to the front of the waiting ones (the latest first); new
    /// and promoted jobs join at the back.
    fn las_queue(&self, lp: &LasParams, req: &JobReq, now: Time) -> (usize, Time) {
        let (q, entry, _) = self.las_queue_served(lp, req, now);
        (q, entry)
    }

    /// [`Scheduler::las_queue`] and the job's attained service at `now`, from one lookup of
    /// its progress and one of its run.
    fn las_queue_served(&self, lp: &LasParams, req: &JobReq, now: Time) -> (usize, Time, i64) {
        let p = self.progress.get(&req.id).copied().unwrap_or_default();
        let run = self.running.get(&req.id);
        let (executed, attained) = match run {
            Some(r) => (p.executed + (now - r.start), p.attained + r.req.gpus as i64 * (now - r.start)),
            None => (p.executed, p.attained),
        };
        let (base_a, base_e) = p.las_base;
        let a = attained - base_a;
        let q = lp.thresholds.partition_point(|&t| t <= a);
        if let Some(r) = run {
            // Crossed a threshold during the current run: it joined this queue's runners then.
            if q > 0 {
                let a0 = p.attained - base_a;
                let t = lp.thresholds[q - 1];
                if a0 < t {
                    let g = r.req.gpus.max(1) as i64;
                    return (q, r.start + (t - a0 + g - 1) / g, attained);
                }
            }
            return (q, r.start, attained);
        }
        if q > 0 && lp.promote > 0.0 {
            let starved = p.starved + (now - p.waiting_since);
            let due = (lp.promote * (executed - base_e) as f64).ceil() as Time;
            if executed > base_e && starved >= due {
                return (0, now - (starved - due), attained);
            }
        }
        if p.preemptions > 0 && p.waiting_since > p.queue_entry {
            (q, -p.waiting_since - 1, attained)
        } else {
            (q, p.queue_entry, attained)
        }
    }

    /// Time a job has spent waiting since it was submitted (all its waits together).
    fn total_wait(&self, req: &JobReq, now: Time, running: bool) -> Time {
        let executed = if running {
            self.served(req.id, now).0
        } else {
            // A waiting job has no current run to add.
            self.progress.get(&req.id).map_or(0, |p| p.executed)
        };
        now - req.submit - executed
    }

    /// The stored form of a running job's key and until when it holds. `srtf`: the remaining
    /// estimate falls with time for every running job alike, so the key is stored as the
    /// remaining estimate plus `now` (fixed) and `actual_run_key` subtracts `now`. `las`: the key
    /// holds until the job's attained service reaches the next threshold.
    pub(crate) fn run_key(&self, id: JobId, now: Time) -> (Key, Time) {
        let r = &self.running[&id];
        let mut k = self.key(&r.req, now, true);
        match &self.policy.order {
            Order::Srtf => {
                k[1] += now;
                (k, Time::MAX)
            }
            Order::Las(lp) => {
                let (_, attained, p) = self.served(id, now);
                let a = attained - p.las_base.0;
                let until = match lp.thresholds.iter().find(|&&t| t > a) {
                    Some(&t) => {
                        let g = r.req.gpus.max(1) as i64;
                        now + (t - a + g - 1) / g
                    }
                    None => Time::MAX,
                };
                (k, until)
            }
            _ => (k, now),
        }
    }

    fn actual_run_key(&self, mut k: Key, now: Time) -> Key {
        if let Order::Srtf = self.policy.order {
            k[1] -= now;
        }
        k
    }

    /// The inverse of `actual_run_key`: a key at `now` in the terms running keys are stored in.
    fn stored_run_key(&self, mut k: Key, now: Time) -> Key {
        if let Order::Srtf = self.policy.order {
            k[1] += now;
        }
        k
    }

    /// Whether waiting jobs' keys stay fixed while they wait, so they can be kept sorted
    /// between passes (`srtf`, and `las` without promotion, without `+maxwait`).
    /// Not under `compat=tiresias`, whose list places move at events and commits.
    pub(crate) fn waiting_keys_static(&self) -> bool {
        self.policy.max_wait.is_none() && self.waiting_keys_indexed()
    }

    /// Whether waiting jobs' keys without the starvation guard stay fixed while they wait, so
    /// `dyn_wait` keeps them sorted between passes: `srtf`, and `las` without promotion, also
    /// with `+maxwait` (see [`Scheduler::guard_indexed`]).
    pub(crate) fn waiting_keys_indexed(&self) -> bool {
        match &self.policy.order {
            Order::Srtf => true,
            Order::Las(lp) => lp.promote == 0.0 && !lp.compat_tiresias,
            _ => false,
        }
    }

    /// `las` with promotion, without Tiresias's timing: a waiting job's key changes once
    /// while it waits, when its promotion falls due, so `dyn_wait` keeps the waiting jobs not
    /// yet promoted and `promoted` those promoted (see `promo_wake`); with `+maxwait` only
    /// those not past the guard (see [`Scheduler::guard_indexed`]).
    pub(crate) fn promote_indexed(&self) -> bool {
        matches!(&self.policy.order, Order::Las(lp) if lp.promote > 0.0 && !lp.compat_tiresias)
    }

    /// `las` with promotion: for a waiting job that can be promoted while it waits (it ran
    /// since its base and is not in the first queue), the instant its key becomes
    /// `[.., queue 0, .., that instant]` (`las_queue_served`) and the instant the general pass
    /// wakes for it (the same, or one millisecond after it started waiting if it was
    /// promoted already then).
    pub(crate) fn promotion(&self, req: &JobReq) -> Option<(Time, Time)> {
        let Order::Las(lp) = &self.policy.order else { return None };
        if lp.promote <= 0.0 {
            return None;
        }
        let p = self.progress.get(&req.id)?;
        if p.executed <= p.las_base.1 || lp.thresholds.partition_point(|&t| t <= p.attained - p.las_base.0) == 0 {
            return None;
        }
        let due = (lp.promote * (p.executed - p.las_base.1) as f64).ceil() as Time;
        Some((p.waiting_since + (due - p.starved), p.waiting_since + (due - p.starved).max(1)))
    }

    /// `srtf+maxwait`, `las+maxwait` (also with promotion): `dyn_wait` keeps the waiting jobs by
    /// their keys without the guard, and the jobs past the guard are read from `due_fresh` /
    /// `due_resumed`.
    pub(crate) fn guard_indexed(&self) -> bool {
        self.policy.max_wait.is_some() && (self.waiting_keys_indexed() || self.promote_indexed())
    }

    /// Whether running jobs' keys are kept in `run_keys` (each holds until its job's next LAS
    /// threshold): where waiting keys are static, and under `las+maxwait` without promotion
    /// (a running job's total wait, hence its guard, does not change while it runs). Not under
    /// `srtf+maxwait`: `run_keys` stores `srtf`'s remaining time shifted by the instant it
    /// was stored, which a guarded key `[0, submit]` does not follow.
    pub(crate) fn run_keys_stored(&self) -> bool {
        self.waiting_keys_static()
            || self.promote_indexed()
            || (self.guard_indexed() && matches!(self.policy.order, Order::Las(_)))
    }

    /// A job's key by its order alone, without the starvation guard (what `dyn_wait` keeps).
    pub(crate) fn unguarded_key(&self, req: &JobReq, now: Time, running: bool) -> Key {
        self.order_key_in(&self.pass_ctx(now), req, now, running)
    }

    pub(crate) fn key(&self, req: &JobReq, now: Time, running: bool) -> Key {
        self.key_in(&self.pass_ctx(now), req, now, running)
    }

    /// What a pass computes once for every key.
    fn pass_ctx(&self, now: Time) -> PassCtx {
        let mut ctx = PassCtx::default();
        if let Order::Priority(pp) = &self.policy.order {
            // Slurm's classic fair-share factor 2^(-usage/share), once per user and pass (not
            // once per waiting job: thousands of jobs share a handful of users).
            // A user's share: its weight (user share x group share, 1 by default) over the sum
            // of the weights of the users seen so far (1/n with no shares configured).
            let q = &self.limits.q;
            let usage: Vec<(u32, f64, f64)> = self
                .accounts
                .usage
                .iter()
                .map(|(&u, us)| (u, us.at(now, pp.half_life), q.weight(u, us.group)))
                .collect();
            let total: f64 = usage.iter().map(|u| u.1).sum();
            let weights: f64 = usage.iter().map(|u| u.2).sum::<f64>().max(1e-9);
            for (u, used, w) in usage {
                let norm = if total > 0.0 { used / total } else { 0.0 };
                ctx.fairshare.insert(u, (-norm / (w / weights)).exp2());
            }
        }
        if let Order::Gittins(gp) = &self.policy.order {
            ctx.gittins_fresh = self.history.gittins(0, gp.quantum);
            ctx.gittins_lp = Some(LasParams { thresholds: gittins_queues(gp), ..LasParams::default() });
        }
        ctx
    }

    /// Slurm's multifactor priority of a waiting job at `now` (higher runs first).
    fn multifactor(&self, pp: &PriorityParams, ctx: &PassCtx, req: &JobReq, now: Time) -> f64 {
        let age = ((now - req.submit).max(0) as f64 / pp.max_age.max(1) as f64).min(1.0);
        let fairshare = ctx.fairshare.get(&req.user).copied().unwrap_or(1.0);
        let size = req.gpus as f64 / self.cap.total().max(1) as f64;
        pp.age * age + pp.fairshare * fairshare + pp.size * size + pp.qos * req.priority as f64
    }

    fn key_in(&self, ctx: &PassCtx, req: &JobReq, now: Time, running: bool) -> Key {
        // The starvation guard: a job that has waited `max_wait` in all goes ahead, oldest
        // first. Its total wait only grows, so once ahead it stays ahead (also while it runs):
        // two such jobs never take turns preempting each other.
        if self.policy.max_wait.is_some_and(|w| self.total_wait(req, now, running) >= w) {
            return [0, req.submit, 0, 0, 0];
        }
        self.order_key_in(ctx, req, now, running)
    }

    /// [`Scheduler::key_in`] without the starvation guard.
    fn order_key_in(&self, ctx: &PassCtx, req: &JobReq, now: Time, running: bool) -> Key {
        match &self.policy.order {
            Order::Fifo | Order::Sjf | Order::Sgf | Order::Tput => {
                let k = self.static_key(req);
                [1, k.0, k.1, 0, 0]
            }
            Order::Srtf => {
                let (executed, _, p) = self.served(req.id, now);
                [1, req.estimate - (executed - p.lost), req.submit, 0, 0]
            }
            Order::Las(lp) if lp.compat_tiresias => {
                // The Tiresias simulator's lists: queue, running part ahead of the waiting part,
                // place within the part (`tiresias.rs`).
                let pl = self.tiresias_place(req.id);
                let small = if lp.small_first { req.gpus as i64 } else { 0 };
                [1, pl.queue as i64, i64::from(!pl.ahead), small, pl.pos]
            }
            Order::Las(lp) => {
                let (q, entry) = self.las_queue(lp, req, now);
                // Tiresias keeps running jobs ahead of waiting ones within a queue, so a job is
                // not preempted by an equal.
                let small = if lp.small_first { req.gpus as i64 } else { 0 };
                [1, q as i64, i64::from(!running), small, entry]
            }
            Order::Gittins(gp) => {
                let built;
                let lp = match &ctx.gittins_lp {
                    Some(lp) => lp,
                    None => {
                        built = LasParams { thresholds: gittins_queues(gp), ..LasParams::default() };
                        &built
                    }
                };
                let (q, _, attained) = self.las_queue_served(lp, req, now);
                let index = if attained == 0 { ctx.gittins_fresh } else { self.history.gittins(attained, gp.quantum) };
                [1, q as i64, -ord_f64(index), req.submit, 0]
            }
            // `fair` orders a whole pass at once (`fair_order`); alone a job goes by submit.
            Order::Fair(_) => [1, req.submit, 0, 0, 0],
            Order::Priority(pp) => [1, -ord_f64(self.multifactor(pp, ctx, req, now)), req.submit, 0, 0],
            Order::Qssf => [1, self.accounts.predict(req), req.submit, 0, 0],
            // `rr` orders a whole pass at once (`rr_order`); alone a job goes by submit.
            Order::Rr { .. } => [1, req.submit, 0, 0, 0],
        }
    }

    /// `rr`'s order for a pass: jobs past `+maxwait` first (oldest first); then users take
    /// turns, the user whose last turn is oldest first (never: first of all, then by their
    /// oldest waiting job), each turn taking that user's oldest waiting job. With a quantum,
    /// running jobs still inside their slice come first; those whose slice is over queue as the
    /// last turn their user took, behind every user waiting longer.
    fn rr_order(&self, now: Time, quantum: Option<Time>) -> Vec<(Key, JobId, bool)> {
        let mut out: Vec<(Key, JobId, bool)> = Vec::with_capacity(self.queue.len() + self.running.len());
        let mut per_user: BTreeMap<u32, VecDeque<(JobId, Time, bool)>> = BTreeMap::new();
        // Runners whose slice is over, per user, in (start, id) order: they queue behind the
        // user's waiting jobs.
        let mut expired: BTreeMap<u32, Vec<(JobId, Time, bool)>> = BTreeMap::new();
        let mut next = 0i64;
        let mut push = |out: &mut Vec<(Key, JobId, bool)>, id: JobId, running: bool| {
            out.push(([1, next, 0, 0, 0], id, running));
            next += 1;
        };
        if let Some(q) = quantum {
            let mut inside: Vec<&crate::scheduler::Running> =
                self.running.values().filter(|r| now - r.start < q).collect();
            inside.sort_by_key(|r| (r.start, r.req.id));
            for r in inside {
                push(&mut out, r.req.id, true);
            }
            let mut over: Vec<&crate::scheduler::Running> =
                self.running.values().filter(|r| now - r.start >= q).collect();
            over.sort_by_key(|r| (r.start, r.req.id));
            for r in over {
                expired.entry(r.req.user).or_default().push((r.req.id, r.start, true));
            }
        }
        for req in self.queue.values() {
            if self.policy.max_wait.is_some_and(|w| self.total_wait(req, now, false) >= w) {
                push(&mut out, req.id, false);
            } else {
                per_user.entry(req.user).or_default().push_back((req.id, req.submit, false));
            }
        }
        // Waiting jobs (in (submit, id) order: the queue's order under `rr`) before a user's
        // own expired runners: a slice that is over goes behind.
        for (u, runners) in expired {
            per_user.entry(u).or_default().extend(runners);
        }
        let mut heap: BinaryHeap<Reverse<(u64, Time, u32)>> = per_user
            .iter()
            .filter_map(|(&u, q)| q.front().map(|&(_, t, _)| Reverse((self.accounts.last_turn(u), t, u))))
            .collect();
        let mut turn = self.accounts.turns() + 1;
        while let Some(Reverse((_, _, u))) = heap.pop() {
            let q = per_user.get_mut(&u).expect("user has jobs");
            let (id, _, running) = q.pop_front().expect("non-empty");
            push(&mut out, id, running);
            if let Some(&(_, t, _)) = q.front() {
                heap.push(Reverse((turn, t, u)));
                turn += 1;
            }
        }
        out
    }

    /// `fair`'s order for a pass: jobs past `+maxwait` first (oldest first); then, repeatedly,
    /// the oldest waiting job of the owner holding the least (running, plus those ahead in this
    /// order) divided by its share; ties by submit. What an owner holds is its GPUs, or with
    /// `measure=drf` the largest of its shares of the cluster's GPUs, CPUs and memory
    /// (dominant resource fairness, counting the resources the nodes model). Running jobs are
    /// counted once per pass.
    /// The order is produced lazily: a pass that stops early (the cluster full) merges only
    /// the owners' queues as far as it walks.
    fn fair_order(&self, fp: FairParams, now: Time) -> impl Iterator<Item = &JobReq> + '_ {
        let by = fp.by;
        let owner = move |r: &JobReq| match by {
            FairBy::User => r.user,
            FairBy::Group => r.group,
        };
        let q = &self.limits.q;
        let weight = move |r: &JobReq| match by {
            FairBy::User => q.weight(r.user, r.group),
            FairBy::Group => q.group_weight(r.group),
        };
        let (cpus, mem) = self.cap.total_cpus_mem();
        let gpus = self.cap.total().max(1) as f64;
        let measure = move |h: (u64, u64, u64)| -> f64 {
            if !fp.drf {
                return h.0 as f64;
            }
            let mut d = h.0 as f64 / gpus;
            if cpus > 0 {
                d = d.max(h.1 as f64 / cpus as f64);
            }
            if mem > 0 {
                d = d.max(h.2 as f64 / mem as f64);
            }
            d
        };
        let add = |h: &mut (u64, u64, u64), r: &JobReq| {
            h.0 += r.gpus as u64;
            h.1 += r.cpus as u64;
            h.2 += r.mem_mib;
        };
        let mut held: HashMap<u32, (u64, u64, u64)> = HashMap::default();
        for r in self.running.values() {
            add(held.entry(owner(&r.req)).or_default(), &r.req);
        }
        let mut order = Vec::new();
        // The queue iterates by (submit, id) under dynamic orders. Each owner's jobs go to a
        // slot of their own (one cheap id-hash lookup per job: this loop is the pass's cost at
        // 100,000 waiting jobs when nothing lets it stop early), with a cursor into it.
        let mut slot_of: HashMap<u32, usize> = HashMap::default();
        let mut slots: Vec<(u32, Vec<&JobReq>, usize)> = Vec::new();
        let max_wait = self.policy.max_wait;
        for req in self.queue.values() {
            if max_wait.is_some_and(|w| self.total_wait(req, now, false) >= w) {
                order.push(req);
            } else {
                let o = owner(req);
                let i = *slot_of.entry(o).or_insert_with(|| {
                    slots.push((o, Vec::new(), 0));
                    slots.len() - 1
                });
                slots[i].1.push(req);
            }
        }
        let key = move |h: (u64, u64, u64), r: &JobReq| ord_f64(measure(h) / weight(r));
        // Every entry differs (job ids are unique), so the merge does not depend on the slots'
        // order.
        let mut heap: BinaryHeap<Reverse<(i64, Time, JobId, usize)>> = slots
            .iter()
            .enumerate()
            .map(|(i, (o, q, _))| {
                let r = q[0];
                Reverse((key(held.get(o).copied().unwrap_or_default(), r), r.submit, r.id, i))
            })
            .collect();
        // Jobs past `max_wait` first, then the owners' queues merged by what each holds.
        order.into_iter().chain(std::iter::from_fn(move || {
            let Reverse((_, _, _, i)) = heap.pop()?;
            let (o, q, at) = &mut slots[i];
            let req = q[*at];
            *at += 1;
            let h = held.entry(*o).or_default();
            add(h, req);
            if let Some(&next) = q.get(*at) {
                heap.push(Reverse((key(*h, next), next.submit, next.id, i)));
            }
            Some(req)
        }))
    }

    /// Accounting at submit: `priority` counts the user as seen.
    pub(crate) fn account_submit(&mut self, req: &JobReq, now: Time) {
        if matches!(self.policy.order, Order::Priority(_)) {
            self.accounts
                .usage
                .entry(req.user)
                .or_insert(Usage { value: 0.0, as_of: now, running: 0, group: req.group })
                .group = req.group;
        }
    }

    /// Accounting at a start: `priority` accrues the user's usage from now on.
    pub(crate) fn account_start(&mut self, req: &JobReq, now: Time) {
        if let Order::Rr { .. } = &self.policy.order {
            self.accounts.turns += 1;
            self.accounts.turn_of.insert(req.user, self.accounts.turns);
        }
        if let Order::Priority(pp) = &self.policy.order {
            let u = self.accounts.usage.entry(req.user).or_insert(Usage {
                value: 0.0,
                as_of: now,
                running: 0,
                group: req.group,
            });
            u.advance(now, pp.half_life);
            u.running += req.gpus as u64;
        }
    }

    /// Accounting when a running job stops (preempted, or finished with `served` GPU-ms).
    pub(crate) fn account_stop(&mut self, req: &JobReq, now: Time, served: Option<i64>) {
        match &self.policy.order {
            Order::Priority(pp) => {
                if let Some(u) = self.accounts.usage.get_mut(&req.user) {
                    u.advance(now, pp.half_life);
                    u.running = u.running.saturating_sub(req.gpus as u64);
                }
            }
            Order::Qssf => {
                if let Some(s) = served {
                    let a = &mut self.accounts;
                    for acc in [a.by_user.entry(req.user).or_default(), a.by_group.entry(req.group).or_default()] {
                        acc.0 += s as i128;
                        acc.1 += 1;
                    }
                    a.all.0 += s as i128;
                    a.all.1 += 1;
                }
            }
            _ => {}
        }
    }

    /// The next instant at which some key changes with no event: a LAS threshold crossing, a
    /// starvation promotion or a `+maxwait` guard.
    fn next_wake(&self, now: Time, plan: &Plan) -> Option<Time> {
        let mut wake: Option<Time> = None;
        let mut at = |t: Time| {
            if t > now && t < Time::MAX {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        if self.policy.max_wait.is_some() {
            if let Some(&(t, _)) = self.wait_due.range((now + 1, JobId(0))..).next() {
                at(t);
            }
        }
        if let Some(lp) = self.tiresias_params() {
            if let Some(t) = self.tiresias_wake(now, plan, lp) {
                at(t);
            }
            return wake;
        }
        let lp = match &self.policy.order {
            Order::Las(lp) => Some(lp.clone()),
            Order::Gittins(gp) => Some(LasParams { thresholds: gittins_queues(gp), ..LasParams::default() }),
            _ => None,
        };
        if let Some(lp) = lp {
            // When the next threshold is crossed by a job that runs after this plan: one
            // running now, or one the plan starts.
            let crossing = |id: JobId, gpus: u32| {
                let (_, attained, p) = self.served(id, now);
                let a = attained - p.las_base.0;
                lp.thresholds.iter().find(|&&t| t > a).map(|&t| {
                    let g = gpus.max(1) as i64;
                    now + (t - a + g - 1) / g
                })
            };
            if self.run_keys_stored() {
                // Stored running keys hold until their job's next crossing.
                if let Some(&(t, _)) = self.run_expiry.range((now + 1, JobId(0))..).next() {
                    at(t);
                }
                for &(_, id) in self.run_expiry.range(..=(now, JobId(u32::MAX))) {
                    if let Some(t) = crossing(id, self.running[&id].req.gpus) {
                        at(t);
                    }
                }
            } else {
                for r in self.running.values() {
                    if let Some(t) = crossing(r.req.id, r.req.gpus) {
                        at(t);
                    }
                }
            }
            for st in &plan.starts {
                if let Some(t) = crossing(st.job, st.alloc.gpus()) {
                    at(t);
                }
            }
            if self.promote_indexed() {
                if let Some(&(t, _)) = self.promo_wake.range((now + 1, JobId(0))..).next() {
                    at(t);
                }
            }
        }
        wake
    }

    /// Scheduling under a dynamic order: sort by the key at `now`; non-preemptive orders then
    /// apply their backfill mode to that order, preemptive ones choose who runs.
    pub(crate) fn schedule_dynamic(&self, now: Time, explain: bool) -> Plan {
        // No order and no backfill can start a job, and a non-preemptive pass has nothing else
        // to decide: skip keying and sorting the whole queue. No wake either: what could start
        // only changes with an event, and every event brings a pass. The explaining pass says
        // why each job waits, and wakes the same (none).
        let stuck = !self.policy.order.preemptive() && self.nothing_can_start();
        if stuck && !explain {
            return Plan::default();
        }
        let mut plan = self.schedule_dynamic_keyed(now, explain);
        if stuck {
            plan.wake_at = None;
        }
        plan
    }

    /// [`Scheduler::schedule_dynamic`] once it is known that something may start (or the pass
    /// explains).
    fn schedule_dynamic_keyed(&self, now: Time, explain: bool) -> Plan {
        let preemptive = self.policy.order.preemptive();
        if let Some(mut plan) =
            self.select_sorted_pooled(now, explain).or_else(|| self.select_sorted_pools(now, explain))
        {
            plan.wake_at = self.next_wake(now, &plan);
            return plan;
        }
        if preemptive && !explain && self.waiting_keys_static() && !self.cap.is_detailed() && !self.limits.active() {
            // Waiting jobs are kept sorted between passes: merge them with the running jobs
            // (at most one per GPU) and stop once the cluster is full.
            // Running jobs are kept sorted too (see `run_key`): only those whose key has moved
            // since it was stored (a LAS threshold crossed) are keyed afresh.
            if self.none_ranks_in(now) {
                let mut plan = Plan::default();
                plan.wake_at = self.next_wake(now, &plan);
                return plan;
            }
            let bound = Cell::new(u64::MAX);
            let merged = || {
                GroupMerge::new(self.stored_running(now), self.dyn_wait.iter().map(|(&g, set)| (g, set.iter())), &bound)
            };
            let mut plan = self.select_preemptive(now, merged, false, Some(&bound), None);
            plan.wake_at = self.next_wake(now, &plan);
            return plan;
        }
        if let Order::Rr { quantum } = self.policy.order {
            let keyed = self.rr_order(now, quantum);
            let mut plan = if preemptive {
                self.select_preemptive(now, || keyed.iter().copied(), explain, None, None)
            } else {
                self.plan_in_order(now, explain, keyed.iter().map(|k| &self.queue[&(self.waiting[&k.1], k.1)]))
            };
            // With a quantum, decide again when the next running slice ends.
            // (Including the jobs this plan starts, whose slices begin now.)
            let slice_end = quantum.and_then(|q| {
                let kept = self.running.values().filter(|r| !plan.preempt.contains(&r.req.id)).map(|r| r.start + q);
                kept.chain(plan.starts.iter().map(|_| now + q)).filter(|&t| t > now).min()
            });
            plan.wake_at = match (self.next_wake(now, &plan), slice_end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return plan;
        }
        if let (false, Order::Fair(fp)) = (preemptive, &self.policy.order) {
            let order = self.fair_order(*fp, now);
            let mut plan = self.plan_in_order(now, explain, order);
            plan.wake_at = self.next_wake(now, &plan);
            return plan;
        }
        if let (false, false, Some(w)) = (preemptive, explain, self.policy.max_wait) {
            if self.policy.order.is_static() {
                // A static order with the starvation guard: the jobs past the guard first,
                // oldest first (key `[0, submit]`, then id), then the others in queue order (key
                // `[1, static key]`), both read lazily: no job keyed, nothing sorted. A
                // non-preemptive job never has run time before it starts, so its guard falls due
                // at `submit + w` and `wait_due` holds the overdue ones in (submit, id) order.
                // The explaining pass takes the keyed path below, and the property tests compare.
                let rest = self.queue.values().filter(move |r| now - r.submit < w);
                let mut plan = self.plan_in_order(now, explain, self.past_guard(now).chain(rest));
                plan.wake_at = self.next_wake(now, &plan);
                return plan;
            }
        }
        if let (false, false, Order::Priority(_) | Order::Qssf) = (preemptive, explain, &self.policy.order) {
            if !matches!(&self.policy.order, Order::Priority(pp) if pp.age < 0.0) {
                // Within one (user, GPUs, static priority) class every term of the multifactor
                // priority is the same but age, which falls with the submit time (and f64
                // arithmetic keeps that order), so the class's key order is its (submit, id)
                // order at any instant; within one (user, group) class `qssf`'s prediction is
                // the same, and its key goes by submit next. So merge the classes lazily,
                // keying only their heads, as the plain pass would sort them (key, then id).
                // The explaining pass sorts everything (below) and the property tests compare.
                // With `+maxwait` the jobs past the guard come first, in (submit, id) order
                // from the guard's index (`wait_due`: a waiting job never ran, so it is due at
                // `submit + w`), and each class starts after them: they are its oldest jobs.
                let ctx = self.pass_ctx(now);
                let fresh_from = self.policy.max_wait.map_or(Time::MIN, |w| now.saturating_sub(w).saturating_add(1));
                let mut iters = Vec::with_capacity(self.by_class.len());
                let mut heap = BinaryHeap::with_capacity(self.by_class.len());
                for class in self.by_class.values() {
                    let mut it = class.range((fresh_from, JobId(0))..).map(|(_, r)| r);
                    if let Some(r) = it.next() {
                        heap.push(Reverse((self.key_in(&ctx, r, now, false), r.id, iters.len())));
                        iters.push((it, r));
                    }
                }
                let order = std::iter::from_fn(move || {
                    let Reverse((_, _, c)) = heap.pop()?;
                    let (it, head) = &mut iters[c];
                    let r = *head;
                    if let Some(next) = it.next() {
                        *head = next;
                        heap.push(Reverse((self.key_in(&ctx, next, now, false), next.id, c)));
                    }
                    Some(r)
                });
                let mut plan = self.plan_in_order(now, explain, self.past_guard(now).chain(order));
                plan.wake_at = self.next_wake(now, &plan);
                return plan;
            }
        }
        let ctx = self.pass_ctx(now);
        let mut plan = if preemptive {
            // Unless explaining, the ranking stops once the cluster is full and every running
            // job is ranked, so it usually needs only the first jobs in key order: a heap
            // (built in linear time) yields the waiting ones lazily instead of a sort of
            // everything, merged with the running ones, sorted (at most one per GPU). Once the
            // ranking state is full no waiting job can start, and `select_preemptive` says so
            // through `full`: from then on only the running jobs left are yielded, in the same
            // order, instead of popping the waiting ones between them.
            let full = Cell::new(false);
            if !explain && (self.guard_indexed() || self.promote_indexed()) {
                // `srtf+maxwait`, `las+maxwait`, `las` with promotion: no waiting job keyed.
                // The jobs past the guard (key `[0, submit]`) come first: those that never ran
                // in due order (due = submit + guard, so submit order), merged with those that
                // ran before (few), sorted. Then the promoted ones by their key (`promoted`,
                // and those promoted since `advance` last ran, found by their instant, keyed
                // and sorted: usually none), merged with the others from `dyn_wait`, kept
                // sorted by their keys without the guard; both skip the jobs past the guard,
                // and `dyn_wait` those promoted since `advance`.
                let guard = self.guard_indexed();
                let overdue_now = move |id: &JobId| guard && self.due_of.get(id).is_some_and(|&d| d <= now);
                let w = self.policy.max_wait.unwrap_or(0);
                let mut resumed: Vec<(Key, JobId, bool)> = self
                    .due_resumed
                    .range(..=(now, JobId(u32::MAX)))
                    .map(|&(_, id)| ([0, self.queue_req(id).submit, 0, 0, 0], id, false))
                    .collect();
                resumed.sort_unstable();
                let mut late: Vec<(Key, JobId, bool)> = self
                    .promoted_since_advance(now)
                    .filter(|id| !overdue_now(id) && !self.promoted.contains(&(self.dyn_key[id], *id)))
                    .map(|id| (self.unguarded_key(self.queue_req(id), now, false), id, false))
                    .collect();
                late.sort_unstable();
                let skip_late = !late.is_empty();
                let unbounded = Cell::new(u64::MAX);
                // Built afresh for each ranking pass (`select_preemptive` may make two).
                let waiting = || {
                    let fresh = self
                        .due_fresh
                        .range(..=(now, JobId(u32::MAX)))
                        .map(move |&(due, id)| ([0, due - w, 0, 0, 0], id, false));
                    let overdue = Merge2 { a: fresh.peekable(), b: resumed.iter().copied().peekable() };
                    let promoted = Merge2 {
                        a: self
                            .promoted
                            .iter()
                            .filter(move |(_, id)| !overdue_now(id))
                            .map(|&(k, id)| (k, id, false))
                            .peekable(),
                        b: late.iter().copied().peekable(),
                    };
                    let groups = self.dyn_wait.iter().map(move |(&g, set)| {
                        (
                            g,
                            set.iter().filter(move |(_, id)| {
                                !overdue_now(id)
                                    && (!skip_late || self.promo_of.get(id).is_none_or(|&(at, _)| at > now))
                            }),
                        )
                    });
                    let others = GroupMerge::new(std::iter::empty(), groups, &unbounded);
                    let rest = Merge2 { a: promoted.peekable(), b: others.peekable() };
                    Merge2 { a: overdue.peekable(), b: rest.peekable() }
                };
                if self.run_keys_stored() {
                    // `las+maxwait`, `las` with promotion: running jobs in their stored order,
                    // those whose key moved since it was stored keyed afresh (see the static
                    // path above).
                    self.rank_merged(now, waiting, || self.stored_running(now), explain, &full)
                } else {
                    let running = self.running_keyed(&ctx, now);
                    self.rank_merged(now, waiting, || running.iter().copied(), explain, &full)
                }
            } else {
                let running = self.running_keyed(&ctx, now);
                let waiting = || {
                    let mut heap: BinaryHeap<Reverse<(Key, JobId, bool)>> =
                        self.queue.values().map(|r| Reverse((self.key_in(&ctx, r, now, false), r.id, false))).collect();
                    std::iter::from_fn(move || heap.pop().map(|Reverse(k)| k))
                };
                self.rank_merged(now, waiting, || running.iter().copied(), explain, &full)
            }
        } else {
            // Each job's key with its position in `reqs`, so the plan walks the jobs themselves
            // (no map lookups per job and pass).
            let reqs: Vec<&JobReq> = self.queue.values().collect();
            let mut keyed: Vec<(Key, JobId, usize)> =
                reqs.iter().enumerate().map(|(i, r)| (self.key_in(&ctx, r, now, false), r.id, i)).collect();
            if self.policy.backfill == Backfill::None {
                // A strict order stops at the first job that does not fit: take jobs lazily
                // from a heap rather than sorting the whole queue.
                let mut heap: BinaryHeap<Reverse<(Key, JobId, usize)>> = keyed.into_iter().map(Reverse).collect();
                self.plan_in_order(now, explain, std::iter::from_fn(move || heap.pop().map(|Reverse(k)| reqs[k.2])))
            } else {
                keyed.sort_unstable_by_key(|k| (k.0, k.1));
                self.plan_in_order(now, explain, keyed.iter().map(|k| reqs[k.2]))
            }
        };
        plan.wake_at = self.next_wake(now, &plan);
        plan
    }

    /// Running jobs sorted by key, from `run_keys` (see `run_keys_stored`): only those whose
    /// stored key has stopped holding by `now` (a LAS threshold crossed) are keyed afresh.
    fn stored_running(&self, now: Time) -> impl Iterator<Item = (Key, JobId, bool)> + '_ {
        let mut moved: Vec<(Key, JobId, bool)> = self
            .run_expiry
            .range(..=(now, JobId(u32::MAX)))
            .map(|&(_, id)| (self.key(&self.running[&id].req, now, true), id, true))
            .collect();
        moved.sort_unstable_by_key(|k| (k.0, k.1));
        let moved_ids: Vec<JobId> = moved.iter().map(|m| m.1).collect();
        let kept = self
            .run_keys
            .iter()
            .filter(move |((_, id), _)| !moved_ids.contains(id))
            .map(move |((k, id), _)| (self.actual_run_key(k, now), id, true));
        Merge2 { a: kept.peekable(), b: moved.into_iter().peekable() }
    }

    /// Non-preemptive orders with `+maxwait`: the waiting jobs past the guard at `now`, in
    /// (submit, id) order (a waiting job never ran, so it is due at `submit + w`; `wait_due`
    /// is empty without the guard).
    fn past_guard(&self, now: Time) -> impl Iterator<Item = &JobReq> + '_ {
        self.wait_due.range(..=(now, JobId(u32::MAX))).map(|&(_, id)| self.queue_req(id))
    }

    /// A preemptive pass over the waiting and the running jobs, each given in key order,
    /// merged (`merge_ranked`: once `full` is set only the running jobs are still yielded).
    fn rank_merged<W: Iterator<Item = (Key, JobId, bool)>, R: Iterator<Item = (Key, JobId, bool)>>(
        &self,
        now: Time,
        waiting: impl Fn() -> W,
        running: impl Fn() -> R,
        explain: bool,
        full: &Cell<bool>,
    ) -> Plan {
        self.select_preemptive(now, || merge_ranked(waiting(), running(), full), explain, None, Some(full))
    }

    /// Every running job keyed at `now`, sorted.
    fn running_keyed(&self, ctx: &PassCtx, now: Time) -> Vec<(Key, JobId, bool)> {
        let mut running: Vec<(Key, JobId, bool)> =
            self.running.values().map(|r| (self.key_in(ctx, &r.req, now, true), r.req.id, true)).collect();
        running.sort_unstable();
        running
    }

    /// Whether even the smallest waiting job asks for more GPUs than are free in the whole
    /// cluster, so that no job can start under any placement (GPU counts only; a capacity that
    /// tracks shares, CPUs or memory is not judged here).
    fn nothing_can_start(&self) -> bool {
        if self.cap.is_detailed() {
            return false;
        }
        self.buckets.keys().next().is_none_or(|&(g, ..)| g as u64 > self.cap.total_free())
    }

    /// A non-preemptive order's plan: waiting jobs in `order`, under the policy's backfill mode.
    fn plan_in_order<'a>(&'a self, now: Time, explain: bool, order: impl IntoIterator<Item = &'a JobReq>) -> Plan {
        match self.policy.backfill {
            Backfill::Conservative => self.schedule_conservative_afresh(now, explain, order),
            _ => self.schedule_in_order(now, explain, order, false),
        }
    }

    /// Preemptive orders whose waiting keys are kept sorted (`srtf`, `las` without promotion)
    /// under pooled placement, and under node-level placement where the general pass ranks by
    /// counts first (one-GPU nodes, [`Scheduler::ranks_by_counts`]): the same decisions as the
    /// general pass (tests compare them after every pass), but running jobs are ranked in runs.
    /// Between two waiting jobs in key order, the running jobs whose GPUs all still fit are
    /// kept with one sum over `run_keys`; only from the first that does not fit is each one
    /// looked at. A pass so costs about the waiting jobs it considers and the running jobs it
    /// preempts, not every running job. `None` where it does not apply (explaining, other
    /// consolidated or topology clusters, detailed placement, a restart-protection time, stored
    /// keys that moved since the last commit), and where a chosen job cannot be placed beside
    /// the running jobs that stay (the general pass then ranks from the empty cluster).
    fn select_sorted_pooled(&self, now: Time, explain: bool) -> Option<Plan> {
        if explain || !self.ranks_in_runs(now) || !(self.cap.counts_only() || self.ranks_by_counts()) {
            return None;
        }
        if self.run_keys.len() != self.running.len() {
            // Not every running job is in the index (not expected with static keys).
            return None;
        }
        let mut plan = Plan::default();
        let mut free = self.cap.total();
        let held = self.cap.total() - self.cap.total_free();
        // Keeps the running jobs from where it stopped (`base`: the GPUs below) up to `hi`
        // (stored keys; `None`: past the last) that fit, in key order, and preempts the others.
        let run_range = |base: u64, hi: Option<&(Key, JobId)>, free: &mut u64, out: &mut Vec<JobId>| {
            keep_in_runs(&self.run_keys, base, hi, held, free, |k| out.push(k.1))
        };
        let bound = Cell::new(free);
        let waiting =
            GroupMerge::new(std::iter::empty(), self.dyn_wait.iter().map(|(&g, set)| (g, set.iter())), &bound);
        let mut chosen = Vec::new();
        let mut base = 0;
        for (k, id, _) in waiting {
            let hi = (self.stored_run_key(k, now), id);
            base = run_range(base, Some(&hi), &mut free, &mut plan.preempt);
            let req = &self.queue[&(self.waiting[&id], id)];
            if req.gpus as u64 <= free {
                free -= req.gpus as u64;
                chosen.push(req);
            }
            bound.set(free);
        }
        run_range(base, None, &mut free, &mut plan.preempt);
        let mut real = self.what_if();
        for id in &plan.preempt {
            real.give(&self.running[id].alloc);
        }
        for req in chosen {
            // Pooled placement always holds what the count allows; node-level placement may
            // not, and the general pass then ranks again from the empty cluster.
            let d = if self.cap.counts_only() { crate::capacity::Demand::gpus(req.gpus) } else { req.demand() };
            let a = real.place_for(d)?;
            real.take(&a);
            plan.starts.push(Start { job: req.id, alloc: a });
        }
        Some(plan)
    }

    /// What every pass that ranks running jobs in runs of `run_keys` needs, whatever the
    /// placement: a preemptive order whose waiting keys stay fixed, no guard protecting running
    /// jobs, no stored key moved by `now` (`run_expiry`), no quotas or limits.
    fn ranks_in_runs(&self, now: Time) -> bool {
        let stale = self.run_expiry.range(..=(now, JobId(u32::MAX))).next().is_some();
        self.policy.order.preemptive()
            && self.waiting_keys_static()
            && !self.guards_runs()
            && !stale
            && !self.limits.active()
    }

    /// Node-level placement (consolidated, topology; not detailed): whether the ranking pass
    /// of [`Scheduler::select_preemptive`] would choose no waiting job, and so preempt none,
    /// found by counting GPUs as [`Scheduler::select_sorted_pooled`] does, without the O(running
    /// jobs) what-if state. The pass ranks from the empty cluster: until it chooses a waiting
    /// job it keeps every running job (their GPUs are disjoint), so when it reaches a waiting
    /// job the ranking state has the cluster's GPUs less those of the running jobs ranked
    /// before it free, and a job needs at least its GPUs free to be placed there. If no waiting
    /// job has that many at its rank, the pass changes nothing. `false` where it does not
    /// apply (as the pooled path's conditions) or where some waiting job may be placed: the
    /// full pass decides then. Most passes on a busy cluster end here (measured on the
    /// 20,000-job `online` workload on 25,000 one-GPU nodes under `srtf`: 94% of them).
    fn none_ranks_in(&self, now: Time) -> bool {
        if !self.ranks_in_runs(now) || self.cap.counts_only() || self.cap.is_detailed() {
            return false;
        }
        if self.run_keys.len() != self.running.len() {
            // Not every running job is in the index (not expected with static keys): the full
            // pass decides.
            return false;
        }
        let held = self.run_keys.total();
        let total = self.cap.total_free() + held;
        let bound = Cell::new(total);
        let waiting =
            GroupMerge::new(std::iter::empty(), self.dyn_wait.iter().map(|(&g, set)| (g, set.iter())), &bound);
        for (k, id, _) in waiting {
            let hi = (self.stored_run_key(k, now), id);
            let free = total - self.run_keys.sum_below(&hi);
            let req = &self.queue[&(self.waiting[&id], id)];
            if req.gpus as u64 <= free {
                return false;
            }
            bound.set(free);
        }
        true
    }

    /// [`Scheduler::select_sorted_pooled`] on a cluster of several pools (GPU models, features)
    /// under pooled placement: the same decisions as the general pass. Each running job holds
    /// GPUs of one pool and competes only with what else takes that pool, so each pool's
    /// running jobs are ranked in runs against that pool's free GPUs (`run_keys_pool`), each
    /// pool brought up to a waiting job's key only when that job looks at it; a waiting job
    /// takes the first of its pools, in pick order, with room. `None` where it does not apply
    /// (as the one-pool path, and while a running job holds GPUs of several pools).
    fn select_sorted_pools(&self, now: Time, explain: bool) -> Option<Plan> {
        if explain
            || !self.ranks_in_runs(now)
            || self.run_keys_pool.is_empty()
            || self.run_spanning > 0
            || self.cap.placement() != crate::capacity::Placement::Pooled
            || self.cap.is_detailed()
        {
            return None;
        }
        let n = self.run_keys_pool.len();
        // Each pool's GPUs not yet kept or chosen (shared with the source of waiting jobs, which
        // drops a group once its GPUs exceed every one of its pools').
        let free: Vec<Cell<u64>> = (0..n).map(|p| Cell::new(self.cap.pool_total(p))).collect();
        let held: Vec<u64> = (0..n).map(|p| self.cap.pool_total(p) - self.cap.pool_free(p)).collect();
        // The GPUs of each pool's running jobs ranked so far (below where it stopped).
        let mut done: Vec<u64> = vec![0; n];
        let mut preempt: Vec<(Key, JobId)> = Vec::new();
        // Ranks pool `p`'s running jobs from where it stopped up to `hi` (`None`: past the
        // last): those whose GPUs still fit are kept, the others preempted.
        let mut advance = |p: usize, hi: Option<&(Key, JobId)>, free: &[Cell<u64>], preempt: &mut Vec<(Key, JobId)>| {
            let mut f = free[p].get();
            done[p] = keep_in_runs(&self.run_keys_pool[p], done[p], hi, held[p], &mut f, |k| preempt.push(k));
            free[p].set(f);
        };
        // No pool has more free GPUs than its count so far (ranking only takes GPUs away).
        let unbounded = Cell::new(u64::MAX);
        let waiting =
            GroupMerge::new(std::iter::empty(), self.dyn_wait.iter().map(|(&g, set)| (g, set.iter())), &unbounded)
                .with_pools(&free);
        let mut chosen = Vec::new();
        for (k, id, _) in waiting {
            let hi = (self.stored_run_key(k, now), id);
            let req = &self.queue[&(self.waiting[&id], id)];
            for p in self.cap.candidates(req.demand()) {
                advance(p, Some(&hi), &free, &mut preempt);
                if req.gpus as u64 <= free[p].get() {
                    free[p].set(free[p].get() - req.gpus as u64);
                    chosen.push(req);
                    break;
                }
            }
        }
        for p in 0..n {
            advance(p, None, &free, &mut preempt);
        }
        // In key order, as the general pass ranks them.
        preempt.sort_unstable();
        let mut plan = Plan { preempt: preempt.into_iter().map(|k| k.1).collect(), ..Plan::default() };
        let mut real = self.what_if();
        for id in &plan.preempt {
            real.give(&self.running[id].alloc);
        }
        for req in chosen {
            if let Some(a) = real.place_for(req.demand()) {
                real.take(&a);
                plan.starts.push(Start { job: req.id, alloc: a });
            }
        }
        Some(plan)
    }

    /// Greedy by priority (as Tiresias): each job that fits runs, one that does not is skipped;
    /// running jobs left out are preempted. `keyed` gives the jobs in key order, afresh each time
    /// it is called. `bound`, when given, is told the GPUs left after each job, so the source can
    /// skip jobs that could not fit; `full` that the ranking state has no GPU left.
    ///
    /// Node-level placement on one pool of one-GPU nodes (consolidated, topology; not detailed;
    /// [`Scheduler::ranks_by_counts`]) ranks by counts first, as pooled placement does and as
    /// the Tiresias and Lucid simulators do: running jobs
    /// and waiting ones are taken in key order against the cluster's GPU count, so the running
    /// jobs preempted are the lowest-ranked ones that no longer fit; the chosen waiting jobs
    /// are then placed beside the running jobs that stay, in key order. Only where one of them
    /// cannot be placed so (its GPUs are free, but not on the nodes its placement needs) is the
    /// pass made again from the empty cluster ([`Scheduler::rank_pass`] with `by_counts` false),
    /// which may move running jobs to make room for it.
    fn select_preemptive<I: Iterator<Item = (Key, JobId, bool)>>(
        &self,
        now: Time,
        keyed: impl Fn() -> I,
        explain: bool,
        bound: Option<&Cell<u64>>,
        full: Option<&Cell<bool>>,
    ) -> Plan {
        if self.ranks_by_counts() {
            let (b0, f0) = (bound.map(Cell::get), full.map(Cell::get));
            if let Some(plan) = self.rank_pass(now, keyed(), explain, bound, full, true) {
                return plan;
            }
            // The source reads these to skip jobs: start the second pass as the first began.
            if let (Some(b), Some(v)) = (bound, b0) {
                b.set(v);
            }
            if let (Some(f), Some(v)) = (full, f0) {
                f.set(v);
            }
        }
        self.rank_pass(now, keyed(), explain, bound, full, false).expect("a pass from the empty cluster always plans")
    }

    /// Whether preemptive passes rank by GPU counts first (see [`Scheduler::select_preemptive`]):
    /// node-level placement on a cluster of one pool whose nodes have one GPU each, not
    /// detailed. There a job cannot be packed within a node, and ranking from the empty cluster
    /// only moved running jobs from node to node: on 20,000 `online` jobs on 25,000 one-GPU
    /// nodes under `srtf`, 731,812 preemptions, against 1,567 counting first (docs/POLICIES.md).
    /// On larger nodes it keeps whole nodes free for gangs, and stays.
    fn ranks_by_counts(&self) -> bool {
        self.cap.is_single() && !self.cap.counts_only() && !self.cap.is_detailed() && self.cap.max_node_gpus() <= 1
    }

    /// One ranking pass of [`Scheduler::select_preemptive`]. `by_counts`: rank against the GPU
    /// count, then place the chosen jobs on the real state less the preempted jobs; `None` if
    /// one of them cannot be placed there. Otherwise, on node-level placement, rank from the
    /// empty cluster: running jobs keep their GPUs if they are still free in the ranking state,
    /// waiting jobs chosen are placed on it, then placed for real in what is free once the
    /// preempted ones leave (pooled placement ranks against a count either way).
    fn rank_pass(
        &self,
        now: Time,
        keyed: impl Iterator<Item = (Key, JobId, bool)>,
        explain: bool,
        bound: Option<&Cell<u64>>,
        full: Option<&Cell<bool>>,
        by_counts: bool,
    ) -> Option<Plan> {
        let mut plan = Plan::default();
        let pooled = self.cap.counts_only() || by_counts;
        // Pooled placement and the counted pass rank against a single counter (cheap), and
        // place on real nodes afterwards.
        let mut virt = if pooled {
            crate::whatif::WhatIf::Owned(Pools::counter(self.cap.total(), self.cap.total()))
        } else if self.cap.is_detailed() {
            crate::whatif::WhatIf::Owned(self.cap.empty_like())
        } else {
            // The empty cluster: the real state with every running job's GPUs given back.
            let mut v = self.what_if();
            for r in self.running.values() {
                v.give(&r.alloc);
            }
            v
        };
        // Keeps a running job's GPUs in the ranking state if they are still free there.
        let keep = |virt: &mut Pools, a: &Allocation| {
            if pooled {
                let g = a.gpus();
                virt.total_free() >= g as u64 && {
                    virt.take_count(g);
                    true
                }
            } else {
                virt.take_what_if(a)
            }
        };
        // Copies: limits by model may have narrowed a chosen job's pools. The third part: where
        // the ranking counted it against limits by model (only with such limits).
        let by_model = self.limits.q.limits_models();
        let mut chosen: Vec<(JobReq, Option<Allocation>, Option<Allocation>)> = Vec::new();
        // Detailed clusters (shares, CPUs, memory) place on exact GPUs: a waiting job placed
        // on an empty ranking state could land on GPUs a lower-ranked running job holds and
        // preempt it for nothing. `beside` is the real state (every running job in place) with
        // the chosen waiting jobs added: a waiting job goes there when it fits beside every
        // running job, and only takes running jobs' GPUs when it fits nowhere else.
        let mut beside = self.cap.is_detailed().then(|| self.cap.clone());
        // A job that (re)started less than `min_run` ago keeps its GPUs whatever its rank, so
        // restarts that lose time cannot make jobs take turns forever without progress.
        // So does a job preempted `max_preemptions` times already.
        let pinned = |id: JobId| self.pinned(id, now);
        for (id, r) in &self.running {
            if pinned(*id) {
                let taken = keep(&mut virt, &r.alloc);
                debug_assert!(taken, "running jobs fit together");
            }
        }
        // Once the cluster is full and every running job has been ranked, no waiting job can
        // start (unless it needs no GPU), so the rest need not be looked at.
        // Quotas rank from the empty cluster too: kept running jobs and chosen waiting ones
        // count against their owner's limit in key order; a running job over it is preempted.
        let limited = self.limits.active();
        let mut used = crate::quota::PassUse::empty();
        for r in self.running.values().filter(|r| pinned(r.req.id)) {
            self.limits.take(&r.req, &r.alloc, &mut used);
        }
        let mut running_left = self.running.len();
        let gpu_less_waiting = self.buckets.range((0, 0, 0, 0)..(1, 0, 0, 0)).next().is_some();
        for (_, id, running) in keyed {
            if !explain && running_left == 0 && virt.total_free() == 0 && !gpu_less_waiting && !self.cap.is_detailed() {
                break;
            }
            if let Some(b) = bound {
                b.set(virt.total_free());
            }
            if let Some(f) = full {
                // Nothing left in the ranking state: a waiting job (none needs no GPU) cannot be
                // placed, so only the running jobs still to rank matter (each is preempted
                // unless pinned or GPU-less), in the same order.
                if !explain && virt.total_free() == 0 && !gpu_less_waiting && !self.cap.is_detailed() {
                    f.set(true);
                }
            }
            if running {
                running_left -= 1;
                if pinned(id) {
                    continue;
                }
                let r = &self.running[&id];
                let within = !limited || self.limits.keeps(&r.req, &r.alloc, &used);
                if within && keep(&mut virt, &r.alloc) {
                    self.limits.take(&r.req, &r.alloc, &mut used);
                    continue;
                }
                plan.preempt.push(id);
            } else {
                let req = &self.queue[&(self.waiting[&id], id)];
                let admitted = if limited {
                    let Some(r) = self.admitted(req, &used, &virt, explain, &mut plan) else { continue };
                    r
                } else {
                    std::borrow::Cow::Borrowed(req)
                };
                let req: &JobReq = &admitted;
                if let Some(b) = beside.as_mut() {
                    if let Some(a) = b.place_for(req.demand()).filter(|a| virt.can_take(a)) {
                        b.take(&a);
                        virt.take(&a);
                        self.limits.take(req, &a, &mut used);
                        let counted = by_model.then(|| a.clone());
                        chosen.push((*req, Some(a), counted));
                        continue;
                    }
                }
                match virt.place_for(req.demand()) {
                    Some(a) => {
                        virt.take(&a);
                        self.limits.take(req, &a, &mut used);
                        chosen.push((*req, None, by_model.then_some(a)));
                    }
                    None if explain => plan.waiting.push((id, Reason::Outranked { need: req.gpus })),
                    None => {}
                }
            }
        }
        drop(virt);
        let mut real = self.what_if();
        for id in &plan.preempt {
            real.give(&self.running[id].alloc);
        }
        // Limits by model: what the jobs that stay and those placed so far hold, so that a real
        // placement off the ranking's pools still keeps every owner within its limits.
        let mut real_used = by_model.then(|| {
            let gone: std::collections::HashSet<JobId> = plan.preempt.iter().copied().collect();
            let mut u = crate::quota::PassUse::empty();
            for r in self.running.values().filter(|r| !gone.contains(&r.req.id)) {
                self.limits.take(&r.req, &r.alloc, &mut u);
            }
            u
        });
        for (req, at, counted) in chosen {
            let mut got = at.filter(|a| real.can_take(a)).or_else(|| real.place_for(req.demand()));
            if let (Some(a), Some(c), Some(u)) = (&got, &counted, &real_used) {
                if !self.limits.keeps(&req, a, u) {
                    // Where the ranking counted it is within the limits.
                    got = real.place_for(Demand { pools: self.cap.pools_in(c), ..req.demand() });
                }
            }
            if let (Some(a), Some(u)) = (&got, real_used.as_mut()) {
                self.limits.take(&req, a, u);
            }
            match got {
                Some(a) => {
                    real.take(&a);
                    plan.starts.push(Start { job: req.id, alloc: a });
                }
                // Counted but not placeable beside the running jobs: rank from the empty cluster.
                None if by_counts => return None,
                None if explain => plan.waiting.push((req.id, crate::scheduler::blocked(&real, &req))),
                None => {}
            }
        }
        Some(plan)
    }

    /// Commits LAS bookkeeping when a job changes state at `now` (start, preemption): records
    /// the queue it is in and when it entered it, and applies a due starvation promotion.
    pub(crate) fn las_commit(&mut self, id: JobId, now: Time, starting: bool) {
        let lp = match &self.policy.order {
            // `compat=tiresias` keeps its own lists (`tiresias.rs`).
            Order::Las(lp) if lp.compat_tiresias => return,
            Order::Las(lp) => lp.clone(),
            Order::Gittins(gp) => LasParams { thresholds: gittins_queues(gp), ..LasParams::default() },
            _ => return,
        };
        let req = match (self.waiting.get(&id), self.running.get(&id)) {
            (Some(&k), _) => self.queue[&(k, id)],
            (None, Some(r)) => r.req,
            (None, None) => return,
        };
        let (q, entry) = self.las_queue(&lp, &req, now);
        let (executed, attained, _) = self.served(id, now);
        let Some(p) = self.progress.get_mut(&id) else { return };
        let q_recorded = lp.thresholds.partition_point(|&t| t <= p.attained - p.las_base.0);
        if starting {
            if q == 0 && q_recorded > 0 {
                // Promoted while it waited: its service so far no longer counts, and it joined
                // the first queue at the back when the promotion came due.
                p.las_base = (attained, executed);
                p.starved = 0;
                p.queue_entry = entry;
            } else if q > 0 {
                p.starved += now - p.waiting_since;
            }
        }
    }
}

/// Merges running jobs (sorted) with waiting jobs kept sorted per GPU count, in key order,
/// dropping every group whose GPU count exceeds `bound` (the GPUs still free: it only falls
/// during a pass, so a dropped group never comes back).
struct GroupMerge<'a, R: Iterator<Item = (Key, JobId, bool)>, G: Iterator<Item = &'a (Key, JobId)>> {
    running: std::iter::Peekable<R>,
    heap: BinaryHeap<Reverse<(Key, JobId, usize)>>,
    /// Each group's (GPUs, pools accepted) and its jobs.
    groups: Vec<((u32, u128), G)>,
    bound: &'a Cell<u64>,
    /// On a cluster of several pools, the most GPUs each pool may still give (a group is
    /// dropped once its GPUs exceed every one of its pools').
    pool_bound: Option<&'a [Cell<u64>]>,
}

impl<'a, R: Iterator<Item = (Key, JobId, bool)>, G: Iterator<Item = &'a (Key, JobId)>> GroupMerge<'a, R, G> {
    /// The merge of `running` with the `((GPU count, pools), sorted jobs)` groups.
    fn new(running: R, groups: impl Iterator<Item = ((u32, u128), G)>, bound: &'a Cell<u64>) -> Self {
        // Heapified once, from each group's first entry (entries are distinct: the order of
        // pops is the same as from pushes one by one).
        let lo = groups.size_hint().0;
        let (mut firsts, mut gs) = (Vec::with_capacity(lo), Vec::with_capacity(lo));
        for (g, mut it) in groups {
            if let Some(&(k, id)) = it.next() {
                firsts.push(Reverse((k, id, gs.len())));
                gs.push((g, it));
            }
        }
        GroupMerge { running: running.peekable(), heap: BinaryHeap::from(firsts), groups: gs, bound, pool_bound: None }
    }

    /// Also drops a group once its GPUs exceed what each of its pools may still give.
    fn with_pools(mut self, pool_bound: &'a [Cell<u64>]) -> Self {
        self.pool_bound = Some(pool_bound);
        self
    }
}

impl<'a, R: Iterator<Item = (Key, JobId, bool)>, G: Iterator<Item = &'a (Key, JobId)>> Iterator
    for GroupMerge<'a, R, G>
{
    type Item = (Key, JobId, bool);
    fn next(&mut self) -> Option<Self::Item> {
        while let Some(&Reverse((k, id, gi))) = self.heap.peek() {
            let (g, pools) = self.groups[gi].0;
            let too_big = g as u64 > self.bound.get()
                || self.pool_bound.is_some_and(|b| {
                    !b.iter().enumerate().any(|(p, f)| (pools == 0 || pools & (1u128 << p) != 0) && f.get() >= g as u64)
                });
            if too_big {
                self.heap.pop();
                continue;
            }
            if self.running.peek().is_some_and(|r| (r.0, r.1) < (k, id)) {
                return self.running.next();
            }
            self.heap.pop();
            if let Some(&(k2, id2)) = self.groups[gi].1.next() {
                self.heap.push(Reverse((k2, id2, gi)));
            }
            return Some((k, id, false));
        }
        self.running.next()
    }
}

/// Ranks the running jobs of `keys` (stored keys, with their GPUs) from where the last call
/// stopped (`base`: the GPUs of the entries below that point, 0 at first) up to `hi` (`None`:
/// past the last) against `free` GPUs, in key order: those whose GPUs still fit are kept
/// (taken from `free`), each other one is passed to `preempt`. `held`: the GPUs of all of
/// `keys`. Returns the GPUs of the entries below `hi` (the next call's `base`). A run that fits
/// whole costs one sum; only from the first that does not is each job looked at.
fn keep_in_runs(
    keys: &crate::sumset::SumSet<(Key, JobId)>,
    base: u64,
    hi: Option<&(Key, JobId)>,
    held: u64,
    free: &mut u64,
    mut preempt: impl FnMut((Key, JobId)),
) -> u64 {
    let top = hi.map_or(held, |k| keys.sum_below(k));
    if top - base <= *free {
        *free -= top - base;
        return top;
    }
    let (first, before) = keys.first_exceeding(base + *free).expect("the range holds more");
    *free -= before - base;
    for (k, g) in keys.iter_from(&first) {
        if hi.is_some_and(|h| k >= *h) {
            break;
        }
        if g as u64 <= *free {
            *free -= g as u64;
        } else {
            preempt(k);
        }
    }
    top
}

/// Merges waiting and running jobs, each sorted by (key, job), for `select_preemptive`; once
/// `full` is set, yields only the running jobs left.
fn merge_ranked<'a>(
    waiting: impl Iterator<Item = (Key, JobId, bool)> + 'a,
    running: impl Iterator<Item = (Key, JobId, bool)> + 'a,
    full: &'a Cell<bool>,
) -> impl Iterator<Item = (Key, JobId, bool)> + 'a {
    // Not `Merge2` with a flag: written out, the ranking passes run about a fifth faster
    // (measured on the Philly window: gittins 549 ms against 640 ms).
    let mut waiting = waiting.peekable();
    let mut running = running.peekable();
    std::iter::from_fn(move || {
        if full.get() {
            return running.next();
        }
        match (waiting.peek(), running.peek()) {
            (Some(w), Some(r)) if (w.0, w.1) > (r.0, r.1) => running.next(),
            (Some(_), _) => waiting.next(),
            (None, _) => running.next(),
        }
    })
}

/// Merges two iterators sorted by (key, job).
struct Merge2<A: Iterator<Item = (Key, JobId, bool)>, B: Iterator<Item = (Key, JobId, bool)>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = (Key, JobId, bool)>, B: Iterator<Item = (Key, JobId, bool)>> Iterator for Merge2<A, B> {
    type Item = (Key, JobId, bool);
    fn next(&mut self) -> Option<Self::Item> {
        let take_a = match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) => (x.0, x.1) <= (y.0, y.1),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_a {
            self.a.next()
        } else {
            self.b.next()
        }
    }
}

/// Gittins runs inside Tiresias's queues: one boundary per quantum, up to two.
fn gittins_queues(gp: &GittinsParams) -> Vec<i64> {
    // Tiresias's dlas-gpu-gittins uses the same queue limits as dlas-gpu (3,250 and 7,200
    // GPU-seconds); its quantum equals the first limit.
    vec![gp.quantum, gp.quantum * 7200 / 3250]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gittins_prefers_jobs_likely_to_finish_soon() {
        let mut h = History::default();
        for s in [10, 10, 10, 10, 1000, 1000] {
            h.record(s, 0);
        }
        // At 0 attained, 4 of 6 jobs finish within 20: high index. At 10 attained only the
        // 1000s remain, none finishing within 20: index 0.
        assert!(h.gittins(0, 20) > 0.0);
        assert_eq!(h.gittins(10, 20), 0.0);
        assert!(h.gittins(0, 20) > h.gittins(500, 20));
        assert_eq!(History::default().gittins(5, 20), 0.0);
    }

    #[test]
    fn usage_decays_and_accrues_by_half_life() {
        let h = 100_000; // 100 s
        let mut u = Usage { value: 0.0, as_of: 0, running: 2, group: 0 };
        // Two GPUs for one half-life: 2 * H/ln2 * (1 - 1/2) GPU-ms.
        let want = 2.0 * h as f64 / std::f64::consts::LN_2 * 0.5;
        assert!((u.at(h, h) - want).abs() < 1e-6);
        u.advance(h, h);
        u.running = 0;
        // With nothing running it halves every half-life.
        assert!((u.at(3 * h, h) - want / 4.0).abs() < 1e-6);
        // Over a very short interval it accrues about r * dt.
        let v = Usage { value: 0.0, as_of: 0, running: 3, group: 0 }.at(10, h);
        assert!((v - 30.0).abs() < 0.01);
    }

    #[test]
    fn qssf_predicts_from_user_then_group_then_all() {
        let mut a = Accounts::default();
        let req = |user, group| JobReq { user, group, ..JobReq::new(JobId(0), 0, 1, 0) };
        assert_eq!(a.predict(&req(1, 1)), 0);
        a.by_user.insert(1, (300, 3));
        a.by_group.insert(1, (1000, 2));
        a.all = (3000, 5);
        assert_eq!(a.predict(&req(1, 1)), 100);
        assert_eq!(a.predict(&req(2, 1)), 500);
        assert_eq!(a.predict(&req(2, 2)), 600);
    }

    #[test]
    fn float_order_is_kept() {
        let xs = [-2.5, -0.0, 0.0, 1e-9, 3.0, 1e300];
        for w in xs.windows(2) {
            assert!(ord_f64(w[0]) <= ord_f64(w[1]));
        }
    }

    /// The count-only check of a node-level preemptive pass (`none_ranks_in`): it says "nothing
    /// changes" exactly where the full pass chooses no job, and the plans agree either way.
    #[test]
    fn counting_finds_passes_that_change_nothing() {
        use crate::model::ClusterSpec;
        use crate::scheduler::JobReq;
        for (placement, policy) in [
            (crate::capacity::Placement::Consolidated, "srtf"),
            (crate::capacity::Placement::Consolidated, "las:thresholds=60/300,promote=0"),
        ] {
            // Four one-GPU nodes, four running jobs of different lengths.
            let mut s = Scheduler::new(&ClusterSpec::uniform(4, 1), placement, policy.parse().unwrap());
            for (i, est) in [10_000, 20_000, 30_000, 40_000].into_iter().enumerate() {
                s.submit(JobReq::new(JobId(i as u32), 0, 1, est), 0).unwrap();
            }
            let plan = s.schedule(0, false);
            assert_eq!(plan.starts.len(), 4);
            for st in &plan.starts {
                s.start(st.job, &st.alloc, 0).unwrap();
            }
            // A two-GPU job of 35 s: under srtf three running jobs rank before it (one GPU
            // left at its rank), under las all four (none): it cannot be placed, nothing
            // changes, and counting says so without the what-if state.
            s.submit(JobReq::new(JobId(4), 1, 2, 35_000), 1).unwrap();
            s.advance(1);
            assert!(s.none_ranks_in(1), "{policy}");
            let (fast, full) = (s.schedule(1, false), s.schedule(1, true));
            assert!(fast.starts.is_empty() && fast.preempt.is_empty(), "{policy}");
            assert_eq!((fast.starts, fast.preempt, fast.wake_at), (full.starts, full.preempt, full.wake_at));
            // A one-GPU job of 5 s ranks ahead of every running job under srtf: counting
            // cannot rule it out, and the pass preempts for it the lowest-ranked running job,
            // job 3 (40 s left): on one-GPU nodes the ranking counts first and places the job
            // on the node that job leaves.
            if policy == "srtf" {
                s.submit(JobReq::new(JobId(5), 2, 1, 5_000), 2).unwrap();
                s.advance(2);
                assert!(!s.none_ranks_in(2));
                let (fast, full) = (s.schedule(2, false), s.schedule(2, true));
                assert_eq!(fast.starts.iter().map(|st| st.job).collect::<Vec<_>>(), vec![JobId(5)]);
                assert_eq!(fast.preempt, vec![JobId(3)]);
                assert_eq!((fast.starts, fast.preempt), (full.starts, full.preempt));
            }
        }
    }

    /// Which running job a preemptive pass gives up for a job that outranks them all: on
    /// one-GPU nodes the lowest-ranked (the ranking counts first, and the waiting job takes
    /// a node that is really free when there is one); on larger nodes the ranking places the
    /// job on the empty cluster, and the running job whose GPUs it takes there goes, whatever
    /// its rank (it repacks nodes, which keeps whole nodes free for gangs).
    #[test]
    fn preemptive_ranking_gives_up_the_lowest_ranked_on_one_gpu_nodes() {
        use crate::model::ClusterSpec;
        use crate::scheduler::JobReq;
        let start_all = |s: &mut Scheduler, now| {
            let plan = s.schedule(now, false);
            for st in &plan.starts {
                s.start(st.job, &st.alloc, now).unwrap();
            }
            plan
        };
        for (nodes, per_node, free_node, want) in [(4, 1, false, Some(3)), (5, 1, true, None), (2, 2, false, Some(1))] {
            let cluster = ClusterSpec::uniform(nodes, per_node);
            let mut s = Scheduler::new(&cluster, crate::capacity::Placement::Consolidated, "srtf".parse().unwrap());
            // Four one-GPU jobs of 10, 20, 30 and 40 s (on two-GPU nodes, jobs 0 and 1 share
            // node 0).
            for (i, est) in [10_000, 20_000, 30_000, 40_000].into_iter().enumerate() {
                s.submit(JobReq::new(JobId(i as u32), 0, 1, est), 0).unwrap();
            }
            assert_eq!(start_all(&mut s, 0).starts.len(), 4);
            s.submit(JobReq::new(JobId(4), 1, 1, 5_000), 1).unwrap();
            s.advance(1);
            let (fast, full) = (s.schedule(1, false), s.schedule(1, true));
            assert_eq!((&fast.starts, &fast.preempt), (&full.starts, &full.preempt), "{nodes}x{per_node}");
            assert_eq!(fast.starts.iter().map(|st| st.job).collect::<Vec<_>>(), vec![JobId(4)], "{nodes}x{per_node}");
            assert_eq!(fast.preempt, want.map(JobId).into_iter().collect::<Vec<_>>(), "{nodes}x{per_node}");
            if free_node {
                // The fifth node, free: nothing preempted, the job goes there.
                assert_eq!(fast.starts[0].alloc.parts, vec![(4, 1)]);
            }
        }
    }
}
