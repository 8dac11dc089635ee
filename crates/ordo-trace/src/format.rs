//! [`Format`]: the trace formats ordo reads, their columns, and detection from the first line
//! and the file name.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A trace format. See `docs/TRACES.md` for every format's columns and how they become jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Detect the format from the first line and the file name (see [`Format::detect_line`]).
    #[default]
    Auto,
    /// ordo's own CSV: a header naming `job_id,submit_time,num_gpu,duration` (required) and
    /// `user,group,estimate,priority,cpus,mem_mib,gpu_milli,queue,after,state,start_time` (optional),
    /// in any order.
    /// Times are seconds (fractions allowed); an empty optional cell means "absent"; a missing
    /// user or group is `"default"`.
    Generic,
    /// ordo's JSON Lines: one object per line with the `generic` columns as keys.
    Jsonl,
    /// The Philly trace as published by RFold: header
    /// `#job id,arrival time (sec),topology,shape,size,duration (sec)`; `size` is the GPU count.
    Philly,
    /// Philly with virtual clusters (Sia artifacts): `timestamp,duration,num_gpus,gpu_time,cluster`;
    /// wall-clock timestamps; `cluster` becomes the job's user and group.
    PhillyVc,
    /// Alibaba GPU cluster trace 2023 pod list (`openb_pod_list_*.csv`): fractional GPUs, CPU and
    /// memory requests, QoS class as the queue.
    Alibaba,
    /// Alibaba GPU-disaggregated DLRM trace 2025 (`cluster-trace-gpu-v2025`,
    /// `disaggregated_DLRM_trace.csv`): inference instances with CPU, GPU and memory (GiB)
    /// requests and creation, scheduled and deletion times in seconds; `app_name` as the user,
    /// `role` (`CN`, `HN`) as the queue.
    Alibaba2025,
    /// Standard Workload Format of the Parallel Workloads Archive (plain or gzip): 18
    /// whitespace-separated fields per job, `;` header comments; a processor is one unit.
    Swf,
    /// The Tiresias simulator's CSV: `job_id,num_gpu,submit_time,iterations,model_name,duration,interval`.
    Tiresias,
    /// The Helios trace CSV (HeliosData `cluster_log.csv`):
    /// `job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue`;
    /// also the Lucid simulator's bundled `cluster_full_log.csv` (the same jobs with `jobname` and
    /// Lucid's workload profile columns).
    Helios,
    /// The Acme traces (Shanghai AI Lab, NSDI'24; `trace_seren.csv`, `trace_kalos.csv`):
    /// `job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time`
    /// (Kalos adds `mem_per_pod_GB,shared_mem_per_pod,fail_time,stop_time`); dates with a UTC offset.
    Acme,
    /// Alibaba's spot GPU trace of 2026 (`cluster-trace-v2026-spot-gpu/job_info_df.csv`):
    /// `job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type`.
    Alibaba2026,
    /// Alibaba PAI's GPU trace of 2020 (`cluster-trace-gpu-v2020`): the headerless
    /// `pai_job_table.csv` joined with `pai_task_table.csv`, `pai_instance_table.csv` and
    /// `pai_sensor_table.csv` beside it (read from its path, not a stream).
    Pai2020,
    /// Slurm accounting: `sacct --parsable2 --allusers --duplicates=no --format=JobID,User,Account,
    /// Partition,Submit,Start,End,Elapsed,Timelimit,AllocTRES,ReqTRES,State,Priority`.
    Sacct,
    /// Slurm's `jobcomp/filetxt` completion log: one `Key=value ...` line per job.
    Jobcomp,
    /// The database of an `ordo server` (SQLite, recognised by its first bytes): the jobs it
    /// ran, its nodes as the cluster, and the schedule as it ran (see `docs/TRACES.md`).
    OrdoDb,
}

