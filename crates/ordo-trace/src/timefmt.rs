//! Text forms of times found in traces: wall-clock dates (`2017-10-09 07:01:55`,
//! `2023-01-01T10:00:00`), Slurm durations (`1-02:03:04`) and exact decimal seconds.

use ordo_core::time::{self, Time};

/// Largest time (submit, duration, estimate) accepted, in seconds (about 31,700 years).
pub const MAX_SECONDS: f64 = 1e12;

/// Seconds (finite, in `0..=MAX_SECONDS`, fractions allowed) as [`Time`].
pub(crate) fn parse_secs(raw: &[u8]) -> Option<Time> {
    // Most traces write whole seconds: read those without the float parser (same result: a
    // whole number of at most 12 digits is below MAX_SECONDS and exact in f64).
    if let Some(n) = parse_digits(raw, 12) {
        return Some(n as Time * 1000);
    }
    let secs: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    (secs.is_finite() && (0.0..=MAX_SECONDS).contains(&secs)).then(|| time::from_secs_f64(secs))
}

/// A whole number written as 1 to `max` ASCII digits, optionally followed by a point and
/// zeros only (`42`, `42.0`, `42.`; no sign, no exponent), else `None`.
pub(crate) fn parse_digits(raw: &[u8], max: usize) -> Option<u64> {
    // One pass: this runs for every number of every row of a trace.
    let mut n = 0u64;
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if !b.is_ascii_digit() {
            break;
        }
        if i == max {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
        i += 1;
    }
    if i == 0 {
        return None;
    }
    match raw.get(i) {
        None => Some(n),
        Some(b'.') if raw[i + 1..].iter().all(|&b| b == b'0') => Some(n),
        Some(_) => None,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number since 1970-01-01: `(year, month, day)`.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0i64, |acc, &b| Some(acc * 10 + i64::from(b - b'0')))
}

/// A wall-clock date and time, read as UTC: `YYYY-MM-DD`, optionally followed by ` ` or `T` and
/// `HH:MM[:SS[.fff]]`; also `YYYY/MM/DD`. Years 1970..=9999. Returns milliseconds since the Unix
/// epoch, or `None` if the text is not such a date.
pub fn parse_datetime(raw: &[u8]) -> Option<Time> {
    let s = std::str::from_utf8(raw).ok()?.trim();
    let (date, clock) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], Some(s[i + 1..].trim())),
        None => (s, None),
    };
    let mut parts = date.split(['-', '/']);
    let y = digits(parts.next()?.as_bytes())?;
    let m = digits(parts.next()?.as_bytes())?;
    let d = digits(parts.next()?.as_bytes())?;
    if parts.next().is_some() || !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 {
        return None;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if d > month_days[(m - 1) as usize] {
        return None;
    }
    let mut ms = 0i64;
    if let Some(c) = clock {
        let (hms, frac) = match c.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (c, None),
        };
        let mut it = hms.split(':');
        let h = digits(it.next()?.as_bytes())?;
        let mi = digits(it.next()?.as_bytes())?;
        let sec = match it.next() {
            Some(x) => digits(x.as_bytes())?,
            None => 0,
        };
        if it.next().is_some() || h > 23 || mi > 59 || sec > 60 {
            return None;
        }
        ms = (h * 3600 + mi * 60 + sec) * 1000;
        if let Some(f) = frac {
            if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let mut v = 0i64;
            for (i, b) in f.bytes().take(3).enumerate() {
                v += i64::from(b - b'0') * [100, 10, 1][i];
            }
            ms += v;
        }
    }
    Some(days_from_civil(y, m, d) * 86_400_000 + ms)
}

