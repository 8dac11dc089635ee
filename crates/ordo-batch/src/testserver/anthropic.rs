//! Emulator of Anthropic's Message Batches API (`/v1/messages/batches`: create, retrieve,
//! list, cancel, results), `in_progress -> ended` (or `canceling -> ended`), one step per
//! `polls_per_step` status polls, with errored, expired and canceled results.

use super::{anthropic_error, bytes_reply, json_reply, unix_now, EmuBatch, Shared, Step};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/messages/batches", post(create).get(super::list::<Anthropic>))
        .route("/v1/messages/batches/{id}", get(super::retrieve::<Anthropic>))
        .route("/v1/messages/batches/{id}/cancel", post(cancel))
        .route("/v1/messages/batches/{id}/results", get(results))
}

/// Anthropic's flavour of the shared routes.
pub(super) struct Anthropic;

impl super::Flavor for Anthropic {
    const NAME: &'static str = "anthropic";
    const AFTER: &'static str = "after_id";
    const MAX_PAGE: usize = 1000;
    fn gate(s: &Shared, headers: &HeaderMap) -> Option<Response> {
        gate(s, headers)
    }
    fn not_found(id: &str) -> Response {
        anthropic_error(StatusCode::NOT_FOUND, "not_found_error", &format!("no message batch {id}"))
    }
    fn step(s: &Shared, st: &mut super::Store, i: usize) {
        step(s, st, i)
    }
    fn batch_json(b: &EmuBatch) -> Value {
        batch_json(b)
    }
}

/// Message parameters the emulator accepts (those of the Messages API ordo may send, and a
/// few it does not).
const PARAMS: [&str; 12] = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "stream",
    "tools",
    "tool_choice",
];

fn gate(s: &Shared, headers: &HeaderMap) -> Option<Response> {
    if headers.get("anthropic-version").is_none() {
        return Some(anthropic_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "anthropic-version: header is required",
        ));
    }
    if let Some(key) = &s.cfg.api_key {
        if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(key.as_str()) {
            s.counts.lock().unwrap_or_else(|p| p.into_inner()).unauthorized += 1;
            return Some(anthropic_error(StatusCode::UNAUTHORIZED, "authentication_error", "invalid x-api-key"));
        }
    }
    s.injected_429()
}

fn rfc3339(t: i64) -> Value {
    jiff::Timestamp::from_second(t).map_or(Value::Null, |t| Value::String(t.to_string()))
}

fn batch_json(b: &EmuBatch) -> Value {
    let mut c = [0u64; 4]; // succeeded, errored, canceled, expired
    for (_, _, line) in &b.results {
        match line["result"]["type"].as_str() {
            Some("succeeded") => c[0] += 1,
            Some("errored") => c[1] += 1,
            Some("canceled") => c[2] += 1,
            _ => c[3] += 1,
        }
    }
    let processing = b.custom_ids.len() as u64 - c.iter().sum::<u64>();
    let t = |k: &str| b.times.get(k).map_or(Value::Null, |&t| rfc3339(t));
    json!({"id": b.id, "type": "message_batch", "processing_status": b.status,
        "request_counts": {"processing": processing, "succeeded": c[0], "errored": c[1], "canceled": c[2], "expired": c[3]},
        "ended_at": t("ended"), "created_at": rfc3339(b.created_at), "expires_at": rfc3339(b.created_at + 86400),
        "archived_at": null, "cancel_initiated_at": t("canceling"),
        "results_url": if b.status == "ended" { Value::String(format!("/v1/messages/batches/{}/results", b.id)) } else { Value::Null }})
}

/// Check one request of a create call as the API does; the reason when it is refused.
fn check(r: &Value, seen: &mut std::collections::HashSet<String>) -> Result<(String, Value), String> {
    let id = r["custom_id"].as_str().ok_or("custom_id: missing")?;
    if !crate::convert::valid_anthropic_id(id) {
        return Err(format!("custom_id: {id:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"));
    }
    if !seen.insert(id.to_string()) {
        return Err(format!("custom_id: {id:?} is used twice in this batch"));
    }
    let p = r["params"].as_object().ok_or("params: expected an object")?;
    if let Some(k) = p.keys().find(|k| !PARAMS.contains(&k.as_str())) {
        return Err(format!("params.{k}: Extra inputs are not permitted"));
    }
    if !p.get("model").is_some_and(Value::is_string) {
        return Err("params.model: Field required".into());
    }
    if p.get("max_tokens").and_then(Value::as_u64).is_none_or(|m| m < 1) {
        return Err("params.max_tokens: Field required (an integer >= 1)".into());
    }
    let msgs = p.get("messages").and_then(Value::as_array).ok_or("params.messages: Field required")?;
    if msgs.is_empty() {
        return Err("params.messages: at least one message is required".into());
    }
    for (i, m) in msgs.iter().enumerate() {
        if !matches!(m["role"].as_str(), Some("user" | "assistant")) {
            return Err(format!("params.messages.{i}.role: Input should be 'user' or 'assistant'"));
        }
        if !(m["content"].is_string() || m["content"].is_array()) {
            return Err(format!("params.messages.{i}.content: Field required"));
        }
    }
    if let Some(sys) = p.get("system") {
        if !(sys.is_string() || sys.is_array()) {
            return Err("params.system: Input should be a string or a list of text blocks".into());
        }
    }
    Ok((id.to_string(), Value::Object(p.clone())))
}

