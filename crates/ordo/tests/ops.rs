//! Issue 35, finding 8, outside the server: the metrics and health endpoints of `ordo slurm
//! drive` and `ordo kube schedule` (`--metrics-listen`), the kube audit log's default place,
//! the command `ordo slurm import` suggests when it does not know the cluster, and `ordo
//! submit` without `--`. None of these needs a Slurm or an API server: the loops are run
//! against a Slurm client that is not installed and an API server that does not answer, which
//! is what their health must report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod run;

use run::{ok, ordo};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-ops-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `GET http://ADDR/PATH`: the status and the body (curl, as an operator or Prometheus would).
fn get(addr: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", &format!("http://{addr}{path}")])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Reads a child's output lines until one says "metrics at http://ADDR/metrics", and returns
/// ADDR.
fn metrics_addr(lines: &mut dyn Iterator<Item = std::io::Result<String>>) -> String {
    for line in lines {
        let line = line.unwrap();
        if let Some(rest) = line.split("metrics at http://").nth(1) {
            return rest.split('/').next().unwrap().to_string();
        }
    }
    panic!("no `metrics at` line");
}

/// Kills a child at the end of a test, even one that fails.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` until it is true or 20 s have passed.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn slurm_drive_serves_metrics_and_says_unhealthy_while_slurm_does_not_answer() {
    let dir = tempdir("drive");
    // No Slurm client on PATH: every pass fails, as when the controller is out of reach.
    let child = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["slurm", "drive", "--policy", "fifo", "--interval", "1s", "--metrics-listen", "127.0.0.1:0"])
        .env("PATH", dir.join("no-slurm-here"))
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let addr = metrics_addr(&mut lines);
    std::thread::spawn(move || lines.for_each(drop));
    eventually("a failed pass counted", || get(&addr, "/metrics").1.contains("ordo_slurm_pass_failures_total 2"));
    let (code, body) = get(&addr, "/health");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(code, 503, "{body}");
    assert_eq!((v["ok"].as_bool(), v["loop"].as_str(), v["passes"].as_u64()), (Some(false), Some("slurm"), Some(0)));
    assert!(v["problem"].as_str().unwrap().contains("scontrol"), "{body}");
    let (code, m) = get(&addr, "/metrics");
    assert_eq!(code, 200);
    for want in [
        "# TYPE ordo_slurm_passes_total counter",
        "ordo_slurm_passes_total 0",
        "ordo_slurm_reachable 0",
        "# TYPE ordo_slurm_last_pass_duration_seconds gauge",
    ] {
        assert!(m.contains(want), "no `{want}` in\n{m}");
    }
    assert_eq!(get(&addr, "/nothing").0, 404);
}

/// A kubeconfig for an API server that does not answer (port 1), with a CA made here (ordo
/// refuses a kubeconfig that skips TLS verification).
fn unreachable_kubeconfig(dir: &std::path::Path) -> PathBuf {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(params, key).unwrap();
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            ca_path.display()
        ),
    )
    .unwrap();
    kc
}

