//! The driver's order: on a real `squeue --json` document captured from Slurm 22.05 (the dev
//! cluster: n1, n2 with 8 GPUs, n3 with 4; jobs 1-3 running, 4 and 5 pending), and on small
//! queues worked out by hand for partitions, CPUs and job arrays.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{ClusterSpec, NodeSpec, Placement, PolicySpec};
use ordo_slurm::job::{ArrayPart, JobState, SlurmJob, SlurmNode};
use ordo_slurm::json::parse_jobs;
use ordo_slurm::order::{intended_order, PlanSpec, Skip};
use ordo_slurm::squeue::parse_sinfo;

const DOC: &str = include_str!("data/squeue-22.05.json");

/// The dev cluster: n1, n2 (8 GPUs) in `gpu`; n3 (4 GPUs) in `gpu` and `other`; 2 CPUs each.
fn nodes() -> Vec<SlurmNode> {
    parse_sinfo(
        "n1|gpu:8|2|4000|mixed|gpu|(null)\nn2|gpu:8|2|4000|mixed|gpu|(null)\nn3|gpu:4|2|4000|mixed|gpu|(null)\nn3|gpu:4|2|4000|mixed|other|(null)\n",
    )
    .unwrap()
}

fn spec(policy: &str) -> PlanSpec {
    PlanSpec {
        policy: policy.parse::<PolicySpec>().unwrap(),
        placement: Placement::Consolidated,
        partitions: None,
        model_memory: false,
        cluster: None,
        topology: None,
    }
}

fn ids(i: &ordo_slurm::Intended) -> Vec<u64> {
    i.order.iter().map(|r| r.job).collect()
}

#[test]
fn reads_jobs_allocations_and_requests() {
    let jobs = parse_jobs(DOC, "fixture").unwrap();
    assert_eq!(jobs.len(), 5);
    let j1 = &jobs[0];
    assert_eq!((j1.id, &j1.state, j1.gpus, j1.time_limit_min), (1, &JobState::Running, 8, Some(2)));
    assert_eq!(j1.alloc, vec![("n1".to_string(), 8)]);
    assert_eq!(jobs[2].user, "nobody");
    assert_eq!(jobs[2].alloc, vec![("n3".to_string(), 4)]);
    let j5 = &jobs[4];
    assert_eq!((j5.state.clone(), j5.gpus, j5.cpus, j5.reason.as_str()), (JobState::Pending, 8, 2, "Priority"));
    assert!(j5.orderable());
}

#[test]
fn orders_the_queue_with_the_core_policies() {
    let jobs = parse_jobs(DOC, "fixture").unwrap();
    let now = jobs[0].submit + 5;
    let i = intended_order(&jobs, &nodes(), &spec("sjf"), now, &Skip::new());
    assert_eq!(i.running, 3);
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    assert_eq!(ids(&i), vec![4, 5], "equal limits: submit order");
    assert!(!i.order[0].starts_now && i.order[0].reason.contains("waits for resources"), "{:?}", i.order[0]);
    assert!(i.order[1].reason.contains("behind job 4"), "{:?}", i.order[1]);

    // With job 3 gone, n3's four GPUs are free: the 4-GPU job starts now under any order, and
    // sgf puts it first even when it was submitted last.
    let mut fewer: Vec<_> = jobs.iter().filter(|j| j.id != 3).cloned().collect();
    fewer.iter_mut().find(|j| j.id == 4).unwrap().submit += 100;
    let i = intended_order(&fewer, &nodes(), &spec("sgf"), now + 200, &Skip::new());
    assert_eq!(ids(&i), vec![4, 5]);
    assert!(i.order[0].starts_now && i.order[0].reason.contains("n3:4"), "{:?}", i.order[0]);
    let i = intended_order(&fewer, &nodes(), &spec("fifo"), now + 200, &Skip::new());
    assert_eq!(ids(&i), vec![5, 4], "fifo: job 5 was submitted first");
}

