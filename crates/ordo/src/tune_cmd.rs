//! `ordo tune`: searches the policy space on a workload (crate ordo-tune) with a progress bar,
//! then prints the Pareto front and the recommendation as snippets `ordo server` and `ordo slurm drive` accept.

use crate::cli::{load_input, InputArgs};
use crate::output::{dur, table};
use anyhow::{bail, Context, Result};
use clap::Args;
use ordo_core::PolicySpec;
use ordo_sim::SimConfig;
use ordo_tune::select::FairnessBy;
use ordo_tune::{summarize, Constraints, Evaluated, Limit, Objective, Space, Summary, TuneOptions};
use serde::Serialize;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// `ordo tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The workload and cluster (as in `compare`); `--seed` also seeds the tuner's random sampling.
    #[command(flatten)]
    input: InputArgs,
    /// Wall-time budget: no new configuration starts after it (e.g. 60s, 5m).
    #[arg(long, default_value = "60s", value_parser = parse_budget)]
    budget: Duration,
    /// Most configurations to simulate, the FIFO baseline included.
    #[arg(long)]
    max_configs: Option<usize>,
    /// What the recommendation optimises among feasible configurations: mean-jct, p99-wait or
    /// utilisation.
    #[arg(long, default_value = "mean-jct")]
    objective: Objective,
    /// Upper bound on the 99th percentile wait: a factor of FIFO's (`1.0x`) or a duration (`2h`).
    #[arg(long, value_parser = |s: &str| Limit::parse_duration(s))]
    max_p99_wait: Option<Limit>,
    /// Upper bound on the mean job completion time: a factor of FIFO's (`0.5x`) or a duration.
    #[arg(long, value_parser = |s: &str| Limit::parse_duration(s))]
    max_mean_jct: Option<Limit>,
    /// Lower bound (0..1) on Jain's fairness index of mean bounded slowdown across users
    /// (`fairness_users`; with `--fairness-by groups`, across groups).
    #[arg(long, value_parser = parse_fairness)]
    min_fairness: Option<f64>,
    /// Whose fairness `--min-fairness` reads: users or groups.
    #[arg(long, default_value = "users", value_parser = parse_fairness_by)]
    fairness_by: FairnessBy,
    /// Lower bound on utilisation: a factor of FIFO's (`1.0x`), a fraction (`0.9`) or `90%`.
    #[arg(long, alias = "min-utilization", value_parser = |s: &str| Limit::parse_fraction(s))]
    min_utilisation: Option<Limit>,
    /// Run every configuration to the end. By default (objective mean-jct) a run is stopped as
    /// soon as its mean JCT is certain to be worse than the best one of its kind found so far:
    /// the same recommendation, many more configurations per minute, but the front then lists
    /// only configurations run to the end.
    #[arg(long)]
    no_race: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

fn parse_budget(s: &str) -> Result<Duration, String> {
    match ordo_core::policy::parse_duration(s) {
        Some(ms) if ms > 0 => Ok(Duration::from_millis(ms as u64)),
        _ => Err(format!("`{s}`: expected a positive duration such as 60s, 5m")),
    }
}

fn parse_fairness(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("`{s}`: expected a fairness index between 0 and 1, e.g. 0.8"))
}

fn parse_fairness_by(s: &str) -> Result<FairnessBy, String> {
    match s.trim() {
        "users" | "user" => Ok(FairnessBy::Users),
        "groups" | "group" => Ok(FairnessBy::Groups),
        _ => Err(format!("`{s}`: expected users or groups")),
    }
}

/// How to deploy the recommendation on one target, as text the target accepts unchanged.
#[derive(Debug, Serialize)]
pub struct Deploy {
    /// `ordo server` or `ordo slurm drive`.
    pub target: &'static str,
    /// The policy deployed: the recommendation, or where the target refuses it the best
    /// feasible non-preemptive policy.
    pub policy: String,
    /// The snippet: a line of the server's TOML config, or the `ordo slurm drive` command.
    pub snippet: String,
    /// Why the recommendation itself is not deployed there, when it is not.
    pub note: Option<String>,
}

