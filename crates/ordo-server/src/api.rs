//! The HTTP/JSON wire types shared by the server, the agent and the client.
//! docs/openapi.yaml describes the same shapes; times are milliseconds since the Unix epoch.

use ordo_core::Reason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::activity_api::*;

/// A job id as the server numbers them (1, 2, ...).
pub type JobNo = u64;

/// What to do with a running job whose node stops answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnNodeFailure {
    /// Put it back in the queue at its original place (default).
    #[default]
    Requeue,
    /// Mark it failed.
    Fail,
}

/// `POST /v1/jobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// A name for people; defaults to the command's first word.
    #[serde(default)]
    pub name: Option<String>,
    /// The program and its arguments (run without a shell).
    pub command: Vec<String>,
    /// Working directory on the node (used when it exists there).
    #[serde(default)]
    pub cwd: Option<String>,
    /// GPUs (at least 1, at most one node's GPUs).
    pub gpus: u32,
    /// CPU cores (recorded; not enforced).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory in MiB (recorded; not enforced).
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// Time limit in ms; the job is killed past it. Also the run-time estimate backfill uses.
    #[serde(default)]
    pub time_limit_ms: Option<i64>,
    /// Static priority (default 0; higher first where the policy reads it, e.g. `priority`).
    /// Changed later with `POST /v1/jobs/{id}/priority`.
    #[serde(default)]
    pub priority: Option<i64>,
    /// What to do if its node goes down while it runs.
    #[serde(default)]
    pub on_node_failure: Option<OnNodeFailure>,
    /// Never preempt this job (under preemptive policies it keeps its GPUs until it ends).
    #[serde(default)]
    pub no_preempt: Option<bool>,
    /// The submitter's umask (`ordo submit` sends its own): the job runs under it and its
    /// output files get `0666 & !umask`. Absent: 077 (output readable by its owner only).
    #[serde(default)]
    pub umask: Option<u32>,
    /// Jobs it waits for (`ordo submit --after-ok 12,13 --after-any 14`): it joins the queue
    /// only once every one has ended the way it asks. A dependency that can never be met gets
    /// it cancelled (`DependencyNeverSatisfied`).
    #[serde(default)]
    pub after: Vec<AfterDep>,
    /// A job array (`ordo submit --array 0-999%50`): one element per index, each a job of
    /// its own, all stored in one transaction; `%N` runs at most N at once. Syntax: `A-B`,
    /// `A-B:STEP`, comma lists (`1,3,5-7`), at most 100,000 elements, indices up to 9,999,999.
    #[serde(default)]
    pub array: Option<String>,
    /// A multi-node (gang) job: its `gpus` split evenly over exactly this many nodes, every
    /// rank started together (`ordo submit --nodes 2 --gpus-per-node 8`). Absent or 1: one node.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// Also write the job's output (standard output and error together) to this file on its
    /// node, opened as the job's user (`%j`: the job id, `%A`: the array's id, `%a`: the
    /// element's index, `%%`: `%`); relative to `cwd`. It is still kept for `ordo logs`.
    #[serde(default)]
    pub output: Option<String>,
    /// GPU models it accepts (`ordo submit --gpu-model a100,h100`): it runs only on nodes whose
    /// GPUs are of one of them (`a100` also matches `a100-sxm4-80gb`, see docs/SERVER.md, "GPU
    /// models and constraints"). Empty: any. At most 16.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// Least memory of each of its GPUs, MiB (`--gpu-mem 40G`).
    #[serde(default)]
    pub gpu_mem_mib: Option<u64>,
    /// Node features it needs, all of them (`--feature ib,nvme`). At most 32.
    #[serde(default)]
    pub features: Vec<String>,
    /// Where its nodes must or should be in the cluster's topology (`ordo submit --topology
    /// required:block` / `preferred:switch`): a multi-node job within one unit of that level
    /// (`ordo server --topology-levels`). Absent: as low as it fits, never held for it.
    #[serde(default)]
    pub topology: Option<String>,
    /// How it takes a preemption: its checkpointing, the signal ordo stops it with, and a
    /// minimum run before it may be preempted (`ordo submit --checkpoint --signal --min-run`).
    #[serde(default)]
    pub preempt: Option<PreemptSpec>,
}

/// A job's place in an array: the array's id (its first element's job id) and its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMember {
    /// The array's id: its first element's job id (`ORDO_ARRAY_JOB_ID`).
    pub id: JobNo,
    /// This element's index (`ORDO_ARRAY_INDEX`).
    pub index: u32,
}

