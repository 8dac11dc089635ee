//! `fair` converges to equal shares: two users with equal backlogs on one 4-GPU node each hold
//! 2 GPUs once the first user's initial wave ends.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::SECOND;
use ordo_core::{ClusterSpec, Job, JobId, Placement, PolicySpec, Workload};
use ordo_sim::engine::validate;
use ordo_sim::{simulate, SimConfig};

#[test]
fn fair_converges_to_equal_shares_on_two_user_backlog() {
    let mut w = Workload::default();
    let a = w.user_index("a");
    let b = w.user_index("b");
    let g = w.group_index("g");
    for i in 0..40u32 {
        let (user, submit) = if i < 20 { (a, 0) } else { (b, SECOND) };
        w.jobs.push(Job {
            id: JobId(i),
            name: format!("j{i}"),
            user,
            group: g,
            submit,
            gpus: 1,
            cpus: None,
            mem_mib: None,
            runtime: 100 * SECOND,
            estimate: None,
            priority: None,
            gpu_milli: None,
            queue: None,
            ..Job::default()
        });
    }
    w.renumber();
    let cluster = ClusterSpec::parse("1x4").unwrap();
    let policy: PolicySpec = "fair".parse().unwrap();
    let mut cfg = SimConfig::new(cluster.clone(), Placement::Pooled, policy);
    cfg.check_invariants = true;
    let out = simulate(&w, &cfg).unwrap();
    validate(&w, &cluster, &out, 0).unwrap();
    assert_eq!(out.records.len(), 40);
    // GPUs each user holds at instant t, from the run segments.
    let held = |user: u32, t: i64| -> u32 {
        out.records
            .iter()
            .filter(|r| w.jobs[r.job.idx()].user == user)
            .flat_map(|r| r.segments.iter().map(move |s| (s, r.gpus)))
            .filter(|(s, _)| s.start <= t && t < s.end)
            .map(|(_, g)| g)
            .sum()
    };
    // The first wave is user a's alone (b had not submitted).
    assert_eq!((held(a, 0), held(b, 50 * SECOND)), (4, 0));
    // Every second of [100 s, 400 s): 2 GPUs each.
    for t in (100..400).map(|s| s * SECOND) {
        assert_eq!((held(a, t), held(b, t)), (2, 2), "at {} s", t / SECOND);
    }
    // Under fifo, a's backlog would keep all 4 GPUs until it is done.
    let fifo = SimConfig::new(cluster, Placement::Pooled, "fifo".parse().unwrap());
    let out_fifo = simulate(&w, &fifo).unwrap();
    let first_b = out_fifo.records.iter().filter(|r| w.jobs[r.job.idx()].user == b).map(|r| r.start).min();
    assert_eq!(first_b, Some(500 * SECOND));
}
