//! Allocated-but-idle notices to the configured webhook (`idle_webhook`): a JSON POST per flagged
//! job, sent off the state lock on a thread of its own, retried a few times, failures logged.

use std::time::Duration;

/// How many times a notice is tried.
const TRIES: u32 = 3;

/// The words of a notice, for chat webhooks (Slack and Mattermost show a `text` field).
pub fn text(n: &serde_json::Value) -> String {
    let mins = n["idle_for_ms"].as_i64().unwrap_or(0) / 60_000;
    // A multi-node job's every rank: `gpu1 (8), gpu2 (4)`.
    let on = match n["ranks"].as_array() {
        Some(ranks) => ranks
            .iter()
            .map(|r| format!("{} ({})", r["node"].as_str().unwrap_or("?"), r["gpu_ids"].as_array().map_or(0, Vec::len)))
            .collect::<Vec<_>>()
            .join(", "),
        None => n["node"].as_str().unwrap_or("?").to_string(),
    };
    format!(
        "ordo: job {} ({}) of {} holds {} GPU(s) on {} but kept them under {}% busy for {} min (mean {}%)",
        n["job"],
        n["name"].as_str().unwrap_or("?"),
        n["user"].as_str().unwrap_or("?"),
        n["gpus"],
        on,
        n["threshold_pct"],
        mins,
        n["busy_pct"]
    )
}

/// Sends each notice to `url` on a background thread: the notice's fields (`event`, `job`,
/// `user`, `name`, `node`, `gpu_ids`, `nodes`, for a multi-node job `ranks`, `gpus`, `busy_pct`,
/// `threshold_pct`, `idle_since`, `idle_for_ms`, `idle_after_ms`, `time`) plus `text`.
pub fn send(url: String, notices: Vec<serde_json::Value>) {
    if notices.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        let agent: ureq::Agent = config.into();
        for mut n in notices {
            n["text"] = serde_json::Value::String(text(&n));
            let mut last = String::new();
            for attempt in 0..TRIES {
                match agent.post(&url).send_json(&n) {
                    Ok(r) if r.status().is_success() => {
                        last.clear();
                        break;
                    }
                    Ok(r) => last = format!("answered {}", r.status()),
                    Err(e) => last = e.to_string(),
                }
                std::thread::sleep(Duration::from_millis(500 << attempt));
            }
            if !last.is_empty() {
                eprintln!("ordo server: idle_webhook: notice for job {} not delivered: {last}", n["job"]);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn notice_words() {
        let n = serde_json::json!({"job": 12, "name": "train", "user": "alice", "gpus": 2, "node": "gpu1",
                                   "threshold_pct": 5.0, "idle_for_ms": 1_860_000, "busy_pct": 0.8});
        assert_eq!(
            super::text(&n),
            "ordo: job 12 (train) of alice holds 2 GPU(s) on gpu1 but kept them under 5.0% busy for 31 min (mean 0.8%)"
        );
        let n = serde_json::json!({"job": 13, "name": "big", "user": "bob", "gpus": 12, "node": "gpu1",
                                   "ranks": [{"node": "gpu1", "gpu_ids": [0, 1, 2, 3, 4, 5, 6, 7]},
                                             {"node": "gpu2", "gpu_ids": [0, 1, 2, 3]}],
                                   "threshold_pct": 5.0, "idle_for_ms": 1_860_000, "busy_pct": 0.8});
        assert_eq!(
            super::text(&n),
            "ordo: job 13 (big) of bob holds 12 GPU(s) on gpu1 (8), gpu2 (4) but kept them under 5.0% busy for 31 min (mean 0.8%)"
        );
    }
}