/// A job array in a queue listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySummary {
    /// Its id (its first element's job id).
    pub id: JobNo,
    /// Its spec, as stored (`0-999%50`).
    pub spec: String,
    /// How many elements it has.
    pub elements: u32,
    /// The most elements running at once, when limited.
    pub max_running: Option<u32>,
}

/// One dependency of a job on another (Slurm's `--dependency=afterok:ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AfterDep {
    /// `after_ok`: the job must complete with exit code 0; `after_any`: end in any way;
    /// `after_not_ok`: end unsuccessfully (failed, timeout, cancelled, node failure).
    pub kind: ordo_core::DepKind,
    /// The job waited for.
    pub job: JobNo,
}

/// Answer to a submission, sent only once the job is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// The new job's id (for an array, its first element's, which is the array's id; the
    /// elements have the ids `id` to `id + elements - 1`, in index order).
    pub id: JobNo,
    /// For an array: how many elements it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<u32>,
}

/// A job's life: `pending -> starting -> running -> completed | failed | cancelled | timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting in the queue.
    Pending,
    /// Given GPUs on a node; the agent has not yet confirmed the process runs.
    Starting,
    /// The process runs.
    Running,
    /// Running, but the policy preempts it: its agent has been told to stop it; when it has
    /// stopped, it goes back to `pending` (its attained service kept).
    Preempting,
    /// Exited with code 0.
    Completed,
    /// Exited non-zero, or lost with its node (`on_node_failure = fail`).
    Failed,
    /// Cancelled by a user.
    Cancelled,
    /// Killed at its time limit.
    Timeout,
}

impl JobState {
    /// The name used in the database and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Preempting => "preempting",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Timeout => "timeout",
        }
    }

    /// Parses [`JobState::as_str`]'s names.
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "pending" => JobState::Pending,
            "starting" => JobState::Starting,
            "running" => JobState::Running,
            "preempting" => JobState::Preempting,
            "completed" => JobState::Completed,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            "timeout" => JobState::Timeout,
            _ => return None,
        })
    }

    /// Whether the job is over.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Timeout)
    }
}

/// Why a pending job waits, for people and programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitInfo {
    /// One line for people, e.g. "waits behind job 12 (strict order)".
    pub text: String,
    /// The scheduler's reason, when the scheduler holds the job (absent when no node that is up
    /// can hold it).
    pub detail: Option<Reason>,
    /// Jobs ahead of it in the policy's order.
    pub ahead: usize,
    /// Expected start by the running jobs' time limits (backfill reservation), when known.
    pub expected_start: Option<i64>,
}

/// One job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Id.
    pub id: JobNo,
    /// Owner.
    pub user: String,
    /// Name.
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory asked for.
    pub cwd: Option<String>,
    /// GPUs.
    pub gpus: u32,
    /// CPU cores asked for.
    pub cpus: Option<u32>,
    /// Memory asked for (MiB).
    pub mem_mib: Option<u64>,
    /// Time limit (ms).
    pub time_limit_ms: i64,
    /// Static priority.
    pub priority: i64,
    /// What happens if its node goes down.
    pub on_node_failure: OnNodeFailure,
    /// State.
    pub state: JobState,
    /// Submit time.
    pub submit: i64,
    /// Start time of the current or last run.
    pub start: Option<i64>,
    /// End time.
    pub end: Option<i64>,
    /// Node of the current or last run.
    pub node: Option<String>,
    /// GPU indices on that node (`CUDA_VISIBLE_DEVICES`).
    pub gpu_ids: Vec<u32>,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// How it ended, in words.
    pub end_reason: Option<String>,
    /// Times it was started (more than 1 after requeues).
    pub attempts: u32,
    /// A cancel (kill) was asked for and not yet carried out.
    pub cancel_requested: bool,
    /// Who holds the job (`ordo hold`), when it is held: a held job stays pending and out of
    /// the scheduler's queue until it is released.
    #[serde(default)]
    pub held_by: Option<String>,
    /// Never preempted (`ordo submit --no-preempt`).
    #[serde(default)]
    pub no_preempt: bool,
    /// Times it was preempted (or its node failed) and it went back to the queue.
    #[serde(default)]
    pub restarts: u32,
    /// Run time of its earlier, stopped runs, ms (its attained service is `gpus` times this);
    /// kept across preemptions and server restarts.
    #[serde(default)]
    pub executed_ms: i64,
    /// The submitter's umask, when it sent one.
    #[serde(default)]
    pub umask: Option<u32>,
    /// For a pending job in a queue listing or explain: why it waits.
    pub wait: Option<WaitInfo>,
    /// The jobs it waits for (as submitted; see [`SubmitRequest::after`]).
    #[serde(default)]
    pub after: Vec<AfterDep>,
    /// What its GPUs really did (busy %, memory), when its node's agent reports GPU activity.
    #[serde(default)]
    pub activity: Option<JobActivity>,
    /// Its array and index, when it is an element of a job array.
    #[serde(default)]
    pub array: Option<ArrayMember>,
    /// Nodes it runs on: 1, or a multi-node (gang) job's node count; 0: as many as the
    /// placement splits it over (it asked more GPUs than any node has, without a node count;
    /// `ranks` then says which, each with its own GPU count).
    #[serde(default = "one")]
    pub nodes: u32,
    /// A multi-node job's ranks of its current or last run (rank 0 first); empty otherwise
    /// (`node` and `gpu_ids` are then its one node's). For a gang, `node` and `gpu_ids` are
    /// rank 0's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<Rank>,
    /// A multi-node job being stopped (one rank failed, or a node died): how it will end once
    /// every rank has stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_stop: Option<GangStop>,
    /// The file on its node its output is also written to (`ordo submit --output`), as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// GPU models it accepts (as [`SubmitRequest::gpu_models`], names lowercased); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
    /// Least memory of each of its GPUs, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// Node features it needs (lowercased, sorted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Its topology ask (as [`SubmitRequest::topology`], checked: `required:LEVEL` or
    /// `preferred:LEVEL`, the level lowercased).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// How it takes a preemption, as submitted (checked); `None`: the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt: Option<PreemptSpec>,
    /// Of `executed_ms`, the run time whose work its preemptions lost (by its checkpoint rule:
    /// all of it for `none`, the time since the last checkpoint for `every:T`), ms. SRTF counts
    /// its work left from `executed_ms - lost_ms`.
    #[serde(default)]
    pub lost_ms: i64,
}

