//! A local HTTP server (axum, loopback) for tests: OpenAI-compatible live endpoints with rate
//! limits and 429s, and emulators of OpenAI's and Anthropic's batch APIs (see docs/BATCH.md).
//!
//! Live requests are identified by the `X-Client-Request-Id` header that `ordo batch run` sends
//! (the request's `custom_id`). Tokens are counted exactly with [`crate::input::parse_line`].
//! A test can hold the answer of any batch-API call ([`TestServer::hold`]): the call takes
//! effect, then its answer waits, so a client killed meanwhile never learns the outcome.

mod anthropic;
mod openai;

use crate::bucket::RateLimiter;
use crate::config::{Limits, ModelLimits};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the test server behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Requests per minute it accepts (per model).
    pub requests_per_minute: f64,
    /// Tokens per minute it accepts (per model): prompt tokens plus max_tokens.
    pub tokens_per_minute: f64,
    /// Depth of its buckets in seconds of each rate.
    pub burst_seconds: f64,
    /// Required `Authorization: Bearer` key (401 otherwise).
    pub api_key: Option<String>,
    /// Every n-th request received answers 500 (not processed).
    pub fail_500_every: Option<u64>,
    /// Every n-th request received answers 429 with `retry_after` (not processed).
    pub force_429_every: Option<u64>,
    /// Retry-After sent with forced 429s.
    pub retry_after: Duration,
    /// Time taken to answer each request.
    pub latency: Duration,
    /// Status polls of a batch before it moves to its next status.
    pub polls_per_step: u32,
    /// Every n-th request processed in a batch (counting across batches, first processing of
    /// each custom_id only) fails; processed again (a retry) it succeeds.
    pub batch_fail_every: Option<u64>,
    /// The first n batches created expire: their first half is processed, the rest expires.
    pub batch_expire_first: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            requests_per_minute: 1e9,
            tokens_per_minute: 1e12,
            burst_seconds: 1.0,
            api_key: None,
            fail_500_every: None,
            force_429_every: None,
            retry_after: Duration::from_millis(200),
            latency: Duration::ZERO,
            polls_per_step: 1,
            batch_fail_every: None,
            batch_expire_first: 0,
        }
    }
}

/// What the server saw.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Requests received per custom_id (every attempt).
    pub received: HashMap<String, u64>,
    /// Requests answered 200 per custom_id.
    pub processed: HashMap<String, u64>,
    /// 429s answered because a limit was exceeded.
    pub limit_429: u64,
    /// 429s answered because `force_429_every` said so.
    pub forced_429: u64,
    /// 500s answered.
    pub errors_500: u64,
    /// Requests without the right key.
    pub unauthorized: u64,
    /// Requests that were malformed or had no X-Client-Request-Id.
    pub bad: u64,
    /// Times (since the server started) of the requests answered 200.
    pub processed_at: Vec<f64>,
}

/// A batch-API call whose answer a test can hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `POST /v1/files`.
    Upload,
    /// `POST /v1/batches`, `POST /v1/messages/batches`.
    Create,
    /// `GET` of one batch.
    Retrieve,
    /// `GET` of a list of batches or files.
    List,
    /// `POST .../cancel`.
    Cancel,
    /// `GET` of a file's content or of Message Batch results.
    Download,
}

/// One batch as the emulator keeps it (for tests to inspect).
#[derive(Debug, Clone)]
pub struct EmuBatch {
    /// Its id.
    pub id: String,
    /// `openai` or `anthropic`.
    pub provider: &'static str,
    /// Its requests' custom_ids, in order.
    pub custom_ids: Vec<String>,
    /// OpenAI metadata (`ordo_key` ...).
    pub metadata: serde_json::Value,
    /// Status word.
    pub status: String,
    /// Creation time (Unix seconds).
    pub created_at: i64,
    /// Status polls since the last change.
    polls: u32,
    /// Cancellation asked for.
    cancel: bool,
    /// Expires instead of completing.
    expire: bool,
    /// Endpoint (OpenAI).
    endpoint: String,
    /// Request bodies (`url`, body) in order: OpenAI lines or Anthropic params.
    bodies: Vec<(String, serde_json::Value)>,
    /// Result lines once processed: (custom_id, ok, line).
    results: Vec<(String, bool, serde_json::Value)>,
    /// OpenAI output and error files.
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    /// Times.
    times: std::collections::BTreeMap<&'static str, i64>,
    /// Input file (OpenAI).
    input_file_id: String,
    /// Validation errors (OpenAI `failed`).
    errors: Vec<serde_json::Value>,
}

