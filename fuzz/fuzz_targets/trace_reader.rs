//! Feeds arbitrary bytes to `ordo_trace::load_reader` in every format, with and without a day
//! window: it must never panic, and what it loads must be consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_trace::{load_reader, Format, LoadOptions};

fuzz_target!(|data: &[u8]| {
    for format in [Format::Generic, Format::Philly, Format::Auto] {
        for opts in [
            LoadOptions::new(format),
            LoadOptions::new(format).with_window(Some(0.0), Some(1.0)),
        ] {
            match load_reader(data, "fuzz", &opts) {
                Ok(t) => {
                    let jobs = &t.workload.jobs;
                    assert_ne!(t.format, Format::Auto);
                    assert_eq!(
                        t.rows,
                        jobs.len() + t.dropped_zero_duration + t.dropped_outside_window
                    );
                    assert!(jobs.first().is_none_or(|j| j.submit == 0));
                    assert!(jobs.iter().enumerate().all(|(i, j)| j.id.idx() == i));
                    assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
                }
                Err(e) => assert!(e.to_string().starts_with("fuzz")),
            }
        }
    }
});
