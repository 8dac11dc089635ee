//! What `ordo` prints: the documented JSON types and their plain-text tables.

use ordo_core::time::to_secs_f64;
use ordo_core::{ClusterSpec, PolicySpec, Workload};
use ordo_sim::{Metrics, SimOutput};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

pub use ordo_report::InputInfo;

/// `ordo compare --json` (and `ordo simulate --json`): the input, one result per policy, and
/// the plain-words headline, load and decomposition.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// Where the jobs came from.
    pub input: InputInfo,
    /// One entry per policy, in the order given.
    pub results: Vec<Metrics>,
    /// Jobs that could never fit the cluster: (job name, GPUs).
    pub rejected: Vec<(String, u32)>,
    /// Jobs whose GPU model, memory or features no node has (never satisfiable): (job, why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsatisfiable: Vec<(String, String)>,
    /// Jobs not run because a dependency of theirs could never be met (the trace's `after`
    /// column): (job, why). The same under every policy.
    pub never_satisfied: Vec<(String, String)>,
    /// The baseline policy the headline compares against.
    pub baseline: String,
    /// The policy with the lowest mean JCT among those that can run with what the trace tells
    /// (not an oracle).
    pub best: String,
    /// The oracle policy shown as a bound, if one beats `best`.
    pub bound: Option<String>,
    /// Where `best` does worse than the baseline (p99 wait, fairness over users).
    pub regressions: Vec<ordo_report::Regression>,
    /// When `best` has a regression: the policy with the lowest mean JCT that can run, beats
    /// the baseline and has none.
    pub best_without_regression: Option<String>,
    /// What changes against the baseline, any regression named.
    pub headline: String,
    /// The offered load and, above 100% or below 30%, a warning.
    pub load: ordo_report::Load,
    /// What the lower bounds allow.
    pub bounds: String,
    /// Why utilisation changes from the baseline to the best: idle capacity by cause.
    pub why: ordo_report::Why,
    /// The schedule as run and its GPU activity (an `ordo server`'s database as input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_run: Option<ordo_report::AsRun>,
    /// `--reclaim-after`: what the reclaim rule would have given back (the results above are
    /// of the workload it leaves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Reclaimed>,
}

/// What `compare --reclaim-after` found.
#[derive(Debug, Clone, Serialize)]
pub struct Reclaimed {
    /// The jobs it cut and the GPU-hours it gives back.
    #[serde(flatten)]
    pub summary: ordo_sim::reclaim::ReclaimSummary,
    /// The policy replayed with and without the rule.
    pub policy: String,
    /// Its mean wait without the rule, s ...
    pub mean_wait_before_s: f64,
    /// ... and with it.
    pub mean_wait_after_s: f64,
    /// Its mean JCT without the rule, s ...
    pub mean_jct_before_s: f64,
    /// ... and with it.
    pub mean_jct_after_s: f64,
}

impl Reclaimed {
    /// The rule's summary, with one policy's results on the jobs without and with it.
    pub fn new(summary: ordo_sim::reclaim::ReclaimSummary, before: &Metrics, after: &Metrics) -> Self {
        Reclaimed {
            summary,
            policy: after.policy.clone(),
            mean_wait_before_s: before.mean_wait_s,
            mean_wait_after_s: after.mean_wait_s,
            mean_jct_before_s: before.mean_jct_s,
            mean_jct_after_s: after.mean_jct_s,
        }
    }
}

/// `n` and the noun, plural unless `n` is 1 (`1 job`, `3 jobs`).
pub use ordo_core::words::count;

