//! `ordo kube` as a user runs it: `import` of an audit log into a trace that `compare` reads,
//! and `schedule`, `queue`, `explain` against a real kube-apiserver (`ORDO_K8S_DIR`, started by
//! `scripts/k8s-dev-apiserver.sh`; skipped without one, except under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ordo_kube::audit::{AuditLog, Draft};
use serde_json::json;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ordo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ordo"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-kube-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn import_turns_the_audit_log_into_a_trace_that_compare_reads() {
    let log = tmp("audit.jsonl");
    let _ = std::fs::remove_file(&log);
    let mut a = AuditLog::open(&log).unwrap();
    let t = 1_700_000_000_000;
    for (i, (gpus, wait, run)) in
        [(4u32, 0i64, 600_000i64), (2, 60_000, 300_000), (8, 120_000, 900_000)].iter().enumerate()
    {
        let uid = format!("uid-{i}");
        let sub = |kind, detail| Draft { actor: "team".into(), kind, unit: Some(uid.clone()), detail };
        let created = t + i as i64 * 1_000;
        let d = json!({"pod": format!("team/p{i}"), "uid": uid, "namespace": "team", "user": "ann", "gpus": gpus,
            "cpu_milli": 1000, "mem_bytes": 1u64 << 30, "created": created, "estimate_ms": 3_600_000, "gang": null});
        a.append(vec![sub("submit", d)], created, "fifo").unwrap();
        a.append(vec![sub("start", json!({"uids": [uid]}))], created + wait, "fifo").unwrap();
        a.append(vec![sub("end", json!({"uid": uid, "evicted": false}))], created + wait + run, "fifo").unwrap();
    }
    let trace = tmp("k8s.csv");
    let out = ordo().args(["kube", "import", "--audit-log"]).arg(&log).arg("--out").arg(&trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 jobs"), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&trace).unwrap();
    assert!(csv.contains("team/p1,1.000,2,300.000,ann,team,3600.000"), "{csv}");
    let cmp = ordo()
        .args(["compare", "--trace"])
        .arg(&trace)
        .args(["--cluster", "1x8", "--policies", "fifo,sjf"])
        .output()
        .unwrap();
    assert!(cmp.status.success(), "compare: {}", String::from_utf8_lossy(&cmp.stderr));
    // A damaged log: the error names the file and the line.
    std::fs::write(&log, format!("{}\nnot a record\n", std::fs::read_to_string(&log).unwrap().lines().next().unwrap()))
        .unwrap();
    let out = ordo().args(["kube", "import", "--audit-log"]).arg(&log).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("line 2") && err.contains("audit.jsonl"), "{err}");
}

/// The API server's directory, or `None` (skipped, except under `CI=true`).
fn dev_dir() -> Option<PathBuf> {
    match std::env::var_os("ORDO_K8S_DIR").map(PathBuf::from) {
        Some(d) if d.join("kubeconfig").exists() => Some(d),
        _ => {
            let msg = "no Kubernetes API server: start one with `bash scripts/k8s-dev-apiserver.sh start DIR` and set ORDO_K8S_DIR=DIR";
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{msg} (CI=true: the tests against a real API server must run)"
            );
            let _ = writeln!(std::io::stderr(), "skipped: {msg}");
            None
        }
    }
}