impl Format {
    /// Every format, `Auto` first.
    pub const ALL: [Format; 16] = [
        Format::Auto,
        Format::Generic,
        Format::Jsonl,
        Format::Philly,
        Format::PhillyVc,
        Format::Alibaba,
        Format::Alibaba2025,
        Format::Swf,
        Format::Tiresias,
        Format::Helios,
        Format::Acme,
        Format::Alibaba2026,
        Format::Pai2020,
        Format::Sacct,
        Format::Jobcomp,
        Format::OrdoDb,
    ];

    /// The name used on the command line and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Generic => "generic",
            Format::Jsonl => "jsonl",
            Format::Philly => "philly",
            Format::PhillyVc => "philly-vc",
            Format::Alibaba => "alibaba",
            Format::Alibaba2025 => "alibaba-2025",
            Format::Swf => "swf",
            Format::Tiresias => "tiresias",
            Format::Helios => "helios",
            Format::Acme => "acme",
            Format::Alibaba2026 => "alibaba-2026",
            Format::Pai2020 => "pai-2020",
            Format::Sacct => "sacct",
            Format::Jobcomp => "jobcomp",
            Format::OrdoDb => "ordo-db",
        }
    }

    /// True for formats whose times are wall-clock dates (`philly-vc`, `helios`, `acme`, `sacct`,
    /// `jobcomp`, `ordo-db`): day windows then count from the earliest submit time in the file.
    pub fn wall_clock(self) -> bool {
        matches!(
            self,
            Format::PhillyVc | Format::Helios | Format::Acme | Format::Sacct | Format::Jobcomp | Format::OrdoDb
        )
    }

    /// Detects the format from the split fields of a CSV header line (surrounding whitespace
    /// allowed). Never returns `Auto`.
    pub fn detect<S: AsRef<str>>(header: &[S]) -> Option<Format> {
        let first = header.first().map(|f| f.as_ref().trim());
        if first.is_some_and(|f| f.starts_with("#job id")) {
            return Some(Format::Philly);
        }
        let has = |name: &str| header.iter().any(|f| f.as_ref().trim() == name);
        if has("iterations") && has("model_name") && has("job_id") {
            return Some(Format::Tiresias);
        }
        if has("vc") && has("gpu_num") && has("job_id") {
            return Some(Format::Helios);
        }
        if has("gpu_num") && has("gpu_time") && has("type") && has("job_id") {
            return Some(Format::Acme);
        }
        if has("job_name") && has("worker_num") && has("gpu_request") {
            return Some(Format::Alibaba2026);
        }
        if has("cpu_milli") && has("creation_time") {
            return Some(Format::Alibaba);
        }
        if has("instance_sn") && has("gpu_request") && has("creation_time") {
            return Some(Format::Alibaba2025);
        }
        if has("timestamp") && has("num_gpus") && has("cluster") {
            return Some(Format::PhillyVc);
        }
        if has("job_id") && has("submit_time") {
            return Some(Format::Generic);
        }
        None
    }

    /// Detects the format from the first non-blank line of a (decompressed) file and its name:
    /// `{` starts JSON Lines, `;` an SWF header, `JobId=` a jobcomp log, a `|`-separated header
    /// with `JobID` sacct output; a comma-separated header goes to [`Format::detect`]; a line of
    /// whitespace-separated numbers, or a name ending in `.swf`/`.swf.gz`, is SWF, and a name
    /// ending in `.jsonl`/`.ndjson` is JSON Lines.
    pub fn detect_line(line: &str, name: &str) -> Option<Format> {
        let l = line.trim_start_matches('\u{feff}').trim();
        if l.starts_with('{') {
            return Some(Format::Jsonl);
        }
        if l.starts_with(';') {
            return Some(Format::Swf);
        }
        if l.starts_with("JobId=") {
            return Some(Format::Jobcomp);
        }
        if l.contains('|') && l.split('|').any(|f| f.trim() == "JobID") {
            return Some(Format::Sacct);
        }
        let fields: Vec<&str> = l.split(',').collect();
        if let Some(f) = Format::detect(&fields) {
            return Some(f);
        }
        let nums = l.split_ascii_whitespace().count();
        if nums >= 10 && l.split_ascii_whitespace().all(|t| t.parse::<f64>().is_ok()) {
            return Some(Format::Swf);
        }
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".swf") || lower.ends_with(".swf.gz") {
            return Some(Format::Swf);
        }
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".jsonl.gz") {
            return Some(Format::Jsonl);
        }
        if is_pai_job_table(name) {
            return Some(Format::Pai2020);
        }
        None
    }

    /// The columns of a CSV-style format (empty for `Auto` and the line formats).
    pub(crate) fn columns(self) -> &'static [Column] {
        match self {
            Format::Generic => GENERIC,
            Format::Philly => PHILLY,
            Format::PhillyVc => PHILLY_VC,
            Format::Alibaba => ALIBABA,
            Format::Alibaba2025 => ALIBABA_2025,
            Format::Tiresias => TIRESIAS,
            Format::Helios => HELIOS,
            Format::Acme => ACME,
            Format::Alibaba2026 => ALIBABA_2026,
            Format::Sacct => SACCT,
            Format::Auto | Format::Jsonl | Format::Swf | Format::Jobcomp | Format::OrdoDb | Format::Pai2020 => &[],
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a file name is PAI 2020's job table (`pai_job_table.csv`, optionally gzipped), whose
/// rows have no header to detect them by.
pub fn is_pai_job_table(name: &str) -> bool {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name).to_ascii_lowercase();
    base == "pai_job_table.csv" || base == "pai_job_table.csv.gz"
}

