//! Shared checks for the fuzz targets: feed bytes to one reader (and to auto-detection, with
//! and without gzip; a database file for `ordo-db`), and assert that whatever loads is
//! consistent and every error names the file.

use ordo_trace::{load_path, load_reader, Format, LoadOptions, LoadedTrace};

/// The option sets every target loads with: as is, skipping bad rows, and a window with a cap
/// and a load scale.
fn options(format: Format) -> [LoadOptions; 3] {
    [
        LoadOptions::new(format),
        LoadOptions { skip_bad: true, ..LoadOptions::new(format) },
        LoadOptions { skip_bad: true, max_jobs: Some(3), scale_load: Some(3.0), ..LoadOptions::new(format) }
            .with_window(Some(0.0), Some(1.0)),
    ]
}

/// Panics unless what loaded is consistent: counts, numbering, order, and a generic round trip.
fn consistent(t: &LoadedTrace, format: Format, opts: &LoadOptions) {
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

/// Loads `data` as `format` with several option sets; panics on any inconsistency.
pub fn check(data: &[u8], format: Format) {
    for opts in options(format) {
        match load_reader(data, "fuzz", &opts) {
            Ok(t) => consistent(&t, format, &opts),
            Err(e) => assert!(e.to_string().starts_with("fuzz"), "{e}"),
        }
    }
}

/// The `ordo-db` reader: `data` that starts like an SQLite file is that file (damaged pages);
/// anything else is SQL run on an empty database (tables and rows of any shape; the seed
/// corpus holds an ordo server's schema and rows). Loaded as `ordo-db` and by auto-detection,
/// it must be consistent, with one run list (or none, under a load scale) and one busy figure per
/// job, or fail with an error naming the file.
pub fn check_db(data: &[u8]) {
    let path = std::env::temp_dir().join(format!("ordo-fuzz-db-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    if data.starts_with(ordo_trace::SQLITE_MAGIC) {
        std::fs::write(&path, data).expect("write the database");
    } else {
        let conn = rusqlite::Connection::open(&path).expect("create the database");
        // SQL that SQLite refuses leaves what ran before it.
        let _ = conn.execute_batch(&String::from_utf8_lossy(data));
    }
    let file = path.display().to_string();
    for format in [Format::OrdoDb, Format::Auto] {
        for opts in options(format) {
            match load_path(&path, &opts) {
                Ok(t) => {
                    consistent(&t, Format::OrdoDb, &opts);
                    let s = t.server.as_ref().expect("an ordo-db trace carries its server record");
                    let n = t.workload.jobs.len();
                    assert!(s.runs.len() == n || (s.runs.is_empty() && opts.scale_load.is_some()));
                    assert_eq!(s.busy.len(), n);
                }
                Err(e) => assert!(e.to_string().starts_with(&file), "{e}"),
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// The `pai-2020` reader: `data` split at `0xff` bytes is the job, task, instance and sensor
/// tables (a missing part is an absent table), written beside each other as PAI publishes them
/// and loaded from the job table's path, as `pai-2020` and by auto-detection (its file name). It
/// must be consistent, with one activity figure per job when the sensor table is there, or fail
/// with an error naming one of the tables.
pub fn check_pai(data: &[u8]) {
    let dir = std::env::temp_dir().join(format!("ordo-fuzz-pai-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make the table folder");
    let names = ["pai_job_table.csv", "pai_task_table.csv", "pai_instance_table.csv", "pai_sensor_table.csv"];
    for (part, name) in data.split(|&b| b == 0xff).zip(names) {
        std::fs::write(dir.join(name), part).expect("write a table");
    }
    let job = dir.join(names[0]);
    let prefix = dir.display().to_string();
    for format in [Format::Pai2020, Format::Auto] {
        for opts in options(format) {
            match load_path(&job, &opts) {
                Ok(t) => {
                    consistent(&t, Format::Pai2020, &opts);
                    if let Some(a) = &t.activity {
                        assert_eq!(a.len(), t.workload.jobs.len());
                        assert!(a.iter().flatten().all(|b| (0.0..=100.0).contains(&b.mean_pct)));
                    }
                }
                Err(e) => assert!(e.to_string().starts_with(&prefix), "{e}"),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
