//! GPU activity in the server's state, without HTTP: agents' samples are checked and attributed
//! to the jobs holding the GPUs, per-job figures and the allocated-but-idle flag are right
//! (worked out by hand) and survive a restart, the series are bounded, and `/metrics` counts.

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::state::{ApiError, Core};
use ordo_server::ServerConfig;
use std::path::PathBuf;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-activity-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn cfg(dir: &std::path::Path) -> ServerConfig {
    let mut c = ServerConfig { db: dir.join("ordo.db"), ..ServerConfig::default() };
    c.set_policy("test", "fifo").expect("policy");
    // Flagged after 60 s under 5% busy.
    c.set_idle("test", Some(5.0), Some("60s"), None).expect("idle");
    c
}

fn agent(node: &str) -> Principal {
    Principal { user: node.into(), role: Role::Agent }
}

fn user(name: &str) -> Principal {
    Principal { user: name.into(), role: Role::User }
}

fn job(gpus: u32, name: &str) -> SubmitRequest {
    SubmitRequest {
        name: Some(name.into()),
        command: vec!["true".into()],
        gpus,
        time_limit_ms: Some(3_600_000),
        ..SubmitRequest::default()
    }
}

fn sample(gpu: u32, util: f64, mem: u64) -> GpuSample {
    GpuSample {
        gpu,
        util_pct: util,
        sm_pct: None,
        mem_used_mib: Some(mem),
        mem_total_mib: Some(81_920),
        power_w: Some(100.0),
    }
}

fn report(c: &mut Core, node: &str, gpus: Vec<GpuSample>, now: i64) -> Result<(), ApiError> {
    c.activity(&agent(node), &ActivityReport { node: node.into(), gpus }, now)
}

/// A node `n1` of 4 GPUs running job 1 (2 GPUs, "busy") and job 2 (1 GPU, "notebook"); GPU 3 free.
fn setup(dir: &std::path::Path, t0: i64) -> (Core, u64, u64) {
    let mut c = Core::open(cfg(dir), t0).expect("open");
    let reg = RegisterRequest { node: "n1".into(), gpus: 4, fake: true, ..RegisterRequest::default() };
    c.register(&agent("n1"), &reg, t0).expect("register");
    let busy = c.submit(&user("alice"), job(2, "busy"), t0).expect("submit");
    let nb = c.submit(&user("bob"), job(1, "notebook"), t0).expect("submit");
    c.pass(t0).expect("pass");
    let running = vec![
        RunningJob { job: busy, started_at: t0, attempt: 0, port: None },
        RunningJob { job: nb, started_at: t0, attempt: 0, port: None },
    ];
    c.poll(&agent("n1"), &PollRequest { node: "n1".into(), running, wait_ms: 0, problem: None }, t0).expect("poll");
    (c, busy, nb)
}

fn gpus_of(c: &Core, id: u64, now: i64) -> Vec<u32> {
    c.job(id, now).expect("job").gpu_ids
}

