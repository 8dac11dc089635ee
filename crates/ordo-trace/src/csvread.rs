//! The readers of header-led CSV formats (generic, philly, philly-vc, alibaba, tiresias,
//! helios, and sacct's `|`-separated output), driven by each format's column table.

use crate::error::shown;
use crate::format::Role;
use crate::sink::{Row, Sink};
use crate::timefmt::{parse_clock, parse_datetime, parse_secs, parse_slurm_duration, parse_zoned};
use crate::{Format, TraceError, DEFAULT_NAME};
use std::io::Read;

pub(crate) const EXPECT_ID: &str = "a non-empty job id (UTF-8 text)";
pub(crate) const EXPECT_TIME: &str = "a time in seconds >= 0 (finite, at most 1e12)";
const EXPECT_CLOCK: &str = "a date and time `YYYY-MM-DD HH:MM:SS` (or seconds >= 0)";
const EXPECT_ZONED: &str =
    "a date and time `YYYY-MM-DD HH:MM:SS`, optionally with a UTC offset (`+08:00`), or seconds >= 0";
const EXPECT_REAL_START: &str =
    "when the job really started: a date and time `YYYY-MM-DD HH:MM:SS` (a UTC offset allowed), or an empty cell";
const EXPECT_WORKERS: &str = "a whole number of workers >= 1";
const EXPECT_WORKER_GPUS: &str = "a whole number of GPUs per worker >= 0, or a share of one GPU between 0 and 1 \
     only with `worker_num` 1 (several workers holding a fraction of a GPU each have no such share)";
const EXPECT_DATETIME: &str = "a date and time `YYYY-MM-DDTHH:MM:SS`";
const EXPECT_SLURM_DURATION: &str = "a duration `[DAYS-]HH:MM:SS`";
const EXPECT_SLURM_LIMIT: &str = "a time limit `[DAYS-]HH:MM:SS`, `UNLIMITED` or `Partition_Limit`";
pub(crate) const EXPECT_GPUS: &str = "a whole number of GPUs >= 0";
/// Most GPUs one job may ask for once its workers are multiplied out.
const MAX_JOB_GPUS: u32 = 1 << 24;
const EXPECT_GPUS_OR_SHARE: &str = "a whole number of GPUs >= 0, or a share of one GPU between 0 and 1 (e.g. 0.5); \
     a job holding a fraction of several GPUs has no such share: write the trace in the generic format, \
     with `num_gpu` and `gpu_milli` (thousandths of one GPU) columns";
const EXPECT_CORES: &str = "a number of CPU cores >= 0";
const EXPECT_GIB: &str = "a memory size in GiB >= 0";
const EXPECT_TIME_OR_EMPTY: &str = "a time in seconds >= 0, or an empty cell (not known: outside the trace)";
pub(crate) const EXPECT_NAME: &str = "UTF-8 text";
pub(crate) const EXPECT_TOPOLOGY: &str =
    "a topology ask: `required:LEVEL` or `preferred:LEVEL` (such as `required:block`)";

/// Sets the job's topology ask from its `topology` cell (empty: none).
pub(crate) fn add_topology(needs: &mut Option<Box<ordo_core::GpuNeeds>>, cell: &[u8]) -> Result<(), ()> {
    let text = std::str::from_utf8(cell).map_err(|_| ())?.trim();
    if text.is_empty() {
        return Ok(());
    }
    let ask: ordo_core::TopoAsk = text.parse().map_err(|_| ())?;
    needs.get_or_insert_with(Default::default).topology = Some(ask);
    Ok(())
}

pub(crate) const EXPECT_MODELS: &str = "GPU model names separated by `|` (letters, digits, `-`, `_`, `.`, `:`, `/`)";
pub(crate) const EXPECT_FEATURES: &str =
    "node features separated by `|`, `&` or `,` (letters, digits, `-`, `_`, `.`, `:`, `/`)";
const EXPECT_CONSTRAINT: &str = "a Slurm constraint: features (letters, digits, `-`, `_`, `.`, `:`, `/`) joined by \
     `&` or `|`, grouped with `(...)` or `[...]`, counts `*N`, e.g. `ib&nvme` or `[rack1|rack2]`";