/// How a job takes a preemption (`ordo submit --checkpoint RULE --signal SIG --min-run D`;
/// docs/SERVER.md, "Checkpoints").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptSpec {
    /// How its work survives a preemption: `continuous` (it resumes where it stopped),
    /// `none` (it restarts from zero), `every:30m` (from its last periodic checkpoint),
    /// `signal:2m` (it saves when signalled and is given that long, at most
    /// [`MAX_STOP_GRACE_MS`], to exit). Absent: `continuous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The signal ordo stops it with (preemption, cancel, time limit) before SIGKILL: `TERM`
    /// (the default), `INT`, `HUP`, `USR1` or `USR2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// It is not preempted before each of its runs has lasted this long, ms (the server's
    /// `min_run` if that is longer); at most [`MAX_JOB_MIN_RUN_MS`] and its time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_run_ms: Option<i64>,
}

/// The longest a job may ask to be given between its stop signal and SIGKILL (`signal:G`).
pub const MAX_STOP_GRACE_MS: i64 = 10 * 60 * 1000;
/// The longest minimum run a job may ask for.
pub const MAX_JOB_MIN_RUN_MS: i64 = 24 * 3600 * 1000;
/// The signals a job may ask to be stopped with.
pub const STOP_SIGNALS: [&str; 5] = ["TERM", "INT", "HUP", "USR1", "USR2"];

impl PreemptSpec {
    /// Checks it against the bounds, for a job with this time limit: its checkpoint rule, a
    /// grace at most [`MAX_STOP_GRACE_MS`], a known signal, a minimum run within bounds.
    pub fn check(&self, time_limit_ms: i64) -> Result<(), String> {
        let c = self.rule()?;
        if let ordo_core::Checkpoint::Signal(g) = c {
            if g > MAX_STOP_GRACE_MS {
                return Err(format!(
                    "checkpoint: a grace of {} s is more than the {} s allowed",
                    g / 1000,
                    MAX_STOP_GRACE_MS / 1000
                ));
            }
        }
        if let Some(sig) = &self.signal {
            if !STOP_SIGNALS.contains(&sig.as_str()) {
                return Err(format!("signal: `{}` is not one of {}", sig.escape_debug(), STOP_SIGNALS.join(", ")));
            }
        }
        if let Some(m) = self.min_run_ms {
            if !(0..=MAX_JOB_MIN_RUN_MS.min(time_limit_ms)).contains(&m) {
                return Err(format!(
                    "min_run_ms: {m} is not between 0 and {} (24 h, and at most the time limit)",
                    MAX_JOB_MIN_RUN_MS.min(time_limit_ms)
                ));
            }
        }
        Ok(())
    }