#[test]
fn held_jobs_jobs_that_never_fit_and_skipped_jobs_are_left_alone() {
    let mut jobs = parse_jobs(DOC, "fixture").unwrap();
    jobs[3].priority = 0;
    jobs[3].reason = "JobHeldUser".into();
    jobs[4].gpus = 64;
    let i = intended_order(&jobs, &nodes(), &spec("sjf"), jobs[0].submit, &Skip::new());
    assert!(i.order.is_empty());
    assert_eq!(i.left_alone.len(), 2);
    assert!(i.left_alone[0].1.contains("held") && i.left_alone[1].1.contains("64 GPUs"), "{:?}", i.left_alone);
    let jobs = parse_jobs(DOC, "fixture").unwrap();
    let skip = Skip::from([(4, "set by hand".to_string())]);
    let i = intended_order(&jobs, &nodes(), &spec("sjf"), jobs[0].submit, &skip);
    assert_eq!(ids(&i), vec![5]);
    assert_eq!(i.left_alone, vec![(4, "set by hand".to_string())]);
}

#[test]
fn running_jobs_on_unknown_nodes_are_counted_with_a_warning() {
    let jobs = parse_jobs(DOC, "fixture").unwrap();
    let other = ClusterSpec { nodes: (0..3).map(|k| NodeSpec::new(format!("x{k}"), [8, 8, 4][k])).collect() };
    let s = PlanSpec { cluster: Some(other), ..spec("sjf") };
    let i = intended_order(&jobs, &[], &s, jobs[0].submit, &Skip::new());
    assert_eq!(i.running, 3);
    assert_eq!(i.warnings.len(), 3, "{:?}", i.warnings);
    assert!(i.order.iter().all(|r| !r.starts_now), "the cluster is still full");
}

/// A job of the test queues: `gpus` GPUs, 1 CPU, `limit` minutes, in `parts`.
fn job(id: u64, state: JobState, gpus: u32, limit: u64, parts: &[&str]) -> SlurmJob {
    SlurmJob {
        id,
        state,
        priority: 1000 - id,
        nice: 0,
        time_limit_min: Some(limit),
        submit: 1_000 + id as i64,
        start: 1_000,
        user: "u".into(),
        account: "a".into(),
        partitions: parts.iter().map(|p| p.to_string()).collect(),
        gpus,
        cpus: 1,
        mem_mib: 100,
        alloc: Vec::new(),
        reason: "Priority".into(),
        array: None,
        gpu_types: Vec::new(),
        constraint: None,
        switches: 0,
        switch_wait_s: 0,
    }
}

fn running(id: u64, gpus: u32, node: &str, part: &str) -> SlurmJob {
    SlurmJob { alloc: vec![(node.to_string(), gpus)], ..job(id, JobState::Running, gpus, 60, &[part]) }
}

