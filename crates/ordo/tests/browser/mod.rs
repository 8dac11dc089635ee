//! A real headless Chromium driven over the DevTools protocol (`--remote-debugging-pipe`: JSON
//! messages ending in NUL on file descriptors 3 and 4), for the tests that log in and click.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// One browser with one page.
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Value>,
    next: u64,
    session: String,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Browser {
    /// Starts Chromium with a page of `width` x `height` CSS pixels; `None` (after saying why)
    /// where Chromium is not installed, except under CI, where that fails.
    pub fn start(width: u32, height: u32, log: &Path) -> Option<Browser> {
        if !Path::new(CHROMIUM).is_file() {
            assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI must have Chromium (.ci/run installs it)");
            let _ = writeln!(std::io::stderr(), "skipped: {CHROMIUM} not found (apt-get install chromium)");
            return None;
        }
        let profile = std::env::temp_dir().join(format!("ordo-chromium-{}-{width}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        // The shell hands the pipes to Chromium as descriptors 3 (commands) and 4 (answers).
        let cmd = format!(
            "exec {CHROMIUM} --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
             --user-data-dir='{}' --window-size={width},{height} --remote-debugging-pipe about:blank \
             3<&0 4>&1 0</dev/null 1>&2",
            profile.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("browser log"))
            .spawn()
            .expect("start chromium");
        let to = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, from) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut b = Browser { child, to, from, next: 0, session: String::new(), profile };
        let target = b.send(None, "Target.createTarget", json!({"url": "about:blank"}));
        let id = target["targetId"].as_str().expect("target id").to_string();
        let s = b.send(None, "Target.attachToTarget", json!({"targetId": id, "flatten": true}));
        b.session = s["sessionId"].as_str().expect("session id").to_string();
        b.call("Page.enable", json!({}));
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        Some(b)
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("send to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == json!(id) => {
                    assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                    return v["result"].clone();
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method} within 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited during {method}"),
            }
        }
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.send(Some(&s), method, params)
    }

    /// Opens `url`.
    pub fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression in the page (promises awaited); an exception fails.
    pub fn eval(&mut self, js: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({"expression": js, "returnByValue": true, "awaitPromise": true}));
        assert!(r.get("exceptionDetails").is_none(), "`{js}` threw: {}", r["exceptionDetails"]);
        r["result"]["value"].clone()
    }

    /// Waits until `js` is true in the page.
    pub fn wait(&mut self, what: &str, js: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let r = self.call("Runtime.evaluate", json!({"expression": js, "returnByValue": true}));
            if r["result"]["value"] == json!(true) {
                return;
            }
            assert!(t0.elapsed() < limit, "timed out waiting for {what} (`{js}`)");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the whole page as laid out now.
    pub fn screenshot(&mut self) -> Vec<u8> {
        let r = self.call("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true}));
        base64(r["data"].as_str().expect("base64 PNG"))
    }
}

/// Decodes standard base64 (what DevTools sends).
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().fold(0u32, |acc, &c| acc << 6 | val(c)) << (6 * (4 - chunk.len()));
        let got = chunk.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + got]);
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(base64("aGVsbG8="), b"hello");
    assert_eq!(base64("aGk="), b"hi");
    assert_eq!(base64("YWJj"), b"abc");
}
