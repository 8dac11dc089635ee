//! Constraints, objective, Pareto front and recommendation over evaluated policies; pure
//! functions on [`Evaluated`] values, so they are tested without simulating anything.

use crate::search::{Dropped, Evaluated, StopReason, TuneResult};
use crate::ParseError;
use serde::Serialize;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A bound given either relative to the FIFO baseline (`1.0x`) or as an absolute value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// Times the baseline's value (`1.0x`).
    Relative(f64),
    /// Absolute: seconds for times, a fraction for utilisation.
    Absolute(f64),
}

impl Limit {
    /// Reads `1.0x` (relative) or a duration such as `2h`, `3600`, `90m` (absolute, seconds).
    pub fn parse_duration(s: &str) -> Result<Limit, ParseError> {
        if let Some(r) = Self::relative(s)? {
            return Ok(r);
        }
        ordo_core::policy::parse_duration(s).map(|ms| Limit::Absolute(ms as f64 / 1000.0)).ok_or_else(|| ParseError {
            text: s.to_string(),
            why: "expected a factor of the FIFO baseline such as 1.0x, or a duration such as 2h".into(),
        })
    }

    /// Reads `1.0x` (relative) or a fraction `0.9` / percentage `90%` (absolute, as a fraction).
    pub fn parse_fraction(s: &str) -> Result<Limit, ParseError> {
        if let Some(r) = Self::relative(s)? {
            return Ok(r);
        }
        let t = s.trim();
        let v = match t.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().ok().map(|x| x / 100.0),
            None => t.parse::<f64>().ok(),
        };
        v.filter(|x| x.is_finite() && (0.0..=1.0).contains(x)).map(Limit::Absolute).ok_or_else(|| ParseError {
            text: s.to_string(),
            why: "expected a factor of the FIFO baseline such as 1.0x, a fraction 0..1 such as 0.9, or 90%".into(),
        })
    }

    fn relative(s: &str) -> Result<Option<Limit>, ParseError> {
        match s.trim().strip_suffix('x') {
            None => Ok(None),
            Some(f) => match f.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(Limit::Relative(v))),
                _ => Err(ParseError {
                    text: s.to_string(),
                    why: "expected a non-negative factor before `x`, such as 1.0x".into(),
                }),
            },
        }
    }

    /// The bound in absolute terms, given the baseline's value.
    pub fn resolve(&self, baseline: f64) -> f64 {
        match *self {
            Limit::Relative(f) => f * baseline,
            Limit::Absolute(v) => v,
        }
    }
}

/// Which fairness index `--min-fairness` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FairnessBy {
    /// `fairness_users`: Jain's index of per-user mean bounded slowdown.
    #[default]
    Users,
    /// `fairness_groups`: Jain's index of per-group mean bounded slowdown.
    Groups,
}

/// Limits a configuration must meet to be feasible. Relative limits compare with the FIFO
/// baseline; a small tolerance (1e-9 relative) lets the baseline meet `1.0x` limits itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Constraints {
    /// Upper bound on the 99th percentile wait.
    pub max_p99_wait: Option<Limit>,
    /// Upper bound on the mean job completion time.
    pub max_mean_jct: Option<Limit>,
    /// Lower bound on Jain's fairness index of mean bounded slowdown (0..1).
    pub min_fairness: Option<f64>,
    /// Whose fairness index `min_fairness` reads.
    pub fairness_by: FairnessBy,
    /// Lower bound on utilisation (see [`Evaluated::utilisation`]).
    pub min_utilisation: Option<Limit>,
}

const TOL: f64 = 1e-9;

