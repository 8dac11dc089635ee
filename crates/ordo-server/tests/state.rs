//! The server's state machine without HTTP: restart rebuilds the scheduler from the database
//! (running jobs on their recorded GPUs, waiting jobs in submit order), node time-outs requeue
//! jobs, and bad configuration is reported with file, line and field.

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::state::{ApiError, Core};
use ordo_server::ServerConfig;
use std::collections::{BTreeMap, BTreeSet};

mod common;
use common::*;

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
    c.register(&agent("n1"), &reg("n1", 4), t0).expect("register");
    c.register(&agent("n2"), &reg("n2", 2), t0).expect("register");
    let ids: Vec<u64> =
        [1, 2, 1, 4, 2, 1].iter().map(|&g| c.submit(&user("alice"), job(g), t0).expect("submit")).collect();
    c.pass(t0).expect("pass");
    let before = running(&c, t0);
    assert_eq!(before.keys().copied().collect::<Vec<_>>(), ids[..3].to_vec(), "fifo starts 1, 2, 1 GPUs");
    assert_disjoint(&before);
    // n1's agent confirms its jobs.
    let on_n1: Vec<RunningJob> = before
        .iter()
        .filter(|(_, (n, _))| n == "n1")
        .map(|(&job, _)| RunningJob { job, started_at: t0, attempt: 0, port: None })
        .collect();
    c.poll(&agent("n1"), &PollRequest { node: "n1".into(), running: on_n1.clone(), wait_ms: 0, problem: None }, t0 + 1)
        .expect("poll");
    let waiting = pending_order(&c, t0);
    drop(c);

    let t1 = t0 + 5_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t1).expect("reopen");
    assert_eq!(running(&c, t1), before, "running jobs keep their nodes and GPU indices");
    assert_eq!(pending_order(&c, t1), waiting, "waiting jobs keep their order");
    // The end of a job frees exactly its GPUs; the next start gets free ones only.
    let (first, (node, _)) = before.iter().next().map(|(k, v)| (*k, v.clone())).expect("one running");
    c.report(
        &agent(&node),
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
    let t2 = t1 + (c.config().node_timeout_ms + c.config().fence_grace_ms) as i64 + 1;
    c.poll(&agent("n1"), &PollRequest { node: "n1".into(), running: on_n1, wait_ms: 0, problem: None }, t2 - 10)
        .expect("poll");
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
    c.register(&agent("n1"), &reg("n1", 4), t0).expect("register");
    let e = c.submit(&user("a"), job(5), t0).unwrap_err().to_string();
    assert!(e.contains("needs 5 GPUs but the largest node has 4"), "{e}");
    assert!(c.submit(&user("a"), job(0), t0).is_err());
    assert!(c.submit(&user("a"), SubmitRequest { command: vec![], ..job(1) }, t0).is_err());
    assert!(c.submit(&agent("x"), job(1), t0).is_err(), "agents do not submit");
    assert!(c.register(&user("a"), &reg("x", 1), t0).is_err(), "users do not register nodes");
    assert!(c.set_policy(&user("a"), "sjf", "users may not", t0).is_err(), "users do not set the policy");
    assert!(c.set_policy(&Principal { user: "root".into(), role: Role::Admin }, "lifo", "no such policy", t0).is_err());
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
    std::fs::write(&p, "policy = \"srtf\"\nmin_run = \"soon\"\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("ordo.toml") && e.contains("min_run") && e.contains("soon"), "{e}");
    std::fs::write(&p, "policy = \"las:thresholds=2s\"\nmin_run = \"5s\"\nmax_job_mem = \"lots\"\n").expect("write");
    let e = ServerConfig::from_file(&p).unwrap_err().to_string();
    assert!(e.contains("max_job_mem") && e.contains("lots"), "{e}");
    std::fs::write(&p, "policy = \"las:thresholds=2s\"\nmin_run = \"5s\"\nmax_job_cpus = 8\n").expect("write");
    let c = ServerConfig::from_file(&p).expect("preemptive policies run");
    assert_eq!((c.min_run_ms, c.max_job_cpus), (5_000, Some(8)));
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
    c.register(&agent("n1"), &reg("n1", 2), t0).expect("register");
    let a = c.submit(&user("alice"), job(2), t0).expect("submit");
    let b = c.submit(&user("alice"), job(2), t0).expect("submit");
    c.pass(t0).expect("pass");
    c.poll(
        &agent("n1"),
        &PollRequest {
            node: "n1".into(),
            running: vec![RunningJob { job: a, started_at: t0, attempt: 0, port: None }],
            wait_ms: 0,
            problem: None,
        },
        t0,
    )
    .expect("poll");
    // n1 falls silent: job a goes back to the queue (n1 is down, so nothing starts).
    let t1 = t0 + (c.config().node_timeout_ms + c.config().fence_grace_ms) as i64 + 1;
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
    c.report(&agent("n1"), &rep, t1 + 5).expect("report");
    let j = c.job(a, t1 + 5).expect("job");
    assert_eq!(j.state, JobState::Completed, "{j:?}");
    assert_eq!(pending_order(&c, t1 + 5), vec![b]);
    // A report of an older run of a job does not end a newer one.
    c.report(&agent("n1"), &EndReport { job: b, attempt: 7, ..rep }, t1 + 6).expect("report");
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
    c.register(&agent("n1"), &reg("n1", 1), t0).expect("register");
    // Users may not submit above the default priority; an admin may give one.
    let above = c.submit(&user("alice"), SubmitRequest { priority: Some(5), ..job(1) }, t0);
    assert!(matches!(&above, Err(ApiError::Forbidden(m)) if m.contains("only admins may raise")), "{above:?}");
    let a = c.submit(&user("alice"), SubmitRequest { priority: Some(-1), ..job(1) }, t0).expect("lower is fine");
    c.set_priority(&admin(), a, 5, t0).expect("an admin raises it");
    let b = c.submit(&user("alice"), job(1), t0).expect("submit");
    assert!(matches!(c.hold(&user("bob"), a, t0), Err(ApiError::Forbidden(_))));
    assert!(matches!(c.hold(&agent("n1"), a, t0), Err(ApiError::Forbidden(_))));
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
        &agent("n1"),
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

fn end(node: &str, job: u64, attempt: u32, outcome: Outcome, t0: i64, t1: i64) -> EndReport {
    EndReport {
        node: node.into(),
        job,
        attempt,
        outcome,
        exit_code: (outcome == Outcome::Exited).then_some(0),
        signal: None,
        started_at: t0,
        ended_at: t1,
        message: None,
    }
}

fn audit_kinds(c: &Core, job: u64) -> Vec<String> {
    c.audit(Some(job), None, 1000).expect("audit").into_iter().map(|r| r.kind).collect()
}

#[test]
fn las_preempts_a_long_job_for_a_short_one_keeps_its_service_across_a_restart_and_spares_no_preempt() {
    let dir = tempdir("preempt");
    let t0 = 1_000_000;
    let mut conf = cfg(&dir, "las:thresholds=2s");
    conf.min_run_ms = 500;
    let mut c = Core::open(conf.clone(), t0).expect("open");
    c.register(&agent("n1"), &reg("n1", 1), t0).expect("register");
    let long = c.submit(&user("alice"), job(1), t0).expect("submit");
    c.pass(t0).expect("pass");
    let run = |job, t| PollRequest {
        node: "n1".into(),
        running: vec![RunningJob { job, started_at: t, attempt: 0, port: None }],
        wait_ms: 0,
        problem: None,
    };
    c.poll(&agent("n1"), &run(long, t0), t0).expect("poll");
    // Past the 2 GPU-s threshold, a new job (queue 0) outranks it.
    let t1 = t0 + 3_000;
    let short = c.submit(&user("bob"), job(1), t1).expect("submit");
    c.pass(t1).expect("pass");
    assert_eq!(c.job(long, t1).expect("job").state, JobState::Preempting);
    assert_eq!(c.job(short, t1).expect("job").state, JobState::Pending, "waits for the GPU to be freed");
    let resp = c.poll(&agent("n1"), &run(long, t0), t1 + 10).expect("poll");
    assert_eq!(resp.kill, vec![long], "the agent is told to stop it");
    let rec = c.audit(Some(long), None, 100).expect("audit");
    let p = rec.iter().find(|r| r.kind == "preempt").expect("a preempt record");
    let why = p.detail["why"].as_str().expect("why");
    assert!(why.starts_with(&format!("preempted {long} for {short}: policy las")), "{why}");
    // It stops; it goes back to the queue with its service, and the short job starts.
    let t2 = t1 + 100;
    c.report(&agent("n1"), &end("n1", long, 1, Outcome::Killed, t0, t2), t2).expect("report");
    let j = c.job(long, t2).expect("job");
    assert_eq!((j.state, j.restarts, j.executed_ms), (JobState::Pending, 1, 3_100), "{j:?}");
    assert!(j.wait.as_ref().expect("wait").text.contains("preempted or requeued 1 time"), "{:?}", j.wait);
    c.pass(t2).expect("pass");
    assert_eq!(c.job(short, t2).expect("job").state, JobState::Starting);
    // A restart of the server keeps the attained service: a fresh job still outranks it.
    drop(c);
    let t3 = t2 + 50;
    let mut c = Core::open(conf.clone(), t3).expect("reopen");
    c.register(&agent("n1"), &reg("n1", 1), t3).expect("register");
    let j = c.job(long, t3).expect("job");
    assert_eq!((j.state, j.restarts, j.executed_ms), (JobState::Pending, 1, 3_100));
    let fresh = c.submit(&user("carol"), job(1), t3).expect("submit");
    assert_eq!(pending_order(&c, t3), vec![fresh, long], "least attained service first, after a restart too");
    c.poll(&agent("n1"), &run(short, t2), t3).expect("poll");
    c.report(&agent("n1"), &end("n1", short, 1, Outcome::Exited, t2, t3 + 10), t3 + 10).expect("report");
    c.pass(t3 + 10).expect("pass");
    assert_eq!(c.job(fresh, t3 + 10).expect("job").state, JobState::Starting);
    let a = c
        .poll(&agent("n1"), &PollRequest { node: "n1".into(), running: vec![], wait_ms: 0, problem: None }, t3 + 11)
        .expect("poll");
    assert_eq!(a.start.len(), 1);
    assert_eq!(a.start[0].restarts, 0);
    c.poll(&agent("n1"), &run(fresh, t3 + 11), t3 + 12).expect("poll");
    c.report(&agent("n1"), &end("n1", fresh, 1, Outcome::Exited, t3 + 11, t3 + 20), t3 + 20).expect("report");
    c.pass(t3 + 20).expect("pass");
    let a = c
        .poll(&agent("n1"), &PollRequest { node: "n1".into(), running: vec![], wait_ms: 0, problem: None }, t3 + 21)
        .expect("poll");
    assert_eq!((a.start[0].job, a.start[0].restarts), (long, 1), "ORDO_RESTARTS comes from here");
    c.poll(&agent("n1"), &run(long, t3 + 21), t3 + 22).expect("poll");
    c.report(&agent("n1"), &end("n1", long, 2, Outcome::Exited, t3 + 21, t3 + 30), t3 + 30).expect("report");
    assert_eq!(c.job(long, t3 + 30).expect("job").state, JobState::Completed);

    // A --no-preempt job keeps its GPU past the threshold.
    let t4 = t3 + 100;
    let np = c.submit(&user("alice"), SubmitRequest { no_preempt: Some(true), ..job(1) }, t4).expect("submit");
    c.pass(t4).expect("pass");
    c.poll(&agent("n1"), &run(np, t4), t4).expect("poll");
    let t5 = t4 + 10_000;
    let other = c.submit(&user("bob"), job(1), t5).expect("submit");
    c.pass(t5).expect("pass");
    c.pass(t5 + 500).expect("pass");
    assert_eq!(c.job(np, t5 + 500).expect("job").state, JobState::Running);
    assert_eq!(c.job(other, t5 + 500).expect("job").state, JobState::Pending);
    assert!(!audit_kinds(&c, np).contains(&"preempt".to_string()));
    c.report(&agent("n1"), &end("n1", np, 1, Outcome::Exited, t4, t5 + 600), t5 + 600).expect("report");
    c.pass(t5 + 600).expect("pass");
    assert_eq!(c.job(other, t5 + 600).expect("job").state, JobState::Starting);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cpus_and_memory_beyond_every_node_are_refused_and_placement_respects_them() {
    let dir = tempdir("cpumem");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo"), t0).expect("open");
    let none = c.submit(&user("alice"), SubmitRequest { cpus: Some(2), ..job(1) }, t0).unwrap_err();
    assert!(matches!(none, ApiError::Unprocessable(_)), "{none}");
    let r = RegisterRequest { cpus: Some(4), mem_mib: Some(8192), ..reg("n1", 2) };
    c.register(&agent("n1"), &r, t0).expect("register");
    let e = c.submit(&user("alice"), SubmitRequest { cpus: Some(5), ..job(1) }, t0).unwrap_err();
    assert!(matches!(e, ApiError::Unprocessable(_)) && e.to_string().contains("4"), "{e}");
    let e = c.submit(&user("alice"), SubmitRequest { mem_mib: Some(9000), ..job(1) }, t0).unwrap_err();
    assert!(matches!(e, ApiError::Unprocessable(_)) && e.to_string().contains("8G"), "{e}");
    let e = c.submit(&user("alice"), SubmitRequest { cpus: Some(0), ..job(1) }, t0).unwrap_err();
    assert!(matches!(e, ApiError::BadRequest(_)), "{e}");
    assert!(pending_order(&c, t0).is_empty(), "nothing stored");
    // Two jobs fit by GPUs but not by CPUs: the second waits, with the reason.
    let a = c.submit(&user("alice"), SubmitRequest { cpus: Some(3), ..job(1) }, t0).expect("submit");
    let b = c.submit(&user("alice"), SubmitRequest { cpus: Some(2), ..job(1) }, t0).expect("submit");
    c.pass(t0).expect("pass");
    assert_eq!(c.job(a, t0).expect("job").state, JobState::Starting);
    let jb = c.job(b, t0).expect("job");
    assert_eq!(jb.state, JobState::Pending);
    let text = jb.wait.expect("wait").text;
    assert!(text.contains("not enough free CPU"), "{text}");
    let n = c.nodes();
    assert_eq!((n[0].cpus, n[0].used_cpus, n[0].mem_mib), (Some(4), 3, Some(8192)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rr_quantum_preempts_by_time_alone_at_the_wake_up_the_pass_asks_for() {
    let dir = tempdir("rr");
    let t0 = 1_000_000;
    let mut conf = cfg(&dir, "rr:quantum=1s");
    conf.min_run_ms = 0;
    let mut c = Core::open(conf, t0).expect("open");
    c.register(&agent("n1"), &reg("n1", 1), t0).expect("register");
    let a = c.submit(&user("alice"), job(1), t0).expect("submit");
    c.pass(t0).expect("pass");
    let poll = |c: &mut Core, job, t| {
        c.poll(
            &agent("n1"),
            &PollRequest {
                node: "n1".into(),
                running: vec![RunningJob { job, started_at: t0, attempt: 0, port: None }],
                wait_ms: 0,
                problem: None,
            },
            t,
        )
        .expect("poll")
    };
    poll(&mut c, a, t0);
    let b = c.submit(&user("bob"), job(1), t0 + 10).expect("submit");
    // Nothing changes until a's quantum ends; the pass says when to ask again.
    let wake = c.pass(t0 + 300).expect("pass").expect("a wake-up time");
    assert!(wake > t0 + 300 && wake <= t0 + 1_000, "wake at {wake}");
    assert_eq!(c.job(a, t0 + 300).expect("job").state, JobState::Running);
    c.pass(t0 + 1_000).expect("pass");
    assert_eq!(c.job(a, t0 + 1_000).expect("job").state, JobState::Preempting, "time alone ends the quantum");
    assert_eq!(poll(&mut c, a, t0 + 1_001).kill, vec![a]);
    let rec = c.audit(Some(a), None, 100).expect("audit");
    let why = rec.iter().find(|r| r.kind == "preempt").expect("preempt record").detail["why"].to_string();
    assert!(why.contains(&format!("preempted {a} for {b}: policy rr")) && why.contains("quantum"), "{why}");
    c.report(&agent("n1"), &end("n1", a, 1, Outcome::Killed, t0, t0 + 1_050), t0 + 1_050).expect("report");
    c.pass(t0 + 1_050).expect("pass");
    assert_eq!(c.job(b, t0 + 1_050).expect("job").state, JobState::Starting);
    let j = c.job(a, t0 + 1_050).expect("job");
    assert_eq!((j.state, j.restarts, j.executed_ms), (JobState::Pending, 1, 1_050));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The run time a job's preemptions lost, by its checkpoint rule, over several preemptions:
/// under `rr:quantum=1s` on one GPU, alice's job `a` and bob's `b` take turns, each run lasting
/// 1,050 ms (its quantum, then its stop). `a` restarts from zero (`--checkpoint none`): each
/// preemption loses all it ran, so after two its `lost_ms` is its `executed_ms`, 2,100, never
/// more. `b` checkpoints every 400 ms: each run keeps 800 ms and loses 250, 500 in all.
#[test]
fn lost_run_time_follows_the_checkpoint_rule_over_several_preemptions() {
    let dir = tempdir("lost");
    let t0 = 1_000_000;
    let mut conf = cfg(&dir, "rr:quantum=1s");
    conf.min_run_ms = 0;
    let mut c = Core::open(conf, t0).expect("open");
    c.register(&agent("n1"), &reg("n1", 1), t0).expect("register");
    let spec = |rule: &str| PreemptSpec { checkpoint: Some(rule.into()), ..PreemptSpec::default() };
    let a = c.submit(&user("alice"), SubmitRequest { preempt: Some(spec("none")), ..job(1) }, t0).expect("submit");
    let b = c.submit(&user("bob"), SubmitRequest { preempt: Some(spec("every:400ms")), ..job(1) }, t0).expect("submit");
    let mut attempts: BTreeMap<u64, u32> = BTreeMap::new();
    // Four turns: the job started at `t` is told to stop at t + 1,000 and stops at t + 1,050.
    for k in 0..4 {
        let t = t0 + 1_050 * k;
        c.pass(t).expect("pass");
        let idle = PollRequest { node: "n1".into(), running: vec![], wait_ms: 0, problem: None };
        let started: Vec<u64> = c.poll(&agent("n1"), &idle, t).expect("poll").start.iter().map(|s| s.job).collect();
        assert_eq!(started.len(), 1, "at {t}: {started:?}");
        let job = started[0];
        let attempt = *attempts.entry(job).and_modify(|n| *n += 1).or_insert(1);
        let run = PollRequest {
            node: "n1".into(),
            running: vec![RunningJob { job, started_at: t, attempt, port: None }],
            wait_ms: 0,
            problem: None,
        };
        c.poll(&agent("n1"), &run, t).expect("poll");
        c.pass(t + 1_000).expect("pass");
        assert_eq!(c.job(job, t + 1_000).expect("job").state, JobState::Preempting, "at {}", t + 1_000);
        c.report(&agent("n1"), &end("n1", job, attempt, Outcome::Killed, t, t + 1_050), t + 1_050).expect("report");
    }
    assert_eq!((attempts[&a], attempts[&b]), (2, 2), "they took turns");
    let t = t0 + 4_200;
    let (ja, jb) = (c.job(a, t).expect("job"), c.job(b, t).expect("job"));
    assert_eq!((ja.executed_ms, ja.lost_ms), (2_100, 2_100), "a restart from zero loses what it ran, not more");
    assert_eq!((jb.executed_ms, jb.lost_ms), (2_100, 500));
    // Why each was stopped names the run's protection: the job's own floor (its checkpoint
    // interval) to the tenth of a second, or none.
    let why = |id: u64| {
        c.audit(Some(id), None, 100).expect("audit").iter().map(|r| r.detail.to_string()).collect::<Vec<_>>().join("\n")
    };
    assert!(why(b).contains("ran 1.0s this time (protected for its first 0.4s)"), "{}", why(b));
    assert!(why(a).contains("ran 1.0s this time (protected for its first 0.0s)"), "{}", why(a));
    let _ = std::fs::remove_dir_all(&dir);
}

fn start_node(c: &Core, id: u64, t: i64) -> Option<String> {
    let j = c.job(id, t).expect("job");
    matches!(j.state, JobState::Starting | JobState::Running).then(|| j.node.expect("node"))
}

#[test]
fn the_core_places_by_cpus_and_memory_so_a_job_goes_to_the_node_that_holds_it() {
    let dir = tempdir("place-cpumem");
    let t0 = 1_000_000;
    let mut c = Core::open(cfg(&dir, "fifo+easy"), t0).expect("open");
    // Node a registers first; by GPUs alone both fit a 1-GPU job, and a (listed first, best
    // fit on ties) would be chosen.
    c.register(&agent("a"), &RegisterRequest { cpus: Some(2), mem_mib: Some(32_768), ..reg("a", 8) }, t0)
        .expect("register");
    c.register(&agent("b"), &RegisterRequest { cpus: Some(16), mem_mib: Some(32_768), ..reg("b", 8) }, t0)
        .expect("register");
    // A plain 1-GPU job goes on a, the first of two equal nodes: the test below is not luck.
    let plain = c.submit(&user("alice"), job(1), t0).expect("submit");
    c.pass(t0).expect("pass");
    assert_eq!(start_node(&c, plain, t0).as_deref(), Some("a"));
    // Now a has 7 free GPUs and b 8: best fit by GPUs picks a, which has 2 CPUs.
    let big = c.submit(&user("alice"), SubmitRequest { cpus: Some(8), ..job(1) }, t0 + 1).expect("submit");
    c.pass(t0 + 1).expect("pass");
    assert_eq!(start_node(&c, big, t0 + 1).as_deref(), Some("b"), "{:?}", c.job(big, t0 + 1).expect("job").wait);
    let rec = c.audit(Some(big), None, 100).expect("audit");
    assert!(rec.iter().any(|r| r.kind == "start" && r.detail["node"] == "b"), "{rec:?}");
    assert!(!rec.iter().any(|r| r.kind == "skip"), "started at once, never skipped: {rec:?}");
    let n = c.nodes();
    let b = n.iter().find(|n| n.name == "b").expect("b");
    assert_eq!(b.used_cpus, 8);

    // Memory: 24G taken on each node leaves 8G free on each, 16G in all; a 12G job fits on
    // neither and waits with a reason that names memory (while it fits by GPUs and CPUs).
    let m1 = c.submit(&user("bob"), SubmitRequest { mem_mib: Some(24_576), ..job(1) }, t0 + 2).expect("submit");
    let m2 = c.submit(&user("bob"), SubmitRequest { mem_mib: Some(24_576), ..job(1) }, t0 + 2).expect("submit");
    c.pass(t0 + 2).expect("pass");
    let placed: BTreeSet<String> = [m1, m2].iter().map(|&id| start_node(&c, id, t0 + 2).expect("started")).collect();
    assert_eq!(placed.len(), 2, "one on each node: {placed:?}");
    let wants = c.submit(&user("carol"), SubmitRequest { mem_mib: Some(12_288), ..job(1) }, t0 + 3).expect("submit");
    c.pass(t0 + 3).expect("pass");
    c.pass(t0 + 500).expect("pass");
    let j = c.job(wants, t0 + 500).expect("job");
    assert_eq!(j.state, JobState::Pending);
    let w = j.wait.expect("wait");
    assert!(w.text.contains("memory") && !w.text.contains("chosen by the policy"), "{}", w.text);
    assert!(w.expected_start.is_some(), "expected once a memory holder ends: {w:?}");
    let skips: Vec<_> =
        c.audit(Some(wants), None, 100).expect("audit").into_iter().filter(|r| r.kind == "skip").collect();
    assert!(skips.iter().all(|r| r.detail["reason"] != "node_resources"), "the core, not the safety net: {skips:?}");

    // After a restart the running jobs keep their CPUs and memory in the core: the waiting
    // job still waits for memory and starts where a memory holder ends.
    drop(c);
    let t1 = t0 + 1_000;
    let mut c = Core::open(cfg(&dir, "fifo+easy"), t1).expect("reopen");
    c.pass(t1).expect("pass");
    let j = c.job(wants, t1).expect("job");
    assert_eq!(j.state, JobState::Pending);
    assert!(j.wait.expect("wait").text.contains("memory"));
    let node = c.job(m1, t1).expect("job").node.expect("node");
    c.report(&agent(&node), &end(&node, m1, 1, Outcome::Exited, t0 + 2, t1 + 10), t1 + 10).expect("report");
    c.pass(t1 + 10).expect("pass");
    assert_eq!(start_node(&c, wants, t1 + 10), Some(node));
    // b's 8 CPUs are still held by `big` after the restart: a 9-CPU job waits, naming CPUs,
    // and starts on b once `big` ends.
    let c9 = c.submit(&user("dave"), SubmitRequest { cpus: Some(9), ..job(1) }, t1 + 20).expect("submit");
    c.pass(t1 + 20).expect("pass");
    let j = c.job(c9, t1 + 20).expect("job");
    assert_eq!(j.state, JobState::Pending);
    let text = j.wait.expect("wait").text;
    assert!(text.contains("CPU"), "{text}");
    c.report(&agent("b"), &end("b", big, 1, Outcome::Exited, t0 + 1, t1 + 30), t1 + 30).expect("report");
    c.pass(t1 + 30).expect("pass");
    assert_eq!(start_node(&c, c9, t1 + 30).as_deref(), Some("b"));
    // A job that no node could ever hold with its GPUs and CPUs together is refused, though
    // one node has the GPUs and another the CPUs.
    c.register(&agent("c"), &RegisterRequest { cpus: Some(4), mem_mib: Some(1024), ..reg("c", 10) }, t1 + 40)
        .expect("register");
    let e = c.submit(&user("carol"), SubmitRequest { cpus: Some(8), ..job(10) }, t1 + 40).unwrap_err();
    assert!(matches!(e, ApiError::Unprocessable(_)) && e.to_string().contains("together"), "{e}");
    c.submit(&user("carol"), SubmitRequest { cpus: Some(4), ..job(10) }, t1 + 40).expect("c holds this one");
    let _ = std::fs::remove_dir_all(&dir);
}
