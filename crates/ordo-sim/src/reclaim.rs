//! What a reclaim rule (an `ordo server`'s `[reclaim]`: cancel a job that stays allocated but
//! idle) would have given back on a history with measured GPU activity. The history records each
//! job's mean busy % over its run, not when it went idle, so a job whose mean stayed under the
//! threshold is taken as idle from its start: the rule cancels it `after` its start (the rule's
//! `idle_after` plus its grace). Its run time is cut to that, and the rest of its GPU-time is
//! given back to the jobs behind it; replaying the cut workload shows the waits it would have cut.

use ordo_core::{Time, Workload};
use serde::Serialize;

/// What the rule would have done to a workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReclaimSummary {
    /// The rule: cancelled this long after its start (s) ...
    pub after_s: f64,
    /// ... when its measured mean busy % is under this.
    pub threshold_pct: f64,
    /// Jobs with measured activity.
    pub jobs_measured: usize,
    /// Jobs under the threshold (idle by the measure).
    pub jobs_idle: usize,
    /// Of those, jobs that ran longer than `after`: the ones the rule would have cancelled.
    pub jobs_reclaimed: usize,
    /// GPU-hours those jobs held after `after`: what the rule gives back.
    pub gpu_hours_returned: f64,
    /// GPU-hours of all the jobs, for scale.
    pub gpu_hours_total: f64,
}

/// The workload as it would have run under the rule, and what the rule did. `busy[i]` is job
/// `i`'s measured mean busy % (`None`: not measured, never reclaimed).
pub fn reclaim(w: &Workload, busy: &[Option<f64>], threshold_pct: f64, after: Time) -> (Workload, ReclaimSummary) {
    let mut out = w.clone();
    let mut s = ReclaimSummary {
        after_s: after as f64 / 1000.0,
        threshold_pct,
        jobs_measured: 0,
        jobs_idle: 0,
        jobs_reclaimed: 0,
        gpu_hours_returned: 0.0,
        gpu_hours_total: 0.0,
    };
    for (j, b) in out.jobs.iter_mut().zip(busy.iter().chain(std::iter::repeat(&None))) {
        let gpus = crate::engine::milli_of(j) as f64 / 1000.0;
        s.gpu_hours_total += gpus * j.runtime as f64 / 3_600_000.0;
        let Some(b) = b else { continue };
        s.jobs_measured += 1;
        if *b >= threshold_pct {
            continue;
        }
        s.jobs_idle += 1;
        if j.runtime > after {
            s.jobs_reclaimed += 1;
            s.gpu_hours_returned += gpus * (j.runtime - after) as f64 / 3_600_000.0;
            j.runtime = after;
            // It ends cancelled: dependencies on its success see a failure.
            j.failed = true;
        }
    }
    (out, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_core::{Job, JobId};

    #[test]
    fn idle_jobs_are_cut_after_the_rule() {
        let mut w = Workload::default();
        for (i, (gpus, run_h)) in [(2u32, 10i64), (1, 10), (4, 1), (1, 5)].iter().enumerate() {
            w.jobs.push(Job { id: JobId(i as u32), gpus: *gpus, runtime: run_h * 3_600_000, ..Job::default() });
        }
        // Job 0 idle (1%), job 1 busy, job 2 idle but shorter than the rule, job 3 unmeasured.
        let busy = [Some(1.0), Some(60.0), Some(0.0), None];
        let (cut, s) = reclaim(&w, &busy, 5.0, 2 * 3_600_000);
        assert_eq!((s.jobs_measured, s.jobs_idle, s.jobs_reclaimed), (3, 2, 1));
        assert_eq!(s.gpu_hours_returned, 2.0 * 8.0);
        assert_eq!(s.gpu_hours_total, 20.0 + 10.0 + 4.0 + 5.0);
        assert_eq!(cut.jobs[0].runtime, 2 * 3_600_000);
        assert!(cut.jobs[0].failed);
        assert_eq!(cut.jobs[1..], w.jobs[1..]);
    }
}
