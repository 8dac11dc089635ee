//! Quotas in the server's state machine: running-GPU limits per user and group skip a job
//! (`Reason::Quota`, said in `explain` and the audit log) without blocking others, pending-job
//! limits refuse submissions, and bad `[quotas]` tables are reported with file and field.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};
use ordo_server::ServerConfig;
use std::path::Path;

mod common;
use common::*;

/// A server configured by `toml` (its database in `dir`).
fn open(dir: &Path, toml: &str, now: i64) -> Core {
    let p = dir.join("ordo.toml");
    std::fs::write(&p, format!("db = {:?}\n{toml}", dir.join("ordo.db"))).unwrap();
    let c = ServerConfig::from_file(&p).unwrap();
    let mut core = Core::open(c, now).unwrap();
    core.register(&agent("n1"), &reg("n1", 4), now).unwrap();
    core
}

fn state(c: &Core, id: u64, now: i64) -> JobInfo {
    c.job(id, now).unwrap()
}

#[test]
fn a_user_at_their_gpu_limit_is_skipped_without_blocking_others() {
    let dir = tempdir("quota-user");
    let t0 = 1_000_000;
    // Strict fifo: without the quota alice's third job would block bob's.
    let mut c = open(&dir, "policy = \"fifo\"\n[quotas.default_user]\nmax_running_gpus = 2\n", t0);
    let a: Vec<u64> = (0..3).map(|_| c.submit(&user("alice"), job(1), t0).unwrap()).collect();
    let b = c.submit(&user("bob"), job(1), t0).unwrap();
    c.pass(t0).unwrap();
    let started = |c: &Core, id| state(c, id, t0).state != JobState::Pending;
    assert!(started(&c, a[0]) && started(&c, a[1]) && started(&c, b), "{:?}", c.queue(t0));
    let third = state(&c, a[2], t0);
    assert_eq!(third.state, JobState::Pending);
    let w = third.wait.unwrap();
    assert!(w.text.contains("user alice holds 2 of their 2 GPUs"), "{}", w.text);
    assert!(matches!(w.detail, Some(ordo_core::Reason::Quota { holds: 2, limit: 2, need: 1, .. })), "{w:?}");
    // The audit log says why it was skipped.
    let skips: Vec<AuditRecord> =
        c.audit(Some(a[2]), None, 100).unwrap().into_iter().filter(|r| r.kind == "skip").collect();
    assert!(skips.iter().any(|r| r.detail["reason"] == "quota" && r.detail["scope"] == "user"), "{skips:?}");
    // A job larger than the quota could never start: refused at once.
    let e = c.submit(&user("alice"), job(3), t0).unwrap_err();
    assert!(matches!(&e, ApiError::Unprocessable(m) if m.contains("more than user alice's quota of 2")), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_group_share_of_the_cluster_limits_its_members_together() {
    let dir = tempdir("quota-group");
    let t0 = 1_000_000;
    let toml = "policy = \"fifo\"\n[quotas.groups.vision]\nmembers = [\"ann\", \"bob\"]\nmax_running_gpus = \"1/2\"\n";
    let mut c = open(&dir, toml, t0);
    let ann = c.submit(&user("ann"), job(2), t0).unwrap();
    let bob = c.submit(&user("bob"), job(1), t0).unwrap();
    let cat = c.submit(&user("cat"), job(2), t0).unwrap();
    c.pass(t0).unwrap();
    // Half of 4 GPUs: ann's 2 fill vision's share; bob waits, cat (no group) starts.
    assert_ne!(state(&c, ann, t0).state, JobState::Pending);
    assert_ne!(state(&c, cat, t0).state, JobState::Pending);
    let w = state(&c, bob, t0).wait.unwrap();
    assert!(w.text.contains("group vision (of user bob) holds 2 of its 2 GPUs"), "{}", w.text);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pending_limits_refuse_submissions_by_user_and_group() {
    let dir = tempdir("quota-pending");
    let t0 = 1_000_000;
    let toml = "[quotas.users.carol]\nmax_pending_jobs = 2\n[quotas.groups.nlp]\nmembers = [\"dan\", \"eve\"]\nmax_pending_jobs = 3\n";
    let mut c = open(&dir, toml, t0);
    // No pass runs: every job stays pending.
    for _ in 0..2 {
        c.submit(&user("carol"), job(1), t0).unwrap();
    }
    let e = c.submit(&user("carol"), job(1), t0).unwrap_err();
    assert!(matches!(e, ApiError::Conflict(_)), "{e:?}");
    assert!(e.to_string().contains("user carol already has 2 pending jobs, their limit is 2"), "{e}");
    // Others are not limited.
    c.submit(&user("frank"), job(1), t0).unwrap();
    // Group nlp: dan and eve together, also within one batch.
    let r = c.submit_batch(
        vec![(user("dan"), job(1)), (user("eve"), job(1)), (user("dan"), job(1)), (user("eve"), job(1))],
        t0,
    );
    assert_eq!(r.iter().filter(|r| r.is_ok()).count(), 3, "{r:?}");
    let e = r[3].as_ref().unwrap_err().to_string();
    assert!(e.contains("group nlp (of user eve) already has 3 pending jobs"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_quota_tables_name_the_file_and_field() {
    let dir = tempdir("quota-bad");
    let p = dir.join("ordo.toml");
    for (toml, want) in [
        ("[quotas.users.alice]\nmax_gpus = 3\n", "unknown field `max_gpus`"),
        ("[quotas.default_user]\nmax_running_gpus = \"lots\"\n", "not a GPU count"),
        ("[quotas.users.alice]\nshare = 0\n", "quotas.users.alice.share"),
        ("[quotas.groups.a]\nmembers = [\"x\"]\n[quotas.groups.b]\nmembers = [\"x\"]\n", "already a member"),
    ] {
        std::fs::write(&p, toml).unwrap();
        let e = ServerConfig::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("ordo.toml") && e.contains(want), "{toml}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
