//! Reading what Slurm prints: `sinfo -N -o '%N|%G|%c|%m|%T'` lines, `squeue --json` documents
//! (OpenAPI v0.0.38 as in Slurm 22.05, and the `{set, infinite, number}` numbers of later ones).

use crate::error::SlurmError;
use serde_json::Value;

/// One node as Slurm reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// Node name.
    pub name: String,
    /// GPUs in its `gres` (`gpu:8`, `gpu:a100:4(S:0-1)`, ...).
    pub gpus: u32,
    /// CPUs, if reported.
    pub cpus: Option<u32>,
    /// Memory in MiB, if reported.
    pub mem_mib: Option<u64>,
    /// Slurm's state text (`idle`, `mixed`, `drained`, `down*`, ...).
    pub state: String,
}

impl SlurmNode {
    /// True when Slurm will not start jobs on the node (down, drained or draining, failing,
    /// future, powered down): ordo leaves such nodes out of the cluster it plans for.
    pub fn unavailable(&self) -> bool {
        let s = self.state.to_ascii_lowercase();
        ["down", "drain", "fail", "future", "powered_down", "powering_down", "maint", "reserved"]
            .iter()
            .any(|w| s.contains(w))
    }
}

/// A job's state, as far as the driver cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to start.
    Pending,
    /// Running (holds resources).
    Running,
    /// Anything else (completed, cancelled, suspended, ...), with Slurm's name.
    Other(String),
}

/// One job as `squeue --json` reports it, reduced to what ordo needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm job id.
    pub id: u64,
    /// Pending, running or other.
    pub state: JobState,
    /// Current priority (0 means held).
    pub priority: u64,
    /// Time limit in minutes; `None` when unlimited.
    pub time_limit_min: Option<u64>,
    /// Submit time, Unix seconds.
    pub submit: i64,
    /// Start time, Unix seconds (for pending jobs Slurm's expected start, or 0).
    pub start: i64,
    /// User name.
    pub user: String,
    /// Account.
    pub account: String,
    /// Partition(s), comma-separated.
    pub partition: String,
    /// GPUs in total (from the TRES strings, or per-node gres times node count).
    pub gpus: u32,
    /// For running jobs: GPUs held on each node, by node name.
    pub alloc: Vec<(String, u32)>,
    /// Slurm's reason for a pending job (`Resources`, `Priority`, `JobHeldUser`, ...).
    pub reason: String,
}

impl SlurmJob {
    /// True for a pending job ordo may reorder: not held (priority 0 or a `Held` reason) and not
    /// waiting on something other than resources (dependencies, begin time).
    pub fn orderable(&self) -> bool {
        self.state == JobState::Pending
            && self.priority > 0
            && !self.reason.contains("Held")
            && !self.reason.starts_with("Dependency")
            && !self.reason.starts_with("BeginTime")
    }
}

/// Parses `sinfo -h -N -o '%N|%G|%c|%m|%T'` output; a node listed under several partitions
/// appears once.
pub fn parse_sinfo(text: &str) -> Result<Vec<SlurmNode>, SlurmError> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad =
            |what: String| SlurmError::Parse { source_name: "sinfo".into(), location: format!("line {}", i + 1), what };
        let f: Vec<&str> = line.split('|').collect();
        if f.len() != 5 {
            return Err(bad(format!("expected 5 `|`-separated fields (name|gres|cpus|memory|state), found `{line}`")));
        }
        let gpus = gres_gpus(f[1]).ok_or_else(|| bad(format!("gres `{}` has an unreadable GPU count", f[1])))?;
        if nodes.iter().any(|n| n.name == f[0]) {
            continue;
        }
        nodes.push(SlurmNode {
            name: f[0].to_string(),
            gpus,
            cpus: f[2].trim().parse().ok(),
            mem_mib: f[3].trim().trim_end_matches('+').parse().ok(),
            state: f[4].trim().to_string(),
        });
    }
    Ok(nodes)
}

/// Parses slurmrestd's `GET /nodes` document (`nodes[].name`, `gres`, `state`, `state_flags`,
/// `cpus`, `real_memory`, `partitions`), keeping the nodes of `partition` if given.
pub fn parse_rest_nodes(doc: &Value, partition: Option<&str>) -> Result<Vec<SlurmNode>, SlurmError> {
    let bad =
        |location: String, what: String| SlurmError::Parse { source_name: "slurmrestd nodes".into(), location, what };
    let nodes = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("top level".into(), "expected a `nodes` array".into()))?;
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = text(n.get("name"));
        if name.is_empty() {
            return Err(bad(format!("nodes[{i}].name"), "expected a node name".into()));
        }
        if let Some(p) = partition {
            if !text(n.get("partitions")).split(',').any(|x| x == p) {
                continue;
            }
        }
        let gres = text(n.get("gres"));
        let gpus = gres_gpus(&gres)
            .ok_or_else(|| bad(format!("nodes[{i}].gres"), format!("unreadable GPU count in `{gres}`")))?;
        let mut state = text(n.get("state"));
        let flags = text(n.get("state_flags"));
        if !flags.is_empty() {
            state = format!("{state}+{}", flags.replace(',', "+"));
        }
        let num = |k: &str| number(n.get(k)).ok().flatten();
        out.push(SlurmNode {
            name,
            gpus,
            cpus: num("cpus").map(|c| c as u32),
            mem_mib: num("real_memory").map(|m| m as u64),
            state,
        });
    }
    Ok(out)
}

