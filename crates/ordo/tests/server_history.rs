//! "After two weeks": an `ordo server`'s own database as a trace. A small history made through
//! the server's real state machine, with times chosen so that every figure is worked out by
//! hand, read back by `ordo compare` (auto-detected, the as-run row first and the baseline),
//! `ordo report` (allocated beside really busy) and `ordo tune`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod run;

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::state::Core;
use ordo_server::ServerConfig;
use run::{ok, ordo};
use serde_json::Value;
use std::path::{Path, PathBuf};

const T0: i64 = 1_700_000_000_000;
const S: i64 = 1000;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-history-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn agent() -> Principal {
    Principal { user: "n1".into(), role: Role::Agent }
}

fn job(gpus: u32, name: &str) -> SubmitRequest {
    SubmitRequest {
        name: Some(name.into()),
        command: vec!["true".into()],
        gpus,
        time_limit_ms: Some(3_600_000),
        ..SubmitRequest::default()
    }
}

fn end(c: &mut Core, id: u64, start: i64, at: i64) {
    let rep = EndReport {
        node: "n1".into(),
        job: id,
        attempt: 1,
        outcome: Outcome::Exited,
        exit_code: Some(0),
        signal: None,
        started_at: start,
        ended_at: at,
        message: None,
    };
    c.report(&agent(), &rep, at).unwrap();
}

fn confirm(c: &mut Core, running: &[(u64, i64)], now: i64) {
    let running =
        running.iter().map(|&(job, started_at)| RunningJob { job, started_at, attempt: 0, port: None }).collect();
    c.poll(&agent(), &PollRequest { node: "n1".into(), running, wait_ms: 0, problem: None }, now).unwrap();
}

/// A server under fifo with one node, n1, of 4 GPUs, its database in `dir`.
fn fifo_server(dir: &Path) -> Core {
    let mut cfg = ServerConfig { db: dir.join("ordo.db"), ..ServerConfig::default() };
    cfg.set_policy("test", "fifo").unwrap();
    let mut c = Core::open(cfg, T0).unwrap();
    let reg = RegisterRequest { node: "n1".into(), gpus: 4, fake: true, ..RegisterRequest::default() };
    c.register(&agent(), &reg, T0).unwrap();
    c
}

/// One node of 4 GPUs under `fifo`. A (4 GPUs) is submitted at 0 s and runs 0-10 s; B (2 GPUs,
/// at 2 s) and C (2 GPUs, at 4 s) wait behind it and run 10-14 s and 10-13 s. D is cancelled
/// before it starts (never ran) and E still runs when the database is read (outlived it). A's
/// GPUs are sampled at 50% busy; B's and C's not at all.
fn history(dir: &Path) -> PathBuf {
    let mut c = fifo_server(dir);
    let alice = Principal { user: "alice".into(), role: Role::User };
    let bob = Principal { user: "bob".into(), role: Role::User };
    let a = c.submit(&alice, job(4, "a"), T0).unwrap();
    c.pass(T0).unwrap();
    confirm(&mut c, &[(a, T0)], T0);
    let d = c.submit(&bob, job(1, "d"), T0 + S).unwrap();
    let b = c.submit(&bob, job(2, "b"), T0 + 2 * S).unwrap();
    c.cancel(&bob, d, T0 + 3 * S).unwrap();
    let cc = c.submit(&alice, job(2, "c"), T0 + 4 * S).unwrap();
    c.pass(T0 + 4 * S).unwrap();
    let g =
        |gpu| GpuSample { gpu, util_pct: 50.0, sm_pct: None, mem_used_mib: None, mem_total_mib: None, power_w: None };
    c.activity(&agent(), &ActivityReport { node: "n1".into(), gpus: (0..4).map(g).collect() }, T0 + 5 * S).unwrap();
    end(&mut c, a, T0, T0 + 10 * S);
    c.pass(T0 + 10 * S).unwrap();
    confirm(&mut c, &[(b, T0 + 10 * S), (cc, T0 + 10 * S)], T0 + 10 * S);
    end(&mut c, cc, T0 + 10 * S, T0 + 13 * S);
    end(&mut c, b, T0 + 10 * S, T0 + 14 * S);
    let e = c.submit(&alice, job(1, "e"), T0 + 20 * S).unwrap();
    c.pass(T0 + 20 * S).unwrap();
    confirm(&mut c, &[(e, T0 + 20 * S)], T0 + 20 * S);
    // The minute's flush writes the jobs' GPU figures.
    c.activity_tick(T0 + 70 * S).unwrap();
    dir.join("ordo.db")
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-9
}

