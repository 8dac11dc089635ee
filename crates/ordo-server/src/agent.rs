//! The node agent: registers the node's GPUs, long-polls the server for work (each poll is a
//! heartbeat that lists the jobs it runs), runs each job under a supervisor process, reports ends.

use crate::activity::{ActivitySource, Sampler};
use crate::api::*;
use crate::cgroup::{Containment, JobGroup};
use crate::client::{Client, ClientError};
use crate::runas::{job_env, JobUser, RunAs};
use crate::supervise::{boot_ms, read_status, reserve_status};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The umask of a job whose submitter sent none: output readable by its owner only.
pub const DEFAULT_UMASK: u32 = 0o077;

/// Which GPUs the node offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSpec {
    /// Discover through NVML.
    Auto,
    /// `N` fake GPUs (indices 0..N), for machines without GPUs and for tests.
    Fake(u32),
}

impl std::str::FromStr for GpuSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(GpuSpec::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(GpuSpec::Fake(n)),
            _ => Err(format!("`{s}`: expected `auto` or a number of fake GPUs from 1 to 1024")),
        }
    }
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No GPUs could be found.
    #[error("{0}")]
    Gpus(String),
    /// The CPU or memory settings do not fit the machine.
    #[error("{0}")]
    Resources(String),
    /// The work directory is unusable.
    #[error("work directory {path}: {source}")]
    WorkDir {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The server refused the agent for good (bad token, bad name).
    #[error("the server refused this agent: {0}")]
    Refused(ClientError),
}

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Server base URL.
    pub server: String,
    /// The agent's token.
    pub token: String,
    /// Node name.
    pub name: String,
    /// GPUs.
    pub gpus: GpuSpec,
    /// Where job output and status files go.
    pub work_dir: PathBuf,
    /// Between SIGTERM and SIGKILL, ms.
    pub grace_ms: u64,
    /// The supervisor command prefix: a program and arguments to which
    /// `--time-limit-ms T --grace-ms G --status FILE [--cpu-list L] [--cgroup DIR ...] -- COMMAND...`
    /// is appended.
    pub supervisor: Vec<String>,
    /// Put every job in its own cgroup (`ordo agent --no-cgroup`: false). Without, a process a
    /// job detaches from its process group outlives the job, and keeps its GPUs.
    pub contain: bool,
    /// Most bytes of a job's output kept in its files (`--max-output`).
    pub max_output: u64,
    /// The agent takes no new work while its work directory has less free space, MiB
    /// (`--min-free`).
    pub min_free_mib: u64,
    /// CPU cores to offer (`--cpus N`: the first N the agent may use); `None`: all it may use.
    pub cpus: Option<u32>,
    /// Memory to offer, MiB (`--mem`); `None`: the machine's (MemTotal).
    pub mem_mib: Option<u64>,
    /// Which Unix account each job runs as.
    pub run_as: RunAs,
    /// Variables of the agent's environment that jobs get (see [`crate::runas::job_env`]).
    pub pass_env: Vec<String>,
    /// PEM certificates of the CA that signed an `https://` server's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// Where GPU activity samples come from.
    pub activity: ActivitySource,
    /// How often GPU activity is sampled and sent, ms.
    pub activity_every_ms: u64,
    /// The address other nodes reach this one at (`--addr`; default: the node name).
    pub addr: Option<String>,
    /// Where the rendezvous ports (`MASTER_PORT`) of multi-node jobs whose rank 0 runs here
    /// come from (`--master-ports`).
    pub master_ports: PortRange,
    /// The GPUs' model (`--gpu-model`): of fake GPUs, or over NVML's name.
    pub gpu_model: Option<String>,
    /// Memory of each GPU, MiB (`--gpu-mem`): of fake GPUs, or over NVML's.
    pub gpu_mem_mib: Option<u64>,
    /// The node's features (`--feature ib,nvme`), for jobs that ask for them.
    pub features: Vec<String>,
    /// Its place in the cluster's topology (`--topology block=nvl0,switch=leaf3`).
    pub topology: std::collections::BTreeMap<String, String>,
}

/// A range of TCP ports (`LO-HI`, both included, LO at least 1024) from which the agent
/// chooses the rendezvous port of a multi-node job whose rank 0 it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// The first port.
    pub lo: u16,
    /// The last port.
    pub hi: u16,
}

impl Default for PortRange {
    /// 29500-30499: `torchrun`'s default port (29500) and the thousand above it.
    fn default() -> Self {
        PortRange { lo: 29_500, hi: 30_499 }
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected a port range LO-HI such as 29500-30499, from 1024 to 65535");
        let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
        let (lo, hi): (u16, u16) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
        if lo < 1024 || hi < lo {
            return Err(bad());
        }
        Ok(PortRange { lo, hi })
    }
}

impl PortRange {
    /// The first port from `from` on (wrapping around the range) that none of `taken` (the
    /// ports of this agent's own running jobs, which may not have bound theirs yet) is and that
    /// is free on this node now ([`port_free`]); `None` when every port of the range is in use.
    pub fn pick(&self, from: u16, taken: &HashSet<u16>) -> Option<u16> {
        let n = u32::from(self.hi - self.lo) + 1;
        let start = u32::from(from.clamp(self.lo, self.hi) - self.lo);
        (0..n).map(|i| self.lo + ((start + i) % n) as u16).find(|p| !taken.contains(p) && port_free(*p))
    }

    /// The port after `p` in the range (wrapping).
    fn after(&self, p: u16) -> u16 {
        if p >= self.hi {
            self.lo
        } else {
            p + 1
        }
    }
}

/// Whether TCP port `p` is free on this node: a listener binds it on every IPv4 address and,
/// where the node has IPv6, on every IPv6 address (a process listening on any one address of
/// the node holds it). The listeners are closed again at once.
pub fn port_free(p: u16) -> bool {
    if TcpListener::bind((Ipv4Addr::UNSPECIFIED, p)).is_err() {
        return false;
    }
    match TcpListener::bind((Ipv6Addr::UNSPECIFIED, p)) {
        Ok(_) => true,
        // No IPv6 on this node: the IPv4 probe decides.
        Err(e) => e.kind() != std::io::ErrorKind::AddrInUse,
    }
}

