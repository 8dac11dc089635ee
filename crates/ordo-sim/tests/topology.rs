//! Clusters with a network topology: gangs placed by it keep every invariant under every kind
//! of policy (the fast paths decide as the explaining ones), spread runs take their slowdown
//! exactly, a required level holds a job until a unit of it holds the job, jobs that fit one
//! node are placed exactly as without a topology, and runs are deterministic.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::SECOND;
use ordo_core::{ClusterSpec, GpuNeeds, Job, JobId, Placement, PolicySpec, TopoAsk, Topology, Workload};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig, SimOutput};
use proptest::prelude::*;
use std::sync::Arc;

const POLICIES: [&str; 10] = [
    "fifo",
    "sjf",
    "fifo+easy",
    "sjf+easy",
    "fifo+conservative",
    "srtf",
    "las",
    "las:thresholds=100,promote=2",
    "fair",
    "sgf+easy+maxwait=100",
];

/// `nodes` nodes in blocks of `block` nodes and switches of `switch` blocks.
fn topo(nodes: usize, block: usize, switch: usize) -> Topology {
    let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
    let paths: Vec<Vec<Option<String>>> =
        (0..nodes).map(|i| vec![Some(format!("b{}", i / block)), Some(format!("s{}", i / (block * switch)))]).collect();
    Topology::from_paths(vec!["block".into(), "switch".into()], &names, &paths).unwrap()
}

fn cfg(cluster: ClusterSpec, t: &Topology, policy: &str, by_topology: bool) -> SimConfig {
    let mut c = SimConfig::new(cluster, Placement::Consolidated, policy.parse::<PolicySpec>().unwrap());
    c.topology = Some(Arc::new(t.clone()));
    c.place_by_topology = by_topology;
    c.check_invariants = true;
    c
}

/// Each run took its work at the slowdown of where it landed: with no preemption, end - start
/// is the run time times the factor of the levels its nodes crossed, rounded up to the ms.
fn runs_take_their_slowdown(w: &Workload, t: &Topology, out: &SimOutput) {
    for r in &out.records {
        let j = &w.jobs[r.job.idx()];
        assert_eq!(r.segments.len(), 1, "job {} ran once", r.job);
        let seg = &r.segments[0];
        let nodes: Vec<u32> = seg.gpu_ids.iter().map(|(n, _)| n).collect();
        let crossed = if nodes.len() > 1 { t.crossed(nodes.iter().copied()) } else { 0 };
        let class = j.needs.as_ref().and_then(|n| n.class.as_deref());
        let want = ordo_core::pools::scaled(j.runtime, 1.0 / t.factor(class, crossed));
        assert_eq!(seg.end - seg.start, want, "job {} crossed {crossed} levels", r.job);
        assert!(r.end >= j.submit + j.runtime);
    }
}

#[test]
fn gangs_keep_every_invariant_under_every_policy() {
    let p = WorkloadParams { jobs: 300, ..WorkloadParams::default_for(Scenario::Gangs) };
    let w = generate(&p, 512);
    let t = Scenario::Gangs.topology().unwrap();
    for policy in POLICIES {
        for by in [false, true] {
            let out = simulate(&w, &cfg(Scenario::Gangs.cluster(), &t, policy, by))
                .unwrap_or_else(|e| panic!("{policy} by topology {by}: {e}"));
            assert_eq!(out.records.len() + out.rejected.len(), w.jobs.len(), "{policy}");
            assert!(out.rejected.is_empty(), "{policy}");
            let sp = out.metrics.spread.as_ref().unwrap();
            assert_eq!(sp.levels, ["block", "switch"]);
            assert!(sp.gangs > 0 && sp.spread_gangs <= sp.gangs, "{policy}");
            let runs: u64 = sp.gang_runs_by_crossed.iter().sum();
            assert!(runs >= sp.gangs, "{policy}");
            if !policy.starts_with("srtf") && !policy.starts_with("las") && !policy.starts_with("fair") {
                runs_take_their_slowdown(&w, &t, &out);
            }
            let again = simulate(&w, &cfg(Scenario::Gangs.cluster(), &t, policy, by)).unwrap();
            assert_eq!(again.records, out.records, "{policy}: same input, same result");
        }
    }
}

