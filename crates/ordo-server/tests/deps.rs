//! Dependencies in the server's state machine: a pipeline runs step by step, a dependency that
//! can never be met cancels its job (`DependencyNeverSatisfied`, transitively), `explain` names
//! the job waited for, and a restart keeps waiting jobs out of the queue.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::DepKind;
use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};

mod common;
use common::*;

fn after(kind: DepKind, jobs: &[u64]) -> SubmitRequest {
    SubmitRequest { after: jobs.iter().map(|&job| AfterDep { kind, job }).collect(), ..job(1) }
}

/// The node reports that `id` exited with `code` at `t`.
fn exit(c: &mut Core, id: u64, code: i32, t: i64) {
    let started_at = c.job(id, t).unwrap().start.unwrap();
    let rep = EndReport {
        node: "n1".into(),
        job: id,
        attempt: 1,
        outcome: Outcome::Exited,
        exit_code: Some(code),
        signal: None,
        started_at,
        ended_at: t,
        message: None,
    };
    c.report(&agent("n1"), &rep, t).unwrap();
}

fn st(c: &Core, id: u64, t: i64) -> JobState {
    c.job(id, t).unwrap().state
}

#[test]
fn a_pipeline_runs_step_by_step_and_a_failure_cancels_what_can_never_run() {
    let dir = tempdir("deps-pipeline");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 4), t0).unwrap();
    let u = user("alice");
    let prep = c.submit(&u, job(1), t0).unwrap();
    let train = c.submit(&u, after(DepKind::AfterOk, &[prep]), t0).unwrap();
    let eval = c.submit(&u, after(DepKind::AfterOk, &[train]), t0).unwrap();
    let report = c.submit(&u, after(DepKind::AfterOk, &[eval]), t0).unwrap();
    let cleanup = c.submit(&u, after(DepKind::AfterAny, &[train]), t0).unwrap();
    let alert = c.submit(&u, after(DepKind::AfterNotOk, &[train]), t0).unwrap();
    c.pass(t0).unwrap();
    // Only prep runs, though 3 more GPUs are free: the others wait on their dependencies.
    assert_ne!(st(&c, prep, t0), JobState::Pending);
    for id in [train, eval, report, cleanup, alert] {
        assert_eq!(st(&c, id, t0), JobState::Pending, "job {id}");
    }
    let w = c.job(train, t0).unwrap().wait.unwrap();
    assert_eq!(w.text, format!("waits for job {prep} to complete successfully (after_ok); it joins the queue then"));
    assert_eq!(c.job(train, t0).unwrap().after, vec![AfterDep { kind: DepKind::AfterOk, job: prep }]);

    let t1 = t0 + 10_000;
    exit(&mut c, prep, 0, t1);
    c.pass(t1).unwrap();
    assert_ne!(st(&c, train, t1), JobState::Pending, "prep completed: train starts");
    assert_eq!(st(&c, cleanup, t1), JobState::Pending);

    let t2 = t1 + 10_000;
    exit(&mut c, train, 3, t2);
    // eval can never run (train failed), nor can report (it waits on eval).
    for id in [eval, report] {
        let j = c.job(id, t2).unwrap();
        assert_eq!(j.state, JobState::Cancelled, "job {id}");
        assert!(j.end_reason.as_deref().unwrap().starts_with("DependencyNeverSatisfied: after_ok on job"), "{j:?}");
    }
    let audit = c.audit(Some(eval), None, 10).unwrap();
    assert!(audit.iter().any(|r| r.kind == "cancel" && r.detail["why"] == "DependencyNeverSatisfied"), "{audit:?}");
    c.pass(t2).unwrap();
    assert_ne!(st(&c, cleanup, t2), JobState::Pending, "after_any: starts");
    assert_ne!(st(&c, alert, t2), JobState::Pending, "after_not_ok: starts");

    // Submitting against an end already known: refused at once; unknown jobs: 404.
    let e = c.submit(&u, after(DepKind::AfterOk, &[train]), t2).unwrap_err();
    assert!(matches!(&e, ApiError::Conflict(m) if m.contains("can never be met")), "{e:?}");
    let e = c.submit(&u, after(DepKind::AfterAny, &[999]), t2).unwrap_err();
    assert!(matches!(&e, ApiError::NotFound(m) if m.contains("no job 999")), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cancelling_a_job_ends_its_dependents_and_a_restart_keeps_the_rest_waiting() {
    let dir = tempdir("deps-restart");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 4), t0).unwrap();
    let u = user("bob");
    let a = c.submit(&u, job(4), t0).unwrap();
    let b = c.submit(&u, job(4), t0).unwrap();
    let after_a = c.submit(&u, after(DepKind::AfterOk, &[a]), t0).unwrap();
    let after_b = c.submit(&u, after(DepKind::AfterOk, &[b]), t0).unwrap();
    let any_b = c.submit(&u, after(DepKind::AfterAny, &[b]), t0).unwrap();
    c.pass(t0).unwrap();
    assert_ne!(st(&c, a, t0), JobState::Pending);
    // b waits for GPUs; cancelling it makes after_b never satisfiable, any_b ready.
    c.cancel(&u, b, t0).unwrap();
    assert_eq!(st(&c, after_b, t0), JobState::Cancelled);
    assert_eq!(st(&c, any_b, t0), JobState::Pending);
    drop(c);

    // Restart: after_a still waits on a (running), any_b is in the queue behind nothing.
    let t1 = t0 + 1_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t1).unwrap();
    c.register(&agent("n1"), &reg("n1", 4), t1).unwrap();
    c.pass(t1).unwrap();
    let w = c.job(after_a, t1).unwrap().wait.unwrap();
    assert!(w.text.starts_with(&format!("waits for job {a} ")), "{}", w.text);
    let w = c.job(any_b, t1).unwrap().wait.unwrap();
    assert!(w.detail.is_some(), "any_b is in the scheduler's queue: {w:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dependency_on_an_array_waits_for_every_element_and_one_on_an_element_for_that_one() {
    let dir = tempdir("deps-array");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 8), t0).unwrap();
    let u = user("alice");
    let sweep = c.submit(&u, SubmitRequest { array: Some("0-2".into()), ..job(1) }, t0).unwrap();
    let (e0, e1, e2) = (sweep, sweep + 1, sweep + 2);
    let best = c.submit(&u, after(DepKind::AfterOk, &[sweep]), t0).unwrap();
    let on_one = c.submit(&u, after(DepKind::AfterOk, &[e1]), t0).unwrap();
    c.pass(t0).unwrap();
    assert_eq!((st(&c, best, t0), st(&c, on_one, t0)), (JobState::Pending, JobState::Pending));
    // As submitted (the array's id), waiting on all three elements.
    assert_eq!(c.job(best, t0).unwrap().after, vec![AfterDep { kind: DepKind::AfterOk, job: sweep }]);
    let w = c.job(best, t0).unwrap().wait.unwrap();
    assert!(
        w.text.starts_with(&format!(
            "waits for array {sweep}'s elements to complete successfully (after_ok): 3 of its 3 elements have not ended"
        )),
        "{}",
        w.text
    );

    let t1 = t0 + 10_000;
    exit(&mut c, e0, 0, t1);
    c.pass(t1).unwrap();
    assert_eq!(st(&c, best, t1), JobState::Pending, "element 0 alone does not release the array's dependent");
    exit(&mut c, e1, 0, t1);
    c.pass(t1).unwrap();
    assert_ne!(st(&c, on_one, t1), JobState::Pending, "a dependency on element 1 is met by it alone");
    assert_eq!(st(&c, best, t1), JobState::Pending);
    // A restart keeps the dependency on the element still running.
    drop(c);
    let t2 = t1 + 10_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t2).unwrap();
    c.register(&agent("n1"), &reg("n1", 8), t2).unwrap();
    c.pass(t2).unwrap();
    assert_eq!(st(&c, best, t2), JobState::Pending, "after a restart: still waits for element 2");
    let w = c.job(best, t2).unwrap().wait.unwrap();
    assert!(w.text.starts_with(&format!("waits for array {sweep}'s elements to complete")), "{}", w.text);
    assert!(w.text.contains("1 of its 3 elements has not ended"), "{}", w.text);
    exit(&mut c, e2, 0, t2);
    c.pass(t2).unwrap();
    assert_ne!(st(&c, best, t2), JobState::Pending, "the last element's success releases the array's dependent");

    // One element failing makes an after_ok on the array unmeetable.
    let sweep2 = c.submit(&u, SubmitRequest { array: Some("0-1".into()), ..job(1) }, t2).unwrap();
    let best2 = c.submit(&u, after(DepKind::AfterOk, &[sweep2]), t2).unwrap();
    c.pass(t2).unwrap();
    let t3 = t2 + 10_000;
    exit(&mut c, sweep2 + 1, 1, t3);
    let j = c.job(best2, t3).unwrap();
    assert_eq!(j.state, JobState::Cancelled, "{j:?}");
    assert!(j.end_reason.as_deref().unwrap().starts_with("DependencyNeverSatisfied"), "{j:?}");
    // ... and is refused at submission once known.
    let e = c.submit(&u, after(DepKind::AfterOk, &[sweep2]), t3).unwrap_err();
    assert!(matches!(&e, ApiError::Conflict(m) if m.contains("can never be met")), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
