//! Built-in, seeded workload generators modelled on the Microsoft Philly GPU-cluster trace
//! (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
//! Workloads", USENIX ATC'19; the same trace drives the Tiresias and Helios studies).
//!
//! Every constant below is a parameter fitted to `philly_rfold.csv` / `philly_vc.csv` (111,549
//! and 82,247 jobs); docs/WORKLOADS.md lists each one, the figure it was fitted to and the script
//! that measured it. No trace rows are stored here.
//!
//! The model, in the order the generator draws it:
//!
//! * **Batches.** Jobs come in submission batches (one user submitting a sweep of similar
//!   jobs within seconds): a batch is one job with probability [`P_SINGLE`], otherwise
//!   `floor(Pareto(x_m = 2, alpha = 2))` jobs (at most [`MAX_BATCH`]). All jobs of a batch share
//!   the user, the GPU count and the run-time mixture component (the "kind" of job).
//! * **GPU count.** [`SIZE_MIX`]: 86.7% 1-GPU jobs, then 2, 4, 8, 16, 32, 64 and 128 GPUs
//!   ([`SizeMix::Jobs`]), or the same weighted by GPU count ([`SizeMix::GpuWeighted`], the
//!   `Backlog` default). Sizes larger than the cluster are left out and the rest renormalised.
//! * **Run time.** Per GPU-count class, a mixture of lognormals ([`RUNTIME_MIX`]): a spike of
//!   jobs that end (mostly fail) within a minute or two, a body of minutes to hours, and a tail
//!   of multi-day training runs; redrawn while above `max_runtime`.
//! * **Arrivals** (`Online`). Batch starts form a Poisson process whose rate is modulated by a
//!   two-state Markov chain (calm / burst, [`MMPP`]), a diurnal cosine ([`DIURNAL_AMPLITUDE`])
//!   and a day-of-week factor ([`WEEKDAY`]). Jobs inside a batch follow each other at 0-5 s
//!   gaps ([`BATCH_GAP`]). The length of the arrival window is found by bisection so that the
//!   *in-window* offered load ([`OfferedLoad::in_window`]) equals `load`: with run times of up
//!   to two months, most GPU-time of a few days' arrivals falls after the window, so the
//!   total-work ratio would leave the cluster idle; the in-window load is what keeps it busy.
//! * **Arrivals** (`Backlog`). Every job is submitted at time 0 (the default `window` of 0), so
//!   submission order is generation order and a batch's jobs are adjacent; with a `window`,
//!   every batch starts at a uniform whole second within it and its jobs follow at the same
//!   0-5 s gaps, clamped into the window.
//! * **Users.** Each batch belongs to one of `users` users drawn with Zipf weights `k^-s`; user
//!   `k` (0-based) is in group `k mod groups`.
//! * **Estimates** (optional). `estimate = roundup(runtime x f)` with `ln f ~ Exp(mean
//!   ESTIMATE_LN_FACTOR_MEAN)`, rounded up to the next value of a ladder of time limits users
//!   pick (5 min ... 60 days).
//!
//! * **`LongLog`** is not fitted to Philly: gangs of 32 to 1,024 GPUs ([`LONGLOG_SIZES`]),
//!   run times of seconds to hours ([`LONGLOG_RUNTIMES`]), estimates on, and batch starts by
//!   the same modulated process over a window that the work fills to `load` (0.74): about two
//!   years on 1,024 one-GPU nodes, the shape of the LANL CM-5 log.
//!
//! Determinism: one `ChaCha8Rng` stream per concern (jobs, gaps, rate path, batch starts,
//! estimates), all seeded from `seed`, so the same parameters always give the same
//! [`Workload`], and turning `estimates` on changes no other field. Nothing reads a clock or OS
//! randomness.

use ordo_core::time::{Time, SECOND};
use ordo_core::{ClusterSpec, Job, JobId, Placement, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One minute in [`Time`] units.
const MINUTE: Time = 60 * SECOND;
/// One hour in [`Time`] units.
const HOUR: Time = 60 * MINUTE;
/// One day in [`Time`] units.
const DAY: Time = 24 * HOUR;

/// Job-size mix: `(GPUs, jobs in philly_rfold.csv)`. The trace's odd sizes (6, 7, 12, 20, 24,
/// 28, 48 GPUs; 59 jobs in all) are rounded up to the next power of two. Fractions:
/// 0.8665, 0.0226, 0.0492, 0.0513, 0.0077, 0.0023, 0.00027, 0.00010.
pub const SIZE_MIX: [(u32, u32); 8] =
    [(1, 96_662), (2, 2_522), (4, 5_487), (8, 5_719), (16, 864), (32, 254), (64, 30), (128, 11)];

/// One lognormal component of a run-time mixture: weight, and `mu`, `sigma` of ln(seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormalComponent {
    /// Mixture weight (the weights of one class sum to 1, up to rounding).
    pub weight: f64,
    /// Mean of ln(run time in seconds).
    pub mu: f64,
    /// Standard deviation of ln(run time in seconds).
    pub sigma: f64,
}

const fn c(weight: f64, mu: f64, sigma: f64) -> LogNormalComponent {
    LogNormalComponent { weight, mu, sigma }
}

/// Run-time mixtures per GPU-count class, fitted by EM (Gaussian mixture on ln seconds) to the
/// jobs of that class in philly_rfold.csv (duration > 0). Classes: 1 GPU, 2 GPUs, 3-4 GPUs,
/// 5-8 GPUs, more than 8 GPUs. Components are ordered by `mu`.
pub const RUNTIME_MIX: [(u32, &[LogNormalComponent]); 5] = [
    (1, &[c(0.120, 4.173, 0.136), c(0.130, 4.186, 0.886), c(0.429, 7.504, 1.041), c(0.321, 8.234, 2.576)]),
    (2, &[c(0.491, 2.900, 0.361), c(0.271, 5.376, 2.107), c(0.238, 11.746, 1.312)]),
    (4, &[c(0.199, 4.607, 1.217), c(0.122, 6.848, 0.345), c(0.398, 9.319, 2.173), c(0.281, 11.655, 1.131)]),
    (8, &[c(0.172, 4.325, 1.221), c(0.239, 7.116, 0.919), c(0.181, 9.406, 0.696), c(0.408, 11.997, 1.200)]),
    (u32::MAX, &[c(0.214, 4.124, 1.017), c(0.207, 7.033, 0.793), c(0.321, 9.961, 1.188), c(0.258, 11.648, 1.326)]),
];

