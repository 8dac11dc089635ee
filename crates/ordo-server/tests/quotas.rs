//! Quotas in the server's state machine: running-GPU limits per user and group skip a job
//! (`Reason::Quota`, said in `explain` and the audit log) without blocking others, pending-job
//! limits refuse submissions, limits by GPU model send a flexible job to another model and hold
//! one that accepts only that model, and bad `[quotas]` tables are reported with file and field.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};
use ordo_server::ServerConfig;
use std::path::Path;

mod common;
use common::*;

/// A server configured by `toml` (its database in `dir`), with node `n1` of 4 GPUs.
fn open(dir: &Path, toml: &str, now: i64) -> Core {
    open_with(dir, toml, now, &[("n1", None)])
}

/// A server configured by `toml` with `nodes` of 4 GPUs each (name, GPU model), registered in
/// that order.
fn open_with(dir: &Path, toml: &str, now: i64, nodes: &[(&str, Option<&str>)]) -> Core {
    let p = dir.join("ordo.toml");
    std::fs::write(&p, format!("db = {:?}\n{toml}", dir.join("ordo.db"))).unwrap();
    let c = ServerConfig::from_file(&p).unwrap();
    let mut core = Core::open(c, now).unwrap();
    for &(n, model) in nodes {
        core.register(&agent(n), &RegisterRequest { gpu_model: model.map(Into::into), ..reg(n, 4) }, now).unwrap();
    }
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

#[test]
fn a_limit_by_gpu_model_sends_a_flexible_job_to_another_model_and_holds_a_pinned_one() {
    let dir = tempdir("quota-model");
    let t0 = 1_000_000;
    // Two nodes of 4 GPUs: A100s registered first (a flexible job's first choice), then V100s.
    // Alice may hold 2 A100s (matched as jobs' models are: `a100` covers `a100-sxm4-80gb`).
    let toml = "policy = \"fifo\"\n[quotas.users.alice.max_running_gpus_by_model]\na100 = 2\n";
    let mut c = open_with(&dir, toml, t0, &[("na", Some("a100-sxm4-80gb")), ("nv", Some("v100"))]);
    let asks = |gpus: u32, models: &[&str]| SubmitRequest {
        gpu_models: models.iter().map(|m| m.to_string()).collect(),
        ..job(gpus)
    };
    // Alice's first job (2, any model) takes her 2 A100s; her second (2, any) would pass the
    // A100 limit: it runs on the V100s instead; her third (1, A100 only) waits at the limit,
    // and does not block bob's A100 job behind it (strict fifo).
    let a1 = c.submit(&user("alice"), asks(2, &[]), t0).unwrap();
    let a2 = c.submit(&user("alice"), asks(2, &[]), t0).unwrap();
    let a3 = c.submit(&user("alice"), asks(1, &["a100"]), t0).unwrap();
    let b = c.submit(&user("bob"), asks(2, &["a100"]), t0).unwrap();
    c.pass(t0).unwrap();
    let on = |c: &Core, id| state(c, id, t0).node;
    assert_eq!(on(&c, a1).as_deref(), Some("na"), "{:?}", c.queue(t0));
    assert_eq!(on(&c, a2).as_deref(), Some("nv"), "{:?}", c.queue(t0));
    assert_eq!(on(&c, b).as_deref(), Some("na"), "{:?}", c.queue(t0));
    let third = state(&c, a3, t0);
    assert_eq!(third.state, JobState::Pending);
    let w = third.wait.unwrap();
    assert!(w.text.contains("user alice holds 2 of their 2 a100 GPUs (max_running_gpus_by_model)"), "{}", w.text);
    assert!(
        matches!(&w.detail, Some(ordo_core::Reason::Quota { holds: 2, limit: 2, need: 1, model: Some(m), .. }) if m == "a100"),
        "{w:?}"
    );
    let skips: Vec<AuditRecord> =
        c.audit(Some(a3), None, 100).unwrap().into_iter().filter(|r| r.kind == "skip").collect();
    assert!(skips.iter().any(|r| r.detail["reason"] == "quota" && r.detail["model"] == "a100"), "{skips:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_zero_limit_by_model_keeps_a_user_off_that_model() {
    let dir = tempdir("quota-model-zero");
    let t0 = 1_000_000;
    let toml = "policy = \"fifo\"\n[quotas.default_user.max_running_gpus_by_model]\nA100 = 0\n";
    let mut c = open_with(&dir, toml, t0, &[("na", Some("a100")), ("nv", Some("v100"))]);
    // Everyone may hold no A100: the first job goes to the V100s, the second (any model) finds
    // the V100s full and the A100s closed to it: it waits at the limit, not for resources.
    let j1 = c.submit(&user("carl"), job(4), t0).unwrap();
    let j2 = c.submit(&user("carl"), job(1), t0).unwrap();
    c.pass(t0).unwrap();
    assert_eq!(state(&c, j1, t0).node.as_deref(), Some("nv"));
    let w = state(&c, j2, t0).wait.unwrap();
    assert!(w.text.contains("user carl holds 0 of their 0 a100 GPUs"), "{}", w.text);
    // A job that accepts only A100s could never start: refused at once, naming the limit.
    let e = c.submit(&user("carl"), SubmitRequest { gpu_models: vec!["a100".into()], ..job(1) }, t0).unwrap_err();
    assert!(
        matches!(&e, ApiError::Unprocessable(m) if m.contains("more than user carl's quota of 0 a100 GPUs (max_running_gpus_by_model)")),
        "{e:?}"
    );
    // One that also accepts V100s is not.
    c.submit(&user("carl"), SubmitRequest { gpu_models: vec!["a100".into(), "v100".into()], ..job(1) }, t0).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
