//! The wire types of live GPU activity: what agents sample and send, a job's figures, each GPU's
//! status now, the cluster's utilisation over time and GPU-hours per user and group.

use crate::api::JobNo;
use serde::{Deserialize, Serialize};

/// Most GPU samples in one activity report (the most GPUs a node may register).
pub const MAX_ACTIVITY_GPUS: usize = 1024;
/// Largest GPU memory figure accepted, MiB (16 TiB; the largest GPUs have a few hundred GiB).
pub const MAX_GPU_MEM_MIB: u64 = 16 * 1024 * 1024;
/// Largest power draw accepted, watts.
pub const MAX_GPU_POWER_W: f64 = 10_000.0;
/// Shortest time between two activity reports of one node that the server takes, ms.
pub const MIN_ACTIVITY_INTERVAL_MS: i64 = 500;

/// `POST /v1/agent/activity`: one sample of some or all of a node's GPUs, taken now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityReport {
    /// Node name (the agent token's own).
    pub node: String,
    /// One sample per GPU (each GPU at most once).
    pub gpus: Vec<GpuSample>,
}

/// What one GPU did over the last sampling period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    /// The GPU's index on its node (as in `CUDA_VISIBLE_DEVICES`, PCI bus order).
    pub gpu: u32,
    /// Busy: the share of the period during which a kernel ran (NVML `utilization.gpu`), 0-100.
    pub util_pct: f64,
    /// SM activity where the driver gives it (NVML's per-process SM utilisation, summed), 0-100.
    #[serde(default)]
    pub sm_pct: Option<f64>,
    /// Device memory in use, MiB.
    #[serde(default)]
    pub mem_used_mib: Option<u64>,
    /// Device memory in all, MiB.
    #[serde(default)]
    pub mem_total_mib: Option<u64>,
    /// Power draw, watts.
    #[serde(default)]
    pub power_w: Option<f64>,
}

/// A job's GPU activity over its runs so far (`JobInfo.activity`): every sample of every GPU
/// it held counts once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobActivity {
    /// GPU samples taken (one per GPU per report).
    pub samples: u64,
    /// Mean busy % over those samples.
    pub mean_busy_pct: f64,
    /// 10th percentile of busy % over those samples (nearest rank, whole percents): 90% of the
    /// samples were at least this busy.
    pub p10_busy_pct: f64,
    /// Most device memory in use on any of its GPUs, MiB, when reported.
    pub peak_mem_mib: Option<u64>,
    /// While it runs: since when every report found its GPUs under the idle threshold.
    pub idle_since: Option<i64>,
    /// While it runs: when it was flagged allocated-but-idle (under the threshold for
    /// `idle_after`); cleared when it gets busy again.
    pub idle_flagged: Option<i64>,
    /// While it is flagged and the server's reclaim rule covers it: when it will be reclaimed
    /// (flag + grace), unless it gets busy again.
    #[serde(default)]
    pub reclaim_at: Option<i64>,
    /// ... and how: `cancel` or `requeue`.
    #[serde(default)]
    pub reclaim_action: Option<String>,
}

/// One GPU now (`GET /v1/gpus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// Node.
    pub node: String,
    /// Index on the node.
    pub gpu: u32,
    /// Whether the node is up.
    pub up: bool,
    /// The job holding it.
    pub job: Option<JobNo>,
    /// That job's owner.
    pub user: Option<String>,
    /// The latest sample, when one is fresh (taken within three sampling periods).
    pub sample: Option<GpuSample>,
    /// When that sample arrived (server clock).
    pub sampled_at: Option<i64>,
    /// The job holding it is flagged allocated-but-idle.
    pub idle: bool,
}

/// A job flagged allocated-but-idle: it holds GPUs and kept them under the threshold for
/// `idle_after`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleJob {
    /// Job.
    pub job: JobNo,
    /// Owner.
    pub user: String,
    /// Name.
    pub name: String,
    /// Node (a multi-node job's rank 0's).
    pub node: String,
    /// Its GPUs there.
    pub gpu_ids: Vec<u32>,
    /// A multi-node job's every rank: its node and GPUs there, rank order (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<IdleRank>,
    /// Under the threshold since.
    pub idle_since: i64,
    /// Flagged at.
    pub flagged_at: i64,
    /// Mean busy % of its GPUs since `idle_since`.
    pub busy_pct: f64,
}

/// One rank of an allocated-but-idle multi-node job: its node and GPUs there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleRank {
    /// Node.
    pub node: String,
    /// Its GPUs there.
    pub gpu_ids: Vec<u32>,
}

/// `GET /v1/gpus`: every GPU of every known node, and the allocated-but-idle jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpusResponse {
    /// The idle threshold, busy %.
    pub idle_threshold_pct: f64,
    /// How long a job stays under it before it is flagged, ms.
    pub idle_after_ms: i64,
    /// GPUs, by node (registration order) and index.
    pub gpus: Vec<GpuStatus>,
    /// Jobs flagged allocated-but-idle, by job id.
    pub idle: Vec<IdleJob>,
}

/// One bucket of the cluster's utilisation series: means over the bucket, in GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtilPoint {
    /// Start of the bucket (ms since the epoch).
    pub t: i64,
    /// GPUs on nodes that were up.
    pub gpus: f64,
    /// GPUs held by jobs.
    pub allocated: f64,
    /// Busy GPUs: the sum of busy fractions of the GPUs with a fresh sample.
    pub busy: f64,
    /// GPUs with a fresh sample (busy counts only those).
    pub sampled: f64,
    /// GPUs held by jobs flagged allocated-but-idle.
    pub idle_allocated: f64,
}

/// `GET /v1/utilization?span=1d|14d`: the cluster's series over the span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtilizationResponse {
    /// The span asked for, ms.
    pub span_ms: i64,
    /// Bucket length, ms.
    pub resolution_ms: i64,
    /// Buckets in time order (the last one still filling).
    pub points: Vec<UtilPoint>,
}

/// GPU-hours of one user or group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// User or group.
    pub name: String,
    /// GPU-hours its jobs held in the span.
    pub gpu_hours: f64,
    /// Share of all GPU-hours held in the span (0-1).
    pub share: f64,
}

/// `GET /v1/usage?span=1d|14d`: GPU-hours held per user and per group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageResponse {
    /// Start of the span.
    pub since: i64,
    /// End of the span (now).
    pub until: i64,
    /// GPU-hours held by all jobs in the span.
    pub total_gpu_hours: f64,
    /// Per user, most first.
    pub users: Vec<Usage>,
    /// Per group, most first (the server has no groups yet: a user is their own group, as for
    /// the scheduler's fair-share policies).
    pub groups: Vec<Usage>,
}

/// `GET /v1/whoami`: who the token speaks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// User (or node) name.
    pub user: String,
    /// Role.
    pub role: crate::auth::Role,
}
