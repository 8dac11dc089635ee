//! Before and after a change of policy (`ordo before-after`): what really happened in each
//! period, and how much of the difference the order made, by replaying each period's own jobs
//! under the other period's policy on the same cluster.
//!
//! With `A` and `B` the periods, `a` and `b` their policies and `sim(jobs, policy)` a replay:
//!
//! - the order's part is the mean, over both periods, of the change the other policy makes on
//!   the same jobs: `((sim(A, b) - sim(A, a)) + (sim(B, b) - sim(B, a))) / 2`;
//! - the workload's part is the mean, over both policies, of the change from A's jobs to B's:
//!   `((sim(B, a) - sim(A, a)) + (sim(B, b) - sim(A, b))) / 2`;
//! - the two add up to `sim(B, b) - sim(A, a)`; what the real difference has beyond that is the
//!   replay's gap (the simulator's disagreement with what ran, shown as its fidelity).
//!
//! Intervals are percentile bootstraps: days (or jobs) of each period are drawn again with
//! replacement, and every figure is recomputed from the per-job results of the same replays. They
//! cover which days (jobs) happened to come, not the simulator's error (the fidelity shows that).

use crate::fmt::dur;
use crate::page::{Bars, Page, PageSection};
use crate::sections::{Cell, Table};
// Nearest-rank, as every other percentile ordo reports (docs/METRICS.md).
use ordo_sim::metrics::percentile;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// One day in ms.
pub const DAY_MS: i64 = 86_400_000;

/// A period needs at least this many days with submissions for intervals over days; below, the
/// jobs are drawn.
pub const MIN_DAYS_FOR_DAY_BOOTSTRAP: usize = 7;

/// A start counts as reproduced when the replay starts the job within this of when it really
/// started (agents' latency: the poll that takes the job, the process start).
pub const EXACT_START_MS: i64 = 1000;

/// When a run started and ended (ms, the workload's time scale).
pub type Run = (i64, i64);

/// One job of a period: as it really ran, replayed under its period's policy (`own`), and
/// replayed under the other period's policy (`other`).
#[derive(Debug, Clone)]
pub struct PeriodJob {
    /// Submit time.
    pub submit: i64,
    /// GPUs.
    pub gpus: u32,
    /// Run time (ms).
    pub runtime: i64,
    /// Owner.
    pub user: String,
    /// First start and completion as it really ran.
    pub actual: Run,
    /// The same, replayed under the period's own policy.
    pub own: Run,
    /// The same, replayed under the other period's policy.
    pub other: Run,
}

/// One period, as the caller measured and replayed it.
#[derive(Debug, Clone)]
pub struct PeriodInput {
    /// `before` or `after`.
    pub label: String,
    /// Start of the period (submit times from here).
    pub from: i64,
    /// End of the period (submit times before here).
    pub to: i64,
    /// `from` and `to` as words (dates, or times into the history).
    pub from_text: String,
    /// See `from_text`.
    pub to_text: String,
    /// The policy in force.
    pub policy: String,
    /// Its jobs (those in both replays).
    pub jobs: Vec<PeriodJob>,
    /// Jobs submitted in the period that are not in `jobs` (never started in a replay).
    pub left_out: usize,
    /// GPU-time held by running jobs over the period / (GPUs x its length).
    pub allocated: f64,
    /// Busy GPU-time / (GPUs x length), where the agents sampled the GPUs, and the share of the
    /// held GPU-time that was sampled.
    pub busy: Option<(f64, f64)>,
}

/// The change of policy between the periods, as the audit log recorded it.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// When (words: a date, or a time into the history).
    pub at: String,
    /// Who made it.
    pub actor: String,
    /// From which policy.
    pub from: String,
    /// To which.
    pub to: String,
    /// Their reason.
    pub reason: String,
}

/// What the page is made from, beside the periods.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Title.
    pub title: String,
    /// Where the history came from.
    pub source: String,
    /// The cluster, in words.
    pub cluster: String,
    /// Its GPUs.
    pub gpus: u64,
    /// The change, when the audit log holds it.
    pub change: Option<Change>,
    /// Whether the replays carried the jobs waiting or running at the change over it (both
    /// periods replayed together, the policy changed at the split); else each period was
    /// replayed alone from an empty cluster.
    pub carried: bool,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Their seed.
    pub seed: u64,
    /// Draw days (`Some(true)`) or jobs (`Some(false)`); `None`: days when both periods have
    /// at least [`MIN_DAYS_FOR_DAY_BOOTSTRAP`] days with submissions, else jobs.
    pub draw_days: Option<bool>,
    /// RFC 3339 time the page was made.
    pub generated_at: String,
    /// ordo's version.
    pub ordo_version: String,
}

/// What the page shows of one period.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodSummary {
    /// `before` or `after`.
    pub label: String,
    /// From (words).
    pub from: String,
    /// To (words).
    pub to: String,
    /// Length in days.
    pub days: f64,
    /// The policy in force.
    pub policy: String,
    /// Jobs compared.
    pub jobs: usize,
    /// Jobs left out (never started in a replay).
    pub left_out: usize,
    /// Its jobs still waiting when it ended (they really started under the next period's
    /// policy).
    pub waiting_at_end: usize,
    /// Its jobs still running when it ended.
    pub running_at_end: usize,
    /// GPU-hours of work submitted.
    pub gpu_hours: f64,
    /// Offered load: work submitted / (GPUs x length).
    pub offered_load: f64,
    /// Utilisation, allocated.
    pub allocated: f64,
    /// Utilisation, really busy (sampled GPUs), when measured.
    pub busy: Option<f64>,
    /// Share of held GPU-time that was sampled.
    pub busy_measured: Option<f64>,
    /// Mean wait (s), as it ran.
    pub mean_wait_s: f64,
    /// 95th percentile of wait (s).
    pub p95_wait_s: f64,
    /// Mean completion time (s).
    pub mean_jct_s: f64,
}