pub(crate) const EXPECT_ESTIMATE: &str = "a time in seconds >= 0 (finite, at most 1e12) or an empty cell";
pub(crate) const EXPECT_PRIORITY: &str = "a whole number (negative allowed) or an empty cell";
pub(crate) const EXPECT_COUNT: &str = "a whole number >= 0";
pub(crate) const EXPECT_MILLI: &str = "GPU thousandths 1..=1000 (below 1000 only with exactly 1 GPU), or 0 with 0 GPUs";
const EXPECT_END: &str = "a time in seconds >= the start (scheduled) time";
pub(crate) const EXPECT_AFTER: &str =
    "dependencies `afterok:ID[:ID...]`, `afterany:...` or `afternotok:...`, separated by commas, or an empty cell";
pub(crate) const EXPECT_STATE: &str =
    "how the job ended: completed, failed, timeout, cancelled, node_fail, out_of_memory, or an empty cell (completed)";
pub(crate) const EXPECT_START: &str =
    "when the job really started: a time in seconds >= submit_time (finite, at most 1e12), or an empty cell";
const EXPECT_SACCT_START: &str = "a date and time `YYYY-MM-DDTHH:MM:SS`, `Unknown` or `None`";
pub(crate) const EXPECT_TRES: &str = "Slurm TRES `name=count,...` (e.g. `cpu=4,mem=16G,gres/gpu=2`)";

/// Where each known column sits in a row.
#[derive(Debug)]
struct Layout {
    names: Vec<String>,
    /// Column index for each role, by `Role as usize`.
    at: [Option<usize>; ROLES],
}

const ROLES: usize = Role::Ignore as usize + 1;

impl Layout {
    fn new(format: Format, names: Vec<String>, file: &str, line: u64) -> Result<Self, TraceError> {
        let columns = format.columns();
        let mut seen: Vec<Option<usize>> = vec![None; columns.len()];
        let mut unknown = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match columns.iter().position(|c| c.name == name) {
                Some(k) => match seen.get_mut(k) {
                    Some(slot @ None) => *slot = Some(i),
                    _ => {
                        return Err(TraceError::DuplicateColumn { file: file.to_string(), line, column: name.clone() })
                    }
                },
                None => unknown.push(name.clone()),
            }
        }
        // sacct output may carry more columns than ordo reads; other formats are strict.
        if !unknown.is_empty() && format != Format::Sacct {
            return Err(TraceError::UnknownColumn {
                file: file.to_string(),
                line,
                columns: unknown,
                format,
                known: columns.iter().map(|c| c.name).collect(),
            });
        }
        if let Some(c) = columns.iter().zip(&seen).find(|(c, at)| c.required && at.is_none()).map(|(c, _)| c) {
            return Err(TraceError::MissingColumn {
                file: file.to_string(),
                line,
                column: c.name,
                format,
                header: shown(names.join(if format == Format::Sacct { "|" } else { "," }).as_bytes()),
            });
        }
        let mut at = [None; ROLES];
        for (c, i) in columns.iter().zip(&seen) {
            if c.role != Role::Ignore {
                at[c.role as usize] = *i;
            }
        }
        Ok(Layout { names, at })
    }

    fn col(&self, role: Role) -> Option<usize> {
        self.at[role as usize]
    }
}

/// Reads a header-led CSV (or sacct) trace into `sink`.
pub(crate) fn read_csv<R: Read>(reader: R, sink: &mut Sink<'_>) -> Result<(), TraceError> {
    let format = sink.format;
    let file = sink.file.clone();
    let sacct = format == Format::Sacct;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(if sacct { b'|' } else { b',' })
        .quoting(!sacct)
        .buffer_capacity(1 << 16)
        .from_reader(reader);
    let mut record = csv::ByteRecord::new();
    if !read(&mut rdr, &mut record, &file, 1)? {
        return Err(TraceError::Empty { file });
    }
    let header_line = line_of(&record, 1);
    let header: Vec<String> = record
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = if i == 0 { f.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(f) } else { f };
            String::from_utf8_lossy(f.trim_ascii()).into_owned()
        })
        .collect();
    let layout = Layout::new(format, header, &file, header_line)?;
    let mut last_line = header_line;
    let mut line_name = String::new();
    while read(&mut rdr, &mut record, &file, last_line)? {
        let line = line_of(&record, last_line + 1);
        last_line = line;
        if sacct && is_step(record.get(layout.col(Role::Id).unwrap_or(0)).unwrap_or_default()) {
            sink.step();
            continue;
        }
        if sacct && record.len() > layout.names.len() {
            if let Some(c) = layout.col(Role::Features) {
                rejoin(&mut record, c, layout.names.len());
            }
        }
        line_name.clear();
        let row = parse_row(&record, &layout, format, &file, line, &mut line_name);
        sink.row(line, row)?;
    }
    Ok(())
}

