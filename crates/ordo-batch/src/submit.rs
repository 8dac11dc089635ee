//! `ordo batch submit|status|fetch|cancel`: create provider batches from a request file, poll
//! them, download and merge their results, resubmit what failed; resumable after a kill -9.
//!
//! Never twice: before a batch is created its part is recorded as "create started" (with the
//! time) in the state file; a resumed run that finds this record first looks for the batch at
//! the provider (OpenAI: by the content key in the batch's metadata; Anthropic: by creation
//! time and request count) and adopts it instead of creating another. The same holds for an
//! answer lost to a timeout or a 5xx within one run. Nothing is lost: results are downloaded
//! to files beside the state before the part is marked fetched.

use crate::config::BatchLimits;
use crate::convert;
use crate::error::{BatchError, LineError};
use crate::hash;
use crate::http::Api;
use crate::input::Endpoint;
use crate::provider::{self, anthropic, openai, Provider, Remote};
use crate::results::{merge, Merged};
use crate::source::Source;
use crate::split::partition;
use crate::state::{results_dir, Part, State, STATE_VERSION};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Times an unknown outcome (lost answer) is looked for and retried before giving up.
const MAX_UNKNOWN: u32 = 8;

fn now_s() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The exact bytes sent for `rows` (OpenAI: the batch file; Anthropic: the JSON body), with
/// the Anthropic conversion errors of every row that cannot be sent.
fn part_bytes(provider: Provider, source: &Source, rows: &[usize]) -> Result<Vec<u8>, Vec<LineError>> {
    match provider {
        Provider::OpenAi => {
            let mut b = Vec::new();
            for &r in rows {
                b.extend_from_slice(source.raw(r));
                b.push(b'\n');
            }
            Ok(b)
        }
        Provider::Anthropic => {
            let mut reqs = Vec::with_capacity(rows.len());
            let mut errors = Vec::new();
            for &r in rows {
                match anthropic_request(source, r) {
                    Ok(v) => reqs.push(v),
                    Err(reason) => errors.push(LineError { line: source.request(r).line, reason }),
                }
            }
            if errors.is_empty() {
                Ok(serde_json::to_vec(&json!({ "requests": reqs })).unwrap_or_default())
            } else {
                Err(errors)
            }
        }
    }
}

fn anthropic_request(source: &Source, row: usize) -> Result<Value, String> {
    let req = source.request(row);
    if req.endpoint != Endpoint::ChatCompletions {
        return Err(format!(
            "field `url`: {} has no Anthropic Message Batches equivalent (only /v1/chat/completions converts)",
            req.endpoint.url()
        ));
    }
    if !convert::valid_anthropic_id(&req.custom_id) {
        return Err(format!(
            "field `custom_id`: {:?} is not a valid Anthropic custom_id (1-64 of a-z, A-Z, 0-9, - and _)",
            req.custom_id
        ));
    }
    let line: Value = serde_json::from_slice(source.raw(row)).map_err(|e| format!("not valid JSON: {e}"))?;
    let params = convert::chat_to_anthropic(&line["body"])?;
    Ok(json!({"custom_id": req.custom_id, "params": params}))
}

fn part_key(provider: Provider, attempt: u32, endpoint: &str, model: &str, bytes: &[u8]) -> String {
    hash::digest(&[
        b"ordo-batch 1",
        provider.name().as_bytes(),
        &attempt.to_le_bytes(),
        endpoint.as_bytes(),
        model.as_bytes(),
        bytes,
    ])
}

/// Per-request bytes for cutting parts within the per-file limits.
fn row_sizes(provider: Provider, source: &Source, rows: &[usize]) -> Result<Vec<usize>, BatchError> {
    let mut sizes = Vec::with_capacity(rows.len());
    let mut errors = Vec::new();
    for &r in rows {
        match provider {
            Provider::OpenAi => sizes.push(source.raw(r).len() + 1),
            Provider::Anthropic => match anthropic_request(source, r) {
                Ok(v) => sizes.push(v.to_string().len() + 1),
                Err(reason) => errors.push(LineError { line: source.request(r).line, reason }),
            },
        }
    }
    if !errors.is_empty() {
        let path = source.files.first().map(|f| f.path.clone()).unwrap_or_else(|| source.path.clone());
        return Err(BatchError::Unsendable { path, provider: provider.name(), errors });
    }
    Ok(sizes)
}

