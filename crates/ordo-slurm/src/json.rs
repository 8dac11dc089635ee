//! Reading Slurm's JSON: `squeue --json` and slurmrestd's `GET /jobs` and `GET /nodes`, in the
//! layout of OpenAPI v0.0.38 (Slurm 22.05) and of the data parsers of 23.02 and later.

use crate::error::SlurmError;
use crate::job::{constraint_text, feature_list, partition_list, ArrayPart, JobState, SlurmJob, SlurmNode};
use crate::values::{array_tasks, asked_types, gres_gpus, gres_types, tres};
use serde_json::Value;

/// A number as Slurm's JSON writes it: a plain number, or (from 23.02) an object
/// `{"set": bool, "infinite": bool, "number": n}`. `Ok(None)` for unset, infinite or null.
pub(crate) fn number(v: Option<&Value>) -> Result<Option<i64>, String> {
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

/// A string, or an array of strings joined with commas (later layouts write states and
/// partitions as arrays); empty otherwise.
pub(crate) fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

/// Slurm's `INFINITE` (u32::MAX) and `NO_VAL` (u32::MAX - 1) as plain numbers.
const INFINITE32: i64 = u32::MAX as i64;
/// Slurm's `NICE_OFFSET`: older layouts may write nice with the offset added.
const NICE_OFFSET: i64 = 0x8000_0000;

/// Parses a `squeue --json` (or slurmrestd `GET /jobs`) document. Fails with the job index and
/// field on a document that is not the expected shape; `errors` reported by Slurm become a
/// `Parse` error.
pub fn parse_jobs(text_in: &str, source_name: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    let doc: Value = serde_json::from_str(text_in).map_err(|e| SlurmError::Parse {
        source_name: source_name.into(),
        location: format!("line {} column {}", e.line(), e.column()),
        what: format!("not JSON: {e}"),
    })?;
    jobs_from_doc(&doc, source_name)
}

/// As [`parse_jobs`], from a parsed document.
pub fn jobs_from_doc(doc: &Value, source_name: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    let bad = |location: String, what: String| SlurmError::Parse { source_name: source_name.into(), location, what };
    let jobs = jobs_array(doc, &bad)?;
    let mut out = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        out.push(job_from_value(j, i, &bad)?);
    }
    Ok(out)
}

/// A document's `jobs` array; an error when Slurm reported one in `errors` or there is none.
pub(crate) fn jobs_array<'a>(
    doc: &'a Value,
    bad: &dyn Fn(String, String) -> SlurmError,
) -> Result<&'a Vec<Value>, SlurmError> {
    if let Some(e) = doc.get("errors").and_then(Value::as_array).and_then(|a| a.first()) {
        return Err(bad("errors".into(), format!("Slurm reported an error: {e}")));
    }
    doc.get("jobs").and_then(Value::as_array).ok_or_else(|| bad("top level".into(), "expected a `jobs` array".into()))
}

