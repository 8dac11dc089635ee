//! Reading and validating a JSONL request file in the OpenAI batch-input shape
//! (`custom_id`, `method`, `url`, `body`); every bad line is reported by number and reason.

use crate::error::{BatchError, LineError};
use crate::hash;
use crate::tokens::{self, Memo, TokenEstimator, TokenMode, Tokenizer};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes per prompt-prefix block: cache hits are estimated in whole blocks.
pub const PREFIX_BLOCK: usize = 256;
/// Most prefix blocks kept per request (256 KiB of prompt).
pub const MAX_PREFIX_BLOCKS: usize = 1024;

/// The API endpoints a request may target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Endpoint {
    /// `/v1/chat/completions`
    ChatCompletions,
    /// `/v1/completions`
    Completions,
    /// `/v1/embeddings`
    Embeddings,
    /// `/v1/responses`
    Responses,
}

impl Endpoint {
    /// All endpoints, in the order they are listed in messages.
    pub const ALL: [Endpoint; 4] =
        [Endpoint::ChatCompletions, Endpoint::Completions, Endpoint::Embeddings, Endpoint::Responses];

    /// The request path.
    pub fn url(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Responses => "/v1/responses",
        }
    }

    /// Parse a request path.
    pub fn from_url(url: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.url() == url)
    }
}

/// One valid request, with what planning needs; its JSON stays in [`Loaded::bytes`].
#[derive(Debug, Clone)]
pub struct Request {
    /// 1-based line number in the file.
    pub line: usize,
    /// The request's `custom_id`.
    pub custom_id: String,
    /// Its endpoint.
    pub endpoint: Endpoint,
    /// `body.model`.
    pub model: Arc<str>,
    /// The client it is scheduled for: `body.metadata.client` when that is present, otherwise
    /// the part of `custom_id` before its first `-`, `:` or `/` (the whole id if none).
    pub client: Arc<str>,
    /// Estimated input (prompt) tokens, including chat per-message overhead.
    pub input_tokens: u64,
    /// `max_completion_tokens`, `max_tokens` or `max_output_tokens` when given (0 for embeddings).
    pub max_output_tokens: Option<u64>,
    /// Bytes of prompt text (what the prefix blocks cover).
    pub text_bytes: u64,
    /// Chained hashes of the prompt prefix at every [`PREFIX_BLOCK`] bytes.
    pub prefix_blocks: Box<[u64]>,
    /// Byte range of the line in the file.
    pub span: (usize, usize),
    /// `body.metadata.deadline`: a duration after the run starts (`2h`) or an RFC 3339 time.
    pub deadline: Option<crate::deadline::Deadline>,
}

/// A loaded, validated request file.
#[derive(Debug)]
pub struct Loaded {
    /// The file.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Valid requests in file order.
    pub requests: Vec<Request>,
    /// Lines left out under `skip_bad`.
    pub skipped: Vec<LineError>,
    /// How tokens were counted.
    pub token_method: String,
}

impl Loaded {
    /// The request's line as it is in the file (without the newline).
    pub fn raw(&self, r: &Request) -> &[u8] {
        &self.bytes[r.span.0..r.span.1]
    }
}

/// How to load.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Leave bad lines out (and report them in [`Loaded::skipped`]) instead of failing.
    pub skip_bad: bool,
    /// Token counting.
    pub tokens: TokenMode,
    /// Threads used for parsing (0: all available).
    pub threads: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { skip_bad: false, tokens: TokenMode::Auto, threads: 0 }
    }
}

/// Read and validate a request file.
pub fn load_path(path: &Path, opts: &LoadOptions) -> Result<Loaded, BatchError> {
    let bytes = std::fs::read(path).map_err(|e| BatchError::io(path, e))?;
    load_bytes(path, bytes, opts)
}

