//! Daily sending windows (`--window 22:00-06:00 --tz Europe/Bucharest`): whether an instant is
//! inside, when the next window opens, and where a given amount of open time ends.

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// A window that opens every day at `start` and closes at `end` (local time in `tz`); when
/// `end <= start` it closes the next day (`22:00-06:00`). Local times that a daylight-saving
/// change skips or repeats resolve as jiff's "compatible" rule does (a skipped time moves
/// forward by the gap; a repeated one takes its first occurrence).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    start: Time,
    end: Time,
    tz: TimeZone,
    text: String,
}

fn parse_time(s: &str) -> Result<Time, String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    let num = |p: &str, max: i8, what: &str| -> Result<i8, String> {
        match p.parse::<i8>() {
            Ok(v) if (0..=max).contains(&v) && p.len() <= 2 => Ok(v),
            _ => Err(format!("{what} {p:?} is not a number from 0 to {max}")),
        }
    };
    let (h, m, sec) = match parts.as_slice() {
        [h, m] => (num(h, 23, "hour")?, num(m, 59, "minute")?, 0),
        [h, m, s] => (num(h, 23, "hour")?, num(m, 59, "minute")?, num(s, 59, "second")?),
        _ => return Err(format!("{s:?} is not a time of day like 22:00 or 06:30:00")),
    };
    Time::new(h, m, sec, 0).map_err(|e| e.to_string())
}

impl Window {
    /// Parse `HH:MM-HH:MM` (seconds optional) in the time zone `tz` (an IANA name such as
    /// `Europe/Bucharest` or `UTC`; `None`: the system's time zone).
    pub fn parse(spec: &str, tz: Option<&str>) -> Result<Window, String> {
        let Some((a, b)) = spec.split_once('-') else {
            return Err(format!("--window: expected START-END such as 22:00-06:00, found {spec:?}"));
        };
        let start = parse_time(a).map_err(|e| format!("--window: {e}"))?;
        let end = parse_time(b).map_err(|e| format!("--window: {e}"))?;
        if start == end {
            return Err(format!(
                "--window: {spec:?} opens and closes at the same time (leave --window out to send at any time)"
            ));
        }
        let tz = match tz {
            Some(name) => TimeZone::get(name)
                .map_err(|e| format!("--tz: {name:?} is not a known time zone (e.g. Europe/Bucharest, UTC): {e}"))?,
            None => TimeZone::system(),
        };
        let tzname = tz.iana_name().unwrap_or("system time zone").to_string();
        Ok(Window { start, end, tz, text: format!("{} {tzname}", spec.trim()) })
    }

    /// The window as given, with its time zone (`22:00-06:00 Europe/Bucharest`).
    pub fn describe(&self) -> &str {
        &self.text
    }

    /// An RFC 3339 time as local time in the window's zone (`2025-01-15 22:00:00 EET`); the
    /// text as it is when it is not a time.
    pub fn local(&self, t: &str) -> String {
        match t.parse::<Timestamp>() {
            Ok(ts) => ts.to_zoned_datetime(self.tz.clone()).strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
            Err(_) => t.to_string(),
        }
    }

    /// The time zone of the window.
    pub fn tz(&self) -> &TimeZone {
        &self.tz
    }

    /// The open interval that starts on local date `d`.
    fn interval(&self, d: Date) -> Option<(Timestamp, Timestamp)> {
        let open = self.tz.to_timestamp(d.to_datetime(self.start)).ok()?;
        let close_day = if self.end > self.start { d } else { d.tomorrow().ok()? };
        let close = self.tz.to_timestamp(close_day.to_datetime(self.end)).ok()?;
        Some((open, close))
    }

    /// The first open interval that ends after `t` (it may already be open at `t`).
    fn current_or_next(&self, t: Timestamp) -> (Timestamp, Timestamp) {
        let mut d = self.tz.to_datetime(t).date().yesterday().unwrap_or(self.tz.to_datetime(t).date());
        for _ in 0..4 {
            if let Some((o, c)) = self.interval(d) {
                if c > t && c > o {
                    return (o, c);
                }
            }
            match d.tomorrow() {
                Ok(n) => d = n,
                Err(_) => break,
            }
        }
        // Out of jiff's range (year 9999): treat as always open.
        (t, Timestamp::MAX)
    }

