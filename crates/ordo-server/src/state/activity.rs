//! Live GPU activity in the server's state: agents' samples, attributed to the jobs holding the
//! GPUs (per-job figures), per-GPU and cluster series in bounded ring tables, allocated-but-idle jobs.

use super::*;
use crate::metrics::{Snapshot, Telemetry};
use rusqlite::OptionalExtension;

/// Series resolutions and how many buckets each keeps (a ring: the slot of time `t` is
/// `t / resolution % slots`, so storage is bounded by construction): 5 minutes for a bit over a
/// day, an hour for 15 days.
pub const SERIES: [(i64, i64); 2] = [(300_000, 300), (3_600_000, 360)];
/// How often the cluster series takes the state's figures.
const TICK_MS: i64 = 10_000;
/// How often per-job figures are written (and, at most, lost on a crash).
const FLUSH_MS: i64 = 60_000;
/// A sample is a GPU's current activity for this long.
pub const FRESH_MS: i64 = 30_000;

/// A job's figures so far.
#[derive(Debug, Clone)]
struct JobAcc {
    samples: u64,
    util_sum: f64,
    /// Samples per whole busy percent (0..=100).
    hist: Vec<u64>,
    mem_peak: Option<u64>,
    idle_since: Option<i64>,
    idle_sum: f64,
    idle_n: u64,
    flagged: Option<i64>,
    dirty: bool,
}

impl Default for JobAcc {
    fn default() -> Self {
        JobAcc {
            samples: 0,
            util_sum: 0.0,
            hist: vec![0; 101],
            mem_peak: None,
            idle_since: None,
            idle_sum: 0.0,
            idle_n: 0,
            flagged: None,
            dirty: false,
        }
    }
}

impl JobAcc {
    fn view(&self) -> JobActivity {
        JobActivity {
            samples: self.samples,
            mean_busy_pct: if self.samples > 0 { self.util_sum / self.samples as f64 } else { 0.0 },
            p10_busy_pct: hist_percentile(&self.hist, 10.0),
            peak_mem_mib: self.mem_peak,
            idle_since: self.idle_since,
            idle_flagged: self.flagged,
            reclaim_at: None,
            reclaim_action: None,
        }
    }

    fn hist_text(&self) -> String {
        let v: Vec<String> =
            self.hist.iter().enumerate().filter(|(_, &c)| c > 0).map(|(b, c)| format!("{b}:{c}")).collect();
        v.join(",")
    }
}

/// Nearest-rank percentile of a histogram of whole percents (0 with no samples).
fn hist_percentile(hist: &[u64], p: f64) -> f64 {
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return 0.0;
    }
    let rank = ((p / 100.0 * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for (b, &c) in hist.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return b as f64;
        }
    }
    100.0
}

fn parse_hist(text: &str) -> Vec<u64> {
    let mut h = vec![0; 101];
    for (b, c) in text.split(',').filter_map(|p| p.split_once(':')) {
        if let (Ok(b), Ok(c)) = (b.parse::<usize>(), c.parse::<u64>()) {
            if b <= 100 {
                h[b] += c;
            }
        }
    }
    h
}

/// One GPU's bucket of the per-GPU series.
#[derive(Debug, Clone, Default)]
struct GpuBucket {
    t: i64,
    n: u64,
    util_sum: f64,
    sm_sum: f64,
    sm_n: u64,
    mem_max: Option<u64>,
    power_sum: f64,
    power_n: u64,
    alloc_n: u64,
}

/// One bucket of the cluster series: sums over the ticks in it.
#[derive(Debug, Clone, Default)]
struct ClusterBucket {
    t: i64,
    n: u64,
    gpus: f64,
    allocated: f64,
    busy: f64,
    sampled: f64,
    idle_allocated: f64,
}

/// Live activity kept with the state (see `Core`).
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// The latest sample of each GPU and when it arrived.
    gpus: HashMap<(String, u32), (i64, GpuSample)>,
    last_report: HashMap<String, i64>,
    jobs: HashMap<JobNo, JobAcc>,
    /// Open per-GPU buckets, one per resolution.
    buckets: HashMap<(String, u32), [GpuBucket; 2]>,
    cluster: [ClusterBucket; 2],
    /// The latest time seen (a report or a tick).
    clock: i64,
    last_tick: i64,
    last_flush: i64,
    /// Allocated-but-idle notices for the webhook, taken by `Core::activity_tick`.
    notices: Vec<serde_json::Value>,
    /// Latencies measured by the state (`/metrics`).
    pub(crate) telemetry: Telemetry,
}