/// Longest run time in philly_rfold.csv (5,196,151 s, about 60 days); the `Online` cap.
pub const TRACE_MAX_RUNTIME: Time = 5_196_151 * SECOND;

/// Probability that a submission batch is a single job (philly_rfold.csv, days 40-123, jobs
/// whose arrival is more than 5 s after the previous one start a new batch: 73.75% of batches
/// have one job).
pub const P_SINGLE: f64 = 0.7375;
/// Largest batch (the trace's largest is 646 jobs; the Pareto tail is cut here).
pub const MAX_BATCH: usize = 256;
/// Pareto shape of the size of multi-job batches (`P(size >= k | size >= 2) = (2/k)^alpha`;
/// the trace gives alpha 2.0 at k=3, 2.25 at 4, 2.1 at 8, 2.0 at 16, 1.8 at 32).
pub const BATCH_ALPHA: f64 = 2.0;
/// Gap in seconds between consecutive jobs of a batch: probabilities of 0, 1, ..., 5 s
/// (trace gaps of at most 5 s).
pub const BATCH_GAP: [f64; 6] = [0.208, 0.236, 0.166, 0.152, 0.136, 0.101];

/// Two-state Markov-modulated batch-start rate, from a two-state Poisson hidden Markov model
/// fitted (Baum-Welch) to hourly batch-start counts of philly_rfold.csv, days 40-123.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mmpp {
    /// Burst rate / calm rate (122.1 / 21.0 batches per hour).
    pub burst_ratio: f64,
    /// Mean time in the calm state, hours.
    pub calm_hours: f64,
    /// Mean time in the burst state, hours.
    pub burst_hours: f64,
}

/// The fitted arrival modulation.
pub const MMPP: Mmpp = Mmpp { burst_ratio: 5.81, calm_hours: 17.2, burst_hours: 2.02 };

/// Relative amplitude of the diurnal cosine of the arrival rate (first harmonic of the
/// hour-of-day histogram of philly_vc.csv).
pub const DIURNAL_AMPLITUDE: f64 = 0.288;
/// Hour of day (trace clock) at which the diurnal rate peaks.
pub const DIURNAL_PEAK_HOUR: f64 = 4.48;
/// Arrival-rate factor per day of week, Monday first (philly_vc.csv; mean 1). Time 0 of a
/// generated workload is Monday 00:00.
pub const WEEKDAY: [f64; 7] = [0.86, 1.07, 1.14, 1.29, 1.44, 0.61, 0.59];

/// Mean of `ln f`, where a user's estimate is the run time times `f` rounded up to
/// [`ESTIMATE_LADDER`]. Chosen so that the median estimate/run-time ratio is about 2.4, as in
/// the KTH SP2 log's requested times (Parallel Workloads Archive).
pub const ESTIMATE_LN_FACTOR_MEAN: f64 = 0.45;
/// The round time limits users pick, ascending; past the last, whole days.
pub const ESTIMATE_LADDER: [Time; 15] = [
    5 * MINUTE,
    15 * MINUTE,
    30 * MINUTE,
    HOUR,
    2 * HOUR,
    4 * HOUR,
    8 * HOUR,
    12 * HOUR,
    DAY,
    2 * DAY,
    3 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
    60 * DAY,
];

/// Which built-in scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Diurnal, bursty arrivals at an in-window offered load of 1 (a busy cluster where the
    /// order matters): 3,000 jobs arrive over one to a few days on 512 GPUs.
    Online,
    /// 1,200 multi-GPU-heavy jobs of at most a day, all submitted at time 0 (a team's nightly
    /// runs): ordering and head-of-line blocking decide how well the cluster is packed.
    Backlog,
    /// A backlog of 1,500 jobs of mixed sizes on a consolidated cluster ([`MIXED_SIZES`],
    /// [`MIXED_RUNTIMES`], 32 nodes of 8 GPUs): jobs of up to 8 GPUs on one node, larger ones on whole idle nodes,
    /// so a large job at the head of a strict queue idles GPUs while nodes drain.
    Mixed,
    /// A long, wide, lightly loaded log in the shape of the LANL CM-5 log of the Parallel
    /// Workloads Archive: 122,000 jobs over about two years on 1,024 one-GPU nodes, gangs of 32
    /// to 1,024 GPUs (powers of two, [`LONGLOG_SIZES`]), run times of seconds to hours
    /// ([`LONGLOG_RUNTIMES`]), user estimates, offered load 0.74. It measures what a run costs
    /// in memory and time when jobs are many and wide but seldom wait.
    #[serde(rename = "longlog")]
    LongLog,
    /// Distributed training on a cluster with a network topology ([`Scenario::topology`]: 64
    /// nodes of 8 GPUs, blocks of 4 nodes, switches of 4 blocks): 3,000 jobs of 1 to 128 GPUs
    /// ([`GANG_SIZES`], a third of them gangs of 16 or more), each of a model class whose
    /// slowdown when spread is Gavel's measurement ([`ordo_core::topology::GAVEL_V100`]),
    /// arriving as `Online`'s at an in-window load of 0.7. Where a gang lands decides its run
    /// time: placement by topology matters here.
    Gangs,
    /// The same cluster, topology, classes and arrivals as `Gangs`, but every job fits one node
    /// (1 to 8 GPUs): consolidated placement never spreads a job, so placement by topology
    /// changes nothing. The control beside `Gangs`.
    #[serde(rename = "nodelocal")]
    NodeLocal,
}

impl Scenario {
    /// Every scenario, in a fixed order.
    pub const ALL: [Scenario; 6] =
        [Scenario::Online, Scenario::Backlog, Scenario::Mixed, Scenario::LongLog, Scenario::Gangs, Scenario::NodeLocal];