/// The CPU cores this process may run on (`Cpus_allowed_list` of /proc/self/status, else
/// `0..available_parallelism`).
pub fn allowed_cpus() -> Vec<u32> {
    let from_proc = std::fs::read_to_string("/proc/self/status").ok().and_then(|t| {
        t.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(|v| parse_cpu_list(v.trim()))
    });
    from_proc.filter(|v| !v.is_empty()).unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        (0..n as u32).collect()
    })
}

/// Parses a CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Formats CPU indices as a list such as `0,1,4` (what `taskset -c` and `ORDO_CPUS` take).
pub fn cpu_list_text(cpus: &[u32]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// The machine's memory (MemTotal of /proc/meminfo), MiB.
pub fn total_mem_mib() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        t.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024)
}

/// GPUs found: count, whether fake, model and memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpus {
    /// How many.
    pub count: u32,
    /// Fake (no NVML).
    pub fake: bool,
    /// Model name, as NVML gives it (`NVIDIA H200`) or `--gpu-model` (the server normalises it,
    /// `crate::kinds::model_name`).
    pub model: Option<String>,
    /// Memory of each GPU, MiB (the smallest, if they differ).
    pub mem_mib: Option<u64>,
}

/// Finds the node's GPUs: `n` fake ones, or NVML's; `--gpu-model` and `--gpu-mem` (`model`,
/// `mem_mib`) say what they are, over what NVML says.
pub fn detect_gpus(spec: GpuSpec, model: Option<&str>, mem_mib: Option<u64>) -> Result<Gpus, AgentError> {
    let mut g = match spec {
        GpuSpec::Fake(n) => Gpus { count: n, fake: true, model: None, mem_mib: None },
        GpuSpec::Auto => nvml_gpus()?,
    };
    if let Some(m) = model {
        g.model = Some(m.to_string());
    }
    if let Some(m) = mem_mib {
        g.mem_mib = Some(m);
    }
    Ok(g)
}

#[cfg(feature = "nvml")]
fn nvml_gpus() -> Result<Gpus, AgentError> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| {
        AgentError::Gpus(format!(
            "--gpus auto: no NVIDIA driver found (NVML could not be loaded: {e}); use --gpus N to run with N fake GPUs"
        ))
    })?;
    let count = nvml.device_count().map_err(|e| AgentError::Gpus(format!("--gpus auto: NVML device count: {e}")))?;
    if count == 0 {
        return Err(AgentError::Gpus("--gpus auto: the NVIDIA driver reports no GPUs".into()));
    }
    // One kind per node (ordo-core's model): GPU 0's name, the smallest memory; a machine with
    // GPUs of several models says so, and `--gpu-model` names what the node is to be taken as.
    let mut names: Vec<String> = Vec::new();
    let mut mem_mib: Option<u64> = None;
    for i in 0..count {
        let Ok(d) = nvml.device_by_index(i) else { continue };
        if let Ok(n) = d.name() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if let Ok(m) = d.memory_info() {
            let mib = m.total / (1024 * 1024);
            mem_mib = Some(mem_mib.map_or(mib, |x| x.min(mib)));
        }
    }
    if names.len() > 1 {
        eprintln!(
            "ordo agent: this machine's GPUs are of {} models ({}); the node registers as GPU 0's, {} (give --gpu-model to name it)",
            names.len(),
            names.join(", "),
            names[0]
        );
    }
    // As ordo keeps model names (`NVIDIA H200` is `h200`); a character a name may not hold
    // becomes `-`.
    let model = names.into_iter().next().and_then(|n| {
        let plain: String = n
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || " ._+-".contains(c) { c } else { '-' })
            .take(crate::api::MAX_GPU_MODEL_BYTES)
            .collect();
        crate::kinds::model_name(&plain).ok()
    });
    Ok(Gpus { count, fake: false, model, mem_mib })
}

#[cfg(not(feature = "nvml"))]
fn nvml_gpus() -> Result<Gpus, AgentError> {
    Err(AgentError::Gpus(
        "--gpus auto: this ordo was built without NVML support (cargo feature `nvml`); rebuild with \
         `cargo build --release --features nvml` on a machine with the NVIDIA driver, or use --gpus N for N fake GPUs"
            .into(),
    ))
}

#[derive(Debug)]
struct Running {
    started_at: i64,
    attempt: u32,
    /// The write end of its supervisor's control channel (see `supervise.rs`): lease renewals
    /// and kills.
    ctl: Option<std::fs::File>,
    /// Its GPUs on this node (activity samples are attributed by them).
    gpu_ids: Vec<u32>,
    /// Rank 0 of a multi-node job: the rendezvous port chosen for it.
    port: Option<u16>,
}

type Table = Arc<Mutex<HashMap<JobNo, Running>>>;

/// The node's CPU cores and which job has each reserved (`--cpus`).
#[derive(Debug)]
struct Cores {
    ids: Vec<u32>,
    owner: Vec<Option<JobNo>>,
}

impl Cores {
    /// Reserves `n` free cores for `job`, lowest first; `None` when fewer are free.
    fn take(&mut self, job: JobNo, n: u32) -> Option<Vec<u32>> {
        let free: Vec<usize> = (0..self.ids.len()).filter(|&i| self.owner[i].is_none()).take(n as usize).collect();
        if free.len() < n as usize {
            return None;
        }
        for &i in &free {
            self.owner[i] = Some(job);
        }
        Some(free.into_iter().map(|i| self.ids[i]).collect())
    }

    /// Marks `ids` reserved for `job` (a run taken over after a restart of the agent).
    fn reserve(&mut self, job: JobNo, ids: &[u32]) {
        for (i, c) in self.ids.iter().enumerate() {
            if ids.contains(c) {
                self.owner[i] = Some(job);
            }
        }
    }

    /// The cores no job has reserved (all of them when every core is reserved).
    fn unreserved(&self) -> Vec<u32> {
        let v: Vec<u32> = (0..self.ids.len()).filter(|&i| self.owner[i].is_none()).map(|i| self.ids[i]).collect();
        if v.is_empty() {
            self.ids.clone()
        } else {
            v
        }
    }

    fn release(&mut self, job: JobNo) {
        for o in &mut self.owner {
            if *o == Some(job) {
                *o = None;
            }
        }
    }

    fn free(&self) -> usize {
        self.owner.iter().filter(|o| o.is_none()).count()
    }
}

