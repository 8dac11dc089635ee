//! Running Slurm's own client commands (`sinfo`, `squeue --json`, `scontrol`, `sacct`) with a
//! timeout on every call, and turning their output into [`SlurmNode`]s and [`SlurmJob`]s.

use crate::error::SlurmError;
use crate::parse::{parse_sinfo, parse_squeue_json, SlurmJob, SlurmNode};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the driver needs from Slurm, by command-line clients ([`SlurmCli`]) or by slurmrestd
/// ([`SlurmRest`]).
pub trait Backend {
    /// The cluster's nodes and their GPUs.
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError>;
    /// The controller's jobs (pending and running ones matter).
    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError>;
    /// Sets a pending job's priority (at least 1; 0 would hold it).
    fn set_priority(&self, job: u64, priority: u32) -> Result<(), SlurmError>;
    /// Hands a job's priority back to Slurm's priority plugin.
    fn reset_priority(&self, job: u64) -> Result<(), SlurmError>;
}

impl Backend for SlurmCli {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        SlurmCli::nodes(self)
    }
    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        SlurmCli::jobs(self)
    }
    fn set_priority(&self, job: u64, priority: u32) -> Result<(), SlurmError> {
        SlurmCli::set_priority(self, job, priority)
    }
    fn reset_priority(&self, job: u64) -> Result<(), SlurmError> {
        SlurmCli::reset_priority(self, job)
    }
}

/// A handle on a Slurm cluster through slurmrestd (OpenAPI `v0.0.38`, Slurm 22.05) with JWT
/// authentication. Requests go through `curl` (bounded by the timeout); the token is passed on
/// curl's standard input, never on its command line.
#[derive(Clone)]
pub struct SlurmRest {
    /// Base URL, e.g. `http://127.0.0.1:6820`.
    pub base: String,
    /// The user the token belongs to (`X-SLURM-USER-NAME`).
    pub user: String,
    /// The JWT (`X-SLURM-USER-TOKEN`), e.g. from `scontrol token`.
    pub token: String,
    /// OpenAPI version path segment.
    pub version: String,
    /// Longest time one request may take.
    pub timeout: Duration,
    /// Only this partition's nodes and jobs, if set.
    pub partition: Option<String>,
}

impl std::fmt::Debug for SlurmRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmRest")
            .field("base", &self.base)
            .field("user", &self.user)
            .field("token", &"<hidden>")
            .finish()
    }
}

impl SlurmRest {
    /// A client for `base` with the given user and token, API `v0.0.38`.
    pub fn new(base: &str, user: &str, token: &str, timeout: Duration) -> Self {
        SlurmRest {
            base: base.trim_end_matches('/').to_string(),
            user: user.to_string(),
            token: token.trim().trim_start_matches("SLURM_JWT=").to_string(),
            version: "v0.0.38".into(),
            timeout,
            partition: None,
        }
    }

    fn request(&self, method: &str, path: &str, body: Option<&str>) -> Result<serde_json::Value, SlurmError> {
        let url = format!("{}/slurm/{}/{}", self.base, self.version, path);
        let secs = format!("{:.3}", self.timeout.as_secs_f64());
        let mut args = vec!["-sS", "--fail-with-body", "--max-time", &secs, "-X", method, "-K", "-", &url];
        if let Some(b) = body {
            args.extend(["-H", "Content-Type: application/json", "--data-binary", b]);
        }
        let config = format!(
            "header = \"X-SLURM-USER-NAME: {}\"\nheader = \"X-SLURM-USER-TOKEN: {}\"\n",
            self.user.replace(['"', '\\', '\n'], ""),
            self.token.replace(['"', '\\', '\n'], "")
        );
        let out =
            run_with_input("curl", &args, Some(&config), self.timeout + Duration::from_secs(1)).map_err(
                |e| match e {
                    // curl's connection failures (7: refused, 28: timeout, 52: empty reply) mean "unreachable".
                    SlurmError::Failed { cmd, status, stderr }
                        if ["exit status: 7", "exit status: 28", "exit status: 52", "exit status: 56"]
                            .contains(&status.as_str()) =>
                    {
                        SlurmError::Failed {
                            cmd,
                            status,
                            stderr: format!("{stderr} (connection refused or timed out: slurmctld/slurmrestd down)"),
                        }
                    }
                    other => other,
                },
            )?;
        let doc: serde_json::Value = serde_json::from_str(&out).map_err(|e| SlurmError::Parse {
            source_name: url.clone(),
            location: format!("line {} column {}", e.line(), e.column()),
            what: format!("not JSON: {e}"),
        })?;
        if let Some(err) = doc.get("errors").and_then(|e| e.as_array()).and_then(|a| a.first()) {
            let text = err.to_string();
            let unreachable = text.contains("Unable to contact slurm controller") || text.contains("connect failure");
            return Err(SlurmError::Failed {
                cmd: format!("{method} {url}"),
                status: "slurmrestd error".into(),
                stderr: if unreachable { format!("{text} (connection refused: slurmctld down)") } else { text },
            });
        }
        Ok(doc)
    }
}

