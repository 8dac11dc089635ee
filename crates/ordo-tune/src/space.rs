//! The search space: every order of `ordo_core::policy` with a finite list of values per
//! parameter, crossed with backfill (non-preemptive orders only) and the `+maxwait` guard, and
//! on a cluster with a network topology with the topology rules ([`TopoRule`]).

use ordo_core::PolicySpec;
use rand::Rng;
use std::collections::HashSet;

/// One parameter of an order and the values the tuner tries (as `PolicySpec` text).
#[derive(Debug, Clone)]
pub struct Dim {
    /// Parameter name as the policy parser spells it (`thresholds`, `quantum`, ...).
    pub key: &'static str,
    /// Values tried, in an order where neighbours are similar (local refinement steps ±1).
    pub values: Vec<&'static str>,
    /// Index of the order's default value (used by the starting grid).
    pub default: usize,
}

/// An order with its parameters.
#[derive(Debug, Clone)]
pub struct Family {
    /// Order name (`las`, `rr`, ...).
    pub name: &'static str,
    /// Parameters; empty for orders without any.
    pub dims: Vec<Dim>,
    /// Whether the order preempts (then backfill modifiers do not apply).
    pub preemptive: bool,
    /// Relative weight of the family when sampling at random.
    pub weight: f64,
}

/// One point of the space: indices into a [`Space`]'s tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// Index into [`Space::families`].
    pub family: usize,
    /// One value index per parameter of the family.
    pub params: Vec<usize>,
    /// Index into [`Space::backfills`] (always 0 for preemptive orders).
    pub backfill: usize,
    /// Index into [`Space::maxwaits`].
    pub maxwait: usize,
    /// Index into [`Space::rules`] (always 0 when the space has none).
    pub rule: usize,
}

/// How gangs are placed on a cluster with a network topology: one value of the search's
/// topology dimension (docs/TOPOLOGY.md, docs/TUNE.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopoRule {
    /// The placement, as `--placement` names it: `pooled`, `consolidated` or `topology` (each
    /// gang in the lowest level of the topology that holds it).
    pub placement: &'static str,
    /// The ask every gang gets where it asks none itself (as `--gang-topology`), under
    /// `topology` placement only.
    pub gang_ask: Option<ordo_core::TopoAsk>,
}

impl TopoRule {
    /// The rule in words: `consolidated`, `topology`, `topology (required:switch)`.
    pub fn name(&self) -> String {
        match &self.gang_ask {
            None => self.placement.to_string(),
            Some(a) => format!("{} ({a})", self.placement),
        }
    }

    /// The flags that run it with `ordo simulate` or `ordo compare`.
    pub fn flags(&self) -> String {
        match &self.gang_ask {
            None => format!("--placement {}", self.placement),
            Some(a) => format!("--placement {} --gang-topology {a}", self.placement),
        }
    }
}

/// The whole space.
#[derive(Debug, Clone)]
pub struct Space {
    /// Orders and their parameters.
    pub families: Vec<Family>,
    /// Backfill modifiers: none, `+easy`, `+conservative`.
    pub backfills: Vec<&'static str>,
    /// Starvation guards: none or `+maxwait=D`.
    pub maxwaits: Vec<&'static str>,
    /// Topology rules (a cluster with a network topology); empty: the placement as given, and
    /// no such dimension.
    pub rules: Vec<TopoRule>,
}

