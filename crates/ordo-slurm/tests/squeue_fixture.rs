//! The driver's order on a real `squeue --json` document captured from Slurm 22.05 (the dev
//! cluster: n1, n2 with 8 GPUs, n3 with 4; jobs 1-3 running, 4 and 5 pending).

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{ClusterSpec, NodeSpec, Placement, PolicySpec};
use ordo_slurm::order::{assign_priorities, cluster_from_nodes, intended_order};
use ordo_slurm::parse::{parse_sinfo, parse_squeue_json, JobState};

const DOC: &str = include_str!("data/squeue-22.05.json");

fn cluster() -> ClusterSpec {
    let nodes = parse_sinfo("n1|gpu:8|2|4000|mixed\nn2|gpu:8|2|4000|mixed\nn3|gpu:4|2|4000|mixed\n").unwrap();
    cluster_from_nodes(&nodes).unwrap()
}

#[test]
fn reads_jobs_allocations_and_requests() {
    let jobs = parse_squeue_json(DOC, "fixture").unwrap();
    assert_eq!(jobs.len(), 5);
    let j1 = &jobs[0];
    assert_eq!((j1.id, &j1.state, j1.gpus, j1.time_limit_min), (1, &JobState::Running, 8, Some(2)));
    assert_eq!(j1.alloc, vec![("n1".to_string(), 8)]);
    assert_eq!(jobs[2].user, "nobody");
    assert_eq!(jobs[2].alloc, vec![("n3".to_string(), 4)]);
    let j5 = &jobs[4];
    assert_eq!((j5.state.clone(), j5.gpus, j5.reason.as_str()), (JobState::Pending, 8, "Priority"));
    assert!(j5.orderable());
}

#[test]
fn orders_the_queue_with_the_core_policies() {
    let jobs = parse_squeue_json(DOC, "fixture").unwrap();
    let now = jobs[0].submit + 5;
    let sjf: PolicySpec = "sjf".parse().unwrap();
    let i = intended_order(&jobs, &cluster(), Placement::Consolidated, &sjf, now);
    assert_eq!(i.running, 3);
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let ids: Vec<u64> = i.order.iter().map(|r| r.job).collect();
    assert_eq!(ids, vec![4, 5], "equal limits: submit order");
    assert!(!i.order[0].starts_now && i.order[0].reason.contains("waits for resources"), "{:?}", i.order[0]);
    assert!(i.order[1].reason.contains("behind job 4"), "{:?}", i.order[1]);

    // With job 3 gone, n3's four GPUs are free: the 4-GPU job starts now under any order, and
    // sgf puts it first even when it was submitted last.
    let mut fewer: Vec<_> = jobs.iter().filter(|j| j.id != 3).cloned().collect();
    fewer.iter_mut().find(|j| j.id == 4).unwrap().submit += 100;
    let sgf: PolicySpec = "sgf".parse().unwrap();
    let i = intended_order(&fewer, &cluster(), Placement::Consolidated, &sgf, now + 200);
    assert_eq!(i.order.iter().map(|r| r.job).collect::<Vec<_>>(), vec![4, 5]);
    assert!(i.order[0].starts_now && i.order[0].reason.contains("n3:4"), "{:?}", i.order[0]);
    let fifo: PolicySpec = "fifo".parse().unwrap();
    let i = intended_order(&fewer, &cluster(), Placement::Consolidated, &fifo, now + 200);
    assert_eq!(i.order.iter().map(|r| r.job).collect::<Vec<_>>(), vec![5, 4], "fifo: job 5 was submitted first");

    // Priorities: Slurm's basic priorities already descend in the order 4, 5 (no change); the
    // order 5, 4 reverses them, so both get new values from the top down.
    let cur: Vec<(u64, u64)> = i.order.iter().map(|r| (r.job, r.priority)).collect();
    assert_eq!(cur, vec![(5, 4294901755), (4, 4294901756)]);
    assert_eq!(assign_priorities(&cur, 1000), vec![(5, 4294901755, 1000), (4, 4294901756, 999)]);
    let rev: Vec<(u64, u64)> = cur.iter().rev().copied().collect();
    assert!(assign_priorities(&rev, 1000).is_empty());
}

#[test]
fn held_jobs_and_jobs_that_never_fit_are_left_alone() {
    let mut jobs = parse_squeue_json(DOC, "fixture").unwrap();
    jobs[3].priority = 0;
    jobs[3].reason = "JobHeldUser".into();
    jobs[4].gpus = 64;
    let sjf: PolicySpec = "sjf".parse().unwrap();
    let i = intended_order(&jobs, &cluster(), Placement::Pooled, &sjf, jobs[0].submit);
    assert!(i.order.is_empty());
    assert_eq!(i.left_alone.len(), 2);
    assert!(i.left_alone[0].1.contains("held") && i.left_alone[1].1.contains("64 GPUs"), "{:?}", i.left_alone);
}

#[test]
fn running_jobs_on_unknown_nodes_are_counted_with_a_warning() {
    let jobs = parse_squeue_json(DOC, "fixture").unwrap();
    let other = ClusterSpec {
        nodes: (0..3)
            .map(|k| NodeSpec { name: format!("x{k}"), gpus: [8, 8, 4][k], cpus: None, mem_mib: None, gpu_model: None })
            .collect(),
    };
    let sjf: PolicySpec = "sjf".parse().unwrap();
    let i = intended_order(&jobs, &other, Placement::Consolidated, &sjf, jobs[0].submit);
    assert_eq!(i.running, 3);
    assert_eq!(i.warnings.len(), 3, "{:?}", i.warnings);
    assert!(i.order.iter().all(|r| !r.starts_now), "the cluster is still full");
}