    /// The scenario's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Online => "online",
            Scenario::Backlog => "backlog",
            Scenario::Mixed => "mixed",
            Scenario::LongLog => "longlog",
            Scenario::Gangs => "gangs",
            Scenario::NodeLocal => "nodelocal",
        }
    }

    /// The cluster the scenario is meant for: 64x8 GPUs, 32x8 for `Mixed`, 1024x1 for `LongLog`.
    pub fn cluster(self) -> ClusterSpec {
        match self {
            Scenario::Online | Scenario::Backlog => ClusterSpec::uniform(64, 8),
            Scenario::Mixed => ClusterSpec::uniform(32, 8),
            Scenario::LongLog => ClusterSpec::uniform(1024, 1),
            Scenario::Gangs | Scenario::NodeLocal => ClusterSpec::uniform(64, 8),
        }
    }

    /// The network topology of the scenario's cluster, where it has one (`Gangs`,
    /// `NodeLocal`): blocks of 4 nodes (32 GPUs, an NVLink domain), switches of 4 blocks (128
    /// GPUs), 4 switches; spreading over blocks costs Gavel's factor per class, over switches
    /// nothing more (the defaults, [`ordo_core::topology::Slowdown::published`]).
    pub fn topology(self) -> Option<ordo_core::Topology> {
        match self {
            Scenario::Gangs | Scenario::NodeLocal => {
                let c = self.cluster();
                let names: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();
                let paths: Vec<Vec<Option<String>>> =
                    (0..names.len()).map(|i| vec![Some(format!("b{}", i / 4)), Some(format!("s{}", i / 16))]).collect();
                Some(
                    ordo_core::Topology::from_paths(vec!["block".into(), "switch".into()], &names, &paths)
                        .expect("the built-in topology is valid"),
                )
            }
            _ => None,
        }
    }

    /// The placement the scenario is meant for: pooled, or consolidated for `Mixed`.
    pub fn placement(self) -> Placement {
        match self {
            Scenario::Online | Scenario::Backlog | Scenario::LongLog => Placement::Pooled,
            Scenario::Mixed | Scenario::Gangs | Scenario::NodeLocal => Placement::Consolidated,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a scenario name could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown workload scenario `{0}` (expected `online`, `backlog`, `mixed`, `longlog`, `gangs` or `nodelocal`)")]
pub struct ScenarioParseError(pub String);

impl FromStr for Scenario {
    type Err = ScenarioParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "online" => Ok(Scenario::Online),
            "backlog" => Ok(Scenario::Backlog),
            "mixed" => Ok(Scenario::Mixed),
            "longlog" => Ok(Scenario::LongLog),
            "gangs" => Ok(Scenario::Gangs),
            "nodelocal" => Ok(Scenario::NodeLocal),
            _ => Err(ScenarioParseError(s.to_string())),
        }
    }
}

/// Which job-size mix to draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeMix {
    /// Philly's mix of jobs ([`SIZE_MIX`]): 86.7% 1-GPU jobs.
    Jobs,
    /// Philly's mix weighted by GPU count: the job a random busy GPU belongs to (50% 1-GPU,
    /// 23.5% 8-GPU, 7.1% 16-GPU, 4.2% 32-GPU, 1.7% 64-128 GPUs). Multi-GPU-heavy, like a
    /// team's batch of training runs.
    GpuWeighted,
    /// [`MIXED_SIZES`]: every size from 1 to 32 GPUs well represented (the `Mixed` scenario).
    Mixed,
    /// [`LONGLOG_SIZES`]: gangs of 32 to 1,024 GPUs (the `LongLog` scenario).
    LongLog,
    /// [`GANG_SIZES`]: 1 to 128 GPUs, a third gangs (the `Gangs` scenario).
    Gangs,
    /// [`GANG_SIZES`] up to one node (8 GPUs; the `NodeLocal` scenario).
    NodeLocal,
}

/// The `Gangs` scenario's job sizes: `(GPUs, weight)` by job count. Not fitted to a trace: a
/// cluster shared by single-node experiments and multi-node training runs.
pub const GANG_SIZES: [(u32, u32); 8] = [(1, 30), (2, 8), (4, 8), (8, 12), (16, 14), (32, 14), (64, 10), (128, 4)];

/// The `Gangs` scenario's model classes, `(class, weight)`: the model families of Gavel's
/// throughput measurements ([`ordo_core::topology::GAVEL_V100`]).
pub const GANG_CLASSES: [(&str, u32); 4] = [("resnet50", 30), ("transformer", 35), ("resnet18", 20), ("lm", 15)];

/// The `Mixed` scenario's job sizes: `(GPUs, weight)` by job count. Not fitted to a trace: a
/// cluster shared by small experiments and multi-node training, where packing matters.
pub const MIXED_SIZES: [(u32, u32); 7] = [(1, 50), (2, 10), (4, 10), (8, 10), (16, 10), (32, 5), (64, 5)];

/// The `Mixed` scenario's run times per GPU count (at most this many GPUs): one lognormal of
/// ln(seconds). Small jobs run for hours (median 6.1 h for 1-2 GPUs), multi-node jobs are
/// shorter (median 30 min): draining whole nodes for a large job then takes long. Not fitted
/// to a trace.
pub const MIXED_RUNTIMES: [(u32, LogNormalComponent); 4] =
    [(2, c(1.0, 10.0, 1.0)), (4, c(1.0, 9.5, 1.0)), (8, c(1.0, 8.0, 1.5)), (u32::MAX, c(1.0, 7.5, 1.5))];

/// The `LongLog` scenario's job sizes: `(GPUs, weight)` by job count, powers of two from 32 to
/// 1,024 as on the LANL CM-5 (whose partitions had 32 to 1,024 processors). Chosen by hand
/// after reading some 450 rows of that log at three places (mostly 32 and 64, a 1,024 rare);
/// not fitted to it. Mean 98 GPUs.
pub const LONGLOG_SIZES: [(u32, u32); 6] = [(32, 55), (64, 20), (128, 13), (256, 6), (512, 5), (1024, 1)];

/// The `LongLog` scenario's run times, any size: a mixture of lognormals of ln(seconds), a
/// third of jobs that end within a minute or two and a body of about an hour (median 46 min,
/// mean about 1.8 h), at most one day. Not fitted to a trace; with [`LONGLOG_SIZES`] and
/// 122,000 jobs at load 0.74 the arrivals span about two years.
pub const LONGLOG_RUNTIMES: [LogNormalComponent; 2] = [c(0.35, 3.7, 1.0), c(0.65, 7.92, 1.3)];

