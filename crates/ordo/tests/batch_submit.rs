//! `ordo batch submit|status|fetch|cancel` as real processes against the provider emulators,
//! killed with SIGKILL at every step (the emulator holds the answer of the call being made, so
//! the call has taken effect and ordo never hears of it) and at arbitrary moments: no batch is
//! ever created twice, and every request ends with exactly one answer in the merged output.

use ordo_batch::testserver::{ServerConfig, Step, TestServer};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "sk-emulated-7c21";

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-batch-submit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// 40 chat requests for two clients; ids valid for both providers.
fn write_requests(dir: &Path) -> PathBuf {
    let lines: Vec<String> = (0..40)
        .map(|i| {
            let client = ["acme", "globex"][i % 2];
            serde_json::json!({"custom_id": format!("{client}-{i}"), "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini", "max_tokens": 30, "metadata": {"client": client},
                         "messages": [{"role": "system", "content": "You summarise sales reports."},
                                      {"role": "user", "content": format!("Week {i}: revenue {} EUR", 1000 + i * 37)}]}})
            .to_string()
        })
        .collect();
    let f = dir.join("requests.jsonl");
    std::fs::write(&f, lines.join("\n") + "\n").expect("write requests");
    std::fs::write(
        dir.join("limits.toml"),
        "[default]\nrequests_per_minute = 100\ntokens_per_minute = 100000\n[batch]\nmax_requests_per_file = 10\n",
    )
    .expect("limits");
    std::fs::write(dir.join("key"), format!("{KEY}\n")).expect("key");
    f
}

struct Flow {
    dir: PathBuf,
    file: PathBuf,
    state: PathBuf,
    provider: &'static str,
    url: String,
}

impl Flow {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ordo"));
        c.current_dir(&self.dir)
            .arg("batch")
            .args(args)
            .arg("--state")
            .arg(&self.state)
            .arg("--api-key-file")
            .arg(self.dir.join("key"));
        c.env_remove("ORDO_API_KEY").env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
        c
    }

    fn submit(&self, extra: &[&str]) -> Command {
        let mut c = self.cmd(&["submit"]);
        c.arg(&self.file).args(["--provider", self.provider, "--endpoint", &self.url]);
        c.arg("--limits").arg(self.dir.join("limits.toml")).args(extra);
        c
    }

    fn fetch(&self) -> Command {
        let mut c = self.cmd(&["fetch", "--wait", "--poll", "0.05s"]);
        c.arg("--out").arg(self.dir.join("results.jsonl"));
        c
    }
}

fn run(mut c: Command) -> Output {
    let out = c.output().expect("run ordo");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains(KEY), "the key is never printed: {text}");
    out
}

fn ok(c: Command) -> String {
    let out = run(c);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.code().is_some_and(|c| c <= 1), "ordo failed: {text}");
    text
}