/// A figure with its bootstrap interval.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Estimate {
    /// From all the jobs.
    pub value: f64,
    /// 2.5th percentile of the resamples (nearest rank).
    pub low: f64,
    /// 97.5th percentile.
    pub high: f64,
}

impl Estimate {
    /// Whether the interval lies wholly below zero.
    pub fn surely_negative(&self) -> bool {
        self.high < 0.0
    }
    /// Whether it lies wholly above zero.
    pub fn surely_positive(&self) -> bool {
        self.low > 0.0
    }
}

/// How one measure changed, and what made the change.
#[derive(Debug, Clone, Serialize)]
pub struct Effect {
    /// `mean_wait_s` or `mean_jct_s`.
    pub measure: String,
    /// Before, as it ran (s).
    pub before: f64,
    /// After, as it ran (s).
    pub after: f64,
    /// After minus before (s).
    pub observed: Estimate,
    /// The order's part (s): the other policy on the same jobs, mean of both periods.
    pub order: Estimate,
    /// The order's part as a percentage of what the before policy gives the same jobs (the mean
    /// over both periods); `None` when that is zero.
    pub order_pct: Option<f64>,
    /// The order's part on the before period's jobs.
    pub order_on_before: Estimate,
    /// On the after period's jobs.
    pub order_on_after: Estimate,
    /// The workload's part (s).
    pub workload: Estimate,
    /// The real difference less the replayed one (s).
    pub replay_gap: f64,
}

/// How closely the replay under the policy in force reproduces what ran.
#[derive(Debug, Clone, Serialize)]
pub struct Fidelity {
    /// The period.
    pub label: String,
    /// Its policy.
    pub policy: String,
    /// Jobs.
    pub jobs: usize,
    /// Jobs the replay starts within [`EXACT_START_MS`] of their real start.
    pub exact_starts: usize,
    /// Mean |replayed start - real start| (s).
    pub mean_abs_start_error_s: f64,
    /// Its 95th percentile (s).
    pub p95_abs_start_error_s: f64,
    /// Its largest (s).
    pub max_abs_start_error_s: f64,
    /// Spearman's rank correlation of the start order (real against replayed); `None` under
    /// two jobs or when every job started at once.
    pub rank_correlation: Option<f64>,
    /// Mean wait as it ran (s).
    pub mean_wait_real_s: f64,
    /// Mean wait replayed (s).
    pub mean_wait_replay_s: f64,
    /// (replayed - real) / real, percent; `None` when the real mean is zero.
    pub wait_error_pct: Option<f64>,
}

/// Mean wait per size class.
#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    /// `1 GPU`, `2-4 GPUs`, ...
    pub class: String,
    /// Jobs before / after.
    pub jobs: [usize; 2],
    /// Mean wait as it ran, before / after (s); `None` without jobs.
    pub mean_wait_s: [Option<f64>; 2],
    /// Mean completion time as it ran, before / after (s); `None` without jobs.
    pub mean_jct_s: [Option<f64>; 2],
    /// The order's part for this class (s): the other policy on the same jobs, mean of the
    /// periods that have such jobs.
    pub order_s: Option<f64>,
}

/// One user across the periods.
#[derive(Debug, Clone, Serialize)]
pub struct UserRow {
    /// Name (`(others)` for the rest).
    pub user: String,
    /// Share of the GPU-hours submitted, before / after.
    pub share: [f64; 2],
    /// Mean wait as it ran, before / after (s).
    pub mean_wait_s: [Option<f64>; 2],
}

/// How the intervals were drawn.
#[derive(Debug, Clone, Serialize)]
pub struct Bootstrap {
    /// `days` or `jobs`.
    pub unit: String,
    /// Resamples.
    pub resamples: usize,
    /// Seed.
    pub seed: u64,
    /// In words.
    pub text: String,
}

/// What the evidence supports.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The order cut waits, on both periods' jobs, beyond the interval.
    OrderHelped,
    /// The order made waits longer.
    OrderHurt,
    /// Waits changed, but the order does not explain it: the workload does.
    WorkloadNotOrder,
    /// No change the intervals can tell from chance.
    NoClearChange,
    /// Both periods ran the same policy.
    SamePolicy,
}

/// The before/after page's content (`--out x.json` writes exactly this).
#[derive(Debug, Clone, Serialize)]
pub struct BeforeAfter {
    /// Title.
    pub title: String,
    /// When the page was made.
    pub generated_at: String,
    /// Which ordo made it.
    pub ordo_version: String,
    /// The history.
    pub source: String,
    /// The cluster.
    pub cluster: String,
    /// Its GPUs.
    pub gpus: u64,
    /// The change of policy, as recorded.
    pub change: Option<Change>,
    /// What the evidence supports.
    pub verdict: Verdict,
    /// The one sentence that matters, never more than the counterfactual supports.
    pub headline: String,
    /// Further sentences (cautions).
    pub notes: Vec<String>,
    /// Before and after.
    pub periods: Vec<PeriodSummary>,
    /// Mean wait and mean JCT: observed, the order's part, the workload's part.
    pub effects: Vec<Effect>,
    /// The replay under the policy in force against what ran.
    pub fidelity: Vec<Fidelity>,
    /// Mean wait by job size.
    pub by_size: Vec<SizeRow>,
    /// Per user.
    pub users: Vec<UserRow>,
    /// How the intervals were drawn.
    pub bootstrap: Bootstrap,
    /// Whether the replays carried the jobs at the change over it ([`Options::carried`]).
    pub carried: bool,
    /// Mean wait as it ran and replayed under each policy (s), for the chart:
    /// `[period][as run, under before's policy, under after's policy]`.
    pub wait_chart: Vec<[f64; 3]>,
}

/// Why a page cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PeriodsError {
    /// A period without jobs.
    #[error("the {0} period has no job that ran (nothing to compare); choose another split or period")]
    Empty(String),
    /// Not two periods.
    #[error("need exactly two periods, got {0}")]
    Count(usize),
}

