//! [`JobCache`]: the queue as slurmrestd last showed it, so that a pass can read only job
//! states (`GET /jobs/state`, ids and states: about 40 bytes a job) and fetch full records
//! (`GET /job/{id}`, about 6 KB a job) only for the jobs that are new or changed state.
//!
//! slurmrestd answers `GET /jobs` at about 1.3 ms per job the controller holds (Slurm 24.11,
//! measured: 45 s at 20,000 pending), so a pass that reads every record cannot be short at
//! site scale. What a state list does not show (a hold, a hand-set priority, a nice value, a
//! new time limit or dependency on a job whose state did not change) is caught two ways:
//! a record read before this pass is fetched again before ordo updates its job (see
//! [`JobCache::stale`]), and every record is read again by a full read at a set interval.
//! The state list names each job as `ID` or `ID_TASK` (Slurm 24.11), where `ID` is the
//! record's own job id: a pending array record is listed once per pending task, so a change
//! in that count (a task started and got a record of its own) fetches it again.
//!
//! Pure bookkeeping, no IO: [`crate::SlurmRest`] does the requests.

use crate::job::{JobState, SlurmJob};
use std::collections::HashMap;

/// One cached record and the read that fetched it.
#[derive(Debug, Clone)]
struct Cached {
    job: SlurmJob,
    read: u64,
}

/// The queue as last read, by job id, in the controller's order.
#[derive(Debug, Default)]
pub struct JobCache {
    jobs: HashMap<u64, Cached>,
    order: Vec<u64>,
    /// Number of the current read (each read, full or by states, counts one).
    read: u64,
    /// Whether a full read has filled the cache (an incremental read needs one first).
    filled: bool,
}

/// Kinds of states a job in the state list may be in, as the driver cares.
fn same_kind(a: &JobState, b: &JobState) -> bool {
    matches!((a, b), (JobState::Pending, JobState::Pending) | (JobState::Running, JobState::Running))
}

impl JobCache {
    /// An empty cache: the first read must be a full one.
    pub fn new() -> JobCache {
        JobCache::default()
    }

    /// True once a full read has filled it.
    pub fn filled(&self) -> bool {
        self.filled
    }

    /// Records after a full read: every job, all fresh.
    pub fn replace_all(&mut self, jobs: &[SlurmJob]) {
        self.read += 1;
        self.jobs.clear();
        self.order.clear();
        for j in jobs.iter().filter(|j| is_live(&j.state)) {
            self.order.push(j.id);
            self.jobs.insert(j.id, Cached { job: j.clone(), read: self.read });
        }
        self.filled = true;
    }

    /// Starts a read by states: the ids among `states` (the controller's pending and running
    /// jobs, in its order; a pending array record once per pending task) whose full record
    /// must be fetched: new ones, ones whose state changed, and array records whose number of
    /// pending tasks changed.
    pub fn to_fetch(&self, states: &[(u64, JobState)]) -> Vec<u64> {
        group(states)
            .into_iter()
            .filter(|(id, s, n)| match self.jobs.get(id) {
                None => true,
                Some(c) => {
                    !same_kind(&c.job.state, s)
                        || (c.job.array.as_ref().is_some_and(|a| a.task.is_none()) && c.job.tasks() != *n)
                }
            })
            .map(|(id, _, _)| id)
            .collect()
    }

    /// Ends a read by states: `fetched` holds the records fetched for [`JobCache::to_fetch`]'s
    /// ids (a job that ended meanwhile is simply missing); jobs not in `states` are dropped.
    /// Returns the queue in the controller's order.
    pub fn merge(&mut self, states: &[(u64, JobState)], fetched: Vec<SlurmJob>) -> Vec<SlurmJob> {
        self.read += 1;
        let read = self.read;
        let mut fetched: HashMap<u64, SlurmJob> = fetched.into_iter().map(|j| (j.id, j)).collect();
        let grouped = group(states);
        let mut jobs = HashMap::with_capacity(grouped.len());
        let mut order = Vec::with_capacity(grouped.len());
        for (id, state, _) in grouped {
            let entry = match fetched.remove(&id) {
                Some(job) => Cached { job, read },
                None => match self.jobs.remove(&id) {
                    Some(c) if same_kind(&c.job.state, &state) => c,
                    // Changed state and could not be fetched: it ended meanwhile.
                    _ => continue,
                },
            };
            if !is_live(&entry.job.state) {
                continue;
            }
            order.push(id);
            jobs.insert(id, entry);
        }
        self.jobs = jobs;
        self.order = order;
        self.jobs()
    }

    /// The cached queue, in the controller's order.
    pub fn jobs(&self) -> Vec<SlurmJob> {
        self.order.iter().filter_map(|id| self.jobs.get(id)).map(|c| c.job.clone()).collect()
    }

    /// Of `ids`, those whose record was fetched before the current read: to fetch again
    /// before ordo changes the job, in case someone held it, set its priority or nice value.
    pub fn stale(&self, ids: &[u64]) -> Vec<u64> {
        ids.iter().copied().filter(|id| self.jobs.get(id).is_some_and(|c| c.read < self.read)).collect()
    }

    /// A record fetched again within the current read (see [`JobCache::stale`]).
    pub fn refresh(&mut self, job: SlurmJob) {
        let read = self.read;
        if is_live(&job.state) {
            if let Some(c) = self.jobs.get_mut(&job.id) {
                *c = Cached { job, read };
            }
        } else {
            self.forget(job.id);
        }
    }

