//! The cluster's topology in the server's state machine: agents declare their place
//! (`ordo agent --topology block=b0,switch=s0`), the server's levels bound it
//! (`--topology-levels block,switch`), multi-node jobs go into the lowest unit that holds them,
//! a job that requires a level waits with a reason naming it, and all of it survives a restart.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_server::api::*;
use ordo_server::state::{ApiError, Core};
use std::collections::BTreeMap;

mod common;
use common::*;

fn place(text: &str) -> BTreeMap<String, String> {
    ordo_server::topo::parse_place(text).unwrap()
}

fn gang(nodes: u32, gpus: u32, ask: Option<&str>) -> SubmitRequest {
    SubmitRequest { nodes: Some(nodes), topology: ask.map(str::to_string), ..job(gpus) }
}

/// Nodes `(name, gpus, place)` on a server with levels block and switch (`levels` false: none).
fn cluster(tag: &str, levels: bool, nodes: &[(&str, u32, &str)], t0: i64) -> (std::path::PathBuf, Core) {
    let dir = tempdir(tag);
    let mut cf = cfg(&dir, "fifo");
    if levels {
        cf.set_topology_levels("test", &["block".into(), "switch".into()]).unwrap();
    }
    let mut c = Core::open(cf, t0).unwrap();
    for &(n, g, p) in nodes {
        let topology = if levels { place(p) } else { BTreeMap::new() };
        c.register(&agent(n), &RegisterRequest { topology, ..reg(n, g) }, t0).unwrap();
    }
    (dir, c)
}

fn ranks(c: &Core, id: u64, now: i64) -> Vec<String> {
    let mut v: Vec<String> = c.job(id, now).unwrap().ranks.iter().map(|r| r.node.clone()).collect();
    v.sort();
    v
}

const FOUR: [(&str, u32, &str); 4] = [
    ("n1", 4, "block=b0,switch=s0"),
    ("n2", 4, "block=b0,switch=s0"),
    ("n3", 4, "block=b1,switch=s0"),
    ("n4", 4, "block=b1,switch=s0"),
];

