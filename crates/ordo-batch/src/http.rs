//! HTTP calls to a provider's batch API: authentication headers, bounded reads, and retries of
//! 429s (by Retry-After) and transient failures, except where a retry could create twice.

use crate::error::BatchError;
use crate::provider::Provider;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// An API key; its Debug form never shows it, and it is only ever sent to the endpoint's host.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a key (surrounding whitespace removed).
    pub fn new(k: &str) -> Self {
        ApiKey(k.trim().to_string())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<hidden>)")
    }
}

/// `base` + `path`, without doubling a `/v1` that ends the base.
pub fn join_url(base: &str, path: &str) -> String {
    let b = base.trim_end_matches('/');
    if b.ends_with("/v1") {
        if let Some(rest) = path.strip_prefix("/v1") {
            return format!("{b}{rest}");
        }
    }
    format!("{b}{path}")
}

/// Largest JSON answer read (a list page, a batch object).
const MAX_JSON: u64 = 64 << 20;

/// How calls are retried.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Timeout of one exchange.
    pub timeout: Duration,
    /// Retries after 408, 5xx or a transport error (only for calls that are safe to repeat).
    pub max_retries: u32,
    /// Retries after 429.
    pub max_429_retries: u32,
    /// First backoff; doubles with each retry, with jitter in [50%, 100%].
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Largest result file downloaded.
    pub max_download: u64,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(600),
            max_retries: 6,
            max_429_retries: 30,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            max_download: 8 << 30,
        }
    }
}

/// One provider endpoint with its key.
#[derive(Debug)]
pub struct Api {
    agent: ureq::Agent,
    base: String,
    provider: Provider,
    key: Option<ApiKey>,
    opts: HttpOptions,
    rng: std::sync::Mutex<rand_chacha::ChaCha8Rng>,
}

/// Whether a failed call may have taken effect at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Safety {
    /// Reads and cancels: repeat freely.
    Repeatable,
    /// Creations: a transport error or 5xx may hide a success, so it is not repeated here; the
    /// caller looks for what it may have created first.
    CreatesOnce,
}

/// What a call that creates something ended with.
#[derive(Debug)]
pub enum Outcome {
    /// The provider answered 2xx with this JSON.
    Done(Value),
    /// The outcome is unknown (transport error, 5xx, 408): look before trying again.
    Unknown(String),
}

pub(crate) fn retry_after(h: &ureq::http::HeaderMap) -> Option<Duration> {
    if let Some(ms) = h.get("retry-after-ms").and_then(|v| v.to_str().ok()).and_then(|s| s.trim().parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.clamp(0.0, 3.6e6) / 1000.0));
    }
    h.get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)))
}

/// The provider's error message in an error body (OpenAI `error.message`, Anthropic
/// `error.message`), else the start of the body.
fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = v["error"]["message"].as_str() {
            return m.to_string();
        }
    }
    let s = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if s.trim().is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

enum Payload<'a> {
    Get,
    Json(&'a Value),
    Upload { filename: &'a str, bytes: &'a [u8] },
}