/// Validate a request file already in memory (`path` names it in messages).
pub fn load_bytes(path: &Path, bytes: Vec<u8>, opts: &LoadOptions) -> Result<Loaded, BatchError> {
    let mut errors = Vec::new();
    // Line spans, skipping blank lines.
    let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // (line, start, end)
    let mut start = 0;
    let mut line = 0;
    while start < bytes.len() {
        line += 1;
        let end = bytes[start..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| start + p);
        let mut e = end;
        if e > start && bytes[e - 1] == b'\r' {
            e -= 1;
        }
        if bytes[start..e].iter().any(|b| !b.is_ascii_whitespace()) {
            if std::str::from_utf8(&bytes[start..e]).is_err() {
                errors.push(LineError { line, reason: "not valid UTF-8".into() });
            } else {
                spans.push((line, start, e));
            }
        }
        start = end + 1;
    }
    let text = |s: &(usize, usize, usize)| -> &str {
        // Checked above.
        std::str::from_utf8(&bytes[s.1..s.2]).unwrap_or_default()
    };

    let exact = match opts.tokens {
        TokenMode::Exact => true,
        TokenMode::Approx => false,
        TokenMode::Auto => spans.len() <= tokens::AUTO_EXACT_LIMIT,
    };
    let estimator = if exact {
        TokenEstimator::exact()
    } else {
        let stride = (spans.len() / tokens::CALIBRATION_SAMPLE).max(1);
        let mut samples: Vec<(Tokenizer, String)> = Vec::new();
        for s in spans.iter().step_by(stride) {
            if let Ok(raw) = serde_json::from_str::<RawLine>(text(s)) {
                let tk = tokens::tokenizer_for(&raw.body.model);
                raw.body.for_each_text(&mut |t| samples.push((tk, t.to_string())));
            }
        }
        TokenEstimator::calibrated(samples.iter().map(|(k, t)| (*k, t.as_str())))
    };

    let threads =
        if opts.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.threads };
    let chunk = spans.len().div_ceil(threads.max(1)).max(1);
    let parsed: Vec<(Vec<Request>, Vec<LineError>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = spans
            .chunks(chunk)
            .map(|part| {
                let est = &estimator;
                let bytes = &bytes;
                scope.spawn(move || {
                    let mut worker = Worker::default();
                    let mut ok = Vec::with_capacity(part.len());
                    let mut bad = Vec::new();
                    for &(line, s, e) in part {
                        let t = std::str::from_utf8(&bytes[s..e]).unwrap_or_default();
                        match worker.parse(t, est) {
                            Ok(mut r) => {
                                r.line = line;
                                r.span = (s, e);
                                ok.push(r);
                            }
                            Err(reason) => bad.push(LineError { line, reason }),
                        }
                    }
                    (ok, bad)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().map_err(|_| ())).collect::<Result<Vec<_>, ()>>()
    })
    .map_err(|_| BatchError::Invalid(format!("{}: a parsing thread panicked", path.display())))?;
    let mut requests = Vec::with_capacity(spans.len());
    for (ok, bad) in parsed {
        requests.extend(ok);
        errors.extend(bad);
    }
    // Duplicate custom_ids: every later occurrence is bad.
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(requests.len());
    let mut dup: HashSet<usize> = HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        if let Some(&first) = seen.get(r.custom_id.as_str()) {
            errors.push(LineError {
                line: r.line,
                reason: format!("field `custom_id`: {:?} is used already on line {first}", r.custom_id),
            });
            dup.insert(i);
        } else {
            seen.insert(&r.custom_id, r.line);
        }
    }
    drop(seen);
    if !dup.is_empty() {
        let mut i = 0;
        requests.retain(|_| {
            i += 1;
            !dup.contains(&(i - 1))
        });
    }
    errors.sort_by_key(|e| e.line);
    if !errors.is_empty() && !opts.skip_bad {
        return Err(BatchError::BadLines { path: path.to_path_buf(), errors });
    }
    if requests.is_empty() && errors.is_empty() {
        return Err(BatchError::Invalid(format!("{}: no requests in the file", path.display())));
    }
    Ok(Loaded { path: path.to_path_buf(), bytes, requests, skipped: errors, token_method: estimator.describe() })
}

/// Parse and check one request line on its own, counting tokens exactly (what a server that
/// enforces token limits needs). Returns the reason when the line is bad.
pub fn parse_line(line: &str) -> Result<Request, String> {
    Worker::default().parse(line, &TokenEstimator::exact())
}

#[derive(Default)]
struct Worker {
    strings: HashMap<Box<str>, Arc<str>>,
    tokenizers: HashMap<Arc<str>, Tokenizer>,
    memo: Memo,
}