    /// Its checkpoint rule (`continuous` when absent).
    pub fn rule(&self) -> Result<ordo_core::Checkpoint, String> {
        match &self.checkpoint {
            None => Ok(ordo_core::Checkpoint::Continuous),
            Some(c) if c.len() > 64 => Err("checkpoint: longer than 64 bytes".into()),
            Some(c) => c.parse().map_err(|e| format!("checkpoint {e}")),
        }
    }

    /// How long ordo waits between its stop signal and SIGKILL, when the job says (`signal:G`).
    pub fn grace_ms(&self) -> Option<u64> {
        match self.rule() {
            Ok(ordo_core::Checkpoint::Signal(g)) => Some(g as u64),
            _ => None,
        }
    }

    /// How long each of its runs is protected from preemption beyond the server's `min_run`:
    /// its own minimum run, and for `every:T` until its run has saved once (T).
    pub fn run_floor(&self) -> i64 {
        let every = match self.rule() {
            Ok(ordo_core::Checkpoint::Every(t)) => t,
            _ => 0,
        };
        self.min_run_ms.unwrap_or(0).max(every)
    }
}

fn one() -> u32 {
    1
}

impl JobInfo {
    /// What it asks of its GPUs beyond their number, as ordo-core takes it; `None` when it
    /// takes any GPU.
    pub fn needs(&self) -> Option<ordo_core::GpuNeeds> {
        let n = ordo_core::GpuNeeds {
            models: self.gpu_models.clone(),
            min_mem_mib: self.gpu_mem_mib.unwrap_or(0),
            features: self.features.clone(),
            ..ordo_core::GpuNeeds::default()
        };
        n.constrains().then_some(n)
    }

    /// Its id as users name it everywhere (CLI, dashboard, API paths): `125`, or `123_2` for
    /// element 2 of array 123.
    pub fn id_text(&self) -> String {
        match self.array {
            Some(a) => format!("{}_{}", a.id, a.index),
            None => self.id.to_string(),
        }
    }

    /// Its rank on `node` in its current or last run: 0 for a one-node job on that node.
    pub fn rank_on(&self, node: &str) -> Option<usize> {
        if self.ranks.is_empty() {
            (self.node.as_deref() == Some(node)).then_some(0)
        } else {
            self.ranks.iter().position(|r| r.node == node)
        }
    }

    /// The nodes of its current or last run (rank order).
    pub fn run_nodes(&self) -> Vec<String> {
        if self.ranks.is_empty() {
            self.node.iter().cloned().collect()
        } else {
            self.ranks.iter().map(|r| r.node.clone()).collect()
        }
    }
}

/// One rank of a multi-node job: its node and GPUs there, and how far its process got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank {
    /// The node.
    pub node: String,
    /// GPU indices on that node.
    pub gpu_ids: Vec<u32>,
    /// Its agent confirmed the process started.
    #[serde(default)]
    pub started: bool,
    /// Its process ended (or never will start: the job is being stopped, or its node died).
    #[serde(default)]
    pub ended: bool,
    /// Rank 0's only: the rendezvous port (`MASTER_PORT`) its agent found free on its node and
    /// reported with the rank's start; the other ranks start once it is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// How a multi-node job ends once all its ranks have stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangStop {
    /// `failed` or `timeout`; `pending`: requeued (or failed, per `on_node_failure`).
    pub state: JobState,
    /// Why, in words (which rank, which node).
    pub reason: String,
    /// The failing rank's exit code.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// What one rank of a multi-node job learns when its agent starts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangAssign {
    /// This rank (`ORDO_NODE_RANK`).
    pub rank: u32,
    /// Every rank's node, rank order (`ORDO_NODELIST`).
    pub nodes: Vec<String>,
    /// Rank 0's node's address (`MASTER_ADDR`).
    pub master_addr: String,
    /// The rendezvous port on rank 0's node (`MASTER_PORT`). `None` for rank 0 itself: its agent
    /// chooses a port it finds free on its node and reports it ([`RunningJob::port`]); the
    /// other ranks are sent only once it has.
    pub master_port: Option<u16>,
    /// GPUs of the whole job (`WORLD_SIZE`).
    pub world_size: u32,
}

/// `GET /v1/jobs`: the queue in the order the policy will run it (running jobs first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueResponse {
    /// The policy in force.
    pub policy: String,
    /// Running and starting jobs, then pending jobs in policy order.
    pub jobs: Vec<JobInfo>,
    /// The arrays the listed jobs belong to.
    #[serde(default)]
    pub arrays: Vec<ArraySummary>,
}

