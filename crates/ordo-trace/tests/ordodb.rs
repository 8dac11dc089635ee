//! The `ordo-db` reader on databases laid out as an `ordo server` writes them: preempted jobs'
//! earlier runs from the audit log, a run reported after its requeue, jobs that never ran or
//! still run, windows and filters; and, for any row values, an answer or a clear error, never a
//! panic. (crates/ordo/tests/server_history.rs reads a database the real server wrote.)

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_trace::{load_path, load_reader, Format, LoadOptions, ServerRun, TraceError};
use proptest::prelude::*;
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};

/// The tables and columns the reader reads (fuzz/seed_corpus.sh seeds the `ordo_db` target with them).
const SCHEMA: &str = include_str!("data/ordo_db_tables.sql");

const T0: i64 = 1_700_000_000_000;
const S: i64 = 1000;

fn db(tag: &str) -> (PathBuf, Connection) {
    let p = std::env::temp_dir().join(format!("ordo-db-reader-{tag}-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let c = Connection::open(&p).unwrap();
    c.execute_batch(SCHEMA).unwrap();
    c.execute("INSERT INTO meta VALUES ('policy', 'las')", []).unwrap();
    c.execute("INSERT INTO nodes VALUES ('a', 1, 8, 1, NULL, 'up', 0, 32, 65536)", []).unwrap();
    c.execute("INSERT INTO nodes VALUES ('b', 2, 4, 1, 'H100', 'down', 0, NULL, NULL)", []).unwrap();
    (p, c)
}

#[allow(clippy::too_many_arguments)]
fn job(
    c: &Connection,
    id: i64,
    user: &str,
    gpus: i64,
    state: &str,
    submit: i64,
    start: Option<i64>,
    end: Option<i64>,
    node: Option<&str>,
    executed: i64,
) {
    c.execute(
        "INSERT INTO jobs(id, user, name, gpus, time_limit_ms, priority, state, submit, start, end_time, node, executed_ms)
         VALUES (?1, ?2, 'x', ?3, 3600000, 0, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![id, user, gpus, state, submit, start, end, node, executed],
    )
    .unwrap();
}

fn audit(c: &Connection, time: i64, kind: &str, job: i64, detail: &str) {
    c.execute(
        "INSERT INTO audit(time, actor, kind, job, policy, detail) VALUES (?1, 'scheduler', ?2, ?3, 'las', ?4)",
        params![time, kind, job, detail],
    )
    .unwrap();
}

fn runs(v: &[(i64, i64, Option<u32>)]) -> Vec<ServerRun> {
    v.iter().map(|&(s, e, node)| ServerRun { start: s * S, end: e * S, node }).collect()
}

#[test]
fn runs_jobs_and_drops_by_hand() {
    let (p, c) = db("hand");
    // 1: preempted once on b (ran 2-5 s), then 8-10 s on a: run time 5 s.
    job(&c, 1, "alice", 2, "completed", T0, Some(T0 + 8 * S), Some(T0 + 10 * S), Some("a"), 3 * S);
    audit(&c, T0 + 2 * S, "start", 1, r#"{"node":"b","gpu_ids":[0,1]}"#);
    audit(&c, T0 + 5 * S, "requeue", 1, r#"{"why":"preempted","node":"b","ran_ms":3000,"restarts":1}"#);
    audit(&c, T0 + 8 * S, "start", 1, r#"{"node":"a","gpu_ids":[0,1]}"#);
    // 2: requeued at 6 s when its node fell silent, but that very run (1-7 s) was reported later.
    job(&c, 2, "bob", 1, "completed", T0 + S, Some(T0 + S), Some(T0 + 7 * S), Some("a"), 5 * S);
    audit(&c, T0 + 6 * S, "requeue", 2, r#"{"why":"node a stopped","node":"a","ran_ms":5000,"restarts":1}"#);
    // 3: its earlier run's audit record is gone (trimmed): placed before its last run.
    job(&c, 3, "bob", 4, "timeout", T0 + 2 * S, Some(T0 + 20 * S), Some(T0 + 30 * S), Some("b"), 4 * S);
    // 4: cancelled before it ran; 5: still running; 6: pending.
    job(&c, 4, "carol", 1, "cancelled", T0 + 3 * S, None, Some(T0 + 4 * S), None, 0);
    job(&c, 5, "carol", 1, "running", T0 + 4 * S, Some(T0 + 5 * S), None, Some("a"), 0);
    job(&c, 6, "carol", 1, "pending", T0 + 5 * S, None, None, None, 0);
    c.execute("INSERT INTO job_activity VALUES (1, 10, 420.0)", []).unwrap();
    drop(c);
    let t = load_path(&p, &LoadOptions::default()).unwrap();
    assert_eq!(t.format, Format::OrdoDb);
    assert_eq!((t.rows, t.workload.jobs.len()), (6, 3));
    assert_eq!((t.dropped_never_ran, t.dropped_outside_trace), (2, 1));
    assert_eq!(t.repaired, vec![("earlier runs without audit records placed before the last run".to_string(), 1)]);
    assert_eq!(t.time_base, Some(T0));
    let names: Vec<&str> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["1", "2", "3"]);
    let rt: Vec<i64> = t.workload.jobs.iter().map(|j| j.runtime).collect();
    assert_eq!(rt, [5 * S, 6 * S, 14 * S]);
    assert!(t.workload.jobs.iter().all(|j| j.estimate == Some(3_600_000)));
    let s = t.server.as_ref().unwrap();
    assert_eq!(s.cluster.summary(), "1x8,1x4:H100");
    assert_eq!(s.cluster.nodes[1].gpu_model.as_deref(), Some("H100"));
    assert_eq!(s.policy.as_deref(), Some("las"));
    assert_eq!(s.policies, vec![("las".to_string(), 2)]);
    assert_eq!(s.runs[0], runs(&[(2, 5, Some(1)), (8, 10, Some(0))]));
    assert_eq!(s.runs[1], runs(&[(1, 7, Some(0))]));
    assert_eq!(s.runs[2], runs(&[(16, 20, None), (20, 30, Some(1))]));
    assert_eq!(s.busy[0].map(|b| (b.mean_pct, b.samples)), Some((42.0, 10)));
    assert_eq!(s.busy[1], None);
    // A window from day 0 by wall-clock time, a user filter; scaled submit times drop the runs.
    let o = LoadOptions { from_time: Some(T0 + 1500), users: vec!["bob".into()], ..LoadOptions::default() };
    let t = load_path(&p, &o).unwrap();
    let names: Vec<&str> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["3"]);
    assert_eq!(t.server.unwrap().runs[0], runs(&[(14, 18, None), (18, 28, Some(1))]));
    let t = load_path(&p, &LoadOptions { scale_load: Some(2.0), ..LoadOptions::default() }).unwrap();
    assert!(t.server.unwrap().runs.is_empty());
    // Not from a stream.
    let bytes = std::fs::read(&p).unwrap();
    let e = load_reader(&bytes[..], "x.db", &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::Database { .. }), "{e}");
    let _ = std::fs::remove_file(&p);
}

/// A database of schema version 4 (the columns of GPU models and features): the nodes' GPU
/// memory and features are the cluster's, each job's models (a family name widened to the
/// nodes' names it matches, as the server matches them), memory and features its `needs`; a
/// database without those columns reads as before (every test above).
#[test]
fn gpu_models_memory_and_features_are_read_where_the_server_kept_them() {
    let (p, c) = db("typed");
    c.execute_batch(
        "ALTER TABLE nodes ADD COLUMN gpu_mem_mib INTEGER; ALTER TABLE nodes ADD COLUMN features TEXT;
         ALTER TABLE jobs ADD COLUMN gpu_models TEXT; ALTER TABLE jobs ADD COLUMN gpu_mem_mib INTEGER;
         ALTER TABLE jobs ADD COLUMN features TEXT;
         UPDATE nodes SET gpu_model = 'a100-sxm4-80gb', gpu_mem_mib = 81920, features = 'ib,nvme' WHERE name = 'a';
         UPDATE nodes SET gpu_model = 'h100' WHERE name = 'b';",
    )
    .unwrap();
    job(&c, 1, "alice", 1, "completed", T0, Some(T0 + S), Some(T0 + 2 * S), Some("a"), 0);
    job(&c, 2, "alice", 1, "completed", T0, Some(T0 + S), Some(T0 + 3 * S), Some("b"), 0);
    job(&c, 3, "bob", 1, "completed", T0, Some(T0 + S), Some(T0 + 4 * S), Some("a"), 0);
    c.execute_batch(
        "UPDATE jobs SET gpu_models = 'a100,t4', gpu_mem_mib = 40960, features = 'ib' WHERE id = 1;
         UPDATE jobs SET gpu_models = 'h100' WHERE id = 2;",
    )
    .unwrap();
    drop(c);
    let t = load_path(&p, &LoadOptions::default()).unwrap();
    let s = t.server.as_ref().unwrap();
    assert_eq!(s.cluster.nodes[0].gpu_mem_mib, Some(81_920));
    assert_eq!(s.cluster.nodes[0].features, vec!["ib".to_string(), "nvme".to_string()]);
    assert_eq!((s.cluster.nodes[1].gpu_mem_mib, s.cluster.nodes[1].features.len()), (None, 0));
    let needs: Vec<Option<ordo_core::GpuNeeds>> = t.workload.jobs.iter().map(|j| j.needs.as_deref().cloned()).collect();
    let n0 = needs[0].clone().unwrap();
    assert_eq!(n0.models, vec!["a100-sxm4-80gb".to_string(), "t4".to_string()], "a100 widened, t4 kept");
    assert_eq!((n0.min_mem_mib, n0.features), (40_960, vec!["ib".to_string()]));
    assert_eq!(needs[1].clone().unwrap().models, vec!["h100".to_string()]);
    assert_eq!(needs[2], None, "a job without a constraint has none");
    // A negative memory is no server's: an error naming the job and the field.
    let c = Connection::open(&p).unwrap();
    c.execute("UPDATE jobs SET gpu_mem_mib = -1 WHERE id = 3", []).unwrap();
    drop(c);
    let e = load_path(&p, &LoadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("gpu_mem_mib") && e.contains("-1"), "{e}");
    let _ = std::fs::remove_file(&p);
}

fn value() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![Just(None), (-3i64..40).prop_map(|x| Some(T0 + x * S)), Just(Some(i64::MIN)), Just(Some(i64::MAX))]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Whatever the rows hold, loading gives a trace whose runs add up to each job's run time,
    /// or an error naming the database; never a panic.
    #[test]
    fn any_rows_load_or_fail_clearly(rows in prop::collection::vec((-1i64..3, 0usize..6, value(), value(), value(), -2i64..6, any::<bool>()), 0..8)) {
        let (p, c) = db(&format!("prop{}", rows.len()));
        let states = ["completed", "failed", "cancelled", "running", "pending", "weird"];
        for (i, (gpus, st, submit, start, end, exec, requeue)) in rows.iter().enumerate() {
            let id = i as i64 + 1;
            job(&c, id, "u", *gpus, states[*st], submit.unwrap_or(T0), *start, *end, Some(if i % 2 == 0 { "a" } else { "zz" }), exec * S);
            if *requeue {
                audit(&c, start.unwrap_or(T0).saturating_sub(S), "requeue", id, &format!(r#"{{"node":"b","ran_ms":{}}}"#, exec.max(&0) * S));
            }
        }
        drop(c);
        match load_path(&p, &LoadOptions::default()) {
            Ok(t) => {
                prop_assert_eq!(t.rows, t.workload.jobs.len() + t.dropped_total());
                let s = t.server.unwrap();
                for (j, r) in t.workload.jobs.iter().zip(&s.runs) {
                    prop_assert!(j.runtime > 0);
                    prop_assert_eq!(r.iter().map(|x| x.end - x.start).sum::<i64>(), j.runtime);
                    prop_assert!(r.windows(2).all(|w| w[0].start <= w[1].start));
                }
            }
            Err(e) => prop_assert!(e.to_string().starts_with(&p.display().to_string()), "{}", e),
        }
        let _ = std::fs::remove_file(&p);
    }
}

#[test]
fn not_a_server_database() {
    let p: &Path = &std::env::temp_dir().join(format!("ordo-db-reader-none-{}.db", std::process::id()));
    let _ = std::fs::remove_file(p);
    Connection::open(p).unwrap().execute_batch("CREATE TABLE t(x);").unwrap();
    let e = load_path(p, &LoadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("without the `jobs` table"), "{e}");
    let _ = std::fs::remove_file(p);
}