/// `sacct --parsable2` does not escape its `|` separator inside a cell, and a `Constraints`
/// cell may hold alternatives (`[ib|nvme]`): the fields beyond the header's count are that
/// cell's (at column `col`, the only column ordo reads whose text may hold a `|`), joined back.
fn rejoin(record: &mut csv::ByteRecord, col: usize, want: usize) {
    let extra = record.len() - want;
    let mut out = csv::ByteRecord::with_capacity(record.as_slice().len(), want);
    let mut joined = Vec::new();
    for (i, f) in record.iter().enumerate() {
        if i < col || i > col + extra {
            out.push_field(f);
        } else {
            joined.extend_from_slice(f);
            if i < col + extra {
                joined.push(b'|');
            } else {
                out.push_field(&joined);
            }
        }
    }
    out.set_position(record.position().cloned());
    *record = out;
}

/// A sacct job id that names a step (`123.batch`, `123.0`, `123_4.extern`).
fn is_step(id: &[u8]) -> bool {
    id.trim_ascii().contains(&b'.')
}

fn parse_row<'r>(
    record: &'r csv::ByteRecord,
    layout: &Layout,
    format: Format,
    file: &str,
    line: u64,
    line_name: &mut String,
) -> Result<Row<'r>, TraceError> {
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
    let name = match layout.col(Role::Id) {
        Some(c) => {
            std::str::from_utf8(field(c)).ok().filter(|s| !s.is_empty()).ok_or_else(|| bad(c, EXPECT_ID))?.into()
        }
        None => {
            use std::fmt::Write;
            let _ = write!(line_name, "line{line}");
            line_name.clone().into()
        }
    };
    let submit_col = layout.col(Role::Submit).unwrap_or(0);
    // Alibaba 2025: an instance created before the trace began, or still there when it ended,
    // has an empty creation or deletion time: its run time is unknown.
    let censored = format == Format::Alibaba2025
        && [Role::Submit, Role::End].iter().any(|&r| layout.col(r).is_some_and(|c| field(c).is_empty()));
    let submit = match format {
        _ if censored => 0,
        Format::PhillyVc => parse_clock(field(submit_col)).ok_or_else(|| bad(submit_col, EXPECT_CLOCK))?,
        Format::Helios | Format::Acme => parse_zoned(field(submit_col)).ok_or_else(|| bad(submit_col, EXPECT_ZONED))?,
        Format::Sacct => parse_datetime(field(submit_col)).ok_or_else(|| bad(submit_col, EXPECT_DATETIME))?,
        _ => parse_secs(field(submit_col)).ok_or_else(|| bad(submit_col, EXPECT_TIME))?,
    };

    // Resources: GPUs (or TRES), fractional GPUs, CPUs, memory. The GPU types a job asked for
    // (`ReqTRES`) and those it ran on (`AllocTRES`: an untyped request gets typed GPUs there).
    let mut tres = Tres::default();
    let mut types = GpuTypes::default();
    for role in [Role::AllocTres, Role::ReqTres] {
        if let Some(c) = layout.col(role) {
            let t = parse_tres(field(c)).ok_or_else(|| bad(c, EXPECT_TRES))?;
            if role == Role::AllocTres {
                types.ran_on.clone_from(&t.gpu_types);
            } else {
                types.asked.clone_from(&t.gpu_types);
            }
            if !field(c).is_empty() && tres.gpus.is_none() && tres.cpus.is_none() {
                tres = t;
            }
        }
    }
    let (mut gpus, share) = match (layout.col(Role::Gpus), layout.col(Role::GpusOrShare)) {
        (Some(c), _) => (parse_count(field(c)).ok_or_else(|| bad(c, EXPECT_GPUS))?, None),
        (None, Some(c)) => parse_gpus_or_share(field(c)).ok_or_else(|| bad(c, EXPECT_GPUS_OR_SHARE))?,
        (None, None) => (tres.gpus.unwrap_or(0), None),
    };
    // Alibaba 2026: GPUs and CPUs are asked per worker.
    let workers = match layout.col(Role::Workers) {
        Some(c) => {
            let w = parse_count(field(c)).filter(|&w| w >= 1).ok_or_else(|| bad(c, EXPECT_WORKERS))?;
            let g = layout.col(Role::GpusOrShare).unwrap_or(c);
            if share.is_some() && w > 1 {
                return Err(bad(g, EXPECT_WORKER_GPUS));
            }
            gpus = gpus.checked_mul(w).filter(|&n| n <= MAX_JOB_GPUS).ok_or_else(|| bad(g, EXPECT_WORKER_GPUS))?;
            w
        }
        None => 1,
    };
    let gpu_milli = match layout.col(Role::GpuMilli) {
        _ if share.is_some() => share,
        Some(c) if !field(c).is_empty() => {
            let m = parse_count(field(c)).ok_or_else(|| bad(c, EXPECT_MILLI))?;
            match (gpus, m) {
                (0, _) if m <= 1000 => None,
                (_, 1000) => None,
                (1, 1..=999) => Some(m),
                _ => return Err(bad(c, EXPECT_MILLI)),
            }
        }
        _ => None,
    };
    let cpus = match (layout.col(Role::CpuMilli), layout.col(Role::Cpus), layout.col(Role::CpuCores)) {
        (Some(c), _, _) => {
            let m = parse_count(field(c)).ok_or_else(|| bad(c, EXPECT_COUNT))?;
            Some(m.div_ceil(1000))
        }
        (None, Some(c), _) => optional(field(c), parse_count).map_err(|()| bad(c, EXPECT_COUNT))?,
        (None, None, Some(c)) => {
            let x = optional(field(c), parse_nonneg).map_err(|()| bad(c, EXPECT_CORES))?;
            x.map(|x| (x.ceil() * f64::from(workers)).min(f64::from(u32::MAX)) as u32)
        }
        (None, None, None) => tres.cpus,
    };
    let mem_mib = match (layout.col(Role::MemMib), layout.col(Role::MemGib)) {
        (Some(c), _) => optional(field(c), parse_u64).map_err(|()| bad(c, EXPECT_COUNT))?,
        (None, Some(c)) => {
            let x = optional(field(c), parse_nonneg).map_err(|()| bad(c, EXPECT_GIB))?;
            x.filter(|x| *x <= 1e12).map(|x| (x * 1024.0).ceil() as u64)
        }
        (None, None) => tres.mem_mib,
    };

    // Run time: a duration column, or end - start (no start: never ran).
    let runtime = match layout.col(Role::Duration) {
        Some(c) if format == Format::Sacct => {
            let d = parse_slurm_duration(field(c)).ok_or_else(|| bad(c, EXPECT_SLURM_DURATION))?;
            // Nothing allocated and no time elapsed: pending when it ended (cancelled while
            // pending, or still pending): it never ran.
            let no_alloc = layout.col(Role::AllocTres).is_some_and(|a| field(a).is_empty());
            (d > 0 || !no_alloc).then_some(d)
        }
        // Acme: a job cancelled before it started has no duration.
        Some(c) if format == Format::Acme && field(c).is_empty() => None,
        Some(c) => Some(parse_secs(field(c)).ok_or_else(|| bad(c, EXPECT_TIME))?),
        None if censored => None,
        None => {
            let (s, e) = (layout.col(Role::Start).unwrap_or(0), layout.col(Role::End).unwrap_or(0));
            let expect = if format == Format::Alibaba2025 { EXPECT_TIME_OR_EMPTY } else { EXPECT_TIME };
            let end = parse_secs(field(e)).ok_or_else(|| bad(e, expect))?;
            match optional(field(s), parse_secs).map_err(|()| bad(s, EXPECT_ESTIMATE))? {
                None => None,
                Some(start) if end >= start => Some(end - start),
                Some(_) => return Err(bad(e, EXPECT_END)),
            }
        }
    };
    // When it really started (for the as-run row): only read for a job that ran.
    let start = match layout.col(Role::RealStart) {
        Some(c) if runtime.is_some() && format == Format::Sacct => match field(c) {
            b"" | b"Unknown" | b"None" => None,
            v => Some(parse_datetime(v).ok_or_else(|| bad(c, EXPECT_SACCT_START))?),
        },
        Some(c) if runtime.is_some() && matches!(format, Format::Helios | Format::Acme) => match field(c) {
            b"" | b"None" | b"Unknown" => None,
            v => Some(parse_zoned(v).ok_or_else(|| bad(c, EXPECT_REAL_START))?),
        },
        Some(c) if runtime.is_some() => parse_start(field(c), submit).map_err(|()| bad(c, EXPECT_START))?,
        _ => None,
    };
    let text = |role: Role| -> Result<Option<&'r str>, TraceError> {
        match layout.col(role) {
            Some(c) => std::str::from_utf8(field(c))
                .map(|s| Some(s).filter(|s| !s.is_empty()))
                .map_err(|_| bad(c, EXPECT_NAME)),
            None => Ok(None),
        }
    };
    let group = text(Role::Group)?.unwrap_or(DEFAULT_NAME);
    // Philly-vc has only the virtual cluster, Alibaba 2026 only the organization: it is the
    // user as well as the group.
    let owner_only = matches!(format, Format::PhillyVc | Format::Alibaba2026);
    let user = text(Role::User)?.unwrap_or(if owner_only { group } else { DEFAULT_NAME });
    let queue = text(Role::Queue)?;
    let estimate = match layout.col(Role::Estimate) {
        Some(c) if format == Format::Sacct => {
            let v = field(c);
            if v.is_empty() || v == b"UNLIMITED" || v == b"Partition_Limit" || v == b"INVALID" {
                None
            } else {
                Some(parse_slurm_duration(v).ok_or_else(|| bad(c, EXPECT_SLURM_LIMIT))?)
            }
        }
        Some(c) => optional(field(c), parse_secs).map_err(|()| bad(c, EXPECT_ESTIMATE))?,
        None => None,
    };
    let priority = match layout.col(Role::Priority) {
        Some(c) => optional(field(c), parse_int).map_err(|()| bad(c, EXPECT_PRIORITY))?,
        None => None,
    };
    let after = match layout.col(Role::After) {
        Some(c) => parse_after(field(c)).ok_or_else(|| bad(c, EXPECT_AFTER))?,
        None => Vec::new(),
    };
    let failed = match layout.col(Role::State) {
        // Slurm has many more states (PENDING, REQUEUED, ...): only its unsuccessful ends count.
        // Helios and Acme write Slurm's; Helios's Philly writes `Pass`, `Failed`, `Killed`.
        Some(c) if matches!(format, Format::Sacct | Format::Helios | Format::Acme) => {
            parse_failed(field(c)).or_else(|| Some(field(c).eq_ignore_ascii_case(b"killed"))).unwrap_or(false)
        }
        Some(c) => parse_failed(field(c)).ok_or_else(|| bad(c, EXPECT_STATE))?,
        None => false,
    };
    let needs = parse_needs(layout, &field, &bad, format, &types)?;
    Ok(Row {
        name,
        submit,
        gpus,
        gpu_milli,
        cpus,
        mem_mib,
        runtime,
        estimate,
        priority,
        user,
        group,
        queue,
        censored,
        after,
        failed,
        start,
        needs,
    })
}

