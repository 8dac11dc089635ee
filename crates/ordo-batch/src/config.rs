//! Provider limits (limits.toml) and prices (prices.toml): plain configuration, nothing about a
//! provider is built in. Model names match exactly, or by a key ending in `*` (longest prefix).

use crate::error::BatchError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Rate limits of one model (per minute, as providers publish them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    /// Requests per minute.
    pub requests_per_minute: f64,
    /// Tokens per minute (prompt tokens plus `max_tokens`, as providers count them).
    pub tokens_per_minute: f64,
}

/// Limits on provider batch files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchLimits {
    /// Most requests in one batch file.
    pub max_requests_per_file: u64,
    /// Most bytes in one batch file.
    pub max_bytes_per_file: u64,
    /// Hours within which the provider promises to finish a batch.
    pub completion_window_hours: f64,
    /// A model group with fewer requests than this is sent live rather than as a batch.
    pub min_requests: u64,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_requests_per_file: 50_000,
            max_bytes_per_file: 200 * 1024 * 1024,
            completion_window_hours: 24.0,
            min_requests: 100,
        }
    }
}

/// How live calls are paced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunLimits {
    /// Token-bucket depth in seconds of each limit: at most `rate x burst_seconds` may go at once.
    pub burst_seconds: f64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits { burst_seconds: 1.0 }
    }
}

/// The contents of limits.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Limits of models not listed in `models`.
    pub default: ModelLimits,
    /// Limits per model name (a key ending in `*` matches by prefix).
    #[serde(default)]
    pub models: BTreeMap<String, ModelLimits>,
    /// Batch-file limits.
    #[serde(default)]
    pub batch: BatchLimits,
    /// Pacing of live calls.
    #[serde(default)]
    pub run: RunLimits,
}

impl Default for Limits {
    /// Conservative limits used when no limits.toml is given: 500 requests and 200,000 tokens
    /// per minute for every model, and the batch-file defaults above.
    fn default() -> Self {
        Limits {
            default: ModelLimits { requests_per_minute: 500.0, tokens_per_minute: 200_000.0 },
            models: BTreeMap::new(),
            batch: BatchLimits::default(),
            run: RunLimits::default(),
        }
    }
}

impl Limits {
    /// Read and check limits.toml.
    pub fn load(path: &Path) -> Result<Limits, BatchError> {
        let l: Limits = load_toml(path)?;
        let bad = |m: String| BatchError::Config { path: path.to_path_buf(), message: m };
        let mut all = vec![("default".to_string(), l.default)];
        all.extend(l.models.iter().map(|(k, v)| (format!("models.\"{k}\""), *v)));
        for (name, m) in all {
            if !(m.requests_per_minute > 0.0 && m.requests_per_minute.is_finite()) {
                return Err(bad(format!("{name}.requests_per_minute: expected a number > 0")));
            }
            if !(m.tokens_per_minute > 0.0 && m.tokens_per_minute.is_finite()) {
                return Err(bad(format!("{name}.tokens_per_minute: expected a number > 0")));
            }
        }
        if l.batch.max_requests_per_file == 0 || l.batch.max_bytes_per_file == 0 {
            return Err(bad("batch.max_requests_per_file and batch.max_bytes_per_file must be > 0".into()));
        }
        if l.batch.completion_window_hours.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Err(bad("batch.completion_window_hours: expected a number > 0".into()));
        }
        if !(l.run.burst_seconds > 0.0 && l.run.burst_seconds.is_finite()) {
            return Err(bad("run.burst_seconds: expected a number > 0".into()));
        }
        Ok(l)
    }

    /// The same limits for every model, with token buckets `burst_seconds` deep, and the
    /// default batch-file limits.
    pub fn uniform(requests_per_minute: f64, tokens_per_minute: f64, burst_seconds: f64) -> Limits {
        Limits {
            default: ModelLimits { requests_per_minute, tokens_per_minute },
            run: RunLimits { burst_seconds },
            ..Limits::default()
        }
    }

    /// The limits that apply to `model`.
    pub fn for_model(&self, model: &str) -> ModelLimits {
        lookup(&self.models, model).copied().unwrap_or(self.default)
    }
}

/// Prices of one model, per million tokens, in the currency of the file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Price of a million uncached input (prompt) tokens.
    pub input_per_mtok: f64,
    /// Price of a million cached input tokens (defaults to `input_per_mtok`: no discount).
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// Price of a million output tokens.
    pub output_per_mtok: f64,
    /// Multiplier applied to the whole cost of a request sent through the batch endpoint
    /// (e.g. 0.5 for a 50% batch discount; default 1.0).
    #[serde(default = "one")]
    pub batch_multiplier: f64,
    /// Price of a million input tokens written to the prompt cache (Anthropic charges extra for
    /// these; default: the input price).
    #[serde(default)]
    pub cache_write_input_per_mtok: Option<f64>,
}

