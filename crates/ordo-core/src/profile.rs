//! Conservative backfill's profile of future free resources: a step function over time in which
//! each waiting job reserves the earliest slot that delays no reservation made before it.

use crate::capacity::{Allocation, Demand, Placement};
use crate::pools::{scaled, Pools};
use crate::time::Time;

/// Free resources over future time, from `now` on; the last step lasts forever. Pooled
/// count-only placement counts GPUs ([`CountProfile`]; one per pool on a typed cluster), since
/// which nodes a pooled job gets within its pool does not matter; other placements keep every
/// node in every step ([`NodeProfile`]).
#[derive(Debug, Clone)]
pub(crate) enum Profile {
    /// Pooled, count-only, one pool.
    Count(CountProfile),
    /// Pooled, count-only, several pools (GPU models, features): one count per pool.
    Pools(PoolProfile),
    /// Consolidated (or topology) placement on a count-only cluster: what changes at each step.
    Changes(ChangeProfile),
    /// A detailed cluster (shares, CPUs, memory): every node in every step.
    Nodes(NodeProfile),
}

/// What a reservation holds in the profile, and so where its job must start to keep to it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Held {
    /// GPUs of the only pool: any will do.
    Gpus,
    /// GPUs of this pool: any of its nodes will do.
    Pool(u32),
    /// These nodes' GPUs.
    Nodes(Allocation),
}

impl Held {
    /// Where its job goes on `cap` now: anywhere it fits, anywhere in its pool, or its nodes
    /// (`None` when they are not free).
    pub(crate) fn place(&self, cap: &Pools, d: Demand) -> Option<Allocation> {
        match self {
            Held::Gpus => cap.place_for(d),
            Held::Pool(p) => cap.place_for(Demand { pools: 1u128 << p, ..d }),
            Held::Nodes(a) => cap.can_take(a).then(|| a.clone()),
        }
    }

    /// Whether a start on `alloc` is not the one reserved (another pool, other nodes).
    pub(crate) fn differs(&self, cap: &Pools, alloc: &Allocation) -> bool {
        match self {
            Held::Gpus => false,
            Held::Pool(p) => cap.pools_in(alloc) & !(1u128 << p) != 0,
            Held::Nodes(a) => a != alloc,
        }
    }
}

impl Profile {
    /// A profile in which `cap`, as it is now, lasts forever.
    pub(crate) fn new(now: Time, cap: &Pools) -> Self {
        if cap.counts_only() {
            Profile::Count(CountProfile::new(now, cap.total_free() as i64))
        } else if cap.placement() == Placement::Pooled && !cap.is_detailed() {
            Profile::Pools(PoolProfile::new(now, cap))
        } else if !cap.is_detailed() {
            Profile::Changes(ChangeProfile::new(now, cap))
        } else {
            Profile::Nodes(NodeProfile { segs: vec![(now, cap.clone())] })
        }
    }

    /// Drops the steps that ended by `now`.
    pub(crate) fn trim(&mut self, now: Time) {
        match self {
            Profile::Count(p) => p.trim(now),
            Profile::Pools(p) => p.pools.iter_mut().for_each(|c| c.trim(now)),
            Profile::Changes(p) => p.trim(now),
            Profile::Nodes(p) => p.trim(now),
        }
    }

    /// The resources of `alloc` are free from `from` on (a running job's estimated end).
    pub(crate) fn give_from(&mut self, from: Time, alloc: &Allocation) {
        match self {
            Profile::Count(p) => p.add_from(from, alloc.gpus() as i64),
            Profile::Pools(p) => {
                for (pool, g) in p.layout.gpus_by_pool(alloc) {
                    p.pools[pool].add_from(from, g as i64);
                }
            }
            Profile::Changes(p) => p.give_from(from, alloc),
            Profile::Nodes(p) => p.give_from(from, alloc),
        }
    }

    /// Finds the earliest time from `now` at which a job asking `g` fits for its run time,
    /// takes it there, and returns that time, the reservation's end and what it holds (the
    /// nodes are chosen when the job starts, except in a [`NodeProfile`]). Its run time is
    /// `d` (at least 1), its estimate planned on the slowest pool it accepts; a [`PoolProfile`]
    /// knows the pool and plans `base` (its estimate at speed 1) at that pool's speed.
    ///
    /// Where the nodes are chosen here, `slow` gives the factor a run on them is slowed by (a
    /// gang spread over several units of a topology's levels, 1 elsewhere): the reservation
    /// lasts `d` times that factor, in a window found long enough for it ([`find_slowed`]).
    pub(crate) fn reserve(
        &mut self,
        now: Time,
        g: Demand,
        d: Time,
        base: Time,
        slow: &dyn Fn(&Allocation) -> f64,
    ) -> (Time, Time, Held) {
        let d = d.max(1);
        match self {
            Profile::Count(p) => {
                let t = p.reserve(now, g.gpus as i64, d);
                (t, t + d, Held::Gpus)
            }
            Profile::Pools(p) => {
                let (t, d, pool) = p.reserve(now, g, base);
                (t, t + d, Held::Pool(pool))
            }
            Profile::Changes(p) => {
                let (t, a, d) = find_slowed(d, slow, |w| p.find(now, g, w));
                p.take_for(t, &a, d);
                (t, t + d, Held::Nodes(a))
            }
            Profile::Nodes(p) => {
                let (t, a, d) = find_slowed(d, slow, |w| p.find(now, g, w));
                p.take_for(t, &a, d);
                (t, t + d, Held::Nodes(a))
            }
        }
    }
}

