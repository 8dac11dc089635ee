//! Submitting to the providers' batch APIs against the emulators (real HTTP on 127.0.0.1):
//! the whole flow for OpenAI and Anthropic with failures, expiry, 429s, cancellation, lost
//! answers and retries; every request answered once in the merged output, no batch twice.

mod common;

use ordo_batch::config::BatchLimits;
use ordo_batch::http::{Api, ApiKey, HttpOptions};
use ordo_batch::provider::Provider;
use ordo_batch::results::merge;
use ordo_batch::source::Source;
use ordo_batch::state::State;
use ordo_batch::submit::{prepare, Session};
use ordo_batch::testserver::{ServerConfig, Step, TestServer};
use ordo_batch::LoadOptions;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "sk-emulator-1";

fn api(p: Provider, url: &str) -> Api {
    let opts = HttpOptions {
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
        timeout: Duration::from_secs(20),
        ..HttpOptions::default()
    };
    Api::new(p, url, Some(ApiKey::new(KEY)), opts)
}

fn requests(dir: &Path, n: usize) -> std::path::PathBuf {
    let lines: Vec<String> = (0..n).map(|i| common::chat(["acme", "globex"][i % 2], i, 12, 40)).collect();
    common::write(dir, "r.jsonl", &lines)
}

fn server(cfg: ServerConfig) -> TestServer {
    TestServer::start(ServerConfig { api_key: Some(KEY.into()), ..cfg }).expect("server")
}

/// Poll until every part has ended, then download; returns the session's state.
fn until_fetched(s: &mut Session) {
    for _ in 0..50 {
        s.refresh(&mut |_| {}).expect("refresh");
        if s.all_finished() {
            break;
        }
    }
    assert!(s.all_finished(), "batches did not end: {:?}", s.state.parts.iter().map(|p| &p.status).collect::<Vec<_>>());
    s.download(&mut |_| {}).expect("download");
}

fn output_ids(p: &Path) -> Vec<(String, bool)> {
    std::fs::read_to_string(p)
        .expect("output")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            (v["custom_id"].as_str().expect("id").to_string(), v["error"].is_null())
        })
        .collect()
}

/// The batches the emulator holds are exactly the state's parts: none created twice.
fn one_batch_per_part(server: &TestServer, state: &State) {
    let emu: Vec<String> = server.batches().into_iter().map(|b| b.id).collect();
    let mine: Vec<String> = state.parts.iter().filter_map(|p| p.batch_id.clone()).collect();
    assert_eq!(emu.len(), mine.len(), "batches at the provider {emu:?}, in the state {mine:?}");
    assert_eq!(emu.iter().collect::<HashSet<_>>(), mine.iter().collect::<HashSet<_>>());
}

fn flow(provider: Provider) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = requests(dir.path(), 60);
    let srv = server(ServerConfig {
        polls_per_step: 2,
        batch_fail_every: Some(7),
        batch_expire_first: 1,
        force_429_every: Some(5),
        retry_after: Duration::from_millis(10),
        ..ServerConfig::default()
    });
    let source = Source::load(&file, &LoadOptions::default()).expect("load");
    // Three parts: 25 + 25 + 10 requests.
    let limits = BatchLimits { max_requests_per_file: 25, ..BatchLimits::default() };
    let state_path = dir.path().join("r.jsonl.ordo-batch.json");
    let state = prepare(provider, &srv.url, &source, &limits).expect("prepare");
    assert_eq!(state.parts.iter().map(|p| p.rows.len()).collect::<Vec<_>>(), vec![25, 25, 10]);
    state.save(&state_path).expect("save");
    let api = api(provider, &srv.url);
    let mut s = Session { api: &api, state, path: &state_path, source: &source };
    s.submit(&mut |_| {}).expect("submit");
    one_batch_per_part(&srv, &s.state);
    // Submitting again creates nothing.
    s.submit(&mut |_| {}).expect("submit again");
    one_batch_per_part(&srv, &s.state);
    until_fetched(&mut s);
    let out = dir.path().join("results.jsonl");
    let m = merge(&s.state, &state_path, &source, Some(&out)).expect("merge");
    // The first batch expired half-way (12 or 13 of 25 expired), and every 7th request failed once.
    assert_eq!(m.succeeded + m.failed.len(), 60);
    assert!(m.failed.iter().any(|f| f.code == "batch_expired"), "{:?}", m.failed);
    assert!(m.failed.len() > 12, "{}", m.failed.len());
    let ids = output_ids(&out);
    let want: Vec<String> = (0..60).map(|i| format!("{}-{i}", ["acme", "globex"][i % 2])).collect();
    assert_eq!(ids.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want, "input order, each once");
    // Retry what failed until everything has an answer: requests that expired are processed
    // for the first time in the retry, and every 7th such fails once more.
    let mut retried = m.failed.len();
    let mut rounds = 0;
    loop {
        let n = s.add_retry(&limits).expect("retry");
        assert_eq!(n, retried);
        if n == 0 {
            break;
        }
        rounds += 1;
        assert!(rounds <= 3, "retries do not converge");
        s.submit(&mut |_| {}).expect("submit retry");
        until_fetched(&mut s);
        let m = merge(&s.state, &state_path, &source, Some(&out)).expect("merge");
        assert_eq!(m.succeeded + m.failed.len(), 60);
        retried = m.failed.len();
    }
    let m = merge(&s.state, &state_path, &source, Some(&out)).expect("merge");
    assert_eq!((m.succeeded, m.failed.len(), m.pending.len()), (60, 0, 0), "{:?}", m.failed);
    let ids = output_ids(&out);
    assert!(ids.iter().all(|x| x.1));
    assert_eq!(ids.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), want);
    one_batch_per_part(&srv, &s.state);
    // Each request was processed once, and a second time only where it had failed and was
    // part of a retry.
    let retried: HashSet<String> =
        s.state.parts.iter().filter(|p| p.attempt > 0).flat_map(|p| p.rows.iter().map(|&r| want[r].clone())).collect();
    for (id, k) in srv.processed_in_batches() {
        assert!(k == 1 || (k == 2 && retried.contains(&id)), "{id} processed {k} times");
    }
    assert!(srv.counts().forced_429 > 0, "the 429s were injected and retried");
    assert_eq!(srv.counts().unauthorized, 0);
    // The state file on disk is the session's.
    let on_disk = State::load(&state_path).expect("load state");
    assert_eq!(on_disk.parts.len(), s.state.parts.len());
}

