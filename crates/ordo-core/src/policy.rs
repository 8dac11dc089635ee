//! Policies are composed by name from small parts: a queue order (`fifo`, `sjf`, `sgf`, `srtf`,
//! `las`, `gittins`, `fair`, `priority`, `qssf`) with optional parameters (`las:thresholds=3200`), a backfill modifier
//! (`+easy`, `+conservative`) and a starvation guard (`+maxwait=24h`); e.g. `sjf+easy`.
//! Without a backfill modifier the order is strict: the first job that does not fit blocks
//! every job behind it. Preemptive orders (`srtf`, `las`, `gittins`) re-decide which jobs run
//! at every event and may stop running jobs.

use crate::time::{Time, SECOND};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Tiresias's discretised two-dimensional least-attained-service parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LasParams {
    /// Queue thresholds in attained service (GPU-milliseconds), ascending: a job whose attained
    /// service (GPUs x time run) reaches `thresholds[i]` moves from queue `i` to queue `i + 1`.
    pub thresholds: Vec<i64>,
    /// Starvation promotion: a job in a lower queue that has waited at least `promote` times
    /// its executed time since it last ran goes back to the first queue (0 = never).
    pub promote: f64,
    /// Order inside a queue after "running jobs first": `false` by when a job joined (the
    /// Tiresias simulator's lists); `true` fewest GPUs first, then by when it joined.
    pub small_first: bool,
    /// `compat=tiresias`: decide as the Tiresias simulator's `dlas-gpu` (`dlas_sim_jobs` in its
    /// `run_sim.py`; `dlas-gpu-K` with `promote=K`) does, at its instants: it keeps one list per
    /// queue and notices a demotion (one queue per event) or a promotion only at an event, a
    /// job demoted while running goes behind the waiting jobs of its new queue, and it wakes for
    /// its next "queue jump" at `(limit - executed wall seconds) / GPUs` in whole seconds (late
    /// for a multi-GPU job that has run before), only the latest request counting. See
    /// `tiresias.rs` and docs/POLICIES.md. Default: the exact crossing, lists by key.
    #[serde(default)]
    pub compat_tiresias: bool,
}

impl Default for LasParams {
    fn default() -> Self {
        // Tiresias's dlas-gpu: three queues split at 3,250 and 7,200 GPU-seconds, no
        // starvation promotion (jobs.py in the Tiresias simulator; see docs/POLICIES.md).
        LasParams {
            thresholds: vec![3_250 * SECOND, 7_200 * SECOND],
            promote: 0.0,
            small_first: false,
            compat_tiresias: false,
        }
    }
}

/// Tiresias's Gittins-index parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GittinsParams {
    /// Service quantum Δ (GPU-milliseconds) over which the index looks ahead.
    pub quantum: i64,
    /// Jobs whose history the index is computed from: the last `window` finished jobs.
    pub window: usize,
}

impl Default for GittinsParams {
    fn default() -> Self {
        // Tiresias's gittins_delta.
        GittinsParams { quantum: 3_250 * SECOND, window: 10_000 }
    }
}

/// Whose running GPUs `fair` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FairBy {
    /// The job's user.
    #[default]
    User,
    /// The job's group (account).
    Group,
}

/// `fair`'s parameters: whose share it balances and how it measures what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FairParams {
    /// Whose running jobs are counted together.
    pub by: FairBy,
    /// Dominant resource fairness (`measure=drf`): an owner holds the largest of its shares of
    /// the cluster's GPUs, CPUs and memory (those the nodes model), not its GPU count.
    pub drf: bool,
}

/// Slurm priority/multifactor weights and decay parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorityParams {
    /// Weight of the age factor `min(wait / max_age, 1)`.
    pub age: f64,
    /// Weight of the fair-share factor `2^(-usage / share)`.
    pub fairshare: f64,
    /// Weight of the job-size factor `gpus / cluster GPUs` (negative favours small jobs).
    pub size: f64,
    /// Weight of the job's static priority (the trace's `priority`, 0 if none).
    pub qos: f64,
    /// Half-life of past usage in the fair-share factor.
    pub half_life: Time,
    /// Wait at which the age factor reaches 1.
    pub max_age: Time,
}

