//! GPU models, GPU memory and node features in the server's state machine: nodes register what
//! their GPUs are, jobs that ask for a model, memory or features run only on nodes that have
//! them (a family name matching its longer names), a job no registered node can serve is
//! refused at submit naming what is missing, a constrained job blocked while other GPUs are
//! free says so, constraints survive a restart and wait out a node of their kind being down,
//! and what an agent sends is bounded (names, features, kinds of node).

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};

mod common;
use common::*;

fn node(name: &str, gpus: u32, model: &str, mem_g: u64, features: &[&str]) -> RegisterRequest {
    RegisterRequest {
        gpu_model: Some(model.into()),
        gpu_mem_mib: Some(mem_g * 1024),
        features: features.iter().map(|f| f.to_string()).collect(),
        ..reg(name, gpus)
    }
}

fn asks(gpus: u32, models: &[&str], mem_g: Option<u64>, features: &[&str]) -> SubmitRequest {
    SubmitRequest {
        gpu_models: models.iter().map(|m| m.to_string()).collect(),
        gpu_mem_mib: mem_g.map(|g| g * 1024),
        features: features.iter().map(|f| f.to_string()).collect(),
        ..job(gpus)
    }
}

fn end(c: &mut Core, node: &str, job: u64, t: (i64, i64)) {
    let rep = EndReport {
        node: node.into(),
        job,
        attempt: 0,
        outcome: Outcome::Exited,
        exit_code: Some(0),
        signal: None,
        started_at: t.0,
        ended_at: t.1,
        message: None,
    };
    c.report(&agent(node), &rep, t.1).unwrap();
}

/// Running jobs: (id, node).
fn placed(c: &Core, now: i64) -> Vec<(u64, String)> {
    c.queue(now)
        .jobs
        .into_iter()
        .filter(|j| matches!(j.state, JobState::Starting | JobState::Running))
        .map(|j| (j.id, j.node.unwrap()))
        .collect()
}

/// `a1` (a100, 80G, ib), `a2` (a100-sxm4-80gb, 80G), `v1` (v100, 32G): 2 GPUs each.
fn lab(tag: &str, policy: &str, t0: i64) -> (std::path::PathBuf, Core) {
    let dir = tempdir(tag);
    let mut c = Core::open(cfg(&dir, policy), t0).unwrap();
    c.register(&agent("a1"), &node("a1", 2, "A100", 80, &["IB"]), t0).unwrap();
    c.register(&agent("a2"), &node("a2", 2, "NVIDIA A100-SXM4-80GB", 80, &[]), t0).unwrap();
    c.register(&agent("v1"), &node("v1", 2, "v100", 32, &[]), t0).unwrap();
    (dir, c)
}

#[test]
fn nodes_register_their_kind_as_the_scheduler_compares_it() {
    let t0 = 1_000_000;
    let (_dir, c) = lab("typed-kinds", "fifo", t0);
    let n = c.nodes();
    let kind = |name: &str| {
        let x = n.iter().find(|x| x.name == name).unwrap();
        (x.gpu_model.clone(), x.gpu_mem_mib, x.features.clone())
    };
    assert_eq!(kind("a1"), (Some("a100".into()), Some(81_920), vec!["ib".to_string()]));
    assert_eq!(kind("a2"), (Some("a100-sxm4-80gb".into()), Some(81_920), vec![]));
    assert_eq!(kind("v1"), (Some("v100".into()), Some(32_768), vec![]));
}

