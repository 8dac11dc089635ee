//! The plain-words summary shared by `ordo compare`, `ordo report` and `ordo tune`: the
//! headline (the baseline against the best policy that can run with what the trace tells, an
//! oracle only as a bound), the offered load, and why utilisation changes (idle by cause).

use crate::fmt::{dur, gpu_hours, pct1, thousands};
use ordo_core::words::count;
use ordo_sim::Metrics;
use serde::{Deserialize, Serialize};

/// Where the jobs came from (printed by `ordo compare` and at the top of a report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputInfo {
    /// Trace path or built-in workload name.
    pub source: String,
    /// Trace format (or `generated`).
    pub format: String,
    /// Data rows read.
    pub rows: usize,
    /// Jobs kept.
    pub jobs: usize,
    /// Rows dropped because their duration was 0.
    pub dropped_zero_duration: usize,
    /// Rows outside `--from-day/--to-day`.
    pub dropped_outside_window: usize,
    /// First day kept, if selected.
    pub from_day: Option<f64>,
    /// Day before which jobs were kept, if selected.
    pub to_day: Option<f64>,
    /// How run-time estimates were made, when ordo made them (`--estimate-noise`).
    pub estimates: Option<String>,
    /// Where the cluster came from: `--cluster`, the trace (its header or a file beside it), a
    /// scenario, or the default.
    #[serde(default)]
    pub cluster_from: String,
}

impl InputInfo {
    /// An input of `jobs` jobs read whole (nothing dropped, no window) from `source`.
    pub fn whole(source: &str, format: &str, jobs: usize) -> InputInfo {
        InputInfo {
            source: source.to_string(),
            format: format.to_string(),
            rows: jobs,
            jobs,
            dropped_zero_duration: 0,
            dropped_outside_window: 0,
            from_day: None,
            to_day: None,
            estimates: None,
            cluster_from: String::new(),
        }
    }
}

/// The schedule as run, from an `ordo server`'s database: the policy the server ran, and what
/// its GPUs really did against what jobs held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsRun {
    /// The policy in force when the database was read.
    pub policy: Option<String>,
    /// The policies the server started jobs under, with how many starts each.
    pub policies: Vec<(String, usize)>,
    /// Allocated against really busy GPU-time over the headline's span, when agents sampled
    /// GPU activity.
    pub busy: Option<ordo_sim::asrun::BusyShare>,
    /// The above in words, one sentence per line.
    pub lines: Vec<String>,
}

impl AsRun {
    /// Words for the as-run row of `m` (its metrics), run under `policy` (`policies`: starts per
    /// policy), with `busy` from the jobs' GPU activity.
    pub fn new(
        m: &Metrics,
        policy: Option<String>,
        policies: Vec<(String, usize)>,
        busy: Option<ordo_sim::asrun::BusyShare>,
    ) -> AsRun {
        let mut first = String::from("the schedule the server really ran");
        if let Some(p) = &policy {
            first.push_str(&format!("; policy in force when its database was read: {p}"));
        }
        if !policies.is_empty() {
            let v: Vec<String> = policies.iter().map(|(p, n)| format!("{p} {}", thousands(*n as f64))).collect();
            first.push_str(&format!(" (starts made under: {})", v.join(", ")));
        }
        first.push('.');
        let second = match &busy {
            Some(b) => format!(
                "GPU activity: allocated {}, actually busy {} ({}; kernels ran during {} of the GPU-time jobs held, measured for {} of it).",
                pct1(b.allocated),
                pct1(b.busy),
                utilisation_measure(m),
                pct1(b.busy_of_allocated),
                pct1(b.measured)
            ),
            None => "GPU activity: not measured (no job in this window has samples; agents send them with `ordo agent --gpu-activity`).".to_string(),
        };
        AsRun { policy, policies, busy, lines: vec![first, second] }
    }