/// Issue 18's case: job 11 may only use partition `other` (node n3), where job 10 of partition
/// `gpu` holds all four GPUs. Planned on the whole cluster, sjf ranked 11 first and said it
/// "starts now" (on n1); planned per partition, 11 waits for n3 and 12 (partition gpu) is the
/// one that starts now.
#[test]
fn a_job_is_ordered_only_on_its_partitions_nodes() {
    let jobs = vec![
        running(10, 4, "n3", "gpu"),
        job(11, JobState::Pending, 1, 1, &["other"]),
        job(12, JobState::Pending, 8, 10, &["gpu"]),
    ];
    let i = intended_order(&jobs, &nodes(), &spec("sjf"), 2_000, &Skip::new());
    assert_eq!(i.running, 1);
    let r11 = i.order.iter().find(|r| r.job == 11).unwrap();
    let r12 = i.order.iter().find(|r| r.job == 12).unwrap();
    assert!(!r11.starts_now && r11.reason.starts_with("in other: first in line; waits for resources"), "{r11:?}");
    assert!(r12.starts_now && r12.reason.contains("fits: n1:8"), "{r12:?}");
    assert_eq!(r11.partition, "other");
    // The first of each partition comes first, partitions by name: gpu's 12, then other's 11.
    assert_eq!(ids(&i), vec![12, 11]);

    // Driving only `other`: n3 only, with job 10 (partition gpu) counted as running there; job
    // 12 belongs to another driver.
    let s = PlanSpec { partitions: Some(vec!["other".into()]), ..spec("sjf") };
    let i = intended_order(&jobs, &nodes(), &s, 2_000, &Skip::new());
    assert_eq!((ids(&i), i.running, i.not_driven), (vec![11], 1, 1));
    assert_eq!(i.cluster, "other 1x4");
    assert!(!i.order[0].starts_now, "n3 is full: {:?}", i.order[0]);

    // A job listing both partitions belongs to the driver of the first one.
    let both = vec![job(13, JobState::Pending, 1, 5, &["gpu", "other"])];
    let i = intended_order(&both, &nodes(), &s, 2_000, &Skip::new());
    assert_eq!((i.order.len(), i.not_driven), (0, 1));
    let s = PlanSpec { partitions: Some(vec!["gpu".into()]), ..spec("sjf") };
    let i = intended_order(&both, &nodes(), &s, 2_000, &Skip::new());
    assert_eq!(ids(&i), vec![13]);
}

