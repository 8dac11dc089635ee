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

impl DbError {
    /// An error that is not SQLite's own: `why` went wrong while doing `what`.
    pub fn new(what: &str, why: &str) -> DbError {
        DbError {
            what: what.to_string(),
            // Not an SQLite failure code (its "Error code 1: SQL error or missing database"
            // would follow the message): a plain text cause.
            source: rusqlite::Error::ToSqlConversionFailure(why.to_string().into()),
        }
    }
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

/// The activity tables (`state/activity.rs` keeps them).
const ACTIVITY_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS job_activity(
  job INTEGER PRIMARY KEY, samples INTEGER NOT NULL, util_sum REAL NOT NULL, hist TEXT NOT NULL,
  mem_peak_mib INTEGER, idle_since INTEGER, idle_sum REAL NOT NULL, idle_n INTEGER NOT NULL, idle_flagged INTEGER,
  updated INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_series(
  res INTEGER NOT NULL, node TEXT NOT NULL, gpu INTEGER NOT NULL, slot INTEGER NOT NULL, t INTEGER NOT NULL,
  n INTEGER NOT NULL, util_sum REAL NOT NULL, sm_sum REAL NOT NULL, sm_n INTEGER NOT NULL, mem_max_mib INTEGER,
  power_sum REAL NOT NULL, power_n INTEGER NOT NULL, alloc_n INTEGER NOT NULL,
  PRIMARY KEY(res, node, gpu, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cluster_series(
  res INTEGER NOT NULL, slot INTEGER NOT NULL, t INTEGER NOT NULL, n INTEGER NOT NULL, gpus REAL NOT NULL,
  allocated REAL NOT NULL, busy REAL NOT NULL, sampled REAL NOT NULL, idle_allocated REAL NOT NULL,
  PRIMARY KEY(res, slot)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
";

/// The schema version this binary reads and writes, kept in the database header's
/// `PRAGMA user_version`. 0 is a database made before versions were kept (ordo up to and
/// including commit aba5234, whose schema is version 1 without the number) or a new file.
pub const SCHEMA_VERSION: i64 = 6;

/// One step of the schema: it takes a database from version `to - 1` to `to`.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version it makes.
    pub to: i64,
    /// What it changes, in words (logged when it runs).
    pub what: &'static str,
    /// The change, run inside the upgrade's transaction.
    pub apply: fn(&Connection) -> Result<(), DbError>,
}

/// The schema's steps in order: `MIGRATIONS[i]` takes version `i` to `i + 1`. A schema change
/// is a new step at the end (a step that has shipped is never edited), with
/// [`SCHEMA_VERSION`] raised to it, a fixture database made by the binary before it in
/// `crates/ordo-server/tests/data/` (`scripts/schema-fixture.sh`) and a test that upgrades that
/// fixture (`crates/ordo-server/tests/migrate.rs`).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        to: 1,
        what: "the tables of ordo up to commit aba5234 (new ones created, columns added by earlier \
               versions added where missing)",
        apply: to_v1,
    },
    Migration { to: 2, what: "admins' cordons and drains of nodes (table node_maint)", apply: to_v2 },
    Migration { to: 3, what: "a job's --output file (column jobs.output)", apply: to_v3 },
    Migration {
        to: 4,
        what: "GPU models and node features: a node's GPU memory and features (nodes.gpu_mem_mib, \
               nodes.features), a job's constraint (jobs.gpu_models, jobs.gpu_mem_mib, jobs.features)",
        apply: to_v4,
    },
    Migration {
        to: 5,
        what: "how a job takes a preemption (jobs.preempt: its checkpoint rule, stop signal and \
               minimum run) and the run time its preemptions lost (jobs.lost_ms)",
        apply: to_v5,
    },
    Migration {
        to: 6,
        what: "the cluster's topology: a node's place (nodes.topology) and a job's ask (jobs.topology)",
        apply: to_v6,
    },
];

/// Version 6: a node's place in the topology (`ordo agent --topology block=nvl0,switch=leaf3`,
/// as that text) and a job's ask (`ordo submit --topology required:block`); NULL: none.
fn to_v6(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch(
        "ALTER TABLE nodes ADD COLUMN topology TEXT;
         ALTER TABLE jobs ADD COLUMN topology TEXT;",
    )
    .ctx("add the columns of the topology")
}

/// Version 5: how a job takes a preemption (`ordo submit --checkpoint --signal --min-run`, JSON
/// of `api::PreemptSpec`; NULL: the defaults) and the run time whose work its preemptions lost.
fn to_v5(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch(
        "ALTER TABLE jobs ADD COLUMN preempt TEXT;
         ALTER TABLE jobs ADD COLUMN lost_ms INTEGER NOT NULL DEFAULT 0;",
    )
    .ctx("add the columns of checkpoints")
}

/// Version 4: what a node's GPUs are beyond their model (their memory, the node's features)
/// and what a job asks of its GPUs (`ordo submit --gpu-model --gpu-mem --feature`). Lists are
/// comma-separated (their names cannot hold a comma); NULL: none.
fn to_v4(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch(
        "ALTER TABLE nodes ADD COLUMN gpu_mem_mib INTEGER;
         ALTER TABLE nodes ADD COLUMN features TEXT;
         ALTER TABLE jobs ADD COLUMN gpu_models TEXT;
         ALTER TABLE jobs ADD COLUMN gpu_mem_mib INTEGER;
         ALTER TABLE jobs ADD COLUMN features TEXT;",
    )
    .ctx("add the columns of GPU models and features")
}

/// A list of names as a column stores it: comma-separated, NULL when empty.
pub fn list_text(v: &[String]) -> Option<String> {
    (!v.is_empty()).then(|| v.join(","))
}

/// A list of names from its column ([`list_text`]).
pub fn text_list(s: Option<String>) -> Vec<String> {
    s.map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()).unwrap_or_default()
}

/// Version 3: the file a job's output is also written to (`ordo submit --output`).
fn to_v3(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("ALTER TABLE jobs ADD COLUMN output TEXT").ctx("add column jobs.output")
}

/// Version 2: an admin's cordon or drain of a node, one row per node under maintenance (kept
/// apart from `nodes`, whose row an agent's registration replaces).
fn to_v2(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch(
        "CREATE TABLE node_maint(
           node TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('cordon', 'drain')), reason TEXT NOT NULL,
           actor TEXT NOT NULL, since INTEGER NOT NULL, deadline INTEGER)",
    )
    .ctx("create table node_maint")
}

