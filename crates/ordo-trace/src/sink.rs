//! The loading pipeline shared by every reader: readers hand it parsed rows (or row errors), it
//! applies skip-bad, drops, filters and the window, then rebases, numbers and trims.

use crate::{Format, LoadOptions, LoadedTrace, TraceError, DEFAULT_NAME, MAX_BAD_REASONS, SECONDS_PER_DAY};
use ordo_core::time::{self, Time};
use ordo_core::{Job, JobId, Workload};
use std::collections::{BTreeMap, HashMap};

/// One parsed row, before filtering.
#[derive(Debug)]
pub(crate) struct Row<'a> {
    /// Borrowed from the row where it can be: the sink makes a `String` only for a row it keeps.
    pub name: std::borrow::Cow<'a, str>,
    /// In the trace's time scale (milliseconds; since the epoch for wall-clock formats).
    pub submit: Time,
    pub gpus: u32,
    pub gpu_milli: Option<u32>,
    pub cpus: Option<u32>,
    pub mem_mib: Option<u64>,
    /// `None`: the job never ran (or its run time is unknown).
    pub runtime: Option<Time>,
    pub estimate: Option<Time>,
    pub priority: Option<i64>,
    pub user: &'a str,
    pub group: &'a str,
    pub queue: Option<&'a str>,
    /// The job ran before the trace began or after it ended (its run time is unknown).
    pub censored: bool,
    /// Dependencies on other jobs, by their names in the trace.
    pub after: Vec<(ordo_core::DepKind, String)>,
    /// It ended unsuccessfully.
    pub failed: bool,
    /// When it really started (same time scale as `submit`), where the trace tells.
    pub start: Option<Time>,
    /// GPU models, memory, features, class and measured-on model, where the trace tells.
    pub needs: Option<Box<ordo_core::GpuNeeds>>,
}

/// Submit-time bounds in the trace's time scale.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    from: Option<Time>,
    to: Option<Time>,
}

impl Bounds {
    fn contains(&self, t: Time) -> bool {
        !matches!(self.from, Some(f) if t < f) && !matches!(self.to, Some(e) if t >= e)
    }
}

/// Collects jobs and counts; see the crate docs for the order of the steps.
#[derive(Debug)]
pub(crate) struct Sink<'o> {
    pub file: String,
    pub format: Format,
    opts: &'o LoadOptions,
    /// Bounds known while streaming (relative formats, or wall-clock bounds).
    stream_bounds: Bounds,
    /// Day bounds of a wall-clock format, applied at the end from the earliest submit.
    deferred_days: Option<(Option<f64>, Option<f64>)>,
    workload: Workload,
    users: HashMap<String, u32>,
    groups: HashMap<String, u32>,
    rows: usize,
    zero: usize,
    outside: usize,
    never_ran: usize,
    censored: usize,
    unknown_size: usize,
    filtered: usize,
    skipped_bad: usize,
    bad_reasons: Vec<String>,
    repaired: BTreeMap<&'static str, usize>,
    steps: usize,
    min_submit: Option<Time>,
    pub max_procs: Option<u64>,
    /// Kept jobs' dependencies, by the names of the jobs they wait on (resolved at the end).
    after: Vec<(u32, Vec<(ordo_core::DepKind, String)>)>,
}

