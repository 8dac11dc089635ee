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
    /// The policy cannot be applied through priorities.
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

impl SlurmError {
    /// True when the error means "Slurm did not answer" (timeout, or a client that could not
    /// reach the controller), as opposed to a refusal or bad output: the driver waits and
    /// retries on these, changing nothing.
    pub fn is_unreachable(&self) -> bool {
        match self {
            SlurmError::Timeout { .. } => true,
            SlurmError::Failed { stderr, .. } => {
                let s = stderr.to_ascii_lowercase();
                s.contains("unable to contact slurm controller")
                    || s.contains("connection refused")
                    || s.contains("connect failure")
                    || s.contains("socket timed out")
                    || s.contains("slurm_receive_msg")
                    || s.contains("slurmctld")
                    || s.contains("zero bytes were transmitted")
            }
            _ => false,
        }
    }
}
