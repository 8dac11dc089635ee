//! Schema versions and migrations: each step upgrades a fixture made by the binary before it
//! (tests/data, scripts/schema-fixture.sh) to the schema a new database gets; a failed upgrade
//! keeps nothing; a database newer than this binary is refused and left as it was.

mod common;

use ordo_server::db::{self, Connection, DbError, Migration, MIGRATIONS, SCHEMA_VERSION};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixture(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    let dst = dir.join(name);
    std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
    dst
}

/// Every table's and index's columns (name, type, not null, default, primary key), by name:
/// the schema as SQLite sees it, whatever SQL text made it.
fn schema(conn: &Connection) -> BTreeMap<String, Vec<String>> {
    let mut st = conn
        .prepare("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .expect("sqlite_master");
    let objs: Vec<(String, String, String)> =
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).expect("query").map(|r| r.expect("row")).collect();
    let mut out = BTreeMap::new();
    for (kind, name, table) in objs {
        let cols: Vec<String> = if kind == "table" {
            let mut st = conn.prepare(&format!("PRAGMA table_info('{name}')")).expect("table_info");
            st.query_map([], |r| {
                Ok(format!(
                    "{} {} notnull={} default={:?} pk={}",
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, i64>(5)?
                ))
            })
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
        } else {
            let mut st = conn.prepare(&format!("PRAGMA index_info('{name}')")).expect("index_info");
            let mut c: Vec<String> = st
                .query_map([], |r| r.get::<_, Option<String>>(2))
                .expect("query")
                .map(|r| r.expect("row").unwrap_or_default())
                .collect();
            c.insert(0, format!("on {table}"));
            c
        };
        out.insert(format!("{kind} {name}"), cols);
    }
    out
}

fn count(conn: &Connection, table: &str) -> i64 {
    conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).expect("count")
}

fn version(conn: &Connection) -> i64 {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version")
}

/// The schema a new database gets.
fn fresh_schema(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let conn = db::open(&dir.join("fresh.db")).expect("new database");
    assert_eq!(version(&conn), SCHEMA_VERSION);
    schema(&conn)
}

/// From the database of a server that ran before versions were kept (version 1 without the
/// number) to the newest:
/// every row kept, the version written, the schema exactly a new database's.
#[test]
fn v1_from_a_server_database_made_before_versions() {
    let dir = common::tempdir("migrate-v1-server");
    let path = fixture("server.db", &dir);
    let before: Vec<i64> = {
        let raw = Connection::open(&path).expect("open fixture");
        assert_eq!(version(&raw), 0, "the fixture predates schema versions");
        ["tokens", "nodes", "jobs", "arrays", "audit", "meta", "cluster_series"]
            .iter()
            .map(|t| count(&raw, t))
            .collect()
    };
    assert!(before.iter().all(|&n| n > 0), "the fixture has rows in every table: {before:?}");
    let conn = db::open(&path).expect("upgrade");
    assert_eq!(version(&conn), SCHEMA_VERSION);
    let after: Vec<i64> = ["tokens", "nodes", "jobs", "arrays", "audit", "meta", "cluster_series"]
        .iter()
        .map(|t| count(&conn, t))
        .collect();
    assert_eq!(before, after, "rows kept");
    let held = db::load_job(&conn, 8).expect("load").expect("job 8");
    assert_eq!(held.held_by.as_deref(), Some("alice"));
    assert_eq!(db::meta_get(&conn, "policy").expect("meta").as_deref(), Some("sjf+easy"));
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("check");
    assert_eq!(ok, "ok");
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
    drop(conn);
    // Opening it again changes nothing more.
    let bytes = std::fs::read(&path).expect("read");
    drop(db::open(&path).expect("reopen"));
    assert_eq!(std::fs::read(&path).expect("read"), bytes, "a current database is opened unchanged");
}

/// To the newest from a database where only `ordo admin token create` ran (no activity tables).
#[test]
fn v1_from_an_admin_only_database() {
    let dir = common::tempdir("migrate-v1-admin");
    let path = fixture("admin.db", &dir);
    let conn = db::open(&path).expect("upgrade");
    assert_eq!(version(&conn), SCHEMA_VERSION);
    assert_eq!(count(&conn, "tokens"), 1);
    assert_eq!(count(&conn, "job_activity"), 0, "the activity tables were created");
    assert_eq!(schema(&conn), fresh_schema(&dir));
}

