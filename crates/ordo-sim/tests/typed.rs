//! Typed clusters (GPU models, memory, features) under every kind of policy: jobs run only on
//! nodes that serve their constraints, capacity is never exceeded, every job ends once, runs
//! are deterministic, work is done at the speed of the GPUs it ran on; and a cluster of one
//! kind gives the same records typed as untyped.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::SECOND;
use ordo_core::{ClusterSpec, GpuNeeds, Job, JobId, ModelPick, NodeSpec, Placement, PolicySpec, Speeds, Workload};
use ordo_sim::engine::{validate, validate_with};
use ordo_sim::{simulate, SimConfig};
use proptest::prelude::*;

const POLICIES: [&str; 13] = [
    "fifo",
    "sjf",
    "fifo+easy",
    "sjf+easy",
    "fifo+conservative",
    "sjf+conservative",
    "srtf",
    "las:thresholds=100,promote=2",
    "las:thresholds=100",
    "fair",
    "priority:age=100,fairshare=1000,size=-10,qos=1,half_life=300,max_age=600",
    "gittins:quantum=50,window=20",
    "sgf+easy+maxwait=100",
];

const MODELS: [&str; 3] = ["t4", "v100", "a100"];

/// Groups of (nodes, GPUs per node, model, has feature `ib`).
fn typed_cluster() -> impl Strategy<Value = ClusterSpec> {
    prop::collection::vec((1u32..4, 1u32..9, 0usize..3, any::<bool>()), 1..5).prop_map(|groups| {
        let mut nodes = Vec::new();
        for (count, gpus, m, ib) in groups {
            for _ in 0..count {
                let mut n = NodeSpec::new(format!("n{}", nodes.len()), gpus);
                n.gpu_model = Some(MODELS[m].to_string());
                n.gpu_mem_mib = ordo_core::speed::known_memory_mib(MODELS[m]);
                if ib {
                    n.features.push("ib".into());
                }
                nodes.push(n);
            }
        }
        ClusterSpec { nodes }
    })
}

/// Jobs: (submit s, gpus, runtime s, estimate factor, constraint kind, class).
type Raw = (i64, u32, i64, u32, u8, u8);

fn jobs() -> impl Strategy<Value = Vec<Raw>> {
    prop::collection::vec((0i64..600, 0u32..17, 1i64..300, 0u32..9, 0u8..8, 0u8..3), 1..40)
}

fn needs(kind: u8, class: u8) -> Option<Box<GpuNeeds>> {
    let mut n = GpuNeeds { class: Some(format!("c{class}")), measured_on: Some("v100".into()), ..GpuNeeds::default() };
    match kind {
        0..=2 => {} // flexible
        3 => n.models = vec!["a100".into()],
        4 => n.models = vec!["v100".into(), "a100".into()],
        5 => n.features = vec!["ib".into()],
        6 => n.min_mem_mib = 32 * 1024,
        _ => n.models = vec!["h100".into()], // no node has it: never satisfiable
    }
    Some(Box::new(n))
}

fn workload(raw: &[Raw], with_needs: bool) -> Workload {
    let mut w = Workload::default();
    let users: Vec<u32> = (0..3).map(|u| w.user_index(&format!("u{u}"))).collect();
    for (i, &(submit, gpus, run, f, kind, class)) in raw.iter().enumerate() {
        w.jobs.push(Job {
            id: JobId(i as u32),
            name: format!("j{i}"),
            user: users[i % 3],
            submit: submit * SECOND,
            gpus,
            runtime: run * SECOND,
            estimate: (f > 0).then(|| (run * SECOND * f as i64 / 4).max(SECOND)),
            priority: Some((i % 4) as i64),
            needs: if with_needs { needs(kind, class) } else { None },
            ..Job::default()
        });
    }
    w.renumber();
    w
}

fn speeds() -> Speeds {
    let mut s = Speeds::default();
    for (class, row) in [("*", [0.5, 1.0, 2.0]), ("c1", [0.4, 1.0, 3.0]), ("c2", [1.0, 1.0, 1.5])] {
        for (m, v) in MODELS.iter().zip(row) {
            s.set(class, m, v).unwrap();
        }
    }
    s
}

