//! The readers of line formats: the Standard Workload Format, Slurm's `jobcomp/filetxt` log and
//! ordo's JSON Lines. Each reads one line at a time, so memory does not grow with the file.

use crate::csvread::{
    optional, parse_count, parse_int, parse_tres, parse_u64, EXPECT_COUNT, EXPECT_ESTIMATE, EXPECT_GPUS, EXPECT_ID,
    EXPECT_MILLI, EXPECT_NAME, EXPECT_PRIORITY, EXPECT_TIME, EXPECT_TRES,
};
use crate::error::shown;
use crate::sink::{Row, Sink};
use crate::timefmt::{parse_datetime, parse_secs};
use crate::{TraceError, DEFAULT_NAME};
use ordo_core::time::Time;
use std::io::BufRead;

/// Calls `each(line_number, line)` for every line (without its `\r\n`/`\n`).
fn for_each_line<R: BufRead>(
    mut reader: R,
    file: &str,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut buf = Vec::with_capacity(256);
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(|err| TraceError::Io { file: file.to_string(), err })?;
        if n == 0 {
            return Ok(());
        }
        line += 1;
        let mut l = &buf[..];
        if line == 1 {
            l = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
        }
        each(line, l.trim_ascii())?;
    }
}

/// SWF field names (1-based field numbers), for messages.
const SWF_FIELDS: [&str; 18] = [
    "field 1 (job number)",
    "field 2 (submit time)",
    "field 3 (wait time)",
    "field 4 (run time)",
    "field 5 (allocated processors)",
    "field 6 (average CPU time)",
    "field 7 (used memory)",
    "field 8 (requested processors)",
    "field 9 (requested time)",
    "field 10 (requested memory)",
    "field 11 (status)",
    "field 12 (user id)",
    "field 13 (group id)",
    "field 14 (executable number)",
    "field 15 (queue number)",
    "field 16 (partition number)",
    "field 17 (preceding job)",
    "field 18 (think time)",
];

const SWF_REPAIR_PROCS: &str = "swf: allocated processors -1 (unknown): used the requested processors";
const EXPECT_SWF_PROCS: &str = "a whole number of processors >= 0, or -1 for unknown";
const EXPECT_SWF_TIME: &str = "a time in seconds >= 0, or -1 for unknown";

/// An SWF number that may be `-1` (unknown): `Ok(None)` for any negative value written as `-1`.
fn swf_optional<T>(raw: &[u8], parse: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>, ()> {
    if raw == b"-1" || raw == b"-1.0" {
        Ok(None)
    } else {
        parse(raw).map(Some).ok_or(())
    }
}

/// Reads an SWF log: `;` lines are header comments (`MaxProcs:`, else `MaxNodes:`, give
/// [`crate::LoadedTrace::max_procs`]); every other non-blank line is a job of 18 fields.
pub(crate) fn read_swf<R: BufRead>(reader: R, sink: &mut Sink<'_>) -> Result<(), TraceError> {
    let file = sink.file.clone();
    let mut max_nodes = None;
    let mut max_procs = None;
    for_each_line(reader, &file, |line, l| {
        if l.is_empty() {
            return Ok(());
        }
        if let Some(comment) = l.strip_prefix(b";") {
            let text = String::from_utf8_lossy(comment);
            if let Some((k, v)) = text.split_once(':') {
                let v = v.trim().parse::<u64>().ok().filter(|&n| n > 0);
                match k.trim() {
                    "MaxProcs" => max_procs = v.or(max_procs),
                    "MaxNodes" => max_nodes = v.or(max_nodes),
                    _ => {}
                }
            }
            return Ok(());
        }
        let mut f: [&[u8]; 18] = [b""; 18];
        let mut n = 0;
        for tok in l.split(|b| b.is_ascii_whitespace()).filter(|t| !t.is_empty()) {
            if let Some(slot) = f.get_mut(n) {
                *slot = tok;
            }
            n += 1;
        }
        let mut repaired = false;
        let row = (|| {
            if n != 18 {
                return Err(TraceError::ColumnCount { file: file.clone(), line, expected: 18, found: n });
            }
            let bad = |i: usize, expected: &'static str| TraceError::Field {
                file: file.clone(),
                line,
                field: SWF_FIELDS[i].to_string(),
                expected,
                found: shown(f[i]),
            };
            let name = std::str::from_utf8(f[0]).map_err(|_| bad(0, EXPECT_ID))?.to_string();
            let submit = parse_secs(f[1]).ok_or_else(|| bad(1, EXPECT_TIME))?;
            let runtime = swf_optional(f[3], parse_secs).map_err(|()| bad(3, EXPECT_SWF_TIME))?;
            let gpus = match swf_optional(f[4], parse_count).map_err(|()| bad(4, EXPECT_SWF_PROCS))? {
                Some(p) => p,
                None => match swf_optional(f[7], parse_count).map_err(|()| bad(7, EXPECT_SWF_PROCS))? {
                    Some(p) => {
                        repaired = true;
                        p
                    }
                    None => return Ok(None),
                },
            };
            let estimate = swf_optional(f[8], parse_secs).map_err(|()| bad(8, EXPECT_SWF_TIME))?;
            let id = |i: usize| -> Result<Option<&str>, TraceError> {
                if f[i] == b"-1" {
                    return Ok(None);
                }
                std::str::from_utf8(f[i]).map(Some).map_err(|_| bad(i, EXPECT_NAME))
            };
            let user = id(11)?.unwrap_or(DEFAULT_NAME);
            let group = id(12)?.unwrap_or(DEFAULT_NAME);
            let queue = id(14)?;
            Ok(Some(Row {
                name: name.into(),
                submit,
                gpus,
                gpu_milli: None,
                cpus: None,
                mem_mib: None,
                runtime,
                estimate,
                priority: None,
                user,
                group,
                queue,
                censored: false,
                after: Vec::new(),
                failed: false,
                start: None,
                needs: None,
            }))
        })();
        sink.maybe_row(line, row, repaired, SWF_REPAIR_PROCS, Sink::unknown_size)
    })?;
    sink.max_procs = max_procs.or(max_nodes);
    Ok(())
}

