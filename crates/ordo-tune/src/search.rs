//! The search loop: FIFO baseline, then the starting grid, then rounds of local refinement and
//! seeded random sampling, each round simulated in parallel (rayon) until a budget ends.
//! Racing: a run whose mean JCT can no longer beat the best found is stopped where it is.

use crate::select::{Constraints, Objective};
use crate::space::{Candidate, Space};
use crate::TuneError;
use ordo_core::{PolicySpec, Workload};
use ordo_sim::{simulate, SimConfig};
use rand::SeedableRng;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

/// One simulated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluated {
    /// The policy, as `PolicySpec` prints it (parses back to the same policy).
    pub policy: String,
    /// Whether it preempts running jobs.
    pub preemptive: bool,
    /// What it knew about run times (`none`, `oracle`, `user`, `learned`; see docs/METRICS.md).
    pub estimates: String,
    /// `utilization_window` of the run, or `utilization_makespan` when every job was submitted
    /// at the same instant (the same rule as `ordo compare`'s headline).
    pub utilisation: f64,
    /// Mean job completion time, seconds.
    pub mean_jct_s: f64,
    /// 99th percentile wait, seconds.
    pub p99_wait_s: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Jain's fairness index of per-user mean bounded slowdown.
    pub fairness_users: f64,
    /// Jain's fairness index of per-group mean bounded slowdown.
    pub fairness_groups: f64,
    /// Wall time of the simulation, seconds (the only field that varies between equal runs).
    pub sim_s: f64,
    /// On a cluster with a network topology: the topology rule it ran under
    /// ([`crate::TopoRule::name`]: `consolidated`, `topology`, `topology (required:switch)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// On a cluster with a network topology: the GPU-hours lost to spread placement
    /// (`spread.lost_gpu_hours` in docs/METRICS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread_lost_gpu_hours: Option<f64>,
}

impl Evaluated {
    /// The policy and, on a cluster with a topology, its rule: `sjf+easy @topology`.
    pub fn label(&self) -> String {
        label(&self.policy, self.placement.as_deref())
    }
}

fn label(policy: &str, placement: Option<&str>) -> String {
    match placement {
        Some(p) => format!("{policy} @{p}"),
        None => policy.to_string(),
    }
}

/// A configuration stopped before the end of its run because its mean JCT was certain to be
/// worse than the best one of its kind found in earlier rounds (racing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// The policy, as `PolicySpec` prints it.
    pub policy: String,
    /// The lower bound on its mean JCT (seconds) when it was stopped.
    pub lower_bound_s: f64,
    /// The best mean JCT (seconds) it could no longer beat.
    pub limit_s: f64,
    /// How far it got: simulated time reached, as a fraction of the span of arrivals.
    pub reached: f64,
    /// Wall time of the simulation until it was stopped, seconds.
    pub sim_s: f64,
    /// The topology rule it ran under, on a cluster with a network topology.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The time budget ended (no candidate starts after it).
    Budget,
    /// `max_configs` configurations were simulated.
    MaxConfigs,
    /// Every candidate of the space was simulated.
    Exhausted,
}

/// How to search.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// Wall-time budget: no candidate starts after it (running ones finish).
    pub budget: Duration,
    /// Most configurations to simulate, the baseline included.
    pub max_configs: usize,
    /// Seed of the random sampling; with the same seed, workload and a budget that does not run
    /// out, the result is the same.
    pub seed: u64,
    /// Constraints (refinement steps around the best feasible configurations).
    pub constraints: Constraints,
    /// Objective (refinement steps around the best by it).
    pub objective: Objective,
    /// Candidates per parallel round (0: eight per rayon thread, at least 16). Results depend
    /// on it, so fix it when comparing runs across machines.
    pub round: usize,
    /// Racing (objective `mean-jct` only): stop a run as soon as its mean JCT is certain to be
    /// worse than the best feasible one of its kind from earlier rounds. It changes neither the
    /// recommendation nor the non-preemptive pick nor the oracle bound, only which
    /// configurations are run to the end (and so shown in the front).
    pub race: bool,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            budget: Duration::from_secs(60),
            max_configs: usize::MAX,
            seed: 1,
            constraints: Constraints::default(),
            objective: Objective::MeanJct,
            round: 0,
            race: true,
        }
    }
}

