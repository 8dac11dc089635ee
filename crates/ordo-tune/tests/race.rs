//! Racing (stopping runs whose mean JCT can no longer win) against the exhaustive search: the
//! whole space run both ways must give the same recommendation, non-preemptive pick and bound.

use ordo_core::{ClusterSpec, Placement, PolicySpec, Workload};
use ordo_sim::workload::{generate, Scenario, SizeMix, WorkloadParams};
use ordo_sim::SimConfig;
use ordo_tune::{summarize, tune, Constraints, Objective, StopReason, Summary, TuneOptions};
use std::time::Duration;

fn search(w: &Workload, cluster: &str, race: bool) -> (Summary, ordo_tune::TuneResult) {
    let base = SimConfig::new(
        ClusterSpec::parse(cluster).expect("cluster"),
        Placement::Pooled,
        PolicySpec::plain(ordo_core::Order::Fifo),
    );
    let opts = TuneOptions {
        budget: Duration::from_secs(3600),
        round: 16,
        race,
        constraints: Constraints::default(),
        objective: Objective::MeanJct,
        ..TuneOptions::default()
    };
    // The standard space with one starvation guard instead of three: half the size, every order.
    let space = ordo_tune::Space { maxwaits: vec!["", "+maxwait=24h"], ..ordo_tune::Space::standard() };
    let r = tune(w, &base, &space, &opts, &|_| {}).expect("search");
    assert_eq!(r.stopped, StopReason::Exhausted, "the whole space is searched");
    (summarize(&r, &opts.constraints, opts.objective), r)
}

fn same_choice(w: &Workload, cluster: &str) {
    let (raced, raw) = search(w, cluster, true);
    let (all, _) = search(w, cluster, false);
    let name = |e: &Option<ordo_tune::Evaluated>| e.as_ref().map(|e| (e.policy.clone(), e.mean_jct_s));
    assert_eq!(name(&raced.recommended), name(&all.recommended), "recommendation");
    assert_eq!(name(&raced.non_preemptive), name(&all.non_preemptive), "non-preemptive pick");
    assert_eq!(name(&raced.bound), name(&all.bound), "oracle bound");
    // Racing did something, and every run it stopped was really worse than its limit.
    assert!(raced.stopped_early > 0, "racing stopped no run");
    // Runs that thrash are abandoned in both; racing may stop one of them first.
    let tried = |s: &Summary| s.evaluated + s.stopped_early + s.abandoned.len();
    assert_eq!(tried(&raced), tried(&all), "every candidate tried once");
    for d in &raw.dropped {
        let Some(full) = all.all.iter().find(|e| e.policy == d.policy) else {
            assert!(all.abandoned.iter().any(|(p, _)| *p == d.policy), "{} neither run nor abandoned", d.policy);
            continue;
        };
        assert!(
            d.lower_bound_s <= full.mean_jct_s * (1.0 + 1e-9),
            "{}: bound {} above its mean {}",
            d.policy,
            d.lower_bound_s,
            full.mean_jct_s
        );
        assert!(
            full.mean_jct_s > d.limit_s,
            "{}: stopped at limit {} but its mean is {}",
            d.policy,
            d.limit_s,
            full.mean_jct_s
        );
    }
}

#[test]
fn racing_recommends_what_the_exhaustive_search_does_online_without_estimates() {
    let p = WorkloadParams { jobs: 60, seed: 3, load: 1.6, users: 6, ..WorkloadParams::default_for(Scenario::Online) };
    let w = generate(&p, 32);
    same_choice(&w, "4x8");
}

#[test]
fn racing_recommends_what_the_exhaustive_search_does_backlog_with_estimates() {
    let p = WorkloadParams {
        jobs: 50,
        seed: 5,
        estimates: true,
        size_mix: SizeMix::Mixed,
        ..WorkloadParams::default_for(Scenario::Backlog)
    };
    let w = generate(&p, 16);
    same_choice(&w, "2x8");
}
