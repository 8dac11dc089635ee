//! Fractional GPUs, CPUs and memory through the scheduler: plans, reasons and reservations.
//! Each expectation is worked out by hand in the comments.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::scheduler::{JobReq, Reason, SubmitError};
use ordo_core::{ClusterSpec, JobId, Placement, Scheduler};

fn cluster(nodes: u32, gpus: u32, cpus: Option<u32>) -> ClusterSpec {
    let mut c = ClusterSpec::uniform(nodes, gpus);
    for n in &mut c.nodes {
        n.cpus = cpus;
    }
    c
}

fn req(id: u32, gpus: u32, milli: Option<u32>, cpus: u32, est: i64) -> JobReq {
    JobReq { gpu_milli: milli, cpus, ..JobReq::new(JobId(id), id as i64, gpus, est) }
}

fn run_plan(s: &mut Scheduler, now: i64) -> ordo_core::Plan {
    let plan = s.schedule(now, true);
    assert_eq!(plan.starts, s.schedule(now, false).starts, "explain decided differently");
    for st in &plan.starts {
        s.start(st.job, &st.alloc, now).unwrap();
    }
    s.sanity_check().unwrap();
    plan
}

#[test]
fn easy_says_which_resource_blocks() {
    // 2 nodes x 2 GPUs x 8 CPUs. a and b take 8 CPUs each (one per node): every node still has
    // a free GPU but no CPU. c (4 CPUs) cannot start; d, a 500-milli share with no CPU ask, can.
    let mut s = Scheduler::new(&cluster(2, 2, Some(8)), Placement::Consolidated, "fifo+easy".parse().unwrap());
    s.submit(req(0, 1, None, 8, 100), 0).unwrap();
    s.submit(req(1, 1, None, 8, 100), 0).unwrap();
    assert_eq!(run_plan(&mut s, 0).starts.len(), 2);
    s.submit(req(2, 1, None, 4, 50), 1).unwrap();
    s.submit(req(3, 1, Some(500), 0, 500), 1).unwrap();
    let plan = run_plan(&mut s, 1);
    assert_eq!(plan.starts.iter().map(|st| st.job).collect::<Vec<_>>(), vec![JobId(3)]);
    match &plan.waiting[0] {
        (JobId(2), Reason::NodeFit { need: 1, why }) => {
            assert!(why.contains("not enough free CPU on any node that has a free GPU"), "{why}")
        }
        other => panic!("unexpected reason {other:?}"),
    }
    // More CPUs than any node: refused at submit with the reason.
    match s.submit(req(4, 1, None, 9, 10), 2) {
        Err(SubmitError::NeverPlaced { why, .. }) => assert!(why.contains("CPU"), "{why}"),
        other => panic!("expected NeverPlaced, got {other:?}"),
    }
}

#[test]
fn conservative_reserves_shares_honestly() {
    // One GPU. w (whole, est 100) runs. x (300) and y (600) cannot start: the GPU is held
    // whole. Both are reserved at t=100 (their shares fit together: 900 <= 1000); z (200) would
    // make 1100 from t=100, so it is reserved when x or y is due to end: x's estimate is 50, so
    // t=150.
    let mut s = Scheduler::new(&cluster(1, 1, None), Placement::Pooled, "fifo+conservative".parse().unwrap());
    s.submit(req(0, 1, None, 0, 100), 0).unwrap();
    run_plan(&mut s, 0);
    s.submit(req(1, 1, Some(300), 0, 50), 1).unwrap();
    s.submit(req(2, 1, Some(600), 0, 200), 1).unwrap();
    s.submit(req(3, 1, Some(200), 0, 10), 1).unwrap();
    let plan = run_plan(&mut s, 1);
    assert!(plan.starts.is_empty());
    let res: Vec<(JobId, Reason)> = plan.waiting.clone();
    assert_eq!(
        res,
        vec![
            (JobId(1), Reason::Reservation { start: 100 }),
            (JobId(2), Reason::Reservation { start: 100 }),
            (JobId(3), Reason::Reservation { start: 150 }),
        ]
    );
    // At t=100 w ends as estimated: x and y start on the same GPU.
    s.finish(JobId(0), 100).unwrap();
    let plan = run_plan(&mut s, 100);
    assert_eq!(plan.starts.len(), 2);
    let g = |k: usize| plan.starts[k].alloc.detail.as_ref().unwrap().gpu_ids[0][0];
    assert_eq!(g(0), g(1));
    assert_eq!(s.capacity().gpu_used(0, 0), 900);
    assert_eq!(&*s.capacity().free(), &[0]);
}