impl Comparison {
    /// Builds the comparison; the baseline is the first `fifo` run, or else the first run.
    pub fn new(input: &InputInfo, w: &Workload, outs: &[SimOutput]) -> Self {
        let results: Vec<Metrics> = outs.iter().map(|o| o.metrics.clone()).collect();
        let h = ordo_report::headline::headline(&results);
        let (b, x) = (&results[h.baseline], &results[h.best]);
        let first = outs.iter().find(|o| o.metrics.policy != ordo_sim::asrun::AS_RUN);
        let never = |r: &&ordo_sim::engine::Rejected| r.why.starts_with("never satisfiable");
        let rejected = first
            .map(|o| o.rejected.iter().filter(|r| !never(r)).map(|r| (format!("{}", r.job), r.gpus)).collect())
            .unwrap_or_default();
        let job_name = |id: ordo_core::JobId| {
            w.jobs
                .get(id.idx())
                .map(|j| if j.name.is_empty() { id.to_string() } else { j.name.clone() })
                .unwrap_or_default()
        };
        let unsatisfiable = first
            .map(|o| {
                o.rejected
                    .iter()
                    .filter(never)
                    .map(|r| (job_name(r.job), r.why.trim_start_matches("never satisfiable: ").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let never_satisfied = outs
            .iter()
            .find(|o| o.metrics.policy != ordo_sim::asrun::AS_RUN)
            .map(|o| {
                let name = |r: &ordo_sim::engine::Rejected| match w.jobs.get(r.job.idx()) {
                    Some(j) if !j.name.is_empty() => j.name.clone(),
                    _ => r.job.to_string(),
                };
                o.never_satisfied.iter().map(|r| (name(r), r.why.clone())).collect()
            })
            .unwrap_or_default();
        Comparison {
            input: input.clone(),
            baseline: b.policy.clone(),
            best: x.policy.clone(),
            bound: h.bound.map(|i| results[i].policy.clone()),
            best_without_regression: h.without_regression.map(|i| results[i].policy.clone()),
            regressions: h.regressions,
            load: ordo_report::headline::load(b),
            bounds: ordo_report::headline::bounds_text(b),
            why: ordo_report::headline::why(&results, h.baseline, h.best),
            headline: h.text,
            results,
            rejected,
            unsatisfiable,
            never_satisfied,
            as_run: None,
            reclaim: None,
        }
    }

    /// The human table.
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let i = &self.input;
        let m0 = self.results.first();
        let _ = writeln!(s, "input:   {} ({}): {}", i.source, i.format, count(i.jobs, "job"));
        if i.dropped_zero_duration + i.dropped_outside_window > 0 {
            let _ = writeln!(
                s,
                "         {} read; dropped {} with duration 0 and {} outside the day window",
                count(i.rows, "row"),
                thousands(i.dropped_zero_duration as f64),
                thousands(i.dropped_outside_window as f64)
            );
        }
        if let Some(e) = &i.estimates {
            let _ = writeln!(s, "         estimates: {e}");
        }
        if let Some(m) = m0 {
            let mut placements: Vec<&str> = Vec::new();
            for r in &self.results {
                if !placements.contains(&r.placement.as_str()) {
                    placements.push(&r.placement);
                }
            }
            let _ = writeln!(
                s,
                "cluster: {} ({}), {} placement; {}",
                m.cluster,
                count(m.gpus as usize, "GPU"),
                placements.join(" / "),
                i.cluster_from
            );
            if let Some(sp) = self.results.iter().find_map(|r| r.spread.as_ref()) {
                let _ = writeln!(
                    s,
                    "network: topology of {} levels ({}, lowest first); a gang spread over several units of a level runs slower by that level's factor (docs/TOPOLOGY.md)",
                    sp.levels.len(),
                    sp.levels.join(", ")
                );
            }
            let _ = writeln!(s, "load:    {}", self.load.text);
            if let Some(w) = &self.load.warning {
                let _ = writeln!(s, "warning: {w}");
            }
        }
        if !self.rejected.is_empty() {
            let _ = writeln!(
                s,
                "warning: {} can never run on this cluster (more GPUs than it has, or more CPUs or memory than any node) and {} not run",
                count(self.rejected.len(), "job"),
                if self.rejected.len() == 1 { "was" } else { "were" }
            );
        }
        if let Some((job, why)) = self.unsatisfiable.first() {
            let _ = writeln!(
                s,
                "warning: {} never satisfiable: no node of the cluster serves the GPUs {} (e.g. job {job}: {why}); not run",
                count(self.unsatisfiable.len(), "job"),
                if self.unsatisfiable.len() == 1 { "it asks" } else { "they ask" }
            );
        }
        if let Some((job, why)) = self.never_satisfied.first() {
            let _ = writeln!(
                s,
                "warning: {} not run: a dependency could never be met (e.g. job {job}: {why})",
                count(self.never_satisfied.len(), "job"),
            );
        }
        let _ = writeln!(s);
        // Constrained-idle: a column only where a run had any (typed clusters).
        let constrained = self.results.iter().any(|m| m.idle_causes.constrained_gpu_hours > 0.0);
        let mut head = vec![
            "policy",
            "estimates",
            "util",
            "util(mkspan)",
            "mean JCT",
            "p50 JCT",
            "p99 JCT",
            "mean wait",
            "p99 wait",
            "mean bsld",
            "HOL GPU-h",
            "frag GPU-h",
            "makespan",
            "fair(users)",
        ];
        if constrained {
            head.insert(12, "constr GPU-h");
        }
        // Preemption losses (restart overheads, work lost to checkpoints): a column only where
        // a run had any, before the makespan.
        let lost = self.results.iter().any(|m| m.preemption_lost_gpu_hours > 0.0);
        if lost {
            head.insert(head.len() - 2, "lost GPU-h");
        }
        // Spread placement (a topology): GPU-hours lost to it and the share of gangs spread.
        let spread = self.results.iter().any(|m| m.spread.is_some());
        if spread {
            head.insert(head.len() - 2, "spread GPU-h");
            head.insert(head.len() - 2, "gangs spread");
        }
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|m| {
                let mut row = vec![
                    m.policy.clone(),
                    m.estimates.clone(),
                    m.utilization_window.map(|u| format!("{:.1}%", 100.0 * u)).unwrap_or_else(|| "-".into()),
                    format!("{:.1}%", 100.0 * m.utilization_makespan),
                    dur(m.mean_jct_s),
                    dur(m.p50_jct_s),
                    dur(m.p99_jct_s),
                    dur(m.mean_wait_s),
                    dur(m.p99_wait_s),
                    ordo_report::fmt::fixed(m.mean_bounded_slowdown, 1),
                    thousands(m.idle_causes.head_of_line_gpu_hours),
                    thousands(m.idle_causes.fragmentation_gpu_hours),
                    dur(m.makespan_s),
                    format!("{:.2}", m.fairness_users),
                ];
                if constrained {
                    row.insert(12, thousands(m.idle_causes.constrained_gpu_hours));
                }
                if lost {
                    row.insert(row.len() - 2, thousands(m.preemption_lost_gpu_hours));
                }
                if spread {
                    let sp = m.spread.clone().unwrap_or_default();
                    row.insert(row.len() - 2, thousands(sp.lost_gpu_hours));
                    row.insert(
                        row.len() - 2,
                        if sp.gangs == 0 {
                            "-".into()
                        } else {
                            format!("{:.0}%", 100.0 * sp.spread_gangs as f64 / sp.gangs as f64)
                        },
                    );
                }
                row
            })
            .collect();
        s.push_str(&table(&head, &rows));
        let _ = writeln!(s);
        if m0.is_some() {
            let _ = writeln!(s, "bounds:  {}", self.bounds);
        }
        for m in self.results.iter().filter(|m| !m.utilization_by_model.is_empty()) {
            let parts: Vec<String> = m
                .utilization_by_model
                .iter()
                .map(|u| format!("{} {:.1}% of {}", u.model, 100.0 * u.utilization, count(u.gpus as usize, "GPU")))
                .collect();
            let _ = writeln!(s, "models:  {}: {}", m.policy, parts.join(", "));
        }
        let _ = writeln!(
            s,
            "columns: HOL/frag GPU-h: GPU-hours idle while jobs waited and one of them fit the idle GPUs (head-of-line blocking) / none fit (fragmentation){}{}; docs/METRICS.md",
            if constrained {
                "; constr GPU-h: none fit, but one would have had it accepted those GPUs' model, memory or features (constrained-idle)"
            } else {
                ""
            },
            if lost {
                "; lost GPU-h: GPU-hours preemptions cost (restart overheads, work lost since the last checkpoint)"
            } else {
                ""
            }
        );
        if spread {
            let _ = writeln!(
                s,
                "spread:  spread GPU-h: GPU-hours gangs ran beyond their time in the least spread placement their size allows (GPU-hours lost to spread placement); gangs spread: the share of gangs (jobs on more than one node) that crossed more levels than their size needs"
            );
        }
        let oracles: Vec<&str> = self.results.iter().filter(|m| m.clairvoyant()).map(|m| m.policy.as_str()).collect();
        if !oracles.is_empty() {
            let _ = writeln!(
                s,
                "oracle:  the workload has no run-time estimates, so policies marked oracle ({}) read each job's true run time: a bound, not a policy to deploy.",
                oracles.join(", ")
            );
        }
        if let Some(r) = &self.reclaim {
            // Small amounts keep their digits (a test cluster's minutes).
            let gpu_hours = |x: f64| if x < 100.0 { format!("{x:.3}") } else { thousands(x) };
            let m = &r.summary;
            let _ = writeln!(
                s,
                "reclaim: {} of the {} jobs with measured GPU activity stayed under {}% busy on average; the rule cancels the {} of them that ran longer than {} from their start, giving back {} GPU-hours ({:.1}% of the jobs' {}). Under {}: mean wait {} -> {}, mean JCT {} -> {}. The rows above are of the jobs as the rule leaves them (no as-run row: that ran without the rule).",
                thousands(m.jobs_idle as f64),
                thousands(m.jobs_measured as f64),
                m.threshold_pct,
                thousands(m.jobs_reclaimed as f64),
                dur(m.after_s),
                gpu_hours(m.gpu_hours_returned),
                if m.gpu_hours_total > 0.0 { 100.0 * m.gpu_hours_returned / m.gpu_hours_total } else { 0.0 },
                gpu_hours(m.gpu_hours_total),
                r.policy,
                dur(r.mean_wait_before_s),
                dur(r.mean_wait_after_s),
                dur(r.mean_jct_before_s),
                dur(r.mean_jct_after_s)
            );
        }
        for l in self.as_run.iter().flat_map(|a| &a.lines) {
            let _ = writeln!(s, "as-run:  {l}");
        }
        if self.results.len() > 1 {
            let _ = writeln!(s, "\n{}", self.headline);
            for l in &self.why.lines {
                let _ = writeln!(s, "why:     {l}");
            }
        }
        s
    }
}

pub use ordo_report::fmt::{dur, thousands};

/// A right-aligned text table (first column left-aligned).
pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let mut s = String::new();
    let line = |cells: Vec<&str>, s: &mut String| {
        for (i, c) in cells.iter().enumerate() {
            if i == 0 {
                let _ = write!(s, "{c:<width$}", width = w[0]);
            } else {
                let _ = write!(s, "  {c:>width$}", width = w[i]);
            }
        }
        s.push('\n');
    };
    line(head.to_vec(), &mut s);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut s);
    }
    s
}

