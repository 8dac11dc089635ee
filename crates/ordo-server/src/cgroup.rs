//! Job containment through cgroups, as Slurm's proctrack/cgroup does it: every process of a job
//! lives in the job's own group, so that a cancel, a time limit, a lost lease or the end of the
//! job's main process kills all of them however they forked (`setsid`, double forks), and the
//! agent gives the job's GPUs back only once the group is empty. Memory limits (`--mem`) are set
//! on the same group where its hierarchy has the memory controller, else on a group of the
//! cgroup v1 `memory` hierarchy that the job's processes join as well.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a group is killed before it is reported as stuck (and killed on).
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// How a job's group is emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracker {
    /// cgroup v2 with `cgroup.kill` (Linux 5.14 and later): one write kills every process.
    V2Kill,
    /// cgroup v2 without `cgroup.kill`: the group is frozen (`cgroup.freeze`), every process in
    /// it is sent SIGKILL, and it is thawed, until it is empty.
    V2Freeze,
    /// The cgroup v1 `freezer` hierarchy: the same through `freezer.state`.
    V1Freezer,
}

impl Tracker {
    /// The name used on the supervisor's command line and in the agent's start-up line.
    pub fn as_str(self) -> &'static str {
        match self {
            Tracker::V2Kill => "v2",
            Tracker::V2Freeze => "v2-freeze",
            Tracker::V1Freezer => "v1-freezer",
        }
    }
}

impl std::str::FromStr for Tracker {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "v2" => Ok(Tracker::V2Kill),
            "v2-freeze" => Ok(Tracker::V2Freeze),
            "v1-freezer" => Ok(Tracker::V1Freezer),
            _ => Err(format!("`{s}`: expected v2, v2-freeze or v1-freezer")),
        }
    }
}

/// A hierarchy where the agent may set memory limits: `dir` is its `ordo` group (jobs go in
/// `dir/job-N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemCgroup {
    /// The `ordo` group.
    pub dir: PathBuf,
    /// cgroup v2 (`memory.max`) rather than v1 (`memory.limit_in_bytes`).
    pub v2: bool,
}

/// Where an agent puts its jobs' groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Containment {
    /// How a group is emptied.
    pub tracker: Tracker,
    /// The agent's `ordo` group in the tracking hierarchy: job `N` goes in `dir/job-N`.
    pub dir: PathBuf,
    /// Where memory limits go: `dir` itself when its hierarchy has the memory controller, else
    /// the v1 `memory` hierarchy, else none (limits are then reserved, not enforced).
    pub mem: Option<MemCgroup>,
}

