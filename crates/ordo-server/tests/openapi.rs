//! docs/openapi.yaml and the server's router must list the same routes: every (method, path)
//! in the router is documented, and every documented one exists; the main schemas list exactly
//! the fields and enum values the code sends.

use std::collections::BTreeSet;

fn documented() -> BTreeSet<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("docs/openapi.yaml is readable");
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_paths = line.trim_end() == "paths:";
            current = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(p) = line.strip_prefix("  /") {
            current = Some(format!("/{}", p.trim_end().trim_end_matches(':')));
        } else if let (Some(rest), Some(p)) = (line.strip_prefix("    "), &current) {
            let m = rest.trim_end().trim_end_matches(':');
            if ["get", "post", "put", "delete", "patch"].contains(&m) && !rest.starts_with(' ') {
                out.insert((m.to_string(), p.clone()));
            }
        }
    }
    out
}

#[test]
fn router_and_openapi_list_the_same_routes() {
    let code: BTreeSet<(String, String)> =
        ordo_server::http::routes().into_iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    let doc = documented();
    assert!(code.len() >= 10, "router has {} routes", code.len());
    let missing: Vec<_> = code.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&code).collect();
    assert!(missing.is_empty(), "routes in the router but not in docs/openapi.yaml: {missing:?}");
    assert!(extra.is_empty(), "routes in docs/openapi.yaml but not in the router: {extra:?}");
}

/// The property names of `components.schemas.NAME` (for a nested `start` item, the names under
/// `items.properties`), read from the YAML's block layout.
fn schema_props(name: &str, nested: Option<&str>) -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("docs/openapi.yaml is readable");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != format!("    {name}:"));
    lines.next().unwrap_or_else(|| panic!("schema {name} not in docs/openapi.yaml"));
    let body: Vec<&str> = lines.take_while(|l| l.starts_with("      ") || l.trim().is_empty()).collect();
    let (start, indent) = match nested {
        None => (body.iter().position(|l| l.trim_end() == "      properties:").expect("properties") + 1, 8),
        Some(n) => {
            let at = body.iter().position(|l| l.trim_end() == format!("        {n}:")).expect("nested");
            (at + body[at..].iter().position(|l| l.trim() == "properties:").expect("nested properties") + 1, 14)
        }
    };
    body[start..]
        .iter()
        .take_while(|l| l.len() > indent && l[..indent].trim().is_empty())
        .filter(|l| !l[indent..].starts_with(' '))
        .filter_map(|l| l[indent..].split(':').next().map(str::to_string))
        .collect()
}

fn keys(v: serde_json::Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

/// The values of the first `enum: [...]` at or after the line that starts `NAME:`.
fn enum_values(name: &str) -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("readable");
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with(&format!("{name}:")));
    let line = lines.find(|l| l.contains("enum: [")).unwrap_or_else(|| panic!("no enum for {name}"));
    let list = line.split_once('[').and_then(|(_, r)| r.split_once(']')).expect("[...]").0;
    list.split(',').map(|v| v.trim().to_string()).collect()
}

