//! Property tests over random workloads, clusters, placements and policies: the invariants of
//! docs/ARCHITECTURE.md hold after every scheduling pass and over the whole run, and runs are
//! deterministic.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::SECOND;
use ordo_core::{ClusterSpec, Job, JobId, NodeSpec, Placement, PolicySpec, Workload};
use ordo_sim::engine::validate;
use ordo_sim::{simulate, simulate_with_changes, SimConfig};
use proptest::prelude::*;

const POLICIES: [&str; 34] = [
    "fifo",
    "rr",
    "rr:quantum=40",
    "rr+easy+maxwait=200",
    "sjf",
    "sgf",
    "fifo+easy",
    "sjf+easy",
    "sgf+easy",
    "fifo+conservative",
    "sjf+conservative",
    "sgf+conservative",
    "srtf",
    "las:thresholds=60/300,promote=0",
    "las:thresholds=100,promote=2",
    "las:thresholds=60/300,compat=tiresias",
    "las:thresholds=100,promote=2,compat=tiresias",
    "gittins:quantum=50,window=20",
    "sjf+easy+maxwait=100",
    "fifo+maxwait=100",
    "sgf+conservative+maxwait=150",
    "srtf+maxwait=200",
    "las+maxwait=150",
    "fair",
    "fair:by=group+easy",
    "priority:age=100,fairshare=1000,size=-10,qos=1,half_life=300,max_age=600",
    "priority+conservative",
    "priority:age=1000,fairshare=10000,size=-1000,max_age=300",
    "priority:age=100,size=1000,qos=10,max_age=120+easy",
    "qssf",
    "qssf+easy+maxwait=100",
    "las:thresholds=100,promote=2+maxwait=150",
    "priority:age=100,fairshare=1000,size=-10,max_age=600+maxwait=100",
    "qssf+conservative+maxwait=120",
];

fn cluster() -> impl Strategy<Value = ClusterSpec> {
    prop::collection::vec((1u32..4, 1u32..9), 1..3).prop_map(|groups| {
        let spec: Vec<String> = groups.iter().map(|(c, g)| format!("{c}x{g}")).collect();
        ClusterSpec::parse(&spec.join(",")).unwrap()
    })
}

/// Jobs: (submit s, gpus, runtime s, estimate factor; 0 = no estimate, else estimate = runtime *
/// factor / 4, so some estimates are too short and jobs overrun them).
fn jobs() -> impl Strategy<Value = Vec<(i64, u32, i64, u32)>> {
    prop::collection::vec((0i64..600, 0u32..20, 1i64..300, 0u32..9), 1..40)
}

