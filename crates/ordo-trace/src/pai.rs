//! Alibaba PAI's GPU trace of 2020 (`cluster-trace-gpu-v2020`, format `pai-2020`): the job
//! table joined with the task, instance and sensor tables published beside it, with each job's
//! measured GPU utilisation ([`crate::LoadedTrace::activity`]). The tables have no header line;
//! their columns are those of the published `*.header` files (docs/TRACES.md).

use crate::csvread::{optional, EXPECT_ID, EXPECT_NAME, EXPECT_TIME};
use crate::error::shown;
use crate::ordodb::JobBusy;
use crate::sink::{Row, Sink};
use crate::timefmt::parse_secs;
use crate::{Format, LoadOptions, LoadedTrace, TraceError, DEFAULT_NAME};
use ordo_core::time::Time;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

const JOB: &[&str] = &["job_name", "inst_id", "user", "status", "start_time", "end_time"];
const TASK: &[&str] = &[
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
];
const INSTANCE: &[&str] =
    &["job_name", "task_name", "inst_name", "worker_name", "inst_id", "status", "start_time", "end_time", "machine"];
const SENSOR: &[&str] = &[
    "job_name",
    "task_name",
    "worker_name",
    "inst_id",
    "machine",
    "gpu_name",
    "cpu_usage",
    "gpu_wrk_util",
    "avg_mem",
    "max_mem",
    "avg_gpu_wrk_mem",
    "max_gpu_wrk_mem",
    "read",
    "write",
    "read_count",
    "write_count",
];

const EXPECT_NUMBER: &str = "a number >= 0, or an empty cell";
const EXPECT_END: &str = "a time in seconds >= the instance's start_time, or an empty cell (still running)";

/// The repair counted for a job asking a fraction of several GPUs: ordo holds whole GPUs then.
const GPUS_ROUNDED_UP: &str = "pai-2020: more than one GPU with a fraction (e.g. 1.5): rounded up to whole GPUs";

/// A table beside the job table: `pai_job_table.csv` -> `pai_task_table.csv` (same suffix).
fn sibling(job_table: &Path, table: &str) -> PathBuf {
    let name = job_table.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    let suffix = lower.strip_prefix("pai_job_table").map_or(".csv", |_| &name["pai_job_table".len()..]);
    job_table.with_file_name(format!("pai_{table}_table{suffix}"))
}

/// One headerless table, read row by row (gzip recognised by its magic bytes).
struct Table {
    file: String,
    rdr: csv::Reader<Box<dyn Read>>,
    record: csv::ByteRecord,
    columns: &'static [&'static str],
    line: u64,
}

