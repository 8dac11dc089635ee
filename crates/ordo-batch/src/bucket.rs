//! Token buckets on requests and tokens per model: a request goes when both buckets hold
//! enough; a 429 pauses the model's buckets until its Retry-After has passed.

use crate::config::Limits;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Bucket {
    req: f64,
    tok: f64,
    rate_r: f64,
    rate_t: f64,
    cap_r: f64,
    cap_t: f64,
    last: Instant,
    paused_until: Option<Instant>,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.req = (self.req + dt * self.rate_r).min(self.cap_r);
        self.tok = (self.tok + dt * self.rate_t).min(self.cap_t);
    }
}

/// Paces requests per model by its requests-per-minute and tokens-per-minute limits. Each
/// bucket holds at most `rate x burst_seconds` (at least one request, and at least as many
/// tokens as one request needs: a request larger than the token bucket waits until the bucket is
/// full and leaves it in debt). Buckets start full.
#[derive(Debug)]
pub struct RateLimiter {
    limits: Limits,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// A limiter for `limits` (per-model limits, `run.burst_seconds`).
    pub fn new(limits: &Limits) -> Self {
        RateLimiter { limits: limits.clone(), buckets: Mutex::new(HashMap::new()) }
    }

    fn with_bucket<T>(&self, model: &str, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let b = map.entry(model.to_string()).or_insert_with(|| {
            let l = self.limits.for_model(model);
            let burst = self.limits.run.burst_seconds;
            let (rate_r, rate_t) = (l.requests_per_minute / 60.0, l.tokens_per_minute / 60.0);
            let (cap_r, cap_t) = ((rate_r * burst).max(1.0), (rate_t * burst).max(1.0));
            Bucket { req: cap_r, tok: cap_t, rate_r, rate_t, cap_r, cap_t, last: now, paused_until: None }
        });
        b.refill(now);
        f(b)
    }

    /// Take one request and `tokens` tokens now, or say how long to wait.
    pub fn try_acquire(&self, model: &str, tokens: u64) -> Result<(), Duration> {
        self.with_bucket(model, |b| {
            let now = b.last;
            if let Some(p) = b.paused_until {
                if p > now {
                    return Err(p - now);
                }
                b.paused_until = None;
            }
            let need_t = (tokens as f64).min(b.cap_t);
            if b.req >= 1.0 && b.tok >= need_t {
                b.req -= 1.0;
                b.tok -= tokens as f64;
                Ok(())
            } else {
                let wr = if b.req >= 1.0 { 0.0 } else { (1.0 - b.req) / b.rate_r };
                let wt = if b.tok >= need_t { 0.0 } else { (need_t - b.tok) / b.rate_t };
                Err(Duration::from_secs_f64(wr.max(wt).max(1e-4)))
            }
        })
    }

    /// Block until one request and `tokens` tokens may go for `model`.
    pub fn acquire(&self, model: &str, tokens: u64) {
        while let Err(wait) = self.try_acquire(model, tokens) {
            std::thread::sleep(wait);
        }
    }

    /// Stop sending to `model` for `d` (a 429's Retry-After), emptying its request bucket.
    pub fn pause(&self, model: &str, d: Duration) {
        self.with_bucket(model, |b| {
            let until = b.last + d;
            b.paused_until = Some(b.paused_until.map_or(until, |p| p.max(until)));
            b.req = b.req.min(0.0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_paces_to_the_rate() {
        let l = Limits::uniform(6000.0, 1e9, 0.05); // bucket: 5 requests
        let rl = RateLimiter::new(&l);
        let t0 = Instant::now();
        for _ in 0..55 {
            rl.acquire("m", 1);
        }
        // 5 go at once, then 50 at 100/s: about 0.5 s.
        let e = t0.elapsed().as_secs_f64();
        assert!(e >= 0.45, "{e}");
        assert!(e < 2.0, "{e}");
    }

    #[test]
    fn token_limit_binds() {
        let l = Limits::uniform(1e9, 60_000.0, 0.1); // bucket: 100 tokens
        let rl = RateLimiter::new(&l);
        assert!(rl.try_acquire("m", 100).is_ok());
        let w = rl.try_acquire("m", 50).expect_err("empty");
        assert!(w.as_secs_f64() > 0.04 && w.as_secs_f64() < 0.06, "{w:?}");
    }
}
