//! What ordo knows of a Slurm node and job, whichever way it was read (`squeue` text,
//! `squeue --json`, slurmrestd): [`SlurmNode`], [`SlurmJob`] and its array part.

/// One node as Slurm reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// Node name.
    pub name: String,
    /// GPUs in its `gres` (`gpu:8`, `gpu:a100:4(S:0-1)`, ...).
    pub gpus: u32,
    /// CPUs, if reported.
    pub cpus: Option<u32>,
    /// Memory in MiB, if reported.
    pub mem_mib: Option<u64>,
    /// Slurm's state text (`idle`, `mixed`, `drained`, `down*`, ...).
    pub state: String,
    /// The partitions the node belongs to (a node may be in several).
    pub partitions: Vec<String>,
    /// The types of its GPUs (`gpu:a100:4` in its gres: `a100`), distinct, in gres order;
    /// empty where its GPUs are untyped.
    pub gpu_types: Vec<String>,
    /// Its active features (`ActiveFeatures`; Slurm matches a job's `--constraint` to them).
    pub features: Vec<String>,
}

impl SlurmNode {
    /// True when Slurm will not start jobs on the node (down, drained or draining, failing,
    /// future, powered down): ordo leaves such nodes out of the cluster it plans for.
    pub fn unavailable(&self) -> bool {
        let s = self.state.to_ascii_lowercase();
        ["down", "drain", "fail", "future", "powered_down", "powering_down", "maint", "reserved"]
            .iter()
            .any(|w| s.contains(w))
    }
}

/// A job's state, as far as the driver cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to start.
    Pending,
    /// Holding resources: running, configuring, or completing.
    Running,
    /// Anything else (completed, cancelled, suspended, ...), with Slurm's name.
    Other(String),
}

impl JobState {
    /// Reads Slurm's state name (`PENDING`, `RUNNING`, `COMPLETING`, ...; JSON may list
    /// several, comma-separated, with flags).
    pub fn from_slurm(text: &str) -> JobState {
        let has = |w: &str| text.split(',').any(|x| x.trim() == w);
        if has("PENDING") {
            JobState::Pending
        } else if has("RUNNING") || has("CONFIGURING") || has("COMPLETING") {
            JobState::Running
        } else {
            JobState::Other(text.to_string())
        }
    }
}

/// A job array's part in a [`SlurmJob`] record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayPart {
    /// The array's id (the id of its first record).
    pub array_job_id: u64,
    /// The task of a record that holds one task; `None` for the record of the array's
    /// not-yet-started tasks, which Slurm keeps as one pending job.
    pub task: Option<u32>,
    /// Tasks this record stands for: 1 for a single task, the pending tasks otherwise.
    pub tasks: u64,
    /// At most this many of the array's tasks run at once (`--array=...%N`).
    pub throttle: Option<u32>,
}

/// One job as Slurm reports it, reduced to what ordo needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm job id (for an array, the id of this record).
    pub id: u64,
    /// Pending, running or other.
    pub state: JobState,
    /// Current priority (0 means held).
    pub priority: u64,
    /// The job's nice value (0 unless its user or an administrator set one).
    pub nice: i64,
    /// Time limit in minutes; `None` when unlimited.
    pub time_limit_min: Option<u64>,
    /// Submit time, Unix seconds.
    pub submit: i64,
    /// Start time, Unix seconds (for pending jobs Slurm's expected start, or 0).
    pub start: i64,
    /// User name.
    pub user: String,
    /// Account.
    pub account: String,
    /// The partitions it may run in (a pending job may name several; a running one runs in one).
    pub partitions: Vec<String>,
    /// GPUs in total (for an array's pending record: per task).
    pub gpus: u32,
    /// CPUs in total (per task for an array's pending record); 0 when not known.
    pub cpus: u32,
    /// Memory in MiB in total (per task for an array's pending record); 0 when not known.
    pub mem_mib: u64,
    /// For running jobs: GPUs held on each node it runs on, by node name (0 on a node where it
    /// holds only CPUs).
    pub alloc: Vec<(String, u32)>,
    /// Slurm's reason for a pending job (`Resources`, `Priority`, `JobHeldUser`, ...).
    pub reason: String,
    /// Its place in a job array, if it belongs to one.
    pub array: Option<ArrayPart>,
    /// The GPU types it asks for (`--gres=gpu:a100:2`, `--gpus=a100:2`): any of them; empty:
    /// any type.
    pub gpu_types: Vec<String>,
    /// Its `--constraint` as Slurm shows it (`Features`), if any: read into an
    /// `ordo_trace::Constraint` when it is planned.
    pub constraint: Option<String>,
    /// The most leaf switches it accepts (`--switches=N`; 0: any number). Slurm honours it
    /// under `topology/tree` only, for at most `switch_wait_s`.
    pub switches: u32,
    /// How long Slurm holds it for its `switches` (`--switches=N@TIME`, else the controller's
    /// `max_switch_wait`), in seconds; past that it runs on any number of switches.
    pub switch_wait_s: u64,
}

impl SlurmJob {
    /// True for a pending job ordo may reorder: not held (priority 0 or a `Held` reason) and not
    /// waiting on something other than resources (dependencies, begin time).
    pub fn orderable(&self) -> bool {
        self.state == JobState::Pending
            && self.priority > 0
            && !self.reason.contains("Held")
            && !self.reason.starts_with("Dependency")
            && !self.reason.starts_with("BeginTime")
    }

    /// Tasks this record stands for (1 unless it is an array's pending record).
    pub fn tasks(&self) -> u64 {
        self.array.as_ref().map_or(1, |a| a.tasks.max(1))
    }

    /// The partition it is listed under first: the one whose driver orders it when drivers
    /// split a cluster's partitions between them.
    pub fn first_partition(&self) -> &str {
        self.partitions.first().map_or("", String::as_str)
    }
}

/// Splits Slurm's comma-separated partition list.
pub fn partition_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect()
}

/// Splits Slurm's comma-separated feature list (`(null)`: none).
pub fn feature_list(text: &str) -> Vec<String> {
    match text.trim() {
        "(null)" | "N/A" => Vec::new(),
        t => partition_list(t),
    }
}

/// A job's constraint text as Slurm prints it (`(null)`, `N/A` or empty: none).
pub fn constraint_text(text: &str) -> Option<String> {
    match text.trim() {
        "" | "(null)" | "N/A" => None,
        t => Some(t.to_string()),
    }
}
