//! The node agent: registers the node's GPUs, long-polls the server for work (each poll is a
//! heartbeat that lists the jobs it runs), runs each job under a supervisor process, reports ends.

use crate::activity::{ActivitySource, Sampler};
use crate::api::*;
use crate::client::{Client, ClientError};
use crate::runas::{job_env, JobUser, RunAs};
use crate::supervise::Status;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
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

/// A memory cgroup the agent can create job groups in: `dir` is its `ordo` group (jobs go in
/// `dir/job-N`), `home` the group the agent runs in (a supervisor moves back there before it
/// removes its job's group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemCgroup {
    /// The `ordo` group.
    pub dir: PathBuf,
    /// The agent's own group.
    pub home: PathBuf,
    /// cgroup v2 (`memory.max`) rather than v1 (`memory.limit_in_bytes`).
    pub v2: bool,
}

/// Finds a writable memory cgroup: v1 (`/sys/fs/cgroup/memory`) or v2 (`/sys/fs/cgroup` or
/// `/sys/fs/cgroup/unified`), below the agent's own group or else at the root. Probes by
/// creating and removing a group. `Err` says why none is usable.
pub fn find_mem_cgroup() -> Result<MemCgroup, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mut why = Vec::new();
    // v1: the line whose controllers include `memory`.
    let v1 = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',').any(|c| c == "memory").then(|| path.to_string())
    });
    if let Some(path) = v1 {
        let root = Path::new("/sys/fs/cgroup/memory");
        let home = root.join(path.trim_start_matches('/'));
        for parent in [home.clone(), root.to_path_buf()] {
            match probe(&parent, false) {
                Ok(dir) => return Ok(MemCgroup { dir, home, v2: false }),
                Err(e) => why.push(e),
            }
        }
    }
    let v2 = own.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string);
    if let Some(path) = v2 {
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"].map(Path::new) {
            let ctl = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "memory") {
                why.push(format!("{}: no memory controller", root.display()));
                continue;
            }
            let home = root.join(path.trim_start_matches('/'));
            for parent in [home.clone(), root.to_path_buf()] {
                match probe(&parent, true) {
                    Ok(dir) => return Ok(MemCgroup { dir, home: home.clone(), v2: true }),
                    Err(e) => why.push(e),
                }
            }
        }
    }
    if why.is_empty() {
        why.push("no memory controller in /proc/self/cgroup".into());
    }
    Err(why.join("; "))
}

fn probe(parent: &Path, v2: bool) -> Result<PathBuf, String> {
    let e = |what: &str, p: &Path, err: std::io::Error| format!("{what} {}: {err}", p.display());
    if v2 {
        // Let children of `parent` and of `ordo` use the memory controller.
        let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory");
    }
    let dir = parent.join("ordo");
    std::fs::create_dir_all(&dir).map_err(|err| e("create", &dir, err))?;
    if v2 {
        std::fs::write(dir.join("cgroup.subtree_control"), "+memory")
            .map_err(|err| e("enable memory in", &dir, err))?;
    }
    let p = dir.join(format!("probe-{}", std::process::id()));
    let _ = std::fs::remove_dir(&p);
    std::fs::create_dir(&p).map_err(|err| e("create", &p, err))?;
    let file = p.join(if v2 { "memory.max" } else { "memory.limit_in_bytes" });
    let ok = file.exists();
    let _ = std::fs::remove_dir(&p);
    if ok {
        Ok(dir)
    } else {
        Err(format!("{} has no {}", p.display(), file.display()))
    }
}

/// GPUs found: count, whether fake, model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpus {
    /// How many.
    pub count: u32,
    /// Fake (no NVML).
    pub fake: bool,
    /// Model name.
    pub model: Option<String>,
}

