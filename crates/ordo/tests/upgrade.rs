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