/// Parts for `rows` (input positions), named `{prefix}-0001` ..., for attempt `attempt`.
fn make_parts(
    provider: Provider,
    source: &Source,
    rows: &[usize],
    limits: &BatchLimits,
    attempt: u32,
    prefix: &str,
) -> Result<Vec<Part>, BatchError> {
    let sizes = row_sizes(provider, source, rows)?;
    let groups: Vec<Vec<usize>> = match (&source.file_rows, attempt) {
        // A `split` directory: its files are the parts, as written.
        (Some(fr), 0) => fr.clone(),
        _ => {
            let items: Vec<_> = rows.iter().zip(&sizes).map(|(&r, &s)| (source.request(r), s)).collect();
            partition(&items, limits).into_iter().map(|g| g.into_iter().map(|i| rows[i]).collect()).collect()
        }
    };
    let mut parts = Vec::with_capacity(groups.len());
    for (i, g) in groups.into_iter().enumerate() {
        let first = source.request(g[0]);
        if g.iter().any(|&r| source.request(r).endpoint != first.endpoint || source.request(r).model != first.model) {
            return Err(BatchError::Invalid(format!(
                "{}: a batch file must hold one endpoint and one model (write it with `ordo batch split`)",
                source.place(g[0])
            )));
        }
        if g.len() as u64 > limits.max_requests_per_file {
            return Err(BatchError::Invalid(format!(
                "{}: {} requests in one batch file, more than max_requests_per_file = {}",
                source.place(g[0]),
                g.len(),
                limits.max_requests_per_file
            )));
        }
        let bytes = part_bytes(provider, source, &g).map_err(|errors| BatchError::Unsendable {
            path: source.files.first().map(|f| f.path.clone()).unwrap_or_default(),
            provider: provider.name(),
            errors,
        })?;
        if bytes.len() as u64 > limits.max_bytes_per_file {
            return Err(BatchError::Invalid(format!(
                "{}: a batch of {} bytes for {}, more than max_bytes_per_file = {} (split it with `ordo batch split`)",
                source.place(g[0]),
                bytes.len(),
                provider.name(),
                limits.max_bytes_per_file
            )));
        }
        let name = match (&source.file_rows, attempt) {
            (Some(_), 0) => {
                let (f, _) = source.rows[g[0]];
                source.files[f].path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
            }
            _ => format!("{prefix}-{:04}", i + 1),
        };
        let endpoint = first.endpoint.url().to_string();
        parts.push(Part {
            name,
            attempt,
            key: part_key(provider, attempt, &endpoint, &first.model, &bytes),
            endpoint,
            model: first.model.to_string(),
            rows: g,
            bytes: bytes.len() as u64,
            upload_started: None,
            file_id: None,
            create_started: None,
            batch_id: None,
            status: None,
            counts: Default::default(),
            output_file_id: None,
            error_file_id: None,
            ended: false,
            fetched: false,
            cancelled_before_create: false,
        });
    }
    Ok(parts)
}

/// A new state for `source`: its parts, nothing sent yet. Every request is checked (and, for
/// Anthropic, converted) first; a request that cannot be sent fails the whole call.
pub fn prepare(provider: Provider, endpoint: &str, source: &Source, limits: &BatchLimits) -> Result<State, BatchError> {
    let rows: Vec<usize> = (0..source.len()).collect();
    let parts = make_parts(provider, source, &rows, limits, 0, "part")?;
    let input = std::fs::canonicalize(&source.path).unwrap_or_else(|_| source.path.clone());
    Ok(State {
        version: STATE_VERSION,
        provider,
        endpoint: endpoint.trim_end_matches('/').to_string(),
        input,
        input_digest: source.digest.clone(),
        requests: source.len(),
        parts,
    })
}

/// Check that `source` is the input the state was made from.
pub fn check_source(state: &State, source: &Source) -> Result<(), BatchError> {
    if state.input_digest != source.digest || state.requests != source.len() {
        return Err(BatchError::Invalid(format!(
            "{}: the input changed since it was submitted (its digest differs from the state file's); \
             submit the changed file with a new --state",
            source.path.display()
        )));
    }
    Ok(())
}