impl Worker {
    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(s.into(), a.clone());
        a
    }

    fn parse(&mut self, line: &str, est: &TokenEstimator) -> Result<Request, String> {
        let raw: RawLine = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => return Err(explain(line).unwrap_or_else(|| e.to_string())),
        };
        if raw.custom_id.trim().is_empty() {
            return Err("field `custom_id`: empty".into());
        }
        if raw.method != "POST" {
            return Err(format!("field `method`: expected \"POST\", found {:?}", raw.method));
        }
        let Some(endpoint) = Endpoint::from_url(&raw.url) else {
            let all: Vec<&str> = Endpoint::ALL.iter().map(|e| e.url()).collect();
            return Err(format!("field `url`: expected one of {}, found {:?}", all.join(", "), raw.url));
        };
        let b = &raw.body;
        if b.model.trim().is_empty() {
            return Err("field `body.model`: empty".into());
        }
        let need = |present: bool, field: &str| -> Result<(), String> {
            if present {
                Ok(())
            } else {
                Err(format!("field `body.{field}`: missing (required for {})", endpoint.url()))
            }
        };
        match endpoint {
            Endpoint::ChatCompletions => {
                need(b.messages.is_some(), "messages")?;
                let msgs = b.messages.as_deref().unwrap_or_default();
                if msgs.is_empty() {
                    return Err("field `body.messages`: empty".into());
                }
                if let Some(i) = msgs.iter().position(|m| m.role.is_none()) {
                    return Err(format!("field `body.messages[{i}].role`: missing"));
                }
            }
            Endpoint::Embeddings | Endpoint::Completions => {
                let (field, v) =
                    if endpoint == Endpoint::Embeddings { ("input", &b.input) } else { ("prompt", &b.prompt) };
                need(v.is_some(), field)?;
                match v {
                    Some(RawInput::Items(_)) => {
                        return Err(format!("field `body.{field}`: expected a string, a list of strings or token ids"))
                    }
                    Some(i) if i.is_empty() => return Err(format!("field `body.{field}`: empty")),
                    _ => {}
                }
            }
            Endpoint::Responses => {
                need(b.input.is_some(), "input")?;
                if matches!(b.input, Some(RawInput::Tokens(_)) | Some(RawInput::TokenLists(_))) {
                    return Err("field `body.input`: expected a string or a list of input items".into());
                }
            }
        }
        let model = self.intern(&b.model);
        let tk = match self.tokenizers.get(&model) {
            Some(t) => *t,
            None => {
                let t = tokens::tokenizer_for(&model);
                self.tokenizers.insert(model.clone(), t);
                t
            }
        };
        // Tokens and prefix blocks.
        let mut prefix = PrefixHasher::default();
        let mut input_tokens = 0u64;
        let mut fixed = 0u64;
        let memo = &mut self.memo;
        let mut add_text = |t: &str, prefix: &mut PrefixHasher| {
            input_tokens += est.count(tk, t, memo);
            prefix.feed(t.as_bytes());
        };
        if let Some(ins) = &b.instructions {
            add_text(ins, &mut prefix);
        }
        let mut add_messages = |msgs: &[RawMessage], prefix: &mut PrefixHasher, fixed: &mut u64| {
            for m in msgs {
                *fixed += tokens::MESSAGE_OVERHEAD;
                if let Some(role) = &m.role {
                    prefix.feed(role.as_bytes());
                    prefix.feed(b"\n");
                }
                if m.name.is_some() {
                    *fixed += 1;
                }
                match &m.content {
                    Some(RawContent::Text(t)) => add_text(t, prefix),
                    Some(RawContent::Parts(parts)) => {
                        for p in parts {
                            if let Some(t) = &p.text {
                                add_text(t, prefix);
                            } else if matches!(p.kind.as_deref(), Some("image_url") | Some("input_image")) {
                                *fixed += tokens::IMAGE_TOKENS;
                            }
                        }
                    }
                    None => {}
                }
                prefix.feed(b"\n");
            }
        };
        match endpoint {
            Endpoint::ChatCompletions => {
                add_messages(b.messages.as_deref().unwrap_or_default(), &mut prefix, &mut fixed);
                fixed += tokens::REPLY_PRIMING;
            }
            _ => {
                let v = if endpoint == Endpoint::Completions { &b.prompt } else { &b.input };
                match v {
                    Some(RawInput::Text(t)) => add_text(t, &mut prefix),
                    Some(RawInput::Texts(ts)) => ts.iter().for_each(|t| add_text(t, &mut prefix)),
                    Some(RawInput::Tokens(ids)) => fixed += ids.len() as u64,
                    Some(RawInput::TokenLists(l)) => fixed += l.iter().map(|x| x.len() as u64).sum::<u64>(),
                    Some(RawInput::Items(items)) => add_messages(items, &mut prefix, &mut fixed),
                    None => {}
                }
            }
        }
        let max_output_tokens = match endpoint {
            Endpoint::Embeddings => Some(0),
            Endpoint::ChatCompletions => b.max_completion_tokens.or(b.max_tokens),
            Endpoint::Completions => b.max_tokens,
            Endpoint::Responses => b.max_output_tokens,
        };
        let client_src: &str = match b.metadata.as_ref().and_then(|m| m.client.as_deref()) {
            Some(c) if !c.is_empty() => c,
            _ => {
                let id: &str = &raw.custom_id;
                id.split(['-', ':', '/']).next().unwrap_or(id)
            }
        };
        let client = self.intern(client_src);
        let deadline = match b.metadata.as_ref().and_then(|m| m.deadline.as_deref()) {
            Some(d) => {
                Some(crate::deadline::Deadline::parse(d).map_err(|e| format!("field `body.metadata.deadline`: {e}"))?)
            }
            None => None,
        };
        let text_bytes = prefix.total as u64;
        Ok(Request {
            line: 0,
            custom_id: raw.custom_id.into_owned(),
            endpoint,
            model,
            client,
            input_tokens: input_tokens + fixed,
            max_output_tokens,
            text_bytes,
            prefix_blocks: prefix.blocks.into_boxed_slice(),
            span: (0, 0),
            deadline,
        })
    }
}

