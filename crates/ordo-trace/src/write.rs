//! Writers: a workload as ordo's generic CSV, ordo's JSON Lines, or the Standard Workload
//! Format. Generic and JSON Lines keep every field ordo reads; SWF keeps what SWF can hold.

use crate::timefmt::secs_text;
use crate::DEFAULT_NAME;
use ordo_core::Workload;
use std::collections::HashMap;
use std::io::Write;

/// The columns [`write_generic`] writes, in order (`start_time` only when a job carries a start
/// time, and the five after it only when a job carries GPU needs, so traces without them are
/// written as before).
pub const GENERIC_COLUMNS: [&str; 21] = [
    "job_id",
    "submit_time",
    "num_gpu",
    "duration",
    "user",
    "group",
    "estimate",
    "priority",
    "cpus",
    "mem_mib",
    "gpu_milli",
    "queue",
    "after",
    "state",
    "start_time",
    "gpu_model",
    "gpu_mem_mib",
    "features",
    "job_class",
    "measured_on",
    "topology",
];

fn name_of(names: &[String], i: u32) -> &str {
    names.get(i as usize).map_or(DEFAULT_NAME, String::as_str)
}

/// Every job as generic cells, in [`GENERIC_COLUMNS`] order.
fn cells(w: &Workload) -> impl Iterator<Item = [String; 21]> + '_ {
    let name = |j: &ordo_core::Job| if j.name.is_empty() { j.id.to_string() } else { j.name.clone() };
    w.jobs.iter().map(move |j| {
        [
            name(j),
            secs_text(j.submit),
            j.gpus.to_string(),
            secs_text(j.runtime),
            name_of(&w.users, j.user).to_string(),
            name_of(&w.groups, j.group).to_string(),
            j.estimate.map(secs_text).unwrap_or_default(),
            j.priority.map(|p| p.to_string()).unwrap_or_default(),
            j.cpus.map(|c| c.to_string()).unwrap_or_default(),
            j.mem_mib.map(|m| m.to_string()).unwrap_or_default(),
            j.gpu_milli.map(|m| m.to_string()).unwrap_or_default(),
            j.queue.clone().unwrap_or_default(),
            after_text(w, j, &name),
            if j.failed { "failed".to_string() } else { String::new() },
            j.start.map(secs_text).unwrap_or_default(),
            j.needs.as_ref().map(|n| n.models.join("|")).unwrap_or_default(),
            j.needs.as_ref().filter(|n| n.min_mem_mib > 0).map(|n| n.min_mem_mib.to_string()).unwrap_or_default(),
            j.needs.as_ref().map(|n| n.features.join("|")).unwrap_or_default(),
            j.needs.as_ref().and_then(|n| n.class.clone()).unwrap_or_default(),
            j.needs.as_ref().and_then(|n| n.measured_on.clone()).unwrap_or_default(),
            j.needs.as_ref().and_then(|n| n.topology.as_ref()).map(|t| t.to_string()).unwrap_or_default(),
        ]
    })
}

/// A job's dependencies as Slurm's list (`afterok:a:b,afterany:c`), naming jobs as `job_id`.
fn after_text(w: &Workload, j: &ordo_core::Job, name: &impl Fn(&ordo_core::Job) -> String) -> String {
    let mut parts: Vec<(ordo_core::DepKind, Vec<String>)> = Vec::new();
    for d in &j.after {
        let other = w.jobs.get(d.job.idx()).filter(|o| o.id == d.job).or_else(|| w.jobs.iter().find(|o| o.id == d.job));
        let Some(other) = other else { continue };
        match parts.iter_mut().find(|p| p.0 == d.kind) {
            Some(p) => p.1.push(name(other)),
            None => parts.push((d.kind, vec![name(other)])),
        }
    }
    parts.iter().map(|(k, names)| format!("{k}:{}", names.join(":"))).collect::<Vec<_>>().join(",")
}