    /// Words for the as-run row of a trace whose jobs carry when they really started (an
    /// imported Slurm accounting, Helios, Acme, PAI 2020): no policy is known, and GPU activity
    /// only where the trace measured it (`busy`, PAI 2020's sensor table).
    pub fn from_trace(m: &Metrics, busy: Option<ordo_sim::asrun::BusyShare>) -> AsRun {
        let first = "the schedule the cluster really ran: each job from its start time in the trace (`start_time`; Slurm's `Start`) for its run time, on the cluster above; the policy it ran under and where each job ran are not in the trace.";
        let second = "its waits include time behind jobs not in this comparison (submitted outside the window, filtered out, other partitions), which the policies' rows do not see.";
        let mut lines = vec![first.to_string(), second.to_string()];
        if let Some(b) = &busy {
            lines.push(format!(
                "GPU activity as the trace measured it: allocated {}, actually busy {} ({}; the GPUs did work during {} of the GPU-time jobs held, measured for {} of it).",
                pct1(b.allocated),
                pct1(b.busy),
                utilisation_measure(m),
                pct1(b.busy_of_allocated),
                pct1(b.measured)
            ));
        }
        AsRun { policy: None, policies: vec![], busy, lines }
    }
}

/// A measure on which the headline's policy does worse than the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    /// `p99_wait_s` or `fairness_users` (the keys of docs/METRICS.md).
    pub measure: String,
    /// The baseline's value.
    pub baseline: f64,
    /// The headline policy's value.
    pub best: f64,
    /// The regression in words, with both values as shown.
    pub text: String,
}

/// The headline's choice of runs and its sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Headline {
    /// Index of the baseline run: the schedule as run (`as-run`, from an ordo server's
    /// database) when there is one, else the first `fifo`, else the first.
    pub baseline: usize,
    /// Index of the run with the lowest mean JCT among the policies that can run with what the
    /// trace tells (not `oracle`, not `as-run`; ties: the earlier); the baseline when none is.
    pub best: usize,
    /// Index of the oracle run with the lowest mean JCT, when it beats `best`: shown as a bound.
    pub bound: Option<usize>,
    /// Where `best` does worse than the baseline: its p99 wait or its fairness over users.
    pub regressions: Vec<Regression>,
    /// When `best` has a regression: the run with the lowest mean JCT among those that can run
    /// with what the trace tells, beat the baseline's mean JCT and have no regression.
    pub without_regression: Option<usize>,
    /// What changes against the baseline, the measure named, any regression named with the
    /// best policy without one, the bound labelled.
    pub text: String,
}

/// Relative change from `from` to `to` in percent (0 when `from` is 0).
pub fn pct_change(from: f64, to: f64) -> f64 {
    if from == 0.0 {
        0.0
    } else {
        100.0 * (to - from) / from
    }
}

/// A change from `from` to `to` as the headline words it: relative (`+20%`, `-81%`), unless
/// `from` shows as zero (`shown` formats a value as the tables do), where a percentage would
/// read as `-100%` or be undefined: then both values as shown (`0s -> 5.0m`), or `under X in
/// both` when they show alike.
pub fn change(from: f64, to: f64, shown: impl Fn(f64) -> String) -> String {
    let (a, b) = (shown(from), shown(to));
    if a != shown(0.0) {
        return format!("{:+.0}%", pct_change(from, to));
    }
    if a == b {
        format!("{a} in both")
    } else {
        format!("{a} -> {b}")
    }
}

/// Fairness as the tables show it (two decimals).
fn fair2(x: f64) -> String {
    format!("{x:.2}")
}

/// Where `x` does worse than `b` by more than the tables' rounding shows: a p99 wait longer by
/// at least 1 s and 0.5%, a fairness over users lower at two decimals.
pub fn regressions(b: &Metrics, x: &Metrics) -> Vec<Regression> {
    let mut out = Vec::new();
    let (bw, xw) = (b.p99_wait_s, x.p99_wait_s);
    if xw - bw >= 1.0 && xw > bw * 1.005 {
        out.push(Regression {
            measure: "p99_wait_s".into(),
            baseline: bw,
            best: xw,
            text: format!("{}'s p99 wait is longer than {}'s ({} -> {})", x.policy, name(b), dur(bw), dur(xw)),
        });
    }
    let (bf, xf) = (b.fairness_users, x.fairness_users);
    if (100.0 * xf).round() < (100.0 * bf).round() {
        out.push(Regression {
            measure: "fairness_users".into(),
            baseline: bf,
            best: xf,
            text: format!(
                "{}'s fairness over users is lower than {}'s ({} -> {}: some users' jobs are slowed down more than others')",
                x.policy,
                name(b),
                fair2(bf),
                fair2(xf)
            ),
        });
    }
    out
}