impl Backend for SlurmRest {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        let doc = self.request("GET", "nodes", None)?;
        crate::parse::parse_rest_nodes(&doc, self.partition.as_deref())
    }
    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let doc = self.request("GET", "jobs", None)?;
        let mut jobs = parse_squeue_json(&doc.to_string(), "slurmrestd jobs")?;
        if let Some(p) = &self.partition {
            jobs.retain(|j| j.partition.split(',').any(|x| x == p));
        }
        Ok(jobs)
    }
    fn set_priority(&self, job: u64, priority: u32) -> Result<(), SlurmError> {
        let body = format!("{{\"priority\": {}}}", priority.max(1));
        self.request("POST", &format!("job/{job}"), Some(&body)).map(|_| ())
    }
    fn reset_priority(&self, job: u64) -> Result<(), SlurmError> {
        // `hold: false` is slurmrestd's `scontrol release`: the priority is computed again.
        self.request("POST", &format!("job/{job}"), Some("{\"hold\": false}")).map(|_| ())
    }
}

/// A handle on a Slurm cluster through its command-line clients. Every call is bounded by
/// `timeout`: Slurm clients block while the controller is down, and the driver must not.
#[derive(Debug, Clone)]
pub struct SlurmCli {
    /// Longest time one client call may take before it is killed and reported as unreachable.
    pub timeout: Duration,
    /// Only this partition's nodes and jobs, if set (`sinfo -p`, `squeue -p`).
    pub partition: Option<String>,
}

impl SlurmCli {
    /// A client with the given per-call timeout and no partition filter.
    pub fn new(timeout: Duration) -> Self {
        SlurmCli { timeout, partition: None }
    }

    /// Runs `program args...`, returns its stdout; fails on timeout, spawn error or non-zero exit.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        run_with_timeout(program, args, self.timeout)
    }

    /// The cluster's nodes and their GPUs (`sinfo -N`), deduplicated over partitions.
    pub fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        let mut args = vec!["-h", "-N", "-o", "%N|%G|%c|%m|%T"];
        if let Some(p) = &self.partition {
            args.push("-p");
            args.push(p);
        }
        let out = self.run("sinfo", &args)?;
        parse_sinfo(&out)
    }

    /// Every job the controller knows (`squeue --json --all`); pending and running ones are
    /// what the driver uses.
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let mut args = vec!["--json", "--all"];
        if let Some(p) = &self.partition {
            args.push("-p");
            args.push(p);
        }
        let out = self.run("squeue", &args)?;
        let mut jobs = parse_squeue_json(&out, "squeue --json")?;
        if let Some(p) = &self.partition {
            // `squeue -p` is ignored by `--json` in some Slurm versions: filter again here.
            jobs.retain(|j| j.partition.split(',').any(|x| x == p));
        }
        Ok(jobs)
    }

    /// Sets a job's priority (`scontrol update JobId=N Priority=P`). A `P` of 0 is raised to 1:
    /// priority 0 would hold the job, which ordo never does.
    pub fn set_priority(&self, job: u64, priority: u32) -> Result<(), SlurmError> {
        let priority = priority.max(1);
        self.run("scontrol", &["update", &format!("JobId={job}"), &format!("Priority={priority}")]).map(|_| ())
    }

    /// Hands a job's priority back to Slurm (`scontrol release N`): in Slurm 22.05 this clears
    /// an administrator-set priority and makes Slurm compute it again from its priority plugin.
    /// Callers must only use it on jobs that are not held.
    pub fn reset_priority(&self, job: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &["release", &job.to_string()]).map(|_| ())
    }

    /// Raw `sacct --parsable2` accounting text for all users (allocations only, `-X`), with the
    /// columns ordo's `sacct` trace format reads. `since`/`until` are passed to `-S`/`-E` as
    /// given (Slurm date syntax, e.g. `2024-05-01` or `now-7days`).
    pub fn sacct(&self, since: Option<&str>, until: Option<&str>) -> Result<String, SlurmError> {
        let mut args = vec!["--parsable2", "--allusers", "-X", "--format", SACCT_FORMAT];
        // Without -S, sacct shows only today's jobs; default to everything it has.
        args.push("-S");
        args.push(since.unwrap_or("1970-01-01T00:00:00"));
        if let Some(u) = until {
            args.push("-E");
            args.push(u);
        }
        if let Some(p) = &self.partition {
            args.push("-r");
            args.push(p);
        }
        self.run("sacct", &args)
    }
}

/// The `sacct --format` columns ordo imports.
pub const SACCT_FORMAT: &str =
    "JobID,User,Account,Partition,Submit,Start,End,Elapsed,Timelimit,AllocTRES,ReqTRES,State,Priority";

/// Runs a command with a wall-clock limit. Output is drained on threads so a child writing
/// more than a pipe buffer cannot block; on timeout the child (which this function started) is
/// killed and reaped.
pub fn run_with_timeout(program: &str, args: &[&str], timeout: Duration) -> Result<String, SlurmError> {
    run_with_input(program, args, None, timeout)
}

/// As [`run_with_timeout`], writing `input` (if any) to the child's standard input first (how
/// secrets such as a JWT reach `curl` without appearing in its command line).
pub fn run_with_input(
    program: &str,
    args: &[&str],
    input: Option<&str>,
    timeout: Duration,
) -> Result<String, SlurmError> {
    let cmd_text = std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| SlurmError::Spawn { cmd: cmd_text.clone(), err })?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        // A child that exits without reading gives a broken pipe: its exit status tells.
        let _ = stdin.write_all(text.as_bytes());
    }
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SlurmError::Timeout { cmd: cmd_text, timeout });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(SlurmError::Spawn { cmd: cmd_text, err: e }),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        return Err(SlurmError::Failed {
            cmd: cmd_text,
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}