impl Default for PriorityParams {
    fn default() -> Self {
        // Slurm's priority/multifactor: PriorityDecayHalfLife and PriorityMaxAge default to
        // 7 days (slurm.conf). Slurm's weights default to 0; ordo's choice: fair share
        // dominant, age secondary, size and QOS off (docs/POLICIES.md).
        PriorityParams {
            age: 1000.0,
            fairshare: 10000.0,
            size: 0.0,
            qos: 0.0,
            half_life: 7 * 86_400 * SECOND,
            max_age: 7 * 86_400 * SECOND,
        }
    }
}

/// The order in which jobs are considered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// First in, first out: by submit time, then by arrival sequence.
    Fifo,
    /// Shortest (estimated) job first: by run-time estimate, then submit time.
    Sjf,
    /// Smallest GPU count first: by GPUs, then submit time.
    Sgf,
    /// Preemptive shortest remaining (estimated) time first.
    Srtf,
    /// Preemptive discretised 2D least-attained-service (Tiresias); needs no run-time knowledge.
    Las(LasParams),
    /// Preemptive Gittins index over attained service (Tiresias), learned from finished jobs.
    Gittins(GittinsParams),
    /// Fair sharing: the waiting job whose owner holds the fewest running GPUs (divided by its
    /// share, see [`crate::Quotas`]) goes first.
    Fair(FairParams),
    /// Slurm's priority/multifactor: age, decayed fair-share usage, size and static priority.
    Priority(PriorityParams),
    /// Helios's quasi-shortest-service-first: GPU-time predicted from finished jobs.
    Qssf,
    /// Heterogeneity-aware (typed clusters with a speed matrix): the waiting job that gains most
    /// from the fastest GPU it accepts, relative to the slowest, goes first; ties by submit. A
    /// greedy step towards Gavel's maximum total effective throughput (docs/POLICIES.md).
    Tput,
    /// Round robin across users: users take turns, each turn starts that user's oldest waiting
    /// job. With a quantum, a job that has run that long is preempted if others wait, and
    /// requeued behind them.
    Rr {
        /// Time slice (ms); `None`: no time slicing (non-preemptive).
        quantum: Option<Time>,
    },
}

impl Order {
    /// Whether this order reads a run-time estimate (and so runs as an oracle without one).
    pub fn needs_estimate(&self) -> bool {
        matches!(self, Order::Sjf | Order::Srtf)
    }

    /// Whether this order stops running jobs to run others.
    pub fn preemptive(&self) -> bool {
        matches!(self, Order::Srtf | Order::Las(_) | Order::Gittins(_) | Order::Rr { quantum: Some(_) })
    }

    /// Whether a waiting job's key never changes, so queues can keep jobs in a sorted set.
    pub fn is_static(&self) -> bool {
        matches!(self, Order::Fifo | Order::Sjf | Order::Sgf | Order::Tput)
    }

    /// The sort key of a waiting job under a static order; smaller runs first.
    pub fn key(&self, submit: Time, gpus: u32, estimate: Time) -> (i64, i64) {
        match self {
            Order::Sjf => (estimate, submit),
            Order::Sgf => (gpus as i64, submit),
            _ => (submit, 0),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Order::Fifo => "fifo",
            Order::Sjf => "sjf",
            Order::Sgf => "sgf",
            Order::Srtf => "srtf",
            Order::Las(_) => "las",
            Order::Gittins(_) => "gittins",
            Order::Fair(_) => "fair",
            Order::Priority(_) => "priority",
            Order::Qssf => "qssf",
            Order::Tput => "tput",
            Order::Rr { .. } => "rr",
        }
    }
}

/// Backfill: whether jobs behind a blocked one may start, and under which guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backfill {
    /// Strict order: the first job that does not fit blocks all behind it.
    None,
    /// EASY: the first blocked job gets a reservation at the earliest time it can start (from
    /// running jobs' estimated ends); a later job may start now only if it does not delay it.
    Easy,
    /// Conservative: every waiting job gets a reservation at the earliest time it fits
    /// without delaying any earlier reservation; jobs whose reservation is now start.
    Conservative,
}

/// A full policy: order, backfill and starvation guard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// Queue order.
    pub order: Order,
    /// Backfill modifier (non-preemptive orders only).
    pub backfill: Backfill,
    /// Starvation guard: a job that has waited this long since it was submitted goes ahead of
    /// every job that has not (oldest first).
    pub max_wait: Option<Time>,
}