#[test]
fn openai_flow_with_failures_expiry_429s_and_retry() {
    flow(Provider::OpenAi);
}

#[test]
fn anthropic_flow_with_failures_expiry_429s_and_retry() {
    flow(Provider::Anthropic);
}

#[test]
fn a_lost_create_answer_is_found_not_repeated() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = requests(dir.path(), 8);
        let srv = server(ServerConfig::default());
        let source = Source::load(&file, &LoadOptions::default()).expect("load");
        let state_path = dir.path().join("state.json");
        let state = prepare(provider, &srv.url, &source, &BatchLimits::default()).expect("prepare");
        // The create call takes effect but its answer never comes in time: a timeout.
        srv.hold(Step::Create, 1);
        let opts = HttpOptions {
            timeout: Duration::from_millis(700),
            backoff_base: Duration::from_millis(5),
            ..HttpOptions::default()
        };
        let api = Api::new(provider, &srv.url, Some(ApiKey::new(KEY)), opts);
        let mut s = Session { api: &api, state, path: &state_path, source: &source };
        let mut notes = Vec::new();
        let t = std::thread::scope(|sc| {
            let h = sc.spawn(|| {
                assert!(srv.wait_held(Duration::from_secs(10)));
                std::thread::sleep(Duration::from_millis(1500));
                srv.release();
            });
            let r = s.submit(&mut |n| notes.push(n.to_string()));
            let _ = h.join();
            r
        });
        t.expect("submit");
        assert!(notes.iter().any(|n| n.contains("outcome unknown")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("adopted")), "{notes:?}");
        assert_eq!(srv.batches().len(), 1, "{provider:?}: created once");
        one_batch_per_part(&srv, &s.state);
    }
}

#[test]
fn cancel_stops_batches_and_lists_what_was_not_done() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = requests(dir.path(), 30);
        let srv = server(ServerConfig { polls_per_step: 3, ..ServerConfig::default() });
        let source = Source::load(&file, &LoadOptions::default()).expect("load");
        let limits = BatchLimits { max_requests_per_file: 20, ..BatchLimits::default() };
        let state_path = dir.path().join("state.json");
        let mut state = prepare(provider, &srv.url, &source, &limits).expect("prepare");
        state.parts.truncate(2);
        let api = api(provider, &srv.url);
        let mut s = Session { api: &api, state, path: &state_path, source: &source };
        // Create only the first part, then cancel: the first is cancelled at the provider, the
        // second is closed without being created.
        let second = s.state.parts.pop().expect("two parts");
        s.submit(&mut |_| {}).expect("submit");
        s.state.parts.push(second);
        s.cancel(&mut |_| {}).expect("cancel");
        assert!(s.state.parts[1].cancelled_before_create);
        until_fetched(&mut s);
        let out = dir.path().join("out.jsonl");
        let m = merge(&s.state, &state_path, &source, Some(&out)).expect("merge");
        assert_eq!(m.succeeded, 0);
        assert_eq!(m.failed.len(), 30);
        assert!(m.failed.iter().all(|f| f.code == "batch_cancelled"), "{:?}", &m.failed[..3]);
        assert!(m.failed[20..].iter().all(|f| f.message.contains("its batch was cancelled")), "{:?}", &m.failed[20..]);
        assert_eq!(srv.batches().len(), 1);
        assert_eq!(srv.batches()[0].status, if provider == Provider::OpenAi { "cancelled" } else { "ended" });
    }
}

