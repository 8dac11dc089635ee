//! The plain-words headline shared by `ordo compare` and `ordo report`: the baseline (first
//! `fifo`, or else the first result) against the result with the lowest mean JCT.

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
        }
    }
}

/// The headline's choice of runs and its sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Headline {
    /// Index of the baseline run: the first `fifo`, or else the first.
    pub baseline: usize,
    /// Index of the run with the lowest mean JCT (ties: the earlier).
    pub best: usize,
    /// One sentence: what changes against the baseline.
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

/// Picks the baseline and the best run of `results` (which must not be empty) and words the
/// change, exactly as `ordo compare` prints it (docs/METRICS.md, "The headline").
pub fn headline(results: &[Metrics]) -> Headline {
    let base = results.iter().position(|m| m.policy == "fifo").unwrap_or(0);
    let best = (0..results.len())
        .min_by(|&a, &b| results[a].mean_jct_s.total_cmp(&results[b].mean_jct_s).then(a.cmp(&b)))
        .unwrap_or(0);
    let (b, x) = (&results[base], &results[best]);
    let which = if b.utilization_window.is_some() { "utilisation" } else { "utilisation (over the makespan)" };
    let text = if best == base {
        format!("{} is already the best of the policies compared by mean completion time.", b.policy)
    } else {
        format!(
            "Same cluster, same jobs: {} instead of {}: {which} {:.0}% -> {:.0}% ({:+.0} pp), mean JCT {:+.0}%, p99 wait {:+.0}%{}.",
            x.policy,
            b.policy,
            100.0 * b.headline_utilisation(),
            100.0 * x.headline_utilisation(),
            100.0 * (x.headline_utilisation() - b.headline_utilisation()),
            pct_change(b.mean_jct_s, x.mean_jct_s),
            pct_change(b.p99_wait_s, x.p99_wait_s),
            if x.estimates == "oracle" { " (oracle: it read true run times)" } else { "" }
        )
    };
    Headline { baseline: base, best, text }
}