#[derive(Clone, Copy)]
enum Measure {
    Wait,
    Jct,
}

fn per_job(j: &PeriodJob, r: Run, m: Measure) -> f64 {
    let ms = match m {
        Measure::Wait => r.0 - j.submit,
        Measure::Jct => r.1 - j.submit,
    };
    ms as f64 / 1000.0
}

/// Sums over a group of jobs: count, and per measure, actual / own / other.
#[derive(Clone, Copy, Default)]
struct Sums {
    n: f64,
    v: [[f64; 3]; 2],
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.n += o.n;
        for m in 0..2 {
            for k in 0..3 {
                self.v[m][k] += o.v[m][k];
            }
        }
    }
    fn of(j: &PeriodJob) -> Sums {
        let mut s = Sums { n: 1.0, ..Sums::default() };
        for (mi, m) in [Measure::Wait, Measure::Jct].into_iter().enumerate() {
            s.v[mi] = [per_job(j, j.actual, m), per_job(j, j.own, m), per_job(j, j.other, m)];
        }
        s
    }
    fn mean(&self, m: usize, k: usize) -> f64 {
        if self.n == 0.0 {
            0.0
        } else {
            self.v[m][k] / self.n
        }
    }
}

/// The figures of one draw, per measure: observed, order on A, order on B, order, workload.
fn figures(a: &Sums, b: &Sums, m: usize) -> [f64; 5] {
    let (act_a, own_a, oth_a) = (a.mean(m, 0), a.mean(m, 1), a.mean(m, 2));
    let (act_b, own_b, oth_b) = (b.mean(m, 0), b.mean(m, 1), b.mean(m, 2));
    let order_a = oth_a - own_a;
    let order_b = own_b - oth_b;
    let workload = ((oth_b - own_a) + (own_b - oth_a)) / 2.0;
    [act_b - act_a, order_a, order_b, (order_a + order_b) / 2.0, workload]
}

/// Groups of a period for the bootstrap: its jobs by submit day, or each job alone.
fn groups(p: &PeriodInput, by_days: bool) -> Vec<Sums> {
    if !by_days {
        return p.jobs.iter().map(Sums::of).collect();
    }
    let mut days: std::collections::BTreeMap<i64, Sums> = std::collections::BTreeMap::new();
    for j in &p.jobs {
        days.entry((j.submit - p.from).div_euclid(DAY_MS)).or_default().add(&Sums::of(j));
    }
    days.into_values().collect()
}

fn total(g: &[Sums]) -> Sums {
    let mut s = Sums::default();
    for x in g {
        s.add(x);
    }
    s
}

/// Percentile-bootstrap intervals of the five figures of both measures.
fn intervals(ga: &[Sums], gb: &[Sums], resamples: usize, seed: u64) -> [[(f64, f64); 5]; 2] {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut draws: Vec<[[f64; 5]; 2]> = Vec::with_capacity(resamples);
    let draw = |g: &[Sums], rng: &mut rand_chacha::ChaCha8Rng| {
        let mut s = Sums::default();
        for _ in 0..g.len() {
            s.add(&g[rng.random_range(0..g.len())]);
        }
        s
    };
    for _ in 0..resamples {
        let a = draw(ga, &mut rng);
        let b = draw(gb, &mut rng);
        draws.push([figures(&a, &b, 0), figures(&a, &b, 1)]);
    }
    let mut out = [[(0.0, 0.0); 5]; 2];
    for m in 0..2 {
        for f in 0..5 {
            let mut v: Vec<f64> = draws.iter().map(|d| d[m][f]).collect();
            v.sort_by(f64::total_cmp);
            out[m][f] = (percentile(&v, 2.5), percentile(&v, 97.5));
        }
    }
    out
}

/// Average ranks (ties share the mean of their ranks).
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut k = i;
        while k + 1 < idx.len() && x[idx[k + 1]] == x[idx[i]] {
            k += 1;
        }
        let mean = (i + k) as f64 / 2.0 + 1.0;
        for &j in &idx[i..=k] {
            r[j] = mean;
        }
        i = k + 1;
    }
    r
}

/// Spearman's rank correlation; `None` under two values or without spread.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() < 2 || x.len() != y.len() {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

fn fidelity(p: &PeriodInput) -> Fidelity {
    let mut err: Vec<f64> = p.jobs.iter().map(|j| ((j.own.0 - j.actual.0).abs() as f64) / 1000.0).collect();
    let exact = p.jobs.iter().filter(|j| (j.own.0 - j.actual.0).abs() <= EXACT_START_MS).count();
    err.sort_by(f64::total_cmp);
    let n = p.jobs.len().max(1) as f64;
    let real: Vec<f64> = p.jobs.iter().map(|j| j.actual.0 as f64).collect();
    let replay: Vec<f64> = p.jobs.iter().map(|j| j.own.0 as f64).collect();
    let w_real = p.jobs.iter().map(|j| per_job(j, j.actual, Measure::Wait)).sum::<f64>() / n;
    let w_replay = p.jobs.iter().map(|j| per_job(j, j.own, Measure::Wait)).sum::<f64>() / n;
    Fidelity {
        label: p.label.clone(),
        policy: p.policy.clone(),
        jobs: p.jobs.len(),
        exact_starts: exact,
        mean_abs_start_error_s: err.iter().sum::<f64>() / n,
        p95_abs_start_error_s: percentile(&err, 95.0),
        max_abs_start_error_s: err.last().copied().unwrap_or(0.0),
        rank_correlation: spearman(&real, &replay),
        mean_wait_real_s: w_real,
        mean_wait_replay_s: w_replay,
        wait_error_pct: (w_real > 0.0).then(|| (w_replay - w_real) / w_real * 100.0),
    }
}

