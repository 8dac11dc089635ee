//! The job supervisor: a small process between the agent and a job. It runs the job in the job's
//! own cgroup (`cgroup.rs`), kills every process of that group on time-out, on request, when
//! the agent's lease runs out, and when the job's main process ends, and writes how the job
//! ended only once the group is empty: until then the job's GPUs are not given back.
//!
//! Its control channel is a named pipe (`--ctl`) that only root can open: the agent writes
//! `renew T` (the lease runs until `T`, ms of `CLOCK_BOOTTIME`) after every poll the server
//! answered, and `kill` to stop the job. A supervisor whose lease runs out kills the job: an
//! agent that cannot reach the server (partitioned, paused, dead) stops its jobs before the
//! server, which waits the lease and a grace, may start them elsewhere. It relays the job's
//! output to the files it was given, up to `--max-output` bytes in all.

use crate::api::{now_ms, Outcome};
use crate::cgroup::JobGroup;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes the agent reserves for a job's status file before the job starts, so that a full disk
/// cannot keep the supervisor from writing how the job ended.
pub const STATUS_BYTES: usize = 8192;

/// Longest message a status carries (the rest is cut).
const MAX_STATUS_MESSAGE: usize = 2000;

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
    /// The job's cgroup (`None`: `ordo agent --no-cgroup`, the job's process group only).
    pub group: Option<JobGroup>,
    /// A memory limit to set on the job's group, MiB.
    pub mem_mib: Option<u64>,
    /// The umask the job runs under.
    pub umask: u32,
    /// The Unix account the job runs as, when not the supervisor's own (the supervisor stays
    /// root, so the job can neither kill it nor escape its time limit).
    pub run_as: Option<RunAsIds>,
    /// The program (and arguments) that joins the job's groups, becomes
    /// [`SuperviseArgs::run_as`] and then executes the job: `ordo agent-exec` (see [`exec_as`]).
    pub exec_helper: Vec<String>,
    /// The lease: the job is killed once `CLOCK_BOOTTIME` passes this (ms) unless renewed.
    pub lease_until: Option<i64>,
    /// The control channel (a named pipe): `renew T` and `kill` lines.
    pub ctl: Option<PathBuf>,
    /// Most bytes of output (standard output and error together) kept in the output files.
    pub max_output: u64,
    /// The signal that asks the job to stop (`--stop-signal`; SIGTERM by default), sent
    /// `grace_ms` before SIGKILL.
    pub stop_signal: Signal,
}

/// A stop signal by the name a job gave it (`api::STOP_SIGNALS`).
pub fn stop_signal(name: &str) -> Option<Signal> {
    Some(match name {
        "TERM" => Signal::SIGTERM,
        "INT" => Signal::SIGINT,
        "HUP" => Signal::SIGHUP,
        "USR1" => Signal::SIGUSR1,
        "USR2" => Signal::SIGUSR2,
        _ => return None,
    })
}

