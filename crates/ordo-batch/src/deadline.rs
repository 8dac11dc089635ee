//! Deadlines of requests (`--deadline`, `body.metadata.deadline`): earliest deadline first
//! within the rate limits, and which requests cannot be sent in time, said before sending.

use crate::config::Limits;
use crate::input::Request;
use crate::window::Window;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

/// When a request must be sent by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    /// An instant.
    At(Timestamp),
    /// Seconds after the run starts.
    After(f64),
}

/// Seconds in `90m`, `2h`, `1d`, `45s` or `3600` (seconds).
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1.0),
        Some((i, 'm')) => (&s[..i], 60.0),
        Some((i, 'h')) => (&s[..i], 3600.0),
        Some((i, 'd')) => (&s[..i], 86400.0),
        _ => (s, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mult),
        _ => Err(format!("expected a duration such as 90m, 2h or 3600, found {s:?}")),
    }
}

impl Deadline {
    /// A duration after the start (`2h`, `90m`, `3600`) or an RFC 3339 instant
    /// (`2025-01-15T22:00:00+02:00`, `2025-01-15T20:00:00Z`).
    pub fn parse(s: &str) -> Result<Deadline, String> {
        if s.contains('T') || s.matches('-').count() >= 2 {
            return s.trim().parse::<Timestamp>().map(Deadline::At).map_err(|e| {
                format!("expected an RFC 3339 time such as 2025-01-15T22:00:00+02:00, found {s:?} ({e})")
            });
        }
        parse_duration(s).map(Deadline::After).map_err(|e| format!("{e}, or an RFC 3339 time"))
    }

    /// The instant, for a run that starts at `start`.
    pub fn resolve(self, start: Timestamp) -> Timestamp {
        match self {
            Deadline::At(t) => t,
            Deadline::After(s) => start
                .checked_add(SignedDuration::try_from_secs_f64(s).unwrap_or(SignedDuration::MAX))
                .unwrap_or(Timestamp::MAX),
        }
    }
}

/// Each request's due time: its own `metadata.deadline`, else `default`.
pub fn due_times(reqs: &[Request], default: Option<Deadline>, start: Timestamp) -> Vec<Option<Timestamp>> {
    reqs.iter().map(|r| r.deadline.or(default).map(|d| d.resolve(start))).collect()
}

/// Earliest deadline first: `order` re-sorted by due time, stably (the base order breaks ties),
/// requests without a deadline last.
pub fn earliest_deadline_first(order: &mut [usize], due: &[Option<Timestamp>]) {
    order.sort_by_key(|&i| (due[i].is_none(), due[i]));
}

/// When each request would be sent, sending in `order` from `start`: each model paced by its
/// limits (the fluid bound of `plan`: request k goes after k / rpm and after its tokens before
/// it / tpm), and only while `window` is open when there is one.
pub fn predicted_sends(
    reqs: &[Request],
    order: &[usize],
    limits: &Limits,
    assumed: u64,
    start: Timestamp,
    window: Option<&Window>,
) -> Vec<Timestamp> {
    crate::plan::send_times(reqs, order, limits, assumed)
        .into_iter()
        .map(|s| match window {
            Some(w) => w.advance_open(start, s),
            None => start
                .checked_add(SignedDuration::try_from_secs_f64(s).unwrap_or(SignedDuration::MAX))
                .unwrap_or(Timestamp::MAX),
        })
        .collect()
}

/// A request that cannot be sent before its deadline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Late {
    /// Its id.
    pub custom_id: String,
    /// Its line in the file.
    pub line: usize,
    /// Its deadline (RFC 3339).
    pub due: String,
    /// The earliest it can be sent under the limits (and window), in deadline order (RFC 3339).
    pub earliest: String,
    /// By how many seconds it misses.
    pub late_s: f64,
}

/// `t` in RFC 3339 to the second (for people; the exact lateness is in [`Late::late_s`]).
pub fn whole_seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second()).unwrap_or(t).to_string()
}

/// The requests whose predicted send time is after their due time, earliest deadline first.
pub fn late(reqs: &[Request], due: &[Option<Timestamp>], sends: &[Timestamp]) -> Vec<Late> {
    let mut v: Vec<(Timestamp, Late)> = reqs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let d = due[i]?;
            (sends[i] > d).then(|| {
                (
                    d,
                    Late {
                        custom_id: r.custom_id.clone(),
                        line: r.line,
                        due: whole_seconds(d),
                        earliest: whole_seconds(sends[i]),
                        late_s: sends[i].duration_since(d).as_secs_f64(),
                    },
                )
            })
        })
        .collect();
    v.sort_by_key(|(d, l)| (*d, l.line));
    v.into_iter().map(|(_, l)| l).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_parse_as_durations_or_instants() {
        assert_eq!(Deadline::parse("90m"), Ok(Deadline::After(5400.0)));
        assert_eq!(Deadline::parse("3600"), Ok(Deadline::After(3600.0)));
        let t: Timestamp = "2025-01-15T20:00:00Z".parse().expect("time");
        assert_eq!(Deadline::parse("2025-01-15T22:00:00+02:00"), Ok(Deadline::At(t)));
        assert!(Deadline::parse("soon").unwrap_err().contains("RFC 3339"));
        assert!(Deadline::parse("2025-13-01T00:00:00Z").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(Deadline::After(60.0).resolve(t), "2025-01-15T20:01:00Z".parse::<Timestamp>().expect("time"));
    }

    #[test]
    fn edf_is_stable_and_puts_no_deadline_last() {
        let t = |s: i64| Some(Timestamp::from_second(1_700_000_000 + s).expect("time"));
        let due = vec![None, t(30), t(10), t(30), None, t(5)];
        let mut order = vec![0, 1, 2, 3, 4, 5];
        earliest_deadline_first(&mut order, &due);
        assert_eq!(order, vec![5, 2, 1, 3, 0, 4]);
    }
}
