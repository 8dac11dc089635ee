//! Shared checks for the fuzz targets: feed bytes to one reader (and to auto-detection, with
//! and without gzip), and assert that whatever loads is consistent and every error names the file.

use ordo_trace::{load_reader, Format, LoadOptions};

/// Loads `data` as `format` with several option sets; panics on any inconsistency.
pub fn check(data: &[u8], format: Format) {
    let windows = [
        LoadOptions::new(format),
        LoadOptions { skip_bad: true, ..LoadOptions::new(format) },
        LoadOptions { skip_bad: true, max_jobs: Some(3), scale_load: Some(3.0), ..LoadOptions::new(format) }
            .with_window(Some(0.0), Some(1.0)),
    ];
    for opts in windows {
        match load_reader(data, "fuzz", &opts) {
            Ok(t) => {
                let jobs = &t.workload.jobs;
                assert_ne!(t.format, Format::Auto);
                if format != Format::Auto {
                    assert_eq!(t.format, format);
                }
                assert_eq!(t.rows, jobs.len() + t.dropped_total());
                assert!(t.bad_reasons.len() <= 10);
                assert!(jobs.first().map_or(true, |j| j.submit == 0));
                for (i, j) in jobs.iter().enumerate() {
                    assert_eq!(j.id.idx(), i);
                    assert!(j.runtime > 0 && j.submit >= 0);
                    assert!((j.user as usize) < t.workload.users.len());
                    assert!((j.group as usize) < t.workload.groups.len());
                    assert!(j.gpu_milli.map_or(true, |m| (1..1000).contains(&m) && j.gpus == 1));
                }
                assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
                // Whatever loads writes out and reads back the same.
                let mut out = Vec::new();
                ordo_trace::write_generic(&t.workload, &mut out).expect("write to memory");
                let back = load_reader(&out[..], "back", &LoadOptions::default()).expect("generic output reads back");
                if opts.scale_load.is_none() {
                    assert_eq!(back.workload, t.workload);
                }
            }
            Err(e) => assert!(e.to_string().starts_with("fuzz"), "{e}"),
        }
    }
}