/// `las:thresholds=100,promote=2` on the 600-job `gangs` workload time-slices its 128-GPU
/// gangs: 100 GPU-seconds is under a second for them, so they pass to the second queue at once
/// and promotion rotates them every few hundred ms. Without a minimum run the engine stops the
/// run under consolidated placement as a runaway (thrashing: more than 1,000 passes per job;
/// `ordo simulate --workload gangs --jobs 600 --policy las:thresholds=100,promote=2 --placement
/// consolidated`); with a minimum run of 10 s, under either placement, every job completes.
#[test]
fn las_with_promotion_completes_on_gangs_with_a_minimum_run() {
    let p = WorkloadParams { jobs: 600, ..WorkloadParams::default_for(Scenario::Gangs) };
    let w = generate(&p, 512);
    let t = Scenario::Gangs.topology().unwrap();
    let run = |by: bool, min_run| {
        let mut c = cfg(Scenario::Gangs.cluster(), &t, "las:thresholds=100,promote=2", by);
        c.check_invariants = false;
        c.preemption.min_run = min_run;
        simulate(&w, &c)
    };
    for by in [false, true] {
        let out = run(by, 10 * SECOND).unwrap_or_else(|e| panic!("by topology {by}: {e}"));
        assert_eq!(out.records.len(), w.jobs.len(), "by topology {by}");
    }
}

/// On the `gangs` workload, placing by the topology beats consolidated placement on mean JCT
/// at the same order and loses fewer GPU-hours to spread; on `nodelocal` (every job fits one
/// node) it changes nothing, job for job.
#[test]
fn topology_wins_where_gangs_spread_and_changes_nothing_where_none_do() {
    let t = Scenario::Gangs.topology().unwrap();
    for policy in ["fifo", "fifo+easy", "sjf+easy"] {
        let w = generate(&WorkloadParams::default_for(Scenario::Gangs), 512);
        let run = |by| {
            let mut c = cfg(Scenario::Gangs.cluster(), &t, policy, by);
            c.check_invariants = false;
            simulate(&w, &c).unwrap().metrics
        };
        let (cons, topo) = (run(false), run(true));
        // The tail at every order; the mean too, except under fifo+easy: there the head's
        // reservation is kept (the scheduler plans spread gangs with their slowdown) where the
        // consolidated run, blind to it, backfilled past it (docs/TOPOLOGY.md, "Evidence").
        assert!(topo.p99_jct_s < 0.95 * cons.p99_jct_s, "{policy}: p99 {} vs {}", topo.p99_jct_s, cons.p99_jct_s);
        if policy != "fifo+easy" {
            assert!(topo.mean_jct_s < 0.95 * cons.mean_jct_s, "{policy}: {} vs {}", topo.mean_jct_s, cons.mean_jct_s);
        }
        let lost = |m: &ordo_sim::Metrics| m.spread.as_ref().unwrap().lost_gpu_hours;
        assert!(lost(&topo) < 0.7 * lost(&cons), "{policy}");
        assert_eq!(topo.placement, "topology");

        let w = generate(&WorkloadParams::default_for(Scenario::NodeLocal), 512);
        let run = |by| {
            let mut c = cfg(Scenario::NodeLocal.cluster(), &t, policy, by);
            c.check_invariants = false;
            simulate(&w, &c).unwrap()
        };
        let (cons, topo) = (run(false), run(true));
        assert_eq!(cons.records, topo.records, "{policy}: nodelocal");
        assert_eq!(topo.metrics.spread.unwrap().lost_gpu_hours, 0.0);
        // Without a topology at all: the same records again.
        let plain = SimConfig::new(Scenario::NodeLocal.cluster(), Placement::Consolidated, policy.parse().unwrap());
        assert_eq!(simulate(&w, &plain).unwrap().records, cons.records, "{policy}: no topology");
    }
}

fn job(i: u32, submit: i64, gpus: u32, runtime: i64, ask: Option<&str>) -> Job {
    Job {
        id: JobId(i),
        name: format!("j{i}"),
        submit: submit * SECOND,
        gpus,
        runtime: runtime * SECOND,
        needs: Some(Box::new(GpuNeeds {
            topology: ask.map(|a| a.parse::<TopoAsk>().unwrap()),
            class: Some("lm".into()),
            ..Default::default()
        })),
        ..Job::default()
    }
}

/// `jobs` of user `u` in group `g`.
fn one_user(jobs: Vec<Job>) -> Workload {
    let mut w = Workload::default();
    w.user_index("u");
    w.group_index("g");
    w.jobs = jobs;
    w
}