fn job_from_value(j: &Value, i: usize, bad: &dyn Fn(String, String) -> SlurmError) -> Result<SlurmJob, SlurmError> {
    let field = |name: &str| -> Result<Option<i64>, SlurmError> {
        number(j.get(name))
            .map_err(|found| bad(format!("jobs[{i}].{name}"), format!("expected a number, found {found}")))
    };
    let id = field("job_id")?
        .filter(|&v| v > 0)
        .ok_or_else(|| bad(format!("jobs[{i}].job_id"), "expected a job id > 0".into()))? as u64;
    let state = JobState::from_slurm(&text(j.get("job_state")));
    let time_limit_min = field("time_limit")?.filter(|&t| t > 0 && t < INFINITE32 - 1).map(|t| t as u64);
    let node_count = field("node_count")?.unwrap_or(1).max(1) as u32;
    let running = state == JobState::Running;
    let asked = job_tres(j, node_count, running).ok_or_else(|| {
        bad(format!("jobs[{i}] (job {id})"), "unreadable GPU, CPU or memory request in its TRES".into())
    })?;
    let cpus = match asked.cpus {
        0 => field("cpus")?.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
        c => c,
    };
    let mut alloc = Vec::new();
    if running {
        let names: Vec<String> = j
            .pointer("/job_resources/allocated_nodes")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|n| n.get("nodename").and_then(Value::as_str)).map(String::from).collect())
            .or_else(|| {
                // Later layouts: job_resources.nodes.allocation[].name
                j.pointer("/job_resources/nodes/allocation")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|n| n.get("name").and_then(Value::as_str)).map(String::from).collect())
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
        } else {
            alloc = spread(&names, asked.gpus);
        }
    }
    let gpu_types =
        asked_types(&text(j.get("tres_per_job")), &text(j.get("tres_per_node")), &text(j.get("tres_req_str")))
            .ok_or_else(|| {
                bad(format!("jobs[{i}] (job {id}).tres_per_node"), "unreadable GPU count in its gres request".into())
            })?;
    let priority = field("priority")?.unwrap_or(0).max(0) as u64;
    let mut nice = field("nice")?.unwrap_or(0);
    if nice >= NICE_OFFSET / 2 {
        nice -= NICE_OFFSET;
    }
    let array_job_id = field("array_job_id")?.unwrap_or(0).max(0) as u64;
    let array = if array_job_id == 0 {
        None
    } else {
        let task = field("array_task_id")?.filter(|&t| (0..INFINITE32 - 1).contains(&t)).map(|t| t as u32);
        let task_text = text(j.get("array_task_string"));
        let (tasks, throttle) = if task.is_some() || task_text.is_empty() {
            (1, None)
        } else {
            array_tasks(&task_text).ok_or_else(|| {
                bad(format!("jobs[{i}] (job {id}).array_task_string"), format!("unreadable task list `{task_text}`"))
            })?
        };
        let max = field("array_max_tasks")?.filter(|&m| m > 0 && m < INFINITE32 - 1).map(|m| m as u32);
        Some(ArrayPart { array_job_id, task, tasks, throttle: throttle.or(max) })
    };
    // `--switches=N@TIME` where the layout has it (Slurm 24.11's v0.0.42, not 22.05's v0.0.38).
    let switches = field("required_switches")?.filter(|&n| n > 0 && n < INFINITE32 - 1).unwrap_or(0) as u32;
    let switch_wait_s = match field("maximum_switch_wait_time")? {
        Some(w) => Some(w),
        None => field("wait_for_switch")?,
    }
    .filter(|&w| w > 0 && w < INFINITE32 - 1)
    .unwrap_or(0) as u64;
    Ok(SlurmJob {
        id,
        state,
        priority,
        nice,
        time_limit_min,
        submit: field("submit_time")?.unwrap_or(0),
        start: field("start_time")?.unwrap_or(0),
        user: text(j.get("user_name")),
        account: text(j.get("account")),
        partitions: partition_list(&text(j.get("partition"))),
        gpus: asked.gpus,
        cpus,
        mem_mib: asked.mem_mib,
        alloc,
        reason: text(j.get("state_reason")),
        array,
        gpu_types,
        constraint: constraint_text(&text(j.get("features"))),
        switches,
        switch_wait_s,
    })
}

/// Spreads `gpus` over `names` as evenly as `--gres` per node does (earlier nodes take the
/// remainder).
pub(crate) fn spread(names: &[String], gpus: u32) -> Vec<(String, u32)> {
    let k = names.len() as u32;
    names
        .iter()
        .enumerate()
        .map(|(x, n)| (n.clone(), gpus.checked_div(k).map_or(0, |q| q + u32::from((x as u32) < gpus % k))))
        .collect()
}