/// A slot for a job of run time `d` whose nodes may slow it (`slow`, a factor of at least 1):
/// the earliest slot for a window of `d`; if the nodes found there slow the job, the earliest
/// for a window as long as it would then run, and so on until the nodes found need no longer
/// a window than the one searched (the window only grows, over the few values the factors
/// allow, so this ends). Returns the slot, its nodes and the job's run time on them, which fits
/// the window searched. Without a slowdown: one search, as before.
fn find_slowed(
    d: Time,
    slow: &dyn Fn(&Allocation) -> f64,
    mut find: impl FnMut(Time) -> (Time, Allocation),
) -> (Time, Allocation, Time) {
    let mut window = d;
    loop {
        let (t, a) = find(window);
        let need = crate::pools::scaled(d, 1.0 / slow(&a));
        if need <= window {
            return (t, a, need);
        }
        window = need;
    }
}

/// One [`CountProfile`] per pool. A job reserves in the pool where its slot comes first, the
/// pick rule's order deciding among equal ones: the slot and pool a [`NodeProfile`] would find
/// (the earliest step at which some pool holds it throughout, the first such pool in pick order),
/// at a cost of steps x pools instead of steps x nodes.
#[derive(Debug, Clone)]
pub(crate) struct PoolProfile {
    pools: Vec<CountProfile>,
    /// The cluster's layout (pool counters): which pool a node is in, a demand's pools in pick
    /// order, each pool's size.
    layout: Pools,
}

impl PoolProfile {
    fn new(now: Time, cap: &Pools) -> Self {
        let layout = cap.pool_counters();
        let pools = (0..cap.keys().len()).map(|p| CountProfile::new(now, cap.pool_free(p) as i64)).collect();
        PoolProfile { pools, layout }
    }

    /// Reserves for a job asking `d` whose estimate at speed 1 is `base`: on each of its
    /// pools it runs `base` at that pool's speed; returns the start, the run time and the pool.
    fn reserve(&mut self, now: Time, d: Demand, base: Time) -> (Time, Time, u32) {
        let g = d.gpus as i64;
        let mut best: Option<(Time, Time, usize)> = None;
        let cands: Vec<usize> = self.layout.candidates(d).collect();
        for p in cands {
            if (self.layout.pool_total(p) as i64) < g {
                continue;
            }
            let dur = scaled(base, self.layout.pool_speed(d.row, p)).max(1);
            let t = self.pools[p].find_slot(now, g, dur);
            if best.is_none_or(|b| t < b.0) {
                best = Some((t, dur, p));
            }
            if t <= now {
                break;
            }
        }
        let (t, dur, p) = best.expect("a job is only submitted where some pool can hold it");
        self.pools[p].take_at(t, g, dur);
        (t, dur, p as u32)
    }
}

/// The profile of a count-only cluster under node-level placement: the free GPUs of every node
/// at the first step, and for each later step what changes there (allocations given back, from
/// a running job's estimated end or a reservation's; allocations taken, by a reservation).
/// Memory is O(nodes + changes), where a copy of every node in every step ([`NodeProfile`]) took
/// O(steps x nodes): 819 MiB for 5,000 jobs on 25,000 nodes.
///
/// A search first counts: the free GPUs of every step, kept in a [`CountProfile`] beside the
/// changes, rule out the starts whose window has a step with fewer free GPUs than the job asks,
/// without touching a node, and a block of steps at a time. Only at a
/// start the counts allow does it bring a working state to that step and check nodes: the
/// window's per-node minimum is that state lowered where a change in the window goes below it.
/// The working state is the first step (`work`, rolled back after) or a copy of a checkpoint
/// (`cps`: the state at some step, kept up to date as changes are added), so a slot far ahead
/// is reached from the nearest checkpoint, not change by change from now. A walk leaves a
/// checkpoint each time it has applied a sixteenth as many node changes as the cluster has
/// nodes since the last one (at least 64), so a walk applies at most that many (a copy costs
/// about sixteen times as much, but a long queue's reservations walk to the same far steps
/// again and again). It finds what [`NodeProfile`] finds, slot and nodes (tested
/// against it).
#[derive(Debug, Clone)]
pub(crate) struct ChangeProfile {
    /// Step start times, ascending; step `i` lasts until step `i + 1`, the last forever.
    times: Vec<Time>,
    /// `changes[i]`: what step `i` changes from step `i - 1`, node by node: `(node, GPUs)`,
    /// positive given back, negative taken; every give before every take, each allocation's
    /// parts together and in its order; `changes[0]` is empty (`work` holds step 0). Flat, so
    /// that a window's walk reads one run of memory per step, not one per allocation.
    changes: Vec<StepChanges>,
    /// The free GPUs of every step, counted: the same steps, in blocks that a search for a
    /// start where the counts allow skips whole ([`CountProfile`]).
    count: CountProfile,
    /// The free GPUs at step 0 between calls; a search changes it and rolls it back.
    work: Pools,
    /// Checkpoints: (a step's start time, the free GPUs in that step), ascending, all after
    /// step 0.
    cps: Vec<(Time, Pools)>,
    /// Node changes a walk applies before it leaves a checkpoint (a sixteenth of the cluster's
    /// node count, at least 64).
    gap: usize,
    /// A search's working state when it starts from a checkpoint.
    scratch: Option<Pools>,
    /// A search's scratch, per node: the window (`stamp`) in which it was last set, and the
    /// node's free GPUs at the window step reached, valid where that window is `stamp` (a
    /// change in the window touched the node). Side by side: one memory access per change.
    seen: Vec<(u32, u32)>,
    /// The current window's number; a new window makes every `seen` stale at once.
    stamp: u32,
}

/// One step's node changes (see [`ChangeProfile::changes`]): up to four kept inline, so that a
/// window's walk reads most steps' changes in one run of memory instead of following a pointer
/// per step (on 100,000 benchmark jobs under `fifo+conservative`: 2.5 node changes per step
/// walked on average, 255 million in all).
type StepChanges = smallvec::SmallVec<[(u32, i32); 4]>;

fn apply(p: &mut Pools, give: bool, a: &Allocation) {
    if give {
        p.give(a);
    } else {
        p.take(a);
    }
}

