//! What the tests of `ordo slurm` against a real Slurm share: the dev clusters of
//! `scripts/slurm-dev-cluster.sh` (22.05, `tests/slurm.rs`) and `scripts/slurm24-dev-cluster.sh`
//! (24.11, `tests/slurm24.rs`) have the same nodes (n1, n2 with 8 GPUs of type a100, features
//! `ib` (both) and `nvme` (n1); n3 with 4 of type v100), so the helpers and the scenarios both
//! run are here. The client commands (`sinfo`, `squeue`,
//! `sbatch`, ...) are the ones in PATH, and `ordo` inherits the test's environment.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use ordo_slurm::client::run_with_timeout;
use ordo_slurm::job::{JobState, SlurmJob};
use ordo_slurm::json::parse_jobs;
use ordo_slurm::AuditRecord;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests share one cluster: one at a time.
pub static LOCK: Mutex<()> = Mutex::new(());

pub const T: Duration = Duration::from_secs(10);

pub fn ordo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ordo"))
}

/// Whether the Slurm that answers is a dev cluster (n1, n2: 8 a100 GPUs, features ib (and nvme
/// on n1); n3: 4 v100) and this test runs as root; why not otherwise.
pub fn check_dev_nodes() -> Result<(), String> {
    Err(match run_with_timeout("sinfo", &["-h", "-N", "-o", "%N|%G|%b"], Duration::from_secs(5)) {
        Err(e) => format!("no Slurm answers here ({e}); start one with scripts/slurm-dev-cluster.sh"),
        Ok(out) => {
            let mut nodes: Vec<&str> = out.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            nodes.sort_unstable();
            nodes.dedup();
            if nodes == ["n1|gpu:a100:8|ib,nvme", "n2|gpu:a100:8|ib", "n3|gpu:v100:4|(null)"] {
                let uid = run_with_timeout("id", &["-u"], T).unwrap_or_default();
                if uid.trim() == "0" {
                    return Ok(());
                }
                "these tests submit jobs as root and as nobody; run them as root".to_string()
            } else {
                format!("the Slurm that answers is not the dev cluster (nodes {nodes:?}); refusing to submit test jobs to it")
            }
        }
    })
}

/// Jobs submitted by a test; cancelled when the test ends, however it ends.
#[derive(Default)]
pub struct Jobs(pub Vec<u64>);

impl Jobs {
    /// `sbatch` a `sleep` job; returns its id.
    pub fn submit(&mut self, gpus: u32, limit_min: u32, sleep_s: u32, as_nobody: bool) -> u64 {
        self.submit_with(gpus, limit_min, sleep_s, if as_nobody { &["--uid=nobody"] } else { &[] })
    }

    /// `sbatch` a `sleep` job with more `sbatch` options; returns its id.
    pub fn submit_with(&mut self, gpus: u32, limit_min: u32, sleep_s: u32, extra: &[&str]) -> u64 {
        self.submit_gres(&format!("gpu:{gpus}"), limit_min, sleep_s, extra)
    }

    /// `sbatch` a `sleep` job asking `--gres=GRES` (`gpu:a100:2`) with more `sbatch` options;
    /// returns its id.
    pub fn submit_gres(&mut self, gres: &str, limit_min: u32, sleep_s: u32, extra: &[&str]) -> u64 {
        let gres = format!("--gres={gres}");
        let limit = format!("--time={limit_min}");
        let wrap = format!("sleep {sleep_s}");
        let mut args = vec!["--parsable", "-o", "/dev/null", "-D", "/tmp", &gres, &limit, "--wrap", &wrap];
        args.splice(0..0, extra.iter().copied());
        let out = run_with_timeout("sbatch", &args, T).expect("sbatch");
        let id: u64 = out.trim().split(';').next().unwrap_or("").parse().expect("sbatch --parsable prints the job id");
        self.0.push(id);
        id
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let ids: Vec<String> = self.0.iter().map(u64::to_string).collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let _ = run_with_timeout("scancel", &refs, T);
        }
    }
}

/// Every job the controller holds, ended ones too (24.11's `squeue --json` lists only pending and
/// running jobs without `--states=all`; 22.05's listed all).
pub fn squeue() -> HashMap<u64, SlurmJob> {
    let out = run_with_timeout("squeue", &["--json", "--all", "--states=all"], T).expect("squeue --json");
    parse_jobs(&out, "squeue").expect("squeue json").into_iter().map(|j| (j.id, j)).collect()
}

pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until no job runs or waits on the cluster (earlier tests' jobs have ended).
pub fn wait_idle() {
    wait_for("an idle cluster", Duration::from_secs(90), || {
        squeue().values().all(|j| !matches!(j.state, JobState::Pending | JobState::Running))
    });
}

/// Whether all three nodes are idle (`sinfo -N` lists n3 once per partition).
pub fn all_nodes_idle() -> bool {
    run_with_timeout("sinfo", &["-h", "-N", "-o", "%N|%T"], T).is_ok_and(|o| {
        let mut idle: Vec<&str> = o.lines().filter_map(|l| l.trim().strip_suffix("|idle")).collect();
        idle.dedup();
        idle.len() == 3
    })
}

/// Fills all 20 GPUs (untyped requests) with jobs sleeping `secs`; returns when they run.
pub fn fill_cluster(jobs: &mut Jobs, secs: u32) -> Vec<u64> {
    let b = vec![jobs.submit(8, 10, secs, false), jobs.submit(8, 10, secs, false), jobs.submit(4, 10, secs, true)];
    wait_for("the blockers to run", Duration::from_secs(30), || {
        let q = squeue();
        b.iter().all(|id| q.get(id).is_some_and(|j| j.state == JobState::Running))
    });
    b
}

/// A running `ordo slurm drive` whose stdout lines are collected.
pub struct Driver {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Driver {
    pub fn spawn(args: &[&str]) -> Driver {
        let mut child = ordo().args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn ordo");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let l2 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l2.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        Driver { child, lines }
    }
    pub fn saw(&self, needle: &str) -> bool {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|l| l.contains(needle))
    }
    pub fn text(&self) -> String {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn audit(path: &std::path::Path) -> Vec<AuditRecord> {
    ordo_slurm::audit::read_audit_log(path).unwrap_or_default()
}

pub fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ordo-slurm-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Whether the imported source records the jobs' GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gpus {
    Recorded,
    NotRecorded,
}

/// The generic trace `ordo slurm import` wrote holds each submitted job once, with its GPUs
/// and user (the test submits blockers 8, 8 (root), 4 (nobody), then 4-GPU jobs alternating
/// root and nobody). `gpus`: whether the source records GPUs (a `jobcomp/filetxt` log does only
/// where `gres/gpu` is an accounted TRES, `AccountingStorageTRES=gres/gpu`). Each job's wait
/// before Slurm started it (`start_time - submit_time`) is the one `squeue` (`q`) tells.
pub fn check_trace(trace: &std::path::Path, ids: &[u64], gpus: Gpus, q: &HashMap<u64, SlurmJob>) {
    let text = std::fs::read_to_string(trace).expect("trace written");
    let mut rows = csv_rows(&text);
    let submitted: HashMap<String, (u32, &str)> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let (gpus, user) = match k {
                0 | 1 => (8, "root"),
                2 => (4, "nobody"),
                k => (4, if (k - 3) % 2 == 1 { "nobody" } else { "root" }),
            };
            (id.to_string(), (gpus, user))
        })
        .collect();
    rows.retain(|r| submitted.contains_key(&r["job_id"]));
    assert_eq!(rows.len(), submitted.len(), "every submitted job is in the trace once:\n{text}");
    for r in &rows {
        let (gpus_asked, user) = submitted[&r["job_id"]];
        if gpus == Gpus::Recorded {
            assert_eq!(r["num_gpu"], gpus_asked.to_string(), "{r:?}");
        }
        assert_eq!(r["user"], user, "{r:?}");
        let secs = |k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("no {k}: {r:?}"));
        let j = &q[&r["job_id"].parse::<u64>().expect("job id")];
        assert_eq!(secs("start_time") - secs("submit_time"), (j.start - j.submit) as f64, "{r:?}");
    }
}

/// A tiny CSV reader for the generic trace ordo writes (no quoted commas in these fields).
pub fn csv_rows(text: &str) -> Vec<HashMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| header.iter().map(|h| h.to_string()).zip(l.split(',').map(String::from)).collect())
        .collect()
}

/// `ordo slurm drive --once` with `args`; returns its stdout (fails the test on an error exit).
pub fn drive_once(args: &[&str]) -> String {
    let out = ordo().args(["slurm", "drive", "--once"]).args(args).output().expect("ordo slurm drive");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// `args` then the connection arguments `conn` (nothing: the command-line clients), as `&str`s.
fn with_conn<'a>(args: &[&'a str], conn: &'a [String]) -> Vec<&'a str> {
    args.iter().copied().chain(conn.iter().map(String::as_str)).collect()
}

