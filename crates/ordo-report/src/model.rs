//! The report's content as one serde struct: `--format json` prints it, and the HTML and
//! Markdown are rendered from it, so their numbers cannot disagree.

use crate::equiv::{self, Probe};
use crate::headline::{self, InputInfo};
use crate::series::{self, Cdf, Series, SIZE_CLASSES};
use ordo_core::words::count;
use ordo_core::Workload;
use ordo_sim::{simulate, Metrics, SimConfig, SimError, SimOutput};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No simulation results were given.
    #[error("a report needs at least one policy's results")]
    NoResults,
    /// `--currency` is not a three-letter code.
    #[error("currency `{0}`: expected a three-letter code such as EUR, USD or CHF")]
    Currency(String),
    /// `--gpu-hour-price` is not a positive finite number.
    #[error("GPU-hour price `{0}`: expected a positive number such as 2.10")]
    Price(f64),
    /// A simulation of the equivalent-GPU search failed.
    #[error("equivalent-GPU search, {extra_nodes} extra nodes: {source}")]
    Sim {
        /// Nodes added in the failing run.
        extra_nodes: u32,
        /// The simulator's error.
        source: SimError,
    },
}

/// Whose share and slowdown the owners section shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerBy {
    /// The job's user.
    #[default]
    User,
    /// The job's group (virtual cluster, account).
    Group,
}

/// A price per GPU-hour in a currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Money per GPU-hour.
    pub per_gpu_hour: f64,
    /// ISO-4217-style three-letter code, upper case.
    pub currency: String,
}

impl Price {
    /// Validates a price (positive, finite) and a three-letter currency code (any letters;
    /// upper-cased).
    pub fn new(per_gpu_hour: f64, currency: &str) -> Result<Price, ReportError> {
        if !(per_gpu_hour.is_finite() && per_gpu_hour > 0.0) {
            return Err(ReportError::Price(per_gpu_hour));
        }
        let c = currency.trim();
        if c.len() != 3 || !c.chars().all(|ch| ch.is_ascii_alphabetic()) {
            return Err(ReportError::Currency(currency.to_string()));
        }
        Ok(Price { per_gpu_hour, currency: c.to_ascii_uppercase() })
    }
}

/// What to put in a report besides the runs themselves.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Title at the top.
    pub title: String,
    /// Users or groups in the owners section.
    pub by: OwnerBy,
    /// Owners shown by name (the rest are summed as "(others)").
    pub top: usize,
    /// Points per time series.
    pub buckets: usize,
    /// Points per JCT CDF.
    pub cdf_points: usize,
    /// Price for the cost section, if known.
    pub price: Option<Price>,
    /// The schedule as run, when the input is an `ordo server`'s database (its row is among
    /// the outputs, named `as-run`).
    pub as_run: Option<crate::AsRun>,
    /// When the report was made (RFC 3339, UTC), shown on every page; the caller reads the
    /// clock (this crate does not).
    pub generated_at: String,
    /// The ordo version that made it.
    pub ordo_version: String,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            title: "ordo report".into(),
            by: OwnerBy::User,
            top: 8,
            buckets: 300,
            cdf_points: 200,
            price: None,
            as_run: None,
            generated_at: String::new(),
            ordo_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Idle capacity of one run beyond what [`Metrics`] has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Idle {
    /// GPU-hours idle between first submit and last end: GPUs x makespan - work.
    pub idle_gpu_hours: f64,
    /// Share of `idle_gpu_hours` that was idle while jobs waited.
    pub idle_while_waiting_share: f64,
}

/// Waits of one job-size class under one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeRow {
    /// Jobs in the class.
    pub jobs: usize,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// 99th percentile wait (nearest rank), seconds.
    pub p99_wait_s: f64,
}

/// One owner's share of the workload (the same under every policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerShare {
    /// Jobs that ran.
    pub jobs: usize,
    /// GPU-hours of work.
    pub gpu_hours: f64,
    /// Share of all GPU-hours of work (0..1).
    pub share: f64,
}

/// One owner's outcome under one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerRow {
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Mean bounded slowdown (docs/METRICS.md).
    pub mean_bounded_slowdown: f64,
}