impl Table {
    fn open(path: &Path, columns: &'static [&'static str]) -> Result<Table, TraceError> {
        let file = path.display().to_string();
        let io = |err| TraceError::Io { file: file.clone(), err };
        let mut raw = BufReader::with_capacity(1 << 16, std::fs::File::open(path).map_err(io)?);
        let gz = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let input: Box<dyn Read> = if gz { Box::new(flate2::bufread::MultiGzDecoder::new(raw)) } else { Box::new(raw) };
        let rdr =
            csv::ReaderBuilder::new().has_headers(false).flexible(true).buffer_capacity(1 << 16).from_reader(input);
        Ok(Table { file, rdr, record: csv::ByteRecord::new(), columns, line: 0 })
    }

    /// The next data row (a first line naming the columns is skipped), `false` at the end.
    fn next(&mut self) -> Result<bool, TraceError> {
        loop {
            let more = self.rdr.read_byte_record(&mut self.record).map_err(|e| {
                let line = e.position().map_or(self.line + 1, |p| p.line());
                match e.into_kind() {
                    csv::ErrorKind::Io(err) => TraceError::Io { file: self.file.clone(), err },
                    other => TraceError::Line { file: self.file.clone(), line, why: format!("{other:?}") },
                }
            })?;
            if !more {
                return Ok(false);
            }
            self.line = self.record.position().map_or(self.line + 1, |p| p.line());
            if self.record.len() == 1 && self.record.get(0).is_some_and(|f| f.trim_ascii().is_empty()) {
                continue; // a blank line
            }
            if self.line == 1 && self.record.get(0).is_some_and(|f| f.trim_ascii() == self.columns[0].as_bytes()) {
                continue; // the published `.header` line put in front
            }
            if self.record.len() != self.columns.len() {
                return Err(TraceError::ColumnCount {
                    file: self.file.clone(),
                    line: self.line,
                    expected: self.columns.len(),
                    found: self.record.len(),
                });
            }
            return Ok(true);
        }
    }

    fn field(&self, i: usize) -> &[u8] {
        self.record.get(i).unwrap_or_default().trim_ascii()
    }

    fn bad(&self, i: usize, expected: &'static str) -> TraceError {
        TraceError::Field {
            file: self.file.clone(),
            line: self.line,
            field: self.columns[i].to_string(),
            expected,
            found: shown(self.field(i)),
        }
    }

    fn text(&self, i: usize) -> Result<&str, TraceError> {
        std::str::from_utf8(self.field(i)).map_err(|_| self.bad(i, EXPECT_NAME))
    }

    fn id(&self, i: usize) -> Result<&str, TraceError> {
        self.text(i).ok().filter(|s| !s.is_empty()).ok_or_else(|| self.bad(i, EXPECT_ID))
    }

    /// A number >= 0, empty (or `NaN`, as pandas writes a missing value) being 0.
    fn number(&self, i: usize) -> Result<f64, TraceError> {
        let v = self.field(i);
        if v.is_empty() || v.eq_ignore_ascii_case(b"nan") {
            return Ok(0.0);
        }
        crate::csvread::parse_nonneg(v).filter(|x| *x <= 1e12).ok_or_else(|| self.bad(i, EXPECT_NUMBER))
    }

    fn time(&self, i: usize) -> Result<Option<Time>, TraceError> {
        optional(self.field(i), parse_secs).map_err(|()| self.bad(i, EXPECT_TIME))
    }
}

/// What a job asks, summed over its tasks (each task's plan times its instances).
#[derive(Default)]
struct Ask {
    /// GPUs in percent of one GPU (`plan_gpu` 50 is half a GPU).
    gpu_pct: f64,
    cpu_pct: f64,
    mem_gb: f64,
}

/// When a job's instances ran.
#[derive(Default, Clone, Copy)]
struct Ran {
    start: Option<Time>,
    end: Option<Time>,
    /// An instance started and has no end: still running when the trace ended.
    open: bool,
}

/// Measured GPU work of a job's instances, in GPU-seconds.
#[derive(Default)]
struct Busy {
    used: f64,
    held: f64,
    samples: u64,
}