/// The topology dimension of a search on a cluster with topology `t`: the rules to try and,
/// in words, those left out and why.
///
/// - Placements: `placement` alone when `--placement` was given; else the input's own
///   (`default_placement`), consolidated, and topology.
/// - Under topology placement, a gang ask per level, `required:LEVEL` (gangs wait for one unit
///   of that level), where every gang that asks nothing itself fits the largest unit of the
///   level: a larger gang would never run, and a rule that drops jobs cannot be compared on
///   mean JCT. Not when `ask_given` (`--gang-topology` already gave every gang its ask).
///   `preferred:LEVEL` is not tried: topology placement already places every gang as low as it
///   goes.
pub fn topology_rules(
    t: &ordo_core::Topology,
    cluster: &ordo_core::ClusterSpec,
    w: &ordo_core::Workload,
    placement: Option<&'static str>,
    default_placement: &'static str,
    ask_given: bool,
) -> (Vec<TopoRule>, Vec<String>) {
    let placements: Vec<&'static str> = match placement {
        Some(p) => vec![p],
        None => {
            let mut v = vec![default_placement];
            for p in ["consolidated", "topology"] {
                if !v.contains(&p) {
                    v.push(p);
                }
            }
            v
        }
    };
    let mut rules: Vec<TopoRule> = placements.iter().map(|&p| TopoRule { placement: p, gang_ask: None }).collect();
    let mut left_out = Vec::new();
    if !placements.contains(&"topology") {
        return (rules, left_out);
    }
    if ask_given {
        left_out.push("gang asks: --gang-topology gives every gang its ask".to_string());
        return (rules, left_out);
    }
    let largest_node = cluster.max_node_gpus();
    let gangs: Vec<u32> = w
        .jobs
        .iter()
        .filter(|j| j.gpus > largest_node && j.needs.as_ref().is_none_or(|n| n.topology.is_none()))
        .map(|j| j.gpus)
        .collect();
    if gangs.is_empty() {
        left_out.push("gang asks: no job is larger than one node without an ask of its own".to_string());
        return (rules, left_out);
    }
    let node_gpus: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
    for (l, level) in t.levels().iter().enumerate() {
        let largest = t.largest_unit(l, &node_gpus);
        let over = gangs.iter().filter(|&&g| g as u64 > largest).count();
        let ask = ordo_core::TopoAsk { level: level.clone(), required: true };
        if over == 0 {
            rules.push(TopoRule { placement: "topology", gang_ask: Some(ask) });
        } else {
            left_out.push(format!(
                "{ask}: {} larger than the largest {level} ({}) would never run",
                ordo_core::words::count(over, "gang"),
                ordo_core::words::count(largest as usize, "GPU")
            ));
        }
    }
    (rules, left_out)
}

/// Draws costing up to this ([`Space::cost`]) are always kept by [`Space::sample`].
const ACCEPT_COST: f64 = 0.3;

fn dim(key: &'static str, values: &[&'static str], default: usize) -> Dim {
    Dim { key, values: values.to_vec(), default }
}

fn fam(name: &'static str, dims: Vec<Dim>, preemptive: bool, weight: f64) -> Family {
    Family { name, dims, preemptive, weight }
}

impl Default for Space {
    fn default() -> Self {
        Space::standard()
    }
}

impl Space {
    /// The standard space: every order in `ordo_core::policy` (`rr` twice: without time slices,
    /// non-preemptive, and with a quantum, preemptive).
    pub fn standard() -> Space {
        let families = vec![
            fam("fifo", vec![], false, 1.0),
            fam("sjf", vec![], false, 1.0),
            fam("sgf", vec![], false, 1.0),
            fam("qssf", vec![], false, 1.0),
            fam("fair", vec![dim("by", &["user", "group"], 0)], false, 1.0),
            fam(
                "priority",
                vec![
                    dim("age", &["0", "100", "1000", "10000"], 2),
                    dim("fairshare", &["0", "1000", "10000"], 2),
                    dim("size", &["-10000", "-1000", "0", "1000"], 2),
                    dim("qos", &["0"], 0),
                    dim("half_life", &["1d", "7d"], 1),
                    dim("max_age", &["1d", "7d"], 1),
                ],
                false,
                1.0,
            ),
            fam("rr", vec![], false, 1.0),
            fam("rr", vec![dim("quantum", &["10m", "1h", "6h", "1d"], 1)], true, 0.5),
            fam("srtf", vec![], true, 1.0),
            fam(
                "las",
                vec![
                    dim(
                        "thresholds",
                        &[
                            "300/3000",
                            "600/3600",
                            "3250/7200",
                            "1000/10000/100000",
                            "10/100/1000/10000/100000/1000000",
                            "10/30/100/300/1000/3000/10000/30000/100000/300000/1000000/3000000",
                        ],
                        2,
                    ),
                    dim("promote", &["0", "8"], 0),
                    dim("within", &["arrival", "gpus"], 0),
                ],
                true,
                1.0,
            ),
            fam(
                "gittins",
                vec![dim("quantum", &["60", "600", "3250", "10000", "36000"], 2), dim("window", &["1000", "10000"], 1)],
                true,
                0.5,
            ),
        ];
        Space {
            families,
            backfills: vec!["", "+easy", "+conservative"],
            maxwaits: vec!["", "+maxwait=6h", "+maxwait=24h", "+maxwait=72h"],
            rules: Vec::new(),
        }
    }