#[test]
fn a_gang_goes_into_one_block_where_plain_placement_spreads_it() {
    let t0 = 1_000_000;
    for levels in [true, false] {
        let (dir, mut c) = cluster(&format!("topo-place-{levels}"), levels, &FOUR, t0);
        // One GPU busy on n1: block b0 has 7 free, b1 8.
        let small = c.submit(&user("bob"), job(1), t0).unwrap();
        c.pass(t0).unwrap();
        assert_eq!(c.job(small, t0).unwrap().node.as_deref(), Some("n1"));
        let id = c.submit(&user("alice"), gang(2, 8, None), t0).unwrap();
        c.pass(t0).unwrap();
        // With the topology: block b1 whole. Without: the fullest nodes that hold 4 each, the
        // lowest first (n2 and n3, across the blocks).
        let want = if levels { ["n3", "n4"] } else { ["n2", "n3"] };
        assert_eq!(ranks(&c, id, t0), want, "levels: {levels}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Runs `gpus`-GPU jobs of bob's, one per node (best fit puts each on the next idle node), and
/// ends those on `done` (their agents report them exited): the others hold their GPUs.
fn occupy(c: &mut Core, gpus: u32, nodes: &[&str], done: &[&str], t0: i64) {
    let ids: Vec<u64> = nodes.iter().map(|_| c.submit(&user("bob"), job(gpus), t0).unwrap()).collect();
    c.pass(t0).unwrap();
    for (&n, id) in nodes.iter().zip(ids) {
        assert_eq!(c.job(id, t0).unwrap().node.as_deref(), Some(n));
        if done.contains(&n) {
            let running = vec![RunningJob { job: id, started_at: t0, attempt: 0, port: None }];
            c.poll(&agent(n), &PollRequest { node: n.into(), running, wait_ms: 0, problem: None }, t0).unwrap();
            let rep = EndReport {
                node: n.into(),
                job: id,
                attempt: 0,
                outcome: Outcome::Exited,
                exit_code: Some(0),
                signal: None,
                started_at: t0,
                ended_at: t0 + 1,
                message: None,
            };
            c.report(&agent(n), &rep, t0 + 1).unwrap();
        }
    }
}

#[test]
fn a_required_level_holds_the_job_with_its_reason_and_survives_a_restart() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("topo-required", true, &FOUR, t0);
    // n1 and n3 keep 3 GPUs busy: each block has 5 free, no block two nodes with 4 free.
    occupy(&mut c, 3, &["n1", "n2", "n3", "n4"], &["n2", "n4"], t0);
    let held = c.submit(&user("alice"), gang(2, 8, Some("required:Block")), t0 + 2).unwrap();
    c.pass(t0 + 2).unwrap();
    let j = c.job(held, t0 + 2).unwrap();
    assert_eq!((j.state, j.topology.as_deref()), (JobState::Pending, Some("required:block")));
    let why = j.wait.unwrap().text;
    assert!(
        why.contains("needs 2 nodes with 4 GPUs free each within one block; the most free in any block is 5 GPUs"),
        "{why}"
    );
    // The ask is kept: after a restart it still waits, for the same reason.
    drop(c);
    let mut cf = cfg(&dir, "fifo");
    cf.set_topology_levels("test", &["block".into(), "switch".into()]).unwrap();
    let mut c = Core::open(cf, t0 + 3).unwrap();
    for &(n, g, p) in &FOUR {
        c.register(&agent(n), &RegisterRequest { topology: place(p), ..reg(n, g) }, t0 + 3).unwrap();
    }
    c.pass(t0 + 3).unwrap();
    let j = c.job(held, t0 + 3).unwrap();
    assert_eq!(j.state, JobState::Pending);
    assert!(j.wait.unwrap().text.contains("within one block"));
    assert_eq!(c.nodes().iter().find(|n| n.name == "n3").unwrap().topology, place("block=b1,switch=s0"));
    // Preferred: it spreads over the blocks when no block holds it.
    c.cancel(&user("alice"), held, t0 + 4).unwrap();
    let id = c.submit(&user("alice"), gang(2, 8, Some("preferred:block")), t0 + 4).unwrap();
    c.pass(t0 + 4).unwrap();
    assert_eq!(ranks(&c, id, t0 + 4), ["n2", "n4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_level_that_can_never_hold_the_job_says_so() {
    let t0 = 1_000_000;
    // Blocks of one 3-GPU and one 4-GPU node: no block ever has two nodes with 4 GPUs.
    let nodes = [
        ("n1", 3, "block=b0,switch=s0"),
        ("n2", 4, "block=b0,switch=s0"),
        ("n3", 3, "block=b1,switch=s0"),
        ("n4", 4, "block=b1,switch=s0"),
    ];
    let (dir, mut c) = cluster("topo-never", true, &nodes, t0);
    let id = c.submit(&user("alice"), gang(2, 8, Some("required:block")), t0).unwrap();
    c.pass(t0).unwrap();
    let why = c.job(id, t0).unwrap().wait.unwrap().text;
    assert!(
        why.starts_with(
            "no unit of the topology level it requires can hold it, even with every GPU free: needs 2 nodes with 4 \
             GPUs free each within one block; the most free in any block is 7 GPUs"
        ),
        "{why}"
    );
    // Within one switch it fits.
    let ok = c.submit(&user("alice"), gang(2, 8, Some("required:switch")), t0).unwrap();
    c.cancel(&user("alice"), id, t0).unwrap();
    c.pass(t0).unwrap();
    assert_eq!(ranks(&c, ok, t0), ["n2", "n4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn places_and_asks_are_checked() {
    let t0 = 1_000_000;
    let (dir, mut c) = cluster("topo-checks", true, &FOUR[..2], t0);
    let bad = |c: &mut Core, n: &str, p: &str| {
        c.register(&agent(n), &RegisterRequest { topology: place(p), ..reg(n, 4) }, t0).unwrap_err()
    };
    let e = bad(&mut c, "n3", "rack=r1");
    assert!(
        matches!(&e, ApiError::BadRequest(m) if m == "field `topology`: level `rack` is not one of the server's topology levels (block, switch)"),
        "{e}"
    );
    // Block b0 is under switch s0 already: n3 may not put it under s1.
    let e = bad(&mut c, "n3", "block=b0,switch=s1");
    assert!(
        matches!(&e, ApiError::Unprocessable(m) if m.contains("block `b0` is under two units of level switch")),
        "{e}"
    );
    let e = bad(&mut c, "n3", &format!("block={}", "b".repeat(100)));
    assert!(matches!(&e, ApiError::BadRequest(m) if m.contains("limit of 64")), "{e}");
    // A node may say nothing of a level: it is then a unit of its own there.
    c.register(&agent("n3"), &RegisterRequest { topology: place("switch=s0"), ..reg("n3", 4) }, t0).unwrap();
    // Another node's token cannot register it.
    assert!(matches!(
        c.register(&agent("n1"), &RegisterRequest { topology: place("block=b9"), ..reg("n4", 4) }, t0),
        Err(ApiError::Forbidden(_))
    ));
    // Asks: a level the server has, as required or preferred.
    let e = c.submit(&user("alice"), gang(2, 8, Some("required:rack")), t0).unwrap_err();
    assert!(matches!(&e, ApiError::BadRequest(m) if m.starts_with("field `topology`: level `rack`")), "{e}");
    let e = c.submit(&user("alice"), gang(2, 8, Some("block")), t0).unwrap_err();
    assert!(matches!(&e, ApiError::BadRequest(m) if m.contains("required:LEVEL")), "{e}");
    let e = c.submit(&user("alice"), gang(2, 8, Some(&"x".repeat(10_000))), t0).unwrap_err();
    assert!(matches!(&e, ApiError::BadRequest(m) if m.contains("limit of 128")), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // A server without levels refuses places and asks alike.
    let (dir, mut c) = cluster("topo-none", false, &FOUR[..1], t0);
    let e = c.register(&agent("n2"), &RegisterRequest { topology: place("block=b0"), ..reg("n2", 4) }, t0);
    assert!(matches!(&e, Err(ApiError::BadRequest(m)) if m.contains("--topology-levels")), "{e:?}");
    let e = c.submit(&user("alice"), gang(1, 4, Some("required:block")), t0).unwrap_err();
    assert!(matches!(&e, ApiError::BadRequest(m) if m.contains("no topology levels")), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