/// Start `c`, let it make the `nth` call of `step` (which takes effect at the emulator), and
/// kill it with SIGKILL before the answer arrives.
fn kill_at(server: &TestServer, step: Step, nth: u64, mut c: Command) {
    server.hold(step, nth);
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn ordo");
    let held = server.wait_held(Duration::from_secs(30));
    child.kill().expect("SIGKILL");
    let out = child.wait_with_output().expect("wait");
    server.release();
    assert!(held, "ordo never made call {nth} of {step:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The batches at the emulator are exactly the parts in the state file: none created twice.
fn one_batch_per_part(server: &TestServer, state: &Path) {
    if !state.exists() {
        assert!(server.batches().is_empty(), "batches created without a state file");
        return;
    }
    let st: Value = serde_json::from_slice(&std::fs::read(state).expect("state")).expect("state json");
    let mine: Vec<String> = st["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .filter_map(|p| p["batch_id"].as_str().map(str::to_string))
        .collect();
    let emu: Vec<String> = server.batches().into_iter().map(|b| b.id).collect();
    assert_eq!(emu.len(), mine.len(), "batches at the provider {emu:?}; in the state {mine:?}");
    assert_eq!(emu.iter().collect::<HashSet<_>>(), mine.iter().collect::<HashSet<_>>());
    // No two batches of the same attempt hold the same request.
    let mut seen: HashMap<(String, u64), usize> = HashMap::new();
    for p in st["parts"].as_array().expect("parts") {
        for r in p["rows"].as_array().expect("rows") {
            *seen.entry((r.to_string(), p["attempt"].as_u64().unwrap_or(0))).or_default() += 1;
        }
    }
    assert!(seen.values().all(|&k| k == 1));
}

/// Between a kill and the next run: every recorded batch exists at the provider, and the
/// provider holds at most one more batch per part whose creation started without its id
/// being recorded (the next run finds and adopts it).
fn nothing_twice_so_far(server: &TestServer, state: &Path) {
    if !state.exists() {
        assert!(server.batches().is_empty(), "batches created without a state file");
        return;
    }
    let st: Value = serde_json::from_slice(&std::fs::read(state).expect("state")).expect("state json");
    let parts = st["parts"].as_array().expect("parts");
    let recorded: HashSet<&str> = parts.iter().filter_map(|p| p["batch_id"].as_str()).collect();
    let open = parts.iter().filter(|p| p["batch_id"].is_null() && !p["create_started"].is_null()).count();
    let emu: HashSet<String> = server.batches().into_iter().map(|b| b.id).collect();
    assert!(recorded.iter().all(|id| emu.contains(*id)), "a recorded batch is missing");
    assert!(
        emu.len() <= recorded.len() + open,
        "batches at the provider {emu:?}; recorded {recorded:?}, {open} creations open"
    );
}

/// Every request exactly once in the output, in input order; returns how many succeeded.
fn check_output(flow: &Flow) -> usize {
    let want: Vec<String> = (0..40).map(|i| format!("{}-{i}", ["acme", "globex"][i % 2])).collect();
    let text = std::fs::read_to_string(flow.dir.join("results.jsonl")).expect("results");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("complete JSON line")).collect();
    let ids: Vec<&str> = lines.iter().map(|v| v["custom_id"].as_str().expect("custom_id")).collect();
    assert_eq!(ids, want.iter().map(String::as_str).collect::<Vec<_>>(), "every request once, in input order");
    lines.iter().filter(|v| v["error"].is_null() && v["response"]["status_code"] == 200).count()
}

fn killed_at_every_step(provider: &'static str) {
    let dir = tmpdir(provider);
    let file = write_requests(&dir);
    let server = TestServer::start(ServerConfig {
        api_key: Some(KEY.into()),
        batch_fail_every: Some(9),
        batch_expire_first: 1,
        ..ServerConfig::default()
    })
    .expect("emulator");
    let flow = Flow { state: dir.join("requests.jsonl.ordo-batch.json"), dir, file, provider, url: server.url.clone() };
    let openai = provider == "openai";

    // Submit: four batches of ten. Killed after the provider took an upload, a creation, a
    // lookup of an interrupted creation, the next upload and creation.
    if openai {
        kill_at(&server, Step::Upload, 1, flow.submit(&[]));
    }
    kill_at(&server, Step::Create, 1, flow.submit(&[]));
    kill_at(&server, Step::List, 1, flow.submit(&[]));
    if openai {
        kill_at(&server, Step::Upload, 1, flow.submit(&[]));
    }
    kill_at(&server, Step::Create, 2, flow.submit(&[]));
    let text = ok(flow.submit(&[]));
    assert!(text.contains("adopted"), "{text}");
    one_batch_per_part(&server, &flow.state);
    assert_eq!(server.batches().len(), 4);
    if openai {
        assert!(server.uploads() <= 6, "an upload whose answer was lost is found, not repeated: {}", server.uploads());
    }
    // Submitting again changes nothing.
    ok(flow.submit(&[]));
    assert_eq!(server.batches().len(), 4);

    // Status killed while the provider answers; then fetch, killed in mid-download.
    kill_at(&server, Step::Retrieve, 2, flow.cmd(&["status"]));
    kill_at(&server, Step::Download, 1, flow.fetch());
    kill_at(&server, Step::Download, 2, flow.fetch());
    let text = ok(flow.fetch());
    assert!(text.contains("batch_expired") && text.contains("--retry-failed"), "{text}");
    let first = check_output(&flow);
    assert!(first < 40, "the expired batch and injected failures leave some without an answer");

    // Retry, killed while creating; rerunning the same command resumes it.
    for round in 0..4 {
        kill_at(&server, Step::Create, 1, flow.submit(&["--retry-failed"]));
        ok(flow.submit(&["--retry-failed"]));
        one_batch_per_part(&server, &flow.state);
        ok(flow.fetch());
        if check_output(&flow) == 40 {
            break;
        }
        assert!(round < 3, "retries do not converge");
    }
    assert_eq!(check_output(&flow), 40);
    let text = ok(flow.submit(&["--retry-failed"]));
    assert!(text.contains("nothing to retry"), "{text}");
    one_batch_per_part(&server, &flow.state);
    // Each request processed once, twice only after a failure.
    assert!(server.processed_in_batches().values().all(|&k| k <= 2));
    assert_eq!(server.counts().unauthorized, 0);
    let _ = std::fs::remove_dir_all(&flow.dir);
}

#[test]
fn openai_submit_status_fetch_retry_survive_kill_9_at_every_step() {
    killed_at_every_step("openai");
}

#[test]
fn anthropic_submit_status_fetch_retry_survive_kill_9_at_every_step() {
    killed_at_every_step("anthropic");
}

#[test]
fn cancel_survives_kill_9_and_killed_at_random_moments_nothing_is_created_twice() {
    for provider in ["openai", "anthropic"] {
        let dir = tmpdir(&format!("cancel-{provider}"));
        let file = write_requests(&dir);
        // (Batches move on only when polled: nothing polls them before the cancellation.)
        let server =
            TestServer::start(ServerConfig { api_key: Some(KEY.into()), ..ServerConfig::default() }).expect("emulator");
        let flow = Flow { state: dir.join("s.json"), dir, file, provider, url: server.url.clone() };
        // Submit, killed at moments 10 ms apart, counted from its first call to the provider,
        // until one run completes.
        let mut delay = 0;
        loop {
            let calls = server.calls();
            let mut child = flow.submit(&[]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
            let t0 = Instant::now();
            while server.calls() == calls && t0.elapsed() < Duration::from_secs(20) {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(delay));
            let done = matches!(child.try_wait(), Ok(Some(_)));
            let _ = child.kill();
            let _ = child.wait();
            nothing_twice_so_far(&server, &flow.state);
            if done {
                break;
            }
            delay += 10;
            assert!(delay < 5000, "submit never finished");
        }
        ok(flow.submit(&[]));
        one_batch_per_part(&server, &flow.state);
        assert_eq!(server.batches().len(), 4, "{provider}");
        // Cancel, killed after the provider took the first cancellation; run again.
        kill_at(&server, Step::Cancel, 1, flow.cmd(&["cancel"]));
        let text = ok(flow.cmd(&["cancel", "--wait", "--poll", "0.01s"]));
        let done = if provider == "openai" { " cancelled " } else { " ended " };
        assert_eq!(text.lines().filter(|l| l.starts_with("part-") && l.contains(done)).count(), 4, "{text}");
        let text = ok(flow.fetch());
        assert!(text.contains("40 requests: 0 succeeded, 40 failed (40 batch_cancelled)"), "{text}");
        assert_eq!(check_output(&flow), 0);
        one_batch_per_part(&server, &flow.state);
        let _ = std::fs::remove_dir_all(&flow.dir);
    }
}

#[test]
fn submit_refuses_bad_input_and_unconvertible_requests_naming_the_line() {
    let dir = tmpdir("refuse");
    let file = write_requests(&dir);
    let mut text = std::fs::read_to_string(&file).expect("read");
    text.push_str(r#"{"custom_id":"x-1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":5,"tools":[],"messages":[{"role":"user","content":"hi"}]}}"#);
    text.push('\n');
    std::fs::write(&file, text).expect("write");
    let server =
        TestServer::start(ServerConfig { api_key: Some(KEY.into()), ..ServerConfig::default() }).expect("emulator");
    let flow = Flow { state: dir.join("s.json"), dir, file, provider: "anthropic", url: server.url.clone() };
    let out = run(flow.submit(&[]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("requests.jsonl:41: field `body.tools`: no Anthropic equivalent"), "{err}");
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(server.batches().is_empty() && !flow.state.exists());
    // OpenAI takes the same file as it is.
    let flow = Flow { provider: "openai", ..flow };
    ok(flow.submit(&[]));
    assert_eq!(server.batches().len(), 5);
    let _ = std::fs::remove_dir_all(&flow.dir);
}