impl<'o> Sink<'o> {
    /// Checks the options against the (known) format.
    pub fn new(file: &str, format: Format, opts: &'o LoadOptions) -> Result<Self, TraceError> {
        let bad = |why: String| TraceError::Options { file: file.to_string(), why };
        for (name, day) in [("from_day", opts.from_day), ("to_day", opts.to_day)] {
            if day.is_some_and(f64::is_nan) {
                return Err(bad(format!("{name} is NaN")));
            }
        }
        if opts.from_day.is_some() && opts.from_time.is_some() {
            return Err(bad("give the start of the window as a day or as a time, not both".into()));
        }
        if opts.to_day.is_some() && opts.to_time.is_some() {
            return Err(bad("give the end of the window as a day or as a time, not both".into()));
        }
        if let (Some(from), Some(to)) = (opts.from_day, opts.to_day) {
            if from >= to {
                return Err(bad(format!(
                    "the window [from_day {from}, to_day {to}) is empty: from_day must be less than to_day"
                )));
            }
        }
        if let (Some(from), Some(to)) = (opts.from_time, opts.to_time) {
            if from >= to {
                return Err(bad("the window is empty: the start time must be before the end time".into()));
            }
        }
        if (opts.from_time.is_some() || opts.to_time.is_some()) && !format.wall_clock() {
            return Err(bad(format!(
                "the {format} format has no wall-clock times (it counts seconds from the trace's start); \
                 give the window in days"
            )));
        }
        if let Some(x) = opts.scale_load {
            if !(1e-3..=1e3).contains(&x) {
                return Err(bad(format!("scale_load must be between 0.001 and 1000, got {x}")));
            }
        }
        let to_time = |day: f64| time::from_secs_f64((day * SECONDS_PER_DAY).clamp(-1e15, 1e15));
        let has_days = opts.from_day.is_some() || opts.to_day.is_some();
        let (stream_bounds, deferred_days) = if format.wall_clock() {
            (Bounds { from: opts.from_time, to: opts.to_time }, has_days.then_some((opts.from_day, opts.to_day)))
        } else {
            (Bounds { from: opts.from_day.map(to_time), to: opts.to_day.map(to_time) }, None)
        };
        Ok(Sink {
            file: file.to_string(),
            format,
            opts,
            stream_bounds,
            deferred_days,
            workload: Workload::default(),
            users: HashMap::new(),
            groups: HashMap::new(),
            rows: 0,
            zero: 0,
            outside: 0,
            never_ran: 0,
            censored: 0,
            unknown_size: 0,
            filtered: 0,
            skipped_bad: 0,
            bad_reasons: Vec::new(),
            repaired: BTreeMap::new(),
            steps: 0,
            min_submit: None,
            max_procs: None,
            after: Vec::new(),
        })
    }

    /// Counts a documented repair of the current row.
    pub fn repaired(&mut self, why: &'static str) {
        *self.repaired.entry(why).or_insert(0) += 1;
    }

    /// Counts a data row dropped because the job's size is unknown (SWF processors -1, a PAI job
    /// no task row describes).
    pub fn unknown_size(&mut self) {
        self.rows += 1;
        self.unknown_size += 1;
    }

    /// Counts a skipped Slurm job step (not a row).
    pub fn step(&mut self) {
        self.steps += 1;
    }

    /// Takes a row that a reader may also leave out (`Ok(None)`, counted by `left_out`) or
    /// have repaired (`repair` names the documented repair when `repaired`).
    pub fn maybe_row(
        &mut self,
        line: u64,
        row: Result<Option<Row<'_>>, TraceError>,
        repaired: bool,
        repair: &'static str,
        left_out: fn(&mut Self),
    ) -> Result<(), TraceError> {
        match row {
            Ok(None) => {
                left_out(self);
                Ok(())
            }
            Ok(Some(r)) => {
                if repaired {
                    self.repaired(repair);
                }
                self.row(line, Ok(r))
            }
            Err(e) => self.row(line, Err(e)),
        }
    }

