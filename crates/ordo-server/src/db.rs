//! The SQLite database: schema, opening (WAL, full sync), and the row types the server keeps.
//! Every state change is one transaction; the server acknowledges only after it commits.

use crate::api::{JobInfo, JobNo, JobState, OnNodeFailure};
pub use rusqlite::Connection;
use rusqlite::{params, OptionalExtension, Row};
use std::path::Path;

/// A database error with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("database {what}: {source}")]
pub struct DbError {
    /// What was being done.
    pub what: String,
    /// Cause.
    #[source]
    pub source: rusqlite::Error,
}

/// Adds what was being done to a rusqlite error.
pub trait Ctx<T> {
    /// Wraps the error.
    fn ctx(self, what: &str) -> Result<T, DbError>;
}

impl<T> Ctx<T> for Result<T, rusqlite::Error> {
    fn ctx(self, what: &str) -> Result<T, DbError> {
        self.map_err(|source| DbError { what: what.to_string(), source })
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens(
  id INTEGER PRIMARY KEY, user TEXT NOT NULL, role TEXT NOT NULL, hash TEXT NOT NULL, created INTEGER NOT NULL,
  expires INTEGER, revoked INTEGER);
CREATE TABLE IF NOT EXISTS nodes(
  name TEXT PRIMARY KEY, seq INTEGER NOT NULL, gpus INTEGER NOT NULL, fake INTEGER NOT NULL, gpu_model TEXT,
  state TEXT NOT NULL, last_seen INTEGER NOT NULL, cpus INTEGER, mem_mib INTEGER,
  mem_limits INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, command TEXT NOT NULL, cwd TEXT,
  gpus INTEGER NOT NULL, cpus INTEGER, mem_mib INTEGER, time_limit_ms INTEGER NOT NULL, priority INTEGER NOT NULL,
  on_node_failure TEXT NOT NULL, state TEXT NOT NULL, submit INTEGER NOT NULL, start INTEGER, end_time INTEGER,
  node TEXT, gpu_ids TEXT, exit_code INTEGER, end_reason TEXT, attempts INTEGER NOT NULL DEFAULT 0,
  cancel_requested INTEGER NOT NULL DEFAULT 0, held_by TEXT, no_preempt INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0, executed_ms INTEGER NOT NULL DEFAULT 0, umask INTEGER);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS arrays(
  id INTEGER PRIMARY KEY, user TEXT NOT NULL, spec TEXT NOT NULL, elements INTEGER NOT NULL, max_running INTEGER,
  submit INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audit(
  id INTEGER PRIMARY KEY, time INTEGER NOT NULL, actor TEXT NOT NULL, kind TEXT NOT NULL, job INTEGER,
  policy TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_job ON audit(job);
CREATE INDEX IF NOT EXISTS audit_time ON audit(time);
";

/// Opens (creating if needed) the database in WAL mode with full sync, so a committed
/// transaction survives a crash of the process or the machine.
pub fn open(path: &Path) -> Result<Connection, DbError> {
    private_file(path).map_err(|e| DbError {
        what: format!("make {} readable by its owner only: {e}", path.display()),
        source: rusqlite::Error::InvalidQuery,
    })?;
    let conn = Connection::open(path).ctx(&format!("open {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).ctx("enable WAL")?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError {
            what: format!("enable WAL on {} (journal mode stayed `{mode}`)", path.display()),
            source: rusqlite::Error::InvalidQuery,
        });
    }
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;").ctx("set synchronous=FULL")?;
    conn.execute_batch(SCHEMA).ctx("create schema")?;
    // Databases made by earlier versions lack the newer columns.
    for (table, col, decl) in [
        ("jobs", "held_by", "TEXT"),
        ("jobs", "no_preempt", "INTEGER NOT NULL DEFAULT 0"),
        ("jobs", "restarts", "INTEGER NOT NULL DEFAULT 0"),
        ("jobs", "executed_ms", "INTEGER NOT NULL DEFAULT 0"),
        ("jobs", "umask", "INTEGER"),
        ("jobs", "after", "TEXT"),
        ("jobs", "array_id", "INTEGER"),
        ("jobs", "array_index", "INTEGER"),
        ("tokens", "expires", "INTEGER"),
        ("tokens", "revoked", "INTEGER"),
        ("nodes", "cpus", "INTEGER"),
        ("nodes", "mem_mib", "INTEGER"),
        ("nodes", "mem_limits", "INTEGER NOT NULL DEFAULT 0"),
        ("nodes", "addr", "TEXT"),
        ("jobs", "nodes", "INTEGER NOT NULL DEFAULT 1"),
        ("jobs", "ranks", "TEXT"),
        ("jobs", "gang_stop", "TEXT"),
    ] {
        let has: bool = conn
            .query_row(&format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"), [col], |r| {
                r.get::<_, i64>(0)
            })
            .ctx(&format!("read {table} columns"))?
            > 0;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {col} {decl}"))
                .ctx(&format!("add column {table}.{col}"))?;
        }
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_id, array_index) WHERE array_id IS NOT NULL",
    )
    .ctx("create index jobs_array")?;
    Ok(conn)
}