/// One node's change, `(node, GPUs)` as [`ChangeProfile::changes`] keeps it.
fn apply_part(p: &mut Pools, (n, k): (u32, i32)) {
    if k >= 0 {
        p.give_node(n, k as u32);
    } else {
        p.take_node(n, k.unsigned_abs());
    }
}

impl ChangeProfile {
    fn new(now: Time, cap: &Pools) -> Self {
        ChangeProfile {
            times: vec![now],
            changes: vec![StepChanges::new()],
            count: CountProfile::new(now, cap.total_free() as i64),
            work: cap.clone(),
            cps: Vec::new(),
            gap: (cap.free().len() / 16).max(64),
            scratch: None,
            seen: vec![(0, 0); cap.free().len()],
            stamp: 0,
        }
    }

    fn trim(&mut self, now: Time) {
        let keep_from = self.times.partition_point(|&t| t <= now).saturating_sub(1);
        if keep_from > 0 {
            for ch in self.changes.drain(1..=keep_from) {
                for part in ch {
                    apply_part(&mut self.work, part);
                }
            }
            self.times.drain(..keep_from);
            let t0 = self.times[0];
            let stale = self.cps.partition_point(|c| c.0 <= t0);
            self.cps.drain(..stale);
        }
        if self.times[0] < now {
            self.times[0] = now;
        }
        self.count.trim(now);
    }

    /// Index of the step starting at `t`, adding one (changing nothing) if needed. `t` must not
    /// be before the first step.
    fn split_at(&mut self, t: Time) -> usize {
        match self.times.binary_search(&t) {
            Ok(i) => i,
            Err(i) => {
                debug_assert!(i > 0, "a step before the first");
                self.times.insert(i, t);
                self.changes.insert(i, StepChanges::new());
                i
            }
        }
    }

    /// `alloc` changes (`give`: is given back) from the step at `t` on, and in the checkpoints
    /// from `t` until `until`.
    fn change_at(&mut self, t: Time, give: bool, alloc: &Allocation, until: Time) {
        let i = self.split_at(t);
        if i == 0 {
            apply(&mut self.work, give, alloc);
        } else {
            // A step's gives come before its takes: a reservation may start on GPUs that
            // another frees at the same instant, whichever was reserved first.
            let parts = alloc.parts.iter().map(|&(n, k)| (n, if give { k as i32 } else { -(k as i32) }));
            if give {
                self.changes[i].insert_many(0, parts);
            } else {
                self.changes[i].extend(parts);
            }
        }
        let from = self.cps.partition_point(|c| c.0 < t);
        for c in &mut self.cps[from..] {
            if c.0 >= until {
                break;
            }
            apply(&mut c.1, give, alloc);
        }
    }

    fn give_from(&mut self, from: Time, alloc: &Allocation) {
        let from = from.max(self.times[0]);
        self.count.add_from(from, alloc.gpus() as i64);
        self.change_at(from, true, alloc, Time::MAX);
    }

    /// The earliest start at or after step `from` whose window (`d` from the start, the first
    /// step's start counted from `now`) has at least `need` free GPUs in every step, by the
    /// counts alone.
    fn count_start(&mut self, from: usize, now: Time, need: i64, d: Time) -> usize {
        let t = self.count.find_slot(self.times[from].max(now), need, d);
        self.times.partition_point(|&x| x <= t) - 1
    }

    /// Takes `a` from `t` for `d`.
    fn take_for(&mut self, t: Time, a: &Allocation, d: Time) {
        self.count.take_at(t, a.gpus() as i64, d);
        self.change_at(t, false, a, t + d);
        self.change_at(t + d, true, a, t + d);
    }

    /// The earliest start from `now` of a window of `d` in which `g` fits, and its nodes there.
    /// Changes no step (only caches: the walk's checkpoints and scratch state, the counts'
    /// cached runs).
    fn find(&mut self, now: Time, g: Demand, d: Time) -> (Time, Allocation) {
        let first = self.times.partition_point(|&t| t <= now).saturating_sub(1);
        let need = g.gpus as i64;
        self.work.begin_undo();
        let mut on_scratch = false;
        // The step the working state is at, and the node changes applied since the last
        // checkpoint (or step 0) on the way.
        let mut at = 0;
        let mut since = 0;
        let mut from = first;
        let mut found = None;
        while found.is_none() {
            let s = self.count_start(from, now, need, d);
            // To step `s`: from the last checkpoint at or before it, if that is ahead.
            let c = self.cps.partition_point(|c| c.0 <= self.times[s]);
            if c > 0 && self.cps[c - 1].0 > self.times[at] {
                let cp = &self.cps[c - 1];
                let sc = self.scratch.get_or_insert_with(|| cp.1.clone());
                sc.clone_from(&cp.1);
                sc.begin_undo();
                on_scratch = true;
                at = self.times.binary_search(&cp.0).expect("a checkpoint is at a step");
                since = 0;
            }
            let cur = if on_scratch { self.scratch.as_mut().expect("on scratch") } else { &mut self.work };
            while at < s {
                at += 1;
                since += self.changes[at].len();
                for &part in &self.changes[at] {
                    apply_part(cur, part);
                }
                if since >= self.gap {
                    let t = self.times[at];
                    let k = self.cps.partition_point(|c| c.0 < t);
                    if self.cps.get(k).is_none_or(|c| c.0 != t) {
                        self.cps.insert(k, (t, cur.snapshot()));
                    }
                    since = 0;
                }
            }
            from = s + 1;
            // `cur` is step `s` now (counting its free GPUs first is cheaper than placing).
            if !cur.fits_for(g) {
                continue;
            }
            let t = self.times[s].max(now);
            let mark = cur.undo_marks();
            self.stamp = self.stamp.wrapping_add(1);
            if self.stamp == 0 {
                self.seen.fill((0, 0));
                self.stamp = 1;
            }
            let mut ok = true;
            let mut j = s + 1;
            // Lowered steps since the last full check.
            let mut unchecked = 0;
            // The counts hold in every step of the window; the nodes may not. `cur` becomes the
            // minimum over the window's steps, which only goes down, and fitting is monotone:
            // a job that fits the final minimum fitted at every step. So the full check is made
            // now and then (an early way out of a failing window) and at the end; the count,
            // cheap, at every step that lowered it.
            while j < self.times.len() && self.times[j] < t + d {
                let mut lowered = false;
                for &(n, k) in &self.changes[j] {
                    // Untouched in the window so far, a node's value there is its minimum.
                    let low = cur.node_free(n);
                    let e = &mut self.seen[n as usize];
                    if e.0 != self.stamp {
                        *e = (self.stamp, low);
                    }
                    e.1 = e.1.wrapping_add_signed(k);
                    if e.1 < low {
                        cur.take_node(n, low - e.1);
                        lowered = true;
                    }
                }
                if lowered {
                    unchecked += 1;
                    if cur.total_free() < need as u64 || (unchecked >= 32 && !cur.fits_for(g)) {
                        ok = false;
                        break;
                    }
                    if unchecked >= 32 {
                        unchecked = 0;
                    }
                }
                j += 1;
            }
            if ok && unchecked > 0 && !cur.fits_for(g) {
                ok = false;
            }
            if ok {
                found = Some((t, cur.place_for(g).expect("fits every step")));
            }
            cur.rollback_to(&mark);
        }
        self.work.rollback();
        found.expect("found")
    }
}

