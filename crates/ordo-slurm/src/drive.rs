//! The driver: each pass reads Slurm, computes ordo's order, and sets the few priorities that
//! make Slurm follow it, paced, logging every change; it leaves alone what people set by hand.
//!
//! State kept between passes: the priority ordo last set on each job and the jobs already
//! reported as left alone (both read back from the audit log at start, so a restarted driver
//! knows its own values and does not repeat itself), updates whose fate an outage hid, and the
//! pace.

use crate::audit::{self, AuditRecord};
use crate::client::Backend;
use crate::config::{priority_range, PriorityRange, SlurmConfig};
use crate::error::SlurmError;
use crate::job::{JobState, SlurmJob};
use crate::order::{intended_order, Intended, PlanSpec, Skip};
use crate::pace::Pace;
use crate::priorities::{assign, Slot};
use crate::topology::SlurmTopology;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the driver takes the cluster's topology from (read once, at the first pass that
/// reaches Slurm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyFrom {
    /// Nowhere: gangs are placed without a topology and `--switches` is not modelled.
    Off,
    /// The controller's ([`Backend::topology`]), when it has one.
    #[default]
    Slurm,
    /// The controller's, which must have one (else the pass fails, saying so).
    SlurmRequired,
    /// `plan.topology` as given (a `topology.conf` file).
    Given,
}

/// Settings of the driver.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// What to plan for: policy, placement, partitions, a cluster override. `model_memory` is
    /// taken from the controller's configuration where it can be read.
    pub plan: PlanSpec,
    /// The highest priority Slurm itself gives a job; ordo's are above it. `None`: from the
    /// controller's configuration (see [`crate::config::priority_range`]).
    pub priority_floor: Option<u64>,
    /// The highest priority ordo gives. `None`: Slurm's highest less 1,000.
    pub priority_top: Option<u64>,
    /// Where the topology comes from (see [`PlanSpec::topology`]).
    pub topology: TopologyFrom,
    /// Compute and report, change nothing.
    pub dry_run: bool,
    /// The JSON Lines audit log.
    pub audit_log: PathBuf,
    /// The most priority updates per second.
    pub max_rate: f64,
    /// The most updates sent in one batch.
    pub max_batch: usize,
}

/// What one pass did.
#[derive(Debug)]
pub struct PassReport {
    /// The order computed.
    pub intended: Intended,
    /// Changes made (with `dry_run`, that would be made): `(job, old, new)`, in order.
    pub changes: Vec<(u64, u64, u64)>,
    /// Changes not made: Slurm refused them because the job ended, started or was held
    /// meanwhile, or the job's record, read again just before the update, showed such a change
    /// (or a priority or nice value someone set) since the pass's read.
    pub failed: Vec<(u64, String)>,
    /// Jobs at the end of the order beyond ordo's range (more jobs than values); they keep
    /// Slurm's priorities.
    pub beyond_range: usize,
    /// Reading the nodes and jobs.
    pub read_time: Duration,
    /// How the jobs were read, where the backend says (slurmrestd: a full read, or job states
    /// and the records of new and changed jobs).
    pub read_note: Option<String>,
    /// Computing the order and the priorities.
    pub plan_time: Duration,
    /// Sending the updates (waits for the pace included).
    pub update_time: Duration,
    /// The controller's median time per update in this pass, if any was sent.
    pub latency: Option<Duration>,
    /// The update rate allowed at the end of the pass.
    pub rate: f64,
    /// Set when the controller stopped answering during the updates: the pass stopped there.
    pub outage: Option<SlurmError>,
}

/// The driver and its state between passes.
pub struct Driver<'a> {
    slurm: &'a dyn Backend,
    cfg: DriveConfig,
    config: Option<Option<SlurmConfig>>,
    topology_read: bool,
    range: Option<PriorityRange>,
    ours: HashMap<u64, u64>,
    noted: HashMap<u64, String>,
    unconfirmed: HashMap<u64, AuditRecord>,
    pace: Pace,
}

impl std::fmt::Debug for Driver<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("slurm", &self.slurm.describe()).field("range", &self.range).finish()
    }
}