#[test]
fn kube_schedule_serves_health_and_keeps_its_audit_log_out_of_the_current_directory() {
    let dir = tempdir("kube");
    let (cwd, state) = (dir.join("cwd"), dir.join("state"));
    std::fs::create_dir_all(&cwd).unwrap();
    let kc = unreachable_kubeconfig(&dir);
    let child = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["kube", "schedule", "--policy", "fifo", "--metrics-listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .env("XDG_STATE_HOME", &state)
        .current_dir(&cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let addr = metrics_addr(&mut lines);
    let said: std::sync::Arc<std::sync::Mutex<String>> = Default::default();
    let keep = said.clone();
    std::thread::spawn(move || lines.for_each(|l| keep.lock().unwrap().push_str(&(l.unwrap_or_default() + "\n"))));
    // The audit log goes to $XDG_STATE_HOME/ordo/kube-audit.jsonl, nothing to the directory
    // it was started in.
    let log = state.join("ordo/kube-audit.jsonl");
    eventually("the audit log written", || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"policy\"")));
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "something written to the current directory");
    eventually("the start logged", || said.lock().unwrap().contains(&format!("audit log {}", log.display())));
    // No list of pods and nodes from an API server that does not answer: unhealthy, saying so.
    let (code, body) = get(&addr, "/health");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((code, v["ok"].as_bool(), v["loop"].as_str()), (503, Some(false), Some("kube")), "{body}");
    assert!(v["problem"].as_str().unwrap().contains("waiting for the first list"), "{body}");
    eventually("the metrics registered", || get(&addr, "/metrics").1.contains("ordo_kube_passes_total 0"));
    let (code, m) = get(&addr, "/metrics");
    assert_eq!(code, 200);
    for want in ["# TYPE ordo_kube_passes_total counter", "ordo_kube_watch_errors_total", "ordo_kube_pods_waiting 0"] {
        assert!(m.contains(want), "no `{want}` in\n{m}");
    }
    // The ConfigMap with its settings could not be written: it says what `queue` then needs.
    assert!(
        said.lock().unwrap().contains("`ordo kube queue` and `explain` then need --policy"),
        "{}",
        said.lock().unwrap()
    );
    // `ordo kube import` reads the same default.
    let out = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["kube", "import"])
        .env("XDG_STATE_HOME", &state)
        .current_dir(&cwd)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(&log.display().to_string()), "{err}");
}

#[test]
fn slurm_import_without_a_cluster_suggests_a_command_that_runs() {
    let dir = tempdir("import");
    let sacct = dir.join("sacct.txt");
    std::fs::write(
        &sacct,
        "JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority\n\
         11|ann|ml|gpu|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T10:00:10|00:00:10|00:01:00|cpu=4,gres/gpu=4,node=1|cpu=4,gres/gpu=4|COMPLETED|1\n\
         12|bob|ml|gpu|2024-03-01T10:00:02|2024-03-01T10:00:10|2024-03-01T10:00:14|00:00:04|00:01:00|cpu=2,gres/gpu=2,node=1|cpu=2,gres/gpu=2|COMPLETED|1\n",
    )
    .unwrap();
    let trace = dir.join("t.csv");
    // No sinfo on PATH: the cluster is not known.
    let out = Command::new(env!("CARGO_BIN_EXE_ordo"))
        .args(["slurm", "import", "--sacct-file", sacct.to_str().unwrap(), "--out", trace.to_str().unwrap()])
        .env("PATH", dir.join("no-slurm-here"))
        .output()
        .unwrap();
    let text = ok(&out);
    let next = text.lines().find_map(|l| l.strip_prefix("next: ")).expect("a next command");
    assert!(!next.contains("--cluster unknown"), "{text}");
    // The suggestion runs as it is.
    let args: Vec<&str> = next.split_whitespace().collect();
    assert_eq!(args[0], "ordo", "{next}");
    ok(&ordo(&args[1..]));
    assert!(text.contains("add --cluster COUNTxGPUS"), "{text}");
    // With --cluster, the suggestion carries it.
    let text = ok(&ordo(&[
        "slurm",
        "import",
        "--sacct-file",
        sacct.to_str().unwrap(),
        "--cluster",
        "1x4",
        "--out",
        trace.to_str().unwrap(),
    ]));
    assert!(text.contains(&format!("next: ordo compare --trace {} --cluster 1x4", trace.display())), "{text}");
    assert!(text.contains("2 jobs written (6 GPUs asked in all, 2 users)"), "{text}");
}

#[test]
fn submit_without_dashes_suggests_the_command_line_with_them() {
    let out = ordo(&["submit", "--gpus", "1", "python", "train.py", "--lr", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("goes after `--`") && err.contains("ordo submit --gpus 1 -- python train.py --lr 3"), "{err}");
    // An argument that needs quoting is quoted.
    let out = ordo(&["submit", "--gpus", "1", "sh", "-c", "echo a b"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ordo submit --gpus 1 -- sh -c 'echo a b'"), "{err}");
}