    /// Takes one data row (or the reason it is bad) read at `line`.
    pub fn row(&mut self, line: u64, row: Result<Row<'_>, TraceError>) -> Result<(), TraceError> {
        self.rows += 1;
        let row = match row {
            Ok(r) => r,
            Err(e) if self.opts.skip_bad => {
                self.skipped_bad += 1;
                if self.bad_reasons.len() < MAX_BAD_REASONS {
                    self.bad_reasons.push(e.to_string());
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if row.censored {
            self.censored += 1;
            return Ok(());
        }
        let Some(runtime) = row.runtime else {
            self.never_ran += 1;
            return Ok(());
        };
        self.min_submit = Some(self.min_submit.map_or(row.submit, |m| m.min(row.submit)));
        if runtime == 0 {
            self.zero += 1;
            return Ok(());
        }
        let o = self.opts;
        if (!o.users.is_empty() && !o.users.iter().any(|u| u == row.user))
            || (!o.groups.is_empty() && !o.groups.iter().any(|g| g == row.group))
        {
            self.filtered += 1;
            return Ok(());
        }
        if !self.stream_bounds.contains(row.submit) {
            self.outside += 1;
            return Ok(());
        }
        let id = u32::try_from(self.workload.jobs.len()).map_err(|_| TraceError::TooManyRows {
            file: self.file.clone(),
            line,
            max: u64::from(u32::MAX) + 1,
        })?;
        // Clocks: a start reported before the submit is read as the submit.
        let start = row.start.map(|s| {
            if s < row.submit {
                self.repaired(START_BEFORE_SUBMIT);
            }
            s.max(row.submit)
        });
        let user = intern(&mut self.users, &mut self.workload.users, row.user);
        let group = intern(&mut self.groups, &mut self.workload.groups, row.group);
        self.workload.jobs.push(Job {
            id: JobId(id),
            name: row.name.into_owned(),
            user,
            group,
            submit: row.submit,
            gpus: row.gpus,
            cpus: row.cpus,
            mem_mib: row.mem_mib,
            runtime,
            estimate: row.estimate,
            priority: row.priority,
            gpu_milli: row.gpu_milli,
            queue: row.queue.map(str::to_string),
            after: vec![],
            failed: row.failed,
            start,
            needs: row.needs,
        });
        if !row.after.is_empty() {
            self.after.push((id, row.after));
        }
        Ok(())
    }

    /// Applies deferred windows, rebases, numbers, trims to `max_jobs` and scales.
    pub fn finish(self) -> LoadedTrace {
        let mut w = self.workload;
        let mut repaired = self.repaired;
        // Names to ids while ids are still row positions; dependencies on jobs the window
        // below drops are dropped by `renumber` and counted there.
        resolve_after(&mut w, self.after, &mut repaired);
        let mut outside = self.outside;
        let mut dropped_max_jobs = 0;
        if let (Some((from, to)), Some(origin)) = (self.deferred_days, self.min_submit) {
            let at = |day: f64| origin.saturating_add(time::from_secs_f64((day * SECONDS_PER_DAY).clamp(-1e15, 1e15)));
            let b = Bounds { from: from.map(at), to: to.map(at) };
            let before = w.jobs.len();
            w.jobs.retain(|j| b.contains(j.submit));
            outside += before - w.jobs.len();
        }
        let base = w.jobs.iter().map(|j| j.submit).min();
        if let Some(base) = base {
            for j in &mut w.jobs {
                j.submit -= base;
                if let Some(s) = &mut j.start {
                    *s -= base;
                }
            }
        }
        let deps_before: usize = w.jobs.iter().map(|j| j.after.len()).sum();
        w.renumber();
        let lost = deps_before - w.jobs.iter().map(|j| j.after.len()).sum::<usize>();
        if lost > 0 {
            *repaired.entry(DEP_OUTSIDE).or_insert(0) += lost;
        }
        if let Some(max) = self.opts.max_jobs {
            if w.jobs.len() > max {
                dropped_max_jobs = w.jobs.len() - max;
                w.jobs.truncate(max);
                let mut lost = 0;
                for j in &mut w.jobs {
                    let before = j.after.len();
                    j.after.retain(|d| d.job.idx() < max);
                    lost += before - j.after.len();
                }
                if lost > 0 {
                    *repaired.entry(DEP_OUTSIDE).or_insert(0) += lost;
                }
            }
        }
        if let Some(x) = self.opts.scale_load {
            if x != 1.0 {
                let mut starts = 0;
                for j in &mut w.jobs {
                    j.submit = (j.submit as f64 / x).round() as Time;
                    // When it really started no longer goes with the moved submit time.
                    starts += usize::from(j.start.take().is_some());
                }
                if starts > 0 {
                    *repaired.entry(START_SCALED).or_insert(0) += starts;
                }
            }
        }
        // Names in order of first use by the kept jobs in submit order, so that writing a
        // workload out and loading it back interns the same indices.
        compact_names(&mut w);
        LoadedTrace {
            workload: w,
            source: self.file,
            format: self.format,
            rows: self.rows,
            dropped_zero_duration: self.zero,
            dropped_outside_window: outside,
            dropped_never_ran: self.never_ran,
            dropped_outside_trace: self.censored,
            dropped_unknown_size: self.unknown_size,
            dropped_filtered: self.filtered,
            dropped_max_jobs,
            skipped_bad: self.skipped_bad,
            bad_reasons: self.bad_reasons,
            repaired: repaired.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            skipped_steps: self.steps,
            max_procs: self.max_procs,
            time_base: base,
            server: None,
            activity: None,
        }
    }
}

/// The repair counted for a start time before the job's submit time (clocks): read as the submit.
const START_BEFORE_SUBMIT: &str = "start time before the submit time: read as the submit time";

/// The repair counted for start times dropped because `scale_load` moved the submit times.
const START_SCALED: &str = "start time dropped: --scale-load moved the submit times away from when jobs ran";

/// The repair counted for a dependency on a job that was not loaded (filtered out, outside
/// the window, run time 0, or not in the trace): it is dropped, as if met.
const DEP_OUTSIDE: &str = "dependency on a job not loaded (dropped: taken as met)";

/// Turns dependencies by name into job ids (before renumbering, which carries them along).
/// A name that several kept jobs share means the first of them.
fn resolve_after(
    w: &mut Workload,
    after: Vec<(u32, Vec<(ordo_core::DepKind, String)>)>,
    repaired: &mut BTreeMap<&'static str, usize>,
) {
    if after.is_empty() {
        return;
    }
    let mut by_name: HashMap<&str, JobId> = HashMap::new();
    for j in &w.jobs {
        by_name.entry(j.name.as_str()).or_insert(j.id);
    }
    let mut resolved = Vec::with_capacity(after.len());
    let mut lost = 0;
    for (id, deps) in after {
        let mut v = Vec::with_capacity(deps.len());
        for (kind, name) in deps {
            match by_name.get(name.as_str()) {
                Some(&job) => v.push(ordo_core::Dep { kind, job }),
                _ => lost += 1,
            }
        }
        resolved.push((id, v));
    }
    for (id, v) in resolved {
        w.jobs[id as usize].after = v;
    }
    if lost > 0 {
        *repaired.entry(DEP_OUTSIDE).or_insert(0) += lost;
    }
}

fn intern(map: &mut HashMap<String, u32>, names: &mut Vec<String>, name: &str) -> u32 {
    if let Some(&i) = map.get(name) {
        return i;
    }
    let i = names.len() as u32;
    names.push(name.to_string());
    map.insert(name.to_string(), i);
    i
}

/// Drops user and group names no kept job uses, keeping first-use order.
fn compact_names(w: &mut Workload) {
    fn remap(names: &mut Vec<String>, ids: &mut [&mut u32]) {
        let mut new_of: Vec<Option<u32>> = vec![None; names.len()];
        let mut kept = Vec::new();
        for id in ids.iter_mut() {
            let old = **id as usize;
            let new = match new_of.get(old).copied().flatten() {
                Some(n) => n,
                None => {
                    let n = kept.len() as u32;
                    kept.push(names.get(old).cloned().unwrap_or_else(|| DEFAULT_NAME.to_string()));
                    if let Some(slot) = new_of.get_mut(old) {
                        *slot = Some(n);
                    }
                    n
                }
            };
            **id = new;
        }
        *names = kept;
    }
    let mut users: Vec<&mut u32> = Vec::new();
    let mut groups: Vec<&mut u32> = Vec::new();
    for j in &mut w.jobs {
        users.push(&mut j.user);
        groups.push(&mut j.group);
    }
    remap(&mut w.users, &mut users);
    remap(&mut w.groups, &mut groups);
}
