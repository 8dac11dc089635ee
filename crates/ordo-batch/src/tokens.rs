//! Token estimation: OpenAI's own BPE tables (tiktoken-rs, embedded, works offline), exactly for
//! small files and through a per-tokenizer bytes-to-tokens ratio calibrated on a sample for large ones.

use std::collections::HashMap;
pub use tiktoken_rs::tokenizer::Tokenizer;

/// Tokens added per chat message for its role and separators (OpenAI's published counting rule).
pub const MESSAGE_OVERHEAD: u64 = 3;
/// Tokens that prime every chat reply.
pub const REPLY_PRIMING: u64 = 3;
/// Flat estimate for one image part (OpenAI's cost of a 1024x1024 image at high detail).
pub const IMAGE_TOKENS: u64 = 765;
/// Tokens per byte used when no sample could calibrate a tokenizer (about 4 bytes a token).
pub const DEFAULT_TOKENS_PER_BYTE: f64 = 0.25;
/// In `auto` mode, files with at most this many requests are tokenized exactly.
pub const AUTO_EXACT_LIMIT: usize = 20_000;
/// Requests tokenized exactly to calibrate the ratio in approximate mode.
pub const CALIBRATION_SAMPLE: usize = 2_000;

/// How token counts are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMode {
    /// Tokenize every text.
    Exact,
    /// Calibrate bytes-to-tokens on a sample, then multiply.
    Approx,
    /// Exact up to [`AUTO_EXACT_LIMIT`] requests, approximate above.
    Auto,
}

impl std::str::FromStr for TokenMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exact" => Ok(TokenMode::Exact),
            "approx" => Ok(TokenMode::Approx),
            "auto" => Ok(TokenMode::Auto),
            _ => Err(format!("expected exact, approx or auto, found {s:?}")),
        }
    }
}

/// The tokenizer used for `model`: tiktoken's table for OpenAI model names; `cl100k_base` as an
/// approximation for any other model (Llama, Mistral, Qwen ... tokenizers differ by some 10-20%).
pub fn tokenizer_for(model: &str) -> Tokenizer {
    tiktoken_rs::tokenizer::get_tokenizer(model).unwrap_or(Tokenizer::Cl100kBase)
}

/// Exact token count of `text` under `tk`.
pub fn count_exact(tk: Tokenizer, text: &str) -> u64 {
    let bpe = match tk {
        Tokenizer::O200kBase | Tokenizer::O200kHarmony => tiktoken_rs::o200k_base_singleton(),
        Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        Tokenizer::P50kBase => tiktoken_rs::p50k_base_singleton(),
        Tokenizer::P50kEdit => tiktoken_rs::p50k_edit_singleton(),
        Tokenizer::R50kBase | Tokenizer::Gpt2 => tiktoken_rs::r50k_base_singleton(),
    };
    bpe.encode_ordinary(text).len() as u64
}

/// Counts the tokens of texts, exactly or by a calibrated ratio.
#[derive(Debug, Clone)]
pub struct TokenEstimator {
    exact: bool,
    ratios: HashMap<Tokenizer, f64>,
    fallback_ratio: f64,
}

impl TokenEstimator {
    /// Exact counting.
    pub fn exact() -> Self {
        TokenEstimator { exact: true, ratios: HashMap::new(), fallback_ratio: DEFAULT_TOKENS_PER_BYTE }
    }

    /// Ratio counting, calibrated on `(tokenizer, text)` samples (tokenized exactly here). A
    /// tokenizer without samples uses the pooled ratio of all samples, or
    /// [`DEFAULT_TOKENS_PER_BYTE`] when there are none.
    pub fn calibrated<'a>(samples: impl IntoIterator<Item = (Tokenizer, &'a str)>) -> Self {
        let mut acc: HashMap<Tokenizer, (u64, u64)> = HashMap::new();
        for (tk, text) in samples {
            let e = acc.entry(tk).or_default();
            e.0 += count_exact(tk, text);
            e.1 += text.len() as u64;
        }
        let (t, b) = acc.values().fold((0u64, 0u64), |a, v| (a.0 + v.0, a.1 + v.1));
        let fallback_ratio = if b > 0 { t as f64 / b as f64 } else { DEFAULT_TOKENS_PER_BYTE };
        let ratios = acc.into_iter().filter(|(_, (_, b))| *b > 0).map(|(k, (t, b))| (k, t as f64 / b as f64)).collect();
        TokenEstimator { exact: false, ratios, fallback_ratio }
    }

    /// Whether counts are exact.
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Tokens per byte used for `tk` (approximate mode).
    pub fn ratio(&self, tk: Tokenizer) -> f64 {
        self.ratios.get(&tk).copied().unwrap_or(self.fallback_ratio)
    }

    /// Tokens of one text. `memo` remembers exact counts of long texts (repeated system
    /// prompts are tokenized once).
    pub fn count(&self, tk: Tokenizer, text: &str, memo: &mut Memo) -> u64 {
        if text.is_empty() {
            return 0;
        }
        if !self.exact {
            return (text.len() as f64 * self.ratio(tk)).round().max(1.0) as u64;
        }
        if text.len() < 256 {
            return count_exact(tk, text);
        }
        let key = (tk, crate::hash::finish(crate::hash::mix(0, text.as_bytes()), text.len()));
        *memo.0.entry(key).or_insert_with(|| count_exact(tk, text))
    }

    /// A one-line description of the method, for output.
    pub fn describe(&self) -> String {
        if self.exact {
            "exact (tiktoken BPE; cl100k_base for non-OpenAI models)".into()
        } else {
            let mut r: Vec<String> = self.ratios.iter().map(|(k, v)| format!("{k:?} {:.3} tokens/byte", v)).collect();
            r.sort();
            format!(
                "approximate: bytes x ratio calibrated by tokenizing a sample of up to {} requests ({})",
                CALIBRATION_SAMPLE,
                if r.is_empty() { format!("default {DEFAULT_TOKENS_PER_BYTE} tokens/byte") } else { r.join(", ") }
            )
        }
    }
}

/// Per-thread memo of exact counts of long texts.
#[derive(Debug, Default)]
pub struct Memo(HashMap<(Tokenizer, u64), u64>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_counts_match_known_values() {
        // "hello world" is two tokens in both cl100k_base and o200k_base.
        assert_eq!(count_exact(tokenizer_for("gpt-4o"), "hello world"), 2);
        assert_eq!(count_exact(tokenizer_for("gpt-4"), "hello world"), 2);
        assert_eq!(tokenizer_for("gpt-4o-mini"), Tokenizer::O200kBase);
        assert_eq!(tokenizer_for("llama-3-8b"), Tokenizer::Cl100kBase);
    }

    #[test]
    fn calibrated_ratio_is_close_on_english() {
        let text = "The quick brown fox jumps over the lazy dog while the cat watches from the window. ";
        let long: String = text.repeat(40);
        let est = TokenEstimator::calibrated([(Tokenizer::O200kBase, long.as_str())]);
        let mut memo = Memo::default();
        let approx = est.count(Tokenizer::O200kBase, text, &mut memo) as f64;
        let exact = count_exact(Tokenizer::O200kBase, text) as f64;
        assert!((approx - exact).abs() / exact < 0.1, "approx {approx} exact {exact}");
    }
}
