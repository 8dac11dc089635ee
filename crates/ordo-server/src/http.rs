//! The HTTP layer: the route table (which docs/openapi.yaml must match), authentication,
//! error mapping, the long poll for agents, and the scheduling loop.

use crate::api::*;
use crate::array::JobRef;
use crate::auth::{self, Principal, Role};
use crate::config::ServerConfig;
use crate::gate::Gate;
use crate::state::{ApiError, Core, ARRAY_STEP};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put, MethodRouter};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Opening the state failed.
    #[error("{0}")]
    State(#[from] ApiError),
    /// The TLS certificate or key could not be used.
    #[error("{0}")]
    Tls(String),
    /// Binding or serving failed.
    #[error("listen on {addr}: {source}")]
    Io {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Db(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, Json(ErrorBody { error: self.to_string() })).into_response()
    }
}

/// The state lock: one mutex over [`Core`], every hold of which is timed (the histogram
/// `ordo_state_lock_hold_seconds` of `/metrics`, and the longest so far), so that whatever holds
/// it long (a user's action, a pass) is seen: every other request, and every agent's poll,
/// waits behind it.
#[derive(Debug)]
pub struct StateLock {
    m: Mutex<Core>,
    hist: prometheus_client::metrics::histogram::Histogram,
    longest: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
    longest_us: std::sync::atomic::AtomicU64,
    /// Holds at least this long are logged with where they were taken (`ORDO_LOG_LOCK_MS=N`,
    /// for finding what stalls a server).
    log_over: Option<Duration>,
}

/// A hold of the [`StateLock`]: the state, timed until it is dropped.
#[derive(Debug)]
pub struct CoreGuard<'a> {
    g: MutexGuard<'a, Core>,
    t0: std::time::Instant,
    lock: &'a StateLock,
}

impl std::ops::Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.g
    }
}

impl std::ops::DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.g
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let held = self.t0.elapsed();
        self.lock.hist.observe(held.as_secs_f64());
        let us = held.as_micros() as u64;
        if self.lock.longest_us.fetch_max(us, std::sync::atomic::Ordering::Relaxed) < us {
            self.lock.longest.set(us as f64 / 1e6);
        }
        if self.lock.log_over.is_some_and(|l| held >= l) {
            eprintln!(
                "ordo server: the state lock was held {:.1} ms by:\n{}",
                held.as_secs_f64() * 1000.0,
                std::backtrace::Backtrace::force_capture()
            );
        }
    }
}

impl StateLock {
    fn new(core: Core) -> StateLock {
        let t = core.telemetry();
        let log_over = std::env::var("ORDO_LOG_LOCK_MS").ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
        StateLock {
            m: Mutex::new(core),
            hist: t.lock_hold,
            longest: t.lock_longest,
            longest_us: Default::default(),
            log_over,
        }
    }