/// Version 2 from the database of a server of version 1 (made by commit dc99b7d's binary): every
/// row kept, the `node_maint` table added, the schema exactly a new database's.
#[test]
fn v2_from_a_v1_server_database() {
    let (dir, _, conn) = upgrade_server_fixture("migrate-v2-server", "server-v1.db", 1);
    assert_eq!(count(&conn, "node_maint"), 0);
    assert_eq!(db::meta_get(&conn, "policy").expect("meta").as_deref(), Some("sjf+easy"));
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
}

/// Version 3 from the database of a server of version 2 (made by commit 9a44897's binary): every
/// row kept, the column `jobs.output` added (empty), the schema exactly a new database's.
#[test]
fn v3_from_a_v2_server_database() {
    let (dir, _, conn) = upgrade_server_fixture("migrate-v3-server", "server-v2.db", 2);
    let with_output: i64 =
        conn.query_row("SELECT COUNT(*) FROM jobs WHERE output IS NOT NULL", [], |r| r.get(0)).expect("output");
    assert_eq!(with_output, 0);
    assert!(db::load_job(&conn, 1).expect("load").is_some_and(|j| j.output.is_none()));
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
}

/// Version 4 from the database of a server of version 3 (made by the binary of commit 56f74c7,
/// see tests/data/README.md): every row kept, the node and job columns of GPU models and
/// features added (empty), the schema exactly a new database's; a server opens it with its
/// jobs and nodes as they were and takes a constrained job.
#[test]
fn v4_from_a_v3_server_database() {
    let (dir, path, conn) = upgrade_server_fixture("migrate-v4-server", "server-v3.db", 3);
    let set: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE gpu_models IS NOT NULL OR gpu_mem_mib IS NOT NULL OR features IS NOT NULL)
                  + (SELECT COUNT(*) FROM nodes WHERE gpu_mem_mib IS NOT NULL OR features IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .expect("new columns");
    assert_eq!(set, 0, "no job or node has a constraint or kind it did not have");
    let j = db::load_job(&conn, 1).expect("load").expect("job 1");
    assert!(j.gpu_models.is_empty() && j.gpu_mem_mib.is_none() && j.features.is_empty() && j.needs().is_none());
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
    drop(conn);
    // A server opens it: the held job is still held, and node gpu1 (fake, no model) takes a job
    // that asks for no model but not one that asks for a100.
    let cfg = ordo_server::ServerConfig { db: path.clone(), ..ordo_server::ServerConfig::default() };
    let t0 = ordo_server::api::now_ms();
    let mut core = ordo_server::state::Core::open(cfg, t0).expect("a server opens the upgraded database");
    let held = core.job(8, t0).expect("job 8");
    assert_eq!(held.held_by.as_deref(), Some("alice"));
    core.register(&common::agent("gpu1"), &common::reg("gpu1", 2), t0).expect("gpu1 registers again");
    let refused = core.submit(
        &common::user("alice"),
        ordo_server::api::SubmitRequest { gpu_models: vec!["a100".into()], ..common::job(1) },
        t0,
    );
    assert!(
        matches!(&refused, Err(ordo_server::state::ApiError::Unprocessable(m)) if m.contains("no node has a GPU of model a100")),
        "{refused:?}"
    );
    core.submit(&common::user("alice"), common::job(1), t0).expect("a plain job");
}

/// Upgrades the fixture `name` (a server database of schema version `from`, with rows in every
/// table) in a temporary directory: the upgrade reaches [`SCHEMA_VERSION`] and keeps every row.
fn upgrade_server_fixture(tag: &str, name: &str, from: i64) -> (PathBuf, PathBuf, Connection) {
    let dir = common::tempdir(tag);
    let path = fixture(name, &dir);
    let tables = ["tokens", "nodes", "jobs", "arrays", "audit", "meta", "cluster_series"];
    let before: Vec<i64> = {
        let raw = Connection::open(&path).expect("open fixture");
        assert_eq!(version(&raw), from, "the fixture is of version {from}");
        tables.iter().map(|t| count(&raw, t)).collect()
    };
    assert!(before.iter().all(|&n| n > 0), "the fixture has rows in every table: {before:?}");
    let conn = db::open(&path).expect("upgrade");
    assert_eq!(version(&conn), SCHEMA_VERSION);
    let after: Vec<i64> = tables.iter().map(|t| count(&conn, t)).collect();
    assert_eq!(before, after, "rows kept");
    (dir, path, conn)
}