/// A running `ordo slurm drive --policy sjf` (reaching Slurm through `conn`) makes Slurm start
/// eight 4-GPU jobs, submitted longest time limit first, in ordo's order, and logs every change.
/// Returns the queue at the end and what the drive printed.
pub fn drive_starts_pending_jobs_in_sjf_order(jobs: &mut Jobs, conn: &[String]) -> (HashMap<u64, SlurmJob>, String) {
    wait_idle();
    fill_cluster(jobs, 12);
    // Eight 4-GPU jobs, submitted longest time limit first: Slurm alone (FIFO by submit) would
    // start the 8-minute job first; sjf starts the 1-minute job first.
    let mut pending = Vec::new();
    for (k, limit) in (1..=8u32).rev().enumerate() {
        pending.push((jobs.submit(4, limit, 3, k % 2 == 1), limit));
    }
    let log = tmp("order.jsonl");
    let ids: Vec<u64> = pending.iter().map(|p| p.0).collect();
    let (q, printed, order) = drive_sjf_until_done(&ids, conn, &log, Duration::from_secs(90));
    let recs = audit(&log);
    let limits: HashMap<u64, u32> = pending.iter().copied().collect();
    let by_order: Vec<u32> = order.iter().map(|id| limits[id]).collect();
    assert_eq!(by_order, (1..=8).collect::<Vec<_>>(), "ordo's sjf order is by time limit");
    // Slurm's own start times follow that order, in two waves (5 slots of 4 GPUs).
    let starts: Vec<i64> = order.iter().map(|id| q[id].start).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "start times along ordo's order: {starts:?}");
    assert!(starts[4] < starts[5], "the last three waited for the first five: {starts:?}");
    // Every priority change is in the log: each job's final priority is the last one ordo set,
    // and the running blockers were never touched.
    for id in &ids {
        let last = recs.iter().rev().find(|r| r.job == *id).expect("logged");
        assert_eq!(last.new_priority, Some(q[id].priority), "job {id}: priority not from the audit log");
        assert_eq!(last.policy, "sjf");
        assert!(!last.reason.is_empty() && !last.time.is_empty());
    }
    assert!(
        recs.iter().all(|r| ids.contains(&r.job) || r.action == "policy"),
        "only pending test jobs were changed: {recs:?}"
    );
    assert_eq!(recs.iter().filter(|r| r.action == "policy").count(), 1, "the start's policy, once: {recs:?}");
    (q, printed)
}

/// Runs `ordo slurm drive --policy sjf --interval 1s` (through `conn`, its audit log at `log`)
/// until every job of `ids` has ended (within `limit`). Returns the queue then, what the drive
/// printed, and `ids` in ordo's order: the positions of the pass that first set each.
pub fn drive_sjf_until_done(
    ids: &[u64],
    conn: &[String],
    log: &std::path::Path,
    limit: Duration,
) -> (HashMap<u64, SlurmJob>, String, Vec<u64>) {
    let log_s = log.display().to_string();
    let driver = Driver::spawn(&with_conn(
        &["slurm", "drive", "--policy", "sjf", "--interval", "1s", "--audit-log", &log_s],
        conn,
    ));
    wait_for("every pending job to finish", limit, || {
        let q = squeue();
        ids.iter().all(|id| q.get(id).is_some_and(|j| !matches!(j.state, JobState::Pending | JobState::Running)))
    });
    let printed = driver.text();
    drop(driver);
    let recs = audit(log);
    let mut first: HashMap<u64, &AuditRecord> = HashMap::new();
    for r in recs.iter().filter(|r| r.action == "set") {
        first.entry(r.job).or_insert(r);
    }
    let mut order: Vec<(usize, u64)> = ids
        .iter()
        .map(|id| (first.get(id).and_then(|r| r.position).unwrap_or_else(|| panic!("job {id} set: {recs:?}")), *id))
        .collect();
    order.sort_unstable();
    (squeue(), printed, order.into_iter().map(|o| o.1).collect())
}

