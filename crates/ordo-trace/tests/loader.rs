//! Loader behaviour on small inline traces: error messages, optional columns, windows, ties.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{Job, JobId, Workload};
use ordo_trace::{load_path, load_reader, write_generic, Format, LoadOptions, TraceError};
use std::path::Path;

const GEN: &str = "job_id,submit_time,num_gpu,duration\n";
const PHILLY: &str = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n";

fn load(text: &str, format: Format) -> Result<ordo_trace::LoadedTrace, TraceError> {
    load_reader(text.as_bytes(), "t.csv", &LoadOptions::new(format))
}

/// The error message of loading `text`, which must fail.
fn err(text: &str, format: Format) -> String {
    match load(text, format) {
        Ok(t) => panic!("expected an error, loaded {} jobs", t.workload.jobs.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn field_errors_name_file_line_field_expected_and_found() {
    let text = format!("{GEN}a,0,1,10\nb,1,two,10\n");
    assert_eq!(
        err(&text, Format::Generic),
        "t.csv:3: field `num_gpu`: expected a whole number of GPUs >= 0, found \"two\""
    );
    let cases: &[(&str, &str, &str)] = &[
        ("a,-5,1,10", "submit_time", "\"-5\""),
        ("a,x,1,10", "submit_time", "\"x\""),
        ("a,NaN,1,10", "submit_time", "\"NaN\""),
        ("a,0,-1,10", "num_gpu", "\"-1\""),
        ("a,0,1.5,10", "num_gpu", "\"1.5\""),
        ("a,0,99999999999,10", "num_gpu", "\"99999999999\""),
        ("a,0,1,-10", "duration", "\"-10\""),
        ("a,0,1,inf", "duration", "\"inf\""),
        ("a,0,1,1e13", "duration", "\"1e13\""),
        ("a,0,1,", "duration", "\"\""),
        (",0,1,10", "job_id", "\"\""),
    ];
    for (row, field, found) in cases {
        let msg = err(&format!("{GEN}{row}\n"), Format::Generic);
        assert!(msg.starts_with(&format!("t.csv:2: field `{field}`: expected ")), "{row}: {msg}");
        assert!(msg.ends_with(&format!("found {found}")), "{row}: {msg}");
    }
    // Philly names its own columns.
    let msg = err(&format!("{PHILLY}0,0.0,CLOS,1,1,10\n1,5,CLOS,1,eight,10\n"), Format::Auto);
    assert!(
        msg.starts_with("t.csv:3: field `size`: expected a whole number of GPUs >= 0, or a share of one GPU"),
        "{msg}"
    );
    assert!(msg.ends_with("found \"eight\""), "{msg}");
    let msg = err(&format!("{PHILLY}0,0.0,CLOS,1,1,-3\n"), Format::Philly);
    assert!(msg.starts_with("t.csv:2: field `duration (sec)`: expected a time in seconds >= 0"));
}

#[test]
fn optional_field_errors() {
    let h = "job_id,submit_time,num_gpu,duration,estimate,priority\n";
    let msg = err(&format!("{h}a,0,1,10,soon,1\n"), Format::Generic);
    assert!(msg.starts_with("t.csv:2: field `estimate`: expected a time in seconds"), "{msg}");
    assert!(msg.ends_with("found \"soon\""), "{msg}");
    let msg = err(&format!("{h}a,0,1,10,5,1.5\n"), Format::Generic);
    assert_eq!(
        msg,
        "t.csv:2: field `priority`: expected a whole number (negative allowed) or an empty cell, found \"1.5\""
    );
    let msg = load_reader(
        &b"job_id,submit_time,num_gpu,duration,user\na,0,1,10,\xff\n"[..],
        "t.csv",
        &LoadOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(msg, "t.csv:2: field `user`: expected UTF-8 text, found \"\u{fffd}\"");
}

#[test]
fn column_count_errors() {
    let msg = err(&format!("{GEN}a,0,1,10\na,0,1\n"), Format::Generic);
    assert_eq!(msg, "t.csv:3: expected 4 fields (as in the header), found 3");
    let msg = err(&format!("{PHILLY}0,0.0,CLOS,1,1,10,extra\n"), Format::Philly);
    assert_eq!(msg, "t.csv:2: expected 6 fields (as in the header), found 7");
}

#[test]
fn line_numbers_count_blank_lines_and_quoted_newlines() {
    // A blank line is skipped but still counted; a quoted field may span lines.
    let text = format!("{GEN}a,0,1,10\n\n\"b\nc\",1,1,10\nd,2,1,zz\n");
    let msg = err(&text, Format::Generic);
    assert!(msg.starts_with("t.csv:6: field `duration`"), "{msg}");
    let t = load(&format!("{GEN}a,0,1,10\n\n\"b\nc\",1,1,10\n"), Format::Generic).unwrap();
    assert_eq!(t.rows, 2);
    assert_eq!(t.workload.jobs[1].name, "b\nc");
}

#[test]
fn header_errors() {
    let msg = err("job_id,submit_time,nmu_gpu,duration,colour\n", Format::Generic);
    assert!(msg.starts_with("t.csv:1: unknown column(s) `nmu_gpu`, `colour` for the generic format"), "{msg}");
    assert!(msg.contains("`num_gpu`"), "lists known columns: {msg}");
    let msg = err("job_id,submit_time,duration\n", Format::Generic);
    assert!(msg.starts_with("t.csv:1: missing required column `num_gpu` for the generic format"), "{msg}");
    let msg = err("job_id,submit_time,num_gpu,duration,user,user\n", Format::Auto);
    assert_eq!(msg, "t.csv:1: column `user` appears more than once in the header");
    let msg = err("#job id,arrival time (sec),size\n", Format::Auto);
    assert!(msg.starts_with("t.csv:1: missing required column `duration (sec)` for the philly format"), "{msg}");
    // Philly data read as generic: the header does not fit.
    let msg = err(PHILLY, Format::Generic);
    assert!(msg.starts_with("t.csv:1: unknown column(s) `#job id`"), "{msg}");
}

#[test]
fn auto_detection() {
    let msg = err("id,time,gpus\n1,2,3\n", Format::Auto);
    assert!(msg.starts_with("t.csv:1: unknown trace format: header \"id,time,gpus\""), "{msg}");
    assert!(msg.contains("generic") && msg.contains("philly"), "{msg}");
    assert_eq!(load(PHILLY, Format::Auto).unwrap().format, Format::Philly);
    let t = load("duration, num_gpu ,submit_time,job_id\n", Format::Auto).unwrap();
    assert_eq!(t.format, Format::Generic);
    // A UTF-8 byte-order mark and CRLF line ends are fine.
    let text = format!("\u{feff}{}0,1.0,CLOS,1,2,3.5\r\n", PHILLY.replace('\n', "\r\n"));
    let t = load(&text, Format::Auto).unwrap();
    assert_eq!(t.format, Format::Philly);
    assert_eq!(t.workload.jobs[0].gpus, 2);
    assert_eq!(t.workload.jobs[0].runtime, 3500);
}

#[test]
fn empty_input_and_header_only() {
    assert_eq!(err("", Format::Auto), "t.csv: empty file: expected a header line");
    assert_eq!(err("\n\n", Format::Generic), "t.csv: empty file: expected a header line");
    let t = load(GEN, Format::Auto).unwrap();
    assert_eq!((t.rows, t.workload.jobs.len()), (0, 0));
    assert!(t.workload.users.is_empty());
}

#[test]
fn io_errors_name_the_path() {
    let path = Path::new("/nonexistent/dir/trace.csv");
    let e = load_path(path, &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }));
    let msg = e.to_string();
    assert!(msg.starts_with("/nonexistent/dir/trace.csv: cannot read: "), "{msg}");

    /// Yields some bytes, then fails.
    struct Failing(usize);
    impl std::io::Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let data = format!("{GEN}a,0,1,10\n");
            if self.0 == 0 {
                self.0 += 1;
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data.as_bytes()[..n]);
                Ok(n)
            } else {
                Err(std::io::Error::other("disk on fire"))
            }
        }
    }
    let e = load_reader(Failing(0), "pipe", &LoadOptions::default()).unwrap_err();
    assert_eq!(e.to_string(), "pipe: cannot read: disk on fire");
}