/// Keys of a `jobcomp/filetxt` line; a word that does not start with one of them continues the
/// previous value (job names and directories may contain spaces).
const JOBCOMP_KEYS: &[&str] = &[
    "JobId",
    "UserId",
    "GroupId",
    "Name",
    "JobName",
    "JobState",
    "Partition",
    "TimeLimit",
    "StartTime",
    "EndTime",
    "NodeList",
    "NodeCnt",
    "ProcCnt",
    "WorkDir",
    "ReservationName",
    "Tres",
    "TRES",
    "Account",
    "QOS",
    "WcKey",
    "Cluster",
    "SubmitTime",
    "EligibleTime",
    "ArrayJobId",
    "ArrayTaskId",
    "HetJobId",
    "HetJobOffset",
    "DerivedExitCode",
    "ExitCode",
    "Priority",
];

const JOBCOMP_REPAIR_SUBMIT: &str = "jobcomp: no SubmitTime: submitted at StartTime";
const EXPECT_JOBCOMP_TIME: &str = "a date and time `YYYY-MM-DDTHH:MM:SS`";
const EXPECT_JOBCOMP_LIMIT: &str = "a time limit in minutes, `UNLIMITED` or `Partition_Limit`";
const EXPECT_JOBCOMP_END: &str = "a date and time not before StartTime";
const EXPECT_JOBCOMP_USER: &str = "a user `name(uid)` or `name`";