/// Per-user or per-group share and slowdown: the top owners by GPU-hours and "(others)".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Owners {
    /// `user` or `group`.
    pub by: OwnerBy,
    /// Owners shown, largest share first; the last is `(others)` when there are more.
    pub names: Vec<String>,
    /// Each shown owner's share of the work.
    pub share: BTreeMap<String, OwnerShare>,
    /// Policy -> owner -> outcome.
    pub by_policy: BTreeMap<String, BTreeMap<String, OwnerRow>>,
}

/// Idle capacity per 30-day month of one policy, in GPU-hours and (with a price) money, over
/// the span of the headline's utilisation (the arrival window, else the makespan) scaled to
/// 720 h. The idle capacity splits into what another order can change (idle while jobs waited)
/// and what it cannot (idle with no job waiting, set by the load), plus restart overhead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    /// (1 - utilisation) x GPUs x 720 h; utilisation as in the headline.
    pub idle_gpu_hours_per_month: f64,
    /// Idle while jobs waited (head-of-line blocking and fragmentation): what the order changes.
    pub idle_wait_gpu_hours_per_month: f64,
    /// Of that, head-of-line blocking (a waiting job fit the idle GPUs).
    pub head_of_line_gpu_hours_per_month: f64,
    /// Of that, fragmentation (no waiting job fit).
    pub fragmentation_gpu_hours_per_month: f64,
    /// Idle with no job waiting: set by the load; no order can use it.
    pub idle_empty_gpu_hours_per_month: f64,
    /// Idle while the only waiting jobs that would fit refused those GPUs' model, memory or
    /// features (constrained-idle): set by the constraints (0 on untyped runs).
    #[serde(default)]
    pub constrained_gpu_hours_per_month: f64,
    /// `idle_gpu_hours_per_month` x price.
    pub idle_cost_per_month: Option<f64>,
    /// `idle_wait_gpu_hours_per_month` x price.
    pub idle_wait_cost_per_month: Option<f64>,
    /// `idle_empty_gpu_hours_per_month` x price.
    #[serde(default)]
    pub idle_empty_cost_per_month: Option<f64>,
}

/// The cost section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// The price used, if given.
    pub price: Option<Price>,
    /// Policy -> idle capacity per month.
    pub per_policy: BTreeMap<String, CostRow>,
    /// Idle-while-waiting GPU-hours per month the best policy saves against the baseline
    /// (negative: it idles more).
    pub saving_gpu_hours_per_month: f64,
    /// The same in money, with a price.
    pub saving_per_month: Option<f64>,
    /// The history the monthly figures are scaled from, days: the span of the baseline's
    /// headline utilisation (the arrival window, else its makespan).
    pub basis_days: f64,
    /// That span in words (`the 7.0-day arrival window`).
    pub basis: String,
    /// Set when the history is shorter than [`SHORT_HISTORY_DAYS`]: a month extrapolated from
    /// it may look quite different; the warning says so with the days.
    pub short_history: Option<String>,
}

/// Below this many days of history the report warns that its monthly figures are extrapolated
/// from a short history.
pub const SHORT_HISTORY_DAYS: f64 = 7.0;

/// The equivalent-GPU search's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Equivalent {
    /// The policy given more nodes.
    pub baseline: String,
    /// The policy whose mean JCT it must match.
    pub best: String,
    /// The best policy's mean JCT on the original cluster, seconds.
    pub target_mean_jct_s: f64,
    /// GPUs of the node shape added.
    pub node_gpus: u32,
    /// Nodes in the original cluster.
    pub base_nodes: u32,
    /// Largest number of nodes the search would add.
    pub cap_extra_nodes: u32,
    /// Nodes needed; `None` when none are needed or the cap was not enough (see `reached`).
    pub extra_nodes: Option<u32>,
    /// GPUs needed (`extra_nodes` x `node_gpus`).
    pub extra_gpus: Option<u64>,
    /// Whether the target was reached (true also when the baseline is already the best).
    pub reached: bool,
    /// Every cluster size simulated.
    pub probes: Vec<Probe>,
    /// The result in plain words.
    pub message: String,
    /// What the added GPUs would cost per 30-day month at the report's price
    /// (`extra_gpus` x 720 h x price); with a price and the target reached.
    #[serde(default)]
    pub cost_per_month: Option<f64>,
}