/// What the agent found about its node besides GPUs.
#[derive(Debug, Clone)]
struct Node {
    cores: Arc<Mutex<Cores>>,
    /// Where each job's cgroup goes (`None`: `--no-cgroup`).
    contain: Option<Containment>,
    /// The next rendezvous port to try: ports go round the range, so that one a job just
    /// released (perhaps still in TIME_WAIT) is not the next one handed out.
    next_port: Arc<Mutex<u16>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the agent until the process ends (or the server refuses it for good).
pub fn run(mut cfg: AgentConfig) -> Result<(), AgentError> {
    let gpus = detect_gpus(cfg.gpus, cfg.gpu_model.as_deref(), cfg.gpu_mem_mib)?;
    // NVML loads here: without a driver the agent stops at once, saying so.
    let sampler = match cfg.activity {
        ActivitySource::Off => None,
        _ => Some(Sampler::new(cfg.activity.clone(), gpus.count).map_err(|e| AgentError::Gpus(e.to_string()))?),
    };
    std::fs::create_dir_all(&cfg.work_dir)
        .map_err(|source| AgentError::WorkDir { path: cfg.work_dir.clone(), source })?;
    // Everything the agent and its supervisors write is named by an absolute path: a job runs
    // in its submitter's directory, not in the agent's.
    cfg.work_dir =
        cfg.work_dir.canonicalize().map_err(|source| AgentError::WorkDir { path: cfg.work_dir.clone(), source })?;
    // Users may reach their own output files (0600, theirs) but not list other jobs'.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cfg.work_dir, std::fs::Permissions::from_mode(0o711))
            .map_err(|source| AgentError::WorkDir { path: cfg.work_dir.clone(), source })?;
    }
    eprintln!("ordo agent {}: {}; output in {}", cfg.name, cfg.run_as.describe(), cfg.work_dir.display());
    let mut cores = allowed_cpus();
    if let Some(n) = cfg.cpus {
        if n == 0 || n as usize > cores.len() {
            return Err(AgentError::Resources(format!(
                "--cpus {n}: this agent may use {} cores ({}); give 1 to {}",
                cores.len(),
                cpu_list_text(&cores),
                cores.len()
            )));
        }
        cores.truncate(n as usize);
    }
    let mem_mib = cfg.mem_mib.or_else(total_mem_mib);
    let contain = if cfg.contain {
        let c = Containment::find()
            .and_then(|c| c.scoped(&scope_name(&cfg.name, &cfg.work_dir)))
            .map_err(|why| {
                AgentError::Resources(format!(
                    "no usable cgroup to contain jobs in ({why}). Run the agent as root (or in a delegated cgroup) on a machine with cgroup v2 (or the v1 freezer), or give --no-cgroup to run without containment: a process a job detaches from its process group then outlives the job and keeps its GPUs while they are given to the next job"
                ))
            })?;
        eprintln!("ordo agent {}: containment: {}", cfg.name, c.describe());
        Some(c)
    } else {
        eprintln!(
            "ordo agent {}: containment: NONE (--no-cgroup): a process a job detaches from its process group outlives the job and keeps its GPUs; memory limits not enforced",
            cfg.name
        );
        None
    };
    let node = Node {
        cores: Arc::new(Mutex::new(Cores { owner: vec![None; cores.len()], ids: cores })),
        contain,
        next_port: Arc::new(Mutex::new(cfg.master_ports.lo)),
    };
    let table: Table = Arc::default();
    let client = |timeout: Duration| {
        Client::with_ca(&cfg.server, Some(cfg.token.clone()), timeout, cfg.ca_pem.as_deref())
            .map_err(AgentError::Refused)
    };
    let short = client(Duration::from_secs(10))?;
    // Runs an earlier agent of this node left are taken over before the first poll.
    adopt(&cfg, &node, &table, &short);
    let reg = RegisterRequest {
        node: cfg.name.clone(),
        gpus: gpus.count,
        fake: gpus.fake,
        gpu_model: gpus.model.clone(),
        gpu_mem_mib: gpus.mem_mib,
        features: cfg.features.clone(),
        topology: cfg.topology.clone(),
        cpus: Some(lock(&node.cores).ids.len() as u32),
        mem_mib,
        mem_limits: node.contain.as_ref().is_some_and(|c| c.mem.is_some()),
        clock: None,
        addr: cfg.addr.clone(),
    };
    let mut timing = register(&short, &reg, &cfg, &gpus)?;
    if let Some(s) = sampler {
        start_sampling(&cfg, s, &table, &short);
    }
    let mut long = client(Duration::from_millis(timing.heartbeat_ms + 10_000))?;
    let mut health = Health::default();
    loop {
        let running: Vec<RunningJob> = lock(&table)
            .iter()
            .map(|(&job, r)| RunningJob { job, started_at: r.started_at, attempt: r.attempt, port: r.port })
            .collect();
        let problem = health.check(&cfg);
        let req = PollRequest { node: cfg.name.clone(), running, wait_ms: timing.heartbeat_ms, problem };
        // The lease counts from the moment the poll is sent: the server heard from this agent
        // no earlier than that, so it waits at least the lease (and a grace) from then before
        // it may run this node's jobs elsewhere.
        let sent = boot_ms();
        match long.post::<_, PollResponse>("/v1/agent/poll", &req) {
            Ok(resp) => {
                let until = sent + lease_of(&timing) as i64;
                for r in lock(&table).values_mut() {
                    tell(r, &format!("renew {until}"));
                }
                for a in resp.start {
                    if !lock(&table).contains_key(&a.job) {
                        start_job(&cfg, &node, &table, &short, a, until);
                    }
                }
                for k in resp.kill {
                    if let Some(r) = lock(&table).get_mut(&k) {
                        tell(r, "kill");
                    }
                }
                for ask in resp.logs {
                    let (dir, node, client) = (cfg.work_dir.clone(), cfg.name.clone(), short.clone());
                    // Off the poll loop: a slow disk never delays a heartbeat.
                    std::thread::spawn(move || {
                        let chunk = read_output(&dir, &node, &ask);
                        if let Err(e) = client.post::<_, serde_json::Value>("/v1/agent/logs", &chunk) {
                            eprintln!("ordo agent {node}: job {}'s output: {e}", ask.job);
                        }
                    });
                }
            }
            Err(e) if e.status() == Some(409) => {
                eprintln!("ordo agent {}: {e}; registering again", cfg.name);
                timing = register(&short, &reg, &cfg, &gpus)?;
                long = client(Duration::from_millis(timing.heartbeat_ms + 10_000))?;
            }
            Err(e) if matches!(e.status(), Some(401 | 403)) => return Err(AgentError::Refused(e)),
            Err(e) => {
                eprintln!("ordo agent {}: {e}; retrying", cfg.name);
                std::thread::sleep(Duration::from_millis(timing.heartbeat_ms.min(500)));
            }
        }
    }
}