#[test]
fn bad_options() {
    let opts = LoadOptions::default().with_window(Some(f64::NAN), None);
    let e = load_reader(GEN.as_bytes(), "t.csv", &opts).unwrap_err();
    assert_eq!(e.to_string(), "t.csv: invalid load options: from_day is NaN");
    let opts = LoadOptions::default().with_window(Some(3.0), Some(3.0));
    let e = load_reader(GEN.as_bytes(), "t.csv", &opts).unwrap_err();
    assert!(e.to_string().contains("from_day must be less than to_day"), "{e}");
}

#[test]
fn generic_optional_columns_and_defaults() {
    let text = "priority,estimate,group,user,duration,num_gpu,submit_time,job_id\n\
                5,7200,ml,alice,3600.5,8,10,j1\n\
                ,,,,60,0,10.25,j2\n\
                -3, 30 ,ml,bob,1,2,11,j3\n";
    let t = load(text, Format::Auto).unwrap();
    let w = &t.workload;
    let j = &w.jobs;
    assert_eq!(j.len(), 3);
    assert_eq!((j[0].name.as_str(), j[0].submit, j[0].gpus), ("j1", 0, 8));
    assert_eq!((j[0].runtime, j[0].estimate, j[0].priority), (3_600_500, Some(7_200_000), Some(5)));
    assert_eq!((&*w.users[j[0].user as usize], &*w.groups[j[0].group as usize]), ("alice", "ml"));
    assert_eq!((j[1].submit, j[1].gpus, j[1].estimate, j[1].priority), (250, 0, None, None));
    assert_eq!((&*w.users[j[1].user as usize], &*w.groups[j[1].group as usize]), ("default", "default"));
    assert_eq!((j[2].estimate, j[2].priority), (Some(30_000), Some(-3)));
    assert_eq!(w.users, ["alice", "default", "bob"]);
    assert_eq!(j[0].group, j[2].group);
    assert!(j.iter().all(|j| j.cpus.is_none() && j.mem_mib.is_none()));
}

