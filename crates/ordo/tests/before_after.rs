//! "Did it work, or was the second fortnight quieter?": `ordo before-after` on histories made
//! through the server's real state machine (submissions, passes, agents' polls and end reports,
//! a change of policy by an admin with a reason), with every figure worked out by hand.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod run;

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::state::Core;
use ordo_server::ServerConfig;
use run::{ok, ordo};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const T0: i64 = 1_700_000_000_000;
const S: i64 = 1000;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-before-after-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A job of a history: submitted at `at` s, `gpus`, running `secs` s, by `user`.
struct J {
    at: i64,
    gpus: u32,
    secs: i64,
    user: &'static str,
}

fn j(at: i64, gpus: u32, secs: i64, user: &'static str) -> J {
    J { at, gpus, secs, user }
}

/// Runs `jobs` through a server with `nodes` nodes of `gpus` GPUs, starting under `fifo`; at `change_at`
/// s an admin sets `sjf` with a reason. At each instant: ends are reported, the policy changes,
/// jobs are submitted, the scheduler passes, and the agent takes the jobs it is given and
/// confirms them at once (so the server's starts are the pass's). Jobs declare a time limit 1 s
/// over their run time (what `sjf` orders by).
fn history(dir: &Path, (nodes, gpus): (usize, u32), jobs: &[J], change_at: i64, to: &str) -> PathBuf {
    let db = dir.join("ordo.db");
    let mut cfg = ServerConfig { db: db.clone(), ..ServerConfig::default() };
    cfg.set_policy("test", "fifo").unwrap();
    let mut c = Core::open(cfg, T0).unwrap();
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let agent = |n: &str| Principal { user: n.into(), role: Role::Agent };
    let admin = Principal { user: "carol".into(), role: Role::Admin };
    for n in &names {
        let reg = RegisterRequest { node: n.clone(), gpus, fake: true, ..RegisterRequest::default() };
        c.register(&agent(n), &reg, T0).unwrap();
    }
    // Events by time (s): submissions (index into jobs) and ends (job, attempt, start).
    let mut submits: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, x) in jobs.iter().enumerate() {
        submits.entry(x.at).or_default().push(i);
    }
    let mut ends: BTreeMap<i64, Vec<(usize, u64, u32, i64)>> = BTreeMap::new();
    let mut ids: Vec<u64> = vec![0; jobs.len()];
    let mut index: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut running: Vec<Vec<(u64, i64)>> = vec![Vec::new(); nodes];
    let mut changed = false;
    loop {
        let next = [submits.keys().next(), ends.keys().next()].into_iter().flatten().min().copied();
        let t = match next {
            Some(t) if !changed && change_at < t => change_at,
            Some(t) => t,
            None if !changed => change_at,
            None => break,
        };
        let now = T0 + t * S;
        for (n, id, attempt, start) in ends.remove(&t).unwrap_or_default() {
            let rep = EndReport {
                node: names[n].clone(),
                job: id,
                attempt,
                outcome: Outcome::Exited,
                exit_code: Some(0),
                signal: None,
                started_at: start,
                ended_at: now,
                message: None,
            };
            c.report(&agent(&names[n]), &rep, now).unwrap();
            running[n].retain(|r| r.0 != id);
        }
        if !changed && t == change_at {
            c.set_policy(&admin, to, "short jobs waited hours behind long ones (ticket 4711)", now).unwrap();
            changed = true;
        }
        for i in submits.remove(&t).unwrap_or_default() {
            let x = &jobs[i];
            let who = Principal { user: x.user.into(), role: Role::User };
            let req = SubmitRequest {
                name: Some(format!("j{i}")),
                command: vec!["true".into()],
                gpus: x.gpus,
                time_limit_ms: Some((x.secs + 1) * S),
                ..SubmitRequest::default()
            };
            ids[i] = c.submit(&who, req, now).unwrap();
            index.insert(ids[i], i);
        }
        c.pass(now).unwrap();
        let poll = |n: usize, running: &[(u64, i64)]| PollRequest {
            node: names[n].clone(),
            running: running
                .iter()
                .map(|&(job, started_at)| RunningJob { job, started_at, attempt: 0, port: None })
                .collect(),
            wait_ms: 0,
            problem: None,
        };
        for n in 0..nodes {
            let given = c.poll(&agent(&names[n]), &poll(n, &running[n]), now).unwrap();
            for a in &given.start {
                let i = index[&a.job];
                running[n].push((a.job, now));
                ends.entry(t + jobs[i].secs).or_default().push((n, a.job, a.attempt, now));
            }
            if !given.start.is_empty() {
                c.poll(&agent(&names[n]), &poll(n, &running[n]), now).unwrap();
            }
        }
    }
    db
}

