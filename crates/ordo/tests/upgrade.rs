//! Upgrading a database made by an earlier ordo, as an admin does it: the new binary's server
//! starts on the old file (crates/ordo-server/tests/data/server.db, made by the binary before
//! schema versions were kept), upgrades it, and serves its jobs, tokens and policy; a database
//! from a newer ordo is refused by the server and the admin commands, and left as it was.

mod harness;

use harness::*;
use ordo_server::db::SCHEMA_VERSION;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn fixture(dir: &Path) -> (PathBuf, String, String) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ordo-server/tests/data");
    let db = dir.join("ordo.db");
    std::fs::copy(data.join("server.db"), &db).expect("copy fixture");
    let tokens = std::fs::read_to_string(data.join("server.tokens")).expect("fixture tokens");
    let tok = |who: &str| {
        tokens.lines().find_map(|l| l.strip_prefix(&format!("{who} "))).expect("a token").trim().to_string()
    };
    (db, tok("admin"), tok("alice"))
}

fn user_version(db: &Path) -> i64 {
    let c = rusqlite::Connection::open(db).expect("open");
    c.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version")
}

#[test]
fn a_server_upgrades_a_database_made_before_schema_versions() {
    let dir = tempdir("upgrade");
    let (db, admin, alice) = fixture(&dir);
    assert_eq!(user_version(&db), 0);
    // No --policy: the policy stored in the old database must be the one in force.
    let mut c = Command::new(ORDO);
    c.args(["server", "--db"]).arg(&db).args(["--listen", "127.0.0.1:0"]).stderr(Stdio::piped());
    let (mut srv, url) = listening(c);
    let mut said = String::new();
    BufReader::new(srv.0.stderr.take().expect("stderr")).read_line(&mut said).expect("stderr line");
    let want = format!("schema upgraded from version 0 to {SCHEMA_VERSION}");
    assert!(said.contains(&want), "the server says it upgraded: {said}");
    assert_eq!(cli_json(&url, &admin, &["policy", "show"])["policy"].as_str(), Some("sjf+easy"), "the stored policy");
    let held = job_state(&url, &alice, 8);
    assert_eq!((held["state"].as_str(), held["held_by"].as_str()), (Some("pending"), Some("alice")));
    assert_eq!(job_state(&url, &alice, 2)["exit_code"].as_i64(), Some(3), "ended jobs kept");
    let hist = cli_json(&url, &alice, &["history"]);
    assert_eq!(hist.as_array().map(|a| a.len()), Some(8), "every ended job in the history: {hist}");
    // New submissions follow the old ones (job 9 was the last).
    let (code, v) = api(&url, &alice, "GET", "/v1/jobs/9", None);
    assert_eq!((code, v["state"].as_str()), (200, Some("cancelled")));
    drop(srv);
    assert_eq!(user_version(&db), SCHEMA_VERSION);
}

#[test]
fn a_newer_database_is_refused_by_every_command() {
    let dir = tempdir("upgrade-newer");
    let (db, _, _) = fixture(&dir);
    {
        let c = rusqlite::Connection::open(&db).expect("open");
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("stamp");
    }
    let before = std::fs::read(&db).expect("read");
    let out = Command::new(ORDO)
        .args(["server", "--db"])
        .arg(&db)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("run server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(&format!(
                "schema version {} is newer than this ordo knows (version {SCHEMA_VERSION}",
                SCHEMA_VERSION + 1
            )),
        "{err}"
    );
    for args in [&["admin", "token", "list"][..], &["admin", "token", "create", "bob"][..]] {
        let out = Command::new(ORDO).args(args).arg("--db").arg(&db).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("is newer than this ordo knows"), "{args:?}: {err}");
        // Said once, without SQLite's generic failure text (an admin's walk read it three times).
        assert_eq!(err.matches("is newer than this ordo knows").count(), 1, "{args:?}: {err}");
        assert!(!err.contains("Error code"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&db).expect("read"), before, "the database is unchanged");
    // A backup of it is still possible (it copies pages; the newer ordo can restore it).
    let out = Command::new(ORDO).args(["admin", "backup", "--db"]).arg(&db).arg("--out").arg(dir.join("b.db")).output();
    let out = out.expect("run backup");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `systemctl stop` sends SIGTERM: the server commits its last changes, folds the write-ahead
/// log into the database file and exits 0; what it acknowledged is in the file alone.
#[test]
fn a_server_stopped_by_sigterm_leaves_every_change_in_the_database_file() {
    let dir = tempdir("sigterm");
    let (admin, alice) = tokens(&dir);
    let (mut srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _a = agent(&dir, &url, "n1", 1);
    wait_for("one node", std::time::Duration::from_secs(20), || {
        cli_json(&url, &admin, &["nodes"]).as_array().expect("array").iter().any(|x| x["state"] == "up")
    });
    let id =
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--name", "kept", "--", "true"])["id"].as_u64().expect("id");
    cli_json(&url, &admin, &["policy", "set", "sjf", "--reason", "before a stop"]);
    let pid = srv.0.id().to_string();
    let st = Command::new("sh").args(["-c", &format!("kill -TERM {pid}")]).status().expect("kill");
    assert!(st.success());
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = srv.0.try_wait().expect("try_wait") {
            break s;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "the server did not stop on SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM: {status:?}");
    let db = dir.join("ordo.db");
    let wal = dir.join("ordo.db-wal");
    assert!(std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0, "the write-ahead log is folded in");
    // The file alone (no -wal beside it) holds the job and the policy change.
    let copy = dir.join("copy.db");
    std::fs::copy(&db, &copy).expect("copy");
    let c = rusqlite::Connection::open(&copy).expect("open");
    let name: String = c.query_row("SELECT name FROM jobs WHERE id = ?1", [id as i64], |r| r.get(0)).expect("job");
    assert_eq!(name, "kept");
    let policy: String = c.query_row("SELECT value FROM meta WHERE key = 'policy'", [], |r| r.get(0)).expect("policy");
    assert_eq!(policy, "sjf");
}