impl Containment {
    /// Finds a hierarchy to track jobs in and one to limit their memory in: cgroup v2 first,
    /// else the v1 freezer; below the agent's own group, else at the root. Probes by creating
    /// and removing a group. `Err` says why none is usable.
    pub fn find() -> Result<Containment, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let mounts =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mut why = Vec::new();
        let mem = find_mem(&own, &mounts);
        if let (Some(path), Some(root)) = (v2_path(&own), mount_of(&mounts, "cgroup2", None)) {
            // A process is in one v2 group only: where v2 has the memory controller, the job's
            // one group both tracks it and limits its memory.
            if let Some(m) = mem.as_ref().ok().filter(|m| m.v2) {
                match tracker_in(&m.dir, true) {
                    Ok(tracker) => return Ok(Containment { tracker, dir: m.dir.clone(), mem: Some(m.clone()) }),
                    Err(e) => why.push(e),
                }
            }
            let home = under(&root, &path);
            for parent in [home, root.clone()] {
                match probe_track(&parent, true) {
                    Ok((dir, tracker)) => {
                        let mem = mem.as_ref().ok().filter(|m| !m.v2).cloned();
                        return Ok(Containment { tracker, dir, mem });
                    }
                    Err(e) => why.push(e),
                }
            }
        } else {
            why.push("no cgroup v2 hierarchy mounted".into());
        }
        if let (Some(path), Some(root)) = (v1_path(&own, "freezer"), mount_of(&mounts, "cgroup", Some("freezer"))) {
            let home = under(&root, &path);
            for parent in [home, root.clone()] {
                match probe_track(&parent, false) {
                    Ok((dir, tracker)) => return Ok(Containment { tracker, dir, mem: mem.clone().ok() }),
                    Err(e) => why.push(e),
                }
            }
        } else {
            why.push("no cgroup v1 freezer hierarchy mounted".into());
        }
        Err(why.join("; "))
    }

    /// The groups of one agent: `dir/NAME` (and the same below the memory hierarchy), created,
    /// with the memory controller enabled for their children where it is v2. Agents that share
    /// a machine (tests, several agents per node) each get their own, so that neither touches
    /// the other's jobs; an agent that restarts finds its predecessor's.
    pub fn scoped(&self, name: &str) -> Result<Containment, String> {
        let e = |what: &str, p: &Path, err: std::io::Error| format!("cgroup {}: {what}: {err}", p.display());
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).map_err(|err| e("create", &dir, err))?;
        let mem = match &self.mem {
            Some(m) => {
                let mdir = m.dir.join(name);
                std::fs::create_dir_all(&mdir).map_err(|err| e("create", &mdir, err))?;
                if m.v2 {
                    std::fs::write(mdir.join("cgroup.subtree_control"), "+memory")
                        .map_err(|err| e("enable memory", &mdir, err))?;
                }
                Some(MemCgroup { dir: mdir, v2: m.v2 })
            }
            None => None,
        };
        Ok(Containment { tracker: self.tracker, dir, mem })
    }

    /// The group of run `attempt` of job `job` (not created yet): `job-N-A`, so that a run never
    /// shares its group with an earlier run of the same job whose supervisor is still ending.
    pub fn job(&self, job: u64, attempt: u32) -> JobGroup {
        self.named(&run_name(job, attempt))
    }

    fn named(&self, name: &str) -> JobGroup {
        JobGroup {
            track: self.dir.join(name),
            tracker: self.tracker,
            mem: self.mem.as_ref().map(|m| (m.dir.join(name), m.v2)),
        }
    }

    /// Groups of runs left behind by an earlier agent on this node (`job-N-A` below `dir`), with
    /// their names.
    pub fn leftovers(&self) -> Vec<(String, JobGroup)> {
        let mut out: Vec<(String, JobGroup)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().filter(|n| n.starts_with("job-")).map(str::to_string))
            .map(|n| {
                let g = self.named(&n);
                (n, g)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// For the agent's start-up line: what tracks jobs, and where memory limits go.
    pub fn describe(&self) -> String {
        let how = match self.tracker {
            Tracker::V2Kill => "cgroup v2, killed with cgroup.kill",
            Tracker::V2Freeze => "cgroup v2, frozen and killed",
            Tracker::V1Freezer => "cgroup v1 freezer, frozen and killed",
        };
        let mem = match &self.mem {
            Some(m) if m.dir == self.dir => "memory limits in the same groups".to_string(),
            Some(m) => format!("memory limits in {} (cgroup {})", m.dir.display(), if m.v2 { "v2" } else { "v1" }),
            None => "memory limits not enforced (no memory controller)".to_string(),
        };
        format!("each job in its own group under {} ({how}); {mem}", self.dir.display())
    }
}

/// The group path of this process in the v2 hierarchy (`0::PATH`).
fn v2_path(own: &str) -> Option<String> {
    own.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// The group path of this process in the v1 hierarchy of `controller`.
fn v1_path(own: &str, controller: &str) -> Option<String> {
    own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',').any(|c| c == controller).then(|| path.to_string())
    })
}

/// The mount point of a cgroup hierarchy (`fstype` `cgroup2`, or `cgroup` with `controller`
/// among its super options), from /proc/self/mountinfo, with the group its mount shows as its
/// root. Returns the directory that stands for the hierarchy's root group as this process sees
/// it.
fn mount_of(mountinfo: &str, fstype: &str, controller: Option<&str>) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fs, _src, opts) = (post.next()?, post.next()?, post.next().unwrap_or(""));
        if fs != fstype || controller.is_some_and(|c| !opts.split(',').any(|o| o == c)) {
            return None;
        }
        let f: Vec<&str> = pre.split_whitespace().collect();
        // Only a mount of the hierarchy's root (`/`): a bind mount of a subgroup would put the
        // agent's own path in the wrong place.
        if f.get(3) != Some(&"/") {
            return None;
        }
        f.get(4).map(PathBuf::from)
    })
}

