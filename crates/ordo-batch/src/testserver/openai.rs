//! Emulator of OpenAI's batch API: Files (`POST /v1/files` multipart with `purpose=batch`, list,
//! content) and Batches (create, retrieve, list, cancel), `validating -> in_progress ->
//! finalizing -> completed`, one step per status poll, with failures, expiry and cancellation.

use super::{bytes_reply, json_reply, openai_error, page, query, unix_now, EmuBatch, EmuFile, Shared, Step};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/files", post(upload).get(list_files))
        .route("/v1/files/{id}/content", get(content))
        .route("/v1/batches", post(create).get(super::list::<OpenAi>))
        .route("/v1/batches/{id}", get(super::retrieve::<OpenAi>))
        .route("/v1/batches/{id}/cancel", post(cancel))
}

/// OpenAI's flavour of the shared routes.
pub(super) struct OpenAi;

impl super::Flavor for OpenAi {
    const NAME: &'static str = "openai";
    const AFTER: &'static str = "after";
    const MAX_PAGE: usize = 100;
    fn gate(s: &Shared, headers: &HeaderMap) -> Option<Response> {
        gate(s, headers)
    }
    fn not_found(id: &str) -> Response {
        openai_error(StatusCode::NOT_FOUND, &format!("No such batch: {id}"))
    }
    fn step(s: &Shared, st: &mut super::Store, i: usize) {
        step(s, st, i)
    }
    fn batch_json(b: &EmuBatch) -> Value {
        batch_json(b)
    }
}

const ENDPOINTS: [&str; 4] = ["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"];

/// Key and injected-429 checks shared by every route.
fn gate(s: &Shared, headers: &HeaderMap) -> Option<Response> {
    if let Some(key) = &s.cfg.api_key {
        let want = format!("Bearer {key}");
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(want.as_str()) {
            s.counts.lock().unwrap_or_else(|p| p.into_inner()).unauthorized += 1;
            return Some(openai_error(StatusCode::UNAUTHORIZED, "Incorrect API key provided"));
        }
    }
    s.injected_429()
}

/// One part of a multipart/form-data body: (name, filename, content).
type FormPart = (String, Option<String>, Vec<u8>);

/// The parts of a multipart/form-data body.
fn multipart(headers: &HeaderMap, body: &[u8]) -> Result<Vec<FormPart>, String> {
    let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ct.starts_with("multipart/form-data") {
        return Err(format!("expected multipart/form-data, found {ct:?}"));
    }
    let boundary = ct
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .ok_or("no boundary in the content type")?
        .trim_matches('"');
    let delim = format!("--{boundary}").into_bytes();
    let find = |hay: &[u8], from: usize, needle: &[u8]| -> Option<usize> {
        hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
    };
    let mut parts = Vec::new();
    let mut pos = find(body, 0, &delim).ok_or("no opening boundary")? + delim.len();
    loop {
        if body.get(pos..pos + 2) == Some(b"--") {
            return Ok(parts);
        }
        pos += 2; // CRLF after the boundary
        let head_end = find(body, pos, b"\r\n\r\n").ok_or("a part without headers")?;
        let head = String::from_utf8_lossy(&body[pos..head_end]).into_owned();
        let start = head_end + 4;
        let mut close = delim.clone();
        close.splice(0..0, *b"\r\n");
        let end = find(body, start, &close).ok_or("a part without a closing boundary")?;
        let disp = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .ok_or("a part without Content-Disposition")?;
        let attr = |k: &str| {
            disp.split(';')
                .filter_map(|p| p.trim().strip_prefix(&format!("{k}=")))
                .next()
                .map(|v| v.trim_matches('"').to_string())
        };
        let name = attr("name").ok_or("a part without a name")?;
        parts.push((name, attr("filename"), body[start..end].to_vec()));
        pos = end + close.len();
    }
}

fn file_json(f: &EmuFile) -> Value {
    json!({"id": f.id, "object": "file", "bytes": f.bytes.len(), "created_at": f.created_at,
           "filename": f.filename, "purpose": f.purpose, "status": "processed"})
}

async fn upload(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let parts = match multipart(&headers, &body) {
        Ok(p) => p,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, &e),
    };
    let purpose = parts.iter().find(|p| p.0 == "purpose").map(|p| String::from_utf8_lossy(&p.2).into_owned());
    if purpose.as_deref() != Some("batch") {
        return openai_error(StatusCode::BAD_REQUEST, "purpose: expected \"batch\"");
    }
    let Some((_, Some(filename), bytes)) = parts.into_iter().find(|p| p.0 == "file") else {
        return openai_error(StatusCode::BAD_REQUEST, "file: missing (a part named file with a filename)");
    };
    let v = {
        let mut st = s.store();
        let f = EmuFile {
            id: format!("file-{:06}", st.files.len() + 1),
            filename,
            purpose: "batch".into(),
            bytes,
            created_at: unix_now(),
        };
        let v = file_json(&f);
        st.files.push(f);
        st.uploads += 1;
        v
    };
    s.maybe_hold(Step::Upload).await;
    json_reply(StatusCode::OK, v)
}