/// The raw outcome of a search.
#[derive(Debug, Clone)]
pub struct TuneResult {
    /// Every configuration simulated, in the order they were started (the baseline first).
    pub evaluated: Vec<Evaluated>,
    /// The strict FIFO baseline.
    pub baseline: Evaluated,
    /// Why the search stopped.
    pub stopped: StopReason,
    /// Wall time of the whole search.
    pub elapsed: Duration,
    /// Candidates in the space.
    pub space_size: usize,
    /// Configurations abandoned because they thrash (the simulator's runaway guard), with why.
    pub abandoned: Vec<(String, String)>,
    /// Configurations stopped early by racing, in the order they were started.
    pub dropped: Vec<Dropped>,
}

/// What one simulation gave.
enum Outcome {
    Done(Evaluated),
    Dropped(Dropped),
}

/// What a run under one topology rule simulates: the workload (with the rule's gang ask) and
/// the configuration (with its placement); the input's own without topology rules.
struct Variant<'a> {
    w: std::borrow::Cow<'a, Workload>,
    base: SimConfig,
    /// The rule's name; `None` without topology rules.
    name: Option<String>,
}

/// One [`Variant`] per topology rule of `space` (one, the input as given, without any).
fn variants<'a>(w: &'a Workload, base: &SimConfig, space: &Space) -> Vec<Variant<'a>> {
    if space.rules.is_empty() {
        return vec![Variant { w: std::borrow::Cow::Borrowed(w), base: base.clone(), name: None }];
    }
    space
        .rules
        .iter()
        .map(|r| {
            let mut cfg = base.clone();
            cfg.placement =
                if r.placement == "pooled" { ordo_core::Placement::Pooled } else { ordo_core::Placement::Consolidated };
            cfg.place_by_topology = r.placement == "topology";
            let w = match &r.gang_ask {
                None => std::borrow::Cow::Borrowed(w),
                Some(ask) => {
                    let mut asked = w.clone();
                    ordo_sim::transform::ask_gangs(&mut asked, base.cluster.max_node_gpus(), ask);
                    std::borrow::Cow::Owned(asked)
                }
            };
            Variant { w, base: cfg, name: Some(r.name()) }
        })
        .collect()
}

fn evaluate(
    v: &Variant,
    spec: &PolicySpec,
    deadline: Option<Instant>,
    limit_s: Option<f64>,
) -> Result<Outcome, TuneError> {
    let (w, base) = (&*v.w, &v.base);
    let mut cfg = base.clone();
    cfg.policy = spec.clone();
    cfg.deadline = deadline;
    cfg.give_up_above_mean_jct_s = limit_s;
    let t0 = Instant::now();
    let out = match simulate(w, &cfg) {
        Ok(out) => out,
        Err(ordo_sim::SimError::Beaten { time, lower_bound_s }) => {
            let first = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
            let last = w.jobs.iter().map(|j| j.submit).max().unwrap_or(0);
            let reached = if last > first { (time - first) as f64 / (last - first) as f64 } else { 1.0 };
            return Ok(Outcome::Dropped(Dropped {
                policy: spec.to_string(),
                lower_bound_s,
                limit_s: limit_s.unwrap_or(f64::INFINITY),
                reached,
                sim_s: t0.elapsed().as_secs_f64(),
                placement: v.name.clone(),
            }));
        }
        Err(source) => return Err(TuneError::Sim { policy: label(&spec.to_string(), v.name.as_deref()), source }),
    };
    let m = out.metrics;
    Ok(Outcome::Done(Evaluated {
        policy: spec.to_string(),
        preemptive: spec.order.preemptive(),
        utilisation: m.headline_utilisation(),
        estimates: m.estimates,
        mean_jct_s: m.mean_jct_s,
        p99_wait_s: m.p99_wait_s,
        mean_wait_s: m.mean_wait_s,
        fairness_users: m.fairness_users,
        fairness_groups: m.fairness_groups,
        sim_s: t0.elapsed().as_secs_f64(),
        placement: v.name.clone(),
        spread_lost_gpu_hours: v.name.as_ref().and(m.spread.as_ref()).map(|s| s.lost_gpu_hours),
    }))
}

/// The mean JCTs (seconds) a run must beat to matter, from the configurations run to the end
/// so far: the picks `ordo tune` names ([`crate::select::picks`]), by mean JCT.
struct RaceLimits {
    recommended: Option<f64>,
    non_preemptive: Option<f64>,
    best_oracle: Option<f64>,
}