/// `root` joined with a group path (`/a/b`).
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Creates `parent/ordo` and a probe group in it; returns `parent/ordo` and how its groups are
/// emptied.
fn probe_track(parent: &Path, v2: bool) -> Result<(PathBuf, Tracker), String> {
    let dir = parent.join("ordo");
    std::fs::create_dir_all(&dir).map_err(|err| format!("create {}: {err}", dir.display()))?;
    tracker_in(&dir, v2).map(|t| (dir, t))
}

/// How groups created in `dir` are emptied, found by creating and removing a probe group.
fn tracker_in(dir: &Path, v2: bool) -> Result<Tracker, String> {
    let p = dir.join(format!("probe-{}", std::process::id()));
    let _ = std::fs::remove_dir(&p);
    std::fs::create_dir(&p).map_err(|err| format!("create {}: {err}", p.display()))?;
    let tracker = if !v2 {
        p.join("freezer.state").exists().then_some(Tracker::V1Freezer)
    } else if p.join("cgroup.kill").exists() {
        Some(Tracker::V2Kill)
    } else {
        p.join("cgroup.freeze").exists().then_some(Tracker::V2Freeze)
    };
    let _ = std::fs::remove_dir(&p);
    tracker.ok_or_else(|| {
        format!("{} has neither {}", p.display(), if v2 { "cgroup.kill nor cgroup.freeze" } else { "freezer.state" })
    })
}

/// Finds a writable memory hierarchy: cgroup v2 where it has the memory controller, else v1
/// `memory`; below the agent's own group, else at the root.
fn find_mem(own: &str, mounts: &str) -> Result<MemCgroup, String> {
    let mut why = Vec::new();
    if let (Some(path), Some(root)) = (v2_path(own), mount_of(mounts, "cgroup2", None)) {
        let ctl = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "memory") {
            let home = under(&root, &path);
            for parent in [home, root.clone()] {
                match probe_mem(&parent, true) {
                    Ok(dir) => return Ok(MemCgroup { dir, v2: true }),
                    Err(e) => why.push(e),
                }
            }
        } else {
            why.push(format!("{}: no memory controller", root.display()));
        }
    }
    if let (Some(path), Some(root)) = (v1_path(own, "memory"), mount_of(mounts, "cgroup", Some("memory"))) {
        let home = under(&root, &path);
        for parent in [home, root.clone()] {
            match probe_mem(&parent, false) {
                Ok(dir) => return Ok(MemCgroup { dir, v2: false }),
                Err(e) => why.push(e),
            }
        }
    }
    if why.is_empty() {
        why.push("no memory controller in /proc/self/cgroup".into());
    }
    Err(why.join("; "))
}

fn probe_mem(parent: &Path, v2: bool) -> Result<PathBuf, String> {
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
    let p = dir.join(format!("probe-mem-{}", std::process::id()));
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

/// One job's group (and its memory group, where that is elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGroup {
    /// The tracking group.
    pub track: PathBuf,
    /// How it is emptied.
    pub tracker: Tracker,
    /// The memory group and whether it is v2; the same path as `track` where one hierarchy has both.
    pub mem: Option<(PathBuf, bool)>,
}

