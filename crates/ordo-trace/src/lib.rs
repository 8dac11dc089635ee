//! ordo-trace: loads real cluster job logs into an [`ordo_core::Workload`].
//!
//! Two formats are read today (see [`Format`]): ordo's own `generic` CSV and the `philly` CSV
//! of the RFold Philly trace; [`Format::Auto`] tells them apart by the header line.
//!
//! Loading ([`load_path`], [`load_reader`]) does, in order:
//! 1. parse and check every row, stopping at the first bad one with a [`TraceError`] that names
//!    the file, the 1-based line (the header is line 1), the column, what was expected and what
//!    was found;
//! 2. drop rows whose duration is 0 (after rounding to milliseconds), counting them in
//!    [`LoadedTrace::dropped_zero_duration`];
//! 3. keep only rows whose submit time lies in `[from_day * 86400, to_day * 86400)` seconds
//!    (either bound optional), counting the others in [`LoadedTrace::dropped_outside_window`];
//! 4. rebase submit times so the first kept job arrives at 0;
//! 5. number jobs densely in (submit time, file row) order with [`Workload::renumber`], so jobs
//!    that arrive at the same time keep the order of their rows.
//!
//! [`write_generic`] writes a workload back out in the `generic` format.
//!
//! ```
//! use ordo_trace::{load_reader, Format, LoadOptions};
//!
//! let csv = "job_id,submit_time,num_gpu,duration,user\n\
//!            a,100,8,3600,alice\n\
//!            b,100.5,1,0,bob\n\
//!            c,160,2,60.25,\n";
//! let t = load_reader(csv.as_bytes(), "inline.csv", &LoadOptions::default()).unwrap();
//! assert_eq!(t.format, Format::Generic);
//! assert_eq!((t.rows, t.dropped_zero_duration), (3, 1));
//! let jobs = &t.workload.jobs;
//! assert_eq!(jobs[1].name, "c");
//! assert_eq!(jobs[1].submit, 60_000); // rebased: job `a` arrives at 0
//! assert_eq!(jobs[1].runtime, 60_250);
//! assert_eq!(t.workload.users[jobs[1].user as usize], "default");
//! ```

mod error;
mod format;

pub use error::TraceError;
pub use format::{Format, ParseFormatError};

use error::shown;
use format::Role;
use ordo_core::time::{self, Time};
use ordo_core::{Job, JobId, Workload};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Seconds in a day, the unit of [`LoadOptions::from_day`] and [`LoadOptions::to_day`].
pub const SECONDS_PER_DAY: f64 = 86_400.0;

/// Largest time (submit, duration, estimate) accepted, in seconds (about 31,700 years); larger
/// values are reported as errors so that later arithmetic on [`Time`] cannot overflow.
pub const MAX_SECONDS: f64 = 1e12;

/// User and group name given to jobs whose trace has none.
pub const DEFAULT_NAME: &str = "default";

/// How to load a trace. `LoadOptions::default()` detects the format and keeps every day.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadOptions {
    /// The trace format, or [`Format::Auto`] to detect it from the header.
    pub format: Format,
    /// Keep only jobs submitted at or after this day (day 0 starts at the trace's time 0).
    pub from_day: Option<f64>,
    /// Keep only jobs submitted before this day.
    pub to_day: Option<f64>,
}

impl LoadOptions {
    /// Options for `format` with no window.
    pub fn new(format: Format) -> Self {
        LoadOptions { format, ..LoadOptions::default() }
    }

    /// The same options with the window `[from_day, to_day)` (days; either bound optional).
    pub fn with_window(self, from_day: Option<f64>, to_day: Option<f64>) -> Self {
        LoadOptions { from_day, to_day, ..self }
    }
}

/// A loaded trace: the workload plus what was read and dropped.
///
/// Invariant: `rows == workload.jobs.len() + dropped_zero_duration + dropped_outside_window`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTrace {
    /// The kept jobs, numbered densely in (submit, row) order, submit times rebased so the
    /// first arrives at 0. `Job::name` is the trace's job id; traces without users or groups
    /// put every job in user and group [`DEFAULT_NAME`]. Only names of kept jobs are interned.
    pub workload: Workload,
    /// The path ([`load_path`]) or name ([`load_reader`]) of the trace.
    pub source: String,
    /// The format actually read (never [`Format::Auto`]).
    pub format: Format,
    /// Data rows read (the header and blank lines not counted).
    pub rows: usize,
    /// Rows dropped because their duration is 0 ms (counted whether or not inside the window).
    pub dropped_zero_duration: usize,
    /// Rows with a non-zero duration dropped because they were submitted outside the window.
    pub dropped_outside_window: usize,
}