/// A job row.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// The API view of the row.
    pub info: JobInfo,
}

/// Columns read by [`job_from_row`], in order.
pub const JOB_COLS: &str =
    "id, user, name, command, cwd, gpus, cpus, mem_mib, time_limit_ms, priority, on_node_failure, \
     state, submit, start, end_time, node, gpu_ids, exit_code, end_reason, attempts, cancel_requested, held_by, \
     no_preempt, restarts, executed_ms, umask, after, array_id, array_index, nodes, ranks, gang_stop";

/// Reads a row selected with [`JOB_COLS`].
pub fn job_from_row(r: &Row<'_>) -> rusqlite::Result<JobInfo> {
    let command: String = r.get(3)?;
    let state: String = r.get(11)?;
    let gpu_ids: Option<String> = r.get(16)?;
    let onf: String = r.get(10)?;
    Ok(JobInfo {
        id: r.get::<_, i64>(0)? as JobNo,
        user: r.get(1)?,
        name: r.get(2)?,
        command: serde_json::from_str(&command).unwrap_or_default(),
        cwd: r.get(4)?,
        gpus: r.get(5)?,
        cpus: r.get(6)?,
        mem_mib: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
        time_limit_ms: r.get(8)?,
        priority: r.get(9)?,
        on_node_failure: if onf == "fail" { OnNodeFailure::Fail } else { OnNodeFailure::Requeue },
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        submit: r.get(12)?,
        start: r.get(13)?,
        end: r.get(14)?,
        node: r.get(15)?,
        gpu_ids: gpu_ids.map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect()).unwrap_or_default(),
        exit_code: r.get(17)?,
        end_reason: r.get(18)?,
        attempts: r.get(19)?,
        cancel_requested: r.get::<_, i64>(20)? != 0,
        held_by: r.get(21)?,
        no_preempt: r.get::<_, i64>(22)? != 0,
        restarts: r.get(23)?,
        executed_ms: r.get(24)?,
        umask: r.get(25)?,
        wait: None,
        after: r.get::<_, Option<String>>(26)?.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default(),
        activity: None,
        array: match (r.get::<_, Option<i64>>(27)?, r.get::<_, Option<i64>>(28)?) {
            (Some(id), Some(index)) => Some(crate::api::ArrayMember { id: id as JobNo, index: index as u32 }),
            _ => None,
        },
        nodes: r.get::<_, Option<u32>>(29)?.unwrap_or(1),
        ranks: r.get::<_, Option<String>>(30)?.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default(),
        gang_stop: r.get::<_, Option<String>>(31)?.and_then(|s| serde_json::from_str(&s).ok()),
    })
}

/// Loads one job.
pub fn load_job(conn: &Connection, id: JobNo) -> Result<Option<JobInfo>, DbError> {
    conn.query_row(&format!("SELECT {JOB_COLS} FROM jobs WHERE id = ?1"), params![id as i64], job_from_row)
        .optional()
        .ctx("load job")
}

/// Loads every job in one of the given states, by id.
pub fn load_jobs_in(conn: &Connection, states: &[JobState]) -> Result<Vec<JobInfo>, DbError> {
    let list: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
    let mut st = conn
        .prepare(&format!("SELECT {JOB_COLS} FROM jobs WHERE state IN ({}) ORDER BY id", list.join(",")))
        .ctx("load jobs")?;
    let rows = st.query_map([], job_from_row).ctx("load jobs")?;
    rows.collect::<Result<Vec<_>, _>>().ctx("load jobs")
}

/// Comma-separated GPU ids as stored.
pub fn ids_text(ids: &[u32]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// Reads a meta value.
pub fn meta_get(conn: &Connection, key: &str) -> Result<Option<String>, DbError> {
    conn.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0)).optional().ctx("read meta")
}

/// Appends an audit record (inside the caller's transaction).
pub fn audit(
    conn: &Connection,
    time: i64,
    actor: &str,
    kind: &str,
    job: Option<JobNo>,
    policy: &str,
    detail: &serde_json::Value,
) -> Result<(), DbError> {
    conn.prepare_cached("INSERT INTO audit(time, actor, kind, job, policy, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .and_then(|mut s| s.execute(params![time, actor, kind, job.map(|j| j as i64), policy, detail.to_string()]))
        .ctx("write audit record")?;
    Ok(())
}

/// Creates the database file readable and writable by its owner only (0600), or makes an
/// existing one so: it holds token hashes and every job's command. SQLite gives its `-wal` and
/// `-shm` files the mode of the database file. An existing file is changed by its path only:
/// opening and closing a descriptor of a database this process has open would drop SQLite's
/// POSIX locks on it.
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if !path.exists() {
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    }
    for p in [path.to_path_buf(), side(path, "-wal"), side(path, "-shm")] {
        match std::fs::metadata(&p) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?
            }
            _ => {}
        }
    }
    Ok(())
}

fn side(path: &Path, ext: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(ext);
    s.into()
}