type Check = fn(&PolicySpec) -> Result<(), String>;

fn server_check(p: &PolicySpec) -> Result<(), String> {
    ordo_server::config::check_policy(p)
}

fn slurm_check(p: &PolicySpec) -> Result<(), String> {
    ordo_slurm::drive::check_policy(p).map_err(|e| e.to_string())
}

/// The snippet for one target: the recommendation if the target's own check accepts it, else
/// the best feasible non-preemptive policy if that passes.
fn deploy(target: &'static str, check: Check, s: &Summary) -> Result<Option<Deploy>> {
    let snippet = |policy: &str| match target {
        "ordo server" => format!("policy = {}", serde_json::to_string(policy).unwrap_or_default()),
        _ => format!("ordo slurm drive --policy '{policy}'"),
    };
    let Some(rec) = &s.recommended else { return Ok(None) };
    let spec: PolicySpec = rec.policy.parse().with_context(|| format!("recommended policy `{}`", rec.policy))?;
    let refused = match check(&spec) {
        Ok(()) => {
            return Ok(Some(Deploy { target, policy: rec.policy.clone(), snippet: snippet(&rec.policy), note: None }))
        }
        Err(why) => why,
    };
    let Some(alt) = &s.non_preemptive else {
        return Ok(None);
    };
    let alt_spec: PolicySpec = alt.policy.parse().with_context(|| format!("policy `{}`", alt.policy))?;
    if check(&alt_spec).is_err() {
        return Ok(None);
    }
    Ok(Some(Deploy {
        target,
        policy: alt.policy.clone(),
        snippet: snippet(&alt.policy),
        note: Some(format!(
            "{target} refuses `{}` ({refused}); `{}` is the best feasible non-preemptive policy",
            rec.policy, alt.policy
        )),
    }))
}

/// `ordo tune --json`.
#[derive(Debug, Serialize)]
struct TuneReport {
    input: crate::output::InputInfo,
    cluster: String,
    /// The offered load and, above 100% or below 30%, a warning.
    load: ordo_report::Load,
    /// `utilisation over the arrival window`, or `... over the makespan` when every job was
    /// submitted at once: what `utilisation` means in every row.
    utilisation_measure: String,
    #[serde(flatten)]
    summary: Summary,
    /// Config snippets, one per target that accepts a feasible policy.
    deploy: Vec<Deploy>,
    /// The schedule an `ordo server` really ran (its database as input): its metrics and words.
    #[serde(skip_serializing_if = "Option::is_none")]
    as_run: Option<(ordo_sim::Metrics, ordo_report::AsRun)>,
    /// On a cluster with a network topology: the topology dimension of the search.
    #[serde(skip_serializing_if = "Option::is_none")]
    topology: Option<TopologySearch>,
}

/// The topology dimension of a search (a cluster with a network topology; docs/TUNE.md).
#[derive(Debug, Serialize)]
struct TopologySearch {
    /// The topology's levels, lowest first.
    levels: Vec<String>,
    /// The rules searched ([`ordo_tune::TopoRule::name`]), the input's own placement first.
    rules: Vec<String>,
    /// Rules not searched, and why.
    left_out: Vec<String>,
    /// Per rule, the best feasible configuration run to the end under it by the objective
    /// (never an oracle).
    best_by_rule: Vec<RuleBest>,
    /// The flags that run the recommendation's rule (`ordo simulate`, `compare`, `report`).
    recommended_flags: Option<String>,
}

/// The best configuration under one topology rule.
#[derive(Debug, Serialize)]
struct RuleBest {
    rule: String,
    /// The flags that run it.
    flags: String,
    best: Option<Evaluated>,
}

