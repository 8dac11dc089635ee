//! `Scheduler::withdraw`: a waiting job taken out (cancelled or held by its owner) leaves the
//! scheduler exactly as if it had never been submitted, under every policy, without the
//! rebuild of the whole scheduler that the server used to make for each such change.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::scheduler::JobReq;
use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, Scheduler};
use proptest::prelude::*;

mod common;

const POLICIES: [&str; 16] = [
    "fifo",
    "sjf",
    "sgf",
    "fifo+easy",
    "sjf+easy",
    "fifo+conservative",
    "sjf+conservative",
    "srtf",
    "las",
    "las:thresholds=100,promote=2",
    "gittins",
    "priority",
    "fair",
    "qssf",
    "rr:quantum=50",
    "fifo+maxwait=300",
];

fn sched(policy: &str, nodes: u32) -> Scheduler {
    Scheduler::new(&ClusterSpec::uniform(nodes, 4), Placement::Consolidated, policy.parse::<PolicySpec>().unwrap())
}

fn job(id: u32, gpus: u32, est: i64, user: u32) -> JobReq {
    JobReq { user, group: user % 2, ..JobReq::new(JobId(id), 0, gpus, est) }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Submitted at once, some withdrawn, then scheduled: the same plans, pass after pass, as a
    /// scheduler that never saw the withdrawn jobs. (Under conservative backfill a withdrawal
    /// remakes the standing reservations in policy order, as an early end does, where the other
    /// scheduler made them one by one in submit order: the same only where the two orders are
    /// the same, `fifo+conservative`; `sjf+conservative` is held to the invariants below.)
    #[test]
    fn withdrawn_as_never_submitted(
        jobs in prop::collection::vec((1u32..=4, 10i64..400, 0u32..4), 1..30),
        out in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        p in 0usize..POLICIES.len(),
    ) {
        let policy = POLICIES[p];
        prop_assume!(policy != "sjf+conservative");
        let gone: std::collections::BTreeSet<u32> = out.iter().map(|i| i.index(jobs.len()) as u32).collect();
        let mut a = sched(policy, 3);
        let mut b = sched(policy, 3);
        for (i, &(g, e, u)) in jobs.iter().enumerate() {
            a.submit(job(i as u32, g, e, u), 0).unwrap();
            if !gone.contains(&(i as u32)) {
                b.submit(job(i as u32, g, e, u), 0).unwrap();
            }
        }
        for &j in &gone {
            a.withdraw(JobId(j), 0).unwrap();
            prop_assert!(a.withdraw(JobId(j), 0).is_err(), "withdrawn twice");
        }
        a.sanity_check().unwrap();
        prop_assert_eq!(a.waiting_len(), b.waiting_len());
        // Pass after pass (each job runs its estimate), both decide the same.
        let mut now = 0;
        for _ in 0..60 {
            let pa = common::pass_after(&mut a, now, true);
            let pb = common::pass_after(&mut b, now, true);
            prop_assert_eq!(&pa.starts, &pb.starts, "{} at {}", policy, now);
            prop_assert_eq!(&pa.preempt, &pb.preempt, "{} at {}", policy, now);
            prop_assert!(pa.starts.iter().all(|s| !gone.contains(&s.job.0)));
            if a.waiting_len() == 0 && a.running_len() == 0 {
                break;
            }
            now += 25;
            for id in 0..jobs.len() as u32 {
                if let Some(st) = a.running_start(JobId(id)) {
                    if now - st >= jobs[id as usize].1 {
                        a.finish(JobId(id), now).unwrap();
                        b.finish(JobId(id), now).unwrap();
                    }
                }
            }
        }
    }

    /// Withdrawn while others run, wait and are preempted: the invariants hold and the plans
    /// stay those of the explaining pass (checked in `pass_after`), and the job never starts.
    #[test]
    fn withdrawn_midway_keeps_the_invariants(
        jobs in prop::collection::vec((1u32..=4, 10i64..400, 0u32..4), 2..25),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..10),
        p in 0usize..POLICIES.len(),
    ) {
        let policy = POLICIES[p];
        let mut s = sched(policy, 2);
        let mut gone = std::collections::BTreeSet::new();
        let mut now = 0;
        let mut next = 0usize;
        let mut picks = picks.into_iter();
        for round in 0..40 {
            // Two arrivals per round, then perhaps a withdrawal, then a pass.
            for _ in 0..2 {
                if let Some(&(g, e, u)) = jobs.get(next) {
                    s.submit(JobReq { submit: now, ..job(next as u32, g, e, u) }, now).unwrap();
                    next += 1;
                }
            }
            if round % 2 == 1 {
                if let Some(i) = picks.next() {
                    let j = i.index(next.max(1)) as u32;
                    if s.withdraw(JobId(j), now).is_ok() {
                        gone.insert(j);
                    }
                }
            }
            let plan = common::pass_after(&mut s, now, round % 3 == 0);
            prop_assert!(plan.starts.iter().all(|st| !gone.contains(&st.job.0)), "{} started a withdrawn job", policy);
            now += 20;
            for id in 0..next as u32 {
                if let Some(st) = s.running_start(JobId(id)) {
                    if now - st >= jobs[id as usize].1 {
                        s.finish(JobId(id), now).unwrap();
                    }
                }
            }
        }
    }
}
