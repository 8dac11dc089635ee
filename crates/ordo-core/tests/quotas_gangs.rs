//! Gangs (multi-node jobs of a fixed shape), quotas, array limits and shares through the
//! scheduler. Each expectation is worked out by hand in the comments.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::scheduler::{JobReq, Reason, SubmitError};
use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, QuotaScope, Quotas, Scheduler};

fn req(id: u32, gpus: u32, user: u32) -> JobReq {
    JobReq { user, group: user, ..JobReq::new(JobId(id), id as i64, gpus, 100_000) }
}

fn sched(nodes: u32, gpus: u32, policy: &str) -> Scheduler {
    Scheduler::new(&ClusterSpec::uniform(nodes, gpus), Placement::Consolidated, policy.parse::<PolicySpec>().unwrap())
}

mod common;

/// Runs one pass (no `advance`): see `common::pass_after`.
fn pass(s: &mut Scheduler, now: i64) -> ordo_core::Plan {
    common::pass_after(s, now, false)
}

fn started(p: &ordo_core::Plan) -> Vec<u32> {
    p.starts.iter().map(|s| s.job.0).collect()
}

fn reason(p: &ordo_core::Plan, id: u32) -> Reason {
    p.waiting.iter().find(|(j, _)| j.0 == id).map(|(_, r)| r.clone()).unwrap()
}

#[test]
fn gangs_take_their_shape_all_at_once() {
    // 3 nodes x 8, fifo. Job 0: 4 GPUs on one node -> node 0 (all idle: lowest index).
    // Job 1: 2 nodes x 4 -> the nodes with the fewest free GPUs that hold 4: node 0 (4 free),
    // then node 1 (8 free, lower index than node 2).
    // Job 2: 2 nodes x 8 -> only node 2 is whole: it waits, all or nothing (12 GPUs free).
    let mut s = sched(3, 8, "fifo");
    s.submit(req(0, 4, 0), 0).unwrap();
    s.submit(JobReq { nodes: 2, ..req(1, 8, 0) }, 0).unwrap();
    s.submit(JobReq { nodes: 2, ..req(2, 16, 0) }, 0).unwrap();
    let p = pass(&mut s, 0);
    assert_eq!(started(&p), vec![0, 1]);
    assert_eq!(p.starts[1].alloc.parts, vec![(0, 4), (1, 4)]);
    assert_eq!(reason(&p, 2), Reason::Resources { need: 16, free: 12 });
    let why = s.capacity().why_not(JobReq { nodes: 2, ..req(2, 16, 0) }.demand());
    assert_eq!(why, "needs 2 nodes with 8 free GPUs each, all at once; 1 node has 8 free now");
    // Job 1 ends: nodes 0 and 1 have 4 and 8 free; with node 2, two whole nodes (1, 2).
    s.finish(JobId(1), 10).unwrap();
    let p = pass(&mut s, 10);
    assert_eq!(p.starts[0].alloc.parts, vec![(1, 8), (2, 8)]);
}

#[test]
fn gangs_that_can_never_be_placed_are_refused() {
    let mut s = sched(3, 8, "fifo");
    // 4 nodes on a 3-node cluster.
    let e = s.submit(JobReq { nodes: 4, ..req(0, 8, 0) }, 0).unwrap_err();
    assert!(matches!(e, SubmitError::NeverPlaced { .. }), "{e}");
    // 5 GPUs do not split over 2 nodes.
    let e = s.submit(JobReq { nodes: 2, ..req(1, 5, 0) }, 0).unwrap_err();
    assert!(e.to_string().contains("multiple of 2"), "{e}");
    // 9 GPUs per node on 8-GPU nodes.
    assert!(s.submit(JobReq { nodes: 1, ..req(2, 9, 0) }, 0).is_err());
    assert!(s.submit(JobReq { nodes: 3, ..req(3, 24, 0) }, 0).is_ok());
}

#[test]
fn easy_backfill_places_gangs_by_their_shape() {
    // 2 x 8, fifo+easy. Job 0 (8 GPUs, 100 s) runs on node 0. Job 1 (2 x 8) waits for it:
    // reservation at 100 s. Job 2 (2 nodes x 2 GPUs, 50 s) would need 2 in each node: node 0
    // has none, so it cannot start now though 8 GPUs are free. Job 3 (2 GPUs, 50 s) ends
    // before the reservation: it backfills on node 1.
    let mut s = sched(2, 8, "fifo+easy");
    s.submit(req(0, 8, 0), 0).unwrap();
    pass(&mut s, 0);
    s.submit(JobReq { nodes: 2, ..req(1, 16, 0) }, 1).unwrap();
    s.submit(JobReq { nodes: 2, estimate: 50_000, ..req(2, 4, 0) }, 1).unwrap();
    s.submit(JobReq { estimate: 50_000, ..req(3, 2, 0) }, 1).unwrap();
    let p = pass(&mut s, 1);
    assert_eq!(started(&p), vec![3]);
    assert_eq!(p.starts[0].alloc.parts, vec![(1, 2)]);
    assert!(matches!(reason(&p, 1), Reason::Resources { need: 16, .. }));
    assert!(matches!(reason(&p, 2), Reason::Resources { need: 4, .. }));
}