fn job(name: &str, submit: i64, gpus: u32, runtime: i64) -> Job {
    Job {
        id: JobId(0),
        name: name.to_string(),
        user: 0,
        group: 0,
        submit,
        gpus,
        cpus: None,
        mem_mib: None,
        runtime,
        estimate: None,
        priority: None,
        gpu_milli: None,
        queue: None,
        after: vec![],
        failed: false,
        start: None,
        needs: None,
    }
}

#[test]
fn generic_round_trips_through_write_generic() {
    let mut w = Workload::default();
    let alice = w.user_index("alice");
    let bob = w.user_index("bob, jr.");
    let ml = w.group_index("ml");
    let mut jobs = vec![
        Job { user: alice, group: ml, estimate: Some(7_200_001), priority: Some(-4), ..job("x", 0, 8, 3_600_123) },
        Job { user: bob, group: ml, ..job("y \"quoted\"", 1, 0, 1) },
        Job { user: alice, group: ml, estimate: Some(0), ..job("z", 1, 2, 5_000) },
        Job { user: bob, group: ml, priority: Some(9), ..job("w", 86_400_000, 128, 999) },
    ];
    for (i, j) in jobs.iter_mut().enumerate() {
        j.id = JobId(i as u32);
    }
    w.jobs = jobs;
    let mut out = Vec::new();
    write_generic(&w, &mut out).unwrap();
    let t = load_reader(&out[..], "rt.csv", &LoadOptions::default()).unwrap();
    assert_eq!(t.format, Format::Generic);
    assert_eq!(t.rows, 4);
    assert_eq!(t.workload, w, "{}", String::from_utf8_lossy(&out));
}

#[test]
fn zero_durations_are_dropped_and_counted() {
    let text = format!("{GEN}a,5,1,0\nb,6,1,0.0004\nc,7,1,0.0005\nd,8,1,0.0\n");
    let t = load(&text, Format::Generic).unwrap();
    assert_eq!((t.rows, t.dropped_zero_duration, t.dropped_outside_window), (4, 3, 0));
    let j = &t.workload.jobs;
    assert_eq!((j[0].name.as_str(), j[0].submit, j[0].runtime), ("c", 0, 1));
}

#[test]
fn window_selects_and_rebases() {
    let day = 86_400;
    let text = format!(
        "{GEN}a,0,1,10\nb,{},1,10\nc,{},2,10\nz,{},1,0\nd,{},3,10\ne,{},4,10\nf,{},1,10\n",
        day - 1,
        day,
        day + 5,
        day + 7,
        2 * day - 1,
        2 * day
    );
    let opts = LoadOptions::new(Format::Generic).with_window(Some(1.0), Some(2.0));
    let t = load_reader(text.as_bytes(), "w.csv", &opts).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["c", "d", "e"]);
    let submits: Vec<_> = t.workload.jobs.iter().map(|j| j.submit).collect();
    assert_eq!(submits, [0, 7_000, (day - 1) * 1000]);
    assert_eq!((t.rows, t.dropped_zero_duration, t.dropped_outside_window), (7, 1, 3));
    assert_eq!(t.rows, t.workload.jobs.len() + t.dropped_zero_duration + t.dropped_outside_window);

    // Open-ended windows; fractional days.
    let from = LoadOptions::new(Format::Generic).with_window(Some(1.5), None);
    let t = load_reader(text.as_bytes(), "w.csv", &from).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["e", "f"]);
    assert_eq!(t.workload.jobs[0].submit, 0);
    let to = LoadOptions::new(Format::Generic).with_window(None, Some(1.0));
    let t = load_reader(text.as_bytes(), "w.csv", &to).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    // Without a window, rebasing still puts the first arrival at 0.
    let t = load(&format!("{GEN}a,100,1,1\nb,50.5,1,1\n"), Format::Generic).unwrap();
    let got: Vec<_> = t.workload.jobs.iter().map(|j| (j.name.as_str(), j.submit)).collect();
    assert_eq!(got, [("b", 0), ("a", 49_500)]);
}