/// Error of [`Format::from_str`]: the name is not a known format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown trace format `{0}` (known: auto, generic, jsonl, philly, philly-vc, alibaba, alibaba-2025, swf, tiresias, helios, acme, alibaba-2026, pai-2020, sacct, jobcomp, ordo-db)"
)]
pub struct ParseFormatError(pub String);

impl FromStr for Format {
    type Err = ParseFormatError;

    /// Parses a format name (ASCII case-insensitive, surrounding whitespace ignored; `_` may
    /// stand for `-`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().replace('_', "-");
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(&t))
            .ok_or_else(|| ParseFormatError(s.to_string()))
    }
}

/// What a column means to the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Id,
    Submit,
    Gpus,
    /// GPUs as a number that may be a share of one GPU below 1 (`0.5`: 500 thousandths).
    GpusOrShare,
    /// CPU cores as a number that may have a fraction (rounded up).
    CpuCores,
    /// Memory in GiB (a number; converted to MiB, rounded up).
    MemGib,
    GpuMilli,
    CpuMilli,
    Cpus,
    MemMib,
    Duration,
    /// Start of the run (Alibaba `scheduled_time`): with `End`, gives the run time.
    Start,
    /// End of the run (Alibaba `deletion_time`).
    End,
    User,
    Group,
    Estimate,
    Priority,
    Queue,
    AllocTres,
    ReqTres,
    /// Dependencies on other jobs of the trace (Slurm's `afterok:ID[:ID]...` list).
    After,
    /// How the job ended (`completed`, `failed`, ...): what dependencies on it see.
    State,
    /// When the job really started (generic `start_time`, sacct `Start`): kept for the as-run
    /// row ([`ordo_core::Job::start`]), not read for the run time.
    RealStart,
    /// Instances (workers) of the job, each asking the row's GPUs and CPUs (Alibaba 2026).
    Workers,
    /// GPU models the job accepts, `|`-separated (generic `gpu_model`, Alibaba `gpu_spec`).
    GpuModels,
    /// Minimum memory per GPU, MiB.
    GpuMemMib,
    /// Node features the job requires: `|`- or `&`-separated (Slurm `Constraints`: `ib&nvme`).
    Features,
    /// The job's class in a speed matrix.
    JobClass,
    /// The GPU model its run time was measured on.
    MeasuredOn,
    /// The topology level its nodes must or should share (`required:block`).
    Topology,
    /// Known but not used.
    Ignore,
}

/// A column a CSV-style format knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub name: &'static str,
    pub role: Role,
    pub required: bool,
}

const fn req(name: &'static str, role: Role) -> Column {
    Column { name, role, required: true }
}

const fn opt(name: &'static str, role: Role) -> Column {
    Column { name, role, required: false }
}

