//! Faithfulness to the Lucid simulator (ASPLOS'23, S-Lab-System-Group/Lucid) on an input CI
//! has: days [42, 49) of philly_rfold.csv, the 7,264 jobs of at most 24 h (run times rounded up
//! to whole seconds, as Lucid's one-second clock needs), as one virtual cluster of 24 nodes of
//! 8 GPUs, consolidated placement. Lucid's figures below were produced by running Lucid itself
//! beside ordo (docs/POLICIES.md, "Lucid": `scripts/lucid-input.py` writes its input; Lucid is
//! not run here). The Venus trace Lucid bundles could not be had (see docs/POLICIES.md).

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod common;

use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, Workload};
use ordo_sim::{simulate, SimConfig};
use ordo_trace::{load_path, Format, LoadOptions};

/// Jobs submitted in the same second that Lucid takes in another order than the file's (its
/// pandas sort is not stable): each group in Lucid's order, by job index in the input.
const LUCID_TIES: &[&[u32]] = &[
    &[1004, 1003],
    &[1035, 1034],
    &[1319, 1318],
    &[1330, 1331, 1329],
    &[1515, 1514],
    &[1716, 1715],
    &[1730, 1729],
    &[1771, 1770],
    &[2127, 2126],
    &[2141, 2140],
    &[2156, 2155],
    &[2496, 2495, 2497],
    &[2551, 2550],
    &[2678, 2677],
    &[2690, 2689],
    &[2724, 2723],
    &[3149, 3148],
    &[3431, 3430],
    &[3436, 3435, 3432, 3433, 3434],
    &[4052, 4056, 4053, 4055, 4054],
    &[4327, 4328, 4326],
    &[4851, 4852, 4850],
    &[5461, 5459, 5460],
    &[5574, 5572, 5573],
    &[7121, 7122, 7120],
];

/// The input: the window's jobs of at most 24 h, whole seconds, in Lucid's order of ties.
fn input(lucid_ties: bool) -> Option<Workload> {
    let path = common::trace("philly/philly_rfold.csv")?;
    let opts = LoadOptions::new(Format::Philly).with_window(Some(42.0), Some(49.0));
    let mut w = load_path(&path, &opts).expect("trace loads").workload;
    w.jobs.retain(|j| j.runtime <= 86_400_000);
    for j in &mut w.jobs {
        j.runtime = (j.runtime + 999) / 1000 * 1000; // whole seconds, rounded up
    }
    assert_eq!(w.jobs.len(), 7_264);
    if lucid_ties {
        let mut order: Vec<usize> = (0..w.jobs.len()).collect();
        for group in LUCID_TIES {
            let mut slots: Vec<usize> = group.iter().map(|&i| i as usize).collect();
            slots.sort_unstable();
            for (slot, &job) in slots.iter().zip(group.iter()) {
                order[*slot] = job as usize;
            }
        }
        let jobs = std::mem::take(&mut w.jobs);
        w.jobs = order.iter().map(|&i| jobs[i].clone()).collect();
    }
    for (i, j) in w.jobs.iter_mut().enumerate() {
        j.id = JobId(i as u32);
    }
    Some(w)
}

fn run(w: &Workload, policy: &str, overhead_s: i64) -> ordo_sim::Metrics {
    let mut cfg =
        SimConfig::new(ClusterSpec::uniform(24, 8), Placement::Consolidated, policy.parse::<PolicySpec>().unwrap());
    cfg.preemption_overhead = overhead_s * 1000;
    let out = simulate(w, &cfg).unwrap();
    ordo_sim::engine::validate(w, &cfg.cluster, &out, cfg.preemption_overhead).unwrap();
    out.metrics
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    ((got - want) / want).abs() <= tol
}

/// Strict FIFO and SJF (true run times), non-preemptive: Lucid gives mean JCT 22,635.14 s and
/// 9,373.69 s, mean queueing delay 17,148.25 s and 3,886.79 s. On this input with Lucid's order
/// of ties ordo gives 22,693.92 s and 9,423.30 s (+0.26%, +0.53%): the whole gap is queueing
/// (+58.8 s and +49.6 s per job on average), run times agree. The cause is not found yet
/// (docs/POLICIES.md, "Lucid"); the test holds ordo within 0.6% of Lucid and its queueing at most
/// 60 s per job above Lucid's.
#[test]
fn fifo_and_sjf_match_lucid() {
    let Some(w) = input(true) else { return };
    for (policy, jct, wait) in [("fifo", 22_635.14, 17_148.25), ("sjf", 9_373.69, 3_886.79)] {
        let m = run(&w, policy, 0);
        assert!(within(m.mean_jct_s, jct, 0.006), "{policy}: mean JCT {:.2} s, Lucid {jct} s", m.mean_jct_s);
        let extra = m.mean_wait_s - wait;
        assert!((0.0..=60.0).contains(&extra), "{policy}: mean wait {:.2} s, Lucid {wait} s", m.mean_wait_s);
    }
}

/// In the file's order of ties instead of Lucid's, strict FIFO under consolidated placement gives
/// 23,952 s (+5.5% over Lucid's order): which of two jobs submitted in the same second goes first
/// decides which node each lands on. SJF orders by run time first, so it does not move.
#[test]
fn tie_order_moves_consolidated_fifo() {
    let Some(w) = input(false) else { return };
    let fifo = run(&w, "fifo", 0).mean_jct_s;
    assert!(within(fifo, 23_952.05, 0.001), "fifo in file order: mean JCT {fifo:.2} s");
    assert!(within(run(&w, "sjf", 0).mean_jct_s, 9_423.30, 0.001));
}

/// Preemptive orders, where the two simulators are not the same model (docs/POLICIES.md,
/// "Lucid"): Lucid's `srtf` gives 7,748.09 s (queueing 2,233.26 s) and its `tiresias` 9,700.37 s
/// (4,197.36 s), with 40 s lost per restart (60 s above 8 GPUs). ordo's `srtf` and
/// `las:thresholds=18000` (Lucid's Tiresias: two queues split at 18,000 GPU-seconds) with
/// `--preemption-overhead 40` give 7,242 s and 8,105 s: lower by 6.5% and 16.4%, the gaps the
/// documented differences make (Lucid picks who runs by GPU count alone and leaves a chosen job
/// waiting when consolidated placement then fails; its Tiresias decides once a minute and orders
/// each queue by submit time, running jobs included). The bands pin those gaps.
#[test]
fn preemptive_orders_differ_from_lucid_by_the_documented_gaps() {
    let Some(w) = input(true) else { return };
    for (policy, lucid, lo, hi) in
        [("srtf", 7_748.09, -0.085, -0.045), ("las:thresholds=18000", 9_700.37, -0.185, -0.145)]
    {
        let m = run(&w, policy, 40);
        let gap = (m.mean_jct_s - lucid) / lucid;
        assert!(
            (lo..=hi).contains(&gap),
            "{policy}: mean JCT {:.0} s, Lucid {lucid} s: gap {:.1}%",
            m.mean_jct_s,
            gap * 100.0
        );
        assert!(m.preemptions > 0, "{policy} preempts");
    }
}