/// The `jobcomp/filetxt` log beside $SLURM_CONF (which needs no accounting database), imported,
/// holds the jobs `ids` (as `drive_starts_pending_jobs_in_sjf_order` submitted them).
pub fn jobcomp_import_matches(ids: &[u64], gpus: Gpus, q: &HashMap<u64, SlurmJob>) {
    let dir = std::env::var("SLURM_CONF").ok().and_then(|c| PathBuf::from(c).parent().map(PathBuf::from));
    match dir.map(|d| d.join("log/jobcomp.txt")).filter(|p| p.is_file()) {
        Some(log) => {
            let trace = tmp("jobcomp.csv");
            let out = ordo()
                .args(["slurm", "import", "--jobcomp"])
                .arg(&log)
                .arg("--out")
                .arg(&trace)
                .output()
                .expect("import");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            // A log without GPU counts is imported with a warning saying why, not silently.
            assert_eq!(err.contains("records a GPU"), gpus == Gpus::NotRecorded, "{err}");
            check_trace(&trace, ids, gpus, q);
        }
        None => {
            assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI: the dev cluster has no jobcomp log");
            let _ = writeln!(std::io::stderr(), "skipped: jobcomp import (no log/jobcomp.txt beside $SLURM_CONF)");
        }
    }
}

/// `drive --dry-run --once` (through `dry_conn`) lists the queue and changes no priority; the same
/// pass for real (through `drive_conn`) changes them in sjf order, and `release` (through
/// `release_conn`) hands them back: Slurm's submit order returns.
pub fn dry_run_then_drive_then_release(dry_conn: &[String], drive_conn: &[String], release_conn: &[String]) {
    wait_idle();
    let mut jobs = Jobs::default();
    fill_cluster(&mut jobs, 60);
    let p: Vec<u64> = [5u32, 3, 1].iter().map(|&l| jobs.submit(4, l, 2, false)).collect();
    let before: Vec<u64> = {
        let q = squeue();
        p.iter().map(|id| q[id].priority).collect()
    };
    let log = tmp("dry.jsonl");
    let out = ordo()
        .args(["slurm", "drive", "--policy", "sjf", "--dry-run", "--once", "--audit-log"])
        .arg(&log)
        .args(dry_conn)
        .output()
        .expect("ordo slurm drive --dry-run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("would change 3 priorities"), "{text}");
    for id in &p {
        assert!(text.contains(&id.to_string()), "dry run lists job {id}:\n{text}");
    }
    assert!(text.contains("waits for resources"), "{text}");
    let after: Vec<u64> = {
        let q = squeue();
        p.iter().map(|id| q[id].priority).collect()
    };
    assert_eq!(before, after, "--dry-run changed a priority");
    assert!(!log.exists(), "--dry-run wrote an audit log");

    // The same pass for real changes them (so the check above can fail) ...
    let out = ordo()
        .args(["slurm", "drive", "--policy", "sjf", "--once", "--audit-log"])
        .arg(&log)
        .args(drive_conn)
        .output()
        .expect("drive");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let q = squeue();
    let set: Vec<u64> = p.iter().map(|id| q[id].priority).collect();
    assert!(set[2] > set[1] && set[1] > set[0], "sjf: the 1-minute job first: {set:?}");
    let recs = audit(&log);
    assert_eq!(recs.iter().filter(|r| r.action == "set").count(), 3, "{recs:?}");
    // The first drive on a log records the policy it orders by and who started it.
    let first = &recs[0];
    assert_eq!((first.action.as_str(), first.policy.as_str(), first.from_policy.as_deref()), ("policy", "sjf", None));
    assert!(first.actor.as_deref().is_some_and(|a| !a.is_empty()), "{first:?}");
    assert_eq!(recs.iter().filter(|r| r.action == "policy").count(), 1, "{recs:?}");
    // ... and release hands them back: Slurm computes them again, and says so in the log.
    let out = ordo().args(["slurm", "release", "--audit-log"]).arg(&log).args(release_conn).output().expect("release");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("released 3 of 3"), "{text}");
    let q = squeue();
    for (id, ours) in p.iter().zip(&set) {
        assert_ne!(q[id].priority, *ours, "job {id} still has ordo's priority");
        assert!(q[id].priority > 0 && q[id].state == JobState::Pending, "job {id} must stay pending, not held");
    }
    // Slurm's own order is back: under priority/basic, descending in submit order.
    let back: Vec<u64> = p.iter().map(|id| q[id].priority).collect();
    assert!(back.windows(2).all(|w| w[0] > w[1]), "after release, submit order: {back:?}");
    let recs = audit(&log);
    assert_eq!(recs.iter().filter(|r| r.action == "release").count(), 3, "{recs:?}");
    let out =
        ordo().args(["slurm", "release", "--audit-log"]).arg(&log).args(release_conn).output().expect("release again");
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to release"));
}