#[test]
fn the_servers_database_is_a_trace_with_an_as_run_row() {
    let dir = tempdir("db");
    let db = history(&dir);
    let p = db.to_str().unwrap();
    let out: Value =
        serde_json::from_str(&ok(&ordo(&["compare", "--trace", p, "--policies", "fifo,sgf", "--json"]))).unwrap();
    assert_eq!(out["input"]["format"], "ordo-db");
    // Rows: A, B, C kept; D never ran; E outlived the database.
    assert_eq!((out["input"]["rows"].as_u64(), out["input"]["jobs"].as_u64()), (Some(5), Some(3)));
    assert_eq!(out["baseline"], "as-run");
    let policies: Vec<&str> =
        out["results"].as_array().unwrap().iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["as-run", "fifo", "sgf"]);
    let r = &out["results"][0];
    assert_eq!(r["cluster"], "1x4");
    assert_eq!(r["placement"], "consolidated");
    // JCT 10, 12, 9 s; waits 0, 8, 6 s; makespan 14 s; work 40 + 8 + 6 = 54 GPU-s on 4 GPUs.
    assert!(close(&r["mean_jct_s"], 31.0 / 3.0), "{r}");
    assert!(close(&r["mean_wait_s"], 14.0 / 3.0), "{r}");
    assert!(close(&r["makespan_s"], 14.0), "{r}");
    assert!(close(&r["utilization_makespan"], 54.0 / 56.0), "{r}");
    // In the arrival window (0-4 s) A holds all 4 GPUs.
    assert!(close(&r["utilization_window"], 1.0), "{r}");
    // 10-13 s: nothing waits, none idle; 13-14 s: 2 GPUs idle, nothing waits: empty queue.
    assert!(close(&r["idle_causes"]["empty_queue_gpu_hours"], 2.0 / 3600.0), "{r}");
    assert!(close(&r["idle_causes"]["head_of_line_gpu_hours"], 0.0), "{r}");
    // The simulator, under the server's own policy, makes the same decisions.
    assert_eq!(out["results"][1]["mean_jct_s"], r["mean_jct_s"]);
    // Allocated against really busy, over the arrival window: only A ran, at 50%.
    let b = &out["as_run"]["busy"];
    assert_eq!(
        (b["allocated"].as_f64(), b["busy"].as_f64(), b["measured"].as_f64()),
        (Some(1.0), Some(0.5), Some(1.0))
    );
    assert_eq!(out["as_run"]["policy"], "fifo");
    assert_eq!(out["as_run"]["policies"][0], serde_json::json!(["fifo", 4]));

    // The table says it in words, and the server's policy is simulated even when not asked.
    let text = ok(&ordo(&["compare", "--trace", p, "--policies", "sgf"]));
    assert!(text.contains("input:   ") && text.contains("(ordo-db): 3 jobs"), "{text}");
    assert!(text.contains("cluster: 1x4 (4 GPUs), consolidated placement; the server's own nodes"), "{text}");
    assert!(text.contains("as-run:  GPU activity: allocated 100.0%, actually busy 50.0%"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("fifo ")), "the server's policy is simulated too: {text}");
    assert!(
        text.contains("instead of the schedule as it ran (as-run)")
            || text.contains("the schedule as it ran (as-run) is already the best"),
        "{text}"
    );

    // `ordo report` puts busy beside allocated; `ordo tune` takes the database too.
    let html = dir.join("r.html");
    ok(&ordo(&[
        "report",
        "--trace",
        p,
        "--policies",
        "fifo,sgf",
        "--no-equivalent",
        "--out",
        html.to_str().unwrap(),
        "--quiet",
    ]));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("As run: GPU activity: allocated 100.0%, actually busy 50.0%"), "report lacks the busy line");
    let tune = ok(&ordo(&["tune", "--trace", p, "--max-configs", "3"]));
    assert!(tune.contains("as run:      utilisation 100.0%"), "{tune}");
    // A different cluster or placement is no longer what ran: no as-run row.
    let other: Value = serde_json::from_str(&ok(&ordo(&[
        "compare",
        "--trace",
        p,
        "--policies",
        "fifo",
        "--cluster",
        "2x4",
        "--json",
    ])))
    .unwrap();
    assert_eq!(other["results"].as_array().unwrap().len(), 1);
    assert_eq!(other["baseline"], "fifo");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_database_says_what_and_where() {
    let dir = tempdir("bad");
    let db = history(&dir);
    let p = db.to_str().unwrap();
    let conn = ordo_server::db::Connection::open(&db).unwrap();
    conn.execute("UPDATE jobs SET gpus = 0 WHERE name = 'b'", []).unwrap();
    drop(conn);
    let e = ordo(&["compare", "--trace", p]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !e.status.success()
            && err.contains(&format!(
                "{p}: job 3: field `gpus`: expected a whole number of GPUs, at least 1, found \"0\""
            )),
        "{err}"
    );
    // An SQLite file that is not an ordo server's.
    let other = dir.join("other.db");
    let c = ordo_server::db::Connection::open(&other).unwrap();
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
    drop(c);
    let e = ordo(&["compare", "--trace", other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(!e.status.success() && err.contains("without the `jobs` table: not an ordo server database"), "{err}");
    // --format ordo-db on a CSV.
    let csv = dir.join("x.csv");
    std::fs::write(&csv, "job_id,submit_time,num_gpu,duration\n1,0,1,10\n").unwrap();
    let e = ordo(&["compare", "--trace", csv.to_str().unwrap(), "--format", "ordo-db"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("not an SQLite database"), "{:?}", e);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job's own declaration (`ordo submit --checkpoint none`) is replayed with it. One node of 4
/// GPUs under fifo: A (4 GPUs, time limit 200 s, restarts from zero) ran 0-100 s; B (4 GPUs,
/// time limit 20 s) came at 20 s and ran 100-120 s. Replayed under srtf (remaining time by time
/// limits), B preempts A at 20 s: A loses its 20 s (80 GPU-s), restarts at 40 s and ends at
/// 140 s; B runs 20-40 s. Mean JCT (140 + 20) / 2 = 80 s; had A declared nothing it would
/// resume and end at 120 s.
#[test]
fn a_jobs_declared_checkpoint_is_replayed_with_it() {
    let dir = tempdir("declared");
    let mut c = fifo_server(&dir);
    let alice = Principal { user: "alice".into(), role: Role::User };
    let none = PreemptSpec { checkpoint: Some("none".into()), ..PreemptSpec::default() };
    let a = c
        .submit(&alice, SubmitRequest { preempt: Some(none), time_limit_ms: Some(200 * S), ..job(4, "a") }, T0)
        .unwrap();
    c.pass(T0).unwrap();
    confirm(&mut c, &[(a, T0)], T0);
    let b = c.submit(&alice, SubmitRequest { time_limit_ms: Some(20 * S), ..job(4, "b") }, T0 + 20 * S).unwrap();
    end(&mut c, a, T0, T0 + 100 * S);
    c.pass(T0 + 100 * S).unwrap();
    confirm(&mut c, &[(b, T0 + 100 * S)], T0 + 100 * S);
    end(&mut c, b, T0 + 100 * S, T0 + 120 * S);
    let db = dir.join("ordo.db");
    let out: Value =
        serde_json::from_str(&ok(&ordo(&["compare", "--trace", db.to_str().unwrap(), "--policies", "srtf", "--json"])))
            .unwrap();
    let srtf = out["results"].as_array().unwrap().iter().find(|r| r["policy"] == "srtf").unwrap();
    assert!(close(&srtf["mean_jct_s"], 80.0), "{srtf}");
    assert!(close(&srtf["preemption_lost_gpu_hours"], 80.0 / 3600.0), "{srtf}");
}