fn summary(p: &PeriodInput, gpus: u64) -> PeriodSummary {
    let n = p.jobs.len().max(1) as f64;
    let len_ms = (p.to - p.from).max(1) as f64;
    let work_ms: f64 = p.jobs.iter().map(|j| j.gpus as f64 * j.runtime as f64).sum();
    let mut waits: Vec<f64> = p.jobs.iter().map(|j| per_job(j, j.actual, Measure::Wait)).collect();
    waits.sort_by(f64::total_cmp);
    PeriodSummary {
        label: p.label.clone(),
        from: p.from_text.clone(),
        to: p.to_text.clone(),
        days: len_ms / DAY_MS as f64,
        policy: p.policy.clone(),
        jobs: p.jobs.len(),
        left_out: p.left_out,
        waiting_at_end: p.jobs.iter().filter(|j| j.actual.0 >= p.to).count(),
        running_at_end: p.jobs.iter().filter(|j| j.actual.0 < p.to && j.actual.1 > p.to).count(),
        gpu_hours: work_ms / 3_600_000.0,
        offered_load: if gpus == 0 { 0.0 } else { work_ms / (gpus as f64 * len_ms) },
        allocated: p.allocated,
        busy: p.busy.map(|b| b.0),
        busy_measured: p.busy.map(|b| b.1),
        mean_wait_s: waits.iter().sum::<f64>() / n,
        p95_wait_s: percentile(&waits, 95.0),
        mean_jct_s: p.jobs.iter().map(|j| per_job(j, j.actual, Measure::Jct)).sum::<f64>() / n,
    }
}

const SIZES: [(u32, u32, &str); 4] =
    [(1, 1, "1 GPU"), (2, 4, "2-4 GPUs"), (5, 8, "5-8 GPUs"), (9, u32::MAX, "more than 8")];

fn by_size(ps: &[PeriodInput]) -> Vec<SizeRow> {
    SIZES
        .iter()
        .map(|&(lo, hi, name)| {
            let mut jobs = [0; 2];
            let mut wait = [None; 2];
            let mut jct = [None; 2];
            let mut order = Vec::new();
            for (k, p) in ps.iter().enumerate() {
                let js: Vec<&PeriodJob> = p.jobs.iter().filter(|j| (lo..=hi).contains(&j.gpus)).collect();
                jobs[k] = js.len();
                if js.is_empty() {
                    continue;
                }
                let n = js.len() as f64;
                wait[k] = Some(js.iter().map(|j| per_job(j, j.actual, Measure::Wait)).sum::<f64>() / n);
                jct[k] = Some(js.iter().map(|j| per_job(j, j.actual, Measure::Jct)).sum::<f64>() / n);
                // The after policy minus the before policy, on these jobs.
                let d: f64 = js
                    .iter()
                    .map(|j| {
                        let (own, other) = (per_job(j, j.own, Measure::Wait), per_job(j, j.other, Measure::Wait));
                        if k == 0 {
                            other - own
                        } else {
                            own - other
                        }
                    })
                    .sum::<f64>()
                    / n;
                order.push(d);
            }
            let order_s = (!order.is_empty()).then(|| order.iter().sum::<f64>() / order.len() as f64);
            SizeRow { class: name.to_string(), jobs, mean_wait_s: wait, mean_jct_s: jct, order_s }
        })
        .collect()
}

/// Users shown by name.
const TOP_USERS: usize = 8;

/// Per period: GPU-ms submitted, sum of waits (s), jobs.
type UserSums = [(f64, f64, usize); 2];

fn users(ps: &[PeriodInput]) -> Vec<UserRow> {
    use std::collections::BTreeMap;
    let mut m: BTreeMap<&str, UserSums> = BTreeMap::new();
    let mut totals = [0.0; 2];
    for (k, p) in ps.iter().enumerate() {
        for j in &p.jobs {
            let w = j.gpus as f64 * j.runtime as f64;
            let e = &mut m.entry(j.user.as_str()).or_default()[k];
            e.0 += w;
            e.1 += per_job(j, j.actual, Measure::Wait);
            e.2 += 1;
            totals[k] += w;
        }
    }
    let mut all: Vec<(&str, UserSums)> = m.into_iter().collect();
    all.sort_by(|a, b| (b.1[0].0 + b.1[1].0).total_cmp(&(a.1[0].0 + a.1[1].0)).then(a.0.cmp(b.0)));
    let mut rows: Vec<(String, UserSums)> = all.iter().take(TOP_USERS).map(|(u, v)| (u.to_string(), *v)).collect();
    if all.len() > TOP_USERS {
        let mut rest = [(0.0, 0.0, 0usize); 2];
        for (_, v) in &all[TOP_USERS..] {
            for k in 0..2 {
                rest[k].0 += v[k].0;
                rest[k].1 += v[k].1;
                rest[k].2 += v[k].2;
            }
        }
        rows.push(("(others)".into(), rest));
    }
    rows.into_iter()
        .map(|(user, v)| UserRow {
            user,
            share: [0, 1].map(|k| if totals[k] > 0.0 { v[k].0 / totals[k] } else { 0.0 }),
            mean_wait_s: [0, 1].map(|k| (v[k].2 > 0).then(|| v[k].1 / v[k].2 as f64)),
        })
        .collect()
}

fn pct_of(x: f64, base: f64) -> String {
    if base.abs() < 1e-9 {
        return String::new();
    }
    format!(" ({:+.0}%)", x / base * 100.0)
}

/// A signed duration: `-1.5h`, `+20s`.
pub fn signed(s: f64) -> String {
    if s < 0.0 {
        format!("-{}", dur(-s))
    } else {
        format!("+{}", dur(s))
    }
}

fn interval(e: &Estimate) -> String {
    format!("{} to {}", signed(e.low), signed(e.high))
}