/// Everything a report shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Title.
    pub title: String,
    /// When the report was made (RFC 3339, UTC).
    #[serde(default)]
    pub generated_at: String,
    /// The ordo version that made it.
    #[serde(default)]
    pub ordo_version: String,
    /// Where the jobs came from.
    pub input: InputInfo,
    /// Cluster, e.g. `64x8`.
    pub cluster: String,
    /// GPUs in the cluster.
    pub gpus: u64,
    /// Placement model.
    pub placement: String,
    /// Policies in the order given; every per-policy map is keyed by these names.
    pub policies: Vec<String>,
    /// The baseline policy (first `fifo`, or else the first).
    pub baseline: String,
    /// The policy with the lowest mean JCT among those that can run with what the trace tells
    /// (not an oracle).
    pub best: String,
    /// The oracle policy shown as a bound in the headline, if one beats `best`.
    pub bound: Option<String>,
    /// Where `best` does worse than the baseline (p99 wait, fairness over users).
    #[serde(default)]
    pub regressions: Vec<crate::Regression>,
    /// When `best` has a regression: the policy with the lowest mean JCT that can run, beats
    /// the baseline and has none.
    #[serde(default)]
    pub best_without_regression: Option<String>,
    /// The headline, word for word as `ordo compare` prints it.
    pub headline: String,
    /// The offered load, word for word as `ordo compare` prints it.
    pub load: crate::headline::Load,
    /// What the lower bounds allow, word for word as `ordo compare` prints it.
    pub bounds: String,
    /// Why utilisation changes from the baseline to the best policy: idle capacity by cause.
    pub why: crate::headline::Why,
    /// Jobs that could never fit the cluster (not run).
    pub rejected_jobs: usize,
    /// The schedule as run and its GPU activity (an `ordo server`'s database as input).
    #[serde(default)]
    pub as_run: Option<crate::AsRun>,
    /// Policy -> the metrics of docs/METRICS.md.
    pub metrics: BTreeMap<String, Metrics>,
    /// Policy -> allocated GPUs over time (all on one time axis, to the latest end of any
    /// policy); `mean` is over the policy's own makespan.
    pub allocated_gpus: BTreeMap<String, Series>,
    /// Policy -> waiting jobs over time.
    pub queue_length: BTreeMap<String, Series>,
    /// Policy -> idle capacity.
    pub idle: BTreeMap<String, Idle>,
    /// Policy -> JCT distribution.
    pub jct_cdf: BTreeMap<String, Cdf>,
    /// Size-class keys (`1`, `2-4`, `5-8`, `9+`) and their labels.
    pub size_classes: Vec<(String, String)>,
    /// Policy -> size-class key -> waits.
    pub wait_by_size: BTreeMap<String, BTreeMap<String, SizeRow>>,
    /// Per-user or per-group share and slowdown.
    pub owners: Owners,
    /// Idle capacity in GPU-hours and money per month.
    pub cost: Cost,
    /// How many GPUs the baseline would need to match the best policy; `None` when not asked.
    pub equivalent_gpus: Option<Equivalent>,
}

const SIZE_KEYS: [&str; 4] = ["1", "2-4", "5-8", "9+"];
const OTHERS: &str = "(others)";
const MONTH_H: f64 = 720.0;

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

