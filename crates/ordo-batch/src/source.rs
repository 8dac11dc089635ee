//! The requests a submission covers, in input order: one request file, or a directory of batch
//! files written by `ordo batch split` (in its manifest's order), with a digest of the bytes.

use crate::error::BatchError;
use crate::hash;
use crate::input::{load_path, LoadOptions, Loaded, Request};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Loaded, validated requests from a file or a `split` directory.
#[derive(Debug)]
pub struct Source {
    /// The file or directory as given.
    pub path: PathBuf,
    /// Each file, in order.
    pub files: Vec<Loaded>,
    /// Every request in input order: (file, request index in it).
    pub rows: Vec<(usize, usize)>,
    /// For a directory: each file's rows (a part each).
    pub file_rows: Option<Vec<Vec<usize>>>,
    /// BLAKE2b of the input's bytes (file names included for a directory).
    pub digest: String,
}

#[derive(serde::Deserialize)]
struct ManifestEntry {
    file: String,
}

/// Batch files of a `split` directory: its manifest's order, else `batch-*.jsonl` by name.
fn dir_files(dir: &Path) -> Result<Vec<PathBuf>, BatchError> {
    let manifest = dir.join("manifest.json");
    if manifest.exists() {
        let bytes = std::fs::read(&manifest).map_err(|e| BatchError::io(&manifest, e))?;
        let entries: Vec<ManifestEntry> = serde_json::from_slice(&bytes).map_err(|e| BatchError::Config {
            path: manifest.clone(),
            message: format!("expected the list written by `ordo batch split`: {e}"),
        })?;
        return Ok(entries
            .into_iter()
            .map(|e| {
                let name = Path::new(&e.file).file_name().map(PathBuf::from).unwrap_or_default();
                dir.join(name)
            })
            .collect());
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| BatchError::io(dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            n.starts_with("batch-") && n.ends_with(".jsonl")
        })
        .collect();
    v.sort();
    Ok(v)
}

impl Source {
    /// Load `path` (a request file, or a directory of batch files).
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Source, BatchError> {
        let is_dir = path.is_dir();
        let paths = if is_dir { dir_files(path)? } else { vec![path.to_path_buf()] };
        if paths.is_empty() {
            return Err(BatchError::Invalid(format!(
                "{}: no batch files (batch-*.jsonl) in this directory",
                path.display()
            )));
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut rows = Vec::new();
        let mut file_rows = Vec::new();
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut fields: Vec<Vec<u8>> = Vec::new();
        for (fi, p) in paths.iter().enumerate() {
            let loaded = load_path(p, opts)?;
            let mut mine = Vec::with_capacity(loaded.requests.len());
            for (ri, r) in loaded.requests.iter().enumerate() {
                if let Some(&(f0, l0)) = seen.get(&r.custom_id) {
                    return Err(BatchError::Invalid(format!(
                        "{}:{}: field `custom_id`: {:?} is used already in {}:{}",
                        p.display(),
                        r.line,
                        r.custom_id,
                        paths[f0].display(),
                        l0
                    )));
                }
                seen.insert(r.custom_id.clone(), (fi, r.line));
                mine.push(rows.len());
                rows.push((fi, ri));
            }
            if is_dir {
                fields.push(p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().into_bytes());
            }
            file_rows.push(mine);
            files.push(loaded);
        }
        let mut all: Vec<&[u8]> = Vec::new();
        for (i, f) in files.iter().enumerate() {
            if let Some(name) = fields.get(i) {
                all.push(name);
            }
            all.push(&f.bytes);
        }
        let digest = hash::digest(&all);
        Ok(Source { path: path.to_path_buf(), files, rows, file_rows: is_dir.then_some(file_rows), digest })
    }

    /// Requests in the input.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none (never true for a loaded source).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The request at input position `row`.
    pub fn request(&self, row: usize) -> &Request {
        let (f, r) = self.rows[row];
        &self.files[f].requests[r]
    }

    /// Its line, as in the file.
    pub fn raw(&self, row: usize) -> &[u8] {
        let (f, r) = self.rows[row];
        self.files[f].raw(&self.files[f].requests[r])
    }

    /// `file:line` of a request, for messages.
    pub fn place(&self, row: usize) -> String {
        let (f, r) = self.rows[row];
        format!("{}:{}", self.files[f].path.display(), self.files[f].requests[r].line)
    }
}