impl RaceLimits {
    /// `None` when racing is off (or the objective is not mean JCT).
    fn of(evaluated: &[Evaluated], baseline: &Evaluated, opts: &TuneOptions) -> Option<RaceLimits> {
        if !opts.race || opts.objective != Objective::MeanJct {
            return None;
        }
        let feasible: Vec<&Evaluated> =
            evaluated.iter().filter(|e| opts.constraints.violations(e, baseline).is_empty()).collect();
        let p = crate::select::picks(&feasible, opts.objective);
        let jct = |e: Option<&Evaluated>| e.map(|e| e.mean_jct_s);
        Some(RaceLimits {
            recommended: jct(p.recommended),
            non_preemptive: jct(p.non_preemptive),
            best_oracle: jct(p.best_oracle),
        })
    }

    /// The limit of a run of `spec`: a preemptive one must beat the recommendation; a
    /// non-preemptive one the non-preemptive pick (it may become it); an oracle the lower of the
    /// recommendation and the best oracle (it is shown only when it beats the recommendation,
    /// and only the best one). `None`: run it to the end.
    fn limit(&self, spec: &PolicySpec, no_estimates: bool) -> Option<f64> {
        if spec.needs_estimate() && no_estimates {
            match (self.recommended, self.best_oracle) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        } else if spec.order.preemptive() {
            self.recommended
        } else {
            self.non_preemptive
        }
    }
}

/// Candidates chosen but not yet simulated, with the names already used.
struct Picker<'a> {
    space: &'a Space,
    seen: HashSet<Candidate>,
    names: HashSet<String>,
}

impl Picker<'_> {
    /// Adds `c` to `batch` unless it, or another spelling of the same policy under the same
    /// topology rule, was seen.
    fn take(&mut self, c: Candidate, batch: &mut Vec<(Candidate, PolicySpec)>) -> Result<(), TuneError> {
        if !self.seen.insert(c.clone()) {
            return Ok(());
        }
        let spec = self.space.spec(&c)?;
        let name = label(&spec.to_string(), self.space.rule(&c).map(|r| r.name()).as_deref());
        if self.names.insert(name) {
            batch.push((c, spec));
        }
        Ok(())
    }
}

