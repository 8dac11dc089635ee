//! What a preemption costs under each checkpoint rule (`--checkpoint`), and the guards against
//! thrashing (`--min-run`, `--max-preemptions`): a case worked out by hand, a thrashing case
//! and property tests (docs/POLICIES.md, "Checkpoints and thrashing").

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::SECOND;
use ordo_core::{Checkpoint, ClusterSpec, Job, JobId, Placement, Workload};
use ordo_sim::engine::validate_preemption;
use ordo_sim::{simulate, PreemptionRules, SimConfig, SimOutput};
use proptest::prelude::*;

/// Jobs `(submit s, gpus, runtime s, queue)`.
fn workload(raw: &[(i64, u32, i64, &str)]) -> Workload {
    let mut w = Workload::default();
    let u = w.user_index("u");
    let g = w.group_index("g");
    for (i, &(submit, gpus, run, queue)) in raw.iter().enumerate() {
        w.jobs.push(Job {
            id: JobId(i as u32),
            name: format!("j{i}"),
            user: u,
            group: g,
            submit: submit * SECOND,
            gpus,
            runtime: run * SECOND,
            queue: (!queue.is_empty()).then(|| queue.to_string()),
            ..Job::default()
        });
    }
    w.renumber();
    w
}

fn run(w: &Workload, c: &ClusterSpec, policy: &str, overhead_s: i64, rules: PreemptionRules) -> SimOutput {
    let cfg = SimConfig {
        preemption_overhead: overhead_s * SECOND,
        preemption: rules.clone(),
        check_invariants: true,
        ..SimConfig::new(c.clone(), Placement::Pooled, policy.parse().unwrap())
    };
    let out = simulate(w, &cfg).unwrap();
    validate_preemption(w, c, &out, cfg.preemption_overhead, &ordo_core::Speeds::default(), &rules).unwrap();
    out
}

fn rules(spec: &[&str]) -> PreemptionRules {
    let mut r = PreemptionRules::default();
    for s in spec {
        r.checkpoint.add(s).unwrap();
    }
    r
}

/// One GPU. Job A (100 s) starts at 0; job B (10 s) arrives at 50 s and SRTF preempts A (50 s
/// left against 10). B runs 50-60 s, then A resumes:
/// - `continuous`: A has 50 s left, ends at 110 s; nothing lost.
/// - `every:20s`: A saved at 20 and 40 s of work, loses 10 s: 60 s left, ends at 120 s.
/// - `none`: A restarts from zero: ends at 160 s, 50 s lost.
/// - `signal:5s`: A saves on the signal: 50 s left after a 5 s restart: ends at 115 s.
///
/// With a 2 s restart overhead on top, each ends 2 s later and loses 2 s more.
#[test]
fn worked_by_hand() {
    let w = workload(&[(0, 1, 100, ""), (50, 1, 10, "")]);
    let c = ClusterSpec::uniform(1, 1);
    for (rule, overhead, a_end, lost_s) in [
        ("continuous", 0, 110, 0),
        ("every:20s", 0, 120, 10),
        ("none", 0, 160, 50),
        ("signal:5s", 0, 115, 5),
        ("continuous", 2, 112, 2),
        ("every:20s", 2, 122, 12),
        ("none", 2, 162, 52),
        ("signal:5s", 2, 117, 7),
    ] {
        let out = run(&w, &c, "srtf", overhead, rules(&[rule]));
        let a = &out.records[0];
        assert_eq!((a.preemptions, a.end), (1, a_end * SECOND), "{rule} +{overhead}s: A's end");
        assert_eq!(out.records[1].end, 60 * SECOND, "{rule}: B runs 50-60 s");
        let lost = out.metrics.preemption_lost_gpu_hours * 3600.0;
        assert!((lost - lost_s as f64).abs() < 1e-9, "{rule} +{overhead}s: lost {lost} s, want {lost_s}");
    }
    // By queue: A's queue restarts from zero, everyone else's resumes.
    let w = workload(&[(0, 1, 100, "scratch"), (50, 1, 10, "")]);
    let out = run(&w, &c, "srtf", 0, rules(&["continuous", "scratch=none"]));
    assert_eq!(out.records[0].end, 160 * SECOND);
}

/// The default rules give the same records, job for job, as a configuration that never heard
/// of checkpoints (`continuous` spelled out for a queue changes nothing either).
#[test]
fn continuous_is_the_old_model() {
    let raw: Vec<(i64, u32, i64, &str)> =
        (0..60).map(|i| ((i * 37) % 400, 1 + (i as u32 * 7) % 8, 20 + (i * 53) % 500, "q")).collect();
    let w = workload(&raw);
    let c = ClusterSpec::uniform(2, 8);
    for policy in ["srtf", "las:thresholds=60/300,promote=0", "las:thresholds=60/300,compat=tiresias"] {
        let a = run(&w, &c, policy, 5, PreemptionRules::default());
        let b = run(&w, &c, policy, 5, rules(&["continuous", "q=continuous"]));
        assert_eq!(a.records, b.records, "{policy}");
        assert!(a.metrics.preemptions > 0, "{policy} preempts here");
    }
}

