//! `batch run`: send requests live to an OpenAI-compatible endpoint, paced by token buckets,
//! retrying 429s and transient errors, writing responses and a durable progress file as they go.
//!
//! Durability and delivery: before a request is sent its `custom_id` is appended to the
//! progress file and fsynced; when its answer arrives the output line is appended and fsynced.
//! A resumed run skips every request with an output line, and by default also every request
//! recorded as sent without an output line (its outcome is unknown: it was in flight when the
//! previous run stopped): at-most-once. `resend_unknown` sends those again: at-least-once.

use crate::bucket::RateLimiter;
use crate::budget::{max_cost, Budget, Ledger, OverBudget};
use crate::clock::{Clock, SystemClock};
use crate::config::{Limits, Prices};
use crate::deadline::{due_times, earliest_deadline_first, late, predicted_sends, Deadline, Late};
use crate::error::BatchError;
use crate::input::Loaded;
use crate::plan::{order_requests, output_tokens, rate_tokens, Order};
use crate::window::Window;
use jiff::Timestamp;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::http::ApiKey;
use crate::http::{join_url, retry_after};

/// Options of a live run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Base URL of the OpenAI-compatible server, e.g. `https://api.openai.com` or
    /// `http://127.0.0.1:8000/v1` (a trailing `/v1` is not doubled).
    pub endpoint: String,
    /// Sent as `Authorization: Bearer ...` when present.
    pub api_key: Option<ApiKey>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Output JSONL (appended to when resuming).
    pub output: PathBuf,
    /// Progress file (appended to when resuming).
    pub progress: PathBuf,
    /// Send order.
    pub order: Order,
    /// Output tokens assumed when a request has no max_tokens.
    pub assumed_output_tokens: u64,
    /// Retries of a request after 5xx, 408 or a transport error (429s have their own budget).
    pub max_retries: u32,
    /// Retries of a request after 429.
    pub max_429_retries: u32,
    /// First backoff; doubles with each retry, with jitter in [50%, 100%].
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Also send requests whose outcome is unknown from an earlier, killed run.
    pub resend_unknown: bool,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// Timeout of one HTTP exchange.
    pub timeout: Duration,
    /// No progress bar.
    pub quiet: bool,
    /// Send only while this daily window is open.
    pub window: Option<Window>,
    /// Deadline of requests without their own `metadata.deadline`.
    pub default_deadline: Option<Deadline>,
    /// Per-client spending limits (needs prices for every model of a limited client).
    pub budget: Budget,
    /// The wall clock (windows, deadlines, `at` in the progress file).
    pub clock: Arc<dyn Clock>,
}

