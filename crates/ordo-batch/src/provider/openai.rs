//! OpenAI's batch API: upload a JSONL file (`POST /v1/files`, `purpose=batch`), create a batch
//! (`POST /v1/batches`) carrying ordo's content key in its metadata, poll, cancel, download.

use super::{walk, Remote};
use crate::error::BatchError;
use crate::http::{Api, Outcome};
use crate::state::Counts;
use serde_json::{json, Value};
use std::path::Path;

/// Statuses after which nothing changes.
const FINAL: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// Read a batch object.
pub fn parse_batch(v: &Value) -> Option<Remote> {
    let id = v["id"].as_str()?.to_string();
    let status = v["status"].as_str()?.to_string();
    let rc = &v["request_counts"];
    let total = rc["total"].as_u64().unwrap_or(0);
    let succeeded = rc["completed"].as_u64().unwrap_or(0);
    let failed = rc["failed"].as_u64().unwrap_or(0);
    let ended = FINAL.contains(&status.as_str());
    let processing = if ended { 0 } else { total.saturating_sub(succeeded + failed) };
    let message = v["errors"]["data"].as_array().and_then(|d| d.first()).map(|e| {
        let line = e["line"].as_u64().map(|l| format!(" (line {l})")).unwrap_or_default();
        format!("{}{line}", e["message"].as_str().unwrap_or("error"))
    });
    Some(Remote {
        id,
        status,
        ended,
        counts: Counts { total, succeeded, failed, expired: 0, canceled: 0, processing },
        output_file_id: v["output_file_id"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
        error_file_id: v["error_file_id"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
        created_at: v["created_at"].as_i64().unwrap_or(0),
        key: v["metadata"]["ordo_key"].as_str().map(str::to_string),
        message,
    })
}

/// The id of an uploaded batch file named `filename` of `bytes` bytes, uploaded since
/// `since` (Unix seconds), if there is one: an upload whose answer was lost.
pub fn find_file(api: &Api, filename: &str, bytes: u64, since: i64) -> Result<Option<String>, BatchError> {
    let q = [("purpose", "batch".to_string()), ("limit", "10000".to_string()), ("order", "desc".to_string())];
    let mut found = None;
    walk(
        api,
        "/v1/files",
        &q,
        "after",
        since,
        |f| f["created_at"].as_i64().unwrap_or(i64::MAX),
        |f| {
            if f["filename"].as_str() == Some(filename) && f["bytes"].as_u64() == Some(bytes) {
                found = f["id"].as_str().map(str::to_string);
            }
            found.is_none()
        },
    )?;
    Ok(found)
}

/// Upload a batch file; `Ok(Err(why))` when the outcome is unknown (look with [`find_file`]
/// before trying again).
pub fn upload(api: &Api, filename: &str, bytes: &[u8]) -> Result<Result<String, String>, BatchError> {
    match api.upload("/v1/files", filename, bytes)? {
        Outcome::Done(v) => match v["id"].as_str() {
            Some(id) => Ok(Ok(id.to_string())),
            None => Err(super::unexpected("POST /v1/files", &v)),
        },
        Outcome::Unknown(m) => Ok(Err(m)),
    }
}

/// The batch created since `since` whose metadata carries `key`, if any.
pub fn find_batch(api: &Api, key: &str, since: i64) -> Result<Option<Remote>, BatchError> {
    let mut found = None;
    walk(
        api,
        "/v1/batches",
        &[("limit", "100".to_string())],
        "after",
        since,
        |b| b["created_at"].as_i64().unwrap_or(0),
        |b| {
            if let Some(r) = parse_batch(b).filter(|r| r.key.as_deref() == Some(key)) {
                found = Some(r);
            }
            found.is_none()
        },
    )?;
    Ok(found)
}

/// Create a batch over `file_id`, with ordo's content key and part name in its metadata;
/// `Ok(Err(why))` when the outcome is unknown (look with [`find_batch`] before trying again).
pub fn create(
    api: &Api,
    file_id: &str,
    endpoint: &str,
    key: &str,
    part: &str,
) -> Result<Result<Remote, String>, BatchError> {
    let body = json!({
        "input_file_id": file_id,
        "endpoint": endpoint,
        "completion_window": "24h",
        "metadata": {"ordo_key": key, "ordo_part": part},
    });
    super::create(api, &body)
}

/// Download a file's content to `dest` (atomically).
pub fn download(api: &Api, file_id: &str, dest: &Path) -> Result<u64, BatchError> {
    api.download(&format!("/v1/files/{file_id}/content"), dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_objects_are_read() {
        let v = json!({"id": "batch_1", "object": "batch", "status": "in_progress", "created_at": 1700000000,
            "request_counts": {"total": 10, "completed": 3, "failed": 1}, "output_file_id": null,
            "metadata": {"ordo_key": "k1"}});
        let r = parse_batch(&v).expect("batch");
        assert_eq!((r.ended, r.counts.processing, r.key.as_deref()), (false, 6, Some("k1")));
        let v = json!({"id": "batch_2", "status": "failed", "errors": {"object": "list",
            "data": [{"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.", "line": 2}]}});
        let r = parse_batch(&v).expect("batch");
        assert!(r.ended);
        assert_eq!(r.message.as_deref(), Some("This line is not parseable as valid JSON. (line 2)"));
        assert!(parse_batch(&json!({"status": "completed"})).is_none());
    }
}