/// Runs `scripts/SCRIPT WHAT DIR` (`ctld-stop`, `ctld-start`) for the cluster of $SLURM_CONF.
pub fn cluster_ctl(script: &str, what: &str) {
    let conf = std::env::var("SLURM_CONF").expect("the dev cluster is found through SLURM_CONF");
    let dir = PathBuf::from(conf).parent().expect("state dir").to_path_buf();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(script);
    let ok = Command::new("bash").arg(&path).arg(what).arg(&dir).status().expect("dev cluster script").success();
    assert!(ok, "{script} {what} failed");
}

/// `GET http://ADDR/PATH` (curl, as Prometheus or a probe would): the status and the body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", &format!("http://{addr}{path}")])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A running drive survives a controller outage (stopped and started with `scripts/SCRIPT`): it
/// says so, changes nothing, keeps running, resumes when the controller is back and reorders a
/// queue again. Its `/health` (`--metrics-listen`) says 200 while passes reach Slurm and 503
/// with the reason during the outage; `/metrics` counts the passes and the failures.
pub fn drive_survives_a_controller_outage(script: &str) {
    let ctl = |what: &str| cluster_ctl(script, what);
    let log = tmp("outage.jsonl");
    let log_s = log.display().to_string();
    let mut driver = Driver::spawn(&[
        "slurm",
        "drive",
        "--policy",
        "sjf",
        "--interval",
        "1s",
        "--timeout",
        "3s",
        "--audit-log",
        &log_s,
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    wait_for("a first pass", Duration::from_secs(20), || driver.saw("pass 1:"));
    let text = driver.text();
    let addr = text.split("metrics at http://").nth(1).and_then(|r| r.split('/').next()).expect("metrics address");
    let addr = addr.to_string();
    let health = || http_get(&addr, "/health");
    wait_for("healthy after a pass", Duration::from_secs(10), || health().0 == 200);
    let m = http_get(&addr, "/metrics").1;
    assert!(m.contains("ordo_slurm_reachable 1") && !m.contains("ordo_slurm_passes_total 0"), "{m}");
    ctl("ctld-stop");
    let restarted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("drive to report the outage", Duration::from_secs(30), || driver.saw("slurm unreachable"));
        let (code, body) = health();
        assert!(code == 503 && body.contains("slurm unreachable"), "{code} {body}");
        assert!(http_get(&addr, "/metrics").1.contains("ordo_slurm_reachable 0"));
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            driver.child.try_wait().expect("try_wait").is_none(),
            "drive exited during the outage:\n{}",
            driver.text()
        );
    }));
    ctl("ctld-start");
    if let Err(p) = restarted {
        std::panic::resume_unwind(p);
    }
    wait_for("drive to resume", Duration::from_secs(60), || driver.saw("slurm reachable again"));
    wait_for("healthy again", Duration::from_secs(10), || health().0 == 200);
    let text = driver.text();
    let after = &text[text.find("slurm reachable again").expect("seen")..];
    assert!(after.contains(" pass "), "a pass right after the outage:\n{text}");
    assert!(
        audit(&log).iter().all(|r| r.action == "policy"),
        "nothing to change so far (the start's policy record only)"
    );
    // And it does its work again: a queue in the wrong order gets reordered.
    wait_for("the nodes back", Duration::from_secs(60), all_nodes_idle);
    let mut jobs = Jobs::default();
    fill_cluster(&mut jobs, 8);
    let late = [jobs.submit(4, 9, 1, false), jobs.submit(4, 2, 1, false)];
    wait_for("drive to reorder the queue", Duration::from_secs(20), || {
        let recs = audit(&log);
        late.iter().all(|id| recs.iter().any(|r| r.job == *id))
    });
    assert!(driver.child.try_wait().expect("try_wait").is_none());
    drop(jobs);
    wait_for("the nodes back", Duration::from_secs(60), all_nodes_idle);
}