    /// Values of the topology dimension (1 without one).
    fn rule_count(&self) -> usize {
        self.rules.len().max(1)
    }

    /// The topology rule of a candidate, when the space has that dimension.
    pub fn rule(&self, c: &Candidate) -> Option<&TopoRule> {
        self.rules.get(c.rule)
    }

    /// Number of candidates (before names that mean the same policy are merged).
    pub fn size(&self) -> usize {
        self.families
            .iter()
            .map(|f| {
                let p: usize = f.dims.iter().map(|d| d.values.len()).product();
                let b = if f.preemptive { 1 } else { self.backfills.len() };
                p * b * self.maxwaits.len()
            })
            .sum::<usize>()
            * self.rule_count()
    }

    /// The policy name of a candidate as the tuner writes it (every parameter spelled out).
    pub fn name(&self, c: &Candidate) -> String {
        let f = &self.families[c.family];
        let mut s = f.name.to_string();
        if !f.dims.is_empty() {
            let kv: Vec<String> =
                f.dims.iter().zip(&c.params).map(|(d, &i)| format!("{}={}", d.key, d.values[i])).collect();
            s.push(':');
            s.push_str(&kv.join(","));
        }
        s.push_str(self.backfills[c.backfill]);
        s.push_str(self.maxwaits[c.maxwait]);
        s
    }

    /// The parsed policy of a candidate.
    pub fn spec(&self, c: &Candidate) -> Result<PolicySpec, ordo_core::policy::PolicyParseError> {
        self.name(c).parse()
    }