/// Loads PAI 2020 from the job table at `path` and the tables beside it (docs/TRACES.md).
pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<LoadedTrace, TraceError> {
    let file = path.display().to_string();
    // Tasks: what each job asks; the plan of each task for weighting its instances' samples.
    let mut asks: HashMap<String, Ask> = HashMap::new();
    let mut plan_gpu: HashMap<(String, String), f64> = HashMap::new();
    let mut t = Table::open(&sibling(path, "task"), TASK)?;
    while t.next()? {
        let (job, task) = (t.id(0)?, t.text(1)?);
        let (n, cpu, mem, gpu) = (t.number(2)?, t.number(6)?, t.number(7)?, t.number(8)?);
        let a = asks.entry(job.to_string()).or_default();
        a.gpu_pct += gpu * n;
        a.cpu_pct += cpu * n;
        a.mem_gb += mem * n;
        plan_gpu.insert((job.to_string(), task.to_string()), gpu);
    }
    // Instances: when each job ran; each worker's GPUs and time, for the sensor table.
    let sensors = sibling(path, "sensor");
    let measured = sensors.is_file();
    let mut ran: HashMap<String, Ran> = HashMap::new();
    let mut workers: HashMap<String, (f64, f64)> = HashMap::new();
    let mut t = Table::open(&sibling(path, "instance"), INSTANCE)?;
    while t.next()? {
        let job = t.id(0)?;
        let (start, end) = (t.time(6)?, t.time(7)?);
        let r = ran.entry(job.to_string()).or_default();
        let Some(s) = start else { continue };
        match end {
            Some(e) if e < s => return Err(t.bad(7, EXPECT_END)),
            Some(e) => {
                r.end = Some(r.end.map_or(e, |x| x.max(e)));
                if measured {
                    let gpu = plan_gpu.get(&(job.to_string(), t.text(1)?.to_string())).copied().unwrap_or(0.0);
                    workers.insert(t.id(3)?.to_string(), (gpu, ordo_core::time::to_secs_f64(e - s)));
                }
            }
            None => r.open = true,
        }
        r.start = Some(r.start.map_or(s, |x| x.min(s)));
    }
    // Sensors: each instance's mean GPU use over its life, in percent of one GPU.
    let mut busy: HashMap<String, Busy> = HashMap::new();
    if measured {
        let mut t = Table::open(&sensors, SENSOR)?;
        while t.next()? {
            let used = t.number(7)?;
            let Some(&(gpu, secs)) = workers.get(t.text(2)?) else { continue };
            if gpu <= 0.0 || secs <= 0.0 {
                continue;
            }
            let b = busy.entry(t.id(0)?.to_string()).or_default();
            b.used += used.min(gpu) / 100.0 * secs;
            b.held += gpu / 100.0 * secs;
            b.samples += 1;
        }
    }
    drop(workers);
    // Jobs, in the job table's order.
    let mut sink = Sink::new(&file, Format::Pai2020, opts)?;
    let mut t = Table::open(path, JOB)?;
    while t.next()? {
        let line = t.line;
        let row = job_row(&t, &asks, &ran, &mut sink);
        match row {
            Ok(None) => sink.unknown_size(),
            Ok(Some(r)) => sink.row(line, Ok(r))?,
            Err(e) => sink.row(line, Err(e))?,
        }
    }
    let mut out = sink.finish();
    if measured {
        let v = out
            .workload
            .jobs
            .iter()
            .map(|j| {
                busy.get(&j.name)
                    .filter(|b| b.held > 0.0)
                    .map(|b| JobBusy { mean_pct: 100.0 * b.used / b.held, samples: b.samples })
            })
            .collect();
        out.activity = Some(v);
    }
    Ok(out)
}

/// One job row joined with its tasks and instances; `None` when no task says what it asks.
fn job_row<'t>(
    t: &'t Table,
    asks: &HashMap<String, Ask>,
    ran: &HashMap<String, Ran>,
    sink: &mut Sink<'_>,
) -> Result<Option<Row<'t>>, TraceError> {
    let name = t.id(0)?;
    let user = Some(t.text(2)?).filter(|u| !u.is_empty()).unwrap_or(DEFAULT_NAME);
    let submit = t.time(4)?.ok_or_else(|| t.bad(4, EXPECT_TIME))?;
    let Some(ask) = asks.get(name) else { return Ok(None) };
    let r = ran.get(name).copied().unwrap_or_default();
    let (gpus, gpu_milli) = match ask.gpu_pct / 100.0 {
        s if s <= 0.0 => (0, None),
        s if s < 1.0 => (1, Some(((s * 1000.0).round() as u32).clamp(1, 999))),
        s => {
            if (s - s.round()).abs() > 1e-9 {
                sink.repaired(GPUS_ROUNDED_UP);
            }
            ((s - 1e-9).ceil().min(f64::from(1u32 << 24)) as u32, None)
        }
    };
    let runtime = match (r.start, r.end) {
        (Some(s), Some(e)) if !r.open => Some(e - s),
        _ => None,
    };
    Ok(Some(Row {
        name: name.into(),
        submit,
        gpus,
        gpu_milli,
        cpus: Some((ask.cpu_pct / 100.0).ceil().min(f64::from(u32::MAX)) as u32),
        mem_mib: Some((ask.mem_gb * 1024.0).ceil() as u64),
        runtime,
        estimate: None,
        priority: None,
        user,
        group: DEFAULT_NAME,
        queue: None,
        censored: r.open,
        after: Vec::new(),
        failed: t.field(3).eq_ignore_ascii_case(b"failed"),
        start: runtime.and(r.start),
        needs: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_keep_the_suffix() {
        let p = Path::new("/d/pai_job_table.csv.gz");
        assert_eq!(sibling(p, "task"), Path::new("/d/pai_task_table.csv.gz"));
        assert_eq!(sibling(Path::new("pai_job_table.csv"), "sensor"), Path::new("pai_sensor_table.csv"));
    }
}