impl Report {
    /// Builds a report from one run per policy of the same workload on the same cluster.
    pub fn build(
        input: &InputInfo,
        w: &Workload,
        outs: &[SimOutput],
        opts: &ReportOptions,
        equivalent_gpus: Option<Equivalent>,
    ) -> Result<Report, ReportError> {
        let first = outs.first().ok_or(ReportError::NoResults)?;
        let results: Vec<Metrics> = outs.iter().map(|o| o.metrics.clone()).collect();
        let h = headline::headline(&results);
        let policies: Vec<String> = results.iter().map(|m| m.policy.clone()).collect();
        let origin = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
        let end = outs.iter().flat_map(|o| o.records.iter().map(|r| r.end)).max().unwrap_or(origin);
        let mut equivalent_gpus = equivalent_gpus;
        if let (Some(e), Some(p)) = (equivalent_gpus.as_mut(), opts.price.as_ref()) {
            e.cost_per_month = e.extra_gpus.map(|g| g as f64 * MONTH_H * p.per_gpu_hour);
        }
        let mut rep = Report {
            title: opts.title.clone(),
            generated_at: opts.generated_at.clone(),
            ordo_version: opts.ordo_version.clone(),
            input: input.clone(),
            cluster: first.metrics.cluster.clone(),
            gpus: first.metrics.gpus,
            placement: placements(outs).unwrap_or_else(|| first.metrics.placement.clone()),
            policies: policies.clone(),
            baseline: policies[h.baseline].clone(),
            best: policies[h.best].clone(),
            bound: h.bound.map(|i| policies[i].clone()),
            regressions: h.regressions,
            best_without_regression: h.without_regression.map(|i| policies[i].clone()),
            headline: h.text,
            load: headline::load(&results[h.baseline]),
            bounds: headline::bounds_text(&results[h.baseline]),
            why: headline::why(&results, h.baseline, h.best),
            rejected_jobs: outs
                .iter()
                .find(|o| o.metrics.policy != ordo_sim::asrun::AS_RUN)
                .unwrap_or(first)
                .rejected
                .len(),
            as_run: opts.as_run.clone(),
            metrics: BTreeMap::new(),
            allocated_gpus: BTreeMap::new(),
            queue_length: BTreeMap::new(),
            idle: BTreeMap::new(),
            jct_cdf: BTreeMap::new(),
            size_classes: SIZE_KEYS
                .iter()
                .zip(SIZE_CLASSES)
                .map(|(k, (l, _))| (k.to_string(), l.to_string()))
                .collect(),
            wait_by_size: BTreeMap::new(),
            owners: owners(w, outs, opts),
            cost: cost(&results, h.baseline, h.best, opts.price.as_ref()),
            equivalent_gpus,
        };
        for (o, name) in outs.iter().zip(&policies) {
            let m = &o.metrics;
            rep.metrics.insert(name.clone(), m.clone());
            // Every policy on the same time axis, so their charts line up.
            let mut alloc = series::allocated_gpus(&o.records, origin, end, opts.buckets);
            // The mean over this run's own makespan (the series runs on to the latest end of
            // any policy, where this run holds nothing), consistent with its utilisation.
            let own_end = o.records.iter().map(|r| r.end).max().unwrap_or(origin);
            if own_end > origin {
                alloc.mean *= (end - origin) as f64 / (own_end - origin) as f64;
            }
            rep.allocated_gpus.insert(name.clone(), alloc);
            let queue = series::queue_steps(&o.records);
            rep.queue_length.insert(name.clone(), series::downsample(&queue, origin, end, opts.buckets));
            let idle = m.gpus as f64 * m.makespan_s / 3600.0 - m.total_gpu_hours;
            rep.idle.insert(
                name.clone(),
                Idle {
                    idle_gpu_hours: idle,
                    idle_while_waiting_share: if idle > 0.0 { m.idle_while_waiting_gpu_hours / idle } else { 0.0 },
                },
            );
            rep.jct_cdf.insert(name.clone(), series::jct_cdf(&o.records, opts.cdf_points));
            let mut waits: Vec<Vec<f64>> = vec![Vec::new(); SIZE_KEYS.len()];
            for r in &o.records {
                waits[series::size_class(r.gpus)].push(series::wait_s(r));
            }
            let rows = SIZE_KEYS
                .iter()
                .zip(waits.iter_mut())
                .map(|(k, v)| {
                    v.sort_by(f64::total_cmp);
                    let row = SizeRow {
                        jobs: v.len(),
                        mean_wait_s: mean(v.iter().copied()),
                        p99_wait_s: ordo_sim::metrics::percentile(v, 99.0),
                    };
                    (k.to_string(), row)
                })
                .collect();
            rep.wait_by_size.insert(name.clone(), rows);
        }
        Ok(rep)
    }
}

/// The placements of the simulated runs, comma-separated, when they differ (`report
/// --placement consolidated,topology`); `None` when there is one.
fn placements(outs: &[SimOutput]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for o in outs.iter().filter(|o| o.metrics.policy != ordo_sim::asrun::AS_RUN) {
        if !seen.contains(&o.metrics.placement.as_str()) {
            seen.push(&o.metrics.placement);
        }
    }
    (seen.len() > 1).then(|| seen.join(", "))
}