/// Version 5 from the database of a server of version 4 (tests/data/README.md): every row
/// kept, no job given a checkpoint rule or lost time it did not have, the schema exactly a new
/// database's; a server opens it and takes a job that declares how it checkpoints.
#[test]
fn v5_from_a_v4_server_database() {
    let (dir, path, conn) = upgrade_server_fixture("migrate-v5-server", "server-v4.db", 4);
    let set: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs WHERE preempt IS NOT NULL OR lost_ms != 0", [], |r| r.get(0))
        .expect("new columns");
    assert_eq!(set, 0, "no job has a checkpoint rule or lost time it did not have");
    let j = db::load_job(&conn, 1).expect("load").expect("job 1");
    assert!(j.preempt.is_none() && j.lost_ms == 0);
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
    drop(conn);
    let cfg = ordo_server::ServerConfig { db: path.clone(), ..ordo_server::ServerConfig::default() };
    let t0 = ordo_server::api::now_ms();
    let mut core = ordo_server::state::Core::open(cfg, t0).expect("a server opens the upgraded database");
    core.register(&common::agent("gpu1"), &common::reg("gpu1", 2), t0).expect("gpu1 registers again");
    let spec = ordo_server::api::PreemptSpec {
        checkpoint: Some("every:10m".into()),
        signal: Some("USR1".into()),
        min_run_ms: Some(1_000),
    };
    let id = core
        .submit(
            &common::user("alice"),
            ordo_server::api::SubmitRequest { preempt: Some(spec.clone()), ..common::job(1) },
            t0,
        )
        .expect("a job that checkpoints");
    assert_eq!(core.job(id, t0).expect("the job").preempt, Some(spec));
}

/// Version 6 from the database of a server of version 5 (tests/data/README.md): every row
/// kept, no node given a place or job an ask it did not have, the schema exactly a new
/// database's; a server with topology levels opens it, its node registers with a place and a
/// job asks for a level.
#[test]
fn v6_from_a_v5_server_database() {
    let (dir, path, conn) = upgrade_server_fixture("migrate-v6-server", "server-v5.db", 5);
    let set: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE topology IS NOT NULL) + (SELECT COUNT(*) FROM nodes WHERE \
             topology IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .expect("new columns");
    assert_eq!(set, 0, "no node has a place, no job an ask, it did not have");
    assert!(db::load_job(&conn, 1).expect("load").expect("job 1").topology.is_none());
    assert_eq!(schema(&conn), fresh_schema(&dir), "an upgraded database has a new one's schema");
    drop(conn);
    let mut cfg = ordo_server::ServerConfig { db: path.clone(), ..ordo_server::ServerConfig::default() };
    cfg.set_topology_levels("test", &["block".into()]).expect("levels");
    let t0 = ordo_server::api::now_ms();
    let mut core = ordo_server::state::Core::open(cfg, t0).expect("a server opens the upgraded database");
    let place = ordo_server::topo::parse_place("block=b0").expect("place");
    let reg = ordo_server::api::RegisterRequest { topology: place.clone(), ..common::reg("gpu1", 2) };
    core.register(&common::agent("gpu1"), &reg, t0).expect("gpu1 registers with a place");
    assert_eq!(core.nodes().iter().find(|n| n.name == "gpu1").expect("gpu1").topology, place);
    let ask = ordo_server::api::SubmitRequest { topology: Some("preferred:block".into()), ..common::job(1) };
    let id = core.submit(&common::user("alice"), ask, t0).expect("a job with an ask");
    assert_eq!(core.job(id, t0).expect("the job").topology.as_deref(), Some("preferred:block"));
}