/// Jobs for one model run on its nodes only; a family name (`a100`) takes every node of the
/// family; memory and features narrow it; a job array carries its constraint to every element.
#[test]
fn constrained_jobs_run_only_on_nodes_they_accept() {
    let t0 = 1_000_000;
    let (_dir, mut c) = lab("typed-place", "fifo+easy", t0);
    let v = c.submit(&user("alice"), asks(2, &["v100"], None, &[]), t0).unwrap();
    let ib = c.submit(&user("alice"), asks(1, &[], None, &["ib"]), t0).unwrap();
    let big = c.submit(&user("alice"), asks(2, &[], Some(40), &[]), t0).unwrap();
    let fam = c.submit(&user("alice"), asks(1, &["a100"], None, &[]), t0).unwrap();
    c.pass(t0).unwrap();
    let on: std::collections::BTreeMap<u64, String> = placed(&c, t0).into_iter().collect();
    assert_eq!(on.get(&v).map(String::as_str), Some("v1"), "{on:?}");
    assert_eq!(on.get(&ib).map(String::as_str), Some("a1"), "{on:?}");
    assert_eq!(on.get(&big).map(String::as_str), Some("a2"), "40G or more: an a100 node, the one left whole {on:?}");
    assert_eq!(on.get(&fam).map(String::as_str), Some("a1"), "a100 takes a100-sxm4-80gb too: {on:?}");
    // Every job accepted by its node, and the stored job keeps what it asked (lowercased).
    let j = c.job(ib, t0).unwrap();
    assert_eq!(j.features, vec!["ib".to_string()]);
    let j = c.job(big, t0).unwrap();
    assert_eq!(j.gpu_mem_mib, Some(40_960));
    // An array: each element asks the same.
    let t1 = t0 + 1_000;
    for (id, n) in on {
        end(&mut c, &n, id, (t0, t1));
    }
    let arr = c
        .submit(&user("alice"), SubmitRequest { array: Some("0-5".into()), ..asks(1, &["v100"], None, &[]) }, t1)
        .unwrap();
    c.pass(t1).unwrap();
    let r = placed(&c, t1);
    assert_eq!(r.len(), 2, "two elements on v1's 2 GPUs, the a100 nodes stay idle: {r:?}");
    assert!(r.iter().all(|(id, n)| n == "v1" && (arr..arr + 6).contains(id)), "{r:?}");
    let waiting = c.job(arr + 5, t1).unwrap();
    assert_eq!(waiting.gpu_models, vec!["v100".to_string()]);
}

/// Random jobs with random constraints on a mixed cluster, random ends: after every pass, every
/// running job is on a node whose kind it accepts and no GPU is given twice (300 steps).
#[test]
fn random_constrained_jobs_always_land_on_a_node_they_accept() {
    let t0 = 1_000_000;
    let (_dir, mut c) = lab("typed-random", "sjf+easy", t0);
    c.register(&agent("t1"), &node("t1", 4, "t4", 16, &["ib"]), t0).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let models: [&[&str]; 5] = [&[], &["a100"], &["v100"], &["t4", "v100"], &["a100-sxm4-80gb"]];
    let mut t = t0;
    let mut ran = std::collections::BTreeSet::new();
    for step in 0..300 {
        t += 1_000;
        let m = models[rnd(5) as usize];
        let mem = [None, None, Some(16), Some(40)][rnd(4) as usize];
        let feat: &[&str] = if rnd(4) == 0 { &["ib"] } else { &[] };
        let gpus = 1 + rnd(2) as u32;
        let req = asks(gpus, m, mem, feat);
        match c.submit(&user(["alice", "bob"][rnd(2) as usize]), req.clone(), t) {
            Ok(_) => {}
            // Only a constraint no node can serve is refused: a t4 or v100 with 40G, an
            // a100-sxm4-80gb with ib.
            Err(ApiError::Unprocessable(why)) => assert!(why.contains("can never run"), "step {step}: {why}"),
            Err(e) => panic!("step {step}: {e}"),
        }
        c.pass(t).unwrap();
        let jobs = c.queue(t).jobs;
        let nodes = c.nodes();
        let mut used = std::collections::BTreeSet::new();
        for j in jobs.iter().filter(|j| matches!(j.state, JobState::Starting | JobState::Running)) {
            let n = nodes.iter().find(|n| Some(&n.name) == j.node.as_ref()).unwrap();
            let model = n.gpu_model.as_deref().unwrap();
            let ok_model = j.gpu_models.is_empty()
                || j.gpu_models.iter().any(|a| model == a || model.starts_with(&format!("{a}-")));
            let ok_mem = j.gpu_mem_mib.is_none_or(|m| n.gpu_mem_mib.unwrap() >= m);
            let ok_feat = j.features.iter().all(|f| n.features.contains(f));
            assert!(
                ok_model && ok_mem && ok_feat,
                "step {step}: job {} ({:?}) on {} ({n:?})",
                j.id,
                j.gpu_models,
                n.name
            );
            for g in &j.gpu_ids {
                assert!(used.insert((n.name.clone(), *g)), "step {step}: GPU {}/{g} given twice", n.name);
            }
            ran.insert(j.id);
        }
        // End one running job in two.
        if let Some(j) = jobs.iter().find(|j| j.state == JobState::Starting && rnd(2) == 0) {
            let n = j.node.clone().unwrap();
            end(&mut c, &n, j.id, (t, t + 500));
        }
    }
    assert!(ran.len() > 50, "jobs ran: {}", ran.len());
}