impl<'a> Driver<'a> {
    /// A driver over `slurm`; reads the priorities it set before from the audit log.
    pub fn new(slurm: &'a dyn Backend, cfg: DriveConfig) -> Result<Driver<'a>, SlurmError> {
        check_policy(&cfg.plan.policy)?;
        // A restarted driver knows its own priorities, and what it already said it leaves alone.
        let audit::LogState { ours, left_alone: noted } = audit::log_state(&cfg.audit_log)?;
        let pace = Pace::new(cfg.max_rate);
        Ok(Driver {
            slurm,
            cfg,
            config: None,
            topology_read: false,
            range: None,
            ours,
            noted,
            unconfirmed: HashMap::new(),
            pace,
        })
    }

    /// The range of priorities in use (known after the first pass that reached Slurm).
    pub fn range(&self) -> Option<PriorityRange> {
        self.range
    }

    /// The controller's configuration, if read.
    pub fn controller_config(&self) -> Option<&SlurmConfig> {
        self.config.as_ref().and_then(Option::as_ref)
    }

    /// The topology gangs are placed by, if any (known after the first pass that reached Slurm,
    /// or given).
    pub fn topology(&self) -> Option<&SlurmTopology> {
        self.cfg.plan.topology.as_deref()
    }

    /// Reads the controller's topology the first time, as [`DriveConfig::topology`] says.
    fn ensure_topology(&mut self) -> Result<(), SlurmError> {
        if self.topology_read {
            return Ok(());
        }
        match self.cfg.topology {
            TopologyFrom::Off => self.cfg.plan.topology = None,
            TopologyFrom::Given => {}
            TopologyFrom::Slurm | TopologyFrom::SlurmRequired => {
                let t = self.slurm.topology()?;
                if t.is_none() && self.cfg.topology == TopologyFrom::SlurmRequired {
                    return Err(SlurmError::Policy(format!(
                        "placement by topology: {} reports no topology (`scontrol show topology` prints nothing \
                         without TopologyPlugin=topology/tree or topology/block; slurmrestd has no topology \
                         endpoint); give the cluster's topology.conf with --topology FILE",
                        self.slurm.describe()
                    )));
                }
                self.cfg.plan.topology = t.map(Arc::new);
            }
        }
        self.topology_read = true;
        Ok(())
    }

    /// The range, reading the controller's configuration the first time.
    fn ensure_range(&mut self) -> Result<PriorityRange, SlurmError> {
        if self.config.is_none() {
            self.config = Some(self.slurm.config()?);
        }
        if let Some(r) = self.range {
            return Ok(r);
        }
        let config = self.config.as_ref().and_then(Option::as_ref);
        let r = priority_range(config, self.cfg.priority_floor, self.cfg.priority_top).map_err(SlurmError::Policy)?;
        self.range = Some(r);
        Ok(r)
    }

    /// One pass: read nodes and jobs, compute the order and the priorities, and (unless
    /// `dry_run`) send the changes in paced batches, logging each confirmed change. A read
    /// error aborts the pass having changed nothing; an outage during the updates stops it at
    /// once (reported in [`PassReport::outage`]).
    pub fn pass(&mut self) -> Result<PassReport, SlurmError> {
        let t0 = Instant::now();
        let range = self.ensure_range()?;
        self.ensure_topology()?;
        let nodes = if self.cfg.plan.cluster.is_some() { Vec::new() } else { self.slurm.nodes()? };
        let jobs = self.slurm.jobs()?;
        let read_time = t0.elapsed();
        let read_note = self.slurm.read_note();
        let t1 = Instant::now();
        let by_id: HashMap<u64, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
        let mut log: Vec<AuditRecord> = Vec::new();
        // Updates an outage hid: the priorities now tell whether they were applied.
        for (job, rec) in std::mem::take(&mut self.unconfirmed) {
            if let (Some(p), Some(&i)) = (rec.new_priority, by_id.get(&job)) {
                if jobs[i].priority == p {
                    self.ours.insert(job, p);
                    log.push(AuditRecord {
                        reason: format!("{} (confirmed after the controller came back)", rec.reason),
                        ..rec
                    });
                }
            }
        }
        // Forget jobs that are gone or started: their priority no longer matters.
        self.ours.retain(|j, _| by_id.get(j).is_some_and(|&i| jobs[i].state == JobState::Pending));
        self.noted.retain(|j, _| by_id.contains_key(j));
        let skip = self.left_alone(&jobs, range);
        let mut plan = self.cfg.plan.clone();
        if let Some(c) = self.controller_config() {
            plan.model_memory = c.memory_consumable;
        }
        let now = audit::unix_now();
        let mut intended = intended_order(&jobs, &nodes, &plan, now, &skip);
        let policy = plan.policy.to_string();
        for (job, why) in &skip {
            if self.noted.get(job) != Some(why) {
                self.noted.insert(*job, why.clone());
                let old = by_id.get(job).map_or(0, |&i| jobs[i].priority);
                log.push(AuditRecord {
                    policy: policy.clone(),
                    ..AuditRecord::now("left-alone", *job, old, None, why.clone())
                });
            }
        }
        // Only as many jobs as the range has values; the rest keep Slurm's order below them.
        let fit = (range.len().min(usize::MAX as u64)) as usize;
        let beyond_range = intended.order.len().saturating_sub(fit);
        if beyond_range > 0 {
            intended.warnings.push(format!(
                "{} pending jobs, {} values in ordo's priority range ({range_floor}, {range_top}]: the last {beyond_range} keep Slurm's priorities, below the ranked ones",
                intended.order.len(),
                fit,
                range_floor = range.floor,
                range_top = range.top,
            ));
        }
        let ranked = &intended.order[..intended.order.len() - beyond_range];
        let slots: Vec<Slot> = ranked
            .iter()
            .map(|r| Slot { current: r.priority, ours: self.ours.get(&r.job) == Some(&r.priority) })
            .collect();
        let a = assign(&slots, range);
        let mut changes: Vec<(u64, u64, u64)> =
            a.changes.iter().map(|&(i, p)| (ranked[i].job, ranked[i].priority, p)).collect();
        let plan_time = t1.elapsed();
        let t2 = Instant::now();
        let mut report = PassReport {
            changes: Vec::new(),
            failed: Vec::new(),
            beyond_range,
            read_time,
            read_note,
            plan_time,
            update_time: Duration::ZERO,
            latency: None,
            rate: self.pace.rate,
            outage: None,
            intended,
        };
        if self.cfg.dry_run {
            report.changes = changes;
            return Ok(report);
        }
        audit::append(&self.cfg.audit_log, &log)?;
        // Records older than this read (slurmrestd between full reads) are read again first.
        let ids: Vec<u64> = changes.iter().map(|c| c.0).collect();
        let fresh = match self.slurm.recheck(&ids) {
            Ok(f) => f,
            Err(e) if e.is_unreachable() => {
                report.outage = Some(e);
                report.update_time = t2.elapsed();
                return Ok(report);
            }
            Err(e) => return Err(e),
        };
        let mut changed_since: HashMap<u64, String> = HashMap::new();
        for (job, now) in fresh {
            if let Some(why) = by_id.get(&job).and_then(|&i| changed_since_read(&jobs[i], now.as_ref())) {
                changed_since.insert(job, why);
            }
        }
        changes.retain(|c| !changed_since.contains_key(&c.0));
        let intended = &report.intended;
        let position: HashMap<u64, usize> = intended.order.iter().map(|r| (r.job, r.position)).collect();
        let mut latencies: Vec<Duration> = Vec::new();
        let (mut applied, mut failed, mut outage) = (Vec::new(), Vec::new(), None);
        let mut rest: &[(u64, u64, u64)] = &changes;
        while !rest.is_empty() {
            let n = self.pace.batch_size(self.cfg.max_batch).min(rest.len());
            let (batch, tail) = rest.split_at(n);
            rest = tail;
            std::thread::sleep(self.pace.wait(Instant::now()));
            let sent = Instant::now();
            let send: Vec<(u64, u64)> = batch.iter().map(|&(j, _, p)| (j, p)).collect();
            let b = self.slurm.set_priorities(&send);
            self.pace.record(b.done.len() + b.failed.len(), sent, b.elapsed);
            if !batch.is_empty() {
                latencies.push(b.elapsed / batch.len() as u32);
            }
            let rec = |&(job, old, new): &(u64, u64, u64)| {
                let r = position.get(&job).and_then(|&p| intended.order.get(p));
                AuditRecord {
                    position: r.map(|r| r.position),
                    reason: r.map(|r| r.reason.clone()).unwrap_or_default(),
                    policy: policy.clone(),
                    ..AuditRecord::now("set", job, old, Some(new), String::new())
                }
            };
            let mut done = Vec::new();
            for c in batch {
                if b.done.contains(&c.0) {
                    self.ours.insert(c.0, c.2);
                    done.push(rec(c));
                    applied.push(*c);
                } else if b.unknown.contains(&c.0) {
                    self.unconfirmed.insert(c.0, rec(c));
                }
            }
            audit::append(&self.cfg.audit_log, &done)?;
            failed.extend(b.failed);
            if let Some(e) = b.stopped {
                if e.is_unreachable() {
                    outage = Some(e);
                    break;
                }
                return Err(e);
            }
        }
        report.changes = applied;
        report.failed = changed_since.into_iter().collect();
        report.failed.sort_unstable();
        report.failed.extend(failed);
        report.outage = outage;
        report.update_time = t2.elapsed();
        latencies.sort_unstable();
        report.latency = latencies.get(latencies.len() / 2).copied();
        report.rate = self.pace.rate;
        Ok(report)
    }

    /// Pending jobs ordo will not touch because people set them: a priority changed since ordo
    /// set it, a priority set by hand above what Slurm gives on its own, a nice value.
    fn left_alone(&self, jobs: &[SlurmJob], range: PriorityRange) -> Skip {
        let mut skip = Skip::new();
        for j in jobs.iter().filter(|j| j.state == JobState::Pending && j.priority > 0) {
            let why = match self.ours.get(&j.id) {
                Some(&ours) if ours != j.priority => Some(format!(
                    "priority changed by someone else since ordo set {ours} (now {}): left as set",
                    j.priority
                )),
                Some(_) => None,
                None if j.priority > range.floor => Some(format!(
                    "priority {} set by hand (above the {} Slurm gives on its own): left as set",
                    j.priority, range.floor
                )),
                None if j.nice != 0 => Some(format!(
                    "nice {} set by its user: left to Slurm (setting a priority would reset the nice value)",
                    j.nice
                )),
                None => None,
            };
            if let Some(w) = why {
                skip.insert(j.id, w);
            }
        }
        skip
    }
}

/// Why a job's update is dropped because its record, read again just before the update,
/// differs from the one the pass planned with in what decides whether ordo may change it.
fn changed_since_read(read: &SlurmJob, now: Option<&SlurmJob>) -> Option<String> {
    let Some(now) = now else {
        return Some("ended since the read: not changed".into());
    };
    if now.state != JobState::Pending {
        return Some("started or ended since the read: not changed".into());
    }
    if now.orderable() != read.orderable() {
        return Some(format!(
            "held or waiting since the read (priority {}, {}): not changed",
            now.priority, now.reason
        ));
    }
    if now.priority != read.priority {
        return Some(format!("priority changed since the read ({} -> {}): not changed", read.priority, now.priority));
    }
    if now.nice != read.nice {
        return Some(format!("nice set since the read ({}): not changed", now.nice));
    }
    None
}

/// Refuses preemptive policies: the driver only sets priorities of pending jobs, it never stops
/// a running one.
pub fn check_policy(policy: &ordo_core::PolicySpec) -> Result<(), SlurmError> {
    if policy.order.preemptive() {
        return Err(SlurmError::Policy(format!(
            "policy `{policy}` preempts running jobs, and `ordo slurm drive` only sets the priorities of pending \
             jobs; use a non-preemptive order (fifo, sjf, sgf, fair, priority[:...], qssf, or rr without a quantum), \
             optionally with +easy or +conservative and +maxwait=D, e.g. `priority+easy` or `sjf+easy`"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;
    use crate::client::Batch;
    use crate::job::SlurmNode;
    use std::cell::RefCell;

    /// A Slurm whose reads show `view` (what a read by states still holds) while its jobs are
    /// really `truth` (what a job's record, read again, shows).
    struct Stale {
        view: Vec<SlurmJob>,
        truth: Vec<SlurmJob>,
        set: RefCell<Vec<(u64, u64)>>,
        rechecked: RefCell<Vec<u64>>,
    }

    impl Backend for Stale {
        fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
            Ok(Vec::new())
        }
        fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
            Ok(self.view.clone())
        }
        fn config(&self) -> Result<Option<SlurmConfig>, SlurmError> {
            Ok(None)
        }
        fn set_priorities(&self, changes: &[(u64, u64)]) -> Batch {
            self.set.borrow_mut().extend_from_slice(changes);
            Batch { done: changes.iter().map(|c| c.0).collect(), ..Batch::default() }
        }
        fn reset_priorities(&self, _: &[u64]) -> Batch {
            Batch::default()
        }
        fn recheck(&self, jobs: &[u64]) -> Result<Vec<(u64, Option<SlurmJob>)>, SlurmError> {
            self.rechecked.borrow_mut().extend_from_slice(jobs);
            Ok(jobs.iter().map(|id| (*id, self.truth.iter().find(|j| j.id == *id).cloned())).collect())
        }
        fn describe(&self) -> String {
            "stale".into()
        }
    }

    fn pending(id: u64, limit: u64) -> SlurmJob {
        SlurmJob {
            id,
            state: JobState::Pending,
            priority: 1000 - id,
            nice: 0,
            time_limit_min: Some(limit),
            submit: id as i64,
            start: 0,
            user: "u".into(),
            account: "a".into(),
            partitions: vec!["gpu".into()],
            gpus: 4,
            cpus: 1,
            mem_mib: 0,
            alloc: Vec::new(),
            reason: "Priority".into(),
            array: None,
            gpu_types: Vec::new(),
            constraint: None,
            switches: 0,
            switch_wait_s: 0,
        }
    }

    /// A job held, re-prioritised, niced or ended since the read that planned the pass is not
    /// changed; the others are.
    #[test]
    fn jobs_changed_since_the_read_are_not_updated() {
        let view: Vec<SlurmJob> = (1..=5).map(|id| pending(id, 10 - id)).collect();
        let mut truth = view.clone();
        truth[0].priority = 0;
        truth[0].reason = "JobHeldUser".into();
        truth[1].priority = 7;
        truth[2].nice = 50;
        truth.remove(3);
        let slurm = Stale { view, truth, set: RefCell::default(), rechecked: RefCell::default() };
        let log = std::env::temp_dir().join(format!("ordo-drive-stale-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let cfg = DriveConfig {
            plan: PlanSpec {
                policy: "sjf".parse().unwrap(),
                placement: ordo_core::Placement::Consolidated,
                partitions: None,
                model_memory: false,
                cluster: Some(ordo_core::ClusterSpec::parse("1x4").unwrap()),
                topology: None,
            },
            topology: TopologyFrom::Off,
            priority_floor: None,
            priority_top: None,
            dry_run: false,
            audit_log: log.clone(),
            max_rate: 1e6,
            max_batch: 100,
        };
        let mut d = Driver::new(&slurm, cfg).unwrap();
        let r = d.pass().unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(slurm.rechecked.borrow().len(), 5, "every job to change is read again first");
        assert_eq!(slurm.set.borrow().iter().map(|c| c.0).collect::<Vec<_>>(), [5], "only the unchanged job");
        assert_eq!(r.changes.iter().map(|c| c.0).collect::<Vec<_>>(), [5]);
        let why: HashMap<u64, &str> = r.failed.iter().map(|(j, w)| (*j, w.as_str())).collect();
        assert!(why[&1].contains("held"), "{why:?}");
        assert!(why[&2].contains("priority changed since the read (998 -> 7)"), "{why:?}");
        assert!(why[&3].contains("nice"), "{why:?}");
        assert!(why[&4].contains("ended"), "{why:?}");
    }
}
