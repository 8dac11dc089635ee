//! Job arrays in the server's state machine: one submission makes every element in one
//! transaction, `%N` limits the elements running at once (said in `explain`, kept across a
//! restart), cancel, hold, release and priority take the whole array or one element, with the
//! access rules checked for every element, and bad specs are refused naming the field.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::array::JobRef;
use ordo_server::state::{ApiError, Core};

mod common;
use common::*;

fn arr(spec: &str) -> SubmitRequest {
    SubmitRequest { array: Some(spec.into()), ..job(1) }
}

fn running(c: &Core, now: i64) -> Vec<JobInfo> {
    c.queue(now).jobs.into_iter().filter(|j| j.state != JobState::Pending).collect()
}

#[test]
fn an_array_runs_at_most_n_elements_at_once_and_survives_a_restart() {
    let dir = tempdir("arrays-limit");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 8), t0).unwrap();
    let id = c.submit(&user("alice"), arr("0-5%2"), t0).unwrap();
    let q = c.queue(t0);
    let elems: Vec<&JobInfo> = q.jobs.iter().filter(|j| j.array.is_some_and(|a| a.id == id)).collect();
    assert_eq!(elems.len(), 6);
    let mut idx: Vec<(u64, u32)> = elems.iter().map(|j| (j.id, j.array.unwrap().index)).collect();
    idx.sort_unstable();
    assert_eq!(idx, (0..6).map(|i| (id + i as u64, i)).collect::<Vec<_>>());
    assert_eq!(q.arrays, vec![ArraySummary { id, spec: "0-5%2".into(), elements: 6, max_running: Some(2) }]);
    // A plain job behind it is not blocked by the array's limit (strict fifo).
    let other = c.submit(&user("bob"), job(1), t0).unwrap();
    c.pass(t0).unwrap();
    let r = running(&c, t0);
    assert_eq!(r.iter().filter(|j| j.array.is_some()).count(), 2, "{r:?}");
    assert!(r.iter().any(|j| j.id == other), "{r:?}");
    let third = c.job_ref(JobRef::Element(id, 2), t0).unwrap();
    assert_eq!(third.state, JobState::Pending);
    let w = third.wait.unwrap();
    assert!(w.text.starts_with("array limit: 2 of at most 2 elements of its array run"), "{}", w.text);
    // The agent gets the element's array, index and count.
    let p = c
        .poll(&agent("n1"), &PollRequest { node: "n1".into(), running: vec![], wait_ms: 0, problem: None }, t0)
        .unwrap();
    let a = p.start.iter().find(|a| a.job == id).unwrap();
    assert_eq!((a.array, a.array_count), (Some(ArrayMember { id, index: 0 }), Some(6)));
    // Audit: one submit record per element, the first with the spec and the count.
    let rec = c.audit(Some(id), None, 10).unwrap();
    let sub = rec.iter().find(|r| r.kind == "submit").unwrap();
    assert_eq!((sub.detail["array_spec"].as_str(), sub.detail["elements"].as_u64()), (Some("0-5%2"), Some(6)));
    let rec = c.audit(Some(id + 3), None, 10).unwrap();
    let sub = rec.iter().find(|r| r.kind == "submit").unwrap();
    assert_eq!((sub.detail["array"].as_u64(), sub.detail["index"].as_u64()), (Some(id), Some(3)));
    // After a restart the limit still holds.
    drop(c);
    let mut c = Core::open(cfg(&dir, "fifo"), t0 + 10).unwrap();
    c.register(&agent("n1"), &reg("n1", 8), t0 + 10).unwrap();
    c.pass(t0 + 10).unwrap();
    assert_eq!(running(&c, t0 + 10).iter().filter(|j| j.array.is_some()).count(), 2);
    assert_eq!(c.queue(t0 + 10).arrays[0].spec, "0-5%2");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cancel_hold_release_and_priority_take_an_array_or_one_element() {
    let dir = tempdir("arrays-ops");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 2), t0).unwrap();
    let id = c.submit(&user("alice"), arr("1,3,5-7"), t0).unwrap();
    c.pass(t0).unwrap();
    // Someone else may not touch it, as a whole or one element; nothing changes.
    for r in [JobRef::Job(id), JobRef::Element(id, 5)] {
        assert!(matches!(c.cancel_ref(&user("mallory"), r, t0), Err(ApiError::Forbidden(_))));
        assert!(matches!(c.hold_ref(&user("mallory"), r, t0), Err(ApiError::Forbidden(_))));
        assert!(matches!(c.set_priority_ref(&user("mallory"), r, -1, t0), Err(ApiError::Forbidden(_))));
    }
    // Raising is for admins, for an array too.
    assert!(matches!(c.set_priority_ref(&user("alice"), JobRef::Job(id), 3, t0), Err(ApiError::Forbidden(_))));
    let j = c.set_priority_ref(&user("alice"), JobRef::Job(id), -2, t0).unwrap();
    assert_eq!(j.priority, -2);
    assert!(c.queue(t0).jobs.iter().filter(|j| j.array.is_some()).all(|j| j.priority == -2));
    // Hold the whole array: its pending elements (3 of 5; 2 run) are held.
    let j = c.hold_ref(&user("alice"), JobRef::Job(id), t0).unwrap();
    assert_eq!(j.held_by.as_deref(), Some("alice"));
    let held = c.queue(t0).jobs.iter().filter(|j| j.held_by.is_some()).count();
    assert_eq!(held, 3);
    // Release one element, then the rest.
    let j = c.release_ref(&user("alice"), JobRef::Element(id, 6), t0).unwrap();
    assert_eq!((j.array.unwrap().index, j.held_by.clone()), (6, None));
    c.release_ref(&user("alice"), JobRef::Job(id), t0).unwrap();
    assert!(matches!(c.release_ref(&user("alice"), JobRef::Job(id), t0), Err(ApiError::Conflict(_))));
    // Cancel one element, then the whole array.
    let (s, n) = c.cancel_ref(&user("alice"), JobRef::Element(id, 7), t0).unwrap();
    assert_eq!((s, n), (JobState::Cancelled, 1));
    assert!(matches!(c.job_ref(JobRef::Element(id, 2), t0), Err(ApiError::NotFound(_))));
    assert!(matches!(c.job_ref(JobRef::Element(id + 100, 1), t0), Err(ApiError::NotFound(_))));
    let (_, n) = c.cancel_ref(&user("alice"), JobRef::Job(id), t0).unwrap();
    assert_eq!(n, 4, "two pending and two running elements");
    let q = c.queue(t0);
    assert!(q.jobs.iter().filter(|j| j.array.is_some()).all(|j| j.cancel_requested), "{q:?}");
    let rec = c.audit(Some(id + 2), None, 100).unwrap();
    assert!(rec.iter().any(|r| r.kind == "cancel" && r.detail["array"] == id), "{rec:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_specs_and_pending_limits_are_refused() {
    let dir = tempdir("arrays-bad");
    let t0 = 1_000_000;
    let mut config = cfg(&dir, "fifo");
    config.max_pending_per_user = 10;
    let mut c = Core::open(config, t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 2), t0).unwrap();
    for (spec, says) in [
        ("5-1", "reversed"),
        ("0-9:0", "step of 0"),
        ("0-9%0", "%0"),
        ("0-100000", "more than 100000 elements"),
        ("x", "expected an index"),
    ] {
        match c.submit(&user("alice"), arr(spec), t0) {
            Err(ApiError::BadRequest(m)) => assert!(m.starts_with("field `array`: ") && m.contains(says), "{m}"),
            other => panic!("{spec}: {other:?}"),
        }
    }
    // 11 elements pass max_pending_per_user = 10; 10 do not.
    let e = c.submit(&user("alice"), arr("0-10"), t0).unwrap_err();
    assert!(matches!(&e, ApiError::Conflict(m) if m.contains("11 more would pass it")), "{e:?}");
    c.submit(&user("alice"), arr("0-9"), t0).unwrap();
    assert!(c.queue(t0).jobs.len() == 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each element as the scheduler and the database see it: (id, array, index, state, user).
fn elements(c: &Core, id: u64, now: i64) -> Vec<(u64, Option<ArrayMember>, JobState, String)> {
    let mut v: Vec<_> = c
        .queue(now)
        .jobs
        .into_iter()
        .filter(|j| j.array.is_some_and(|a| a.id == id))
        .map(|j| (j.id, j.array, j.state, j.user))
        .collect();
    v.sort_by_key(|e| e.0);
    v
}

/// An array larger than `ARRAY_STEP` taken in steps (as the server does: its ids reserved, its
/// rows stored a step at a time, then its elements joined a step at a time) gives the same
/// elements, audit records and first decisions as the same array taken at once; while it is
/// taken in, its id is refused for actions and dependencies (409) rather than half-applied.
#[test]
fn a_large_array_taken_in_steps_is_the_same_as_one_taken_at_once() {
    let spec = format!("0-{}:2%40", 2 * (ordo_server::state::ARRAY_STEP * 2 + 500) - 1);
    let t0 = 1_000_000;
    let dir_a = tempdir("arrays-at-once");
    let mut a = Core::open(cfg(&dir_a, "fifo"), t0).unwrap();
    a.register(&agent("n1"), &reg("n1", 8), t0).unwrap();
    let before_a = a.submit(&user("bob"), job(1), t0).unwrap();
    let id_a = a.submit(&user("alice"), arr(&spec), t0).unwrap();
    let after_a = a.submit(&user("bob"), job(1), t0).unwrap();

    let dir_b = tempdir("arrays-in-steps");
    let mut b = Core::open(cfg(&dir_b, "fifo"), t0).unwrap();
    b.register(&agent("n1"), &reg("n1", 8), t0).unwrap();
    let before_b = b.submit(&user("bob"), job(1), t0).unwrap();
    let req = arr(&spec);
    assert!(Core::ingests_in_steps(&req));
    let mut ing = b.ingest_begin(&user("alice"), req, t0).unwrap();
    let id_b = ing.id();
    // A submission meanwhile takes the ids after the array's.
    let after_b = b.submit(&user("bob"), job(1), t0).unwrap();
    assert_eq!((before_b, id_b, after_b), (before_a, id_a, after_a));
    let mut steps = 0;
    while !b.ingest_store(&mut ing, ordo_server::state::ARRAY_STEP, t0).unwrap() {
        steps += 1;
        for r in [JobRef::Job(id_b), JobRef::Element(id_b, 4), JobRef::Job(id_b + 3)] {
            match b.cancel_ref(&user("alice"), r, t0) {
                Err(ApiError::Conflict(m)) => assert!(m.contains("still being submitted"), "{m}"),
                other => panic!("{r:?} while the array is taken in: {other:?}"),
            }
        }
        let dep = SubmitRequest { after: vec![AfterDep { kind: ordo_core::DepKind::AfterOk, job: id_b }], ..job(1) };
        assert!(matches!(b.submit(&user("bob"), dep, t0), Err(ApiError::Conflict(_))));
    }
    assert!(steps >= 2, "stored in {steps} steps");
    while !b.ingest_join(&mut ing, ordo_server::state::ARRAY_STEP, t0).unwrap() {}
    let ea = elements(&a, id_a, t0);
    let eb = elements(&b, id_b, t0);
    assert_eq!(ea.len(), ordo_server::state::ARRAY_STEP * 2 + 500);
    assert_eq!(ea, eb);
    assert_eq!(a.queue(t0).arrays, b.queue(t0).arrays);
    let audit_a: Vec<(String, Option<u64>, serde_json::Value)> =
        a.audit(None, None, 100_000).unwrap().into_iter().map(|r| (r.kind, r.job, r.detail)).collect();
    let mut audit_b: Vec<(String, Option<u64>, serde_json::Value)> =
        b.audit(None, None, 100_000).unwrap().into_iter().map(|r| (r.kind, r.job, r.detail)).collect();
    let mut audit_a_sorted = audit_a.clone();
    audit_a_sorted.sort_by(|x, y| x.1.cmp(&y.1).then(x.0.cmp(&y.0)));
    audit_b.sort_by(|x, y| x.1.cmp(&y.1).then(x.0.cmp(&y.0)));
    assert_eq!(audit_a_sorted, audit_b, "the same audit records (the last element's written first)");
    a.pass(t0).unwrap();
    b.pass(t0).unwrap();
    let ids = |c: &Core| running(c, t0).into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    // Now an ordinary array: cancel takes it whole.
    let (_, n) = b.cancel_ref(&user("alice"), JobRef::Job(id_b), t0).unwrap();
    assert_eq!(n, ea.len());
}

/// An array whose rows the server had not all stored when it stopped (it was never
/// acknowledged) is removed when the server starts again, with an audit record saying so;
/// what came before and after it is kept.
#[test]
fn an_array_the_server_did_not_finish_storing_is_removed_at_start() {
    let dir = tempdir("arrays-incomplete");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 8), t0).unwrap();
    let before = c.submit(&user("bob"), job(1), t0).unwrap();
    let spec = format!("0-{}", ordo_server::state::ARRAY_STEP * 3 - 1);
    let mut ing = c.ingest_begin(&user("alice"), arr(&spec), t0).unwrap();
    let id = ing.id();
    assert!(!c.ingest_store(&mut ing, ordo_server::state::ARRAY_STEP, t0).unwrap());
    let after = c.submit(&user("bob"), job(1), t0).unwrap();
    drop(c);
    let c = Core::open(cfg(&dir, "fifo"), t0 + 1000).unwrap();
    assert!(c.job(before, t0 + 1000).is_ok());
    assert!(c.job(after, t0 + 1000).is_ok());
    for j in [id, id + 1, id + ordo_server::state::ARRAY_STEP as u64 * 3 - 1] {
        assert!(matches!(c.job(j, t0 + 1000), Err(ApiError::NotFound(_))), "element {j} removed");
    }
    let rec = c.audit(Some(id), None, 100).unwrap();
    let gone = rec.iter().find(|r| r.kind == "cancel").expect("a record of the removal");
    let why = gone.detail["why"].as_str().unwrap();
    assert!(
        why.contains("did not complete before the server stopped") && why.contains("1001 stored elements of 3000"),
        "{why}"
    );
}