/// A generic `start_time` cell: empty is unknown; else seconds, not before `submit`.
pub(crate) fn parse_start(raw: &[u8], submit: ordo_core::time::Time) -> Result<Option<ordo_core::time::Time>, ()> {
    match optional(raw, parse_secs)? {
        Some(s) if s < submit => Err(()),
        s => Ok(s),
    }
}

/// A dependency list (`afterok:a:b,afterany:c`), names as written; `None` if malformed.
pub(crate) fn parse_after(raw: &[u8]) -> Option<Vec<(ordo_core::DepKind, String)>> {
    ordo_core::deps::parse_dep_list(std::str::from_utf8(raw).ok()?).ok()
}

/// Whether a job's end state is unsuccessful: `completed` (or empty) is success; Slurm's
/// `FAILED`, `TIMEOUT`, `CANCELLED` (also `CANCELLED by 1000`), `NODE_FAIL`, `OUT_OF_MEMORY`,
/// `PREEMPTED`, `BOOT_FAIL`, `DEADLINE` are not (any case). `None` for anything else.
pub(crate) fn parse_failed(raw: &[u8]) -> Option<bool> {
    let s = std::str::from_utf8(raw).ok()?.trim().to_ascii_lowercase();
    let word = s.split_whitespace().next().unwrap_or("");
    match word {
        "" | "completed" => Some(false),
        "failed" | "timeout" | "cancelled" | "node_fail" | "out_of_memory" | "preempted" | "boot_fail" | "deadline" => {
            Some(true)
        }
        _ => None,
    }
}