/// Every node in every step: `segs[i]` holds from its time until the next step's.
/// Memory and each reservation cost O(steps x nodes). Detailed clusters only (their shares,
/// CPUs and memory are not rolled back); count-only ones use [`ChangeProfile`].
#[derive(Debug, Clone)]
pub(crate) struct NodeProfile {
    segs: Vec<(Time, Pools)>,
}

impl NodeProfile {
    fn trim(&mut self, now: Time) {
        let keep_from = self.segs.partition_point(|s| s.0 <= now).saturating_sub(1);
        if keep_from > 0 {
            self.segs.drain(..keep_from);
        }
        if self.segs[0].0 < now {
            self.segs[0].0 = now;
        }
    }

    /// Index of the step starting at `t`, splitting one if needed. `t` must not be before
    /// the first step.
    fn split_at(&mut self, t: Time) -> usize {
        match self.segs.binary_search_by_key(&t, |s| s.0) {
            Ok(i) => i,
            Err(i) => {
                let c = self.segs[i - 1].1.clone();
                self.segs.insert(i, (t, c));
                i
            }
        }
    }

    /// The range of steps covering `[from, to)` (`to` may be `Time::MAX`: forever).
    fn span(&mut self, from: Time, to: Time) -> std::ops::Range<usize> {
        let i = self.split_at(from);
        let j = if to == Time::MAX { self.segs.len() } else { self.split_at(to) };
        i..j
    }

    fn give_from(&mut self, from: Time, alloc: &Allocation) {
        let r = self.span(from.max(self.segs[0].0), Time::MAX);
        for s in &mut self.segs[r] {
            s.1.give(alloc);
        }
    }

    /// Takes `a` from `t` for `d`.
    fn take_for(&mut self, t: Time, a: &Allocation, d: Time) {
        let r = self.span(t, t + d);
        for s in &mut self.segs[r] {
            s.1.take(a);
        }
    }

    /// The earliest start from `now` of a window of `d` in which `g` fits, and its nodes there.
    fn find(&self, now: Time, g: Demand, d: Time) -> (Time, Allocation) {
        let mut found = None;
        let first = self.segs.partition_point(|s| s.0 <= now).saturating_sub(1);
        let mut next = first;
        for i in first..self.segs.len() {
            // Steps before `next` start windows that hold a step where the job does not fit.
            if i < next || !self.segs[i].1.fits_for(g) {
                continue;
            }
            let t = self.segs[i].0.max(now);
            let mut j = i + 1;
            let mut m: Option<Pools> = None;
            let mut ok = true;
            while j < self.segs.len() && self.segs[j].0 < t + d {
                let seg = &self.segs[j].1;
                if !seg.fits_for(g) {
                    // Every later start up to `j` has step `j` in its window too.
                    next = j + 1;
                    ok = false;
                    break;
                }
                m.get_or_insert_with(|| self.segs[i].1.clone()).min_with(seg);
                if !m.as_ref().expect("set").fits_for(g) {
                    ok = false;
                    break;
                }
                j += 1;
            }
            if !ok {
                continue;
            }
            let a = m.as_ref().unwrap_or(&self.segs[i].1).place_for(g).expect("fits every step");
            found = Some((t, a));
            break;
        }
        found.expect("the last step is the empty cluster, where every job fits")
    }
}

/// Steps per block of a [`CountProfile`] before the block is split.
const STEP_BLOCK: usize = 128;

/// One block of steps: their start times and free GPUs (each plus `add`, a pending addition
/// to the whole block).
#[derive(Debug, Clone)]
struct Block {
    times: Vec<Time>,
    free: Vec<i64>,
    add: i64,
    /// [`Runs`] by raw threshold (free count less `add`), valid until `times` or `free` change.
    runs: Vec<(i64, Runs)>,
}

impl Block {
    /// Forgets the cached runs (the steps changed).
    fn refresh(&mut self) {
        self.runs.clear();
    }
}

/// Free GPUs over time as steps in blocks of at most [`STEP_BLOCK`], each block taking
/// additions to all its steps at once and keeping, per threshold asked, its runs of steps with
/// that many free ([`Runs`]). Finding a slot judges whole blocks by their runs, and adding to a span of time
/// touches its two end blocks step by step and the rest once each: O(steps / block + block)
/// per operation where the plain vector of steps cost O(steps).
#[derive(Debug, Clone)]
pub(crate) struct CountProfile {
    /// Non-empty, in time order.
    blocks: Vec<Block>,
}