fn owners(w: &Workload, outs: &[SimOutput], opts: &ReportOptions) -> Owners {
    let owner_of = |job: usize| -> usize {
        let j = &w.jobs[job];
        match opts.by {
            OwnerBy::User => j.user as usize,
            OwnerBy::Group => j.group as usize,
        }
    };
    let names_all = match opts.by {
        OwnerBy::User => &w.users,
        OwnerBy::Group => &w.groups,
    };
    let n = names_all.len().max(1);
    let mut gpu_ms = vec![0i128; n];
    let mut jobs = vec![0usize; n];
    if let Some(o) = outs.first() {
        for r in &o.records {
            let i = owner_of(r.job.idx());
            gpu_ms[i] += w.jobs[r.job.idx()].gpu_time();
            jobs[i] += 1;
        }
    }
    let total: i128 = gpu_ms.iter().sum();
    let mut order: Vec<usize> = (0..n).filter(|&i| jobs[i] > 0).collect();
    order.sort_by(|&a, &b| gpu_ms[b].cmp(&gpu_ms[a]).then(a.cmp(&b)));
    // Slot of each owner: its own when in the top N, else the shared "(others)".
    let top = opts.top.max(1);
    let mut slot = vec![usize::MAX; n];
    let mut names: Vec<String> = Vec::new();
    for (rank, &i) in order.iter().enumerate() {
        if rank < top || order.len() == top + 1 {
            slot[i] = names.len();
            names.push(names_all.get(i).cloned().unwrap_or_else(|| format!("#{i}")));
        }
    }
    let others = order.len() > names.len();
    if others {
        for &i in &order {
            if slot[i] == usize::MAX {
                slot[i] = names.len();
            }
        }
        names.push(OTHERS.to_string());
    }
    let gpu_h = |ms: i128| ms as f64 / 3_600_000.0;
    let mut share = BTreeMap::new();
    for (s, name) in names.iter().enumerate() {
        let members = order.iter().filter(|&&i| slot[i] == s);
        let (g, j) = members.fold((0i128, 0usize), |(g, j), &i| (g + gpu_ms[i], j + jobs[i]));
        let sh = if total > 0 { g as f64 / total as f64 } else { 0.0 };
        share.insert(name.clone(), OwnerShare { jobs: j, gpu_hours: gpu_h(g), share: sh });
    }
    let mut by_policy = BTreeMap::new();
    for o in outs {
        let mut wait = vec![(0.0, 0usize); names.len()];
        let mut bsld = vec![0.0; names.len()];
        for r in &o.records {
            let s = slot[owner_of(r.job.idx())];
            wait[s].0 += series::wait_s(r);
            wait[s].1 += 1;
            bsld[s] += ordo_sim::metrics::bounded_slowdown(r.end - r.submit, w.jobs[r.job.idx()].runtime);
        }
        let rows = names
            .iter()
            .enumerate()
            .map(|(s, name)| {
                let c = wait[s].1.max(1) as f64;
                (name.clone(), OwnerRow { mean_wait_s: wait[s].0 / c, mean_bounded_slowdown: bsld[s] / c })
            })
            .collect();
        by_policy.insert(o.metrics.policy.clone(), rows);
    }
    Owners { by: opts.by, names, share, by_policy }
}

