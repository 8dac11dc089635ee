//! Token usage as providers report it in answers (OpenAI chat, embeddings and responses;
//! Anthropic messages), read into one shape and priced: the actual cost beside the estimate.

use crate::config::ModelPrice;
use serde_json::Value;

/// Tokens an answer was billed for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Input tokens at the full input price.
    pub input: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached: u64,
    /// Input tokens written to the prompt cache (Anthropic `cache_creation_input_tokens`).
    pub cache_write: u64,
    /// Output tokens.
    pub output: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.input += o.input;
        self.cached += o.cached;
        self.cache_write += o.cache_write;
        self.output += o.output;
    }
}

impl Usage {
    /// The `usage` of a response body, if it has one. OpenAI counts cached tokens inside
    /// `prompt_tokens` / `input_tokens`; Anthropic counts them apart from `input_tokens`.
    pub fn of(body: &Value) -> Option<Usage> {
        let u = body.get("usage")?;
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let anthropic = body["type"] == "message"
            || u.get("cache_read_input_tokens").is_some()
            || u.get("cache_creation_input_tokens").is_some();
        if anthropic {
            return Some(Usage {
                input: u["input_tokens"].as_u64()?,
                cached: n(&u["cache_read_input_tokens"]),
                cache_write: n(&u["cache_creation_input_tokens"]),
                output: n(&u["output_tokens"]),
            });
        }
        let (total, cached, output) = match u.get("prompt_tokens") {
            Some(p) => (p.as_u64()?, n(&u["prompt_tokens_details"]["cached_tokens"]), n(&u["completion_tokens"])),
            None => {
                (u["input_tokens"].as_u64()?, n(&u["input_tokens_details"]["cached_tokens"]), n(&u["output_tokens"]))
            }
        };
        Some(Usage { input: total.saturating_sub(cached), cached: cached.min(total), cache_write: 0, output })
    }

    /// Its cost at `p` (without any batch discount).
    pub fn cost(&self, p: &ModelPrice) -> f64 {
        let write = p.cache_write_input_per_mtok.unwrap_or(p.input_per_mtok);
        p.cost(self.input, self.cached, self.output) + self.cache_write as f64 * write / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_providers_usage_shapes() {
        let openai = json!({"usage": {"prompt_tokens": 1500, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 1280}}});
        assert_eq!(Usage::of(&openai), Some(Usage { input: 220, cached: 1280, cache_write: 0, output: 20 }));
        let responses =
            json!({"usage": {"input_tokens": 100, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 0}}});
        assert_eq!(Usage::of(&responses), Some(Usage { input: 100, cached: 0, cache_write: 0, output: 7 }));
        let anthropic = json!({"type": "message", "usage": {"input_tokens": 50, "output_tokens": 9,
            "cache_read_input_tokens": 1400, "cache_creation_input_tokens": 0}});
        assert_eq!(Usage::of(&anthropic), Some(Usage { input: 50, cached: 1400, cache_write: 0, output: 9 }));
        let embeddings = json!({"usage": {"prompt_tokens": 12, "total_tokens": 12}});
        assert_eq!(Usage::of(&embeddings), Some(Usage { input: 12, cached: 0, cache_write: 0, output: 0 }));
        assert_eq!(Usage::of(&json!({"choices": []})), None);
    }

    #[test]
    fn priced_by_hand() {
        let p = ModelPrice {
            input_per_mtok: 3.0,
            cached_input_per_mtok: Some(0.3),
            output_per_mtok: 15.0,
            batch_multiplier: 0.5,
            cache_write_input_per_mtok: Some(3.75),
        };
        // 1e6 x (100 x 3 + 1000 x 0.3 + 200 x 3.75 + 10 x 15) / 1e6 = 300 + 300 + 750 + 150 = 1500 / 1e6.
        let u = Usage { input: 100, cached: 1000, cache_write: 200, output: 10 };
        assert!((u.cost(&p) - 1500.0 / 1e6).abs() < 1e-15);
    }
}