/// Every version this binary knows has its step, numbered in order.
#[test]
fn steps_are_numbered_in_order() {
    assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION);
    for (i, m) in MIGRATIONS.iter().enumerate() {
        assert_eq!(m.to, i as i64 + 1, "step {i}");
    }
}

/// A database that a newer ordo upgraded is refused with what to do, and nothing about it
/// changes: its bytes, its mode, no file left beside it.
#[test]
fn a_newer_database_is_refused_unchanged() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::tempdir("migrate-newer");
    let path = fixture("server.db", &dir);
    {
        let raw = Connection::open(&path).expect("open fixture");
        raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("stamp a newer version");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let listing = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into())
            .collect();
        v.sort();
        v
    };
    let (bytes, files) = (std::fs::read(&path).expect("read"), listing(&dir));
    let err = db::open(&path).expect_err("a newer schema is refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "schema version {} is newer than this ordo knows (version {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        )) && msg.contains("nothing was changed")
            && msg.contains(&path.display().to_string()),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), bytes, "the database is unchanged");
    assert_eq!(std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777, 0o640, "its mode too");
    assert_eq!(listing(&dir), files, "no file left beside it");
    // The server's state refuses it the same way.
    let cfg = ordo_server::ServerConfig { db: path.clone(), ..ordo_server::ServerConfig::default() };
    let Err(err) = ordo_server::state::Core::open(cfg, 0) else { panic!("the server opened a newer database") };
    assert!(err.to_string().contains("is newer than this ordo knows"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), bytes);
}

fn create_x(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("CREATE TABLE x(a INTEGER)").map_err(|source| DbError { what: "create x".into(), source })
}

fn add_x_b(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("ALTER TABLE x ADD COLUMN b TEXT").map_err(|source| DbError { what: "add x.b".into(), source })
}

fn fails(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("CREATE TABLE half_done(a INTEGER)")
        .map_err(|source| DbError { what: "create half_done".into(), source })?;
    Err(DbError::new("step 3", "fails on purpose"))
}

/// Steps run in order from the database's version, each once; a step that fails takes the
/// whole upgrade back (the earlier steps of the same upgrade too) and names the step.
#[test]
fn steps_run_in_order_and_a_failed_upgrade_keeps_nothing() {
    let dir = common::tempdir("migrate-steps");
    let path = fixture("admin.db", &dir);
    let conn = Connection::open(&path).expect("open");
    let v2 = Migration { to: 2, what: "table x", apply: create_x };
    let v3 = Migration { to: 3, what: "x.b", apply: add_x_b };
    let bad = Migration { to: 3, what: "a step that fails", apply: fails };

    let err = db::migrate(&conn, &path, &[MIGRATIONS[0], v2, bad]).expect_err("step 3 fails");
    let msg = err.to_string();
    assert!(msg.contains("to schema version 3 (a step that fails)") && msg.contains("fails on purpose"), "{msg}");
    assert_eq!(version(&conn), 0, "still the version it was");
    let tables: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('x', 'half_done', 'job_activity')", [], |r| {
            r.get(0)
        })
        .expect("tables");
    assert_eq!(tables, 0, "nothing of steps 1 to 3 kept");

    assert_eq!(db::migrate(&conn, &path, &[MIGRATIONS[0], v2]).expect("to 2"), Some(0));
    assert_eq!(version(&conn), 2);
    // From 2 only step 3 runs (step 2 again would fail: table x exists).
    assert_eq!(db::migrate(&conn, &path, &[MIGRATIONS[0], v2, v3]).expect("to 3"), Some(2));
    assert_eq!(version(&conn), 3);
    let cols: i64 =
        conn.query_row("SELECT COUNT(*) FROM pragma_table_info('x')", [], |r| r.get(0)).expect("columns of x");
    assert_eq!(cols, 2);
    assert_eq!(db::migrate(&conn, &path, &[MIGRATIONS[0], v2, v3]).expect("current"), None);
    // A migrate call that knows fewer steps refuses it.
    let err = db::migrate(&conn, &path, &[MIGRATIONS[0], v2]).expect_err("newer");
    assert!(err.to_string().contains("schema version 3 is newer than this ordo knows (version 2"), "{err}");
}
