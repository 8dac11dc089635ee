//! [`SlurmError`]: what can go wrong talking to Slurm or reading what it printed.
//! "Unreachable" errors are told apart so the driver can wait out an outage.

use std::time::Duration;

/// An error from a Slurm client command or from parsing its output.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command could not be started (not installed, not on `PATH`).
    #[error("cannot run `{cmd}`: {err} (is Slurm's client installed and on PATH?)")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The OS error.
        err: std::io::Error,
    },
    /// The command did not finish within the timeout (a Slurm client hangs while no controller
    /// answers); it was killed.
    #[error("`{cmd}` did not answer within {timeout:?} (controller down or overloaded?)")]
    Timeout {
        /// The command line.
        cmd: String,
        /// The limit.
        timeout: Duration,
    },
    /// The command ran and failed.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// The exit status as text.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// The output did not have the expected shape.
    #[error("{source_name}: {location}: {what}")]
    Parse {
        /// Which command's output or which file.
        source_name: String,
        /// Where in it (line, job, field).
        location: String,
        /// What was expected and what was found.
        what: String,
    },
    /// The policy cannot be applied through priorities, or a setting is out of range.
    #[error("{0}")]
    Policy(String),
    /// Reading or writing a local file (the audit log) failed.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        err: std::io::Error,
    },
}

/// Words of Slurm's (and curl's, and slurmrestd's) messages that mean the controller did not
/// answer: the request may not have reached it, or its answer was lost.
const UNREACHABLE: [&str; 13] = [
    "unable to contact slurm controller",
    "connection refused",
    "connect failure",
    "socket timed out",
    "slurm_receive_msg",
    "slurmctld",
    "zero bytes were transmitted",
    "unexpected message received",
    "communication connection failure",
    "not responding",
    "standby mode",
    "timed out",
    "connection reset",
];

/// True when a message from Slurm means its controller did not answer (see [`UNREACHABLE`]).
pub fn means_unreachable(msg: &str) -> bool {
    let s = msg.to_ascii_lowercase();
    UNREACHABLE.iter().any(|w| s.contains(w))
}

/// True when a refused update means only that the job is no longer one ordo may change: it
/// ended, started or was held between the read and the update. The pass goes on past these.
pub fn means_job_gone(msg: &str) -> bool {
    let s = msg.to_ascii_lowercase();
    ["invalid job id", "already completing or completed", "already finished", "no longer pending", "job is held"]
        .iter()
        .any(|w| s.contains(w))
}

impl SlurmError {
    /// True when the error means "Slurm did not answer" (timeout, or a client that could not
    /// reach the controller), as opposed to a refusal or bad output: the driver waits and
    /// retries on these, changing nothing.
    pub fn is_unreachable(&self) -> bool {
        match self {
            SlurmError::Timeout { .. } => true,
            SlurmError::Failed { stderr, .. } => means_unreachable(stderr),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_outages_from_refusals() {
        // What `scontrol update` prints when the controller goes away during a pass (22.05).
        assert!(means_unreachable("Unexpected message received for job 4711"));
        assert!(means_unreachable("Unable to contact slurm controller (connect failure)"));
        assert!(means_unreachable("Socket timed out on send/recv operation"));
        assert!(!means_unreachable("Invalid job id specified for job 4711"));
        assert!(means_job_gone("Invalid job id specified for job 4711"));
        assert!(means_job_gone("Job/step already completing or completed for job 3"));
        assert!(!means_job_gone("Access/permission denied for job 3"));
        let e = SlurmError::Failed {
            cmd: "scontrol".into(),
            status: "1".into(),
            stderr: "Zero Bytes were transmitted or received".into(),
        };
        assert!(e.is_unreachable());
    }
}