#[test]
fn anthropic_refuses_what_cannot_be_converted_before_sending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = vec![
        common::chat("acme", 1, 5, 10),
        r#"{"custom_id":"acme-2","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[]}}"#.to_string(),
        r#"{"custom_id":"acme:3","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}}"#.to_string(),
        r#"{"custom_id":"acme-4","method":"POST","url":"/v1/embeddings","body":{"model":"e","input":"hi"}}"#.to_string(),
    ];
    let file = common::write(dir.path(), "r.jsonl", &lines);
    let source = Source::load(&file, &LoadOptions::default()).expect("load");
    let e = prepare(Provider::Anthropic, "http://127.0.0.1:1", &source, &BatchLimits::default())
        .expect_err("refused")
        .to_string();
    assert!(e.contains("r.jsonl:2: field `body.tools`"), "{e}");
    assert!(e.contains("r.jsonl:3: field `custom_id`"), "{e}");
    assert!(e.contains("r.jsonl:4: field `url`"), "{e}");
    assert!(!e.contains(":1:"), "{e}");
}

#[test]
fn cancelling_a_batch_that_has_just_ended_is_not_an_error() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = requests(dir.path(), 4);
        let srv = server(ServerConfig::default());
        let source = Source::load(&file, &LoadOptions::default()).expect("load");
        let state = prepare(provider, &srv.url, &source, &BatchLimits::default()).expect("prepare");
        let state_path = dir.path().join("state.json");
        let api = api(provider, &srv.url);
        let mut s = Session { api: &api, state, path: &state_path, source: &source };
        s.submit(&mut |_| {}).expect("submit");
        // The batch ends at the provider while the state still says it is running.
        let id = s.state.parts[0].batch_id.clone().expect("created");
        for _ in 0..8 {
            ordo_batch::provider::retrieve(&api, &id).expect("poll");
        }
        assert!(!s.state.parts[0].ended);
        s.cancel(&mut |_| {}).expect("cancel after the end");
        assert!(s.state.parts[0].ended, "{provider:?}: it is recorded as ended");
        until_fetched(&mut s);
        let m = merge(&s.state, &state_path, &source, None).expect("merge");
        assert_eq!(m.succeeded, 4);
    }
}

#[test]
fn a_split_directory_is_submitted_file_by_file_in_manifest_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = requests(dir.path(), 25);
    let loaded = ordo_batch::load_path(&file, &LoadOptions::default()).expect("valid");
    let limits = BatchLimits { max_requests_per_file: 10, ..BatchLimits::default() };
    let out = dir.path().join("split");
    let sum = ordo_batch::split(&loaded, &limits, &out, false).expect("split");
    assert_eq!(sum.files.len(), 3);
    let srv = server(ServerConfig::default());
    let source = Source::load(&out, &LoadOptions::default()).expect("load dir");
    assert_eq!(source.len(), 25);
    // The directory's files are the parts, as written (even with larger per-file limits now).
    let state = prepare(Provider::OpenAi, &srv.url, &source, &BatchLimits::default()).expect("prepare");
    let names: Vec<&str> = state.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["batch-0001", "batch-0002", "batch-0003"]);
    let state_path = ordo_batch::state::default_state_path(&out);
    assert!(state_path.ends_with("split.ordo-batch.json"));
    let api = api(Provider::OpenAi, &srv.url);
    let mut s = Session { api: &api, state, path: &state_path, source: &source };
    s.submit(&mut |_| {}).expect("submit");
    until_fetched(&mut s);
    let res = dir.path().join("results.jsonl");
    let m = merge(&s.state, &state_path, &source, Some(&res)).expect("merge");
    assert_eq!((m.succeeded, m.written), (25, 25));
    // Input order is the files' order, then their lines.
    let want: Vec<String> = (0..source.len()).map(|r| source.request(r).custom_id.clone()).collect();
    assert_eq!(output_ids(&res).into_iter().map(|x| x.0).collect::<Vec<_>>(), want);
    // A file edited after submission is refused.
    std::fs::write(out.join("batch-0002.jsonl"), "").expect("truncate");
    let changed = Source::load(&out, &LoadOptions { skip_bad: true, ..LoadOptions::default() });
    match changed {
        Ok(c) => assert!(ordo_batch::submit::check_source(&s.state, &c).is_err()),
        Err(e) => assert!(e.to_string().contains("batch-0002"), "{e}"),
    }
}
