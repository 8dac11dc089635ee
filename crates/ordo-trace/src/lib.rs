//! ordo-trace: loads real cluster job logs into an [`ordo_core::Workload`].
//!
//! Formats (see [`Format`] and `docs/TRACES.md`): ordo's `generic` CSV and `jsonl`, Philly
//! (`philly`, `philly-vc`), Alibaba GPU 2023 pods (`alibaba`), 2025 inference instances
//! (`alibaba-2025`) and 2026 spot jobs (`alibaba-2026`), Alibaba PAI 2020 (`pai-2020`: four
//! tables joined, with measured GPU activity in [`LoadedTrace::activity`]), the Standard Workload
//! Format (`swf`, plain or gzip), the Tiresias, Helios (also the Lucid simulator's log) and Acme
//! CSVs, Slurm `sacct --parsable2` output, the
//! `jobcomp/filetxt` log, and an `ordo server`'s own database (`ordo-db`, SQLite: its jobs, its
//! nodes and the schedule as it ran, in [`LoadedTrace::server`]). [`Format::Auto`] detects the
//! format from the first line and the file name; gzip and SQLite input by their magic bytes.
//!
//! Loading ([`load_path`], [`load_reader`]) streams the input and does, in order:
//! 1. parse and check every row; by default the first bad row stops loading with a
//!    [`TraceError`] naming the file, the 1-based line, the column, what was expected and what
//!    was found; with [`LoadOptions::skip_bad`] bad rows are counted and the first ten reasons
//!    kept ([`LoadedTrace::skipped_bad`], [`LoadedTrace::bad_reasons`]);
//! 2. drop jobs that never ran (no start time, SWF run time -1), counting
//!    [`LoadedTrace::dropped_never_ran`], and jobs whose run time is 0 ms
//!    ([`LoadedTrace::dropped_zero_duration`]);
//! 3. drop jobs of users or groups not asked for ([`LoadOptions::users`],
//!    [`LoadOptions::groups`]; [`LoadedTrace::dropped_filtered`]);
//! 4. keep jobs submitted inside the window ([`LoadOptions::from_day`]/`to_day` in days from the
//!    trace's day 0, or [`LoadOptions::from_time`]/`to_time` wall-clock times;
//!    [`LoadedTrace::dropped_outside_window`]). Day 0 is time 0 of the trace, except for
//!    wall-clock formats ([`Format::wall_clock`]), where it is the earliest submit time;
//! 5. rebase submit times so the first kept job arrives at 0, number jobs densely in (submit
//!    time, file row) order, keep the first [`LoadOptions::max_jobs`]
//!    ([`LoadedTrace::dropped_max_jobs`]) and divide submit times by
//!    [`LoadOptions::scale_load`].
//!
//! Every data row is counted once: `rows == jobs + ` [`LoadedTrace::dropped_total`].
//! Writers: [`write_generic`], [`write_jsonl`], [`write_swf`]. Clusters: [`load_cluster`].
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

mod cluster;
pub mod constraint;
mod csvread;
mod error;
mod format;
pub mod hostlist;
mod lines;
mod ordodb;
mod pai;
mod quotas;
mod sink;
mod speeds;
pub mod stats;
mod timefmt;
mod topology;
mod write;

pub use cluster::{load_cluster, load_cluster_nodes, load_cluster_toml};
pub use constraint::{Constraint, ConstraintError};
pub use error::{ClusterError, QuotaError, TraceError};
pub use format::{is_pai_job_table, Format, ParseFormatError};
pub use ordodb::{is_sqlite, JobBusy, PolicyChangeRecord, ServerRecord, ServerRun, SQLITE_MAGIC};
pub use quotas::{load_quotas, parse_quotas};
pub use speeds::{load_speeds, parse_speeds, SpeedFileError};
pub use timefmt::{format_datetime, parse_datetime, parse_slurm_duration, MAX_SECONDS};
pub use topology::{load_topology, parse_topology_conf, parse_topology_toml, TopologyFileError};
pub use write::{write_generic, write_jsonl, write_swf};

use error::shown;
use ordo_core::time::Time;
use ordo_core::Workload;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Seconds in a day, the unit of [`LoadOptions::from_day`] and [`LoadOptions::to_day`].
pub const SECONDS_PER_DAY: f64 = 86_400.0;

/// User and group name given to jobs whose trace has none.
pub const DEFAULT_NAME: &str = "default";

/// How many reasons for skipped rows [`LoadedTrace::bad_reasons`] keeps.
pub const MAX_BAD_REASONS: usize = 10;