/// `GET /v1/nodes` element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// GPUs.
    pub gpus: u32,
    /// Whether the GPUs are fake (`--gpus N` on a machine without NVML).
    pub fake: bool,
    /// GPU model, when known (lowercased: `h200`, `a100-sxm4-80gb`).
    pub gpu_model: Option<String>,
    /// Memory of each GPU, MiB, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// The node's features (`ordo agent --feature ib,nvme`), lowercased and sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Its place in the cluster's topology: the unit of each level it is in (`ordo agent
    /// --topology block=nvl0,switch=leaf3`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
    /// `up` or `down`.
    pub state: String,
    /// Why it takes no new work, when it does not (drained by its agent: a full or unwritable
    /// work directory, a job whose processes could not be killed). Its running jobs go on.
    #[serde(default)]
    pub drain: Option<String>,
    /// Last heartbeat.
    pub last_seen: i64,
    /// GPUs not held by a job.
    pub free_gpus: u32,
    /// Jobs on it.
    pub jobs: Vec<JobNo>,
    /// The same, as users name them (`123_2` for element 2 of array 123).
    #[serde(default)]
    pub job_ids: Vec<String>,
    /// CPU cores the agent offers, when it reported them.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory the agent offers, MiB, when it reported it.
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// CPU cores asked for by the jobs on it.
    #[serde(default)]
    pub used_cpus: u32,
    /// Memory asked for by the jobs on it, MiB.
    #[serde(default)]
    pub used_mem_mib: u64,
    /// Whether the agent enforces memory limits (a writable cgroup); without one, `--mem` is
    /// only reserved, not enforced.
    #[serde(default)]
    pub mem_limits: bool,
    /// Mean busy % of its GPUs that have a fresh activity sample (none: no agent reports).
    #[serde(default)]
    pub busy_pct: Option<f64>,
    /// Its jobs flagged allocated-but-idle.
    #[serde(default)]
    pub idle_jobs: Vec<JobNo>,
    /// An admin's cordon or drain, when one is in force (`ordo node cordon|drain`).
    #[serde(default)]
    pub maint: Option<NodeMaint>,
    /// One word for what it does now: `up` (takes work), `down`, `cordoned` (an admin's: no new
    /// work), `draining` (an admin's drain, jobs still on it), `drained` (the same, no job
    /// left) or `problem` (its agent reports one, `drain`).
    #[serde(default)]
    pub status: String,
}

/// An admin's cordon or drain of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMaint {
    /// `cordon` (no new work; running jobs go on) or `drain` (no new work; running jobs go on
    /// until `deadline`, then are stopped and requeued).
    pub kind: MaintKind,
    /// Why, as the admin gave it.
    pub reason: String,
    /// The admin who set it.
    pub by: String,
    /// When it was set, ms since the epoch.
    pub since: i64,
    /// For a drain: when the jobs still on the node are stopped and requeued (ms since the
    /// epoch); none: they run to their end.
    #[serde(default)]
    pub deadline: Option<i64>,
}

/// What an admin's maintenance does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaintKind {
    /// No new work; running jobs go on.
    Cordon,
    /// No new work; running jobs go on until the deadline, if any.
    Drain,
}

impl MaintKind {
    /// `cordon` or `drain`.
    pub fn as_str(self) -> &'static str {
        match self {
            MaintKind::Cordon => "cordon",
            MaintKind::Drain => "drain",
        }
    }
}

/// `POST /v1/nodes/{name}/maintenance`: cordon, drain or resume a node (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeMaintRequest {
    /// `cordon`, `drain` or `resume`.
    pub action: String,
    /// Why (required for cordon and drain; at most 4,096 bytes).
    #[serde(default)]
    pub reason: Option<String>,
    /// For a drain: stop and requeue the jobs still on the node this many ms from now (at
    /// most 366 days); none: they run to their end.
    #[serde(default)]
    pub deadline_ms: Option<i64>,
}

/// `PUT /v1/policy` and `GET /v1/policy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    /// A policy name such as `fifo+easy`.
    pub policy: String,
}

/// `PUT /v1/policy`: a new policy, tried first with `dry_run`. A change that would preempt
/// running jobs at once is refused unless `preempt_now` is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyChange {
    /// A policy name such as `fifo+easy`.
    pub policy: String,
    /// Only say what the change would do now; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Apply it even though it preempts running jobs at once.
    #[serde(default)]
    pub preempt_now: bool,
    /// Why the order changes: required for a change that is made (a dry run needs none), kept
    /// in the audit log with who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to `PUT /v1/policy`: the policy in force afterwards and what the new policy's