/// A date and time as [`parse_datetime`] reads it, optionally followed by a UTC offset (`Z`,
/// `+08:00`, `-0500`, `+08`) after the clock, or seconds: milliseconds since the epoch, UTC.
pub(crate) fn parse_zoned(raw: &[u8]) -> Option<Time> {
    if let Some(t) = parse_secs(raw) {
        return Some(t);
    }
    let s = std::str::from_utf8(raw).ok()?.trim();
    let Some(clock_at) = s.find([' ', 'T']).map(|i| i + 1) else {
        return parse_datetime(s.as_bytes());
    };
    let clock = &s[clock_at..];
    if let Some(local) = clock.strip_suffix('Z') {
        return parse_datetime(&s.as_bytes()[..clock_at + local.len()]);
    }
    let Some(sign_at) = clock.rfind(['+', '-']) else {
        return parse_datetime(s.as_bytes());
    };
    let (local, offset) = (&s[..clock_at + sign_at], &clock[sign_at + 1..]);
    let (h, m) = match offset.split_once(':') {
        Some((h, m)) => (h, m),
        None if offset.len() == 4 => offset.split_at(2),
        None => (offset, "00"),
    };
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m) = (digits(h.as_bytes())?, digits(m.as_bytes())?);
    if h > 14 || m > 59 {
        return None;
    }
    let off = (h * 60 + m) * 60_000;
    let t = parse_datetime(local.trim_end().as_bytes())?;
    Some(if clock.as_bytes()[sign_at] == b'+' { t - off } else { t + off })
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC, milliseconds dropped).
pub fn format_datetime(t: Time) -> String {
    let secs = t.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// A time that is either plain seconds or a wall-clock date (see [`parse_datetime`]).
pub(crate) fn parse_clock(raw: &[u8]) -> Option<Time> {
    parse_secs(raw).or_else(|| parse_datetime(raw))
}

/// A Slurm duration: `[DAYS-]HH:MM:SS`, `MM:SS`, `MM` (minutes) or `DAYS-HH[:MM]`, fractions of
/// a second allowed in the seconds (`00:00:01.5`). Returns milliseconds.
pub fn parse_slurm_duration(raw: &[u8]) -> Option<Time> {
    let s = std::str::from_utf8(raw).ok()?.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(digits(d.as_bytes())?), r),
        None => (None, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let secs_part = |p: &str| -> Option<Time> {
        let (whole, frac) = match p.split_once('.') {
            Some((a, b)) => (a, b),
            None => (p, ""),
        };
        let mut ms = digits(whole.as_bytes())? * 1000;
        if !frac.is_empty() {
            if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            for (i, b) in frac.bytes().take(3).enumerate() {
                ms += i64::from(b - b'0') * [100, 10, 1][i];
            }
        }
        Some(ms)
    };
    let (h, m, sec) = match (days, parts.as_slice()) {
        (None, [m]) => (0, digits(m.as_bytes())?, 0),
        (None, [m, s]) => (0, digits(m.as_bytes())?, secs_part(s)?),
        (Some(_), [h]) => (digits(h.as_bytes())?, 0, 0),
        (Some(_), [h, m]) => (digits(h.as_bytes())?, digits(m.as_bytes())?, 0),
        (_, [h, m, s]) => (digits(h.as_bytes())?, digits(m.as_bytes())?, secs_part(s)?),
        _ => return None,
    };
    let total = days.unwrap_or(0) * 86_400_000 + h * 3_600_000 + m * 60_000 + sec;
    (total <= (MAX_SECONDS as i64) * 1000).then_some(total)
}

/// Milliseconds as exact decimal seconds: `1500` -> `1.500`, `-1` -> `-0.001`.
pub(crate) fn secs_text(t: Time) -> String {
    let sign = if t < 0 { "-" } else { "" };
    let a = t.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `parse_secs` gave before its whole-number fast path.
    fn by_float(raw: &[u8]) -> Option<Time> {
        let secs: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
        (secs.is_finite() && (0.0..=MAX_SECONDS).contains(&secs)).then(|| time::from_secs_f64(secs))
    }

    #[test]
    fn whole_seconds_are_read_without_the_float_parser() {
        assert_eq!(parse_digits(b"266563.0", 12), Some(266_563));
        assert_eq!(parse_digits(b"42.", 12), Some(42));
        assert_eq!(parse_digits(b"42.5", 12), None);
        assert_eq!(parse_digits(b"", 12), None);
        assert_eq!(parse_digits(b".0", 12), None);
        assert_eq!(parse_digits(b"-1", 12), None);
        assert_eq!(parse_digits(b"1e3", 12), None);
        assert_eq!(parse_digits(b"1234567890123", 12), None);
        assert_eq!(parse_secs(b"266563.0"), Some(266_563_000));
        assert_eq!(parse_secs(b"1.5"), Some(1_500));
        assert_eq!(parse_secs(b"1e3"), Some(1_000_000));
        assert_eq!(parse_secs(b"1000000000001"), None);
    }

    proptest! {
        /// The fast path gives exactly what the float parser gives, on numbers and on junk.
        #[test]
        fn parse_secs_agrees_with_the_float_parser(s in "[-+]?[0-9]{0,14}(\\.[0-9]{0,4})?(e[0-9])?|[0-9. a-z]{0,8}") {
            prop_assert_eq!(parse_secs(s.as_bytes()), by_float(s.as_bytes()), "{:?}", s);
        }
    }

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime(b"1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_datetime(b"1970-01-02"), Some(86_400_000));
        assert_eq!(parse_datetime(b"2017-10-09 07:01:55"), Some(1_507_532_515_000));
        assert_eq!(parse_datetime(b"2017-10-09T07:01:55.250"), Some(1_507_532_515_250));
        assert_eq!(parse_datetime(b"2000-02-29 00:00"), Some(951_782_400_000));
        for bad in [&b"2001-02-29"[..], b"2017-13-01", b"2017-10-09 24:00:00", b"x", b"", b"1969-12-31", b"2017-10"] {
            assert_eq!(parse_datetime(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(format_datetime(1_507_532_515_000), "2017-10-09 07:01:55");
        for days in [-1000i64, 0, 1, 10_957, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn slurm_durations() {
        assert_eq!(parse_slurm_duration(b"1-02:03:04"), Some(((26 * 60 + 3) * 60 + 4) * 1000));
        assert_eq!(parse_slurm_duration(b"00:10:00"), Some(600_000));
        assert_eq!(parse_slurm_duration(b"10:30"), Some(630_000));
        assert_eq!(parse_slurm_duration(b"60"), Some(3_600_000));
        assert_eq!(parse_slurm_duration(b"2-12"), Some(60 * 3_600_000));
        assert_eq!(parse_slurm_duration(b"00:00:01.5"), Some(1_500));
        for bad in [&b"UNLIMITED"[..], b"", b"-1", b"1:2:3:4", b"a:b", b"99999999999-00:00:00"] {
            assert_eq!(parse_slurm_duration(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
