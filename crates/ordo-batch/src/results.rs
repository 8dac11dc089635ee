//! Downloaded batch results merged into one output: every request of the input once, in input
//! order, in OpenAI's batch-output shape, the latest success winning over any failure.

use crate::error::BatchError;
use crate::provider::Provider;
use crate::source::Source;
use crate::state::{results_dir, State};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One result line, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// The request's id.
    pub custom_id: String,
    /// Answered with 2xx.
    pub ok: bool,
    /// `{"id", "custom_id", "response": {"status_code", "request_id", "body"} | null, "error": {"code", "message"} | null}`.
    pub line: Value,
}

fn error_line(id: &Value, custom_id: &str, code: &str, message: &str) -> Value {
    json!({"id": id, "custom_id": custom_id, "response": null, "error": {"code": code, "message": message}})
}

/// Read one line of a provider's result file. OpenAI output and error files are already in
/// the batch-output shape (a line is a success when it has no `error` and a 2xx status);
/// Anthropic's `{"custom_id", "result": {"type": succeeded|errored|canceled|expired}}` lines are
/// converted: a success's `message` becomes the response body, the others become errors with
/// codes `batch_expired`, `batch_cancelled` or the provider's error type.
pub fn normalize(provider: Provider, line: &[u8]) -> Result<Normalized, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let custom_id = v["custom_id"].as_str().ok_or("field `custom_id`: missing or not a string")?.to_string();
    match provider {
        Provider::OpenAi => {
            let status = v["response"]["status_code"].as_u64();
            let has_error = !v["error"].is_null();
            if v.get("response").is_none() && !has_error {
                return Err("neither `response` nor `error`".into());
            }
            let ok = !has_error && status.is_some_and(|s| (200..300).contains(&s));
            Ok(Normalized { custom_id, ok, line: v })
        }
        Provider::Anthropic => {
            let r = &v["result"];
            let id = Value::Null;
            let (ok, line) = match r["type"].as_str() {
                Some("succeeded") => (
                    true,
                    json!({"id": id, "custom_id": custom_id,
                           "response": {"status_code": 200, "request_id": null, "body": r["message"]}, "error": null}),
                ),
                Some("errored") => {
                    let e = &r["error"]["error"];
                    let code = e["type"].as_str().unwrap_or("error");
                    let msg = e["message"].as_str().unwrap_or("the provider gave no message");
                    (false, error_line(&id, &custom_id, code, msg))
                }
                Some("expired") => {
                    (false, error_line(&id, &custom_id, "batch_expired", "not processed before the batch expired"))
                }
                Some("canceled") => {
                    (false, error_line(&id, &custom_id, "batch_cancelled", "not processed: the batch was cancelled"))
                }
                _ => return Err("field `result.type`: expected succeeded, errored, canceled or expired".into()),
            };
            Ok(Normalized { custom_id, ok, line })
        }
    }
}

/// A request that has no successful answer.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// Its id.
    pub custom_id: String,
    /// Error code (`batch_expired`, `batch_cancelled`, `batch_failed`, `http_400`, `no_result`,
    /// or the provider's own).
    pub code: String,
    /// What the provider said.
    pub message: String,
}

/// What a merge found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Merged {
    /// Requests in the input.
    pub requests: usize,
    /// With a successful answer.
    pub succeeded: usize,
    /// Without one, in a batch that has ended (resubmittable with `--retry-failed`).
    pub failed: Vec<Failure>,
    /// Requests whose batch has not ended (or not been fetched) yet.
    pub pending: Vec<String>,
    /// Input positions of the failed requests.
    #[serde(skip)]
    pub failed_rows: Vec<usize>,
    /// Lines written to the output.
    pub written: usize,
}

#[derive(Clone, Copy)]
struct Pick {
    file: usize,
    offset: u64,
    len: usize,
    ok: bool,
    attempt: u32,
}

fn failure_of(custom_id: &str, line: &Value) -> Failure {
    let (code, message) = if line["error"].is_null() {
        let status = line["response"]["status_code"].as_u64().unwrap_or(0);
        let msg = line["response"]["body"]["error"]["message"].as_str().unwrap_or("").to_string();
        (format!("http_{status}"), msg)
    } else {
        (
            line["error"]["code"].as_str().unwrap_or("error").to_string(),
            line["error"]["message"].as_str().unwrap_or("").to_string(),
        )
    };
    Failure { custom_id: custom_id.to_string(), code, message }
}

