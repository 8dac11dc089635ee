//! The search space: every order of `ordo_core::policy` with a finite list of values per
//! parameter, crossed with backfill (non-preemptive orders only) and the `+maxwait` guard.

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
    /// Rough cost of one simulation relative to others (drives how often slow variants are
    /// sampled; measured on the Philly window, see docs/TUNE.md).
    pub cost: f64,
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
}

/// Draws costing up to this ([`Space::cost`]) are always kept by [`Space::sample`].
const ACCEPT_COST: f64 = 0.3;

fn dim(key: &'static str, values: &[&'static str], default: usize) -> Dim {
    Dim { key, values: values.to_vec(), default }
}

fn fam(name: &'static str, dims: Vec<Dim>, preemptive: bool, weight: f64, cost: f64) -> Family {
    Family { name, dims, preemptive, weight, cost }
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
            fam("fifo", vec![], false, 1.0, 0.05),
            fam("sjf", vec![], false, 1.0, 0.1),
            fam("sgf", vec![], false, 1.0, 0.05),
            fam("qssf", vec![], false, 1.0, 0.4),
            fam("fair", vec![dim("by", &["user", "group"], 0)], false, 1.0, 0.45),
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
                0.65,
            ),
            fam("rr", vec![], false, 1.0, 0.5),
            fam("rr", vec![dim("quantum", &["10m", "1h", "6h", "1d"], 1)], true, 0.5, 1.5),
            fam("srtf", vec![], true, 1.0, 0.3),
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
                0.15,
            ),
            fam(
                "gittins",
                vec![dim("quantum", &["60", "600", "3250", "10000", "36000"], 2), dim("window", &["1000", "10000"], 1)],
                true,
                0.5,
                2.0,
            ),
        ];
        Space {
            families,
            backfills: vec!["", "+easy", "+conservative"],
            maxwaits: vec!["", "+maxwait=6h", "+maxwait=24h", "+maxwait=72h"],
        }
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
            .sum()
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

    /// Rough relative cost of simulating a candidate (see [`Family::cost`]): conservative
    /// backfill over a dynamic order, the starvation guard and LAS promotion make runs much
    /// slower (measured on the Philly window; see docs/TUNE.md).
    pub fn cost(&self, c: &Candidate) -> f64 {
        let f = &self.families[c.family];
        // The starvation guard makes every order dynamic (keys change as jobs wait).
        let dynamic = !matches!(f.name, "fifo" | "sjf" | "sgf") || c.maxwait > 0;
        let mut cost = f.cost;
        match (c.backfill, dynamic) {
            // Measured on the Philly window: a dynamic order under conservative backfill
            // rebuilds every reservation each pass, 2.6-4.3 s a run, 10-20x the order alone.
            (2, true) => cost = 10.0,
            (2, false) => cost *= 2.0,
            (1, true) => cost *= 1.5,
            _ => {}
        }
        if c.maxwait > 0 {
            // The guard makes every order dynamic; with conservative backfill, very slow.
            cost += if c.backfill == 2 { 3.0 } else { 2.0 };
        }
        let first = c.params.first().copied();
        match (f.name, f.preemptive) {
            // Starvation promotion makes LAS runs 10-100x slower (jobs cycle between queues).
            ("las", _) if c.params.get(1).is_some_and(|&p| p > 0) => cost += 5.0,
            // A 10-minute round-robin slice preempts all the time.
            ("rr", true) if first == Some(0) => cost = cost.max(5.0),
            ("gittins", _) if first == Some(0) => cost += 1.0,
            _ => {}
        }
        cost
    }

    /// The starting grid: every order with its default parameters under every backfill it
    /// allows (conservative only for the static orders fifo, sjf, sgf, whose conservative runs
    /// are cheap), plus the time-sliced `rr`, `fair:by=group`, small-first LAS and fine-grained
    /// LAS. No starvation guard.
    pub fn grid(&self) -> Vec<Candidate> {
        let mut out = Vec::new();
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
                out.push(Candidate { family: fi, params: params.clone(), backfill: b, maxwait: 0 });
            }
            if f.name == "fair" {
                out.push(Candidate { family: fi, params: vec![1], backfill: 0, maxwait: 0 });
            }
            if f.name == "las" {
                // Small jobs first inside a queue, and the fine-grained ladder.
                out.push(Candidate { family: fi, params: vec![2, 0, 1], backfill: 0, maxwait: 0 });
                out.push(Candidate { family: fi, params: vec![5, 0, 1], backfill: 0, maxwait: 0 });
            }
        }
        out
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
                        out.push(Candidate { family: fi, params: p.clone(), backfill: b, maxwait: m });
                    }
                }
            }
        }
        out
    }

    /// Candidates one step away: one parameter to the next or previous value, another backfill,
    /// or the next or previous starvation guard.
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
        out
    }

    /// A random candidate: a family by weight, each parameter uniformly, backfill (none, easy,
    /// conservative with weights 2:2:1) and a starvation guard in about one draw of three. A
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
            let c = Candidate { family: fi, params, backfill, maxwait };
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
        assert_eq!(s.grid()[0], Candidate { family: 0, params: vec![], backfill: 0, maxwait: 0 });
        assert_eq!(s.name(&s.grid()[0]), "fifo");
    }
}
