//! `ordo before-after`: a history split at a change of policy; what really happened in each
//! period, and how much of the difference the order made (each period's jobs replayed under the
//! other's policy), with bootstrap intervals and the replay's fidelity (crates/ordo-report's
//! `periods`).

use crate::cli::{config, load_input, Input, InputArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ordo_core::{PolicySpec, Time, Workload};
use ordo_report::periods::{self, Change, PeriodInput, PeriodJob, DAY_MS};
use ordo_sim::SimOutput;
use std::collections::HashMap;
use std::path::PathBuf;

/// `ordo before-after` arguments.
#[derive(Args, Debug)]
pub struct BeforeAfterArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Where the history splits: `auto` (the last change of policy in an `ordo server`'s audit
    /// log), a date or time in UTC (`2026-11-20`, `2026-11-20T09:30:00Z`), or a time into the
    /// history (`14d`: 14 days after its first submission).
    #[arg(long, default_value = "auto")]
    at: String,
    /// At most this many days on each side of the split (default: from the change before to the
    /// change after, or the ends of the history).
    #[arg(long)]
    days: Option<f64>,
    /// The policy in force before the split (default: from the audit log; needed for a history
    /// without one, such as `ordo slurm import`'s).
    #[arg(long)]
    before_policy: Option<PolicySpec>,
    /// The policy in force after the split (default: from the audit log).
    #[arg(long)]
    after_policy: Option<PolicySpec>,
    /// `ordo slurm drive`'s audit log: its `policy` records are the changes of policy (who
    /// started drive with which policy, and why) of a Slurm history given as its raw `sacct` or
    /// jobcomp file (whose times are dates). The policy before the first is Slurm's own: name it
    /// with --before-policy (`ordo slurm policy` prints it).
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Bootstrap resamples for the intervals.
    #[arg(long, default_value_t = 2000)]
    resamples: usize,
    /// What the bootstrap draws: each period's days (the jobs submitted on a day together), or
    /// its jobs; `auto`: days when both periods have at least 7 days with submissions.
    #[arg(long, value_enum, default_value = "auto")]
    bootstrap: Unit,
    /// Where to write the page (`-`: standard output).
    #[arg(long)]
    out: PathBuf,
    /// html, md or json; default: from the --out extension, else html.
    #[arg(long, value_enum)]
    out_format: Option<crate::report_cmd::OutFormat>,
    /// Title at the top of the page.
    #[arg(long, default_value = "ordo: before and after the change of order")]
    title: String,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Auto,
    Days,
    Jobs,
}

/// A time of the history (ms, the workload's scale) as words: the date in UTC for a history in
/// wall-clock time, else the time since its first submission.
fn when(input: &Input, t: Time) -> String {
    match input.time_base {
        Some(base) => format!("{} UTC", ordo_trace::format_datetime(base + t)),
        None => format!("{} into the history", ordo_report::fmt::dur(t as f64 / 1000.0)),
    }
}

/// `--at` as a time of the history.
fn split_at<'a>(input: &'a Input, at: &str) -> Result<(Time, Option<&'a ordo_trace::PolicyChangeRecord>)> {
    if at == "auto" {
        return match input.changes.last() {
            Some(c) => Ok((c.time, Some(c))),
            None => bail!(
                "--at auto: the history records no change of policy (an `ordo server`'s audit log does, from `ordo policy set P --reason ...`, and `ordo slurm drive`'s, given with --audit-log); give --at DATE with --before-policy and --after-policy"
            ),
        };
    }
    let trimmed = at.trim().trim_end_matches('Z');
    if let Some(unix) = ordo_trace::parse_datetime(trimmed.as_bytes()) {
        let Some(base) = input.time_base else {
            bail!("--at {at}: this history's times are not dates; give a time into it (e.g. --at 14d)")
        };
        let t = unix - base;
        return Ok((t, input.changes.iter().find(|c| c.time == t)));
    }
    match crate::cli::parse_duration_arg(at) {
        Ok(t) => Ok((t, input.changes.iter().find(|c| c.time == t))),
        Err(_) => bail!(
            "--at `{at}`: expected `auto`, a date or time in UTC (2026-11-20, 2026-11-20T09:30:00Z) or a time into the history (14d)"
        ),
    }
}