#[derive(Default)]
struct PrefixHasher {
    state: u64,
    total: usize,
    blocks: Vec<u64>,
}

impl PrefixHasher {
    fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.blocks.len() >= MAX_PREFIX_BLOCKS {
                self.total += b.len();
                return;
            }
            let room = PREFIX_BLOCK - self.total % PREFIX_BLOCK;
            let n = room.min(b.len());
            self.state = hash::mix(self.state, &b[..n]);
            self.total += n;
            if self.total.is_multiple_of(PREFIX_BLOCK) {
                self.blocks.push(hash::finish(self.state, self.total));
            }
            b = &b[n..];
        }
    }
}

#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(borrow)]
    custom_id: Cow<'a, str>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    url: Cow<'a, str>,
    #[serde(borrow)]
    body: RawBody<'a>,
}

#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow)]
    model: Cow<'a, str>,
    #[serde(default, borrow)]
    messages: Option<Vec<RawMessage<'a>>>,
    #[serde(default, borrow)]
    input: Option<RawInput<'a>>,
    #[serde(default, borrow)]
    prompt: Option<RawInput<'a>>,
    #[serde(default, borrow)]
    instructions: Option<Cow<'a, str>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default, borrow)]
    metadata: Option<RawMetadata<'a>>,
}

impl RawBody<'_> {
    fn for_each_text(&self, f: &mut dyn FnMut(&str)) {
        if let Some(t) = &self.instructions {
            f(t);
        }
        let msgs = |ms: &[RawMessage], f: &mut dyn FnMut(&str)| {
            for m in ms {
                match &m.content {
                    Some(RawContent::Text(t)) => f(t),
                    Some(RawContent::Parts(ps)) => ps.iter().filter_map(|p| p.text.as_deref()).for_each(&mut *f),
                    None => {}
                }
            }
        };
        if let Some(ms) = &self.messages {
            msgs(ms, f);
        }
        for v in [&self.input, &self.prompt].into_iter().flatten() {
            match v {
                RawInput::Text(t) => f(t),
                RawInput::Texts(ts) => ts.iter().for_each(|t| f(t)),
                RawInput::Items(ms) => msgs(ms, f),
                _ => {}
            }
        }
    }
}

#[derive(Deserialize)]
struct RawMetadata<'a> {
    #[serde(default, borrow)]
    client: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    deadline: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<RawContent<'a>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawContent<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts(#[serde(borrow)] Vec<RawPart<'a>>),
}

