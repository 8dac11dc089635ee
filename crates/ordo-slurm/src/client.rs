//! The [`Backend`] trait (what the driver needs from Slurm, by command-line clients or by
//! slurmrestd), the outcome of a batch of updates, and running a child process with a timeout.

use crate::config::SlurmConfig;
use crate::error::SlurmError;
use crate::job::{SlurmJob, SlurmNode};
use crate::topology::SlurmTopology;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the driver needs from Slurm: [`crate::SlurmCli`] or [`crate::SlurmRest`].
pub trait Backend {
    /// The cluster's nodes: GPUs, CPUs, memory, state and partitions.
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError>;
    /// The controller's pending and running jobs (others may be included and are ignored).
    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError>;
    /// The controller's configuration, or `None` where this backend cannot read it
    /// (slurmrestd has no endpoint for it).
    fn config(&self) -> Result<Option<SlurmConfig>, SlurmError>;
    /// The cluster's network topology (`scontrol show topology`): `None` where the controller
    /// has no topology plugin, or where this backend cannot read it (slurmrestd has no endpoint
    /// for it).
    fn topology(&self) -> Result<Option<SlurmTopology>, SlurmError> {
        Ok(None)
    }
    /// Sets each job's priority (at least 1), in the order given. Stops at the first sign the
    /// controller does not answer; a job the controller no longer knows as pending is reported
    /// in `failed` and the batch goes on.
    fn set_priorities(&self, changes: &[(u64, u64)]) -> Batch;
    /// Hands each job's priority back to Slurm's priority plugin (priority `INFINITE`, as
    /// `scontrol release` does: the plugin computes it again), in the order given. Callers
    /// must only pass jobs that are not held (on a held job this releases the hold).
    fn reset_priorities(&self, jobs: &[u64]) -> Batch;
    /// Fresh records of those of `jobs` whose record from the last read may be older than it
    /// ([`crate::SlurmRest`] reading job states only, between full reads): `None` for a job
    /// the controller no longer knows. Empty where every record of the last read is its own.
    /// The driver calls it before changing jobs, so that it never overrides a hold, a
    /// hand-set priority or a nice value it has not seen.
    fn recheck(&self, jobs: &[u64]) -> Result<Vec<(u64, Option<SlurmJob>)>, SlurmError> {
        let _ = jobs;
        Ok(Vec::new())
    }
    /// How the last read of the jobs went, for the pass line (`full read, N records`, `states
    /// of N jobs, K records fetched`), where there is something to say.
    fn read_note(&self) -> Option<String> {
        None
    }
    /// What this backend talks to, for messages (`scontrol`, `slurmrestd http://...`).
    fn describe(&self) -> String;
}

/// What happened to a batch of updates.
#[derive(Debug, Default)]
pub struct Batch {
    /// Jobs Slurm confirmed, in order.
    pub done: Vec<u64>,
    /// Jobs Slurm refused, with its message (the job ended or started meanwhile, or a refusal).
    pub failed: Vec<(u64, String)>,
    /// Jobs whose update may or may not have been applied: the controller stopped answering
    /// while they were on their way. The next read tells.
    pub unknown: Vec<u64>,
    /// Why the batch stopped early, if it did (an unreachable controller, or a refusal that is
    /// not about the job: permission denied, ...). Jobs after it were not sent.
    pub stopped: Option<SlurmError>,
    /// How long the batch took.
    pub elapsed: Duration,
}

/// Runs `program args...`, returns its stdout; fails on timeout, spawn error or non-zero exit.
/// Output is drained on threads so a child writing more than a pipe buffer cannot block; on
/// timeout the child (which this function started) is killed and reaped.
pub fn run_with_timeout(program: &str, args: &[&str], timeout: Duration) -> Result<String, SlurmError> {
    run(program, args, &[], None, timeout).and_then(|o| o.into_result())
}

/// A finished child's output.
#[derive(Debug)]
pub struct Output {
    /// The command line.
    pub cmd: String,
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit status as text.
    pub status: String,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Standard output if the child succeeded, else [`SlurmError::Failed`].
    pub fn into_result(self) -> Result<String, SlurmError> {
        if self.success {
            Ok(self.stdout)
        } else {
            Err(SlurmError::Failed { cmd: self.cmd, status: self.status, stderr: self.stderr.trim().to_string() })
        }
    }
}

/// Runs a child with extra environment variables and `input` (if any) written to its standard
/// input, bounded by `timeout`. Returns its output whatever its exit status; fails only when it
/// cannot be started or does not finish in time.
pub fn run(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: Option<&str>,
    timeout: Duration,
) -> Result<Output, SlurmError> {
    let cmd_text = std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| SlurmError::Spawn { cmd: cmd_text.clone(), err })?;
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
    let feeder = match (input, child.stdin.take()) {
        (Some(text), Some(mut stdin)) => {
            let text = text.to_string();
            Some(std::thread::spawn(move || {
                use std::io::Write;
                // A child that exits without reading gives a broken pipe: its exit status tells.
                let _ = stdin.write_all(text.as_bytes());
            }))
        }
        _ => None,
    };
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SlurmError::Timeout { cmd: cmd_text, timeout });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(SlurmError::Spawn { cmd: cmd_text, err: e }),
        }
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Output {
        cmd: cmd_text,
        success: status.success(),
        status: status.to_string(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}