/// An uploaded file.
#[derive(Debug, Clone)]
struct EmuFile {
    id: String,
    filename: String,
    purpose: String,
    bytes: Vec<u8>,
    created_at: i64,
}

#[derive(Debug, Default)]
struct Store {
    files: Vec<EmuFile>,
    batches: Vec<EmuBatch>,
    processed: HashMap<String, u64>,
    seen: u64,
    uploads: u64,
}

struct Shared {
    cfg: ServerConfig,
    limiter: RateLimiter,
    counts: Mutex<Counts>,
    n: Mutex<u64>,
    t0: Instant,
    store: Mutex<Store>,
    hold: Mutex<Option<(Step, u64)>>,
    held: std::sync::atomic::AtomicBool,
    /// The gate of the call held now: one per hold, so that a held call whose client went away
    /// (hyper drops its handler) cannot leave a permit for the next one.
    gate: Mutex<Arc<tokio::sync::Semaphore>>,
}

impl Shared {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait here (after the call took effect) when the test holds this call.
    async fn maybe_hold(&self, step: Step) {
        let take = {
            let mut h = self.hold.lock().unwrap_or_else(|p| p.into_inner());
            match h.as_mut() {
                Some((st, n)) if *st == step => {
                    *n -= 1;
                    if *n == 0 {
                        *h = None;
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            }
        };
        if take {
            let gate = self.gate.lock().unwrap_or_else(|p| p.into_inner()).clone();
            self.held.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = gate.acquire().await;
        }
    }

    /// The n-th call to any route: answer an injected 429 (`force_429_every`)?
    fn injected_429(&self) -> Option<Response> {
        let n = {
            let mut n = self.n.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        if self.cfg.force_429_every.is_some_and(|k| n % k == 0) {
            self.counts.lock().unwrap_or_else(|p| p.into_inner()).forced_429 += 1;
            let ra = self.cfg.retry_after;
            return Some(reply(
                StatusCode::TOO_MANY_REQUESTS,
                vec![("retry-after", format!("{:.3}", ra.as_secs_f64()))],
                serde_json::json!({"error": {"message": "slow down (injected)", "type": "rate_limit_error"}})
                    .to_string(),
            ));
        }
        None
    }

    /// Process one request of a batch: its answer, or an injected failure.
    fn process(&self, store: &mut Store, custom_id: &str) -> bool {
        let k = store.processed.entry(custom_id.to_string()).or_default();
        *k += 1;
        let first = *k == 1;
        if first {
            store.seen += 1;
        }
        !(first && self.cfg.batch_fail_every.is_some_and(|e| store.seen.is_multiple_of(e)))
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// `key=value` pairs of a query string (ids and numbers only: no percent-decoding needed).
fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn json_reply(status: StatusCode, v: serde_json::Value) -> Response {
    reply(status, vec![], v.to_string())
}

/// What differs between the two emulated providers for the routes they share in shape.
trait Flavor: Send + Sync + 'static {
    /// `openai` or `anthropic` (the batches each owns).
    const NAME: &'static str;
    /// The list cursor parameter.
    const AFTER: &'static str;
    /// Largest list page.
    const MAX_PAGE: usize;
    /// Key and injected-429 checks; an answer when the call stops there.
    fn gate(s: &Shared, headers: &HeaderMap) -> Option<Response>;
    /// The provider's 404 for a batch id.
    fn not_found(id: &str) -> Response;
    /// One status poll of batch `i`.
    fn step(s: &Shared, st: &mut Store, i: usize);
    /// The provider's batch object.
    fn batch_json(b: &EmuBatch) -> Value;
}

/// `GET {batches}/{id}`: one status poll (the batch may move on), then the batch object.
async fn retrieve<F: Flavor>(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = F::gate(&s, &headers) {
        return r;
    }
    let v = {
        let mut st = s.store();
        let Some(i) = st.batches.iter().position(|b| b.id == id && b.provider == F::NAME) else {
            return F::not_found(&id);
        };
        F::step(&s, &mut st, i);
        F::batch_json(&st.batches[i])
    };
    s.maybe_hold(Step::Retrieve).await;
    json_reply(StatusCode::OK, v)
}

/// `GET {batches}`: newest first, paged.
async fn list<F: Flavor>(State(s): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(r) = F::gate(&s, &headers) {
        return r;
    }
    let q = query(&uri);
    let v = {
        let st = s.store();
        let items: Vec<(String, Value)> = st
            .batches
            .iter()
            .rev()
            .filter(|b| b.provider == F::NAME)
            .map(|b| (b.id.clone(), F::batch_json(b)))
            .collect();
        page(items, &q, F::AFTER, F::MAX_PAGE)
    };
    s.maybe_hold(Step::List).await;
    json_reply(StatusCode::OK, v)
}

/// A 200 answer carrying `bytes` (a file's content).
fn bytes_reply(bytes: Vec<u8>, content_type: &'static str) -> Response {
    let mut r = reply(StatusCode::OK, vec![], String::new());
    *r.body_mut() = axum::body::Body::from(bytes);
    r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static(content_type));
    r
}

/// A list page (both providers' shape: `data`, `has_more`, `first_id`, `last_id`) of `items` (newest first) after the id `after`, at most `limit`.
pub(crate) fn page(
    items: Vec<(String, Value)>,
    q: &std::collections::HashMap<String, String>,
    after_key: &str,
    max: usize,
) -> Value {
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(20).clamp(1, max);
    let start = match q.get(after_key) {
        Some(a) => items.iter().position(|(id, _)| id == a).map_or(items.len(), |i| i + 1),
        None => 0,
    };
    let data: Vec<Value> = items.iter().skip(start).take(limit).map(|(_, v)| v.clone()).collect();
    let has_more = start + data.len() < items.len();
    json!({"object": "list", "data": data, "has_more": has_more,
           "first_id": data.first().map(|d| d["id"].clone()), "last_id": data.last().map(|d| d["id"].clone())})
}

/// An OpenAI-style error answer.
fn openai_error(status: StatusCode, message: &str) -> Response {
    json_reply(status, serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}}))
}