async fn create(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return anthropic_error(StatusCode::BAD_REQUEST, "invalid_request_error", "the body is not JSON");
    };
    let Some(list) = req["requests"].as_array().filter(|l| (1..=100_000).contains(&l.len())) else {
        return anthropic_error(StatusCode::BAD_REQUEST, "invalid_request_error", "requests: 1 to 100,000 requests");
    };
    let mut seen = std::collections::HashSet::new();
    let mut ids = Vec::new();
    let mut bodies = Vec::new();
    for (i, r) in list.iter().enumerate() {
        match check(r, &mut seen) {
            Ok((id, params)) => {
                ids.push(id);
                bodies.push(("/v1/messages".to_string(), params));
            }
            Err(e) => {
                return anthropic_error(StatusCode::BAD_REQUEST, "invalid_request_error", &format!("requests.{i}.{e}"))
            }
        }
    }
    let v = {
        let mut st = s.store();
        let expire = st.batches.len() < s.cfg.batch_expire_first;
        let b = EmuBatch {
            id: format!("msgbatch_{:06}", st.batches.len() + 1),
            provider: "anthropic",
            custom_ids: ids,
            metadata: Value::Null,
            status: "in_progress".into(),
            created_at: unix_now(),
            polls: 0,
            cancel: false,
            expire,
            endpoint: "/v1/messages".into(),
            bodies,
            results: Vec::new(),
            output_file_id: None,
            error_file_id: None,
            times: Default::default(),
            input_file_id: String::new(),
            errors: Vec::new(),
        };
        let v = batch_json(&b);
        st.batches.push(b);
        v
    };
    s.maybe_hold(Step::Create).await;
    json_reply(StatusCode::OK, v)
}

/// The Message a request gets: its text counted as an OpenAI chat request would be.
fn message(id: &str, params: &Value, k: usize) -> Value {
    let mut msgs: Vec<Value> = Vec::new();
    match &params["system"] {
        Value::String(t) => msgs.push(json!({"role": "system", "content": t})),
        Value::Array(blocks) => msgs.push(json!({"role": "system", "content": blocks})),
        _ => {}
    }
    msgs.extend(params["messages"].as_array().cloned().unwrap_or_default());
    let line = json!({"custom_id": "x", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": params["model"], "messages": msgs}})
    .to_string();
    let input = crate::input::parse_line(&line).map_or(0, |r| r.input_tokens);
    let out = params["max_tokens"].as_u64().unwrap_or(1).min(5);
    json!({"id": format!("msg_{k:06}"), "type": "message", "role": "assistant", "model": params["model"],
        "content": [{"type": "text", "text": format!("answer to {id}")}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
}

/// End batch `i`: the first `n` requests processed, the rest `rest` (`expired`, `canceled`).
fn end(s: &Shared, st: &mut super::Store, i: usize, n: usize, rest: &str) {
    let b = st.batches[i].clone();
    let mut results = Vec::new();
    for (k, (id, (_, params))) in b.custom_ids.iter().zip(&b.bodies).enumerate() {
        let result = if k >= n {
            json!({"type": rest})
        } else if !s.process(st, id) {
            json!({"type": "errored", "error": {"type": "error", "error": {"type": "api_error", "message": "injected failure"}}})
        } else {
            json!({"type": "succeeded", "message": message(id, params, k)})
        };
        let ok = result["type"] == "succeeded";
        results.push((id.clone(), ok, json!({"custom_id": id, "result": result})));
    }
    let b = &mut st.batches[i];
    b.results = results;
    b.status = "ended".into();
    b.times.insert("ended", unix_now());
}

fn step(s: &Shared, st: &mut super::Store, i: usize) {
    let b = &mut st.batches[i];
    b.polls += 1;
    // Two steps as OpenAI's four take: in progress for a while, then ended.
    if b.polls < 2 * s.cfg.polls_per_step || b.status == "ended" {
        return;
    }
    b.polls = 0;
    let n = b.custom_ids.len();
    match (b.status.as_str(), b.expire) {
        ("canceling", _) => end(s, st, i, 0, "canceled"),
        ("in_progress", true) => end(s, st, i, n / 2, "expired"),
        ("in_progress", false) => end(s, st, i, n, "expired"),
        _ => {}
    }
}

async fn cancel(State(s): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let v = {
        let mut st = s.store();
        let Some(b) = st.batches.iter_mut().find(|b| b.id == id && b.provider == "anthropic") else {
            return anthropic_error(StatusCode::NOT_FOUND, "not_found_error", &format!("no message batch {id}"));
        };
        if b.status == "in_progress" {
            b.status = "canceling".into();
            b.cancel = true;
            b.times.insert("canceling", unix_now());
        }
        batch_json(b)
    };
    s.maybe_hold(Step::Cancel).await;
    json_reply(StatusCode::OK, v)
}

async fn results(State(s): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let bytes = {
        let st = s.store();
        let Some(b) = st.batches.iter().find(|b| b.id == id && b.provider == "anthropic") else {
            return anthropic_error(StatusCode::NOT_FOUND, "not_found_error", &format!("no message batch {id}"));
        };
        if b.status != "ended" {
            return anthropic_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "results are available once the batch has ended",
            );
        }
        // Results come in no particular order: the emulator writes them last to first.
        let mut bytes = Vec::new();
        for (_, _, line) in b.results.iter().rev() {
            bytes.extend_from_slice(line.to_string().as_bytes());
            bytes.push(b'\n');
        }
        bytes
    };
    s.maybe_hold(Step::Download).await;
    bytes_reply(bytes, "application/binary")
}