impl Api {
    /// A client for `provider` at `base` (e.g. `https://api.openai.com`).
    pub fn new(provider: Provider, base: &str, key: Option<ApiKey>, opts: HttpOptions) -> Api {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(opts.timeout)).build().into();
        Api {
            agent,
            base: base.trim_end_matches('/').to_string(),
            provider,
            key,
            opts,
            rng: std::sync::Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(0x6f72646f)),
        }
    }

    /// The provider.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    fn backoff(&self, n: u32) -> Duration {
        let b = (self.opts.backoff_base.as_secs_f64() * 2f64.powi(n.min(30) as i32))
            .min(self.opts.backoff_max.as_secs_f64());
        let j = self.rng.lock().map(|mut r| r.random_range(0.5..=1.0)).unwrap_or(1.0);
        Duration::from_secs_f64(b * j)
    }

    fn auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match (self.provider, &self.key) {
            (Provider::OpenAi, Some(k)) => r.header("Authorization", format!("Bearer {}", k.expose())),
            (Provider::OpenAi, None) => r,
            (Provider::Anthropic, k) => {
                let r = r.header("anthropic-version", "2023-06-01");
                match k {
                    Some(k) => r.header("x-api-key", k.expose()),
                    None => r,
                }
            }
        }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: &Payload,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let url = join_url(&self.base, path);
        if method == "GET" {
            let mut r = self.agent.get(&url);
            for (k, v) in query {
                r = r.query(*k, v);
            }
            return self.auth(r).call();
        }
        let mut req = self.agent.post(&url);
        for (k, v) in query {
            req = req.query(*k, v);
        }
        req = self.auth(req);
        match body {
            Payload::Get => req.send_empty(),
            Payload::Json(v) => {
                req.header("content-type", "application/json").send(serde_json::to_vec(v).unwrap_or_default())
            }
            Payload::Upload { filename, bytes } => {
                use ureq::unversioned::multipart::{Form, Part};
                let part = Part::bytes(bytes).file_name(filename).mime_str("application/jsonl")?;
                let form = Form::new().text("purpose", "batch").part("file", part);
                req.send(form)
            }
        }
    }

    /// One call with the retry policy of `safety`; returns the 2xx response.
    fn call(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: Payload,
        safety: Safety,
    ) -> Result<Result<ureq::http::Response<ureq::Body>, String>, BatchError> {
        let what = format!("{method} {path}");
        let (mut n_other, mut n_429) = (0u32, 0u32);
        loop {
            match self.request(method, path, query, &body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if (200..300).contains(&status) {
                        return Ok(Ok(resp));
                    }
                    let headers = resp.headers().clone();
                    let err_body = resp.body_mut().with_config().limit(1 << 20).read_to_vec().unwrap_or_default();
                    let msg = error_message(&err_body);
                    if status == 429 && n_429 < self.opts.max_429_retries {
                        std::thread::sleep(retry_after(&headers).unwrap_or_else(|| self.backoff(n_429)));
                        n_429 += 1;
                        continue;
                    }
                    let transient = matches!(status, 408 | 500 | 502 | 503 | 504 | 529);
                    if transient && safety == Safety::CreatesOnce {
                        return Ok(Err(format!("{what}: HTTP {status}: {msg}")));
                    }
                    if transient && n_other < self.opts.max_retries {
                        std::thread::sleep(retry_after(&headers).unwrap_or_else(|| self.backoff(n_other)));
                        n_other += 1;
                        continue;
                    }
                    return Err(BatchError::Http { what, status: Some(status), message: msg });
                }
                Err(e) => {
                    if safety == Safety::CreatesOnce {
                        return Ok(Err(format!("{what}: {e}")));
                    }
                    if n_other < self.opts.max_retries {
                        std::thread::sleep(self.backoff(n_other));
                        n_other += 1;
                        continue;
                    }
                    return Err(BatchError::Http { what, status: None, message: e.to_string() });
                }
            }
        }
    }

    fn json_of(&self, what: &str, mut resp: ureq::http::Response<ureq::Body>) -> Result<Value, BatchError> {
        let bytes = resp.body_mut().with_config().limit(MAX_JSON).read_to_vec().map_err(|e| BatchError::Http {
            what: what.to_string(),
            status: None,
            message: format!("reading the answer: {e}"),
        })?;
        serde_json::from_slice(&bytes).map_err(|e| BatchError::Http {
            what: what.to_string(),
            status: Some(resp.status().as_u16()),
            message: format!("the answer is not JSON: {e}"),
        })
    }

    /// GET `path` (with `query`) and parse the JSON answer; retried freely.
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, BatchError> {
        let what = format!("GET {path}");
        match self.call("GET", path, query, Payload::Get, Safety::Repeatable)? {
            Ok(r) => self.json_of(&what, r),
            Err(m) => Err(BatchError::Http { what, status: None, message: m }),
        }
    }

    /// POST a JSON body that is safe to repeat (a cancel).
    pub fn post_repeatable(&self, path: &str, body: &Value) -> Result<Value, BatchError> {
        let what = format!("POST {path}");
        match self.call("POST", path, &[], Payload::Json(body), Safety::Repeatable)? {
            Ok(r) => self.json_of(&what, r),
            Err(m) => Err(BatchError::Http { what, status: None, message: m }),
        }
    }

    /// POST a JSON body that creates something: 429s are retried (nothing was created), other
    /// failures come back as [`Outcome::Unknown`].
    pub fn post_create(&self, path: &str, body: &Value) -> Result<Outcome, BatchError> {
        let what = format!("POST {path}");
        Ok(match self.call("POST", path, &[], Payload::Json(body), Safety::CreatesOnce)? {
            Ok(r) => Outcome::Done(self.json_of(&what, r)?),
            Err(m) => Outcome::Unknown(m),
        })
    }

    /// Upload `bytes` as a `purpose=batch` file named `filename` (multipart/form-data); as
    /// [`Api::post_create`].
    pub fn upload(&self, path: &str, filename: &str, bytes: &[u8]) -> Result<Outcome, BatchError> {
        let what = format!("POST {path}");
        Ok(match self.call("POST", path, &[], Payload::Upload { filename, bytes }, Safety::CreatesOnce)? {
            Ok(r) => Outcome::Done(self.json_of(&what, r)?),
            Err(m) => Outcome::Unknown(m),
        })
    }

    /// Download `path` into `dest`: written to a temporary file beside it, fsynced and renamed,
    /// so `dest` is either absent or complete. At most `max_download` bytes.
    pub fn download(&self, path: &str, dest: &Path) -> Result<u64, BatchError> {
        let what = format!("GET {path}");
        let resp = match self.call("GET", path, &[], Payload::Get, Safety::Repeatable)? {
            Ok(r) => r,
            Err(m) => return Err(BatchError::Http { what, status: None, message: m }),
        };
        let mut reader = resp.into_body().into_with_config().limit(self.opts.max_download).reader();
        crate::state::write_atomic_with(dest, |f| {
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0u64;
            loop {
                let n = reader.read(&mut buf)?;
                if n == 0 {
                    return Ok(total);
                }
                f.write_all(&buf[..n])?;
                total += n as u64;
            }
        })
        .map_err(|e| match e {
            BatchError::Io { err, .. } if err.kind() != std::io::ErrorKind::NotFound => {
                BatchError::Http { what, status: None, message: format!("downloading: {err}") }
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_without_doubling_v1() {
        assert_eq!(join_url("http://h:1/v1/", "/v1/embeddings"), "http://h:1/v1/embeddings");
        assert_eq!(join_url("https://api.x.com", "/v1/chat/completions"), "https://api.x.com/v1/chat/completions");
    }

    #[test]
    fn api_key_debug_hides_it() {
        assert_eq!(format!("{:?}", ApiKey::new(" sk-secret ")), "ApiKey(<hidden>)");
    }

    #[test]
    fn provider_error_messages_are_extracted() {
        assert_eq!(error_message(br#"{"error":{"message":"bad key","type":"x"}}"#), "bad key");
        assert_eq!(error_message(br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#), "slow");
        assert_eq!(error_message(b""), "(empty body)");
    }
}
