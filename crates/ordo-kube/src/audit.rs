//! The audit log: every decision and every pod the scheduler saw come and go, as JSON Lines in
//! the shape of `ordo server`'s audit records (`id`, `time`, `actor`, `kind`, `job`, `policy`, `detail`).

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One audit record: the same fields and meaning as `ordo server`'s (`GET /v1/audit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Sequence number (increasing across restarts of the scheduler).
    pub id: i64,
    /// When, ms since the epoch.
    pub time: i64,
    /// Who: `scheduler` (a decision), a user (a pod seen pending), `cluster` (seen ending).
    pub actor: String,
    /// What: `policy`, `submit`, `start`, `skip`, `preempt`, `end`, `conflict`, `node`.
    pub kind: String,
    /// The job concerned: a pod or gang as a number ([`job_number`]), stable across restarts.
    pub job: Option<u64>,
    /// The policy in force.
    pub policy: String,
    /// Details: the pod or gang, its uid(s), GPUs, nodes, the reason in words and as a value.
    pub detail: serde_json::Value,
}

/// The job number of a pod (by its uid) or a gang (by namespace, name and its first member's
/// creation time): FNV-1a of that text, kept to 52 bits so that JSON readers keep it exact.
pub fn job_number(unit_id: &str) -> u64 {
    let h = unit_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    h & ((1 << 52) - 1)
}

/// A record before it has its id and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// Who.
    pub actor: String,
    /// What.
    pub kind: &'static str,
    /// Unit id (see [`job_number`]), if about a pod or gang.
    pub unit: Option<String>,
    /// Details.
    pub detail: serde_json::Value,
}

/// Why the audit log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Reading or writing the file failed.
    #[error("audit log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A line is not an audit record.
    #[error("audit log {path}, line {line}: not an audit record: {why}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The parse error.
        why: String,
    },
}

/// An open audit log, appended to.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: std::fs::File,
    next_id: i64,
}

impl AuditLog {
    /// Opens (creating, readable by its owner only) the log and finds the last id in it.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        use std::os::unix::fs::OpenOptionsExt;
        let io = |source| AuditError::Io { path: path.to_path_buf(), source };
        let mut file =
            std::fs::OpenOptions::new().read(true).append(true).create(true).mode(0o600).open(path).map_err(io)?;
        // The last complete line holds the last id: read the file's tail only.
        let len = file.metadata().map_err(io)?.len();
        let from = len.saturating_sub(64 * 1024);
        file.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut tail = String::new();
        file.read_to_string(&mut tail).map_err(io)?;
        let last = tail
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
            .map(|r| r.id)
            .next()
            .unwrap_or(0);
        Ok(AuditLog { path: path.to_path_buf(), file, next_id: last + 1 })
    }

    /// Appends records (one write, then a sync to disk), all at `time` with `policy`.
    pub fn append(&mut self, drafts: Vec<Draft>, time: i64, policy: &str) -> Result<(), AuditError> {
        if drafts.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(drafts.len() * 200);
        for d in drafts {
            let rec = AuditRecord {
                id: self.next_id,
                time,
                actor: d.actor,
                kind: d.kind.to_string(),
                job: d.unit.as_deref().map(job_number),
                policy: policy.to_string(),
                detail: d.detail,
            };
            self.next_id += 1;
            serde_json::to_writer(&mut buf, &rec)
                .map_err(|e| AuditError::Io { path: self.path.clone(), source: std::io::Error::other(e) })?;
            buf.push(b'\n');
        }
        let io = |source| AuditError::Io { path: self.path.clone(), source };
        self.file.write_all(&buf).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Reads every record of an audit log; a line that is not a record fails with its number.
pub fn read_log(path: &Path) -> Result<Vec<AuditRecord>, AuditError> {
    let f = std::fs::File::open(path).map_err(|source| AuditError::Io { path: path.to_path_buf(), source })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| AuditError::Io { path: path.to_path_buf(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        let rec = serde_json::from_str(&line).map_err(|e| AuditError::Bad {
            path: path.to_path_buf(),
            line: i + 1,
            why: e.to_string(),
        })?;
        out.push(rec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_continue_after_reopening() {
        let dir = std::env::temp_dir().join(format!("ordo-kube-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&p);
        let d =
            |k| Draft { actor: "scheduler".into(), kind: k, unit: Some("uid-1".into()), detail: serde_json::json!({}) };
        AuditLog::open(&p).expect("open").append(vec![d("submit"), d("start")], 5, "fifo").expect("append");
        AuditLog::open(&p).expect("open").append(vec![d("end")], 9, "fifo").expect("append");
        let recs = read_log(&p).expect("read");
        assert_eq!(recs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(recs[2].kind, "end");
        assert_eq!(recs[0].job, Some(job_number("uid-1")));
        std::fs::write(&p, "{\"id\": 1}\nnot json\n").expect("write");
        let e = read_log(&p).expect_err("bad");
        assert!(e.to_string().contains("line 1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
