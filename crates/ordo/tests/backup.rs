//! `ordo admin backup` while a real server runs and agents change the database: the copy is
//! complete and checked, a backup killed with SIGKILL at any point leaves the live database
//! intact and the previous backup as it was, a retried backup is complete, and restoring a
//! backup as docs/INSTALL.md says gives a server with every job the backup holds.

mod harness;

use harness::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// (quick_check, user_version, jobs, largest job id) of a database file.
fn inspect(db: &Path) -> (String, i64, i64, i64) {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open");
    let check: String = c.query_row("PRAGMA quick_check", [], |r| r.get(0)).expect("quick_check");
    let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version");
    let (n, max): (i64, Option<i64>) =
        c.query_row("SELECT COUNT(*), MAX(id) FROM jobs", [], |r| Ok((r.get(0)?, r.get(1)?))).expect("jobs");
    (check, v, n, max.unwrap_or(0))
}

fn backup(db: &Path, out: &Path) -> std::process::Output {
    Command::new(ORDO)
        .args(["admin", "backup", "--db"])
        .arg(db)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run ordo admin backup")
}

fn submit_array(url: &str, tok: &str, spec: &str) -> u64 {
    // A long command makes every row large, so that a copy takes long enough to be killed in.
    let pad = "x".repeat(3000);
    let v =
        cli_json(url, tok, &["submit", "--gpus", "1", "--time", "1m", "--array", spec, "--", "sh", "-c", "true", &pad]);
    v.as_u64().or_else(|| v["id"].as_u64()).unwrap_or_else(|| panic!("submit answer {v}"))
}

#[test]
fn backup_while_serving_survives_kill_9_and_restores() {
    let dir = tempdir("backup");
    let db = dir.join("ordo.db");
    let (_admin, alice) = tokens(&dir);
    let (srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let _agent = agent(&dir, &url, "gpu1", 2);
    wait_for("the agent to register", Duration::from_secs(20), || {
        let (code, v) = api(&url, &alice, "GET", "/v1/nodes", None);
        code == 200 && v.as_array().is_some_and(|a| !a.is_empty())
    });
    for _ in 0..3 {
        submit_array(&url, &alice, "0-9999");
    }
    let acked = submit_array(&url, &alice, "0-99");
    let size =
        std::fs::metadata(&db).expect("db").len() + std::fs::metadata(dir.join("ordo.db-wal")).map_or(0, |m| m.len());

    // A complete backup while the agent starts and ends jobs.
    let out = dir.join("backup.db");
    let t0 = Instant::now();
    let o = backup(&db, &out);
    let took = t0.elapsed();
    assert!(o.status.success(), "backup: {}", String::from_utf8_lossy(&o.stderr));
    let (check, version, jobs, last) = inspect(&out);
    assert_eq!((check.as_str(), version), ("ok", ordo_server::db::SCHEMA_VERSION));
    assert!(
        last >= acked as i64 && jobs >= 30_100,
        "the backup holds every acknowledged job: {jobs} jobs, last {last}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&out).expect("stat").permissions().mode() & 0o777, 0o600, "the copy is private");
    assert!(!dir.join("backup.db-wal").exists() && !dir.join("backup.db.partial").exists(), "one file");
    eprintln!("database {size} bytes, backup in {took:?}: {}", String::from_utf8_lossy(&o.stdout).trim());

    // Backups killed with SIGKILL after 0 ms to about the whole copy's time.
    let good = std::fs::read(&out).expect("read backup");
    let mut killed_midway = 0;
    let steps = 12;
    for i in 0..steps {
        let delay = took.mul_f64(i as f64 / steps as f64);
        let mut child = Command::new(ORDO)
            .args(["admin", "backup", "--db"])
            .arg(&db)
            .arg("--out")
            .arg(&out)
            .spawn()
            .expect("start backup");
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let now = std::fs::read(&out).expect("the backup file is still there");
        if status.signal() == Some(9) {
            if dir.join("backup.db.partial").exists() {
                killed_midway += 1;
            }
            // Killed before its rename: the previous backup as it was; killed between the
            // rename and its exit: the new one, complete.
            if now != good {
                let (check, version, jobs, last) = inspect(&out);
                assert!(
                    check == "ok" && version == ordo_server::db::SCHEMA_VERSION && jobs >= 30_100 && last >= acked as i64,
                    "a killed backup (after {delay:?}) left neither the previous backup as it was nor a complete one: {check}, {jobs} jobs"
                );
            }
        } else {
            assert!(status.success(), "backup ended by itself but failed: {status:?}");
            assert_eq!(inspect(&out).0, "ok", "a finished backup is complete");
        }
    }
    assert!(killed_midway > 0, "no backup was killed while copying (the copy took {took:?}): the test proved nothing");

    // The live database is intact and the server goes on.
    let (check, version, _, _) = inspect(&db);
    assert_eq!(
        (check.as_str(), version),
        ("ok", ordo_server::db::SCHEMA_VERSION),
        "the live database after the killed backups"
    );
    let after =
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--time", "1m", "--", "true"])["id"].as_u64().expect("id");
    let o = backup(&db, &out);
    assert!(o.status.success(), "the retried backup: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!dir.join("backup.db.partial").exists(), "the retry cleared the unfinished copy");
    let (check, _, jobs, last) = inspect(&out);
    assert_eq!(check, "ok");
    assert_eq!(last, after as i64, "the retried backup holds the job acknowledged just before it");

    // Restore as docs/INSTALL.md says: stop the server, remove the database and its -wal and
    // -shm, put the backup in its place, start the server.
    drop(srv);
    for f in ["ordo.db", "ordo.db-wal", "ordo.db-shm"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    std::fs::copy(&out, &db).expect("restore");
    let (srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let j = job_state(&url, &alice, after);
    assert_eq!(j["id"].as_u64(), Some(after), "the restored server has the last backed-up job: {j}");
    let next =
        cli_json(&url, &alice, &["submit", "--gpus", "1", "--time", "1m", "--", "true"])["id"].as_u64().expect("id");
    assert!(next > after, "new jobs get ids after the restored ones ({next} > {after})");
    let (check, _, restored_jobs, _) = inspect(&db);
    assert_eq!(check, "ok");
    assert_eq!(restored_jobs, jobs + 1, "every job of the backup, and the new one");
    drop(srv);
}