/// One part as `status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartView {
    /// Part name.
    pub name: String,
    /// 0, or the retry it belongs to.
    pub attempt: u32,
    /// The provider's batch id.
    pub batch_id: Option<String>,
    /// The provider's status word, or `not created`, `creating` (interrupted: the next
    /// command looks for it), `never created` (cancelled first).
    pub status: String,
    /// Requests in it.
    pub requests: usize,
    /// Endpoint.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// The provider's counts.
    pub counts: crate::state::Counts,
    /// Final status reached.
    pub ended: bool,
    /// Results downloaded.
    pub fetched: bool,
}

/// Every part of `state`, for display.
pub fn views(state: &State) -> Vec<PartView> {
    state
        .parts
        .iter()
        .map(|p| PartView {
            name: p.name.clone(),
            attempt: p.attempt,
            batch_id: p.batch_id.clone(),
            status: match (&p.status, p.cancelled_before_create, p.create_started) {
                (_, true, _) => "never created".into(),
                (Some(s), _, _) => s.clone(),
                (None, _, Some(_)) => "creating".into(),
                (None, _, None) => "not created".into(),
            },
            requests: p.rows.len(),
            endpoint: p.endpoint.clone(),
            model: p.model.clone(),
            counts: p.counts,
            ended: p.ended,
            fetched: p.fetched,
        })
        .collect()
}

/// The session of one command: the provider API, the state and where it is kept.
#[derive(Debug)]
pub struct Session<'a> {
    /// The provider API.
    pub api: &'a Api,
    /// The state (saved after every step).
    pub state: State,
    /// The state file.
    pub path: &'a Path,
    /// The input.
    pub source: &'a Source,
}

fn adopt(part: &mut Part, r: &Remote) {
    part.batch_id = Some(r.id.clone());
    update(part, r);
}

fn update(part: &mut Part, r: &Remote) {
    part.status = Some(r.status.clone());
    part.counts = r.counts;
    part.ended = r.ended;
    if r.output_file_id.is_some() {
        part.output_file_id = r.output_file_id.clone();
    }
    if r.error_file_id.is_some() {
        part.error_file_id = r.error_file_id.clone();
    }
}

