//! The `ordo server` database as a trace (`ordo-db`): the jobs the server really ran (submit
//! times, GPUs, run times, users, time limits), its nodes as the cluster, and the schedule as run.

use crate::sink::{Row, Sink};
use crate::{Format, LoadOptions, LoadedTrace, TraceError};
use ordo_core::time::Time;
use ordo_core::{ClusterSpec, NodeSpec};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::path::Path;

/// The first bytes of every SQLite database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Latest time a row may hold: the end of year 9999, ms since the epoch.
const MAX_TIME: Time = 253_402_300_799_999;

/// One run of a job as the server ran it (times rebased like the workload's submit times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRun {
    /// When its process started (the agent's report).
    pub start: Time,
    /// When it ended, was preempted or was requeued.
    pub end: Time,
    /// The node (index into [`ServerRecord::cluster`]), when known.
    pub node: Option<u32>,
}

/// What the job's GPUs really did, as its node's agent sampled them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobBusy {
    /// Mean busy % (NVML `utilization.gpu`) over every sample of every GPU it held.
    pub mean_pct: f64,
    /// GPU samples taken.
    pub samples: u64,
}

/// What an `ordo server` database tells beyond its jobs ([`LoadedTrace::server`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRecord {
    /// Every node that registered, in registration order (the server places each job on one
    /// node: consolidated placement).
    pub cluster: ClusterSpec,
    /// The policy in force when the database was read.
    pub policy: Option<String>,
    /// The policies the server started jobs under, with how many starts each, most first.
    pub policies: Vec<(String, usize)>,
    /// Each kept job's runs, in time order (indexed like `workload.jobs`); empty when
    /// `scale_load` moved the submit times away from what happened.
    pub runs: Vec<Vec<ServerRun>>,
    /// Each kept job's GPU activity, where its agent sampled it.
    pub busy: Vec<Option<JobBusy>>,
    /// Every change of policy the audit log holds, in time order.
    pub changes: Vec<PolicyChangeRecord>,
    /// How each kept job declared it takes a preemption (`ordo submit --checkpoint`,
    /// `--min-run`; schema version 5), indexed like `workload.jobs`; `None` for a job that
    /// declared nothing (it resumes where it stopped, as by default).
    pub declared: Vec<Option<(ordo_core::Checkpoint, Time)>>,
}

/// A change of policy as the audit log keeps it (`ordo policy set P --reason ...`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PolicyChangeRecord {
    /// When (rebased like the workload's submit times).
    pub time: Time,
    /// When, ms since the Unix epoch, as stored.
    pub unix_ms: Time,
    /// Who made it.
    pub actor: String,
    /// The policy before.
    pub from: String,
    /// The policy after.
    pub to: String,
    /// Why, in the author's words.
    pub reason: String,
}

/// Whether `path` starts like an SQLite database.
pub fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == SQLITE_MAGIC
}

/// One job row as stored.
struct JobRow {
    id: i64,
    user: String,
    gpus: i64,
    cpus: Option<i64>,
    mem_mib: Option<i64>,
    time_limit_ms: i64,
    priority: i64,
    state: String,
    submit: i64,
    start: Option<i64>,
    end: Option<i64>,
    node: Option<String>,
    executed_ms: i64,
    /// Its dependencies as the server stores them (JSON `[{"kind": "after_ok", "job": 3}]`).
    after: Option<String>,
    /// GPU models it accepts, comma-separated (schema version 4).
    gpu_models: Option<String>,
    /// Least memory of each of its GPUs, MiB.
    gpu_mem_mib: Option<i64>,
    /// Node features it needs, comma-separated.
    features: Option<String>,
    /// How it takes a preemption (JSON: checkpoint, signal, grace_ms, min_run_ms; schema
    /// version 5).
    preempt: Option<String>,
}

/// A comma-separated list of names as the server stores it.
fn names(s: Option<String>) -> Vec<String> {
    s.map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()).unwrap_or_default()
}

