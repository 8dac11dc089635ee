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
    /// CPU cores to pin the job to (its affinity, inherited by everything it starts).
    pub cpu_list: Option<Vec<u32>>,
    /// A memory limit to enforce through a cgroup.
    pub mem: Option<MemLimit>,
    /// The umask the job runs under.
    pub umask: u32,
    /// The Unix account the job runs as, when not the supervisor's own (the supervisor stays
    /// root, so the job can neither kill it nor escape its time limit).
    pub run_as: Option<RunAsIds>,
    /// The program (and arguments) that becomes [`SuperviseArgs::run_as`] and then executes
    /// the job: `ordo agent-exec` (see [`exec_as`]).
    pub exec_helper: Vec<String>,
}

/// A Unix account by its numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAsIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// All its groups.
    pub groups: Vec<u32>,
}

/// `ordo agent-exec`: becomes `ids` and executes `command` in place (same process, so the same
/// process group the supervisor watches). Returns only when it could not: 126 when the account
/// could not be taken or the program is not executable, 127 when it was not found, as shells do.
pub fn exec_as(ids: &RunAsIds, command: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    if let Err(e) = crate::runas::become_user(ids.uid, ids.gid, &ids.groups) {
        eprintln!("ordo: cannot run the job as uid {}: {e}", ids.uid);
        return 126;
    }
    let Some((prog, args)) = command.split_first() else {
        eprintln!("ordo: empty command");
        return 127;
    };
    let e = Command::new(prog).args(args).exec();
    eprintln!("ordo: cannot start `{prog}`: {e}");
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// A memory limit through a cgroup: the supervisor creates `group`, sets the limit, moves itself
/// in (so the job and all it starts are inside from their first instruction), and at the end
/// moves back to `home` and removes the group.
#[derive(Debug, Clone)]
pub struct MemLimit {
    /// The job's group (created; must not exist or be empty).
    pub group: PathBuf,
    /// Where the supervisor returns before removing the group.
    pub home: PathBuf,
    /// The limit, MiB.
    pub mib: u64,
    /// cgroup v2 (else v1).
    pub v2: bool,
}

impl MemLimit {
    fn enter(&self) -> Result<(), String> {
        let e = |what: &str, err: std::io::Error| format!("memory cgroup {}: {what}: {err}", self.group.display());
        if self.group.exists() {
            let _ = std::fs::remove_dir(&self.group);
        }
        std::fs::create_dir_all(&self.group).map_err(|err| e("create", err))?;
        let bytes = (self.mib * 1024 * 1024).to_string();
        if self.v2 {
            std::fs::write(self.group.join("memory.max"), &bytes).map_err(|err| e("set memory.max", err))?;
            // No swapping past the limit (absent where swap accounting is off).
            let _ = std::fs::write(self.group.join("memory.swap.max"), "0");
        } else {
            std::fs::write(self.group.join("memory.limit_in_bytes"), &bytes)
                .map_err(|err| e("set memory.limit_in_bytes", err))?;
            let _ = std::fs::write(self.group.join("memory.memsw.limit_in_bytes"), &bytes);
        }
        std::fs::write(self.group.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|err| e("move the supervisor in", err))
    }

    /// Times the kernel's OOM killer fired in the group.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        std::fs::read_to_string(self.group.join(file))
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    fn leave(&self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), std::process::id().to_string());
        // The killed job's processes leave the group a moment after they die.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.group).is_ok() || !self.group.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("ordo supervisor: could not remove {}", self.group.display());
    }
}

fn pin(cpus: &[u32]) -> Result<(), String> {
    use nix::sched::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c as usize).map_err(|e| format!("CPU {c}: {e}"))?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("pin to CPUs {cpus:?}: {e}"))
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
    let fail = |message: String| Status {
        outcome: Outcome::SpawnFailed,
        exit_code: None,
        signal: None,
        started_at,
        ended_at: now_ms(),
        message: Some(message),
    };
    // Affinity, cgroup and umask are the supervisor's own, set before the job exists: the job
    // and every process it starts inherit them.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(a.umask & 0o777));
    if let Some(c) = &a.cpu_list {
        if let Err(m) = pin(c) {
            return write(&fail(m));
        }
    }
    if let Some(m) = &a.mem {
        if let Err(msg) = m.enter() {
            m.leave();
            return write(&fail(msg));
        }
    }
    let mut cmd = match (&a.run_as, a.exec_helper.split_first()) {
        (Some(ids), Some((helper, pre))) => {
            let mut c = Command::new(helper);
            c.args(pre)
                .args(["--uid", &ids.uid.to_string(), "--gid", &ids.gid.to_string()])
                .arg("--groups")
                .arg(ids.groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(","))
                .arg("--")
                .arg(prog)
                .args(args);
            c
        }
        (Some(_), None) => return write(&fail("no helper to change the job's account".into())),
        (None, _) => {
            let mut c = Command::new(prog);
            c.args(args);
            c
        }
    };
    let mut child = match cmd.stdin(Stdio::null()).process_group(0).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ordo: cannot start `{prog}`: {e}");
            if let Some(m) = &a.mem {
                m.leave();
            }
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
    if a.mem.is_some() {
        // The OOM killer must pick the job, not its supervisor (the job was forked before this).
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }
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
    let (exit_code, signal, mut message) = match status {
        Ok(s) => (s.code(), s.signal(), None),
        Err(e) => (None, None, Some(format!("wait: {e}"))),
    };
    let mut outcome = outcome;
    if let Some(m) = &a.mem {
        let kills = m.oom_kills();
        if kills > 0 && outcome == Outcome::Exited && exit_code != Some(0) {
            outcome = Outcome::OutOfMemory;
            message = Some(format!("the kernel killed it at its memory limit of {} MiB", m.mib));
        }
        m.leave();
    }
    write(&Status { outcome, exit_code, signal, started_at, ended_at: now_ms(), message })
}
