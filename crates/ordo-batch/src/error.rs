//! Typed errors of ordo-batch: bad input lines (each with its line number and reason),
//! bad configuration files, and IO or HTTP failures.

use std::fmt;
use std::path::PathBuf;

/// One bad line of a request file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Everything that can go wrong in ordo-batch.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A file could not be read or written.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        err: std::io::Error,
    },
    /// The request file has bad lines; nothing was sent.
    #[error("{}", format_bad_lines(path, errors))]
    BadLines {
        /// The request file.
        path: PathBuf,
        /// Every bad line, in file order.
        errors: Vec<LineError>,
    },
    /// Requests that the provider's batch API cannot take (e.g. not convertible to Anthropic's
    /// shape); nothing was sent.
    #[error("{}", format_lines(&format!("{}: {} request{} cannot be sent to {provider}; nothing was sent", path.display(), errors.len(), if errors.len() == 1 { "" } else { "s" }), path, errors))]
    Unsendable {
        /// The request file.
        path: PathBuf,
        /// The provider's name.
        provider: &'static str,
        /// Every such line, in file order.
        errors: Vec<LineError>,
    },
    /// A configuration file (limits.toml, prices.toml) is malformed.
    #[error("{path}: {message}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong, with the line and field where known.
        message: String,
    },
    /// A request is larger than a provider's per-file byte limit.
    #[error("{path}:{line}: request {custom_id} is {bytes} bytes, more than max_bytes_per_file = {limit}")]
    TooLarge {
        /// The request file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// Its custom_id.
        custom_id: String,
        /// Its size in bytes (with the newline).
        bytes: usize,
        /// The limit.
        limit: u64,
    },
    /// A provider API call failed for good (after the retries its kind allows).
    #[error("{what}: {}{message}", status.map(|s| format!("HTTP {s}: ")).unwrap_or_default())]
    Http {
        /// The call (`POST /v1/batches`).
        what: String,
        /// The HTTP status, when there was an answer.
        status: Option<u16>,
        /// The provider's message, or the transport error.
        message: String,
    },
    /// An invalid option or state (e.g. an output directory that already holds batch files).
    #[error("{0}")]
    Invalid(String),
}

fn format_bad_lines(path: &std::path::Path, errors: &[LineError]) -> String {
    let head = format!(
        "{}: {} bad line{}; nothing was sent (fix them, or pass --skip-bad to leave them out)",
        path.display(),
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    format_lines(&head, path, errors)
}

fn format_lines(head: &str, path: &std::path::Path, errors: &[LineError]) -> String {
    const SHOWN: usize = 20;
    let mut s = head.to_string();
    for e in errors.iter().take(SHOWN) {
        s.push_str(&format!("\n  {}:{}: {}", path.display(), e.line, e.reason));
    }
    if errors.len() > SHOWN {
        s.push_str(&format!("\n  ... and {} more", errors.len() - SHOWN));
    }
    s
}

impl BatchError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BatchError::Io { path: path.into(), err: source }
    }
}