/// Job `i`'s record in `out`.
fn rec(out: &SimOutput, i: u32) -> ordo_sim::JobRecord {
    out.records.iter().find(|r| r.job == JobId(i)).unwrap().clone()
}

/// Worked by hand: 8 nodes of 4 GPUs, blocks of 2 nodes (b0 = n0,n1 ... b3 = n6,n7), switches
/// of 2 blocks; class `lm` crosses a block at 4.34 (Gavel), a switch at 1. `fifo+easy`.
/// - t=0: eight 4-GPU jobs fill n0..n7 (best fit, lowest index); those on n1, n3, n4, n5 run
///   10 s, the others 100 s. From t=10, n1, n3, n4 and n5 are free.
/// - t=20: F asks 8 GPUs (no requirement). By topology: block b2 (n4, n5) holds it, 100 s.
///   Consolidated: the lowest idle nodes, n1 and n3, in two blocks: 100 s x 4.34 = 434 s.
/// - t=21: E asks 8 GPUs `required:block`. By topology: n1 and n3 are in two blocks, so it
///   waits ("needs 8 GPUs within one block; the most free in any block is 4") until t=100, then
///   takes b0 (n0, n1: the best fit, lowest index among the free blocks), 100 s. Consolidated
///   ignores the requirement: n4 and n5, which happen to be one block, 100 s.
#[test]
fn a_required_level_waits_for_its_unit_worked_by_hand() {
    let cluster = ClusterSpec::uniform(8, 4);
    let t = topo(8, 2, 2);
    let mut jobs: Vec<Job> =
        (0..8).map(|i| job(i, 0, 4, if [1, 3, 4, 5].contains(&i) { 10 } else { 100 }, None)).collect();
    jobs.push(job(8, 20, 8, 100, None));
    jobs.push(job(9, 21, 8, 100, Some("required:block")));
    let w = one_user(jobs);
    let nodes = |out: &SimOutput, i: u32| rec(out, i).segments[0].gpu_ids.iter().map(|(n, _)| n).collect::<Vec<u32>>();
    let s = SECOND;
    let out = simulate(&w, &cfg(cluster.clone(), &t, "fifo+easy", true)).unwrap();
    for i in 0..8 {
        assert_eq!(nodes(&out, i), vec![i]);
    }
    assert_eq!(nodes(&out, 8), vec![4, 5]);
    assert_eq!((rec(&out, 8).start, rec(&out, 8).end), (20 * s, 120 * s));
    assert_eq!(nodes(&out, 9), vec![0, 1]);
    assert_eq!((rec(&out, 9).start, rec(&out, 9).end), (100 * s, 200 * s));
    let sp = out.metrics.spread.clone().unwrap();
    assert_eq!(sp.gang_runs_by_crossed, vec![2, 0, 0]);
    assert_eq!((sp.gangs, sp.spread_gangs, sp.lost_gpu_hours), (2, 0, 0.0));

    let out = simulate(&w, &cfg(cluster, &t, "fifo+easy", false)).unwrap();
    assert_eq!(nodes(&out, 8), vec![1, 3]);
    assert_eq!((rec(&out, 8).start, rec(&out, 8).end), (20 * s, 454 * s));
    assert_eq!(nodes(&out, 9), vec![4, 5]);
    assert_eq!((rec(&out, 9).start, rec(&out, 9).end), (21 * s, 121 * s));
    let sp = out.metrics.spread.clone().unwrap();
    assert_eq!(sp.gang_runs_by_crossed, vec![1, 1, 0]);
    assert_eq!((sp.gangs, sp.spread_gangs), (2, 1));
    // F could have run within a block: 434 s - 100 s beyond it, on 8 GPUs.
    assert!((sp.lost_gpu_hours - 8.0 * 334.0 / 3600.0).abs() < 1e-9, "{}", sp.lost_gpu_hours);
}