/// A step's place: (block, index in the block).
type Pos = (usize, usize);

impl CountProfile {
    fn new(now: Time, free: i64) -> Self {
        CountProfile { blocks: vec![Block { times: vec![now], free: vec![free], add: 0, runs: Vec::new() }] }
    }

    fn value(&self, (b, k): Pos) -> i64 {
        self.blocks[b].free[k] + self.blocks[b].add
    }

    #[cfg(test)]
    fn time(&self, (b, k): Pos) -> Time {
        self.blocks[b].times[k]
    }

    /// The step in force at `t`: the last one starting at or before it (the first step if `t`
    /// is before every step).
    fn pos_of(&self, t: Time) -> Pos {
        let b = self.blocks.partition_point(|blk| blk.times[0] <= t).saturating_sub(1);
        let k = self.blocks[b].times.partition_point(|&x| x <= t).saturating_sub(1);
        (b, k)
    }

    fn trim(&mut self, now: Time) {
        let (b, k) = self.pos_of(now);
        self.blocks.drain(..b);
        let blk = &mut self.blocks[0];
        if k > 0 {
            blk.times.drain(..k);
            blk.free.drain(..k);
            blk.refresh();
        }
        if blk.times[0] < now {
            blk.times[0] = now;
            blk.runs.clear();
        }
    }

    /// Makes a step start at `t` (`t` not before the first step), splitting the one in force.
    fn split_at(&mut self, t: Time) {
        let (b, k) = self.pos_of(t);
        let blk = &mut self.blocks[b];
        if blk.times[k] == t {
            return;
        }
        blk.runs.clear();
        debug_assert!(blk.times[k] < t);
        blk.times.insert(k + 1, t);
        let f = blk.free[k];
        blk.free.insert(k + 1, f);
        if blk.times.len() > STEP_BLOCK {
            self.split_block(b);
        }
    }

    /// Splits block `b` in two halves.
    fn split_block(&mut self, b: usize) {
        let blk = &mut self.blocks[b];
        let half = blk.times.len() / 2;
        let mut tail =
            Block { times: blk.times.split_off(half), free: blk.free.split_off(half), add: blk.add, runs: Vec::new() };
        tail.refresh();
        blk.refresh();
        self.blocks.insert(b + 1, tail);
    }

    /// Adds `delta` to every step in `[from, to)` (both step starts; `to` `None`: to the end).
    fn add_range(&mut self, from: Pos, to: Option<Pos>, delta: i64) {
        let (end_b, end_k) = to.unwrap_or((self.blocks.len(), 0));
        let (mut b, k0) = from;
        let mut k = k0;
        while b < end_b || (b == end_b && k < end_k) {
            let blk = &mut self.blocks[b];
            let stop = if b == end_b { end_k } else { blk.times.len() };
            if k == 0 && stop == blk.times.len() {
                blk.add += delta;
            } else {
                for f in &mut blk.free[k..stop] {
                    *f += delta;
                }
                blk.refresh();
            }
            b += 1;
            k = 0;
        }
    }

    /// `delta` more free GPUs from `from` on (`from` no earlier than the first step).
    fn add_from(&mut self, from: Time, delta: i64) {
        let from = from.max(self.blocks[0].times[0]);
        self.split_at(from);
        let p = self.pos_of(from);
        self.add_range(p, None, delta);
    }

    /// The runs of steps with at least `g` free in block `b` (cached per raw threshold until
    /// the block's steps change).
    fn runs(&mut self, b: usize, g: i64) -> Runs {
        let blk = &mut self.blocks[b];
        let raw = g - blk.add;
        if let Some(&(_, r)) = blk.runs.iter().find(|c| c.0 == raw) {
            return r;
        }
        // One pass: the first and last steps below the threshold, and the longest run between
        // two such steps.
        let (mut first, mut last) = (None, None);
        let mut max_inner = 0;
        for (i, &f) in blk.free.iter().enumerate() {
            if f < raw {
                if let Some(p) = last {
                    if i > p + 1 {
                        max_inner = max_inner.max(blk.times[i] - blk.times[p + 1]);
                    }
                }
                first.get_or_insert(i);
                last = Some(i);
            }
        }
        let r = match (first, last) {
            (Some(first), Some(last)) => Runs {
                all_fit: false,
                prefix_end: blk.times[first],
                suffix_start: blk.times.get(last + 1).copied(),
                max_inner,
            },
            _ => Runs { all_fit: true, prefix_end: Time::MAX, suffix_start: None, max_inner: 0 },
        };
        if blk.runs.len() >= RUNS_CACHED {
            blk.runs.remove(0);
        }
        blk.runs.push((raw, r));
        r
    }

    /// Reserves `g` GPUs for `d` at the earliest time from `now` at which they are free
    /// throughout, and returns that time: the start of the first run of steps with at least `g`
    /// free that lasts `d` (the first step counting from `now`). Whole blocks are judged by
    /// their runs, so the search skips the many short gaps that earlier reservations left.
    fn reserve(&mut self, now: Time, g: i64, d: Time) -> Time {
        if self.blocks.len() == 1 && d > 0 {
            return self.reserve_in_one_block(now, g, d);
        }
        let t = self.find_slot(now, g, d);
        self.take_at(t, g, d);
        t
    }

    /// Takes `g` GPUs over `[t, t + d)` (free there: found by [`CountProfile::find_slot`]).
    fn take_at(&mut self, t: Time, g: i64, d: Time) {
        self.split_at(t);
        self.split_at(t + d);
        let (from, to) = (self.pos_of(t), self.pos_of(t + d));
        debug_assert!(self.value(from) >= g);
        self.add_range(from, Some(to), -g);
    }