impl Session<'_> {
    fn save(&self) -> Result<(), BatchError> {
        self.state.save(self.path)
    }

    fn taken(&self) -> Vec<String> {
        self.state.parts.iter().filter_map(|p| p.batch_id.clone()).collect()
    }

    /// If part `i` may have been created without its id being recorded, look for it and
    /// adopt it. Returns whether the part now has a batch.
    fn recover(&mut self, i: usize, notes: &mut dyn FnMut(&str)) -> Result<bool, BatchError> {
        let part = &self.state.parts[i];
        if part.batch_id.is_some() {
            return Ok(true);
        }
        let Some(since) = part.create_started else { return Ok(false) };
        let found = match self.state.provider {
            Provider::OpenAi => openai::find_batch(self.api, &part.key, since)?,
            Provider::Anthropic => {
                let taken = self.taken();
                let taken: Vec<&str> = taken.iter().map(String::as_str).collect();
                let c = anthropic::candidates(self.api, part.rows.len() as u64, since, &taken)?;
                if c.len() > 1 {
                    let ids: Vec<&str> = c.iter().map(|r| r.id.as_str()).collect();
                    return Err(BatchError::Invalid(format!(
                        "{}: creating its batch was interrupted, and {} Anthropic batches of {} requests created since then could be it ({}); \
                         none is adopted and none is created. Cancel the ones that are not yours, then rerun",
                        part.name,
                        c.len(),
                        part.rows.len(),
                        ids.join(", ")
                    )));
                }
                c.into_iter().next()
            }
        };
        match found {
            Some(r) => {
                notes(&format!("{}: found batch {} created by an interrupted run; adopted it", part.name, r.id));
                adopt(&mut self.state.parts[i], &r);
                self.save()?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A creation of part `i` whose outcome is unknown (`why`): say so and wait a little before
    /// looking for it; give up after [`MAX_UNKNOWN`] of them.
    fn unknown(
        &self,
        i: usize,
        count: &mut u32,
        what: &str,
        why: String,
        notes: &mut dyn FnMut(&str),
    ) -> Result<(), BatchError> {
        *count += 1;
        if *count > MAX_UNKNOWN {
            return Err(BatchError::Http { what: what.into(), status: None, message: why });
        }
        notes(&format!(
            "{}: {what} outcome unknown ({why}); looking for it before trying again",
            self.state.parts[i].name
        ));
        std::thread::sleep(Duration::from_millis(200 * u64::from(*count)));
        Ok(())
    }

    /// Create part `i`'s batch unless it exists (uploading its file first for OpenAI).
    fn create_part(&mut self, i: usize, notes: &mut dyn FnMut(&str)) -> Result<(), BatchError> {
        let provider = self.state.provider;
        let (rows, key, attempt) = {
            let p = &self.state.parts[i];
            (p.rows.clone(), p.key.clone(), p.attempt)
        };
        let bytes = part_bytes(provider, self.source, &rows).map_err(|errors| BatchError::Unsendable {
            path: self.source.path.clone(),
            provider: provider.name(),
            errors,
        })?;
        {
            let p = &self.state.parts[i];
            if part_key(provider, attempt, &p.endpoint, &p.model, &bytes) != key {
                return Err(BatchError::Invalid(format!(
                    "{}: its content differs from what was recorded; the input changed",
                    p.name
                )));
            }
        }
        let filename = format!("ordo-{key}.jsonl");
        let mut unknown = 0u32;
        loop {
            if self.recover(i, notes)? {
                return Ok(());
            }
            if provider == Provider::OpenAi && self.state.parts[i].file_id.is_none() {
                if let Some(since) = self.state.parts[i].upload_started {
                    if let Some(id) = openai::find_file(self.api, &filename, bytes.len() as u64, since)? {
                        notes(&format!("{}: found file {id} uploaded by an interrupted run", self.state.parts[i].name));
                        self.state.parts[i].file_id = Some(id);
                        self.save()?;
                    }
                }
            }
            if provider == Provider::OpenAi && self.state.parts[i].file_id.is_none() {
                self.state.parts[i].upload_started = Some(now_s());
                self.save()?;
                match openai::upload(self.api, &filename, &bytes)? {
                    Ok(id) => {
                        self.state.parts[i].file_id = Some(id);
                        self.save()?;
                    }
                    Err(why) => {
                        self.unknown(i, &mut unknown, "upload", why, notes)?;
                        continue;
                    }
                }
            }
            self.state.parts[i].create_started = Some(now_s());
            self.save()?;
            let created = match provider {
                Provider::OpenAi => {
                    let p = &self.state.parts[i];
                    openai::create(self.api, p.file_id.as_deref().unwrap_or_default(), &p.endpoint, &key, &p.name)?
                }
                Provider::Anthropic => {
                    let body: Value = serde_json::from_slice(&bytes).map_err(|e| BatchError::Invalid(e.to_string()))?;
                    provider::create(self.api, &body)?
                }
            };
            match created {
                Ok(r) => {
                    adopt(&mut self.state.parts[i], &r);
                    self.save()?;
                    return Ok(());
                }
                Err(why) => self.unknown(i, &mut unknown, "batch creation", why, notes)?,
            }
        }
    }

    /// Create every part's batch that does not exist yet.
    pub fn submit(&mut self, notes: &mut dyn FnMut(&str)) -> Result<(), BatchError> {
        for i in 0..self.state.parts.len() {
            let p = &self.state.parts[i];
            if p.batch_id.is_some() || p.cancelled_before_create {
                continue;
            }
            self.create_part(i, notes)?;
            let p = &self.state.parts[i];
            notes(&format!(
                "{}: batch {} ({} requests, {} {}) {}",
                p.name,
                p.batch_id.as_deref().unwrap_or("?"),
                p.rows.len(),
                p.endpoint,
                p.model,
                p.status.as_deref().unwrap_or("")
            ));
        }
        Ok(())
    }

    /// New parts (attempt k+1) for every request without a successful answer. Every part must
    /// have ended and been fetched. Returns the number of requests resubmitted. When parts of an
    /// earlier call are not created yet (it was interrupted), none are added: [`Session::submit`]
    /// creates those (their requests are returned).
    pub fn add_retry(&mut self, limits: &BatchLimits) -> Result<usize, BatchError> {
        let pending: usize = self
            .state
            .parts
            .iter()
            .filter(|p| p.attempt > 0 && p.batch_id.is_none() && !p.cancelled_before_create)
            .map(|p| p.rows.len())
            .sum();
        if pending > 0 {
            return Ok(pending);
        }
        let open: Vec<&str> = self
            .state
            .parts
            .iter()
            .filter(|p| !(p.fetched || p.cancelled_before_create))
            .map(|p| p.name.as_str())
            .collect();
        if !open.is_empty() {
            return Err(BatchError::Invalid(format!(
                "--retry-failed: {} not ended and fetched yet ({}); run `ordo batch fetch --state {}` once they have ended",
                if open.len() == 1 { "a batch is" } else { "batches are" },
                open.join(", "),
                self.path.display()
            )));
        }
        let m: Merged = merge(&self.state, self.path, self.source, None)?;
        if m.failed_rows.is_empty() {
            return Ok(0);
        }
        let attempt = self.state.parts.iter().map(|p| p.attempt).max().unwrap_or(0) + 1;
        let parts =
            make_parts(self.state.provider, self.source, &m.failed_rows, limits, attempt, &format!("retry{attempt}"))?;
        self.state.parts.extend(parts);
        self.save()?;
        Ok(m.failed_rows.len())
    }

    /// Ask the provider about every part that has not ended; adopt batches of interrupted
    /// creations.
    pub fn refresh(&mut self, notes: &mut dyn FnMut(&str)) -> Result<(), BatchError> {
        for i in 0..self.state.parts.len() {
            if self.state.parts[i].finished() {
                continue;
            }
            if !self.recover(i, notes)? {
                continue;
            }
            let id = self.state.parts[i].batch_id.clone().unwrap_or_default();
            let r = provider::retrieve(self.api, &id)?;
            if let Some(m) = &r.message {
                notes(&format!("{}: batch {} {}: {m}", self.state.parts[i].name, r.id, r.status));
            }
            update(&mut self.state.parts[i], &r);
            self.save()?;
        }
        Ok(())
    }

    /// Download the results of every part that has ended and is not fetched yet.
    pub fn download(&mut self, notes: &mut dyn FnMut(&str)) -> Result<(), BatchError> {
        let dir = results_dir(self.path);
        for i in 0..self.state.parts.len() {
            let p = &self.state.parts[i];
            if !p.ended || p.fetched {
                continue;
            }
            let files = p.result_files();
            match self.state.provider {
                Provider::OpenAi => {
                    for (file_id, name) in [(&p.output_file_id, &files[0]), (&p.error_file_id, &files[1])] {
                        if let Some(id) = file_id {
                            openai::download(self.api, id, &dir.join(name))?;
                        }
                    }
                }
                Provider::Anthropic => {
                    anthropic::download(self.api, p.batch_id.as_deref().unwrap_or_default(), &dir.join(&files[2]))?;
                }
            }
            let p = &mut self.state.parts[i];
            p.fetched = true;
            notes(&format!("{}: results of batch {} downloaded", p.name, p.batch_id.as_deref().unwrap_or("?")));
            self.save()?;
        }
        Ok(())
    }

    /// Cancel every part that has not ended; parts not created yet never will be.
    pub fn cancel(&mut self, notes: &mut dyn FnMut(&str)) -> Result<(), BatchError> {
        for i in 0..self.state.parts.len() {
            if self.state.parts[i].finished() {
                continue;
            }
            if !self.recover(i, notes)? {
                self.state.parts[i].cancelled_before_create = true;
                notes(&format!("{}: not created; it will not be", self.state.parts[i].name));
                self.save()?;
                continue;
            }
            let id = self.state.parts[i].batch_id.clone().unwrap_or_default();
            let r = match provider::cancel(self.api, &id) {
                Ok(r) => r,
                // It may have ended since it was last looked at (a final batch cannot be cancelled).
                Err(e @ BatchError::Http { status: Some(400..=499), .. }) => {
                    let r = provider::retrieve(self.api, &id)?;
                    if !r.ended {
                        return Err(e);
                    }
                    r
                }
                Err(e) => return Err(e),
            };
            update(&mut self.state.parts[i], &r);
            notes(&format!("{}: batch {id} {}", self.state.parts[i].name, r.status));
            self.save()?;
        }
        Ok(())
    }

    /// Whether every part has ended (or will never be created).
    pub fn all_finished(&self) -> bool {
        self.state.parts.iter().all(Part::finished)
    }
}