/// Writes one CSV row per job: schedule, preemptions and placement. `wait_s` is docs/METRICS.md's
/// wait (all the time the job did not run between submit and end); `first_wait_s` the wait
/// until its first start.
/// Rows are written as they are made (a long log's file can be larger than the run's memory).
pub fn write_jobs_csv(path: &Path, w: &Workload, cluster: &ClusterSpec, out: &SimOutput) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut s = std::io::BufWriter::new(std::fs::File::create(path)?);
    s.write_all(
        b"job_id,user,group,num_gpu,gpu_milli,submit_time,start_time,end_time,wait_s,first_wait_s,jct_s,preemptions,placement\n",
    )?;
    for r in &out.records {
        let j = &w.jobs[r.job.idx()];
        let ran: ordo_core::Time = r.segments.iter().map(|g| g.end - g.start).sum();
        writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&j.name),
            csv_field(&w.users[j.user as usize]),
            csv_field(&w.groups[j.group as usize]),
            j.gpus,
            r.gpu_milli.map(|m| m.to_string()).unwrap_or_default(),
            to_secs_f64(r.submit),
            to_secs_f64(r.start),
            to_secs_f64(r.end),
            to_secs_f64(r.end - r.submit - ran),
            to_secs_f64(r.start - r.submit),
            to_secs_f64(r.end - r.submit),
            r.preemptions,
            r.placement_label(cluster)
        )?;
    }
    s.flush()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `ordo bench` output.
