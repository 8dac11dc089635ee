//! `ordo slurm` against Slurm 24.11 (REST API v0.0.42, `squeue --json` from the v0.0.42 data
//! parser): the dev cluster of `scripts/slurm24-dev-cluster.sh`, named by `ORDO_SLURM24_DIR`,
//! with the same nodes as the 22.05 one (n1, n2 with 8 GPUs, n3 with 4) on its own ports. The
//! scenarios are `tests/slurm.rs`'s, shared in `slurm_common`. Skipped where `ORDO_SLURM24_DIR`
//! is unset, except under `CI=true`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod slurm_common;

use ordo_slurm::client::{run_with_timeout, Backend};
use ordo_slurm::{JobState, SlurmRest};
use slurm_common::*;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The 24.11 cluster's directory, once this process's clients (and the `ordo` it runs) are
/// pointed at it; `None` after saying why not (a failure under CI=true).
fn slurm24() -> Option<PathBuf> {
    static ANSWER: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let why = match ANSWER.get_or_init(find_slurm24) {
        Ok(dir) => return Some(dir.clone()),
        Err(why) => why,
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("Slurm 24.11 test: {why}; CI must start it (scripts/slurm24-dev-cluster.sh)");
    }
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
    None
}

/// Called once, under `LOCK` (every test takes it first), so no other test runs a command while
/// the environment changes.
fn find_slurm24() -> Result<PathBuf, String> {
    let dir = std::env::var_os("ORDO_SLURM24_DIR").map(PathBuf::from).ok_or(
        "ORDO_SLURM24_DIR is not set: no Slurm 24.11 to test against (start one with \
         `scripts/slurm24-dev-cluster.sh start DIR` and export ORDO_SLURM24_DIR=DIR)",
    )?;
    let bin = dir.join("bin");
    if !bin.join("squeue").is_file() {
        return Err(format!("{} has no bin/squeue: not started by slurm24-dev-cluster.sh", dir.display()));
    }
    // Its client wrappers first in PATH and its configuration in SLURM_CONF (which may name the
    // 22.05 cluster), for this process and the `ordo` processes it starts.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path))).unwrap();
    std::env::set_var("PATH", path);
    std::env::set_var("SLURM_CONF", dir.join("slurm.conf"));
    let version = run_with_timeout("sinfo", &["--version"], Duration::from_secs(10)).map_err(|e| {
        format!("the Slurm 24.11 clients in {}/bin do not run (is that cluster started?): {e}", dir.display())
    })?;
    if !version.trim().starts_with("slurm-wlm 24.11") && !version.trim().starts_with("slurm 24.11") {
        return Err(format!("{}/bin runs {}, not Slurm 24.11", dir.display(), version.trim()));
    }
    check_dev_nodes().map_err(|e| format!("the Slurm 24.11 cluster in {}: {e}", dir.display()))?;
    Ok(dir)
}

/// slurmrestd of the 24.11 cluster: port 6920, API v0.0.42, the root JWT `start` wrote.
fn rest_args(dir: &std::path::Path) -> Vec<String> {
    let token = dir.join("token.env");
    assert!(token.is_file(), "slurm24-dev-cluster.sh wrote no {}", token.display());
    ["--rest", "http://127.0.0.1:6920", "--rest-version", "v0.0.42", "--rest-token-file"]
        .into_iter()
        .map(String::from)
        .chain([token.display().to_string()])
        .collect()
}

/// The queue and nodes read with 24.11's `sinfo`, `squeue` and `scontrol`: `--dry-run --once`
/// changes nothing, a real pass sets sjf's order, `release` brings submit order back.
#[test]
fn dry_run_drive_and_release_through_the_clients() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    dry_run_then_drive_then_release(&[], &[], &[]);
}

/// The same, every step through slurmrestd's v0.0.42 API (numbers as `{set, infinite, number}`
/// objects, states as lists).
#[test]
fn dry_run_drive_and_release_through_slurmrestd_v0_0_42() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = slurm24() else {
        return;
    };
    let rest = rest_args(&dir);
    dry_run_then_drive_then_release(&rest, &rest, &rest);
}

/// A running drive makes 24.11's scheduler start the jobs in ordo's order (its GPUs read from the
/// jobs' gres requests, `tres-per-node`: this cluster does not account `gres/gpu`); 24.11's
/// `jobcomp/filetxt` log of them imports, every job once with its user (the log holds no GPU
/// counts without `AccountingStorageTRES=gres/gpu`).
#[test]
fn drive_starts_pending_jobs_in_ordos_order_then_jobcomp_import_matches() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    let mut jobs = Jobs::default();
    let (q, _) = drive_starts_pending_jobs_in_sjf_order(&mut jobs, &[]);
    jobcomp_import_matches(&jobs.0, Gpus::NotRecorded, &q);
}

/// The same through slurmrestd v0.0.42: after its first full read, every pass reads job
/// states only (`GET /jobs/state`) and fetches the records of new and changed jobs (here the
/// ones that started and ended), and Slurm still starts the jobs in ordo's order with the
/// priorities of the audit log.
#[test]
fn drive_through_slurmrestd_reads_job_states_between_full_reads() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = slurm24() else {
        return;
    };
    let mut jobs = Jobs::default();
    let (_, printed) = drive_starts_pending_jobs_in_sjf_order(&mut jobs, &rest_args(&dir));
    assert!(printed.contains("; full read, "), "the first pass reads every record:\n{printed}");
    assert!(printed.contains(" records fetched"), "later passes read job states:\n{printed}");
}