impl RunOptions {
    /// Defaults for a run to `endpoint` writing `output` (progress file beside it).
    pub fn new(endpoint: &str, output: &Path) -> Self {
        let mut progress = output.as_os_str().to_owned();
        progress.push(".progress");
        RunOptions {
            endpoint: endpoint.to_string(),
            api_key: None,
            concurrency: 16,
            output: output.to_path_buf(),
            progress: PathBuf::from(progress),
            order: Order::Fair,
            assumed_output_tokens: 256,
            max_retries: 6,
            max_429_retries: 30,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            resend_unknown: false,
            seed: 1,
            timeout: Duration::from_secs(600),
            quiet: false,
            window: None,
            default_deadline: None,
            budget: Budget::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunSummary {
    /// Requests in the file.
    pub requests: usize,
    /// Answered in an earlier run (skipped).
    pub already_done: usize,
    /// Outcome unknown from an earlier run and not resent (at-most-once).
    pub unknown_skipped: Vec<String>,
    /// Unknown from an earlier run and resent (`resend_unknown`).
    pub unknown_resent: usize,
    /// Requests answered with 2xx in this run.
    pub ok: usize,
    /// Requests that failed for good in this run (written with their error).
    pub failed: usize,
    /// HTTP attempts made.
    pub attempts: u64,
    /// Retries after 429.
    pub retries_429: u64,
    /// Retries after 5xx, 408 or transport errors.
    pub retries_other: u64,
    /// Seconds the run took.
    pub elapsed_s: f64,
    /// Spend of this run's answered requests (from their `usage`, else estimated), when prices
    /// are known.
    pub spend: f64,
    /// The sending window, when there is one.
    pub window: Option<String>,
    /// Requests that cannot be sent before their deadline, as predicted before sending.
    pub late: Vec<Late>,
    /// Clients stopped at their `--max-cost`, with the requests not sent.
    pub over_budget: Vec<OverBudget>,
}

/// What a run will do, computed before it sends anything.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Preview {
    /// Requests still to send.
    pub to_send: usize,
    /// When the first one goes (RFC 3339): now, or when the window opens.
    pub first_send: String,
    /// When the last one goes under the limits (and the window), predicted (RFC 3339).
    pub last_send: String,
    /// Requests that cannot be sent before their deadline.
    pub late: Vec<Late>,
}

/// The send order of the requests still to send (`todo`, input positions), their due times,
/// and the predicted send times.
struct Schedule {
    todo: Vec<usize>,
    due: Vec<Option<Timestamp>>,
    late: Vec<Late>,
    first: Timestamp,
    last: Timestamp,
}

fn schedule(loaded: &Loaded, limits: &Limits, opts: &RunOptions, skip: &dyn Fn(usize) -> bool) -> Schedule {
    let reqs = &loaded.requests;
    let start = opts.clock.now();
    let due = due_times(reqs, opts.default_deadline, start);
    let mut order = order_requests(reqs, opts.order, opts.assumed_output_tokens);
    if due.iter().any(Option::is_some) {
        earliest_deadline_first(&mut order, &due);
    }
    let todo: Vec<usize> = order.into_iter().filter(|&i| !skip(i)).collect();
    let sends = predicted_sends(reqs, &todo, limits, opts.assumed_output_tokens, start, opts.window.as_ref());
    let late = late(reqs, &due, &sends);
    let first = opts.window.as_ref().map_or(start, |w| w.next_open(start));
    let last = todo.iter().map(|&i| sends[i]).max().unwrap_or(start);
    Schedule { todo, due, late, first, last }
}

/// What [`run`] would do now: the requests it would send, when, and which cannot make their
/// deadline (requests answered in the output already are left out).
pub fn preview(loaded: &Loaded, limits: &Limits, opts: &RunOptions) -> Result<Preview, BatchError> {
    let done = read_ids(&opts.output, "custom_id", &mut |_, _| {})?;
    let sent = if opts.resend_unknown { HashSet::new() } else { read_ids(&opts.progress, "sent", &mut |_, _| {})? };
    let reqs = &loaded.requests;
    let skip = |i: usize| done.contains(&reqs[i].custom_id) || sent.contains(&reqs[i].custom_id);
    let s = schedule(loaded, limits, opts, &skip);
    Ok(Preview {
        to_send: s.todo.len(),
        first_send: crate::deadline::whole_seconds(s.first),
        last_send: crate::deadline::whole_seconds(s.last),
        late: s.late,
    })
}

/// Read the ids from a JSONL file written by an earlier run (`line` sees each id and line); a
/// last line without its newline (the run was killed while writing it) is cut off.
fn read_ids(path: &Path, field: &str, line: &mut dyn FnMut(&str, &Value)) -> Result<HashSet<String>, BatchError> {
    let mut ids = HashSet::new();
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
        Err(e) => return Err(BatchError::io(path, e)),
    };
    let mut r = BufReader::new(f);
    let mut good_len = 0u64;
    let mut buf = Vec::new();
    let mut torn = false;
    loop {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf).map_err(|e| BatchError::io(path, e))?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') {
            torn = true;
            break;
        }
        good_len += n as u64;
        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
            if let Some(id) = v.get(field).and_then(Value::as_str) {
                line(id, &v);
                ids.insert(id.to_string());
            }
        }
    }
    if torn {
        let f = OpenOptions::new().write(true).open(path).map_err(|e| BatchError::io(path, e))?;
        f.set_len(good_len).map_err(|e| BatchError::io(path, e))?;
        f.sync_all().map_err(|e| BatchError::io(path, e))?;
    }
    Ok(ids)
}

enum Msg {
    Sent(String, Timestamp, mpsc::Sender<Result<(), String>>),
    Done(Vec<u8>),
}