/// A job's ask: allocated TRES for running jobs, requested TRES otherwise; GPUs from the TRES
/// strings, then the per-job and per-node gres requests.
fn job_tres(j: &Value, node_count: u32, running: bool) -> Option<crate::values::Tres> {
    let alloc = text(j.get("tres_alloc_str"));
    let req = text(j.get("tres_req_str"));
    let mut t = if running && !alloc.is_empty() { tres(&alloc)? } else { tres(&req)? };
    if t.mem_mib == 0 {
        t.mem_mib = tres(&req)?.mem_mib;
    }
    if t.gpus == 0 && !req.contains("gres/gpu") && !(running && alloc.contains("gres/gpu")) {
        let per_job = text(j.get("tres_per_job"));
        let per_node = text(j.get("tres_per_node"));
        if per_job.contains("gpu") {
            t.gpus = gres_gpus(&per_job)?;
        } else if per_node.contains("gpu") {
            t.gpus = gres_gpus(&per_node)?.checked_mul(node_count)?;
        }
    }
    Some(t)
}

/// Parses slurmrestd's `GET /nodes` document (`nodes[].name`, `gres`, `state`, `state_flags`,
/// `cpus`, `real_memory`, `partitions`, `active_features`: a string in v0.0.38, a list later).
pub fn parse_nodes(doc: &Value) -> Result<Vec<SlurmNode>, SlurmError> {
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
        let gres = text(n.get("gres"));
        let unreadable = || bad(format!("nodes[{i}].gres"), format!("unreadable GPU count in `{gres}`"));
        let gpus = gres_gpus(&gres).ok_or_else(unreadable)?;
        let gpu_types = gres_types(&gres).ok_or_else(unreadable)?;
        let features = feature_list(&text(n.get("active_features").or_else(|| n.get("features"))));
        let mut state = text(n.get("state")).replace(',', "+");
        let flags = text(n.get("state_flags"));
        if !flags.is_empty() {
            state = format!("{state}+{}", flags.replace(',', "+"));
        }
        let num = |k: &str| number(n.get(k)).ok().flatten();
        out.push(SlurmNode {
            name,
            gpus,
            cpus: num("cpus").map(|c| c.clamp(0, u32::MAX as i64) as u32),
            mem_mib: num("real_memory").map(|m| m.max(0) as u64),
            state,
            partitions: partition_list(&text(n.get("partitions"))),
            gpu_types,
            features,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

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
    fn bad_documents_are_errors_not_panics() {
        for doc in ["", "{", "[]", "{\"jobs\": 3}", "{\"jobs\": [{\"job_id\": \"x\"}]}", "{\"jobs\": [{}]}"] {
            assert!(parse_jobs(doc, "t").is_err(), "{doc}");
        }
        let e = parse_jobs("{\"jobs\": [{\"job_id\": 3, \"priority\": \"high\"}]}", "t").unwrap_err();
        assert!(e.to_string().contains("jobs[0].priority"), "{e}");
        let e = parse_jobs("{\"jobs\": [{\"job_id\": 3, \"array_job_id\": 3, \"array_task_string\": \"x-y\"}]}", "t")
            .unwrap_err();
        assert!(e.to_string().contains("array_task_string"), "{e}");
    }

    /// The layout of Slurm 22.05 (v0.0.38) and of 24.11 (v0.0.42: numbers as objects, states
    /// as arrays, allocations under `job_resources.nodes.allocation`) give the same jobs.
    #[test]
    fn both_layouts_give_the_same_job() {
        let old = serde_json::json!({"jobs": [{"job_id": 7, "job_state": "RUNNING", "priority": 4294901759u64,
            "nice": 0, "time_limit": 10, "submit_time": 100, "start_time": 110, "user_name": "ann", "account": "ml",
            "partition": "gpu", "tres_req_str": "cpu=2,mem=4000M,node=2,billing=2,gres/gpu=6",
            "tres_alloc_str": "cpu=2,node=2,billing=2,gres/gpu=6", "node_count": 2, "state_reason": "None",
            "gres_detail": ["gpu:4(IDX:0-3)", "gpu:2(IDX:0-1)"], "array_job_id": 0,
            "job_resources": {"allocated_nodes": [{"nodename": "n1"}, {"nodename": "n2"}]}}]});
        let num = |n: i64| serde_json::json!({"set": true, "infinite": false, "number": n});
        let new = serde_json::json!({"jobs": [{"job_id": 7, "job_state": ["RUNNING"], "priority": num(4294901759),
            "nice": 0, "time_limit": num(10), "submit_time": num(100), "start_time": num(110), "user_name": "ann",
            "account": "ml", "partition": "gpu", "tres_req_str": "cpu=2,mem=4000M,node=2,billing=2,gres/gpu=6",
            "tres_alloc_str": "cpu=2,node=2,billing=2,gres/gpu=6", "node_count": num(2), "state_reason": "None",
            "gres_detail": ["gpu:4(IDX:0-3)", "gpu:2(IDX:0-1)"], "array_job_id": num(0),
            "job_resources": {"nodes": {"allocation": [{"name": "n1"}, {"name": "n2"}]}}}]});
        let a = jobs_from_doc(&old, "old").unwrap();
        let b = jobs_from_doc(&new, "new").unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].alloc, vec![("n1".to_string(), 4), ("n2".to_string(), 2)]);
        assert_eq!((a[0].gpus, a[0].cpus, a[0].mem_mib), (6, 2, 4000));
    }

    #[test]
    fn reads_array_records_and_nice() {
        let doc = serde_json::json!({"jobs": [
            {"job_id": 4, "job_state": "PENDING", "priority": 9, "array_job_id": 4, "array_task_id": null,
             "array_task_string": "2-49%5", "array_max_tasks": 5, "nice": 100, "partition": "gpu,other",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2"},
            {"job_id": 6, "job_state": "PENDING", "priority": 9, "array_job_id": 4, "array_task_id": 0,
             "array_task_string": "", "nice": 2147483748u64, "tres_req_str": "gres/gpu=2"}]});
        let j = jobs_from_doc(&doc, "t").unwrap();
        assert_eq!(j[0].array, Some(ArrayPart { array_job_id: 4, task: None, tasks: 48, throttle: Some(5) }));
        assert_eq!((j[0].nice, j[0].gpus, j[0].tasks()), (100, 2, 48));
        assert_eq!(j[0].partitions, ["gpu", "other"]);
        assert_eq!(j[1].array, Some(ArrayPart { array_job_id: 4, task: Some(0), tasks: 1, throttle: None }));
        assert_eq!(j[1].nice, 100, "nice written with Slurm's offset");
    }

    /// slurmrestd's nodes and jobs on the dev cluster with typed GPUs, as v0.0.38 (Slurm 22.05:
    /// features as a string, requests as `gres:gpu:TYPE:N`) and v0.0.42 (Slurm 24.11: features
    /// as a list, `gres/gpu:TYPE:N`) give them (fields ordo reads, values as captured).
    #[test]
    fn reads_typed_gres_and_features_of_both_layouts() {
        let n38 = serde_json::json!({"nodes": [
            {"name": "n1", "gres": "gpu:a100:8", "features": "ib,nvme", "active_features": "ib,nvme", "partitions": ["gpu"], "state": "idle"},
            {"name": "n3", "gres": "gpu:v100:4", "features": "", "active_features": "", "partitions": ["gpu", "other"], "state": "idle"}]});
        let n42 = serde_json::json!({"nodes": [
            {"name": "n1", "gres": "gpu:a100:8", "features": ["ib", "nvme"], "active_features": ["ib", "nvme"], "partitions": ["gpu"], "state": ["IDLE"]},
            {"name": "n3", "gres": "gpu:v100:4", "features": [], "active_features": [], "partitions": ["gpu", "other"], "state": ["IDLE"]}]});
        for doc in [n38, n42] {
            let n = parse_nodes(&doc).unwrap();
            assert_eq!(
                (n[0].gpus, n[0].gpu_types.as_slice(), n[0].features.as_slice()),
                (8, &["a100".to_string()][..], &["ib".to_string(), "nvme".to_string()][..])
            );
            assert_eq!((n[1].gpu_types.as_slice(), n[1].features.len()), (&["v100".to_string()][..], 0));
        }
        let j38 = serde_json::json!({"jobs": [
            {"job_id": 3, "job_state": "PENDING", "features": "ib&nvme", "tres_per_node": "gres:gpu:a100:2", "tres_per_job": "",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2", "tres_alloc_str": ""},
            {"job_id": 4, "job_state": "PENDING", "features": "[ib|nvme]", "tres_per_node": "gres:gpu:2", "tres_per_job": "",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2", "tres_alloc_str": ""},
            {"job_id": 5, "job_state": "RUNNING", "features": "", "tres_per_node": "", "tres_per_job": "gres:gpu:v100:2",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:v100=2",
             "tres_alloc_str": "cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:v100=2", "gres_detail": ["gpu:v100:2(IDX:0-1)"],
             "job_resources": {"allocated_nodes": [{"nodename": "n3"}]}}]});
        let j42 = serde_json::json!({"jobs": [
            {"job_id": 3, "job_state": ["PENDING"], "features": "ib&nvme", "tres_per_node": "gres/gpu:a100:2", "tres_per_job": "",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1", "tres_alloc_str": ""},
            {"job_id": 4, "job_state": ["PENDING"], "features": "[ib|nvme]", "tres_per_node": "gres/gpu:2", "tres_per_job": "",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1", "tres_alloc_str": ""},
            {"job_id": 5, "job_state": ["RUNNING"], "features": "", "tres_per_node": "", "tres_per_job": "gres/gpu:v100:2",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1", "tres_alloc_str": "cpu=1,node=1,billing=1",
             "gres_detail": ["gpu:v100:2(IDX:0-1)"], "job_resources": {"nodes": {"allocation": [{"name": "n3"}]}}}]});
        for doc in [j38, j42] {
            let j = jobs_from_doc(&doc, "t").unwrap();
            let got: Vec<(u32, Vec<String>, Option<&str>)> =
                j.iter().map(|j| (j.gpus, j.gpu_types.clone(), j.constraint.as_deref())).collect();
            assert_eq!(
                got,
                vec![
                    (2, vec!["a100".to_string()], Some("ib&nvme")),
                    (2, vec![], Some("[ib|nvme]")),
                    (2, vec!["v100".to_string()], None)
                ]
            );
            assert_eq!(j[2].alloc, vec![("n3".to_string(), 2)]);
        }
    }

    /// Slurm 24.11's `squeue --json` (v0.0.42) on the dev cluster with `topology/tree`: a job
    /// submitted with `--switches=1` (the default wait, 300 s) and one without; 22.05's v0.0.38
    /// has no such fields (0: no ask).
    #[test]
    fn reads_required_switches_where_the_layout_has_them() {
        let doc = serde_json::json!({"jobs": [
            {"job_id": 2, "job_state": ["PENDING"], "tres_per_job": "gres/gpu:10", "tres_per_node": "", "node_count": 2,
             "tres_req_str": "cpu=2,mem=8000M,node=2,billing=2", "tres_alloc_str": "",
             "required_switches": 1, "maximum_switch_wait_time": 300},
            {"job_id": 1, "job_state": ["PENDING"], "tres_per_job": "", "tres_per_node": "gres/gpu:8",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1", "tres_alloc_str": "",
             "required_switches": 0, "maximum_switch_wait_time": 0},
            {"job_id": 3, "job_state": "PENDING", "tres_per_node": "gres:gpu:2", "tres_per_job": "",
             "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2", "tres_alloc_str": ""}]});
        let j = jobs_from_doc(&doc, "squeue --json").unwrap();
        let got: Vec<(u64, u32, u32, u64)> = j.iter().map(|j| (j.id, j.gpus, j.switches, j.switch_wait_s)).collect();
        assert_eq!(got, vec![(2, 10, 1, 300), (1, 8, 0, 0), (3, 2, 0, 0)]);
    }
}
