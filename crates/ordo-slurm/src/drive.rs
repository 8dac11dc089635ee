//! The driver: one pass reads Slurm, computes ordo's order and sets priorities, writing every
//! change to a JSON Lines audit log; `release` hands the priorities it set back to Slurm.

use crate::client::Backend;
use crate::error::SlurmError;
use crate::order::{assign_priorities, cluster_from_nodes, intended_order, Intended};
use crate::parse::JobState;
use ordo_core::{ClusterSpec, Placement, PolicySpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// One line of the audit log: a priority ordo changed (`set`) or handed back (`release`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When, as RFC 3339 UTC.
    pub time: String,
    /// When, as Unix seconds.
    pub unix_time: i64,
    /// `set` or `release`.
    pub action: String,
    /// Slurm job id.
    pub job: u64,
    /// Priority before the change.
    pub old_priority: u64,
    /// Priority after the change (for `release`, the value Slurm computed afterwards, if read).
    pub new_priority: Option<u64>,
    /// Position in ordo's order (for `set`).
    pub position: Option<usize>,
    /// Why, in words.
    pub reason: String,
    /// The policy in force (for `set`).
    pub policy: String,
}

/// Settings of the driver.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// The policy (same names as the simulator's).
    pub policy: PolicySpec,
    /// Placement model for planning.
    pub placement: Placement,
    /// A cluster to plan for instead of the one `sinfo` reports.
    pub cluster: Option<ClusterSpec>,
    /// Highest priority ordo gives (the first job in its order); the rest descend by one.
    pub priority_top: u32,
    /// Print the order and change nothing.
    pub dry_run: bool,
    /// The JSON Lines audit log.
    pub audit_log: PathBuf,
}

/// What one pass did.
#[derive(Debug, Clone)]
pub struct PassReport {
    /// The order computed.
    pub intended: Intended,
    /// Changes made (or, with `dry_run`, that would have been made): `(job, old, new)`.
    pub changes: Vec<(u64, u64, u32)>,
    /// Changes Slurm refused (job gone meanwhile, ...), with the error.
    pub failed: Vec<(u64, String)>,
}

/// Current time as Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

fn append(path: &Path, rec: &AuditRecord) -> Result<(), SlurmError> {
    let io = |err| SlurmError::Io { path: path.display().to_string(), err };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    let mut line = serde_json::to_string(rec).map_err(|e| io(std::io::Error::other(e)))?;
    line.push('\n');
    f.write_all(line.as_bytes()).map_err(io)?;
    f.sync_data().map_err(io)
}

/// Reads an audit log. A line that is not a record fails with its line number.
pub fn read_audit_log(path: &Path) -> Result<Vec<AuditRecord>, SlurmError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|err| SlurmError::Io { path: name.clone(), err })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|err| SlurmError::Io { path: name.clone(), err })?;
        if line.trim().is_empty() {
            continue;
        }
        let rec = serde_json::from_str(&line).map_err(|e| SlurmError::Parse {
            source_name: name.clone(),
            location: format!("line {}", i + 1),
            what: format!("not an audit record: {e}"),
        })?;
        out.push(rec);
    }
    Ok(out)
}

/// One pass: read nodes and jobs, compute the order, set the priorities that differ (unless
/// `dry_run`), logging each change before moving on. Any Slurm error while reading aborts the
/// pass having changed nothing.
pub fn drive_once(slurm: &dyn Backend, cfg: &DriveConfig) -> Result<PassReport, SlurmError> {
    check_policy(&cfg.policy)?;
    let cluster = match &cfg.cluster {
        Some(c) => c.clone(),
        None => {
            let nodes = slurm.nodes()?;
            cluster_from_nodes(&nodes).ok_or_else(|| SlurmError::Parse {
                source_name: "sinfo".into(),
                location: "nodes".into(),
                what: "no available node (every node down, drained or missing)".into(),
            })?
        }
    };
    let jobs = slurm.jobs()?;
    let now = unix_now();
    let intended = intended_order(&jobs, &cluster, cfg.placement, &cfg.policy, now);
    let current: Vec<(u64, u64)> = intended.order.iter().map(|r| (r.job, r.priority)).collect();
    let changes = assign_priorities(&current, cfg.priority_top);
    let mut failed = Vec::new();
    let mut done = Vec::new();
    if !cfg.dry_run {
        for &(job, old, new) in &changes {
            let rank = intended.order.iter().find(|r| r.job == job);
            match slurm.set_priority(job, new) {
                Ok(()) => {
                    let t = unix_now();
                    append(
                        &cfg.audit_log,
                        &AuditRecord {
                            time: rfc3339(t),
                            unix_time: t,
                            action: "set".into(),
                            job,
                            old_priority: old,
                            new_priority: Some(u64::from(new)),
                            position: rank.map(|r| r.position),
                            reason: rank.map(|r| r.reason.clone()).unwrap_or_default(),
                            policy: cfg.policy.to_string(),
                        },
                    )?;
                    done.push((job, old, new));
                }
                Err(e) if e.is_unreachable() => return Err(e),
                Err(e) => failed.push((job, e.to_string())),
            }
        }
    } else {
        done = changes;
    }
    Ok(PassReport { intended, changes: done, failed })
}

