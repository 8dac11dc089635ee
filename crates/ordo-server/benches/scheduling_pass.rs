//! Criterion benchmark: one scheduling pass of ordo-core's `Scheduler` as the server runs it
//! (consolidated placement), with 10,000 pending jobs on 100 nodes and 100,000 on 1,000 nodes
//! (8 GPUs each), the cluster full of running jobs; with and without explanations. The
//! `limits` variants put every job in a 100-element array of at most 20 running elements, give
//! 200 users a cap of 1% of the GPUs each and 10 groups 20% each, and make every fifth job a
//! 2-node gang, so that quota, array and gang checks run in the pass. (Jobs waiting on
//! dependencies are not in the scheduler at all: the server keeps them out until they are met.)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ordo_core::scheduler::JobReq;
use ordo_core::{ClusterSpec, JobId, Placement, PolicySpec, Quotas, Scheduler};

/// A scheduler over `nodes` x 8 GPUs with `pending` waiting jobs after the cluster was filled.
fn loaded(nodes: u32, pending: u32, policy: &str, limits: bool) -> Scheduler {
    let p: PolicySpec = policy.parse().expect("policy");
    let mut s = Scheduler::new(&ClusterSpec::uniform(nodes, 8), Placement::Consolidated, p);
    let total = nodes as u64 * 8;
    if limits {
        s.set_quotas(Quotas {
            default_user_gpus: Some(total / 100),
            default_group_gpus: Some(total / 5),
            ..Quotas::default()
        });
    }
    let mut x: u64 = 7;
    let mut next = 0u32;
    let mut submit = |s: &mut Scheduler, n: u32| {
        for _ in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let gpus = [1, 1, 1, 2, 2, 4, 8][(x >> 33) as usize % 7];
            let est = 60_000 * (1 + (x >> 40) as i64 % 240);
            let mut r = JobReq::new(JobId(next), next as i64, gpus, est);
            if limits {
                r.user = (x >> 20) as u32 % 200;
                r.group = r.user % 10;
                r.array = 1 + next / 100;
                if next.is_multiple_of(100) {
                    s.set_array_limit(r.array, Some(20));
                }
                if next.is_multiple_of(5) {
                    // A 2-node gang of 8 GPUs per node.
                    (r.gpus, r.nodes) = (16, 2);
                }
            }
            s.submit(r, 0).expect("fits");
            next += 1;
        }
    };
    // Fill the cluster with running jobs, then queue exactly `pending` more.
    submit(&mut s, nodes * 8);
    let plan = s.schedule(0, false);
    for st in plan.starts {
        s.start(st.job, &st.alloc, 0).expect("start");
    }
    let left = s.waiting_len() as u32;
    submit(&mut s, pending.saturating_sub(left));
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("scheduling_pass");
    g.sample_size(20);
    for (nodes, pending) in [(100u32, 10_000u32), (1_000, 100_000)] {
        for (policy, limits) in [
            ("fifo", false),
            ("fifo+easy", false),
            ("sjf+easy", false),
            ("fair", false),
            ("fifo+easy", true),
            ("fair", true),
        ] {
            let s = loaded(nodes, pending, policy, limits);
            let tag = if limits { "+limits" } else { "" };
            let label = format!("{policy}{tag}/{}pending_{nodes}nodes", s.waiting_len());
            g.bench_with_input(BenchmarkId::new("plan", &label), &s, |b, s| b.iter(|| s.schedule(1_000, false)));
            g.bench_with_input(BenchmarkId::new("plan_explain", &label), &s, |b, s| b.iter(|| s.schedule(1_000, true)));
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