/// A job no registered node can ever serve is refused (422) with what is missing; nothing is
/// stored. Sizes are per kind: a job's GPUs (and a gang's nodes) are all of one kind.
#[test]
fn never_servable_jobs_are_refused_naming_the_constraint() {
    let t0 = 1_000_000;
    let (_dir, mut c) = lab("typed-refuse", "fifo", t0);
    let refused = |c: &mut Core, r: SubmitRequest| match c.submit(&user("alice"), r, t0) {
        Err(ApiError::Unprocessable(m)) => m,
        other => panic!("expected 422, got {other:?}"),
    };
    let m = refused(&mut c, asks(1, &["h100"], None, &[]));
    assert!(m.contains("it asks for h100 and no node has a GPU of model h100 (the cluster has"), "{m}");
    let m = refused(&mut c, asks(1, &[], Some(100), &[]));
    assert!(m.contains("no node has GPUs with at least 100 GiB of memory (the largest known is 80 GiB)"), "{m}");
    let m = refused(&mut c, asks(1, &[], None, &["nvlink"]));
    assert!(m.contains("no node has feature `nvlink`"), "{m}");
    // Each exists, but not together: a v100 with ib.
    let m = refused(&mut c, asks(1, &["v100"], None, &["ib"]));
    assert!(m.contains("no node has all of it together"), "{m}");
    // `a10` is not a family of `a100`.
    let m = refused(&mut c, asks(1, &["a10"], None, &[]));
    assert!(m.contains("no node has a GPU of model a10 "), "{m}");
    // Three v100 GPUs: more than its one 2-GPU node, whatever the a100 nodes have.
    let m = refused(&mut c, asks(3, &["v100"], None, &[]));
    assert!(m.contains("the largest node with GPUs it accepts has 2"), "{m}");
    // Two nodes of 2 GPUs of one kind: no kind has two.
    let m = refused(&mut c, SubmitRequest { nodes: Some(2), ..asks(4, &["a100"], None, &[]) });
    assert!(m.contains("but 1 of the 1 registered nodes of one kind it accepts have that many"), "{m}");
    // Unconstrained, 6 GPUs split over nodes: the three nodes have 6, but of three kinds.
    let m = refused(&mut c, job(6));
    assert!(m.contains("needs more than the 1 registered nodes of one kind have in all (2)"), "{m}");
    // Bad names are 400, naming the field.
    let bad = c.submit(&user("alice"), asks(1, &["a100;rm"], None, &[]), t0);
    assert!(matches!(&bad, Err(ApiError::BadRequest(m)) if m.starts_with("field `gpu_models`:")), "{bad:?}");
    let many: Vec<String> = (0..17).map(|i| format!("m{i}")).collect();
    let bad = c.submit(&user("alice"), SubmitRequest { gpu_models: many, ..job(1) }, t0);
    assert!(
        matches!(&bad, Err(ApiError::BadRequest(m)) if m.contains("17 GPU models, more than the limit of 16")),
        "{bad:?}"
    );
    let bad = c.submit(&user("alice"), SubmitRequest { gpu_mem_mib: Some(0), ..job(1) }, t0);
    assert!(matches!(&bad, Err(ApiError::BadRequest(m)) if m.starts_with("field `gpu_mem_mib`:")), "{bad:?}");
    assert!(c.queue(t0).jobs.is_empty(), "nothing stored");
    // What all three kinds serve is taken.
    c.submit(&user("alice"), asks(2, &["a100", "v100"], Some(32), &[]), t0).unwrap();
}