impl PolicySpec {
    /// A policy with no modifiers.
    pub fn plain(order: Order) -> Self {
        PolicySpec { order, backfill: Backfill::None, max_wait: None }
    }

    /// Whether the policy reads run-time estimates (backfill always does).
    pub fn needs_estimate(&self) -> bool {
        self.order.needs_estimate() || self.backfill != Backfill::None
    }

    /// Parses a comma-separated list of policies in which parameters may themselves contain
    /// commas (`fifo,las:thresholds=3200,promote=8,sjf+easy`): a segment of the form `key=value`
    /// continues the policy before it, also when modifiers follow (`...,max_age=86400+easy`).
    pub fn parse_list(s: &str) -> Result<Vec<PolicySpec>, PolicyParseError> {
        let mut names: Vec<String> = Vec::new();
        for seg in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let head = seg.split('+').next().unwrap_or(seg);
            let continues = head.contains('=') && !head.contains(':');
            match names.last_mut() {
                Some(last) if continues => {
                    last.push(',');
                    last.push_str(seg);
                }
                _ => names.push(seg.to_string()),
            }
        }
        names.iter().map(|n| n.parse()).collect()
    }
}

/// Parses a duration: a number with an optional unit `ms`, `s` (default), `m`, `h`, `d`.
pub fn parse_duration(s: &str) -> Option<Time> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e3)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600e3)
    } else if let Some(n) = s.strip_suffix('d') {
        (n, 86400e3)
    } else {
        (s, 1e3)
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * mult < 9e15).then(|| (v * mult).round() as Time)
}

fn fmt_secs(t: Time) -> String {
    let s = t as f64 / 1000.0;
    if s.fract() == 0.0 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.order.name())?;
        match &self.order {
            Order::Las(p) if *p != LasParams::default() => {
                let th: Vec<String> = p.thresholds.iter().map(|&t| fmt_secs(t)).collect();
                write!(f, ":thresholds={},promote={}", th.join("/"), p.promote)?;
                if p.small_first {
                    f.write_str(",within=gpus")?;
                }
                if p.compat_tiresias {
                    f.write_str(",compat=tiresias")?;
                }
            }
            Order::Gittins(p) if *p != GittinsParams::default() => {
                write!(f, ":quantum={},window={}", fmt_secs(p.quantum), p.window)?;
            }
            Order::Fair(p) if *p != FairParams::default() => {
                let mut kv = Vec::new();
                if p.by == FairBy::Group {
                    kv.push("by=group");
                }
                if p.drf {
                    kv.push("measure=drf");
                }
                write!(f, ":{}", kv.join(","))?;
            }
            Order::Rr { quantum: Some(q) } => write!(f, ":quantum={}", fmt_secs(*q))?,
            Order::Priority(p) if *p != PriorityParams::default() => {
                write!(
                    f,
                    ":age={},fairshare={},size={},qos={},half_life={},max_age={}",
                    p.age,
                    p.fairshare,
                    p.size,
                    p.qos,
                    fmt_secs(p.half_life),
                    fmt_secs(p.max_age)
                )?;
            }
            _ => {}
        }
        match self.backfill {
            Backfill::None => {}
            Backfill::Easy => f.write_str("+easy")?,
            Backfill::Conservative => f.write_str("+conservative")?,
        }
        if let Some(w) = self.max_wait {
            write!(f, "+maxwait={}s", fmt_secs(w))?;
        }
        Ok(())
    }
}

/// Why a policy name could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown policy `{name}`: {why} (orders: fifo, sjf, sgf, tput, srtf, las[:thresholds=S/S..,promote=X,within=arrival|gpus,compat=exact|tiresias], \
     gittins[:quantum=S,window=N], fair[:by=user|group,measure=gpus|drf], \
     priority[:age=W,fairshare=W,size=W,qos=W,half_life=D,max_age=D], qssf; modifiers: +easy, +conservative, +maxwait=DURATION; e.g. `sjf+easy`)"
)]
pub struct PolicyParseError {
    /// The name given.
    pub name: String,
    /// What was wrong.
    pub why: String,
}