/// The only writer of the output and progress files: appends what workers send, fsyncs once
/// per batch of messages (group commit), then lets the waiting senders go.
fn writer(rx: mpsc::Receiver<Msg>, mut out: File, mut prog: File, paths: (PathBuf, PathBuf)) -> Result<(), BatchError> {
    while let Ok(first) = rx.recv() {
        let mut msgs = vec![first];
        while let Ok(m) = rx.try_recv() {
            msgs.push(m);
        }
        let (mut obuf, mut pbuf, mut acks) = (Vec::new(), Vec::new(), Vec::new());
        for m in msgs {
            match m {
                Msg::Sent(id, at, ack) => {
                    serde_json::to_writer(&mut pbuf, &json!({ "sent": id, "at": at.to_string() })).unwrap_or_default();
                    pbuf.push(b'\n');
                    acks.push(ack);
                }
                Msg::Done(line) => {
                    obuf.extend_from_slice(&line);
                    obuf.push(b'\n');
                }
            }
        }
        let res = (|| {
            if !obuf.is_empty() {
                out.write_all(&obuf).and_then(|_| out.sync_data()).map_err(|e| BatchError::io(&paths.0, e))?;
            }
            if !pbuf.is_empty() {
                prog.write_all(&pbuf).and_then(|_| prog.sync_data()).map_err(|e| BatchError::io(&paths.1, e))?;
            }
            Ok::<(), BatchError>(())
        })();
        let ack_val = res.as_ref().map(|_| ()).map_err(|e| e.to_string());
        for a in acks {
            let _ = a.send(ack_val.clone());
        }
        res?;
    }
    Ok(())
}

fn open_append(p: &Path) -> Result<File, BatchError> {
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| BatchError::io(d, e))?;
    }
    let mut f = OpenOptions::new().create(true).append(true).open(p).map_err(|e| BatchError::io(p, e))?;
    f.seek(SeekFrom::End(0)).map_err(|e| BatchError::io(p, e))?;
    Ok(f)
}

/// When a request may go, besides the rate limits: the window, deadlines, the budget.
struct Gate<'a> {
    window: Option<&'a Window>,
    clock: &'a dyn Clock,
    due: &'a [Option<Timestamp>],
    ledger: Option<&'a Mutex<Ledger>>,
    costs: &'a [f64],
}

/// Requests still to send, one queue per model in send order: a worker takes, among the queue
/// heads whose model's buckets allow one now, the one due first (then the first queue), so a
/// model waiting for its limits never holds back another.
struct Queues {
    q: Mutex<Vec<(String, std::collections::VecDeque<usize>)>>,
}

impl Queues {
    fn new(reqs: &[crate::input::Request], todo: &[usize]) -> Self {
        let mut q: Vec<(String, std::collections::VecDeque<usize>)> = Vec::new();
        for &i in todo {
            let m: &str = &reqs[i].model;
            match q.iter_mut().find(|(k, _)| k == m) {
                Some((_, d)) => d.push_back(i),
                None => q.push((m.to_string(), std::collections::VecDeque::from([i]))),
            }
        }
        Queues { q: Mutex::new(q) }
    }