/// Searches `space` on workload `w` (cluster, placement and preemption overhead from `base`;
/// its policy is ignored). With topology rules (`space.rules`), each rule sets the placement
/// and gives gangs its ask; `base` must then carry the topology. `on_done` is called once per finished simulation, from any thread,
/// with `None` for a run stopped by racing.
pub fn tune(
    w: &Workload,
    base: &SimConfig,
    space: &Space,
    opts: &TuneOptions,
    on_done: &(dyn Fn(Option<&Evaluated>) + Sync),
) -> Result<TuneResult, TuneError> {
    let start = Instant::now();
    let deadline = start + opts.budget;
    let round = if opts.round > 0 { opts.round } else { (8 * rayon::current_num_threads()).max(16) };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    let mut picker = Picker { space, seen: HashSet::new(), names: HashSet::new() };
    let mut grid: VecDeque<Candidate> = space.grid().into();
    let mut evaluated: Vec<Evaluated> = Vec::new();
    let mut cands: Vec<Candidate> = Vec::new();
    let mut abandoned: Vec<(String, String)> = Vec::new();
    let mut dropped: Vec<Dropped> = Vec::new();
    let no_estimates = !w.jobs.is_empty() && w.jobs.iter().all(|j| j.estimate.is_none());
    let variants = variants(w, base, space);

    // The baseline: strict FIFO, always simulated first.
    let fifo = grid.pop_front().filter(|c| space.name(c) == "fifo").ok_or_else(|| {
        TuneError::Space(ordo_core::policy::PolicyParseError {
            name: "fifo".into(),
            why: "the space's grid must start with strict fifo".into(),
        })
    })?;
    let mut first = Vec::new();
    picker.take(fifo, &mut first)?;
    let Outcome::Done(baseline) = evaluate(&variants[first[0].0.rule], &first[0].1, None, None)? else {
        unreachable!("a run without a limit is never stopped by racing")
    };
    on_done(Some(&baseline));
    evaluated.push(baseline.clone());
    cands.push(first[0].0.clone());

    let stopped = loop {
        if evaluated.len() + dropped.len() >= opts.max_configs {
            break StopReason::MaxConfigs;
        }
        if Instant::now() >= deadline {
            break StopReason::Budget;
        }
        let want = round.min(opts.max_configs - evaluated.len() - dropped.len());
        let mut batch: Vec<(Candidate, PolicySpec)> = Vec::new();
        // 1. The starting grid.
        while batch.len() < want {
            match grid.pop_front() {
                Some(c) => picker.take(c, &mut batch)?,
                None => break,
            }
        }
        // 2. Local refinement: neighbours of the two best feasible configurations by the
        //    objective and of the two best feasible non-preemptive ones (up to half a round).
        if batch.len() < want {
            let mut order: Vec<usize> = (0..evaluated.len())
                .filter(|&i| opts.constraints.violations(&evaluated[i], &baseline).is_empty())
                .collect();
            order.sort_by(|&a, &b| opts.objective.compare(&evaluated[a], &evaluated[b]));
            let mut centres: Vec<usize> = order.iter().copied().take(2).collect();
            centres.extend(order.iter().copied().filter(|&i| !evaluated[i].preemptive).take(2));
            let limit = batch.len() + (want - batch.len()).div_ceil(2);
            'outer: for i in centres {
                // Cheap steps first (stable sort: equal costs keep the neighbour order).
                let mut steps = space.neighbours(&cands[i]);
                steps.sort_by(|a, b| space.cost(a).total_cmp(&space.cost(b)));
                for n in steps {
                    if batch.len() >= limit {
                        break 'outer;
                    }
                    picker.take(n, &mut batch)?;
                }
            }
        }
        // 3. Seeded random samples; 4. whatever is left of the space, in a fixed order.
        let mut tries = 0;
        while batch.len() < want && tries < 50 * want {
            tries += 1;
            let c = space.sample(&mut rng);
            picker.take(c, &mut batch)?;
        }
        if batch.len() < want {
            for c in space.unseen(&picker.seen, want - batch.len()) {
                picker.take(c, &mut batch)?;
            }
        }
        if batch.is_empty() {
            break StopReason::Exhausted;
        }
        // Longest first (by the space's cost estimate), so a slow run does not start last and
        // leave the other cores idle at the end of the round. Stable: ties keep their order.
        batch.sort_by(|a, b| space.cost(&b.0).total_cmp(&space.cost(&a.0)));
        // Limits come from earlier rounds only, so the search stays deterministic.
        let race = RaceLimits::of(&evaluated, &baseline, opts);
        let limits: Vec<Option<f64>> =
            batch.iter().map(|(_, spec)| race.as_ref().and_then(|r| r.limit(spec, no_estimates))).collect();
        let results: Vec<Option<Result<Outcome, TuneError>>> = batch
            .par_iter()
            .zip(limits.par_iter())
            .map(|((c, spec), &limit)| {
                if Instant::now() >= deadline {
                    return None;
                }
                // A run still going when the budget ends is abandoned, not waited for.
                let r = evaluate(&variants[c.rule], spec, Some(deadline), limit);
                if let Err(TuneError::Sim { source: ordo_sim::SimError::Deadline { .. }, .. }) = &r {
                    return None;
                }
                match &r {
                    Ok(Outcome::Done(e)) => on_done(Some(e)),
                    Ok(Outcome::Dropped(_)) => on_done(None),
                    Err(_) => {}
                }
                Some(r)
            })
            .collect();
        let mut cut = false;
        for ((c, _), r) in batch.into_iter().zip(results) {
            match r {
                Some(Err(TuneError::Sim { policy, source: source @ ordo_sim::SimError::Runaway { .. } })) => {
                    abandoned.push((policy, source.to_string()));
                }
                Some(r) => match r? {
                    Outcome::Done(e) => {
                        evaluated.push(e);
                        cands.push(c);
                    }
                    Outcome::Dropped(d) => dropped.push(d),
                },
                None => cut = true,
            }
        }
        if cut {
            break StopReason::Budget;
        }
    };
    Ok(TuneResult {
        evaluated,
        baseline,
        stopped,
        elapsed: start.elapsed(),
        space_size: space.size(),
        abandoned,
        dropped,
    })
}