/// GPUs in a gres string such as `gpu:8`, `gpu:a100:4(S:0-1)`, `gpu:2,mps:100` or `(null)`.
/// `None` if a `gpu` item has no readable count.
pub fn gres_gpus(gres: &str) -> Option<u32> {
    let mut total = 0u32;
    for item in split_top(gres.trim()) {
        let item = item.split('(').next().unwrap_or("").trim();
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        if item != "gpu" && !item.starts_with("gpu:") {
            continue;
        }
        let count = item.rsplit(':').next()?;
        let n: u32 = if count == "gpu" { 1 } else { count.parse().ok()? };
        total = total.checked_add(n)?;
    }
    Some(total)
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// GPUs in a TRES string such as `cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4`: the untyped
/// `gres/gpu` count if present, else the sum of typed ones (`gres/gpu:a100=4`); 0 if none.
pub fn tres_gpus(tres: &str) -> Option<u32> {
    let mut untyped = None;
    let mut typed = 0u32;
    for item in tres.split(',') {
        let Some((k, v)) = item.split_once('=') else { continue };
        if k == "gres/gpu" {
            untyped = Some(v.trim().parse::<u32>().ok()?);
        } else if k.starts_with("gres/gpu:") {
            typed = typed.checked_add(v.trim().parse::<u32>().ok()?)?;
        }
    }
    Some(untyped.unwrap_or(typed))
}

/// A number as Slurm's JSON writes it: a plain number, or (from 23.02) an object
/// `{"set": bool, "infinite": bool, "number": n}`. `Ok(None)` for unset or infinite.
fn number(v: Option<&Value>) -> Result<Option<i64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64))
            .map(Some)
            .ok_or_else(|| n.to_string()),
        Some(Value::Object(o)) => {
            if o.get("infinite").and_then(Value::as_bool) == Some(true)
                || o.get("set").and_then(Value::as_bool) == Some(false)
            {
                return Ok(None);
            }
            number(o.get("number"))
        }
        Some(other) => Err(other.to_string()),
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

/// Slurm's `INFINITE` (u32::MAX) and `NO_VAL` (u32::MAX - 1) as plain numbers.
const INFINITE32: i64 = u32::MAX as i64;

/// Parses a `squeue --json` document into jobs. Fails with the job index and field on a
/// document that is not the expected shape; `errors` reported by Slurm become a `Parse` error.
pub fn parse_squeue_json(text_in: &str, source_name: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    let bad = |location: String, what: String| SlurmError::Parse { source_name: source_name.into(), location, what };
    let doc: Value = serde_json::from_str(text_in)
        .map_err(|e| bad(format!("line {} column {}", e.line(), e.column()), format!("not JSON: {e}")))?;
    if let Some(errs) = doc.get("errors").and_then(Value::as_array) {
        if let Some(e) = errs.first() {
            return Err(bad("errors".into(), format!("Slurm reported an error: {e}")));
        }
    }
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("top level".into(), "expected a `jobs` array".into()))?;
    let mut out = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let field = |name: &str| -> Result<Option<i64>, SlurmError> {
            number(j.get(name))
                .map_err(|found| bad(format!("jobs[{i}].{name}"), format!("expected a number, found {found}")))
        };
        let id = field("job_id")?
            .filter(|&v| v > 0)
            .ok_or_else(|| bad(format!("jobs[{i}].job_id"), "expected a job id > 0".into()))? as u64;
        let state_text = text(j.get("job_state"));
        let state = match state_text.as_str() {
            "PENDING" => JobState::Pending,
            "RUNNING" => JobState::Running,
            s if s.split(',').any(|x| x == "PENDING") => JobState::Pending,
            s if s.split(',').any(|x| x == "RUNNING") => JobState::Running,
            _ => JobState::Other(state_text.clone()),
        };
        let time_limit_min = field("time_limit")?.filter(|&t| t > 0 && t < INFINITE32 - 1).map(|t| t as u64);
        let node_count = field("node_count")?.unwrap_or(1).max(1) as u32;
        let gpus = job_gpus(j, node_count, state == JobState::Running).ok_or_else(|| {
            bad(format!("jobs[{i}] (job {id})"), "unreadable GPU request in its TRES/gres fields".into())
        })?;
        let mut alloc = Vec::new();
        if state == JobState::Running {
            let names: Vec<String> = j
                .pointer("/job_resources/allocated_nodes")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|n| n.get("nodename").and_then(Value::as_str)).map(String::from).collect())
                .or_else(|| {
                    // Newer layout: job_resources.nodes.allocation[].name
                    j.pointer("/job_resources/nodes/allocation").and_then(Value::as_array).map(|a| {
                        a.iter().filter_map(|n| n.get("name").and_then(Value::as_str)).map(String::from).collect()
                    })
                })
                .unwrap_or_default();
            let detail: Vec<String> = j
                .get("gres_detail")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
                .unwrap_or_default();
            if detail.len() == names.len() && !names.is_empty() {
                for (n, d) in names.iter().zip(&detail) {
                    let g = gres_gpus(d).ok_or_else(|| {
                        bad(format!("jobs[{i}] (job {id}).gres_detail"), format!("unreadable GPU count in `{d}`"))
                    })?;
                    alloc.push((n.clone(), g));
                }
            } else if !names.is_empty() {
                // No per-node detail: spread the total evenly, as `--gres` per node does.
                let k = names.len() as u32;
                for (x, n) in names.iter().enumerate() {
                    let share = gpus / k + u32::from((x as u32) < gpus % k);
                    alloc.push((n.clone(), share));
                }
            }
        }
        let priority = field("priority")?.unwrap_or(0).max(0) as u64;
        out.push(SlurmJob {
            id,
            state,
            priority,
            time_limit_min,
            submit: field("submit_time")?.unwrap_or(0),
            start: field("start_time")?.unwrap_or(0),
            user: text(j.get("user_name")),
            account: text(j.get("account")),
            partition: text(j.get("partition")),
            gpus,
            alloc,
            reason: text(j.get("state_reason")),
        });
    }
    Ok(out)
}

