//! Who a job runs as, and what it sees: the submitter's Unix account when the agent runs as root
//! (as Slurm's slurmstepd does), and a clean environment that never holds the agent's credentials.

use nix::unistd::{Gid, Uid, User};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// Variables a job gets from the agent's environment unless `--pass-env` says otherwise.
pub const DEFAULT_PASS_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH"];

/// How the agent picks the Unix account of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The agent is root: each job runs as the account named like its submitter, or as the
    /// account the map gives for that submitter.
    Submitter {
        /// ordo user -> Unix account.
        map: BTreeMap<String, String>,
    },
    /// Every job runs as this account (`--run-as`).
    Fixed(String),
    /// The agent is not root: every job runs as the agent's own account (it cannot switch).
    Agent,
}

/// The Unix account a job runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUser {
    /// Account name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group the account is in (primary included), as `initgroups` gives them.
    pub groups: Vec<u32>,
    /// Home directory.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
}

impl RunAs {
    /// The policy for an agent running with effective uid `euid`: `--run-as NAME` (every job
    /// as NAME), `--user-map FILE` (a TOML table `ordo_user = "unix_account"`), else each job
    /// as its submitter when root, else as the agent's own account. Switching accounts needs
    /// root; a non-root agent may only name its own account with `--run-as`.
    pub fn new(run_as: Option<&str>, user_map: Option<&Path>, euid: u32) -> Result<RunAs, String> {
        if run_as.is_some() && user_map.is_some() {
            return Err("--run-as and --user-map exclude each other".into());
        }
        if let Some(name) = run_as {
            let u = lookup(name)?;
            if euid != 0 && u.uid != euid {
                return Err(format!(
                    "--run-as {name}: this agent is not root (uid {euid}), so it cannot run jobs as another account"
                ));
            }
            return Ok(RunAs::Fixed(name.to_string()));
        }
        if euid != 0 {
            if let Some(p) = user_map {
                return Err(format!(
                    "--user-map {}: this agent is not root (uid {euid}), so it cannot run jobs as other accounts",
                    p.display()
                ));
            }
            return Ok(RunAs::Agent);
        }
        let map = match user_map {
            Some(p) => read_map(p)?,
            None => BTreeMap::new(),
        };
        Ok(RunAs::Submitter { map })
    }

    /// The account a job of ordo user `submitter` runs as: `Ok(None)` means the agent's own.
    /// A submitter whose account does not exist (and who is not mapped) is refused, and so is
    /// uid 0 reached through a submitter's name: only an explicit `--run-as root` runs jobs as
    /// root.
    pub fn resolve(&self, submitter: &str) -> Result<Option<JobUser>, String> {
        match self {
            RunAs::Agent => Ok(None),
            RunAs::Fixed(name) => lookup(name).map(Some),
            RunAs::Submitter { map } => {
                let name = map.get(submitter).map(String::as_str).unwrap_or(submitter);
                let u = lookup(name).map_err(|e| {
                    format!("{e}; jobs of ordo user `{submitter}` run as the Unix account of that name, so create it on this node, or map the user with the agent's --user-map, or give --run-as")
                })?;
                if u.uid == 0 {
                    return Err(format!(
                        "ordo user `{submitter}` maps to the Unix account `{name}` (uid 0): jobs never run as root through a user's name; map the user to another account (--user-map) or start the agent with --run-as root"
                    ));
                }
                Ok(Some(u))
            }
        }
    }

    /// In words, for the agent's start-up line.
    pub fn describe(&self) -> String {
        match self {
            RunAs::Submitter { map } if map.is_empty() => "jobs run as their submitter's Unix account".into(),
            RunAs::Submitter { map } => {
                format!("jobs run as their submitter's Unix account ({} users mapped by --user-map)", map.len())
            }
            RunAs::Fixed(n) => format!("every job runs as the Unix account `{n}` (--run-as)"),
            RunAs::Agent if Uid::effective().is_root() => "jobs run as this agent's own account (root)".into(),
            RunAs::Agent => format!(
                "jobs run as this agent's own account (uid {}): they can read whatever the agent can, its token included; start the agent as root to run each job as its submitter",
                Uid::effective()
            ),
        }
    }
}