/// The policy in force just before (`after == false`) or at `t`, by the audit log.
fn policy_in_force(input: &Input, t: Time, after: bool) -> Option<String> {
    let passed = |c: &&ordo_trace::PolicyChangeRecord| if after { c.time <= t } else { c.time < t };
    match input.changes.iter().rev().find(passed) {
        Some(c) => Some(c.to.clone()),
        None => match input.changes.first() {
            Some(c) => Some(c.from.clone()).filter(|f| !f.is_empty()),
            None => input.server_policy.as_ref().map(|p| p.to_string()),
        },
    }
}

fn policy(given: &Option<PolicySpec>, found: Option<String>, which: &str) -> Result<PolicySpec> {
    if let Some(p) = given {
        return Ok(p.clone());
    }
    let Some(name) = found else {
        bail!("--{which}-policy: the history does not record the policy in force {which} the split; name it")
    };
    name.parse::<PolicySpec>().map_err(|e| anyhow::anyhow!("the audit log's policy `{name}` ({which} the split): {e}"))
}

/// Jobs submitted in `[from, to)` as a workload of their own (dependencies on other jobs taken
/// as met), with each new job's index in `w`.
fn subset(w: &Workload, from: Time, to: Time) -> (Workload, Vec<usize>) {
    let mut keep: Vec<usize> = (0..w.jobs.len()).filter(|&i| (from..to).contains(&w.jobs[i].submit)).collect();
    keep.sort_by_key(|&i| (w.jobs[i].submit, w.jobs[i].id));
    let mut sub = Workload {
        jobs: keep.iter().map(|&i| w.jobs[i].clone()).collect(),
        users: w.users.clone(),
        groups: w.groups.clone(),
    };
    sub.renumber();
    (sub, keep)
}

/// Each job's (first start, end) in a run, by its index in the run's workload.
fn runs_of(out: &SimOutput) -> HashMap<usize, (Time, Time)> {
    out.records.iter().map(|r| (r.job.idx(), (r.start, r.end))).collect()
}

/// GPU-time held over `[from, to)` by the schedule as run, allocated and (where measured) busy,
/// as shares of the cluster's GPU-time.
fn held(input: &Input, as_run: &SimOutput, from: Time, to: Time) -> (f64, Option<(f64, f64)>) {
    let gpus = input.cluster.total_gpus() as f64;
    let len = (to - from).max(1) as f64;
    let (mut held, mut measured, mut busy) = (0.0, 0.0, 0.0);
    for r in &as_run.records {
        let width = match r.gpu_milli {
            Some(m) => m as f64 / 1000.0,
            None => r.gpus as f64,
        };
        let t: f64 = r.segments.iter().map(|s| (s.end.min(to) - s.start.max(from)).max(0) as f64).sum::<f64>() * width;
        held += t;
        if let Some(pct) = input.busy.as_ref().and_then(|b| b.get(r.job.idx()).copied().flatten()) {
            measured += t;
            busy += t * pct / 100.0;
        }
    }
    let allocated = held / (gpus * len);
    let b = (measured > 0.0).then(|| (allocated * busy / measured, measured / held));
    (allocated, b)
}

