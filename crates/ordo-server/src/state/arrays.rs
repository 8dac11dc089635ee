//! Job arrays in the server (`ordo submit --array 0-999%50`): each element is a job of its own
//! (`array_id`, `array_index` in the jobs table), the array itself a row of the `arrays` table
//! (its spec, element count and `%N`). The `%N` limit is the core's (`set_array_limit`, with
//! each element's `JobReq::array`), set again at every rebuild from the arrays that still have
//! elements, so it survives restarts.

use super::*;
use crate::array::{ArraySpec, JobRef};

/// An array with elements that have not ended.
#[derive(Debug, Clone)]
pub(super) struct ArrayMeta {
    /// Its spec in canonical form (`0-999%50`).
    pub(super) spec: String,
    /// How many elements it has.
    pub(super) elements: u32,
    /// The most elements running at once.
    pub(super) max_running: Option<u32>,
}

/// What a user's reference names, resolved.
pub(super) enum Target {
    /// One job (an element named `123_7`, or a job that is not an array).
    One(JobNo),
    /// An array (by its id) and its elements that have not ended, by id.
    Array(JobNo, Vec<JobNo>),
}

impl Core {
    /// Loads the arrays that have elements not yet ended.
    pub(super) fn load_arrays(&mut self) -> Result<(), ApiError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, spec, elements, max_running FROM arrays WHERE id IN
                 (SELECT DISTINCT array_id FROM jobs WHERE array_id IS NOT NULL
                  AND state IN ('pending', 'starting', 'running', 'preempting'))",
            )
            .ctx("load arrays")?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as JobNo,
                    ArrayMeta { spec: r.get(1)?, elements: r.get(2)?, max_running: r.get(3)? },
                ))
            })
            .ctx("load arrays")?
            .collect::<Result<Vec<_>, _>>()
            .ctx("load arrays")?;
        drop(st);
        self.arrays = rows.into_iter().collect();
        Ok(())
    }

    /// Gives a new scheduler the `%N` limits of the arrays that still have elements (and
    /// forgets those that have none).
    pub(super) fn set_array_limits(&mut self, sched: &mut Scheduler) {
        let live: BTreeSet<JobNo> =
            self.pending.values().chain(self.active.values()).filter_map(|j| j.array.map(|a| a.id)).collect();
        self.arrays.retain(|id, _| live.contains(id));
        for (&id, a) in &self.arrays {
            if a.max_running.is_some() {
                sched.set_array_limit(id as u32, a.max_running);
            }
        }
    }

    /// Records a new array (its rows are in the database already) and its limit.
    pub(super) fn add_array(&mut self, id: JobNo, spec: &ArraySpec) {
        self.arrays.insert(
            id,
            ArrayMeta { spec: spec.canonical(), elements: spec.indices.len() as u32, max_running: spec.max_running },
        );
        if spec.max_running.is_some() {
            self.sched.set_array_limit(id as u32, spec.max_running);
        }
    }

    /// How many elements an array has (for `ORDO_ARRAY_TASK_COUNT`).
    pub(super) fn array_count(&self, id: JobNo) -> Option<u32> {
        self.arrays.get(&id).map(|a| a.elements)
    }

    /// The arrays of the jobs listed, for a queue listing.
    pub(super) fn array_summaries(&self, jobs: &[JobInfo]) -> Vec<ArraySummary> {
        let ids: BTreeSet<JobNo> = jobs.iter().filter_map(|j| j.array.map(|a| a.id)).collect();
        ids.into_iter()
            .filter_map(|id| {
                self.arrays.get(&id).map(|a| ArraySummary {
                    id,
                    spec: a.spec.clone(),
                    elements: a.elements,
                    max_running: a.max_running,
                })
            })
            .collect()
    }

    /// What a reference names: `123_7` the element of index 7 of array 123 (404 when there is
    /// none); `123` the whole array when 123 is an array's id (409 when all its elements have
    /// ended), else job 123.
    pub(super) fn resolve(&self, r: JobRef) -> Result<Target, ApiError> {
        let named = match r {
            JobRef::Element(a, _) | JobRef::Job(a) => a,
        };
        if self.ingesting_holds(named) {
            return Err(Self::still_ingesting(named));
        }
        match r {
            JobRef::Element(a, i) => self.element(a, i).map(Target::One),
            JobRef::Job(id) => {
                if !self.arrays.contains_key(&id) && !self.is_array(id)? {
                    return Ok(Target::One(id));
                }
                let mut ids: Vec<JobNo> = self
                    .pending
                    .values()
                    .chain(self.active.values())
                    .filter(|j| j.array.is_some_and(|m| m.id == id))
                    .map(|j| j.id)
                    .collect();
                if ids.is_empty() {
                    return Err(ApiError::Conflict(format!("array {id} already ended (every element of it)")));
                }
                ids.sort_unstable();
                Ok(Target::Array(id, ids))
            }
        }
    }

    /// Whether `id` is an array's id (in the database: also arrays whose elements all ended).
    pub(super) fn is_array(&self, id: JobNo) -> Result<bool, ApiError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM arrays WHERE id = ?1", params![id as i64], |r| r.get(0))
            .ctx("read arrays")?;
        Ok(n > 0)
    }

    /// The job id of element `index` of array `array`.
    fn element(&self, array: JobNo, index: u32) -> Result<JobNo, ApiError> {
        let id: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM jobs WHERE array_id = ?1 AND array_index = ?2",
                params![array as i64, index],
                |r| r.get(0),
            )
            .optional()
            .ctx("find array element")?;
        match id {
            Some(id) => Ok(id as JobNo),
            None if self.is_array(array)? => Err(ApiError::NotFound(format!("array {array} has no element {index}"))),
            None => Err(ApiError::NotFound(format!("no array {array}"))),
        }
    }

    /// One job, or one element (`123_7`), with why it waits when it does.
    pub fn job_ref(&self, r: JobRef, now: i64) -> Result<JobInfo, ApiError> {
        match r {
            JobRef::Job(id) => self.job(id, now),
            JobRef::Element(a, i) => self.job(self.element(a, i)?, now),
        }
    }
}