fn read_map(p: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("--user-map {}: {e}", p.display()))?;
    let map: BTreeMap<String, String> = toml::from_str(&text)
        .map_err(|e| format!("--user-map {}: {e} (expected lines such as `alice = \"alice\"`)", p.display()))?;
    for (k, v) in &map {
        if !crate::auth::valid_name(k) {
            return Err(format!("--user-map {}: `{k}` is not an ordo user name", p.display()));
        }
        lookup(v).map_err(|e| format!("--user-map {}: user `{k}`: {e}", p.display()))?;
    }
    Ok(map)
}

/// Looks an account up by name, with its groups.
pub fn lookup(name: &str) -> Result<JobUser, String> {
    let u = User::from_name(name)
        .map_err(|e| format!("looking up Unix account `{name}`: {e}"))?
        .ok_or_else(|| format!("no Unix account `{name}` on this node"))?;
    let cname = CString::new(name).map_err(|_| format!("account name `{name}` holds a NUL"))?;
    let groups = nix::unistd::getgrouplist(&cname, u.gid)
        .map_err(|e| format!("groups of Unix account `{name}`: {e}"))?
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
    Ok(JobUser { name: u.name, uid: u.uid.as_raw(), gid: u.gid.as_raw(), groups, home: u.dir, shell: u.shell })
}

/// The environment of a job: the variables named in `pass` taken from `agent_env` (never one
/// whose name starts with `ORDO_TOKEN`), the account's `HOME`, `USER`, `LOGNAME` and `SHELL`,
/// then `job_vars` (ORDO_JOB_ID, CUDA_VISIBLE_DEVICES, ...). Nothing else of the agent's
/// environment reaches the job.
pub fn job_env(
    agent_env: impl IntoIterator<Item = (String, String)>,
    pass: &[String],
    user: &JobUser,
    job_vars: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> =
        agent_env.into_iter().filter(|(k, _)| pass.iter().any(|p| p == k) && !k.starts_with("ORDO_TOKEN")).collect();
    env.insert("HOME".into(), user.home.to_string_lossy().into_owned());
    env.insert("USER".into(), user.name.clone());
    env.insert("LOGNAME".into(), user.name.clone());
    env.insert("SHELL".into(), user.shell.to_string_lossy().into_owned());
    env.entry("PATH".into()).or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    for (k, v) in job_vars {
        env.insert((*k).to_string(), v.clone());
    }
    env.into_iter().collect()
}

/// The account this process runs as (for a job when the agent does not switch accounts).
pub fn current_user() -> JobUser {
    let uid = Uid::effective();
    match User::from_uid(uid) {
        Ok(Some(u)) => lookup(&u.name).unwrap_or(JobUser {
            name: u.name,
            uid: uid.as_raw(),
            gid: u.gid.as_raw(),
            groups: vec![u.gid.as_raw()],
            home: u.dir,
            shell: u.shell,
        }),
        _ => JobUser {
            name: uid.to_string(),
            uid: uid.as_raw(),
            gid: Gid::effective().as_raw(),
            groups: vec![Gid::effective().as_raw()],
            home: PathBuf::from("/"),
            shell: PathBuf::from("/bin/sh"),
        },
    }
}

/// Becomes `uid`/`gid` with `groups` (supplementary groups first, then the group, then the user:
/// the order in which the kernel still allows each step). Used by `ordo agent-exec` right
/// before it executes a job, so that the job never holds root's rights.
pub fn become_user(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    let gids: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
    nix::unistd::setgroups(&gids).map_err(|e| format!("setgroups {groups:?}: {e}"))?;
    nix::unistd::setgid(Gid::from_raw(gid)).map_err(|e| format!("setgid {gid}: {e}"))?;
    nix::unistd::setuid(Uid::from_raw(uid)).map_err(|e| format!("setuid {uid}: {e}"))?;
    // A process that was root and is no longer must not be able to become root again.
    if uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err("could still regain root after setuid; refusing to run the job".into());
    }
    Ok(())
}