/// Calls the API server as its admin (curl, as an operator would).
fn api(dir: &Path, method: &str, path: &str, body: serde_json::Value, content: &str) -> serde_json::Value {
    let server = std::fs::read_to_string(dir.join("server")).unwrap();
    let token = std::fs::read_to_string(dir.join("admin.token")).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "--cacert"])
        .arg(dir.join("ca.crt"))
        .args([
            "-X",
            method,
            "-H",
            &format!("Authorization: Bearer {}", token.trim()),
            "-H",
            &format!("Content-Type: {content}"),
        ])
        .args(["-d", &body.to_string(), &format!("{}{path}", server.trim())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{method} {path}: {}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn schedule_queue_and_explain_against_a_real_api_server() {
    let Some(dir) = dev_dir() else { return };
    let name = format!(
        "cli-{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() % 0xffffff
    );
    let json = "application/json";
    api(&dir, "POST", "/api/v1/namespaces", json!({"metadata": {"name": name}}), json);
    let alloc = json!({"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi", "pods": "110"});
    let node = json!({"metadata": {"name": format!("{name}-n1"), "labels": {"pool": name}},
        "status": {"capacity": alloc, "allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}});
    api(&dir, "POST", "/api/v1/nodes", node, json);
    // The node lifecycle controller's part: lift the not-ready taint of a new node.
    api(
        &dir,
        "PATCH",
        &format!("/api/v1/nodes/{name}-n1"),
        json!({"spec": {"taints": null}}),
        "application/merge-patch+json",
    );
    for (pod, gpus) in [("a", 6), ("b", 4)] {
        let p = json!({"metadata": {"name": pod, "annotations": {"ordo.dev/estimate": "1h"}},
            "spec": {"schedulerName": name, "containers": [{"name": "m", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}});
        api(&dir, "POST", &format!("/api/v1/namespaces/{name}/pods"), p, json);
    }
    let common = |c: &mut Command| {
        c.args([
            "--policy",
            "fifo",
            "--scheduler-name",
            &name,
            "--node-selector",
            &format!("pool={name}"),
            "--config-namespace",
            &name,
            "--kubeconfig",
        ])
        .arg(dir.join("kubeconfig"));
    };
    // Before any scheduler runs: both wait, a first.
    let mut q = ordo();
    q.args(["kube", "queue"]);
    common(&mut q);
    let out = q.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1 open node, 8 of 8 GPUs free") && text.contains(&format!("{name}/a")), "{text}");
    let audit = tmp(&format!("{name}.jsonl"));
    let mut s = ordo();
    s.args(["kube", "schedule", "--audit-log"]).arg(&audit);
    common(&mut s);
    let child = s.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let explain = |pod: &str| {
        let mut e = ordo();
        e.args(["kube", "explain", &format!("{name}/{pod}")]);
        common(&mut e);
        String::from_utf8_lossy(&e.output().unwrap().stdout).to_string()
    };
    let t0 = Instant::now();
    while !explain("a").contains("bound to node") {
        assert!(t0.elapsed() < Duration::from_secs(30), "a not bound: {}", explain("a"));
        std::thread::sleep(Duration::from_millis(200));
    }
    let b = explain("b");
    assert!(b.contains("waiting: needs 4 nvidia.com/gpu on one node; the most free on any node is 2"), "{b}");
    // `queue` without the scheduler's policy and node selector: read from the ConfigMap the
    // scheduler recorded them in (issue 35).
    let mut q = ordo();
    q.args(["kube", "queue", "--scheduler-name", &name, "--config-namespace", &name, "--kubeconfig"])
        .arg(dir.join("kubeconfig"));
    let out = q.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("under fifo: 1 open node, 2 of 8 GPUs free, 1 pod running, 1 waiting"), "{text}");
    // Another scheduler name has recorded nothing: it asks for --policy.
    let mut q = ordo();
    q.args(["kube", "queue", "--scheduler-name", "nobody", "--config-namespace", &name, "--kubeconfig"])
        .arg(dir.join("kubeconfig"));
    let out = q.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("give --policy"), "{err}");
    // SIGTERM, as Kubernetes stops a pod: the scheduler stops cleanly.
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("ordo kube: stopped"), "{err}");
    let log = ordo_kube::audit::read_log(&audit).unwrap();
    // The same record format as `ordo server`'s audit log: each line reads as one of its records.
    for line in std::fs::read_to_string(&audit).unwrap().lines() {
        let r: ordo_server::api::AuditRecord = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(r.id > 0 && r.time > 0 && r.policy == "fifo", "{line}");
    }
    assert!(log.iter().any(|r| r.kind == "start" && r.detail["pods"][0] == format!("{name}/a")));
    assert!(log.iter().any(|r| r.kind == "skip" && r.detail["pods"][0] == format!("{name}/b")));
    api(&dir, "DELETE", &format!("/api/v1/nodes/{name}-n1"), json!({}), json);
}

/// `--topology-labels`: a bad value is refused before any connection, naming the entry; a good
/// one is recorded with the scheduler's settings, so that `queue`, told only the scheduler's
/// name, places by the same topology: a gang that requires a block no block can hold waits,
/// saying so in ordo-core's words, while one that only prefers a block is spread and bound.
#[test]
fn topology_labels_are_checked_recorded_and_read_by_queue() {
    let out = ordo()
        .args(["kube", "schedule", "--policy", "fifo", "--topology-labels", "example.com/rack=rack,bad key=x"])
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err
                .contains("--topology-labels: `bad key=x`: `bad key` is not a node label key (expected LABEL[=LEVEL]"),
        "{err}"
    );
    let Some(dir) = dev_dir() else { return };
    let name = format!(
        "clitopo-{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() % 0xffffff
    );
    let json = "application/json";
    api(&dir, "POST", "/api/v1/namespaces", json!({"metadata": {"name": name}}), json);
    let alloc = json!({"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi", "pods": "110"});
    for (n, block) in [("n1", "a"), ("n2", "b")] {
        let node = json!({"metadata": {"name": format!("{name}-{n}"), "labels": {"pool": name, "example.com/block": block}},
            "status": {"capacity": alloc, "allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}});
        api(&dir, "POST", "/api/v1/nodes", node, json);
        api(
            &dir,
            "PATCH",
            &format!("/api/v1/nodes/{name}-{n}"),
            json!({"spec": {"taints": null}}),
            "application/merge-patch+json",
        );
    }
    for (gang, ask) in [("r", "required:block"), ("p", "preferred:block")] {
        for i in 0..2 {
            let p = json!({"metadata": {"name": format!("{gang}-{i}"), "annotations": {"ordo.dev/gang": gang,
                    "ordo.dev/gang-size": "2", "ordo.dev/topology": ask}},
                "spec": {"schedulerName": name, "containers": [{"name": "m", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}});
            api(&dir, "POST", &format!("/api/v1/namespaces/{name}/pods"), p, json);
        }
    }
    let audit = tmp(&format!("{name}.jsonl"));
    let mut s = ordo();
    s.args(["kube", "schedule", "--policy", "fifo", "--scheduler-name", &name, "--config-namespace", &name])
        .args(["--node-selector", &format!("pool={name}"), "--topology-labels", "example.com/block"])
        .args(["--audit-log"])
        .arg(&audit)
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"));
    let child = s.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let queue = || {
        let mut q = ordo();
        q.args(["kube", "queue", "--scheduler-name", &name, "--config-namespace", &name, "--kubeconfig"])
            .arg(dir.join("kubeconfig"));
        // Until the scheduler has recorded its settings, `queue` asks for --policy.
        let out = q.output().unwrap();
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let t0 = Instant::now();
    let mut text = queue();
    while !text.contains("2 pods running, 1 waiting") {
        assert!(t0.elapsed() < Duration::from_secs(30), "p not bound: {text}");
        std::thread::sleep(Duration::from_millis(200));
        text = queue();
    }
    assert!(text.contains("gang of 2 pods needs 16 GPUs within one block; the most free in any block is 8"), "{text}");
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("gangs placed by the topology of node labels example.com/block=block"),
        "{err}"
    );
    let log = ordo_kube::audit::read_log(&audit).unwrap();
    let starts: Vec<&serde_json::Value> = log.iter().filter(|r| r.kind == "start").map(|r| &r.detail).collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0]["gang"], "p");
    for n in ["n1", "n2"] {
        api(&dir, "DELETE", &format!("/api/v1/nodes/{name}-{n}"), json!({}), json);
    }
}
