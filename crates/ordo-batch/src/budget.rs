//! `--max-cost`: per-client spending limits of a live run. A request is sent only if its
//! client's spend so far (earlier runs' answers included), plus what is in flight, plus its own
//! most expensive cost stays within the limit; otherwise that client's run stops there.

use crate::config::Prices;
use crate::input::Request;
use crate::plan::output_tokens;
use serde::Serialize;
use std::collections::HashMap;

/// Spending limits, in the currency of prices.toml.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// Limit of every client not named.
    pub all: Option<f64>,
    /// Limits of named clients.
    pub per_client: HashMap<String, f64>,
}

impl Budget {
    /// Parse `--max-cost` values: `5` (every client) or `acme=2.5` (one client), repeatable.
    pub fn parse(items: &[String]) -> Result<Budget, String> {
        let mut b = Budget::default();
        for it in items {
            let (who, v) = match it.split_once('=') {
                Some((c, v)) => (Some(c.trim()), v),
                None => (None, it.as_str()),
            };
            let x: f64 =
                v.trim().parse().ok().filter(|x: &f64| *x >= 0.0 && x.is_finite()).ok_or_else(|| {
                    format!("--max-cost: expected AMOUNT or CLIENT=AMOUNT (a number >= 0), found {it:?}")
                })?;
            match who {
                Some("") => return Err(format!("--max-cost: empty client name in {it:?}")),
                Some(c) => {
                    b.per_client.insert(c.to_string(), x);
                }
                None => b.all = Some(x),
            }
        }
        Ok(b)
    }

    /// The limit of `client`, if any.
    pub fn limit(&self, client: &str) -> Option<f64> {
        self.per_client.get(client).copied().or(self.all)
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.per_client.is_empty()
    }
}

/// The most a request can cost live: all its input uncached and all its `max_tokens` of output.
pub fn max_cost(r: &Request, prices: &Prices, assumed: u64) -> Option<f64> {
    prices.for_model(&r.model).map(|p| p.cost(r.input_tokens, 0, output_tokens(r, assumed)))
}

/// A client whose run stopped at its limit.
#[derive(Debug, Clone, Serialize)]
pub struct OverBudget {
    /// The client.
    pub client: String,
    /// Its limit.
    pub limit: f64,
    /// Spent by its answered requests (this run and earlier ones).
    pub spent: f64,
    /// Its requests not sent.
    pub not_sent: usize,
}

/// Spend of each client while a run goes on.
#[derive(Debug, Default)]
pub struct Ledger {
    budget: Budget,
    spent: HashMap<String, f64>,
    in_flight: HashMap<String, f64>,
    stopped: HashMap<String, usize>,
}

impl Ledger {
    /// A ledger for `budget`, starting from `spent` (earlier runs' answers).
    pub fn new(budget: Budget, spent: HashMap<String, f64>) -> Ledger {
        Ledger { budget, spent, ..Ledger::default() }
    }

    /// Reserve `cost` for a request of `client`; false (and the client stops) when that could
    /// pass its limit. A stopped client reserves nothing more.
    pub fn reserve(&mut self, client: &str, cost: f64) -> bool {
        if let Some(n) = self.stopped.get_mut(client) {
            *n += 1;
            return false;
        }
        let Some(limit) = self.budget.limit(client) else { return true };
        let used = self.spent.get(client).copied().unwrap_or(0.0) + self.in_flight.get(client).copied().unwrap_or(0.0);
        if used + cost > limit + 1e-12 {
            self.stopped.insert(client.to_string(), 1);
            return false;
        }
        *self.in_flight.entry(client.to_string()).or_default() += cost;
        true
    }

    /// A request reserved with `reserved` was answered and cost `actual`.
    pub fn settle(&mut self, client: &str, reserved: f64, actual: f64) {
        if let Some(f) = self.in_flight.get_mut(client) {
            *f = (*f - reserved).max(0.0);
        }
        *self.spent.entry(client.to_string()).or_default() += actual;
    }

    /// The clients that stopped, by name.
    pub fn over(&self) -> Vec<OverBudget> {
        let mut v: Vec<OverBudget> = self
            .stopped
            .iter()
            .map(|(c, &n)| OverBudget {
                client: c.clone(),
                limit: self.budget.limit(c).unwrap_or(0.0),
                spent: self.spent.get(c).copied().unwrap_or(0.0),
                not_sent: n,
            })
            .collect();
        v.sort_by(|a, b| a.client.cmp(&b.client));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_per_client_and_for_all() {
        let b = Budget::parse(&["5".into(), "acme=2.5".into()]).expect("valid");
        assert_eq!((b.limit("acme"), b.limit("globex")), (Some(2.5), Some(5.0)));
        assert!(Budget::parse(&["acme=-1".into()]).is_err());
        assert!(Budget::parse(&["=3".into()]).is_err());
        assert!(Budget::parse(&["lots".into()]).unwrap_err().contains("CLIENT=AMOUNT"));
    }

    #[test]
    fn a_client_stops_before_it_could_pass_its_limit() {
        let mut l =
            Ledger::new(Budget::parse(&["acme=1.0".into()]).expect("valid"), HashMap::from([("acme".into(), 0.25)]));
        assert!(l.reserve("acme", 0.5)); // 0.25 spent + 0.5 in flight
        assert!(!l.reserve("acme", 0.3)); // 1.05 > 1.0: stops
        l.settle("acme", 0.5, 0.1);
        assert!(!l.reserve("acme", 0.01), "a stopped client stays stopped");
        assert!(l.reserve("globex", 100.0), "no limit");
        let o = l.over();
        assert_eq!((o.len(), o[0].not_sent), (1, 2));
        assert!((o[0].spent - 0.35).abs() < 1e-12);
    }
}