    /// Take the next request to send (and when it was taken), blocking until the window is open
    /// and some model's buckets allow one; `None` when none are left or the run is stopping.
    /// Requests of a client over its budget are dropped here (the ledger counts them).
    fn next(
        &self,
        reqs: &[crate::input::Request],
        limiter: &RateLimiter,
        assumed: u64,
        fatal: &Mutex<Option<String>>,
        gate: &Gate,
    ) -> Option<(usize, Timestamp)> {
        loop {
            // The instant the window was seen open is the instant the request is taken: read
            // the clock once, so that a request admitted inside the window is never recorded
            // (a few microseconds later) outside it.
            let now = gate.clock.now();
            if let Some(w) = gate.window {
                if !w.is_open(now) {
                    if self.q.lock().map(|q| q.iter().all(|(_, d)| d.is_empty())).unwrap_or(true) {
                        return None;
                    }
                    gate.clock.sleep_until(w.next_open(now));
                    continue;
                }
            }
            let mut wait = Duration::from_millis(50);
            {
                let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
                let mut heads: Vec<(usize, usize)> =
                    q.iter().enumerate().filter_map(|(k, (_, d))| d.front().map(|&i| (k, i))).collect();
                if heads.is_empty() {
                    return None;
                }
                heads.sort_by_key(|&(k, i)| (gate.due[i].is_none(), gate.due[i], k));
                let mut dropped = false;
                for (k, i) in heads {
                    let r = &reqs[i];
                    if let Some(l) = gate.ledger {
                        if !l.lock().map(|mut l| l.reserve(&r.client, gate.costs[i])).unwrap_or(false) {
                            q[k].1.pop_front();
                            dropped = true;
                            continue;
                        }
                    }
                    match limiter.try_acquire(&q[k].0, rate_tokens(r, assumed)) {
                        Ok(()) => {
                            q[k].1.pop_front();
                            return Some((i, now));
                        }
                        Err(w) => {
                            if let Some(l) = gate.ledger {
                                if let Ok(mut l) = l.lock() {
                                    l.settle(&r.client, gate.costs[i], 0.0);
                                }
                            }
                            wait = wait.min(w);
                        }
                    }
                }
                if dropped {
                    continue;
                }
            }
            if fatal.lock().map(|f| f.is_some()).unwrap_or(true) {
                return None;
            }
            std::thread::sleep(wait);
        }
    }
}

#[derive(serde::Deserialize)]
struct BodyOnly<'a> {
    #[serde(borrow)]
    body: &'a serde_json::value::RawValue,
}

#[derive(Default)]
struct Stats {
    ok: usize,
    failed: usize,
    attempts: u64,
    retries_429: u64,
    retries_other: u64,
    spend: f64,
}