/// Worked by hand: a scheduler that places by the topology plans a spread gang's end with its
/// slowdown, so EASY's reservation for the head is where the head really starts. 5 nodes of 1
/// GPU, blocks b0 = n0,n1, b1 = n2,n3, b2 = n4; class `lm` crosses a block at 4.34. `fifo+easy`.
/// - t=0: A, B, C (1 GPU each) go to n0, n1, n2; they run 10 s, 150 s and 1000 s.
/// - t=10: G (2 GPUs, 100 s) finds n0, n3, n4 free, one in each block: it takes two of them,
///   spread, and runs 434 s (ends at 444). H (2 GPUs) waits at the head; K (1 GPU, 500 s)
///   fits on the third free node.
/// - By topology, the scheduler expects G to end at 444, so H's reservation is at 150 (B's end
///   frees n1, which with the third node holds H). K would run past 150 on the node H needs
///   then: it waits. H starts at 150; K at 444.
/// - Consolidated (the topology known to the simulator only), the scheduler expects G to end
///   at 110 and H to start then on G's nodes: K backfills at 10 on n4, and H, which no longer
///   fits at 150, waits for G's real end at 444.
#[test]
fn easy_plans_a_spread_gang_with_its_slowdown_worked_by_hand() {
    let cluster = ClusterSpec::uniform(5, 1);
    let t = topo(5, 2, 3);
    let w = one_user(vec![
        job(0, 0, 1, 10, None),
        job(1, 0, 1, 150, None),
        job(2, 0, 1, 1000, None),
        job(3, 10, 2, 100, None),
        job(4, 10, 2, 100, None),
        job(5, 10, 1, 500, None),
    ]);
    let s = SECOND;
    let out = simulate(&w, &cfg(cluster.clone(), &t, "fifo+easy", true)).unwrap();
    assert_eq!((rec(&out, 3).start, rec(&out, 3).end), (10 * s, 444 * s));
    assert_eq!(rec(&out, 4).start, 150 * s);
    assert_eq!(rec(&out, 5).start, 444 * s);

    let out = simulate(&w, &cfg(cluster, &t, "fifo+easy", false)).unwrap();
    assert_eq!((rec(&out, 3).start, rec(&out, 3).end), (10 * s, 444 * s));
    assert_eq!(rec(&out, 5).start, 10 * s);
    assert_eq!(rec(&out, 4).start, 444 * s);
}

/// Worked by hand: conservative backfill reserves a gang that will be spread for as long as it
/// will run there. 5 nodes of 1 GPU, blocks b0 = n0,n1, b1 = n2,n3, b2 = n4; class `lm` crosses
/// a block at 4.34. At t=0 five 1-GPU jobs fill n0..n4, ending at 10 s (n0), 1000 s (n1, n2)
/// and 50 s (n3, n4). G (2 GPUs, 100 s, `lm`) can start at 50 s on two of n0, n3, n4, one per
/// block: 434 s, so it is reserved until 484 s. K (3 GPUs) then needs G's nodes back: 484 s
/// (planned with G's bare estimate it would have been reserved at 150 s, while G still runs).
#[test]
fn conservative_reserves_a_spread_gang_for_its_slowed_run_worked_by_hand() {
    use ordo_core::scheduler::JobReq;
    let mut s = ordo_core::Scheduler::new(
        &ClusterSpec::uniform(5, 1),
        Placement::Consolidated,
        "fifo+conservative".parse().unwrap(),
    );
    s.set_topology(Arc::new(topo(5, 2, 3))).unwrap();
    for (i, est) in [10, 1000, 1000, 50, 50].into_iter().enumerate() {
        s.submit(JobReq::new(JobId(i as u32), 0, 1, est * SECOND), 0).unwrap();
    }
    let p = s.schedule(0, false);
    assert_eq!(p.starts.len(), 5);
    for st in &p.starts {
        s.start(st.job, &st.alloc, 0).unwrap();
    }
    let lm = s.spread_row(Some("lm"));
    assert_ne!(lm, 0);
    s.submit(JobReq { spread_row: lm, ..JobReq::new(JobId(5), SECOND, 2, 100 * SECOND) }, SECOND).unwrap();
    s.submit(JobReq { spread_row: lm, ..JobReq::new(JobId(6), 2 * SECOND, 3, 100 * SECOND) }, 2 * SECOND).unwrap();
    let p = s.schedule(2 * SECOND, true);
    let why = |j: u32| p.waiting.iter().find(|w| w.0 == JobId(j)).map(|w| w.1.clone());
    assert_eq!(why(5), Some(ordo_core::Reason::Reservation { start: 50 * SECOND }));
    assert_eq!(why(6), Some(ordo_core::Reason::Reservation { start: 484 * SECOND }));
}