fn close(v: &Value, x: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - x).abs() < 1e-6)
}

/// Six whole-node jobs a period: one of 10 s, then a 40 s one and four of 5 s queued behind it.
/// Under fifo: 0-10, 10-50, 50-55, 55-60, 60-65, 65-70: waits 0, 9, 48, 52, 56, 60 s (mean
/// 37.5 s). Under sjf the four short ones go first: 0-10, then 10-15, 15-20, 20-25, 25-30, and
/// the long one 30-70: waits 0, 8, 12, 16, 20, 29 s (mean 85/6 s).
fn six(at: i64) -> Vec<J> {
    vec![
        j(at, 4, 10, "alice"),
        j(at + 1, 4, 40, "alice"),
        j(at + 2, 4, 5, "bob"),
        j(at + 3, 4, 5, "bob"),
        j(at + 4, 4, 5, "bob"),
        j(at + 5, 4, 5, "bob"),
    ]
}

#[test]
fn the_order_helped_and_the_page_says_so_with_figures_worked_out_by_hand() {
    let dir = tempdir("helped");
    // The same work before (under fifo) and after (under sjf, from 100 s).
    let mut jobs = six(0);
    jobs.extend(six(100));
    let db = history(&dir, (1, 4), &jobs, 100, "sjf");
    let out = dir.join("page.json");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", out.to_str().unwrap()]));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // The change as the audit log holds it: who, from, to, why.
    assert_eq!(r["change"]["actor"], "carol");
    assert_eq!((r["change"]["from"].as_str(), r["change"]["to"].as_str()), (Some("fifo"), Some("sjf")));
    assert!(r["change"]["reason"].as_str().unwrap().contains("ticket 4711"));
    assert_eq!((r["periods"][0]["policy"].as_str(), r["periods"][1]["policy"].as_str()), (Some("fifo"), Some("sjf")));
    assert_eq!((r["periods"][0]["jobs"].as_u64(), r["periods"][1]["jobs"].as_u64()), (Some(6), Some(6)));
    let w = &r["effects"][0];
    assert_eq!(w["measure"], "mean_wait_s");
    let (fifo, sjf) = (225.0 / 6.0, 85.0 / 6.0);
    assert!(close(&w["before"], fifo) && close(&w["after"], sjf), "{w}");
    // Replayed: before's jobs under sjf wait as after's did; after's under fifo as before's.
    assert!(close(&w["order_on_before"]["value"], sjf - fifo), "{w}");
    assert!(close(&w["order_on_after"]["value"], sjf - fifo), "{w}");
    assert!(close(&w["order"]["value"], sjf - fifo), "{w}");
    assert!(close(&w["workload"]["value"], 0.0), "{w}");
    assert!(close(&w["observed"]["value"], sjf - fifo), "{w}");
    assert!(close(&w["replay_gap"], 0.0), "{w}");
    assert!(w["order"]["high"].as_f64().unwrap() < 0.0, "{w}");
    assert_eq!(r["verdict"], "order_helped");
    let h = r["headline"].as_str().unwrap();
    assert!(
        h.starts_with("The change of order helped: on the same jobs, sjf instead of fifo cuts mean wait by 23s (-62%;"),
        "{h}"
    );
    assert!(h.contains("Mean wait went 38s -> 14s (-62%); the change of workload made next to none of it"), "{h}");
    // Same core, agents that confirm at once: the replay under the policy in force starts every
    // job when it really started.
    for f in r["fidelity"].as_array().unwrap() {
        assert_eq!(f["exact_starts"].as_u64(), Some(6), "{f}");
        assert!(close(&f["max_abs_start_error_s"], 0.0) && close(&f["rank_correlation"], 1.0), "{f}");
    }
    // Offered load: 70 s x 4 GPUs of work in each period; before runs 0-100 s, after 100-106 s.
    assert!(close(&r["periods"][0]["offered_load"], 0.7), "{}", r["periods"][0]);
    assert_eq!(r["bootstrap"]["unit"], "jobs");
    // Per size: all jobs take 4 GPUs; per user, bob's four short jobs gained.
    assert_eq!(r["by_size"][1]["jobs"], serde_json::json!([6, 6]));
    let bob = r["users"].as_array().unwrap().iter().find(|u| u["user"] == "bob").unwrap();
    assert!(close(&bob["mean_wait_s"][0], 54.0) && close(&bob["mean_wait_s"][1], 14.0), "{bob}");
    // The page and its Markdown carry the same headline and the reason.
    let html = dir.join("page.html");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", html.to_str().unwrap()]));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("The change of order helped") && page.contains("ticket 4711") && page.contains("<svg"));
    assert!(page.contains("data-key=\"effects.0.order.value\""), "numbers carry their JSON path");
    let md = dir.join("page.md");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", md.to_str().unwrap()]));
    assert!(std::fs::read_to_string(&md).unwrap().contains("## What made the difference"));
}