/// Loads the trace at `path` with `opts`.
///
/// The file is streamed, not read whole. Errors name the path as given (`path.display()`); an
/// unopenable or unreadable file gives [`TraceError::Io`]. Otherwise exactly as
/// [`load_reader`], with `source_name` = `path.display()`.
pub fn load_path(path: &Path, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    let file = path.display().to_string();
    let reader = std::fs::File::open(path).map_err(|err| TraceError::Io { file: file.clone(), err })?;
    load_reader(reader, &file, opts)
}

/// Loads a trace from `reader`; `source_name` names it in errors and in
/// [`LoadedTrace::source`].
///
/// The input is CSV (comma-separated, `"` quoting, `\n` or `\r\n` line ends, blank lines
/// skipped, spaces around fields and a UTF-8 byte-order mark ignored). The first line is the
/// header; with [`Format::Auto`] it decides the format (see [`Format::detect`]). The header must
/// name every required column of the format and no unknown one; every row must have as many
/// fields as the header. See the crate docs for dropping, windowing, rebasing and numbering.
///
/// Never panics, whatever the input. Fails on the first problem:
/// - [`TraceError::Options`]: a NaN day, or `from_day >= to_day`;
/// - [`TraceError::Empty`]: no header line;
/// - [`TraceError::UnknownFormat`]: `Auto` and the header matches no format;
/// - [`TraceError::UnknownColumn`], [`TraceError::DuplicateColumn`],
///   [`TraceError::MissingColumn`]: header problems (unknown names are reported first);
/// - [`TraceError::ColumnCount`]: a row with the wrong number of fields;
/// - [`TraceError::Field`]: a value that does not parse: times must be finite seconds in
///   `0..=MAX_SECONDS` (fractions allowed), GPU counts whole numbers >= 0 (`8` or `8.0`),
///   priorities integers, job ids non-empty, names UTF-8;
/// - [`TraceError::Io`]: the reader failed.
pub fn load_reader<R: Read>(reader: R, source_name: &str, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    let file = source_name;
    let window = Window::new(opts, file)?;
    let mut rdr =
        csv::ReaderBuilder::new().has_headers(false).flexible(true).buffer_capacity(1 << 16).from_reader(reader);
    let mut record = csv::ByteRecord::new();

    // Header.
    if !read(&mut rdr, &mut record, file, 1)? {
        return Err(TraceError::Empty { file: file.to_string() });
    }
    let header_line = line_of(&record, 1);
    let header: Vec<String> = record
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = if i == 0 { strip_bom(f) } else { f };
            String::from_utf8_lossy(f.trim_ascii()).into_owned()
        })
        .collect();
    let format = match opts.format {
        Format::Auto => Format::detect(&header).ok_or_else(|| TraceError::UnknownFormat {
            file: file.to_string(),
            line: header_line,
            header: shown(header.join(",").as_bytes()),
        })?,
        f => f,
    };
    let layout = Layout::new(format, header, file, header_line)?;

    // Rows.
    let mut workload = Workload::default();
    let mut users = Interner::default();
    let mut groups = Interner::default();
    let mut rows = 0usize;
    let mut dropped_zero_duration = 0usize;
    let mut dropped_outside_window = 0usize;
    let mut last_line = header_line;
    while read(&mut rdr, &mut record, file, last_line)? {
        rows += 1;
        let line = line_of(&record, last_line + 1);
        last_line = line;
        if record.len() != layout.names.len() {
            return Err(TraceError::ColumnCount {
                file: file.to_string(),
                line,
                expected: layout.names.len(),
                found: record.len(),
            });
        }
        let field = |col: usize| record.get(col).unwrap_or_default().trim_ascii();
        let bad = |col: usize, expected: &'static str| TraceError::Field {
            file: file.to_string(),
            line,
            field: layout.names.get(col).cloned().unwrap_or_default(),
            expected,
            found: shown(field(col)),
        };

        let name = std::str::from_utf8(field(layout.id))
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad(layout.id, EXPECT_ID))?;
        let submit = parse_secs(field(layout.submit)).ok_or_else(|| bad(layout.submit, EXPECT_TIME))?;
        let gpus = parse_gpus(field(layout.gpus)).ok_or_else(|| bad(layout.gpus, EXPECT_GPUS))?;
        let runtime = parse_secs(field(layout.duration)).ok_or_else(|| bad(layout.duration, EXPECT_TIME))?;
        let user = match layout.user {
            Some(c) => parse_name(field(c)).ok_or_else(|| bad(c, EXPECT_NAME))?,
            None => DEFAULT_NAME,
        };
        let group = match layout.group {
            Some(c) => parse_name(field(c)).ok_or_else(|| bad(c, EXPECT_NAME))?,
            None => DEFAULT_NAME,
        };
        let estimate = match layout.estimate {
            Some(c) => optional(field(c), parse_secs).map_err(|()| bad(c, EXPECT_ESTIMATE))?,
            None => None,
        };
        let priority = match layout.priority {
            Some(c) => optional(field(c), parse_int).map_err(|()| bad(c, EXPECT_PRIORITY))?,
            None => None,
        };

        if runtime == 0 {
            dropped_zero_duration += 1;
            continue;
        }
        if !window.contains(submit) {
            dropped_outside_window += 1;
            continue;
        }
        let id = u32::try_from(workload.jobs.len()).map_err(|_| TraceError::TooManyRows {
            file: file.to_string(),
            line,
            max: u64::from(u32::MAX) + 1,
        })?;
        let user = users.index(user, |n| workload.user_index(n));
        let group = groups.index(group, |n| workload.group_index(n));
        workload.jobs.push(Job {
            id: JobId(id),
            name: name.to_string(),
            user,
            group,
            submit,
            gpus,
            cpus: None,
            mem_mib: None,
            runtime,
            estimate,
            priority,
            gpu_milli: None,
            queue: None,
        });
    }

    let base = workload.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    for j in &mut workload.jobs {
        j.submit -= base;
    }
    workload.renumber();
    Ok(LoadedTrace { workload, source: file.to_string(), format, rows, dropped_zero_duration, dropped_outside_window })
}