/// GPU types of a sacct row's typed TRES (`gres/gpu:a100=2`).
#[derive(Debug, Default)]
struct GpuTypes {
    /// In `ReqTRES`: the types the job asked for (`--gres=gpu:a100:2`).
    asked: Vec<String>,
    /// In `AllocTRES`: the types it ran on, whatever it asked.
    ran_on: Vec<String>,
}

/// A job's GPU models, memory, features, class and measured-on model from the columns that carry
/// them; for sacct, the models it asked for from `ReqTRES`, the model it ran on (when one) as
/// the model its run time was measured on, and the features every node it may use has from
/// `Constraints` (Slurm's syntax, [`crate::Constraint`]). `None` when none says anything.
fn parse_needs<'r>(
    layout: &Layout,
    field: &dyn Fn(usize) -> &'r [u8],
    bad: &dyn Fn(usize, &'static str) -> TraceError,
    format: Format,
    types: &GpuTypes,
) -> Result<Option<Box<ordo_core::GpuNeeds>>, TraceError> {
    let roles = [Role::GpuModels, Role::GpuMemMib, Role::Features, Role::JobClass, Role::MeasuredOn];
    let cols = roles.map(|r| layout.col(r));
    let mut cells = cols.map(|c| c.map_or(&b""[..], field));
    let sacct = format == Format::Sacct;
    let required: String;
    if let (true, Some(c)) = (sacct, cols[2]) {
        let text = std::str::from_utf8(cells[2]).map_err(|_| bad(c, EXPECT_CONSTRAINT))?;
        let parsed = crate::Constraint::parse(text).map_err(|_| bad(c, EXPECT_CONSTRAINT))?;
        required = parsed.map(|k| k.required().join("&")).unwrap_or_default();
        cells[2] = required.as_bytes();
    }
    let mut needs = needs_from_cells(cells, |i, e| bad(cols[i].unwrap_or(0), e))?;
    if let Some(c) = layout.col(Role::Topology) {
        add_topology(&mut needs, field(c)).map_err(|()| bad(c, EXPECT_TOPOLOGY))?;
    }
    if sacct && cols[0].is_none() && !types.asked.is_empty() {
        needs.get_or_insert_with(Default::default).models.clone_from(&types.asked);
    }
    if sacct && cols[4].is_none() && types.ran_on.len() == 1 {
        needs.get_or_insert_with(Default::default).measured_on = Some(types.ran_on[0].clone());
    }
    Ok(needs)
}