/// A job's GPU count: allocated TRES for running jobs, requested TRES otherwise, then the
/// per-job and per-node gres requests.
fn job_gpus(j: &Value, node_count: u32, running: bool) -> Option<u32> {
    let alloc = text(j.get("tres_alloc_str"));
    if running && !alloc.is_empty() {
        return tres_gpus(&alloc);
    }
    let req = text(j.get("tres_req_str"));
    if req.contains("gres/gpu") {
        return tres_gpus(&req);
    }
    let per_job = text(j.get("tres_per_job"));
    if per_job.contains("gpu") {
        return gres_gpus(&per_job);
    }
    let per_node = text(j.get("tres_per_node"));
    if per_node.contains("gpu") {
        return gres_gpus(&per_node)?.checked_mul(node_count);
    }
    Some(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn reads_gres_and_tres() {
        assert_eq!(gres_gpus("gpu:8"), Some(8));
        assert_eq!(gres_gpus("gpu:a100:4(S:0-1)"), Some(4));
        assert_eq!(gres_gpus("gpu:2(IDX:0,1),mps:100"), Some(2));
        assert_eq!(gres_gpus("(null)"), Some(0));
        assert_eq!(gres_gpus("gres:gpu:4"), Some(4));
        assert_eq!(gres_gpus("gpu:x"), None);
        assert_eq!(tres_gpus("cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4"), Some(4));
        assert_eq!(tres_gpus("cpu=1,gres/gpu:a100=2,gres/gpu:v100=1"), Some(3));
        assert_eq!(tres_gpus("cpu=1,gres/gpu=2,gres/gpu:a100=2"), Some(2));
        assert_eq!(tres_gpus("cpu=1"), Some(0));
        assert_eq!(tres_gpus("gres/gpu=lots"), None);
    }

    #[test]
    fn reads_sinfo() {
        let n = parse_sinfo("n1|gpu:8|2|4000|idle\nn1|gpu:8|2|4000|idle\nn3|gpu:4(S:0)|2|4000|drained\n").unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].gpus, n[0].cpus, n[0].mem_mib), (8, Some(2), Some(4000)));
        assert!(!n[0].unavailable() && n[1].unavailable());
        let e = parse_sinfo("n1|gpu:8|2\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("5 `|`-separated"), "{e}");
        let e = parse_sinfo("n1|gpu:q|2|1|idle\n").unwrap_err().to_string();
        assert!(e.contains("gpu:q"), "{e}");
    }

    #[test]
    fn reads_numbers_of_both_json_layouts() {
        let v: Value = serde_json::json!({"a": 5, "b": {"set": true, "infinite": false, "number": 7},
            "c": {"set": false, "infinite": false, "number": 0}, "d": {"set": true, "infinite": true, "number": 0}, "e": "x"});
        assert_eq!(number(v.get("a")), Ok(Some(5)));
        assert_eq!(number(v.get("b")), Ok(Some(7)));
        assert_eq!(number(v.get("c")), Ok(None));
        assert_eq!(number(v.get("d")), Ok(None));
        assert!(number(v.get("e")).is_err());
        assert_eq!(number(v.get("zz")), Ok(None));
    }

    #[test]
    fn bad_squeue_documents_are_errors_not_panics() {
        for doc in ["", "{", "[]", "{\"jobs\": 3}", "{\"jobs\": [{\"job_id\": \"x\"}]}", "{\"jobs\": [{}]}"] {
            assert!(parse_squeue_json(doc, "t").is_err(), "{doc}");
        }
        let e = parse_squeue_json("{\"jobs\": [{\"job_id\": 3, \"priority\": \"high\"}]}", "t").unwrap_err();
        assert!(e.to_string().contains("jobs[0].priority"), "{e}");
    }
}