/// A piece of a job's output file in the work directory (`job-N.out` or `.err`), as the server
/// asked for it (`ordo logs`). Only those files are read: the name is made from the job's number.
fn read_output(dir: &Path, node: &str, ask: &LogAsk) -> LogChunk {
    use std::io::{Read, Seek, SeekFrom};
    let path = dir.join(format!("job-{}.{}", ask.job, ask.stream.ext()));
    let mut chunk = LogChunk {
        node: node.to_string(),
        ask: ask.ask,
        data: String::new(),
        next: ask.offset,
        size: 0,
        path: path.display().to_string(),
        error: None,
    };
    let read = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::open(&path)?;
        chunk.size = f.metadata()?.len();
        let from = ask.offset.min(chunk.size);
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.take(ask.max.min(MAX_LOG_CHUNK)).read_to_end(&mut buf)?;
        chunk.next = from + buf.len() as u64;
        chunk.data = String::from_utf8_lossy(&buf).into_owned();
        Ok(())
    })();
    if let Err(e) = read {
        chunk.error = Some(match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("no file {} (the job has not started there, or its output was removed)", path.display())
            }
            _ => format!("{}: {e}", path.display()),
        });
    }
    chunk
}

/// The name of this agent's own cgroup below `ordo`: the node name (path-safe) and a hash of the
/// work directory, so that two agents on one machine never share one, and an agent restarted
/// with the same name and work directory finds its predecessor's.
fn scope_name(node: &str, work_dir: &Path) -> String {
    let safe: String =
        node.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let h = work_dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("agent-{safe}-{:08x}", h as u32)
}

/// The lease the server gives (older servers: their node time-out), ms.
fn lease_of(t: &RegisterResponse) -> u64 {
    t.lease_ms.unwrap_or(t.node_timeout_ms)
}