fn one() -> f64 {
    1.0
}

impl ModelPrice {
    /// Cost of one request's tokens, without the batch multiplier.
    pub fn cost(&self, uncached_in: u64, cached_in: u64, out: u64) -> f64 {
        let cached = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        (uncached_in as f64 * self.input_per_mtok + cached_in as f64 * cached + out as f64 * self.output_per_mtok) / 1e6
    }
}

/// Prompt caching as the provider applies it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheRules {
    /// A prompt prefix shorter than this many tokens is never cached.
    pub min_tokens: u64,
    /// Cached tokens come in multiples of this.
    pub increment: u64,
}

impl Default for CacheRules {
    fn default() -> Self {
        CacheRules { min_tokens: 1024, increment: 128 }
    }
}

/// The contents of prices.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Currency label used in output (default "USD").
    #[serde(default = "usd")]
    pub currency: String,
    /// Prompt-caching rules.
    #[serde(default)]
    pub cache: CacheRules,
    /// Prices per model name (a key ending in `*` matches by prefix).
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
}

fn usd() -> String {
    "USD".into()
}

impl Default for Prices {
    /// No prices: costs are shown as unknown.
    fn default() -> Self {
        Prices { currency: usd(), cache: CacheRules::default(), models: BTreeMap::new() }
    }
}

impl Prices {
    /// Read and check prices.toml.
    pub fn load(path: &Path) -> Result<Prices, BatchError> {
        let p: Prices = load_toml(path)?;
        for (k, m) in &p.models {
            let vals = [
                ("input_per_mtok", Some(m.input_per_mtok)),
                ("cached_input_per_mtok", m.cached_input_per_mtok),
                ("output_per_mtok", Some(m.output_per_mtok)),
                ("batch_multiplier", Some(m.batch_multiplier)),
                ("cache_write_input_per_mtok", m.cache_write_input_per_mtok),
            ];
            for (field, v) in vals {
                if let Some(v) = v {
                    if !(v >= 0.0 && v.is_finite()) {
                        return Err(BatchError::Config {
                            path: path.to_path_buf(),
                            message: format!("models.\"{k}\".{field}: expected a number >= 0, found {v}"),
                        });
                    }
                }
            }
        }
        if p.cache.increment == 0 {
            return Err(BatchError::Config {
                path: path.to_path_buf(),
                message: "cache.increment: expected a whole number > 0".into(),
            });
        }
        Ok(p)
    }

    /// The price of `model`, if prices.toml has one.
    pub fn for_model(&self, model: &str) -> Option<ModelPrice> {
        lookup(&self.models, model).copied()
    }
}

fn lookup<'a, T>(map: &'a BTreeMap<String, T>, model: &str) -> Option<&'a T> {
    if let Some(v) = map.get(model) {
        return Some(v);
    }
    map.iter()
        .filter_map(|(k, v)| k.strip_suffix('*').filter(|p| model.starts_with(p)).map(|p| (p.len(), v)))
        .max_by_key(|(n, _)| *n)
        .map(|(_, v)| v)
}

fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, BatchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BatchError::io(path, e))?;
    toml::from_str(&text)
        .map_err(|e| BatchError::Config { path: path.to_path_buf(), message: e.to_string().trim_end().to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_keys_match_longest() {
        let mut m = BTreeMap::new();
        m.insert("gpt-4o*".to_string(), 1);
        m.insert("gpt-4o-mini*".to_string(), 2);
        m.insert("gpt-4o-mini".to_string(), 3);
        assert_eq!(lookup(&m, "gpt-4o-mini"), Some(&3));
        assert_eq!(lookup(&m, "gpt-4o-mini-2024-07-18"), Some(&2));
        assert_eq!(lookup(&m, "gpt-4o-2024"), Some(&1));
        assert_eq!(lookup(&m, "llama"), None);
    }

    #[test]
    fn unknown_field_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("limits.toml");
        std::fs::write(&p, "[default]\nrequests_per_minute = 10\ntokens_per_minit = 5\n").expect("write");
        let e = Limits::load(&p).expect_err("typo must fail").to_string();
        assert!(e.contains("tokens_per_minit"), "{e}");
        assert!(e.contains("limits.toml"), "{e}");
    }
}