/// A job's busy % in one report, and whether it crossed into (or out of) allocated-but-idle.
enum IdleEvent {
    Flagged { id: JobNo, busy: f64, since: i64 },
    Busy { id: JobNo, busy: f64, was: i64 },
}

fn ring(t: i64, r: usize) -> (i64, i64) {
    let (res, slots) = SERIES[r];
    let start = t - t.rem_euclid(res);
    (start, (start / res).rem_euclid(slots))
}

fn check_pct(field: &str, v: f64) -> Result<(), ApiError> {
    if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
        return Err(ApiError::BadRequest(format!("field `{field}`: {v} is not a percentage from 0 to 100")));
    }
    Ok(())
}

impl Core {
    /// Reads the figures of running jobs back after a restart (their idle clocks go on).
    pub(super) fn load_activity(&mut self) -> Result<(), ApiError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT job, samples, util_sum, hist, mem_peak_mib, idle_since, idle_sum, idle_n, idle_flagged
                 FROM job_activity WHERE job = ?1",
            )
            .ctx("load job activity")?;
        let mut jobs = HashMap::new();
        for &id in self.active.keys() {
            let row = st
                .query_row(params![id as i64], |r| {
                    Ok(JobAcc {
                        samples: r.get::<_, i64>(1)? as u64,
                        util_sum: r.get(2)?,
                        hist: parse_hist(&r.get::<_, String>(3)?),
                        mem_peak: r.get::<_, Option<i64>>(4)?.map(|m| m as u64),
                        idle_since: r.get(5)?,
                        idle_sum: r.get(6)?,
                        idle_n: r.get::<_, i64>(7)? as u64,
                        flagged: r.get(8)?,
                        dirty: false,
                    })
                })
                .optional()
                .ctx("load job activity")?;
            if let Some(a) = row {
                jobs.insert(id, a);
            }
        }
        drop(st);
        self.live.jobs = jobs;
        Ok(())
    }

    /// A node's agent reports what its GPUs did: each sample is checked, kept as the GPU's
    /// current activity, added to its series and to the figures of the job holding the GPU. A
    /// job whose GPUs stay under the idle threshold for `idle_after` is flagged
    /// allocated-but-idle (an audit record `idle`, and a webhook notice); it is unflagged when
    /// it gets busy again. Reports closer together than [`MIN_ACTIVITY_INTERVAL_MS`] get 429.
    pub fn activity(&mut self, who: &Principal, rep: &ActivityReport, now: i64) -> Result<(), ApiError> {
        agents::speaks_for(who, &rep.node, "report GPU activity")?;
        let gpus = match self.nodes.get(&rep.node) {
            Some(n) if n.up => n.gpus,
            _ => {
                return Err(ApiError::Conflict(format!(
                    "node {} is not registered or was marked down; register again",
                    rep.node
                )))
            }
        };
        if let Some(&last) = self.live.last_report.get(&rep.node) {
            if now - last < MIN_ACTIVITY_INTERVAL_MS && now >= last {
                return Err(ApiError::TooManyRequests(format!(
                    "node {}: activity reports {} ms apart; at most one every {MIN_ACTIVITY_INTERVAL_MS} ms",
                    rep.node,
                    now - last
                )));
            }
        }
        if rep.gpus.len() > gpus as usize {
            return Err(ApiError::BadRequest(format!(
                "field `gpus`: {} samples, but node {} has {}",
                rep.gpus.len(),
                rep.node,
                ordo_core::words::count(gpus as usize, "GPU")
            )));
        }
        let mut seen = vec![false; gpus as usize];
        for (i, s) in rep.gpus.iter().enumerate() {
            let f = |name: &str| format!("gpus[{i}].{name}");
            if s.gpu >= gpus {
                return Err(ApiError::BadRequest(format!(
                    "field `{}`: {} is not a GPU of node {} (0 to {})",
                    f("gpu"),
                    s.gpu,
                    rep.node,
                    gpus - 1
                )));
            }
            if std::mem::replace(&mut seen[s.gpu as usize], true) {
                return Err(ApiError::BadRequest(format!("field `{}`: GPU {} sampled twice", f("gpu"), s.gpu)));
            }
            check_pct(&f("util_pct"), s.util_pct)?;
            if let Some(v) = s.sm_pct {
                check_pct(&f("sm_pct"), v)?;
            }
            for (name, v) in [("mem_used_mib", s.mem_used_mib), ("mem_total_mib", s.mem_total_mib)] {
                if v.is_some_and(|m| m > MAX_GPU_MEM_MIB) {
                    return Err(ApiError::BadRequest(format!("field `{}`: more than {MAX_GPU_MEM_MIB} MiB", f(name))));
                }
            }
            if let (Some(u), Some(t)) = (s.mem_used_mib, s.mem_total_mib) {
                if u > t {
                    return Err(ApiError::BadRequest(format!(
                        "field `{}`: {u} MiB used of {t} MiB in all",
                        f("mem_used_mib")
                    )));
                }
            }
            if let Some(p) = s.power_w {
                if !(p.is_finite() && (0.0..=MAX_GPU_POWER_W).contains(&p)) {
                    return Err(ApiError::BadRequest(format!(
                        "field `{}`: {p} is not a power from 0 to {MAX_GPU_POWER_W} W",
                        f("power_w")
                    )));
                }
            }
        }
        self.live.last_report.insert(rep.node.clone(), now);
        self.live.clock = self.live.clock.max(now);
        // Which job holds each GPU of the node.
        let mut holder: HashMap<u32, JobNo> = HashMap::new();
        for j in self.active.values() {
            // A multi-node job's GPUs here are its rank's on this node.
            let Some((_, ids)) = placed(j).into_iter().find(|(n, _)| *n == rep.node.as_str()) else { continue };
            for &g in ids {
                holder.insert(g, j.id);
            }
        }
        let mut closed: Vec<(u32, usize, GpuBucket)> = Vec::new();
        let mut per_job: BTreeMap<JobNo, (f64, u32)> = BTreeMap::new();
        for s in &rep.gpus {
            let key = (rep.node.clone(), s.gpu);
            let job = holder.get(&s.gpu).copied();
            let b = self.live.buckets.entry(key.clone()).or_default();
            for (r, bucket) in b.iter_mut().enumerate() {
                let (start, _) = ring(now, r);
                if bucket.n > 0 && bucket.t != start {
                    closed.push((s.gpu, r, std::mem::take(bucket)));
                }
                bucket.t = start;
                bucket.n += 1;
                bucket.util_sum += s.util_pct;
                if let Some(v) = s.sm_pct {
                    bucket.sm_sum += v;
                    bucket.sm_n += 1;
                }
                if let Some(m) = s.mem_used_mib {
                    bucket.mem_max = Some(bucket.mem_max.unwrap_or(0).max(m));
                }
                if let Some(p) = s.power_w {
                    bucket.power_sum += p;
                    bucket.power_n += 1;
                }
                bucket.alloc_n += job.is_some() as u64;
            }
            self.live.gpus.insert(key, (now, s.clone()));
            if let Some(id) = job {
                let a = self.live.jobs.entry(id).or_default();
                a.samples += 1;
                a.util_sum += s.util_pct;
                a.hist[s.util_pct.round().clamp(0.0, 100.0) as usize] += 1;
                if let Some(m) = s.mem_used_mib {
                    a.mem_peak = Some(a.mem_peak.unwrap_or(0).max(m));
                }
                a.dirty = true;
                let e = per_job.entry(id).or_default();
                e.0 += s.util_pct;
                e.1 += 1;
            }
        }
        // Allocated-but-idle: every report under the threshold since `idle_since`.
        let threshold = self.cfg.idle_threshold_pct;
        let mut events = Vec::new();
        for (id, (sum, n)) in per_job {
            let busy = sum / n as f64;
            let Some(a) = self.live.jobs.get_mut(&id) else { continue };
            if busy < threshold {
                let since = *a.idle_since.get_or_insert(now);
                a.idle_sum += busy;
                a.idle_n += 1;
                if a.flagged.is_none() && now - since >= self.cfg.idle_after_ms {
                    a.flagged = Some(now);
                    events.push(IdleEvent::Flagged { id, busy: a.idle_sum / a.idle_n as f64, since });
                }
            } else {
                if let Some(was) = a.flagged.take() {
                    events.push(IdleEvent::Busy { id, busy, was });
                }
                a.idle_since = None;
                a.idle_sum = 0.0;
                a.idle_n = 0;
            }
        }
        if closed.is_empty() && events.is_empty() {
            return Ok(());
        }
        let policy = self.policy.to_string();
        let node = rep.node.clone();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (gpu, r, b) in &closed {
            write_gpu_bucket(&tx, &node, *gpu, *r, b)?;
        }
        let mut notices = Vec::new();
        for e in &events {
            let (id, detail) = match *e {
                IdleEvent::Flagged { id, busy, since } => (
                    id,
                    json!({"event": "allocated_but_idle", "busy_pct": round1(busy), "threshold_pct": threshold,
                           "idle_since": since, "idle_for_ms": now - since}),
                ),
                IdleEvent::Busy { id, busy, was } => {
                    (id, json!({"event": "busy_again", "busy_pct": round1(busy), "flagged_at": was}))
                }
            };
            let Some(j) = self.active.get(&id) else { continue };
            let mut d = detail;
            // Rank 0's node and GPUs; a multi-node job's every rank too.
            d["node"] = json!(j.node);
            d["gpu_ids"] = json!(j.gpu_ids);
            d["nodes"] = json!(j.run_nodes());
            if !j.ranks.is_empty() {
                d["ranks"] = json!(idle_ranks(j));
            }
            audit(&tx, now, &format!("node:{node}"), "idle", Some(id), &policy, &d)?;
            if let Some(a) = self.live.jobs.get(&id) {
                write_job(&tx, id, a, now)?;
            }
            if let IdleEvent::Flagged { .. } = e {
                let mut n = d.clone();
                n["job"] = json!(id);
                n["user"] = json!(j.user);
                n["name"] = json!(j.name);
                n["gpus"] = json!(j.gpus);
                n["idle_after_ms"] = json!(self.cfg.idle_after_ms);
                n["time"] = json!(now);
                notices.push(n);
            }
        }
        tx.commit().ctx("commit GPU activity")?;
        for e in &events {
            let id = match e {
                IdleEvent::Flagged { id, .. } | IdleEvent::Busy { id, .. } => *id,
            };
            if let Some(a) = self.live.jobs.get_mut(&id) {
                a.dirty = false;
            }
        }
        self.live.notices.extend(notices);
        Ok(())
    }

    /// The reclaim rule (`[reclaim]`, docs/SERVER.md, "Giving back idle GPUs"): every running
    /// job flagged allocated-but-idle in its current run, still flagged `grace` later, and whose
    /// user and group the rule covers, is cancelled or requeued. Each gets an audit record
    /// `reclaim` with its evidence (the mean busy % and the number of samples since it went
    /// idle, when it went idle and was flagged, the threshold, the rule) and a webhook notice.
    /// Returns the notices.
    pub fn reclaim_tick(&mut self, now: i64) -> Result<Vec<serde_json::Value>, ApiError> {
        let Some(rule) = self.cfg.reclaim.clone() else { return Ok(vec![]) };
        let mut due: Vec<(JobNo, serde_json::Value)> = Vec::new();
        for (id, a) in &self.live.jobs {
            let Some(flagged) = a.flagged else { continue };
            let Some(j) = self.active.get(id) else { continue };
            let running = j.state == JobState::Running && !j.cancel_requested;
            if !running || now - flagged < rule.grace_ms || flagged < j.start.unwrap_or(i64::MAX) {
                continue;
            }
            if !rule.applies(&j.user, self.cfg.quotas.group_of(&j.user)) {
                continue;
            }
            let busy = if a.idle_n > 0 { a.idle_sum / a.idle_n as f64 } else { 0.0 };
            due.push((
                *id,
                json!({
                    "action": rule.action.as_str(),
                    "busy_pct": round1(busy), "samples": a.idle_n, "threshold_pct": self.cfg.idle_threshold_pct,
                    "idle_since": a.idle_since, "flagged_at": flagged, "idle_for_ms": a.idle_since.map(|s| now - s),
                    "grace_ms": rule.grace_ms, "node": j.node, "nodes": j.run_nodes(), "gpus": j.gpus,
                }),
            ));
        }
        if due.is_empty() {
            return Ok(vec![]);
        }
        due.sort_by_key(|(id, _)| *id);
        let policy = self.policy.to_string();
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (id, d) in &due {
            audit(&tx, now, "reclaim", "reclaim", Some(*id), &policy, d)?;
            if rule.action == crate::config::ReclaimAction::Requeue {
                tx.prepare_cached("UPDATE jobs SET state='preempting' WHERE id=?1")
                    .and_then(|mut s| s.execute(params![*id as i64]))
                    .ctx("record the reclaim")?;
            }
        }
        tx.commit().ctx("commit reclaims")?;
        let mut notices = Vec::new();
        for (id, d) in &due {
            // Its next run starts with a clean idle clock.
            if let Some(a) = self.live.jobs.get_mut(id) {
                a.flagged = None;
                a.idle_since = None;
                a.idle_sum = 0.0;
                a.idle_n = 0;
            }
            let Some(j) = self.active.get_mut(id) else { continue };
            let mut n = d.clone();
            n["event"] = json!("reclaimed");
            n["job"] = json!(id);
            n["user"] = json!(j.user);
            n["name"] = json!(j.name);
            n["time"] = json!(now);
            notices.push(n);
            if rule.action == crate::config::ReclaimAction::Requeue {
                // Stopped as a preemption is: its agent kills it, its end requeues it.
                j.state = JobState::Preempting;
                let nodes = j.run_nodes();
                self.to_wake.extend(nodes);
            }
        }
        if rule.action == crate::config::ReclaimAction::Cancel {
            let ids: Vec<JobNo> = due.iter().map(|(id, _)| *id).collect();
            let who = crate::auth::Principal { user: "reclaim".into(), role: crate::auth::Role::Admin };
            self.cancel_many(&who, &ids, None, now)?;
        }
        Ok(notices)
    }

    /// Runs about every 10 s (it returns at once otherwise): adds the state's figures (GPUs up,
    /// allocated, busy, allocated-but-idle) to the cluster series, closes per-GPU buckets whose
    /// period is over, and every minute writes the figures of jobs that got samples (dropping
    /// those of jobs that ended). Returns the allocated-but-idle notices for the webhook.
    pub fn activity_tick(&mut self, now: i64) -> Result<Vec<serde_json::Value>, ApiError> {
        self.live.clock = self.live.clock.max(now);
        if now - self.live.last_tick < TICK_MS {
            return Ok(std::mem::take(&mut self.live.notices));
        }
        self.live.last_tick = now;
        let s = self.figures(now);
        let mut rows = Vec::new();
        for (r, b) in self.live.cluster.iter_mut().enumerate() {
            let (start, _) = ring(now, r);
            if b.t != start {
                *b = ClusterBucket { t: start, ..ClusterBucket::default() };
            }
            b.n += 1;
            b.gpus += s.gpus_total as f64;
            b.allocated += s.gpus_allocated as f64;
            b.busy += s.gpus_busy;
            b.sampled += s.gpus_sampled as f64;
            b.idle_allocated += s.gpus_allocated_idle as f64;
            rows.push((r, b.clone()));
        }
        let mut closed = Vec::new();
        for ((node, gpu), b) in self.live.buckets.iter_mut() {
            for (r, bucket) in b.iter_mut().enumerate() {
                if bucket.n > 0 && bucket.t + SERIES[r].0 <= now {
                    closed.push((node.clone(), *gpu, r, std::mem::take(bucket)));
                }
            }
        }
        let flush = now - self.live.last_flush >= FLUSH_MS;
        let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
        for (r, b) in &rows {
            let (res, slots) = SERIES[*r];
            tx.prepare_cached(
                "INSERT OR REPLACE INTO cluster_series(res, slot, t, n, gpus, allocated, busy, sampled, idle_allocated)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    res,
                    (b.t / res).rem_euclid(slots),
                    b.t,
                    b.n as i64,
                    b.gpus,
                    b.allocated,
                    b.busy,
                    b.sampled,
                    b.idle_allocated
                ])
            })
            .ctx("write cluster series")?;
        }
        for (node, gpu, r, b) in &closed {
            write_gpu_bucket(&tx, node, *gpu, *r, b)?;
        }
        if flush {
            for (&id, a) in self.live.jobs.iter().filter(|(_, a)| a.dirty) {
                write_job(&tx, id, a, now)?;
            }
        }
        tx.commit().ctx("commit activity series")?;
        if flush {
            self.live.last_flush = now;
            let active = &self.active;
            self.live.jobs.retain(|id, _| active.contains_key(id));
            for a in self.live.jobs.values_mut() {
                a.dirty = false;
            }
            let nodes = &self.nodes;
            self.live.gpus.retain(|(n, g), (t, _)| nodes.get(n).is_some_and(|x| *g < x.gpus) && now - *t < 3_600_000);
            self.live.buckets.retain(|(n, _), b| nodes.contains_key(n) && b.iter().any(|x| x.n > 0));
        }
        Ok(std::mem::take(&mut self.live.notices))
    }

    /// A scheduling pass, timed into `ordo_scheduling_pass_duration_seconds` when jobs wait.
    pub fn timed_pass(&mut self, now: i64) -> Result<Option<i64>, ApiError> {
        let waiting = self.sched.waiting_len() > 0;
        let t0 = std::time::Instant::now();
        let r = self.pass(now);
        if waiting {
            self.live.telemetry.pass.observe(t0.elapsed().as_secs_f64());
        }
        r
    }

    /// Counts a job's first start into the submit-to-start histogram.
    pub(super) fn started_first(&self, j: &JobInfo, now: i64) {
        if j.attempts == 0 {
            self.live.telemetry.submit_to_start.observe((now - j.submit).max(0) as f64 / 1000.0);
        }
    }

    /// The latencies the state measures (shared with `/metrics`).
    pub fn telemetry(&self) -> Telemetry {
        self.live.telemetry.clone()
    }

    /// A job's figures: a running one's from memory, an ended one's from the database.
    pub(super) fn job_activity(&self, id: JobNo) -> Result<Option<JobActivity>, ApiError> {
        if let Some(a) = self.live.jobs.get(&id) {
            let mut v = a.view();
            match (self.active.get(&id), &self.cfg.reclaim) {
                (None, _) => {
                    v.idle_since = None;
                    v.idle_flagged = None;
                }
                (Some(j), Some(rule)) if rule.applies(&j.user, self.cfg.quotas.group_of(&j.user)) => {
                    v.reclaim_at = v.idle_flagged.map(|f| f + rule.grace_ms);
                    v.reclaim_action = v.idle_flagged.map(|_| rule.action.as_str().to_string());
                }
                _ => {}
            }
            return Ok(Some(v));
        }
        stored_activity(&self.conn, id)
    }

    /// Fills `activity` of each job that has figures.
    pub(super) fn attach_activity(&self, jobs: &mut [JobInfo]) -> Result<(), ApiError> {
        for j in jobs.iter_mut().filter(|j| j.state != JobState::Pending || j.restarts > 0) {
            j.activity = self.job_activity(j.id)?;
        }
        Ok(())
    }

    /// A node's mean busy % over its GPUs with a fresh sample, and its allocated-but-idle jobs.
    pub(super) fn node_activity(&self, node: &str) -> (Option<f64>, Vec<JobNo>) {
        let gpus = self.nodes.get(node).map_or(0, |n| n.gpus);
        let fresh: Vec<f64> = (0..gpus)
            .filter_map(|g| self.live.gpus.get(&(node.to_string(), g)))
            .filter(|(t, _)| self.live.clock - t < FRESH_MS)
            .map(|(_, s)| s.util_pct)
            .collect();
        let busy = (!fresh.is_empty()).then(|| fresh.iter().sum::<f64>() / fresh.len() as f64);
        let mut idle: Vec<JobNo> =
            self.active.values().filter(|j| j.rank_on(node).is_some() && self.is_flagged(j.id)).map(|j| j.id).collect();
        idle.sort_unstable();
        (busy, idle)
    }

    fn is_flagged(&self, id: JobNo) -> bool {
        self.live.jobs.get(&id).is_some_and(|a| a.flagged.is_some())
    }

    /// Every GPU of every known node now, and the allocated-but-idle jobs.
    pub fn gpus_status(&self, now: i64) -> GpusResponse {
        let mut holder: HashMap<(&str, u32), &JobInfo> = HashMap::new();
        for j in self.active.values() {
            // Every rank's GPUs on its node.
            for (n, ids) in placed(j) {
                for &g in ids {
                    holder.insert((n, g), j);
                }
            }
        }
        let mut nodes: Vec<(&String, &Node)> = self.nodes.iter().collect();
        nodes.sort_by_key(|(_, n)| n.seq);
        let mut gpus = Vec::new();
        for (name, n) in nodes {
            for g in 0..n.gpus {
                let j = holder.get(&(name.as_str(), g)).copied();
                let s = self.live.gpus.get(&(name.clone(), g)).filter(|(t, _)| now - t < FRESH_MS);
                gpus.push(GpuStatus {
                    node: name.clone(),
                    gpu: g,
                    up: n.up,
                    job: j.map(|j| j.id),
                    user: j.map(|j| j.user.clone()),
                    sample: s.map(|(_, x)| x.clone()),
                    sampled_at: s.map(|(t, _)| *t),
                    idle: j.is_some_and(|j| self.is_flagged(j.id)),
                });
            }
        }
        let mut idle: Vec<IdleJob> = self
            .active
            .values()
            .filter_map(|j| {
                let a = self.live.jobs.get(&j.id)?;
                Some(IdleJob {
                    job: j.id,
                    user: j.user.clone(),
                    name: j.name.clone(),
                    node: j.node.clone().unwrap_or_default(),
                    gpu_ids: j.gpu_ids.clone(),
                    ranks: if j.ranks.is_empty() { vec![] } else { idle_ranks(j) },
                    idle_since: a.idle_since?,
                    flagged_at: a.flagged?,
                    busy_pct: round1(if a.idle_n > 0 { a.idle_sum / a.idle_n as f64 } else { 0.0 }),
                })
            })
            .collect();
        idle.sort_by_key(|i| i.job);
        GpusResponse {
            idle_threshold_pct: self.cfg.idle_threshold_pct,
            idle_after_ms: self.cfg.idle_after_ms,
            gpus,
            idle,
        }
    }

    /// The cluster's utilisation series over the last `span_ms` at the resolution that keeps
    /// it (5 minutes up to a day, an hour beyond).
    pub fn utilization(&self, span_ms: i64, now: i64) -> Result<UtilizationResponse, ApiError> {
        let r = if span_ms <= 86_400_000 { 0 } else { 1 };
        let (res, _) = SERIES[r];
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT t, n, gpus, allocated, busy, sampled, idle_allocated FROM cluster_series
                 WHERE res = ?1 AND t > ?2 ORDER BY t",
            )
            .ctx("read utilisation")?;
        let rows = st
            .query_map(params![res, now - span_ms - res], |r| {
                let n = (r.get::<_, i64>(1)?).max(1) as f64;
                Ok(UtilPoint {
                    t: r.get(0)?,
                    gpus: r.get::<_, f64>(2)? / n,
                    allocated: r.get::<_, f64>(3)? / n,
                    busy: r.get::<_, f64>(4)? / n,
                    sampled: r.get::<_, f64>(5)? / n,
                    idle_allocated: r.get::<_, f64>(6)? / n,
                })
            })
            .ctx("read utilisation")?;
        let points = rows.collect::<Result<Vec<_>, _>>().ctx("read utilisation")?;
        Ok(UtilizationResponse { span_ms, resolution_ms: res, points })
    }

    /// The figures `/metrics` and the cluster series show.
    fn figures(&self, now: i64) -> Snapshot {
        let mut s = Snapshot::default();
        for n in self.nodes.values().filter(|n| n.up) {
            s.gpus_total += n.gpus as u64;
        }
        for j in self.active.values() {
            s.gpus_allocated += j.gpus as u64;
            *s.active_by_state.entry(j.state.as_str()).or_default() += 1;
            if self.is_flagged(j.id) {
                s.gpus_allocated_idle += j.gpus as u64;
                s.jobs_allocated_idle += 1;
            }
            if j.state == JobState::Running {
                *s.running_gpus.entry((j.user.clone(), group_of(&j.user))).or_default() += j.gpus as u64;
            }
        }
        for ((node, g), (t, x)) in &self.live.gpus {
            if now - t < FRESH_MS && self.nodes.get(node).is_some_and(|n| n.up && *g < n.gpus) {
                s.gpus_busy += x.util_pct / 100.0;
                s.gpus_sampled += 1;
            }
        }
        s
    }

    /// Everything `/metrics` shows from the state, now.
    pub fn snapshot(&self, now: i64) -> Snapshot {
        let mut s = self.figures(now);
        let ex = self.explained(now, true, None);
        for r in ex.reasons.iter().filter(|(j, _)| self.sched.is_waiting(**j)).map(|(_, r)| r) {
            let reason = match self.shown(r) {
                Reason::Resources { .. } => "resources",
                Reason::NodeFit { .. } => "node_fit",
                Reason::Constraint { .. } => "constraint",
                Reason::Priority { .. } => "priority",
                Reason::Reserved { .. } => "reserved",
                Reason::Reservation { .. } => "reservation",
                Reason::Outranked { .. } => "outranked",
                Reason::Quota { .. } => "quota",
            };
            *s.pending_by_reason.entry(reason).or_default() += 1;
        }
        // Chosen by the policy: they start at the next pass, or wait for the GPUs, CPUs or
        // memory a preempted job still holds (`blocked`).
        let chosen = ex.order.iter().filter(|j| !ex.reasons.contains_key(j) && self.sched.is_waiting(**j));
        for x in chosen.map(|j| j.0 as JobNo) {
            let reason = if self.blocked.contains_key(&x) { "blocked" } else { "starting" };
            *s.pending_by_reason.entry(reason).or_default() += 1;
        }
        for j in self.pending.values() {
            if j.held_by.is_some() {
                *s.pending_by_reason.entry("held").or_default() += 1;
            } else if self.waits_on_deps(j.id) {
                *s.pending_by_reason.entry("dependency").or_default() += 1;
            } else if self.held.contains(&j.id) {
                *s.pending_by_reason.entry("unplaceable").or_default() += 1;
            }
        }
        s.gpus = self.gpus_status(now).gpus;
        let mut nodes: Vec<(&String, &Node)> = self.nodes.iter().collect();
        nodes.sort_by_key(|(_, n)| n.seq);
        s.nodes = nodes.iter().map(|(name, n)| ((*name).clone(), n.up, n.last_seen, n.gpus)).collect();
        s.node_kinds = nodes
            .iter()
            .map(|(name, n)| crate::metrics::NodeKind {
                node: (*name).clone(),
                gpu_model: n.gpu_model.clone().unwrap_or_else(|| "unknown".into()),
                gpu_mem_mib: n.gpu_mem_mib,
                features: n.features.join(","),
                fake: n.fake,
            })
            .collect();
        let busy: std::collections::HashSet<String> = self.active.values().flat_map(|j| j.run_nodes()).collect();
        s.node_status = nodes
            .into_iter()
            .map(|(name, n)| {
                let busy = busy.contains(name.as_str());
                let m = n.maint.as_ref().map(|m| (m.kind.as_str(), m.by.clone(), m.reason.clone()));
                (name.clone(), n.status(busy), m)
            })
            .collect();
        s
    }
}