    /// Rough cost of simulating a candidate, in seconds of one core on the Philly window
    /// (`--from 42 --to 49`, 7,729 jobs at 314% offered load; medians measured on 2026-12-02 on
    /// the 2-core machine of docs/TUNE.md with `ordo bench`). It orders each round (longest
    /// first), the refinement steps (cheap first) and how often [`Space::sample`] keeps a draw.
    /// What sets it: conservative backfill over an order whose keys move (every dynamic order,
    /// and any order with the starvation guard) rebuilds every reservation each pass; EASY over
    /// such an order walks the queue in key order each pass; the guard makes every order key
    /// jobs by their wait; `rr` with a short slice, LAS promotion and Gittins re-rank running
    /// jobs at every pass.
    pub fn cost(&self, c: &Candidate) -> f64 {
        let f = &self.families[c.family];
        let guard = c.maxwait > 0;
        let first = c.params.first().copied();
        let static_order = matches!(f.name, "fifo" | "sjf" | "sgf");
        match (c.backfill, f.preemptive) {
            // Conservative: cheap only for a static order without the guard (reservations are
            // kept between passes); otherwise 1.9-3.3 s whatever the order.
            (2, _) => {
                if static_order && !guard {
                    0.03
                } else {
                    2.3
                }
            }
            // EASY: static orders skip whole groups; dynamic ones walk the queue (0.09-0.3 s).
            (1, _) => match (static_order, guard) {
                (true, false) => 0.03,
                (true, true) => 0.12,
                (false, false) => 0.16,
                (false, true) => 0.25,
            },
            (_, false) => match (f.name, guard) {
                ("fifo" | "sjf" | "sgf", _) => 0.03,
                ("qssf" | "priority", false) => 0.03,
                // The guard read lazily too (0.27 -> 0.04 s for `priority+maxwait=6h`).
                ("qssf" | "priority", true) => 0.05,
                ("fair", false) => 0.22,
                ("fair", true) => 0.34,
                ("rr", false) => 0.39,
                ("rr", true) => 0.43,
                _ => 0.5,
            },
            (_, true) => {
                let promotes = f.name == "las" && c.params.get(1).is_some_and(|&p| p > 0);
                let base = match (f.name, first) {
                    // A slice of 10 minutes, 1 hour, 6 hours, 1 day.
                    ("rr", Some(0)) => 9.0,
                    ("rr", Some(1)) => 1.6,
                    ("rr", Some(2)) => 1.0,
                    ("rr", _) => 0.45,
                    // With promotion: its waiting jobs kept sorted between passes (about two
                    // thirds of the 2.0 s they cost keyed each pass; half under the guard).
                    ("las", _) if promotes => 1.4,
                    ("las" | "srtf", _) => 0.06,
                    ("gittins", Some(0)) => 1.9,
                    ("gittins", _) => 1.4,
                    _ => 1.0,
                };
                match (f.name, guard) {
                    (_, false) => base,
                    ("srtf", true) => 0.34,
                    ("las", true) if promotes => 1.2,
                    ("las", true) if base < 1.0 => 0.62,
                    (_, true) => base * 1.2,
                }
            }
        }
    }