    /// Takes the lock (a poisoned lock is taken as it is: the state is kept consistent by
    /// transactions, not by the lock's poison flag).
    pub fn lock(&self) -> CoreGuard<'_> {
        let g = lock(&self.m);
        CoreGuard { g, t0: std::time::Instant::now(), lock: self }
    }

    /// The longest hold so far.
    pub fn longest_hold(&self) -> Duration {
        Duration::from_micros(self.longest_us.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Shared server state.
#[derive(Debug, Clone)]
pub struct AppState {
    core: Arc<StateLock>,
    kick: Arc<Notify>,
    /// Group commit: told after every state change; the committer then makes every change so
    /// far durable with one disk sync, and publishes how many are (see [`AppState::settle`]).
    dirty: Arc<Notify>,
    durable: tokio::sync::watch::Sender<u64>,
    /// Ranges of changes `(after, upto]` whose group commit failed (rolled back).
    lost: Arc<Mutex<Vec<(u64, u64)>>>,
    /// Token checks, on their own database connection (never under the state lock).
    gate: Gate,
    /// Submissions waiting for the group-commit writer.
    submits: tokio::sync::mpsc::UnboundedSender<Submission>,
    /// Reads made off the state lock (`/metrics` outcomes, usage).
    reader: crate::usage::Reader,
    /// `/metrics` without a token.
    metrics_public: bool,
    /// When each node's agent was last heard from, recorded as its requests arrive, before
    /// they wait for the state lock (see [`Core::check_nodes_seen`]).
    seen: Arc<Mutex<std::collections::HashMap<String, i64>>>,
    /// Requests in progress per caller ([`admit`]).
    inflight: Arc<InFlight>,
    /// Admission limits.
    limits: Limits,
    /// `ordo logs` requests waiting for an agent's answer: number -> (node, where to answer).
    log_waits: Arc<Mutex<std::collections::HashMap<u64, LogWait>>>,
    next_ask: Arc<std::sync::atomic::AtomicU64>,
}

/// A request for a job's output, waiting for its node's agent: the node, where to answer.
type LogWait = (String, tokio::sync::oneshot::Sender<LogChunk>);

/// How long a request for a job's output waits for its node's agent.
const LOG_WAIT: Duration = Duration::from_secs(15);

/// What [`admit`] enforces.
#[derive(Debug, Clone, Copy)]
struct Limits {
    body_timeout: Duration,
    per_user: usize,
    users_total: usize,
}

type Submission = (Principal, SubmitRequest, tokio::sync::oneshot::Sender<Result<JobNo, ApiError>>);

/// Commits submissions in groups: takes every submission waiting, stores them in one
/// transaction, and only then answers each.
async fn group_commit(s: AppState, mut rx: tokio::sync::mpsc::UnboundedReceiver<Submission>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 4096 {
            match rx.try_recv() {
                Ok(x) => batch.push(x),
                Err(_) => break,
            }
        }
        // Large arrays are taken in steps, each its own hold of the state lock.
        let (large, batch): (Vec<Submission>, Vec<Submission>) =
            batch.into_iter().partition(|(_, req, _)| Core::ingests_in_steps(req));
        for sub in large {
            tokio::spawn(ingest(s.clone(), sub));
        }
        if batch.is_empty() {
            continue;
        }
        let (items, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|(p, r, tx)| ((p, r), tx)).unzip();
        let core = s.core.clone();
        let results = tokio::task::spawn_blocking(move || {
            let mut c = core.lock();
            let r = c.submit_batch(items, now_ms());
            (r, c.writes())
        })
        .await;
        s.dirty.notify_one();
        s.kick.notify_one();
        // Answered once durable, on a task of its own: the next group goes on meanwhile.
        let s = s.clone();
        tokio::spawn(async move {
            match results {
                Ok((results, seq)) => {
                    let settled = s.settle(seq).await;
                    for (tx, r) in replies.into_iter().zip(results) {
                        let r = match &settled {
                            Ok(()) => r,
                            Err(e) => r.and_then(|_| Err(ApiError::Conflict(format!("submission not stored: {e}")))),
                        };
                        let _ = tx.send(r);
                    }
                }
                Err(e) => {
                    for tx in replies {
                        let _ = tx.send(Err(ApiError::Conflict(format!("submission not stored: {e}"))));
                    }
                }
            }
        });
    }
}

/// Takes a large array in steps (`state/ingest.rs`): its ids reserved, its rows stored
/// [`ARRAY_STEP`] at a time (each step durable before the next), then its elements given to the
/// scheduler as many at a time; answered after the last step. A step that fails takes the
/// array back whole.
async fn ingest(s: AppState, (who, req, reply): Submission) {
    let not_stored = |e: tokio::task::JoinError| ApiError::Conflict(format!("submission not stored: {e}"));
    let core = s.core.clone();
    let begun = tokio::task::spawn_blocking(move || core.lock().ingest_begin(&who, req, now_ms())).await;
    let mut ing = match begun.map_err(not_stored).and_then(|r| r) {
        Ok(ing) => ing,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let mut result: Result<(), ApiError> = Ok(());
    // Rows first, each step durable before the next (a commit stays small), then the joins.
    'steps: for joining in [false, true] {
        loop {
            let core = s.core.clone();
            let stepped = tokio::task::spawn_blocking(move || {
                let mut c = core.lock();
                let r = match joining {
                    false => c.ingest_store(&mut ing, ARRAY_STEP, now_ms()),
                    true => c.ingest_join(&mut ing, ARRAY_STEP, now_ms()),
                };
                (ing, r, c.writes())
            })
            .await;
            // A panic in a step loses the array's handle: the next load removes what it stored.
            let Ok((back, r, seq)) = stepped else {
                let _ = reply.send(Err(ApiError::Conflict("submission not stored: a step failed".into())));
                return;
            };
            ing = back;
            s.dirty.notify_one();
            if joining {
                s.kick.notify_one();
            }
            match r {
                Ok(done) => {
                    if let Err(e) = s.settle(seq).await {
                        result = Err(e);
                        break 'steps;
                    }
                    if done {
                        break;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break 'steps;
                }
            }
        }
    }
    match result {
        Ok(()) => {
            let _ = reply.send(Ok(ing.id()));
        }
        Err(e) => {
            let core = s.core.clone();
            let _ = tokio::task::spawn_blocking(move || core.lock().ingest_abort(&ing, now_ms())).await;
            s.dirty.notify_one();
            let _ = reply.send(Err(e));
        }
    }
}

/// Makes every state change durable in groups: whenever changes were made, one commit (one
/// disk sync) for all of them, then tells the waiting handlers how far it got.
async fn committer(s: AppState) {
    loop {
        s.dirty.notified().await;
        let core = s.core.clone();
        let done = tokio::task::spawn_blocking(move || {
            let mut c = core.lock();
            let upto = c.writes();
            (c.commit(), upto)
        })
        .await;
        let before = *s.durable.borrow();
        let upto = match done {
            Ok((Ok(n), _)) => n,
            Ok((Err(e), upto)) => {
                eprintln!(
                    "ordo server: group commit of changes {}..={upto} failed, nothing of it stored: {e}",
                    before + 1
                );
                lock(&s.lost).push((before, upto));
                upto
            }
            Err(e) => {
                eprintln!("ordo server: group commit: {e}");
                continue;
            }
        };
        s.durable.send_if_modified(|d| {
            let moved = upto > *d;
            *d = (*d).max(upto);
            moved
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AppState {
    pub(crate) fn core(&self) -> CoreGuard<'_> {
        self.core.lock()
    }

    /// The state lock (its figures: [`StateLock::longest_hold`]).
    pub fn state_lock(&self) -> &StateLock {
        &self.core
    }

    /// Records that `who`, a node's own agent, was heard from now (anything else is ignored:
    /// only a node's agent token proves that node alive).
    pub(crate) fn heard_from(&self, who: &Principal, node: &str) {
        if who.role == Role::Agent && who.user == node {
            lock(&self.seen).insert(node.to_string(), now_ms());
        }
    }

    pub(crate) fn reader(&self) -> &crate::usage::Reader {
        &self.reader
    }

    pub(crate) fn metrics_public(&self) -> bool {
        self.metrics_public
    }

    /// A state change that needs no scheduling pass (GPU activity): answered once what it
    /// wrote, if anything, is durable.
    pub(crate) async fn change_quiet<T>(
        &self,
        f: impl FnOnce(&mut Core) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let (r, seq, wrote) = {
            let mut c = self.core();
            let before = c.writes();
            let r = f(&mut c);
            (r, c.writes(), c.writes() != before)
        };
        if wrote {
            self.dirty.notify_one();
        }
        let r = r?;
        if wrote {
            self.settle(seq).await?;
        }
        Ok(r)
    }

    /// Runs a state change under the lock; returns its result once it is durable (the group
    /// commit that holds it has synced), or the commit's error.
    async fn change<T>(&self, f: impl FnOnce(&mut Core) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let (r, seq) = {
            let mut c = self.core();
            let r = f(&mut c);
            (r, c.writes())
        };
        self.dirty.notify_one();
        self.kick.notify_one();
        let r = r?;
        self.settle(seq).await?;
        Ok(r)
    }

    /// Waits until the first `seq` state changes are durable.
    async fn settle(&self, seq: u64) -> Result<(), ApiError> {
        let mut rx = self.durable.subscribe();
        rx.wait_for(|&d| d >= seq).await.map_err(|_| ApiError::Conflict("the server is shutting down".into()))?;
        if lock(&self.lost).iter().any(|&(after, upto)| seq > after && seq <= upto) {
            return Err(ApiError::Conflict(
                "not stored: the database commit failed (disk full or failing?); see the server's log".into(),
            ));
        }
        Ok(())
    }
}

/// The caller of a request, checked by [`Gate::check`]: a handler that takes it runs only for
/// a valid token.
#[derive(Debug)]
pub struct Auth(pub Principal);

impl axum::extract::FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, s: &AppState) -> Result<Self, ApiError> {
        if let Some(Admitted(p)) = parts.extensions.get::<Admitted>() {
            return Ok(Auth(p.clone()));
        }
        let peer = crate::listen::peer_of(&parts.extensions).map(|a| a.ip());
        s.gate.check(&parts.headers, peer, now_ms()).await.map(Auth)
    }
}

/// The caller [`admit`] checked, for [`Auth`].
#[derive(Debug, Clone)]
struct Admitted(Principal);

/// Requests in progress per caller, and users' requests in progress together.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    by: Mutex<std::collections::HashMap<(Role, String), usize>>,
    users: std::sync::atomic::AtomicUsize,
}

/// The routes an agent token may use.
const AGENT_PATHS: [&str; 7] = [
    "/v1/agent/register",
    "/v1/agent/poll",
    "/v1/agent/report",
    "/v1/agent/activity",
    "/v1/agent/logs",
    "/v1/whoami",
    "/v1/health",
];

/// Most requests one node's agent may have in progress at once (a long poll, reports, GPU
/// activity, a registration).
const AGENT_IN_FLIGHT: usize = 16;

/// A request counted in [`InFlight`] until it is answered.
struct InFlightPermit {
    s: AppState,
    key: (Role, String),
}

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        let mut by = lock(&self.s.inflight.by);
        if let Some(n) = by.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.key);
            }
        }
        if self.key.0 != Role::Agent {
            self.s.inflight.users.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl AppState {
    /// Counts a request of `who` in progress, or refuses it (429) past its limit: its own
    /// (`max_requests_per_user`, 16 for an agent), or, for users and admins, three quarters of
    /// `max_connections` for all of them together (the rest is kept for agents).
    fn enter(&self, who: &Principal) -> Result<InFlightPermit, ApiError> {
        let key = (who.role, who.user.clone());
        let agent = who.role == Role::Agent;
        let limit = if agent { AGENT_IN_FLIGHT } else { self.limits.per_user };
        let mut by = lock(&self.inflight.by);
        let n = by.get(&key).copied().unwrap_or(0);
        if n >= limit {
            return Err(ApiError::TooManyRequests(format!(
                "{} has {n} requests in progress, the most one caller may have (max_requests_per_user); retry when one is answered",
                who.user
            )));
        }
        if !agent {
            let users = self.inflight.users.load(std::sync::atomic::Ordering::Relaxed);
            if users >= self.limits.users_total {
                return Err(ApiError::TooManyRequests(format!(
                    "the server has {users} users' requests in progress, the most it takes at once (three quarters of max_connections, the rest kept for node agents); retry shortly"
                )));
            }
            self.inflight.users.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        *by.entry(key.clone()).or_default() += 1;
        Ok(InFlightPermit { s: self.clone(), key })
    }
}

/// Admission of every request, before any handler or body: a request with a token is
/// authenticated from its headers first (401 / 429 before a byte of its body is read), counted
/// against its caller's requests in progress ([`AppState::enter`]), and its body must then arrive
/// within `body_timeout` (408) and within [`MAX_BODY_BYTES`] (413). A request without a token
/// gets no body read at all: the routes that take a body answer 401 without one.
async fn admit(State(s): State<AppState>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (mut parts, body) = req.into_parts();
    if !parts.headers.contains_key(axum::http::header::AUTHORIZATION) {
        return next.run(axum::extract::Request::from_parts(parts, axum::body::Body::empty())).await;
    }
    let peer = crate::listen::peer_of(&parts.extensions).map(|a| a.ip());
    let who = match s.gate.check(&parts.headers, peer, now_ms()).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    // A node's agent token speaks for that node's agent only: it may not read other users'
    // jobs, history, audit log or metrics (what a stolen node token would leak).
    if who.role == Role::Agent && !AGENT_PATHS.contains(&parts.uri.path()) {
        return ApiError::Forbidden(format!(
            "this is node {}'s agent token: it may only register, poll, report and send GPU activity for its node ({})",
            who.user,
            AGENT_PATHS.join(", ")
        ))
        .into_response();
    }
    let _permit = match s.enter(&who) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let bytes = match tokio::time::timeout(s.limits.body_timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let text = format!("request body larger than {MAX_BODY_BYTES} bytes, or broken off: {e}");
            return (StatusCode::PAYLOAD_TOO_LARGE, Json(ErrorBody { error: text })).into_response();
        }
        Err(_) => {
            let text = format!(
                "the request's body did not arrive within {} ms (body_timeout)",
                s.limits.body_timeout.as_millis()
            );
            return (StatusCode::REQUEST_TIMEOUT, Json(ErrorBody { error: text })).into_response();
        }
    };
    parts.extensions.insert(Admitted(who));
    next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("malformed JSON body: {e}")))
}