fn headline(verdict: Verdict, e: &Effect, ps: &[PeriodSummary; 2], unit: &str) -> String {
    let (a, b) = (&ps[0], &ps[1]);
    let went = format!("Mean wait went {} -> {}{}", dur(e.before), dur(e.after), pct_of(e.observed.value, e.before));
    let load = format!("offered load {:.0}% -> {:.0}%", a.offered_load * 100.0, b.offered_load * 100.0);
    let on_same = format!("on the same jobs, {} instead of {}", b.policy, a.policy);
    let iv = format!("95% interval {}, bootstrap over {unit}", interval(&e.order));
    // "23s (-62%; 95% interval ...)": the percentage of what the before policy gives the same jobs.
    let by = |x: f64| {
        let p = e.order_pct.map(|p| format!("{p:+.0}%; ")).unwrap_or_default();
        format!("{} ({p}{iv})", dur(x.abs()))
    };
    match verdict {
        Verdict::SamePolicy => format!(
            "The same policy ({}) ran in both periods, so the order made no difference: m{}, which is the workload's doing ({load}).",
            a.policy,
            &went[1..]
        ),
        Verdict::OrderHelped => {
            let backlog = match a.waiting_at_end {
                0 => String::new(),
                n => format!("; {n} jobs still waited at the change"),
            };
            let tail = if e.workload.value.abs() < (0.01 * e.before).max(1.0) {
                format!(
                    "{went}; the change of workload made next to none of it (its part {}; {load}).",
                    signed(e.workload.value)
                )
            } else if e.observed.value > 0.0 {
                format!("{went}: the workload's part, {}, outweighed it ({load}{backlog}).", signed(e.workload.value))
            } else if e.workload.value > 0.0 {
                format!("{went}: the workload's part took back {} of it ({load}{backlog}).", dur(e.workload.value))
            } else {
                format!("{went}; the workload's part is {} of it ({load}).", signed(e.workload.value))
            };
            format!("The change of order helped: {on_same} cuts mean wait by {}. {tail}", by(e.order.value))
        }
        Verdict::OrderHurt => {
            format!("The change of order made waits longer: {on_same} adds {} to mean wait. {went} ({load}).", by(e.order.value))
        }
        Verdict::WorkloadNotOrder => format!(
            "{went}, but the order did not make that difference: {on_same} changes mean wait by {} ({iv}, which {}); the workload did ({load}; its part {}, 95% interval {}).",
            signed(e.order.value),
            if e.order.low <= 0.0 && e.order.high >= 0.0 {
                "includes no change"
            } else {
                "the two periods do not agree on"
            },
            signed(e.workload.value),
            interval(&e.workload)
        ),
        Verdict::NoClearChange => format!(
            "No clear change. {went} (95% interval of the difference {}), and {on_same} changes mean wait by {} ({iv}).",
            interval(&e.observed),
            signed(e.order.value)
        ),
    }
}

/// Builds the page's content from two periods (before, then after).
pub fn build(periods: Vec<PeriodInput>, o: &Options) -> Result<BeforeAfter, PeriodsError> {
    if periods.len() != 2 {
        return Err(PeriodsError::Count(periods.len()));
    }
    for p in &periods {
        if p.jobs.is_empty() {
            return Err(PeriodsError::Empty(p.label.clone()));
        }
    }
    let days_with_jobs = |p: &PeriodInput| {
        let mut d: Vec<i64> = p.jobs.iter().map(|j| (j.submit - p.from).div_euclid(DAY_MS)).collect();
        d.sort_unstable();
        d.dedup();
        d.len()
    };
    let by_days =
        o.draw_days.unwrap_or_else(|| periods.iter().all(|p| days_with_jobs(p) >= MIN_DAYS_FOR_DAY_BOOTSTRAP));
    let unit = if by_days { "days" } else { "jobs" };
    let (ga, gb) = (groups(&periods[0], by_days), groups(&periods[1], by_days));
    let resamples = o.resamples.max(1);
    let iv = intervals(&ga, &gb, resamples, o.seed);
    let (sa, sb) = (total(&ga), total(&gb));
    let effects: Vec<Effect> = [(0usize, "mean_wait_s"), (1, "mean_jct_s")]
        .iter()
        .map(|&(m, name)| {
            let f = figures(&sa, &sb, m);
            let est = |k: usize| Estimate { value: f[k], low: iv[m][k].0.min(f[k]), high: iv[m][k].1.max(f[k]) };
            let (before, after) = (sa.mean(m, 0), sb.mean(m, 0));
            Effect {
                measure: name.to_string(),
                before,
                after,
                observed: est(0),
                // Under the before policy: before's jobs replayed under their own, after's under
                // the other.
                order_pct: {
                    let (base_a, base_b) = (sa.mean(m, 1), sb.mean(m, 2));
                    (base_a > 0.0 && base_b > 0.0).then(|| (f[1] / base_a + f[2] / base_b) / 2.0 * 100.0)
                },
                order_on_before: est(1),
                order_on_after: est(2),
                order: est(3),
                workload: est(4),
                replay_gap: (after - before) - (sb.mean(m, 1) - sa.mean(m, 1)),
            }
        })
        .collect();
    let summaries = [summary(&periods[0], o.gpus), summary(&periods[1], o.gpus)];
    let w = &effects[0];
    // What counts as a change: beyond the interval, in the same direction on both periods' jobs,
    // and at least 1% of the before mean (or 1 s when that is 0).
    let material = |x: f64| x.abs() >= (0.01 * w.before).max(1.0);
    let verdict = if periods[0].policy == periods[1].policy {
        Verdict::SamePolicy
    } else if w.order.surely_negative()
        && w.order_on_before.value < 0.0
        && w.order_on_after.value < 0.0
        && material(w.order.value)
    {
        Verdict::OrderHelped
    } else if w.order.surely_positive()
        && w.order_on_before.value > 0.0
        && w.order_on_after.value > 0.0
        && material(w.order.value)
    {
        Verdict::OrderHurt
    } else if (w.observed.surely_negative() || w.observed.surely_positive()) && material(w.observed.value) {
        Verdict::WorkloadNotOrder
    } else {
        Verdict::NoClearChange
    };
    let headline = headline(verdict, w, &summaries, unit);
    let fidelity: Vec<Fidelity> = periods.iter().map(fidelity).collect();
    let mut notes = Vec::new();
    for f in &fidelity {
        if let Some(e) = f.wait_error_pct.filter(|e| e.abs() > 10.0) {
            notes.push(format!(
                "Caution: replayed under the policy in force ({}), the {} period's mean wait is {} against {} as it ran ({e:+.0}%): the replays' figures are less sure than their intervals say.",
                f.policy,
                f.label,
                dur(f.mean_wait_replay_s),
                dur(f.mean_wait_real_s)
            ));
        }
    }
    let at_change = &summaries[0];
    if at_change.waiting_at_end + at_change.running_at_end > 0 {
        notes.push(if o.carried {
            format!(
                "At the change, {} of the before period's jobs were still waiting and {} still running: the replays carry them over the change as the server did (the waiting ones then start under the new policy).",
                at_change.waiting_at_end, at_change.running_at_end
            )
        } else {
            format!(
                "At the change, {} of the before period's jobs were still waiting (they really started under {}) and {} still running. A preemptive policy's replay cannot change policy midway, so each period is replayed on its own from an empty cluster and misses this carry-over: it shows as the replay gap and in the fidelity below, which are then not ordo's error alone.",
                at_change.waiting_at_end, summaries[1].policy, at_change.running_at_end
            )
        });
    }
    for p in &summaries {
        if p.left_out > 0 {
            notes.push(format!(
                "{} of the {} period's jobs are left out: a replay never started them (they cannot run on this cluster, or wait on a job that never ran).",
                p.left_out, p.label
            ));
        }
    }
    let chart: Vec<[f64; 3]> = [(&sa, 0usize), (&sb, 1)]
        .iter()
        .map(|&(s, k)| {
            // Under before's policy: own for the before period, other for the after one.
            let (under_a, under_b) = if k == 0 { (s.mean(0, 1), s.mean(0, 2)) } else { (s.mean(0, 2), s.mean(0, 1)) };
            [s.mean(0, 0), under_a, under_b]
        })
        .collect();
    let text = if by_days {
        format!("95% percentile intervals from {resamples} bootstrap resamples of each period's days (the jobs submitted on a day drawn together, seed {}); the replays are not rerun per resample, so they cover which days came, not the simulator's error", o.seed)
    } else {
        format!("95% percentile intervals from {resamples} bootstrap resamples of each period's jobs (seed {}; jobs, not days: a period has fewer than {MIN_DAYS_FOR_DAY_BOOTSTRAP} days with submissions, or --bootstrap jobs was given); the replays are not rerun per resample, so they cover which jobs came, not the simulator's error", o.seed)
    };
    Ok(BeforeAfter {
        title: o.title.clone(),
        generated_at: o.generated_at.clone(),
        ordo_version: o.ordo_version.clone(),
        source: o.source.clone(),
        cluster: o.cluster.clone(),
        gpus: o.gpus,
        change: o.change.clone(),
        verdict,
        headline,
        notes,
        periods: summaries.to_vec(),
        effects,
        fidelity,
        by_size: by_size(&periods),
        users: users(&periods),
        bootstrap: Bootstrap { unit: unit.into(), resamples, seed: o.seed, text },
        carried: o.carried,
        wait_chart: chart,
    })
}