/// Finds the node's GPUs.
pub fn detect_gpus(spec: GpuSpec) -> Result<Gpus, AgentError> {
    match spec {
        GpuSpec::Fake(n) => Ok(Gpus { count: n, fake: true, model: None }),
        GpuSpec::Auto => nvml_gpus(),
    }
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
    let model = nvml.device_by_index(0).and_then(|d| d.name()).ok();
    Ok(Gpus { count, fake: false, model })
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
    stdin: Option<ChildStdin>,
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
    cgroup: Option<MemCgroup>,
    /// The next rendezvous port to try: ports go round the range, so that one a job just
    /// released (perhaps still in TIME_WAIT) is not the next one handed out.
    next_port: Arc<Mutex<u16>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the agent until the process ends (or the server refuses it for good).
pub fn run(mut cfg: AgentConfig) -> Result<(), AgentError> {
    let gpus = detect_gpus(cfg.gpus)?;
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
    let cgroup = match find_mem_cgroup() {
        Ok(c) => {
            eprintln!("ordo agent {}: memory limits enforced through cgroup {}", cfg.name, c.dir.display());
            Some(c)
        }
        Err(why) => {
            eprintln!("ordo agent {}: memory limits: not enforced (no writable cgroup: {why})", cfg.name);
            None
        }
    };
    let node = Node {
        cores: Arc::new(Mutex::new(Cores { owner: vec![None; cores.len()], ids: cores })),
        cgroup,
        next_port: Arc::new(Mutex::new(cfg.master_ports.lo)),
    };
    let table: Table = Arc::default();
    let client = |timeout: Duration| {
        Client::with_ca(&cfg.server, Some(cfg.token.clone()), timeout, cfg.ca_pem.as_deref())
            .map_err(AgentError::Refused)
    };
    let short = client(Duration::from_secs(10))?;
    let reg = RegisterRequest {
        node: cfg.name.clone(),
        gpus: gpus.count,
        fake: gpus.fake,
        gpu_model: gpus.model.clone(),
        cpus: Some(lock(&node.cores).ids.len() as u32),
        mem_mib,
        mem_limits: node.cgroup.is_some(),
        clock: None,
        addr: cfg.addr.clone(),
    };
    let mut timing = register(&short, &reg, &cfg, &gpus)?;
    if let Some(s) = sampler {
        start_sampling(&cfg, s, &table, &short);
    }
    let mut long = client(Duration::from_millis(timing.heartbeat_ms + 10_000))?;
    loop {
        let running: Vec<RunningJob> = lock(&table)
            .iter()
            .map(|(&job, r)| RunningJob { job, started_at: r.started_at, attempt: r.attempt, port: r.port })
            .collect();
        let req = PollRequest { node: cfg.name.clone(), running, wait_ms: timing.heartbeat_ms };
        match long.post::<_, PollResponse>("/v1/agent/poll", &req) {
            Ok(resp) => {
                for a in resp.start {
                    if !lock(&table).contains_key(&a.job) {
                        start_job(&cfg, &node, &table, &short, a);
                    }
                }
                for k in resp.kill {
                    if let Some(r) = lock(&table).get_mut(&k) {
                        if let Some(mut s) = r.stdin.take() {
                            let _ = s.write_all(b"kill\n");
                        }
                    }
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

fn register(c: &Client, reg: &RegisterRequest, cfg: &AgentConfig, gpus: &Gpus) -> Result<RegisterResponse, AgentError> {
    loop {
        let reg = RegisterRequest { clock: Some(now_ms()), ..reg.clone() };
        match c.post::<_, RegisterResponse>("/v1/agent/register", &reg) {
            Ok(t) => {
                let kind = if gpus.fake {
                    "FAKE GPUs (--gpus N: no NVML; CUDA_VISIBLE_DEVICES is set but there is no GPU behind it)"
                        .to_string()
                } else {
                    format!("GPUs ({})", gpus.model.clone().unwrap_or_else(|| "NVML".into()))
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
            Err(e) if matches!(e.status(), Some(400 | 401 | 403)) => return Err(AgentError::Refused(e)),
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

fn start_job(cfg: &AgentConfig, node: &Node, table: &Table, client: &Client, a: Assignment) {
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
    if let (Some(m), Some(cg)) = (a.mem_mib, &node.cgroup) {
        extra.extend([
            "--cgroup".into(),
            cg.dir.join(format!("job-{}", a.job)).to_string_lossy().into_owned(),
            "--cgroup-home".into(),
            cg.home.to_string_lossy().into_owned(),
            "--mem-mib".into(),
            m.to_string(),
        ]);
        if cg.v2 {
            extra.push("--cgroup-v2".into());
        }
    }
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
    let status_path = dir.join(format!("job-{}.status", a.job));
    let _ = std::fs::remove_file(&status_path);
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
    let spawned = files.and_then(|(out, err)| {
        let (prog, pre) = cfg.supervisor.split_first().expect("supervisor command is not empty");
        Command::new(prog)
            .args(pre)
            .arg("--time-limit-ms")
            .arg(a.time_limit_ms.max(1).to_string())
            .arg("--grace-ms")
            .arg(cfg.grace_ms.to_string())
            .arg("--status")
            .arg(&status_path)
            .args(&extra)
            .arg("--")
            .args(&a.command)
            .current_dir(&cwd)
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
    });
    let (child, stdin) = match spawned {
        Ok(mut c) => {
            let s = c.stdin.take();
            (Some(c), s)
        }
        Err(e) => {
            eprintln!("ordo agent {}: job {}: cannot start the supervisor: {e}", cfg.name, a.job);
            (None, None)
        }
    };
    // Only rank 0's port is its own to report; the others' is rank 0's.
    let own_port = port.filter(|_| a.gang.as_ref().is_some_and(|g| g.rank == 0));
    lock(table)
        .insert(a.job, Running { started_at, attempt: a.attempt, stdin, gpu_ids: a.gpu_ids.clone(), port: own_port });
    let table = table.clone();
    let client = client.clone();
    let cores_table = node.cores.clone();
    let node = cfg.name.clone();
    std::thread::spawn(move || {
        let rep = match child {
            Some(mut c) => {
                let waited = c.wait();
                let st: Option<Status> = std::fs::read(&status_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
                match st {
                    Some(s) => EndReport {
                        node: node.clone(),
                        job: a.job,
                        attempt: a.attempt,
                        outcome: s.outcome,
                        exit_code: s.exit_code,
                        signal: s.signal,
                        started_at: s.started_at,
                        ended_at: s.ended_at,
                        message: s.message,
                    },
                    None => EndReport {
                        node: node.clone(),
                        job: a.job,
                        attempt: a.attempt,
                        outcome: Outcome::SpawnFailed,
                        exit_code: None,
                        signal: None,
                        started_at,
                        ended_at: now_ms(),
                        message: Some(format!("the supervisor ended without a status ({waited:?})")),
                    },
                }
            }
            None => EndReport {
                node: node.clone(),
                job: a.job,
                attempt: a.attempt,
                outcome: Outcome::SpawnFailed,
                exit_code: None,
                signal: None,
                started_at,
                ended_at: now_ms(),
                message: Some("the agent could not start the job's supervisor".into()),
            },
        };
        // Retry until the server has it; the job stays in the table (and so in every poll)
        // until then, so a restarted server learns it still runs.
        lock(&cores_table).release(rep.job);
        send_report(&client, &rep);
        lock(&table).remove(&rep.job);
    });
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