/// The name of the utilisation a result's headline figure is: over the arrival window, or over
/// the makespan when every job was submitted at once.
pub fn utilisation_measure(m: &Metrics) -> &'static str {
    if m.utilization_window.is_some() {
        "utilisation over the arrival window"
    } else {
        "utilisation over the makespan"
    }
}

/// Picks the baseline, the best deployable run and the oracle bound of `results` (which must
/// not be empty) and words the change, exactly as `ordo compare` prints it (docs/METRICS.md,
/// "The headline").
pub fn headline(results: &[Metrics]) -> Headline {
    let as_run = |m: &Metrics| m.policy == ordo_sim::asrun::AS_RUN;
    let base = results.iter().position(as_run).or_else(|| results.iter().position(|m| m.policy == "fifo")).unwrap_or(0);
    let lowest = |pred: &dyn Fn(&Metrics) -> bool| {
        (0..results.len())
            .filter(|&i| pred(&results[i]))
            .min_by(|&a, &b| results[a].mean_jct_s.total_cmp(&results[b].mean_jct_s).then(a.cmp(&b)))
    };
    let deployable = |m: &Metrics| !m.clairvoyant() && !as_run(m);
    let best = lowest(&deployable).unwrap_or(base);
    let bound = lowest(&|m| m.clairvoyant()).filter(|&o| results[o].mean_jct_s < results[best].mean_jct_s);
    let (b, x) = (&results[base], &results[best]);
    let regs = if best == base { Vec::new() } else { regressions(b, x) };
    let without_regression = if regs.is_empty() {
        None
    } else {
        lowest(&|m| deployable(m) && m.mean_jct_s < b.mean_jct_s && regressions(b, m).is_empty())
    };
    let measure = utilisation_measure(b);
    let mut text = if best == base {
        format!(
            "{} is already the best by mean completion time of the policies compared that can run with what the trace tells ({measure} {}).",
            name(b),
            pct1(b.headline_utilisation())
        )
    } else {
        format!(
            "Same cluster, same jobs: {} instead of {}: {measure} {} -> {} ({:+.1} pp), mean JCT {}, p99 wait {}.",
            x.policy,
            name(b),
            pct1(b.headline_utilisation()),
            pct1(x.headline_utilisation()),
            100.0 * (x.headline_utilisation() - b.headline_utilisation()),
            change(b.mean_jct_s, x.mean_jct_s, dur),
            change(b.p99_wait_s, x.p99_wait_s, dur),
        )
    };
    if !regs.is_empty() {
        let what: Vec<&str> = regs.iter().map(|r| r.text.as_str()).collect();
        text.push_str(&format!(" Regression: {}.", what.join("; ")));
        match without_regression {
            Some(i) => {
                let y = &results[i];
                text.push_str(&format!(
                    " Best without a regression in p99 wait or fairness: {}: {measure} {}, mean JCT {}, p99 wait {}, fairness over users {} -> {}.",
                    y.policy,
                    pct1(y.headline_utilisation()),
                    change(b.mean_jct_s, y.mean_jct_s, dur),
                    change(b.p99_wait_s, y.p99_wait_s, dur),
                    fair2(b.fairness_users),
                    fair2(y.fairness_users),
                ));
            }
            None => text.push_str(&format!(
                " No policy compared that can run with what the trace tells lowers the mean JCT of {} without a regression in p99 wait or fairness.",
                name(b)
            )),
        }
    }
    if let Some(o) = bound {
        let o = &results[o];
        text.push_str(&format!(
            " Bound, not deployable: {} reads every job's true run time (oracle): mean JCT {}, {measure} {}.",
            o.policy,
            change(b.mean_jct_s, o.mean_jct_s, dur),
            pct1(o.headline_utilisation())
        ));
    }
    Headline { baseline: base, best, bound, regressions: regs, without_regression, text }
}

/// A run's name in sentences: the as-run row is "the schedule as it ran (as-run)".
pub fn name(m: &Metrics) -> String {
    if m.policy == ordo_sim::asrun::AS_RUN {
        format!("the schedule as it ran ({})", m.policy)
    } else {
        m.policy.clone()
    }
}