/// first decision does (or would do, with `dry_run`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChanged {
    /// The policy in force after the request (unchanged by a dry run).
    pub policy: String,
    /// Whether the change was made.
    #[serde(default)]
    pub applied: bool,
    /// The policy asked for, as parsed.
    #[serde(default)]
    pub asked: String,
    /// Running jobs it preempts at once (ids as users write them), with how long each has run.
    #[serde(default)]
    pub preempt: Vec<PolicyEffect>,
    /// Waiting jobs it starts at once.
    #[serde(default)]
    pub start: Vec<PolicyEffect>,
    /// Waiting jobs whose place in the queue it changes.
    #[serde(default)]
    pub reordered: usize,
    /// The first waiting jobs in the queue's order before and after (at most 20 each).
    #[serde(default)]
    pub order_before: Vec<String>,
    /// See `order_before`.
    #[serde(default)]
    pub order_after: Vec<String>,
}

/// A job a policy change acts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEffect {
    /// The job's id as users write it (`123_2`).
    pub job: String,
    /// Its owner.
    pub user: String,
    /// For a preempted job: how long it has run, ms.
    #[serde(default)]
    pub ran_ms: Option<i64>,
}

/// `POST /v1/jobs/{id}/priority`: a job's new static priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityBody {
    /// The new priority (higher runs first where the policy reads it).
    pub priority: i64,
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Sequence number.
    pub id: i64,
    /// When.
    pub time: i64,
    /// Who: a user name, `scheduler` or `node:NAME`.
    pub actor: String,
    /// What: `submit`, `start`, `skip`, `cancel`, `hold`, `release`, `priority`, `end`, `requeue`,
    /// `policy`, `node`.
    pub kind: String,
    /// The job concerned.
    pub job: Option<JobNo>,
    /// The policy in force.
    pub policy: String,
    /// Details (the scheduler's reason, allocation, old and new policy, ...).
    pub detail: serde_json::Value,
}

/// `POST /v1/agent/register`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Node name (unique).
    pub node: String,
    /// GPUs on the node.
    pub gpus: u32,
    /// Whether they are fake.
    pub fake: bool,
    /// GPU model, when known: NVML's name of its GPUs, or `ordo agent --gpu-model` (the server
    /// keeps it lowercased, a leading `NVIDIA ` dropped, spaces made `-`). At most 128 bytes.
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// Memory of each GPU, MiB, when known (NVML's total memory, or `--gpu-mem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// The node's features (`--feature ib,nvme`): at most 32, each at most 64 bytes of ASCII
    /// letters, digits and `. _ - : = /`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Its place in the cluster's topology (`--topology block=nvl0,switch=leaf3`): the unit of
    /// each level it is in, levels among the server's `topology_levels`. At most 8 entries,
    /// names as features are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
    /// CPU cores the node offers to jobs.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory the node offers to jobs, MiB.
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// Whether the agent can enforce memory limits (it found a writable cgroup).
    #[serde(default)]
    pub mem_limits: bool,
    /// The agent's clock when it sent this (ms since the epoch): the server refuses an agent
    /// whose clock is further off its own than `max_clock_skew`, since it checks every time an
    /// agent reports against its own clock.
    #[serde(default)]
    pub clock: Option<i64>,
    /// The address other nodes reach this one at (`ordo agent --addr`): a multi-node job's
    /// `MASTER_ADDR` when its rank 0 runs here. Absent: the node's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// Answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// How often to poll (each poll is a heartbeat), ms.
    pub heartbeat_ms: u64,
    /// After how long without a heartbeat the node is declared down, ms.
    pub node_timeout_ms: u64,
    /// The lease, ms: a job keeps running only while its agent has had an answer to a poll
    /// sent less than this long ago (its supervisor kills it otherwise). The server declares a
    /// node down, and starts its jobs elsewhere, only once it has heard nothing from it for the
    /// lease and a grace (`fence_grace_ms`), so that no job runs in two places at once.
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// The grace the server adds to the lease, ms.
    #[serde(default)]
    pub fence_grace_ms: Option<u64>,
}

