//! Writing provider batch files: one endpoint+model per file, requests sharing a prompt prefix
//! next to each other, each file within the requests-per-file and bytes-per-file limits.

use crate::config::BatchLimits;
use crate::error::BatchError;
use crate::input::{Endpoint, Loaded};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Number of files that `sizes` (bytes of each line with its newline, in file order) fill.
pub fn count_files(sizes: &[usize], limits: &BatchLimits) -> usize {
    chunks(sizes, limits).len()
}

/// Cut consecutive items into files: a file ends when the next item would pass either limit.
fn chunks(sizes: &[usize], limits: &BatchLimits) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0usize, 0u64);
    for (i, &s) in sizes.iter().enumerate() {
        let n = i - start;
        if n > 0 && (n as u64 >= limits.max_requests_per_file || bytes + s as u64 > limits.max_bytes_per_file) {
            out.push((start, i));
            start = i;
            bytes = 0;
        }
        bytes += s as u64;
    }
    if start < sizes.len() {
        out.push((start, sizes.len()));
    }
    out
}

/// One written batch file.
#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    /// File name inside the output directory.
    pub file: String,
    /// Endpoint of every request in it.
    pub endpoint: &'static str,
    /// Model of every request in it.
    pub model: String,
    /// Requests in it.
    pub requests: usize,
    /// Its size in bytes.
    pub bytes: u64,
}

/// What `split` wrote (also written as `manifest.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SplitSummary {
    /// The output directory.
    pub dir: PathBuf,
    /// The files, in order.
    pub files: Vec<FileEntry>,
}

/// Write `loaded`'s requests as batch files into `dir` (created if missing). Refuses to write
/// over earlier batch files unless `force`.
pub fn split(loaded: &Loaded, limits: &BatchLimits, dir: &Path, force: bool) -> Result<SplitSummary, BatchError> {
    let reqs = &loaded.requests;
    for r in reqs {
        let size = r.span.1 - r.span.0 + 1;
        if size as u64 > limits.max_bytes_per_file {
            return Err(BatchError::TooLarge {
                path: loaded.path.clone(),
                line: r.line,
                custom_id: r.custom_id.clone(),
                bytes: size,
                limit: limits.max_bytes_per_file,
            });
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| BatchError::io(dir, e))?;
    if !force {
        let rd = std::fs::read_dir(dir).map_err(|e| BatchError::io(dir, e))?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if (name.starts_with("batch-") && name.ends_with(".jsonl")) || name == "manifest.json" {
                return Err(BatchError::Invalid(format!(
                    "{}: already holds batch files ({name}); choose another --out or pass --force",
                    dir.display()
                )));
            }
        }
    }
    // Groups by endpoint+model in first-appearance order; inside, sorted by prefix blocks so
    // that requests sharing the longest prefixes are adjacent, then by line.
    let mut gindex: HashMap<(Endpoint, &str), usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let n = groups.len();
        let g = *gindex.entry((r.endpoint, &r.model)).or_insert(n);
        if g == n {
            groups.push(Vec::new());
        }
        groups[g].push(i);
    }
    let mut files = Vec::new();
    for g in &mut groups {
        g.sort_by(|&a, &b| reqs[a].prefix_blocks.cmp(&reqs[b].prefix_blocks).then(a.cmp(&b)));
        let sizes: Vec<usize> = g.iter().map(|&i| reqs[i].span.1 - reqs[i].span.0 + 1).collect();
        for (s, e) in chunks(&sizes, limits) {
            let name = format!("batch-{:04}.jsonl", files.len() + 1);
            let path = dir.join(&name);
            let f = std::fs::File::create(&path).map_err(|e| BatchError::io(&path, e))?;
            let mut w = std::io::BufWriter::new(f);
            let mut bytes = 0u64;
            for &i in &g[s..e] {
                let raw = loaded.raw(&reqs[i]);
                w.write_all(raw).and_then(|_| w.write_all(b"\n")).map_err(|e| BatchError::io(&path, e))?;
                bytes += raw.len() as u64 + 1;
            }
            w.flush().map_err(|e| BatchError::io(&path, e))?;
            let first = &reqs[g[s]];
            files.push(FileEntry {
                file: name,
                endpoint: first.endpoint.url(),
                model: first.model.to_string(),
                requests: e - s,
                bytes,
            });
        }
    }
    let summary = SplitSummary { dir: dir.to_path_buf(), files };
    let mpath = dir.join("manifest.json");
    let json = serde_json::to_vec_pretty(&summary.files).map_err(|e| BatchError::Invalid(e.to_string()))?;
    std::fs::write(&mpath, json).map_err(|e| BatchError::io(&mpath, e))?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_both_limits() {
        let l = BatchLimits { max_requests_per_file: 3, max_bytes_per_file: 100, ..Default::default() };
        assert_eq!(chunks(&[10; 7], &l), vec![(0, 3), (3, 6), (6, 7)]);
        assert_eq!(chunks(&[60, 50, 40, 100], &l), vec![(0, 1), (1, 3), (3, 4)]);
        assert_eq!(chunks(&[], &l), Vec::<(usize, usize)>::new());
    }
}