/// GPU needs from the five typed cells (`gpu_model`, `gpu_mem_mib`, `features`, `job_class`,
/// `measured_on`): models `|`-separated, features `|`-, `&`- or `,`-separated (Slurm's
/// `Constraints` `ib&nvme`: each named feature is required; `a|b` alternatives are read as all
/// required), names lowercased. `bad(i, expected)` names cell `i`'s field.
pub(crate) fn needs_from_cells<E>(
    cells: [&[u8]; 5],
    bad: impl Fn(usize, &'static str) -> E,
) -> Result<Option<Box<ordo_core::GpuNeeds>>, E> {
    let text =
        |i: usize| -> Result<&str, E> { std::str::from_utf8(cells[i]).map(str::trim).map_err(|_| bad(i, EXPECT_NAME)) };
    let list = |s: &str, seps: &[char]| -> Vec<String> {
        let mut v: Vec<String> =
            s.split(seps).map(|x| x.trim().to_ascii_lowercase()).filter(|x| !x.is_empty()).collect();
        v.dedup();
        v
    };
    let name_ok = |m: &String| name_ok(m);
    let mut n = ordo_core::GpuNeeds { models: list(text(0)?, &['|']), ..Default::default() };
    if !n.models.iter().all(name_ok) {
        return Err(bad(0, EXPECT_MODELS));
    }
    n.min_mem_mib = optional(cells[1], parse_u64).map_err(|()| bad(1, EXPECT_COUNT))?.unwrap_or(0);
    n.features = list(text(2)?, &['|', '&', ',']);
    if !n.features.iter().all(name_ok) {
        return Err(bad(2, EXPECT_FEATURES));
    }
    let one = |i: usize| -> Result<Option<String>, E> {
        let t = text(i)?.to_ascii_lowercase();
        Ok(Some(t).filter(|t| !t.is_empty()))
    };
    n.class = one(3)?;
    n.measured_on = one(4)?;
    if n.measured_on.as_ref().is_some_and(|m| !name_ok(m)) {
        return Err(bad(4, EXPECT_MODELS));
    }
    Ok((n != ordo_core::GpuNeeds::default()).then(|| Box::new(n)))
}

/// Whether a GPU model or feature name is one ordo reads and writes: at most 128 bytes of
/// letters, digits, `-`, `_`, `.`, `:`, `/` ([`EXPECT_MODELS`]).
pub(crate) fn name_ok(m: &str) -> bool {
    m.len() <= 128 && m.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c))
}

