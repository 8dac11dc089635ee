//! EASY backfill on a typed cluster through the indexed scan (`fifo+easy`, no explanations),
//! checked against the explaining scan and against decisions worked out by hand.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::scheduler::JobReq;
use ordo_core::{ClusterSpec, GpuNeeds, JobId, ModelPick, Placement, Scheduler, Speeds};

fn start_all(s: &mut Scheduler, now: i64) -> Vec<JobId> {
    let plan = s.schedule(now, false);
    assert_eq!(plan.starts, s.schedule(now, true).starts, "the indexed scan decided unlike the explaining one");
    for st in &plan.starts {
        s.start(st.job, &st.alloc, now).unwrap();
    }
    s.sanity_check().unwrap();
    plan.starts.iter().map(|st| st.job).collect()
}

/// A job refused for harming the head's reservation is refused with every job like it, until a
/// start changes where such a job would go: then one like it may start.
#[test]
fn a_start_lets_a_job_like_a_refused_one_backfill() {
    // Pools in cluster order: h100 (1 node x 4 GPUs), then a100 (1 x 4); `first` places a
    // flexible job in the first pool with room.
    let c = ClusterSpec::parse("1x4:h100,1x4:a100").unwrap();
    let mut s =
        Scheduler::typed(&c, Placement::Pooled, "fifo+easy".parse().unwrap(), &Speeds::default(), ModelPick::First)
            .unwrap();
    let on =
        |s: &Scheduler, m: &str| s.eligibility(&GpuNeeds { models: vec![m.into()], ..GpuNeeds::default() }).unwrap();
    let (h100, a100) = (on(&s, "h100"), on(&s, "a100"));
    let job = |id: u32, t: i64, gpus: u32, est: i64, elig| JobReq { elig, ..JobReq::new(JobId(id), t, gpus, est) };
    let any = JobReq::new(JobId(0), 0, 1, 1).elig;
    // t=0: r1 (h100 only, 2 GPUs, 100 s) and r2 (a100 only, 3 GPUs) start: 2 h100 and 1 a100
    // GPUs are left.
    s.submit(job(1, 0, 2, 100, h100), 0).unwrap();
    s.submit(job(2, 0, 3, 100, a100), 0).unwrap();
    assert_eq!(start_all(&mut s, 0), [JobId(1), JobId(2)]);
    // The head, job 3, needs 4 h100 GPUs: reserved at t=100, when r1 ends. Behind it:
    // - 4, flexible, 1 GPU, 1000 s: `first` puts it on h100, and at t=100 only 3 h100 GPUs
    //   would be free: refused;
    // - 5, h100 only, 2 GPUs, 50 s: ends before t=100, starts (h100 is now full);
    // - 6, like 4: h100 has no room now, so it goes to a100, which the head does not need:
    //   starts.
    s.submit(job(3, 1, 4, 10, h100), 1).unwrap();
    s.submit(job(4, 2, 1, 1000, any), 2).unwrap();
    s.submit(job(5, 3, 2, 50, h100), 3).unwrap();
    s.submit(job(6, 4, 1, 1000, any), 4).unwrap();
    assert_eq!(start_all(&mut s, 5), [JobId(5), JobId(6)]);
}