impl Constraints {
    /// Why `e` is infeasible, one line per violated limit; empty when feasible.
    pub fn violations(&self, e: &Evaluated, baseline: &Evaluated) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(l) = self.max_p99_wait {
            let max = l.resolve(baseline.p99_wait_s);
            if e.p99_wait_s > max * (1.0 + TOL) + TOL {
                v.push(format!("p99 wait {:.0} s > {:.0} s", e.p99_wait_s, max));
            }
        }
        if let Some(l) = self.max_mean_jct {
            let max = l.resolve(baseline.mean_jct_s);
            if e.mean_jct_s > max * (1.0 + TOL) + TOL {
                v.push(format!("mean JCT {:.0} s > {:.0} s", e.mean_jct_s, max));
            }
        }
        if let Some(min) = self.min_fairness {
            let f = match self.fairness_by {
                FairnessBy::Users => e.fairness_users,
                FairnessBy::Groups => e.fairness_groups,
            };
            if f < min * (1.0 - TOL) {
                v.push(format!("fairness {f:.3} < {min}"));
            }
        }
        if let Some(l) = self.min_utilisation {
            let min = l.resolve(baseline.utilisation);
            if e.utilisation < min * (1.0 - TOL) - TOL {
                v.push(format!("utilisation {:.4} < {:.4}", e.utilisation, min));
            }
        }
        v
    }

    /// The constraints in words, one per limit.
    pub fn describe(&self) -> Vec<String> {
        let lim = |l: &Limit, unit: &str| match l {
            Limit::Relative(f) => format!("{f}x FIFO's"),
            Limit::Absolute(a) => format!("{a}{unit}"),
        };
        let mut out = Vec::new();
        if let Some(l) = &self.max_p99_wait {
            out.push(format!("p99 wait <= {}", lim(l, " s")));
        }
        if let Some(l) = &self.max_mean_jct {
            out.push(format!("mean JCT <= {}", lim(l, " s")));
        }
        if let Some(m) = self.min_fairness {
            let by = match self.fairness_by {
                FairnessBy::Users => "fairness_users",
                FairnessBy::Groups => "fairness_groups",
            };
            out.push(format!("{by} >= {m}"));
        }
        if let Some(l) = &self.min_utilisation {
            out.push(format!("utilisation >= {}", lim(l, "")));
        }
        out
    }
}

/// What the recommendation optimises among feasible configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Smallest mean job completion time.
    #[default]
    MeanJct,
    /// Smallest 99th percentile wait.
    P99Wait,
    /// Highest utilisation.
    Utilisation,
}

impl FromStr for Objective {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.trim() {
            "mean-jct" => Ok(Objective::MeanJct),
            "p99-wait" => Ok(Objective::P99Wait),
            "utilisation" | "utilization" => Ok(Objective::Utilisation),
            _ => Err(ParseError { text: s.into(), why: "expected mean-jct, p99-wait or utilisation".into() }),
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Objective::MeanJct => "mean-jct",
            Objective::P99Wait => "p99-wait",
            Objective::Utilisation => "utilisation",
        })
    }
}

impl Objective {
    /// The three criteria as "smaller is better" keys, this objective's first.
    fn keys(&self, e: &Evaluated) -> [f64; 3] {
        let (j, w, u) = (e.mean_jct_s, e.p99_wait_s, -e.utilisation);
        match self {
            Objective::MeanJct => [j, w, u],
            Objective::P99Wait => [w, j, u],
            Objective::Utilisation => [u, j, w],
        }
    }