#[test]
fn ties_keep_file_row_order() {
    let text = format!("{GEN}late,9,1,1\nt3,5,1,1\nt1,5,1,1\nt2,5,1,1\nearly,1,1,1\nt0,5,1,1\n");
    let t = load(&text, Format::Generic).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["early", "t3", "t1", "t2", "t0", "late"]);
    for (i, j) in t.workload.jobs.iter().enumerate() {
        assert_eq!(j.id, JobId(i as u32));
    }
    // Philly ties too (many Philly jobs share an arrival second).
    let text = format!("{PHILLY}9,0.0,CLOS,1,1,5\n3,0.0,CLOS,1,1,5\n5,0.0,CLOS,1,1,5\n");
    let t = load(&text, Format::Philly).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["9", "3", "5"]);
    assert_eq!(t.workload.users, ["default"]);
    assert_eq!(t.workload.groups, ["default"]);
}

#[test]
fn dependencies_and_end_states_by_job_id() {
    use ordo_core::{Dep, DepKind};
    // Jobs in (submit, row) order: prep 0, train 1, eval 2, report 3. `gone` is in no row: that
    // dependency is dropped and counted as a repair.
    let text = "job_id,submit_time,num_gpu,duration,after,state\n\
                prep,0,1,10,,\n\
                train,0,8,100,afterok:prep,failed\n\
                eval,5,1,10,afterok:train,COMPLETED\n\
                report,5,0,1,afterany:train:eval?afternotok:gone,\n";
    let t = load(text, Format::Generic).unwrap();
    let j = &t.workload.jobs;
    let d = |kind, job| Dep { kind, job: JobId(job) };
    assert_eq!(j[1].after, vec![d(DepKind::AfterOk, 0)]);
    assert_eq!(j[2].after, vec![d(DepKind::AfterOk, 1)]);
    assert_eq!(j[3].after, vec![d(DepKind::AfterAny, 1), d(DepKind::AfterAny, 2)]);
    assert!(j[1].failed && !j[0].failed && !j[2].failed);
    assert_eq!(t.repaired, vec![("dependency on a job not loaded (dropped: taken as met)".to_string(), 1)]);
    // Written out and read back: the same jobs, dependencies and states.
    let mut out = Vec::new();
    write_generic(&t.workload, &mut out).unwrap();
    let back = load(std::str::from_utf8(&out).unwrap(), Format::Generic).unwrap();
    assert_eq!(back.workload, t.workload);
    // A window that drops `prep` drops the dependency on it (counted), and renumbers the rest.
    let opts = LoadOptions { from_day: Some(1.0 / 86_400.0), ..LoadOptions::new(Format::Generic) };
    let late = "job_id,submit_time,num_gpu,duration,after\na,0,1,10,\nb,1,1,10,afterok:a\nc,2,1,10,afterany:b\n";
    let t = load_reader(late.as_bytes(), "t.csv", &opts).unwrap();
    assert_eq!(t.workload.jobs[0].after, vec![]);
    assert_eq!(t.workload.jobs[1].after, vec![d(DepKind::AfterAny, 0)]);
    assert_eq!(t.repaired.len(), 1);
    // Malformed cells name the line and the field.
    let e = err("job_id,submit_time,num_gpu,duration,after\na,0,1,10,afterok\n", Format::Generic);
    assert!(e.starts_with("t.csv:2: field `after`: expected dependencies `afterok:ID[:ID...]`"), "{e}");
    let e = err("job_id,submit_time,num_gpu,duration,state\na,0,1,10,weird\n", Format::Generic);
    assert!(e.starts_with("t.csv:2: field `state`: expected how the job ended"), "{e}");
}