/// The run of policy `pol` on `c` with invariants checked and pick rule `pick` (0 fastest, 1
/// slowest, 2 first).
fn checked(c: &ClusterSpec, pol: usize, consolidated: bool, pick: usize) -> SimConfig {
    let policy: PolicySpec = POLICIES[pol].parse().unwrap();
    let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
    let mut cfg = SimConfig::new(c.clone(), placement, policy);
    cfg.check_invariants = true;
    cfg.model_pick = Some([ModelPick::Fastest, ModelPick::Slowest, ModelPick::First][pick]);
    cfg
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn constraints_and_capacity_hold(
        c in typed_cluster(),
        raw in jobs(),
        pol in 0usize..POLICIES.len(),
        consolidated in any::<bool>(),
        with_speeds in any::<bool>(),
        pick in 0usize..3,
    ) {
        let w = workload(&raw, true);
        let mut cfg = checked(&c, pol, consolidated, pick);
        // Speeds name every model, whichever the cluster has: keep only its models' entries.
        if with_speeds {
            let have = c.gpu_models();
            let mut s = Speeds::default();
            for class in ["*", "c1", "c2"] {
                for m in &have {
                    s.set(class, m, speeds().of(Some(class), Some(m))).unwrap();
                }
            }
            cfg.speeds = s;
        }
        let out = simulate(&w, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate_with(&w, &c, &out, 0, &cfg.speeds).map_err(TestCaseError::fail)?;
        // A job is refused exactly when it can never run: no node serves it, or no pool (nodes
        // of one model and feature set) it accepts has its GPUs.
        let largest_pool = |j: &Job| -> u64 {
            let n = j.needs.as_ref().unwrap();
            type Kind = (Option<String>, Vec<String>);
            let mut pools: Vec<(Kind, u64)> = Vec::new();
            for x in c.nodes.iter().filter(|x| ordo_sim::engine::serves(n, x)) {
                let k = (x.gpu_model.clone(), x.features.clone());
                match pools.iter_mut().find(|p| p.0 == k) {
                    Some(p) => p.1 += x.gpus as u64,
                    None => pools.push((k, x.gpus as u64)),
                }
            }
            pools.iter().map(|p| p.1).max().unwrap_or(0)
        };
        let refused: std::collections::BTreeSet<JobId> = out.rejected.iter().map(|r| r.job).collect();
        for j in &w.jobs {
            let never = j.gpus as u64 > largest_pool(j) || largest_pool(j) == 0;
            prop_assert_eq!(refused.contains(&j.id), never, "job {} ({} GPUs, needs {:?})", &j.name, j.gpus, &j.needs);
        }
        let again = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(&out.records, &again.records);
    }

    /// A cluster of one kind, typed or not, gives the same records job for job.
    #[test]
    fn one_kind_typed_is_untyped(raw in jobs(), pol in 0usize..POLICIES.len(), consolidated in any::<bool>(), n in 1u32..5, g in 1u32..9) {
        let c = ClusterSpec::parse(&format!("{n}x{g}:a100")).unwrap();
        let w = workload(&raw, false);
        let policy: PolicySpec = POLICIES[pol].parse().unwrap();
        let placement = if consolidated { Placement::Consolidated } else { Placement::Pooled };
        let plain = SimConfig::new(c.clone(), placement, policy);
        let mut typed = plain.clone();
        typed.model_pick = Some(ModelPick::Slowest);
        let a = simulate(&w, &plain).unwrap();
        let b = simulate(&w, &typed).unwrap();
        validate(&w, &c, &b, 0).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&a.records, &b.records);
        // The same metrics, plus the typed run's utilisation by model.
        let mut mb = b.metrics.clone();
        prop_assert_eq!(mb.utilization_by_model.len(), 1);
        mb.utilization_by_model.clear();
        prop_assert_eq!(&a.metrics, &mb);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Limits by GPU model (`max_running_gpus_by_model`, for every user, for user u0 and for
    /// every group): no user or group ever holds more GPUs of a model than its limit, every
    /// job still ends once, and runs are deterministic. Limits that never bind (more GPUs than
    /// the cluster has: at 100% a job whose owner holds some would still be over it) give the
    /// records of the run without quotas (under conservative backfill, of the run with a limit
    /// on all GPUs that never binds).
    #[test]
    fn model_quotas_hold(
        c in typed_cluster(),
        raw in jobs(),
        pol in 0usize..POLICIES.len(),
        consolidated in any::<bool>(),
        pick in 0usize..3,
        lims in prop::collection::vec((0usize..3, prop::option::of(0u64..10), prop::option::of(0u64..10), prop::option::of(0u64..14)), 3),
    ) {
        use ordo_core::{GpuLimit, QuotaConfig};
        let w = workload(&raw, true);
        let mut cfg = checked(&c, pol, consolidated, pick);
        let have = c.gpu_models();
        let mut q = QuotaConfig::default();
        // (owner, model) -> limit, for the check below: owner 0..3 users, 100 + g groups.
        let mut limit: std::collections::BTreeMap<(u32, String), u64> = Default::default();
        let u0 = w.users.iter().position(|u| u == "u0").unwrap() as u32;
        for &(m, def_user, user0, def_group) in &lims {
            let model = MODELS[m].to_string();
            if !have.contains(&model) {
                continue;
            }
            if let Some(l) = def_user {
                q.default_user.max_running_gpus_by_model.insert(model.to_uppercase(), GpuLimit::Count(l));
            }
            if let Some(l) = user0 {
                q.users.entry("u0".into()).or_default().max_running_gpus_by_model.insert(model.clone(), GpuLimit::Count(l));
            }
            if let Some(l) = def_group {
                q.default_group.max_running_gpus_by_model.insert(model.clone(), GpuLimit::Count(l));
            }
        }
        for u in 0..w.users.len() as u32 {
            for m in &have {
                let own = if u == u0 { q.users.get("u0").and_then(|o| o.max_running_gpus_by_model.get(m)) } else { None };
                let l = own.or_else(|| q.default_user.max_running_gpus_by_model.get(&m.to_uppercase()));
                if let Some(GpuLimit::Count(l)) = l {
                    limit.insert((u, m.clone()), *l);
                }
            }
        }
        for g in 0..w.groups.len().max(1) as u32 {
            for m in &have {
                if let Some(GpuLimit::Count(l)) = q.default_group.max_running_gpus_by_model.get(m) {
                    limit.insert((100 + g, m.clone()), *l);
                }
            }
        }
        cfg.quotas = Some(q);
        let out = simulate(&w, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        validate(&w, &c, &out, 0).map_err(TestCaseError::fail)?;
        // GPUs held per (owner, model) over time (ends before starts at a tie).
        let mut ev: Vec<(i64, i64, u32, String)> = Vec::new();
        for r in &out.records {
            let j = &w.jobs[r.job.idx()];
            for s in &r.segments {
                for (n, ids) in s.gpu_ids.iter() {
                    let m = c.nodes[n as usize].gpu_model.clone().unwrap();
                    let k = ids.len() as i64;
                    for owner in [j.user, 100 + j.group] {
                        ev.push((s.start, k, owner, m.clone()));
                        ev.push((s.end, -k, owner, m.clone()));
                    }
                }
            }
        }
        ev.sort_by_key(|e| (e.0, e.1));
        let mut held: std::collections::BTreeMap<(u32, String), i64> = Default::default();
        for (t, d, owner, m) in ev {
            let h = held.entry((owner, m.clone())).or_default();
            *h += d;
            if let Some(&l) = limit.get(&(owner, m.clone())) {
                prop_assert!(*h <= l as i64, "owner {} holds {} GPUs of {} at {} (limit {})", owner, h, m, t, l);
            }
        }
        let again = simulate(&w, &cfg).unwrap();
        prop_assert_eq!(&out.records, &again.records);
        // Limits that never bind: the same records as without quotas.
        let mut free = cfg.clone();
        free.quotas = None;
        let mut loose = QuotaConfig::default();
        for m in &have {
            loose.default_user.max_running_gpus_by_model.insert(m.clone(), GpuLimit::Count(10_000));
        }
        let mut with_loose = cfg.clone();
        with_loose.quotas = Some(loose);
        let b = simulate(&w, &with_loose).unwrap();
        // Conservative backfill keeps no standing reservations under any GPU limit (each pass
        // plans afresh): compare it with a limit on all GPUs that never binds either.
        if POLICIES[pol].contains("conservative") {
            let mut total = QuotaConfig::default();
            total.default_user.max_running_gpus = Some(GpuLimit::Count(10_000));
            free.quotas = Some(total);
        }
        let a = simulate(&w, &free).unwrap();
        prop_assert_eq!(&a.records, &b.records);
    }
}

/// Worked out by hand: 1 a100 node and 1 v100 node of 4 GPUs, a100 twice as fast. Job a (4
/// GPUs, 100 s measured on v100, flexible) arrives first and takes the a100 node (fastest): it
/// runs 50 s. Job b (4 GPUs, a100 only, 100 s measured on v100) arrives at 1 s: no a100 free,
/// the v100 node does not qualify; it starts at 50 s and runs 50 s. Job c (4 GPUs, flexible)
/// at 2 s takes the v100 node: 100 s.
#[test]
fn hand_worked_typed_fifo() {
    let c = ClusterSpec::parse("1x4:a100,1x4:v100").unwrap();
    let mut w = Workload::default();
    let mk = |i: u32, submit: i64, models: &[&str]| Job {
        id: JobId(i),
        name: ["a", "b", "c"][i as usize].into(),
        submit: submit * SECOND,
        gpus: 4,
        runtime: 100 * SECOND,
        needs: Some(Box::new(GpuNeeds {
            models: models.iter().map(|m| m.to_string()).collect(),
            measured_on: Some("v100".into()),
            ..GpuNeeds::default()
        })),
        ..Job::default()
    };
    w.jobs = vec![mk(0, 0, &[]), mk(1, 1, &["a100"]), mk(2, 2, &[])];
    let mut s = Speeds::default();
    s.set("*", "a100", 2.0).unwrap();
    s.set("*", "v100", 1.0).unwrap();
    for policy in ["fifo", "fifo+easy", "fifo+conservative"] {
        let mut cfg = SimConfig::new(c.clone(), Placement::Consolidated, policy.parse().unwrap());
        cfg.speeds = s.clone();
        cfg.check_invariants = true;
        let out = simulate(&w, &cfg).unwrap();
        validate_with(&w, &c, &out, 0, &s).unwrap();
        let got: Vec<(i64, i64)> = out.records.iter().map(|r| (r.start / SECOND, r.end / SECOND)).collect();
        // Strict fifo: c waits behind b (blocked on a100) until b starts at 50 s.
        let want =
            if policy == "fifo" { vec![(0, 50), (50, 100), (50, 150)] } else { vec![(0, 50), (50, 100), (2, 102)] };
        assert_eq!(got, want, "{policy}");
    }
}
