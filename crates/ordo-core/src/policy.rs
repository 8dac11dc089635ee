//! Policies are composed by name from small parts: a queue order (`fifo`, `sjf`, `sgf`) and a
//! backfill modifier (`+easy`, `+conservative`); e.g. `sjf+easy`. Without a modifier the order
//! is strict: the first job that does not fit blocks every job behind it.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The order in which waiting jobs are considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// First in, first out: by submit time, then by arrival sequence.
    Fifo,
    /// Shortest (estimated) job first: by run-time estimate, then submit time.
    Sjf,
    /// Smallest GPU count first: by GPUs, then submit time.
    Sgf,
}

impl Order {
    /// Whether this order needs a run-time estimate (and so runs as an oracle without one).
    pub fn needs_estimate(self) -> bool {
        matches!(self, Order::Sjf)
    }

    /// The sort key of a waiting job; smaller runs first. Static: it never changes while the
    /// job waits, so queues can keep jobs in a sorted set.
    pub fn key(self, submit: Time, gpus: u32, estimate: Time) -> (i64, i64) {
        match self {
            Order::Fifo => (submit, 0),
            Order::Sjf => (estimate, submit),
            Order::Sgf => (gpus as i64, submit),
        }
    }
}

/// Backfill: whether jobs behind a blocked one may start, and under which guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backfill {
    /// Strict order: the first job that does not fit blocks all behind it.
    None,
    /// EASY: the first blocked job gets a reservation at the earliest time it can start (from
    /// running jobs' estimated ends); a later job may start now only if it does not delay it.
    Easy,
    /// Conservative: every waiting job, in order, gets a reservation at the earliest time it fits
    /// without delaying any reservation before it; jobs whose reservation is now start.
    Conservative,
}

/// A full policy: order plus backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// Queue order.
    pub order: Order,
    /// Backfill modifier.
    pub backfill: Backfill,
}

impl PolicySpec {
    /// Whether the policy reads run-time estimates (backfill always does).
    pub fn needs_estimate(&self) -> bool {
        self.order.needs_estimate() || self.backfill != Backfill::None
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = match self.order {
            Order::Fifo => "fifo",
            Order::Sjf => "sjf",
            Order::Sgf => "sgf",
        };
        let b = match self.backfill {
            Backfill::None => "",
            Backfill::Easy => "+easy",
            Backfill::Conservative => "+conservative",
        };
        write!(f, "{o}{b}")
    }
}

/// Why a policy name could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown policy `{name}`: {why} (orders: fifo, sjf, sgf; modifiers: +easy, +conservative; e.g. `sjf+easy`)")]
pub struct PolicyParseError {
    /// The name given.
    pub name: String,
    /// What was wrong.
    pub why: String,
}

impl FromStr for PolicySpec {
    type Err = PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: String| PolicyParseError { name: s.to_string(), why };
        let mut parts = s.trim().split('+');
        let order = match parts.next().unwrap_or("").trim() {
            "fifo" => Order::Fifo,
            "sjf" => Order::Sjf,
            "sgf" => Order::Sgf,
            other => return Err(err(format!("`{other}` is not an order"))),
        };
        let mut backfill = Backfill::None;
        for m in parts {
            let b = match m.trim() {
                "easy" => Backfill::Easy,
                "conservative" => Backfill::Conservative,
                other => return Err(err(format!("`+{other}` is not a modifier"))),
            };
            if backfill != Backfill::None {
                return Err(err("at most one backfill modifier".into()));
            }
            backfill = b;
        }
        Ok(PolicySpec { order, backfill })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_names() {
        for n in ["fifo", "sjf", "sgf", "fifo+easy", "sjf+easy", "sgf+conservative"] {
            let p: PolicySpec = n.parse().unwrap();
            assert_eq!(p.to_string(), n);
        }
        assert!("lifo".parse::<PolicySpec>().is_err());
        assert!("fifo+easy+conservative".parse::<PolicySpec>().is_err());
        assert!("fifo+fast".parse::<PolicySpec>().is_err());
    }
}