/// Issue 18, items 2 and 7: ordo's priorities sit above what priority/basic gives a new job,
/// so a job submitted after a pass waits below the ranked queue until the next pass places it;
/// a priority set by hand and a nice value are left as their owners set them, and the audit log
/// says so.
pub fn newcomers_wait_below_the_ranked_queue_and_hand_set_jobs_are_left_alone() {
    wait_idle();
    let mut jobs = Jobs::default();
    fill_cluster(&mut jobs, 60);
    let p: Vec<u64> = [5u32, 3, 1].iter().map(|&l| jobs.submit(4, l, 2, false)).collect();
    let log = tmp("newcomers.jsonl");
    let log_s = log.display().to_string();
    let text = drive_once(&["--policy", "sjf", "--audit-log", &log_s]);
    assert!(text.contains("changed 3 priorities"), "{text}");
    assert!(text.contains("priority plugin: priority/basic"), "{text}");
    let newcomer = jobs.submit(4, 1, 2, false);
    let q = squeue();
    let lowest_ranked = p.iter().map(|id| q[id].priority).min().unwrap();
    assert!(
        q[&newcomer].priority < lowest_ranked,
        "a new job ({}) must wait below every ranked one (lowest {lowest_ranked})",
        q[&newcomer].priority
    );
    // By hand: the 5-minute job's owner sets priority 5; a niced job arrives.
    run_with_timeout("scontrol", &["update", &format!("JobId={}", p[0]), "Priority=5"], T).expect("scontrol update");
    let niced = jobs.submit_with(4, 1, 2, &["--nice=100"]);
    let text = drive_once(&["--policy", "sjf", "--audit-log", &log_s]);
    let q = squeue();
    assert_eq!(q[&p[0]].priority, 5, "a priority set by hand was overwritten:\n{text}");
    assert_eq!(q[&niced].nice, 100, "the nice value was reset:\n{text}");
    let recs = audit(&log);
    assert!(recs.iter().any(|r| r.job == newcomer && r.action == "set"), "the next pass places the newcomer: {recs:?}");
    assert!(!recs.iter().any(|r| r.job == niced && r.action == "set"), "{recs:?}");
    let alone =
        |job: u64, word: &str| recs.iter().any(|r| r.job == job && r.action == "left-alone" && r.reason.contains(word));
    assert!(alone(p[0], "changed by someone else"), "{recs:?}");
    assert!(alone(niced, "nice 100"), "{recs:?}");
    // Said once, not at every pass.
    drive_once(&["--policy", "sjf", "--audit-log", &log_s]);
    assert_eq!(audit(&log).iter().filter(|r| r.action == "left-alone").count(), 2);
}