#[derive(Deserialize)]
struct RawPart<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawInput<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Texts(#[serde(borrow)] Vec<Cow<'a, str>>),
    Tokens(Vec<u64>),
    TokenLists(Vec<Vec<u64>>),
    Items(#[serde(borrow)] Vec<RawMessage<'a>>),
}

impl RawInput<'_> {
    fn is_empty(&self) -> bool {
        match self {
            RawInput::Text(t) => t.is_empty(),
            RawInput::Texts(v) => v.is_empty(),
            RawInput::Tokens(v) => v.is_empty(),
            RawInput::TokenLists(v) => v.is_empty(),
            RawInput::Items(v) => v.is_empty(),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A precise reason for a line the typed parser rejected: the first field that is wrong.
fn explain(line: &str) -> Option<String> {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Some(format!("not valid JSON: {e}")),
    };
    let Value::Object(o) = &v else {
        return Some(format!("expected a JSON object, found {}", kind(&v)));
    };
    for f in ["custom_id", "method", "url"] {
        match o.get(f) {
            None => return Some(format!("field `{f}`: missing")),
            Some(Value::String(_)) => {}
            Some(x) => return Some(format!("field `{f}`: expected a string, found {}", kind(x))),
        }
    }
    let body = match o.get("body") {
        None => return Some("field `body`: missing".into()),
        Some(Value::Object(b)) => b,
        Some(x) => return Some(format!("field `body`: expected an object, found {}", kind(x))),
    };
    match body.get("model") {
        None => return Some("field `body.model`: missing".into()),
        Some(Value::String(_)) => {}
        Some(x) => return Some(format!("field `body.model`: expected a string, found {}", kind(x))),
    }
    for f in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
        if let Some(x) = body.get(f) {
            if !x.is_null() && x.as_u64().is_none() {
                return Some(format!("field `body.{f}`: expected a whole number >= 0, found {x}"));
            }
        }
    }
    if let Some(x) = body.get("instructions") {
        if !x.is_string() && !x.is_null() {
            return Some(format!("field `body.instructions`: expected a string, found {}", kind(x)));
        }
    }
    if let Some(m) = body.get("metadata") {
        match m {
            Value::Object(m) => {
                for f in ["client", "deadline"] {
                    if let Some(c) = m.get(f) {
                        if !c.is_string() && !c.is_null() {
                            return Some(format!("field `body.metadata.{f}`: expected a string, found {}", kind(c)));
                        }
                    }
                }
            }
            Value::Null => {}
            x => return Some(format!("field `body.metadata`: expected an object, found {}", kind(x))),
        }
    }
    let check_messages = |field: &str, x: &Value| -> Option<String> {
        let Value::Array(ms) = x else {
            return Some(format!("field `body.{field}`: expected an array, found {}", kind(x)));
        };
        for (i, m) in ms.iter().enumerate() {
            let Value::Object(m) = m else {
                return Some(format!("field `body.{field}[{i}]`: expected an object, found {}", kind(m)));
            };
            if let Some(r) = m.get("role") {
                if !r.is_string() {
                    return Some(format!("field `body.{field}[{i}].role`: expected a string, found {}", kind(r)));
                }
            }
            match m.get("content") {
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                Some(Value::Array(parts)) => {
                    for (j, p) in parts.iter().enumerate() {
                        let Value::Object(p) = p else {
                            return Some(format!(
                                "field `body.{field}[{i}].content[{j}]`: expected an object, found {}",
                                kind(p)
                            ));
                        };
                        if let Some(t) = p.get("text") {
                            if !t.is_string() {
                                return Some(format!(
                                    "field `body.{field}[{i}].content[{j}].text`: expected a string, found {}",
                                    kind(t)
                                ));
                            }
                        }
                    }
                }
                Some(x) => {
                    return Some(format!(
                        "field `body.{field}[{i}].content`: expected a string or an array of parts, found {}",
                        kind(x)
                    ))
                }
            }
        }
        None
    };
    if let Some(x) = body.get("messages") {
        if let Some(e) = check_messages("messages", x) {
            return Some(e);
        }
    }
    for f in ["input", "prompt"] {
        match body.get(f) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(Value::Array(items)) => {
                let all = |p: fn(&Value) -> bool| items.iter().all(p);
                let ok = all(|x| x.is_string())
                    || all(|x| x.is_u64())
                    || all(|x| x.as_array().is_some_and(|a| a.iter().all(|y| y.is_u64())));
                if !ok {
                    if items.iter().all(|x| x.is_object()) {
                        if let Some(e) = check_messages(f, &Value::Array(items.clone())) {
                            return Some(e);
                        }
                    } else {
                        return Some(format!(
                            "field `body.{f}`: expected a string, or an array of strings, token ids or items"
                        ));
                    }
                }
            }
            Some(x) => return Some(format!("field `body.{f}`: expected a string or an array, found {}", kind(x))),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Loaded, BatchError> {
        load_bytes(Path::new("t.jsonl"), text.as_bytes().to_vec(), &LoadOptions::default())
    }

    #[test]
    fn bad_lines_are_reported_by_number_and_reason() {
        let text = concat!(
            r#"{"custom_id":"a-1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}}"#,
            "\n",
            "{not json\n",
            "\n",
            r#"{"custom_id":"a-2","method":"GET","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[]}}"#,
            "\n",
            r#"{"custom_id":"a-3","method":"POST","url":"/v1/chat/completions","body":{"model":5,"messages":[]}}"#,
            "\n",
            r#"{"custom_id":"a-1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}"#,
            "\n",
            r#"{"custom_id":"a-5","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}}"#,
            "\n",
        );
        let Err(BatchError::BadLines { errors, .. }) = load(text) else { panic!("expected bad lines") };
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6, 7], "{errors:?}");
        assert!(errors[0].reason.starts_with("not valid JSON"), "{}", errors[0].reason);
        assert!(errors[1].reason.contains("`method`"), "{}", errors[1].reason);
        assert!(errors[2].reason.contains("`body.model`: expected a string, found a number"), "{}", errors[2].reason);
        assert!(errors[3].reason.contains("used already on line 1"), "{}", errors[3].reason);
        assert!(errors[4].reason.contains("`body.max_tokens`"), "{}", errors[4].reason);
    }

    #[test]
    fn client_comes_from_metadata_or_prefix() {
        let text = concat!(
            r#"{"custom_id":"acme-1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":["a","b"]}}"#,
            "\n",
            r#"{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":[1,2,3],"metadata":{"client":"globex"}}}"#,
            "\n"
        );
        let l = load(text).expect("valid");
        assert_eq!(&*l.requests[0].client, "acme");
        assert_eq!(&*l.requests[1].client, "globex");
        assert_eq!(l.requests[1].input_tokens, 3);
        assert_eq!(l.requests[0].max_output_tokens, Some(0));
    }

    #[test]
    fn approximate_counts_are_close_to_exact() {
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&serde_json::json!({"custom_id": format!("r-{i}"), "method": "POST",
                "url": "/v1/chat/completions", "body": {"model": "gpt-4o", "messages": [
                {"role": "system", "content": "You write short, careful weekly reports for clients."},
                {"role": "user", "content": format!("Week {i}: visits {}, sign-ups {}, churn {}%.", 1000 + i * 13, i % 70, i % 9)}]}})
                .to_string());
            text.push('\n');
        }
        let total = |mode| {
            let o = LoadOptions { tokens: mode, ..LoadOptions::default() };
            let l = load_bytes(Path::new("t.jsonl"), text.as_bytes().to_vec(), &o).expect("valid");
            l.requests.iter().map(|r| r.input_tokens).sum::<u64>() as f64
        };
        let (exact, approx) = (total(TokenMode::Exact), total(TokenMode::Approx));
        assert!((approx / exact - 1.0).abs() < 0.05, "exact {exact} approx {approx}");
    }

    #[test]
    fn chat_tokens_follow_openai_rule() {
        // Two messages: 2 x 3 overhead + 3 priming + tokens of "hello world" (2) + "hi" (1).
        let text = r#"{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[{"role":"system","content":"hello world"},{"role":"user","content":"hi"}],"max_tokens":7}}"#;
        let l = load(text).expect("valid");
        assert_eq!(l.requests[0].input_tokens, 6 + 3 + 2 + 1);
        assert_eq!(l.requests[0].max_output_tokens, Some(7));
    }
}