const GENERIC: &[Column] = &[
    req("job_id", Role::Id),
    req("submit_time", Role::Submit),
    req("num_gpu", Role::Gpus),
    req("duration", Role::Duration),
    opt("user", Role::User),
    opt("group", Role::Group),
    opt("estimate", Role::Estimate),
    opt("priority", Role::Priority),
    opt("cpus", Role::Cpus),
    opt("mem_mib", Role::MemMib),
    opt("gpu_milli", Role::GpuMilli),
    opt("queue", Role::Queue),
    opt("after", Role::After),
    opt("state", Role::State),
    opt("start_time", Role::RealStart),
    opt("gpu_model", Role::GpuModels),
    opt("gpu_mem_mib", Role::GpuMemMib),
    opt("features", Role::Features),
    opt("job_class", Role::JobClass),
    opt("measured_on", Role::MeasuredOn),
    opt("topology", Role::Topology),
];

const PHILLY: &[Column] = &[
    req("#job id", Role::Id),
    req("arrival time (sec)", Role::Submit),
    opt("topology", Role::Ignore),
    opt("shape", Role::Ignore),
    req("size", Role::GpusOrShare),
    req("duration (sec)", Role::Duration),
];

const PHILLY_VC: &[Column] = &[
    req("timestamp", Role::Submit),
    req("duration", Role::Duration),
    req("num_gpus", Role::Gpus),
    opt("gpu_time", Role::Ignore),
    req("cluster", Role::Group),
];

const ALIBABA: &[Column] = &[
    req("name", Role::Id),
    req("cpu_milli", Role::CpuMilli),
    req("memory_mib", Role::MemMib),
    req("num_gpu", Role::Gpus),
    req("gpu_milli", Role::GpuMilli),
    opt("gpu_spec", Role::GpuModels),
    opt("qos", Role::Queue),
    opt("pod_phase", Role::Ignore),
    req("creation_time", Role::Submit),
    req("deletion_time", Role::End),
    req("scheduled_time", Role::Start),
];

const ALIBABA_2025: &[Column] = &[
    req("instance_sn", Role::Id),
    opt("role", Role::Queue),
    opt("app_name", Role::User),
    req("cpu_request", Role::CpuCores),
    opt("cpu_limit", Role::Ignore),
    req("gpu_request", Role::GpusOrShare),
    opt("gpu_limit", Role::Ignore),
    opt("rdma_request", Role::Ignore),
    opt("rdma_limit", Role::Ignore),
    req("memory_request", Role::MemGib),
    opt("memory_limit", Role::Ignore),
    opt("disk_request", Role::Ignore),
    opt("disk_limit", Role::Ignore),
    opt("max_instance_per_node", Role::Ignore),
    req("creation_time", Role::Submit),
    req("scheduled_time", Role::Start),
    req("deletion_time", Role::End),
];

const TIRESIAS: &[Column] = &[
    req("job_id", Role::Id),
    req("num_gpu", Role::Gpus),
    req("submit_time", Role::Submit),
    opt("iterations", Role::Ignore),
    opt("model_name", Role::Ignore),
    req("duration", Role::Duration),
    opt("interval", Role::Ignore),
];

const HELIOS: &[Column] = &[
    req("job_id", Role::Id),
    opt("user", Role::User),
    opt("vc", Role::Group),
    req("gpu_num", Role::Gpus),
    opt("cpu_num", Role::Cpus),
    opt("node_num", Role::Ignore),
    opt("state", Role::State),
    req("submit_time", Role::Submit),
    opt("start_time", Role::RealStart),
    opt("end_time", Role::Ignore),
    req("duration", Role::Duration),
    opt("queue", Role::Ignore),
    // The Lucid simulator's `cluster_full_log.csv`: the job's name and the workload profile Lucid
    // assigned to it (not measured on the cluster; read and ignored).
    opt("jobname", Role::Ignore),
    opt("dataset", Role::Ignore),
    opt("model", Role::Ignore),
    opt("batchsize", Role::Ignore),
    opt("amp", Role::Ignore),
    opt("speed", Role::Ignore),
    opt("gpu_util", Role::Ignore),
    opt("gmem_util", Role::Ignore),
    opt("gmem", Role::Ignore),
];