    /// Total order: better first. Ties on all three criteria go to the simpler name (fewer
    /// modifiers, then shorter, then alphabetical), so results are deterministic.
    pub fn compare(&self, a: &Evaluated, b: &Evaluated) -> Ordering {
        let (ka, kb) = (self.keys(a), self.keys(b));
        for i in 0..3 {
            match ka[i].total_cmp(&kb[i]) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        simplicity(&a.policy)
            .cmp(&simplicity(&b.policy))
            .then_with(|| a.policy.cmp(&b.policy))
            .then_with(|| a.placement.cmp(&b.placement))
    }
}

fn simplicity(name: &str) -> (usize, usize) {
    (name.matches('+').count(), name.len())
}

impl Evaluated {
    /// True when the policy read true run times (the workload has no estimates): a bound, not
    /// a policy to deploy.
    pub fn clairvoyant(&self) -> bool {
        self.estimates == "oracle"
    }
}

/// Whether `a` dominates `b` on (utilisation max, mean JCT min, p99 wait min): no worse on all
/// three and better on at least one.
pub fn dominates(a: &Evaluated, b: &Evaluated) -> bool {
    let no_worse = a.utilisation >= b.utilisation && a.mean_jct_s <= b.mean_jct_s && a.p99_wait_s <= b.p99_wait_s;
    let better = a.utilisation > b.utilisation || a.mean_jct_s < b.mean_jct_s || a.p99_wait_s < b.p99_wait_s;
    no_worse && better
}

/// Indices of the non-dominated points among `points` (points with equal values all stay).
pub fn pareto_front(points: &[&Evaluated]) -> Vec<usize> {
    (0..points.len()).filter(|&i| !points.iter().any(|q| dominates(q, points[i]))).collect()
}

/// One row of the Pareto front: a representative policy and how many other evaluated
/// policies reached exactly the same three values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrontRow {
    /// The simplest policy with these values.
    #[serde(flatten)]
    pub policy: Evaluated,
    /// Other feasible policies with exactly the same utilisation, mean JCT and p99 wait.
    pub same_values: usize,
}

/// Everything `ordo tune` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The objective of the recommendation.
    pub objective: Objective,
    /// The constraints, in words.
    pub constraints: Vec<String>,
    /// Candidates in the space (before names meaning the same policy are merged).
    pub space_size: usize,
    /// Configurations simulated to the end, the baseline included.
    pub evaluated: usize,
    /// Configurations stopped early by racing (their mean JCT could no longer beat the best).
    pub stopped_early: usize,
    /// Those meeting every constraint.
    pub feasible: usize,
    /// Wall time of the search, seconds.
    pub elapsed_s: f64,
    /// Configurations tried (run to the end or stopped early) per minute of wall time.
    pub configs_per_minute: f64,
    /// Why the search stopped.
    pub stopped: StopReason,
    /// The FIFO baseline (strict `fifo`).
    pub baseline: Evaluated,
    /// The Pareto front over (utilisation max, mean JCT min, p99 wait min) among feasible
    /// configurations, best by the objective first.
    pub front: Vec<FrontRow>,
    /// The best feasible configuration by the objective among those that can run with what
    /// the workload tells: never an oracle (a policy that read true run times because the
    /// workload has no estimates).
    pub recommended: Option<Evaluated>,
    /// The best feasible non-preemptive configuration that is not an oracle (equal to
    /// `recommended` when that is non-preemptive): what to deploy where preemption is refused
    /// (`ordo slurm drive`).
    pub non_preemptive: Option<Evaluated>,
    /// The best feasible oracle, when it beats `recommended` by the objective: a bound on what
    /// perfect run-time estimates would give, not a policy to deploy.
    pub bound: Option<Evaluated>,
    /// Every configuration simulated, in the order they were started (the baseline first).
    pub all: Vec<Evaluated>,
    /// Configurations abandoned because they thrash: (policy, why).
    pub abandoned: Vec<(String, String)>,
    /// Configurations stopped early by racing, in the order started.
    pub dropped: Vec<Dropped>,
}

/// The three configurations `ordo tune` names, among feasible ones, best by the objective: the
/// best deployable one (never an oracle), the best deployable non-preemptive one, and the best
/// oracle (shown as a bound when it beats the first).
pub(crate) struct Picks<'a> {
    pub recommended: Option<&'a Evaluated>,
    pub non_preemptive: Option<&'a Evaluated>,
    pub best_oracle: Option<&'a Evaluated>,
}