impl JobGroup {
    /// Creates the group, with a memory limit of `mem_mib` where given. A group left by an
    /// earlier run is reused when it is empty and refused while any process is still in it.
    pub fn create(&self, mem_mib: Option<u64>) -> Result<(), String> {
        let e = |what: &str, p: &Path, err: std::io::Error| format!("cgroup {}: {what}: {err}", p.display());
        if self.populated() {
            return Err(format!(
                "cgroup {} still holds processes of an earlier run ({})",
                self.track.display(),
                pid_list(&self.pids())
            ));
        }
        std::fs::create_dir_all(&self.track).map_err(|err| e("create", &self.track, err))?;
        if let (Some(mib), Some((dir, v2))) = (mem_mib, &self.mem) {
            std::fs::create_dir_all(dir).map_err(|err| e("create", dir, err))?;
            let bytes = (mib * 1024 * 1024).to_string();
            if *v2 {
                std::fs::write(dir.join("memory.max"), &bytes).map_err(|err| e("set memory.max", dir, err))?;
                // No swapping past the limit (absent where swap accounting is off).
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), &bytes)
                    .map_err(|err| e("set memory.limit_in_bytes", dir, err))?;
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), &bytes);
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` files a process writes its pid to in order to join the job (the
    /// tracking group, and the memory group when the job has a limit in another hierarchy).
    pub fn join_files(&self, with_mem: bool) -> Vec<PathBuf> {
        let mut v = vec![self.track.join("cgroup.procs")];
        if let Some((dir, _)) = self.mem.as_ref().filter(|_| with_mem) {
            if *dir != self.track {
                v.push(dir.join("cgroup.procs"));
            }
        }
        v
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.track.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Whether any process is in the group (a group that does not exist holds none).
    pub fn populated(&self) -> bool {
        match self.tracker {
            Tracker::V2Kill | Tracker::V2Freeze => std::fs::read_to_string(self.track.join("cgroup.events"))
                .map(|t| t.lines().any(|l| l.trim() == "populated 1"))
                .unwrap_or(false),
            Tracker::V1Freezer => !self.pids().is_empty(),
        }
    }

    /// Sends `sig` to every process in the group (a polite signal before a kill; processes
    /// forked meanwhile are caught by [`JobGroup::kill`]).
    pub fn signal(&self, sig: Signal) {
        for p in self.pids() {
            let _ = kill(Pid::from_raw(p), sig);
        }
    }

    /// Kills every process in the group, including those forking while it does so.
    pub fn kill(&self) {
        match self.tracker {
            Tracker::V2Kill => {
                if std::fs::write(self.track.join("cgroup.kill"), "1").is_err() {
                    self.signal(Signal::SIGKILL);
                }
            }
            Tracker::V2Freeze => self.frozen_kill("cgroup.freeze", "1", "0"),
            Tracker::V1Freezer => self.frozen_kill("freezer.state", "FROZEN", "THAWED"),
        }
    }

    /// Freezes the group (no process can fork once frozen), sends SIGKILL to every process,
    /// thaws it (a frozen process dies only once thawed).
    fn frozen_kill(&self, file: &str, freeze: &str, thaw: &str) {
        let f = self.track.join(file);
        let _ = std::fs::write(&f, freeze);
        // Freezing takes effect soon but not at once; a process that forks before it does is
        // caught at the next round (the caller repeats until the group is empty).
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(100) {
            match std::fs::read_to_string(&f) {
                Ok(s) if s.trim() == freeze || (file == "cgroup.freeze" && self.frozen_v2()) => break,
                Ok(_) => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => break,
            }
        }
        self.signal(Signal::SIGKILL);
        let _ = std::fs::write(&f, thaw);
    }

    /// Whether a v2 group reports itself frozen (`frozen 1` in `cgroup.events`).
    fn frozen_v2(&self) -> bool {
        std::fs::read_to_string(self.track.join("cgroup.events"))
            .map(|t| t.lines().any(|l| l.trim() == "frozen 1"))
            .unwrap_or(false)
    }

    /// Kills the group until it is empty or `limit` has passed; returns whether it is empty.
    pub fn kill_and_wait(&self, limit: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            if !self.populated() {
                return true;
            }
            self.kill();
            // Killed processes leave the group a moment after they die.
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(5));
                if !self.populated() {
                    return true;
                }
            }
            if t0.elapsed() >= limit {
                return false;
            }
        }
    }

    /// Kills the group until it is empty, however long that takes: its GPUs must never be given
    /// back while any process of the job lives. When it has not emptied within a minute (a
    /// process stuck in the kernel), says so once in `stuck` (the agent then takes no new work,
    /// giving the file's text as the reason) and goes on; removes `stuck` once it is empty.
    pub fn empty(&self, stuck: &Path) {
        let mut said = false;
        while !self.kill_and_wait(STUCK_AFTER) {
            if !said {
                let msg = format!(
                    "processes {} of job group {} could not be killed in {} s (stuck in the kernel?); its GPUs stay taken until they are gone",
                    pid_list(&self.pids()),
                    self.track.display(),
                    STUCK_AFTER.as_secs()
                );
                eprintln!("ordo: {msg}");
                let _ = std::fs::write(stuck, msg);
                said = true;
            }
        }
        if said {
            let _ = std::fs::remove_file(stuck);
        }
    }

    /// Times the kernel's OOM killer fired in the memory group.
    pub fn oom_kills(&self) -> u64 {
        let Some((dir, v2)) = &self.mem else { return 0 };
        let file = if *v2 { "memory.events" } else { "memory.oom_control" };
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Removes the (empty) groups; returns an error naming a group that could not be removed.
    pub fn remove(&self) -> Result<(), String> {
        let mut dirs = vec![self.track.clone()];
        if let Some((d, _)) = &self.mem {
            if *d != self.track {
                dirs.push(d.clone());
            }
        }
        let mut err = Ok(());
        for d in dirs {
            // A group's last process leaves a moment after it dies.
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if tries >= 100 => {
                        err = Err(format!("cgroup {}: remove: {e}", d.display()));
                        break;
                    }
                    Err(_) => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
        err
    }
}

/// The name of a run's group and files: `job-N-A` (job `N`, attempt `A`).
pub fn run_name(job: u64, attempt: u32) -> String {
    format!("job-{job}-{attempt}")
}

/// `12, 13, 14` (at most 20, then `...`).
fn pid_list(p: &[i32]) -> String {
    let mut s: Vec<String> = p.iter().take(20).map(|x| x.to_string()).collect();
    if p.len() > 20 {
        s.push("...".into());
    }
    s.join(", ")
}

/// Moves this process into each group of `files` (their `cgroup.procs`): what `ordo agent-exec`
/// does before it becomes the job's account, so that the job and everything it starts are in
/// the job's groups from their first instruction.
pub fn join(files: &[PathBuf]) -> Result<(), String> {
    for f in files {
        std::fs::write(f, std::process::id().to_string()).map_err(|e| format!("join {}: {e}", f.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
28 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
29 28 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 28 0:31 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,freezer
34 28 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
40 28 0:40 /sub /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
";

    #[test]
    fn mount_points_come_from_mountinfo() {
        assert_eq!(mount_of(MOUNTINFO, "cgroup2", None), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(mount_of(MOUNTINFO, "cgroup", Some("freezer")), Some(PathBuf::from("/sys/fs/cgroup/freezer")));
        assert_eq!(mount_of(MOUNTINFO, "cgroup", Some("memory")), Some(PathBuf::from("/sys/fs/cgroup/memory")));
        // A bind mount of a subgroup is not the hierarchy's root.
        assert_eq!(mount_of(MOUNTINFO, "cgroup", Some("pids")), None);
        assert_eq!(mount_of(MOUNTINFO, "cgroup", Some("cpu")), None);
    }

    #[test]
    fn own_groups_come_from_proc_self_cgroup() {
        let own = "4:memory:/a/b\n3:freezer:/\n0::/system.slice/ordo-agent.service\n";
        assert_eq!(v2_path(own).as_deref(), Some("/system.slice/ordo-agent.service"));
        assert_eq!(v1_path(own, "memory").as_deref(), Some("/a/b"));
        assert_eq!(v1_path(own, "freezer").as_deref(), Some("/"));
        assert_eq!(v1_path(own, "cpu"), None);
        assert_eq!(
            under(Path::new("/sys/fs/cgroup"), "/system.slice/x"),
            PathBuf::from("/sys/fs/cgroup/system.slice/x")
        );
    }

    #[test]
    fn trackers_parse_back_from_their_names() {
        for t in [Tracker::V2Kill, Tracker::V2Freeze, Tracker::V1Freezer] {
            assert_eq!(t.as_str().parse::<Tracker>(), Ok(t));
        }
        assert!("v3".parse::<Tracker>().is_err());
    }
}