#[derive(Debug, Serialize)]
pub struct Bench {
    /// What was simulated.
    pub input: InputInfo,
    /// One row per policy.
    pub rows: Vec<BenchRow>,
    /// Peak resident memory of the whole process (VmHWM), MiB; null where unavailable.
    pub peak_rss_mib: Option<f64>,
}

/// One policy's timing.
#[derive(Debug, Serialize)]
pub struct BenchRow {
    /// Policy.
    pub policy: String,
    /// Runs.
    pub runs: usize,
    /// Median wall time of one simulation, milliseconds.
    pub median_ms: f64,
    /// Fastest run, milliseconds.
    pub min_ms: f64,
    /// Median CPU time of one simulation (this thread's time on a CPU, from
    /// /proc/thread-self/schedstat), milliseconds: what the run costs whatever else the
    /// machine does; null where unavailable.
    pub cpu_ms: Option<f64>,
    /// Peak resident memory of the whole process while this policy ran (VmHWM, reset before
    /// the policy through /proc/self/clear_refs; where the reset is refused, the peak since
    /// the process started), MiB; null where unavailable.
    pub peak_rss_mib: Option<f64>,
    /// Events per second at the median.
    pub events_per_s: f64,
    /// Jobs simulated.
    pub jobs: usize,
    /// Mean JCT of the run (to tie the timing to a result).
    pub mean_jct_s: f64,
}

