//! Time series and distributions derived from a run's job records: allocated GPUs and queue
//! length over time (exact step functions, then time-averaged buckets), JCT CDF, size classes.

use ordo_core::time::to_secs_f64;
use ordo_core::Time;
use ordo_sim::JobRecord;
use serde::{Deserialize, Serialize};

/// A step function: `(t, value)` pairs, time ascending; the value holds from `t` until the next
/// pair's time (and the last value holds afterwards).
pub type Steps = Vec<(Time, i64)>;

/// Allocated GPUs over time, in thousandths of a GPU (a 250-milli share counts 250, a whole
/// GPU 1000): + at each run segment's start, - at its end. See [`allocated_gpus`].
pub fn allocated_milli_steps(records: &[JobRecord]) -> Steps {
    let mut ev: Vec<(Time, i64)> = Vec::with_capacity(records.len() * 2);
    for r in records {
        let milli = r.gpu_milli.map_or(r.gpus as i64 * 1000, i64::from);
        for s in &r.segments {
            if s.end > s.start {
                ev.push((s.start, milli));
                ev.push((s.end, -milli));
            }
        }
    }
    integrate(ev)
}

/// Allocated GPUs over time, downsampled into `buckets` (fractional shares count by their share).
pub fn allocated_gpus(records: &[JobRecord], origin: Time, end: Time, buckets: usize) -> Series {
    let mut s = downsample(&allocated_milli_steps(records), origin, end, buckets);
    s.value.iter_mut().for_each(|v| *v /= 1000.0);
    s.mean /= 1000.0;
    s.peak /= 1000.0;
    s
}

/// Waiting jobs over time: a job waits from its submit to its first start, and from the end of
/// each preempted run to the start of the next.
pub fn queue_steps(records: &[JobRecord]) -> Steps {
    let mut ev: Vec<(Time, i64)> = Vec::with_capacity(records.len() * 2);
    for r in records {
        let mut since = r.submit;
        for s in &r.segments {
            if s.start > since {
                ev.push((since, 1));
                ev.push((s.start, -1));
            }
            since = s.end;
        }
    }
    integrate(ev)
}

/// Sorts `(t, delta)` events and sums them into a step function with one pair per distinct time.
fn integrate(mut ev: Vec<(Time, i64)>) -> Steps {
    ev.sort_unstable();
    let mut out: Steps = Vec::with_capacity(ev.len());
    let mut v = 0i64;
    for (t, d) in ev {
        v += d;
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 = v,
            _ => out.push((t, v)),
        }
    }
    out
}

/// A downsampled series: bucket midpoints (hours since `origin`) and the time-average of the step
/// function over each bucket, plus exact summaries of the full step function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Bucket midpoints, hours since the first submit.
    pub t_h: Vec<f64>,
    /// Time-averaged value over each bucket.
    pub value: Vec<f64>,
    /// Time-average over `[origin, end]`.
    pub mean: f64,
    /// Largest value reached.
    pub peak: f64,
}

/// Averages `steps` over `buckets` equal buckets covering `[origin, end]` (value 0 before the
/// first step). Each bucket's value is the exact integral of the step function over it divided by
/// its length.
pub fn downsample(steps: &[(Time, i64)], origin: Time, end: Time, buckets: usize) -> Series {
    let peak = steps.iter().map(|s| s.1).max().unwrap_or(0).max(0) as f64;
    if end <= origin || buckets == 0 {
        return Series { t_h: vec![], value: vec![], mean: 0.0, peak };
    }
    let span = (end - origin) as f64;
    let n = buckets;
    let width = span / n as f64;
    let mut sums = vec![0.0f64; n];
    // Integrate each constant piece [a, b) into the buckets it overlaps.
    let mut total = 0.0;
    for (i, &(t, v)) in steps.iter().enumerate() {
        let next = steps.get(i + 1).map_or(end, |s| s.0);
        let (a, b) = (t.max(origin), next.min(end));
        if b <= a || v == 0 {
            continue;
        }
        let (a, b) = ((a - origin) as f64, (b - origin) as f64);
        total += v as f64 * (b - a);
        let first = ((a / width) as usize).min(n - 1);
        let last = ((b / width) as usize).min(n - 1);
        for (k, sum) in sums.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (k as f64 * width, (k + 1) as f64 * width);
            let overlap = b.min(hi) - a.max(lo);
            if overlap > 0.0 {
                *sum += v as f64 * overlap;
            }
        }
    }
    let to_h = |ms: f64| ms / 3_600_000.0;
    Series {
        t_h: (0..n).map(|k| to_h((k as f64 + 0.5) * width)).collect(),
        value: sums.iter().map(|s| s / width).collect(),
        mean: total / span,
        peak,
    }
}

/// An empirical CDF of job completion times, downsampled to at most `points` quantiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cdf {
    /// JCT in seconds at each quantile (ascending).
    pub jct_s: Vec<f64>,
    /// Fraction of jobs with a JCT at or below `jct_s[i]`.
    pub fraction: Vec<f64>,
}