/// The group a user's GPUs count for. The server has no groups yet: a user is their own group,
/// as for the scheduler's fair-share policies (see `job_req`).
pub fn group_of(user: &str) -> String {
    user.to_string()
}

/// A multi-node job's ranks as idle notices and `GET /v1/gpus` name them: node and GPUs.
fn idle_ranks(j: &JobInfo) -> Vec<IdleRank> {
    placed(j).into_iter().map(|(node, ids)| IdleRank { node: node.to_string(), gpu_ids: ids.to_vec() }).collect()
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn write_gpu_bucket(tx: &Connection, node: &str, gpu: u32, r: usize, b: &GpuBucket) -> Result<(), DbError> {
    let (res, slots) = SERIES[r];
    tx.prepare_cached(
        "INSERT OR REPLACE INTO gpu_series(res, node, gpu, slot, t, n, util_sum, sm_sum, sm_n, mem_max_mib,
         power_sum, power_n, alloc_n) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )
    .and_then(|mut st| {
        st.execute(params![
            res,
            node,
            gpu,
            (b.t / res).rem_euclid(slots),
            b.t,
            b.n as i64,
            b.util_sum,
            b.sm_sum,
            b.sm_n as i64,
            b.mem_max.map(|m| m as i64),
            b.power_sum,
            b.power_n as i64,
            b.alloc_n as i64
        ])
    })
    .ctx("write GPU series")?;
    Ok(())
}