/// How to load a trace. `LoadOptions::default()` detects the format and keeps every job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadOptions {
    /// The trace format, or [`Format::Auto`] to detect it.
    pub format: Format,
    /// Keep only jobs submitted at or after this day (see the crate docs for day 0).
    pub from_day: Option<f64>,
    /// Keep only jobs submitted before this day.
    pub to_day: Option<f64>,
    /// Keep only jobs submitted at or after this wall-clock time (milliseconds since the Unix
    /// epoch, UTC); only for wall-clock formats. Not together with `from_day`.
    pub from_time: Option<Time>,
    /// Keep only jobs submitted before this wall-clock time. Not together with `to_day`.
    pub to_time: Option<Time>,
    /// Keep at most this many jobs (the earliest submitted, after the window).
    pub max_jobs: Option<usize>,
    /// Divide every (rebased) submit time by this factor (0.001..=1000): 2 packs the arrivals
    /// into half the time, doubling the offered load. Run times are unchanged.
    pub scale_load: Option<f64>,
    /// Keep only jobs of these users (empty: all users).
    pub users: Vec<String>,
    /// Keep only jobs of these groups (empty: all groups).
    pub groups: Vec<String>,
    /// Skip bad rows instead of stopping at the first one.
    pub skip_bad: bool,
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

/// A loaded trace: the workload plus what was read, dropped and repaired.
///
/// Invariant: `rows == workload.jobs.len() + dropped_total()`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTrace {
    /// The kept jobs, numbered densely in (submit, row) order, submit times rebased so the
    /// first arrives at 0. `Job::name` is the trace's job id (or, where the trace has none, the
    /// line number); traces without users or groups put every job in user and group
    /// [`DEFAULT_NAME`]. Only names of kept jobs are interned, in order of first use by the
    /// jobs in submit order.
    pub workload: Workload,
    /// The path ([`load_path`]) or name ([`load_reader`]) of the trace.
    pub source: String,
    /// The format actually read (never [`Format::Auto`]).
    pub format: Format,
    /// Data rows read (headers, comments, blank lines and Slurm job steps not counted).
    pub rows: usize,
    /// Rows dropped because their run time is 0 ms.
    pub dropped_zero_duration: usize,
    /// Rows dropped because they were submitted outside the window.
    pub dropped_outside_window: usize,
    /// Rows dropped because the job never ran (no start time, unknown run time).
    pub dropped_never_ran: usize,
    /// Rows dropped because the job ran before the trace began or was still running when it
    /// ended (Alibaba 2025: no creation or no deletion time), so its run time is unknown.
    pub dropped_outside_trace: usize,
    /// Rows dropped because the job's size is unknown (SWF: allocated and requested processors
    /// both -1; PAI 2020: no task row describes the job).
    pub dropped_unknown_size: usize,
    /// Rows dropped by the user or group filter.
    pub dropped_filtered: usize,
    /// Jobs dropped because of [`LoadOptions::max_jobs`].
    pub dropped_max_jobs: usize,
    /// Bad rows skipped (only with [`LoadOptions::skip_bad`]).
    pub skipped_bad: usize,
    /// The error messages of the first [`MAX_BAD_REASONS`] skipped rows.
    pub bad_reasons: Vec<String>,
    /// Rows read with a documented repair, by reason (e.g. an SWF job without allocated
    /// processors takes its requested processors). Repaired rows are kept.
    pub repaired: Vec<(String, usize)>,
    /// Slurm job steps (`123.batch`, `123.0`) skipped: they are not jobs, and not rows.
    pub skipped_steps: usize,
    /// The machine size from the trace header (SWF `MaxProcs`, else `MaxNodes`), if any.
    pub max_procs: Option<u64>,
    /// The trace's time of the job that became time 0 (for wall-clock formats, milliseconds
    /// since the Unix epoch, UTC; otherwise the trace's own time). `None` with no jobs.
    pub time_base: Option<Time>,
    /// For an `ordo server` database (`ordo-db`): its nodes, policy, and the schedule as it ran.
    pub server: Option<ServerRecord>,
    /// Each kept job's measured GPU activity (indexed like `workload.jobs`), for traces that
    /// publish it (`pai-2020`: its sensor table); `None` when the trace measures none.
    pub activity: Option<Vec<Option<JobBusy>>>,
}

impl LoadedTrace {
    /// Rows not turned into jobs, in total.
    pub fn dropped_total(&self) -> usize {
        self.dropped_zero_duration
            + self.dropped_outside_window
            + self.dropped_never_ran
            + self.dropped_outside_trace
            + self.dropped_unknown_size
            + self.dropped_filtered
            + self.dropped_max_jobs
            + self.skipped_bad
    }