#[test]
fn user_quota_skips_without_blocking() {
    // 1 x 8, strict fifo, user 0 may hold 4 GPUs. Job 0 (u0, 2) starts; job 1 (u0, 4) would
    // make 6: skipped with the quota as reason, and it does not block job 2 (u1, 4), which
    // starts (2 + 4 = 6 of 8). Job 3 (u1, 4) then does not fit: head of the queue.
    let mut s = sched(1, 8, "fifo");
    s.set_quotas(Quotas { user_gpus: [(0, 4)].into(), ..Quotas::default() });
    for (id, g, u) in [(0, 2, 0), (1, 4, 0), (2, 4, 1), (3, 4, 1)] {
        s.submit(req(id, g, u), 0).unwrap();
    }
    let p = pass(&mut s, 0);
    assert_eq!(started(&p), vec![0, 2]);
    assert_eq!(
        reason(&p, 1),
        Reason::Quota { scope: QuotaScope::User, id: 0, holds: 2, limit: 4, need: 4, model: None }
    );
    assert_eq!(reason(&p, 3), Reason::Resources { need: 4, free: 2 });
    assert_eq!(s.user_gpus(0), 2);
    // Job 0 ends: user 0 holds nothing, 4 GPUs are free: job 1 (first in order) takes them.
    s.finish(JobId(0), 10).unwrap();
    let p = pass(&mut s, 10);
    assert_eq!(started(&p), vec![1]);
}

#[test]
fn group_quota_and_default_user_quota() {
    // 2 x 8, fifo+easy. Every user may hold 8 GPUs; group 5 (users 0 and 1) 12 in all.
    // Job 0 (u0, 8) starts: u0 8, g5 8. Job 1 (u0, 1): u0 at 8 -> user quota. Job 2 (u1, 8):
    // group 8 + 8 > 12 -> group quota (it holds 8). Job 3 (u1, 4): group 12 -> starts.
    let mut s = sched(2, 8, "fifo+easy");
    s.set_quotas(Quotas { default_user_gpus: Some(8), group_gpus: [(5, 12)].into(), ..Quotas::default() });
    for (id, g, u) in [(0, 8, 0), (1, 1, 0), (2, 8, 1), (3, 4, 1)] {
        s.submit(JobReq { group: 5, ..req(id, g, u) }, 0).unwrap();
    }
    let p = pass(&mut s, 0);
    assert_eq!(started(&p), vec![0, 3]);
    assert_eq!(
        reason(&p, 1),
        Reason::Quota { scope: QuotaScope::User, id: 0, holds: 8, limit: 8, need: 1, model: None }
    );
    assert_eq!(
        reason(&p, 2),
        Reason::Quota { scope: QuotaScope::Group, id: 5, holds: 8, limit: 12, need: 8, model: None }
    );
}

#[test]
fn array_limits_running_elements() {
    // 1 x 8, fifo+conservative (planned afresh under limits). Array 7 of four 1-GPU elements
    // may run 2 at once: elements 0 and 1 start, 2 and 3 wait on the array's limit; job 4
    // (not in the array) starts beside them.
    let mut s = sched(1, 8, "fifo+conservative");
    s.set_array_limit(7, Some(2));
    for id in 0..4 {
        s.submit(JobReq { array: 7, ..req(id, 1, 0) }, 0).unwrap();
    }
    s.submit(req(4, 1, 0), 0).unwrap();
    let p = pass(&mut s, 0);
    assert_eq!(started(&p), vec![0, 1, 4]);
    assert_eq!(
        reason(&p, 2),
        Reason::Quota { scope: QuotaScope::Array, id: 7, holds: 2, limit: 2, need: 1, model: None }
    );
    s.finish(JobId(0), 5).unwrap();
    assert_eq!(started(&pass(&mut s, 5)), vec![2]);
}