fn cost(results: &[Metrics], base: usize, best: usize, price: Option<&Price>) -> Cost {
    let rows: Vec<CostRow> = results
        .iter()
        .map(|m| {
            let idle = (1.0 - m.headline_utilisation()).max(0.0) * m.gpus as f64 * MONTH_H;
            // Over the same span as the utilisation, so that the parts add up to the whole.
            let c = m.headline_idle_causes();
            let per_month = |gpu_h: f64| if c.span_h > 0.0 { gpu_h / c.span_h * MONTH_H } else { 0.0 };
            let (hol, frag) = (per_month(c.head_of_line_gpu_hours), per_month(c.fragmentation_gpu_hours));
            let empty = per_month(c.empty_queue_gpu_hours);
            let money = |x: f64| price.map(|p| x * p.per_gpu_hour);
            CostRow {
                idle_gpu_hours_per_month: idle,
                idle_wait_gpu_hours_per_month: hol + frag,
                head_of_line_gpu_hours_per_month: hol,
                fragmentation_gpu_hours_per_month: frag,
                idle_empty_gpu_hours_per_month: empty,
                constrained_gpu_hours_per_month: per_month(c.constrained_gpu_hours),
                idle_cost_per_month: money(idle),
                idle_wait_cost_per_month: money(hol + frag),
                idle_empty_cost_per_month: money(empty),
            }
        })
        .collect();
    let saving = rows[base].idle_wait_gpu_hours_per_month - rows[best].idle_wait_gpu_hours_per_month;
    let b = &results[base];
    let basis_days = b.headline_idle_causes().span_h / 24.0;
    let span = if b.utilization_window.is_some() {
        "arrival window (first to last submit)".to_string()
    } else {
        format!("makespan of {} (every job was submitted at once)", headline::name(b))
    };
    let basis = format!("{} of history, the {span}", days(basis_days));
    // On the days as shown (one decimal): 6.98 days read as 7.0 are not warned about.
    let short_history = ((10.0 * basis_days).round() / 10.0 < SHORT_HISTORY_DAYS).then(|| {
        format!(
            "the figures per month are extrapolated from only {}: a month of this cluster may look quite different. Give a longer history (e.g. `ordo slurm import --since now-30days`) before quoting them.",
            days(basis_days)
        )
    });
    Cost {
        price: price.cloned(),
        saving_gpu_hours_per_month: saving,
        saving_per_month: price.map(|p| saving * p.per_gpu_hour),
        per_policy: results.iter().map(|m| m.policy.clone()).zip(rows).collect(),
        basis_days,
        basis,
        short_history,
    }
}

/// A span of days in words: `1.1 days`, `0.5 days`, `30 days` (one decimal below ten days).
pub fn days(d: f64) -> String {
    if d >= 10.0 {
        format!("{d:.0} days")
    } else {
        format!("{d:.1} days")
    }
}