/// A constrained job blocked while GPUs it does not accept are free says so: what it needs,
/// what is free there, which free GPUs do not qualify.
#[test]
fn a_blocked_constrained_job_says_which_free_gpus_do_not_qualify() {
    let t0 = 1_000_000;
    let (_dir, mut c) = lab("typed-reason", "fifo+easy", t0);
    let first = c.submit(&user("alice"), asks(2, &["v100"], None, &[]), t0).unwrap();
    c.pass(t0).unwrap();
    let waits = c.submit(&user("alice"), asks(2, &["v100"], None, &[]), t0).unwrap();
    c.pass(t0).unwrap();
    assert_eq!(placed(&c, t0), vec![(first, "v1".to_string())]);
    let w = c.job(waits, t0).unwrap().wait.unwrap();
    assert!(
        w.text.contains("its GPU constraint holds it: needs 2 GPUs of v100: 0 free there; 4 free GPUs of a100, a100-sxm4-80gb do not qualify"),
        "{}",
        w.text
    );
    assert!(matches!(w.detail, Some(ordo_core::Reason::Constraint { need: 2, .. })), "{:?}", w.detail);
    // /metrics counts it by its reason.
    let s = c.snapshot(t0);
    assert_eq!(s.pending_by_reason.get("constraint"), Some(&1), "{:?}", s.pending_by_reason);
}

/// Constraints are stored with the job: after a restart a waiting job still asks for its model;
/// while no node of its kind is up it waits, saying why, and starts when one comes back.
#[test]
fn constraints_survive_a_restart_and_wait_for_their_kind() {
    let t0 = 1_000_000;
    let (dir, mut c) = lab("typed-restart", "fifo+easy", t0);
    let a = c.submit(&user("alice"), asks(2, &["v100"], None, &[]), t0).unwrap();
    c.pass(t0).unwrap();
    let b = c.submit(&user("alice"), asks(1, &["v100"], Some(32), &[]), t0).unwrap();
    drop(c);
    let t1 = t0 + 1_000;
    let mut c = Core::open(cfg(&dir, "fifo+easy"), t1).unwrap();
    let j = c.job(b, t1).unwrap();
    assert_eq!((j.gpu_models.clone(), j.gpu_mem_mib), (vec!["v100".to_string()], Some(32_768)));
    // Every node reconnects but v1, which is declared down: its job is requeued, and both wait.
    let t2 = t1 + (c.config().node_timeout_ms + c.config().fence_grace_ms) as i64 + 1;
    for n in ["a1", "a2"] {
        c.poll(&agent(n), &PollRequest { node: n.into(), running: vec![], wait_ms: 0, problem: None }, t2 - 10)
            .unwrap();
    }
    c.check_nodes(t2).unwrap();
    c.pass(t2).unwrap();
    assert!(placed(&c, t2).is_empty(), "nothing runs on the a100 nodes: {:?}", placed(&c, t2));
    for id in [a, b] {
        let w = c.job(id, t2).unwrap().wait.unwrap();
        assert!(
            w.text.contains("no node that is up and takes work has GPUs it accepts (v100")
                && w.text.contains("no node has a GPU of model v100 (the cluster has a100, a100-sxm4-80gb)"),
            "job {id}: {}",
            w.text
        );
    }
    assert_eq!(c.snapshot(t2).pending_by_reason.get("unplaceable"), Some(&2));
    c.register(&agent("v1"), &node("v1", 2, "v100", 32, &[]), t2).unwrap();
    c.pass(t2).unwrap();
    assert_eq!(placed(&c, t2), vec![(a, "v1".to_string())], "the requeued job first, in its place");
}

/// A node that registers again as another kind keeps the jobs it runs (they hold their GPUs),
/// and jobs for its old kind wait for one; the scheduler sees the new kind at once.
#[test]
fn a_node_that_changes_kind_keeps_its_running_jobs() {
    let t0 = 1_000_000;
    let (_dir, mut c) = lab("typed-rekind", "fifo+easy", t0);
    let a = c.submit(&user("alice"), asks(1, &["v100"], None, &[]), t0).unwrap();
    c.pass(t0).unwrap();
    c.poll(
        &agent("v1"),
        &PollRequest {
            node: "v1".into(),
            running: vec![RunningJob { job: a, started_at: t0, attempt: 0, port: None }],
            wait_ms: 0,
            problem: None,
        },
        t0 + 1,
    )
    .unwrap();
    let t1 = t0 + 1_000;
    c.register(&agent("v1"), &node("v1", 2, "l40s", 48, &[]), t1).unwrap();
    let j = c.job(a, t1).unwrap();
    assert_eq!((j.state, j.node.as_deref()), (JobState::Running, Some("v1")), "{j:?}");
    let b = c.submit(&user("alice"), asks(1, &["l40s"], None, &[]), t1).unwrap();
    let refused = c.submit(&user("alice"), asks(1, &["v100"], None, &[]), t1);
    assert!(matches!(refused, Err(ApiError::Unprocessable(_))), "no v100 is registered now: {refused:?}");
    c.pass(t1).unwrap();
    let on: Vec<(u64, String)> = placed(&c, t1);
    assert!(on.contains(&(b, "v1".to_string())) && on.contains(&(a, "v1".to_string())), "{on:?}");
}