    /// Every non-zero drop count with its reason, in pipeline order.
    pub fn drops(&self) -> Vec<(&'static str, usize)> {
        [
            ("bad row (skipped with --skip-bad)", self.skipped_bad),
            ("never ran (no start time or unknown run time)", self.dropped_never_ran),
            ("began before the trace or outlived it (run time unknown)", self.dropped_outside_trace),
            ("unknown size (SWF processors -1, or no PAI task row)", self.dropped_unknown_size),
            ("run time 0", self.dropped_zero_duration),
            ("user or group not selected", self.dropped_filtered),
            ("submitted outside the window", self.dropped_outside_window),
            ("beyond --max-jobs", self.dropped_max_jobs),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

/// Loads the trace at `path` with `opts`.
///
/// The file is streamed, not read whole. Errors name the path as given (`path.display()`); an
/// unopenable or unreadable file gives [`TraceError::Io`]. Otherwise exactly as
/// [`load_reader`], with `source_name` = `path.display()` (whose extension helps detection).
pub fn load_path(path: &Path, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    // An `ordo server` database is SQLite, read through SQLite rather than as a stream.
    if opts.format == Format::OrdoDb || (opts.format == Format::Auto && is_sqlite(path)) {
        return ordodb::load(path, opts);
    }
    // PAI 2020 is several tables: the job table's path leads to the others beside it.
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    if opts.format == Format::Pai2020 || (opts.format == Format::Auto && is_pai_job_table(&name)) {
        return pai::load(path, opts);
    }
    let file = path.display().to_string();
    let reader = std::fs::File::open(path).map_err(|err| TraceError::Io { file: file.clone(), err })?;
    load_reader(reader, &file, opts)
}

/// Longest first line read for format detection; longer lines are cut for detection only.
const MAX_DETECT_LINE: u64 = 1 << 20;

/// Loads a trace from `reader`; `source_name` names it in errors and in
/// [`LoadedTrace::source`], and its extension helps [`Format::Auto`].
///
/// Input starting with the gzip magic bytes is decompressed on the fly. The format is read as
/// documented on [`Format`] and in `docs/TRACES.md`; see the crate docs for dropping,
/// windowing, rebasing and numbering.
///
/// Never panics, whatever the input. Fails with:
/// - [`TraceError::Options`]: a NaN day, an empty window, a wall-clock bound on a format
///   without wall-clock times, a day and a time bound on the same side, `scale_load` outside 0.001..=1000;
/// - [`TraceError::Empty`]: no header line (CSV formats);
/// - [`TraceError::UnknownFormat`]: `Auto` and the first line matches no format;
/// - [`TraceError::UnknownColumn`], [`TraceError::DuplicateColumn`],
///   [`TraceError::MissingColumn`]: header problems (unknown names are reported first);
/// - [`TraceError::ColumnCount`], [`TraceError::Field`], [`TraceError::Line`]: a bad row
///   (unless [`LoadOptions::skip_bad`]);
/// - [`TraceError::TooManyRows`]: more than 2^32 jobs;
/// - [`TraceError::Io`]: the reader failed or the gzip stream is corrupt or truncated.
pub fn load_reader<R: Read>(reader: R, source_name: &str, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    let file = source_name;
    let io = |err| TraceError::Io { file: file.to_string(), err };
    let mut raw = BufReader::with_capacity(1 << 16, reader);
    let gz = {
        let head = raw.fill_buf().map_err(io)?;
        if head.starts_with(ordodb::SQLITE_MAGIC) || opts.format == Format::OrdoDb {
            return Err(TraceError::Database {
                file: file.to_string(),
                why: "an SQLite database (an ordo server's?) is read from its path, not a stream".into(),
            });
        }

        head.starts_with(&[0x1f, 0x8b])
    };
    let mut input: Box<dyn BufRead + '_> = if gz {
        Box::new(BufReader::with_capacity(1 << 16, flate2::bufread::MultiGzDecoder::new(raw)))
    } else {
        Box::new(raw)
    };

    // The first non-blank line, for detection; then put it back in front of the rest.
    let mut prefix = Vec::new();
    let first_line = loop {
        let start = prefix.len();
        let n = (&mut input).take(MAX_DETECT_LINE).read_until(b'\n', &mut prefix).map_err(io)?;
        if n == 0 {
            break None;
        }
        let line = &prefix[start..];
        if !line.trim_ascii().is_empty() && line.trim_ascii() != b"\xEF\xBB\xBF" {
            break Some(String::from_utf8_lossy(line).into_owned());
        }
    };
    let first_line_no = prefix.iter().filter(|&&b| b == b'\n').count() as u64
        + u64::from(first_line.as_ref().is_some_and(|l| !l.ends_with('\n')));
    let format = match opts.format {
        Format::Auto => {
            let Some(line) = &first_line else {
                return Err(TraceError::Empty { file: file.to_string() });
            };
            Format::detect_line(line, file).ok_or_else(|| TraceError::UnknownFormat {
                file: file.to_string(),
                line: first_line_no.max(1),
                header: shown(line.trim().as_bytes()),
            })?
        }
        f => f,
    };
    if format == Format::Pai2020 {
        return Err(TraceError::Database {
            file: file.to_string(),
            why: "a PAI 2020 trace is read from the path of its pai_job_table.csv, with the task, instance and \
                  sensor tables beside it, not from a stream"
                .into(),
        });
    }
    let mut sink = sink::Sink::new(file, format, opts)?;
    let body = std::io::Cursor::new(prefix).chain(input);
    match format {
        Format::Swf => lines::read_swf(body, &mut sink)?,
        Format::Jobcomp => lines::read_jobcomp(body, &mut sink)?,
        Format::Jsonl => lines::read_jsonl(body, &mut sink)?,
        _ => csvread::read_csv(body, &mut sink)?,
    }
    Ok(sink.finish())
}