    /// [`CountProfile::reserve`] when every step is in one block (a profile of up to
    /// [`STEP_BLOCK`] steps, the usual size) and `d > 0`: one scan finds the slot and the steps
    /// it covers, without looking steps up again by time.
    fn reserve_in_one_block(&mut self, now: Time, g: i64, d: Time) -> Time {
        let blk = &mut self.blocks[0];
        let raw = g - blk.add;
        let n = blk.times.len();
        let k0 = blk.times.partition_point(|&x| x <= now).saturating_sub(1);
        // The first run of steps with at least `g` free that lasts `d` (the last step lasts
        // forever): `i` its first step, `t` its start.
        let mut open: Option<(usize, Time)> = None;
        let mut found = None;
        for k in k0..n {
            if blk.free[k] >= raw {
                let (i, t) = *open.get_or_insert((k, blk.times[k].max(now)));
                if k + 1 == n || blk.times[k + 1] >= t + d {
                    found = Some((i, t));
                    break;
                }
            } else {
                open = None;
            }
        }
        let (mut i, t) = found.expect("the last step is the empty cluster, where every job fits");
        if blk.times[i] < t {
            i += 1;
            blk.times.insert(i, t);
            blk.free.insert(i, blk.free[i - 1]);
        }
        let end = t + d;
        let mut j = i + 1;
        while j < blk.times.len() && blk.times[j] < end {
            j += 1;
        }
        if j == blk.times.len() || blk.times[j] > end {
            blk.times.insert(j, end);
            blk.free.insert(j, blk.free[j - 1]);
        }
        for f in &mut blk.free[i..j] {
            *f -= g;
        }
        blk.refresh();
        if blk.times.len() > STEP_BLOCK {
            self.split_block(0);
        }
        t
    }

    fn find_slot(&mut self, now: Time, g: i64, d: Time) -> Time {
        let long_enough = |start: Time, end: Time| end.saturating_sub(start) >= d;
        // The block in force at `now`, step by step from there.
        let (b0, k0) = self.pos_of(now);
        let mut open: Option<Time> = None;
        {
            let blk = &self.blocks[b0];
            for i in k0..blk.times.len() {
                if blk.free[i] + blk.add >= g {
                    open.get_or_insert(blk.times[i].max(now));
                } else if let Some(s) = open.take() {
                    if long_enough(s, blk.times[i]) {
                        return s;
                    }
                }
            }
        }
        // Later blocks by their runs; step by step only in the block that holds the slot.
        for b in b0 + 1..self.blocks.len() {
            let start = self.blocks[b].times[0];
            let r = self.runs(b, g);
            if r.all_fit {
                open.get_or_insert(start);
                continue;
            }
            // The leading run: the open one going on, or one starting with this block.
            let lead = open.take().or((r.prefix_end > start).then_some(start));
            if lead.is_some_and(|s| long_enough(s, r.prefix_end)) {
                return lead.expect("checked");
            }
            // (An inner run lasts more than 0: `max_inner` 0 is none, even for `d` 0.)
            if r.max_inner > 0 && r.max_inner >= d {
                let blk = &self.blocks[b];
                let mut run: Option<Time> = None;
                for i in 0..blk.times.len() {
                    if blk.free[i] + blk.add >= g {
                        run.get_or_insert(blk.times[i]);
                    } else if let Some(s) = run.take() {
                        if s != start && long_enough(s, blk.times[i]) {
                            return s;
                        }
                    }
                }
                debug_assert!(false, "a run of {d} was promised in block {b}");
            }
            open = r.suffix_start;
        }
        // The last step lasts forever.
        open.expect("the last step is the empty cluster, where every job fits")
    }
}

/// The runs of steps with at least some free count in one block: whether every step has it,
/// where the leading run ends (the first step without it), where the trailing run starts (if
/// the last step has it), and the longest run between two steps without it.
#[derive(Debug, Clone, Copy)]
struct Runs {
    all_fit: bool,
    prefix_end: Time,
    suffix_start: Option<Time>,
    max_inner: Time,
}

