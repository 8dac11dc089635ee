//! The server's state machine without HTTP: restart rebuilds the scheduler from the database
//! (running jobs on their recorded GPUs, waiting jobs in submit order), node time-outs requeue
//! jobs, and bad configuration is reported with file, line and field.

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::state::{ApiError, Core};
use ordo_server::ServerConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-state-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn cfg(dir: &std::path::Path, policy: &str) -> ServerConfig {
    let mut c = ServerConfig { db: dir.join("ordo.db"), ..ServerConfig::default() };
    c.set_policy("test", policy).expect("policy");
    c
}

fn user(name: &str) -> Principal {
    Principal { user: name.into(), role: Role::User }
}

fn agent() -> Principal {
    Principal { user: "nodes".into(), role: Role::Agent }
}

fn job(gpus: u32) -> SubmitRequest {
    SubmitRequest {
        name: None,
        command: vec!["true".into()],
        cwd: None,
        gpus,
        cpus: None,
        mem_mib: None,
        time_limit_ms: Some(60_000),
        priority: None,
        on_node_failure: None,
    }
}

fn reg(node: &str, gpus: u32) -> RegisterRequest {
    RegisterRequest { node: node.into(), gpus, fake: true, gpu_model: None }
}

/// Running jobs: id -> (node, GPU ids).
fn running(c: &Core, now: i64) -> BTreeMap<u64, (String, Vec<u32>)> {
    c.queue(now)
        .jobs
        .into_iter()
        .filter(|j| matches!(j.state, JobState::Starting | JobState::Running))
        .map(|j| (j.id, (j.node.expect("node"), j.gpu_ids)))
        .collect()
}

fn pending_order(c: &Core, now: i64) -> Vec<u64> {
    c.queue(now).jobs.into_iter().filter(|j| j.state == JobState::Pending).map(|j| j.id).collect()
}

fn assert_disjoint(r: &BTreeMap<u64, (String, Vec<u32>)>) {
    let mut seen = BTreeSet::new();
    for (id, (n, g)) in r {
        for i in g {
            assert!(seen.insert((n.clone(), *i)), "GPU {n}/{i} given twice (job {id}): {r:?}");
        }
    }
}