/// Puts a partition back UP when dropped, however the test ends.
pub struct PartitionDown(&'static str);

impl PartitionDown {
    pub fn new(name: &'static str) -> PartitionDown {
        run_with_timeout("scontrol", &["update", &format!("PartitionName={name}"), "State=DOWN"], T).expect("scontrol");
        PartitionDown(name)
    }
}

impl Drop for PartitionDown {
    fn drop(&mut self) {
        let _ = run_with_timeout("scontrol", &["update", &format!("PartitionName={}", self.0), "State=UP"], T);
    }
}

/// Issue 18, items 4, 5 and 6, against the dev cluster (n1, n2: 8 GPUs; n3: 4 GPUs, in
/// partitions `gpu` and `other`; 2 CPUs each): a job of partition `other` waits while a job of
/// `gpu` fills n3; CPUs limit what starts; an array's pending tasks are counted one by one.
pub fn partitions_cpus_and_arrays_are_planned_as_slurm_will_start_them() {
    wait_idle();
    let mut jobs = Jobs::default();
    let filler = jobs.submit_with(4, 5, 60, &["-p", "gpu", "-w", "n3"]);
    wait_for("the n3 filler to run", Duration::from_secs(30), || {
        squeue().get(&filler).is_some_and(|j| j.state == JobState::Running)
    });
    let x = jobs.submit_with(4, 1, 2, &["-p", "other"]);
    let text = drive_once(&["--policy", "sjf", "--dry-run", "--partition", "other"]);
    assert!(text.contains("cluster other 1x4:v100, 1 running"), "the gpu job on n3 counts:\n{text}");
    let row = text.lines().find(|l| l.contains(&format!(" {x} "))).unwrap_or_else(|| panic!("job {x} listed:\n{text}"));
    assert!(!row.contains("starts now") && row.contains("waits for resources"), "{row}");
    drop(jobs);
    wait_idle();

    // Nothing starts while `gpu` is down, so ordo's plan can be read: four 1-GPU jobs asking
    // for both CPUs of a node (17 GPUs free, but 3 nodes of 2 CPUs: three fit), and a 50-task
    // array of 1-GPU, 1-CPU tasks.
    let mut jobs = Jobs::default();
    let down = PartitionDown::new("gpu");
    let c: Vec<u64> = (0..4).map(|_| jobs.submit_with(1, 5, 2, &["-p", "gpu", "-c", "2"])).collect();
    let text = drive_once(&["--policy", "fifo", "--dry-run", "--partition", "gpu"]);
    let row = |id: u64| {
        text.lines()
            .find(|l| l.contains(&format!(" {id} ")))
            .unwrap_or_else(|| panic!("job {id} listed:\n{text}"))
            .to_string()
    };
    assert!(c[..3].iter().all(|&id| row(id).contains("starts now")), "{text}");
    assert!(!row(c[3]).contains("starts now"), "the fourth 2-CPU job has no node with 2 free CPUs:\n{text}");
    let arr = run_with_timeout(
        "sbatch",
        &[
            "--parsable",
            "-p",
            "gpu",
            "-o",
            "/dev/null",
            "-D",
            "/tmp",
            "--gres=gpu:1",
            "-c",
            "1",
            "--time=5",
            "--array=0-49",
            "--wrap",
            "sleep 1",
        ],
        T,
    )
    .expect("sbatch --array");
    let arr: u64 = arr.trim().split(';').next().unwrap().parse().unwrap();
    jobs.0.push(arr);
    let text = drive_once(&["--policy", "fifo", "--dry-run", "--partition", "gpu"]);
    let row = text.lines().find(|l| l.contains(&format!(" {arr} "))).unwrap_or_else(|| panic!("array listed:\n{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(3), Some(&"50"), "50 tasks counted: {row}");
    assert!(row.contains("(array: 50 tasks pending)"), "{row}");
    drop(down);
}

/// Issue 18, item 3: the controller stops while a pass is sending its updates; the pass stops
/// at once (changing nothing more), says so, and the next pass after the controller is back
/// finishes the work.
/// (`scripts/SCRIPT` stops and starts the controller.)
pub fn an_outage_during_the_updates_stops_the_pass(script: &str) {
    wait_idle();
    let ctl = |what: &str| cluster_ctl(script, what);
    let mut jobs = Jobs::default();
    fill_cluster(&mut jobs, 120);
    let pending: Vec<u64> = (0..150u32).map(|k| jobs.submit(4, 1 + (k * 7) % 60, 1, false)).collect();
    let log = tmp("outage-updates.jsonl");
    let log_s = log.display().to_string();
    // 150 updates at 15 per second: ten seconds of updates.
    let driver = Driver::spawn(&[
        "slurm",
        "drive",
        "--policy",
        "sjf",
        "--interval",
        "2s",
        "--timeout",
        "3s",
        "--max-rate",
        "15",
        "--audit-log",
        &log_s,
    ]);
    wait_for("the first updates", Duration::from_secs(30), || audit(&log).iter().any(|r| r.action == "set"));
    ctl("ctld-stop");
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("the pass to stop", Duration::from_secs(30), || driver.saw("unreachable during the updates"));
        let set = audit(&log).iter().filter(|r| r.action == "set").count();
        std::thread::sleep(Duration::from_secs(4));
        assert_eq!(audit(&log).iter().filter(|r| r.action == "set").count(), set, "changes after the outage");
        assert!(set < pending.len(), "the pass stopped part-way ({set} of {})", pending.len());
    }));
    ctl("ctld-start");
    if let Err(p) = stopped {
        std::panic::resume_unwind(p);
    }
    // The controller's restart under CI's load has taken over a minute (a CI run here timed out
    // at 90 s with the driver retrying every 2 s, on code that passed the run before).
    wait_for("every pending job placed", Duration::from_secs(180), || {
        let recs = audit(&log);
        pending.iter().all(|id| recs.iter().any(|r| r.job == *id && r.action == "set"))
    });
    assert!(driver.saw("slurm reachable again"), "{}", driver.text());
    drop(driver);
    drop(jobs);
    wait_for("the nodes back", Duration::from_secs(60), all_nodes_idle);
}

