//! `ordo slurm` against a real Slurm: the dev cluster of `scripts/slurm-dev-cluster.sh` (n1, n2
//! with 8 GPUs, n3 with 4). Skipped where no such cluster answers, except under `CI=true`.
//! `tests/slurm24.rs` runs the main scenarios (in `slurm_common`) against Slurm 24.11.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod slurm_common;

use ordo_slurm::client::run_with_timeout;
use slurm_common::*;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Whether the dev cluster answers; says why not (and fails under CI=true) otherwise. Asked
/// once per run (a Slurm client without a controller blocks until its timeout).
fn dev_cluster() -> bool {
    static ANSWER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let why = match ANSWER.get_or_init(check_dev_nodes) {
        Ok(()) => return true,
        Err(why) => why,
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("Slurm test: {why}; CI must start the dev cluster (scripts/slurm-dev-cluster.sh)");
    }
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
    false
}

/// `--rest URL --rest-token-file FILE` for the dev cluster's slurmrestd, or nothing (after
/// saying so; a failure under CI=true) where it has no token.
fn rest_args() -> Vec<String> {
    let dir = std::env::var("SLURM_CONF").ok().and_then(|c| PathBuf::from(c).parent().map(PathBuf::from));
    match dir.map(|d| d.join("token.env")).filter(|t| t.is_file()) {
        Some(t) => {
            vec!["--rest".into(), "http://127.0.0.1:6820".into(), "--rest-token-file".into(), t.display().to_string()]
        }
        None => {
            assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI: the dev cluster wrote no token.env");
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the slurmrestd part (no token.env beside $SLURM_CONF); using the command-line clients"
            );
            Vec::new()
        }
    }
}

#[test]
fn drive_starts_pending_jobs_in_ordos_order_and_logs_every_change_then_import_matches() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    let mut jobs = Jobs::default();
    let (q, _) = drive_starts_pending_jobs_in_sjf_order(&mut jobs, &[]);

    // The accounting of that run, imported, matches what was submitted.
    let trace = tmp("import.csv");
    // From the first submit on (sacct reads local time): the database may hold jobs of earlier
    // dev clusters whose ids started again from 1.
    let first_submit = jobs.0.iter().map(|id| q[id].submit).min().expect("jobs");
    let since = run_with_timeout("date", &["-d", &format!("@{first_submit}"), "+%Y-%m-%dT%H:%M:%S"], T).expect("date");
    let out = ordo()
        .args(["slurm", "import", "--since", since.trim(), "--out"])
        .arg(&trace)
        .output()
        .expect("ordo slurm import");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("accounting_storage/none")
            || err.contains("not running a supported accounting_storage")
            || err.contains("accounting storage is disabled")
        {
            assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI starts Slurm with --acct: {err}");
            let _ = writeln!(
                std::io::stderr(),
                "skipped: sacct import (this Slurm has no accounting storage; start it with --acct)"
            );
        } else {
            panic!("ordo slurm import failed: {err}");
        }
    } else {
        assert!(stdout.contains("cluster: 2x8,1x4"), "{stdout}");
        check_trace(&trace, &jobs.0, Gpus::Recorded, &q);
        let cmp = ordo()
            .args(["compare", "--trace"])
            .arg(&trace)
            .args(["--cluster", "2x8,1x4", "--policies", "fifo,sjf"])
            .output()
            .expect("ordo compare");
        let cmp_out = String::from_utf8_lossy(&cmp.stdout);
        assert!(cmp.status.success(), "compare failed: {}", String::from_utf8_lossy(&cmp.stderr));
        assert!(cmp_out.contains("sjf") && cmp_out.contains("fifo"), "{cmp_out}");
        // What Slurm really ran is its own row, first, over every job of the trace.
        let cmp = ordo()
            .args(["compare", "--trace"])
            .arg(&trace)
            .args(["--cluster", "2x8,1x4", "--policies", "fifo,sjf", "--json"])
            .output()
            .expect("ordo compare --json");
        assert!(cmp.status.success(), "compare failed: {}", String::from_utf8_lossy(&cmp.stderr));
        let v: serde_json::Value = serde_json::from_slice(&cmp.stdout).expect("compare --json");
        let rows = csv_rows(&std::fs::read_to_string(&trace).expect("trace")).len() as u64;
        let policies: Vec<&str> =
            v["results"].as_array().expect("results").iter().filter_map(|r| r["policy"].as_str()).collect();
        assert_eq!(policies, ["as-run", "fifo", "sjf"], "{}", String::from_utf8_lossy(&cmp.stderr));
        assert_eq!(v["results"][0]["jobs"].as_u64(), Some(rows), "the as-run row holds every job of the trace");
        assert_eq!(v["results"][1]["jobs"].as_u64(), Some(rows));
        assert_eq!(v["baseline"], "as-run");
    }
    jobcomp_import_matches(&jobs.0, Gpus::Recorded, &q);
}

#[test]
fn dry_run_changes_no_priority_and_release_hands_them_back() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    // The real pass through slurmrestd with the dev cluster's JWT.
    dry_run_then_drive_then_release(&[], &rest_args(), &[]);
}

#[test]
fn drive_survives_a_controller_outage() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    slurm_common::drive_survives_a_controller_outage("slurm-dev-cluster.sh");
}

