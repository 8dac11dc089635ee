//! Anthropic's Message Batches API (`/v1/messages/batches`): create with the requests in the
//! body, poll, cancel, and download results from the documented results endpoint.
//!
//! A Message Batch carries no metadata, so a batch whose creation answer was lost is found by
//! what can be seen of it: created since the attempt began and holding the same number of
//! requests. Exactly one such batch is adopted; several are reported and none is created.

use super::{walk, Remote, CLOCK_SLACK_S};
use crate::error::BatchError;
use crate::http::Api;
use crate::state::Counts;
use serde_json::Value;
use std::path::Path;

/// Read a Message Batch object.
pub fn parse_batch(v: &Value) -> Option<Remote> {
    let id = v["id"].as_str()?.to_string();
    let status = v["processing_status"].as_str()?.to_string();
    let rc = &v["request_counts"];
    let n = |k: &str| rc[k].as_u64().unwrap_or(0);
    let counts = Counts {
        succeeded: n("succeeded"),
        failed: n("errored"),
        expired: n("expired"),
        canceled: n("canceled"),
        processing: n("processing"),
        total: n("succeeded") + n("errored") + n("expired") + n("canceled") + n("processing"),
    };
    let created_at =
        v["created_at"].as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()).map_or(0, |t| t.as_second());
    Some(Remote {
        ended: status == "ended",
        id,
        status,
        counts,
        output_file_id: None,
        error_file_id: None,
        created_at,
        key: None,
        message: None,
    })
}

/// Batches created since `since` (Unix seconds) with `total` requests whose ids are not in
/// `taken`: the candidates for a creation whose answer was lost.
pub fn candidates(api: &Api, total: u64, since: i64, taken: &[&str]) -> Result<Vec<Remote>, BatchError> {
    let mut out = Vec::new();
    let created = |b: &Value| parse_batch(b).map_or(0, |r| r.created_at);
    walk(api, "/v1/messages/batches", &[("limit", "100".to_string())], "after_id", since, created, |b| {
        if let Some(r) = parse_batch(b) {
            if r.created_at >= since - CLOCK_SLACK_S && r.counts.total == total && !taken.contains(&r.id.as_str()) {
                out.push(r);
            }
        }
        true
    })?;
    Ok(out)
}

/// Download an ended batch's results (JSONL, one `{"custom_id", "result"}` per request) to
/// `dest`. The documented results endpoint on the configured host is used rather than the
/// batch's `results_url`, so the key never goes to another host.
pub fn download(api: &Api, id: &str, dest: &Path) -> Result<u64, BatchError> {
    api.download(&format!("/v1/messages/batches/{id}/results"), dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_batches_are_read() {
        let v = json!({"id": "msgbatch_1", "type": "message_batch", "processing_status": "ended",
            "created_at": "2025-01-15T20:00:00Z", "ended_at": "2025-01-15T21:00:00Z",
            "request_counts": {"processing": 0, "succeeded": 7, "errored": 1, "canceled": 0, "expired": 2}});
        let r = parse_batch(&v).expect("batch");
        assert!(r.ended);
        assert_eq!(r.counts, Counts { total: 10, succeeded: 7, failed: 1, expired: 2, canceled: 0, processing: 0 });
        assert_eq!(r.created_at, 1736971200);
    }
}