/// Refuses preemptive policies: the driver only sets priorities of pending jobs, it never stops
/// a running one.
pub fn check_policy(policy: &PolicySpec) -> Result<(), SlurmError> {
    if policy.order.preemptive() {
        return Err(SlurmError::Policy(format!(
            "policy `{policy}` preempts running jobs, and `ordo slurm drive` only sets the priorities of pending \
             jobs; use a non-preemptive order (fifo, sjf, sgf, fair, priority[:...], qssf, or rr without a quantum), \
             optionally with +easy or +conservative and +maxwait=D, e.g. `priority+easy` or `sjf+easy`"
        )));
    }
    Ok(())
}

/// What `release` did for each job ordo had set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Priority handed back to Slurm; the value Slurm computed afterwards, if read.
    Released(Option<u64>),
    /// Not pending any more (started or ended): nothing to hand back.
    NotPending,
    /// Someone changed the priority since ordo set it (now the first value, ordo set the
    /// second): left as it is.
    ChangedSince(u64, u64),
    /// Held (priority 0): left alone, since releasing would also release the hold.
    Held,
    /// Slurm refused.
    Failed(String),
}

/// Hands back every priority the audit log says ordo set and did not yet release: for each
/// such job still pending, not held, and still at the priority ordo set, `scontrol release`
/// makes Slurm compute its priority again. Each release is logged. With `dry_run`, only reports.
pub fn release(slurm: &dyn Backend, audit_log: &Path, dry_run: bool) -> Result<Vec<(u64, ReleaseOutcome)>, SlurmError> {
    let mut last: BTreeMap<u64, AuditRecord> = BTreeMap::new();
    for r in read_audit_log(audit_log)? {
        last.insert(r.job, r);
    }
    let set: Vec<(u64, u64)> =
        last.values().filter(|r| r.action == "set").filter_map(|r| r.new_priority.map(|p| (r.job, p))).collect();
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let jobs = slurm.jobs()?;
    let mut out = Vec::new();
    for (job, ours) in set {
        let Some(j) = jobs.iter().find(|j| j.id == job) else {
            out.push((job, ReleaseOutcome::NotPending));
            continue;
        };
        let outcome = if j.state != JobState::Pending {
            ReleaseOutcome::NotPending
        } else if j.priority == 0 || j.reason.contains("Held") {
            ReleaseOutcome::Held
        } else if j.priority != ours {
            ReleaseOutcome::ChangedSince(j.priority, ours)
        } else if dry_run {
            ReleaseOutcome::Released(None)
        } else {
            match slurm.reset_priority(job) {
                Ok(()) => {
                    let after =
                        slurm.jobs().ok().and_then(|js| js.into_iter().find(|x| x.id == job)).map(|x| x.priority);
                    let t = unix_now();
                    append(
                        audit_log,
                        &AuditRecord {
                            time: rfc3339(t),
                            unix_time: t,
                            action: "release".into(),
                            job,
                            old_priority: ours,
                            new_priority: after,
                            position: None,
                            reason: "ordo slurm release: priority handed back to Slurm".into(),
                            policy: String::new(),
                        },
                    )?;
                    ReleaseOutcome::Released(after)
                }
                Err(e) if e.is_unreachable() => return Err(e),
                Err(e) => ReleaseOutcome::Failed(e.to_string()),
            }
        };
        out.push((job, outcome));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn formats_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_022_694), "2026-11-30T07:11:34Z");
    }
}