    /// Slurm confirmed the priority ordo set.
    pub fn set_priority(&mut self, id: u64, priority: u64) {
        if let Some(c) = self.jobs.get_mut(&id) {
            c.job.priority = priority;
        }
    }

    /// The record is no longer known (an update whose fate is unknown, one refused, a
    /// priority handed back to Slurm): the next read fetches it again.
    pub fn forget(&mut self, id: u64) {
        if self.jobs.remove(&id).is_some() {
            self.order.retain(|&j| j != id);
        }
    }
}

/// The live entries of a state list by job id, in first-seen order, with how many times each
/// id is listed (an array's pending record once per pending task).
fn group(states: &[(u64, JobState)]) -> Vec<(u64, JobState, u64)> {
    let mut at: HashMap<u64, usize> = HashMap::with_capacity(states.len());
    let mut out: Vec<(u64, JobState, u64)> = Vec::with_capacity(states.len());
    for (id, s) in states.iter().filter(|(_, s)| is_live(s)) {
        match at.get(id) {
            Some(&i) => out[i].2 += 1,
            None => {
                at.insert(*id, out.len());
                out.push((*id, s.clone(), 1));
            }
        }
    }
    out
}

/// Pending or running: the jobs the driver reads.
fn is_live(s: &JobState) -> bool {
    matches!(s, JobState::Pending | JobState::Running)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;
    use crate::job::ArrayPart;

    fn job(id: u64, state: JobState, priority: u64) -> SlurmJob {
        SlurmJob {
            id,
            state,
            priority,
            nice: 0,
            time_limit_min: Some(10),
            submit: 0,
            start: 0,
            user: "u".into(),
            account: "a".into(),
            partitions: vec!["gpu".into()],
            gpus: 1,
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

    const P: JobState = JobState::Pending;
    const R: JobState = JobState::Running;

    #[test]
    fn fetches_only_new_and_changed_jobs_and_drops_ended_ones() {
        let mut c = JobCache::new();
        assert!(!c.filled());
        c.replace_all(&[job(1, R, 0), job(2, P, 10), job(3, P, 20), job(4, JobState::Other("COMPLETED".into()), 0)]);
        assert_eq!(c.jobs().iter().map(|j| j.id).collect::<Vec<_>>(), [1, 2, 3]);
        // 1 ended, 2 started, 3 unchanged, 5 new.
        let states = [(2, R), (3, P), (5, P), (6, JobState::Other("CANCELLED".into()))];
        assert_eq!(c.to_fetch(&states), [2, 5]);
        let got = c.merge(&states, vec![job(2, R, 10), job(5, P, 1)]);
        assert_eq!(got.iter().map(|j| (j.id, j.state.clone())).collect::<Vec<_>>(), [(2, R), (3, P), (5, P)]);
        // 3 was read before this read: stale; 2 and 5 fresh.
        assert_eq!(c.stale(&[2, 3, 5, 9]), [3]);
        let mut again = job(3, P, 0);
        again.reason = "JobHeldUser".into();
        c.refresh(again);
        assert_eq!(c.stale(&[3]), Vec::<u64>::new());
        assert_eq!(c.jobs()[1].reason, "JobHeldUser");
    }

    #[test]
    fn a_job_whose_new_record_is_missing_is_dropped_and_arrays_are_fetched_when_tasks_start() {
        let mut c = JobCache::new();
        let mut arr = job(7, P, 5);
        arr.array = Some(ArrayPart { array_job_id: 7, task: None, tasks: 3, throttle: None });
        c.replace_all(&[job(1, P, 3), arr]);
        // The array's three pending tasks, listed one by one: nothing to fetch.
        assert_eq!(c.to_fetch(&[(1, P), (7, P), (7, P), (7, P)]), Vec::<u64>::new());
        // 1 started; task 0 of 7 started as job 9 (a record of its own).
        let states = [(1, R), (9, R), (7, P), (7, P)];
        assert_eq!(c.to_fetch(&states), [1, 9, 7]);
        // 1 ended before its record could be fetched.
        let mut arr = job(7, P, 5);
        arr.array = Some(ArrayPart { array_job_id: 7, task: None, tasks: 2, throttle: None });
        let mut task = job(9, R, 5);
        task.array = Some(ArrayPart { array_job_id: 7, task: Some(0), tasks: 1, throttle: None });
        let got = c.merge(&states, vec![arr, task]);
        assert_eq!(got.iter().map(|j| (j.id, j.tasks())).collect::<Vec<_>>(), [(9, 1), (7, 2)]);
        assert_eq!(c.to_fetch(&states[1..]), Vec::<u64>::new());
    }

    #[test]
    fn updates_are_remembered_and_unknown_ones_forgotten() {
        let mut c = JobCache::new();
        c.replace_all(&[job(1, P, 3), job(2, P, 4)]);
        c.set_priority(1, 99);
        c.forget(2);
        let states = [(1, P), (2, P)];
        assert_eq!(c.to_fetch(&states), [2]);
        let got = c.merge(&states, vec![job(2, P, 77)]);
        assert_eq!(got.iter().map(|j| j.priority).collect::<Vec<_>>(), [99, 77]);
    }
}