async fn list_files(State(s): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let q = query(&uri);
    let v = {
        let st = s.store();
        let mut items: Vec<(String, Value)> = st
            .files
            .iter()
            .filter(|f| q.get("purpose").is_none_or(|p| *p == f.purpose))
            .map(|f| (f.id.clone(), file_json(f)))
            .collect();
        if q.get("order").is_none_or(|o| o == "desc") {
            items.reverse();
        }
        page(items, &q, "after", 10_000)
    };
    s.maybe_hold(Step::List).await;
    json_reply(StatusCode::OK, v)
}

async fn content(State(s): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let bytes = s.store().files.iter().find(|f| f.id == id).map(|f| f.bytes.clone());
    let Some(bytes) = bytes else { return openai_error(StatusCode::NOT_FOUND, &format!("No such File object: {id}")) };
    s.maybe_hold(Step::Download).await;
    bytes_reply(bytes, "application/octet-stream")
}

fn batch_json(b: &EmuBatch) -> Value {
    let (mut done, mut failed) = (0, 0);
    for (_, ok, _) in &b.results {
        if *ok {
            done += 1;
        } else {
            failed += 1;
        }
    }
    let t = |k: &str| b.times.get(k).copied();
    json!({"id": b.id, "object": "batch", "endpoint": b.endpoint, "input_file_id": b.input_file_id,
        "completion_window": "24h", "status": b.status, "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
        "created_at": b.created_at, "in_progress_at": t("in_progress"), "expires_at": b.created_at + 86400,
        "finalizing_at": t("finalizing"), "completed_at": t("completed"), "failed_at": t("failed"),
        "expired_at": t("expired"), "cancelling_at": t("cancelling"), "cancelled_at": t("cancelled"),
        "errors": if b.errors.is_empty() { Value::Null } else { json!({"object": "list", "data": b.errors}) },
        "request_counts": {"total": b.custom_ids.len(), "completed": done, "failed": failed},
        "metadata": b.metadata})
}

async fn create(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return openai_error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let endpoint = req["endpoint"].as_str().unwrap_or("");
    if !ENDPOINTS.contains(&endpoint) {
        return openai_error(StatusCode::BAD_REQUEST, &format!("endpoint: {endpoint:?} is not supported"));
    }
    if req["completion_window"] != "24h" {
        return openai_error(StatusCode::BAD_REQUEST, "completion_window: only \"24h\" is supported");
    }
    let metadata = req.get("metadata").cloned().unwrap_or(Value::Null);
    if let Some(m) = metadata.as_object() {
        if m.len() > 16 || m.iter().any(|(k, v)| k.len() > 64 || v.as_str().is_none_or(|v| v.len() > 512)) {
            return openai_error(
                StatusCode::BAD_REQUEST,
                "metadata: at most 16 string values (keys <= 64, values <= 512 chars)",
            );
        }
    }
    let file_id = req["input_file_id"].as_str().unwrap_or("").to_string();
    let v = {
        let mut st = s.store();
        let Some(f) = st.files.iter().find(|f| f.id == file_id).cloned() else {
            return openai_error(StatusCode::BAD_REQUEST, &format!("input_file_id: no such file {file_id:?}"));
        };
        if f.purpose != "batch" {
            return openai_error(StatusCode::BAD_REQUEST, "input_file_id: the file's purpose is not batch");
        }
        // Lines are checked at the validating step, as OpenAI does (a bad file fails the batch).
        let mut ids = Vec::new();
        let mut bodies = Vec::new();
        let mut errors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, line) in f.bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let err = |code: &str, m: &str| json!({"code": code, "message": m, "line": i + 1, "param": null});
            match serde_json::from_slice::<Value>(line) {
                Ok(l) => {
                    let id = l["custom_id"].as_str().unwrap_or("").to_string();
                    if l["url"] != endpoint {
                        errors.push(err(
                            "mismatched_endpoint",
                            "The url of this request does not match the batch's endpoint.",
                        ));
                    } else if l["method"] != "POST" || !l["body"].is_object() || id.is_empty() {
                        errors.push(err("invalid_request", "Each line needs custom_id, method POST, url and body."));
                    } else if !seen.insert(id.clone()) {
                        errors.push(err("duplicate_custom_id", "The custom_id of this line is used already."));
                    } else {
                        ids.push(id);
                        bodies.push((endpoint.to_string(), l["body"].clone()));
                    }
                }
                Err(_) => errors.push(err("invalid_json_line", "This line is not parseable as valid JSON.")),
            }
        }
        let expire = st.batches.len() < s.cfg.batch_expire_first;
        let b = EmuBatch {
            id: format!("batch_{:06}", st.batches.len() + 1),
            provider: "openai",
            custom_ids: ids,
            metadata,
            status: "validating".into(),
            created_at: unix_now(),
            polls: 0,
            cancel: false,
            expire,
            endpoint: endpoint.to_string(),
            bodies,
            results: Vec::new(),
            output_file_id: None,
            error_file_id: None,
            times: Default::default(),
            input_file_id: file_id,
            errors,
        };
        let v = batch_json(&b);
        st.batches.push(b);
        v
    };
    s.maybe_hold(Step::Create).await;
    json_reply(StatusCode::OK, v)
}