/// Writes one line to a job's supervisor (its control channel never blocks the agent: a full
/// channel, or a supervisor that is gone, loses the line, and the supervisor acts on the next).
fn tell(r: &mut Running, line: &str) {
    if let Some(f) = &mut r.ctl {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The node's own health, checked before every poll: whether its work directory can be
/// written and has room, and whether a job's processes could not be killed. What it finds is
/// sent as the poll's `problem`: the server then starts nothing new here until it clears.
#[derive(Debug, Default)]
struct Health {
    /// When the work directory was last written to (a probe file), boot ms.
    probed: i64,
    /// What that probe found.
    probe: Option<String>,
}

impl Health {
    /// How often a probe file is written while all is well, ms.
    const PROBE_EVERY_MS: i64 = 30_000;

    fn check(&mut self, cfg: &AgentConfig) -> Option<String> {
        let dir = &cfg.work_dir;
        // Free space, every poll (one statvfs).
        if let Ok(st) = nix::sys::statvfs::statvfs(dir) {
            // fsblkcnt_t and c_ulong are u64 on the 64-bit Linux targets ordo builds for.
            let free = st.blocks_available().saturating_mul(st.fragment_size());
            if free < cfg.min_free_mib * 1024 * 1024 {
                return Some(format!(
                    "its work directory {} has {} free, less than its --min-free of {} (the output of its jobs fills it?)",
                    dir.display(),
                    crate::state::fmt_mib(free / (1024 * 1024)),
                    crate::state::fmt_mib(cfg.min_free_mib)
                ));
            }
        }
        // A job whose processes could not be killed holds its GPUs, and the node takes no more.
        if let Some(stuck) = std::fs::read_dir(dir).into_iter().flatten().flatten().find_map(|e| {
            let n = e.file_name();
            let n = n.to_str()?;
            (n.starts_with("job-") && n.ends_with(".stuck")).then(|| std::fs::read_to_string(e.path()).ok())?
        }) {
            return Some(stuck);
        }
        let now = boot_ms();
        if self.probe.is_some() || now - self.probed >= Self::PROBE_EVERY_MS {
            self.probed = now;
            let p = dir.join(".ordo-agent-probe");
            self.probe = std::fs::write(&p, [b'x'; 4096])
                .and_then(|_| std::fs::remove_file(&p))
                .err()
                .map(|e| format!("its work directory {} cannot be written: {e}", dir.display()));
        }
        self.probe.clone()
    }
}

fn register(c: &Client, reg: &RegisterRequest, cfg: &AgentConfig, gpus: &Gpus) -> Result<RegisterResponse, AgentError> {
    loop {
        let reg = RegisterRequest { clock: Some(now_ms()), ..reg.clone() };
        match c.post::<_, RegisterResponse>("/v1/agent/register", &reg) {
            Ok(t) => {
                let known = gpus.model.is_some() || gpus.mem_mib.is_some() || !reg.features.is_empty();
                let what = crate::kinds::node_kind_text(false, gpus.model.as_deref(), gpus.mem_mib, &reg.features);
                let kind = match (gpus.fake, known) {
                    (true, true) => format!(
                        "FAKE GPUs ({what}; --gpus N: no NVML; CUDA_VISIBLE_DEVICES is set but there is no GPU behind it)"
                    ),
                    (true, false) => {
                        "FAKE GPUs (--gpus N: no NVML; CUDA_VISIBLE_DEVICES is set but there is no GPU behind it)".into()
                    }
                    (false, true) => format!("GPUs ({what})"),
                    (false, false) => "GPUs (NVML)".into(),
                };
                eprintln!(
                    "ordo agent {}: registered {} {kind}, {} CPU cores, {} MiB memory with {}",
                    cfg.name,
                    gpus.count,
                    reg.cpus.unwrap_or(0),
                    reg.mem_mib.unwrap_or(0),
                    c.base()
                );
                return Ok(t);
            }
            // 422: its GPUs' kind would pass the number of kinds the server models.
            Err(e) if matches!(e.status(), Some(400 | 401 | 403 | 422)) => return Err(AgentError::Refused(e)),
            Err(e) => {
                eprintln!("ordo agent {}: {e}; retrying", cfg.name);
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
}

/// Starts the thread that samples the GPUs' activity every `activity_every_ms` and sends it
/// (`POST /v1/agent/activity`). A sample that fails (a bad activity file) is logged, once per
/// distinct error.
fn start_sampling(cfg: &AgentConfig, mut sampler: Sampler, table: &Table, client: &Client) {
    eprintln!("ordo agent {}: GPU activity from {:?}, every {} ms", cfg.name, cfg.activity, cfg.activity_every_ms);
    let (table, client, node, every) = (table.clone(), client.clone(), cfg.name.clone(), cfg.activity_every_ms);
    std::thread::spawn(move || {
        let mut last_err = String::new();
        loop {
            std::thread::sleep(Duration::from_millis(every));
            let held: HashMap<u32, JobNo> =
                lock(&table).iter().flat_map(|(&job, r)| r.gpu_ids.iter().map(move |&g| (g, job))).collect();
            let err = match sampler.sample(&held) {
                Ok(gpus) if gpus.is_empty() => String::new(),
                Ok(gpus) => {
                    let rep = ActivityReport { node: node.clone(), gpus };
                    match client.post::<_, serde_json::Value>("/v1/agent/activity", &rep) {
                        Ok(_) => String::new(),
                        Err(e) => format!("sending GPU activity: {e}"),
                    }
                }
                Err(e) => e.to_string(),
            };
            if !err.is_empty() && err != last_err {
                eprintln!("ordo agent {node}: {err}");
            }
            last_err = err;
        }
    });
}

/// Sends, on its own thread, the report of a job the agent did not start.
fn report_unstarted(cfg: &AgentConfig, client: &Client, a: &Assignment, outcome: Outcome, msg: String) {
    eprintln!("ordo agent {}: job {}: not started: {msg}", cfg.name, a.job);
    let rep = EndReport {
        node: cfg.name.clone(),
        job: a.job,
        attempt: a.attempt,
        outcome,
        exit_code: None,
        signal: None,
        started_at: now_ms(),
        ended_at: now_ms(),
        message: Some(truncate_message(msg)),
    };
    let client = client.clone();
    std::thread::spawn(move || send_report(&client, &rep));
}

/// Words for the server, cut to what it accepts.
fn truncate_message(mut m: String) -> String {
    if m.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - 3;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
        m.push_str("...");
    }
    m
}

/// Creates (or empties) a job's output file with the submitter's umask, owned by the account
/// the job runs as.
/// Starts `ordo agent-tee PATH` as the job's user (through `ordo agent-exec` when the agent runs
/// jobs as other accounts), copying what it reads into PATH and into `work_file`. Returns the
/// two ends the supervisor writes (its standard output and error) and a waiter for the copy.
fn spawn_tee(
    ordo: &str,
    path: &str,
    mode: u32,
    user: Option<&JobUser>,
    work_file: std::fs::File,
) -> std::io::Result<(Stdio, Stdio, std::thread::JoinHandle<()>)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let mut c = Command::new(ordo);
    if let Some(u) = user {
        let groups: Vec<String> = u.groups.iter().map(|g| g.to_string()).collect();
        c.args(["agent-exec", "--uid", &u.uid.to_string(), "--gid", &u.gid.to_string()]);
        if !groups.is_empty() {
            c.arg("--groups").arg(groups.join(","));
        }
        c.arg("--").arg(ordo);
    }
    c.args(["agent-tee", "--mode", &format!("{mode:o}"), "--", path])
        .stdin(Stdio::from(std::fs::File::from(r)))
        .stdout(Stdio::from(work_file))
        .stderr(Stdio::null());
    let mut child = c.spawn()?;
    let w = std::fs::File::from(w);
    let w2 = w.try_clone()?;
    let waiter = std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok((Stdio::from(w), Stdio::from(w2), waiter))
}

/// `ordo agent-tee PATH`: copies its standard input to its standard output (the job's file in
/// the agent's work directory) and to PATH, which it creates with `mode` (run as the job's user:
/// the path is opened with that user's rights). A PATH it cannot open or write is said once in
/// the output, which goes on into the work directory's file.
pub fn tee_main(path: &str, mode: u32) -> i32 {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut stdout = std::io::stdout().lock();
    let mut file = match std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path) {
        Ok(f) => Some(f),
        Err(e) => {
            let _ = writeln!(
                stdout,
                "[ordo: --output {path}: cannot open it as this job's user: {e}; the output is only here]"
            );
            None
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin = std::io::stdin().lock();
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let _ = stdout.write_all(&buf[..n]);
        let _ = stdout.flush();
        if let Some(f) = &mut file {
            if let Err(e) = f.write_all(&buf[..n]) {
                let _ = writeln!(stdout, "[ordo: --output {path}: writing it failed: {e}; the rest is only here]");
                file = None;
            }
        }
    }
    0
}

fn output_file(path: &Path, mode: u32, owner: Option<&JobUser>) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    if let Some(u) = owner {
        nix::unistd::fchown(&f, Some(nix::unistd::Uid::from_raw(u.uid)), Some(nix::unistd::Gid::from_raw(u.gid)))
            .map_err(std::io::Error::from)?;
    }
    Ok(f)
}

fn start_job(cfg: &AgentConfig, node: &Node, table: &Table, client: &Client, a: Assignment, lease_until: i64) {
    let dir = &cfg.work_dir;
    // The Unix account first: a job whose submitter has no account here is refused, not run as
    // anyone else.
    let user = match cfg.run_as.resolve(&a.user) {
        Ok(u) => u,
        Err(msg) => return report_unstarted(cfg, client, &a, Outcome::SpawnFailed, msg),
    };
    // A multi-node job's rendezvous port: rank 0 gets one found free here (and not handed to
    // another of this agent's jobs), which the next poll tells the server; the other ranks get
    // the port rank 0's agent chose.
    let port = match &a.gang {
        None => None,
        Some(g) => match (g.rank, g.master_port) {
            (0, _) => {
                let taken: HashSet<u16> = lock(table).values().filter_map(|r| r.port).collect();
                let mut next = lock(&node.next_port);
                match cfg.master_ports.pick(*next, &taken) {
                    Some(p) => {
                        *next = cfg.master_ports.after(p);
                        Some(p)
                    }
                    None => {
                        let r = cfg.master_ports;
                        let msg = format!("no free port in {}-{} for its MASTER_PORT on this node", r.lo, r.hi);
                        drop(next);
                        return report_unstarted(cfg, client, &a, Outcome::Refused, msg);
                    }
                }
            }
            (_, Some(p)) => Some(p),
            (r, None) => {
                let msg = format!("rank {r} came without rank 0's MASTER_PORT");
                return report_unstarted(cfg, client, &a, Outcome::Refused, msg);
            }
        },
    };
    // CPU cores: `--cpus N` reserves N of the node's cores for the job alone; a job that asks
    // none shares the cores no job has reserved.
    let cores = match a.cpus {
        Some(n) => {
            let mut c = lock(&node.cores);
            match c.take(a.job, n) {
                Some(ids) => ids,
                None => {
                    let msg =
                        format!("it asks for {n} CPU cores, {} of {} are free on this node", c.free(), c.ids.len());
                    drop(c);
                    return report_unstarted(cfg, client, &a, Outcome::Refused, msg);
                }
            }
        }
        None => lock(&node.cores).unreserved(),
    };
    let mut extra: Vec<String> = vec!["--cpu-list".into(), cpu_list_text(&cores)];
    let group: Option<JobGroup> = node.contain.as_ref().map(|c| c.job(a.job, a.attempt));
    let run = crate::cgroup::run_name(a.job, a.attempt);
    if let Some(g) = &group {
        extra.extend([
            "--cgroup".into(),
            g.track.to_string_lossy().into_owned(),
            "--tracker".into(),
            g.tracker.as_str().into(),
        ]);
        if let (Some(m), Some((mdir, v2))) = (a.mem_mib, &g.mem) {
            extra.extend([
                "--mem-cgroup".into(),
                mdir.to_string_lossy().into_owned(),
                "--mem-mib".into(),
                m.to_string(),
            ]);
            if *v2 {
                extra.push("--mem-v2".into());
            }
        }
    }
    extra.extend(["--lease-until".into(), lease_until.to_string(), "--max-output".into(), cfg.max_output.to_string()]);
    let umask = a.umask.unwrap_or(DEFAULT_UMASK) & 0o777;
    extra.extend(["--umask".into(), format!("{umask:o}")]);
    if let Some(u) = &user {
        extra.extend([
            "--run-uid".into(),
            u.uid.to_string(),
            "--run-gid".into(),
            u.gid.to_string(),
            "--run-groups".into(),
            u.groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(","),
        ]);
    }
    let status_path = dir.join(format!("{run}.status"));
    // The status file's space is taken now, so that a disk the job fills cannot keep its
    // supervisor from saying how it ended; and the control channel, which only root can open.
    let ctl_path = dir.join(format!("{run}.ctl"));
    let ctl = reserve_status(&status_path)
        .map_err(|e| format!("its status file {}: {e}", status_path.display()))
        .and_then(|_| open_ctl(&ctl_path));
    let ctl = match ctl {
        Ok(f) => f,
        Err(msg) => {
            lock(&node.cores).release(a.job);
            return report_unstarted(cfg, client, &a, Outcome::Refused, format!("this node's work directory: {msg}"));
        }
    };
    extra.extend(["--ctl".into(), ctl_path.to_string_lossy().into_owned()]);
    // The submitter's directory when it exists here; else the work directory (jobs that run as
    // the agent's own account) or the account's home (jobs that run as their submitter).
    let fallback = match &user {
        Some(u) if u.home.is_dir() => u.home.clone(),
        Some(_) => PathBuf::from("/tmp"),
        None => dir.clone(),
    };
    let cwd = a.cwd.as_deref().map(Path::new).filter(|p| p.is_absolute() && p.is_dir()).map(Path::to_path_buf);
    let cwd = cwd.unwrap_or(fallback);
    let devices: Vec<String> = a.gpu_ids.iter().map(|i| i.to_string()).collect();
    let who = user.clone().unwrap_or_else(crate::runas::current_user);
    // An array's element learns its array and index (Slurm's SLURM_ARRAY_JOB_ID and
    // SLURM_ARRAY_TASK_ID).
    let array_vars: Vec<(&str, String)> = a
        .array
        .map(|m| {
            let mut v = vec![("ORDO_ARRAY_JOB_ID", m.id.to_string()), ("ORDO_ARRAY_INDEX", m.index.to_string())];
            if let Some(n) = a.array_count {
                v.push(("ORDO_ARRAY_TASK_COUNT", n.to_string()));
            }
            v
        })
        .unwrap_or_default();
    let mut job_vars = vec![
        ("CUDA_VISIBLE_DEVICES", devices.join(",")),
        // CUDA numbers GPUs fastest first unless told otherwise; NVML (and so the activity
        // samples, and `--gpus auto`) numbers them by PCI bus: make both agree.
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into()),
        ("ORDO_JOB_ID", a.job.to_string()),
        ("ORDO_NODE", cfg.name.clone()),
        ("ORDO_GPUS", a.gpu_ids.len().to_string()),
        ("ORDO_RESTARTS", a.restarts.to_string()),
        ("ORDO_CPUS", cpu_list_text(&cores)),
    ];
    job_vars.extend(array_vars);
    // A multi-node job's rank: what `torchrun --nnodes $ORDO_NNODES --node_rank $ORDO_NODE_RANK
    // --master_addr $MASTER_ADDR --master_port $MASTER_PORT` needs.
    if let Some(g) = &a.gang {
        job_vars.extend([
            ("ORDO_NODELIST", g.nodes.join(",")),
            ("ORDO_NODE_RANK", g.rank.to_string()),
            ("ORDO_NNODES", g.nodes.len().to_string()),
            ("MASTER_ADDR", g.master_addr.clone()),
            ("MASTER_PORT", port.map(|p| p.to_string()).unwrap_or_default()),
            ("WORLD_SIZE", g.world_size.to_string()),
            // This rank's GPUs (ranks of a job the placement split may differ): what
            // `torchrun --nproc-per-node` takes (as ORDO_GPUS).
            ("LOCAL_WORLD_SIZE", a.gpu_ids.len().to_string()),
        ]);
    }
    let env = job_env(std::env::vars(), &cfg.pass_env, &who, &job_vars);
    let started_at = now_ms();
    let mode = 0o666 & !umask;
    let files = output_file(&dir.join(format!("job-{}.out", a.job)), mode, user.as_ref())
        .and_then(|o| Ok((o, output_file(&dir.join(format!("job-{}.err", a.job)), mode, user.as_ref())?)));
    let (out, err) = match files {
        Ok(f) => f,
        Err(e) => {
            lock(&node.cores).release(a.job);
            let _ = std::fs::remove_file(&ctl_path);
            let msg =
                format!("this node's work directory: cannot create the job's output files in {}: {e}", dir.display());
            return report_unstarted(cfg, client, &a, Outcome::Refused, msg);
        }
    };
    let (prog, pre) = cfg.supervisor.split_first().expect("supervisor command is not empty");
    // `--output PATH`: the supervisor's output goes through `ordo agent-tee`, run as the job's
    // user (so the path is opened with that user's rights), into PATH and the work directory's
    // file; standard output and error together, as Slurm's `--output`.
    let (out, err, _tee) = match &a.output {
        None => (Stdio::from(out), Stdio::from(err), None),
        Some(path) => match spawn_tee(prog, path, mode, user.as_ref(), out) {
            Ok((w1, w2, child)) => (w1, w2, Some(child)),
            Err(e) => {
                lock(&node.cores).release(a.job);
                let _ = std::fs::remove_file(&ctl_path);
                let msg = format!("--output {path}: cannot start the copy of its output: {e}");
                return report_unstarted(cfg, client, &a, Outcome::Refused, msg);
            }
        },
    };
    let spawned = Command::new(prog)
        .args(pre)
        .arg("--time-limit-ms")
        .arg(a.time_limit_ms.max(1).to_string())
        .arg("--grace-ms")
        .arg(a.stop_grace_ms.unwrap_or(cfg.grace_ms).to_string())
        .args(a.stop_signal.as_ref().map(|s| ["--stop-signal".to_string(), s.clone()]).into_iter().flatten())
        .arg("--status")
        .arg(&status_path)
        .args(&extra)
        .arg("--")
        .args(&a.command)
        .current_dir(&cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn();
    let child = match spawned {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("ordo agent {}: job {}: cannot start the supervisor: {e}", cfg.name, a.job);
            None
        }
    };
    // Only rank 0's port is its own to report; the others' is rank 0's.
    let own_port = port.filter(|_| a.gang.as_ref().is_some_and(|g| g.rank == 0));
    let rec = RunRecord {
        job: a.job,
        attempt: a.attempt,
        started_at,
        gpu_ids: a.gpu_ids.clone(),
        port: own_port,
        cores: a.cpus.map(|_| cores.clone()).unwrap_or_default(),
        supervisor: child.as_ref().map_or(0, |c| c.id()),
    };
    // What a restarted agent needs to take this run over (see `adopt`).
    if let Err(e) = rec.write(dir) {
        eprintln!("ordo agent {}: job {}: {e} (a restarted agent could not take it over)", cfg.name, a.job);
    }
    lock(table).insert(
        a.job,
        Running { started_at, attempt: a.attempt, ctl: Some(ctl), gpu_ids: a.gpu_ids.clone(), port: own_port },
    );
    let run = RunFiles::new(dir, &rec, group);
    let (table, client, cores_table, node) = (table.clone(), client.clone(), node.cores.clone(), cfg.name.clone());
    std::thread::spawn(move || {
        let waited = child.map(|mut c| format!("{:?}", c.wait()));
        run.finish(&node, &rec, waited, &table, &client, &cores_table);
    });
}

/// What the agent records of each run it starts (`WORK_DIR/job-N-A.run`), so that an agent
/// that restarts finds it and takes it over (see [`adopt`]) instead of killing it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RunRecord {
    job: JobNo,
    attempt: u32,
    started_at: i64,
    gpu_ids: Vec<u32>,
    port: Option<u16>,
    /// CPU cores reserved for it (`--cpus`), none when it shares the unreserved ones.
    cores: Vec<u32>,
    /// The supervisor's process id (0: it could not be started).
    supervisor: u32,
}