fn workload(raw: &[(i64, u32, i64, u32)], with_estimates: bool) -> Workload {
    let mut w = Workload::default();
    // Three users in two groups, so fair sharing and priorities have owners to weigh.
    let users: Vec<u32> = (0..3).map(|u| w.user_index(&format!("u{u}"))).collect();
    let groups: Vec<u32> = (0..2).map(|g| w.group_index(&format!("g{g}"))).collect();
    for (i, &(submit, gpus, run, f)) in raw.iter().enumerate() {
        w.jobs.push(Job {
            id: JobId(i as u32),
            name: format!("j{i}"),
            user: users[i % 3],
            group: groups[i % 3 / 2],
            submit: submit * SECOND,
            gpus,
            cpus: None,
            mem_mib: None,
            runtime: run * SECOND,
            estimate: (with_estimates && f > 0).then(|| (run * SECOND * f as i64 / 4).max(SECOND)),
            priority: Some((i % 4) as i64),
            gpu_milli: None,
            queue: None,
            ..Job::default()
        });
    }
    w.renumber();
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_runs_are_deterministic(
        c in cluster(),
        raw in jobs(),
        pol in 0usize..POLICIES.len(),
        consolidated in any::<bool>(),
        with_estimates in any::<bool>(),
        overhead_s in prop_oneof![Just(0i64), 0i64..20],
    ) {
        let w = workload(&raw, with_estimates);
        let policy: PolicySpec = POLICIES[pol].parse().unwrap();
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let cfg = SimConfig { preemption_overhead: overhead_s * 1000, preemption: Default::default(), cluster: c.clone(), placement, policy, check_invariants: true, deadline: None, quotas: None, give_up_above_mean_jct_s: None, speeds: ordo_core::Speeds::default(), model_pick: None, topology: None, place_by_topology: false };
        let out = simulate(&w, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate(&w, &c, &out, cfg.preemption_overhead).map_err(TestCaseError::fail)?;
        // Only jobs larger than the whole cluster are rejected.
        for r in &out.rejected {
            prop_assert!(r.gpus as u64 > c.total_gpus());
        }
        // Idle GPU-hours by cause add up to the idle capacity (restart overhead counts as held).
        if cfg.preemption_overhead == 0 && !out.records.is_empty() {
            let m = &out.metrics;
            let idle = m.gpus as f64 * m.makespan_s / 3600.0 - m.total_gpu_hours;
            prop_assert!((m.idle_causes.total_gpu_hours() - idle).abs() <= 1e-6 * idle.max(1.0), "{:?} vs {idle}", m.idle_causes);
        }
        let again = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(&out.records, &again.records);
        prop_assert_eq!(&out.metrics, &again.metrics);
    }

    /// Strict FIFO never lets a job start before one submitted earlier (ties by arrival order).
    #[test]
    fn strict_fifo_starts_in_arrival_order(c in cluster(), raw in jobs(), consolidated in any::<bool>()) {
        let w = workload(&raw, false);
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let cfg = SimConfig { preemption_overhead: 0, preemption: Default::default(), cluster: c, placement, policy: "fifo".parse().unwrap(), check_invariants: false, deadline: None, quotas: None, give_up_above_mean_jct_s: None, speeds: ordo_core::Speeds::default(), model_pick: None, topology: None, place_by_topology: false };
        let out = simulate(&w, &cfg).unwrap();
        let mut recs = out.records.clone();
        recs.sort_by_key(|r| r.job);
        for pair in recs.windows(2) {
            prop_assert!(pair[0].start <= pair[1].start, "job {} started after job {}", pair[0].job, pair[1].job);
        }
    }

    /// Under pooled placement, smallest-GPU-first starts the smallest waiting job whenever it
    /// fits by count, so no GPU is ever idle while a waiting job would fit.
    #[test]
    fn pooled_sgf_never_idles_while_a_job_fits(c in cluster(), raw in jobs()) {
        let w = workload(&raw, false);
        let cfg = SimConfig { preemption_overhead: 0, preemption: Default::default(), cluster: c, placement: Placement::Pooled, policy: "sgf".parse().unwrap(), check_invariants: false, deadline: None, quotas: None, give_up_above_mean_jct_s: None, speeds: ordo_core::Speeds::default(), model_pick: None, topology: None, place_by_topology: false };
        let out = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(out.metrics.idle_while_fit_gpu_hours, 0.0);
        prop_assert_eq!(out.metrics.idle_causes.head_of_line_gpu_hours, 0.0);
        for r in &out.records {
            prop_assert!(r.end - r.submit >= w.jobs[r.job.idx()].runtime);
        }
    }
}

/// Nodes with CPUs and memory (each modelled or not): (count, GPUs, CPUs, MiB).
fn detailed_cluster() -> impl Strategy<Value = ClusterSpec> {
    prop::collection::vec((1u32..3, 1u32..5, prop::option::of(4u32..17), prop::option::of(8_000u64..32_000)), 1..3)
        .prop_map(|groups| {
            let mut nodes = Vec::new();
            for (count, gpus, cpus, mem_mib) in groups {
                for _ in 0..count {
                    let name = format!("n{}", nodes.len());
                    nodes.push(NodeSpec {
                        name,
                        gpus,
                        cpus,
                        mem_mib,
                        gpu_model: None,
                        gpu_mem_mib: None,
                        features: Vec::new(),
                    });
                }
            }
            ClusterSpec { nodes }
        })
}

/// Jobs that may ask a share of one GPU, CPUs and memory: (submit s, gpus, share (used when
/// gpus is 1), CPUs, MiB, runtime s, estimate factor).
type RawDetailed = (i64, u32, Option<u32>, u32, u64, i64, u32);

fn detailed_jobs() -> impl Strategy<Value = Vec<RawDetailed>> {
    prop::collection::vec(
        (
            0i64..400,
            prop_oneof![Just(1u32), 0u32..7],
            prop::option::of(1u32..1000),
            prop_oneof![Just(0u32), 0u32..20],
            prop_oneof![Just(0u64), 0u64..40_000],
            1i64..200,
            0u32..9,
        ),
        1..40,
    )
}

fn detailed_workload(raw: &[RawDetailed]) -> Workload {
    let mut w = workload(&raw.iter().map(|r| (r.0, r.1, r.5, r.6)).collect::<Vec<_>>(), true);
    // `workload` renumbers by (submit, index): match each raw row to its job by name.
    for j in &mut w.jobs {
        let i: usize = j.name[1..].parse().unwrap();
        let (_, gpus, milli, cpus, mem, _, _) = raw[i];
        j.gpu_milli = if gpus == 1 { milli } else { None };
        j.cpus = (cpus > 0).then_some(cpus);
        j.mem_mib = (mem > 0).then_some(mem);
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Fractional GPUs, CPUs and memory: no GPU's shares exceed 1000 thousandths and no node's
    /// CPUs or memory are exceeded at any instant (validate), the scheduler's own invariants
    /// hold after every pass, only jobs that no node could ever hold are rejected, and runs
    /// are deterministic.
    #[test]
    fn fractional_and_cpu_invariants_hold(
        c in detailed_cluster(),
        raw in detailed_jobs(),
        pol in 0usize..POLICIES.len(),
        consolidated in any::<bool>(),
        overhead_s in prop_oneof![Just(0i64), 0i64..20],
    ) {
        let w = detailed_workload(&raw);
        let policy: PolicySpec = POLICIES[pol].parse().unwrap();
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let cfg = SimConfig { preemption_overhead: overhead_s * 1000, preemption: Default::default(), cluster: c.clone(), placement, policy, check_invariants: true, deadline: None, quotas: None, give_up_above_mean_jct_s: None, speeds: ordo_core::Speeds::default(), model_pick: None, topology: None, place_by_topology: false };
        let out = simulate(&w, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate(&w, &c, &out, cfg.preemption_overhead).map_err(TestCaseError::fail)?;
        let max_gpus = c.max_node_gpus();
        for j in &w.jobs {
            // A job of at most one node's GPUs can run iff some node holds it when empty.
            if j.gpus > max_gpus {
                continue;
            }
            let need = j.gpus.max(u32::from(j.gpu_milli.is_some()));
            let holds = c.nodes.iter().any(|n| {
                n.gpus >= need
                    && n.cpus.is_none_or(|x| x >= j.cpus.unwrap_or(0))
                    && n.mem_mib.is_none_or(|x| x >= j.mem_mib.unwrap_or(0))
            });
            let rejected = out.rejected.iter().any(|r| r.job == j.id);
            prop_assert_eq!(rejected, !holds, "job {} rejected: {}", j.id, rejected);
        }
        // Idle GPU-hours by cause add up to the idle capacity (restart overhead counts as held).
        if cfg.preemption_overhead == 0 && !out.records.is_empty() {
            let m = &out.metrics;
            let idle = m.gpus as f64 * m.makespan_s / 3600.0 - m.total_gpu_hours;
            prop_assert!((m.idle_causes.total_gpu_hours() - idle).abs() <= 1e-6 * idle.max(1.0), "{:?} vs {idle}", m.idle_causes);
        }
        let again = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(&out.records, &again.records);
        prop_assert_eq!(&out.metrics, &again.metrics);
    }
}

/// Found by the property test in CI's first run: under consolidated sgf+conservative with
/// wrong estimates, a job was left waiting forever.
#[test]
fn regression_conservative_job_left_waiting() {
    let raw = [
        (174, 2, 144, 0),
        (3, 12, 51, 1),
        (103, 4, 194, 6),
        (527, 1, 163, 0),
        (407, 1, 132, 1),
        (403, 3, 76, 8),
        (3, 10, 83, 2),
        (346, 9, 50, 0),
        (346, 9, 127, 0),
        (263, 4, 134, 4),
        (346, 5, 58, 3),
        (452, 12, 211, 0),
        (3, 12, 12, 0),
        (2, 15, 261, 5),
        (317, 3, 201, 3),
        (346, 9, 228, 5),
        (2, 13, 1, 0),
    ];
    let w = workload(&raw, true);
    let c = ClusterSpec::uniform(3, 8);
    let cfg = SimConfig {
        preemption_overhead: 0,
        preemption: Default::default(),
        cluster: c.clone(),
        placement: Placement::Consolidated,
        policy: "sgf+conservative".parse().unwrap(),
        check_invariants: true,
        deadline: None,
        quotas: None,
        give_up_above_mean_jct_s: None,
        speeds: ordo_core::Speeds::default(),
        model_pick: None,
        topology: None,
        place_by_topology: false,
    };
    let out = simulate(&w, &cfg).unwrap();
    validate(&w, &c, &out, 0).unwrap();
}

#[test]
fn regression_srtf_maxwait_runaway() {
    let raw = [
        (61, 6, 124, 0),
        (0, 6, 201, 4),
        (245, 4, 5, 0),
        (135, 0, 149, 0),
        (237, 10, 1, 0),
        (8, 4, 125, 0),
        (6, 6, 44, 0),
    ];
    let w = workload(&raw, false);
    let c = ClusterSpec::uniform(3, 3);
    let mut cfg = SimConfig::new(c.clone(), Placement::Pooled, "srtf+maxwait=200".parse().unwrap());
    cfg.check_invariants = true;
    cfg.preemption_overhead = 6000;
    let out = simulate(&w, &cfg).unwrap();
    validate(&w, &c, &out, cfg.preemption_overhead).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// With random dependencies on earlier jobs (some of which fail) and a per-user GPU cap:
    /// `validate` holds (no job starts before its dependencies ended as it asks, every job
    /// runs, is rejected or is never satisfied exactly once), no user ever holds more GPUs than
    /// the cap, and runs are deterministic.
    #[test]
    fn dependencies_and_quotas_hold(
        c in cluster(),
        raw in jobs(),
        links in prop::collection::vec((0usize..40, 0usize..40, 0u8..3), 0..30),
        failed in prop::collection::vec(any::<bool>(), 40),
        cap in 1u64..10,
        pol in 0usize..POLICIES.len(),
        consolidated in any::<bool>(),
    ) {
        use ordo_core::{Dep, DepKind};
        let mut w = workload(&raw, true);
        let n = w.jobs.len();
        for (i, j) in w.jobs.iter_mut().enumerate() {
            j.failed = failed[i];
        }
        for &(a, b, k) in &links {
            let (a, b) = (a % n, b % n);
            if a < b {
                let kind = [DepKind::AfterOk, DepKind::AfterAny, DepKind::AfterNotOk][k as usize];
                w.jobs[b].after.push(Dep { kind, job: JobId(a as u32) });
            }
        }
        let mut q = ordo_core::QuotaConfig::default();
        q.default_user.max_running_gpus = Some(ordo_core::GpuLimit::Count(cap));
        let policy: PolicySpec = POLICIES[pol].parse().unwrap();
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let cfg = SimConfig { quotas: Some(q), check_invariants: true, ..SimConfig::new(c.clone(), placement, policy) };
        let out = simulate(&w, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate(&w, &c, &out, 0).map_err(TestCaseError::fail)?;
        // Per user: GPUs held over time never exceed the cap (ends before starts at a tie).
        let mut ev: Vec<(i64, i64, u32)> = Vec::new();
        for r in &out.records {
            let user = w.jobs[r.job.idx()].user;
            for s in &r.segments {
                ev.push((s.start, r.gpus as i64, user));
                ev.push((s.end, -(r.gpus as i64), user));
            }
        }
        ev.sort_by_key(|&(t, d, _)| (t, d));
        let mut held: std::collections::HashMap<u32, i64> = Default::default();
        for (t, d, u) in ev {
            let h = held.entry(u).or_default();
            *h += d;
            prop_assert!(*h <= cap as i64, "user {} holds {} GPUs at {} (cap {})", u, h, t, cap);
        }
        let again = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(&out.records, &again.records);
        prop_assert_eq!(&out.never_satisfied.len(), &again.never_satisfied.len());
    }
}

/// Non-preemptive policies, for changes of policy midway.
const STEADY: [&str; 9] =
    ["fifo", "sjf", "sgf", "fifo+easy", "sjf+easy", "fifo+conservative", "fair", "qssf+easy", "priority+easy"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Changes of policy midway (`simulate_with_changes`, as `ordo before-after` replays an
    /// `ordo server`'s history) keep every invariant: no GPU in two jobs, capacity never
    /// exceeded, every job finishes exactly once; and the run is deterministic.
    #[test]
    fn policy_changes_keep_the_invariants(
        c in cluster(),
        raw in jobs(),
        pols in prop::collection::vec(0usize..STEADY.len(), 1..4),
        times in prop::collection::vec(0i64..900, 3),
        consolidated in any::<bool>(),
        with_estimates in any::<bool>(),
    ) {
        let w = workload(&raw, with_estimates);
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let mut at: Vec<i64> = times.iter().map(|t| t * SECOND).collect();
        at.sort_unstable();
        at.dedup();
        let changes: Vec<(i64, PolicySpec)> = at.iter().zip(&pols[1..]).map(|(&t, &p)| (t, STEADY[p].parse().unwrap())).collect();
        let mut cfg = SimConfig::new(c.clone(), placement, STEADY[pols[0]].parse().unwrap());
        cfg.check_invariants = true;
        let out = simulate_with_changes(&w, &cfg, &changes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate(&w, &c, &out, 0).map_err(TestCaseError::fail)?;
        let again = simulate_with_changes(&w, &cfg, &changes).unwrap();
        prop_assert_eq!(&out.records, &again.records);
    }

    /// A change to the policy already in force changes nothing, for orders whose decisions
    /// depend only on the queue and the running jobs' planned ends (what the scheduler is built
    /// again from): the same records, job for job. Run times as estimates: a job that has
    /// already overrun its estimate is moved as ending "any moment" (1 ms from the change, as
    /// the server moves it), which can reorder such jobs among themselves in EASY's shadow.
    #[test]
    fn a_change_to_the_same_policy_changes_nothing(
        c in cluster(),
        raw in jobs(),
        pol in prop::sample::select(vec!["fifo", "sjf", "sgf", "fifo+easy", "sjf+easy"]),
        at in 0i64..900,
        consolidated in any::<bool>(),
    ) {
        let w = workload(&raw, false);
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let policy: PolicySpec = pol.parse().unwrap();
        let cfg = SimConfig::new(c, placement, policy.clone());
        let plain = simulate(&w, &cfg).unwrap();
        let changed = simulate_with_changes(&w, &cfg, &[(at * SECOND, policy)]).unwrap();
        prop_assert_eq!(&plain.records, &changed.records);
    }
}

/// Found by CI: EASY under consolidated placement, a change to the same policy at 297 s (a
/// second after a 7-GPU job started on node 0 as an 11-GPU job ended) must not backfill what the
/// plain run did not.
#[test]
fn regression_easy_change_to_same_policy() {
    let raw = [
        (157, 2, 68, 0),
        (53, 2, 104, 0),
        (47, 11, 249, 0),
        (142, 1, 221, 0),
        (79, 4, 206, 0),
        (47, 7, 67, 0),
        (47, 6, 1, 0),
    ];
    let w = workload(&raw, false);
    let cfg = SimConfig::new(ClusterSpec::uniform(2, 8), Placement::Consolidated, "fifo+easy".parse().unwrap());
    let plain = simulate(&w, &cfg).unwrap();
    let changed = simulate_with_changes(&w, &cfg, &[(297 * SECOND, "fifo+easy".parse().unwrap())]).unwrap();
    assert_eq!(plain.records, changed.records);
}

#[test]
fn a_preemptive_policy_cannot_be_changed_midway() {
    let w = workload(&[(0, 1, 10, 0)], false);
    let cfg = SimConfig::new(ClusterSpec::uniform(1, 4), Placement::Pooled, "srtf".parse().unwrap());
    let e = simulate_with_changes(&w, &cfg, &[(SECOND, "fifo".parse().unwrap())]).unwrap_err();
    assert!(e.to_string().contains("non-preemptive policies only; srtf preempts"), "{e}");
}