/// A job the agent runs, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningJob {
    /// The job.
    pub job: JobNo,
    /// When its process started.
    pub started_at: i64,
    /// The run (`Assignment::attempt`) the process belongs to; 0: not said. A process of an
    /// earlier run of a multi-node job (still being stopped) is then told apart from the new one.
    #[serde(default)]
    pub attempt: u32,
    /// Rank 0 of a multi-node job: the rendezvous port (`MASTER_PORT`) the agent chose for it,
    /// free on this node when it probed it (see [`GangAssign::master_port`]). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// `POST /v1/agent/poll`: heartbeat, reconciliation and (long-poll) work request in one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    /// Node name.
    pub node: String,
    /// Every job whose process this agent runs (or ran and has not yet had its end acknowledged).
    pub running: Vec<RunningJob>,
    /// How long the server may hold the request when there is nothing to do, ms.
    #[serde(default)]
    pub wait_ms: u64,
    /// Why the node cannot take new work now (its work directory cannot be written or is full,
    /// a job's processes could not be killed), in words; `None` when it can. While it is set,
    /// the server starts nothing new there (the node drains itself); running jobs go on.
    #[serde(default)]
    pub problem: Option<String>,
}

/// A job to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The job.
    pub job: JobNo,
    /// Owner.
    pub user: String,
    /// Name.
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory asked for.
    pub cwd: Option<String>,
    /// GPU indices on this node.
    pub gpu_ids: Vec<u32>,
    /// Time limit, ms.
    pub time_limit_ms: i64,
    /// Which run of the job this is (1 for the first; more after requeues).
    pub attempt: u32,
    /// Times the job was preempted or requeued before this run (`ORDO_RESTARTS`).
    #[serde(default)]
    pub restarts: u32,
    /// CPU cores asked for (the agent pins the job to that many cores of its own).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory asked for, MiB (the agent's memory limit, where it can enforce one).
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// The submitter's umask (the job runs under it; its output files get `0666 & !umask`).
    #[serde(default)]
    pub umask: Option<u32>,
    /// Its array and index, for an element of a job array (`ORDO_ARRAY_JOB_ID`,
    /// `ORDO_ARRAY_INDEX`).
    #[serde(default)]
    pub array: Option<ArrayMember>,
    /// How many elements its array has (`ORDO_ARRAY_TASK_COUNT`).
    #[serde(default)]
    pub array_count: Option<u32>,
    /// A multi-node job's rank here and its peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangAssign>,
    /// The file its output is also written to, its `%` patterns replaced, opened as its user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The signal to stop it with before SIGKILL (`TERM` when absent; [`PreemptSpec::signal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// How long to wait between that signal and SIGKILL, ms (the agent's `--grace` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
}

impl JobInfo {
    /// Its `--output` path with `%j`, `%A`, `%a` and `%%` replaced.
    pub fn output_path(&self) -> Option<String> {
        let p = self.output.as_deref()?;
        let mut out = String::with_capacity(p.len() + 8);
        let mut chars = p.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('j') => out.push_str(&self.id.to_string()),
                Some('A') => out.push_str(&self.array.map_or(self.id, |a| a.id).to_string()),
                Some('a') => out.push_str(&self.array.map_or(0, |a| a.index).to_string()),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        Some(out)
    }
}

/// Answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PollResponse {
    /// Jobs to start.
    pub start: Vec<Assignment>,
    /// Jobs to kill (cancelled, or no longer this node's).
    pub kill: Vec<JobNo>,
    /// Pieces of jobs' output users asked for (`ordo logs`): the agent answers each with
    /// `POST /v1/agent/logs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<LogAsk>,
}

/// Most bytes of output one `ordo logs` request reads.
pub const MAX_LOG_CHUNK: u64 = 256 * 1024;

/// Which of a job's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// Standard output (`job-N.out` in the agent's work directory).
    #[default]
    Out,
    /// Standard error (`job-N.err`).
    Err,
}

impl LogStream {
    /// The output file's extension.
    pub fn ext(self) -> &'static str {
        match self {
            LogStream::Out => "out",
            LogStream::Err => "err",
        }
    }
}

/// A piece of a job's output the server asks an agent for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAsk {
    /// The server's number for the request, given back with the answer.
    pub ask: u64,
    /// The job.
    pub job: JobNo,
    /// Which stream.
    pub stream: LogStream,
    /// From this byte.
    pub offset: u64,
    /// At most this many bytes (at most [`MAX_LOG_CHUNK`]).
    pub max: u64,
}

/// `POST /v1/agent/logs`: an agent's answer to a [`LogAsk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogChunk {
    /// The agent's node.
    pub node: String,
    /// The request answered.
    pub ask: u64,
    /// The bytes read, as text (invalid UTF-8 replaced).
    pub data: String,
    /// The offset after the bytes read.
    pub next: u64,
    /// The file's size now.
    pub size: u64,
    /// Where the output is on the node.
    pub path: String,
    /// Why nothing could be read (no such file).
    #[serde(default)]
    pub error: Option<String>,
}