impl FromStr for PolicySpec {
    type Err = PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: String| PolicyParseError { name: s.to_string(), why };
        let mut parts = s.trim().split('+');
        let head = parts.next().unwrap_or("").trim();
        let (name, params) = match head.split_once(':') {
            Some((n, p)) => (n.trim(), Some(p)),
            None => (head, None),
        };
        let kv: Vec<(&str, &str)> = match params {
            None => Vec::new(),
            Some(p) => p
                .split(',')
                .map(|x| {
                    x.split_once('=')
                        .map(|(k, v)| (k.trim(), v.trim()))
                        .ok_or_else(|| err(format!("`{x}` is not key=value")))
                })
                .collect::<Result<_, _>>()?,
        };
        let dur = |k: &str, v: &str| {
            parse_duration(v).ok_or_else(|| err(format!("`{k}={v}`: expected a duration such as 3200, 30m, 24h")))
        };
        let order = match name {
            "fifo" | "sjf" | "sgf" | "srtf" | "qssf" | "tput" if !kv.is_empty() => {
                return Err(err(format!("`{name}` takes no parameters")))
            }
            "fifo" => Order::Fifo,
            "sjf" => Order::Sjf,
            "sgf" => Order::Sgf,
            "srtf" => Order::Srtf,
            "qssf" => Order::Qssf,
            "tput" => Order::Tput,
            "rr" => {
                let mut quantum = None;
                for (k, v) in kv {
                    match k {
                        "quantum" => {
                            let q = dur(k, v)?;
                            if q < 1 {
                                return Err(err(format!(
                                    "`quantum={v}`: a round-robin quantum must be at least 1ms (omit it for plain round robin)"
                                )));
                            }
                            quantum = Some(q)
                        }
                        _ => return Err(err(format!("rr has no parameter `{k}` (quantum)"))),
                    }
                }
                Order::Rr { quantum }
            }
            "fair" => {
                let mut p = FairParams::default();
                for (k, v) in kv {
                    match (k, v) {
                        ("by", "user") => p.by = FairBy::User,
                        ("by", "group") => p.by = FairBy::Group,
                        ("by", _) => return Err(err(format!("`by={v}`: expected user or group"))),
                        ("measure", "gpus") => p.drf = false,
                        ("measure", "drf") => p.drf = true,
                        ("measure", _) => return Err(err(format!("`measure={v}`: expected gpus or drf"))),
                        _ => return Err(err(format!("fair has no parameter `{k}` (by, measure)"))),
                    }
                }
                Order::Fair(p)
            }
            "priority" => {
                let mut p = PriorityParams::default();
                for (k, v) in kv {
                    let weight = || {
                        v.parse::<f64>()
                            .ok()
                            .filter(|x| x.is_finite())
                            .ok_or_else(|| err(format!("`{k}={v}`: expected a number")))
                    };
                    match k {
                        "age" => p.age = weight()?,
                        "fairshare" => p.fairshare = weight()?,
                        "size" => p.size = weight()?,
                        "qos" => p.qos = weight()?,
                        "half_life" => p.half_life = dur(k, v)?.max(1),
                        "max_age" => p.max_age = dur(k, v)?.max(1),
                        _ => {
                            return Err(err(format!(
                                "priority has no parameter `{k}` (age, fairshare, size, qos, half_life, max_age)"
                            )))
                        }
                    }
                }
                Order::Priority(p)
            }
            "las" => {
                let mut p = LasParams::default();
                for (k, v) in kv {
                    match k {
                        "thresholds" => {
                            p.thresholds = v.split('/').map(|x| dur(k, x)).collect::<Result<_, _>>()?;
                            if p.thresholds.windows(2).any(|w| w[0] >= w[1]) {
                                return Err(err("thresholds must be ascending".into()));
                            }
                        }
                        "promote" => {
                            p.promote = v
                                .parse()
                                .ok()
                                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                                .ok_or_else(|| err(format!("`promote={v}`: expected a number >= 0")))?
                        }
                        "within" => {
                            p.small_first = match v {
                                "arrival" => false,
                                "gpus" => true,
                                _ => return Err(err(format!("`within={v}`: expected arrival or gpus"))),
                            }
                        }
                        "compat" => {
                            p.compat_tiresias = match v {
                                "exact" => false,
                                "tiresias" => true,
                                _ => return Err(err(format!("`compat={v}`: expected exact or tiresias"))),
                            }
                        }
                        _ => {
                            return Err(err(format!(
                                "las has no parameter `{k}` (thresholds, promote, within, compat)"
                            )))
                        }
                    }
                }
                Order::Las(p)
            }
            "gittins" => {
                let mut p = GittinsParams::default();
                for (k, v) in kv {
                    match k {
                        "quantum" => p.quantum = dur(k, v)?.max(1),
                        "window" => {
                            p.window = v
                                .parse()
                                .ok()
                                .filter(|&n| n > 0)
                                .ok_or_else(|| err(format!("`window={v}`: expected a whole number > 0")))?
                        }
                        _ => return Err(err(format!("gittins has no parameter `{k}` (quantum, window)"))),
                    }
                }
                Order::Gittins(p)
            }
            other => return Err(err(format!("`{other}` is not an order"))),
        };
        let mut spec = PolicySpec::plain(order);
        for m in parts {
            let m = m.trim();
            if let Some(v) = m.strip_prefix("maxwait=") {
                spec.max_wait = Some(
                    parse_duration(v).ok_or_else(|| err(format!("`+maxwait={v}`: expected a duration such as 24h")))?,
                );
                continue;
            }
            let b = match m {
                "easy" => Backfill::Easy,
                "conservative" => Backfill::Conservative,
                other => return Err(err(format!("`+{other}` is not a modifier"))),
            };
            if spec.backfill != Backfill::None {
                return Err(err("at most one backfill modifier".into()));
            }
            if spec.order.preemptive() {
                return Err(err(format!(
                    "`{}` is preemptive; backfill applies to non-preemptive orders only",
                    spec.order.name()
                )));
            }
            spec.backfill = b;
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_names() {
        for n in [
            "fifo",
            "sjf",
            "sgf",
            "tput",
            "tput+easy",
            "fifo+easy",
            "sjf+easy",
            "sgf+conservative",
            "srtf",
            "las",
            "gittins",
            "las:thresholds=100/1000,promote=8",
            "las:thresholds=10/100,promote=0,within=gpus",
            "las:thresholds=3250/7200,promote=0,compat=tiresias",
            "gittins:quantum=60,window=500",
            "fifo+easy+maxwait=86400s",
            "fair",
            "fair:by=group",
            "fair:measure=drf",
            "fair:by=group,measure=drf",
            "fair+easy",
            "priority",
            "priority:age=1,fairshare=2.5,size=-3,qos=4,half_life=3600,max_age=60",
            "priority+conservative+maxwait=100s",
            "qssf",
            "rr",
            "rr:quantum=3600",
            "rr+easy",
            "qssf+easy",
        ] {
            let p: PolicySpec = n.parse().unwrap();
            assert_eq!(p.to_string(), n);
        }
        assert!("lifo".parse::<PolicySpec>().is_err());
        assert!("fifo+easy+conservative".parse::<PolicySpec>().is_err());
        assert!("fifo+fast".parse::<PolicySpec>().is_err());
        assert!("srtf+easy".parse::<PolicySpec>().is_err());
        assert!("las:thresholds=10/5".parse::<PolicySpec>().is_err());
        assert!("fifo:x=1".parse::<PolicySpec>().is_err());
        assert!("fair:by=team".parse::<PolicySpec>().is_err());
        assert!("fair:measure=cpus".parse::<PolicySpec>().is_err());
        assert!("priority:age=x".parse::<PolicySpec>().is_err());
        assert!("priority:weight=1".parse::<PolicySpec>().is_err());
        assert!("qssf:x=1".parse::<PolicySpec>().is_err());
        assert_eq!("fair:by=user".parse::<PolicySpec>().unwrap().to_string(), "fair");
        let p = "priority:size=-1".parse::<PolicySpec>().unwrap();
        assert_eq!(p.to_string().parse::<PolicySpec>().unwrap(), p);
        assert_eq!("fifo+maxwait=24h".parse::<PolicySpec>().unwrap().max_wait, Some(86_400_000));
    }

    #[test]
    fn lists_keep_parameter_commas() {
        // A parameter followed by modifiers still continues its policy (as `ordo tune` prints it).
        let l = PolicySpec::parse_list("priority:age=1000,max_age=86400+easy,fifo").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0], "priority:age=1000,max_age=86400+easy".parse::<PolicySpec>().unwrap());
        let l = PolicySpec::parse_list("fifo,las:thresholds=100,promote=2,sjf+easy").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].to_string(), "las:thresholds=100,promote=2");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Some(30_000));
        assert_eq!(parse_duration("1.5h"), Some(5_400_000));
        assert_eq!(parse_duration("250ms"), Some(250));
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(parse_duration("x"), None);
    }
}