/// Thresholds whose [`Runs`] a block keeps.
const RUNS_CACHED: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The plain profile the counting one replaces: a vector of steps, scanned.
    struct Plain(Vec<(Time, i64)>);

    impl Plain {
        fn split_at(&mut self, t: Time) -> usize {
            match self.0.binary_search_by_key(&t, |s| s.0) {
                Ok(i) => i,
                Err(i) => {
                    let f = self.0[i - 1].1;
                    self.0.insert(i, (t, f));
                    i
                }
            }
        }
        fn trim(&mut self, now: Time) {
            let keep_from = self.0.partition_point(|s| s.0 <= now).saturating_sub(1);
            self.0.drain(..keep_from);
            if self.0[0].0 < now {
                self.0[0].0 = now;
            }
        }
        fn add_from(&mut self, from: Time, g: i64) {
            let i = self.split_at(from.max(self.0[0].0));
            for s in &mut self.0[i..] {
                s.1 += g;
            }
        }
        fn find(&self, now: Time, g: i64, d: Time) -> Time {
            let first = self.0.partition_point(|s| s.0 <= now).saturating_sub(1);
            let i = (first..self.0.len())
                .find(|&i| {
                    let t = self.0[i].0.max(now);
                    self.0[i].1 >= g && self.0[i + 1..].iter().take_while(|s| s.0 < t + d).all(|s| s.1 >= g)
                })
                .expect("the last step fits");
            self.0[i].0.max(now)
        }
        fn reserve(&mut self, now: Time, g: i64, d: Time) -> Time {
            let t = self.find(now, g, d);
            self.take_at(t, g, d);
            t
        }
        fn take_at(&mut self, t: Time, g: i64, d: Time) {
            let a = self.split_at(t);
            let b = self.split_at(t + d);
            for s in &mut self.0[a..b] {
                s.1 -= g;
            }
        }
        fn steps(p: &CountProfile) -> Vec<(Time, i64)> {
            (0..p.blocks.len())
                .flat_map(|b| (0..p.blocks[b].times.len()).map(move |k| (b, k)))
                .map(|pos| (p.time(pos), p.value(pos)))
                .collect()
        }
    }

    /// Both profiles at time 0 with `free` GPUs free and `in_use` more that free up one by one
    /// at random times in `1..=horizon`.
    fn busy(rnd: &mut impl FnMut(u64) -> u64, free: i64, in_use: usize, horizon: u64) -> (CountProfile, Plain) {
        let mut c = CountProfile::new(0, free);
        let mut p = Plain(vec![(0, free)]);
        for _ in 0..in_use {
            let t = 1 + rnd(horizon) as Time;
            c.add_from(t, 1);
            p.add_from(t, 1);
        }
        (c, p)
    }

    #[test]
    fn reserves_in_one_block_as_a_scan_of_every_step() {
        // Time passes fast enough that the profile mostly stays within one block, where
        // `reserve` takes its one-block path; durations include 0 (the general path).
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut rnd = |m: u64| rng.random_range(0..m);
        let mut now = 0;
        // 8 GPUs free, 24 in use.
        let (mut c, mut p) = busy(&mut rnd, 8, 24, 3_000);
        let mut one_block = 0;
        for step in 0..20_000 {
            // About 70% of the 32 GPUs reserved; every 16th job asks for all of them.
            now += rnd(400) as Time;
            c.trim(now);
            p.trim(now);
            let g = if step % 16 == 15 { 32 } else { 1 + rnd(8) as i64 };
            let d = rnd(2_000) as Time;
            one_block += usize::from(c.blocks.len() == 1 && d > 0);
            assert_eq!(c.reserve(now, g, d), p.reserve(now, g, d), "step {step}");
            if step % 50 == 0 {
                assert_eq!(Plain::steps(&c), p.0, "step {step}");
            }
        }
        assert!(one_block > 10_000, "the one-block path should be taken most of the time: {one_block}");
    }

    #[test]
    fn reserves_as_a_scan_of_every_step() {
        // A seeded run of submissions (reservations), running jobs' ends (additions) and passing
        // time (trims) on a 64-GPU cluster, with enough steps to fill many blocks.
        let total = 64i64;
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut rnd = |m: u64| rng.random_range(0..m);
        let mut now = 0;
        // 20 GPUs free, 44 in use.
        let (mut c, mut p) = busy(&mut rnd, 20, 44, 5_000);
        for step in 0..4_000 {
            if step % 50 == 49 {
                now += rnd(300) as Time;
                c.trim(now);
                p.trim(now);
            }
            let range = if rnd(8) == 0 { total as u64 } else { 8 };
            let g = 1 + rnd(range) as i64;
            let long = rnd(4) == 0;
            let d = 1 + rnd(if long { 20_000 } else { 2_000 }) as Time;
            assert_eq!(c.reserve(now, g, d), p.reserve(now, g, d), "step {step}");
            if step % 100 == 0 {
                assert_eq!(Plain::steps(&c), p.0);
            }
        }
        assert!(c.blocks.len() > 10, "the test should span many blocks, got {}", c.blocks.len());
    }

    #[test]
    fn pool_profile_reserves_as_a_scan_of_every_pool() {
        // Five kinds of node (two of the same model with and without a feature), three pick
        // orders. The reference scans each of a job's pools step by step for the earliest slot
        // of its run time there (its estimate at that pool's speed) and takes the earliest,
        // the first in pick order among equal ones. Running jobs' ends (additions),
        // reservations with random pools and passing time (trims).
        use crate::model::ClusterSpec;
        use crate::speed::ModelPick;
        let mut cluster = ClusterSpec::parse("3x4:t4,2x8:v100,4x2:a100,1x8:h100,2x8:v100").unwrap();
        for n in &mut cluster.nodes[10..] {
            n.features = vec!["ib".into()];
        }
        let mut speeds = crate::speed::Speeds::default();
        for (m, v) in [("t4", 0.5), ("v100", 1.0), ("a100", 2.0), ("h100", 3.0)] {
            speeds.set("*", m, v).unwrap();
        }
        for pick in [ModelPick::Fastest, ModelPick::Slowest, ModelPick::First] {
            let empty = Pools::build(&cluster, Placement::Pooled, false, &speeds, pick, true).unwrap();
            assert_eq!(empty.keys().len(), 5);
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let mut rnd = |m: u64| rng.random_range(0..m);
            // Half of each pool busy until a random time.
            let mut now_cap = empty.clone();
            let mut ends = Vec::new();
            for p in 0..5usize {
                for _ in 0..empty.pool_total(p) / 2 {
                    let a = now_cap.place_for(Demand { pools: 1 << p, ..Demand::gpus(1) }).unwrap();
                    now_cap.take(&a);
                    ends.push((1 + rnd(3_000) as Time, a));
                }
            }
            let mut prof = Profile::new(0, &now_cap);
            let mut plain: Vec<Plain> = (0..5).map(|p| Plain(vec![(0, now_cap.pool_free(p) as i64)])).collect();
            for (t, a) in &ends {
                prof.give_from(*t, a);
                plain[empty.pool_of_alloc(a) as usize].add_from(*t, a.gpus() as i64);
            }
            let mut now = 0;
            let (mut off_first, mut faster) = (0, 0);
            for step in 0..3_000 {
                if step % 40 == 39 {
                    now += rnd(200) as Time;
                    prof.trim(now);
                    plain.iter_mut().for_each(|p| p.trim(now));
                }
                let mask = loop {
                    let m = rnd(32) as u128;
                    if m != 0 {
                        break m;
                    }
                };
                let d = Demand { pools: mask, ..Demand::gpus(1 + rnd(8) as u32) };
                if !empty.can_ever_fit_for(d) {
                    continue;
                }
                let base = rnd(1_500) as Time;
                let slowest = scaled(base, empty.slowest(d));
                let (t, end, held) = prof.reserve(now, d, slowest, base, &|_| 1.0);
                let mut want: Option<(Time, Time, usize)> = None;
                for p in empty.candidates(d).filter(|&p| empty.pool_total(p) >= d.gpus as u64) {
                    let dur = scaled(base, empty.pool_speed(0, p)).max(1);
                    let tp = plain[p].find(now, d.gpus as i64, dur);
                    if want.is_none_or(|w| tp < w.0) {
                        want = Some((tp, dur, p));
                    }
                }
                let (tw, dw, pw) = want.unwrap();
                plain[pw].take_at(tw, d.gpus as i64, dw);
                assert_eq!((t, end, held), (tw, tw + dw, Held::Pool(pw as u32)), "step {step} ({pick:?})");
                off_first += usize::from(Some(pw) != empty.candidates(d).next());
                faster += usize::from(dw < slowest.max(1));
            }
            assert!(off_first > 100, "the test should reserve off the first pool often: {off_first}");
            assert!(faster > 100, "the test should reserve on faster pools often: {faster}");
        }
    }

    /// The change profile finds what the profile of every node in every step finds, slot and
    /// nodes, on consolidated clusters of one and of several node sizes, and under topology
    /// placement with asks (required and preferred levels, gang shapes): running jobs' ends,
    /// reservations of every size and passing time.
    #[test]
    fn change_profile_reserves_as_the_node_profile() {
        use crate::model::ClusterSpec;
        use crate::speed::{ModelPick, Speeds};
        let topo = |nodes: usize| {
            let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
            let paths: Vec<Vec<Option<String>>> =
                (0..nodes).map(|i| vec![Some(format!("b{}", i / 4)), Some(format!("s{}", i / 8))]).collect();
            crate::topology::Topology::from_paths(vec!["block".into(), "switch".into()], &names, &paths).unwrap()
        };
        let cases = [("12x4", false), ("4x8,6x4,2x1", false), ("16x2", true), ("24x1", true)];
        // Each cluster with the checkpoint gap the cluster gives, and with one every step.
        let cases = cases.into_iter().flat_map(|c| [(c, None), (c, Some(1))]);
        for (seed, ((spec, with_topo), gap)) in cases.enumerate() {
            let cluster = ClusterSpec::parse(spec).unwrap();
            let mut empty =
                Pools::build(&cluster, Placement::Consolidated, false, &Speeds::default(), ModelPick::default(), false)
                    .unwrap();
            if with_topo {
                empty.set_topology(&topo(cluster.nodes.len()));
            }
            let total = empty.total() as u32;
            let mut rng = ChaCha8Rng::seed_from_u64(10 + seed as u64);
            let mut rnd = |m: u64| rng.random_range(0..m);
            // About half the cluster busy until random times.
            let mut now_cap = empty.clone();
            let mut ends = Vec::new();
            while now_cap.total_free() > empty.total() / 2 {
                let Some(a) = now_cap.place_for(Demand::gpus(1 + rnd(4) as u32)) else { break };
                now_cap.take(&a);
                ends.push((1 + rnd(3_000) as Time, a));
            }
            let mut nodes = Profile::Nodes(NodeProfile { segs: vec![(0, now_cap.clone())] });
            let mut changes = Profile::new(0, &now_cap);
            let Profile::Changes(cp) = &mut changes else { panic!("a change profile") };
            if let Some(gap) = gap {
                cp.gap = gap;
            }
            let mut most_cps = 0;
            for (t, a) in &ends {
                nodes.give_from(*t, a);
                changes.give_from(*t, a);
            }
            let mut now = 0;
            let (mut later, mut gangs) = (0, 0);
            for step in 0..1_500 {
                if step % 30 == 29 {
                    now += rnd(300) as Time;
                    nodes.trim(now);
                    changes.trim(now);
                }
                let g = if rnd(10) == 0 { 1 + rnd(total as u64) as u32 } else { 1 + rnd(6) as u32 };
                let mut d = Demand::gpus(g);
                if with_topo && rnd(3) == 0 {
                    let level = rnd(2) as u8;
                    let need = if rnd(2) == 0 {
                        crate::topology::TopoNeed::required(level)
                    } else {
                        crate::topology::TopoNeed { level, required: false }
                    };
                    d = d.with_topo(need);
                }
                if rnd(6) == 0 && g % 2 == 0 && g <= 8 {
                    d = d.on_nodes(2);
                }
                if !empty.can_ever_fit_for(d) {
                    continue;
                }
                let long = rnd(4) == 0;
                let dur = 1 + rnd(if long { 20_000 } else { 2_000 }) as Time;
                // Half the time, a gang with a node whose index is a multiple of 3 runs 2.35
                // times as long (as one spread over a topology's units would).
                let slowed =
                    |a: &Allocation| if a.parts.len() > 1 && a.parts.iter().any(|p| p.0 % 3 == 0) { 2.35 } else { 1.0 };
                let slow: &dyn Fn(&Allocation) -> f64 = if rnd(2) == 0 { &slowed } else { &|_| 1.0 };
                let want = nodes.reserve(now, d, dur, dur, slow);
                let got = changes.reserve(now, d, dur, dur, slow);
                assert_eq!(got, want, "{spec}, step {step}, {d:?} for {dur}");
                if let Profile::Changes(cp) = &changes {
                    most_cps = most_cps.max(cp.cps.len());
                }
                later += usize::from(got.0 > now);
                gangs += usize::from(matches!(&got.2, Held::Nodes(a) if a.parts.len() > 1));
            }
            assert!(later > 500, "{spec}: the test should reserve in the future often: {later}");
            assert!(gangs > 50, "{spec}: the test should reserve gangs often: {gangs}");
            if gap.is_some() {
                assert!(most_cps > 20, "{spec}: the test should keep checkpoints: {most_cps}");
            }
        }
    }
}