/// Three nodes of 2 CPUs: at most six 1-CPU jobs run at once, however many GPUs are free.
#[test]
fn cpus_limit_what_starts() {
    let jobs: Vec<SlurmJob> = (1..=8).map(|k| job(k, JobState::Pending, 1, 5, &["gpu"])).collect();
    let i = intended_order(&jobs, &nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert_eq!(i.order.iter().filter(|r| r.starts_now).count(), 6);
    assert!(i.order[6].reason.contains("CPU"), "{:?}", i.order[6]);
    // Memory is modelled only where Slurm treats it as consumable: 3000 MiB jobs on 4000 MiB
    // nodes then go one per node.
    let big: Vec<SlurmJob> = jobs.iter().map(|j| SlurmJob { mem_mib: 3000, ..j.clone() }).collect();
    let s = PlanSpec { model_memory: true, ..spec("fifo") };
    let i = intended_order(&big, &nodes(), &s, 2_000, &Skip::new());
    assert_eq!(i.order.iter().filter(|r| r.starts_now).count(), 3);
    let i = intended_order(&big, &nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert_eq!(i.order.iter().filter(|r| r.starts_now).count(), 6);
}

/// A pending array of 50 tasks of 2 GPUs is one record at one priority, but it is 50 jobs to
/// the plan: with 20 GPUs and 6 CPUs free, 6 of its tasks start now. Its throttle (`%5` with two
/// tasks running) leaves three that may start.
#[test]
fn array_tasks_are_planned_one_by_one() {
    let array = SlurmJob {
        array: Some(ArrayPart { array_job_id: 20, task: None, tasks: 50, throttle: None }),
        ..job(20, JobState::Pending, 2, 3, &["gpu"])
    };
    let short = job(21, JobState::Pending, 1, 1, &["gpu"]);
    let jobs = vec![array.clone(), short.clone()];
    let i = intended_order(&jobs, &nodes(), &spec("sjf"), 2_000, &Skip::new());
    assert_eq!(ids(&i), vec![21, 20], "sjf: the 1-minute job first, then the array");
    assert_eq!((i.order[1].tasks, i.order[1].starts_now), (50, true));
    // Under fifo (the array was submitted first) the array's tasks take the six CPUs and the
    // other job waits behind its first waiting task.
    let i = intended_order(&jobs, &nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert_eq!(ids(&i), vec![20, 21]);
    assert!(!i.order[1].starts_now && i.order[1].reason.contains("behind job 20"), "{:?}", i.order[1]);

    let throttled = SlurmJob {
        array: Some(ArrayPart { array_job_id: 20, task: None, tasks: 50, throttle: Some(5) }),
        ..array.clone()
    };
    let task = |id, t, node: &str| SlurmJob {
        array: Some(ArrayPart { array_job_id: 20, task: Some(t), tasks: 1, throttle: Some(5) }),
        ..running(id, 2, node, "gpu")
    };
    let jobs = vec![throttled.clone(), task(30, 0, "n1"), task(31, 1, "n2")];
    let i = intended_order(&jobs, &nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert_eq!(i.running, 2);
    assert!(i.order[0].starts_now && i.order[0].reason.contains("array: 50 tasks"), "{:?}", i.order[0]);
    // Five running: none may start; the record is left alone until one ends.
    let five: Vec<SlurmJob> = std::iter::once(throttled)
        .chain((0..5).map(|t| task(30 + t as u64, t, ["n1", "n2", "n3", "n1", "n2"][t as usize])))
        .collect();
    let i = intended_order(&five, &nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert!(i.order.is_empty());
    assert!(i.left_alone[0].1.contains("throttle"), "{:?}", i.left_alone);
}

/// The dev cluster with typed GPUs, as `sinfo` prints it (n1: 8 a100, features ib and nvme;
/// n2: 8 a100, ib; n3: 4 v100).
fn typed_nodes() -> Vec<SlurmNode> {
    parse_sinfo(
        "n1|gpu:a100:8|2|4000|mixed|gpu|ib,nvme\nn2|gpu:a100:8|2|4000|mixed|gpu|ib\n\
         n3|gpu:v100:4|2|4000|mixed|gpu|(null)\nn3|gpu:v100:4|2|4000|mixed|other|(null)\n",
    )
    .unwrap()
}

fn typed(id: u64, gpus: u32, limit: u64, types: &[&str], constraint: Option<&str>) -> SlurmJob {
    SlurmJob {
        gpu_types: types.iter().map(|t| t.to_string()).collect(),
        constraint: constraint.map(String::from),
        ..job(id, JobState::Pending, gpus, limit, &["gpu"])
    }
}

fn ranked(i: &ordo_slurm::Intended, id: u64) -> &ordo_slurm::Ranked {
    i.order.iter().find(|r| r.job == id).unwrap_or_else(|| panic!("job {id} ranked: {i:?}"))
}

/// Issue 30: both a100 nodes are full, n3's four v100 are free. The jobs that ask for an a100
/// (`--gres=gpu:a100:2`) or for a feature only a100 nodes have (`--constraint=ib`,
/// `[ib|nvme]`) wait, with the constraint named, even though sjf ranks them first; the v100
/// job and an untyped one take n3 (EASY backfill: they delay no one). Planned without types (as
/// before), the a100 job "started now" on n3's v100s.
#[test]
fn typed_jobs_are_planned_only_on_nodes_that_serve_them() {
    let jobs = vec![
        SlurmJob { gpu_types: vec!["a100".into()], ..running(1, 8, "n1", "gpu") },
        SlurmJob { gpu_types: vec!["a100".into()], ..running(2, 8, "n2", "gpu") },
        typed(3, 2, 1, &["a100"], None),
        typed(4, 2, 2, &[], Some("ib")),
        typed(5, 2, 3, &[], Some("[ib|nvme]")),
        typed(6, 2, 10, &["v100"], None),
        typed(7, 2, 20, &[], None),
    ];
    let i = intended_order(&jobs, &typed_nodes(), &spec("sjf+easy"), 2_000, &Skip::new());
    assert!(i.warnings.is_empty() && i.left_alone.is_empty(), "{i:?}");
    assert_eq!(ids(&i), vec![6, 7, 3, 4, 5], "what starts now first, then sjf order (by time limit)");
    assert_eq!(i.cluster, "gpu 2x8:a100,1x4:v100; other 1x4:v100");
    let r3 = ranked(&i, 3);
    assert!(!r3.starts_now, "{r3:?}");
    assert!(
        r3.reason.contains("needs 2 GPUs of a100") && r3.reason.contains("4 free GPUs of v100 do not qualify"),
        "{r3:?}"
    );
    for id in [4, 5] {
        let r = ranked(&i, id);
        assert!(!r.starts_now && r.reason.contains("[ib") && r.reason.contains("v100 do not qualify"), "{r:?}");
    }
    let (r6, r7) = (ranked(&i, 6), ranked(&i, 7));
    assert!(r6.starts_now && r6.reason.contains("fits: n3:2") && r6.reason.contains("asks GPU type v100"), "{r6:?}");
    assert!(r7.starts_now && r7.reason == "starts now (fits: n3:2)", "{r7:?}");
    for r in &i.order {
        if [3, 4, 5].contains(&r.job) {
            assert!(!r.reason.contains("fits: n"), "job {} planned on a node that cannot serve it: {r:?}", r.job);
        }
    }

    // With n2 free: the a100 job and the ib job start there; `ib&nvme` needs n1 (full) and waits.
    let jobs = vec![
        running(1, 8, "n1", "gpu"),
        typed(3, 2, 1, &["a100"], None),
        typed(4, 2, 2, &[], Some("ib")),
        typed(8, 2, 3, &["a100"], Some("ib&nvme")),
    ];
    let i = intended_order(&jobs, &typed_nodes(), &spec("sjf"), 2_000, &Skip::new());
    assert!(ranked(&i, 3).starts_now && ranked(&i, 3).reason.contains("fits: n2:2"), "{i:?}");
    assert!(ranked(&i, 4).starts_now && ranked(&i, 4).reason.contains("fits: n2:2"), "{i:?}");
    let r8 = ranked(&i, 8);
    assert!(!r8.starts_now && r8.reason.contains("a100 [ib,nvme]"), "{r8:?}");
}

/// A request no node can serve is left alone with what is missing; so is a constraint ordo
/// cannot read. Untyped jobs may span nodes of every kind while no job asks for a type, but
/// once one does, a job's GPUs come from nodes of one kind (the core's pools), which it says.
#[test]
fn requests_no_node_serves_are_left_alone_with_why() {
    let jobs = vec![
        typed(3, 2, 1, &["h100"], None),
        typed(4, 2, 1, &[], Some("gpu99")),
        typed(5, 2, 1, &["v100"], Some("ib")),
        typed(6, 2, 1, &[], Some("ib&&nvme")),
        typed(7, 2, 1, &["v100"], Some("ib|nvme")),
    ];
    let i = intended_order(&jobs, &typed_nodes(), &spec("sjf"), 2_000, &Skip::new());
    assert!(i.order.is_empty(), "{i:?}");
    let why = |id: u64| i.left_alone.iter().find(|l| l.0 == id).map(|l| l.1.clone()).unwrap_or_default();
    assert!(why(3).contains("no node has a GPU of model h100 (the cluster has a100, v100)"), "{}", why(3));
    assert!(why(4).contains("no node has feature `gpu99`"), "{}", why(4));
    assert!(
        why(5).contains("asks GPU type v100, constraint ib") && why(5).contains("no node has all of it"),
        "{}",
        why(5)
    );
    assert!(why(6).contains("cannot read its constraint `ib&&nvme`"), "{}", why(6));
    assert!(why(7).contains("no node with GPUs of type v100 has features that satisfy `ib|nvme`"), "{}", why(7));

    // 20 GPUs untyped, every node idle: Slurm may run it on all three nodes, and so plans ordo
    // while no job asks for a type ...
    let big = typed(9, 20, 5, &[], None);
    let i = intended_order(std::slice::from_ref(&big), &typed_nodes(), &spec("fifo"), 2_000, &Skip::new());
    assert!(ranked(&i, 9).starts_now && ranked(&i, 9).reason.contains("n1:8,n2:8,n3:4"), "{i:?}");
    // ... but beside a typed job, no one kind of node holds it.
    let i =
        intended_order(&[big, typed(10, 1, 5, &["v100"], None)], &typed_nodes(), &spec("fifo"), 2_000, &Skip::new());
    let why = &i.left_alone.iter().find(|l| l.0 == 9).unwrap_or_else(|| panic!("{i:?}")).1;
    assert!(why.contains("ordo plans a job on nodes of one kind: 16 GPUs a100, 4 GPUs v100"), "{why}");
}

/// `scontrol show topology` of the dev cluster started with `slurm-dev-cluster.sh --topology`:
/// leaf switch s0 over n1 and n2, s1 over n3, s2 above both.
const DEV_TOPOLOGY: &str = "\
SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n3
SwitchName=s2 Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=s[0-1]
";

/// `--switches=1` is `required:switch`: with n2's 8 GPUs taken, a 10-GPU job waits (no leaf
/// switch has 10 free: s0 has 8, s1 4) where without the topology, or past its switch wait, or
/// with `--switches=2`, it starts now on n1 and n3. Nodes without CPU counts (count-only
/// placement, which places by topology).
#[test]
fn switches_one_holds_a_gang_within_one_leaf_switch() {
    let nodes =
        parse_sinfo("n1|gpu:8|||mixed|gpu|(null)\nn2|gpu:8|||mixed|gpu|(null)\nn3|gpu:4|||idle|gpu|(null)\n").unwrap();
    let topo = std::sync::Arc::new(ordo_slurm::topology::from_scontrol(DEV_TOPOLOGY).unwrap().unwrap());
    let now = 5_000;
    let gang = |switches: u32, submit: i64| SlurmJob {
        switches,
        switch_wait_s: 300,
        submit,
        ..job(2, JobState::Pending, 10, 30, &["gpu"])
    };
    let queue = |j: SlurmJob| vec![running(1, 8, "n2", "gpu"), j];
    let with_topo = PlanSpec { topology: Some(topo.clone()), ..spec("fifo+easy") };
    // Held: no leaf switch holds 10.
    let i = intended_order(&queue(gang(1, now - 10)), &nodes, &with_topo, now, &Skip::new());
    let r = ranked(&i, 2);
    assert!(!r.starts_now, "{r:?}");
    assert!(r.reason.contains("within one switch") && r.reason.contains("--switches=1 (required:switch)"), "{r:?}");
    assert_eq!(i.topology.as_deref(), Some("tree from scontrol show topology: 2 switch, 1 spine"));
    assert!(i.cluster.ends_with("by topology (switch, spine)"), "{}", i.cluster);
    // Past its wait Slurm places it anywhere: preferred, it starts on n1 and n3.
    let i = intended_order(&queue(gang(1, now - 400)), &nodes, &with_topo, now, &Skip::new());
    let r = ranked(&i, 2);
    assert!(r.starts_now && r.reason.contains("n1:") && r.reason.contains("n3:"), "{r:?}");
    assert!(r.reason.contains("(preferred:switch)"), "{r:?}");
    // More than one switch: preferred.
    let i = intended_order(&queue(gang(2, now - 10)), &nodes, &with_topo, now, &Skip::new());
    assert!(ranked(&i, 2).starts_now && ranked(&i, 2).reason.contains("--switches=2 (preferred:switch)"));
    // No topology: the ask is not modelled, and the plan is the one before topologies.
    let plain = intended_order(&queue(gang(1, now - 10)), &nodes, &spec("fifo+easy"), now, &Skip::new());
    let r = ranked(&plain, 2);
    assert!(r.starts_now && !r.reason.contains("switches"), "{r:?}");
    assert_eq!(plain.topology, None);
    let mut untouched = gang(1, now - 10);
    untouched.switches = 0;
    let before = intended_order(&queue(untouched), &nodes, &spec("fifo+easy"), now, &Skip::new());
    assert_eq!(before, plain);
    // Pooled placement: no topology either.
    let pooled = PlanSpec { placement: Placement::Pooled, ..with_topo.clone() };
    let i = intended_order(&queue(gang(1, now - 10)), &nodes, &pooled, now, &Skip::new());
    assert!(ranked(&i, 2).starts_now && i.topology.is_none());
}
