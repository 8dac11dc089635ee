//! [`Format`]: the trace formats ordo reads, their columns, and header detection.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Detect the format from the header line (see [`Format::detect`]).
    #[default]
    Auto,
    /// ordo's own CSV: a header row naming the columns `job_id,submit_time,num_gpu,duration`
    /// (required) and `user,group,estimate,priority` (optional), in any order. Times are seconds
    /// (fractions allowed); `num_gpu` is a whole number >= 0; `priority` an integer. An empty
    /// optional cell means "absent"; a missing user or group is `"default"`.
    Generic,
    /// The Philly trace as published by RFold: header
    /// `#job id,arrival time (sec),topology,shape,size,duration (sec)`; `size` is the GPU count.
    /// No users, groups or estimates (every job is user and group `"default"`).
    Philly,
}

impl Format {
    /// Every format, `Auto` first.
    pub const ALL: [Format; 3] = [Format::Auto, Format::Generic, Format::Philly];

    /// The name used on the command line and in messages (`auto`, `generic`, `philly`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Generic => "generic",
            Format::Philly => "philly",
        }
    }

    /// Detects the format from the header's fields (already split, surrounding whitespace
    /// allowed): `Philly` when the first field starts with `#job id`, `Generic` when some fields
    /// are `job_id` and `submit_time`, otherwise `None`. Never returns `Auto`.
    pub fn detect<S: AsRef<str>>(header: &[S]) -> Option<Format> {
        let first = header.first().map(|f| f.as_ref().trim());
        if first.is_some_and(|f| f.starts_with("#job id")) {
            return Some(Format::Philly);
        }
        let has = |name: &str| header.iter().any(|f| f.as_ref().trim() == name);
        if has("job_id") && has("submit_time") {
            return Some(Format::Generic);
        }
        None
    }

    /// The columns of a concrete format (empty for `Auto`).
    pub(crate) fn columns(self) -> &'static [Column] {
        match self {
            Format::Auto => &[],
            Format::Generic => GENERIC,
            Format::Philly => PHILLY,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Format::from_str`]: the name is not a known format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format `{0}` (known: auto, generic, philly)")]
pub struct ParseFormatError(pub String);

impl FromStr for Format {
    type Err = ParseFormatError;

    /// Parses `auto`, `generic` or `philly` (ASCII case-insensitive, surrounding whitespace
    /// ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseFormatError(s.to_string()))
    }
}

/// What a column means to the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Id,
    Submit,
    Gpus,
    Duration,
    User,
    Group,
    Estimate,
    Priority,
    /// Known but not used (Philly's `topology`, `shape`).
    Ignore,
}

/// A column a format knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub name: &'static str,
    /// Required columns are those of roles `Id`, `Submit`, `Gpus` and `Duration`.
    pub role: Role,
}

const fn col(name: &'static str, role: Role) -> Column {
    Column { name, role }
}

const GENERIC: &[Column] = &[
    col("job_id", Role::Id),
    col("submit_time", Role::Submit),
    col("num_gpu", Role::Gpus),
    col("duration", Role::Duration),
    col("user", Role::User),
    col("group", Role::Group),
    col("estimate", Role::Estimate),
    col("priority", Role::Priority),
];

const PHILLY: &[Column] = &[
    col("#job id", Role::Id),
    col("arrival time (sec)", Role::Submit),
    col("topology", Role::Ignore),
    col("shape", Role::Ignore),
    col("size", Role::Gpus),
    col("duration (sec)", Role::Duration),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
        assert_eq!(" Philly ".parse::<Format>(), Ok(Format::Philly));
        let e = "swf".parse::<Format>().unwrap_err();
        assert!(e.to_string().contains("auto, generic, philly"), "{e}");
    }

    #[test]
    fn detects_headers() {
        let philly = ["#job id", "arrival time (sec)", "topology", "shape", "size", "duration (sec)"];
        assert_eq!(Format::detect(&philly), Some(Format::Philly));
        let generic = ["num_gpu", " submit_time", "job_id ", "duration"];
        assert_eq!(Format::detect(&generic), Some(Format::Generic));
        assert_eq!(Format::detect(&["a", "b"]), None);
        assert_eq!(Format::detect::<&str>(&[]), None);
    }
}
