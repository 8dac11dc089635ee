//! [`SlurmRest`]: a Slurm cluster through slurmrestd (OpenAPI `v0.0.38` of Slurm 22.05, or a
//! later version path) with JWT authentication, over one kept-alive HTTP connection.

use crate::client::{Backend, Batch};
use crate::config::SlurmConfig;
use crate::error::{means_job_gone, means_unreachable, SlurmError};
use crate::job::{SlurmJob, SlurmNode};
use crate::json::{jobs_from_doc, parse_nodes};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A handle on a Slurm cluster through slurmrestd with JWT authentication.
pub struct SlurmRest {
    /// Base URL, e.g. `http://127.0.0.1:6820`.
    pub base: String,
    /// The user the token belongs to (`X-SLURM-USER-NAME`).
    pub user: String,
    /// The JWT (`X-SLURM-USER-TOKEN`), e.g. from `scontrol token`.
    token: String,
    /// OpenAPI version path segment (`v0.0.38` for Slurm 22.05, `v0.0.42` for 24.11).
    pub version: String,
    /// Longest time one request may take.
    pub timeout: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for SlurmRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmRest")
            .field("base", &self.base)
            .field("user", &self.user)
            .field("version", &self.version)
            .field("token", &"<hidden>")
            .finish()
    }
}

/// The largest response read (a queue of 100,000 jobs is about 300 MB in v0.0.38's layout).
const MAX_BODY: u64 = 1 << 30;

impl SlurmRest {
    /// A client for `base` with the given user and token, for OpenAPI `version`.
    pub fn new(base: &str, user: &str, token: &str, version: &str, timeout: Duration) -> Self {
        let agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into();
        SlurmRest {
            base: base.trim_end_matches('/').to_string(),
            user: user.to_string(),
            token: token.trim().trim_start_matches("SLURM_JWT=").to_string(),
            version: version.to_string(),
            timeout,
            agent,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/slurm/{}/{}", self.base, self.version, path)
    }

    /// One request; `Err` when slurmrestd or the controller did not answer, or the answer is
    /// not JSON; Slurm's own `errors` are returned for the caller to judge.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> Result<(u16, Value), SlurmError> {
        let url = self.url(path);
        let failed = |what: String| SlurmError::Failed {
            cmd: format!("{method} {url}"),
            status: "no answer".into(),
            stderr: format!("{what} (connection refused or timed out: slurmrestd or slurmctld down)"),
        };
        let sent = match body {
            None => self
                .agent
                .get(&url)
                .header("X-SLURM-USER-NAME", &self.user)
                .header("X-SLURM-USER-TOKEN", &self.token)
                .call(),
            Some(b) => self
                .agent
                .post(&url)
                .header("X-SLURM-USER-NAME", &self.user)
                .header("X-SLURM-USER-TOKEN", &self.token)
                .content_type("application/json")
                .send(b),
        };
        let mut resp = sent.map_err(|e| match e {
            ureq::Error::Timeout(_) => SlurmError::Timeout { cmd: format!("{method} {url}"), timeout: self.timeout },
            e => failed(e.to_string()),
        })?;
        let status = resp.status().as_u16();
        let bytes = resp.body_mut().with_config().limit(MAX_BODY).read_to_vec().map_err(|e| failed(e.to_string()))?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| SlurmError::Parse {
            source_name: url.clone(),
            location: format!("line {} column {}", e.line(), e.column()),
            what: format!("HTTP {status}, not JSON: {e}"),
        })?;
        Ok((status, doc))
    }

    /// The first of Slurm's `errors` in a document, in words.
    fn first_error(doc: &Value) -> Option<String> {
        let e = doc.get("errors")?.as_array()?.first()?;
        Some(match e.get("error").and_then(Value::as_str) {
            Some(text) => match e.get("description").and_then(Value::as_str).filter(|d| !d.is_empty()) {
                Some(d) => format!("{text}: {d}"),
                None => text.to_string(),
            },
            None => e.to_string(),
        })
    }

    /// A read: the document, or the error Slurm reported in it.
    fn read(&self, path: &str) -> Result<Value, SlurmError> {
        let (status, doc) = self.request("GET", path, None)?;
        if !(200..300).contains(&status) {
            let e = Self::first_error(&doc).unwrap_or_else(|| doc.to_string());
            return Err(SlurmError::Failed {
                cmd: format!("GET {}", self.url(path)),
                status: format!("HTTP {status}"),
                stderr: e,
            });
        }
        Ok(doc)
    }

    /// Posts each `(job, body)` in turn, stopping at the first sign of an outage or a refusal
    /// that is not about the job.
    fn post_each(&self, items: &[(u64, String)]) -> Batch {
        let t0 = Instant::now();
        let mut b = Batch::default();
        for (job, body) in items {
            let job = *job;
            let path = format!("job/{job}");
            let refused = |status: u16, e: String| SlurmError::Failed {
                cmd: format!("POST {}", self.url(&path)),
                status: format!("HTTP {status}"),
                stderr: e,
            };
            match self.request("POST", &path, Some(body)) {
                Err(e) => {
                    b.unknown.push(job);
                    b.stopped = Some(e);
                }
                Ok((status, doc)) => match Self::first_error(&doc) {
                    None if (200..300).contains(&status) => b.done.push(job),
                    Some(e) if means_job_gone(&e) => b.failed.push((job, e)),
                    Some(e) if means_unreachable(&e) => {
                        b.unknown.push(job);
                        b.stopped = Some(refused(status, e));
                    }
                    e => {
                        let e = e.unwrap_or_else(|| format!("HTTP {status}: {doc}"));
                        b.failed.push((job, e.clone()));
                        b.stopped = Some(refused(status, e));
                    }
                },
            }
            if b.stopped.is_some() {
                break;
            }
        }
        b.elapsed = t0.elapsed();
        b
    }
}

impl Backend for SlurmRest {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        parse_nodes(&self.read("nodes")?)
    }

    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let doc = self.read("jobs")?;
        jobs_from_doc(&doc, "slurmrestd jobs")
    }

    fn config(&self) -> Result<Option<SlurmConfig>, SlurmError> {
        Ok(None)
    }

    fn set_priorities(&self, changes: &[(u64, u64)]) -> Batch {
        let later = self.version.as_str() >= "v0.0.39";
        let items: Vec<(u64, String)> = changes
            .iter()
            .map(|&(job, p)| {
                let p = p.max(1);
                // From v0.0.39 on, numbers that may be unset are written as objects.
                let body = if later {
                    format!("{{\"priority\": {{\"set\": true, \"infinite\": false, \"number\": {p}}}}}")
                } else {
                    format!("{{\"priority\": {p}}}")
                };
                (job, body)
            })
            .collect();
        self.post_each(&items)
    }

    fn reset_priorities(&self, jobs: &[u64]) -> Batch {
        // `hold: false` is slurmrestd's `scontrol release`: priority INFINITE, computed again.
        let items: Vec<(u64, String)> = jobs.iter().map(|&j| (j, "{\"hold\": false}".to_string())).collect();
        self.post_each(&items)
    }

    fn describe(&self) -> String {
        format!("slurmrestd {} ({})", self.base, self.version)
    }
}
