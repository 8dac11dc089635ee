//! Writing provider batch files: one endpoint+model per file, requests sharing a prompt prefix
//! next to each other, each file within the requests-per-file and bytes-per-file limits.

use crate::config::BatchLimits;
use crate::error::BatchError;
use crate::input::{Endpoint, Loaded, Request};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Number of files that `sizes` (bytes of each line with its newline, in file order) fill.
pub fn count_files(sizes: &[usize], limits: &BatchLimits) -> usize {
    chunks(sizes, limits).len()
}

/// Cut requests into batches: by endpoint and model in order of first appearance, each group
/// sorted by prompt prefix blocks (requests sharing the longest prefixes adjacent, then in
/// input order), cut where the next request would pass either per-file limit. `items` are the
/// requests with the bytes each takes in a batch; the result holds indices into `items`.
pub fn partition(items: &[(&Request, usize)], limits: &BatchLimits) -> Vec<Vec<usize>> {
    let mut gindex: HashMap<(Endpoint, &str), usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, (r, _)) in items.iter().enumerate() {
        let n = groups.len();
        let g = *gindex.entry((r.endpoint, &r.model)).or_insert(n);
        if g == n {
            groups.push(Vec::new());
        }
        groups[g].push(i);
    }
    let mut out = Vec::new();
    for g in &mut groups {
        g.sort_by(|&a, &b| items[a].0.prefix_blocks.cmp(&items[b].0.prefix_blocks).then(a.cmp(&b)));
        let sizes: Vec<usize> = g.iter().map(|&i| items[i].1).collect();
        for (s, e) in chunks(&sizes, limits) {
            out.push(g[s..e].to_vec());
        }
    }
    out
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
    let items: Vec<(&Request, usize)> = reqs.iter().map(|r| (r, r.span.1 - r.span.0 + 1)).collect();
    let mut files = Vec::new();
    for part in partition(&items, limits) {
        let name = format!("batch-{:04}.jsonl", files.len() + 1);
        let path = dir.join(&name);
        let f = std::fs::File::create(&path).map_err(|e| BatchError::io(&path, e))?;
        let mut w = std::io::BufWriter::new(f);
        let mut bytes = 0u64;
        for &i in &part {
            let raw = loaded.raw(&reqs[i]);
            w.write_all(raw).and_then(|_| w.write_all(b"\n")).map_err(|e| BatchError::io(&path, e))?;
            bytes += raw.len() as u64 + 1;
        }
        w.flush().map_err(|e| BatchError::io(&path, e))?;
        let first = &reqs[part[0]];
        files.push(FileEntry {
            file: name,
            endpoint: first.endpoint.url(),
            model: first.model.to_string(),
            requests: part.len(),
            bytes,
        });
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