/// The topology dimension's summary, from the search's results.
fn topology_search(
    t: &ordo_core::Topology,
    space: &Space,
    left_out: Vec<String>,
    s: &Summary,
    constraints: &Constraints,
) -> TopologySearch {
    let best_by_rule = space
        .rules
        .iter()
        .map(|r| {
            let name = r.name();
            let best = s
                .all
                .iter()
                .filter(|e| e.placement.as_deref() == Some(name.as_str()) && !e.clairvoyant())
                .filter(|e| constraints.violations(e, &s.baseline).is_empty())
                .min_by(|a, b| s.objective.compare(a, b))
                .cloned();
            RuleBest { rule: name, flags: r.flags(), best }
        })
        .collect();
    let flags = |e: &Evaluated| {
        space.rules.iter().find(|r| e.placement.as_deref() == Some(r.name().as_str())).map(|r| r.flags())
    };
    TopologySearch {
        levels: t.levels().to_vec(),
        rules: space.rules.iter().map(|r| r.name()).collect(),
        left_out,
        best_by_rule,
        recommended_flags: s.recommended.as_ref().and_then(flags),
    }
}

pub fn run(a: TuneArgs) -> Result<ExitCode> {
    if a.max_configs == Some(0) {
        bail!("--max-configs: give at least 1");
    }
    let input = load_input(&a.input)?;
    let constraints = Constraints {
        max_p99_wait: a.max_p99_wait,
        max_mean_jct: a.max_mean_jct,
        min_fairness: a.min_fairness,
        fairness_by: a.fairness_by,
        min_utilisation: a.min_utilisation,
    };
    let opts = TuneOptions {
        budget: a.budget,
        max_configs: a.max_configs.unwrap_or(usize::MAX),
        seed: a.input.seed,
        constraints: constraints.clone(),
        objective: a.objective,
        round: 0,
        race: !a.no_race,
    };
    let mut space = Space::standard();
    let mut base = SimConfig::new(input.cluster.clone(), input.placement, PolicySpec::plain(ordo_core::Order::Fifo));
    base.preemption_overhead = input.preemption_overhead;
    base.preemption = input.preemption.clone();
    base.quotas = input.quotas.clone();
    // A cluster with a network topology: placement (and gangs' asks) become a dimension.
    let mut left_out = Vec::new();
    if let Some(t) = &input.topology {
        base.topology = Some(t.clone());
        let default = if input.placement == ordo_core::Placement::Pooled { "pooled" } else { "consolidated" };
        let given = input.placements.first().map(|p| p.name());
        let (rules, out) = ordo_tune::topology_rules(
            t,
            &input.cluster,
            &input.workload,
            given,
            default,
            a.input.gang_topology.is_some(),
        );
        space.rules = rules;
        left_out = out;
    }
    let bar = crate::progress::bar(space.size().min(opts.max_configs) as u64, "tuning");
    let result = ordo_tune::tune(&input.workload, &base, &space, &opts, &|_| bar.inc(1))?;
    bar.finish_and_clear();
    let summary = summarize(&result, &constraints, a.objective);
    let topology = input.topology.as_ref().map(|t| topology_search(t, &space, left_out, &summary, &constraints));
    let mut deploy_list = Vec::new();
    for (target, check) in [("ordo server", server_check as Check), ("ordo slurm drive", slurm_check)] {
        deploy_list.extend(deploy(target, check, &summary)?);
    }
    let cluster = describe_cluster(&input);
    let w = &input.workload;
    let gpus = input.cluster.total_gpus();
    let work_h = w.jobs.iter().map(|j| j.gpu_time() as f64).sum::<f64>() / 3_600_000.0;
    let offered = ordo_sim::workload::offered_load(w, gpus).map(|l| l.total);
    let spread = w.jobs.iter().map(|j| j.submit).max() > w.jobs.iter().map(|j| j.submit).min();
    let report = TuneReport {
        cluster,
        load: ordo_report::headline::load_of(offered, work_h, gpus),
        utilisation_measure: if spread {
            "utilisation over the arrival window"
        } else {
            "utilisation over the makespan"
        }
        .into(),
        as_run: input.as_run.map(|(o, words)| (o.metrics, words)),
        input: input.source,
        summary,
        deploy: deploy_list,
        topology,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_cluster(input: &crate::cli::Input) -> String {
    format!(
        "{} ({}), {} placement; {}",
        input.cluster.summary(),
        crate::output::count(input.cluster.total_gpus() as usize, "GPU"),
        input.placement,
        input.source.cluster_from
    )
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The change from the baseline's `old` to `new` as the headline words it (no `-100%` from a
/// baseline that shows as 0s).
fn change(new: f64, old: f64) -> String {
    ordo_report::headline::change(old, new, dur)
}

fn render(r: &TuneReport) -> String {
    let s0 = &r.summary;
    let b = &s0.baseline;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "input:       {} ({}): {}",
        r.input.source,
        r.input.format,
        crate::output::count(r.input.jobs, "job")
    );
    if let Some(e) = &r.input.estimates {
        let _ = writeln!(s, "estimates:   {e}");
    }
    let _ = writeln!(s, "cluster:     {}", r.cluster);
    let _ = writeln!(s, "load:        {}", r.load.text);
    if let Some(w) = &r.load.warning {
        let _ = writeln!(s, "warning:     {w}");
    }
    let stopped = match s0.stopped {
        ordo_tune::StopReason::Budget => "the budget ended",
        ordo_tune::StopReason::MaxConfigs => "--max-configs reached",
        ordo_tune::StopReason::Exhausted => "the whole space was simulated",
    };
    let tried = s0.evaluated + s0.stopped_early;
    let _ = writeln!(
        s,
        "search:      {} configurations tried in {:.1} s ({:.0} per minute) of a space of {}; stopped: {}",
        tried, s0.elapsed_s, s0.configs_per_minute, s0.space_size, stopped
    );
    if s0.stopped_early > 0 {
        let _ = writeln!(
            s,
            "racing:      {} run to the end; {} stopped early, when their mean JCT could no longer beat the best of their kind (--no-race runs all to the end)",
            s0.evaluated, s0.stopped_early
        );
    }
    for (policy, why) in &s0.abandoned {
        let _ = writeln!(s, "abandoned:   {policy}: {why}");
    }
    let cons = if s0.constraints.is_empty() { "none".to_string() } else { s0.constraints.join("; ") };
    let _ = writeln!(s, "constraints: {cons}; {} of {} feasible", s0.feasible, s0.evaluated);
    let _ = writeln!(s, "objective:   {}", s0.objective);
    let _ = writeln!(s, "util:        {} (the util column and every line below)", r.utilisation_measure);
    if let Some(t) = &r.topology {
        let _ = writeln!(
            s,
            "topology:    levels {}; placement rules searched: {}",
            t.levels.join(", "),
            t.rules.join(", ")
        );
        for l in &t.left_out {
            let _ = writeln!(s, "left out:    {l}");
        }
    }
    let _ = writeln!(
        s,
        "baseline:    {}: utilisation {}, mean JCT {}, p99 wait {}",
        b.label(),
        pct(b.utilisation),
        dur(b.mean_jct_s),
        dur(b.p99_wait_s)
    );
    if let Some((m, words)) = &r.as_run {
        let _ = writeln!(
            s,
            "as run:      utilisation {}, mean JCT {}, p99 wait {}: {}",
            pct(m.headline_utilisation()),
            dur(m.mean_jct_s),
            dur(m.p99_wait_s),
            words.lines.join(" ")
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Pareto front among feasible configurations (utilisation max, mean JCT min, p99 wait min):");
    let mut head =
        vec!["policy", "estimates", "util", "mean JCT", "vs FIFO", "p99 wait", "vs FIFO", "fair(users)", "same values"];
    let spread = r.topology.is_some();
    if spread {
        head.push("spread GPU-h");
    }
    let rows: Vec<Vec<String>> = s0
        .front
        .iter()
        .map(|row| {
            let e = &row.policy;
            let mut cells = vec![
                e.label(),
                e.estimates.clone(),
                pct(e.utilisation),
                dur(e.mean_jct_s),
                change(e.mean_jct_s, b.mean_jct_s),
                dur(e.p99_wait_s),
                change(e.p99_wait_s, b.p99_wait_s),
                format!("{:.2}", e.fairness_users),
                row.same_values.to_string(),
            ];
            if spread {
                cells.push(e.spread_lost_gpu_hours.map_or("-".into(), ordo_report::fmt::gpu_hours));
            }
            cells
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(s, "(no feasible configuration)");
    } else {
        s.push_str(&table(&head, &rows));
    }
    let _ = writeln!(s);
    let line = |e: &Evaluated| {
        format!(
            "{}: utilisation {} ({:+.1} pp), mean JCT {} ({}), p99 wait {} ({})",
            e.label(),
            pct(e.utilisation),
            100.0 * (e.utilisation - b.utilisation),
            dur(e.mean_jct_s),
            change(e.mean_jct_s, b.mean_jct_s),
            dur(e.p99_wait_s),
            change(e.p99_wait_s, b.p99_wait_s)
        )
    };
    match &s0.recommended {
        Some(e) => {
            let _ = writeln!(s, "recommended ({}): {}", s0.objective, line(e));
        }
        None => {
            let _ = writeln!(s, "recommended: none: no configuration meets the constraints; relax them");
        }
    }
    if let Some(o) = &s0.bound {
        let _ = writeln!(
            s,
            "bound, not deployable: {} (oracle: it read every job's true run time, which the workload does not give)",
            line(o)
        );
    }
    if let Some(t) = &r.topology {
        if let Some(f) = &t.recommended_flags {
            let _ = writeln!(s, "placement:   run the recommendation with {f} (ordo simulate, compare, report)");
        }
        let _ = writeln!(s, "\nbest under each placement rule (feasible, run to the end, by {}):", s0.objective);
        let head = ["placement rule", "best policy", "util", "mean JCT", "p99 wait", "spread GPU-h", "flags"];
        let rows: Vec<Vec<String>> = t
            .best_by_rule
            .iter()
            .map(|rb| match &rb.best {
                Some(e) => vec![
                    rb.rule.clone(),
                    e.policy.clone(),
                    pct(e.utilisation),
                    dur(e.mean_jct_s),
                    dur(e.p99_wait_s),
                    e.spread_lost_gpu_hours.map_or("-".into(), ordo_report::fmt::gpu_hours),
                    rb.flags.clone(),
                ],
                None => vec![
                    rb.rule.clone(),
                    "(none)".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    rb.flags.clone(),
                ],
            })
            .collect();
        s.push_str(&table(&head, &rows));
    }
    for d in &r.deploy {
        let _ = writeln!(s);
        match &d.note {
            Some(note) => {
                let _ = writeln!(s, "{}: {note}", d.target);
                if let Some(e) = &s0.non_preemptive {
                    let _ = writeln!(s, "    {}", line(e));
                }
            }
            None => {
                let what = if d.target == "ordo server" { " (a line of its TOML --config FILE)" } else { "" };
                let _ = writeln!(s, "{}{what}:", d.target);
            }
        }
        let _ = writeln!(s, "    {}", d.snippet);
    }
    if s0.front.iter().any(|r| r.policy.clairvoyant()) {
        let _ = writeln!(
            s,
            "\noracle: the workload has no run-time estimates, so policies marked oracle read each job's true run time: a bound, never the recommendation."
        );
    }
    s
}
