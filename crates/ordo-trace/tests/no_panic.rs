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
    "",
];

const CELLS: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "1.5",
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
            assert_eq!(t.rows, jobs.len() + t.dropped_zero_duration + t.dropped_outside_window);
            if let Some(first) = jobs.first() {
                assert_eq!(first.submit, 0);
            }
            for (i, j) in jobs.iter().enumerate() {
                assert_eq!(j.id.idx(), i);
                assert!(j.runtime > 0 && j.submit >= 0);
                assert!((j.user as usize) < t.workload.users.len());
                assert!((j.group as usize) < t.workload.groups.len());
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
        let opts = LoadOptions { format, ..opts };
        check(load_reader(bytes, "fuzz.csv", &opts), format);
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
    (day.clone(), day).prop_map(|(from_day, to_day)| LoadOptions { format: Format::Auto, from_day, to_day })
}

/// CSV-like text: one of the known headers, then rows of interesting cells.
fn csv_like() -> impl Strategy<Value = String> {
    let row = prop::collection::vec(prop::sample::select(CELLS), 0..10).prop_map(|c| c.join(","));
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
        let opts = LoadOptions { format: Format::Auto, from_day: from, to_day: None };
        let t = load_reader(text.as_bytes(), "fuzz.csv", &opts).unwrap();
        prop_assert_eq!(t.rows, rows.len());
        prop_assert_eq!(t.dropped_zero_duration, rows.iter().filter(|r| r.2 == 0).count());
        check(Ok(t), Format::Generic);
    }
}
