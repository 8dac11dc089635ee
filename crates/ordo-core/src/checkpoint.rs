//! What a preemption costs a job: how much of the work it did survives (its checkpointing) and
//! what guards it from being preempted again and again before it makes progress. One concern:
//! the scheduler asks it how much executed time a preempted run keeps; the simulator asks it
//! how much work survives and what a restart costs.
//!
//! - `continuous`: the job resumes exactly where it stopped (what Tiresias, Lucid and ordo's
//!   default model assume; the only loss is the restart overhead).
//! - `none`: the job cannot checkpoint: it restarts from zero, everything it did is lost.
//! - `every:T`: it saves a checkpoint every `T` of useful run time, counted from the start of
//!   each run (after the restart overhead); a preemption loses the time since the last one.
//! - `signal:G`: it checkpoints when told (Slurm's `--signal=SIG@TIME`): it loses nothing, but
//!   saving takes up to `G`, counted as extra restart overhead of its next run (the simulator
//!   frees its GPUs at the signal; a live server holds them until it exits).

use crate::{policy::parse_duration, Time};
use std::fmt;
use std::str::FromStr;

/// How a job's work survives a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checkpoint {
    /// Resumes exactly where it stopped.
    #[default]
    Continuous,
    /// Restarts from zero.
    None,
    /// Saves every so much useful run time (ms, > 0); loses the time since the last save.
    Every(Time),
    /// Saves when signalled, taking up to this long (ms): loses nothing, restarts this much later.
    Signal(Time),
}

impl Checkpoint {
    /// Of `useful` ms of useful run time (after the restart overhead) in the run a preemption
    /// stops, how many survive. `None` for a job that restarts from zero: it loses that run and
    /// every run before it.
    pub fn kept(self, useful: Time) -> Option<Time> {
        let useful = useful.max(0);
        match self {
            Checkpoint::Continuous | Checkpoint::Signal(_) => Some(useful),
            Checkpoint::None => None,
            Checkpoint::Every(t) => Some(useful / t.max(1) * t.max(1)),
        }
    }

    /// Restart overhead beyond the configured one (the save on signal).
    pub fn extra_overhead(self) -> Time {
        match self {
            Checkpoint::Signal(g) => g,
            _ => 0,
        }
    }

    /// Whether a preemption can lose work that was done (not counting restart overhead).
    pub fn loses_work(self) -> bool {
        matches!(self, Checkpoint::None | Checkpoint::Every(_))
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |t: Time| {
            if t % 1000 == 0 {
                format!("{}s", t / 1000)
            } else {
                format!("{t}ms")
            }
        };
        match self {
            Checkpoint::Continuous => f.write_str("continuous"),
            Checkpoint::None => f.write_str("none"),
            Checkpoint::Every(t) => write!(f, "every:{}", secs(*t)),
            Checkpoint::Signal(g) => write!(f, "signal:{}", secs(*g)),
        }
    }
}

impl FromStr for Checkpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let dur = |v: &str, what: &str| {
            parse_duration(v).ok_or_else(|| format!("`{s}`: {what} must be a duration such as 30s, 10m, 1h"))
        };
        match s.split_once(':') {
            None if s == "continuous" => Ok(Checkpoint::Continuous),
            None if s == "none" => Ok(Checkpoint::None),
            Some(("every", v)) => match dur(v, "the interval")? {
                0 => Err(format!("`{s}`: the interval must be more than 0")),
                t => Ok(Checkpoint::Every(t)),
            },
            Some(("signal", v)) => Ok(Checkpoint::Signal(dur(v, "the grace")?)),
            _ => Err(format!("`{s}`: expected continuous, none, every:DURATION or signal:DURATION")),
        }
    }
}

/// The checkpoint rule of every job of a run: one default and overrides by queue (partition,
/// QoS class), the first that names a job's queue winning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointRules {
    /// For jobs whose queue has no rule.
    pub default: Checkpoint,
    /// `(queue, rule)`, queue names compared exactly.
    pub by_queue: Vec<(String, Checkpoint)>,
}

impl CheckpointRules {
    /// The rule for a job in `queue`.
    pub fn of(&self, queue: Option<&str>) -> Checkpoint {
        queue.and_then(|q| self.by_queue.iter().find(|(n, _)| n == q).map(|(_, c)| *c)).unwrap_or(self.default)
    }

    /// Whether every job resumes exactly where it stopped at no extra cost (the default).
    pub fn is_continuous(&self) -> bool {
        self.default == Checkpoint::Continuous && self.by_queue.iter().all(|(_, c)| *c == Checkpoint::Continuous)
    }

    /// Adds one `--checkpoint` value: `RULE` sets the default, `QUEUE=RULE` a queue's.
    pub fn add(&mut self, arg: &str) -> Result<(), String> {
        match arg.split_once('=') {
            Some((q, rule)) => {
                let q = q.trim();
                if q.is_empty() {
                    return Err(format!("`{arg}`: the queue name before `=` is empty"));
                }
                let c = rule.parse()?;
                match self.by_queue.iter_mut().find(|(n, _)| n == q) {
                    Some(e) => e.1 = c,
                    None => self.by_queue.push((q.to_string(), c)),
                }
            }
            None => self.default = arg.parse()?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in ["continuous", "none", "every:1800s", "signal:120s", "every:1500ms"] {
            assert_eq!(s.parse::<Checkpoint>().unwrap().to_string(), s);
        }
        assert_eq!("every:30m".parse::<Checkpoint>(), Ok(Checkpoint::Every(1_800_000)));
        for bad in ["", "every", "every:0", "every:x", "signal:-1", "sometimes", "none:1s"] {
            assert!(bad.parse::<Checkpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keeps_what_was_saved() {
        assert_eq!(Checkpoint::Continuous.kept(1234), Some(1234));
        assert_eq!(Checkpoint::Signal(5).kept(1234), Some(1234));
        assert_eq!(Checkpoint::None.kept(1234), None);
        assert_eq!(Checkpoint::Every(500).kept(1234), Some(1000));
        assert_eq!(Checkpoint::Every(500).kept(499), Some(0));
        assert_eq!(Checkpoint::Every(500).kept(-3), Some(0));
    }

    #[test]
    fn rules_by_queue() {
        let mut r = CheckpointRules::default();
        assert!(r.is_continuous());
        r.add("none").unwrap();
        r.add("train=every:10m").unwrap();
        r.add("train=every:20m").unwrap();
        assert_eq!(r.of(Some("train")), Checkpoint::Every(1_200_000));
        assert_eq!(r.of(Some("dev")), Checkpoint::None);
        assert_eq!(r.of(None), Checkpoint::None);
        assert!(r.add("=none").is_err());
        assert!(!r.is_continuous());
    }
}