/// Whether the table has the column (databases of older servers lack the newer ones).
fn has_column(conn: &Connection, table: &str, col: &str) -> Result<bool, rusqlite::Error> {
    conn.query_row(&format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"), [col], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
}

/// The GPU models of `nodes` that a job asking for `asked` takes, as the server matches them:
/// the same name, or a longer one that begins with it and a `-` (`a100` takes
/// `a100-sxm4-80gb`). A name no node matches stays (the simulator then reports the job as never
/// satisfiable, naming it).
fn node_models(asked: &[String], nodes: &[NodeSpec]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in asked {
        let mut hit = false;
        for m in nodes.iter().filter_map(|n| n.gpu_model.as_deref()) {
            if m == a || m.strip_prefix(a.as_str()).is_some_and(|r| r.starts_with('-')) {
                hit = true;
                if !out.iter().any(|x| x == m) {
                    out.push(m.to_string());
                }
            }
        }
        if !hit && !out.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

/// Loads an `ordo server` database (read-only; a running server's is fine) as a trace.
pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    let file = path.display().to_string();
    let db = |why: String| TraceError::Database { file: file.clone(), why };
    let sql = |e: rusqlite::Error| db(format!("reading it as an ordo server database: {e}"));
    if !is_sqlite(path) {
        return Err(match std::fs::metadata(path) {
            Err(err) => TraceError::Io { file, err },
            Ok(_) => db("not an SQLite database, so not an ordo server database (--format ordo-db)".into()),
        });
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| db(format!("cannot open the database read-only: {e}")))?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(sql)?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| db(format!("cannot read the database (is it readable by you? the server keeps it 0600): {e}")))?;
    for t in ["jobs", "nodes", "audit", "meta"] {
        if !tables.iter().any(|x| x == t) {
            return Err(db(format!("an SQLite database without the `{t}` table: not an ordo server database")));
        }
    }
    // The cluster: every node that registered, with what its GPUs are where the server kept it
    // (schema version 4: GPU memory and features).
    let typed = has_column(&conn, "nodes", "features").map_err(sql)?;
    let mut st = conn
        .prepare(&format!(
            "SELECT name, gpus, cpus, mem_mib, gpu_model, {} FROM nodes ORDER BY seq",
            if typed { "gpu_mem_mib, features" } else { "NULL, NULL" }
        ))
        .map_err(sql)?;
    let nodes: Vec<NodeSpec> = st
        .query_map([], |r| {
            Ok(NodeSpec {
                name: r.get(0)?,
                gpus: r.get::<_, i64>(1)?.clamp(0, u32::MAX as i64) as u32,
                cpus: r.get::<_, Option<i64>>(2)?.map(|c| c.clamp(0, u32::MAX as i64) as u32),
                mem_mib: r.get::<_, Option<i64>>(3)?.map(|m| m.max(0) as u64),
                gpu_model: r.get(4)?,
                gpu_mem_mib: r.get::<_, Option<i64>>(5)?.and_then(|m| u64::try_from(m).ok()).filter(|&m| m > 0),
                features: names(r.get(6)?),
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(sql)?;
    drop(st);
    let node_index: HashMap<String, u32> = nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i as u32)).collect();
    let policy: Option<String> =
        conn.query_row("SELECT value FROM meta WHERE key = 'policy'", [], |r| r.get(0)).optional().map_err(sql)?;
    let policies: Vec<(String, usize)> = conn
        .prepare("SELECT policy, COUNT(*) FROM audit WHERE kind = 'start' GROUP BY policy ORDER BY 2 DESC, 1")
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))?.collect())
        .map_err(sql)?;
    // Earlier runs of jobs that were preempted or requeued: each `requeue` record says when and
    // for how long it had run, and on which node.
    let mut earlier: HashMap<i64, Vec<(Time, Time, Option<String>)>> = HashMap::new();
    let mut st = conn.prepare("SELECT job, time, detail FROM audit WHERE kind = 'requeue' ORDER BY id").map_err(sql)?;
    let rows = st
        .query_map([], |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))
        .map_err(sql)?;
    for r in rows {
        let (job, t, detail) = r.map_err(sql)?;
        let d: serde_json::Value = serde_json::from_str(&detail).unwrap_or_default();
        let ran = d["ran_ms"].as_i64().unwrap_or(0);
        // A record no server writes (a time out of range) is not a run.
        if let (Some(job), true) = (job, ran > 0 && ran <= t && (0..=MAX_TIME).contains(&t)) {
            earlier.entry(job).or_default().push((t - ran, t, d["node"].as_str().map(str::to_string)));
        }
    }
    drop(st);
    let busy: HashMap<i64, JobBusy> = if tables.iter().any(|t| t == "job_activity") {
        conn.prepare("SELECT job, samples, util_sum FROM job_activity WHERE samples > 0")
            .and_then(|mut st| {
                st.query_map([], |r| {
                    let n = r.get::<_, i64>(1)?;
                    Ok((r.get::<_, i64>(0)?, JobBusy { mean_pct: r.get::<_, f64>(2)? / n as f64, samples: n as u64 }))
                })?
                .collect()
            })
            .map_err(sql)?
    } else {
        HashMap::new()
    };
    // Changes of policy, with who made them and why (`detail`: {from, to, reason}).
    let mut changes: Vec<PolicyChangeRecord> = Vec::new();
    let mut st =
        conn.prepare("SELECT time, actor, policy, detail FROM audit WHERE kind = 'policy' ORDER BY id").map_err(sql)?;
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?, r.get::<_, String>(3)?))
        })
        .map_err(sql)?;
    for r in rows {
        let (t, actor, policy, detail) = r.map_err(sql)?;
        let d: serde_json::Value = serde_json::from_str(&detail).unwrap_or_default();
        let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
        let to = Some(text("to")).filter(|s| !s.is_empty()).or(policy).unwrap_or_default();
        if (0..=MAX_TIME).contains(&t) && !to.is_empty() {
            changes.push(PolicyChangeRecord {
                time: t,
                unix_ms: t,
                actor,
                from: text("from"),
                to,
                reason: text("reason"),
            });
        }
    }
    drop(st);
    changes.sort_by_key(|c| c.time);
    let mut sink = Sink::new(&file, Format::OrdoDb, opts)?;
    let mut declared_of: HashMap<String, (ordo_core::Checkpoint, Time)> = HashMap::new();
    let mut runs_of: HashMap<String, Vec<(Time, Time, Option<u32>)>> = HashMap::new();
    // Databases of servers without dependencies have no `after` column.
    let has_after = conn
        .query_row("SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'after'", [], |r| r.get::<_, i64>(0))
        .map_err(sql)?
        > 0;
    let job_typed = has_column(&conn, "jobs", "gpu_models").map_err(sql)?;
    let has_preempt = has_column(&conn, "jobs", "preempt").map_err(sql)?;
    let mut st = conn
        .prepare(&format!(
            "SELECT id, user, gpus, cpus, mem_mib, time_limit_ms, priority, state, submit, start, end_time, node, executed_ms, {}, {}, {}
             FROM jobs ORDER BY submit, id",
            if has_after { "after" } else { "NULL" },
            if job_typed { "gpu_models, gpu_mem_mib, features" } else { "NULL, NULL, NULL" },
            if has_preempt { "preempt" } else { "NULL" }
        ))
        .map_err(sql)?;
    let rows = st
        .query_map([], |r| {
            Ok(JobRow {
                id: r.get(0)?,
                user: r.get(1)?,
                gpus: r.get(2)?,
                cpus: r.get(3)?,
                mem_mib: r.get(4)?,
                time_limit_ms: r.get(5)?,
                priority: r.get(6)?,
                state: r.get(7)?,
                submit: r.get(8)?,
                start: r.get(9)?,
                end: r.get(10)?,
                node: r.get(11)?,
                executed_ms: r.get(12)?,
                after: r.get(13)?,
                gpu_models: r.get(14)?,
                gpu_mem_mib: r.get(15)?,
                features: r.get(16)?,
                preempt: r.get(17)?,
            })
        })
        .map_err(sql)?;
    for r in rows {
        let j = r.map_err(sql)?;
        let bad = |field: &'static str, expected: &'static str, found: String| TraceError::DbField {
            file: file.clone(),
            job: j.id,
            field,
            expected,
            found,
        };
        let gpus = u32::try_from(j.gpus)
            .ok()
            .filter(|&g| g >= 1)
            .ok_or_else(|| bad("gpus", "a whole number of GPUs, at least 1", j.gpus.to_string()))?;
        let cpus = j
            .cpus
            .map(|c| u32::try_from(c).map_err(|_| bad("cpus", "a whole number of CPU cores", c.to_string())))
            .transpose()?;
        let mem_mib = j
            .mem_mib
            .map(|m| u64::try_from(m).map_err(|_| bad("mem_mib", "a whole number of MiB", m.to_string())))
            .transpose()?;
        if j.time_limit_ms <= 0 {
            return Err(bad("time_limit_ms", "a positive time limit in ms", j.time_limit_ms.to_string()));
        }
        if !(0..=MAX_TIME).contains(&j.executed_ms) {
            return Err(bad("executed_ms", "a run time of 0 ms or more", j.executed_ms.to_string()));
        }
        for (field, t) in [("submit", Some(j.submit)), ("start", j.start), ("end_time", j.end)] {
            if let Some(t) = t.filter(|t| !(0..=MAX_TIME).contains(t)) {
                return Err(bad(field, "a time in ms since the Unix epoch, before the year 10000", t.to_string()));
            }
        }
        let ended = matches!(j.state.as_str(), "completed" | "failed" | "cancelled" | "timeout");
        let active = matches!(j.state.as_str(), "pending" | "starting" | "running" | "preempting");
        if !ended && !active {
            return Err(bad("state", "a job state such as completed or running", j.state.clone()));
        }
        // The runs: earlier (preempted) ones from the audit log, then the last one.
        let mut runs: Vec<(Time, Time, Option<u32>)> = earlier
            .remove(&j.id)
            .unwrap_or_default()
            .into_iter()
            .map(|(s, e, n)| (s, e, n.and_then(|n| node_index.get(&n).copied())))
            .collect();
        let len = |r: &[(Time, Time, Option<u32>)]| r.iter().map(|(a, b, _)| b - a).sum::<Time>();
        let mut runtime = None;
        let mut censored = active && (j.start.is_some() || j.executed_ms > 0);
        if ended {
            if let (Some(s), Some(e)) = (j.start, j.end) {
                if e < s {
                    return Err(bad("end_time", "an end at or after the start", format!("{e} (start {s})")));
                }
                // A run requeued while its end report was held up, then reported: the report
                // is the run (the requeue record is the same run, and its time is in
                // `executed_ms` as well).
                let before = len(&runs);
                runs.retain(|&(_, b, _)| b <= s);
                let missing = j.executed_ms - before;
                let start = (s - missing).max(j.submit);
                if missing > 0 && start < s {
                    // Earlier runs the audit log does not hold (trimmed): their time counts,
                    // placed just before the last run.
                    sink.repaired("earlier runs without audit records placed before the last run");
                    runs.push((start, s, None));
                }
                runs.push((s, e, j.node.as_ref().and_then(|n| node_index.get(n).copied())));
            } else if runs.is_empty() && j.executed_ms > 0 {
                // Cancelled while waiting after a preemption whose runs the audit log no longer
                // holds: when it ran is unknown.
                censored = true;
            }
            // In time order, overlaps (records no server writes) dropped.
            runs.sort_by_key(|r| (r.0, r.1));
            let mut last_end = Time::MIN;
            runs.retain(|&(a, b, _)| {
                let keep = a >= last_end;
                last_end = last_end.max(b);
                keep
            });
            let total = len(&runs);
            if total > 0 {
                runtime = Some(total);
            } else if j.start.is_some() && j.end.is_some() {
                runtime = Some(0);
            }
        }
        // Dependencies name the jobs waited for by id, as this trace names its jobs.
        let after: Vec<(ordo_core::DepKind, String)> = match j.after.as_deref().filter(|a| !a.is_empty()) {
            None => vec![],
            Some(a) => {
                #[derive(serde::Deserialize)]
                struct Dep {
                    kind: ordo_core::DepKind,
                    job: u64,
                }
                let deps: Vec<Dep> = serde_json::from_str(a)
                    .map_err(|_| bad("after", "a JSON list of dependencies ({kind, job})", a.to_string()))?;
                deps.into_iter().map(|d| (d.kind, d.job.to_string())).collect()
            }
        };
        // What it asked of its GPUs (models widened to the nodes' names they match).
        let min_mem_mib = j
            .gpu_mem_mib
            .map(|m| u64::try_from(m).map_err(|_| bad("gpu_mem_mib", "a whole number of MiB", m.to_string())))
            .transpose()?
            .unwrap_or(0);
        let needs = ordo_core::GpuNeeds {
            models: node_models(&names(j.gpu_models.clone()), &nodes),
            min_mem_mib,
            features: names(j.features.clone()),
            ..ordo_core::GpuNeeds::default()
        };
        let needs = needs.constrains().then(|| Box::new(needs));
        let failed = matches!(j.state.as_str(), "failed" | "cancelled" | "timeout");
        let name = j.id.to_string();
        if let Some(p) = j.preempt.as_deref().filter(|p| !p.is_empty()) {
            #[derive(serde::Deserialize)]
            struct Preempt {
                checkpoint: Option<String>,
                min_run_ms: Option<i64>,
            }
            let expected = "a JSON object {checkpoint, signal, grace_ms, min_run_ms} as ordo submit stores it";
            let d: Preempt = serde_json::from_str(p).map_err(|_| bad("preempt", expected, p.to_string()))?;
            let rule = match d.checkpoint.as_deref() {
                None => ordo_core::Checkpoint::Continuous,
                Some(c) => c.parse().map_err(|_| {
                    bad("preempt", "a checkpoint rule (continuous, none, every:T, signal:G)", c.to_string())
                })?,
            };
            let min_run = d.min_run_ms.unwrap_or(0);
            if !(0..=MAX_TIME).contains(&min_run) {
                return Err(bad("preempt", "a minimum run of 0 ms or more", min_run.to_string()));
            }
            if rule != ordo_core::Checkpoint::Continuous || min_run > 0 {
                declared_of.insert(name.clone(), (rule, min_run));
            }
        }
        if runtime.is_some() && !censored {
            runs_of.insert(name.clone(), runs);
        }
        sink.row(
            j.id.max(0) as u64,
            Ok(Row {
                name: name.into(),
                submit: j.submit,
                gpus,
                gpu_milli: None,
                cpus,
                mem_mib,
                runtime: if censored { Some(1) } else { runtime },
                estimate: Some(j.time_limit_ms),
                priority: Some(j.priority),
                user: &j.user,
                // The server has no groups: a user is their own group.
                group: &j.user,
                queue: None,
                censored,
                after,
                failed,
                // The schedule as run is in `ServerRecord::runs` (with its preemptions).
                start: None,
                needs,
            }),
        )?;
    }
    drop(st);
    let mut t = sink.finish();
    let base = t.time_base.unwrap_or(0);
    let moved = opts.scale_load.is_some_and(|x| x != 1.0);
    let runs = if moved {
        vec![]
    } else {
        t.workload
            .jobs
            .iter()
            .map(|job| {
                runs_of
                    .get(&job.name)
                    .map(|v| v.iter().map(|&(s, e, node)| ServerRun { start: s - base, end: e - base, node }).collect())
                    .unwrap_or_default()
            })
            .collect()
    };
    let busy =
        t.workload.jobs.iter().map(|job| job.name.parse::<i64>().ok().and_then(|id| busy.get(&id).copied())).collect();
    for c in &mut changes {
        c.time -= base;
    }
    let declared = t.workload.jobs.iter().map(|job| declared_of.get(&job.name).copied()).collect();
    t.server = Some(ServerRecord { cluster: ClusterSpec { nodes }, policy, policies, runs, busy, changes, declared });
    Ok(t)
}
