//! A local OpenAI-compatible HTTP server (axum, loopback) for tests: enforces request and token
//! rate limits with its own token buckets, answers 429 with Retry-After, and counts everything.
//!
//! Requests are identified by the `X-Client-Request-Id` header that `ordo batch run` sends
//! (the request's `custom_id`). Tokens are counted exactly with [`crate::input::parse_line`].

use crate::bucket::RateLimiter;
use crate::config::{Limits, ModelLimits};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
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

struct Shared {
    cfg: ServerConfig,
    limiter: RateLimiter,
    counts: Mutex<Counts>,
    n: Mutex<u64>,
    t0: Instant,
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
        });
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/completions", post(handle))
            .route("/v1/embeddings", post(handle))
            .route("/v1/responses", post(handle))
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
    let out = req.max_output_tokens.unwrap_or(16).min(5);
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
    let usage = serde_json::json!({"prompt_tokens": req.input_tokens, "completion_tokens": out, "total_tokens": req.input_tokens + out});
    let body = if uri.path() == "/v1/embeddings" {
        serde_json::json!({"object": "list", "model": &*req.model, "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}], "usage": {"prompt_tokens": req.input_tokens, "total_tokens": req.input_tokens}})
    } else {
        serde_json::json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": &*req.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("answer to {id}")}, "finish_reason": "stop"}],
            "usage": usage})
    };
    reply(StatusCode::OK, vec![("x-request-id", format!("req-{n}"))], body.to_string())
}
