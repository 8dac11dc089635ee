//! The providers' batch APIs as ordo uses them: OpenAI (Files API + `/v1/batches`) and
//! Anthropic (Message Batches), each batch read into one normalized [`Remote`] view.

pub mod anthropic;
pub mod openai;

use crate::error::BatchError;
use crate::http::{Api, Outcome};
use crate::state::Counts;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A provider with a batch API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// OpenAI (and servers that copy its batch API): upload a JSONL file, create a batch.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Message Batches: the requests go in the JSON body.
    Anthropic,
}

impl Provider {
    /// Its public API endpoint.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// Where its batches live.
    pub fn batches_path(self) -> &'static str {
        match self {
            Provider::OpenAi => "/v1/batches",
            Provider::Anthropic => "/v1/messages/batches",
        }
    }

    /// Read one of its batch objects.
    pub fn parse_batch(self, v: &Value) -> Option<Remote> {
        match self {
            Provider::OpenAi => openai::parse_batch(v),
            Provider::Anthropic => anthropic::parse_batch(v),
        }
    }

    /// The environment variable its SDKs read the key from (after `ORDO_API_KEY`).
    pub fn key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            _ => Err(format!("expected openai or anthropic, found {s:?}")),
        }
    }
}

/// One batch as the provider last described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The provider's id.
    pub id: String,
    /// The provider's status word.
    pub status: String,
    /// Whether that status is final.
    pub ended: bool,
    /// Request counts.
    pub counts: Counts,
    /// OpenAI: file of successful outputs.
    pub output_file_id: Option<String>,
    /// OpenAI: file of failed requests.
    pub error_file_id: Option<String>,
    /// Creation time (Unix seconds).
    pub created_at: i64,
    /// OpenAI: ordo's content key from the batch's metadata.
    pub key: Option<String>,
    /// A reason the provider gave for a failed batch (OpenAI `errors`).
    pub message: Option<String>,
}

fn unexpected(what: &str, v: &Value) -> BatchError {
    let s = v.to_string();
    BatchError::Http {
        what: what.to_string(),
        status: None,
        message: format!("unexpected answer: {}", &s[..s.len().min(300)]),
    }
}

fn batch_of(p: Provider, what: &str, v: &Value) -> Result<Remote, BatchError> {
    p.parse_batch(v).ok_or_else(|| unexpected(what, v))
}

/// Create a batch from `body`; `Ok(Err(why))` when the outcome is unknown (look for it before
/// trying again).
pub fn create(api: &Api, body: &Value) -> Result<Result<Remote, String>, BatchError> {
    let path = api.provider().batches_path();
    match api.post_create(path, body)? {
        Outcome::Done(v) => Ok(Ok(batch_of(api.provider(), &format!("POST {path}"), &v)?)),
        Outcome::Unknown(m) => Ok(Err(m)),
    }
}

/// The batch as it is now.
pub fn retrieve(api: &Api, id: &str) -> Result<Remote, BatchError> {
    let path = format!("{}/{id}", api.provider().batches_path());
    let v = api.get(&path, &[])?;
    batch_of(api.provider(), &format!("GET {path}"), &v)
}

/// Ask the provider to cancel the batch.
pub fn cancel(api: &Api, id: &str) -> Result<Remote, BatchError> {
    let path = format!("{}/{id}/cancel", api.provider().batches_path());
    let v = api.post_repeatable(&path, &json!({}))?;
    batch_of(api.provider(), &format!("POST {path}"), &v)
}

/// Walk a newest-first list (`GET path`, `limit` per page, the cursor in `after_param`), calling
/// `visit` on each item until it says stop, a page's oldest item (`created_at` in Unix seconds
/// read by `created`) is before `since - CLOCK_SLACK_S`, or the list ends.
pub(crate) fn walk(
    api: &Api,
    path: &str,
    query: &[(&str, String)],
    after_param: &str,
    since: i64,
    created: impl Fn(&Value) -> i64,
    mut visit: impl FnMut(&Value) -> bool,
) -> Result<(), BatchError> {
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut q = query.to_vec();
        if let Some(a) = &after {
            q.push((after_param, a.clone()));
        }
        let page = api.get(path, &q)?;
        let data = page["data"].as_array().ok_or_else(|| unexpected(&format!("GET {path}"), &page))?;
        let mut oldest = i64::MAX;
        for item in data {
            oldest = oldest.min(created(item));
            if !visit(item) {
                return Ok(());
            }
        }
        after = data.last().and_then(|b| b["id"].as_str()).map(str::to_string);
        if !page["has_more"].as_bool().unwrap_or(false) || after.is_none() || oldest < since - CLOCK_SLACK_S {
            return Ok(());
        }
    }
    Ok(())
}

/// Most list pages read while looking for a batch or file that may already exist.
pub(crate) const MAX_PAGES: usize = 1000;
/// Seconds of clock difference allowed between this machine and the provider.
pub(crate) const CLOCK_SLACK_S: i64 = 600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [Provider::OpenAi, Provider::Anthropic] {
            assert_eq!(p.name().parse::<Provider>(), Ok(p));
            assert_eq!(serde_json::to_value(p).expect("json"), serde_json::json!(p.name()));
        }
        assert!("gemini".parse::<Provider>().is_err());
    }
}