/// Merge every fetched part's results. With `out`, write the output (atomically): one line per
/// request that has a result, in input order; requests still pending are left out.
pub fn merge(state: &State, state_path: &Path, source: &Source, out: Option<&Path>) -> Result<Merged, BatchError> {
    let dir = results_dir(state_path);
    let index: HashMap<&str, usize> = (0..source.len()).map(|r| (source.request(r).custom_id.as_str(), r)).collect();
    let mut picks: Vec<Option<Pick>> = vec![None; source.len()];
    let mut files: Vec<PathBuf> = Vec::new();
    // Whether every part holding a request has finished, and why the last one ended (for
    // requests it returned no result for).
    let mut finished = vec![true; source.len()];
    let mut ended_as: Vec<&str> = vec!["no_result"; source.len()];
    for part in &state.parts {
        let done = part.fetched || part.cancelled_before_create;
        let code = match (part.cancelled_before_create, part.status.as_deref()) {
            (true, _) | (_, Some("cancelled" | "canceled")) => "batch_cancelled",
            (_, Some("expired")) => "batch_expired",
            (_, Some("failed")) => "batch_failed",
            _ => "no_result",
        };
        for &r in &part.rows {
            finished[r] &= done;
            ended_as[r] = code;
        }
    }
    let mut parts: Vec<&crate::state::Part> = state.parts.iter().filter(|p| p.fetched).collect();
    parts.sort_by_key(|p| p.attempt);
    for part in parts {
        let mine: std::collections::HashSet<usize> = part.rows.iter().copied().collect();
        for name in part.result_files() {
            let path = dir.join(&name);
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(BatchError::io(&path, e)),
            };
            let fi = files.len();
            files.push(path.clone());
            let mut rd = BufReader::new(f);
            let (mut offset, mut lineno, mut buf) = (0u64, 0usize, Vec::new());
            loop {
                buf.clear();
                let n = rd.read_until(b'\n', &mut buf).map_err(|e| BatchError::io(&path, e))?;
                if n == 0 {
                    break;
                }
                lineno += 1;
                let start = offset;
                offset += n as u64;
                let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let norm = normalize(state.provider, text)
                    .map_err(|m| BatchError::Invalid(format!("{}:{lineno}: {m}", path.display())))?;
                let Some(&row) = index.get(norm.custom_id.as_str()).filter(|r| mine.contains(r)) else {
                    return Err(BatchError::Invalid(format!(
                        "{}:{lineno}: custom_id {:?} is not a request of {} (batch {}): this batch holds other requests",
                        path.display(),
                        norm.custom_id,
                        part.name,
                        part.batch_id.as_deref().unwrap_or("?")
                    )));
                };
                let better = match picks[row] {
                    None => true,
                    Some(old) => {
                        (norm.ok && (!old.ok || part.attempt >= old.attempt))
                            || (!old.ok && part.attempt >= old.attempt)
                    }
                };
                if better {
                    picks[row] =
                        Some(Pick { file: fi, offset: start, len: text.len(), ok: norm.ok, attempt: part.attempt });
                }
            }
        }
    }
    let mut m = Merged { requests: source.len(), ..Merged::default() };
    let mut handles: Vec<Option<File>> = files.iter().map(|_| None).collect();
    let mut read_line = |p: &Pick| -> Result<Normalized, BatchError> {
        if handles[p.file].is_none() {
            handles[p.file] = Some(File::open(&files[p.file]).map_err(|e| BatchError::io(&files[p.file], e))?);
        }
        let mut buf = vec![0u8; p.len];
        if let Some(f) = handles[p.file].as_mut() {
            f.seek(SeekFrom::Start(p.offset))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(|e| BatchError::io(&files[p.file], e))?;
        }
        normalize(state.provider, &buf).map_err(|e| BatchError::Invalid(format!("{}: {e}", files[p.file].display())))
    };
    let mut body: Vec<u8> = Vec::new();
    for row in 0..source.len() {
        let id = &source.request(row).custom_id;
        let line = match &picks[row] {
            Some(p) => {
                let n = read_line(p)?;
                if n.ok {
                    m.succeeded += 1;
                } else if finished[row] {
                    m.failed.push(failure_of(id, &n.line));
                    m.failed_rows.push(row);
                } else {
                    m.pending.push(id.clone());
                }
                n.line
            }
            None if finished[row] => {
                let why = match ended_as[row] {
                    "batch_cancelled" => "not processed: its batch was cancelled",
                    "batch_expired" => "not processed before its batch expired",
                    "batch_failed" => "its batch failed (see `ordo batch status` for the provider's reason)",
                    _ => "the provider returned no result for this request",
                };
                let l = error_line(&Value::Null, id, ended_as[row], why);
                m.failed.push(failure_of(id, &l));
                m.failed_rows.push(row);
                l
            }
            None => {
                m.pending.push(id.clone());
                continue;
            }
        };
        if out.is_some() {
            serde_json::to_writer(&mut body, &line).map_err(|e| BatchError::Invalid(e.to_string()))?;
            body.push(b'\n');
            m.written += 1;
        }
    }
    if let Some(out) = out {
        crate::state::write_atomic_with(out, |f| f.write_all(&body))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_results_become_batch_output_lines() {
        let ok = br#"{"custom_id":"a-1","result":{"type":"succeeded","message":{"id":"msg_1","usage":{"input_tokens":10,"output_tokens":3}}}}"#;
        let n = normalize(Provider::Anthropic, ok).expect("valid");
        assert!(n.ok);
        assert_eq!(n.line["response"]["body"]["usage"]["input_tokens"], 10);
        let err = br#"{"custom_id":"a-2","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}}}"#;
        let n = normalize(Provider::Anthropic, err).expect("valid");
        assert!(!n.ok);
        assert_eq!(failure_of("a-2", &n.line).code, "invalid_request_error");
        let exp = br#"{"custom_id":"a-3","result":{"type":"expired"}}"#;
        assert_eq!(normalize(Provider::Anthropic, exp).expect("valid").line["error"]["code"], "batch_expired");
        assert!(normalize(Provider::Anthropic, br#"{"custom_id":"a","result":{"type":"odd"}}"#).is_err());
    }

    #[test]
    fn openai_error_lines_are_failures() {
        let l = br#"{"id":"batch_req_1","custom_id":"x","response":{"status_code":400,"request_id":"r","body":{"error":{"message":"bad"}}},"error":null}"#;
        let n = normalize(Provider::OpenAi, l).expect("valid");
        assert!(!n.ok);
        assert_eq!(failure_of("x", &n.line).code, "http_400");
        let l = br#"{"id":"batch_req_2","custom_id":"y","response":null,"error":{"code":"batch_expired","message":"late"}}"#;
        assert_eq!(failure_of("y", &normalize(Provider::OpenAi, l).expect("valid").line).code, "batch_expired");
        assert!(normalize(Provider::OpenAi, b"{}").is_err());
    }
}