/// `slurm-dev-cluster.sh stop` ends the munged that `start` started (its pid kept in
/// `munged.pid`), so `.ci/run` leaves nothing running; a stand-in process plays munged here, so
/// this needs no Slurm.
#[test]
fn dev_cluster_stop_ends_the_munged_start_started() {
    let dir = tmp("dev-cluster-stop");
    std::fs::create_dir_all(&dir).unwrap();
    // A detached stand-in (its parent exits, so init reaps it once it is killed).
    let out = Command::new("bash").args(["-c", "sleep 600 >/dev/null 2>&1 & echo $!"]).output().unwrap();
    let pid = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive(), "stand-in {pid} started");
    std::fs::write(dir.join("munged.pid"), &pid).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-dev-cluster.sh");
    let out = Command::new("bash").arg(&script).arg("stop").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ended = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        !alive()
    });
    if !ended {
        let _ = Command::new("kill").arg(&pid).status();
    }
    assert!(ended, "stop left the munged stand-in {pid} running");
    assert!(!dir.join("munged.pid").exists(), "stop removes the pid file");
}

/// Issue 18, items 2 and 7: ordo's priorities sit above what priority/basic gives a new job,
/// so a job submitted after a pass waits below the ranked queue until the next pass places it;
/// a priority set by hand and a nice value are left as their owners set them, and the audit log
/// says so.
#[test]
fn newcomers_wait_below_the_ranked_queue_and_hand_set_jobs_are_left_alone() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    slurm_common::newcomers_wait_below_the_ranked_queue_and_hand_set_jobs_are_left_alone();
}

/// Issue 18, items 4, 5 and 6, against the dev cluster (n1, n2: 8 GPUs; n3: 4 GPUs, in
/// partitions `gpu` and `other`; 2 CPUs each): a job of partition `other` waits while a job of
/// `gpu` fills n3; CPUs limit what starts; an array's pending tasks are counted one by one.
#[test]
fn partitions_cpus_and_arrays_are_planned_as_slurm_will_start_them() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    slurm_common::partitions_cpus_and_arrays_are_planned_as_slurm_will_start_them();
}

/// Issue 18, item 3: the controller stops while a pass is sending its updates; the pass stops
/// at once (changing nothing more), says so, and the next pass after the controller is back
/// finishes the work.
#[test]
fn an_outage_during_the_updates_stops_the_pass() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    slurm_common::an_outage_during_the_updates_stops_the_pass("slurm-dev-cluster.sh");
}

/// Issue 30 on Slurm 22.05 (through the command-line clients): typed GRES and constraints are
/// planned and ordered (`slurm_common::typed_gres_and_constraints_are_honoured`), and `ordo
/// slurm import` keeps each job's GPU type (from `ReqTRES`), the features its constraint
/// requires (`Constraints`) and the type it ran on (`AllocTRES`), with the nodes' features in a
/// cluster file beside the trace that `ordo compare` reads.
#[test]
fn typed_gres_and_constraints_are_honoured_and_imported() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dev_cluster() {
        return;
    }
    let jobs = slurm_common::typed_gres_and_constraints_are_honoured(&[]);
    let q = squeue();
    let first_submit = jobs.iter().map(|j| q[&j.0].submit).min().expect("jobs");
    let since = run_with_timeout("date", &["-d", &format!("@{first_submit}"), "+%Y-%m-%dT%H:%M:%S"], T).expect("date");
    let trace = tmp("typed-import.csv");
    let out = ordo().args(["slurm", "import", "--since", since.trim(), "--out"]).arg(&trace).output().expect("import");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("accounting") {
        assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI starts Slurm with --acct: {err}");
        let _ = writeln!(std::io::stderr(), "skipped: sacct import (no accounting storage; start it with --acct)");
        return;
    }
    assert!(out.status.success(), "import failed: {err}");
    assert!(stdout.contains("cluster: 2x8:a100,1x4:v100 (from sinfo, 3 nodes), with node features"), "{stdout}");
    let rows = csv_rows(&std::fs::read_to_string(&trace).expect("trace"));
    for (id, t, c) in &jobs {
        let r = rows.iter().find(|r| r["job_id"] == id.to_string()).unwrap_or_else(|| panic!("job {id} imported"));
        assert_eq!(r["gpu_model"], t.unwrap_or(""), "{r:?}");
        // The features every node it may use has: all of `ib&nvme`, none of `[ib|nvme]`.
        let required = match *c {
            Some("ib&nvme") => "ib|nvme",
            Some("ib") => "ib",
            _ => "",
        };
        assert_eq!(r["features"], required, "{r:?}");
        assert_eq!(r["measured_on"], "a100", "it ran on an a100 node: {r:?}");
    }
    // The next command import printed runs, on the cluster file with the nodes' features.
    let next = stdout.lines().find_map(|l| l.strip_prefix("next: ")).unwrap_or_else(|| panic!("{stdout}"));
    let toml = next.split("--cluster ").nth(1).expect("--cluster").trim();
    let cluster = std::fs::read_to_string(toml).expect("cluster file");
    assert!(cluster.contains("features = [\"ib\", \"nvme\"]") && cluster.contains("gpu_model = \"v100\""), "{cluster}");
    let cmp = ordo()
        .args(["compare", "--trace"])
        .arg(&trace)
        .args(["--cluster", toml, "--policies", "fifo,sjf"])
        .output()
        .expect("ordo compare");
    assert!(cmp.status.success(), "compare failed: {}", String::from_utf8_lossy(&cmp.stderr));
}
