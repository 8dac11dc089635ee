//! Pacing updates to the controller: at most a set number per second, halved while the
//! controller answers slowly (its latency per update well above the best seen), raised again
//! as it recovers.

use std::time::{Duration, Instant};

/// Batches smaller than this say more about process start-up than about the controller and do
/// not move the rate.
const MIN_SAMPLE: usize = 10;

/// A controller that answers an update within this is at ease whatever the baseline: the rate
/// never backs off below it (on a busy machine the best time seen is a poor yardstick, and a
/// small batch's per-update time includes starting `scontrol`).
const AT_EASE: Duration = Duration::from_millis(20);

/// A rate limit that backs off when the controller slows down.
#[derive(Debug, Clone)]
pub struct Pace {
    /// The most updates per second allowed.
    pub max_rate: f64,
    /// The rate allowed now (at most `max_rate`).
    pub rate: f64,
    /// The lowest latency per update seen (the controller at ease).
    pub baseline: Option<Duration>,
    /// When the next batch may start.
    next: Option<Instant>,
}

impl Pace {
    /// A pace of at most `max_rate` updates per second.
    pub fn new(max_rate: f64) -> Pace {
        let max_rate = max_rate.max(0.1);
        Pace { max_rate, rate: max_rate, baseline: None, next: None }
    }

    /// The batch size that keeps a batch to about half a second at the current rate (at most
    /// `cap`).
    pub fn batch_size(&self, cap: usize) -> usize {
        ((self.rate / 2.0).floor() as usize).clamp(1, cap.max(1))
    }

    /// How long to wait before sending `n` updates.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next.map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Records that `n` updates took `took`, sent at `sent`: the next batch waits until the rate
    /// allows, and the rate follows the controller's latency.
    pub fn record(&mut self, n: usize, sent: Instant, took: Duration) {
        if n == 0 {
            return;
        }
        self.next = Some(sent + Duration::from_secs_f64(n as f64 / self.rate));
        if n < MIN_SAMPLE {
            return;
        }
        let per = took / n as u32;
        let base = *self.baseline.get_or_insert(per);
        if per < base {
            self.baseline = Some(per);
        } else if per > base * 4 && per > AT_EASE {
            self.rate = (self.rate / 2.0).max(1.0);
        } else if per < base * 2 || per < AT_EASE {
            self.rate = (self.rate * 1.25).min(self.max_rate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_when_latency_rises_and_recovers() {
        let mut p = Pace::new(100.0);
        let t = Instant::now();
        assert_eq!(p.batch_size(50), 50);
        p.record(50, t, Duration::from_millis(100)); // 2 ms each: the baseline
        assert_eq!(p.rate, 100.0);
        assert!(p.wait(t) > Duration::from_millis(400), "50 updates at 100/s: half a second");
        p.record(50, t, Duration::from_millis(500)); // 10 ms each: slower, but at ease
        assert_eq!(p.rate, 100.0);
        p.record(50, t, Duration::from_millis(1500)); // 30 ms each: fifteen times slower
        assert_eq!(p.rate, 50.0);
        assert_eq!(p.batch_size(50), 25);
        p.record(25, t, Duration::from_millis(1000));
        assert_eq!(p.rate, 25.0);
        p.record(12, t, Duration::from_millis(24)); // back to 2 ms each
        assert_eq!(p.rate, 31.25);
        p.record(5, t, Duration::from_millis(500)); // too small a sample to judge
        assert_eq!(p.rate, 31.25);
    }
}