/// `GET /v1/jobs/{id}/logs`: a piece of a job's output, read from its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLogs {
    /// The job, as users write it (`123_2`).
    pub job: String,
    /// The node its (last) run was on: for a multi-node job, rank 0's.
    pub node: String,
    /// The file on that node.
    pub path: String,
    /// Which stream.
    pub stream: LogStream,
    /// The bytes read, from `offset` (invalid UTF-8 replaced).
    pub data: String,
    /// Where they start.
    pub offset: u64,
    /// Where the next read starts.
    pub next: u64,
    /// The file's size when read.
    pub size: u64,
    /// Whether the job has ended (its output no longer grows).
    pub ended: bool,
}

/// How a job's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It exited by itself (or by a signal it was not sent by ordo).
    Exited,
    /// ordo killed it at its time limit.
    Timeout,
    /// ordo killed it on request (cancel or preemption).
    Killed,
    /// It could not be started (bad command, missing program).
    SpawnFailed,
    /// The kernel killed it at its memory limit (`--mem`, enforced through a cgroup).
    OutOfMemory,
    /// The agent would not start it (not enough free CPU cores there, its work directory
    /// cannot be written); the job is requeued.
    Refused,
    /// Its node lost contact with the server for longer than its lease, so ordo stopped it
    /// (the server may start it elsewhere once the lease and a grace have passed); handled as a
    /// node failure.
    LeaseExpired,
}

/// `POST /v1/agent/report`: a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndReport {
    /// Node name.
    pub node: String,
    /// The job.
    pub job: JobNo,
    /// Which run of the job (from the [`Assignment`]).
    #[serde(default)]
    pub attempt: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Exit code, if it exited.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Signal that ended it, if any.
    #[serde(default)]
    pub signal: Option<i32>,
    /// When it started.
    pub started_at: i64,
    /// When it ended.
    pub ended_at: i64,
    /// Words for people (spawn error text).
    #[serde(default)]
    pub message: Option<String>,
}

/// `POST /v1/admin/tokens` (admins): a new token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    /// The user (or node, for an agent token) it speaks for.
    pub user: String,
    /// Its role.
    pub role: crate::auth::Role,
    /// It stops working this long after now, ms (absent: never).
    #[serde(default)]
    pub expires_in_ms: Option<i64>,
}

/// Answer to [`TokenCreate`]: the token, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreated {
    /// Its id.
    pub id: i64,
    /// The token itself (`ordo_<id>_<secret>`).
    pub token: String,
    /// Who it speaks for.
    pub user: String,
    /// Its role.
    pub role: crate::auth::Role,
    /// When it expires.
    pub expires: Option<i64>,
}

/// `POST /v1/admin/tokens/revoke` (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRevoke {
    /// A token id, or a user (or node) name: all of that user's tokens.
    pub target: String,
}

/// Answer to [`TokenRevoke`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensRevoked {
    /// The ids revoked now (a token already revoked is not listed).
    pub revoked: Vec<i64>,
}

/// Any error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// Most bytes of a job's name.
pub const MAX_NAME_BYTES: usize = 200;
/// The most nodes one multi-node job may ask for (`--nodes`).
pub const MAX_GANG_NODES: u32 = 64;
/// Most bytes of a job's working directory (Linux's `PATH_MAX`).
pub const MAX_CWD_BYTES: usize = 4096;
/// Most bytes of a GPU model name.
pub const MAX_GPU_MODEL_BYTES: usize = 128;
/// Most bytes of the words an agent sends with an end report.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Most jobs one poll may list as running on its node.
pub const MAX_POLL_JOBS: usize = 65_536;
/// Most bytes of a policy name.
pub const MAX_POLICY_BYTES: usize = 1024;
/// Most bytes of a request body (a submission's command is at most `max_command_bytes`, 64 KiB
/// by default; the rest of every request is small).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Refuses a string field longer than `max` bytes or holding a NUL, naming the field.
pub fn bounded(field: &str, v: &str, max: usize) -> Result<(), crate::state::ApiError> {
    if v.len() > max {
        return Err(crate::state::ApiError::BadRequest(format!(
            "field `{field}`: {} bytes, more than the limit of {max}",
            v.len()
        )));
    }
    if v.contains('\0') {
        return Err(crate::state::ApiError::BadRequest(format!("field `{field}`: may not contain NUL")));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