type R<T> = Result<Json<T>, ApiError>;

async fn submit(
    State(s): State<AppState>,
    Auth(who): Auth,
    body: Bytes,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let req: SubmitRequest = parse_body(&body)?;
    // An array's elements are counted for the answer (the state checks the spec again).
    let elements = match &req.array {
        Some(spec) => Some(
            crate::array::parse_array(spec)
                .map_err(|e| ApiError::BadRequest(format!("field `array`: {e}")))?
                .indices
                .len() as u32,
        ),
        None => None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    s.submits.send((who, req, tx)).map_err(|_| ApiError::Conflict("the server is shutting down".into()))?;
    let id = rx.await.map_err(|_| ApiError::Conflict("the server is shutting down".into()))??;
    Ok((StatusCode::CREATED, Json(SubmitResponse { id, elements })))
}

async fn queue(State(s): State<AppState>, _: Auth) -> R<QueueResponse> {
    Ok(Json(s.core().queue(now_ms())))
}

async fn job(State(s): State<AppState>, _: Auth, Path(id): Path<String>) -> R<JobInfo> {
    let r = parse_ref(&id)?;
    Ok(Json(s.core().job_ref(r, now_ms())?))
}

/// A job as a path names it: `123`, or `123_7` for element 7 of array 123.
fn parse_ref(s: &str) -> Result<JobRef, ApiError> {
    JobRef::parse(s).map_err(ApiError::BadRequest)
}

#[derive(Debug, serde::Serialize, Deserialize)]
struct CancelResponse {
    id: JobNo,
    state: JobState,
    /// How many jobs were cancelled (an array's elements that had not ended).
    cancelled: usize,
}

async fn cancel(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> R<CancelResponse> {
    let r = parse_ref(&id)?;
    let (state, cancelled) = s.change(|c| c.cancel_ref(&who, r, now_ms())).await?;
    wake(&s);
    let id = match r {
        JobRef::Job(id) | JobRef::Element(id, _) => id,
    };
    Ok(Json(CancelResponse { id, state, cancelled }))
}

async fn hold(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> R<JobInfo> {
    let r = parse_ref(&id)?;
    let j = s.change(|c| c.hold_ref(&who, r, now_ms())).await?;
    Ok(Json(j))
}

async fn release(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> R<JobInfo> {
    let r = parse_ref(&id)?;
    let j = s.change(|c| c.release_ref(&who, r, now_ms())).await?;
    Ok(Json(j))
}

async fn set_priority(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>, body: Bytes) -> R<JobInfo> {
    let r = parse_ref(&id)?;
    let b: PriorityBody = parse_body(&body)?;
    let j = s.change(|c| c.set_priority_ref(&who, r, b.priority, now_ms())).await?;
    Ok(Json(j))
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    user: Option<String>,
    limit: Option<usize>,
}

async fn history(State(s): State<AppState>, _: Auth, Query(q): Query<HistoryQuery>) -> R<Vec<JobInfo>> {
    Ok(Json(s.core().history(q.user.as_deref(), q.limit.unwrap_or(100).min(100_000))?))
}

async fn nodes(State(s): State<AppState>, _: Auth) -> R<Vec<NodeInfo>> {
    Ok(Json(s.core().nodes()))
}

async fn get_policy(State(s): State<AppState>, _: Auth) -> R<PolicyBody> {
    Ok(Json(PolicyBody { policy: s.core().policy().to_string() }))
}

async fn set_policy(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<PolicyChanged> {
    let b: PolicyChange = parse_body(&body)?;
    Ok(Json(s.change(|c| c.change_policy(&who, &b, now_ms())).await?))
}

#[derive(Debug, Deserialize)]
struct LogQuery {
    #[serde(default)]
    stream: LogStream,
    #[serde(default)]
    offset: u64,
    max: Option<u64>,
}

/// `GET /v1/jobs/{id}/logs`: a piece of a job's output, which its node's agent reads and sends
/// (the job's owner or an admin).
async fn job_logs(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> R<JobLogs> {
    let r = parse_ref(&id)?;
    let ask = s.next_ask.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let max = q.max.unwrap_or(MAX_LOG_CHUNK);
    let (node, ended, job) = s.core().ask_logs(&who, r, q.stream, q.offset, max, ask)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    lock(&s.log_waits).insert(ask, (node.clone(), tx));
    wake(&s);
    let answer = tokio::time::timeout(LOG_WAIT, rx).await;
    lock(&s.log_waits).remove(&ask);
    let chunk = match answer {
        Ok(Ok(c)) => c,
        _ => {
            s.core().forget_log_ask(&node, ask);
            return Err(ApiError::Conflict(format!(
                "node {node}'s agent did not send job {job}'s output within {} s",
                LOG_WAIT.as_secs()
            )));
        }
    };
    if let Some(e) = chunk.error {
        return Err(ApiError::NotFound(format!("job {job}'s output on node {node}: {e}")));
    }
    Ok(Json(JobLogs {
        job,
        node,
        path: chunk.path,
        stream: q.stream,
        data: chunk.data,
        offset: q.offset,
        next: chunk.next,
        size: chunk.size,
        ended,
    }))
}

/// `POST /v1/agent/logs`: an agent's answer to a request for a job's output (its own node's
/// requests only).
async fn agent_logs(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<serde_json::Value> {
    let c: LogChunk = parse_body(&body)?;
    s.heard_from(&who, &c.node);
    crate::state::speaks_for_node(&who, &c.node, "send job output")?;
    let waiting = lock(&s.log_waits).remove(&c.ask);
    match waiting {
        Some((node, tx)) if node == c.node => {
            let _ = tx.send(c);
        }
        Some((node, tx)) => {
            // Not this node's request: put it back for its own node.
            lock(&s.log_waits).insert(c.ask, (node, tx));
            return Err(ApiError::Forbidden(format!("request {} was not for node {}", c.ask, c.node)));
        }
        None => {}
    }
    Ok(Json(serde_json::json!({"ok": true})))
}

async fn node_maintenance(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
    body: Bytes,
) -> R<NodeInfo> {
    let b: NodeMaintRequest = parse_body(&body)?;
    let node = s.change(|c| c.node_maintenance(&who, &name, &b, now_ms())).await?;
    // A drain whose deadline has passed stops jobs: their agents hear of it at once.
    wake(&s);
    Ok(Json(node))
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    job: Option<JobNo>,
    since: Option<i64>,
    limit: Option<usize>,
}

async fn audit(State(s): State<AppState>, _: Auth, Query(q): Query<AuditQuery>) -> R<Vec<AuditRecord>> {
    Ok(Json(s.core().audit(q.job, q.since, q.limit.unwrap_or(1000).min(1_000_000))?))
}

async fn register(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<RegisterResponse> {
    let req: RegisterRequest = parse_body(&body)?;
    s.heard_from(&who, &req.node);
    let r = s.change(|c| c.register(&who, &req, now_ms())).await?;
    Ok(Json(r))
}

async fn poll(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<PollResponse> {
    let req: PollRequest = parse_body(&body)?;
    s.heard_from(&who, &req.node);
    let wait = Duration::from_millis(req.wait_ms.min(60_000));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let (resp, notify, seq) = {
            let mut c = s.core();
            let resp = c.poll(&who, &req, now_ms())?;
            (resp, c.node_notify(&req.node), c.writes())
        };
        // A requeue during reconciliation is a change the scheduler must see.
        s.dirty.notify_one();
        s.kick.notify_one();
        if !resp.start.is_empty()
            || !resp.kill.is_empty()
            || !resp.logs.is_empty()
            || tokio::time::Instant::now() >= deadline
        {
            // An agent starts a job only once its start is durable: a server that crashes
            // right after never finds a job running that its database says is waiting.
            s.settle(seq).await?;
            return Ok(Json(resp));
        }
        let _ = tokio::time::timeout_at(deadline, notify.notified()).await;
    }
}

async fn report(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<serde_json::Value> {
    let rep: EndReport = parse_body(&body)?;
    s.heard_from(&who, &rep.node);
    s.change(|c| c.report(&who, &rep, now_ms())).await?;
    Ok(Json(serde_json::json!({"ok": true})))
}

fn admin_only(who: &Principal, what: &str) -> Result<(), ApiError> {
    if who.role == Role::Admin {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!("only admins may {what}")))
    }
}

async fn list_tokens(State(s): State<AppState>, Auth(who): Auth) -> R<Vec<auth::TokenInfo>> {
    admin_only(&who, "list tokens")?;
    Ok(Json(auth::list_tokens(&s.gate.conn())?))
}

async fn create_token(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<TokenCreated> {
    admin_only(&who, "create tokens")?;
    let b: TokenCreate = parse_body(&body)?;
    let now = now_ms();
    let expires = match b.expires_in_ms {
        Some(ms) if ms <= 0 => return Err(ApiError::BadRequest("field `expires_in_ms`: must be positive".into())),
        Some(ms) => Some(now.saturating_add(ms)),
        None => None,
    };
    let token = auth::create_token_in(&s.gate.conn(), &b.user, b.role, expires, now).map_err(|e| match e {
        auth::AuthError::BadName(_) => ApiError::BadRequest(format!("field `user`: {e}")),
        e => ApiError::Conflict(e.to_string()),
    })?;
    let id = auth::split(&token).map(|(id, _)| id).unwrap_or(0);
    let actor = who.user.clone();
    s.change(|c| {
        c.record(
            &actor,
            "token",
            &serde_json::json!({"event": "create", "id": id, "user": b.user, "role": b.role, "expires": expires}),
            now,
        )
    })
    .await?;
    Ok(Json(TokenCreated { id, token, user: b.user, role: b.role, expires }))
}

async fn revoke_tokens(State(s): State<AppState>, Auth(who): Auth, body: Bytes) -> R<TokensRevoked> {
    admin_only(&who, "revoke tokens")?;
    let b: TokenRevoke = parse_body(&body)?;
    bounded("target", &b.target, 200)?;
    let now = now_ms();
    let revoked = auth::revoke(&s.gate.conn(), &b.target, now).map_err(|e| match e {
        auth::AuthError::NoSuchToken(_) => ApiError::NotFound(e.to_string()),
        e => ApiError::Conflict(e.to_string()),
    })?;
    s.gate.forget();
    let actor = who.user.clone();
    s.change(|c| {
        c.record(&actor, "token", &serde_json::json!({"event": "revoke", "target": b.target, "ids": revoked}), now)
    })
    .await?;
    Ok(Json(TokensRevoked { revoked }))
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true}))
}

fn wake(s: &AppState) {
    for n in s.core().take_wakes() {
        n.notify_one();
    }
}

/// Every route: method, path (in OpenAPI's `{param}` syntax) and handler. The router is built
/// from this table and a test checks it against docs/openapi.yaml.
pub fn routes() -> Vec<(&'static str, &'static str, MethodRouter<AppState>)> {
    vec![
        ("get", "/v1/health", get(health)),
        ("post", "/v1/jobs", post(submit)),
        ("get", "/v1/jobs", get(queue)),
        ("get", "/v1/jobs/{id}", get(job)),
        ("post", "/v1/jobs/{id}/cancel", post(cancel)),
        ("post", "/v1/jobs/{id}/hold", post(hold)),
        ("post", "/v1/jobs/{id}/release", post(release)),
        ("post", "/v1/jobs/{id}/priority", post(set_priority)),
        ("get", "/v1/history", get(history)),
        ("get", "/v1/nodes", get(nodes)),
        ("post", "/v1/nodes/{name}/maintenance", post(node_maintenance)),
        ("get", "/v1/jobs/{id}/logs", get(job_logs)),
        ("post", "/v1/agent/logs", post(agent_logs)),
        ("get", "/v1/policy", get(get_policy)),
        ("put", "/v1/policy", put(set_policy)),
        ("get", "/v1/audit", get(audit)),
        ("post", "/v1/agent/register", post(register)),
        ("post", "/v1/agent/poll", post(poll)),
        ("post", "/v1/agent/report", post(report)),
        ("get", "/v1/admin/tokens", get(list_tokens)),
        ("post", "/v1/admin/tokens", post(create_token)),
        ("post", "/v1/admin/tokens/revoke", post(revoke_tokens)),
        ("post", "/v1/agent/activity", post(crate::live::activity)),
        ("get", "/v1/gpus", get(crate::live::gpus)),
        ("get", "/v1/utilization", get(crate::live::utilization)),
        ("get", "/v1/usage", get(crate::live::usage)),
        ("get", "/v1/whoami", get(crate::live::whoami)),
        ("get", "/metrics", get(crate::live::metrics)),
        ("get", "/", get(crate::dashboard::index)),
        ("get", "/dashboard.js", get(crate::dashboard::script)),
        ("get", "/dashboard.css", get(crate::dashboard::style)),
    ]
}

/// The router over a state. Bodies are limited to [`MAX_BODY_BYTES`]; every error answer,
/// including those axum gives itself (a bad query string, a body too large, a wrong method), is
/// the API's `{"error": ...}`.
pub fn router(state: AppState) -> Router {
    let mut r: Router<AppState> = Router::new();
    for (_, path, mr) in routes() {
        r = r.route(path, mr);
    }
    r.fallback(|| async { ApiError::NotFound("no such route; see docs/openapi.yaml".into()) })
        .layer(axum::middleware::from_fn_with_state(state.clone(), admit))
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Turns an error answer that is not JSON (axum's own rejections are plain text) into
/// `{"error": TEXT}` with the same status.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let text = match axum::body::to_bytes(resp.into_body(), 64 * 1024).await {
        Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b).into_owned(),
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let text = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!("request body larger than {MAX_BODY_BYTES} bytes: {text}"),
        _ => text,
    };
    (status, Json(ErrorBody { error: text })).into_response()
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Bound {
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    state: AppState,
    heartbeat_ms: u64,
    submits: tokio::sync::mpsc::UnboundedReceiver<Submission>,
    opts: crate::listen::ListenOptions,
    /// Where allocated-but-idle notices go.
    webhook: Option<String>,
}

/// Opens the database, rebuilds the state and binds the listener.
pub async fn bind(cfg: ServerConfig) -> Result<Bound, ServerError> {
    let now = now_ms();
    let addr = cfg.listen;
    let heartbeat_ms = cfg.heartbeat_ms;
    let tls = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(c), Some(k)) => Some(crate::listen::tls_config(c, k).map_err(ServerError::Tls)?),
        _ => None,
    };
    let opts = crate::listen::ListenOptions {
        tls,
        header_timeout: Duration::from_millis(cfg.header_timeout_ms),
        max_connections: cfg.max_connections,
        max_per_addr: cfg.max_connections_per_addr,
    };
    // The port first: a server that cannot listen creates and changes nothing.
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServerError::Io { addr, source })?;
    let gate = Gate::new(crate::db::open(&cfg.db).map_err(ApiError::from)?);
    let metrics_public = cfg.metrics_public;
    let (body_timeout_ms, max_requests_per_user, max_connections) =
        (cfg.body_timeout_ms, cfg.max_requests_per_user, cfg.max_connections);
    let webhook = cfg.idle_webhook.clone();
    let db_path = cfg.db.clone();
    let core = Core::open(cfg, now)?;
    let reader = crate::usage::Reader::open(&db_path).map_err(ApiError::from)?;
    let addr = listener.local_addr().map_err(|source| ServerError::Io { addr, source })?;
    let (submits, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut core = core;
    core.set_group_commit(true)?;
    let (durable, _) = tokio::sync::watch::channel(core.writes());
    let state = AppState {
        core: Arc::new(StateLock::new(core)),
        kick: Arc::new(Notify::new()),
        dirty: Arc::new(Notify::new()),
        durable,
        lost: Arc::default(),
        gate,
        submits,
        reader,
        metrics_public,
        seen: Arc::default(),
        inflight: Arc::default(),
        limits: Limits {
            body_timeout: Duration::from_millis(body_timeout_ms),
            per_user: max_requests_per_user,
            users_total: (max_connections * 3 / 4).max(1),
        },
        log_waits: Arc::default(),
        next_ask: Arc::default(),
    };
    Ok(Bound { addr, listener, state, heartbeat_ms, submits: rx, opts, webhook })
}

impl Bound {
    /// Runs the scheduling loop and serves until the process ends.
    pub async fn serve(self) -> Result<(), ServerError> {
        tokio::spawn(group_commit(self.state.clone(), self.submits));
        tokio::spawn(committer(self.state.clone()));
        let s = self.state.clone();
        let webhook = self.webhook.clone();
        let tick = Duration::from_millis((self.heartbeat_ms / 2).max(10));
        tokio::spawn(async move {
            loop {
                // The pass runs on the blocking pool (it holds the state lock for up to a few
                // milliseconds at 100,000 pending jobs), not on a worker of the async runtime.
                let t0 = std::time::Instant::now();
                let core = s.core.clone();
                let seen = lock(&s.seen).clone();
                let (wake_at, notices) = tokio::task::spawn_blocking(move || {
                    // What dependencies released, in steps, each its own hold of the lock, so
                    // that requests and agents' polls get their turns in between.
                    loop {
                        match core.lock().drain_backlog(now_ms(), crate::state::BACKLOG_STEP) {
                            Ok(0) => break,
                            Ok(_) => std::thread::sleep(Duration::from_micros(200)),
                            Err(e) => {
                                eprintln!("ordo server: dependencies: {e}");
                                break;
                            }
                        }
                    }
                    let now = now_ms();
                    // Three holds of the lock, so that requests and polls get turns between them.
                    if let Err(e) = core.lock().check_nodes_seen(now, &seen) {
                        eprintln!("ordo server: node check: {e}");
                    }
                    // GPU activity series and allocated-but-idle notices (every 10 s).
                    let mut notices = core.lock().activity_tick(now).unwrap_or_else(|e| {
                        eprintln!("ordo server: GPU activity: {e}");
                        vec![]
                    });
                    // Jobs idle past the reclaim rule's grace: cancelled or requeued.
                    notices.extend(core.lock().reclaim_tick(now).unwrap_or_else(|e| {
                        eprintln!("ordo server: reclaim: {e}");
                        vec![]
                    }));
                    let mut c = core.lock();
                    let w = match c.timed_pass(now) {
                        Ok(w) => w,
                        Err(e) => {
                            eprintln!("ordo server: scheduling pass: {e}");
                            None
                        }
                    };
                    (w, notices)
                })
                .await
                .unwrap_or((None, vec![]));
                if let Some(url) = &webhook {
                    crate::notify::send(url.clone(), notices);
                }
                s.dirty.notify_one();
                wake(&s);
                // Changes arriving meanwhile are taken together by the next pass: passes take
                // at most about half of the time however fast changes come.
                tokio::time::sleep(t0.elapsed().max(Duration::from_millis(1))).await;
                let mut sleep = tick;
                if let Some(t) = wake_at {
                    sleep = sleep.min(Duration::from_millis((t - now_ms()).max(1) as u64));
                }
                let _ = tokio::time::timeout(sleep, s.kick.notified()).await;
            }
        });
        let addr = self.addr;
        crate::listen::serve(self.listener, router(self.state), self.opts)
            .await
            .map_err(|source| ServerError::Io { addr, source })
    }

    /// The URL clients use: `https://` when the server has a certificate.
    pub fn url(&self) -> String {
        format!("{}://{}", if self.opts.tls.is_some() { "https" } else { "http" }, self.addr)
    }
}

/// Runs a server on a multi-threaded runtime until the process ends; `ready` is called with
/// the server's URL (`http://ADDR` or `https://ADDR`) once it accepts connections.
pub fn run(cfg: ServerConfig, ready: impl FnOnce(String)) -> Result<(), ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| ServerError::Io { addr: cfg.listen, source })?;
    rt.block_on(async move {
        let b = bind(cfg).await?;
        ready(b.url());
        let core = b.state.core.clone();
        tokio::select! {
            r = b.serve() => r,
            () = stop_signal() => {
                // The last group of changes committed and the write-ahead log folded in, then
                // the process ends with the state lock held: nothing changes after the commit.
                let _ = tokio::task::spawn_blocking(move || {
                    let mut c = core.lock();
                    match c.stop() {
                        Ok(true) => eprintln!("ordo server: stopped; every change is in the database file"),
                        Ok(false) => eprintln!("ordo server: stopped; every change committed (part of the write-ahead log kept: a reader held it)"),
                        Err(e) => eprintln!("ordo server: stopping: {e}"),
                    }
                    std::process::exit(0);
                })
                .await;
                Ok(())
            }
        }
    })
}

/// Completes on SIGINT or SIGTERM (what `systemctl stop` sends, and Kubernetes to a pod it
/// stops; `ordo kube schedule` waits on it too).
pub async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