/// Issue 30: typed GRES and constraints. Both a100 nodes are held by one 16-GPU job; five jobs
/// that n3's four free v100s cannot serve wait (`--gres=gpu:a100:N`, `--constraint=ib`,
/// `ib&nvme`, `[ib|nvme]`), submitted longest time limit first. `drive --dry-run` (through
/// `conn`) plans none of them on n3 and names what each asks; a running `drive --policy sjf`
/// makes Slurm start them in sjf order once the a100s free up (without it Slurm's own order,
/// submit order, starts the 9-minute job in the first wave). Returns the five ids in ordo's
/// order, with the GPU type (if any) and the constraint (if any) each asked for.
pub fn typed_gres_and_constraints_are_honoured(
    conn: &[String],
) -> Vec<(u64, Option<&'static str>, Option<&'static str>)> {
    wait_idle();
    let mut jobs = Jobs::default();
    let blocker = jobs.submit_gres("gpu:a100:8", 10, 20, &["-N", "2"]);
    wait_for("the a100 blocker to run", Duration::from_secs(30), || {
        squeue().get(&blocker).is_some_and(|j| j.state == JobState::Running)
    });
    // (GPU type, constraint, time limit in minutes): sjf runs them 4, 2, 3, 5, 1 (by limit).
    let asks: [(Option<&'static str>, Option<&'static str>, u32, &str); 5] = [
        (Some("a100"), None, 9, "gpu:a100:8"),
        (Some("a100"), None, 2, "gpu:a100:8"),
        (None, Some("ib"), 5, "gpu:4"),
        (Some("a100"), Some("ib&nvme"), 1, "gpu:a100:4"),
        (None, Some("[ib|nvme]"), 7, "gpu:2"),
    ];
    let ids: Vec<u64> = asks
        .iter()
        .map(|(_, c, limit, gres)| {
            let c = c.map(|c| format!("--constraint={c}"));
            let extra: Vec<&str> = c.iter().map(String::as_str).collect();
            jobs.submit_gres(gres, *limit, 3, &extra)
        })
        .collect();
    let q = squeue();
    for id in &ids {
        assert_eq!(q[id].state, JobState::Pending, "Slurm leaves job {id} waiting: n3's v100s do not serve it");
    }
    assert!(
        q[&ids[3]].gpu_types == ["a100"] && q[&ids[3]].constraint.as_deref() == Some("ib&nvme"),
        "{:?}",
        q[&ids[3]]
    );

    // The plan: every one waits for GPUs it accepts, none on n3, each with what it asks.
    let dry = drive_once(&with_conn(&["--policy", "sjf+easy", "--dry-run"], conn));
    assert!(dry.contains("cluster gpu 2x8:a100,1x4:v100"), "{dry}");
    let row = |id: u64| {
        // Not the pass's summary line, whose counts (`1 running, 5 pending`) may read as a
        // small job id on a fresh cluster.
        dry.lines()
            .filter(|l| !l.contains(" pass ") && !l.contains("pending ordered"))
            .find(|l| l.contains(&format!(" {id} ")))
            .unwrap_or_else(|| panic!("job {id} listed:\n{dry}"))
            .to_string()
    };
    for (id, (t, c, _, gres)) in ids.iter().zip(&asks) {
        let r = row(*id);
        assert!(!r.contains("starts now") && !r.contains("n3"), "job {id} planned where it cannot run: {r}");
        // Jobs that would fit n3's four GPUs are told the v100s there do not qualify; the
        // 8-GPU ones wait for resources, and the row says what they ask.
        let why = if gres.ends_with(":8") { "asks GPU type a100" } else { "4 free GPUs of v100 do not qualify" };
        assert!(r.contains(why), "the reason names the constraint: {r}");
        if let Some(t) = t {
            assert!(r.contains(t), "{r}");
        }
        if let Some(c) = c.filter(|c| !c.contains('|')) {
            assert!(r.contains(&format!("[{}", c.split('&').next().unwrap_or(c))), "{r}");
        }
    }
    assert!(!dry.contains("left alone: job"), "{dry}");

    // Driven: Slurm starts them in ordo's order.
    let (q, _, by_ordo) = drive_sjf_until_done(&ids, conn, &tmp("typed.jsonl"), Duration::from_secs(120));
    let order: Vec<(usize, usize)> =
        by_ordo.iter().enumerate().map(|(pos, id)| (pos, ids.iter().position(|x| x == id).unwrap_or(0))).collect();
    let limits: Vec<u32> = order.iter().map(|&(_, k)| asks[k].2).collect();
    assert_eq!(limits, [1, 2, 5, 7, 9], "ordo's sjf order is by time limit");
    let starts: Vec<i64> = order.iter().map(|&(_, k)| q[&ids[k]].start).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "start times along ordo's order: {starts:?}");
    assert!(starts[2] < starts[4], "the 9-minute job waited for a second wave: {starts:?}");
    order.iter().map(|&(_, k)| (ids[k], asks[k].0, asks[k].1)).collect()
}
