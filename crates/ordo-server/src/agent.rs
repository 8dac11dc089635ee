//! The node agent: registers the node's GPUs, long-polls the server for work (each poll is a
//! heartbeat that lists the jobs it runs), runs each job under a supervisor process, reports ends.

use crate::api::*;
use crate::client::{Client, ClientError};
use crate::supervise::Status;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
    /// `--time-limit-ms T --grace-ms G --status FILE -- COMMAND...` is appended.
    pub supervisor: Vec<String>,
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
    stdin: Option<ChildStdin>,
}

type Table = Arc<Mutex<HashMap<JobNo, Running>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the agent until the process ends (or the server refuses it for good).
pub fn run(cfg: AgentConfig) -> Result<(), AgentError> {
    let gpus = detect_gpus(cfg.gpus)?;
    std::fs::create_dir_all(&cfg.work_dir)
        .map_err(|source| AgentError::WorkDir { path: cfg.work_dir.clone(), source })?;
    let table: Table = Arc::default();
    let short = Client::new(&cfg.server, Some(cfg.token.clone()), Duration::from_secs(10));
    let reg =
        RegisterRequest { node: cfg.name.clone(), gpus: gpus.count, fake: gpus.fake, gpu_model: gpus.model.clone() };
    let mut timing = register(&short, &reg, &cfg, &gpus)?;
    let mut long =
        Client::new(&cfg.server, Some(cfg.token.clone()), Duration::from_millis(timing.heartbeat_ms + 10_000));
    loop {
        let running: Vec<RunningJob> =
            lock(&table).iter().map(|(&job, r)| RunningJob { job, started_at: r.started_at }).collect();
        let req = PollRequest { node: cfg.name.clone(), running, wait_ms: timing.heartbeat_ms };
        match long.post::<_, PollResponse>("/v1/agent/poll", &req) {
            Ok(resp) => {
                for a in resp.start {
                    if !lock(&table).contains_key(&a.job) {
                        start_job(&cfg, &table, &short, a);
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
                long = Client::new(
                    &cfg.server,
                    Some(cfg.token.clone()),
                    Duration::from_millis(timing.heartbeat_ms + 10_000),
                );
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
        match c.post::<_, RegisterResponse>("/v1/agent/register", reg) {
            Ok(t) => {
                let kind = if gpus.fake {
                    "FAKE GPUs (--gpus N: no NVML; CUDA_VISIBLE_DEVICES is set but there is no GPU behind it)"
                        .to_string()
                } else {
                    format!("GPUs ({})", gpus.model.clone().unwrap_or_else(|| "NVML".into()))
                };
                eprintln!("ordo agent {}: registered {} {kind} with {}", cfg.name, gpus.count, c.base());
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

fn start_job(cfg: &AgentConfig, table: &Table, client: &Client, a: Assignment) {
    let dir = &cfg.work_dir;
    let status_path = dir.join(format!("job-{}.status", a.job));
    let _ = std::fs::remove_file(&status_path);
    let cwd = a.cwd.as_deref().map(Path::new).filter(|p| p.is_dir()).unwrap_or(dir).to_path_buf();
    let devices: Vec<String> = a.gpu_ids.iter().map(|i| i.to_string()).collect();
    let started_at = now_ms();
    let files = std::fs::File::create(dir.join(format!("job-{}.out", a.job)))
        .and_then(|o| Ok((o, std::fs::File::create(dir.join(format!("job-{}.err", a.job)))?)));
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
            .arg("--")
            .args(&a.command)
            .current_dir(&cwd)
            .env("CUDA_VISIBLE_DEVICES", devices.join(","))
            .env("ORDO_JOB_ID", a.job.to_string())
            .env("ORDO_NODE", &cfg.name)
            .env("ORDO_GPUS", a.gpu_ids.len().to_string())
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
    lock(table).insert(a.job, Running { started_at, stdin });
    let table = table.clone();
    let client = client.clone();
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
        loop {
            match client.post::<_, serde_json::Value>("/v1/agent/report", &rep) {
                Ok(_) => break,
                Err(e) if matches!(e.status(), Some(400 | 401 | 403 | 404)) => {
                    eprintln!("ordo agent {node}: report for job {} refused: {e}", rep.job);
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        lock(&table).remove(&rep.job);
    });
}