#[test]
fn openapi_schemas_list_the_fields_and_states_the_code_sends() {
    use ordo_server::api::*;
    let job = JobInfo {
        id: 1,
        user: "u".into(),
        name: "n".into(),
        command: vec!["true".into()],
        cwd: None,
        gpus: 1,
        cpus: None,
        mem_mib: None,
        time_limit_ms: 1,
        priority: 0,
        on_node_failure: OnNodeFailure::Requeue,
        state: JobState::Pending,
        submit: 0,
        start: None,
        end: None,
        node: None,
        gpu_ids: vec![],
        exit_code: None,
        end_reason: None,
        attempts: 0,
        cancel_requested: false,
        held_by: None,
        no_preempt: false,
        restarts: 0,
        executed_ms: 0,
        umask: None,
        wait: None,
        after: vec![],
        array: None,
        activity: None,
        nodes: 2,
        ranks: vec![Rank { node: "n".into(), gpu_ids: vec![0], started: true, ended: false, port: Some(29_500) }],
        gang_stop: Some(GangStop { state: JobState::Failed, reason: "r".into(), exit_code: Some(1) }),
        output: Some("out-%j.txt".into()),
        gpu_models: vec!["a100".into()],
        gpu_mem_mib: Some(40_960),
        features: vec!["ib".into()],
        preempt: Some(ordo_server::api::PreemptSpec {
            checkpoint: Some("signal:2m".into()),
            signal: Some("USR1".into()),
            min_run_ms: Some(60_000),
        }),
        lost_ms: 5,
        topology: Some("required:block".into()),
    };
    assert_eq!(keys(serde_json::to_value(&job).expect("json")), schema_props("JobInfo", None));
    let spec = job.preempt.clone().expect("set");
    assert_eq!(keys(serde_json::to_value(&spec).expect("json")), schema_props("PreemptSpec", None));
    let node = NodeInfo {
        name: "n".into(),
        gpus: 1,
        fake: true,
        gpu_model: Some("a100".into()),
        gpu_mem_mib: Some(81_920),
        features: vec!["ib".into()],
        topology: [("block".to_string(), "b0".to_string())].into(),
        state: "up".into(),
        drain: Some("its work directory is full".into()),
        last_seen: 0,
        free_gpus: 1,
        jobs: vec![],
        job_ids: vec![],
        cpus: None,
        mem_mib: None,
        used_cpus: 0,
        used_mem_mib: 0,
        mem_limits: false,
        busy_pct: None,
        idle_jobs: vec![],
        maint: Some(NodeMaint {
            kind: MaintKind::Drain,
            reason: "r".into(),
            by: "admin".into(),
            since: 1,
            deadline: Some(2),
        }),
        status: "draining".into(),
    };
    assert_eq!(keys(serde_json::to_value(&node).expect("json")), schema_props("NodeInfo", None));
    let m = node.maint.clone().expect("maint");
    assert_eq!(keys(serde_json::to_value(&m).expect("json")), schema_props("NodeMaint", None));
    let mr = NodeMaintRequest { action: "drain".into(), reason: Some("r".into()), deadline_ms: Some(1) };
    assert_eq!(keys(serde_json::to_value(&mr).expect("json")), schema_props("NodeMaintRequest", None));
    let pc = PolicyChange { policy: "las".into(), dry_run: true, preempt_now: false, reason: Some("why".into()) };
    assert_eq!(keys(serde_json::to_value(&pc).expect("json")), schema_props("PolicyChange", None));
    let eff = PolicyEffect { job: "1".into(), user: "u".into(), ran_ms: Some(1) };
    assert_eq!(keys(serde_json::to_value(&eff).expect("json")), schema_props("PolicyEffect", None));
    let pd = PolicyChanged {
        policy: "fifo".into(),
        applied: false,
        asked: "las".into(),
        preempt: vec![eff.clone()],
        start: vec![],
        reordered: 0,
        order_before: vec![],
        order_after: vec![],
    };
    assert_eq!(keys(serde_json::to_value(&pd).expect("json")), schema_props("PolicyChanged", None));
    let reg = RegisterRequest {
        node: "n".into(),
        gpus: 1,
        fake: true,
        gpu_model: Some("a100".into()),
        gpu_mem_mib: Some(81_920),
        features: vec!["ib".into()],
        topology: [("block".to_string(), "b0".to_string())].into(),
        cpus: None,
        mem_mib: None,
        mem_limits: false,
        clock: None,
        addr: Some("127.0.0.1".into()),
    };
    assert_eq!(keys(serde_json::to_value(&reg).expect("json")), schema_props("RegisterRequest", None));
    let sub: SubmitRequest = serde_json::from_str(r#"{"command": ["true"], "gpus": 1}"#).expect("minimal submission");
    assert_eq!(keys(serde_json::to_value(&sub).expect("json")), schema_props("SubmitRequest", None));
    let a = Assignment {
        job: 1,
        user: "u".into(),
        name: "n".into(),
        command: vec![],
        cwd: None,
        gpu_ids: vec![],
        time_limit_ms: 1,
        attempt: 1,
        restarts: 0,
        cpus: None,
        mem_mib: None,
        umask: None,
        array: None,
        array_count: None,
        gang: Some(GangAssign {
            rank: 1,
            nodes: vec!["a".into(), "b".into()],
            master_addr: "a".into(),
            master_port: Some(29501),
            world_size: 2,
        }),
        output: Some("/tmp/out-1.txt".into()),
        stop_signal: Some("USR1".into()),
        stop_grace_ms: Some(120_000),
    };
    assert_eq!(keys(serde_json::to_value(&a).expect("json")), schema_props("PollResponse", Some("start")));
    let act = JobActivity {
        samples: 1,
        mean_busy_pct: 1.0,
        p10_busy_pct: 1.0,
        peak_mem_mib: None,
        idle_since: None,
        idle_flagged: None,
        reclaim_at: None,
        reclaim_action: None,
    };
    assert_eq!(keys(serde_json::to_value(&act).expect("json")), schema_props("JobActivity", None));
    let sample =
        GpuSample { gpu: 0, util_pct: 1.0, sm_pct: None, mem_used_mib: None, mem_total_mib: None, power_w: None };
    assert_eq!(keys(serde_json::to_value(&sample).expect("json")), schema_props("GpuSample", None));
    let rep = ActivityReport { node: "n".into(), gpus: vec![] };
    assert_eq!(keys(serde_json::to_value(&rep).expect("json")), schema_props("ActivityReport", None));
    let states = enum_values("JobState");
    let code: BTreeSet<String> = [
        JobState::Pending,
        JobState::Starting,
        JobState::Running,
        JobState::Preempting,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
    ]
    .iter()
    .map(|s| s.as_str().to_string())
    .collect();
    assert_eq!(code, states);
    let outcomes = enum_values("outcome");
    let code: BTreeSet<String> = [
        Outcome::Exited,
        Outcome::Timeout,
        Outcome::Killed,
        Outcome::SpawnFailed,
        Outcome::OutOfMemory,
        Outcome::Refused,
        Outcome::LeaseExpired,
    ]
    .iter()
    .map(|o| serde_json::to_value(o).expect("json").as_str().expect("a string").to_string())
    .collect();
    assert_eq!(code, outcomes);
}
