//! The wall clock that daily windows and deadlines are read from: the system clock, or a test
//! clock that starts at a chosen instant and jumps instead of sleeping through a closed window.

use jiff::{SignedDuration, Timestamp};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where `batch run` reads the time of day (windows, deadlines) and how it waits for a time.
///
/// Contract: `now` never goes backwards within one clock; `sleep_until(t)` returns no earlier
/// than the moment `now() >= t` (at once when `t` has passed). Rate pacing (token buckets) does
/// not go through this clock: it measures real elapsed time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
    /// Block until `now() >= t`.
    fn sleep_until(&self, t: Timestamp);
}

/// The system clock (`Timestamp::now()`), sleeping in steps of at most a minute so that a
/// changed system time (a suspended laptop) is noticed.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, t: Timestamp) {
        loop {
            let left = t.duration_since(Timestamp::now());
            if left <= SignedDuration::ZERO {
                return;
            }
            let step = left.min(SignedDuration::from_secs(60));
            std::thread::sleep(Duration::try_from(step).unwrap_or(Duration::from_millis(10)));
        }
    }
}

/// A controllable clock for tests: it starts at `start`, runs at real speed, and
/// `sleep_until(t)` jumps straight to `t` instead of waiting (every thread sees the jump).
/// So a run paused for 20 hours by a closed window resumes at once, at the right wall time.
#[derive(Debug)]
pub struct TestClock {
    start: Timestamp,
    real0: Instant,
    jumped: Mutex<SignedDuration>,
}

impl TestClock {
    /// A clock that reads `start` now.
    pub fn new(start: Timestamp) -> TestClock {
        TestClock { start, real0: Instant::now(), jumped: Mutex::new(SignedDuration::ZERO) }
    }

    fn read(&self, jumped: SignedDuration) -> Timestamp {
        let real = SignedDuration::try_from(self.real0.elapsed()).unwrap_or(SignedDuration::ZERO);
        self.start.checked_add(real.saturating_add(jumped)).unwrap_or(self.start)
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        let j = *self.jumped.lock().unwrap_or_else(|p| p.into_inner());
        self.read(j)
    }

    fn sleep_until(&self, t: Timestamp) {
        let mut j = self.jumped.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.read(*j);
        if t > now {
            *j = j.saturating_add(t.duration_since(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_clock_jumps_and_never_goes_back() {
        let start: Timestamp = "2025-03-01T12:00:00Z".parse().expect("time");
        let c = TestClock::new(start);
        let a = c.now();
        assert!(a >= start && a.duration_since(start) < SignedDuration::from_secs(5));
        let later: Timestamp = "2025-03-02T08:00:00Z".parse().expect("time");
        c.sleep_until(later);
        let b = c.now();
        assert!(b >= later && b.duration_since(later) < SignedDuration::from_secs(5));
        c.sleep_until(start); // in the past: no jump back
        assert!(c.now() >= b);
    }
}