/// What an agent sends is bounded: 10,000 features or a 1 MB model name are refused (400) and
/// leave nothing behind; the kinds of node stay within what the scheduler models
/// (`ordo_core::pools::MAX_POOLS`, counted over every registered node, up or down): one more
/// is refused (422) naming the limit, while a node of a kind already known still registers.
#[test]
fn what_agents_send_is_bounded_and_kinds_are_capped() {
    let t0 = 1_000_000;
    let dir = tempdir("typed-bounds");
    let mut c = Core::open(cfg(&dir, "fifo"), t0).unwrap();
    let many: Vec<String> = (0..10_000).map(|i| format!("f{i}")).collect();
    let r = c.register(&agent("evil"), &RegisterRequest { features: many, ..reg("evil", 1) }, t0);
    assert!(
        matches!(&r, Err(ApiError::BadRequest(m)) if m == "field `features`: 10000 features, more than the limit of 32"),
        "{r:?}"
    );
    let r =
        c.register(&agent("evil"), &RegisterRequest { gpu_model: Some("a".repeat(1_000_000)), ..reg("evil", 1) }, t0);
    assert!(
        matches!(&r, Err(ApiError::BadRequest(m)) if m == "field `gpu_model`: 1000000 bytes, more than the limit of 128"),
        "{r:?}"
    );
    let r = c.register(&agent("evil"), &RegisterRequest { features: vec!["x".repeat(65)], ..reg("evil", 1) }, t0);
    assert!(matches!(&r, Err(ApiError::BadRequest(m)) if m.contains("65 bytes")), "{r:?}");
    let r = c.register(&agent("evil"), &RegisterRequest { gpu_mem_mib: Some(u64::MAX), ..reg("evil", 1) }, t0);
    assert!(matches!(&r, Err(ApiError::BadRequest(m)) if m.starts_with("field `gpu_mem_mib`")), "{r:?}");
    assert!(c.nodes().is_empty(), "nothing registered");
    assert!(c.audit(None, None, 100).unwrap().is_empty(), "nothing recorded");
    let max = ordo_core::pools::MAX_POOLS;
    for i in 0..max {
        let name = format!("n{i}");
        c.register(&agent(&name), &node(&name, 1, &format!("m{i}"), 16, &[]), t0).unwrap();
    }
    // Half of them go down: they still count.
    let t1 = t0 + (c.config().node_timeout_ms + c.config().fence_grace_ms) as i64 + 1;
    for i in 0..max / 2 {
        let name = format!("n{i}");
        c.poll(&agent(&name), &PollRequest { node: name.clone(), running: vec![], wait_ms: 0, problem: None }, t1 - 10)
            .unwrap();
    }
    c.check_nodes(t1).unwrap();
    let r = c.register(&agent("one-more"), &node("one-more", 1, "x1", 16, &[]), t1);
    assert!(
        matches!(&r, Err(ApiError::Unprocessable(m)) if m.contains(&format!("more than {max} kinds of node")) && m.contains("one-more")),
        "{r:?}"
    );
    assert_eq!(c.nodes().len(), max, "not stored");
    // A kind already known is fine, and so is a node changing to a known kind.
    c.register(&agent("one-more"), &node("one-more", 1, "m7", 16, &[]), t1).unwrap();
    c.register(&agent("n3"), &node("n3", 1, "m4", 16, &[]), t1).unwrap();
    // n3 left kind m3 behind: there is room for one new kind again.
    c.register(&agent("n200"), &node("n200", 1, "x2", 16, &[]), t1).unwrap();
    c.submit(&user("alice"), asks(1, &["x2"], None, &[]), t1).unwrap();
    c.pass(t1).unwrap();
    assert_eq!(placed(&c, t1).first().map(|(_, n)| n.as_str()), Some("n200"));
}