impl RunRecord {
    fn path(dir: &Path, job: JobNo, attempt: u32) -> PathBuf {
        dir.join(format!("{}.run", crate::cgroup::run_name(job, attempt)))
    }

    /// Written whole or not at all (a temporary file renamed).
    fn write(&self, dir: &Path) -> Result<(), String> {
        let p = Self::path(dir, self.job, self.attempt);
        let tmp = p.with_extension("run.tmp");
        let b = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, b)
            .and_then(|_| std::fs::rename(&tmp, &p))
            .map_err(|e| format!("run record {}: {e}", p.display()))
    }
}

/// A run's files and group, and how its end is reported once its supervisor is gone.
#[derive(Debug)]
struct RunFiles {
    status: PathBuf,
    ctl: PathBuf,
    record: PathBuf,
    stuck: PathBuf,
    group: Option<JobGroup>,
}

impl RunFiles {
    fn new(dir: &Path, rec: &RunRecord, group: Option<JobGroup>) -> RunFiles {
        let run = crate::cgroup::run_name(rec.job, rec.attempt);
        RunFiles {
            status: dir.join(format!("{run}.status")),
            ctl: dir.join(format!("{run}.ctl")),
            record: RunRecord::path(dir, rec.job, rec.attempt),
            stuck: dir.join(format!("{run}.stuck")),
            group,
        }
    }