#[test]
fn preemptive_orders_rank_within_quotas() {
    // 1 x 8, las (preemptive), user 0 may hold 4 GPUs. Jobs 0, 1, 2 of u0 with 2 GPUs each:
    // 0 and 1 start (4), 2 is at the quota. The cluster keeps 4 GPUs idle rather than break it.
    let mut s = sched(1, 8, "las");
    s.set_quotas(Quotas { user_gpus: [(0, 4)].into(), ..Quotas::default() });
    for id in 0..3 {
        s.submit(req(id, 2, 0), 0).unwrap();
    }
    let p = pass(&mut s, 0);
    assert_eq!(started(&p), vec![0, 1]);
    assert!(matches!(reason(&p, 2), Reason::Quota { scope: QuotaScope::User, holds: 4, limit: 4, .. }));
    // Much later (3,000 s: jobs 0 and 1 have 6,000 GPU-s, past LAS's first threshold of
    // 3,250), job 3 of u0 arrives. Jobs 2 and 3 have no service: LAS ranks them ahead of 0
    // and 1. Ranked from an empty cluster within u0's 4 GPUs, 2 and 3 run and 0 and 1 are
    // preempted: the quota holds and 4 GPUs stay idle.
    let later = 3_000_000;
    s.submit(req(3, 2, 0), later).unwrap();
    let p = pass(&mut s, later);
    assert_eq!(started(&p), vec![2, 3]);
    assert_eq!(p.preempt, vec![JobId(0), JobId(1)]);
    assert_eq!(s.user_gpus(0), 4);
}

#[test]
fn fair_divides_by_shares() {
    // 1 x 4, fair. User 0 submits jobs 0-3, user 1 jobs 4-7 (1 GPU each); user 1's share is 3.
    // Order: u0 and u1 both hold 0 -> job 0 (earlier); u0 holds 1/1, u1 0/3 -> job 4; u1 1/3
    // -> 5; u1 2/3 -> 6; now u0 1 and u1 3/3 = 1 tie -> the earlier job, 1. The 4 GPUs go to
    // jobs 0, 4, 5, 6: user 1 gets 3 of 4.
    let mut s = sched(1, 4, "fair");
    s.set_quotas(Quotas { user_share: [(1, 3.0)].into(), ..Quotas::default() });
    for id in 0..8 {
        s.submit(JobReq { group: 0, ..req(id, 1, id / 4) }, 0).unwrap();
    }
    assert_eq!(started(&pass(&mut s, 0)), vec![0, 4, 5, 6]);
}

#[test]
fn drf_counts_the_dominant_resource() {
    // 1 node: 8 GPUs, 16 CPUs. User 0: jobs A (0), B (1) of 1 GPU + 8 CPUs; user 1: C, D, E
    // (2, 3, 4) of 2 GPUs + 1 CPU. Strict fair.
    // measure=gpus: A (both 0); u0 1 < u1 0? no: u1 0 -> C; u0 1 < u1 2 -> B, which needs 8
    // CPUs with 7 free: strict order stops. Starts A, C.
    // measure=drf: A (u0 -> max(1/8, 8/16) = 0.5); C (u1 -> 0.25); D (u1 0.25 < 0.5 -> 0.5);
    // tie 0.5: B (earlier) does not fit (6 CPUs free): stops. Starts A, C, D.
    for (policy, want) in [("fair", vec![0, 2]), ("fair:measure=drf", vec![0, 2, 3])] {
        let mut c = ClusterSpec::uniform(1, 8);
        c.nodes[0].cpus = Some(16);
        let mut s = Scheduler::new(&c, Placement::Consolidated, policy.parse().unwrap());
        for (id, g, cpus, u) in [(0, 1, 8, 0), (1, 1, 8, 0), (2, 2, 1, 1), (3, 2, 1, 1), (4, 2, 1, 1)] {
            s.submit(JobReq { cpus, ..req(id, g, u) }, 0).unwrap();
        }
        assert_eq!(started(&pass(&mut s, 0)), want, "{policy}");
    }
}

#[test]
fn priority_fairshare_reads_shares() {
    // 2 x 1 GPU, priority with fair share only. Jobs 0 (u0) and 1 (u1) run 100 s each: equal
    // usage. Then jobs 2 (u0) and 3 (u1) of 2 GPUs each arrive. Without shares both factors
    // are equal and the earlier job (2) goes first; with user 1's share 3, u1's factor is
    // 2^(-0.5 / 0.75) = 0.63 against u0's 2^(-0.5 / 0.25) = 0.25: job 3 goes first.
    for (shares, first) in [(Quotas::default(), 2), (Quotas { user_share: [(1, 3.0)].into(), ..Quotas::default() }, 3)]
    {
        let mut s = sched(2, 1, "priority:age=0,fairshare=1");
        s.set_quotas(shares);
        s.submit(req(0, 1, 0), 0).unwrap();
        s.submit(req(1, 1, 1), 0).unwrap();
        assert_eq!(started(&pass(&mut s, 0)), vec![0, 1]);
        s.finish(JobId(0), 100_000).unwrap();
        s.finish(JobId(1), 100_000).unwrap();
        s.submit(JobReq { submit: 100_000, ..req(2, 2, 0) }, 100_000).unwrap();
        s.submit(JobReq { submit: 100_001, ..req(3, 2, 1) }, 100_001).unwrap();
        assert_eq!(started(&pass(&mut s, 100_001)), vec![first]);
    }
}