fn num(text: String, key: String, v: f64) -> Cell {
    Cell { text, key: Some((key, v)) }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn est_cell(e: &Estimate, key: &str) -> Cell {
    num(format!("{} [{}]", signed(e.value), interval(e)), format!("{key}.value"), e.value)
}

impl BeforeAfter {
    /// The page (HTML and Markdown come from it).
    pub fn page(&self) -> Page {
        let mut meta = vec![format!("Made by ordo {} on {}.", self.ordo_version, self.generated_at)];
        if let Some(c) = &self.change {
            meta.push(format!(
                "Change of policy: {} -> {} at {}, by {}, because: \"{}\"",
                c.from, c.to, c.at, c.actor, c.reason
            ));
        }
        meta.extend(self.notes.iter().cloned());
        meta.push(format!("History: {}. Cluster: {} ({} GPUs).", self.source, self.cluster, self.gpus));
        meta.push(format!("Intervals: {}.", self.bootstrap.text));
        let p = &self.periods;
        let row = |name: &str, f: &dyn Fn(usize, &PeriodSummary) -> Cell| {
            let mut r = vec![Cell::text(name)];
            r.extend(p.iter().enumerate().map(|(k, s)| f(k, s)));
            r
        };
        let text = |s: String| Cell::text(s);
        let periods = Table {
            head: vec![String::new(), "before".into(), "after".into()],
            rows: vec![
                row("from", &|_, s| text(s.from.clone())),
                row("to", &|_, s| text(s.to.clone())),
                row("days", &|k, s| num(format!("{:.1}", s.days), format!("periods.{k}.days"), s.days)),
                row("policy", &|_, s| text(s.policy.clone())),
                row("jobs", &|k, s| num(s.jobs.to_string(), format!("periods.{k}.jobs"), s.jobs as f64)),
                row("still waiting at its end", &|k, s| {
                    num(s.waiting_at_end.to_string(), format!("periods.{k}.waiting_at_end"), s.waiting_at_end as f64)
                }),
                row("still running at its end", &|k, s| {
                    num(s.running_at_end.to_string(), format!("periods.{k}.running_at_end"), s.running_at_end as f64)
                }),
                row("GPU-hours submitted", &|k, s| {
                    num(crate::fmt::gpu_hours(s.gpu_hours), format!("periods.{k}.gpu_hours"), s.gpu_hours)
                }),
                row("offered load", &|k, s| {
                    num(pct(s.offered_load), format!("periods.{k}.offered_load"), s.offered_load)
                }),
                row("utilisation, allocated", &|k, s| {
                    num(pct(s.allocated), format!("periods.{k}.allocated"), s.allocated)
                }),
                row("utilisation, really busy", &|k, s| match s.busy {
                    Some(b) => num(pct(b), format!("periods.{k}.busy"), b),
                    None => text("not measured".into()),
                }),
                row("mean wait", &|k, s| num(dur(s.mean_wait_s), format!("periods.{k}.mean_wait_s"), s.mean_wait_s)),
                row("p95 wait", &|k, s| num(dur(s.p95_wait_s), format!("periods.{k}.p95_wait_s"), s.p95_wait_s)),
                row("mean JCT", &|k, s| num(dur(s.mean_jct_s), format!("periods.{k}.mean_jct_s"), s.mean_jct_s)),
            ],
        };
        let effects = Table {
            head: vec![
                "measure".into(),
                "before".into(),
                "after".into(),
                "observed change [95%]".into(),
                "the order's part [95%]".into(),
                "on before's jobs".into(),
                "on after's jobs".into(),
                "the workload's part [95%]".into(),
                "replay gap".into(),
            ],
            rows: self
                .effects
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let k = format!("effects.{i}");
                    vec![
                        text(if e.measure == "mean_wait_s" { "mean wait".into() } else { "mean JCT".into() }),
                        num(dur(e.before), format!("{k}.before"), e.before),
                        num(dur(e.after), format!("{k}.after"), e.after),
                        est_cell(&e.observed, &format!("{k}.observed")),
                        est_cell(&e.order, &format!("{k}.order")),
                        est_cell(&e.order_on_before, &format!("{k}.order_on_before")),
                        est_cell(&e.order_on_after, &format!("{k}.order_on_after")),
                        est_cell(&e.workload, &format!("{k}.workload")),
                        num(signed(e.replay_gap), format!("{k}.replay_gap"), e.replay_gap),
                    ]
                })
                .collect(),
        };
        let fidelity = Table {
            head: vec![
                "period".into(),
                "replayed under".into(),
                "jobs".into(),
                "starts within 1 s".into(),
                "mean |start error|".into(),
                "p95 |start error|".into(),
                "start-order rank correlation".into(),
                "mean wait as run".into(),
                "mean wait replayed".into(),
            ],
            rows: self
                .fidelity
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let k = format!("fidelity.{i}");
                    vec![
                        text(f.label.clone()),
                        text(f.policy.clone()),
                        num(f.jobs.to_string(), format!("{k}.jobs"), f.jobs as f64),
                        num(f.exact_starts.to_string(), format!("{k}.exact_starts"), f.exact_starts as f64),
                        num(
                            dur(f.mean_abs_start_error_s),
                            format!("{k}.mean_abs_start_error_s"),
                            f.mean_abs_start_error_s,
                        ),
                        num(
                            dur(f.p95_abs_start_error_s),
                            format!("{k}.p95_abs_start_error_s"),
                            f.p95_abs_start_error_s,
                        ),
                        match f.rank_correlation {
                            Some(r) => num(format!("{r:.3}"), format!("{k}.rank_correlation"), r),
                            None => text("n/a".into()),
                        },
                        num(dur(f.mean_wait_real_s), format!("{k}.mean_wait_real_s"), f.mean_wait_real_s),
                        num(
                            format!(
                                "{}{}",
                                dur(f.mean_wait_replay_s),
                                f.wait_error_pct.map(|e| format!(" ({e:+.1}%)")).unwrap_or_default()
                            ),
                            format!("{k}.mean_wait_replay_s"),
                            f.mean_wait_replay_s,
                        ),
                    ]
                })
                .collect(),
        };
        let opt_dur = |x: Option<f64>, key: String| match x {
            Some(v) => num(dur(v), key, v),
            None => text("-".into()),
        };
        let sizes = Table {
            head: vec![
                "job size".into(),
                "jobs before".into(),
                "jobs after".into(),
                "mean wait before".into(),
                "mean wait after".into(),
                "mean JCT before".into(),
                "mean JCT after".into(),
                "the order's part (wait)".into(),
            ],
            rows: self
                .by_size
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let k = format!("by_size.{i}");
                    vec![
                        text(r.class.clone()),
                        num(r.jobs[0].to_string(), format!("{k}.jobs.0"), r.jobs[0] as f64),
                        num(r.jobs[1].to_string(), format!("{k}.jobs.1"), r.jobs[1] as f64),
                        opt_dur(r.mean_wait_s[0], format!("{k}.mean_wait_s.0")),
                        opt_dur(r.mean_wait_s[1], format!("{k}.mean_wait_s.1")),
                        opt_dur(r.mean_jct_s[0], format!("{k}.mean_jct_s.0")),
                        opt_dur(r.mean_jct_s[1], format!("{k}.mean_jct_s.1")),
                        match r.order_s {
                            Some(v) => num(signed(v), format!("{k}.order_s"), v),
                            None => text("-".into()),
                        },
                    ]
                })
                .collect(),
        };
        let users = Table {
            head: vec![
                "user".into(),
                "share before".into(),
                "share after".into(),
                "mean wait before".into(),
                "mean wait after".into(),
            ],
            rows: self
                .users
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let k = format!("users.{i}");
                    vec![
                        text(u.user.clone()),
                        num(pct(u.share[0]), format!("{k}.share.0"), u.share[0]),
                        num(pct(u.share[1]), format!("{k}.share.1"), u.share[1]),
                        opt_dur(u.mean_wait_s[0], format!("{k}.mean_wait_s.0")),
                        opt_dur(u.mean_wait_s[1], format!("{k}.mean_wait_s.1")),
                    ]
                })
                .collect(),
        };
        let max_wait = self.wait_chart.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
        let (div, unit) = if max_wait >= 7200.0 {
            (3600.0, "hours")
        } else if max_wait >= 120.0 {
            (60.0, "minutes")
        } else {
            (1.0, "seconds")
        };
        let (pa, pb) = (&p[0].policy, &p[1].policy);
        let bars = Bars {
            categories: vec![format!("before ({} jobs)", p[0].jobs), format!("after ({} jobs)", p[1].jobs)],
            series: vec![
                ("as it ran".into(), self.wait_chart.iter().map(|r| r[0] / div).collect()),
                (format!("replayed under {pa}"), self.wait_chart.iter().map(|r| r[1] / div).collect()),
                (format!("replayed under {pb}"), self.wait_chart.iter().map(|r| r[2] / div).collect()),
            ],
            y_title: format!("mean wait ({unit})"),
        };
        let section = |id: &str, title: &str, intro: String, bars: Option<Bars>, table: Table| PageSection {
            id: id.into(),
            title: title.into(),
            intro,
            bars,
            table,
            notes: vec![],
        };
        Page {
            title: self.title.clone(),
            headline: self.headline.clone(),
            meta,
            sections: vec![
                section(
                    "what-made-it",
                    "What made the difference",
                    format!("{} The order's part is what the other policy changes on the same jobs (the mean over both periods); the workload's part is what the other period's jobs change under the same policy (the mean over both policies); they add up to the replayed difference, and the replay gap is what the real difference has beyond it. Negative is shorter; [95%] intervals as said above.",
                        if self.carried {
                            "The history replayed twice on the same cluster: with the policy changed at the split as it really was, and with the two policies swapped (each period's jobs under the other period's policy)."
                        } else {
                            "Each period's own jobs replayed under both policies on the same cluster."
                        }
                    ),
                    Some(bars),
                    effects,
                ),
                section(
                    "periods",
                    "What really happened",
                    "Each period as it ran: its jobs are those submitted in it (their waits include any time behind the other period's jobs).".into(),
                    None,
                    periods,
                ),
                section(
                    "fidelity",
                    "Does the replay reproduce what ran?",
                    format!(
                        "Each period replayed under the policy that was in force, job by job against what really ran: a counterfactual is only as good as this agreement. {}",
                        if self.carried {
                            "Both periods are replayed together, the policy changed at the split as the server changed it; the counterfactual swaps the two policies, so its before period runs under the after policy and then its after period under the before policy."
                        } else {
                            "Each period is replayed on its own from an empty cluster (a preemptive policy's replay cannot change policy midway), so jobs of the other period still waiting or running at the change are not in it."
                        }
                    ),
                    None,
                    fidelity,
                ),
                section(
                    "by-size",
                    "Wait and JCT by job size",
                    "Mean wait and completion time as it ran, and the order's part in the wait for each size (the after policy against the before policy on the same jobs).".into(),
                    None,
                    sizes,
                ),
                section(
                    "users",
                    "Per user",
                    format!("Share of the GPU-hours submitted and mean wait as it ran; the top {TOP_USERS} by GPU-hours, the rest as (others)."),
                    None,
                    users,
                ),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(submit: i64, actual: i64, own: i64, other: i64) -> PeriodJob {
        let s = 1000;
        PeriodJob {
            submit: submit * s,
            gpus: 1,
            runtime: 10 * s,
            user: "u".into(),
            actual: (actual * s, (actual + 10) * s),
            own: (own * s, (own + 10) * s),
            other: (other * s, (other + 10) * s),
        }
    }

    fn period(label: &str, policy: &str, jobs: Vec<PeriodJob>) -> PeriodInput {
        PeriodInput {
            label: label.into(),
            from: 0,
            to: 100_000,
            from_text: "0s".into(),
            to_text: "100s".into(),
            policy: policy.into(),
            jobs,
            left_out: 0,
            allocated: 0.5,
            busy: None,
        }
    }

    #[test]
    fn the_parts_add_up_to_the_replayed_difference() {
        // Before: waits 10 and 20 s as run and under a; 4 and 6 under b. After: 2 and 4 s as run
        // and under b; 12 and 16 under a.
        let a = period("before", "fifo", vec![job(0, 10, 10, 4), job(0, 20, 20, 6)]);
        let b = period("after", "sjf", vec![job(0, 2, 2, 12), job(0, 4, 4, 16)]);
        let o = Options { resamples: 200, seed: 1, gpus: 1, ..Options::default() };
        let r = build(vec![a, b], &o).unwrap();
        let w = &r.effects[0];
        assert_eq!((w.before, w.after), (15.0, 3.0));
        assert_eq!(w.observed.value, -12.0);
        // Order: on before's jobs 5 - 15 = -10; on after's 3 - 14 = -11; mean -10.5.
        assert_eq!((w.order_on_before.value, w.order_on_after.value, w.order.value), (-10.0, -11.0, -10.5));
        // Workload: under fifo 14 - 15 = -1; under sjf 3 - 5 = -2; mean -1.5.
        assert_eq!(w.workload.value, -1.5);
        assert_eq!(w.order.value + w.workload.value, -12.0);
        assert_eq!(w.replay_gap, 0.0);
        assert_eq!(r.verdict, Verdict::OrderHelped, "{}", r.headline);
        assert!(r.headline.starts_with("The change of order helped"), "{}", r.headline);
        assert_eq!(r.fidelity[0].exact_starts, 2);
        assert_eq!(r.fidelity[0].rank_correlation, Some(1.0));
    }

    #[test]
    fn a_quieter_period_is_not_credited_to_the_order() {
        // The other policy makes no difference on the same jobs; the after period simply waits
        // less.
        let a = period("before", "fifo", (0..20).map(|i| job(i, i + 30, i + 30, i + 30)).collect());
        let b = period("after", "sjf", (0..20).map(|i| job(i, i + 2, i + 2, i + 2)).collect());
        let o = Options { resamples: 500, seed: 7, gpus: 1, ..Options::default() };
        let r = build(vec![a, b], &o).unwrap();
        assert_eq!(r.verdict, Verdict::WorkloadNotOrder, "{}", r.headline);
        assert!(!r.headline.contains("helped"), "{}", r.headline);
        assert!(r.headline.contains("the workload did"), "{}", r.headline);
        assert_eq!(r.effects[0].order.value, 0.0);
        let page = r.page();
        assert!(page.markdown().contains("What made the difference"));
    }

    #[test]
    fn spearman_of_ties_and_reversals() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
    }
}