    /// The supervisor is gone (`waited`: how, when the agent started it; `None`: it could not
    /// be started): whatever ended it, nothing of the job may outlive it, so its group is emptied
    /// first; then its end is reported (which frees its GPUs in the server), retried until the
    /// server has it, and its files removed.
    fn finish(
        &self,
        node: &str,
        rec: &RunRecord,
        waited: Option<String>,
        table: &Table,
        client: &Client,
        cores: &Arc<Mutex<Cores>>,
    ) {
        if let Some(g) = &self.group {
            if g.populated() {
                eprintln!(
                    "ordo agent {node}: job {}: its supervisor ended and left processes {:?}; killing them",
                    rec.job,
                    g.pids()
                );
                g.empty(&self.stuck);
            }
            let _ = g.remove();
        }
        let base = EndReport {
            node: node.to_string(),
            job: rec.job,
            attempt: rec.attempt,
            outcome: Outcome::SpawnFailed,
            exit_code: None,
            signal: None,
            started_at: rec.started_at,
            ended_at: now_ms(),
            message: None,
        };
        let rep = match (&waited, read_status(&self.status)) {
            (Some(_), Some(s)) => EndReport {
                outcome: s.outcome,
                exit_code: s.exit_code,
                signal: s.signal,
                started_at: s.started_at,
                ended_at: s.ended_at,
                message: s.message,
                ..base
            },
            (Some(w), None) => {
                EndReport { message: Some(format!("the job's supervisor ended without a status ({w})")), ..base }
            }
            (None, _) => EndReport { message: Some("the agent could not start the job's supervisor".into()), ..base },
        };
        // Retry until the server has it; the job stays in the table (and so in every poll)
        // until then, so a restarted server learns it still runs.
        lock(cores).release(rep.job);
        send_report(client, &rep);
        lock(table).remove(&rep.job);
        for f in [&self.ctl, &self.status, &self.record] {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Whether process `pid` is the supervisor of the run whose status file is `status` (a pid
/// reused by another process is not).
fn supervises(pid: u32, status: &Path) -> bool {
    pid != 0
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            let want = status.as_os_str().as_encoded_bytes();
            c.split(|&b| b == 0).any(|arg| arg == want)
        })
}

/// At start, before the agent registers: takes over the runs an earlier agent of this node
/// left (same name, same work directory) whose supervisors still run: they go on, uninterrupted,
/// in the agent's table (so its first poll tells the server they run), their supervisors get
/// its lease renewals again, and their ends are reported when their supervisors exit. Runs
/// whose supervisor is gone are finished (their group emptied, their end reported: the status
/// the supervisor wrote, or none); groups without a record are killed.
fn adopt(cfg: &AgentConfig, node: &Node, table: &Table, client: &Client) {
    let dir = &cfg.work_dir;
    let mut records: Vec<RunRecord> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("job-") && n.ends_with(".run")))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    records.sort_by_key(|r| (r.job, r.attempt));
    let mut kept = HashSet::new();
    for rec in records {
        let group = node.contain.as_ref().map(|c| c.job(rec.job, rec.attempt));
        let run = RunFiles::new(dir, &rec, group);
        kept.insert(crate::cgroup::run_name(rec.job, rec.attempt));
        let alive = supervises(rec.supervisor, &run.status);
        let ctl = if alive { ctl_handle(&run.ctl).ok() } else { None };
        if ctl.is_some() {
            eprintln!(
                "ordo agent {}: job {} (run {}) still runs under supervisor {}: taking it over",
                cfg.name, rec.job, rec.attempt, rec.supervisor
            );
            lock(&node.cores).reserve(rec.job, &rec.cores);
        } else {
            eprintln!(
                "ordo agent {}: job {} (run {}) ended while no agent ran; reporting it",
                cfg.name, rec.job, rec.attempt
            );
        }
        lock(table).insert(
            rec.job,
            Running {
                started_at: rec.started_at,
                attempt: rec.attempt,
                ctl,
                gpu_ids: rec.gpu_ids.clone(),
                port: rec.port,
            },
        );
        let (table, client, cores, name) = (table.clone(), client.clone(), node.cores.clone(), cfg.name.clone());
        std::thread::spawn(move || {
            // Not this agent's child: watched until it is gone.
            while alive && supervises(rec.supervisor, &run.status) {
                std::thread::sleep(Duration::from_millis(200));
            }
            let how =
                if alive { "exited (watched after a restart of the agent)" } else { "gone before the agent started" };
            run.finish(&name, &rec, Some(how.to_string()), &table, &client, &cores);
        });
    }
    // Groups no record speaks for (a run whose record could not be written): killed.
    if let Some(c) = &node.contain {
        for (run, g) in c.leftovers().into_iter().filter(|(run, _)| !kept.contains(run)) {
            if g.populated() {
                eprintln!(
                    "ordo agent {}: killing processes {:?} of {run}, which no record of an earlier agent speaks for",
                    cfg.name,
                    g.pids()
                );
                g.empty(&cfg.work_dir.join(format!("{run}.stuck")));
            }
            if let Err(e) = g.remove() {
                eprintln!("ordo agent {}: {e}", cfg.name);
            }
        }
    }
}