fn write_job(tx: &Connection, id: JobNo, a: &JobAcc, now: i64) -> Result<(), DbError> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO job_activity(job, samples, util_sum, hist, mem_peak_mib, idle_since, idle_sum,
         idle_n, idle_flagged, updated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id as i64,
            a.samples as i64,
            a.util_sum,
            a.hist_text(),
            a.mem_peak.map(|m| m as i64),
            a.idle_since,
            a.idle_sum,
            a.idle_n as i64,
            a.flagged,
            now
        ])
    })
    .ctx("write job activity")?;
    Ok(())
}

/// An ended job's stored figures.
fn stored_activity(conn: &Connection, id: JobNo) -> Result<Option<JobActivity>, ApiError> {
    let row = conn
        .prepare_cached("SELECT samples, util_sum, hist, mem_peak_mib FROM job_activity WHERE job = ?1")
        .and_then(|mut st| {
            st.query_row(params![id as i64], |r| {
                let samples = r.get::<_, i64>(0)? as u64;
                let sum: f64 = r.get(1)?;
                Ok(JobActivity {
                    samples,
                    mean_busy_pct: if samples > 0 { sum / samples as f64 } else { 0.0 },
                    p10_busy_pct: hist_percentile(&parse_hist(&r.get::<_, String>(2)?), 10.0),
                    peak_mem_mib: r.get::<_, Option<i64>>(3)?.map(|m| m as u64),
                    idle_since: None,
                    idle_flagged: None,
                    reclaim_at: None,
                    reclaim_action: None,
                })
            })
            .optional()
        })
        .ctx("read job activity")?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_whole_percents() {
        let mut h = vec![0u64; 101];
        assert_eq!(hist_percentile(&h, 10.0), 0.0);
        // 10 samples: 1 at 2%, 9 at 80%: p10 is 2 (the first sample), p20 is 80.
        h[2] = 1;
        h[80] = 9;
        assert_eq!(hist_percentile(&h, 10.0), 2.0);
        assert_eq!(hist_percentile(&h, 20.0), 80.0);
        let a = JobAcc { hist: h.clone(), ..JobAcc::default() };
        assert_eq!(parse_hist(&a.hist_text()), h);
        assert_eq!(a.hist_text(), "2:1,80:9");
    }

    #[test]
    fn ring_slots_wrap() {
        let (res, slots) = SERIES[0];
        assert_eq!(ring(res * slots + 7, 0), (res * slots, 0));
        assert_eq!(ring(res * (slots + 3) + 1, 0).1, 3);
        assert_eq!(ring(3_600_000 * 361, 1), (3_600_000 * 361, 1));
    }
}