/// Runs `ordo before-after`.
pub fn run(a: BeforeAfterArgs) -> Result<()> {
    if a.resamples < 100 {
        bail!("--resamples: give at least 100 (the intervals are percentiles of the resamples)");
    }
    if a.days.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        bail!("--days: give a positive number of days");
    }
    let format = crate::report_cmd::out_format_of(a.out_format, &a.out);
    let mut input = load_input(&a.input)?;
    if let Some(log) = &a.audit_log {
        let Some(base) = input.time_base else {
            bail!(
                "--audit-log: this history's times are not dates, so the log's cannot be placed in it; give the raw `sacct --parsable2` or jobcomp file as --trace"
            )
        };
        let records = ordo_slurm::audit::read_audit_log(log)?;
        input.changes = records
            .into_iter()
            .filter(|r| r.action == "policy")
            .map(|r| ordo_trace::PolicyChangeRecord {
                time: r.unix_time * 1000 - base,
                unix_ms: r.unix_time * 1000,
                actor: r.actor.unwrap_or_default(),
                from: r.from_policy.unwrap_or_default(),
                to: r.policy,
                reason: r.reason,
            })
            .collect();
        input.changes.sort_by_key(|c| c.time);
    }
    let Some((as_run, _)) = &input.as_run else {
        bail!(
            "a before/after page needs the schedule as it really ran: an `ordo server` database, or a trace whose jobs carry their start times (`ordo slurm import`); see the note above for why this input has none"
        );
    };
    let (t, change) = split_at(&input, &a.at)?;
    let before_policy = policy(&a.before_policy, policy_in_force(&input, t, false), "before")?;
    let after_policy = policy(&a.after_policy, policy_in_force(&input, t, true), "after")?;
    let w = &input.workload;
    let first = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    // The history ends with its last submission or its last completion, whichever is later.
    let last_end = as_run.records.iter().map(|r| r.end).max().unwrap_or(0);
    let last = (w.jobs.iter().map(|j| j.submit).max().unwrap_or(0) + 1).max(last_end);
    if t <= first || t >= last {
        bail!(
            "--at: the split ({}) leaves no job on one side (the history's submissions run from {} to {})",
            when(&input, t),
            when(&input, first),
            when(&input, last - 1)
        );
    }
    let span = a.days.map(|d| (d * DAY_MS as f64) as Time);
    let prev = input.changes.iter().rev().find(|c| c.time < t).map_or(first, |c| c.time.max(first));
    let next = input.changes.iter().find(|c| c.time > t).map_or(last, |c| c.time.min(last));
    let bounds = [
        (span.map_or(prev, |s| prev.max(t - s)), t, before_policy.clone(), after_policy.clone(), "before"),
        (t, span.map_or(next, |s| next.min(t + s)), after_policy.clone(), before_policy.clone(), "after"),
    ];
    let actual = runs_of(as_run);
    // Each period's jobs: (index in the history, run under its own policy, under the other's).
    type Replayed = Vec<(usize, Option<(Time, Time)>, Option<(Time, Time)>)>;
    let mut per: [Replayed; 2] = [Vec::new(), Vec::new()];
    // Non-preemptive policies: both periods replayed together, the policy changed at the split
    // as the server changed it (`ordo_sim::simulate_with_changes`), so that jobs still waiting
    // or running at the change are carried over it; and the same with the two policies swapped.
    // Otherwise each period alone, from an empty cluster, under each policy.
    let carried = !before_policy.order.preemptive() && !after_policy.order.preemptive();
    let spinner = crate::progress::spinner("replaying the history under both policies");
    if carried {
        let (sub, orig) = subset(w, bounds[0].0, bounds[1].1);
        let runs: [(&PolicySpec, &PolicySpec, &str); 2] =
            [(&before_policy, &after_policy, "as it changed"), (&after_policy, &before_policy, "swapped")];
        let outs: Vec<SimOutput> = {
            use rayon::prelude::*;
            runs.par_iter()
                .map(|(a, b, what)| {
                    let o = ordo_sim::simulate_with_changes(&sub, &config(&input, a), &[(t, (*b).clone())])
                        .with_context(|| format!("replaying the history with the policies {what} ({a}, then {b})"));
                    spinner.inc(1);
                    o
                })
                .collect::<Result<Vec<_>>>()?
        };
        let (own, other) = (runs_of(&outs[0]), runs_of(&outs[1]));
        for (i, j) in sub.jobs.iter().enumerate() {
            let k = usize::from(j.submit >= t);
            per[k].push((orig[i], own.get(&i).copied(), other.get(&i).copied()));
        }
    } else {
        let subsets: Vec<(Workload, Vec<usize>)> = bounds.iter().map(|b| subset(w, b.0, b.1)).collect();
        // Four replays: each period under its own policy and under the other's, in parallel.
        let work: Vec<(usize, PolicySpec)> =
            (0..2).flat_map(|k| [(k, bounds[k].2.clone()), (k, bounds[k].3.clone())]).collect();
        let outs: Vec<SimOutput> = {
            use rayon::prelude::*;
            work.par_iter()
                .map(|(k, p)| {
                    let o = ordo_sim::simulate(&subsets[*k].0, &config(&input, p))
                        .with_context(|| format!("replaying the {} period under {p}", bounds[*k].4));
                    spinner.inc(1);
                    o
                })
                .collect::<Result<Vec<_>>>()?
        };
        for (k, (_, orig)) in subsets.iter().enumerate() {
            let (own, other) = (runs_of(&outs[2 * k]), runs_of(&outs[2 * k + 1]));
            for (i, &o) in orig.iter().enumerate() {
                per[k].push((o, own.get(&i).copied(), other.get(&i).copied()));
            }
        }
    }
    spinner.finish_and_clear();
    let mut inputs = Vec::new();
    for (k, list) in per.iter().enumerate() {
        let mut jobs = Vec::new();
        let mut left_out = 0;
        for &(orig, own, other) in list {
            let j = &w.jobs[orig];
            match (actual.get(&orig), own, other) {
                (Some(&act), Some(o), Some(x)) => jobs.push(PeriodJob {
                    submit: j.submit,
                    gpus: j.gpus,
                    runtime: j.runtime,
                    user: w.users.get(j.user as usize).cloned().unwrap_or_default(),
                    actual: act,
                    own: o,
                    other: x,
                }),
                _ => left_out += 1,
            }
        }
        let (from, to, p, _, label) = &bounds[k];
        let (allocated, busy) = held(&input, as_run, *from, *to);
        inputs.push(PeriodInput {
            label: label.to_string(),
            from: *from,
            to: *to,
            from_text: when(&input, *from),
            to_text: when(&input, *to),
            policy: p.to_string(),
            jobs,
            left_out,
            allocated,
            busy,
        });
    }
    let opts = periods::Options {
        title: a.title.clone(),
        source: format!("{} ({})", input.source.source, input.source.format),
        cluster: input.cluster.summary(),
        gpus: input.cluster.total_gpus(),
        change: change.map(|c| Change {
            at: when(&input, c.time),
            actor: c.actor.clone(),
            from: c.from.clone(),
            to: c.to.clone(),
            reason: c.reason.clone(),
        }),
        resamples: a.resamples,
        seed: a.input.seed,
        carried,
        draw_days: match a.bootstrap {
            Unit::Auto => None,
            Unit::Days => Some(true),
            Unit::Jobs => Some(false),
        },
        generated_at: crate::report_cmd::generated_at()?,
        ordo_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    if a.bootstrap == Unit::Days {
        for p in &inputs {
            let mut d: Vec<i64> = p.jobs.iter().map(|j| (j.submit - p.from).div_euclid(DAY_MS)).collect();
            d.sort_unstable();
            d.dedup();
            if d.len() < 2 {
                bail!(
                    "--bootstrap days: the {} period has submissions on {} day; give --bootstrap jobs",
                    p.label,
                    d.len()
                );
            }
        }
    }
    let page = periods::build(inputs, &opts)?;
    let text = match format {
        crate::report_cmd::OutFormat::Json => serde_json::to_string_pretty(&page)? + "\n",
        crate::report_cmd::OutFormat::Md => page.page().markdown(),
        crate::report_cmd::OutFormat::Html => page.page().html().map_err(anyhow::Error::msg)?,
    };
    crate::report_cmd::write_out(&a.out, &text)?;
    if a.out.as_os_str() != "-" && !crate::progress::quiet_flag() {
        eprintln!("wrote {}: {}", a.out.display(), page.headline);
    }
    Ok(())
}