/// Creates a job's control channel (a named pipe only root, or the agent's own account, may
/// open) and opens it for the agent, without blocking: read and write, so that it has a reader
/// until the supervisor opens it, and non-blocking, so that a write never waits on a supervisor
/// that is gone.
fn open_ctl(path: &Path) -> Result<std::fs::File, String> {
    use nix::sys::stat::Mode;
    let _ = std::fs::remove_file(path);
    nix::unistd::mkfifo(path, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| format!("its control channel {}: {e}", path.display()))?;
    ctl_handle(path).map_err(|e| format!("its control channel {}: {e}", path.display()))
}

/// The agent's end of a control channel that exists: read and write, without blocking.
fn ctl_handle(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).write(true).custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits()).open(path)
}

/// Sends an end report, retrying until the server has it (or refuses it for good).
fn send_report(client: &Client, rep: &EndReport) {
    loop {
        match client.post::<_, serde_json::Value>("/v1/agent/report", rep) {
            Ok(_) => break,
            Err(e) if matches!(e.status(), Some(400 | 401 | 403 | 404)) => {
                eprintln!("ordo agent {}: report for job {} refused: {e}", rep.node, rep.job);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic on a broken expectation
    use super::*;

    #[test]
    fn port_ranges_parse_and_refuse_privileged_or_reversed_ones() {
        assert_eq!("29500-30499".parse::<PortRange>(), Ok(PortRange::default()));
        assert_eq!("2000-2000".parse::<PortRange>(), Ok(PortRange { lo: 2000, hi: 2000 }));
        for bad in ["", "29500", "80-90", "3000-2000", "1-70000", "a-b", "29500-"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_port_held_by_a_listener_or_by_one_of_its_jobs_is_not_picked() {
        // A port another process listens on (here on loopback only, not on every address).
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let p = held.local_addr().unwrap().port();
        assert!(!port_free(p));
        let none = HashSet::new();
        assert!((1024..=u16::MAX - 40).contains(&p), "the kernel gave port {p}, outside its ephemeral range");
        assert_eq!(PortRange { lo: p, hi: p }.pick(p, &none), None, "the only port is held");
        let range = PortRange { lo: p, hi: p + 40 };
        let q = range.pick(p, &none).unwrap();
        assert!(q != p && (p..=p + 40).contains(&q), "{q}");
        // Ports this agent already gave its own jobs are skipped even though nothing listens yet
        // (two gangs' rank 0s started in one poll), and the search wraps around the range.
        let r = range.pick(p, &HashSet::from([q])).unwrap();
        assert!(r != q && r != p, "{r}");
        assert_eq!(range.after(p + 40), p);
        let w = range.pick(p + 40, &HashSet::from([p + 40])).unwrap();
        assert!(w != p && w != p + 40, "wrapped to {w}");
        drop(held);
    }
}