#[test]
fn a_quieter_period_is_not_credited_to_the_change_of_order() {
    let dir = tempdir("quieter");
    // Before (fifo): six 10 s whole-node jobs a second apart, so they queue: waits 0, 9, 18, 27,
    // 36, 45 s under any order (equal lengths). After (sjf): three such jobs 30 s apart: no wait.
    let mut jobs: Vec<J> = (0..6).map(|i| j(i, 4, 10, "alice")).collect();
    jobs.extend((0..3).map(|i| j(100 + 30 * i, 4, 10, "alice")));
    let db = history(&dir, (1, 4), &jobs, 100, "sjf");
    let out = dir.join("page.json");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", out.to_str().unwrap()]));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let w = &r["effects"][0];
    assert!(close(&w["before"], 22.5) && close(&w["after"], 0.0), "{w}");
    assert!(close(&w["order"]["value"], 0.0) && close(&w["workload"]["value"], -22.5), "{w}");
    assert_eq!(r["verdict"], "workload_not_order");
    let h = r["headline"].as_str().unwrap();
    assert!(!h.contains("helped"), "{h}");
    assert!(h.contains("but the order did not make that difference") && h.contains("the workload did"), "{h}");
}

#[test]
fn a_history_without_a_change_says_what_to_give() {
    let dir = tempdir("nochange");
    let jobs: Vec<J> = (0..3).map(|i| j(i, 4, 10, "alice")).collect();
    // The change comes after every job: the history has it, but no job after it.
    let db = history(&dir, (1, 4), &jobs, 1000, "sjf");
    let out = dir.join("x.json");
    let r = ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("--at") && err.contains("leaves no job on one side"), "{err}");
    let r =
        ordo(&["before-after", "--trace", db.to_str().unwrap(), "--at", "nonsense", "--out", out.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("expected `auto`, a date or time"), "bad --at is named");
}

/// `days` of generated work from `start` s: Poisson arrivals, `jobs_per_day`, run times drawn
/// by `secs`, GPUs from `sizes`, five users.
fn generated(
    rng: &mut fastrand::Rng,
    start: i64,
    days: i64,
    jobs_per_day: f64,
    sizes: &[u32],
    secs: &dyn Fn(&mut fastrand::Rng) -> i64,
) -> Vec<J> {
    const USERS: [&str; 5] = ["ana", "ben", "chen", "dara", "eli"];
    let mut out = Vec::new();
    let mut t = start as f64;
    let end = (start + days * 86_400) as f64;
    loop {
        t += -(1.0 - rng.f64()).ln() * 86_400.0 / jobs_per_day;
        if t >= end {
            break;
        }
        let gpus = sizes[rng.usize(..sizes.len())];
        out.push(J { at: t as i64, gpus, secs: secs(rng).max(1), user: USERS[rng.usize(..USERS.len())] });
    }
    out
}