/// Reads by states against 24.11's slurmrestd give the queue a full read gives (a newcomer, an
/// array, a job that started, one that ended), and a job held since the last full read, which
/// a read by states cannot see, is seen when read again before a change.
#[test]
fn slurmrestd_reads_by_states_match_a_full_read() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = slurm24() else {
        return;
    };
    wait_idle();
    let mut jobs = Jobs::default();
    let blockers = fill_cluster(&mut jobs, 120);
    let p: Vec<u64> = [5u32, 3].iter().map(|&l| jobs.submit(4, l, 120, false)).collect();
    let token = std::fs::read_to_string(dir.join("token.env")).unwrap();
    let t = Duration::from_secs(30);
    let rest = SlurmRest::new("http://127.0.0.1:6920", "root", &token, "v0.0.42", t);
    let full = || SlurmRest::new("http://127.0.0.1:6920", "root", &token, "v0.0.42", t).jobs().unwrap();
    // What a pass plans with (not Slurm's expected start or its pending reason, which change
    // without a state change and are only refreshed by full reads).
    let seen = |js: Vec<ordo_slurm::SlurmJob>| {
        let mut v: Vec<_> = js
            .into_iter()
            .filter(|j| matches!(j.state, JobState::Pending | JobState::Running))
            .map(|j| (j.id, j.state.clone(), j.priority, j.nice, j.gpus, j.tasks(), j.time_limit_min, j.alloc))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    };
    let first = rest.jobs().unwrap();
    let note = rest.read_note().unwrap_or_default();
    assert!(note.starts_with("full read, "), "{note}");
    assert_eq!(seen(first), seen(full()));
    // A newcomer and a three-task array arrive; the blocker on n3 ends and the oldest pending
    // job starts there.
    let newcomer = jobs.submit(4, 1, 120, false);
    let array = jobs.submit_with(4, 2, 120, &["--array=0-2"]);
    run_with_timeout("scancel", &[&blockers[2].to_string()], T).unwrap();
    wait_for("the oldest pending job to start on n3", Duration::from_secs(30), || {
        squeue().get(&p[0]).is_some_and(|j| j.state == JobState::Running)
    });
    let by_states = rest.jobs().unwrap();
    let note = rest.read_note().unwrap_or_default();
    // The newcomer and the array are new, the oldest job changed state; the list also holds
    // the jobs that ended within Slurm's MinJobAge.
    assert!(note.starts_with("states of ") && note.ends_with(" jobs, 3 records fetched"), "{note}");
    let by_states = seen(by_states);
    assert_eq!(by_states, seen(full()), "a read by states differs from a full read");
    let ids: Vec<u64> = by_states.iter().map(|x| x.0).collect();
    assert!(ids.contains(&newcomer) && ids.contains(&array) && !ids.contains(&blockers[2]), "{ids:?}");
    // Held by its user: a read by states still shows the old record; reading it again before a
    // change shows the hold.
    run_with_timeout("scontrol", &["hold", &p[1].to_string()], T).unwrap();
    let stale = rest.jobs().unwrap().into_iter().find(|j| j.id == p[1]).unwrap();
    assert!(stale.orderable(), "the state list cannot show a hold: {stale:?}");
    let again = rest.recheck(&[p[1], newcomer]).unwrap();
    assert_eq!(again.len(), 2, "both were read before this read: {again:?}");
    let held = again[0].1.as_ref().unwrap();
    assert!(!held.orderable() && held.priority == 0, "{held:?}");
    assert!(rest.jobs().unwrap().into_iter().any(|j| j.id == p[1] && !j.orderable()), "the fresh record is kept");
}

/// Newcomers wait below the ranked queue under 24.11's priority/basic; a priority set by hand
/// and a nice value are left alone.
#[test]
fn newcomers_wait_below_the_ranked_queue_and_hand_set_jobs_are_left_alone() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    slurm_common::newcomers_wait_below_the_ranked_queue_and_hand_set_jobs_are_left_alone();
}

/// Partitions, CPUs and job arrays as 24.11's `squeue` and `sinfo` report them.
#[test]
fn partitions_cpus_and_arrays_are_planned_as_slurm_will_start_them() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    slurm_common::partitions_cpus_and_arrays_are_planned_as_slurm_will_start_them();
}

/// 24.11's clients while no controller answers: a running drive waits it out and resumes.
#[test]
fn drive_survives_a_controller_outage() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    slurm_common::drive_survives_a_controller_outage("slurm24-dev-cluster.sh");
}

/// 24.11's `scontrol` when the controller stops during a pass's updates: the pass stops.
#[test]
fn an_outage_during_the_updates_stops_the_pass() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if slurm24().is_none() {
        return;
    }
    slurm_common::an_outage_during_the_updates_stops_the_pass("slurm24-dev-cluster.sh");
}

/// Issue 30 on Slurm 24.11, through slurmrestd v0.0.42 (node features as lists, requests as
/// `gres/gpu:TYPE:N`): typed GRES and constraints are planned and ordered
/// (`slurm_common::typed_gres_and_constraints_are_honoured`).
#[test]
fn typed_gres_and_constraints_are_honoured_through_rest() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = slurm24() else { return };
    let jobs = slurm_common::typed_gres_and_constraints_are_honoured(&rest_args(&dir));
    assert_eq!(jobs.len(), 5);
}