/// Writes `workload` as a `generic` trace: header [`GENERIC_COLUMNS`], one row per job in
/// `workload.jobs` order.
///
/// Times are exact decimal seconds (`12.345`), so loading reads back the same milliseconds;
/// absent optional values are empty cells. `job_id` is `Job::name`, or the job's id when the
/// name is empty. A user or group index outside the workload's name lists is written as
/// [`DEFAULT_NAME`]. Loading the output gives back the same jobs when the workload is in load
/// order (renumbered, first submit at 0, no zero run times, names without surrounding spaces).
pub fn write_generic<W: Write>(workload: &Workload, writer: W) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(writer);
    let io = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(err) => err,
        other => std::io::Error::other(format!("{other:?}")),
    };
    let n = if workload.jobs.iter().any(|j| j.needs.as_ref().is_some_and(|n| n.topology.is_some())) {
        GENERIC_COLUMNS.len()
    } else if workload.jobs.iter().any(|j| j.needs.is_some()) {
        GENERIC_COLUMNS.len() - 1
    } else if workload.jobs.iter().any(|j| j.start.is_some()) {
        15
    } else {
        14
    };
    w.write_record(&GENERIC_COLUMNS[..n]).map_err(io)?;
    for row in cells(workload) {
        w.write_record(&row[..n]).map_err(io)?;
    }
    w.flush()
}

/// Writes `workload` as JSON Lines: one object per job with the [`GENERIC_COLUMNS`] as keys;
/// times and numbers as JSON numbers, names as strings, absent values left out.
pub fn write_jsonl<W: Write>(workload: &Workload, writer: W) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(writer);
    let numeric = [
        false, true, true, true, false, false, true, true, true, true, true, false, false, false, true, false, true,
        false, false, false, false,
    ];
    for row in cells(workload) {
        let mut first = true;
        out.write_all(b"{")?;
        for (i, v) in row.iter().enumerate() {
            if v.is_empty() && i >= 6 {
                continue;
            }
            if !first {
                out.write_all(b",")?;
            }
            first = false;
            let value = if numeric[i] { v.clone() } else { serde_json::Value::String(v.clone()).to_string() };
            write!(out, "\"{}\":{}", GENERIC_COLUMNS[i], value)?;
        }
        out.write_all(b"}\n")?;
    }
    out.flush()
}

/// Writes `workload` in the Standard Workload Format (version 2.2).
///
/// Header comments give `MaxJobs`, `MaxRecords` and, when known, `MaxProcs` (`max_procs`).
/// Each job becomes 18 fields: its 1-based position as job number, submit and run time in
/// whole seconds (rounded; SWF has no fractions), GPUs as allocated and requested processors,
/// the estimate as requested time (or -1), status 1, user, group and queue as numbers: a name
/// that is a whole number is kept, others are numbered 1, 2, ... in order of first use. The
/// job names, CPUs, memory and fractional GPUs are not kept.
pub fn write_swf<W: Write>(workload: &Workload, max_procs: Option<u64>, writer: W) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(writer);
    writeln!(out, "; Version: 2.2")?;
    writeln!(out, "; Computer: written by ordo (ordo trace convert --to swf)")?;
    writeln!(out, "; MaxJobs: {}", workload.jobs.len())?;
    writeln!(out, "; MaxRecords: {}", workload.jobs.len())?;
    if let Some(p) = max_procs {
        writeln!(out, "; MaxProcs: {p}")?;
    }
    let mut numbers: [HashMap<String, String>; 3] = Default::default();
    let mut number = |kind: usize, name: Option<&str>| -> String {
        match name {
            None => "-1".into(),
            Some(n) if n.parse::<u64>().is_ok() => n.to_string(),
            Some(n) => {
                let map = &mut numbers[kind];
                let next = map.len() + 1;
                map.entry(n.to_string()).or_insert_with(|| next.to_string()).clone()
            }
        }
    };
    let secs = |t: i64| ((t as f64) / 1000.0).round() as i64;
    for (i, j) in workload.jobs.iter().enumerate() {
        let user = number(0, Some(name_of(&workload.users, j.user)));
        let group = number(1, Some(name_of(&workload.groups, j.group)));
        let queue = number(2, j.queue.as_deref());
        writeln!(
            out,
            "{} {} -1 {} {} -1 -1 {} {} -1 1 {} {} -1 {} -1 -1 -1",
            i + 1,
            secs(j.submit),
            secs(j.runtime),
            j.gpus,
            j.gpus,
            j.estimate.map_or(-1, secs),
            user,
            group,
            queue,
        )?;
    }
    out.flush()
}