/// An Anthropic-style error answer.
fn anthropic_error(status: StatusCode, kind: &str, message: &str) -> Response {
    json_reply(status, serde_json::json!({"type": "error", "error": {"type": kind, "message": message}}))
}

/// The answer a live endpoint gives to a request, with its usage.
fn answer(req: &crate::input::Request, custom_id: &str, url: &str, n: u64) -> serde_json::Value {
    let out = req.max_output_tokens.unwrap_or(16).min(5);
    if url == "/v1/embeddings" {
        serde_json::json!({"object": "list", "model": &*req.model, "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "usage": {"prompt_tokens": req.input_tokens, "total_tokens": req.input_tokens}})
    } else {
        serde_json::json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": &*req.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("answer to {custom_id}")}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": req.input_tokens, "completion_tokens": out, "total_tokens": req.input_tokens + out,
                      "prompt_tokens_details": {"cached_tokens": 0}}})
    }
}

/// A running test server; stops when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("cfg", &self.cfg).finish()
    }
}

impl TestServer {
    /// Start on 127.0.0.1 with an OS-chosen port.
    pub fn start(cfg: ServerConfig) -> std::io::Result<TestServer> {
        TestServer::start_on(0, cfg)
    }

    /// Start on 127.0.0.1:`port` (0: chosen by the OS).
    pub fn start_on(port: u16, cfg: ServerConfig) -> std::io::Result<TestServer> {
        let limits = Limits {
            default: ModelLimits {
                requests_per_minute: cfg.requests_per_minute,
                tokens_per_minute: cfg.tokens_per_minute,
            },
            run: crate::config::RunLimits { burst_seconds: cfg.burst_seconds },
            ..Limits::default()
        };
        let shared = Arc::new(Shared {
            limiter: RateLimiter::new(&limits),
            cfg,
            counts: Mutex::new(Counts::default()),
            n: Mutex::new(0),
            t0: Instant::now(),
            store: Mutex::new(Store::default()),
            hold: Mutex::new(None),
            held: std::sync::atomic::AtomicBool::new(false),
            gate: Mutex::new(Arc::new(tokio::sync::Semaphore::new(0))),
        });
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/completions", post(handle))
            .route("/v1/embeddings", post(handle))
            .route("/v1/responses", post(handle))
            .merge(openai::routes())
            .merge(anthropic::routes())
            .with_state(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.await;
                    })
                    .await;
            });
        });
        Ok(TestServer { url: format!("http://{addr}"), shared, stop: Some(tx), thread: Some(thread) })
    }

    /// A copy of the counts so far.
    pub fn counts(&self) -> Counts {
        self.shared.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Calls received so far, on every route.
    pub fn calls(&self) -> u64 {
        *self.shared.n.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every batch created so far, in creation order.
    pub fn batches(&self) -> Vec<EmuBatch> {
        self.shared.store().batches.clone()
    }

    /// Files uploaded so far (every `POST /v1/files` that succeeded).
    pub fn uploads(&self) -> u64 {
        self.shared.store().uploads
    }

    /// Times each custom_id was processed in a batch.
    pub fn processed_in_batches(&self) -> HashMap<String, u64> {
        self.shared.store().processed.clone()
    }

    /// Hold the answer of the `nth` next call of `step` (1: the next one): the call takes
    /// effect, then its answer waits until [`TestServer::release`].
    pub fn hold(&self, step: Step, nth: u64) {
        self.shared.held.store(false, std::sync::atomic::Ordering::SeqCst);
        *self.shared.gate.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(tokio::sync::Semaphore::new(0));
        *self.shared.hold.lock().unwrap_or_else(|p| p.into_inner()) = Some((step, nth.max(1)));
    }

    /// Wait until a held call has arrived (false after `timeout`).
    pub fn wait_held(&self, timeout: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if self.shared.held.load(std::sync::atomic::Ordering::SeqCst) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Let a held answer go (and cancel a hold that did not fire).
    pub fn release(&self) {
        *self.shared.hold.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.shared.held.store(false, std::sync::atomic::Ordering::SeqCst);
        self.shared.gate.lock().unwrap_or_else(|p| p.into_inner()).add_permits(1);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reply(status: StatusCode, extra: Vec<(&'static str, String)>, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/json"));
    for (k, v) in extra {
        if let Ok(v) = axum::http::HeaderValue::from_str(&v) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

async fn handle(State(s): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    if !s.cfg.latency.is_zero() {
        tokio::time::sleep(s.cfg.latency).await;
    }
    let err = |code: StatusCode, msg: &str| {
        reply(code, vec![], serde_json::json!({"error": {"message": msg, "type": "test_server"}}).to_string())
    };
    let mut counts = s.counts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(key) = &s.cfg.api_key {
        let want = format!("Bearer {key}");
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(want.as_str()) {
            counts.unauthorized += 1;
            return err(StatusCode::UNAUTHORIZED, "bad or missing API key");
        }
    }
    let Some(id) = headers.get("x-client-request-id").and_then(|v| v.to_str().ok()).map(str::to_string) else {
        counts.bad += 1;
        return err(StatusCode::BAD_REQUEST, "no X-Client-Request-Id");
    };
    *counts.received.entry(id.clone()).or_default() += 1;
    let n = {
        let mut n = s.n.lock().unwrap_or_else(|p| p.into_inner());
        *n += 1;
        *n
    };
    if s.cfg.fail_500_every.is_some_and(|k| n % k == 0) {
        counts.errors_500 += 1;
        return err(StatusCode::INTERNAL_SERVER_ERROR, "injected failure");
    }
    if s.cfg.force_429_every.is_some_and(|k| n % k == 0) {
        counts.forced_429 += 1;
        let ra = s.cfg.retry_after;
        return reply(
            StatusCode::TOO_MANY_REQUESTS,
            vec![("retry-after", format!("{:.3}", ra.as_secs_f64()))],
            serde_json::json!({"error": {"message": "slow down (injected)"}}).to_string(),
        );
    }
    let text = String::from_utf8_lossy(&body);
    let line =
        format!(r#"{{"custom_id":"x","method":"POST","url":{},"body":{}}}"#, serde_json::json!(uri.path()), text);
    let req = match crate::input::parse_line(&line) {
        Ok(r) => r,
        Err(e) => {
            counts.bad += 1;
            return err(StatusCode::BAD_REQUEST, &e);
        }
    };
    let tokens = req.input_tokens + req.max_output_tokens.unwrap_or(256);
    if let Err(wait) = s.limiter.try_acquire(&req.model, tokens) {
        counts.limit_429 += 1;
        return reply(
            StatusCode::TOO_MANY_REQUESTS,
            vec![("retry-after-ms", format!("{}", wait.as_millis().max(1)))],
            serde_json::json!({"error": {"message": "rate limit exceeded", "type": "requests"}}).to_string(),
        );
    }
    *counts.processed.entry(id.clone()).or_default() += 1;
    counts.processed_at.push(s.t0.elapsed().as_secs_f64());
    drop(counts);
    let body = answer(&req, &id, uri.path(), n);
    reply(StatusCode::OK, vec![("x-request-id", format!("req-{n}"))], body.to_string())
}
