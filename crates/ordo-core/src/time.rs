//! Time in ordo is an integer count of milliseconds since the start of a workload.
//! Integers keep event ordering exact and runs byte-for-byte reproducible.

/// Milliseconds since the workload's epoch (for traces: the first arrival after rebasing).
pub type Time = i64;

/// One second in [`Time`] units.
pub const SECOND: Time = 1000;

/// Converts seconds (possibly fractional) to [`Time`], rounding to the nearest millisecond.
pub fn from_secs_f64(secs: f64) -> Time {
    (secs * 1000.0).round() as Time
}

/// Converts [`Time`] to seconds.
pub fn to_secs_f64(t: Time) -> f64 {
    t as f64 / 1000.0
}