/// The reason a job held by its required level gives, through the scheduler's explanation.
#[test]
fn the_reason_names_the_level() {
    use ordo_core::scheduler::JobReq;
    let mut s =
        ordo_core::Scheduler::new(&ClusterSpec::uniform(8, 4), Placement::Consolidated, "fifo+easy".parse().unwrap());
    s.set_topology(Arc::new(topo(8, 2, 2))).unwrap();
    for i in 0..8 {
        s.submit(JobReq::new(JobId(i), 0, 4, 100), 0).unwrap();
    }
    let p = s.schedule(0, false);
    for st in &p.starts {
        s.start(st.job, &st.alloc, 0).unwrap();
    }
    for i in [1u32, 3, 5, 7] {
        s.finish(JobId(i), 10).unwrap();
    }
    let need = ordo_core::TopoNeed::required(0);
    s.submit(JobReq { topo: need, ..JobReq::new(JobId(8), 20, 8, 100) }, 20).unwrap();
    let p = s.schedule(20, true);
    assert_eq!(
        p.waiting[0].1,
        ordo_core::Reason::NodeFit {
            need: 8,
            why: "needs 8 GPUs within one block; the most free in any block is 4".into()
        }
    );
}

#[test]
fn a_level_no_unit_can_ever_hold_is_refused_with_the_reason() {
    let cluster = ClusterSpec::uniform(8, 4);
    let t = topo(8, 2, 2);
    let mut w = Workload::default();
    w.user_index("u");
    w.group_index("g");
    w.jobs = vec![job(0, 0, 12, 10, Some("required:block")), job(1, 0, 12, 10, Some("required:switch"))];
    let out = simulate(&w, &cfg(cluster.clone(), &t, "fifo", true)).unwrap();
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].job, JobId(0));
    assert!(
        out.rejected[0]
            .why
            .contains("needs 12 GPUs within one block; the most free in any block is 8 and the largest has 8"),
        "{}",
        out.rejected[0].why
    );
    // An unknown level: never served, in words.
    w.jobs = vec![job(0, 0, 8, 10, Some("required:rack"))];
    let out = simulate(&w, &cfg(cluster, &t, "fifo", true)).unwrap();
    assert!(
        out.rejected[0].why.contains("`rack` is not one of this cluster's levels (block, switch)"),
        "{}",
        out.rejected[0].why
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random clusters, topologies and jobs (some requiring a level): every invariant holds
    /// (the engine's checks after every pass, the fast paths against the explaining ones),
    /// every job ends once or is rejected, and a run is deterministic.
    #[test]
    fn random_topologies_keep_every_invariant(
        nodes in 2usize..12,
        gpus in 1u32..5,
        block in 1usize..4,
        switch in 1usize..3,
        raw in prop::collection::vec((0i64..300, 1u32..24, 1i64..200, 0u8..4), 1..30),
        policy in 0usize..POLICIES.len(),
    ) {
        let cluster = ClusterSpec::uniform(nodes as u32, gpus);
        let t = topo(nodes, block, switch);
        let mut w = Workload::default();
        w.user_index("u");
        w.group_index("g");
        for (i, &(s, g, r, a)) in raw.iter().enumerate() {
            let ask = match a { 1 => Some("required:block"), 2 => Some("required:switch"), 3 => Some("preferred:block"), _ => None };
            w.jobs.push(job(i as u32, s, g, r, ask));
        }
        w.renumber();
        let c = cfg(cluster, &t, POLICIES[policy], true);
        let out = simulate(&w, &c).unwrap();
        prop_assert_eq!(out.records.len() + out.rejected.len(), w.jobs.len());
        for r in &out.records {
            let j = &w.jobs[r.job.idx()];
            prop_assert!(r.start >= j.submit);
            prop_assert!(r.end >= j.submit + j.runtime);
            if let Some(ask) = j.needs.as_ref().and_then(|n| n.topology.as_ref()).filter(|a| a.required) {
                let l = t.level_index(&ask.level).unwrap();
                for seg in &r.segments {
                    let n: Vec<u32> = seg.gpu_ids.iter().map(|(n, _)| n).collect();
                    prop_assert!(t.crossed(n.iter().copied()) <= l, "job {} crossed its required level", r.job);
                }
            }
        }
        let again = simulate(&w, &c).unwrap();
        prop_assert_eq!(again.records, out.records);
    }
}