/// Resources named in a Slurm TRES string.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Tres {
    pub gpus: Option<u32>,
    pub cpus: Option<u32>,
    pub mem_mib: Option<u64>,
    /// GPU models of typed `gres/gpu:TYPE=N` entries.
    pub gpu_types: Vec<String>,
}

/// Parses `cpu=4,mem=16G,node=1,billing=4,gres/gpu=2` (empty: nothing). The GPU count is
/// `gres/gpu=N`, or else the sum of typed `gres/gpu:TYPE=N` entries.
pub(crate) fn parse_tres(raw: &[u8]) -> Option<Tres> {
    let s = std::str::from_utf8(raw).ok()?.trim();
    let mut t = Tres::default();
    let mut typed: Option<u32> = None;
    if s.is_empty() {
        return Some(t);
    }
    for item in s.split(',') {
        let (k, v) = item.trim().split_once('=')?;
        match k {
            "cpu" => t.cpus = Some(v.parse().ok()?),
            "mem" => t.mem_mib = Some(parse_mem_mib(v)?),
            "gres/gpu" => t.gpus = Some(v.parse().ok()?),
            k if k.starts_with("gres/gpu:") => {
                let n: u32 = v.parse().ok()?;
                typed = Some(typed.unwrap_or(0).checked_add(n)?);
                let ty = k["gres/gpu:".len()..].trim().to_ascii_lowercase();
                // A type ordo could not write back (control bytes, spaces, ...): unreadable.
                if !name_ok(&ty) {
                    return None;
                }
                if !ty.is_empty() && !t.gpu_types.contains(&ty) {
                    t.gpu_types.push(ty);
                }
            }
            _ => {}
        }
    }
    if t.gpus.is_none() {
        t.gpus = typed;
    }
    Some(t)
}

/// Memory with an optional Slurm unit suffix (`K`, `M` (default), `G`, `T`), in MiB (rounded up).
pub(crate) fn parse_mem_mib(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult_kib): (&str, u64) = match v.as_bytes().last()? {
        b'K' | b'k' => (&v[..v.len() - 1], 1),
        b'M' | b'm' => (&v[..v.len() - 1], 1024),
        b'G' | b'g' => (&v[..v.len() - 1], 1024 * 1024),
        b'T' | b't' => (&v[..v.len() - 1], 1024 * 1024 * 1024),
        _ => (v, 1024),
    };
    let x: f64 = num.parse().ok()?;
    if !(x.is_finite() && x >= 0.0) {
        return None;
    }
    let kib = x * mult_kib as f64;
    (kib <= 1e18).then(|| (kib / 1024.0).ceil() as u64)
}

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