impl BenchRow {
    /// Summarises repeated timings of one policy: wall and CPU seconds per run, the last run's
    /// output and the peak memory while it ran.
    pub fn new(p: &PolicySpec, times: &[f64], cpu: &[Option<f64>], out: &SimOutput, peak_rss_mib: Option<f64>) -> Self {
        let median = |xs: &[f64]| {
            let mut t = xs.to_vec();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let cpu: Option<Vec<f64>> = cpu.iter().copied().collect();
        let median_wall = median(times);
        BenchRow {
            policy: p.to_string(),
            runs: times.len(),
            median_ms: median_wall * 1000.0,
            min_ms: times.iter().copied().fold(f64::INFINITY, f64::min) * 1000.0,
            cpu_ms: cpu.filter(|c| !c.is_empty()).map(|c| median(&c) * 1000.0),
            peak_rss_mib,
            events_per_s: out.metrics.events as f64 / median_wall,
            jobs: out.metrics.jobs,
            mean_jct_s: out.metrics.mean_jct_s,
        }
    }
}

impl Bench {
    /// The human table.
    pub fn render_table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.policy.clone(),
                    r.jobs.to_string(),
                    r.runs.to_string(),
                    format!("{:.1}", r.median_ms),
                    format!("{:.1}", r.min_ms),
                    r.cpu_ms.map_or("-".into(), |c| format!("{c:.1}")),
                    r.peak_rss_mib.map_or("-".into(), |m| format!("{m:.0}")),
                    format!("{:.2}M", r.events_per_s / 1e6),
                    format!("{:.0}", r.mean_jct_s),
                ]
            })
            .collect();
        let mut s = format!("input: {} ({})\n\n", self.input.source, count(self.input.jobs, "job"));
        s.push_str(&table(
            &["policy", "jobs", "runs", "median ms", "min ms", "cpu ms", "peak MiB", "events/s", "mean JCT s"],
            &rows,
        ));
        if let Some(m) = self.peak_rss_mib {
            let _ = writeln!(s, "\npeak memory (VmHWM, whole process): {m:.1} MiB");
        }
        s
    }
}

/// Resets this process's peak resident set size (VmHWM) to its current size, so that the next
/// [`peak_rss_mib`] reports the peak from now on (Linux; false where refused).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// CPU time this thread has used, seconds (/proc/thread-self/schedstat, Linux).
pub fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// Peak resident set size of this process, from /proc/self/status (Linux).
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