const ACME: &[Column] = &[
    req("job_id", Role::Id),
    opt("user", Role::User),
    opt("node_num", Role::Ignore),
    req("gpu_num", Role::Gpus),
    opt("cpu_num", Role::Cpus),
    opt("mem_per_pod_GB", Role::Ignore),
    opt("shared_mem_per_pod", Role::Ignore),
    opt("type", Role::Queue),
    opt("state", Role::State),
    req("submit_time", Role::Submit),
    opt("start_time", Role::RealStart),
    opt("end_time", Role::Ignore),
    opt("fail_time", Role::Ignore),
    opt("stop_time", Role::Ignore),
    req("duration", Role::Duration),
    opt("queue", Role::Ignore),
    opt("gpu_time", Role::Ignore),
];

const ALIBABA_2026: &[Column] = &[
    req("job_name", Role::Id),
    opt("organization", Role::Group),
    opt("gpu_model", Role::Ignore),
    req("cpu_request", Role::CpuCores),
    req("gpu_request", Role::GpusOrShare),
    req("worker_num", Role::Workers),
    req("submit_time", Role::Submit),
    req("duration", Role::Duration),
    opt("job_type", Role::Queue),
];

const SACCT: &[Column] = &[
    req("JobID", Role::Id),
    opt("User", Role::User),
    opt("Account", Role::Group),
    opt("Partition", Role::Queue),
    req("Submit", Role::Submit),
    opt("Start", Role::RealStart),
    opt("End", Role::Ignore),
    req("Elapsed", Role::Duration),
    opt("Timelimit", Role::Estimate),
    opt("AllocTRES", Role::AllocTres),
    opt("ReqTRES", Role::ReqTres),
    opt("State", Role::State),
    opt("Priority", Role::Priority),
    opt("Constraints", Role::Features),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
        assert_eq!(" Philly ".parse::<Format>(), Ok(Format::Philly));
        assert_eq!("philly_vc".parse::<Format>(), Ok(Format::PhillyVc));
        let e = "lsf".parse::<Format>().unwrap_err();
        assert!(e.to_string().contains("auto, generic, jsonl, philly"), "{e}");
    }

    #[test]
    fn detects_headers() {
        let philly = ["#job id", "arrival time (sec)", "topology", "shape", "size", "duration (sec)"];
        assert_eq!(Format::detect(&philly), Some(Format::Philly));
        let generic = ["num_gpu", " submit_time", "job_id ", "duration"];
        assert_eq!(Format::detect(&generic), Some(Format::Generic));
        assert_eq!(Format::detect(&["a", "b"]), None);
        assert_eq!(Format::detect::<&str>(&[]), None);
        let line = |l: &str| Format::detect_line(l, "x");
        assert_eq!(line("timestamp,duration,num_gpus,gpu_time,cluster"), Some(Format::PhillyVc));
        assert_eq!(line("job_id,num_gpu,submit_time,iterations,model_name,duration,interval"), Some(Format::Tiresias));
        assert_eq!(
            line("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"),
            Some(Format::Helios)
        );
        assert_eq!(line("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"), Some(Format::Alibaba));
        assert_eq!(line("JobID|User|Submit|Elapsed"), Some(Format::Sacct));
        assert_eq!(
            line("instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time"),
            Some(Format::Alibaba2025)
        );
        assert_eq!(line("JobId=1 UserId=a(1)"), Some(Format::Jobcomp));
        assert_eq!(line("; Version: 2"), Some(Format::Swf));
        assert_eq!(line("1 0 -1 5 1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1"), Some(Format::Swf));
        assert_eq!(line("{\"job_id\":1}"), Some(Format::Jsonl));
        assert_eq!(Format::detect_line("x", "a.SWF.gz"), Some(Format::Swf));
        assert_eq!(Format::detect_line("x", "a.jsonl"), Some(Format::Jsonl));
        assert_eq!(line("id,time"), None);
    }
}