/// Splits a jobcomp record into `(key, value)` pairs. Values may hold spaces and `=` (job
/// names, directories), so a word `Key=...` can be part of a value. Slurm writes each key once,
/// in the order of [`JOBCOMP_KEYS`]; where a key appears more than once, the occurrence that
/// starts the field is the last one that sits in that order between the keys written once
/// around it. So a job named `a b=c Partition=evil` keeps the real `Partition=` that follows.
fn jobcomp_pairs(l: &str) -> Result<Vec<(&str, &str)>, String> {
    // Every word: where it starts and ends, and its key's place in JOBCOMP_KEYS if it has one.
    let mut words: Vec<(usize, usize, Option<usize>)> = Vec::new();
    let mut pos = 0usize;
    let bytes = l.as_bytes();
    while pos < l.len() {
        let word_end = l[pos..].find([' ', '\n']).map_or(l.len(), |i| pos + i);
        let key = l[pos..word_end].split_once('=').and_then(|(k, _)| JOBCOMP_KEYS.iter().position(|x| *x == k));
        words.push((pos, word_end, key));
        pos = word_end;
        while pos < l.len() && (bytes[pos] == b' ' || bytes[pos] == b'\n') {
            pos += 1;
        }
    }
    let mut count = [0u32; JOBCOMP_KEYS.len()];
    for k in words.iter().filter_map(|w| w.2) {
        count[k] += 1;
    }
    // The word that starts each repeated key's field: the last that fits in the order between
    // its neighbours written once, else the last.
    let unique = |w: &(usize, usize, Option<usize>)| w.2.filter(|&o| count[o] == 1);
    let mut chosen: Vec<Option<(usize, bool)>> = vec![None; JOBCOMP_KEYS.len()];
    for (i, w) in words.iter().enumerate() {
        let Some(k) = w.2.filter(|&k| count[k] > 1) else { continue };
        let before = words[..i].iter().rev().find_map(unique);
        let after = words[i + 1..].iter().find_map(unique);
        let fits = before.is_none_or(|b| b < k) && after.is_none_or(|a| a > k);
        if fits || !chosen[k].is_some_and(|c| c.1) {
            chosen[k] = Some((i, fits));
        }
    }
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let mut value_start = 0usize;
    for (i, &(pos, end, key)) in words.iter().enumerate() {
        let starts = key.filter(|&k| count[k] == 1 || chosen[k].is_some_and(|c| c.0 == i));
        match starts {
            Some(k) => {
                if let Some(last) = pairs.last_mut() {
                    last.1 = l[value_start..pos].trim_end();
                }
                value_start = pos + JOBCOMP_KEYS[k].len() + 1;
                pairs.push((JOBCOMP_KEYS[k], ""));
            }
            None if pairs.is_empty() => {
                return Err(format!("expected `Key=value` words, found {:?}", shown(&l.as_bytes()[pos..end])))
            }
            None => {}
        }
    }
    if let Some(last) = pairs.last_mut() {
        last.1 = l[value_start.min(l.len())..].trim_end();
    }
    Ok(pairs)
}

/// Reads a Slurm `jobcomp/filetxt` log: one job per record of `Key=value` words. A record
/// starts with `JobId=`; a line that does not continues the one before (Slurm writes a newline
/// in a job name as it is).
pub(crate) fn read_jobcomp<R: BufRead>(reader: R, sink: &mut Sink<'_>) -> Result<(), TraceError> {
    let file = sink.file.clone();
    let mut record: Option<(u64, Vec<u8>)> = None;
    for_each_line(reader, &file, |line, l| {
        match &mut record {
            Some((_, text)) if !l.starts_with(b"JobId=") => {
                text.push(b'\n');
                text.extend_from_slice(l);
                return Ok(());
            }
            _ => {}
        }
        let done = record.take();
        if !l.is_empty() {
            record = Some((line, l.to_vec()));
        }
        match done {
            Some((line, text)) => jobcomp_record(&file, line, text.trim_ascii(), sink),
            None => Ok(()),
        }
    })?;
    match record {
        Some((line, text)) => jobcomp_record(&file, line, text.trim_ascii(), sink),
        None => Ok(()),
    }
}

