//! [`TraceError`]: why a trace could not be loaded, always naming the file, and where it applies
//! the 1-based line (the header is line 1), the column and what was expected versus found.

use std::fmt;

/// Why a trace could not be loaded. Loading stops at the first error.
///
/// Every variant names the trace (`file`: the path given to [`crate::load_path`] or the
/// `source_name` given to [`crate::load_reader`]); errors tied to a place also carry the 1-based
/// line number, counting the header as line 1.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{file}: cannot read: {err}")]
    Io {
        /// Path or name of the trace.
        file: String,
        /// The underlying IO error (shown in the message, so not also chained as a source).
        err: std::io::Error,
    },
    /// The input has no header line at all.
    #[error("{file}: empty file: expected a header line")]
    Empty {
        /// Path or name of the trace.
        file: String,
    },
    /// [`crate::Format::Auto`] could not recognise the header.
    #[error(
        "{file}:{line}: unknown trace format: header {header:?} matches none of the known formats \
         (generic: a header with `job_id` and `submit_time` columns; philly: a header starting \
         with `#job id`; philly-vc, alibaba, alibaba-2025, alibaba-2026, tiresias, helios, acme: \
         their CSV headers; pai-2020: a file named pai_job_table.csv; sacct: a `|`-separated \
         header with `JobID`; jobcomp: lines starting `JobId=`; swf: `;` comments or 18 numbers \
         a line; jsonl: lines starting with `{{`); pass the format explicitly with --format"
    )]
    UnknownFormat {
        /// Path or name of the trace.
        file: String,
        /// Line of the header.
        line: u64,
        /// The header line as read (shortened if long).
        header: String,
    },
    /// A required column is missing from the header.
    #[error("{file}:{line}: missing required column `{column}` for the {format} format (header: {header:?})")]
    MissingColumn {
        /// Path or name of the trace.
        file: String,
        /// Line of the header.
        line: u64,
        /// The missing column.
        column: &'static str,
        /// The format being read.
        format: crate::Format,
        /// The header line as read (shortened if long).
        header: String,
    },
    /// The header has columns the format does not know (often a typo).
    #[error("{file}:{line}: unknown column(s) {} for the {format} format (known columns: {})", Names(.columns), Names(.known))]
    UnknownColumn {
        /// Path or name of the trace.
        file: String,
        /// Line of the header.
        line: u64,
        /// The unknown column names, in header order.
        columns: Vec<String>,
        /// The format being read.
        format: crate::Format,
        /// The columns that format knows.
        known: Vec<&'static str>,
    },
    /// The header names a column twice.
    #[error("{file}:{line}: column `{column}` appears more than once in the header")]
    DuplicateColumn {
        /// Path or name of the trace.
        file: String,
        /// Line of the header.
        line: u64,
        /// The repeated column.
        column: String,
    },
    /// A data row has a different number of fields than the header.
    #[error("{file}:{line}: expected {expected} fields (as in the header), found {found}")]
    ColumnCount {
        /// Path or name of the trace.
        file: String,
        /// Line of the row.
        line: u64,
        /// Number of header columns.
        expected: usize,
        /// Number of fields in the row.
        found: usize,
    },
    /// A field's value is not what its column needs.
    #[error("{file}:{line}: field `{field}`: expected {expected}, found {found:?}")]
    Field {
        /// Path or name of the trace.
        file: String,
        /// Line of the row.
        line: u64,
        /// The column name, as in the header.
        field: String,
        /// What the column needs.
        expected: &'static str,
        /// The value found (lossy UTF-8, shortened if long).
        found: String,
    },
    /// A whole line could not be read (JSON Lines: not a JSON object).
    #[error("{file}:{line}: {why}")]
    Line {
        /// Path or name of the trace.
        file: String,
        /// Line of the row.
        line: u64,
        /// What is wrong, naming what was expected.
        why: String,
    },
    /// More rows than job ids (`u32`) can number.
    #[error("{file}:{line}: too many rows (at most {max} jobs per trace)")]
    TooManyRows {
        /// Path or name of the trace.
        file: String,
        /// Line of the first row that does not fit.
        line: u64,
        /// The maximum number of rows.
        max: u64,
    },
    /// An `ordo server` database could not be read as one (not SQLite, not ordo's tables).
    #[error("{file}: {why}")]
    Database {
        /// Path of the database.
        file: String,
        /// What is wrong.
        why: String,
    },
    /// A job row of an `ordo server` database holds a value no server writes.
    #[error("{file}: job {job}: field `{field}`: expected {expected}, found {found:?}")]
    DbField {
        /// Path of the database.
        file: String,
        /// The job's id.
        job: i64,
        /// The column.
        field: &'static str,
        /// What the column needs.
        expected: &'static str,
        /// The value found.
        found: String,
    },
    /// The [`crate::LoadOptions`] are inconsistent (e.g. a NaN day or an empty window).
    #[error("{file}: invalid load options: {why}")]
    Options {
        /// Path or name of the trace.
        file: String,
        /// What is wrong.
        why: String,
    },
}

/// Formats names as `` `a`, `b` ``.
struct Names<'a, T>(&'a [T]);

impl<T: fmt::Display> fmt::Display for Names<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{n}`")?;
        }
        Ok(())
    }
}

/// Longest text copied from the input into an error message, in characters.
const MAX_SHOWN: usize = 80;

/// Lossy UTF-8 text of `bytes`, cut to [`MAX_SHOWN`] characters (with `...` when cut).
pub(crate) fn shown(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if s.chars().count() <= MAX_SHOWN {
        s.into_owned()
    } else {
        let mut out: String = s.chars().take(MAX_SHOWN).collect();
        out.push_str("...");
        out
    }
}

/// Why a cluster description (`--cluster`: `64x8`, a TOML file of node groups, or an Alibaba
/// node list CSV) could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The file could not be opened or read.
    #[error("{file}: cannot read: {err}")]
    Io {
        /// Path of the file.
        file: String,
        /// The underlying IO error.
        err: std::io::Error,
    },
    /// A `COUNTxGPUS` spec is malformed (the message is the parser's; callers say which flag).
    #[error(transparent)]
    Spec(#[from] ordo_core::ClusterParseError),
    /// The TOML file does not follow the documented schema.
    #[error("{file}: {why}")]
    Toml {
        /// Path of the file.
        file: String,
        /// What is wrong (the TOML parser's message, with line and column).
        why: String,
    },
    /// A node list row or a node group is bad.
    #[error("{file}:{line}: {why}")]
    Node {
        /// Path of the file.
        file: String,
        /// 1-based line (CSV row) or node-group number (TOML, 1-based).
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// The cluster has no nodes with GPUs.
    #[error("{file}: the cluster has no nodes")]
    Empty {
        /// Path of the file.
        file: String,
    },
}

/// Why a quota file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// The file could not be opened or read.
    #[error("{file}: cannot read: {err}")]
    Io {
        /// Path of the file.
        file: String,
        /// The underlying IO error.
        err: std::io::Error,
    },
    /// Not TOML, or a field unknown or of the wrong type (the parser's message, with line
    /// and column).
    #[error("{file}: {why}")]
    Toml {
        /// Path of the file.
        file: String,
        /// What is wrong.
        why: String,
    },
    /// A value the schema lets through but that makes no sense (the message names the field).
    #[error("{file}: {why}")]
    Invalid {
        /// Path of the file.
        file: String,
        /// What is wrong.
        why: String,
    },
}