/// Version 1: the schema as ordo kept it before versions were numbered. Every statement is
/// idempotent, so it completes a new file, a database of that schema, and one made by an earlier
/// version that lacks some columns.
fn to_v1(conn: &Connection) -> Result<(), DbError> {
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
        add_column(conn, table, col, decl)?;
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_id, array_index) WHERE array_id IS NOT NULL",
    )
    .ctx("create index jobs_array")?;
    conn.execute_batch(ACTIVITY_SCHEMA).ctx("create activity tables")
}

/// Adds a column to a table unless it has it.
fn add_column(conn: &Connection, table: &str, col: &str, decl: &str) -> Result<(), DbError> {
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
    Ok(())
}

/// A database's schema version (`PRAGMA user_version`).
pub fn schema_version(conn: &Connection) -> Result<i64, DbError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).ctx("read the schema version")
}

/// The error for a database that a newer ordo has upgraded: this binary would misread it.
fn newer_error(path: &Path, found: i64, known: i64) -> DbError {
    DbError::new(
        &format!("{}", path.display()),
        &format!(
            "schema version {found} is newer than this ordo knows (version {known}; ordo {}): a newer ordo has \
             upgraded it. Run that version, or restore a backup made before the upgrade; nothing was changed",
            env!("CARGO_PKG_VERSION")
        ),
    )
}