/// Everything that determines a generated workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadParams {
    /// Which scenario.
    pub scenario: Scenario,
    /// Number of jobs.
    pub jobs: usize,
    /// Seed of the random streams.
    pub seed: u64,
    /// Number of users (`u01`, `u02`, ...); 0 is treated as 1.
    pub users: u32,
    /// Number of groups (`g1`, `g2`, ...); user `k` (0-based) is in group `k mod groups`; 0 is
    /// treated as 1.
    pub groups: u32,
    /// Job-size mix.
    pub size_mix: SizeMix,
    /// Zipf exponent of the users' shares of batches (0 = equal shares).
    pub user_skew: f64,
    /// `Online`: target in-window offered load ([`OfferedLoad::in_window`]); the arrival window
    /// is as long as this requires (if even one minute is too long, one minute). `LongLog`:
    /// the offered load of all the work over the arrival window ([`OfferedLoad::total`]), which
    /// sets the window's length. Values that are not finite or not positive are treated as 1.
    pub load: f64,
    /// `Backlog`: every job is submitted in `[0, window)` (whole seconds); 0 (the default) = all
    /// at time 0.
    pub window: Time,
    /// Run times are drawn again until at most this (at least one second).
    pub max_runtime: Time,
    /// Give every job a user estimate (a rounded-up time limit); otherwise `estimate` is
    /// `None` and estimate-based policies run as oracles.
    pub estimates: bool,
}

impl WorkloadParams {
    /// The scenario's defaults: sized so that a run on the default 512-GPU cluster takes well
    /// under 100 ms; `LongLog` (122,000 jobs on 1,024 GPUs) is a benchmark and takes seconds.
    pub fn default_for(scenario: Scenario) -> Self {
        let base = WorkloadParams {
            scenario,
            jobs: 3_000,
            seed: 1,
            users: 20,
            groups: 4,
            size_mix: SizeMix::Jobs,
            user_skew: 1.0,
            load: 1.0,
            window: 0,
            max_runtime: TRACE_MAX_RUNTIME,
            estimates: false,
        };
        match scenario {
            Scenario::Online => base,
            Scenario::Backlog => {
                WorkloadParams { jobs: 1_200, size_mix: SizeMix::GpuWeighted, max_runtime: DAY, ..base }
            }
            Scenario::Mixed => WorkloadParams { jobs: 1_500, size_mix: SizeMix::Mixed, max_runtime: DAY, ..base },
            Scenario::Gangs => WorkloadParams { size_mix: SizeMix::Gangs, load: 0.7, max_runtime: DAY, ..base },
            Scenario::NodeLocal => WorkloadParams { size_mix: SizeMix::NodeLocal, load: 0.7, max_runtime: DAY, ..base },
            Scenario::LongLog => WorkloadParams {
                jobs: 122_000,
                size_mix: SizeMix::LongLog,
                load: 0.74,
                max_runtime: DAY,
                estimates: true,
                ..base
            },
        }
    }
}

impl Default for WorkloadParams {
    fn default() -> Self {
        WorkloadParams::default_for(Scenario::Online)
    }
}

/// How busy a workload keeps a cluster over its arrival window `[first submit, last submit]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OfferedLoad {
    /// GPU-time the jobs would use inside the window if each started on arrival, over
    /// (cluster GPUs x window): `sum(gpus x (min(submit + run time, end) - submit)) / (G x
    /// (end - start))`. This is what the `Online` scenario targets: with run times of up to
    /// weeks, most GPU-time of a few days' arrivals lies after the window.
    pub in_window: f64,
    /// All GPU-time over (cluster GPUs x window): `sum(gpus x run time) / (G x (end - start))`.
    pub total: f64,
    /// The window length.
    pub window: Time,
}

/// The offered load of `w` on `cluster_gpus` GPUs; `None` when the jobs do not span any time or
/// the cluster has no GPUs.
pub fn offered_load(w: &Workload, cluster_gpus: u64) -> Option<OfferedLoad> {
    let first = w.jobs.iter().map(|j| j.submit).min()?;
    let last = w.jobs.iter().map(|j| j.submit).max()?;
    if last <= first || cluster_gpus == 0 {
        return None;
    }
    let cap = cluster_gpus as f64 * (last - first) as f64;
    let total: f64 = w.jobs.iter().map(|j| j.gpu_time() as f64).sum();
    let inside: f64 = w.jobs.iter().map(|j| j.gpus as f64 * ((j.submit + j.runtime).min(last) - j.submit) as f64).sum();
    Some(OfferedLoad { in_window: inside / cap, total: total / cap, window: last - first })
}

/// Shortest `Online` arrival window, seconds.
const MIN_WINDOW_S: f64 = 60.0;

/// Random stream ids, one per concern.
const STREAM_JOBS: u64 = 1;
const STREAM_GAPS: u64 = 2;
const STREAM_RATE_PATH: u64 = 3;
const STREAM_STARTS: u64 = 4;
const STREAM_ESTIMATES: u64 = 5;
const STREAM_CLASSES: u64 = 6;

fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// Draws an index with probability proportional to `weights` (all >= 0, sum > 0).
fn pick(rng: &mut ChaCha8Rng, weights: &[f64]) -> usize {
    let total: f64 = weights.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (i, &w) in weights.iter().enumerate() {
        if u < w {
            return i;
        }
        u -= w;
    }
    weights.len() - 1
}

/// The run-time mixture of a GPU count.
fn runtime_mix(gpus: u32) -> &'static [LogNormalComponent] {
    RUNTIME_MIX.iter().find(|(upto, _)| gpus <= *upto).map(|(_, m)| *m).unwrap_or(RUNTIME_MIX[RUNTIME_MIX.len() - 1].1)
}

/// One run time in whole seconds from a lognormal component, redrawn while above `max_s`.
fn draw_runtime_s(rng: &mut ChaCha8Rng, comp: &LogNormalComponent, max_s: i64) -> i64 {
    // A component whose mass lies almost entirely above the cap would loop for long; after a
    // bounded number of tries the cap itself is used.
    for _ in 0..1_000 {
        let z: f64 = StandardNormal.sample(rng);
        let s = (comp.mu + comp.sigma * z).exp().ceil();
        if s <= max_s as f64 {
            return (s as i64).max(1);
        }
    }
    max_s
}