/// Writes `workload` as a `generic` trace to `writer`: header
/// `job_id,submit_time,num_gpu,duration,user,group,estimate,priority`, one row per job in
/// `workload.jobs` order.
///
/// Times are written as exact decimal seconds (`12.345`), so [`load_reader`] reads back the same
/// milliseconds; absent estimates and priorities are empty cells. `job_id` is `Job::name`, or the
/// job's [`JobId`] when the name is empty. A user or group index outside the workload's name
/// lists is written as [`DEFAULT_NAME`]. Loading the output gives back the same jobs when the
/// workload is already in load order (renumbered, first submit at 0, no zero run times, names
/// without surrounding spaces).
pub fn write_generic<W: std::io::Write>(workload: &Workload, writer: W) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(writer);
    let io = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(err) => err,
        other => std::io::Error::other(format!("{other:?}")),
    };
    w.write_record(["job_id", "submit_time", "num_gpu", "duration", "user", "group", "estimate", "priority"])
        .map_err(io)?;
    let name_of = |names: &[String], i: u32| -> String {
        names.get(i as usize).cloned().unwrap_or_else(|| DEFAULT_NAME.to_string())
    };
    for j in &workload.jobs {
        let id = if j.name.is_empty() { j.id.to_string() } else { j.name.clone() };
        w.write_record([
            id,
            secs_text(j.submit),
            j.gpus.to_string(),
            secs_text(j.runtime),
            name_of(&workload.users, j.user),
            name_of(&workload.groups, j.group),
            j.estimate.map(secs_text).unwrap_or_default(),
            j.priority.map(|p| p.to_string()).unwrap_or_default(),
        ])
        .map_err(io)?;
    }
    w.flush()
}

/// Milliseconds as exact decimal seconds: `1500` -> `1.500`, `-1` -> `-0.001`.
fn secs_text(t: Time) -> String {
    let sign = if t < 0 { "-" } else { "" };
    let a = t.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

const EXPECT_ID: &str = "a non-empty job id (UTF-8 text)";
const EXPECT_TIME: &str = "a time in seconds >= 0 (finite, at most 1e12)";
const EXPECT_GPUS: &str = "a whole number of GPUs >= 0";
const EXPECT_NAME: &str = "UTF-8 text";
const EXPECT_ESTIMATE: &str = "a time in seconds >= 0 (finite, at most 1e12) or an empty cell";
const EXPECT_PRIORITY: &str = "a whole number (negative allowed) or an empty cell";

/// Reads the next record; `Ok(false)` at the end of the input.
fn read<R: Read>(
    rdr: &mut csv::Reader<R>,
    record: &mut csv::ByteRecord,
    file: &str,
    line: u64,
) -> Result<bool, TraceError> {
    rdr.read_byte_record(record).map_err(|e| {
        let why = e.to_string();
        match e.into_kind() {
            csv::ErrorKind::Io(err) => TraceError::Io { file: file.to_string(), err },
            // With byte records and flexible rows the csv crate reports only IO errors; keep
            // anything else as an IO-kind error rather than panicking.
            _ => TraceError::Io {
                file: file.to_string(),
                err: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("near line {line}: {why}")),
            },
        }
    })
}

/// The 1-based line a record starts on, or `fallback` if the reader did not say.
fn line_of(record: &csv::ByteRecord, fallback: u64) -> u64 {
    record.position().map_or(fallback, |p| p.line())
}

fn strip_bom(field: &[u8]) -> &[u8] {
    field.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(field)
}