/// Reads one jobcomp record (starting on line `line`) into the sink.
fn jobcomp_record(file: &str, line: u64, l: &[u8], sink: &mut Sink<'_>) -> Result<(), TraceError> {
    let file = file.to_string();
    {
        let mut repaired = false;
        let row = (|| {
            let text = std::str::from_utf8(l).map_err(|_| TraceError::Line {
                file: file.clone(),
                line,
                why: "expected UTF-8 text".to_string(),
            })?;
            let pairs = jobcomp_pairs(text).map_err(|why| TraceError::Line { file: file.clone(), line, why })?;
            // Values are trimmed of ASCII whitespace, as CSV cells are.
            let get = |k: &str| {
                pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| v.trim_matches(|c: char| c.is_ascii_whitespace()))
            };
            let bad = |k: &str, expected: &'static str| TraceError::Field {
                file: file.clone(),
                line,
                field: k.to_string(),
                expected,
                found: shown(get(k).unwrap_or_default().as_bytes()),
            };
            let need = |k: &'static str| {
                get(k).ok_or_else(|| TraceError::Line { file: file.clone(), line, why: format!("missing `{k}=`") })
            };
            let name = Some(need("JobId")?).filter(|s| !s.is_empty()).ok_or_else(|| bad("JobId", EXPECT_ID))?;
            if name.contains('.') {
                return Ok(None);
            }
            let user_field = need("UserId")?;
            let user = user_field.split('(').next().unwrap_or_default();
            if user.is_empty() && !user_field.is_empty() {
                return Err(bad("UserId", EXPECT_JOBCOMP_USER));
            }
            let group = get("Account")
                .filter(|a| !a.is_empty() && *a != "(null)")
                .or_else(|| get("GroupId").and_then(|g| g.split('(').next()).filter(|g| !g.is_empty()))
                .unwrap_or(DEFAULT_NAME);
            let user = if user.is_empty() { DEFAULT_NAME } else { user };
            let started = need("StartTime")?;
            // A job cancelled while pending has StartTime = EndTime and no node: it never ran.
            let no_node = get("NodeCnt") == Some("0") || matches!(get("NodeList"), Some("(null)" | "None assigned"));
            let start = match started {
                _ if no_node => None,
                "Unknown" | "None" | "" => None,
                s => Some(parse_datetime(s.as_bytes()).ok_or_else(|| bad("StartTime", EXPECT_JOBCOMP_TIME))?),
            };
            let end = need("EndTime")?;
            let runtime = match start {
                None => None,
                Some(s) => {
                    let e = parse_datetime(end.as_bytes()).ok_or_else(|| bad("EndTime", EXPECT_JOBCOMP_TIME))?;
                    if e < s {
                        return Err(bad("EndTime", EXPECT_JOBCOMP_END));
                    }
                    Some(e - s)
                }
            };
            let submit = match get("SubmitTime") {
                Some(s) => parse_datetime(s.as_bytes()).ok_or_else(|| bad("SubmitTime", EXPECT_JOBCOMP_TIME))?,
                None => {
                    repaired = true;
                    start.ok_or_else(|| bad("StartTime", EXPECT_JOBCOMP_TIME))?
                }
            };
            let estimate = match get("TimeLimit") {
                None | Some("UNLIMITED") | Some("Partition_Limit") | Some("") => None,
                Some(m) => {
                    let mins = parse_u64(m.as_bytes())
                        .filter(|&m| m <= 1_000_000_000)
                        .ok_or_else(|| bad("TimeLimit", EXPECT_JOBCOMP_LIMIT))?;
                    Some(mins as Time * 60_000)
                }
            };
            let tres_key = if get("Tres").is_some() { "Tres" } else { "TRES" };
            let tres =
                parse_tres(get(tres_key).unwrap_or_default().as_bytes()).ok_or_else(|| bad(tres_key, EXPECT_TRES))?;
            let cpus = match get("ProcCnt") {
                Some(p) => Some(parse_count(p.as_bytes()).ok_or_else(|| bad("ProcCnt", EXPECT_COUNT))?),
                None => tres.cpus,
            };
            let queue = get("Partition").filter(|p| !p.is_empty());
            Ok(Some(Row {
                name: name.to_string().into(),
                submit,
                gpus: tres.gpus.unwrap_or(0),
                gpu_milli: None,
                cpus,
                mem_mib: tres.mem_mib,
                runtime,
                estimate,
                priority: None,
                user,
                group,
                queue,
                censored: false,
                after: Vec::new(),
                failed: get("JobState").and_then(|st| crate::csvread::parse_failed(st.as_bytes())).unwrap_or(false),
                start,
                // `Tres` is what the job asked for: its typed GPUs (`gres/gpu:a100=2`, where
                // typed GPUs are accounted) are the models it accepts.
                needs: (!tres.gpu_types.is_empty())
                    .then(|| Box::new(ordo_core::GpuNeeds { models: tres.gpu_types.clone(), ..Default::default() })),
            }))
        })();
        sink.maybe_row(line, row, repaired, JOBCOMP_REPAIR_SUBMIT, Sink::step)
    }
}

/// The keys of a JSON Lines job: the `generic` columns.
const JSONL_KEYS: [&str; 21] = crate::write::GENERIC_COLUMNS;