/// Send `loaded`'s requests live. Returns when every request not answered before has been
/// answered or has failed for good.
pub fn run(loaded: &Loaded, limits: &Limits, prices: &Prices, opts: &RunOptions) -> Result<RunSummary, BatchError> {
    if opts.concurrency == 0 {
        return Err(BatchError::Invalid("--concurrency must be at least 1".into()));
    }
    let t0 = Instant::now();
    let reqs = &loaded.requests;
    let by_id: HashMap<&str, usize> = reqs.iter().enumerate().map(|(i, r)| (r.custom_id.as_str(), i)).collect();
    let costs: Vec<f64> = reqs.iter().map(|r| max_cost(r, prices, opts.assumed_output_tokens).unwrap_or(0.0)).collect();
    if !opts.budget.is_empty() {
        if let Some(r) =
            reqs.iter().find(|r| opts.budget.limit(&r.client).is_some() && prices.for_model(&r.model).is_none())
        {
            return Err(BatchError::Invalid(format!(
                "--max-cost: model {:?} (client {:?}, line {}) has no price; give --prices with it",
                &*r.model, &*r.client, r.line
            )));
        }
    }
    // Spend of earlier runs' answers, per client.
    let mut spent_before: HashMap<String, f64> = HashMap::new();
    let done = read_ids(&opts.output, "custom_id", &mut |id, v| {
        if let Some(&i) = by_id.get(id) {
            let r = &reqs[i];
            let body = &v["response"]["body"];
            if v["error"].is_null() {
                *spent_before.entry(r.client.to_string()).or_default() +=
                    spend_of(r, body, prices, opts.assumed_output_tokens);
            }
        }
    })?;
    let sent = read_ids(&opts.progress, "sent", &mut |_, _| {})?;
    let mut summary = RunSummary {
        requests: reqs.len(),
        window: opts.window.as_ref().map(|w| w.describe().to_string()),
        ..Default::default()
    };
    let skip = |i: usize| {
        let id = &reqs[i].custom_id;
        done.contains(id) || (sent.contains(id) && !opts.resend_unknown)
    };
    for r in reqs {
        if done.contains(&r.custom_id) {
            summary.already_done += 1;
        } else if sent.contains(&r.custom_id) {
            if opts.resend_unknown {
                summary.unknown_resent += 1;
            } else {
                summary.unknown_skipped.push(r.custom_id.clone());
            }
        }
    }
    let sched = schedule(loaded, limits, opts, &skip);
    summary.late = sched.late;
    let todo = sched.todo;
    let ledger = (!opts.budget.is_empty()).then(|| Mutex::new(Ledger::new(opts.budget.clone(), spent_before)));
    let gate = Gate {
        window: opts.window.as_ref(),
        clock: &*opts.clock,
        due: &sched.due,
        ledger: ledger.as_ref(),
        costs: &costs,
    };
    let out = open_append(&opts.output)?;
    let prog = open_append(&opts.progress)?;
    let (wtx, wrx) = mpsc::channel::<Msg>();
    let paths = (opts.output.clone(), opts.progress.clone());
    let writer_h = std::thread::spawn(move || writer(wrx, out, prog, paths));

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(opts.timeout))
        .max_idle_connections_per_host(opts.concurrency.max(1))
        .max_idle_connections(opts.concurrency.max(1) * 2)
        .build()
        .into();
    let limiter = RateLimiter::new(limits);
    let stats = Mutex::new(Stats::default());
    let fatal: Mutex<Option<String>> = Mutex::new(None);
    let queues = Queues::new(reqs, &todo);
    let bar = if opts.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::with_draw_target(Some(todo.len() as u64), indicatif::ProgressDrawTarget::stderr())
    };
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} ETA {eta} {msg}")
    {
        bar.set_style(style);
    }
    let currency = prices.currency.clone();
    let auth = opts.api_key.as_ref().map(|k| format!("Bearer {}", k.expose()));

    std::thread::scope(|s| {
        for _ in 0..opts.concurrency.min(todo.len().max(1)) {
            let wtx = wtx.clone();
            let (agent, limiter, stats, fatal, queues, bar, auth, currency, gate) =
                (&agent, &limiter, &stats, &fatal, &queues, &bar, &auth, &currency, &gate);
            s.spawn(move || loop {
                if fatal.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                // 0. The next request whose model's buckets allow it now (taken from them).
                let Some((i, at)) = queues.next(reqs, limiter, opts.assumed_output_tokens, fatal, gate) else { return };
                let r = &reqs[i];
                // 1. Durably record that it is about to be sent.
                let (atx, arx) = mpsc::channel();
                if wtx.send(Msg::Sent(r.custom_id.clone(), at, atx)).is_err() {
                    return;
                }
                match arx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                    Err(_) => return,
                }
                // 2. Send the body, with retries.
                let body_bytes: Vec<u8> = match serde_json::from_slice::<BodyOnly>(loaded.raw(r)) {
                    Ok(b) => b.body.get().as_bytes().to_vec(),
                    Err(e) => {
                        *fatal.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(format!("{}:{}: {e}", loaded.path.display(), r.line));
                        return;
                    }
                };
                let url = join_url(&opts.endpoint, r.endpoint.url());
                let tokens = rate_tokens(r, opts.assumed_output_tokens);
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                    opts.seed ^ crate::hash::finish(crate::hash::mix(0, r.custom_id.as_bytes()), r.line),
                );
                let (mut n_other, mut n_429) = (0u32, 0u32);
                let outcome: (Option<u16>, Option<String>, Value, Option<String>) = loop {
                    if n_other + n_429 > 0 {
                        limiter.acquire(&r.model, tokens);
                    }
                    let mut req = agent.post(&url).header("Content-Type", "application/json");
                    if let Some(a) = auth {
                        req = req.header("Authorization", a);
                    }
                    if r.custom_id.len() <= 512 && r.custom_id.bytes().all(|b| b.is_ascii_graphic()) {
                        req = req.header("X-Client-Request-Id", &r.custom_id);
                    }
                    if let Ok(mut st) = stats.lock() {
                        st.attempts += 1;
                    }
                    let transient_wait = |n: u32, rng: &mut rand_chacha::ChaCha8Rng| {
                        let b = opts.backoff_base.as_secs_f64() * 2f64.powi(n as i32);
                        let b = b.min(opts.backoff_max.as_secs_f64());
                        Duration::from_secs_f64(b * rng.random_range(0.5..=1.0))
                    };
                    match req.send(&body_bytes[..]) {
                        Ok(mut resp) => {
                            let status = resp.status().as_u16();
                            let rid = resp
                                .headers()
                                .get("x-request-id")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            if status == 429 && n_429 < opts.max_429_retries {
                                let wait = retry_after(resp.headers()).unwrap_or_else(|| transient_wait(n_429, &mut rng));
                                let _ = resp.body_mut().read_to_vec();
                                limiter.pause(&r.model, wait);
                                n_429 += 1;
                                if let Ok(mut st) = stats.lock() {
                                    st.retries_429 += 1;
                                }
                                continue;
                            }
                            let body = resp.body_mut().with_config().limit(256 << 20).read_to_vec();
                            let body = match body {
                                Ok(b) => serde_json::from_slice::<Value>(&b)
                                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&b).into_owned())),
                                Err(e) => Value::String(format!("could not read the body: {e}")),
                            };
                            let transient = matches!(status, 408 | 500 | 502 | 503 | 504);
                            if transient && n_other < opts.max_retries {
                                std::thread::sleep(transient_wait(n_other, &mut rng));
                                n_other += 1;
                                if let Ok(mut st) = stats.lock() {
                                    st.retries_other += 1;
                                }
                                continue;
                            }
                            let err = if (200..300).contains(&status) {
                                None
                            } else {
                                Some(format!("HTTP {status}"))
                            };
                            break (Some(status), rid, body, err);
                        }
                        Err(e) => {
                            if n_other < opts.max_retries {
                                std::thread::sleep(transient_wait(n_other, &mut rng));
                                n_other += 1;
                                if let Ok(mut st) = stats.lock() {
                                    st.retries_other += 1;
                                }
                                continue;
                            }
                            break (None, None, Value::Null, Some(format!("transport: {e}")));
                        }
                    }
                };
                // 3. Write the answer.
                let (status, rid, body, err) = outcome;
                let ok = err.is_none();
                let spend = if ok { spend_of(r, &body, prices, opts.assumed_output_tokens) } else { 0.0 };
                if let Some(l) = gate.ledger {
                    if let Ok(mut l) = l.lock() {
                        l.settle(&r.client, gate.costs[i], spend);
                    }
                }
                let line = json!({
                    "id": format!("ordo-{}", r.line),
                    "custom_id": r.custom_id,
                    "response": status.map(|s| json!({"status_code": s, "request_id": rid, "body": body})),
                    "error": err.map(|m| json!({"code": if status.is_some() { "http_error" } else { "transport_error" }, "message": m})),
                });
                let bytes = serde_json::to_vec(&line).unwrap_or_default();
                if wtx.send(Msg::Done(bytes)).is_err() {
                    return;
                }
                if let Ok(mut st) = stats.lock() {
                    if ok {
                        st.ok += 1;
                    } else {
                        st.failed += 1;
                    }
                    st.spend += spend;
                    bar.set_message(format!("spent {:.4} {currency}", st.spend));
                }
                bar.inc(1);
            });
        }
    });
    drop(wtx);
    bar.finish_and_clear();
    match writer_h.join() {
        Ok(r) => r?,
        Err(_) => return Err(BatchError::Invalid("the output writer thread panicked".into())),
    }
    if let Some(e) = fatal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(BatchError::Invalid(e));
    }
    let st = stats.into_inner().unwrap_or_else(|p| p.into_inner());
    summary.ok = st.ok;
    summary.failed = st.failed;
    summary.attempts = st.attempts;
    summary.retries_429 = st.retries_429;
    summary.retries_other = st.retries_other;
    summary.spend = st.spend;
    summary.elapsed_s = t0.elapsed().as_secs_f64();
    if let Some(l) = ledger {
        summary.over_budget = l.into_inner().unwrap_or_else(|p| p.into_inner()).over();
    }
    Ok(summary)
}

/// Cost of an answered request: from the response's `usage` when present, else estimated.
fn spend_of(r: &crate::input::Request, body: &Value, prices: &Prices, assumed: u64) -> f64 {
    let Some(p) = prices.for_model(&r.model) else { return 0.0 };
    match crate::usage::Usage::of(body) {
        Some(u) => u.cost(&p),
        None => p.cost(r.input_tokens, 0, output_tokens(r, assumed)),
    }
}
