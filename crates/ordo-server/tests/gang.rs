//! Multi-node (gang) jobs in the server's state machine: bounds at submission, every rank
//! placed in one pass on distinct nodes, each rank's assignment (rank, peers, master address
//! and port, world size), per-rank confirmation and end reports, one failing rank stopping the
//! others, a node's death requeueing (or failing) the job once the others stopped, cancel, and
//! a restart in the middle.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};

mod common;
use common::*;

fn gang(nodes: u32, gpus: u32) -> SubmitRequest {
    SubmitRequest { nodes: Some(nodes), ..job(gpus) }
}

fn poll(c: &mut Core, node: &str, running: &[(u64, i64)], now: i64) -> PollResponse {
    let running: Vec<(u64, i64, Option<u16>)> = running.iter().map(|&(j, t)| (j, t, None)).collect();
    poll_ports(c, node, &running, now).unwrap()
}

/// A poll whose running jobs may name their rendezvous port (rank 0's agent's choice).
fn poll_ports(
    c: &mut Core,
    node: &str,
    running: &[(u64, i64, Option<u16>)],
    now: i64,
) -> Result<PollResponse, ApiError> {
    let running =
        running.iter().map(|&(job, started_at, port)| RunningJob { job, started_at, attempt: 0, port }).collect();
    c.poll(&agent(node), &PollRequest { node: node.into(), running, wait_ms: 0, problem: None }, now)
}

fn end(c: &mut Core, node: &str, job: u64, outcome: Outcome, code: Option<i32>, t: (i64, i64)) {
    let rep = EndReport {
        node: node.into(),
        job,
        attempt: 0,
        outcome,
        exit_code: code,
        signal: None,
        started_at: t.0,
        ended_at: t.1,
        message: None,
    };
    c.report(&agent(node), &rep, t.1).unwrap();
}

/// Three 4-GPU nodes, `n1` reachable at 10.0.0.1.
fn cluster(tag: &str, t0: i64) -> (std::path::PathBuf, Core) {
    let dir = tempdir(tag);
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &RegisterRequest { addr: Some("10.0.0.1".into()), ..reg("n1", 4) }, t0).unwrap();
    c.register(&agent("n2"), &reg("n2", 4), t0).unwrap();
    c.register(&agent("n3"), &reg("n3", 4), t0).unwrap();
    (dir, c)
}