/// Size of one submission batch.
fn draw_batch_len(rng: &mut ChaCha8Rng) -> usize {
    if rng.random::<f64>() < P_SINGLE {
        return 1;
    }
    // Inverse CDF of Pareto(x_m = 2, alpha); 1 - U lies in (0, 1].
    let u = 1.0 - rng.random::<f64>();
    let x = 2.0 * u.powf(-1.0 / BATCH_ALPHA);
    (x.floor() as usize).clamp(2, MAX_BATCH)
}

/// Arrival-rate factor at `t` seconds from Monday 00:00, not counting the Markov state.
fn calendar_rate(t: f64) -> f64 {
    let day = 86_400.0;
    let hour = (t % day) / 3_600.0;
    let diurnal = 1.0 + DIURNAL_AMPLITUDE * (2.0 * std::f64::consts::PI * (hour - DIURNAL_PEAK_HOUR) / 24.0).cos();
    diurnal * weekday_factor(t)
}

/// The day-of-week factor of [`calendar_rate`] at `t` seconds from Monday 00:00.
fn weekday_factor(t: f64) -> f64 {
    WEEKDAY[((t / 86_400.0).floor() as usize) % 7]
}

/// Exponential draw with the given mean.
fn exp_draw(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

/// The calm/burst path of the Markov-modulated rate: `(end time s, rate level)` segments
/// covering `[0, span_s)`. Drawn from its own stream, so a longer span extends the same path.
fn rate_path(seed: u64, span_s: f64) -> Vec<(f64, f64)> {
    let mut rng = rng_for(seed, STREAM_RATE_PATH);
    let p_burst = MMPP.burst_hours / (MMPP.burst_hours + MMPP.calm_hours);
    let mut burst = rng.random::<f64>() < p_burst;
    let mut segments = Vec::new();
    let mut t = 0.0;
    while t < span_s {
        let mean_h = if burst { MMPP.burst_hours } else { MMPP.calm_hours };
        t += exp_draw(&mut rng, mean_h * 3_600.0);
        segments.push((t, if burst { MMPP.burst_ratio } else { 1.0 }));
        burst = !burst;
    }
    segments
}

/// `n` batch start times (whole seconds, ascending) in `[0, span_s)`, from the
/// Markov-modulated, diurnal, weekly Poisson process conditioned on `n` points (given the rate
/// path, the points are independent with density proportional to the rate; drawn by
/// rejection).
fn online_starts(seed: u64, n: usize, span_s: f64) -> Vec<i64> {
    let segments = rate_path(seed, span_s);
    let mut rng = rng_for(seed, STREAM_STARTS);
    let max_weekday = WEEKDAY.iter().copied().fold(0.0, f64::max);
    let rate_max = MMPP.burst_ratio * (1.0 + DIURNAL_AMPLITUDE) * max_weekday;
    let mut starts = Vec::with_capacity(n);
    for _ in 0..n {
        loop {
            let t = rng.random::<f64>() * span_s;
            let seg = segments.partition_point(|&(end, _)| end <= t).min(segments.len() - 1);
            if accepts(t, segments[seg].1, rng.random::<f64>() * rate_max) {
                starts.push(t.floor() as i64);
                break;
            }
        }
    }
    starts.sort_unstable();
    starts
}

/// Whether a draw `v` (uniform below the largest rate) falls under the rate at `t` at Markov
/// level `level`: `v < level * calendar_rate(t)`. The diurnal factor `1 + A cos(..)` lies in
/// `[1 - A, 1 + A]`, and floating-point rounding keeps that order through the products, so most
/// draws are decided by these bounds without the cosine, exactly as the full rate decides them.
fn accepts(t: f64, level: f64, v: f64) -> bool {
    let wd = weekday_factor(t);
    if v >= level * ((1.0 + DIURNAL_AMPLITUDE) * wd) {
        return false;
    }
    v < level * ((1.0 - DIURNAL_AMPLITUDE) * wd) || v < level * calendar_rate(t)
}

/// Submit times (whole seconds) of the drafts: each batch at its start, its later jobs after
/// the pre-drawn gaps, none after `last_s`.
fn place(drafts: &[Draft], starts_s: &[i64], gaps_s: &[i64], last_s: i64) -> Vec<i64> {
    let mut out = Vec::with_capacity(drafts.len());
    let mut t = 0i64;
    for (i, d) in drafts.iter().enumerate() {
        t = if i == 0 || d.batch != drafts[i - 1].batch { starts_s[d.batch] } else { t + gaps_s[i] };
        out.push(t.min(last_s));
    }
    out
}

/// In-window offered load (see [`OfferedLoad::in_window`]) of jobs submitted at `submit_s`
/// over the window `[0, span_s)`.
fn in_window_load(drafts: &[Draft], submit_s: &[i64], span_s: f64, gpus: f64) -> f64 {
    let inside: f64 = drafts
        .iter()
        .zip(submit_s)
        .map(|(d, &s)| {
            let (start, end) = (s as f64, (s + d.runtime_s) as f64);
            d.gpus.max(1) as f64 * (end.min(span_s) - start).max(0.0)
        })
        .sum();
    inside / (gpus * span_s)
}

/// Rounds a run time (seconds) times the factor up to the next round time limit.
fn round_limit(raw_s: f64) -> Time {
    let raw = (raw_s * 1_000.0).ceil() as Time;
    ESTIMATE_LADDER.iter().copied().find(|&l| l >= raw).unwrap_or_else(|| (raw + DAY - 1) / DAY * DAY)
}

/// One job before arrival times are known.
struct Draft {
    batch: usize,
    user: u32,
    gpus: u32,
    runtime_s: i64,
}

/// Generates the scenario's workload for a cluster of `cluster_gpus` GPUs. No job asks for more
/// than `cluster_gpus` GPUs (on a cluster without GPUs every job asks for 0). Deterministic: the
/// same parameters give the same workload.
pub fn generate(p: &WorkloadParams, cluster_gpus: u64) -> Workload {
    let users = p.users.max(1);
    let groups = p.groups.max(1);
    let mut w = Workload::default();
    for g in 0..groups {
        w.group_index(&format!("g{}", g + 1));
    }
    for u in 0..users {
        w.user_index(&format!("u{:02}", u + 1));
    }
    let user_weights: Vec<f64> = (1..=users).map(|k| (k as f64).powf(-p.user_skew.max(0.0))).collect();
    let table: &[(u32, u32)] = match p.size_mix {
        SizeMix::Mixed => &MIXED_SIZES,
        SizeMix::LongLog => &LONGLOG_SIZES,
        SizeMix::Gangs => &GANG_SIZES,
        SizeMix::NodeLocal => &GANG_SIZES[..4],
        SizeMix::Jobs | SizeMix::GpuWeighted => &SIZE_MIX,
    };
    let sizes: Vec<(u32, f64)> = table
        .iter()
        .filter(|(g, _)| *g as u64 <= cluster_gpus)
        .map(|&(g, n)| match p.size_mix {
            SizeMix::Jobs | SizeMix::Mixed | SizeMix::LongLog | SizeMix::Gangs | SizeMix::NodeLocal => (g, n as f64),
            SizeMix::GpuWeighted => (g, n as f64 * g as f64),
        })
        .collect();
    let size_weights: Vec<f64> = sizes.iter().map(|s| s.1).collect();
    let max_s = (p.max_runtime / SECOND).max(1);

    // Jobs, batch by batch.
    let mut rng = rng_for(p.seed, STREAM_JOBS);
    let mut drafts: Vec<Draft> = Vec::with_capacity(p.jobs);
    let mut batches = 0usize;
    while drafts.len() < p.jobs {
        let len = draw_batch_len(&mut rng).min(p.jobs - drafts.len());
        let user = pick(&mut rng, &user_weights) as u32;
        let gpus = if sizes.is_empty() { 0 } else { sizes[pick(&mut rng, &size_weights)].0 };
        let mixed = MIXED_RUNTIMES.iter().find(|(upto, _)| gpus <= *upto).map(|(_, c)| std::slice::from_ref(c));
        let mix = match (p.size_mix, mixed) {
            (SizeMix::Mixed | SizeMix::Gangs | SizeMix::NodeLocal, Some(m)) => m,
            (SizeMix::LongLog, _) => &LONGLOG_RUNTIMES[..],
            _ => runtime_mix(gpus),
        };
        let weights: Vec<f64> = mix.iter().map(|c| c.weight).collect();
        let comp = mix[pick(&mut rng, &weights)];
        for _ in 0..len {
            let runtime_s = draw_runtime_s(&mut rng, &comp, max_s);
            drafts.push(Draft { batch: batches, user, gpus, runtime_s });
        }
        batches += 1;
    }

    // Arrivals: a start time per batch, then 0-5 s gaps inside it.
    let mut rng = rng_for(p.seed, STREAM_GAPS);
    let gaps_s: Vec<i64> = drafts.iter().map(|_| pick(&mut rng, &BATCH_GAP) as i64).collect();
    let submit_s: Vec<i64> = match p.scenario {
        Scenario::Online | Scenario::Gangs | Scenario::NodeLocal => {
            let load = if p.load.is_finite() && p.load > 0.0 { p.load } else { 1.0 };
            let g = cluster_gpus.max(1) as f64;
            let at = |span_s: f64| place(&drafts, &online_starts(p.seed, batches, span_s), &gaps_s, i64::MAX);
            // The window for which the in-window load meets the target, by bisection on a log
            // scale. The load shrinks as the window grows; at the total-work window it is at
            // most the target. If even the shortest window cannot reach it (few jobs), the
            // shortest is used.
            let work: f64 = drafts.iter().map(|d| d.gpus.max(1) as f64 * d.runtime_s as f64).sum();
            let mut hi = (work / (g * load)).max(MIN_WINDOW_S);
            let mut lo = MIN_WINDOW_S;
            if in_window_load(&drafts, &at(lo), lo, g) <= load {
                hi = lo;
            }
            for _ in 0..60 {
                if hi / lo < 1.0 + 1e-6 {
                    break;
                }
                let mid = (lo * hi).sqrt();
                if in_window_load(&drafts, &at(mid), mid, g) > load {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            at(hi)
        }
        Scenario::LongLog => {
            // Batches start by the same modulated Poisson process as `Online`'s, over a window
            // that the work fills to the target load: work / (GPUs x load).
            let load = if p.load.is_finite() && p.load > 0.0 { p.load } else { 1.0 };
            let work: f64 = drafts.iter().map(|d| d.gpus.max(1) as f64 * d.runtime_s as f64).sum();
            let span_s = (work / (cluster_gpus.max(1) as f64 * load)).max(MIN_WINDOW_S);
            place(&drafts, &online_starts(p.seed, batches, span_s), &gaps_s, i64::MAX)
        }
        Scenario::Backlog | Scenario::Mixed => {
            let window_s = (p.window / SECOND).max(0);
            let mut rng = rng_for(p.seed, STREAM_STARTS);
            let mut starts: Vec<i64> =
                (0..batches).map(|_| if window_s == 0 { 0 } else { rng.random_range(0..window_s) }).collect();
            starts.sort_unstable();
            place(&drafts, &starts, &gaps_s, (window_s - 1).max(0))
        }
    };

    // Model classes (the topology scenarios), one per batch, from their own stream.
    let classes: Vec<Option<&str>> = match p.scenario {
        Scenario::Gangs | Scenario::NodeLocal => {
            let mut rng = rng_for(p.seed, STREAM_CLASSES);
            let weights: Vec<f64> = GANG_CLASSES.iter().map(|c| c.1 as f64).collect();
            (0..batches).map(|_| Some(GANG_CLASSES[pick(&mut rng, &weights)].0)).collect()
        }
        _ => Vec::new(),
    };
    // Estimates, from their own stream.
    let mut rng = rng_for(p.seed, STREAM_ESTIMATES);
    for (i, d) in drafts.iter().enumerate() {
        let estimate = if p.estimates {
            let f = exp_draw(&mut rng, ESTIMATE_LN_FACTOR_MEAN).exp();
            Some(round_limit(d.runtime_s as f64 * f))
        } else {
            None
        };
        w.jobs.push(Job {
            id: JobId(i as u32),
            name: String::new(),
            user: d.user,
            group: d.user % groups,
            submit: submit_s[i] * SECOND,
            gpus: d.gpus,
            cpus: None,
            mem_mib: None,
            runtime: d.runtime_s * SECOND,
            estimate,
            priority: None,
            gpu_milli: None,
            queue: None,
            after: vec![],
            failed: false,
            start: None,
            needs: classes
                .get(d.batch)
                .copied()
                .flatten()
                .map(|c| Box::new(ordo_core::GpuNeeds { class: Some(c.to_string()), ..Default::default() })),
        });
    }
    w.renumber();
    for j in &mut w.jobs {
        j.name = format!("j{:06}", j.id.0);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(scenario: Scenario, jobs: usize, seed: u64) -> WorkloadParams {
        WorkloadParams { jobs, seed, ..WorkloadParams::default_for(scenario) }
    }

    fn fraction(w: &Workload, gpus: u32) -> f64 {
        w.jobs.iter().filter(|j| j.gpus == gpus).count() as f64 / w.jobs.len() as f64
    }

    #[test]
    fn bounded_acceptance_decides_as_the_full_rate() {
        let mut rng = rng_for(9, 99);
        let rate_max = MMPP.burst_ratio * (1.0 + DIURNAL_AMPLITUDE) * 1.44;
        for i in 0..1_000_000 {
            let t = rng.random::<f64>() * 90.0 * 86_400.0;
            let level = if i % 2 == 0 { 1.0 } else { MMPP.burst_ratio };
            // Draws near the rate itself too, where the bounds cannot decide.
            let v = if i % 3 == 0 {
                level * calendar_rate(t) * (1.0 + (rng.random::<f64>() - 0.5) * 1e-12)
            } else {
                rng.random::<f64>() * rate_max
            };
            assert_eq!(accepts(t, level, v), v < level * calendar_rate(t), "t {t} level {level} v {v}");
        }
    }

    #[test]
    fn scenario_names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(s.to_string().parse::<Scenario>(), Ok(s));
        }
        assert_eq!(" Backlog ".parse::<Scenario>(), Ok(Scenario::Backlog));
        assert!("philly".parse::<Scenario>().is_err());
    }

    #[test]
    fn deterministic_per_seed() {
        for s in Scenario::ALL {
            let a = generate(&params(s, 2_000, 7), 512);
            let b = generate(&params(s, 2_000, 7), 512);
            let c = generate(&params(s, 2_000, 8), 512);
            assert_eq!(a, b);
            assert_ne!(a, c);
            assert_eq!(a.jobs.len(), 2_000);
        }
        assert_eq!(generate(&WorkloadParams::default(), 512), generate(&WorkloadParams::default(), 512));
    }

    #[test]
    fn estimates_do_not_change_the_jobs() {
        let plain = generate(&params(Scenario::Online, 2_000, 3), 512);
        let est = generate(&WorkloadParams { estimates: true, ..params(Scenario::Online, 2_000, 3) }, 512);
        assert!(!plain.has_estimates());
        assert!(est.has_estimates());
        for (a, b) in plain.jobs.iter().zip(&est.jobs) {
            let e = b.estimate.expect("estimate");
            assert!(e >= b.runtime, "estimate {e} below run time {}", b.runtime);
            assert!(e % (5 * MINUTE) == 0);
            assert_eq!(a, &Job { estimate: None, ..b.clone() });
        }
        // Median estimate / run time near the KTH SP2 log's 2.4.
        let mut r: Vec<f64> =
            est.jobs.iter().map(|j| j.estimate.expect("estimate") as f64 / j.runtime as f64).collect();
        r.sort_by(f64::total_cmp);
        let med = r[r.len() / 2];
        assert!((1.8..3.2).contains(&med), "median estimate ratio {med}");
        assert_eq!(round_limit(1.0), 5 * MINUTE);
        assert_eq!(round_limit(3_600.0), HOUR);
        assert_eq!(round_limit(3_601.0), 2 * HOUR);
        assert_eq!(round_limit(61.0 * 86_400.0 + 1.0), 62 * DAY);
    }

    #[test]
    fn shape_of_every_job() {
        for s in Scenario::ALL {
            let p = params(s, 5_000, 11);
            let w = generate(&p, 512);
            assert_eq!(w.users.len(), 20);
            assert_eq!(w.groups, vec!["g1", "g2", "g3", "g4"]);
            assert_eq!((w.users[0].as_str(), w.users[19].as_str()), ("u01", "u20"));
            for (i, j) in w.jobs.iter().enumerate() {
                assert_eq!(j.id, JobId(i as u32));
                assert_eq!(j.name, format!("j{i:06}"));
                assert!(j.runtime >= SECOND && j.runtime % SECOND == 0);
                assert!(j.runtime <= p.max_runtime);
                assert!(j.submit >= 0 && j.submit % SECOND == 0);
                assert!((1..=512).contains(&j.gpus));
                assert_eq!(j.group, j.user % 4);
                assert_eq!(j.estimate.is_some(), p.estimates);
            }
            assert!(w.jobs.windows(2).all(|p| p[0].submit <= p[1].submit));
            // Zipf shares: the first user has the most jobs.
            let per_user = |u: u32| w.jobs.iter().filter(|j| j.user == u).count();
            assert!(per_user(0) > per_user(19) * 3);
        }
    }

    #[test]
    fn size_mix_matches_the_trace() {
        let total: u32 = SIZE_MIX.iter().map(|s| s.1).sum();
        // About 4 standard deviations for 20k jobs, allowing for batches (the jobs of one batch
        // share their size).
        let tol = [0.025, 0.012, 0.015, 0.015, 0.006, 0.004, 0.002, 0.002];
        for seed in [1, 2, 3] {
            // Backlog arrivals are cheaper to draw; the size mix does not depend on them.
            let p = WorkloadParams { size_mix: SizeMix::Jobs, ..params(Scenario::Backlog, 20_000, seed) };
            let w = generate(&p, 512);
            for (&(g, n), tol) in SIZE_MIX.iter().zip(tol) {
                let (got, want) = (fraction(&w, g), n as f64 / total as f64);
                assert!((got - want).abs() <= tol, "seed {seed}: {g} GPUs: {got:.4} vs {want:.4}");
            }
        }
        // The GPU-weighted mix: half the jobs use one GPU, about a quarter eight.
        let w = generate(&params(Scenario::Backlog, 20_000, 1), 512);
        assert!((fraction(&w, 1) - 0.497).abs() < 0.04, "{}", fraction(&w, 1));
        assert!((fraction(&w, 8) - 0.235).abs() < 0.04, "{}", fraction(&w, 8));
        assert!(fraction(&w, 128) > 0.0);
    }

    #[test]
    fn run_times_match_the_trace() {
        // Median and 90th percentile of the 1-GPU jobs (trace: 1,199 s and 15,589 s) and of the
        // 8-GPU jobs (12,567 s and 365,273 s), within a factor 1.5.
        let w = generate(&WorkloadParams { size_mix: SizeMix::Jobs, ..params(Scenario::Online, 20_000, 4) }, 512);
        for (g, want) in [(1, [1_199.0, 15_589.0]), (8, [12_567.0, 365_273.0])] {
            let mut r: Vec<f64> = w.jobs.iter().filter(|j| j.gpus == g).map(|j| (j.runtime / SECOND) as f64).collect();
            r.sort_by(f64::total_cmp);
            for (q, want) in [0.5, 0.9].into_iter().zip(want) {
                let got = r[(q * r.len() as f64) as usize];
                assert!(got / want < 1.5 && want / got < 1.5, "{g} GPUs, q{q}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn no_job_larger_than_the_cluster() {
        for gpus in [0u64, 1, 3, 8, 20, 100] {
            for s in Scenario::ALL {
                let w = generate(&params(s, 2_000, 5), gpus);
                assert_eq!(w.jobs.len(), 2_000);
                assert!(w.jobs.iter().all(|j| j.gpus as u64 <= gpus), "{gpus} GPUs");
                if gpus >= 20 && s != Scenario::LongLog && s != Scenario::NodeLocal {
                    assert!(w.jobs.iter().any(|j| j.gpus == 16));
                }
            }
        }
    }

    #[test]
    fn small_and_degenerate_inputs() {
        for s in Scenario::ALL {
            assert!(generate(&params(s, 0, 1), 512).jobs.is_empty());
            assert_eq!(generate(&params(s, 1, 1), 512).jobs.len(), 1);
            let odd = WorkloadParams { users: 0, groups: 0, load: f64::NAN, user_skew: -1.0, ..params(s, 50, 1) };
            let w = generate(&odd, 512);
            assert_eq!((w.users.len(), w.groups.len(), w.jobs.len()), (1, 1, 50));
        }
    }

    #[test]
    fn backlog_within_its_window() {
        for seed in 0..5 {
            let p = params(Scenario::Backlog, 1_200, seed);
            let w = generate(&p, 512);
            assert!(w.jobs.iter().all(|j| j.submit == 0));
            let spread = WorkloadParams { window: 5 * MINUTE, ..p.clone() };
            let ws = generate(&spread, 512);
            assert!(ws.jobs.iter().all(|j| (0..5 * MINUTE).contains(&j.submit)));
            assert!(ws.jobs.iter().any(|j| j.submit > 2 * MINUTE));
            assert!(w.jobs.iter().all(|j| j.runtime <= DAY));
            // The work is several times the longest job, so packing (the order) matters.
            let work: f64 = w.jobs.iter().map(|j| j.gpu_time() as f64).sum::<f64>() / 512.0;
            assert!(work > 2.0 * DAY as f64, "seed {seed}: {:.2} days of work", work / DAY as f64);
        }
    }

    #[test]
    fn online_offered_load_near_one() {
        for seed in 0..10 {
            let w = generate(&params(Scenario::Online, 3_000, seed), 512);
            let load = offered_load(&w, 512).expect("span");
            assert!((0.9..=1.1).contains(&load.in_window), "seed {seed}: {load:?}");
            assert!(load.total > load.in_window);
            let days = load.window as f64 / DAY as f64;
            assert!((0.5..8.0).contains(&days), "seed {seed}: {days:.2} days");
        }
        // The target follows `load` and the cluster size.
        let w = generate(&WorkloadParams { load: 0.5, ..params(Scenario::Online, 3_000, 1) }, 2_048);
        let load = offered_load(&w, 2_048).expect("span").in_window;
        assert!((0.45..=0.55).contains(&load), "offered load {load:.3}");
    }

    #[test]
    fn longlog_is_two_years_of_wide_jobs_at_load_074() {
        let p = WorkloadParams::default_for(Scenario::LongLog);
        let gpus = Scenario::LongLog.cluster().total_gpus();
        assert_eq!(gpus, 1024);
        let w = generate(&p, gpus);
        assert_eq!(w.jobs.len(), 122_000);
        let load = offered_load(&w, gpus).expect("span");
        let days = load.window as f64 / DAY as f64;
        assert!((700.0..740.0).contains(&days), "{days:.1} days");
        assert!((0.73..0.75).contains(&load.total), "offered load {:.4}", load.total);
        let total: u32 = LONGLOG_SIZES.iter().map(|s| s.1).sum();
        for &(g, n) in &LONGLOG_SIZES {
            let (got, want) = (fraction(&w, g), n as f64 / total as f64);
            assert!((got - want).abs() < 0.015, "{g} GPUs: {got:.4} vs {want:.4}");
        }
        for j in &w.jobs {
            assert!(j.gpus.is_power_of_two() && (32..=1024).contains(&j.gpus), "{} GPUs", j.gpus);
            assert!(j.runtime >= SECOND && j.runtime <= DAY);
            assert!(j.estimate.expect("every job has an estimate") >= j.runtime);
        }
        // A third of jobs end within about two minutes; the median is near 46 minutes' body.
        let short = w.jobs.iter().filter(|j| j.runtime <= 2 * MINUTE).count() as f64 / w.jobs.len() as f64;
        assert!((0.3..0.45).contains(&short), "{short:.3} of jobs within two minutes");
    }

    #[test]
    fn arrivals_are_bursty() {
        // Hourly job counts are overdispersed (index of dispersion far above Poisson's 1).
        let w = generate(&params(Scenario::Online, 10_000, 2), 512);
        let hours = (w.jobs.last().expect("jobs").submit / HOUR + 1) as usize;
        let mut counts = vec![0f64; hours];
        for j in &w.jobs {
            counts[(j.submit / HOUR) as usize] += 1.0;
        }
        let mean = counts.iter().sum::<f64>() / hours as f64;
        let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / hours as f64;
        assert!(var / mean > 5.0, "index of dispersion {}", var / mean);
    }
}
