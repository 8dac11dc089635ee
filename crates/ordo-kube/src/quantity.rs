//! Kubernetes resource quantities (`500m`, `2`, `16Gi`, `1e3`) read exactly, as integers in the
//! unit ordo needs (CPU thousandths, bytes, whole devices), with a typed error for anything else.

use std::fmt;

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity `{text}`: {why}")]
pub struct QuantityError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A non-negative quantity as an exact fraction `num / den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    num: u128,
    den: u128,
}

/// The largest value ordo accepts in any unit (far above any real node: 2^62).
const MAX: u128 = 1 << 62;

impl Quantity {
    /// Reads a quantity in Kubernetes' syntax: a decimal number (no sign other than `+`) and
    /// an optional suffix: `Ki Mi Gi Ti Pi Ei`, `n u m k M G T P E`, or `e`/`E` and an exponent.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = |why| QuantityError { text: text.to_string(), why };
        let s = text.trim();
        let s = s.strip_prefix('+').unwrap_or(s);
        if s.starts_with('-') {
            return Err(err("negative"));
        }
        let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (number, suffix) = s.split_at(end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(err("no number"));
        }
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        if int.len() + frac.len() > 24 {
            return Err(err("too many digits"));
        }
        let mut num: u128 = 0;
        for c in int.bytes().chain(frac.bytes()) {
            num = num * 10 + u128::from(c - b'0');
        }
        let mut den: u128 = 10u128.pow(frac.len() as u32);
        let (mul, div): (u128, u128) = match suffix {
            "" => (1, 1),
            "Ki" => (1 << 10, 1),
            "Mi" => (1 << 20, 1),
            "Gi" => (1 << 30, 1),
            "Ti" => (1 << 40, 1),
            "Pi" => (1 << 50, 1),
            "Ei" => (1 << 60, 1),
            "n" => (1, 1_000_000_000),
            "u" => (1, 1_000_000),
            "m" => (1, 1_000),
            "k" => (1_000, 1),
            "M" => (1_000_000, 1),
            "G" => (1_000_000_000, 1),
            "T" => (1_000_000_000_000, 1),
            "P" => (1_000_000_000_000_000, 1),
            "E" => (1_000_000_000_000_000_000, 1),
            e if e.starts_with(['e', 'E']) => {
                let x: i32 = e[1..].parse().map_err(|_| err("bad exponent"))?;
                if !(-18..=18).contains(&x) {
                    return Err(err("exponent out of range"));
                }
                if x >= 0 {
                    (10u128.pow(x as u32), 1)
                } else {
                    (1, 10u128.pow((-x) as u32))
                }
            }
            _ => return Err(err("unknown suffix")),
        };
        num = num.checked_mul(mul).ok_or_else(|| err("too large"))?;
        den *= div;
        let q = Quantity { num, den };
        if q.num / q.den > MAX {
            return Err(err("too large"));
        }
        Ok(q)
    }

    /// The value times `unit`, rounded up (what a request needs at least).
    fn scaled_up(self, unit: u128) -> u64 {
        (self.num * unit).div_ceil(self.den).min(MAX) as u64
    }

    /// The value times `unit`, rounded down (what a node offers at most).
    fn scaled_down(self, unit: u128) -> u64 {
        ((self.num * unit) / self.den).min(MAX) as u64
    }

    /// CPU in thousandths of a core, rounded up (`500m` -> 500, `2` -> 2000).
    pub fn milli_up(self) -> u64 {
        self.scaled_up(1000)
    }

    /// CPU in thousandths of a core, rounded down.
    pub fn milli_down(self) -> u64 {
        self.scaled_down(1000)
    }

    /// Bytes, rounded up.
    pub fn bytes_up(self) -> u64 {
        self.scaled_up(1)
    }

    /// Bytes, rounded down.
    pub fn bytes_down(self) -> u64 {
        self.scaled_down(1)
    }

    /// A whole count (GPUs and other extended resources must be whole numbers).
    pub fn whole(self) -> Option<u64> {
        self.num.is_multiple_of(self.den).then(|| (self.num / self.den) as u64)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn reads_every_suffix() {
        assert_eq!(q("500m").milli_up(), 500);
        assert_eq!(q("2").milli_up(), 2000);
        assert_eq!(q("0.5").milli_up(), 500);
        assert_eq!(q("1.5").milli_up(), 1500);
        assert_eq!(q("100u").milli_up(), 1);
        assert_eq!(q("100u").milli_down(), 0);
        assert_eq!(q("16Gi").bytes_up(), 16 << 30);
        assert_eq!(q("1k").bytes_up(), 1000);
        assert_eq!(q("1M").bytes_up(), 1_000_000);
        assert_eq!(q("1e3").bytes_up(), 1000);
        assert_eq!(q("1E-3").milli_up(), 1);
        assert_eq!(q("+8").whole(), Some(8));
        assert_eq!(q("8").whole(), Some(8));
        assert_eq!(q("1.5").whole(), None);
        assert_eq!(q("129500Mi").bytes_down(), 129500 << 20);
        assert_eq!(q(".5").milli_up(), 500);
    }

    #[test]
    fn refuses_bad_text() {
        for bad in [
            "",
            "-1",
            "abc",
            "1x",
            "1e",
            "1e99",
            "99999999999999999999999999",
            "1Ei1",
            ".",
            "1.2.3",
            "1..5",
            "..",
            "1.5.Gi",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
        assert!(Quantity::parse("9Ei").is_err());
    }
}