/// Simulates the baseline (its config `cfg`; `baseline`: its name as the report shows it, such
/// as `fifo` or `fifo @topology`, and its mean JCT) on the cluster plus added nodes like its most common
/// one until its mean JCT is at most `target_mean_jct_s` (the best policy's), up to
/// `cap_factor` times the cluster's nodes in all. `on_probe` is called after each simulation
/// (for a progress display). Simulations of one search round run in parallel.
pub fn equivalent_gpus(
    w: &Workload,
    cfg: &SimConfig,
    baseline: (&str, f64),
    best: &str,
    target_mean_jct_s: f64,
    cap_factor: u32,
    on_probe: &(dyn Fn() + Sync),
) -> Result<Equivalent, ReportError> {
    let (baseline, baseline_mean_jct_s) = (baseline.0.to_string(), baseline.1);
    let node_gpus = equiv::common_node(&cfg.cluster).map_or(0, |n| n.gpus);
    let base_nodes = cfg.cluster.nodes.len() as u32;
    let cap = base_nodes.saturating_mul(cap_factor.max(2) - 1);
    let mut e = Equivalent {
        baseline: baseline.clone(),
        best: best.to_string(),
        target_mean_jct_s,
        node_gpus,
        base_nodes,
        cap_extra_nodes: cap,
        extra_nodes: None,
        extra_gpus: None,
        reached: true,
        probes: Vec::new(),
        message: String::new(),
        cost_per_month: None,
    };
    if baseline_mean_jct_s <= target_mean_jct_s || baseline == best {
        e.message = format!("none needed: {baseline} already has the lowest mean JCT of the policies compared.");
        return Ok(e);
    }
    let out = equiv::search(target_mean_jct_s, cap, rayon::current_num_threads(), |k| {
        let mut c = cfg.clone();
        c.cluster = equiv::with_extra_nodes(&cfg.cluster, k);
        if let Some(t) = &cfg.topology {
            let grown = equiv::with_extra_topology(t, &c.cluster)
                .map_err(|why| ReportError::Sim { extra_nodes: k, source: SimError::Cluster(why) })?;
            c.topology = Some(std::sync::Arc::new(grown));
        }
        let r =
            simulate(w, &c).map(|o| o.metrics.mean_jct_s).map_err(|source| ReportError::Sim { extra_nodes: k, source });
        on_probe();
        r
    })?;
    e.probes = out
        .probes
        .iter()
        .map(|&(k, j)| Probe { extra_nodes: k, extra_gpus: k as u64 * node_gpus as u64, mean_jct_s: j })
        .collect();
    match out.extra_nodes {
        Some(k) => {
            let g = k as u64 * node_gpus as u64;
            e.extra_nodes = Some(k);
            e.extra_gpus = Some(g);
            e.message = format!(
                "{baseline} would need {} of {} ({}, {:.0}% more) to bring its mean JCT down to {best}'s {:.1} h on the original cluster.",
                count(k as usize, "more node"),
                count(node_gpus as usize, "GPU"),
                count(g as usize, "more GPU"),
                100.0 * k as f64 / base_nodes.max(1) as f64,
                target_mean_jct_s / 3600.0,
            );
        }
        None => {
            e.reached = false;
            e.message = format!(
                "not reached: even with {} of {} ({}x the cluster) {baseline}'s mean JCT stays above {best}'s {:.1} h; the order matters more than any number of GPUs the search tried.",
                count(cap as usize, "more node"),
                count(node_gpus as usize, "GPU"),
                cap_factor.max(2),
                target_mean_jct_s / 3600.0,
            );
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_core::time::SECOND;
    use ordo_core::{ClusterSpec, Job, JobId, Placement, PolicySpec};

    /// Three users on a 4-GPU node: `a` runs 4 GPUs x 100 s, `b` 2 x 50 s, `c` 1 x 10 s, all
    /// submitted at 0 (so under fifo b and c wait for a).
    fn workload() -> Workload {
        let mut w = Workload::default();
        for (i, (user, gpus, secs)) in [("a", 4, 100), ("b", 2, 50), ("c", 1, 10)].into_iter().enumerate() {
            let u = w.user_index(user);
            let g = w.group_index("g");
            w.jobs.push(Job {
                id: JobId(i as u32),
                name: format!("j{i}"),
                user: u,
                group: g,
                gpus,
                runtime: secs * SECOND,
                ..Job::default()
            });
        }
        w
    }

    #[test]
    fn owners_cost_and_sizes_of_a_hand_built_case() {
        let w = workload();
        let cfg =
            |p: &str| SimConfig::new(ClusterSpec::uniform(1, 4), Placement::Pooled, p.parse::<PolicySpec>().unwrap());
        let outs: Vec<SimOutput> = ["fifo", "sgf"].iter().map(|p| simulate(&w, &cfg(p)).unwrap()).collect();
        let price = Price::new(2.0, "chf").unwrap();
        let opts = ReportOptions { top: 1, price: Some(price), ..ReportOptions::default() };
        let r = Report::build(&InputInfo::whole("hand", "test", 3), &w, &outs, &opts, None).unwrap();
        // GPU-seconds: a 400, b 100, c 10: a is the top user, b and c are "(others)".
        assert_eq!(r.owners.names, vec!["a".to_string(), OTHERS.to_string()]);
        assert!((r.owners.share["a"].share - 400.0 / 510.0).abs() < 1e-12);
        assert_eq!(r.owners.share[OTHERS].jobs, 2);
        // fifo: a runs [0, 100), b [100, 150) with c beside it: b and c wait 100 s.
        assert_eq!(r.wait_by_size["fifo"]["1"].mean_wait_s, 100.0);
        assert_eq!(r.wait_by_size["fifo"]["2-4"].jobs, 2);
        assert_eq!(r.owners.by_policy["fifo"][OTHERS].mean_wait_s, 100.0);
        // sgf: c [0, 10) and b [0, 50) first, a [50, 150): a waits 50 s.
        assert_eq!(r.owners.by_policy["sgf"]["a"].mean_wait_s, 50.0);
        assert_eq!(r.best, "sgf");
        // Cost: money = GPU-hours x price; the saving is fifo's idle-wait minus sgf's.
        let c = &r.cost;
        assert_eq!(c.price.as_ref().map(|p| p.currency.as_str()), Some("CHF"));
        for row in c.per_policy.values() {
            assert_eq!(row.idle_cost_per_month, Some(row.idle_gpu_hours_per_month * 2.0));
        }
        let want =
            c.per_policy["fifo"].idle_wait_gpu_hours_per_month - c.per_policy["sgf"].idle_wait_gpu_hours_per_month;
        assert_eq!(c.saving_gpu_hours_per_month, want);
        // Allocated GPUs under fifo: 4 for 100 s, then 3 for 10 s, 2 for 40 s: mean 510/150,
        // exactly the work (400 + 100 + 10 GPU-s) over the span.
        assert!((r.allocated_gpus["fifo"].mean - 510.0 / 150.0).abs() < 1e-9);
    }

    /// Each policy's mean allocated GPUs is its own: work over its own makespan (it once
    /// divided by the longest makespan of all, the same number for every policy).
    #[test]
    fn mean_allocated_gpus_is_each_policys_own() {
        use ordo_sim::workload::{generate, Scenario, WorkloadParams};
        let w = generate(&WorkloadParams::default_for(Scenario::Backlog), 512);
        let cfg = |p: &str| SimConfig::new(ClusterSpec::uniform(64, 8), Placement::Pooled, p.parse().unwrap());
        let outs: Vec<SimOutput> = ["fifo", "sgf"].iter().map(|p| simulate(&w, &cfg(p)).unwrap()).collect();
        let r = Report::build(
            &InputInfo::whole("backlog", "generated", w.jobs.len()),
            &w,
            &outs,
            &ReportOptions::default(),
            None,
        )
        .unwrap();
        let (f, s) = (&r.allocated_gpus["fifo"], &r.allocated_gpus["sgf"]);
        for (p, a) in [("fifo", f), ("sgf", s)] {
            let m = &r.metrics[p];
            let want = m.utilization_makespan * m.gpus as f64;
            assert!((a.mean - want).abs() < 1e-6 * want, "{p}: mean allocated {} vs {want}", a.mean);
        }
        assert!(r.metrics["fifo"].makespan_s > r.metrics["sgf"].makespan_s);
        assert!(s.mean > f.mean + 10.0, "fifo {} sgf {}", f.mean, s.mean);
    }

    #[test]
    fn prices_and_currencies_are_validated() {
        assert!(matches!(Price::new(2.1, "EU"), Err(ReportError::Currency(_))));
        assert!(matches!(Price::new(2.1, "E1R"), Err(ReportError::Currency(_))));
        assert!(matches!(Price::new(0.0, "EUR"), Err(ReportError::Price(_))));
        assert!(matches!(Price::new(f64::NAN, "EUR"), Err(ReportError::Price(_))));
        assert_eq!(Price::new(2.1, " usd ").unwrap().currency, "USD");
    }

    #[test]
    fn equivalent_search_on_a_hand_built_case() {
        // Under fifo on one 4-GPU node, b and c wait for a (mean JCT (100+150+110)/3 = 120 s);
        // one more 4-GPU node lets b and c start at once: (100+50+10)/3.
        let w = workload();
        let cfg =
            SimConfig::new(ClusterSpec::uniform(1, 4), Placement::Pooled, PolicySpec::plain(ordo_core::Order::Fifo));
        let e = equivalent_gpus(&w, &cfg, ("fifo", 120.0), "sgf", 60.0, 16, &|| {}).unwrap();
        assert_eq!((e.extra_nodes, e.extra_gpus, e.reached), (Some(1), Some(4), true));
        assert!((e.probes[0].mean_jct_s - 160.0 / 3.0).abs() < 1e-9, "{:?}", e.probes);
        let e = equivalent_gpus(&w, &cfg, ("fifo", 120.0), "sgf", 10.0, 4, &|| {}).unwrap();
        assert!(!e.reached && e.message.starts_with("not reached"), "{}", e.message);
        let e = equivalent_gpus(&w, &cfg, ("fifo", 120.0), "fifo", 120.0, 16, &|| {}).unwrap();
        assert!(e.reached && e.message.starts_with("none needed"), "{}", e.message);
    }
}
