//! `load_reader` never panics, whatever it is fed, and what it returns is consistent.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_trace::{load_reader, Format, LoadOptions, LoadedTrace, TraceError};
use proptest::prelude::*;

const HEADERS: &[&str] = &[
    "job_id,submit_time,num_gpu,duration",
    "job_id,submit_time,num_gpu,duration,user,group,estimate,priority",
    "priority,duration,job_id,estimate,num_gpu,submit_time,group,user",
    "#job id,arrival time (sec),topology,shape,size,duration (sec)",
    "\u{feff}#job id,arrival time (sec),size,duration (sec)",
    "job_id,submit_time",
    "job_id,job_id,submit_time,num_gpu,duration",
    "job_id,submit_time,num_gpu,duration,cpus,mem_mib,gpu_milli,queue",
    "timestamp,duration,num_gpus,gpu_time,cluster",
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time",
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time",
    "job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue",
    "JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority",
    "; MaxProcs: 100",
    "{\"job_id\":1,\"submit_time\":0,\"num_gpu\":1,\"duration\":5}",
    "JobId=1 UserId=a(1) StartTime=2020-01-01T00:00:00 EndTime=2020-01-01T00:00:01",
    "",
];

const CELLS: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "1.5",
    "0.5",
    "0.0004",
    "120.0",
    "8.0",
    "-0",
    "+3",
    "1e3",
    "1e400",
    "-1e400",
    "NaN",
    "inf",
    "-inf",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "99999999999999999999",
    "1000000000000",
    "1000000000001",
    " 7 ",
    "\"2\"",
    "\"a,b\"",
    "\"x\ny\"",
    "\"",
    "\u{fffd}",
    "\u{0663}",
    "abc",
    "CLOS",
    "1+1",
    "default",
    "2017-10-09 07:01:55",
    "2020-02-30T00:00:00",
    "1-02:03:04",
    "UNLIMITED",
    "Partition_Limit",
    "cpu=4,mem=16G,gres/gpu=2",
    "gres/gpu:a100=99999999999",
    "123.batch",
    "999",
    "1000",
    "1001",
    "{}",
    "JobId=",
    ";",
    "|",
    " ",
];

/// Checks one load result for consistency.
fn check(result: Result<LoadedTrace, TraceError>, format: Format) {
    match result {
        Ok(t) => {
            assert_ne!(t.format, Format::Auto);
            if format != Format::Auto {
                assert_eq!(t.format, format);
            }
            let jobs = &t.workload.jobs;
            assert_eq!(t.rows, jobs.len() + t.dropped_total());
            assert!(t.bad_reasons.len() <= 10 && t.bad_reasons.len() <= t.skipped_bad);
            if let Some(first) = jobs.first() {
                assert_eq!(first.submit, 0);
            }
            for (i, j) in jobs.iter().enumerate() {
                assert_eq!(j.id.idx(), i);
                assert!(j.runtime > 0 && j.submit >= 0);
                assert!((j.user as usize) < t.workload.users.len());
                assert!((j.group as usize) < t.workload.groups.len());
                assert!(j.gpu_milli.into_iter().all(|m| (1..1000).contains(&m) && j.gpus == 1));
            }
            assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.csv"), "{msg}");
        }
    }
}

fn load_all(bytes: &[u8], opts: LoadOptions) {
    for format in Format::ALL {
        for skip_bad in [false, true] {
            let opts = LoadOptions { format, skip_bad, ..opts.clone() };
            check(load_reader(bytes, "fuzz.csv", &opts), format);
        }
    }
    // The same bytes gzip-compressed, whole and cut short.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, bytes).unwrap();
    let gz = gz.finish().unwrap();
    for cut in [gz.len(), gz.len() / 2] {
        check(load_reader(&gz[..cut], "fuzz.csv", &LoadOptions { format: Format::Auto, ..opts.clone() }), Format::Auto);
    }
}

fn window() -> impl Strategy<Value = LoadOptions> {
    let day = prop_oneof![
        Just(None),
        (-2.0f64..5.0).prop_map(Some),
        Just(Some(f64::NAN)),
        Just(Some(f64::INFINITY)),
        Just(Some(f64::NEG_INFINITY)),
        Just(Some(1e300)),
    ];
    (
        day.clone(),
        day,
        prop::option::of(0usize..5),
        prop::option::of(prop_oneof![Just(0.0), Just(-1.0), Just(f64::NAN), 0.1f64..10.0]),
    )
        .prop_map(|(from_day, to_day, max_jobs, scale_load)| LoadOptions {
            from_day,
            to_day,
            max_jobs,
            scale_load,
            ..LoadOptions::default()
        })
}

/// CSV-like text: one of the known headers, then rows of interesting cells.
fn csv_like() -> impl Strategy<Value = String> {
    let row = (prop::collection::vec(prop::sample::select(CELLS), 0..19), prop::sample::select(&[",", "|", " "][..]))
        .prop_map(|(c, sep)| c.join(sep));
    (prop::sample::select(HEADERS), prop::collection::vec(row, 0..8), prop::sample::select(&["\n", "\r\n", "\r"][..]))
        .prop_map(|(h, rows, eol)| {
            let mut s = h.to_string();
            for r in rows {
                s.push_str(eol);
                s.push_str(&r);
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), opts in window()) {
        load_all(&bytes, opts);
    }

    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,300}", opts in window()) {
        load_all(s.as_bytes(), opts);
    }

    #[test]
    fn csv_like_text_never_panics(s in csv_like(), opts in window()) {
        load_all(s.as_bytes(), opts);
    }

    #[test]
    fn valid_generic_rows_load(
        rows in prop::collection::vec((0u32..1_000_000, 0u32..64, 0u32..100_000), 0..40),
        from in prop::option::of(0.0f64..12.0),
    ) {
        let mut text = String::from("job_id,submit_time,num_gpu,duration\n");
        for (i, (submit, gpus, dur)) in rows.iter().enumerate() {
            text.push_str(&format!("j{i},{},{gpus},{}\n", *submit as f64 / 10.0, *dur as f64 / 1000.0));
        }
        let opts = LoadOptions { from_day: from, ..LoadOptions::default() };
        let t = load_reader(text.as_bytes(), "fuzz.csv", &opts).unwrap();
        prop_assert_eq!(t.rows, rows.len());
        prop_assert_eq!(t.dropped_zero_duration, rows.iter().filter(|r| r.2 == 0).count());
        check(Ok(t), Format::Generic);
    }
}