#[test]
fn submissions_are_bounded() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("gang-bounds", t0);
    let bad = |c: &mut Core, r: SubmitRequest| c.submit(&user("alice"), r, t0).unwrap_err();
    assert!(matches!(bad(&mut c, gang(0, 2)), ApiError::BadRequest(m) if m.contains("field `nodes`")));
    assert!(matches!(bad(&mut c, gang(65, 65)), ApiError::BadRequest(m) if m.contains("1..=64")));
    assert!(matches!(bad(&mut c, gang(2, 3)), ApiError::BadRequest(m) if m.contains("multiple of 2")));
    let e = bad(&mut c, SubmitRequest { cpus: Some(2), ..gang(2, 2) });
    assert!(matches!(e, ApiError::BadRequest(m) if m.contains("cpus")));
    let e = bad(&mut c, gang(4, 4));
    assert!(matches!(&e, ApiError::Unprocessable(m) if m.contains("needs 4 nodes with 1 GPU each, but 3")), "{e}");
    let e = bad(&mut c, gang(2, 10));
    assert!(matches!(&e, ApiError::Unprocessable(m) if m.contains("needs 2 nodes with 5 GPUs each")), "{e}");
    // No node count and more GPUs than a node has: split over nodes by the placement (nodes 0),
    // unless the nodes cannot hold it in all, or it asks CPUs or memory.
    let e = bad(&mut c, job(16));
    assert!(
        matches!(&e, ApiError::Unprocessable(m) if m.contains("more than the 3 registered nodes have in all (12)")),
        "{e}"
    );
    let e = bad(&mut c, SubmitRequest { cpus: Some(1), ..job(6) });
    assert!(matches!(&e, ApiError::Unprocessable(m) if m.contains("CPUs or memory runs on one node")), "{e}");
    for g in [6, 8, 12] {
        let split = c.submit(&user("alice"), job(g), t0).unwrap();
        assert_eq!(c.job(split, t0).unwrap().nodes, 0);
        c.cancel(&user("alice"), split, t0).unwrap();
    }
    assert!(c.submit(&user("alice"), gang(3, 12), t0).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_rank_starts_together_and_the_job_completes_when_all_exit_0() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("gang-ok", t0);
    // A 1-GPU job on n1 first: the gang of 2 x 4 goes to n2 and n3, while it waits it says so.
    let small = c.submit(&user("bob"), job(1), t0).unwrap();
    let big = c.submit(&user("bob"), job(4), t0).unwrap();
    c.pass(t0).unwrap();
    let id = c.submit(&user("alice"), gang(2, 8), t0).unwrap();
    let w = c.job(id, t0).unwrap().wait.unwrap();
    assert!(w.text.contains("over 2 nodes (4 on each)"), "{}", w.text);
    assert_eq!(c.job(id, t0).unwrap().nodes, 2);
    for (n, j) in [("n1", small), ("n2", big)] {
        let p = poll(&mut c, n, &[], t0);
        assert!(p.start.iter().any(|a| a.job == j));
    }
    end(&mut c, "n2", big, Outcome::Exited, Some(0), (t0, t0 + 5));
    c.pass(t0 + 5).unwrap();
    let j = c.job(id, t0 + 5).unwrap();
    assert_eq!(j.state, JobState::Starting);
    let nodes: Vec<&str> = j.ranks.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes.len(), 2);
    assert!(nodes.contains(&"n2") && nodes.contains(&"n3"), "{nodes:?}");
    assert!(j.ranks.iter().all(|r| r.gpu_ids == vec![0, 1, 2, 3]));
    let start = c.audit(Some(id), None, 10).unwrap().into_iter().find(|r| r.kind == "start").unwrap();
    assert_eq!(start.detail["ranks"].as_array().map(Vec::len), Some(2), "{}", start.detail);
    // Rank 0's agent gets its rank, the node list and rank 0's address, but no port: it chooses
    // one; rank 1 is not sent before that port is known.
    let p = poll(&mut c, nodes[0], &[], t0 + 6);
    let a = p.start.iter().find(|a| a.job == id).unwrap();
    let g = a.gang.clone().unwrap();
    assert_eq!(g.nodes, nodes.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!((g.rank, g.master_addr.as_str(), g.master_port, g.world_size), (0, nodes[0], None, 8));
    assert_eq!(a.gpu_ids, vec![0, 1, 2, 3]);
    assert!(poll(&mut c, nodes[1], &[], t0 + 6).start.is_empty(), "rank 1 waits for rank 0's port");
    // The first confirmation (rank 0's, with its port) makes it run; a restart keeps the ranks.
    poll_ports(&mut c, nodes[0], &[(id, t0 + 7, Some(29_777))], t0 + 7).unwrap();
    assert_eq!(c.job(id, t0 + 7).unwrap().state, JobState::Running);
    let running = c.audit(Some(id), None, 10).unwrap().into_iter().find(|r| r.kind == "running").unwrap();
    assert_eq!(running.detail["master_port"], 29_777, "{}", running.detail);
    drop(c);
    let mut c = Core::open(cfg(&dir, "fifo"), t0 + 8).unwrap();
    let j = c.job(id, t0 + 8).unwrap();
    assert_eq!((j.state, j.ranks.len(), j.ranks[0].started, j.ranks[1].started), (JobState::Running, 2, true, false));
    assert_eq!((j.ranks[0].port, j.ranks[1].port), (Some(29_777), None));
    // Rank 1 is still to be started (not twice): its node gets it, with rank 0's port; rank
    // 0's node does not.
    assert!(poll(&mut c, nodes[0], &[(id, t0 + 7)], t0 + 9).start.is_empty());
    let p = poll(&mut c, nodes[1], &[], t0 + 9);
    assert_eq!(p.start.len(), 1);
    let g = p.start[0].gang.clone().unwrap();
    assert_eq!((g.rank, g.master_addr.as_str(), g.master_port, g.world_size), (1, nodes[0], Some(29_777), 8));
    poll(&mut c, nodes[1], &[(id, t0 + 9)], t0 + 10);
    // Rank 0 exits 0: the job runs on; rank 1 too: completed.
    end(&mut c, nodes[0], id, Outcome::Exited, Some(0), (t0 + 7, t0 + 20));
    assert_eq!(c.job(id, t0 + 20).unwrap().state, JobState::Running);
    // Another node may not report for it.
    let rep = EndReport {
        node: "n1".into(),
        job: id,
        attempt: 0,
        outcome: Outcome::Exited,
        exit_code: Some(0),
        signal: None,
        started_at: t0 + 7,
        ended_at: t0 + 21,
        message: None,
    };
    assert!(matches!(c.report(&agent("n1"), &rep, t0 + 21), Err(ApiError::Forbidden(_))));
    end(&mut c, nodes[1], id, Outcome::Exited, Some(0), (t0 + 9, t0 + 22));
    let j = c.job(id, t0 + 22).unwrap();
    assert_eq!((j.state, j.end_reason.as_deref()), (JobState::Completed, Some("every rank exited with code 0")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a 2 x 4 gang on a fresh 3-node cluster, both ranks confirmed; returns its nodes.
fn running_gang(c: &mut Core, req: SubmitRequest, t0: i64) -> (u64, Vec<String>) {
    let id = c.submit(&user("alice"), req, t0).unwrap();
    c.pass(t0).unwrap();
    let nodes: Vec<String> = c.job(id, t0).unwrap().ranks.iter().map(|r| r.node.clone()).collect();
    for (r, n) in nodes.iter().enumerate() {
        assert_eq!(poll(c, n, &[], t0 + 1).start.len(), 1);
        poll_ports(c, n, &[(id, t0 + 1, (r == 0).then_some(29_500))], t0 + 2).unwrap();
    }
    assert_eq!(c.job(id, t0 + 2).unwrap().state, JobState::Running);
    (id, nodes)
}

#[test]
fn one_failing_rank_stops_the_others_and_fails_the_job() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("gang-fail", t0);
    let (id, nodes) = running_gang(&mut c, gang(2, 8), t0);
    end(&mut c, &nodes[1], id, Outcome::Exited, Some(3), (t0 + 1, t0 + 10));
    // Rank 0 is told to stop; the job ends once it has.
    let j = c.job(id, t0 + 10).unwrap();
    assert_eq!(j.state, JobState::Running);
    assert!(j.gang_stop.is_some());
    assert_eq!(poll(&mut c, &nodes[0], &[(id, t0 + 1)], t0 + 11).kill, vec![id]);
    end(&mut c, &nodes[0], id, Outcome::Killed, None, (t0 + 1, t0 + 12));
    let j = c.job(id, t0 + 12).unwrap();
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(j.exit_code, Some(3));
    assert_eq!(j.end_reason.unwrap(), format!("rank 1 on {}: exited with code 3", nodes[1]));
    let audit = c.audit(Some(id), None, 50).unwrap();
    assert_eq!(audit.iter().filter(|r| r.kind == "rank_end").count(), 2);
    // Its GPUs are free again: a 3 x 4 gang starts.
    let all = c.submit(&user("alice"), gang(3, 12), t0 + 13).unwrap();
    c.pass(t0 + 13).unwrap();
    assert_eq!(c.job(all, t0 + 13).unwrap().state, JobState::Starting);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_node_requeues_or_fails_the_job_once_the_other_ranks_stopped() {
    for fail in [false, true] {
        let t0 = 1_000_000;
        let (dir, mut c) = cluster(&format!("gang-dead-{fail}"), t0);
        let onf = if fail { OnNodeFailure::Fail } else { OnNodeFailure::Requeue };
        let (id, nodes) = running_gang(&mut c, SubmitRequest { on_node_failure: Some(onf), ..gang(2, 8) }, t0);
        // nodes[0] falls silent (for longer than the lease and its grace); the others keep polling.
        let t1 = t0 + (c.config().node_timeout_ms + c.config().fence_grace_ms) as i64 + 1_000;
        let others: Vec<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).filter(|n| *n != nodes[0]).collect();
        for n in &others {
            let running: Vec<(u64, i64)> = if *n == nodes[1] { vec![(id, t0 + 1)] } else { vec![] };
            poll(&mut c, n, &running, t1);
        }
        c.check_nodes(t1).unwrap();
        let j = c.job(id, t1).unwrap();
        assert_eq!(j.state, JobState::Running, "waits for rank 1 to stop");
        assert_eq!(poll(&mut c, &nodes[1], &[(id, t0 + 1)], t1 + 1).kill, vec![id]);
        // Its GPUs stay taken until then: a 2 x 4 job does not start on them.
        let other = c.submit(&user("bob"), gang(2, 8), t1 + 1).unwrap();
        c.pass(t1 + 1).unwrap();
        assert_eq!(c.job(other, t1 + 1).unwrap().state, JobState::Pending);
        end(&mut c, &nodes[1], id, Outcome::Killed, None, (t0 + 1, t1 + 2));
        let j = c.job(id, t1 + 2).unwrap();
        if fail {
            assert_eq!(j.state, JobState::Failed);
            assert!(j.end_reason.unwrap().contains("stopped sending heartbeats"));
        } else {
            assert_eq!((j.state, j.restarts), (JobState::Pending, 1));
            assert!(j.ranks.is_empty());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn cancel_kills_every_rank() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("gang-cancel", t0);
    let (id, nodes) = running_gang(&mut c, gang(2, 8), t0);
    c.cancel(&user("alice"), id, t0 + 5).unwrap();
    for n in &nodes {
        assert_eq!(poll(&mut c, n, &[(id, t0 + 1)], t0 + 6).kill, vec![id]);
    }
    end(&mut c, &nodes[0], id, Outcome::Killed, None, (t0 + 1, t0 + 7));
    assert_eq!(c.job(id, t0 + 7).unwrap().state, JobState::Running);
    end(&mut c, &nodes[1], id, Outcome::Killed, None, (t0 + 1, t0 + 8));
    assert_eq!(c.job(id, t0 + 8).unwrap().state, JobState::Cancelled);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn preemption_stops_every_rank_and_requeues_once_all_stopped() {
    let dir = tempdir("gang-preempt");
    let t0 = 1_000_000;
    let mut conf = cfg(&dir, "las:thresholds=2s");
    conf.min_run_ms = 500;
    let mut c = Core::open(conf, t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 1), t0).unwrap();
    c.register(&agent("n2"), &reg("n2", 1), t0).unwrap();
    let (id, nodes) = running_gang(&mut c, gang(2, 2), t0);
    // Past the threshold a new job outranks it.
    let t1 = t0 + 5_000;
    let short = c.submit(&user("bob"), job(1), t1).unwrap();
    c.pass(t1).unwrap();
    assert_eq!(c.job(id, t1).unwrap().state, JobState::Preempting);
    for n in &nodes {
        assert_eq!(poll(&mut c, n, &[(id, t0 + 1)], t1 + 1).kill, vec![id]);
    }
    end(&mut c, &nodes[0], id, Outcome::Killed, None, (t0 + 1, t1 + 2));
    assert_eq!(c.job(id, t1 + 2).unwrap().state, JobState::Preempting, "one rank still runs");
    c.pass(t1 + 2).unwrap();
    assert_eq!(c.job(short, t1 + 2).unwrap().state, JobState::Pending, "not before every rank stopped");
    end(&mut c, &nodes[1], id, Outcome::Killed, None, (t0 + 1, t1 + 3));
    let j = c.job(id, t1 + 3).unwrap();
    assert_eq!((j.state, j.restarts), (JobState::Pending, 1));
    c.pass(t1 + 3).unwrap();
    assert_eq!(c.job(short, t1 + 3).unwrap().state, JobState::Starting);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_of_an_earlier_run_is_killed_not_taken_for_the_new_one() {
    let t0 = 1_000_000;
    let dir = tempdir("gang-stale");
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    c.register(&agent("n1"), &reg("n1", 2), t0).unwrap();
    c.register(&agent("n2"), &reg("n2", 2), t0).unwrap();
    let (id, nodes) = running_gang(&mut c, gang(2, 4), t0);
    // Rank 1 is refused by its agent: the job goes back to the queue once rank 0 stopped.
    let rep = EndReport {
        node: nodes[1].clone(),
        job: id,
        attempt: 1,
        outcome: Outcome::Refused,
        exit_code: None,
        signal: None,
        started_at: t0 + 1,
        ended_at: t0 + 5,
        message: Some("no".into()),
    };
    c.report(&agent(&nodes[1]), &rep, t0 + 5).unwrap();
    end(&mut c, &nodes[0], id, Outcome::Killed, None, (t0 + 1, t0 + 6));
    assert_eq!(c.job(id, t0 + 6).unwrap().state, JobState::Pending);
    c.pass(t0 + 7).unwrap();
    let j = c.job(id, t0 + 7).unwrap();
    assert_eq!((j.state, j.attempts), (JobState::Starting, 2));
    // n1's agent still lists its process of run 1 (its end report raced the poll): it is
    // killed, not confirmed as run 2's rank, and run 2's rank starts once it is gone.
    let old = |c: &mut Core, now| {
        let running = vec![RunningJob { job: id, started_at: t0 + 1, attempt: 1, port: None }];
        c.poll(&agent(&nodes[0]), &PollRequest { node: nodes[0].clone(), running, wait_ms: 0, problem: None }, now)
            .unwrap()
    };
    let r0 = j.ranks.iter().position(|r| r.node == nodes[0]).unwrap();
    let p = old(&mut c, t0 + 8);
    assert_eq!(p.kill, vec![id]);
    assert!(p.start.is_empty());
    assert!(!c.job(id, t0 + 8).unwrap().ranks[r0].started);
    let p = poll(&mut c, &nodes[0], &[], t0 + 9);
    assert_eq!(p.start.iter().map(|a| (a.job, a.attempt)).collect::<Vec<_>>(), vec![(id, 2)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rendezvous_ports_come_from_rank_0s_agent_and_are_checked() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("gang-ports", t0);
    // Two 2 x 1 gangs at once: both go on the same two nodes (the fewest free GPUs that hold
    // one), rank 0 on the same node.
    let a = c.submit(&user("alice"), gang(2, 2), t0).unwrap();
    let b = c.submit(&user("bob"), gang(2, 2), t0).unwrap();
    c.pass(t0).unwrap();
    let (ja, jb) = (c.job(a, t0).unwrap(), c.job(b, t0).unwrap());
    assert_eq!((ja.state, jb.state), (JobState::Starting, JobState::Starting));
    assert_eq!(ja.ranks[0].node, jb.ranks[0].node, "both rank 0s on one node");
    let (head, peer) = (ja.ranks[0].node.clone(), ja.ranks[1].node.clone());
    let outsider = ["n1", "n2", "n3"].into_iter().find(|n| *n != head && *n != peer).unwrap();
    let p = poll(&mut c, &head, &[], t0 + 1);
    let ports: Vec<Option<u16>> = p.start.iter().map(|s| s.gang.as_ref().unwrap().master_port).collect();
    assert_eq!(ports, vec![None, None], "rank 0's agent chooses");
    let run = |port_a: u16, port_b: u16| [(a, t0 + 2, Some(port_a)), (b, t0 + 2, Some(port_b))];
    let bad = |e: ApiError, want: &str| assert!(matches!(&e, ApiError::BadRequest(m) if m.contains(want)), "{e}");
    // One port for both gangs on one node: refused, and nothing of that poll is applied.
    bad(poll_ports(&mut c, &head, &run(29_600, 29_600), t0 + 2).unwrap_err(), "already job");
    assert_eq!(c.job(a, t0 + 2).unwrap().state, JobState::Starting);
    // A privileged port, and a port for a one-node job: refused.
    bad(poll_ports(&mut c, &head, &run(80, 29_601), t0 + 2).unwrap_err(), "below 1024");
    let one = c.submit(&user("carol"), job(1), t0).unwrap();
    c.pass(t0).unwrap();
    let on = c.job(one, t0).unwrap().node.unwrap();
    let e = poll_ports(&mut c, &on, &[(one, t0 + 2, Some(29_700))], t0 + 2).unwrap_err();
    bad(e, "runs on one node");
    // Another node may not speak for rank 0: its own token for a job whose rank 1 it runs, a
    // node with no rank of the job, another node's token, a user's token.
    for n in [peer.as_str(), outsider] {
        let e = poll_ports(&mut c, n, &[(a, t0 + 2, Some(29_600))], t0 + 2).unwrap_err();
        assert!(matches!(&e, ApiError::Forbidden(m) if m.contains("rank 0 runs on node")), "{e}");
    }
    let forged = PollRequest {
        node: head.clone(),
        running: vec![RunningJob { job: a, started_at: t0 + 2, attempt: 0, port: Some(29_600) }],
        wait_ms: 0,
        problem: None,
    };
    assert!(matches!(c.poll(&agent(&peer), &forged, t0 + 2), Err(ApiError::Forbidden(_))));
    assert!(matches!(c.poll(&user("alice"), &forged, t0 + 2), Err(ApiError::Forbidden(_))));
    assert_eq!(c.job(a, t0 + 2).unwrap().ranks[0].port, None);
    // Distinct ports: both confirmed, recorded, and the rank 1s get their own gang's port.
    poll_ports(&mut c, &head, &run(29_600, 29_601), t0 + 3).unwrap();
    let (ja, jb) = (c.job(a, t0 + 3).unwrap(), c.job(b, t0 + 3).unwrap());
    assert_eq!((ja.state, ja.ranks[0].port, jb.ranks[0].port), (JobState::Running, Some(29_600), Some(29_601)));
    let p = poll(&mut c, &peer, &[], t0 + 4);
    let got: Vec<(u64, u32, Option<u16>)> =
        p.start.iter().map(|s| (s.job, s.gang.as_ref().unwrap().rank, s.gang.as_ref().unwrap().master_port)).collect();
    assert_eq!(got, vec![(a, 1, Some(29_600)), (b, 1, Some(29_601))]);
    // A port once reported does not change; every later poll may repeat it.
    bad(poll_ports(&mut c, &head, &run(29_602, 29_601), t0 + 5).unwrap_err(), "cannot change");
    poll_ports(&mut c, &head, &run(29_600, 29_601), t0 + 5).unwrap();
    // A third gang's rank 0 on that node may not take a port a running gang holds.
    end(&mut c, &on, one, Outcome::Exited, Some(0), (t0 + 2, t0 + 6));
    let d = c.submit(&user("dave"), gang(2, 2), t0 + 6).unwrap();
    c.pass(t0 + 6).unwrap();
    let jd = c.job(d, t0 + 6).unwrap();
    assert_eq!(jd.ranks[0].node, head, "{:?}", jd.ranks);
    let mut three = run(29_600, 29_601).to_vec();
    three.push((d, t0 + 7, Some(29_600)));
    bad(poll_ports(&mut c, &head, &three, t0 + 7).unwrap_err(), "already job");
    // The ports survive a restart.
    drop(c);
    let mut c = Core::open(cfg(&dir, "fifo"), t0 + 8).unwrap();
    assert_eq!(c.job(a, t0 + 8).unwrap().ranks[0].port, Some(29_600));
    // A rank 0 that starts without saying its port (an older agent): killed, the job fails.
    poll_ports(&mut c, &head, &[(a, t0 + 2, Some(29_600)), (b, t0 + 2, Some(29_601)), (d, t0 + 9, None)], t0 + 9)
        .unwrap();
    let jd = c.job(d, t0 + 9).unwrap();
    assert!(jd.gang_stop.as_ref().is_some_and(|s| s.reason.contains("no MASTER_PORT")), "{jd:?}");
    let p =
        poll_ports(&mut c, &head, &[(a, t0 + 2, Some(29_600)), (b, t0 + 2, Some(29_601)), (d, t0 + 9, None)], t0 + 10)
            .unwrap();
    assert_eq!(p.kill, vec![d]);
    assert!(poll(&mut c, &jd.ranks[1].node, &[], t0 + 10).start.iter().all(|s| s.job != d));
    end(&mut c, &head, d, Outcome::Killed, None, (t0 + 9, t0 + 11));
    let jd = c.job(d, t0 + 11).unwrap();
    assert_eq!(jd.state, JobState::Failed);
    assert!(jd.end_reason.unwrap().contains("no MASTER_PORT"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bare_gpus_ask_larger_than_any_node_is_split_by_the_placement() {
    let t0 = 1_000_000;
    let dir = tempdir("gang-split");
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    for n in ["n1", "n2", "n3"] {
        c.register(&agent(n), &reg(n, 8), t0).unwrap();
    }
    // 12 GPUs on 8-GPU nodes: one whole idle node and 4 GPUs of another, one rank each.
    let id = c.submit(&user("alice"), job(12), t0).unwrap();
    c.pass(t0).unwrap();
    let j = c.job(id, t0).unwrap();
    assert_eq!((j.state, j.nodes), (JobState::Starting, 0));
    let shape: Vec<(&str, usize)> = j.ranks.iter().map(|r| (r.node.as_str(), r.gpu_ids.len())).collect();
    assert_eq!(shape, vec![("n1", 8), ("n2", 4)]);
    assert_eq!(j.ranks[1].gpu_ids, vec![0, 1, 2, 3]);
    // A 4-GPU job takes n2's other four (best fit), never one of the gang's.
    let small = c.submit(&user("bob"), job(4), t0).unwrap();
    c.pass(t0).unwrap();
    let s = c.job(small, t0).unwrap();
    assert_eq!((s.node.as_deref(), s.gpu_ids.clone()), (Some("n2"), vec![4, 5, 6, 7]));
    // Each rank gets its own GPUs, the job's world size and the rendezvous of rank 0.
    let p = poll(&mut c, "n1", &[], t0 + 1);
    let a = p.start.iter().find(|a| a.job == id).unwrap();
    assert_eq!((a.gpu_ids.len(), a.gang.as_ref().unwrap().world_size, a.gang.as_ref().unwrap().rank), (8, 12, 0));
    poll_ports(&mut c, "n1", &[(id, t0 + 2, Some(29_500))], t0 + 2).unwrap();
    let p = poll(&mut c, "n2", &[], t0 + 3);
    let a = p.start.iter().find(|a| a.job == id).unwrap();
    let g = a.gang.clone().unwrap();
    assert_eq!((a.gpu_ids.clone(), g.rank, g.world_size, g.master_port), (vec![0, 1, 2, 3], 1, 12, Some(29_500)));
    assert_eq!(g.nodes, vec!["n1".to_string(), "n2".to_string()]);
    poll(&mut c, "n2", &[(id, t0 + 3), (small, t0 + 3)], t0 + 4);
    // A restart keeps its shape.
    drop(c);
    let mut c = Core::open(cfg(&dir, "fifo"), t0 + 5).unwrap();
    let j = c.job(id, t0 + 5).unwrap();
    assert_eq!((j.state, j.nodes, j.ranks.len(), j.ranks[1].gpu_ids.len()), (JobState::Running, 0, 2, 4));
    // While it runs, 12 more do not fit (8 + 4 are taken, 8 + 0 free): it waits, and says so.
    let next = c.submit(&user("carol"), job(12), t0 + 5).unwrap();
    c.pass(t0 + 5).unwrap();
    assert_eq!(c.job(next, t0 + 5).unwrap().state, JobState::Pending);
    end(&mut c, "n1", id, Outcome::Exited, Some(0), (t0 + 2, t0 + 10));
    end(&mut c, "n2", id, Outcome::Exited, Some(0), (t0 + 3, t0 + 11));
    assert_eq!(c.job(id, t0 + 11).unwrap().state, JobState::Completed);
    c.pass(t0 + 11).unwrap();
    let j = c.job(next, t0 + 11).unwrap();
    assert_eq!(j.state, JobState::Starting);
    assert_eq!(j.ranks.iter().map(|r| r.gpu_ids.len()).sum::<usize>(), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn split_jobs_never_share_a_gpu_nor_overfill_a_node() {
    // Random sizes (some larger than any node) on 8, 8 and 4 GPUs, random ends: after every
    // pass no GPU is in two jobs and every node holds at most its GPUs.
    let t0 = 1_000_000;
    let dir = tempdir("gang-split-inv");
    let mut c = Core::open(cfg(&dir, "fifo+easy"), t0).unwrap();
    let caps = [("n1", 8u32), ("n2", 8), ("n3", 4)];
    for (n, g) in caps {
        c.register(&agent(n), &reg(n, g), t0).unwrap();
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut ids = Vec::new();
    let mut split_ran = 0;
    for step in 0..300i64 {
        let now = t0 + step * 10;
        if rnd(2) == 0 {
            let g = [1, 2, 4, 6, 8, 9, 12, 16, 20][rnd(9) as usize];
            ids.push(c.submit(&user("u"), job(g), now).unwrap());
        }
        c.pass(now).unwrap();
        let mut held: std::collections::HashMap<String, Vec<u32>> = Default::default();
        let mut running = Vec::new();
        for &id in &ids {
            let j = c.job(id, now).unwrap();
            if !matches!(j.state, JobState::Starting | JobState::Running) {
                continue;
            }
            running.push(j.clone());
            if j.ranks.is_empty() {
                held.entry(j.node.clone().unwrap()).or_default().extend(&j.gpu_ids);
            } else {
                split_ran += usize::from(j.nodes == 0);
                assert_eq!(j.ranks.iter().map(|r| r.gpu_ids.len()).sum::<usize>(), j.gpus as usize, "{j:?}");
                for r in &j.ranks {
                    held.entry(r.node.clone()).or_default().extend(&r.gpu_ids);
                }
            }
        }
        for (n, cap) in caps {
            let mut g = held.remove(n).unwrap_or_default();
            let before = g.len();
            g.sort_unstable();
            g.dedup();
            assert_eq!(g.len(), before, "step {step}: a GPU of {n} in two jobs");
            assert!(g.iter().all(|&i| i < cap), "step {step}: {n} has {cap} GPUs, held {g:?}");
        }
        // End a random running job (every rank of a split one).
        if !running.is_empty() && rnd(3) == 0 {
            let j = &running[rnd(running.len() as u64) as usize];
            let nodes = if j.ranks.is_empty() { vec![j.node.clone().unwrap()] } else { j.run_nodes() };
            for n in nodes {
                end(&mut c, &n, j.id, Outcome::Exited, Some(0), (now, now));
            }
        }
    }
    assert!(split_ran > 0, "no split job ran");
    let _ = std::fs::remove_dir_all(&dir);
}