    /// Whether `t` is inside a window.
    pub fn is_open(&self, t: Timestamp) -> bool {
        let (o, c) = self.current_or_next(t);
        o <= t && t < c
    }

    /// `t` when the window is open at `t`, else when it next opens.
    pub fn next_open(&self, t: Timestamp) -> Timestamp {
        let (o, _) = self.current_or_next(t);
        o.max(t)
    }

    /// When the window that is open at `t` (or the next one) closes.
    pub fn closes_after(&self, t: Timestamp) -> Timestamp {
        self.current_or_next(t).1
    }

    /// The instant at which `open_s` seconds of open time, counted from `t`, have passed
    /// (sending that starts at `t` and needs `open_s` seconds inside windows ends then).
    pub fn advance_open(&self, t: Timestamp, open_s: f64) -> Timestamp {
        let mut left = SignedDuration::try_from_secs_f64(open_s.max(0.0)).unwrap_or(SignedDuration::MAX);
        let mut now = self.next_open(t);
        loop {
            let close = self.closes_after(now);
            let avail = close.duration_since(now);
            if left < avail {
                return now.checked_add(left).unwrap_or(Timestamp::MAX);
            }
            if close == Timestamp::MAX {
                return close;
            }
            left = left.saturating_sub(avail);
            now = self.next_open(close);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn overnight_window_in_bucharest() {
        // Bucharest is UTC+2 in winter: 22:00-06:00 local is 20:00-04:00 UTC.
        let w = Window::parse("22:00-06:00", Some("Europe/Bucharest")).expect("window");
        assert_eq!(w.describe(), "22:00-06:00 Europe/Bucharest");
        assert_eq!(w.local("2025-01-15T20:00:00Z"), "2025-01-15 22:00:00 EET");
        assert!(!w.is_open(ts("2025-01-15T12:00:00Z")));
        assert!(w.is_open(ts("2025-01-15T20:00:00Z")));
        assert!(w.is_open(ts("2025-01-16T03:59:59Z")));
        assert!(!w.is_open(ts("2025-01-16T04:00:00Z")));
        assert_eq!(w.next_open(ts("2025-01-15T12:00:00Z")), ts("2025-01-15T20:00:00Z"));
        assert_eq!(w.next_open(ts("2025-01-15T21:00:00Z")), ts("2025-01-15T21:00:00Z"));
        assert_eq!(w.closes_after(ts("2025-01-15T21:00:00Z")), ts("2025-01-16T04:00:00Z"));
        // 10 open hours from noon: 8 h the first night, 2 h the next one.
        assert_eq!(w.advance_open(ts("2025-01-15T12:00:00Z"), 10.0 * 3600.0), ts("2025-01-16T22:00:00Z"));
    }

    #[test]
    fn daylight_saving_changes_the_utc_times() {
        // Summer: UTC+3, so 22:00 local is 19:00 UTC.
        let w = Window::parse("22:00-23:00", Some("Europe/Bucharest")).expect("window");
        assert_eq!(w.next_open(ts("2025-07-01T00:00:00Z")), ts("2025-07-01T19:00:00Z"));
        // The night of 30 March 2025, 03:00 local becomes 04:00: a 02:30-04:30 window is 1 h long.
        let w = Window::parse("02:30-04:30", Some("Europe/Bucharest")).expect("window");
        let o = w.next_open(ts("2025-03-28T12:00:00Z"));
        let o2 = w.next_open(ts("2025-03-29T12:00:00Z"));
        assert_eq!(w.closes_after(o).duration_since(o), SignedDuration::from_hours(2));
        assert_eq!(w.closes_after(o2).duration_since(o2), SignedDuration::from_hours(1));
    }

    #[test]
    fn bad_windows_say_why() {
        assert!(Window::parse("22-06", None).unwrap_err().contains("time of day"));
        assert!(Window::parse("25:00-06:00", None).unwrap_err().contains("hour"));
        assert!(Window::parse("06:00", None).unwrap_err().contains("START-END"));
        assert!(Window::parse("06:00-06:00", None).unwrap_err().contains("same time"));
        assert!(Window::parse("22:00-06:00", Some("Mars/Olympus")).unwrap_err().contains("--tz"));
    }
}