/// A long job under LAS on one GPU, with a short job arriving every 100 s: each arrival has
/// less attained service, so it preempts the long job. If the long job resumes where it
/// stopped it is preempted at every arrival and loses nothing. If it restarts from zero, every
/// preemption throws its work away: its protection doubles after each restart (60 s, 120 s,
/// 240 s, ...), so it is preempted a handful of times, not at every arrival; with
/// `--max-preemptions 2`, at most twice.
#[test]
fn restarts_from_zero_are_bounded() {
    let mut raw = vec![(0, 1, 1_000, "")];
    raw.extend((1..40).map(|k| (k * 100, 1, 10, "")));
    let w = workload(&raw);
    let c = ClusterSpec::uniform(1, 1);
    let las = "las:thresholds=50,promote=0";
    let resumes = run(&w, &c, las, 0, rules(&["continuous"]));
    // Arrivals at 100, 200, ... s while it runs: it ends at 1,100 s after 10 preemptions.
    assert_eq!((resumes.records[0].preemptions, resumes.records[0].end), (10, 1_100 * SECOND));
    assert_eq!(resumes.metrics.preemption_lost_gpu_hours, 0.0);
    let zero = run(&w, &c, las, 0, rules(&["none"]));
    let p = zero.records[0].preemptions;
    // Run i >= 2 lasted 60 s * 2^(i-2) and did less than 1,000 s: at most 6 preemptions.
    assert!((2..=6).contains(&p), "restarting from zero: {p} preemptions");
    assert!(zero.metrics.preemption_lost_gpu_hours > 0.0);
    let mut capped = rules(&["none"]);
    capped.max_preemptions = Some(2);
    let capped = run(&w, &c, las, 0, capped);
    assert!(capped.records[0].preemptions <= 2);
    assert!(capped.metrics.preemption_lost_gpu_hours <= zero.metrics.preemption_lost_gpu_hours);
    eprintln!(
        "long job: resumes {} preemptions; from zero {p} ({:.3} GPU-h lost), capped {} ({:.3} GPU-h)",
        resumes.records[0].preemptions,
        zero.metrics.preemption_lost_gpu_hours,
        capped.records[0].preemptions,
        capped.metrics.preemption_lost_gpu_hours
    );
}

fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("continuous".to_string()),
        Just("none".to_string()),
        (1i64..60).prop_map(|s| format!("every:{s}s")),
        (0i64..10).prop_map(|s| format!("signal:{s}s")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Every run is valid under its rules (each job's surviving work adds up to its run time,
    /// no GPU twice, capacity never exceeded), deterministic, and its guards hold: no job is
    /// preempted more than `max_preemptions` times; every preempted run of a job that
    /// checkpoints every `c` saved at least `c` (its runs are protected until they have), so
    /// it was preempted fewer than run time / `c` times; a job that restarts from zero was
    /// preempted a number of times logarithmic in its run time (its protection doubles).
    #[test]
    fn rules_hold(
        raw in prop::collection::vec((0i64..400, 1u32..9, 1i64..400, 0usize..2), 1..30),
        nodes in 1u32..3,
        pol in 0usize..4,
        default in rule(),
        train in rule(),
        overhead_s in 0i64..5,
        min_run_s in prop_oneof![Just(0i64), 0i64..80],
        max_p in prop_oneof![Just(None), (0u32..4).prop_map(Some)],
    ) {
        let policies = ["srtf", "las:thresholds=30/120,promote=0", "las:thresholds=60,promote=2", "las:thresholds=60/300,compat=tiresias"];
        let named: Vec<(i64, u32, i64, &str)> =
            raw.iter().map(|&(s, g, r, q)| (s, g, r, if q == 1 { "train" } else { "" })).collect();
        let w = workload(&named);
        let c = ClusterSpec::uniform(nodes, 8);
        let mut r = rules(&[&default, &format!("train={train}")]);
        r.min_run = min_run_s * SECOND;
        r.max_preemptions = max_p;
        let a = run(&w, &c, policies[pol], overhead_s, r.clone());
        let b = run(&w, &c, policies[pol], overhead_s, r.clone());
        prop_assert_eq!(&a.records, &b.records);
        for rec in &a.records {
            let job = &w.jobs[rec.job.idx()];
            if let Some(m) = max_p {
                prop_assert!(rec.preemptions <= m);
            }
            let p = rec.preemptions as i64;
            match r.checkpoint.of(job.queue.as_deref()) {
                // Every preempted run saved at least `every`.
                Checkpoint::Every(every) => prop_assert!(
                    p * every < job.runtime.max(1) || p == 0,
                    "job {} ({} ms, every {} ms) preempted {} times", rec.job, job.runtime, every, p
                ),
                // Run i >= 2 lasted at least floor * 2^(i-2) if it was preempted, and did less
                // than the whole run time after the overhead.
                Checkpoint::None if p >= 2 => {
                    let floor = r.min_run.max(ordo_sim::engine::ZERO_RESTART_FLOOR);
                    let least = 1i64.checked_shl((p - 2) as u32).unwrap_or(i64::MAX).saturating_mul(floor);
                    prop_assert!(
                        least < job.runtime + overhead_s * SECOND,
                        "job {} ({} ms) restarted from zero {} times", rec.job, job.runtime, p
                    );
                }
                _ => {}
            }
        }
    }
}
