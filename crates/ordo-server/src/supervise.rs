//! The job supervisor: a small process between the agent and a job. It runs the job in its own
//! process group and kills the whole group on time-out, on request, or when the agent dies.
//!
//! Its standard input is the agent's lifeline: a line `kill` asks for a kill; end of file means
//! the agent is gone, so the job must not outlive it (its node will be declared down and the
//! job run elsewhere). It writes how the job ended as JSON to a status file.

use crate::api::{now_ms, Outcome};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the supervisor needs.
#[derive(Debug, Clone)]
pub struct SuperviseArgs {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Kill the job after this long, ms.
    pub time_limit_ms: u64,
    /// Between SIGTERM and SIGKILL, ms.
    pub grace_ms: u64,
    /// Where to write the [`Status`].
    pub status: PathBuf,
}

/// How the job ended, as written to the status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Outcome.
    pub outcome: Outcome,
    /// Exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Start and end (ms since the epoch).
    pub started_at: i64,
    /// End.
    pub ended_at: i64,
    /// Error text when it could not start.
    pub message: Option<String>,
}

enum Ev {
    Exited(std::io::Result<ExitStatus>),
    Kill,
    AgentGone,
}

fn signal_group(pid: u32, sig: Signal) {
    // ESRCH (the group is already gone) is the normal case after the job exited.
    let _ = killpg(Pid::from_raw(pid as i32), sig);
}

/// Runs the job to its end and writes the status file. Returns the exit code for the
/// supervisor process (0 when the status was written).
pub fn supervise(a: &SuperviseArgs) -> i32 {
    let started_at = now_ms();
    let write = |st: &Status| match serde_json::to_vec(st).map(|b| std::fs::write(&a.status, b)) {
        Ok(Ok(())) => 0,
        _ => {
            eprintln!("ordo supervisor: cannot write {}", a.status.display());
            3
        }
    };
    let Some((prog, args)) = a.command.split_first() else {
        return write(&Status {
            outcome: Outcome::SpawnFailed,
            exit_code: None,
            signal: None,
            started_at,
            ended_at: now_ms(),
            message: Some("empty command".into()),
        });
    };
    let mut child = match Command::new(prog).args(args).stdin(Stdio::null()).process_group(0).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ordo: cannot start `{prog}`: {e}");
            return write(&Status {
                outcome: Outcome::SpawnFailed,
                exit_code: None,
                signal: None,
                started_at,
                ended_at: now_ms(),
                message: Some(format!("`{prog}`: {e}")),
            });
        }
    };
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let t1 = tx.clone();
    std::thread::spawn(move || {
        let _ = t1.send(Ev::Exited(child.wait()));
    });
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.lock().read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Ev::AgentGone);
                    return;
                }
                Ok(_) if line.trim() == "kill" => {
                    let _ = tx.send(Ev::Kill);
                    return;
                }
                Ok(_) => {}
            }
        }
    });
    let left = Duration::from_millis(a.time_limit_ms);
    let (outcome, status) = match rx.recv_timeout(left) {
        Ok(Ev::Exited(st)) => (Outcome::Exited, st),
        other => {
            let why = if other.is_err() { Outcome::Timeout } else { Outcome::Killed };
            signal_group(pid, Signal::SIGTERM);
            let grace_end = std::time::Instant::now() + Duration::from_millis(a.grace_ms);
            let st = loop {
                let left = grace_end.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok(Ev::Exited(st)) => break st,
                    Ok(_) => continue,
                    Err(_) => {
                        signal_group(pid, Signal::SIGKILL);
                        break loop {
                            if let Ok(Ev::Exited(st)) = rx.recv() {
                                break st;
                            }
                        };
                    }
                }
            };
            (why, st)
        }
    };
    // Leave nothing of the job behind (children it forked into its group).
    signal_group(pid, Signal::SIGKILL);
    let (exit_code, signal, message) = match status {
        Ok(s) => (s.code(), s.signal(), None),
        Err(e) => (None, None, Some(format!("wait: {e}"))),
    };
    write(&Status { outcome, exit_code, signal, started_at, ended_at: now_ms(), message })
}