/// The lower-bound line: the makespan no order can beat and the utilisation over the makespan
/// it allows, and, where the headline reads the utilisation over the arrival window, why that
/// figure may lie above this bound.
pub fn bounds_text(m: &Metrics) -> String {
    let mut s = format!(
        "no order can finish sooner than {} (the work on every GPU, or the last job's submit + run time), so utilisation over the makespan (util(mkspan)) <= {}",
        crate::render::dur(m.makespan_lower_bound_s),
        pct1(m.utilization_upper_bound)
    );
    if m.utilization_window.is_some() {
        s.push_str(
            "; utilisation over the arrival window (util) is a different measure, not under this bound: it counts only the GPUs held between the first and the last submit",
        );
    }
    s
}

/// Offered load of a run: its sentence and, above 100% or below 30%, a warning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Total work / (GPUs x arrival window); `None` when every job was submitted at once.
    pub offered_load: Option<f64>,
    /// The load in words.
    pub text: String,
    /// Why the comparison may mislead at this load, if it may.
    pub warning: Option<String>,
}

struct LoadInput {
    total_gpu_hours: f64,
    gpus: u64,
}

/// Below this offered load the cluster is mostly idle and orders barely differ.
pub const LOW_LOAD: f64 = 0.3;

/// The offered load of the workload of `m` on its cluster.
pub fn load(m: &Metrics) -> Load {
    load_of(m.offered_load, m.total_gpu_hours, m.gpus)
}

/// The offered load `offered` (None: every job submitted at once) of `gpu_hours` of work on
/// `gpus` GPUs.
pub fn load_of(offered: Option<f64>, work_gpu_hours: f64, gpus: u64) -> Load {
    let m = LoadInput { total_gpu_hours: work_gpu_hours, gpus };
    match offered {
        Some(l) => {
            let text = format!(
                "offered load {} of the cluster's capacity ({} GPU-hours of work / ({} x {} of arrivals))",
                pct1(l),
                gpu_hours(m.total_gpu_hours),
                count(m.gpus as usize, "GPU"),
                crate::render::dur(m.total_gpu_hours * 3600.0 / (l * m.gpus.max(1) as f64))
            );
            let warning = if l > 1.0 {
                Some(format!(
                    "the offered load is {}, above 100%: the jobs bring more work than this cluster can do while they arrive, so the queue grows until the last submit and drains long after it; results then depend on the window and the cluster's size as much as on the order. Check --cluster (is it the trace's own?) or the window.",
                    pct1(l)
                ))
            } else if l < LOW_LOAD {
                Some(format!(
                    "the offered load is {}, below {:.0}%: the cluster is mostly idle, jobs rarely wait, and the order barely matters. Check --cluster (is it larger than the trace's own cluster?).",
                    pct1(l),
                    100.0 * LOW_LOAD
                ))
            } else {
                None
            };
            Load { offered_load: Some(l), text, warning }
        }
        None => Load {
            offered_load: None,
            text: format!(
                "every job submitted at once: a backlog of {} of work for {} (no arrival window, so no offered load)",
                crate::render::dur(m.total_gpu_hours * 3600.0 / m.gpus.max(1) as f64),
                count(m.gpus as usize, "GPU")
            ),
            warning: None,
        },
    }
}

/// One cause of idle GPUs, in a baseline and another run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseRow {
    /// `head-of-line blocking`, `fragmentation` or `empty queue`.
    pub cause: String,
    /// Share of the baseline's capacity over its span that sat idle for this cause.
    pub baseline_share: f64,
    /// The same for the other run.
    pub best_share: f64,
    /// Percentage points of utilisation the other run gains on this cause (baseline share -
    /// its share, x 100).
    pub gain_pp: f64,
}

/// Why utilisation changes from the baseline to the best run: idle capacity by cause over the
/// span the headline utilisation uses (docs/METRICS.md, "Idle capacity by cause").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Why {
    /// Baseline policy.
    pub baseline: String,
    /// The policy compared with it.
    pub best: String,
    /// The utilisation measure (see [`utilisation_measure`]).
    pub measure: String,
    /// Utilisation gain in percentage points; the causes' gains add up to it (with restart
    /// overhead, which counts as held, the rest).
    pub gain_pp: f64,
    /// Head-of-line blocking, fragmentation, empty queue.
    pub causes: Vec<CauseRow>,
    /// The decomposition in words, one sentence per line.
    pub lines: Vec<String>,
}

