//! The `longlog` workload (gangs of 32 to 1,024 GPUs on 1,024 one-GPU nodes): what a run keeps
//! per job stays small and independent of how many nodes a job spans, and the workload replays
//! the same through SWF (`ordo trace convert --workload longlog --to swf`) as generated.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{Placement, PolicySpec, Workload};
use ordo_sim::engine::{validate, JobRecord, RunSegment};
use ordo_sim::workload::{generate, Scenario, WorkloadParams};
use ordo_sim::{simulate, SimConfig, SimOutput};
use ordo_trace::{load_reader, write_swf, Format, LoadOptions};

fn longlog(jobs: usize) -> Workload {
    let p = WorkloadParams { jobs, ..WorkloadParams::default_for(Scenario::LongLog) };
    generate(&p, Scenario::LongLog.cluster().total_gpus())
}

fn run(w: &Workload, policy: &str) -> SimOutput {
    let c = Scenario::LongLog.cluster();
    let out =
        simulate(w, &SimConfig::new(c.clone(), Placement::Pooled, policy.parse::<PolicySpec>().unwrap())).unwrap();
    validate(w, &c, &out, 0).unwrap();
    out
}

/// Heap and inline bytes of one job's record.
fn record_bytes(r: &JobRecord) -> usize {
    std::mem::size_of::<JobRecord>()
        + r.segments.capacity() * std::mem::size_of::<RunSegment>()
        + r.segments.iter().map(|s| s.gpu_ids.heap_bytes()).sum::<usize>()
}

#[test]
fn a_record_costs_bytes_not_nodes() {
    // Jobs of 98 GPUs on average, each GPU on its own node: a list per node cost about 6 KB
    // per job (the 850 MB of issue 32 for 122,055 jobs).
    let w = longlog(4_000);
    let mean_gpus = w.jobs.iter().map(|j| j.gpus as f64).sum::<f64>() / w.jobs.len() as f64;
    assert!(mean_gpus > 80.0, "mean {mean_gpus:.0} GPUs per job");
    for policy in ["fifo", "fifo+conservative", "srtf"] {
        let out = run(&w, policy);
        assert_eq!(out.records.len(), w.jobs.len());
        let bytes: usize = out.records.iter().map(record_bytes).sum();
        let per_job = bytes as f64 / out.records.len() as f64;
        let runs: usize = out.records.iter().map(|r| r.segments.len()).sum();
        assert!(per_job < 400.0, "{policy}: {per_job:.0} bytes per job record ({runs} runs)");
        // Every node of every run is still there to read.
        for r in &out.records {
            for s in &r.segments {
                assert_eq!(s.gpu_ids.iter().map(|(_, ids)| ids.len()).sum::<usize>(), r.gpus as usize);
                assert_eq!(s.gpu_ids.len(), r.gpus as usize, "one GPU per node");
            }
        }
    }
}

#[test]
fn replays_the_same_through_swf() {
    let w = longlog(3_000);
    let mut swf = Vec::new();
    write_swf(&w, Some(1024), &mut swf).unwrap();
    let t = load_reader(swf.as_slice(), "longlog.swf", &LoadOptions::new(Format::Swf)).unwrap();
    assert_eq!(t.max_procs, Some(1024));
    assert_eq!(t.workload.jobs.len(), w.jobs.len());
    // The reader moves the first submit to time 0; everything else is as generated.
    let shift = w.jobs[0].submit;
    for policy in ["fifo+conservative", "sjf+easy", "las"] {
        let (a, b) = (run(&w, policy), run(&t.workload, policy));
        assert_eq!(a.records.len(), b.records.len());
        for (x, y) in a.records.iter().zip(&b.records) {
            assert_eq!((x.job, x.gpus, x.preemptions), (y.job, y.gpus, y.preemptions), "{policy}");
            assert_eq!((x.submit - shift, x.start - shift, x.end - shift), (y.submit, y.start, y.end), "{policy}");
            assert_eq!(x.segments.len(), y.segments.len());
            for (s, u) in x.segments.iter().zip(&y.segments) {
                assert_eq!(s.gpu_ids, u.gpu_ids, "{policy}: job {}", x.job);
            }
        }
        assert_eq!(a.metrics.mean_jct_s, b.metrics.mean_jct_s, "{policy}");
    }
}
