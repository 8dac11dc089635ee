//! `las` with promotion: a waiting job's key changes once while it waits, when its promotion
//! falls due. The scheduler keeps waiting jobs sorted between passes and finds promotions from
//! an index; these tests pin the instant by hand, with and without `advance` (the pass must
//! find a promotion lazily when `advance` was not called).

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::scheduler::JobReq;
use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, Scheduler};

const S: i64 = 1000;

mod common;
use common::pass_after as pass;

fn started(p: &ordo_core::Plan) -> Vec<u32> {
    p.starts.iter().map(|s| s.job.0).collect()
}

fn preempted(p: &ordo_core::Plan) -> Vec<u32> {
    p.preempt.iter().map(|j| j.0).collect()
}

#[test]
fn a_starved_job_is_promoted_at_its_instant() {
    for advance in [true, false] {
        // One GPU; queue 0 below 100 GPU-seconds of service; a job in a lower queue that has
        // waited twice its run since its base goes back to queue 0.
        let policy: PolicySpec = "las:thresholds=100,promote=2".parse().unwrap();
        let mut s = Scheduler::new(&ClusterSpec::uniform(1, 1), Placement::Pooled, policy);
        // A at 0: runs.
        s.submit(JobReq::new(JobId(0), 0, 1, 10_000 * S), 0).unwrap();
        let p = pass(&mut s, 0, advance);
        assert_eq!(started(&p), vec![0]);
        // A crosses 100 GPU-s at 100 s (queue 1). B arrives at 150 s in queue 0: it preempts A.
        // A has run 150 s since its base and never starved: promoted at 150 + 2 x 150 = 450 s.
        let p = pass(&mut s, 100 * S, advance);
        assert!(p.starts.is_empty() && p.preempt.is_empty());
        s.submit(JobReq::new(JobId(1), 150 * S, 1, 10_000 * S), 150 * S).unwrap();
        let p = pass(&mut s, 150 * S, advance);
        assert_eq!((started(&p), preempted(&p)), (vec![1], vec![0]));
        // B crosses 100 GPU-s at 250 s: queue 1, where it runs ahead of A (running first).
        assert_eq!(p.wake_at, Some(250 * S));
        let p = pass(&mut s, 250 * S, advance);
        assert!(p.starts.is_empty() && p.preempt.is_empty());
        // The next instant a key changes with no event: A's promotion.
        assert_eq!(p.wake_at, Some(450 * S), "advance: {advance}");
        // Not promoted a millisecond before; promoted then, ahead of B in queue 1.
        let p = pass(&mut s, 450 * S - 1, advance);
        assert!(p.starts.is_empty() && p.preempt.is_empty());
        let p = pass(&mut s, 450 * S, advance);
        assert_eq!((started(&p), preempted(&p)), (vec![0], vec![1]), "advance: {advance}");
    }
}