/// The JCT CDF of `records`: for `k = 1..=points` the nearest-rank `k/points` quantile.
pub fn jct_cdf(records: &[JobRecord], points: usize) -> Cdf {
    let mut v: Vec<f64> = records.iter().map(|r| to_secs_f64(r.end - r.submit)).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let points = points.min(n);
    let mut cdf = Cdf { jct_s: Vec::with_capacity(points), fraction: Vec::with_capacity(points) };
    for k in 1..=points {
        let rank = (k * n).div_ceil(points); // 1-based
        cdf.jct_s.push(v[rank - 1]);
        cdf.fraction.push(rank as f64 / n as f64);
    }
    cdf
}

/// Job-size classes by GPUs asked for: label and inclusive upper bound.
pub const SIZE_CLASSES: [(&str, u32); 4] = [("1 GPU", 1), ("2-4 GPUs", 4), ("5-8 GPUs", 8), (">8 GPUs", u32::MAX)];

/// The index in [`SIZE_CLASSES`] of a job asking for `gpus` (0-GPU jobs count as 1).
pub fn size_class(gpus: u32) -> usize {
    SIZE_CLASSES.iter().position(|&(_, hi)| gpus <= hi).unwrap_or(SIZE_CLASSES.len() - 1)
}

/// A job's wait in seconds: the time it did not run between submit and end.
pub fn wait_s(r: &JobRecord) -> f64 {
    let ran: Time = r.segments.iter().map(|s| s.end - s.start).sum();
    to_secs_f64(r.end - r.submit - ran)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_core::JobId;
    use ordo_sim::engine::RunSegment;

    fn rec(id: u32, gpus: u32, submit: Time, runs: &[(Time, Time)]) -> JobRecord {
        JobRecord {
            job: JobId(id),
            submit,
            start: runs[0].0,
            end: runs[runs.len() - 1].1,
            gpus,
            gpu_milli: None,
            preemptions: runs.len() as u32 - 1,
            segments: runs.iter().map(|&(start, end)| RunSegment { start, end, gpu_ids: Default::default() }).collect(),
        }
    }

    /// Worked by hand on a 4-GPU cluster (times in ms):
    /// job 0: 2 GPUs, submitted 0, runs [0, 10).
    /// job 1: 4 GPUs, submitted 0, waits until 10, runs [10, 20).
    /// job 2: 1 GPU, submitted 5, runs [5, 8), preempted, waits [8, 20), runs [20, 25).
    /// Allocated: 0..5: 2; 5..8: 3; 8..10: 2; 10..20: 4; 20..25: 1; then 0.
    /// Queue: 0..8: 1 (job 1); 8..10: 2 (jobs 1, 2); 10..20: 1 (job 2); then 0.
    fn three_jobs() -> Vec<JobRecord> {
        vec![rec(0, 2, 0, &[(0, 10)]), rec(1, 4, 0, &[(10, 20)]), rec(2, 1, 5, &[(5, 8), (20, 25)])]
    }

    #[test]
    fn allocated_and_queue_steps_by_hand() {
        let r = three_jobs();
        assert_eq!(allocated_milli_steps(&r), vec![(0, 2000), (5, 3000), (8, 2000), (10, 4000), (20, 1000), (25, 0)]);
        assert_eq!(queue_steps(&r), vec![(0, 1), (8, 2), (10, 1), (20, 0)]);
    }

    #[test]
    fn downsampling_averages_over_buckets() {
        let r = three_jobs();
        // Five buckets of 5 ms over [0, 25): allocated averages
        // [0,5): 2; [5,10): (3*3 + 2*2)/5 = 2.6; [10,15): 4; [15,20): 4; [20,25): 1.
        let s = allocated_gpus(&r, 0, 25, 5);
        let want = [2.0, 2.6, 4.0, 4.0, 1.0];
        for (got, want) in s.value.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{:?}", s.value);
        }
        // Mean: (10 + 9 + 4 + 40 + 5) / 25 = 68 / 25.
        assert!((s.mean - 68.0 / 25.0).abs() < 1e-12);
        assert_eq!(s.peak, 4.0);
        assert!((s.t_h[0] - 2.5 / 3_600_000.0).abs() < 1e-18);
        // Queue in two buckets of 12.5 ms: [0,12.5): (8*1 + 2*2 + 2.5*1)/12.5 = 1.16;
        // [12.5,25): 7.5*1/12.5 = 0.6.
        let q = downsample(&queue_steps(&r), 0, 25, 2);
        assert!((q.value[0] - 1.16).abs() < 1e-12 && (q.value[1] - 0.6).abs() < 1e-12, "{:?}", q.value);
        assert_eq!(q.peak, 2.0);
    }

    #[test]
    fn cdf_sizes_and_waits_by_hand() {
        let r = three_jobs();
        // JCTs: 10, 20, 20 ms.
        let c = jct_cdf(&r, 10);
        assert_eq!(c.jct_s, vec![0.01, 0.02, 0.02]);
        assert_eq!(c.fraction, vec![1.0 / 3.0, 2.0 / 3.0, 1.0]);
        assert_eq!((size_class(0), size_class(1), size_class(4), size_class(8), size_class(9)), (0, 0, 1, 2, 3));
        assert_eq!(r.iter().map(wait_s).collect::<Vec<_>>(), vec![0.0, 0.01, 0.012]);
    }
}