/// Writes the page of `db` as JSON (and, with `ORDO_BEFORE_AFTER_PAGES=DIR`, as HTML in DIR, for
/// looking at it) and returns the JSON.
fn page(db: &Path, name: &str) -> Value {
    let json = db.with_extension("json");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", json.to_str().unwrap()]));
    if let Ok(dir) = std::env::var("ORDO_BEFORE_AFTER_PAGES") {
        let html = Path::new(&dir).join(format!("{name}.html"));
        ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", html.to_str().unwrap()]));
    }
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// The same core decides in the server and in the replay: every start agrees exactly.
fn every_start_agrees(r: &Value) {
    for f in r["fidelity"].as_array().unwrap() {
        assert_eq!(f["exact_starts"], f["jobs"], "{f}");
    }
}

/// A month on two nodes of 8 GPUs through the server: `before_days` of generated work at
/// `before_rate` jobs a day under fifo, then from day 14 a fortnight at `after_rate` under sjf;
/// run times by `secs`, GPUs from `sizes`, seeded by `seed`. Returns the database.
fn month(
    tag: &str,
    seed: u64,
    (before_days, before_rate): (i64, f64),
    after_rate: f64,
    sizes: &[u32],
    secs: &dyn Fn(&mut fastrand::Rng) -> i64,
) -> PathBuf {
    let dir = tempdir(tag);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut jobs = generated(&mut rng, 0, before_days, before_rate, sizes, secs);
    jobs.extend(generated(&mut rng, 14 * 86_400, 14, after_rate, sizes, secs));
    history(&dir, (2, 8), &jobs, 14 * 86_400, "sjf")
}

/// Two fortnights on two nodes of 8 GPUs at the same load, run times from 10 minutes to 12
/// hours: fifo, then sjf. The last day before the change is quiet (no submissions), so the
/// queue has drained by then. Shortest-first cuts waits on both fortnights' jobs, by far more
/// than the intervals over days, and the page says the order helped.
#[test]
fn a_generated_month_where_the_order_helped() {
    let secs = |r: &mut fastrand::Rng| (600.0 * (72.0f64).powf(r.f64())) as i64;
    let db = month("month-helped", 11, (13, 30.0), 30.0, &[1, 1, 2, 4, 8], &secs);
    let r = page(&db, "helped");
    assert_eq!(r["bootstrap"]["unit"], "days");
    assert_eq!(r["verdict"], "order_helped", "{}", r["headline"]);
    let w = &r["effects"][0];
    assert!(w["order"]["high"].as_f64().unwrap() < 0.0, "{w}");
    assert_eq!(
        (r["periods"][0]["waiting_at_end"].as_u64(), r["periods"][0]["running_at_end"].as_u64()),
        (Some(0), Some(0))
    );
    // The same core decides in the server and in the replay: every start agrees.
    every_start_agrees(&r);
}

/// Two fortnights of jobs of nearly equal length (100-140 minutes): fifo at a heavy load, then
/// sjf at half of it. Waits fall, but shortest-first has little to reorder: the page must not
/// credit the change of order.
#[test]
fn a_generated_month_where_the_load_made_the_difference() {
    let secs = |r: &mut fastrand::Rng| 6000 + r.i64(0..2400);
    let db = month("month-load", 5, (14, 50.0), 25.0, &[2, 4], &secs);
    let r = page(&db, "load");
    assert_eq!(r["bootstrap"]["unit"], "days");
    let w = &r["effects"][0];
    assert!(w["observed"]["high"].as_f64().unwrap() < 0.0, "waits fell: {w}");
    assert_ne!(r["verdict"], "order_helped", "{}", r["headline"]);
    assert!(!r["headline"].as_str().unwrap().contains("helped"), "{}", r["headline"]);
    every_start_agrees(&r);
}

/// The same as `a_generated_month_where_the_order_helped` at a heavier load and with no quiet day
/// before the change: dozens of jobs still wait at the change. The replays carry them over it as
/// the server did, so the replay under the policies as they changed still starts every job when
/// it really started.
#[test]
fn jobs_waiting_at_the_change_are_carried_over_it_as_the_server_did() {
    let secs = |r: &mut fastrand::Rng| (600.0 * (72.0f64).powf(r.f64())) as i64;
    let db = month("month-backlog", 11, (14, 40.0), 40.0, &[1, 1, 2, 4, 8], &secs);
    let r = page(&db, "backlog");
    assert_eq!(r["carried"], true);
    assert!(r["periods"][0]["waiting_at_end"].as_u64().unwrap() > 10, "{}", r["periods"][0]);
    every_start_agrees(&r);
    assert!(close(&r["effects"][0]["replay_gap"], 0.0), "{}", r["effects"][0]);
    assert!(r["notes"][0].as_str().unwrap().contains("carry them over the change as the server did"), "{}", r["notes"]);
}

/// The page of a generated month in a real headless Chromium: it renders (a screenshot, kept in
/// target/ for a look), its five sections and its chart with the legend of the three bars, and
/// the numbers Chromium shows are the JSON's.
#[test]
fn the_page_renders_in_headless_chromium() {
    let chromium = Path::new("/usr/bin/chromium");
    if !chromium.is_file() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI must have Chromium (.ci/run installs it)");
        eprintln!("skipped: /usr/bin/chromium not found (apt-get install chromium)");
        return;
    }
    let secs = |r: &mut fastrand::Rng| 6000 + r.i64(0..2400);
    let db = month("chromium", 5, (14, 50.0), 25.0, &[2, 4], &secs);
    let r = page(&db, "chromium");
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    let html = target.join("before-after.html");
    ok(&ordo(&["before-after", "--trace", db.to_str().unwrap(), "--out", html.to_str().unwrap()]));
    let url = format!("file://{}", html.canonicalize().unwrap().display());
    let chrome = |extra: &[&str]| {
        let out = std::process::Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium runs");
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let shot = target.join("before-after.png");
    let _ = std::fs::remove_file(&shot);
    chrome(&[&format!("--screenshot={}", shot.display()), "--window-size=1400,2400"]);
    let png = std::fs::metadata(&shot).expect("Chromium wrote the screenshot").len();
    assert!(png > 50_000, "screenshot only {png} bytes");
    let dom = String::from_utf8(chrome(&["--dump-dom"]).stdout).unwrap();
    assert_eq!(dom.matches("<section").count(), 5, "sections");
    assert_eq!(dom.matches("<svg").count(), 1, "one chart");
    for name in ["as it ran", "replayed under fifo", "replayed under sjf"] {
        assert!(dom.contains(&format!("<span class=\"name\">{name}</span>")), "legend names `{name}`");
    }
    assert!(dom.contains(r["headline"].as_str().unwrap().split(" ->").next().unwrap()), "the headline");
    // Every keyed number Chromium shows is the JSON's value at its path.
    let mut checked = 0;
    for cell in dom.split("data-key=\"").skip(1) {
        let key = &cell[..cell.find('"').unwrap()];
        let rest = &cell[cell.find("data-value=\"").unwrap() + 12..];
        let shown: f64 = rest[..rest.find('"').unwrap()].parse().unwrap();
        let mut v = &r;
        for part in key.split('.') {
            v = match part.parse::<usize>() {
                Ok(i) => &v[i],
                Err(_) => &v[part],
            };
        }
        let want = v.as_f64().unwrap_or_else(|| panic!("{key}: {v}"));
        assert!((want - shown).abs() <= 1e-9 * want.abs().max(1.0), "{key}: page {shown}, JSON {want}");
        checked += 1;
    }
    assert!(checked > 60, "only {checked} keyed numbers");
}

/// A Slurm history (a raw `sacct --parsable2` file, in dates) and `ordo slurm drive`'s audit log,
/// whose `policy` record is the change: Slurm's own order (fifo, named with --before-policy)
/// until 10:01:00, then drive's sjf. One node of 4 GPUs, whole-node jobs, worked out by hand:
/// before, X (10 s) at 0 s, P (40 s) at 1 s, Q (5 s) at 2 s ran 0-10, 10-50, 50-55 (waits 0, 9,
/// 48); after, the same three from 60 s ran in sjf order: X 60-70, Q 70-75, P 75-115 (waits 0,
/// 8, 14). Each period under the other's policy waits as the other did: the order's part is
/// 22/3 - 19 s on both, the workload's 0.
#[test]
fn a_slurm_history_split_at_drives_change_of_policy() {
    let dir = tempdir("sacct");
    let sacct = dir.join("sacct.txt");
    let row = |id: u32, user: &str, submit: &str, start: &str, end: &str, run: u32| {
        format!(
            "{id}|{user}|ml|gpu|2024-03-01T{submit}|2024-03-01T{start}|2024-03-01T{end}|00:00:{run:02}|00:00:{:02}|cpu=4,gres/gpu=4,node=1|cpu=4,gres/gpu=4|COMPLETED|1\n",
            run + 1
        )
    };
    let mut text = String::from(
        "JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority\n",
    );
    for r in [
        row(1, "ann", "10:00:00", "10:00:00", "10:00:10", 10),
        row(2, "ann", "10:00:01", "10:00:10", "10:00:50", 40),
        row(3, "bob", "10:00:02", "10:00:50", "10:00:55", 5),
        row(4, "ann", "10:01:00", "10:01:00", "10:01:10", 10),
        row(5, "ann", "10:01:01", "10:01:15", "10:01:55", 40),
        row(6, "bob", "10:01:02", "10:01:10", "10:01:15", 5),
    ] {
        text.push_str(&r);
    }
    std::fs::write(&sacct, text).unwrap();
    let log = dir.join("audit.jsonl");
    std::fs::write(
        &log,
        "{\"time\":\"2024-03-01T10:01:00Z\",\"unix_time\":1709287260,\"action\":\"policy\",\"job\":0,\"old_priority\":0,\"new_priority\":null,\"position\":null,\"reason\":\"short jobs first (ticket 4711)\",\"policy\":\"sjf\",\"actor\":\"carol\"}\n",
    )
    .unwrap();
    let out = dir.join("page.json");
    let args = [
        "before-after",
        "--trace",
        sacct.to_str().unwrap(),
        "--format",
        "sacct",
        "--cluster",
        "1x4",
        "--audit-log",
        log.to_str().unwrap(),
        "--before-policy",
        "fifo",
        "--out",
        out.to_str().unwrap(),
    ];
    ok(&ordo(&args));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((r["change"]["actor"].as_str(), r["change"]["to"].as_str()), (Some("carol"), Some("sjf")));
    assert!(r["change"]["at"].as_str().unwrap().starts_with("2024-03-01 10:01:00"), "{}", r["change"]);
    assert_eq!((r["periods"][0]["policy"].as_str(), r["periods"][1]["policy"].as_str()), (Some("fifo"), Some("sjf")));
    let w = &r["effects"][0];
    assert!(close(&w["before"], 19.0) && close(&w["after"], 22.0 / 3.0), "{w}");
    for k in ["order_on_before", "order_on_after", "order", "observed"] {
        assert!(close(&w[k]["value"], 22.0 / 3.0 - 19.0), "{k}: {w}");
    }
    assert!(close(&w["workload"]["value"], 0.0) && close(&w["replay_gap"], 0.0), "{w}");
    for f in r["fidelity"].as_array().unwrap() {
        assert_eq!(f["exact_starts"].as_u64(), Some(3), "{f}");
    }
    // Without dates the log cannot be placed: said, not guessed.
    let generic = dir.join("t.csv");
    ok(&ordo(&[
        "slurm",
        "import",
        "--sacct-file",
        sacct.to_str().unwrap(),
        "--cluster",
        "1x4",
        "--out",
        generic.to_str().unwrap(),
    ]));
    let r = ordo(&[
        "before-after",
        "--trace",
        generic.to_str().unwrap(),
        "--audit-log",
        log.to_str().unwrap(),
        "--before-policy",
        "fifo",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("--audit-log: this history's times are not dates"));
}