    /// The starting grid: every order with its default parameters under every backfill it
    /// allows (conservative only for the static orders fifo, sjf, sgf, whose conservative runs
    /// are cheap), plus the time-sliced `rr`, `fair:by=group`, small-first LAS and fine-grained
    /// LAS. No starvation guard. With topology rules, each of these under every rule in turn
    /// (so the first rounds compare the rules on the same policies).
    pub fn grid(&self) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = Vec::new();
        for (fi, f) in self.families.iter().enumerate() {
            let params: Vec<usize> = f.dims.iter().map(|d| d.default).collect();
            let backfills: &[usize] = if f.preemptive {
                &[0]
            } else if matches!(f.name, "fifo" | "sjf" | "sgf") {
                &[0, 1, 2]
            } else {
                &[0, 1]
            };
            for &b in backfills {
                out.push(Candidate { family: fi, params: params.clone(), backfill: b, maxwait: 0, rule: 0 });
            }
            if f.name == "fair" {
                out.push(Candidate { family: fi, params: vec![1], backfill: 0, maxwait: 0, rule: 0 });
            }
            if f.name == "las" {
                // Small jobs first inside a queue, and the fine-grained ladder.
                out.push(Candidate { family: fi, params: vec![2, 0, 1], backfill: 0, maxwait: 0, rule: 0 });
                out.push(Candidate { family: fi, params: vec![5, 0, 1], backfill: 0, maxwait: 0, rule: 0 });
            }
        }
        out.into_iter().flat_map(|c| (0..self.rule_count()).map(move |rule| Candidate { rule, ..c.clone() })).collect()
    }

    /// Every candidate, in a fixed order.
    pub fn all(&self) -> Vec<Candidate> {
        let mut out = Vec::with_capacity(self.size());
        for (fi, f) in self.families.iter().enumerate() {
            let mut params = vec![vec![]];
            for d in &f.dims {
                params = params
                    .into_iter()
                    .flat_map(|p| {
                        (0..d.values.len()).map(move |i| {
                            let mut q = p.clone();
                            q.push(i);
                            q
                        })
                    })
                    .collect();
            }
            let nb = if f.preemptive { 1 } else { self.backfills.len() };
            for p in &params {
                for b in 0..nb {
                    for m in 0..self.maxwaits.len() {
                        for rule in 0..self.rule_count() {
                            out.push(Candidate { family: fi, params: p.clone(), backfill: b, maxwait: m, rule });
                        }
                    }
                }
            }
        }
        out
    }

    /// Candidates one step away: one parameter to the next or previous value, another backfill,
    /// the next or previous starvation guard, or another topology rule.
    pub fn neighbours(&self, c: &Candidate) -> Vec<Candidate> {
        let f = &self.families[c.family];
        let mut out = Vec::new();
        for (k, d) in f.dims.iter().enumerate() {
            for j in [c.params[k].wrapping_sub(1), c.params[k] + 1] {
                if j < d.values.len() {
                    let mut n = c.clone();
                    n.params[k] = j;
                    out.push(n);
                }
            }
        }
        if !f.preemptive {
            for b in 0..self.backfills.len() {
                if b != c.backfill {
                    out.push(Candidate { backfill: b, ..c.clone() });
                }
            }
        }
        for m in [c.maxwait.wrapping_sub(1), c.maxwait + 1] {
            if m < self.maxwaits.len() {
                out.push(Candidate { maxwait: m, ..c.clone() });
            }
        }
        for rule in (0..self.rules.len()).filter(|&r| r != c.rule) {
            out.push(Candidate { rule, ..c.clone() });
        }
        out
    }

    /// A random candidate: a family by weight, each parameter uniformly, backfill (none, easy,
    /// conservative with weights 2:2:1), a starvation guard in about one draw of three and a
    /// topology rule uniformly (only when there are several: no draw otherwise). A
    /// draw is kept with probability `min(1, 0.3 / cost)` ([`Space::cost`]), else redrawn, so
    /// slow variants are sampled less (a 3 s configuration one tenth as often as a 0.3 s one).
    pub fn sample<R: Rng>(&self, rng: &mut R) -> Candidate {
        loop {
            let total: f64 = self.families.iter().map(|f| f.weight).sum();
            let mut x = rng.random::<f64>() * total;
            let mut fi = self.families.len() - 1;
            for (i, f) in self.families.iter().enumerate() {
                if x < f.weight {
                    fi = i;
                    break;
                }
                x -= f.weight;
            }
            let f = &self.families[fi];
            let params = f.dims.iter().map(|d| rng.random_range(0..d.values.len())).collect();
            let backfill = if f.preemptive {
                0
            } else {
                match rng.random_range(0..5) {
                    0 | 1 => 0,
                    2 | 3 => 1,
                    _ => 2,
                }
            };
            let maxwait = if rng.random_range(0..3) == 0 { rng.random_range(1..self.maxwaits.len()) } else { 0 };
            let rule = if self.rules.len() > 1 { rng.random_range(0..self.rules.len()) } else { 0 };
            let c = Candidate { family: fi, params, backfill, maxwait, rule };
            if rng.random::<f64>() * self.cost(&c) <= ACCEPT_COST {
                return c;
            }
        }
    }

    /// The first candidates of [`Space::all`] not in `seen`, at most `n`.
    pub fn unseen(&self, seen: &HashSet<Candidate>, n: usize) -> Vec<Candidate> {
        self.all().into_iter().filter(|c| !seen.contains(c)).take(n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_candidate_parses_and_round_trips() {
        let s = Space::standard();
        let all = s.all();
        assert_eq!(all.len(), s.size());
        let mut names = HashSet::new();
        for c in &all {
            let p = s.spec(c).unwrap_or_else(|e| panic!("{}: {e}", s.name(c)));
            let canon = p.to_string();
            assert_eq!(canon.parse::<PolicySpec>().unwrap(), p, "{canon}");
            assert_eq!(p.order.preemptive(), s.families[c.family].preemptive, "{canon}");
            names.insert(canon);
        }
        // Every order of the core appears.
        for o in ["fifo", "sjf", "sgf", "srtf", "las", "gittins", "fair", "priority", "qssf", "rr"] {
            assert!(names.iter().any(|n| n.starts_with(o)), "{o} missing");
        }
        // Every candidate is a distinct policy (no two spellings of one).
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn grid_neighbours_and_samples_stay_in_the_space() {
        let s = Space::standard();
        let all: HashSet<Candidate> = s.all().into_iter().collect();
        for c in s.grid() {
            assert!(all.contains(&c), "{}", s.name(&c));
            for n in s.neighbours(&c) {
                assert!(all.contains(&n), "{}", s.name(&n));
                assert_ne!(n, c);
            }
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            let c = s.sample(&mut rng);
            assert!(all.contains(&c), "{}", s.name(&c));
        }
        assert_eq!(s.grid()[0], Candidate { family: 0, params: vec![], backfill: 0, maxwait: 0, rule: 0 });
        assert_eq!(s.name(&s.grid()[0]), "fifo");
    }
    /// On the `gangs` workload (blocks of 32 GPUs, switches of 128, gangs of up to 128 GPUs):
    /// consolidated, topology and `required:switch`; `required:block` is left out, naming the
    /// gangs no block holds. The rules multiply the space, the grid tries every grid policy
    /// under each, and every step and draw stays in the space.
    #[test]
    fn topology_rules_of_the_gangs_workload() {
        use ordo_sim::workload::{generate, Scenario, WorkloadParams};
        let sc = Scenario::Gangs;
        let cluster = sc.cluster();
        let t = sc.topology().expect("gangs has a topology");
        let w = generate(&WorkloadParams::default_for(sc), cluster.total_gpus());
        let (rules, left_out) = topology_rules(&t, &cluster, &w, None, "consolidated", false);
        let names: Vec<String> = rules.iter().map(TopoRule::name).collect();
        assert_eq!(names, ["consolidated", "topology", "topology (required:switch)"]);
        assert_eq!(rules[2].flags(), "--placement topology --gang-topology required:switch");
        let over = w.jobs.iter().filter(|j| j.gpus > 32).count();
        assert!(over > 0);
        assert_eq!(
            left_out,
            [format!("required:block: {over} gangs larger than the largest block (32 GPUs) would never run")]
        );
        // A placement given is not searched; --gang-topology given: no asks.
        let (r, _) = topology_rules(&t, &cluster, &w, Some("consolidated"), "consolidated", false);
        assert_eq!(r.len(), 1);
        let (r, out) = topology_rules(&t, &cluster, &w, None, "pooled", true);
        assert_eq!(r.iter().map(TopoRule::name).collect::<Vec<_>>(), ["pooled", "consolidated", "topology"]);
        assert!(out[0].contains("--gang-topology"), "{out:?}");

        let plain = Space::standard();
        let s = Space { rules, ..Space::standard() };
        assert_eq!(s.size(), 3 * plain.size());
        assert_eq!(s.grid().len(), 3 * plain.grid().len());
        assert_eq!(s.all().len(), s.size());
        for (i, c) in s.grid().iter().enumerate() {
            assert_eq!(c.rule, i % 3, "each grid policy under every rule in turn");
        }
        let all: HashSet<Candidate> = s.all().into_iter().collect();
        assert_eq!(all.len(), s.size());
        let c = s.grid()[0].clone();
        let rules_seen: HashSet<usize> = s.neighbours(&c).iter().map(|n| n.rule).collect();
        assert_eq!(rules_seen, [0, 1, 2].into_iter().collect(), "a step to each other rule");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let drawn: HashSet<usize> =
            (0..300).map(|_| s.sample(&mut rng)).inspect(|c| assert!(all.contains(c))).map(|c| c.rule).collect();
        assert_eq!(drawn.len(), 3);
        // Without rules, no candidate has one and no draw is spent on it.
        assert!(plain.all().iter().all(|c| c.rule == 0) && plain.rule(&plain.grid()[0]).is_none());
    }
}