/// [`Picks`] among `feasible`.
pub(crate) fn picks<'a>(feasible: &[&'a Evaluated], objective: Objective) -> Picks<'a> {
    let best = |pred: &dyn Fn(&Evaluated) -> bool| {
        feasible.iter().copied().filter(|e| pred(e)).min_by(|a, b| objective.compare(a, b))
    };
    Picks {
        recommended: best(&|e| !e.clairvoyant()),
        non_preemptive: best(&|e| !e.preemptive && !e.clairvoyant()),
        best_oracle: best(&|e| e.clairvoyant()),
    }
}

/// Sorts, filters and summarises a search: feasibility, the front and the recommendation.
pub fn summarize(r: &TuneResult, constraints: &Constraints, objective: Objective) -> Summary {
    let feasible: Vec<&Evaluated> =
        r.evaluated.iter().filter(|e| constraints.violations(e, &r.baseline).is_empty()).collect();
    let mut front: Vec<FrontRow> = Vec::new();
    let mut members: Vec<&Evaluated> = pareto_front(&feasible).into_iter().map(|i| feasible[i]).collect();
    members.sort_by(|a, b| objective.compare(a, b));
    for m in members {
        let same = |row: &FrontRow| {
            row.policy.utilisation == m.utilisation
                && row.policy.mean_jct_s == m.mean_jct_s
                && row.policy.p99_wait_s == m.p99_wait_s
        };
        // Sorted by objective then simplicity: the first of equal values is the simplest.
        match front.iter_mut().find(|row| same(row)) {
            Some(row) => row.same_values += 1,
            None => front.push(FrontRow { policy: m.clone(), same_values: 0 }),
        }
    }
    let p = picks(&feasible, objective);
    let recommended = p.recommended.cloned();
    let non_preemptive = p.non_preemptive.cloned();
    let bound =
        p.best_oracle.filter(|o| p.recommended.is_none_or(|r| objective.compare(o, r) == Ordering::Less)).cloned();
    let secs = r.elapsed.as_secs_f64();
    Summary {
        objective,
        constraints: constraints.describe(),
        space_size: r.space_size,
        evaluated: r.evaluated.len(),
        feasible: feasible.len(),
        elapsed_s: secs,
        stopped_early: r.dropped.len(),
        configs_per_minute: if secs > 0.0 { (r.evaluated.len() + r.dropped.len()) as f64 * 60.0 / secs } else { 0.0 },
        stopped: r.stopped,
        baseline: r.baseline.clone(),
        front,
        recommended,
        non_preemptive,
        bound,
        all: r.evaluated.clone(),
        abandoned: r.abandoned.clone(),
        dropped: r.dropped.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ev(policy: &str, util: f64, jct: f64, p99: f64) -> Evaluated {
        Evaluated {
            policy: policy.into(),
            preemptive: matches!(policy.split(['+', ':']).next(), Some("srtf" | "las" | "gittins")),
            estimates: "none".into(),
            utilisation: util,
            mean_jct_s: jct,
            p99_wait_s: p99,
            mean_wait_s: 0.0,
            fairness_users: 1.0,
            fairness_groups: 1.0,
            sim_s: 0.0,
            placement: None,
            spread_lost_gpu_hours: None,
        }
    }

    #[test]
    fn limits_parse() {
        assert_eq!(Limit::parse_duration("1.0x"), Ok(Limit::Relative(1.0)));
        assert_eq!(Limit::parse_duration("2h"), Ok(Limit::Absolute(7200.0)));
        assert_eq!(Limit::parse_duration("90"), Ok(Limit::Absolute(90.0)));
        assert!(Limit::parse_duration("fast").is_err());
        assert!(Limit::parse_duration("-1x").is_err());
        assert_eq!(Limit::parse_fraction("90%"), Ok(Limit::Absolute(0.9)));
        assert_eq!(Limit::parse_fraction("0.5"), Ok(Limit::Absolute(0.5)));
        assert_eq!(Limit::parse_fraction("1.02x"), Ok(Limit::Relative(1.02)));
        assert!(Limit::parse_fraction("1.5").is_err());
        assert!("p50".parse::<Objective>().is_err());
        assert_eq!("p99-wait".parse::<Objective>(), Ok(Objective::P99Wait));
    }

    #[test]
    fn constraints_relative_and_absolute() {
        let base = ev("fifo", 0.8, 1000.0, 500.0);
        let c = Constraints { max_p99_wait: Some(Limit::Relative(1.0)), ..Default::default() };
        assert!(c.violations(&base, &base).is_empty(), "the baseline meets 1.0x");
        assert!(c.violations(&ev("sjf", 0.8, 900.0, 499.0), &base).is_empty());
        assert_eq!(c.violations(&ev("sjf", 0.8, 900.0, 501.0), &base).len(), 1);
        let c = Constraints { max_p99_wait: Some(Limit::Absolute(100.0)), ..Default::default() };
        assert_eq!(c.violations(&base, &base).len(), 1);
        let c = Constraints {
            max_mean_jct: Some(Limit::Relative(0.5)),
            min_utilisation: Some(Limit::Absolute(0.85)),
            min_fairness: Some(0.9),
            fairness_by: FairnessBy::Groups,
            ..Default::default()
        };
        let mut e = ev("sgf", 0.9, 400.0, 900.0);
        assert!(c.violations(&e, &base).is_empty());
        e.fairness_groups = 0.5;
        e.utilisation = 0.7;
        e.mean_jct_s = 600.0;
        assert_eq!(c.violations(&e, &base).len(), 3);
        e.fairness_groups = 1.0;
        e.fairness_users = 0.1;
        assert_eq!(c.violations(&e, &base).len(), 2, "users' fairness is not read with by=groups");
    }

    #[test]
    fn front_keeps_only_non_dominated() {
        let pts = [
            ev("a", 0.9, 100.0, 50.0),
            ev("b", 0.8, 90.0, 60.0),   // better JCT: stays
            ev("c", 0.8, 120.0, 60.0),  // dominated by a
            ev("d", 0.9, 100.0, 50.0),  // equal to a: stays
            ev("e", 0.95, 200.0, 70.0), // best utilisation: stays
            ev("f", 0.9, 100.0, 51.0),  // dominated by a
        ];
        let refs: Vec<&Evaluated> = pts.iter().collect();
        assert_eq!(pareto_front(&refs), vec![0, 1, 3, 4]);
        assert!(dominates(&pts[0], &pts[2]));
        assert!(!dominates(&pts[0], &pts[3]));
        assert!(!dominates(&pts[0], &pts[1]) && !dominates(&pts[1], &pts[0]));
    }

    fn result(evals: Vec<Evaluated>) -> TuneResult {
        TuneResult {
            baseline: evals[0].clone(),
            evaluated: evals,
            stopped: StopReason::Exhausted,
            elapsed: Duration::from_secs(30),
            space_size: 10,
            abandoned: Vec::new(),
            dropped: Vec::new(),
        }
    }

    #[test]
    fn recommendation_respects_constraints_and_preemption() {
        let r = result(vec![
            ev("fifo", 0.8, 1000.0, 500.0),
            ev("srtf", 0.85, 300.0, 450.0),
            ev("sjf+easy", 0.82, 400.0, 480.0),
            ev("sjf+easy+maxwait=21600s", 0.82, 400.0, 480.0),
            ev("sgf", 0.9, 350.0, 900.0),
        ]);
        let s = summarize(&r, &Constraints::default(), Objective::MeanJct);
        assert_eq!(s.recommended.as_ref().map(|e| e.policy.as_str()), Some("srtf"));
        assert_eq!(s.non_preemptive.as_ref().map(|e| e.policy.as_str()), Some("sgf"));
        assert_eq!(s.feasible, 5);
        assert_eq!(s.configs_per_minute, 10.0);
        // Front: srtf (best JCT), sgf (best util); sjf+easy is dominated by srtf, fifo too.
        let names: Vec<&str> = s.front.iter().map(|r| r.policy.policy.as_str()).collect();
        assert_eq!(names, vec!["srtf", "sgf"]);

        let c = Constraints { max_p99_wait: Some(Limit::Relative(1.0)), ..Default::default() };
        let s = summarize(&r, &c, Objective::MeanJct);
        assert_eq!(s.feasible, 4, "sgf's p99 wait is above FIFO's");
        assert_eq!(s.non_preemptive.as_ref().map(|e| e.policy.as_str()), Some("sjf+easy"), "simpler of two equals");
        let front: Vec<(&str, usize)> = s.front.iter().map(|r| (r.policy.policy.as_str(), r.same_values)).collect();
        assert_eq!(front, vec![("srtf", 0)]);

        let s = summarize(&r, &c, Objective::Utilisation);
        assert_eq!(s.recommended.as_ref().map(|e| e.policy.as_str()), Some("srtf"));
        let s = summarize(&r, &Constraints::default(), Objective::Utilisation);
        assert_eq!(s.recommended.as_ref().map(|e| e.policy.as_str()), Some("sgf"));
        assert_eq!(s.non_preemptive, s.recommended);

        let c = Constraints { max_mean_jct: Some(Limit::Absolute(10.0)), ..Default::default() };
        let s = summarize(&r, &c, Objective::MeanJct);
        assert_eq!((s.feasible, s.recommended, s.front.len()), (0, None, 0));
    }

    /// On a workload without estimates, policies that read them are oracles: never the
    /// recommendation, only a bound beside it.
    #[test]
    fn oracles_are_a_bound_never_the_recommendation() {
        let oracle = |p: &str, u, j, w| Evaluated { estimates: "oracle".into(), ..ev(p, u, j, w) };
        let r = result(vec![
            ev("fifo", 0.8, 1000.0, 500.0),
            oracle("srtf", 0.85, 300.0, 450.0),
            oracle("sjf+easy", 0.82, 320.0, 480.0),
            ev("las", 0.84, 340.0, 600.0),
            ev("sgf", 0.83, 400.0, 900.0),
        ]);
        let s = summarize(&r, &Constraints::default(), Objective::MeanJct);
        assert_eq!(s.recommended.as_ref().map(|e| e.policy.as_str()), Some("las"));
        assert_eq!(s.non_preemptive.as_ref().map(|e| e.policy.as_str()), Some("sgf"));
        assert_eq!(s.bound.as_ref().map(|e| e.policy.as_str()), Some("srtf"));
        // The front still shows the oracles, labelled by their `estimates`.
        assert!(s.front.iter().any(|r| r.policy.policy == "srtf" && r.policy.clairvoyant()));
        // No bound when the oracle is not better.
        let r = result(vec![ev("fifo", 0.8, 1000.0, 500.0), oracle("sjf", 0.8, 1200.0, 500.0)]);
        let s = summarize(&r, &Constraints::default(), Objective::MeanJct);
        assert_eq!((s.recommended.as_ref().map(|e| e.policy.as_str()), s.bound), (Some("fifo"), None));
    }

    #[test]
    fn equal_points_collapse_into_one_front_row() {
        let r = result(vec![
            ev("fifo", 0.8, 1000.0, 500.0),
            ev("sjf+easy+maxwait=21600s", 0.82, 400.0, 480.0),
            ev("sjf+easy", 0.82, 400.0, 480.0),
            ev("sjf", 0.82, 400.0, 480.0),
        ]);
        let s = summarize(&r, &Constraints::default(), Objective::P99Wait);
        assert_eq!(s.front.len(), 1);
        assert_eq!(s.front[0].policy.policy, "sjf");
        assert_eq!(s.front[0].same_values, 2);
    }
}