#[test]
fn restart_keeps_running_jobs_on_their_gpus_and_the_queue_in_order() {
    let dir = tempdir("restart");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).expect("open");
    c.register(&agent(), &reg("n1", 4), t0).expect("register");
    c.register(&agent(), &reg("n2", 2), t0).expect("register");
    let ids: Vec<u64> =
        [1, 2, 1, 4, 2, 1].iter().map(|&g| c.submit(&user("alice"), job(g), t0).expect("submit")).collect();
    c.pass(t0).expect("pass");
    let before = running(&c, t0);
    assert_eq!(before.keys().copied().collect::<Vec<_>>(), ids[..3].to_vec(), "fifo starts 1, 2, 1 GPUs");
    assert_disjoint(&before);
    // n1's agent confirms its jobs.
    let on_n1: Vec<RunningJob> =
        before.iter().filter(|(_, (n, _))| n == "n1").map(|(&job, _)| RunningJob { job, started_at: t0 }).collect();
    c.poll(&agent(), &PollRequest { node: "n1".into(), running: on_n1.clone(), wait_ms: 0 }, t0 + 1).expect("poll");
    let waiting = pending_order(&c, t0);
    drop(c);

    let t1 = t0 + 5_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t1).expect("reopen");
    assert_eq!(running(&c, t1), before, "running jobs keep their nodes and GPU indices");
    assert_eq!(pending_order(&c, t1), waiting, "waiting jobs keep their order");
    // The end of a job frees exactly its GPUs; the next start gets free ones only.
    let (first, (node, _)) = before.iter().next().map(|(k, v)| (*k, v.clone())).expect("one running");
    c.report(
        &agent(),
        &EndReport {
            node: node.clone(),
            job: first,
            attempt: 1,
            outcome: Outcome::Exited,
            exit_code: Some(0),
            signal: None,
            started_at: t0,
            ended_at: t1,
            message: None,
        },
        t1,
    )
    .expect("report");
    c.pass(t1).expect("pass");
    let after = running(&c, t1);
    assert!(!after.contains_key(&first));
    assert_disjoint(&after);
    assert_eq!(c.job(first, t1).expect("job").state, JobState::Completed);

    // n2 falls silent: its jobs go back to the queue, in their place.
    let t2 = t1 + c.config().node_timeout_ms as i64 + 1;
    c.poll(&agent(), &PollRequest { node: "n1".into(), running: on_n1, wait_ms: 0 }, t2 - 10).expect("poll");
    c.check_nodes(t2).expect("check");
    let nodes = c.nodes();
    assert_eq!(nodes.iter().find(|n| n.name == "n2").expect("n2").state, "down");
    let r = running(&c, t2);
    assert!(r.values().all(|(n, _)| n == "n1"), "{r:?}");
    let requeued: Vec<u64> = after.iter().filter(|(_, (n, _))| n == "n2").map(|(k, _)| *k).collect();
    for id in requeued {
        let j = c.job(id, t2).expect("job");
        assert_eq!(j.state, JobState::Pending, "job {id} requeued");
        assert!(j.wait.is_some());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_requests_store_nothing() {
    let dir = tempdir("bad");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo+easy"), t0).expect("open");
    assert!(c.submit(&user("a"), job(1), t0).unwrap_err().to_string().contains("no node has registered"));
    c.register(&agent(), &reg("n1", 4), t0).expect("register");
    let e = c.submit(&user("a"), job(5), t0).unwrap_err().to_string();
    assert!(e.contains("needs 5 GPUs but the largest node has 4"), "{e}");
    assert!(c.submit(&user("a"), job(0), t0).is_err());
    assert!(c.submit(&user("a"), SubmitRequest { command: vec![], ..job(1) }, t0).is_err());
    assert!(c.submit(&agent(), job(1), t0).is_err(), "agents do not submit");
    assert!(c.register(&user("a"), &reg("x", 1), t0).is_err(), "users do not register nodes");
    assert!(c.set_policy(&user("a"), "sjf", t0).is_err(), "users do not set the policy");
    assert!(c.set_policy(&Principal { user: "root".into(), role: Role::Admin }, "lifo", t0).is_err());
    assert!(c.queue(t0).jobs.is_empty());
    assert!(c.cancel(&user("a"), 42, t0).unwrap_err().to_string().contains("no job 42"));
    let id = c.submit(&user("a"), job(1), t0).expect("submit");
    assert!(c.cancel(&user("b"), id, t0).unwrap_err().to_string().contains("belongs to a"));
    assert_eq!(c.cancel(&user("a"), id, t0).expect("own job"), JobState::Cancelled);
    // A group of submissions: the invalid one is refused alone, the others are stored.
    let r = c.submit_batch(vec![(user("a"), job(1)), (user("a"), job(0)), (user("b"), job(2))], t0);
    assert!(r[0].is_ok() && r[1].is_err() && r[2].is_ok(), "{r:?}");
    assert_eq!(c.queue(t0).jobs.len(), 2);
    assert!(c.cancel(&user("a"), id, t0).unwrap_err().to_string().contains("already ended"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_errors_name_file_line_and_field() {
    let dir = tempdir("config");
    let p = dir.join("ordo.toml");
    std::fs::write(&p, "policy = \"fifo+easy\"\nlisten = 7700\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("ordo.toml") && e.contains("line 2") && e.contains("listen"), "{e}");
    std::fs::write(&p, "polcy = \"fifo\"\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("polcy"), "{e}");
    std::fs::write(&p, "listen = \"0.0.0.0:7700\"\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("loopback"), "{e}");
    std::fs::write(&p, "policy = \"srtf\"\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("policy") && e.contains("preempt"), "{e}");
    std::fs::write(
        &p,
        "policy = \"sjf+easy\"\nheartbeat = \"200ms\"\nnode_timeout = \"2s\"\nmax_pending_per_user = 5\n",
    )
    .expect("write");
    let c = ServerConfig::from_file(&p).expect("valid config");
    assert_eq!((c.heartbeat_ms, c.node_timeout_ms, c.max_pending_per_user), (200, 2000, 5));
    assert_eq!(c.policy.to_string(), "sjf+easy");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_late_end_report_of_a_requeued_run_is_taken_not_rerun() {
    let dir = tempdir("late");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).expect("open");
    c.register(&agent(), &reg("n1", 2), t0).expect("register");
    let a = c.submit(&user("alice"), job(2), t0).expect("submit");
    let b = c.submit(&user("alice"), job(2), t0).expect("submit");
    c.pass(t0).expect("pass");
    c.poll(
        &agent(),
        &PollRequest { node: "n1".into(), running: vec![RunningJob { job: a, started_at: t0 }], wait_ms: 0 },
        t0,
    )
    .expect("poll");
    // n1 falls silent: job a goes back to the queue (n1 is down, so nothing starts).
    let t1 = t0 + c.config().node_timeout_ms as i64 + 1;
    c.check_nodes(t1).expect("check");
    assert_eq!(c.job(a, t1).expect("job").state, JobState::Pending);
    // Its run had ended after all; the report was held up.
    let rep = EndReport {
        node: "n1".into(),
        job: a,
        attempt: 1,
        outcome: Outcome::Exited,
        exit_code: Some(0),
        signal: None,
        started_at: t0,
        ended_at: t0 + 10,
        message: None,
    };
    c.report(&agent(), &rep, t1 + 5).expect("report");
    let j = c.job(a, t1 + 5).expect("job");
    assert_eq!(j.state, JobState::Completed, "{j:?}");
    assert_eq!(pending_order(&c, t1 + 5), vec![b]);
    // A report of an older run of a job does not end a newer one.
    c.report(&agent(), &EndReport { job: b, attempt: 7, ..rep }, t1 + 6).expect("report");
    assert_eq!(c.job(b, t1 + 6).expect("job").state, JobState::Pending);
    let _ = std::fs::remove_dir_all(&dir);
}

fn admin() -> Principal {
    Principal { user: "root".into(), role: Role::Admin }
}

#[test]
fn a_held_job_stays_out_of_the_queue_across_a_restart_and_priority_changes_follow_the_rule() {
    let dir = tempdir("hold");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).expect("open");
    c.register(&agent(), &reg("n1", 1), t0).expect("register");
    let a = c.submit(&user("alice"), SubmitRequest { priority: Some(5), ..job(1) }, t0).expect("submit");
    let b = c.submit(&user("alice"), job(1), t0).expect("submit");
    assert!(matches!(c.hold(&user("bob"), a, t0), Err(ApiError::Forbidden(_))));
    assert!(matches!(c.hold(&agent(), a, t0), Err(ApiError::Forbidden(_))));
    assert_eq!(c.hold(&user("alice"), a, t0).expect("hold").held_by.as_deref(), Some("alice"));
    assert!(matches!(c.set_priority(&user("alice"), a, 6, t0), Err(ApiError::Forbidden(_))));
    assert_eq!(c.set_priority(&user("alice"), a, 5, t0).expect("same value").priority, 5);
    assert_eq!(c.set_priority(&user("alice"), a, 2, t0).expect("lower").priority, 2);
    drop(c);

    let mut c = Core::open(cfg(&dir, "fifo"), t0 + 1).expect("reopen");
    let ja = c.job(a, t0 + 1).expect("job");
    assert_eq!((ja.held_by.as_deref(), ja.priority), (Some("alice"), 2));
    assert!(ja.wait.expect("wait").text.starts_with("held by alice"));
    c.pass(t0 + 1).expect("pass");
    assert_eq!(running(&c, t0 + 1).keys().copied().collect::<Vec<_>>(), vec![b], "the held job does not start");
    assert_eq!(pending_order(&c, t0 + 1), vec![a]);
    // Running jobs cannot be held; an admin raises the priority of the running one.
    assert!(matches!(c.hold(&admin(), b, t0 + 1), Err(ApiError::Conflict(_))));
    assert_eq!(c.set_priority(&admin(), b, 9, t0 + 1).expect("raise").priority, 9);
    c.report(
        &agent(),
        &EndReport {
            node: "n1".into(),
            job: b,
            attempt: 1,
            outcome: Outcome::Exited,
            exit_code: Some(0),
            signal: None,
            started_at: t0,
            ended_at: t0 + 2,
            message: None,
        },
        t0 + 2,
    )
    .expect("report");
    c.pass(t0 + 2).expect("pass");
    assert!(running(&c, t0 + 2).is_empty(), "still held: nothing runs on the free GPU");
    assert!(matches!(c.release(&user("bob"), a, t0 + 3), Err(ApiError::Forbidden(_))));
    assert!(c.release(&user("alice"), a, t0 + 3).expect("release").held_by.is_none());
    assert!(matches!(c.release(&user("alice"), a, t0 + 3), Err(ApiError::Conflict(_))));
    c.pass(t0 + 3).expect("pass");
    assert_eq!(running(&c, t0 + 3).keys().copied().collect::<Vec<_>>(), vec![a]);
    let kinds: Vec<(String, String)> =
        c.audit(Some(a), None, 100).expect("audit").into_iter().map(|r| (r.kind, r.actor)).collect();
    for k in ["hold", "priority", "release"] {
        assert!(kinds.contains(&(k.to_string(), "alice".to_string())), "{k}: {kinds:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