/// Seconds (finite, in `0..=MAX_SECONDS`) as [`Time`].
fn parse_secs(raw: &[u8]) -> Option<Time> {
    let secs: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    (secs.is_finite() && (0.0..=MAX_SECONDS).contains(&secs)).then(|| time::from_secs_f64(secs))
}

/// A GPU count: a whole number >= 0, written as an integer or an integral decimal (`8.0`).
fn parse_gpus(raw: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(raw).ok()?;
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    let x: f64 = s.parse().ok()?;
    let ok = x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX);
    ok.then_some(x as u32)
}

fn parse_int(raw: &[u8]) -> Option<i64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// A user or group name; an empty cell means [`DEFAULT_NAME`].
fn parse_name(raw: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(raw).ok()?;
    Some(if s.is_empty() { DEFAULT_NAME } else { s })
}

/// An optional cell: empty is `Ok(None)`, otherwise `parse` must succeed.
fn optional<T>(raw: &[u8], parse: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>, ()> {
    if raw.is_empty() {
        Ok(None)
    } else {
        parse(raw).map(Some).ok_or(())
    }
}

/// The submit-time window, in [`Time`] units.
#[derive(Debug)]
struct Window {
    from: Option<Time>,
    to: Option<Time>,
}

impl Window {
    fn new(opts: &LoadOptions, file: &str) -> Result<Self, TraceError> {
        let bad = |why: String| TraceError::Options { file: file.to_string(), why };
        for (name, day) in [("from_day", opts.from_day), ("to_day", opts.to_day)] {
            if day.is_some_and(f64::is_nan) {
                return Err(bad(format!("{name} is NaN")));
            }
        }
        if let (Some(from), Some(to)) = (opts.from_day, opts.to_day) {
            if from >= to {
                return Err(bad(format!(
                    "the window [from_day {from}, to_day {to}) is empty: from_day must be less than to_day"
                )));
            }
        }
        let to_time = |day: f64| time::from_secs_f64(day * SECONDS_PER_DAY);
        Ok(Window { from: opts.from_day.map(to_time), to: opts.to_day.map(to_time) })
    }

    fn contains(&self, t: Time) -> bool {
        // (`Option::is_none_or` would need Rust 1.82; the workspace targets 1.80.)
        !matches!(self.from, Some(f) if t < f) && !matches!(self.to, Some(e) if t >= e)
    }
}

/// Where each used column sits in a row, and the header names for messages.
#[derive(Debug)]
struct Layout {
    names: Vec<String>,
    id: usize,
    submit: usize,
    gpus: usize,
    duration: usize,
    user: Option<usize>,
    group: Option<usize>,
    estimate: Option<usize>,
    priority: Option<usize>,
}

impl Layout {
    fn new(format: Format, names: Vec<String>, file: &str, line: u64) -> Result<Self, TraceError> {
        let columns = format.columns();
        let mut at: Vec<Option<usize>> = vec![None; columns.len()];
        let mut unknown = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match columns.iter().position(|c| c.name == name) {
                Some(k) => match at.get_mut(k) {
                    Some(slot @ None) => *slot = Some(i),
                    _ => {
                        return Err(TraceError::DuplicateColumn { file: file.to_string(), line, column: name.clone() })
                    }
                },
                None => unknown.push(name.clone()),
            }
        }
        if !unknown.is_empty() {
            return Err(TraceError::UnknownColumn {
                file: file.to_string(),
                line,
                columns: unknown,
                format,
                known: columns.iter().map(|c| c.name).collect(),
            });
        }
        let find = |role: Role| columns.iter().zip(&at).find(|(c, _)| c.role == role).and_then(|(_, i)| *i);
        let required = |role: Role| {
            find(role).ok_or_else(|| TraceError::MissingColumn {
                file: file.to_string(),
                line,
                column: columns.iter().find(|c| c.role == role).map_or("?", |c| c.name),
                format,
                header: shown(names.join(",").as_bytes()),
            })
        };
        Ok(Layout {
            id: required(Role::Id)?,
            submit: required(Role::Submit)?,
            gpus: required(Role::Gpus)?,
            duration: required(Role::Duration)?,
            user: find(Role::User),
            group: find(Role::Group),
            estimate: find(Role::Estimate),
            priority: find(Role::Priority),
            names,
        })
    }
}

/// Caches [`Workload::user_index`] / [`Workload::group_index`] so interning is O(1) per row.
#[derive(Debug, Default)]
struct Interner(HashMap<String, u32>);

impl Interner {
    fn index(&mut self, name: &str, intern: impl FnOnce(&str) -> u32) -> u32 {
        if let Some(&i) = self.0.get(name) {
            return i;
        }
        let i = intern(name);
        self.0.insert(name.to_string(), i);
        i
    }
}