/// Reads ordo's JSON Lines: one object per non-blank line, keys as the `generic` columns.
pub(crate) fn read_jsonl<R: BufRead>(reader: R, sink: &mut Sink<'_>) -> Result<(), TraceError> {
    let file = sink.file.clone();
    for_each_line(reader, &file, |line, l| {
        if l.is_empty() {
            return Ok(());
        }
        let parsed: Result<serde_json::Map<String, serde_json::Value>, _> = serde_json::from_slice(l);
        let obj = match parsed {
            Ok(o) => o,
            Err(e) => {
                let err = TraceError::Line {
                    file: file.clone(),
                    line,
                    why: format!("expected a JSON object with the generic columns as keys: {e}"),
                };
                return sink.row(line, Err(err));
            }
        };
        // Each value as the text a CSV cell would hold: strings as is, numbers as written,
        // null as empty; objects, arrays and booleans are kept as JSON text (and then rejected).
        let mut cells: [Option<String>; 21] = Default::default();
        let mut unknown = Vec::new();
        for (k, v) in &obj {
            match JSONL_KEYS.iter().position(|n| n == k) {
                Some(i) => {
                    cells[i] = Some(match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Null => String::new(),
                        other => other.to_string(),
                    })
                }
                None => unknown.push(k.clone()),
            }
        }
        let row = (|| {
            if !unknown.is_empty() {
                return Err(TraceError::UnknownColumn {
                    file: file.clone(),
                    line,
                    columns: unknown,
                    format: crate::Format::Jsonl,
                    known: JSONL_KEYS.to_vec(),
                });
            }
            let cell = |i: usize| cells[i].as_deref().unwrap_or_default().trim().as_bytes();
            let bad = |i: usize, expected: &'static str| TraceError::Field {
                file: file.clone(),
                line,
                field: JSONL_KEYS[i].to_string(),
                expected,
                found: shown(cell(i)),
            };
            for (i, required) in [(0, "job_id"), (1, "submit_time"), (2, "num_gpu"), (3, "duration")] {
                if cells[i].is_none() {
                    return Err(TraceError::Line {
                        file: file.clone(),
                        line,
                        why: format!("missing key `{required}`"),
                    });
                }
            }
            let name = std::str::from_utf8(cell(0)).ok().filter(|s| !s.is_empty()).ok_or_else(|| bad(0, EXPECT_ID))?;
            let submit = parse_secs(cell(1)).ok_or_else(|| bad(1, EXPECT_TIME))?;
            let gpus = parse_count(cell(2)).ok_or_else(|| bad(2, EXPECT_GPUS))?;
            let runtime = parse_secs(cell(3)).ok_or_else(|| bad(3, EXPECT_TIME))?;
            let estimate = optional(cell(6), parse_secs).map_err(|()| bad(6, EXPECT_ESTIMATE))?;
            let priority = optional(cell(7), parse_int).map_err(|()| bad(7, EXPECT_PRIORITY))?;
            let cpus = optional(cell(8), parse_count).map_err(|()| bad(8, EXPECT_COUNT))?;
            let mem_mib = optional(cell(9), parse_u64).map_err(|()| bad(9, EXPECT_COUNT))?;
            let gpu_milli = match optional(cell(10), parse_count).map_err(|()| bad(10, EXPECT_MILLI))? {
                None => None,
                Some(m) => match (gpus, m) {
                    (0, _) if m <= 1000 => None,
                    (_, 1000) => None,
                    (1, 1..=999) => Some(m),
                    _ => return Err(bad(10, EXPECT_MILLI)),
                },
            };
            let after = crate::csvread::parse_after(cell(12)).ok_or_else(|| bad(12, crate::csvread::EXPECT_AFTER))?;
            let failed = crate::csvread::parse_failed(cell(13)).ok_or_else(|| bad(13, crate::csvread::EXPECT_STATE))?;
            let start =
                crate::csvread::parse_start(cell(14), submit).map_err(|()| bad(14, crate::csvread::EXPECT_START))?;
            let mut needs =
                crate::csvread::needs_from_cells([cell(15), cell(16), cell(17), cell(18), cell(19)], |i, e| {
                    bad(15 + i, e)
                })?;
            crate::csvread::add_topology(&mut needs, cell(20))
                .map_err(|()| bad(20, crate::csvread::EXPECT_TOPOLOGY))?;
            Ok((
                name.to_string(),
                submit,
                gpus,
                runtime,
                estimate,
                priority,
                cpus,
                mem_mib,
                gpu_milli,
                after,
                failed,
                start,
                needs,
            ))
        })();
        let text = |i: usize| cells[i].as_deref().filter(|s| !s.is_empty());
        let row = row.map(
            |(
                name,
                submit,
                gpus,
                runtime,
                estimate,
                priority,
                cpus,
                mem_mib,
                gpu_milli,
                after,
                failed,
                start,
                needs,
            )| Row {
                name: name.into(),
                submit,
                gpus,
                gpu_milli,
                cpus,
                mem_mib,
                runtime: Some(runtime),
                estimate,
                priority,
                user: text(4).unwrap_or(DEFAULT_NAME),
                group: text(5).unwrap_or(DEFAULT_NAME),
                queue: text(11),
                censored: false,
                after,
                failed,
                start,
                needs,
            },
        );
        sink.row(line, row)
    })
}