/// Names of the idle causes, in the order of [`ordo_sim::metrics::IdleCauses::shares`].
pub const CAUSES: [&str; 4] = ["head-of-line blocking", "fragmentation", "empty queue", "constrained-idle"];

/// Decomposes the utilisation change from `results[base]` to `results[best]` by idle cause.
pub fn why(results: &[Metrics], base: usize, best: usize) -> Why {
    let (b, x) = (&results[base], &results[best]);
    let (cb, cx) = (b.headline_idle_causes(), x.headline_idle_causes());
    let (sb, sx) = (cb.shares(b.gpus), cx.shares(x.gpus));
    // Constrained-idle only where a run had any (typed clusters with constrained jobs).
    let n = if sb[3] > 0.0 || sx[3] > 0.0 { 4 } else { 3 };
    let causes: Vec<CauseRow> = (0..n)
        .map(|i| CauseRow {
            cause: CAUSES[i].to_string(),
            baseline_share: sb[i],
            best_share: sx[i],
            gain_pp: 100.0 * (sb[i] - sx[i]),
        })
        .collect();
    let measure = utilisation_measure(b);
    let gain = 100.0 * (x.headline_utilisation() - b.headline_utilisation());
    let mut lines = Vec::new();
    let span = if b.utilization_window.is_some() { "in the arrival window" } else { "over the makespan" };
    if best == base {
        let parts: Vec<String> = causes.iter().map(|c| format!("{} {}", c.cause, pct1(c.baseline_share))).collect();
        lines.push(format!(
            "{measure}: {} {}; share of capacity idle {span}, by cause: {}.",
            b.policy,
            pct1(b.headline_utilisation()),
            parts.join(", ")
        ));
    } else {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| format!("{} {} -> {} ({:+.1} pp)", c.cause, pct1(c.baseline_share), pct1(c.best_share), c.gain_pp))
            .collect();
        lines.push(format!(
            "{measure}: {} {} -> {} {} ({gain:+.1} pp); share of capacity idle {span}, by cause: {}.",
            b.policy,
            pct1(b.headline_utilisation()),
            x.policy,
            pct1(x.headline_utilisation()),
            parts.join(", ")
        ));
    }
    let waited = |m: &Metrics| m.idle_causes.head_of_line_gpu_hours + m.idle_causes.fragmentation_gpu_hours;
    let (wb, wx) = (waited(b), waited(x));
    let mut s = format!(
        "Of {}'s {} idle GPU-hours while jobs waited (whole run), {} were head-of-line blocking (a waiting job fit the idle GPUs) and {} fragmentation (none fit)",
        b.policy,
        gpu_hours(wb),
        gpu_hours(b.idle_causes.head_of_line_gpu_hours),
        gpu_hours(b.idle_causes.fragmentation_gpu_hours)
    );
    if best != base {
        s.push_str(&format!(
            "; {}'s: {}, of which {} and {}",
            x.policy,
            gpu_hours(wx),
            gpu_hours(x.idle_causes.head_of_line_gpu_hours),
            gpu_hours(x.idle_causes.fragmentation_gpu_hours)
        ));
    }
    s.push('.');
    lines.push(s);
    let constrained = b.idle_causes.constrained_gpu_hours.max(x.idle_causes.constrained_gpu_hours);
    if constrained > 0.0 {
        lines.push(format!(
            "Constraints, not the order, held GPUs idle: {} GPU-hours under {} ({} under {}) while jobs waited that only refused those GPUs' model, memory or features (constrained-idle).",
            gpu_hours(b.idle_causes.constrained_gpu_hours),
            b.policy,
            gpu_hours(x.idle_causes.constrained_gpu_hours),
            x.policy
        ));
    }
    Why {
        baseline: b.policy.clone(),
        best: x.policy.clone(),
        measure: measure.to_string(),
        gain_pp: gain,
        causes,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::change;
    use crate::fmt::dur;

    #[test]
    fn a_change_from_a_figure_that_shows_as_zero_is_no_percentage() {
        assert_eq!(change(100.0, 120.0, dur), "+20%");
        assert_eq!(change(100.0, 19.0, dur), "-81%");
        // 0.4 s shows as 0s: "-100%" would be a rounding artefact.
        assert_eq!(change(0.4, 0.0, dur), "0s in both");
        assert_eq!(change(0.0, 300.0, dur), "0s -> 5.0m");
    }
}
