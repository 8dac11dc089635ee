//! `release`: hands the priorities ordo set back to Slurm's priority plugin, from one read of
//! the queue, in paced batches, so that Slurm's own order comes back.
//!
//! Handing a priority back (priority `INFINITE`, what `scontrol release` sends) makes the plugin
//! compute it again. Under `priority/multifactor` that is the job's factor priority, whatever
//! the order of the releases. Under `priority/basic` a job gets one less than the lowest
//! priority Slurm gave so far, so released jobs would queue behind every job submitted while
//! ordo drove; release therefore hands back, oldest submit first, every driven job and every
//! pending job submitted after the oldest of them whose priority is Slurm's own (not held,
//! niced or set by hand): the whole tail of the queue is numbered again in submit order, as
//! `priority/basic` had it. Where the plugin is unknown (slurmrestd), the basic way is used: on
//! multifactor it only recomputes factor priorities early.

use crate::audit::{self, AuditRecord};
use crate::client::Backend;
use crate::config::{SlurmConfig, SLURM_TOP_PRIORITY};
use crate::error::SlurmError;
use crate::job::JobState;
use crate::pace::Pace;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

/// What `release` did for each job ordo had set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Priority handed back to Slurm; the value Slurm computed afterwards, if read.
    Released(Option<u64>),
    /// Not pending any more (started or ended): nothing to hand back.
    NotPending,
    /// Someone changed the priority since ordo set it (now the first value, ordo set the
    /// second): left as it is.
    ChangedSince(u64, u64),
    /// Held (priority 0): left alone, since releasing would also release the hold.
    Held,
    /// Slurm refused.
    Failed(String),
}

/// What `release` did.
#[derive(Debug, Default)]
pub struct ReleaseReport {
    /// Each job ordo had set and not handed back, with what happened to it.
    pub jobs: Vec<(u64, ReleaseOutcome)>,
    /// Pending jobs ordo never set that were handed back too, to queue in submit order
    /// (`priority/basic`).
    pub renumbered: usize,
    /// The plugin's name, if known.
    pub plugin: Option<String>,
}

/// Hands back every priority the audit log says ordo set and did not yet release (see the
/// module documentation), from one read of the queue, in batches of at most `max_batch` at most
/// `max_rate` per second. Each release is logged; a second run finds nothing outstanding.
pub fn release(
    slurm: &dyn Backend,
    audit_log: &Path,
    dry_run: bool,
    max_rate: f64,
    max_batch: usize,
) -> Result<ReleaseReport, SlurmError> {
    let outstanding = audit::outstanding(audit_log)?;
    let mut report = ReleaseReport::default();
    if outstanding.is_empty() {
        return Ok(report);
    }
    let config: Option<SlurmConfig> = slurm.config()?;
    report.plugin = config.as_ref().map(|c| c.priority_type.clone());
    let multifactor = report.plugin.as_deref() == Some("priority/multifactor");
    let ceiling = config.as_ref().map_or(SLURM_TOP_PRIORITY, SlurmConfig::plugin_ceiling);
    let jobs = slurm.jobs()?;
    let by_id: HashMap<u64, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
    let mut ours: Vec<u64> = Vec::new();
    let mut sorted: Vec<(u64, u64)> = outstanding.into_iter().collect();
    sorted.sort_unstable();
    for (job, set) in sorted {
        let outcome = match by_id.get(&job).map(|&i| &jobs[i]) {
            None => ReleaseOutcome::NotPending,
            Some(j) if j.state != JobState::Pending => ReleaseOutcome::NotPending,
            Some(j) if j.priority == 0 || j.reason.contains("Held") => ReleaseOutcome::Held,
            Some(j) if j.priority != set => ReleaseOutcome::ChangedSince(j.priority, set),
            Some(_) => {
                ours.push(job);
                continue;
            }
        };
        report.jobs.push((job, outcome));
    }
    // The jobs to hand back, in submit order: ordo's, and under basic the tail of Slurm's own.
    let ours_set: HashSet<u64> = ours.iter().copied().collect();
    let oldest = ours.iter().map(|j| (jobs[by_id[j]].submit, *j)).min();
    let mut send: Vec<(i64, u64, bool)> = ours.iter().map(|j| (jobs[by_id[j]].submit, *j, true)).collect();
    if let (false, Some(oldest)) = (multifactor, oldest) {
        for j in &jobs {
            let own = j.state == JobState::Pending
                && j.priority > 0
                && j.priority <= ceiling
                && j.nice == 0
                && !j.reason.contains("Held")
                && !ours_set.contains(&j.id);
            if own && (j.submit, j.id) > oldest {
                send.push((j.submit, j.id, false));
            }
        }
    }
    send.sort_unstable();
    if dry_run {
        report.jobs.extend(ours.iter().map(|&j| (j, ReleaseOutcome::Released(None))));
        report.renumbered = send.iter().filter(|s| !s.2).count();
        return Ok(report);
    }
    let mut pace = Pace::new(max_rate);
    let mut done: HashSet<u64> = HashSet::new();
    let mut failed: HashMap<u64, String> = HashMap::new();
    let mut rest: &[(i64, u64, bool)] = &send;
    let mut stopped = None;
    while !rest.is_empty() {
        let n = pace.batch_size(max_batch).min(rest.len());
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        std::thread::sleep(pace.wait(Instant::now()));
        let sent = Instant::now();
        let ids: Vec<u64> = batch.iter().map(|b| b.1).collect();
        let b = slurm.reset_priorities(&ids);
        pace.record(b.done.len(), sent, b.elapsed);
        let ok: HashSet<u64> = b.done.iter().copied().collect();
        let recs: Vec<AuditRecord> = batch
            .iter()
            .filter(|x| ok.contains(&x.1))
            .map(|&(_, job, mine)| {
                let old = by_id.get(&job).map_or(0, |&i| jobs[i].priority);
                let why = if mine {
                    "ordo slurm release: priority handed back to Slurm".to_string()
                } else {
                    "ordo slurm release: not set by ordo; handed back to Slurm too so that it queues in submit order with the released jobs".to_string()
                };
                AuditRecord::now("release", job, old, None, why)
            })
            .collect();
        audit::append(audit_log, &recs)?;
        done.extend(b.done);
        failed.extend(b.failed);
        if let Some(e) = b.stopped {
            stopped = Some(e);
            break;
        }
    }
    // One read for the values Slurm computed.
    let after: HashMap<u64, u64> = match slurm.jobs() {
        Ok(js) => js.into_iter().map(|j| (j.id, j.priority)).collect(),
        Err(_) => HashMap::new(),
    };
    for job in ours {
        let outcome = if done.contains(&job) {
            ReleaseOutcome::Released(after.get(&job).copied())
        } else if let Some(e) = failed.get(&job) {
            ReleaseOutcome::Failed(e.clone())
        } else {
            ReleaseOutcome::Failed(stopped.as_ref().map_or("not sent".into(), |e| format!("not sent: {e}")))
        };
        report.jobs.push((job, outcome));
    }
    report.renumbered = send.iter().filter(|s| !s.2 && done.contains(&s.1)).count();
    if let Some(e) = stopped {
        if e.is_unreachable() {
            return Err(e);
        }
    }
    Ok(report)
}