/// Brings the database to the newest version of `steps`, all steps in one transaction: on any
/// error nothing of the upgrade is kept and the database stays at its version. Returns the
/// version it was at, when it changed. A database newer than `steps` know is refused
/// unchanged.
pub fn migrate(conn: &Connection, path: &Path, steps: &[Migration]) -> Result<Option<i64>, DbError> {
    let latest = steps.last().map_or(0, |m| m.to);
    let found = schema_version(conn)?;
    if found > latest {
        return Err(newer_error(path, found, latest));
    }
    if found == latest {
        return Ok(None);
    }
    conn.execute_batch("BEGIN IMMEDIATE").ctx("begin the schema upgrade")?;
    let done = (|| {
        // Another process may have upgraded it between the read above and the write lock.
        let from = schema_version(conn)?;
        if from > latest {
            return Err(newer_error(path, from, latest));
        }
        for (i, m) in steps.iter().enumerate().skip(from.max(0) as usize) {
            debug_assert_eq!(m.to, i as i64 + 1, "migrations are numbered in order");
            (m.apply)(conn).map_err(|e| DbError {
                what: format!("upgrade {} to schema version {} ({}): {}", path.display(), m.to, m.what, e.what),
                source: e.source,
            })?;
        }
        conn.pragma_update(None, "user_version", latest).ctx("write the schema version")?;
        Ok(from)
    })();
    match done {
        Ok(from) => {
            conn.execute_batch("COMMIT").ctx("commit the schema upgrade")?;
            Ok((from != latest).then_some(from))
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Opens (creating if needed) the database in WAL mode with full sync, so a committed
/// transaction survives a crash of the process or the machine, and brings its schema to
/// [`SCHEMA_VERSION`] ([`MIGRATIONS`]). A database of a newer schema is refused before
/// anything in it or about it (mode, journal) is changed.
pub fn open(path: &Path) -> Result<Connection, DbError> {
    let existed = path.exists();
    if !existed {
        private(path)?;
    }
    let conn = Connection::open(path).ctx(&format!("open {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
    let found = schema_version(&conn)?;
    if found > SCHEMA_VERSION {
        return Err(newer_error(path, found, SCHEMA_VERSION));
    }
    if existed {
        private(path)?;
    }
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).ctx("enable WAL")?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::new(
            &format!("enable WAL on {}", path.display()),
            &format!("the journal mode stayed `{mode}`"),
        ));
    }
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;").ctx("set synchronous=FULL")?;
    let had_tables: bool =
        conn.query_row("SELECT COUNT(*) > 0 FROM sqlite_master", [], |r| r.get(0)).ctx("read the schema")?;
    if let Some(from) = migrate(&conn, path, MIGRATIONS)? {
        if had_tables {
            eprintln!("database {}: schema upgraded from version {from} to {SCHEMA_VERSION}", path.display());
        }
    }
    Ok(conn)
}

/// [`private_file`] as a database error.
fn private(path: &Path) -> Result<(), DbError> {
    private_file(path)
        .map_err(|e| DbError::new(&format!("make {} readable by its owner only", path.display()), &e.to_string()))
}

/// What [`backup`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// Size of the copy, bytes.
    pub bytes: u64,
    /// Its schema version.
    pub schema_version: i64,
    /// Jobs in it.
    pub jobs: i64,
    /// The largest job id in it (the last submission it holds).
    pub last_job: Option<i64>,
}

/// Copies the database at `src` to `out` while a server may be writing it, with SQLite's
/// online backup API in one step: the copy is read in one read transaction, so it is the
/// database as of one commit (WAL readers do not block the server's writes). The source is
/// opened read-only and never changed. The copy is written to `OUT.partial` (mode 0600: it
/// holds token digests and every command), checked (`PRAGMA quick_check`), made a single file
/// (rollback journal, no `-wal`), synced, and only then renamed over `out`: a backup killed at
/// any point leaves `out` as it was (absent, or an earlier complete backup), and the next one
/// starts afresh.
pub fn backup(src: &Path, out: &Path) -> Result<BackupInfo, DbError> {
    use rusqlite::backup::{Backup, StepResult};
    use rusqlite::OpenFlags;
    let io = |what: String| move |e: std::io::Error| DbError::new(&what, &e.to_string());
    if !src.is_file() {
        return Err(DbError::new(&format!("back up {}", src.display()), "no such database file"));
    }
    if out.exists() && std::fs::canonicalize(out).ok() == std::fs::canonicalize(src).ok() {
        return Err(DbError::new(&format!("back up {}", src.display()), "--out names the database itself"));
    }
    let from = Connection::open_with_flags(src, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .ctx(&format!("open {} read-only", src.display()))?;
    from.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
    let partial = side(out, ".partial");
    for p in [partial.clone(), side(&partial, "-journal"), side(&partial, "-wal"), side(&partial, "-shm")] {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(DbError::new(&format!("remove the unfinished backup {}", p.display()), &e.to_string()))
            }
            _ => {}
        }
    }
    private_file(&partial).map_err(io(format!("create {}", partial.display())))?;
    let mut to = Connection::open(&partial).ctx(&format!("open {}", partial.display()))?;
    {
        let b = Backup::new(&from, &mut to).ctx(&format!("start the backup of {}", src.display()))?;
        let mut tries = 0;
        loop {
            match b.step(-1).ctx(&format!("copy {}", src.display()))? {
                StepResult::Done => break,
                // Busy or locked (a writer mid-recovery): try again shortly, for up to a minute.
                _ if tries < 600 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                _ => return Err(DbError::new(&format!("copy {}", src.display()), "the database stayed locked")),
            }
        }
    }
    drop(from);
    let check: String = to.query_row("PRAGMA quick_check", [], |r| r.get(0)).ctx("check the copy")?;
    if check != "ok" {
        return Err(DbError::new(&format!("check the copy {}", partial.display()), &check));
    }
    let mode: String = to.query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0)).ctx("make the copy one file")?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(DbError::new(&format!("make {} one file", partial.display()), &format!("journal mode `{mode}`")));
    }
    let schema_version = schema_version(&to)?;
    let has_jobs: bool = to
        .query_row("SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'", [], |r| r.get(0))
        .ctx("read the copy")?;
    let (jobs, last_job) = if has_jobs {
        to.query_row("SELECT COUNT(*), MAX(id) FROM jobs", [], |r| Ok((r.get(0)?, r.get(1)?))).ctx("read the copy")?
    } else {
        (0, None)
    };
    to.close().map_err(|(_, e)| e).ctx(&format!("close {}", partial.display()))?;
    let f = std::fs::File::open(&partial).map_err(io(format!("open {}", partial.display())))?;
    f.sync_all().map_err(io(format!("sync {}", partial.display())))?;
    let bytes = f.metadata().map_err(io(format!("read {}", partial.display())))?.len();
    std::fs::rename(&partial, out).map_err(io(format!("rename {} to {}", partial.display(), out.display())))?;
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(io(format!("sync {}", dir.display())))?;
    Ok(BackupInfo { bytes, schema_version, jobs, last_job })
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
     no_preempt, restarts, executed_ms, umask, after, array_id, array_index, nodes, ranks, gang_stop, output, \
     gpu_models, gpu_mem_mib, features, preempt, lost_ms, topology";

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
        output: r.get(32)?,
        gpu_models: text_list(r.get(33)?),
        gpu_mem_mib: r.get::<_, Option<i64>>(34)?.map(|v| v as u64),
        features: text_list(r.get(35)?),
        preempt: r.get::<_, Option<String>>(36)?.and_then(|s| serde_json::from_str(&s).ok()),
        lost_ms: r.get(37)?,
        topology: r.get(38)?,
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