#[test]
fn samples_are_checked() {
    let dir = tempdir("checks");
    let t0 = 10_000_000;
    let (mut c, _, _) = setup(&dir, t0);
    let bad = |c: &mut Core, gpus: Vec<GpuSample>, t: i64| report(c, "n1", gpus, t).unwrap_err().to_string();
    assert!(
        bad(&mut c, vec![sample(4, 1.0, 1)], t0).contains("field `gpus[0].gpu`: 4 is not a GPU of node n1 (0 to 3)")
    );
    assert!(bad(&mut c, vec![sample(0, 1.0, 1), sample(0, 2.0, 1)], t0).contains("gpus[1].gpu`: GPU 0 sampled twice"));
    assert!(bad(&mut c, vec![sample(0, 100.5, 1)], t0).contains("gpus[0].util_pct`: 100.5 is not a percentage"));
    assert!(bad(&mut c, vec![sample(0, f64::NAN, 1)], t0).contains("util_pct"));
    assert!(bad(&mut c, vec![sample(1, 1.0, 90_000)], t0).contains("gpus[0].mem_used_mib`: 90000 MiB used of 81920"));
    let huge = GpuSample { mem_total_mib: Some(u64::MAX), ..sample(0, 1.0, 1) };
    assert!(bad(&mut c, vec![huge], t0).contains("mem_total_mib"));
    let hot = GpuSample { power_w: Some(-1.0), ..sample(0, 1.0, 1) };
    assert!(bad(&mut c, vec![hot], t0).contains("power_w"));
    let many: Vec<GpuSample> = (0..5).map(|g| sample(g % 4, 1.0, 1)).collect();
    assert!(bad(&mut c, many, t0).contains("5 samples, but node n1 has 4 GPUs"));
    // Another node's agent, a user, an unknown node.
    let e = c.activity(&agent("n2"), &ActivityReport { node: "n1".into(), gpus: vec![] }, t0).unwrap_err();
    assert!(matches!(e, ApiError::Forbidden(_)), "{e}");
    let e = c.activity(&user("alice"), &ActivityReport { node: "n1".into(), gpus: vec![] }, t0).unwrap_err();
    assert!(matches!(e, ApiError::Forbidden(_)), "{e}");
    let e = c.activity(&agent("n9"), &ActivityReport { node: "n9".into(), gpus: vec![] }, t0).unwrap_err();
    assert!(matches!(e, ApiError::Conflict(_)), "{e}");
    // Nothing of the refused reports counted; a good one does, and one right after it is 429.
    report(&mut c, "n1", vec![sample(0, 50.0, 10)], t0).expect("good");
    let e = report(&mut c, "n1", vec![sample(0, 50.0, 10)], t0 + 100).unwrap_err();
    assert!(matches!(e, ApiError::TooManyRequests(_)), "{e}");
    let g = c.gpus_status(t0 + 100);
    assert_eq!(g.gpus.iter().filter(|x| x.sample.is_some()).count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn job_figures_and_allocated_but_idle_by_hand() {
    let dir = tempdir("idle");
    let t0 = 20_000_000;
    let (mut c, busy, nb) = setup(&dir, t0);
    let (b, n) = (gpus_of(&c, busy, t0), gpus_of(&c, nb, t0));
    assert_eq!((b.len(), n.len()), (2, 1));
    let free = (0..4).find(|g| !b.contains(g) && !n.contains(g)).expect("a free GPU");
    // Four reports, 30 s apart: the busy job at 80/90, 60/70, 85/95, 90/100 (mean 83.75, its 8
    // samples sorted 60 70 80 85 90 90 95 100: p10 = the 1st = 60); the notebook at 2, 1, 3, 0
    // (under 5% from the first report, t0 + 30 s, so flagged at the report 60 s later).
    let levels = [(80.0, 90.0, 2.0), (60.0, 70.0, 1.0), (85.0, 95.0, 3.0), (90.0, 100.0, 0.0)];
    for (i, (x, y, z)) in levels.iter().enumerate() {
        let t = t0 + 30_000 * (i as i64 + 1);
        let s = vec![
            sample(b[0], *x, 40_000 + i as u64),
            sample(b[1], *y, 30_000),
            sample(n[0], *z, 1_500),
            sample(free, 0.0, 0),
        ];
        report(&mut c, "n1", s, t).expect("report");
        let flagged = c.job(nb, t).expect("job").activity.expect("figures").idle_flagged;
        // Idle since t0 + 30 s; flagged once 60 s have passed: at the third report (t0 + 90 s).
        assert_eq!(flagged.is_some(), i >= 2, "report {i}: {flagged:?}");
    }
    let t = t0 + 120_000;
    let a = c.job(busy, t).expect("job").activity.expect("figures");
    assert_eq!(a.samples, 8);
    assert!((a.mean_busy_pct - 83.75).abs() < 1e-9, "{a:?}");
    assert_eq!(a.p10_busy_pct, 60.0);
    assert_eq!(a.peak_mem_mib, Some(40_003));
    assert_eq!((a.idle_since, a.idle_flagged), (None, None));
    let i = c.job(nb, t).expect("job").activity.expect("figures");
    assert_eq!((i.samples, i.mean_busy_pct, i.p10_busy_pct), (4, 1.5, 0.0));
    assert_eq!((i.idle_since, i.idle_flagged), (Some(t0 + 30_000), Some(t0 + 90_000)));
    // The flag everywhere: GPUs, nodes, the audit log, the webhook notices.
    let g = c.gpus_status(t);
    assert_eq!(g.idle.len(), 1);
    assert_eq!((g.idle[0].job, g.idle[0].idle_since, g.idle[0].flagged_at), (nb, t0 + 30_000, t0 + 90_000));
    assert!((g.idle[0].busy_pct - 1.5).abs() < 1e-9, "mean of 2, 1, 3, 0: {:?}", g.idle[0]);
    let idle_gpus: Vec<u32> = g.gpus.iter().filter(|x| x.idle).map(|x| x.gpu).collect();
    assert_eq!(idle_gpus, n);
    let node = &c.nodes()[0];
    assert_eq!(node.idle_jobs, vec![nb]);
    // Mean of the latest samples: (90 + 100 + 0 + 0) / 4.
    assert_eq!(node.busy_pct, Some(47.5));
    let recs = c.audit(Some(nb), None, 100).expect("audit");
    let idle: Vec<&AuditRecord> = recs.iter().filter(|r| r.kind == "idle").collect();
    assert_eq!(idle.len(), 1, "{recs:?}");
    assert_eq!(idle[0].detail["event"], "allocated_but_idle");
    assert_eq!(idle[0].detail["busy_pct"], 2.0, "mean of 2, 1, 3 while it became idle");
    assert_eq!(idle[0].actor, "node:n1");
    let notices = c.activity_tick(t).expect("tick");
    assert_eq!(notices.len(), 1);
    assert_eq!((notices[0]["job"].as_u64(), notices[0]["user"].as_str()), (Some(nb), Some("bob")));
    assert!(c.activity_tick(t + 1).expect("tick").is_empty(), "a notice is given once");
    // Metrics count it.
    let s = c.snapshot(t);
    assert_eq!((s.gpus_total, s.gpus_allocated, s.gpus_allocated_idle, s.jobs_allocated_idle), (4, 3, 1, 1));
    assert!((s.gpus_busy - 1.9).abs() < 1e-9, "0.9 + 1.0 + 0 + 0: {}", s.gpus_busy);
    assert_eq!(s.running_gpus.get(&("alice".into(), "alice".into())), Some(&2));

    // It survives a restart (figures written by the minute's flush).
    c.activity_tick(t + 60_000).expect("flush");
    drop(c);
    let mut c = Core::open(cfg(&dir), t + 61_000).expect("reopen");
    c.poll(
        &agent("n1"),
        &PollRequest {
            node: "n1".into(),
            running: vec![
                RunningJob { job: busy, started_at: t0, attempt: 0, port: None },
                RunningJob { job: nb, started_at: t0, attempt: 0, port: None },
            ],
            wait_ms: 0,
            problem: None,
        },
        t + 61_000,
    )
    .expect("poll");
    let i = c.job(nb, t + 61_000).expect("job").activity.expect("figures");
    assert_eq!((i.samples, i.idle_flagged), (4, Some(t0 + 90_000)));
    // Busy again: unflagged, with a record.
    report(&mut c, "n1", vec![sample(n[0], 70.0, 9_000)], t + 62_000).expect("report");
    let i = c.job(nb, t + 62_000).expect("job").activity.expect("figures");
    assert_eq!((i.idle_since, i.idle_flagged), (None, None));
    let last = c.audit(Some(nb), None, 100).expect("audit").into_iter().rfind(|r| r.kind == "idle").expect("record");
    assert_eq!(last.detail["event"], "busy_again");
    // Its end keeps the figures (history and explain show them).
    c.report(
        &agent("n1"),
        &EndReport {
            node: "n1".into(),
            job: nb,
            attempt: 1,
            outcome: Outcome::Exited,
            exit_code: Some(0),
            signal: None,
            started_at: t0,
            ended_at: t + 63_000,
            message: None,
        },
        t + 63_000,
    )
    .expect("end");
    c.activity_tick(t + 130_000).expect("flush");
    let h = c.history(Some("bob"), 10).expect("history");
    let a = h[0].activity.as_ref().expect("figures of an ended job");
    assert_eq!((a.samples, a.mean_busy_pct, a.idle_flagged), (5, 15.2, None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn series_are_bounded_rings() {
    let dir = tempdir("series");
    let t0 = 1_700_000_000_000;
    let (mut c, busy, _) = setup(&dir, t0);
    let b = gpus_of(&c, busy, t0);
    // Three days of ticks every 10 minutes with the busy job at 50% on both GPUs.
    let mut t = t0;
    while t < t0 + 3 * 86_400_000 {
        report(&mut c, "n1", vec![sample(b[0], 50.0, 1), sample(b[1], 50.0, 1)], t).expect("report");
        c.activity_tick(t).expect("tick");
        t += 600_000;
    }
    let day = c.utilization(86_400_000, t).expect("series");
    assert_eq!(day.resolution_ms, 300_000);
    // One bucket in two has a tick (every 10 minutes), over a day: 144 or 145 buckets.
    assert!((144..=146).contains(&day.points.len()), "{}", day.points.len());
    for p in &day.points {
        assert_eq!((p.gpus, p.allocated), (4.0, 3.0), "{p:?}");
        assert!((p.busy - 1.0).abs() < 1e-9, "two GPUs at 50%: {p:?}");
    }
    let two = c.utilization(14 * 86_400_000, t).expect("series");
    assert_eq!(two.resolution_ms, 3_600_000);
    assert!((72..=73).contains(&two.points.len()), "{}", two.points.len());
    // Rows in the tables: at most the ring's slots, however long the server runs.
    let conn = rusqlite::Connection::open(dir.join("ordo.db")).expect("db");
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).expect("count");
    assert!(count("SELECT COUNT(*) FROM cluster_series WHERE res = 300000") <= 300);
    // Samples every 10 minutes fill every other 5-minute slot: 150 of the 300 per GPU, after 3 days.
    assert_eq!(count("SELECT COUNT(*) FROM gpu_series WHERE res = 300000"), 2 * 150);
    assert_eq!(count("SELECT COUNT(*) FROM gpu_series WHERE res = 3600000"), 2 * 72);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_idle_multi_node_job_is_named_on_every_rank_s_node() {
    let dir = tempdir("gang-idle");
    let t0 = 30_000_000;
    let mut c = Core::open(cfg(&dir), t0).expect("open");
    for n in ["n1", "n2"] {
        let reg = RegisterRequest { node: n.into(), gpus: 4, fake: true, ..RegisterRequest::default() };
        c.register(&agent(n), &reg, t0).expect("register");
    }
    // 6 GPUs on 4-GPU nodes: split 4 + 2 by the placement, one rank on each node.
    let id = c.submit(&user("alice"), job(6, "big"), t0).expect("submit");
    c.pass(t0).expect("pass");
    let j = c.job(id, t0).expect("job");
    let shape: Vec<(String, Vec<u32>)> = j.ranks.iter().map(|r| (r.node.clone(), r.gpu_ids.clone())).collect();
    assert_eq!(shape, vec![("n1".to_string(), vec![0, 1, 2, 3]), ("n2".to_string(), vec![0, 1])]);
    for (n, port) in [("n1", Some(29_500)), ("n2", None)] {
        let running = vec![RunningJob { job: id, started_at: t0, attempt: 0, port }];
        c.poll(&agent(n), &PollRequest { node: n.into(), running, wait_ms: 0, problem: None }, t0).expect("poll");
    }
    // Both nodes report its GPUs idle for more than 60 s.
    for k in 0..4 {
        let t = t0 + k * 30_000;
        report(&mut c, "n1", (0..4).map(|g| sample(g, 1.0, 10)).collect(), t).expect("n1");
        report(&mut c, "n2", (0..2).map(|g| sample(g, 0.0, 10)).collect(), t).expect("n2");
    }
    let t = t0 + 90_000;
    // Every GPU of every rank is the job's and flagged, on both nodes.
    let g = c.gpus_status(t);
    let held: Vec<(String, u32, bool)> =
        g.gpus.iter().filter(|x| x.job == Some(id)).map(|x| (x.node.clone(), x.gpu, x.idle)).collect();
    let want: Vec<(String, u32, bool)> = [("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3), ("n2", 0), ("n2", 1)]
        .map(|(n, g)| (n.to_string(), g, true))
        .into();
    assert_eq!(held, want);
    assert_eq!(g.idle.len(), 1);
    let ranks: Vec<(&str, usize)> = g.idle[0].ranks.iter().map(|r| (r.node.as_str(), r.gpu_ids.len())).collect();
    assert_eq!(ranks, vec![("n1", 4), ("n2", 2)]);
    for n in c.nodes() {
        assert_eq!(n.idle_jobs, vec![id], "node {}", n.name);
    }
    let recs = c.audit(Some(id), None, 100).expect("audit");
    let idle = recs.iter().find(|r| r.kind == "idle").expect("idle record");
    assert_eq!(idle.detail["nodes"], serde_json::json!(["n1", "n2"]), "{}", idle.detail);
    assert_eq!(idle.detail["ranks"][1]["gpu_ids"], serde_json::json!([0, 1]), "{}", idle.detail);
    let notices = c.activity_tick(t).expect("tick");
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0]["nodes"], serde_json::json!(["n1", "n2"]));
    assert!(ordo_server::notify::text(&notices[0]).contains("on n1 (4), n2 (2)"), "{}", notices[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn reclaim_cfg(dir: &std::path::Path, action: ordo_server::config::ReclaimAction, exempt: &[&str]) -> ServerConfig {
    let mut c = cfg(dir);
    c.reclaim = Some(ordo_server::config::Reclaim {
        action,
        grace_ms: 60_000,
        groups: vec![],
        exempt_users: exempt.iter().map(|s| s.to_string()).collect(),
        exempt_groups: vec![],
    });
    c
}

/// Reports every 30 s from `from` to `until`: job `busy` at 90%, the notebook at 1%.
fn idle_reports(c: &mut Core, busy: u64, nb: u64, from: i64, until: i64) {
    let (b, n) = (gpus_of(c, busy, from), gpus_of(c, nb, from));
    let mut t = from;
    while t <= until {
        let s = vec![sample(b[0], 90.0, 40_000), sample(b[1], 90.0, 40_000), sample(n[0], 1.0, 1_500)];
        report(c, "n1", s, t).expect("report");
        t += 30_000;
    }
}

/// The reclaim rule by hand: the notebook goes under 5% at t0 + 30 s, is flagged at t0 + 90 s
/// (60 s idle), and with a grace of 60 s is reclaimed at the first tick from t0 + 150 s:
/// cancelled (its agent told to kill it) or requeued (stopped, then pending again with a clean
/// idle clock), with an audit record of the evidence and a webhook notice, once; `explain`'s
/// figures say when before it happens. An exempt user's job is never reclaimed. Bad `[reclaim]`
/// tables are refused naming the field.
#[test]
fn reclaim_by_hand() {
    use ordo_server::config::ReclaimAction;
    let t0 = 30_000_000;
    // Cancel.
    let dir = tempdir("reclaim-cancel");
    let (c0, busy, nb) = setup(&dir, t0);
    drop(c0);
    let mut c = Core::open(reclaim_cfg(&dir, ReclaimAction::Cancel, &[]), t0).expect("open");
    let running = vec![
        RunningJob { job: busy, started_at: t0, attempt: 1, port: None },
        RunningJob { job: nb, started_at: t0, attempt: 1, port: None },
    ];
    let poll = |c: &mut Core, t: i64| {
        c.poll(&agent("n1"), &PollRequest { node: "n1".into(), running: running.clone(), wait_ms: 0, problem: None }, t)
            .expect("poll")
    };
    poll(&mut c, t0);
    idle_reports(&mut c, busy, nb, t0 + 30_000, t0 + 120_000);
    let a = c.job(nb, t0 + 120_000).expect("job").activity.expect("figures");
    assert_eq!((a.idle_since, a.idle_flagged), (Some(t0 + 30_000), Some(t0 + 90_000)));
    assert_eq!((a.reclaim_at, a.reclaim_action.as_deref()), (Some(t0 + 150_000), Some("cancel")));
    assert_eq!(c.job(busy, t0 + 120_000).expect("job").activity.expect("figures").reclaim_at, None);
    assert!(c.reclaim_tick(t0 + 120_000).expect("tick").is_empty(), "30 s after the flag: not yet");
    idle_reports(&mut c, busy, nb, t0 + 150_000, t0 + 150_000);
    let notices = c.reclaim_tick(t0 + 150_000).expect("tick");
    assert_eq!(notices.len(), 1, "{notices:?}");
    let n = &notices[0];
    assert_eq!(
        (n["event"].as_str(), n["job"].as_u64(), n["user"].as_str()),
        (Some("reclaimed"), Some(nb), Some("bob"))
    );
    assert!(c.reclaim_tick(t0 + 160_000).expect("tick").is_empty(), "reclaimed once");
    let j = c.job(nb, t0 + 150_000).expect("job");
    assert!(j.cancel_requested, "{j:?}");
    assert!(!c.job(busy, t0 + 150_000).expect("job").cancel_requested, "the busy job is left alone");
    let recs = c.audit(Some(nb), None, 100).expect("audit");
    let r = recs.iter().find(|r| r.kind == "reclaim").expect("a reclaim record");
    assert_eq!(r.actor, "reclaim");
    // The evidence: idle since t0 + 30 s, samples at 30, 60, ..., 150 s (the last one counted
    // before the tick), all at 1%.
    assert_eq!(
        (r.detail["action"].as_str(), r.detail["samples"].as_u64(), r.detail["busy_pct"].as_f64()),
        (Some("cancel"), Some(5), Some(1.0)),
        "{r:?}"
    );
    assert_eq!(
        (r.detail["idle_since"].as_i64(), r.detail["flagged_at"].as_i64()),
        (Some(t0 + 30_000), Some(t0 + 90_000))
    );
    assert_eq!(r.detail["grace_ms"], 60_000);
    assert!(recs.iter().any(|r| r.kind == "cancel" && r.actor == "reclaim"), "{recs:?}");
    assert!(poll(&mut c, t0 + 151_000).kill.contains(&nb), "its agent is told to kill it");
    drop(c);

    // Requeue.
    let dir = tempdir("reclaim-requeue");
    let (c0, busy, nb) = setup(&dir, t0);
    drop(c0);
    let mut c = Core::open(reclaim_cfg(&dir, ReclaimAction::Requeue, &[]), t0).expect("open");
    poll(&mut c, t0);
    idle_reports(&mut c, busy, nb, t0 + 30_000, t0 + 150_000);
    assert_eq!(c.reclaim_tick(t0 + 150_000).expect("tick").len(), 1);
    assert_eq!(c.job(nb, t0 + 150_000).expect("job").state, JobState::Preempting);
    assert!(poll(&mut c, t0 + 151_000).kill.contains(&nb));
    let end = EndReport {
        node: "n1".into(),
        job: nb,
        attempt: 1,
        outcome: Outcome::Killed,
        exit_code: None,
        signal: Some(15),
        started_at: t0,
        ended_at: t0 + 152_000,
        message: None,
    };
    c.report(&agent("n1"), &end, t0 + 152_000).expect("end");
    let j = c.job(nb, t0 + 152_000).expect("job");
    assert_eq!((j.state, j.restarts), (JobState::Pending, 1), "{j:?}");
    assert_eq!(j.activity.as_ref().and_then(|a| a.idle_flagged), None, "its next run starts with a clean idle clock");
    drop(c);

    // Exempt.
    let dir = tempdir("reclaim-exempt");
    let (c0, busy, nb) = setup(&dir, t0);
    drop(c0);
    let mut c = Core::open(reclaim_cfg(&dir, ReclaimAction::Cancel, &["bob"]), t0).expect("open");
    poll(&mut c, t0);
    idle_reports(&mut c, busy, nb, t0 + 30_000, t0 + 300_000);
    assert!(c.reclaim_tick(t0 + 300_000).expect("tick").is_empty(), "bob is exempt");
    let j = c.job(nb, t0 + 300_000).expect("job");
    assert!(!j.cancel_requested && j.activity.expect("figures").reclaim_at.is_none());
    drop(c);

    // Bad tables.
    for (toml, says) in [
        ("[reclaim]\naction = \"kill\"\ngrace = \"1h\"\n", "reclaim.action"),
        ("[reclaim]\naction = \"cancel\"\n", "reclaim.grace"),
        ("[reclaim]\naction = \"cancel\"\ngrace = \"soon\"\n", "reclaim.grace"),
        ("[reclaim]\naction = \"cancel\"\ngrace = \"1h\"\nexempt_users = [\"\"]\n", "reclaim.exempt_users"),
        ("[reclaim]\naction = \"cancel\"\ngrace = \"1h\"\nwho = 1\n", "who"),
    ] {
        let p = dir.join("bad.toml");
        std::fs::write(&p, toml).expect("write");
        let e = ServerConfig::from_file(&p).expect_err(toml).to_string();
        assert!(e.contains(says) && e.contains("bad.toml"), "{toml}: {e}");
    }
    let p = dir.join("good.toml");
    std::fs::write(&p, "[reclaim]\naction = \"requeue\"\ngrace = \"2h\"\nexempt_groups = [\"infra\"]\n")
        .expect("write");
    let r = ServerConfig::from_file(&p).expect("reads").reclaim.expect("a rule");
    assert_eq!(
        (r.action, r.grace_ms, r.exempt_groups.as_slice()),
        (ReclaimAction::Requeue, 7_200_000, &["infra".to_string()][..])
    );
    assert!(!r.applies("x", Some("infra")) && r.applies("x", Some("ml")) && r.applies("x", None));
    let _ = std::fs::remove_dir_all(&dir);
}
