//! The audit log: one JSON object per line for every priority ordo set (`set`), handed back
//! (`release`) or deliberately did not touch (`left-alone`), and for every change of the policy
//! that orders the queue (`policy`: who started `drive` with it, the policy before and why),
//! flushed to disk as it goes.

use crate::error::SlurmError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When, as RFC 3339 UTC.
    pub time: String,
    /// When, as Unix seconds.
    pub unix_time: i64,
    /// `set` (ordo changed the priority), `release` (handed it back to Slurm), `left-alone`
    /// (a pending job ordo will not touch, with why: a priority set by hand, a nice value, ...)
    /// or `policy` (`drive` started with another policy than the log's last; job 0).
    pub action: String,
    /// Slurm job id.
    pub job: u64,
    /// Priority before the change (for `left-alone`, its priority).
    pub old_priority: u64,
    /// Priority after the change (for `release`, the value Slurm computed afterwards, if read).
    pub new_priority: Option<u64>,
    /// Position in ordo's order (for `set`).
    pub position: Option<usize>,
    /// Why, in words.
    pub reason: String,
    /// The policy in force (for `set` and `left-alone`; for `policy`, the new one).
    pub policy: String,
    /// For `policy`: the account that started `drive` with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// For `policy`: the policy the log had in force before (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_policy: Option<String>,
}

impl AuditRecord {
    /// A record stamped now.
    pub fn now(action: &str, job: u64, old_priority: u64, new_priority: Option<u64>, reason: String) -> AuditRecord {
        let t = unix_now();
        AuditRecord {
            time: rfc3339(t),
            unix_time: t,
            action: action.into(),
            job,
            old_priority,
            new_priority,
            position: None,
            reason,
            policy: String::new(),
            actor: None,
            from_policy: None,
        }
    }
}

/// The policy an audit log last had in force: that of its last `policy` record, or (a log
/// written before those records) of its last record that names one. `None` for a log that
/// does not exist or names none.
pub fn last_policy(path: &Path) -> Result<Option<String>, SlurmError> {
    if !path.exists() {
        return Ok(None);
    }
    let recs = read_audit_log(path)?;
    let named = |r: &&AuditRecord| !r.policy.is_empty();
    let last = recs.iter().rev().find(|r| r.action == "policy").or_else(|| recs.iter().rev().find(named));
    Ok(last.map(|r| r.policy.clone()))
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

/// Appends records and flushes them to disk (one `fsync` for all of them).
pub fn append(path: &Path, recs: &[AuditRecord]) -> Result<(), SlurmError> {
    if recs.is_empty() {
        return Ok(());
    }
    let io = |err| SlurmError::Io { path: path.display().to_string(), err };
    let mut text = String::new();
    for r in recs {
        text.push_str(&serde_json::to_string(r).map_err(|e| io(std::io::Error::other(e)))?);
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
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

/// What an audit log says about the jobs in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogState {
    /// The priority ordo last set on each job and has not handed back.
    pub ours: HashMap<u64, u64>,
    /// Jobs whose last record says ordo left them alone, with why.
    pub left_alone: HashMap<u64, String>,
}

/// Reads an audit log's [`LogState`] (empty if the log does not exist yet).
pub fn log_state(path: &Path) -> Result<LogState, SlurmError> {
    let mut st = LogState::default();
    if !path.exists() {
        return Ok(st);
    }
    for r in read_audit_log(path)? {
        match (r.action.as_str(), r.new_priority) {
            ("set", Some(p)) => {
                st.ours.insert(r.job, p);
                st.left_alone.remove(&r.job);
            }
            ("release", _) => {
                st.ours.remove(&r.job);
                st.left_alone.remove(&r.job);
            }
            ("left-alone", _) => {
                st.left_alone.insert(r.job, r.reason);
            }
            _ => {}
        }
    }
    Ok(st)
}

/// The priority ordo last set on each job and has not handed back, from an audit log (empty if
/// the log does not exist yet).
pub fn outstanding(path: &Path) -> Result<HashMap<u64, u64>, SlurmError> {
    log_state(path).map(|s| s.ours)
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

    #[test]
    fn outstanding_follows_set_and_release() {
        let p = std::env::temp_dir().join(format!("ordo-audit-test-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&p);
        assert!(outstanding(&p).unwrap().is_empty());
        let set = |job, v| AuditRecord::now("set", job, 1, Some(v), String::new());
        append(&p, &[set(1, 10), set(2, 20), set(1, 11)]).unwrap();
        append(&p, &[AuditRecord::now("release", 2, 20, Some(3), String::new())]).unwrap();
        append(&p, &[AuditRecord::now("left-alone", 1, 5, None, "changed by hand".into())]).unwrap();
        let o = outstanding(&p).unwrap();
        assert_eq!(o, HashMap::from([(1, 11)]));
        assert_eq!(log_state(&p).unwrap().left_alone, HashMap::from([(1, "changed by hand".to_string())]));
        std::fs::write(&p, "{\"nope\": 1}\n").unwrap();
        let e = read_audit_log(&p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("not an audit record"), "{e}");
        let _ = std::fs::remove_file(&p);
    }
}