impl SuperviseArgs {
    /// Reads the supervisor's command line as the agent writes it (`ordo agent-supervise ...`):
    /// `--time-limit-ms T --grace-ms G --status FILE [--cpu-list L] [--cgroup DIR --tracker K]
    /// [--mem-cgroup DIR] [--mem-v2] [--mem-mib M] [--lease-until T] [--ctl FIFO]
    /// [--max-output B] [--umask OCT] [--run-uid U --run-gid G --run-groups G,G] -- COMMAND...`.
    /// `exec_helper` is the program (and arguments) of `ordo agent-exec`.
    pub fn parse(args: &[String], exec_helper: Vec<String>) -> Result<SuperviseArgs, String> {
        let mut a = SuperviseArgs {
            command: vec![],
            time_limit_ms: 0,
            grace_ms: 0,
            status: PathBuf::new(),
            cpu_list: None,
            group: None,
            mem_mib: None,
            umask: 0o077,
            run_as: None,
            exec_helper,
            lease_until: None,
            ctl: None,
            max_output: u64::MAX,
            stop_signal: Signal::SIGTERM,
        };
        let (mut track, mut tracker, mut mem_dir, mut mem_v2) = (None, None, None, false);
        let (mut uid, mut gid, mut groups) = (None, None, vec![]);
        let mut it = args.iter();
        let num = |flag: &str, v: Option<&String>| -> Result<i64, String> {
            v.and_then(|v| v.parse().ok()).ok_or_else(|| format!("{flag}: expected a number"))
        };
        while let Some(f) = it.next() {
            match f.as_str() {
                "--" => {
                    a.command = it.cloned().collect();
                    break;
                }
                "--mem-v2" => mem_v2 = true,
                flag => {
                    let v = it.next();
                    let text = || v.cloned().ok_or_else(|| format!("{flag}: expected a value"));
                    match flag {
                        "--time-limit-ms" => a.time_limit_ms = num(flag, v)? as u64,
                        "--grace-ms" => a.grace_ms = num(flag, v)? as u64,
                        "--status" => a.status = PathBuf::from(text()?),
                        "--cpu-list" => {
                            a.cpu_list = Some(
                                crate::agent::parse_cpu_list(&text()?)
                                    .ok_or_else(|| format!("{flag}: expected a list such as 0-3,8"))?,
                            )
                        }
                        "--cgroup" => track = Some(PathBuf::from(text()?)),
                        "--tracker" => tracker = Some(text()?.parse::<crate::cgroup::Tracker>()?),
                        "--mem-cgroup" => mem_dir = Some(PathBuf::from(text()?)),
                        "--mem-mib" => a.mem_mib = Some(num(flag, v)? as u64),
                        "--lease-until" => a.lease_until = Some(num(flag, v)?),
                        "--ctl" => a.ctl = Some(PathBuf::from(text()?)),
                        "--max-output" => a.max_output = num(flag, v)? as u64,
                        "--stop-signal" => {
                            a.stop_signal = stop_signal(&text()?)
                                .ok_or_else(|| format!("{flag}: expected TERM, INT, HUP, USR1 or USR2"))?
                        }
                        "--umask" => {
                            a.umask = u32::from_str_radix(&text()?, 8)
                                .ok()
                                .filter(|&m| m <= 0o777)
                                .ok_or_else(|| format!("{flag}: expected an octal umask such as 022"))?
                        }
                        "--run-uid" => uid = Some(num(flag, v)? as u32),
                        "--run-gid" => gid = Some(num(flag, v)? as u32),
                        "--run-groups" => {
                            groups = text()?
                                .split(',')
                                .filter(|g| !g.is_empty())
                                .map(|g| g.parse::<u32>().map_err(|_| format!("{flag}: `{g}` is not a group id")))
                                .collect::<Result<_, _>>()?
                        }
                        _ => return Err(format!("unknown option `{flag}`")),
                    }
                }
            }
        }
        if a.command.is_empty() {
            return Err("no command after `--`".into());
        }
        a.group = match (track, tracker) {
            (Some(track), Some(tracker)) => Some(JobGroup {
                // The memory group is the tracking group itself unless given apart.
                mem: a.mem_mib.map(|_| match &mem_dir {
                    Some(m) => (m.clone(), mem_v2),
                    None => (track.clone(), tracker != crate::cgroup::Tracker::V1Freezer),
                }),
                track,
                tracker,
            }),
            (None, None) => None,
            _ => return Err("--cgroup and --tracker go together".into()),
        };
        a.run_as = match (uid, gid) {
            (Some(uid), Some(gid)) => Some(RunAsIds { uid, gid, groups }),
            (None, None) => None,
            _ => return Err("--run-uid and --run-gid go together".into()),
        };
        Ok(a)
    }
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

/// `ordo agent-exec`: joins the job's groups (`join`: their `cgroup.procs` files), becomes `ids`
/// when given, and executes `command` in place (same process, so the same process group the
/// supervisor watches). Returns only when it could not: 126 when a group could not be joined,
/// the account could not be taken or the program is not executable, 127 when it was not found,
/// as shells do.
pub fn exec_as(join: &[PathBuf], ids: Option<&RunAsIds>, command: &[String]) -> i32 {
    if let Err(e) = crate::cgroup::join(join) {
        eprintln!("ordo: cannot put the job in its cgroup: {e}");
        return 126;
    }
    if let Some(ids) = ids {
        if let Err(e) = crate::runas::become_user(ids.uid, ids.gid, &ids.groups) {
            eprintln!("ordo: cannot run the job as uid {}: {e}", ids.uid);
            return 126;
        }
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

/// Milliseconds of `CLOCK_BOOTTIME`: a clock that never goes back and, unlike the monotonic
/// clock, keeps counting while the machine is suspended, so that a lease also runs out over a
/// suspend. Agent and supervisors on one node share it.
pub fn boot_ms() -> i64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() * 1000 + t.tv_nsec() / 1_000_000)
        .unwrap_or_else(|_| now_ms())
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
    /// Error text when it could not start; what happened to its output when some was lost.
    pub message: Option<String>,
}

/// Reserves a status file's space (see [`STATUS_BYTES`]): the agent does this before it starts
/// the supervisor, and refuses the job when it cannot.
pub fn reserve_status(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(&[b' '; STATUS_BYTES])?;
    f.sync_all()
}

/// Reads a status file written by [`write_status`]; `None` while none is written (still only
/// the reserved blanks) or when it cannot be read.
pub fn read_status(path: &Path) -> Option<Status> {
    let b = std::fs::read(path).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Writes `st` into the status file's reserved space (in place: no new disk blocks are needed),
/// or into a new file when none was reserved.
pub fn write_status(path: &Path, st: &Status) -> std::io::Result<()> {
    let mut st = st.clone();
    if let Some(m) = &mut st.message {
        if m.len() > MAX_STATUS_MESSAGE {
            let mut cut = MAX_STATUS_MESSAGE;
            while !m.is_char_boundary(cut) {
                cut -= 1;
            }
            m.truncate(cut);
            m.push_str("...");
        }
    }
    let mut b = serde_json::to_vec(&st).map_err(std::io::Error::other)?;
    let reserved = std::fs::metadata(path).map(|m| m.len() as usize).unwrap_or(0);
    if b.len() < reserved {
        b.resize(reserved, b' ');
    }
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    f.write_all(&b)?;
    f.sync_data()
}

enum Ev {
    Exited(std::io::Result<ExitStatus>),
    Kill,
    Renew(i64),
}

/// Reads the control channel: `renew T` and `kill` lines. Opened for reading and writing, so
/// that it never reaches an end of file while no agent has it open (an agent that restarts
/// opens it again).
fn read_ctl(path: &Path, tx: mpsc::Sender<Ev>) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(f).lines() {
            let Ok(line) = line else { return };
            let l = line.trim();
            let ev = if l == "kill" {
                Ev::Kill
            } else if let Some(t) = l.strip_prefix("renew ").and_then(|t| t.trim().parse().ok()) {
                Ev::Renew(t)
            } else {
                continue;
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// What happened to a job's output: bytes kept, and why the rest was not.
#[derive(Debug, Default)]
struct OutputState {
    kept: AtomicU64,
    lost: Mutex<Option<String>>,
}

/// Copies what the job writes to `from` into `to` until the job's streams close, keeping at
/// most `limit` bytes over both streams (a line says where the output was cut), and going on
/// reading (so that the job never blocks on a full pipe) when the rest is discarded or the
/// file cannot be written (a full disk).
fn relay(from: std::io::PipeReader, to: std::fs::File, limit: u64, st: Arc<OutputState>, done: mpsc::Sender<()>) {
    copy_limited(from, to, limit, &st);
    let _ = done.send(());
}

fn copy_limited(mut from: std::io::PipeReader, mut to: std::fs::File, limit: u64, st: &OutputState) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut writing = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !writing {
            continue;
        }
        let before = st.kept.fetch_add(n as u64, Ordering::SeqCst);
        let room = limit.saturating_sub(before) as usize;
        let take = n.min(room);
        let mut r = to.write_all(&buf[..take]);
        if take < n {
            writing = false;
            let note = format!(
                "\n[ordo: the job's output reached its limit of {} bytes (ordo agent --max-output); the rest is discarded]\n",
                limit
            );
            r = r.and_then(|_| to.write_all(note.as_bytes()));
            let mut lost = st.lost.lock().unwrap_or_else(|p| p.into_inner());
            lost.get_or_insert_with(|| format!("output cut at the agent's limit of {limit} bytes (--max-output)"));
        }
        if let Err(e) = r {
            writing = false;
            let mut lost = st.lost.lock().unwrap_or_else(|p| p.into_inner());
            lost.get_or_insert_with(|| {
                format!("output lost after {} bytes: writing it failed: {e}", before.min(limit))
            });
        }
    }
}

/// A pipe for one of the job's output streams, and the thread copying it to `to` (the
/// supervisor's own standard output or error, which the agent opened on the job's files).
fn output_pipe(
    to: std::os::fd::BorrowedFd<'_>,
    limit: u64,
    st: &Arc<OutputState>,
    done: &mpsc::Sender<()>,
) -> std::io::Result<std::io::PipeWriter> {
    let (r, w) = std::io::pipe()?;
    let file = std::fs::File::from(to.try_clone_to_owned()?);
    let (st, done) = (st.clone(), done.clone());
    std::thread::spawn(move || relay(r, file, limit, st, done));
    Ok(w)
}

/// Sends `sig` to the job: every process of its group, or (without a group) its process group.
fn signal_job(a: &SuperviseArgs, pid: u32, sig: Signal) {
    match &a.group {
        Some(g) => g.signal(sig),
        // ESRCH (the group is already gone) is the normal case after the job exited.
        None => {
            let _ = killpg(Pid::from_raw(pid as i32), sig);
        }
    }
}

/// Kills whatever is left of the job and waits until nothing is: the group is empty (see
/// [`JobGroup::empty`]), or, without a group, the process group was sent SIGKILL.
fn empty_group(a: &SuperviseArgs, pid: u32, stuck: &Path) {
    match &a.group {
        Some(g) => g.empty(stuck),
        None => {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

/// Runs the job to its end and writes the status file. Returns the exit code for the
/// supervisor process (0 when the status was written).
pub fn supervise(a: &SuperviseArgs) -> i32 {
    let started_at = now_ms();
    let write = |st: &Status| match write_status(&a.status, st) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ordo supervisor: cannot write {}: {e}", a.status.display());
            3
        }
    };
    let fail = |message: String| Status {
        outcome: Outcome::SpawnFailed,
        exit_code: None,
        signal: None,
        started_at,
        ended_at: now_ms(),
        message: Some(message),
    };
    let Some((prog, args)) = a.command.split_first() else {
        return write(&fail("empty command".into()));
    };
    // Affinity and umask are the supervisor's own, set before the job exists: the job and every
    // process it starts inherit them. The supervisor itself stays out of the job's group.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(a.umask & 0o777));
    if let Some(c) = &a.cpu_list {
        if let Err(m) = pin(c) {
            return write(&fail(m));
        }
    }
    if let Some(g) = &a.group {
        if let Err(msg) = g.create(a.mem_mib) {
            let _ = g.remove();
            return write(&fail(msg));
        }
    }
    let cleanup = || {
        if let Some(g) = &a.group {
            let _ = g.remove();
        }
    };
    let (tx, rx) = mpsc::channel();
    if let Some(ctl) = &a.ctl {
        if let Err(e) = read_ctl(ctl, tx.clone()) {
            cleanup();
            return write(&fail(format!("control channel {}: {e}", ctl.display())));
        }
    }
    let out = Arc::new(OutputState::default());
    let (relayed, relays_done) = mpsc::channel();
    let pipes = output_pipe(std::io::stdout().as_fd(), a.max_output, &out, &relayed)
        .and_then(|o| Ok((o, output_pipe(std::io::stderr().as_fd(), a.max_output, &out, &relayed)?)));
    drop(relayed);
    let (out_w, err_w) = match pipes {
        Ok(p) => p,
        Err(e) => {
            cleanup();
            return write(&fail(format!("output pipes: {e}")));
        }
    };
    let join: Vec<PathBuf> = a.group.as_ref().map(|g| g.join_files(a.mem_mib.is_some())).unwrap_or_default();
    let mut cmd = if (a.run_as.is_some() || !join.is_empty()) && !a.exec_helper.is_empty() {
        let (helper, pre) = a.exec_helper.split_first().expect("not empty");
        let mut c = Command::new(helper);
        c.args(pre);
        for f in &join {
            c.arg("--join").arg(f);
        }
        if let Some(ids) = &a.run_as {
            c.args(["--uid", &ids.uid.to_string(), "--gid", &ids.gid.to_string()])
                .arg("--groups")
                .arg(ids.groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(","));
        }
        c.arg("--").arg(prog).args(args);
        c
    } else if a.run_as.is_some() || !join.is_empty() {
        cleanup();
        return write(&fail("no helper to put the job in its cgroup or change its account".into()));
    } else {
        let mut c = Command::new(prog);
        c.args(args);
        c
    };
    cmd.stdin(Stdio::null()).stdout(out_w).stderr(err_w).process_group(0);
    let spawned = cmd.spawn();
    // The pipes' write ends now belong to the job alone: the relays see the end of its output
    // once every process of the job has closed them.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ordo: cannot start `{prog}`: {e}");
            cleanup();
            return write(&fail(format!("`{prog}`: {e}")));
        }
    };
    let pid = child.id();
    if a.mem_mib.is_some() {
        // The OOM killer must pick the job, not its supervisor (the job was forked before this).
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }
    std::thread::spawn(move || {
        let _ = tx.send(Ev::Exited(child.wait()));
    });
    let limit_at = Instant::now() + Duration::from_millis(a.time_limit_ms);
    let mut lease = a.lease_until;
    let (mut outcome, mut status) = loop {
        let mut wait = limit_at.saturating_duration_since(Instant::now());
        if let Some(l) = lease {
            wait = wait.min(Duration::from_millis((l - boot_ms()).max(0) as u64));
        }
        match rx.recv_timeout(wait) {
            Ok(Ev::Exited(st)) => break (Outcome::Exited, Some(st)),
            Ok(Ev::Kill) => break (Outcome::Killed, None),
            Ok(Ev::Renew(t)) => lease = lease.map(|l| l.max(t)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if Instant::now() >= limit_at {
                    break (Outcome::Timeout, None);
                }
                if lease.is_some_and(|l| boot_ms() >= l) {
                    break (Outcome::LeaseExpired, None);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break (Outcome::Killed, None),
        }
    };
    if status.is_none() {
        // Stopped by ordo: politely first, unless the lease ran out (the server may start the
        // job elsewhere soon: no time to lose).
        if outcome != Outcome::LeaseExpired {
            signal_job(a, pid, a.stop_signal);
            let grace_end = Instant::now() + Duration::from_millis(a.grace_ms);
            loop {
                match rx.recv_timeout(grace_end.saturating_duration_since(Instant::now())) {
                    Ok(Ev::Exited(st)) => {
                        status = Some(st);
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        if status.is_none() {
            signal_job(a, pid, Signal::SIGKILL);
            if let Some(g) = &a.group {
                g.kill();
            }
            status = loop {
                match rx.recv() {
                    Ok(Ev::Exited(st)) => break Some(st),
                    Ok(_) => continue,
                    Err(_) => break None,
                }
            };
        }
    }
    // Leave nothing of the job behind: whatever it started (double forks, `setsid`, daemons)
    // dies with it, and the status is written only once nothing of it is left.
    empty_group(a, pid, &a.status.with_extension("stuck"));
    // The relays end once the job's last process has closed its pipes: at once with a group
    // (all are dead now); without one, a process that left the job's process group may hold
    // them open, and its output is then not waited for.
    let relay_end = Instant::now() + if a.group.is_some() { Duration::from_secs(10) } else { Duration::from_secs(1) };
    for _ in 0..2 {
        if relays_done.recv_timeout(relay_end.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
    let (exit_code, signal, mut message) = match status {
        Some(Ok(s)) => (s.code(), s.signal(), None),
        Some(Err(e)) => (None, None, Some(format!("wait: {e}"))),
        None => (None, None, Some("wait: the job's process was lost".into())),
    };
    if let Some(g) = &a.group {
        let kills = g.oom_kills();
        if kills > 0 && outcome == Outcome::Exited && exit_code != Some(0) {
            outcome = Outcome::OutOfMemory;
            message = Some(format!("the kernel killed it at its memory limit of {} MiB", a.mem_mib.unwrap_or(0)));
        }
        if let Err(e) = g.remove() {
            eprintln!("ordo supervisor: {e}");
        }
    }
    if let Some(lost) = out.lost.lock().unwrap_or_else(|p| p.into_inner()).take() {
        message = Some(match message {
            Some(m) => format!("{m}; {lost}"),
            None => lost,
        });
    }
    write(&Status { outcome, exit_code, signal, started_at, ended_at: now_ms(), message })
}
