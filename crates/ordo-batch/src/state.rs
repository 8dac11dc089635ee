//! The state file of a submission (`requests.jsonl.ordo-batch.json`): every part, its content
//! key and what the provider said about it, rewritten atomically after each step.
//!
//! Crash safety: a step is recorded as *started* (upload, create) before its request is sent
//! and as *done* once the answer is in; the file is replaced by rename after an fsync, so after
//! a kill -9 it holds either the old or the new record, never a mix.

use crate::error::BatchError;
use crate::provider::Provider;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The version written; others are refused.
pub const STATE_VERSION: u32 = 1;

/// Request counts of a batch as the provider reports them (missing ones stay 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests in the batch.
    pub total: u64,
    /// Answered successfully.
    pub succeeded: u64,
    /// Failed (OpenAI `failed`, Anthropic `errored`).
    pub failed: u64,
    /// Not processed because the batch expired (Anthropic).
    pub expired: u64,
    /// Not processed because the batch was cancelled (Anthropic).
    pub canceled: u64,
    /// Still processing.
    pub processing: u64,
}

/// One batch: a set of requests sent as one provider batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    /// Name (`part-0001`, or the batch file's name for a directory input; `retry1-0001` ...).
    pub name: String,
    /// 0 for the first submission, k for the k-th `--retry-failed`.
    pub attempt: u32,
    /// Content key: BLAKE2b of the provider, the attempt and the exact bytes sent (hex).
    pub key: String,
    /// Endpoint of every request in it (`/v1/chat/completions`).
    pub endpoint: String,
    /// Model of every request in it.
    pub model: String,
    /// Its requests: positions in the input order.
    pub rows: Vec<usize>,
    /// Bytes sent (the batch file, or the JSON body for Anthropic).
    pub bytes: u64,
    /// OpenAI: when an upload of the batch file was started (Unix seconds; the file's name
    /// carries the key).
    #[serde(default)]
    pub upload_started: Option<i64>,
    /// OpenAI: the uploaded file.
    #[serde(default)]
    pub file_id: Option<String>,
    /// When creating the batch was started (Unix seconds): from then on the batch may exist
    /// at the provider even if its id is not recorded yet.
    #[serde(default)]
    pub create_started: Option<i64>,
    /// The provider's batch id.
    #[serde(default)]
    pub batch_id: Option<String>,
    /// The provider's last status word (`in_progress`, `completed`, `ended` ...).
    #[serde(default)]
    pub status: Option<String>,
    /// The provider's last counts.
    #[serde(default)]
    pub counts: Counts,
    /// OpenAI: file of successful outputs.
    #[serde(default)]
    pub output_file_id: Option<String>,
    /// OpenAI: file of failed requests.
    #[serde(default)]
    pub error_file_id: Option<String>,
    /// The batch reached a final status (completed, failed, expired, cancelled; Anthropic ended).
    #[serde(default)]
    pub ended: bool,
    /// Its results are downloaded into the results directory.
    #[serde(default)]
    pub fetched: bool,
    /// `cancel` ran before this batch was created: it never will be.
    #[serde(default)]
    pub cancelled_before_create: bool,
}

impl Part {
    /// Files of this part's downloaded results, in the results directory.
    pub fn result_files(&self) -> Vec<String> {
        let stem = format!("{}.a{}", self.name, self.attempt);
        vec![format!("{stem}.output.jsonl"), format!("{stem}.errors.jsonl"), format!("{stem}.results.jsonl")]
    }

    /// Whether nothing more will happen to this part at the provider.
    pub fn finished(&self) -> bool {
        self.ended || self.cancelled_before_create
    }
}

/// A whole submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The provider.
    pub provider: Provider,
    /// Base URL of its API.
    pub endpoint: String,
    /// The request file or directory (absolute).
    pub input: PathBuf,
    /// BLAKE2b of the input's bytes: a changed input is refused.
    pub input_digest: String,
    /// Requests in the input.
    pub requests: usize,
    /// Every batch, first submission then retries.
    pub parts: Vec<Part>,
}

impl State {
    /// Read a state file.
    pub fn load(path: &Path) -> Result<State, BatchError> {
        let bytes = std::fs::read(path).map_err(|e| BatchError::io(path, e))?;
        let s: State = serde_json::from_slice(&bytes).map_err(|e| BatchError::Config {
            path: path.to_path_buf(),
            message: format!("not an ordo batch state file: {e}"),
        })?;
        if s.version != STATE_VERSION {
            return Err(BatchError::Config {
                path: path.to_path_buf(),
                message: format!("state version {} (this ordo reads version {STATE_VERSION})", s.version),
            });
        }
        Ok(s)
    }

    /// Replace the state file atomically.
    pub fn save(&self, path: &Path) -> Result<(), BatchError> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| BatchError::Invalid(e.to_string()))?;
        write_atomic_with(path, |f| f.write_all(&json))
    }
}

/// The default state file of an input: beside it, `INPUT.ordo-batch.json`.
pub fn default_state_path(input: &Path) -> PathBuf {
    let mut s = input.as_os_str().to_owned();
    if s.to_string_lossy().ends_with('/') {
        s = PathBuf::from(input.to_string_lossy().trim_end_matches('/')).into_os_string();
    }
    s.push(".ordo-batch.json");
    PathBuf::from(s)
}

/// Where a state's downloaded results live: `STATE.results/`.
pub fn results_dir(state: &Path) -> PathBuf {
    let mut s = state.as_os_str().to_owned();
    s.push(".results");
    PathBuf::from(s)
}

/// Write `dest` through `f` into a temporary file beside it, fsync it, rename it over `dest`
/// and fsync the directory: after a crash `dest` is the old or the new file, complete.
pub fn write_atomic_with<T>(dest: &Path, f: impl FnOnce(&mut File) -> std::io::Result<T>) -> Result<T, BatchError> {
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| BatchError::io(dir, e))?;
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Temporary files of writers killed before their rename are of no use: remove them.
    let stale = format!(".{name}.tmp-");
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&stale) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let res = (|| {
        let mut file = File::create(&tmp)?;
        let v = f(&mut file)?;
        file.sync_all()?;
        Ok(v)
    })();
    let v = match res {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(BatchError::io(dest, e));
        }
    };
    std::fs::rename(&tmp, dest).map_err(|e| BatchError::io(dest, e))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths_sit_beside_the_input() {
        assert_eq!(
            default_state_path(Path::new("a/requests.jsonl")),
            PathBuf::from("a/requests.jsonl.ordo-batch.json")
        );
        assert_eq!(default_state_path(Path::new("out/")), PathBuf::from("out.ordo-batch.json"));
        assert_eq!(results_dir(Path::new("s.json")), PathBuf::from("s.json.results"));
    }

    #[test]
    fn atomic_write_replaces_whole_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.json");
        write_atomic_with(&p, |f| f.write_all(b"one")).expect("write");
        write_atomic_with(&p, |f| f.write_all(b"two!")).expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two!");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        let bad = State::load(&p).expect_err("not a state");
        assert!(bad.to_string().contains("not an ordo batch state file"), "{bad}");
    }
}
