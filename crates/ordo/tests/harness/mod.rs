//! What the server tests share: real `ordo server` and `ordo agent` processes on loopback, tokens,
//! the CLI with JSON output, raw HTTP for what the CLI would never send.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ORDO: &str = env!("CARGO_BIN_EXE_ordo");

/// A child process killed (SIGKILL) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-server-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

pub fn ordo(args: &[&str]) -> std::process::Output {
    Command::new(ORDO).args(args).output().expect("run ordo")
}

pub fn token(db: &Path, user: &str, flag: Option<&str>) -> String {
    let mut a = vec!["admin", "token", "create", user, "--db", db.to_str().expect("utf-8 path")];
    a.extend(flag);
    let out = ordo(&a);
    assert!(out.status.success(), "token create: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

/// Starts a server; returns it and its URL.
pub fn server(dir: &Path, listen: &str, policy: &str) -> (Proc, String) {
    server_with(dir, listen, policy, &[])
}

/// Starts a server with extra flags; returns it and its URL.
pub fn server_with(dir: &Path, listen: &str, policy: &str, extra: &[&str]) -> (Proc, String) {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).expect("log");
    let mut c = Command::new(ORDO);
    c.args(["server", "--db"])
        .arg(dir.join("ordo.db"))
        .args(["--listen", listen, "--policy", policy, "--heartbeat", "100ms", "--node-timeout", "1500ms"])
        .args(extra)
        .stderr(log);
    listening(c)
}

/// Spawns a command that runs `ordo server` (its standard output piped here), reads the line
/// the server prints once it listens, and returns the process and the server's URL.
pub fn listening(mut c: Command) -> (Proc, String) {
    let mut c = c.stdout(Stdio::piped()).spawn().expect("start server");
    let mut line = String::new();
    BufReader::new(c.stdout.take().expect("stdout")).read_line(&mut line).expect("server prints its address");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in `{line}`"))
        .to_string();
    (Proc(c), url)
}

pub fn agent(dir: &Path, url: &str, name: &str, gpus: u32) -> Proc {
    agent_with(dir, url, name, gpus, &[])
}

/// This process's user name (`id -un`).
pub fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().expect("id -un");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

/// Writes `text` to a file only its owner may read (as token files must be).
pub fn secret_file(path: &Path, text: &str) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).expect("file");
    f.write_all(text.as_bytes()).expect("write");
    path.to_path_buf()
}

/// Starts an agent for node `name` with its own agent token (in a file, as an agent takes it),
/// running jobs as this test's own Unix account.
pub fn agent_with(dir: &Path, url: &str, name: &str, gpus: u32, extra: &[&str]) -> Proc {
    let tok = token(&dir.join("ordo.db"), name, Some("--agent"));
    let tok_file = secret_file(&dir.join(format!("token-{name}")), &tok);
    let log = std::fs::File::create(dir.join(format!("agent-{name}.log"))).expect("log");
    let c = Command::new(ORDO)
        .args(["agent", "--server", url, "--name", name, "--gpus", &gpus.to_string(), "--grace", "500ms"])
        .arg("--token-file")
        .arg(&tok_file)
        .args(["--run-as", &whoami()])
        .arg("--work-dir")
        .arg(dir.join(format!("work-{name}")))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start agent");
    Proc(c)
}

pub fn cli_json(url: &str, tok: &str, args: &[&str]) -> Value {
    // Connection flags go before a `--` (after it everything is the job's command).
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut a: Vec<&str> = args[..at].to_vec();
    a.extend(["--server", url, "--token", tok, "--json"]);
    a.extend(&args[at..]);
    let out = ordo(&a);
    assert!(out.status.success(), "ordo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn tokens(dir: &Path) -> (String, String) {
    let db = dir.join("ordo.db");
    (token(&db, "admin", Some("--admin")), token(&db, "alice", None))
}

pub fn raw_http(url: &str, req: &str) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

pub fn fails_with(url: &str, tok: &str, args: &[&str], status: &str) {
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut a: Vec<&str> = args[..at].to_vec();
    a.extend(["--server", url, "--token", tok]);
    a.extend(&args[at..]);
    let out = ordo(&a);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(status), "ordo {args:?}: expected {status}, got: {err}");
}

pub fn job_state(url: &str, tok: &str, id: u64) -> Value {
    cli_json(url, tok, &["explain", &id.to_string()])
}

/// One API request with a JSON body (or none) and a bearer token; returns the status and the
/// JSON answer (`Value::Null` when the body is not JSON).
pub fn api(url: &str, tok: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let (st, text) = raw_http(
        url,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let json = text.split("\r\n\r\n").nth(1).and_then(|b| serde_json::from_str(b).ok()).unwrap_or(Value::Null);
    (st, json)
}

/// Waits until job `id` has ended; returns its record.
pub fn wait_ended(url: &str, tok: &str, id: u64, limit: Duration) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("job {id} to end"), limit, || {
        last = job_state(url, tok, id);
        ["completed", "failed", "cancelled", "timeout"].contains(&last["state"].as_str().unwrap_or(""))
    });
    last
}

/// Whether this test runs under CI (where what a test needs must be there).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Skips (returns false after saying why) when `ok` is false, except under CI, where it fails.
pub fn needs(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(!under_ci(), "{what}; CI must provide it (see .ci/run)");
        let _ = writeln!(std::io::stderr(), "skipped: {what}");
    }
    ok
}