/// A count: a whole number >= 0 fitting `u32`, written as an integer or an integral decimal
/// (`8` or `8.0`).
pub(crate) fn parse_count(raw: &[u8]) -> Option<u32> {
    if let Some(n) = crate::timefmt::parse_digits(raw, 9) {
        return Some(n as u32);
    }
    let s = std::str::from_utf8(raw).ok()?;
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    let x: f64 = s.parse().ok()?;
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)).then_some(x as u32)
}

/// A GPU count, or a share of one GPU: a whole number gives `(n, None)`; a number strictly
/// between 0 and 1 gives one GPU and its share in thousandths (`0.5`: `(1, Some(500))`, at
/// least 1). Anything else (a negative number, a fraction above 1) is `None`.
pub(crate) fn parse_gpus_or_share(raw: &[u8]) -> Option<(u32, Option<u32>)> {
    if let Some(n) = parse_count(raw) {
        return Some((n, None));
    }
    let x = parse_nonneg(raw)?;
    (x > 0.0 && x < 1.0).then(|| (1, Some(((x * 1000.0).round() as u32).clamp(1, 999))))
}

/// A finite number >= 0.
pub(crate) fn parse_nonneg(raw: &[u8]) -> Option<f64> {
    let x: f64 = std::str::from_utf8(raw).ok()?.trim().parse().ok()?;
    (x.is_finite() && x >= 0.0).then_some(x)
}

/// A whole number >= 0 fitting `u64`.
pub(crate) fn parse_u64(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// A signed whole number.
pub(crate) fn parse_int(raw: &[u8]) -> Option<i64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// An optional cell: empty is `Ok(None)`, otherwise `parse` must succeed.
pub(crate) fn optional<T>(raw: &[u8], parse: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>, ()> {
    if raw.is_empty() {
        Ok(None)
    } else {
        parse(raw).map(Some).ok_or(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_or_shares() {
        assert_eq!(parse_gpus_or_share(b"4"), Some((4, None)));
        assert_eq!(parse_gpus_or_share(b"2.0"), Some((2, None)));
        assert_eq!(parse_gpus_or_share(b"0.5"), Some((1, Some(500))));
        assert_eq!(parse_gpus_or_share(b"0.0001"), Some((1, Some(1))));
        assert_eq!(parse_gpus_or_share(b"1.5"), None);
        assert_eq!(parse_gpus_or_share(b"-0.5"), None);
        assert_eq!(parse_gpus_or_share(b"NaN"), None);
    }

    #[test]
    fn tres() {
        let t = parse_tres(b"cpu=4,mem=16G,node=1,billing=4,gres/gpu=2").unwrap();
        assert_eq!(t, Tres { gpus: Some(2), cpus: Some(4), mem_mib: Some(16_384), gpu_types: vec![] });
        // A type ordo could not write back makes the string unreadable (found by fuzzing `sacct`:
        // a NUL in the type was read, written to generic CSV and refused there).
        assert_eq!(parse_tres(b"cpu=2,gres/gpu:a1\x00\x00=1"), None);
        assert_eq!(parse_tres(b"gres/gpu:a 100=1"), None);
        let t = parse_tres(b"cpu=8,gres/gpu:a100=2,gres/gpu:v100=1").unwrap();
        assert_eq!((t.gpus, t.cpus, t.mem_mib), (Some(3), Some(8), None));
        assert_eq!(parse_tres(b""), Some(Tres::default()));
        assert_eq!(parse_tres(b"cpu"), None);
        assert_eq!(parse_tres(b"gres/gpu=x"), None);
        assert_eq!(parse_mem_mib("1500K"), Some(2));
        assert_eq!(parse_mem_mib("2T"), Some(2 * 1024 * 1024));
    }
}
