//! How numbers read in every table and sentence ordo prints: durations (`3.2h`), percentages
//! with one decimal, and counts with thousands separators (`8,300`).

/// Formats seconds as a short human duration (`42s`, `7.5m`, `3.2h`, `4.1d`).
pub fn dur(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.0}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 86400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86400.0)
    }
}

/// A fraction as a percentage with one decimal (`0.934` -> `93.4%`).
pub fn pct1(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A number rounded to a whole number, with `,` between groups of three digits (`-8,300`).
pub fn thousands(x: f64) -> String {
    fixed(x, 0)
}

/// GPU-hours as read at a glance: whole numbers with separators from 100 up, one decimal from
/// 1, two below (`8,300`, `12.5`, `0.03`).
pub fn gpu_hours(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        thousands(x)
    } else if x.abs() >= 1.0 {
        fixed(x, 1)
    } else {
        fixed(x, 2)
    }
}

/// A number with `decimals` decimals and `,` between groups of three digits of its whole part.
pub fn fixed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let (sign, rest) = match s.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", s.as_str()),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    if !int.bytes().all(|b| b.is_ascii_digit()) {
        return s; // inf, NaN
    }
    let out = ordo_core::words::group_digits(int);
    let sign = if out.bytes().all(|b| b == b'0' || b == b',') && frac.is_none_or(|f| f.bytes().all(|b| b == b'0')) {
        "" // no "-0"
    } else {
        sign
    };
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            (dur(42.0), dur(450.0), dur(3.2 * 3600.0), dur(4.1 * 86400.0)),
            ("42s".into(), "7.5m".into(), "3.2h".into(), "4.1d".into())
        );
    }

    #[test]
    fn separators() {
        assert_eq!(thousands(8300.4), "8,300");
        assert_eq!(thousands(-1234567.0), "-1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-0.2), "0");
        assert_eq!(fixed(476.84, 1), "476.8");
        assert_eq!(fixed(12345.678, 2), "12,345.68");
        assert_eq!(pct1(0.9345), "93.5%");
        assert_eq!(
            (gpu_hours(8300.2), gpu_hours(12.46), gpu_hours(0.034)),
            ("8,300".into(), "12.5".into(), "0.03".into())
        );
        assert_eq!(gpu_hours(0.0), "0");
    }
}