/// Process the first `n` requests of batch `i` (the rest get `code` errors), then write its
/// output and error files.
fn finish(s: &Shared, st: &mut super::Store, i: usize, n: usize, code: &str) {
    let now = unix_now();
    let mut out = Vec::new();
    let mut errs = Vec::new();
    let b = st.batches[i].clone();
    let mut results = Vec::new();
    for (k, (id, (url, body))) in b.custom_ids.iter().zip(&b.bodies).enumerate() {
        let rid = format!("batch_req_{}_{k}", b.id);
        let line = if k >= n {
            json!({"id": rid, "custom_id": id, "response": null,
                   "error": {"code": code, "message": format!("This request was not executed ({code}).")}})
        } else if !s.process(st, id) {
            json!({"id": rid, "custom_id": id, "response": {"status_code": 500, "request_id": format!("req_{rid}"),
                   "body": {"error": {"message": "injected failure", "type": "server_error"}}}, "error": null})
        } else {
            let line = json!({"custom_id": id, "method": "POST", "url": url, "body": body}).to_string();
            match crate::input::parse_line(&line) {
                Ok(req) => {
                    json!({"id": rid, "custom_id": id, "response": {"status_code": 200, "request_id": format!("req_{rid}"),
                       "body": super::answer(&req, id, url, k as u64)}, "error": null})
                }
                Err(e) => {
                    json!({"id": rid, "custom_id": id, "response": {"status_code": 400, "request_id": format!("req_{rid}"),
                       "body": {"error": {"message": e, "type": "invalid_request_error"}}}, "error": null})
                }
            }
        };
        let ok = line["error"].is_null() && line["response"]["status_code"] == 200;
        let mut text = line.to_string().into_bytes();
        text.push(b'\n');
        if ok {
            out.extend_from_slice(&text);
        } else {
            errs.extend_from_slice(&text);
        }
        results.push((id.clone(), ok, line));
    }
    let mut file = |bytes: Vec<u8>, what: &str| -> Option<String> {
        if bytes.is_empty() {
            return None;
        }
        let id = format!("file-{:06}", st.files.len() + 1);
        st.files.push(EmuFile {
            id: id.clone(),
            filename: format!("{}_{what}.jsonl", b.id),
            purpose: "batch_output".into(),
            bytes,
            created_at: now,
        });
        Some(id)
    };
    let output = file(out, "output");
    let error = file(errs, "error");
    let b = &mut st.batches[i];
    b.results = results;
    b.output_file_id = output;
    b.error_file_id = error;
}

/// One status poll of batch `i`: after `polls_per_step` polls it moves on.
fn step(s: &Shared, st: &mut super::Store, i: usize) {
    let b = &mut st.batches[i];
    b.polls += 1;
    if b.polls < s.cfg.polls_per_step {
        return;
    }
    b.polls = 0;
    let now = unix_now();
    let next = match (b.status.as_str(), b.cancel) {
        ("validating", _) if !b.errors.is_empty() => "failed",
        ("validating", true) | ("in_progress", true) => "cancelling",
        ("validating", false) => "in_progress",
        ("in_progress", false) if b.expire => "expired",
        ("in_progress", false) => "finalizing",
        ("finalizing", _) => "completed",
        ("cancelling", _) => "cancelled",
        _ => return,
    };
    b.status = next.to_string();
    b.times.insert(next, now);
    let n = b.custom_ids.len();
    match next {
        "finalizing" => finish(s, st, i, n, "batch_expired"),
        "expired" => finish(s, st, i, n / 2, "batch_expired"),
        "cancelled" => finish(s, st, i, 0, "batch_cancelled"),
        _ => {}
    }
}

async fn cancel(State(s): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let v = {
        let mut st = s.store();
        let Some(b) = st.batches.iter_mut().find(|b| b.id == id && b.provider == "openai") else {
            return openai_error(StatusCode::NOT_FOUND, &format!("No such batch: {id}"));
        };
        match b.status.as_str() {
            "validating" | "in_progress" => {
                b.cancel = true;
                b.status = "cancelling".into();
                b.times.insert("cancelling", unix_now());
            }
            "cancelling" => {}
            other => {
                return openai_error(StatusCode::CONFLICT, &format!("Cannot cancel a batch with status '{other}'."));
            }
        }
        batch_json(b)
    };
    s.maybe_hold(Step::Cancel).await;
    json_reply(StatusCode::OK, v)
}
