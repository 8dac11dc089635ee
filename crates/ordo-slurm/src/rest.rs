//! [`SlurmRest`]: a Slurm cluster through slurmrestd (OpenAPI `v0.0.38` of Slurm 22.05, or a
//! later version path) with JWT authentication, over one kept-alive HTTP connection.

use crate::client::{Backend, Batch};
use crate::config::SlurmConfig;
use crate::error::{means_job_gone, means_unreachable, SlurmError};
use crate::job::{JobState, SlurmJob, SlurmNode};
use crate::jobcache::JobCache;
use crate::json::{jobs_array, jobs_from_doc, number, parse_nodes, text};
use serde_json::Value;
use std::sync::Mutex;
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
    /// From OpenAPI v0.0.40 on, a read between full reads asks only for job states and fetches
    /// the records of new and changed jobs ([`JobCache`]); a full read (`GET /jobs`) is done
    /// at least this often. `Duration::ZERO`: every read is a full one.
    pub full_read_every: Duration,
    agent: ureq::Agent,
    reads: Mutex<Reads>,
}

/// What the incremental reads keep between calls.
#[derive(Debug, Default)]
struct Reads {
    cache: JobCache,
    last_full: Option<Instant>,
    /// `GET /jobs/state` failed with something other than an outage: full reads only.
    no_state_endpoint: Option<String>,
    note: Option<String>,
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

/// How often a full read is done by default when reading by states.
pub const DEFAULT_FULL_READ_EVERY: Duration = Duration::from_secs(300);

/// Above this many records to fetch (or a quarter of the queue, if more), a full read is done.
const MAX_FETCH: usize = 200;

/// Parses `GET /jobs/state` (Slurm 24.11: `jobs[].job_id` as text, `ID` or `ID_TASK` where
/// `ID` is the record's own job id, so a pending array record is listed once per pending
/// task; `jobs[].state` a list of state names and flags) into `(job id, state)` in the
/// controller's order. A heterogeneous job's `ID+OFFSET` is an error: the caller reads every
/// record instead.
pub fn parse_states(doc: &Value) -> Result<Vec<(u64, JobState)>, SlurmError> {
    let bad = |location: String, what: String| SlurmError::Parse {
        source_name: "slurmrestd jobs/state".into(),
        location,
        what,
    };
    let jobs = jobs_array(doc, &bad)?;
    let mut out = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let id = match j.get("job_id") {
            Some(Value::String(t)) => t.split('_').next().and_then(|x| x.parse::<u64>().ok()),
            v => number(v).ok().flatten().and_then(|n| u64::try_from(n).ok()),
        }
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            bad(format!("jobs[{i}].job_id"), format!("expected `ID` or `ID_TASK`, found {:?}", j.get("job_id")))
        })?;
        let state = match j.get("state").or_else(|| j.get("job_state")) {
            Some(Value::Object(o)) => text(o.get("current")),
            s => text(s),
        };
        if state.is_empty() {
            return Err(bad(format!("jobs[{i}].state"), "expected the job's state".into()));
        }
        out.push((id, JobState::from_slurm(&state)));
    }
    Ok(out)
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
            full_read_every: DEFAULT_FULL_READ_EVERY,
            agent,
            reads: Mutex::new(Reads::default()),
        }
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, Reads> {
        // A panic elsewhere while holding the lock leaves plain data: go on with it.
        self.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True when this version has `GET /jobs/state` (OpenAPI v0.0.40, Slurm 23.11, and later).
    fn has_state_endpoint(&self) -> bool {
        let v: Vec<u32> = self.version.trim_start_matches('v').split('.').filter_map(|x| x.parse().ok()).collect();
        v.len() == 3 && (v[0], v[1], v[2]) >= (0, 0, 40)
    }

    /// Every record: `GET /jobs`.
    fn full_read(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let doc = self.read("jobs")?;
        let jobs = jobs_from_doc(&doc, "slurmrestd jobs")?;
        let mut r = self.reads();
        r.cache.replace_all(&jobs);
        r.last_full = Some(Instant::now());
        r.note = Some(format!("full read, {}", ordo_core::words::count(jobs.len(), "record")));
        Ok(jobs)
    }

    /// One job's record (`GET /job/{id}`), `None` when the controller no longer knows it. For
    /// an array's id the answer holds all its records; only the one with this id is kept.
    fn one_job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        let path = format!("job/{id}");
        let (status, doc) = self.request("GET", &path, None)?;
        if let Some(e) = Self::first_error(&doc) {
            if means_job_gone(&e) || status == 404 {
                return Ok(None);
            }
            return Err(SlurmError::Failed {
                cmd: format!("GET {}", self.url(&path)),
                status: format!("HTTP {status}"),
                stderr: e,
            });
        }
        if !(200..300).contains(&status) {
            return Err(SlurmError::Failed {
                cmd: format!("GET {}", self.url(&path)),
                status: format!("HTTP {status}"),
                stderr: doc.to_string(),
            });
        }
        Ok(jobs_from_doc(&doc, &format!("slurmrestd job/{id}"))?.into_iter().find(|j| j.id == id))
    }

    /// A read by states: `GET /jobs/state`, then the records of new and changed jobs.
    /// `Ok(None)` when a full read is due instead (too many changes, or no such endpoint).
    fn read_by_states(&self) -> Result<Option<Vec<SlurmJob>>, SlurmError> {
        let doc = match self.read("jobs/state") {
            Ok(doc) => doc,
            Err(e) if e.is_unreachable() => return Err(e),
            Err(e) => {
                self.reads().no_state_endpoint = Some(e.to_string());
                return Ok(None);
            }
        };
        let states = match parse_states(&doc) {
            Ok(s) => s,
            Err(e) => {
                // A list ordo cannot map to records (a heterogeneous job): read every record.
                self.reads().note = Some(format!("full read: {e}"));
                return Ok(None);
            }
        };
        let want = self.reads().cache.to_fetch(&states);
        // Fetching one record costs about what a full read costs per job, plus a round trip.
        if want.len() > MAX_FETCH.max(states.len() / 4) {
            return Ok(None);
        }
        let mut fetched = Vec::with_capacity(want.len());
        for &id in &want {
            if let Some(j) = self.one_job(id)? {
                fetched.push(j);
            }
        }
        let mut r = self.reads();
        let jobs = r.cache.merge(&states, fetched);
        r.note = Some(format!(
            "states of {}, {} fetched",
            ordo_core::words::count(states.len(), "job"),
            ordo_core::words::count(want.len(), "record")
        ));
        Ok(Some(jobs))
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
        let by_states = {
            let r = self.reads();
            self.has_state_endpoint()
                && !self.full_read_every.is_zero()
                && r.no_state_endpoint.is_none()
                && r.cache.filled()
                && r.last_full.is_some_and(|t| t.elapsed() < self.full_read_every)
        };
        if by_states {
            if let Some(jobs) = self.read_by_states()? {
                return Ok(jobs);
            }
        }
        self.full_read()
    }

    fn recheck(&self, jobs: &[u64]) -> Result<Vec<(u64, Option<SlurmJob>)>, SlurmError> {
        let stale = self.reads().cache.stale(jobs);
        let mut out = Vec::with_capacity(stale.len());
        for id in stale {
            let j = self.one_job(id)?;
            let mut r = self.reads();
            match &j {
                Some(j) => r.cache.refresh(j.clone()),
                None => r.cache.forget(id),
            }
            out.push((id, j));
        }
        Ok(out)
    }

    fn read_note(&self) -> Option<String> {
        let r = self.reads();
        match (&r.note, &r.no_state_endpoint) {
            (Some(n), Some(e)) if self.has_state_endpoint() => Some(format!("{n}; GET jobs/state failed ({e})")),
            (n, _) => n.clone(),
        }
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
        let b = self.post_each(&items);
        let mut r = self.reads();
        for &(job, p) in changes.iter().filter(|(j, _)| b.done.contains(j)) {
            r.cache.set_priority(job, p.max(1));
        }
        for &job in b.unknown.iter().chain(b.failed.iter().map(|(j, _)| j)) {
            r.cache.forget(job);
        }
        b
    }

    fn reset_priorities(&self, jobs: &[u64]) -> Batch {
        // `hold: false` is slurmrestd's `scontrol release`: priority INFINITE, computed again.
        let items: Vec<(u64, String)> = jobs.iter().map(|&j| (j, "{\"hold\": false}".to_string())).collect();
        let b = self.post_each(&items);
        // Slurm computes these priorities again: read them afresh.
        let mut r = self.reads();
        for &job in jobs {
            r.cache.forget(job);
        }
        b
    }

    fn describe(&self) -> String {
        format!("slurmrestd {} ({})", self.base, self.version)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    /// Slurm 24.11's answer (as its slurmrestd wrote it on the dev cluster): ids as text, a
    /// started array task under its own record's id, the pending tasks under the array's.
    #[test]
    fn reads_the_state_list_of_slurm_24_11() {
        let doc: Value = serde_json::from_str(
            r#"{"jobs": [{"job_id": "1", "state": ["CANCELLED"]}, {"job_id": "4_0", "state": ["RUNNING"]},
            {"job_id": "5_1", "state": ["RUNNING", "COMPLETING"]}, {"job_id": "3_2", "state": ["PENDING"]},
            {"job_id": "3_3", "state": ["PENDING"]}], "errors": [], "warnings": []}"#,
        )
        .unwrap();
        let s = parse_states(&doc).unwrap();
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 4, 5, 3, 3]);
        assert!(matches!(s[0].1, JobState::Other(_)));
        assert_eq!((&s[1].1, &s[2].1, &s[3].1), (&JobState::Running, &JobState::Running, &JobState::Pending));
        for bad in [
            r#"{"jobs": [{"job_id": "7+1", "state": ["PENDING"]}]}"#,
            r#"{"jobs": [{"job_id": "x", "state": ["PENDING"]}]}"#,
            r#"{"jobs": [{"job_id": "7"}]}"#,
            r#"{"jobs": 3}"#,
            r#"{"jobs": [], "errors": [{"error": "denied"}]}"#,
        ] {
            assert!(parse_states(&serde_json::from_str(bad).unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_state_list_is_used_from_v0_0_40_on() {
        let t = Duration::from_secs(1);
        let v = |v: &str| SlurmRest::new("http://x", "u", "t", v, t).has_state_endpoint();
        assert!(!v("v0.0.38") && !v("v0.0.39") && v("v0.0.40") && v("v0.0.42") && v("v0.0.100") && !v("latest"));
    }
}
