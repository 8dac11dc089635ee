//! Each format read from small inline samples, field by field; broken inputs give the exact
//! documented errors (docs/TRACES.md); `--skip-bad`, filters, `max_jobs` and `scale_load`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{Job, Workload};
use ordo_trace::{load_reader, write_generic, write_jsonl, write_swf, Format, LoadOptions, LoadedTrace, TraceError};

fn load(text: &str, name: &str) -> Result<LoadedTrace, TraceError> {
    load_reader(text.as_bytes(), name, &LoadOptions::default())
}

fn err(text: &str, name: &str, format: Format) -> String {
    load_reader(text.as_bytes(), name, &LoadOptions::new(format)).unwrap_err().to_string()
}

fn job<'a>(w: &'a Workload, name: &str) -> &'a Job {
    w.jobs.iter().find(|j| j.name == name).unwrap_or_else(|| panic!("job {name} not loaded"))
}

const SACCT: &str = "\
JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority
100|alice|ml|gpu|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-02T12:08:04|1-02:03:04|2-00:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|COMPLETED|4294
100.batch|||||2024-03-01T10:05:00|2024-03-02T12:08:04|1-02:03:04||cpu=8,gres/gpu=2,mem=64G,node=1||COMPLETED|
100.extern|||||2024-03-01T10:05:00|2024-03-02T12:08:04|1-02:03:04||billing=8,cpu=8,gres/gpu=2,mem=64G,node=1||COMPLETED|
101|bob|cv|debug|2024-03-01T11:00:00|2024-03-01T11:00:01|2024-03-01T11:10:01|00:10:00|UNLIMITED||cpu=2,mem=4000M,node=1,gres/gpu:a100=1|CANCELLED by 1000|10
102|bob|cv|gpu|2024-03-01T12:00:00|None|Unknown|00:00:00|Partition_Limit||cpu=1,gres/gpu=4|PENDING|5
103_7|carol||gpu|2024-03-01T09:00:00|2024-03-01T09:00:00|2024-03-01T09:00:30|00:30|01:00:00|cpu=1,node=1||COMPLETED|
";

#[test]
fn sacct_parsable2() {
    let t = load(SACCT, "sacct.txt").unwrap();
    assert_eq!(t.format, Format::Sacct);
    // Job 102 was pending when the row was written (nothing allocated, nothing elapsed): never ran.
    assert_eq!(
        (t.rows, t.skipped_steps, t.dropped_never_ran, t.dropped_zero_duration, t.workload.jobs.len()),
        (4, 2, 1, 0, 3)
    );
    let w = &t.workload;
    let a = job(w, "100");
    assert_eq!((a.gpus, a.cpus, a.mem_mib), (2, Some(8), Some(65_536)));
    assert_eq!(
        (a.runtime, a.estimate, a.priority),
        (((26 * 60 + 3) * 60 + 4) * 1000, Some(48 * 3_600_000), Some(4294))
    );
    assert_eq!((w.users[a.user as usize].as_str(), w.groups[a.group as usize].as_str()), ("alice", "ml"));
    assert_eq!((a.queue.as_deref(), a.submit), (Some("gpu"), 3_600_000));
    // GPUs from ReqTRES when AllocTRES is empty; typed gres counts.
    let b = job(w, "101");
    assert_eq!((b.gpus, b.cpus, b.mem_mib, b.estimate, b.runtime), (1, Some(2), Some(4000), None, 600_000));
    let c = job(w, "103_7");
    assert_eq!((c.submit, c.gpus, c.runtime, c.estimate), (0, 0, 30_000, Some(3_600_000)));
    assert_eq!(w.groups[c.group as usize], "default");
    assert_eq!(t.time_base, ordo_trace::parse_datetime(b"2024-03-01T09:00:00"));
    // `Start`, rebased like the submit times (day 0 is 09:00:00): 10:05:00, 11:00:01, 09:00:00.
    assert_eq!((a.start, b.start, c.start), (Some(65 * 60_000), Some(7_201_000), Some(0)));
}

/// Rows as `sacct --parsable2` writes them on the dev cluster of `scripts/slurm-dev-cluster.sh`
/// (Slurm 22.05, `AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100`): job 3 asked
/// for `--gres=gpu:a100:2 --constraint=ib&nvme`; job 6 for `--gres=gpu:1
/// --constraint=[ib|nvme]` and ran on a v100 (its `AllocTRES` is typed, its `ReqTRES` is not),
/// the `|` of its constraint unescaped in the `|`-separated row; job 9 `(ib|nvme)&ib`.
const SACCT_TYPED: &str = "\
JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority|Constraints
3|root|root|gpu|2026-12-04T10:27:17|2026-12-04T10:28:05|2026-12-04T10:29:05|00:01:00|00:05:00|billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,node=1|billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,mem=4000M,node=1|COMPLETED|4294901757|ib&nvme
6|root|root|gpu|2026-12-04T10:27:17|2026-12-04T10:27:17|2026-12-04T10:28:17|00:01:00|00:05:00|billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,mem=4000M,node=1|COMPLETED|4294901754|[ib|nvme]
9|root|root|gpu|2026-12-04T10:27:17|2026-12-04T10:27:18|2026-12-04T10:28:18|00:01:00|00:05:00|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,mem=4000M,node=1|COMPLETED|4294901751|(ib|nvme)&ib
";

#[test]
fn sacct_typed_gres_and_constraints() {
    let t = load(SACCT_TYPED, "sacct.txt").unwrap();
    assert_eq!(t.workload.jobs.len(), 3);
    let needs = |name: &str| job(&t.workload, name).needs.as_deref().cloned().unwrap_or_default();
    let a = needs("3");
    assert_eq!(
        (a.models, a.features, a.measured_on.as_deref()),
        (vec!["a100".to_string()], vec!["ib".to_string(), "nvme".to_string()], Some("a100"))
    );
    // Asked for any GPU: no model required; it ran on a v100, where its run time was measured.
    // `[ib|nvme]`: no feature is common to both alternatives, so none is required.
    let b = needs("6");
    assert_eq!((b.models.len(), b.features.len(), b.measured_on.as_deref()), (0, 0, Some("v100")));
    assert_eq!(needs("9").features, ["ib"]);
    // What import writes reads back the same.
    let mut out = Vec::new();
    write_generic(&t.workload, &mut out).unwrap();
    let back = load(std::str::from_utf8(&out).unwrap(), "back.csv").unwrap();
    for (x, y) in t.workload.jobs.iter().zip(&back.workload.jobs) {
        assert_eq!((&x.name, &x.needs), (&y.name, &y.needs));
    }
    // A constraint Slurm would not accept names its line and column.
    let bad = SACCT_TYPED.replace("|ib&nvme\n", "|ib&&nvme\n");
    let e = err(&bad, "sacct.txt", Format::Sacct);
    assert!(e.contains("sacct.txt:2") && e.contains("Constraints") && e.contains("ib&&nvme"), "{e}");
}

/// The dev cluster's `jobcomp/filetxt` log (Slurm 22.05, typed GPUs accounted): job 24 asked
/// for `--gres=gpu:a100:4`, job 23 for `--gres=gpu:4` and ran on the same a100 node; `Tres` is
/// the request, so only job 24 has a type.
const JOBCOMP_TYPED: &str = "\
JobId=24 UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=gpu TimeLimit=1 StartTime=2026-12-04T11:12:33 EndTime=2026-12-04T11:12:36 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4,gres/gpu:a100=4 Account=root QOS=normal WcKey= Cluster=dev SubmitTime=2026-12-04T11:12:13 EligibleTime=2026-12-04T11:12:13 DerivedExitCode=0:0 ExitCode=0:0
JobId=23 UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=gpu TimeLimit=5 StartTime=2026-12-04T11:12:33 EndTime=2026-12-04T11:12:36 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4 Account=root QOS=normal WcKey= Cluster=dev SubmitTime=2026-12-04T11:12:13 EligibleTime=2026-12-04T11:12:13 DerivedExitCode=0:0 ExitCode=0:0
";

#[test]
fn jobcomp_typed_gres() {
    let t = load(JOBCOMP_TYPED, "jobcomp.txt").unwrap();
    let models = |name: &str| job(&t.workload, name).needs.as_ref().map(|n| n.models.clone()).unwrap_or_default();
    assert_eq!((models("24"), models("23")), (vec!["a100".to_string()], vec![]));
    assert_eq!(job(&t.workload, "24").gpus, 4);
}

const JOBCOMP: &str = "\
JobId=7 UserId=alice(1001) GroupId=users(100) Name=train big model JobState=COMPLETED Partition=gpu TimeLimit=120 StartTime=2024-03-01T10:00:10 EndTime=2024-03-01T11:00:10 NodeList=n[1-2] NodeCnt=2 ProcCnt=16 WorkDir=/home/alice/my runs ReservationName= Tres=cpu=16,mem=32G,node=2,billing=16,gres/gpu=4 Account=ml QOS=normal WcKey= Cluster=c1 SubmitTime=2024-03-01T10:00:00 EligibleTime=2024-03-01T10:00:00 DerivedExitCode=0:0 ExitCode=0:0
JobId=8 UserId=bob(1002) GroupId=users(100) Name=x JobState=CANCELLED Partition=cpu TimeLimit=UNLIMITED StartTime=Unknown EndTime=2024-03-01T10:30:00 NodeList=(null) NodeCnt=0 ProcCnt=0 WorkDir=/ ReservationName= Tres= Account= QOS=normal WcKey= Cluster=c1 SubmitTime=2024-03-01T10:20:00 EligibleTime=2024-03-01T10:20:00 DerivedExitCode=0:0 ExitCode=0:0

JobId=9 UserId=bob(1002) GroupId=users(100) Name=y JobState=COMPLETED Partition=cpu TimeLimit=5 StartTime=2024-03-01T10:40:00 EndTime=2024-03-01T10:41:00 NodeList=n3 NodeCnt=1 ProcCnt=2 WorkDir=/ ReservationName= Tres=cpu=2,node=1 Account= QOS=normal
";

#[test]
fn slurm_jobcomp_filetxt() {
    let t = load(JOBCOMP, "jobcomp.log").unwrap();
    assert_eq!(t.format, Format::Jobcomp);
    assert_eq!((t.rows, t.dropped_never_ran, t.workload.jobs.len()), (3, 1, 2));
    assert_eq!(t.repaired, [("jobcomp: no SubmitTime: submitted at StartTime".to_string(), 1)]);
    let w = &t.workload;
    let a = job(w, "7");
    assert_eq!((a.submit, a.runtime, a.gpus, a.cpus, a.mem_mib), (0, 3_600_000, 4, Some(16), Some(32_768)));
    assert_eq!((a.estimate, a.queue.as_deref()), (Some(7_200_000), Some("gpu")));
    assert_eq!((w.users[a.user as usize].as_str(), w.groups[a.group as usize].as_str()), ("alice", "ml"));
    let b = job(w, "9");
    // No SubmitTime: submitted when it started, 40 minutes after job 7's submit.
    assert_eq!((b.submit, b.runtime, b.gpus, b.estimate), (2_400_000, 60_000, 0, Some(300_000)));
    assert_eq!(w.groups[b.group as usize], "users"); // no Account: the GroupId name
                                                     // `StartTime`, rebased: job 7 started 10 s after its submit; job 9 at its (repaired) submit.
    assert_eq!((a.start, b.start), (Some(10_000), Some(2_400_000)));
}

/// The real start time of each job (for `ordo compare`'s as-run row): generic `start_time`
/// (and the same key in JSON Lines), sacct `Start`, jobcomp `StartTime`; written back only
/// where a job carries one, so traces without it are written as before.
#[test]
fn start_times() {
    let text = "job_id,submit_time,num_gpu,duration,start_time\na,100,1,10,130.5\nb,160,2,5,\n";
    let t = load(text, "s.csv").unwrap();
    let w = &t.workload;
    assert_eq!((job(w, "a").start, job(w, "b").start), (Some(30_500), None));
    // Written back as read, and read back the same, in both formats.
    let mut out = Vec::new();
    write_generic(w, &mut out).unwrap();
    let csv = String::from_utf8(out.clone()).unwrap();
    assert_eq!(csv.lines().next(), Some("job_id,submit_time,num_gpu,duration,user,group,estimate,priority,cpus,mem_mib,gpu_milli,queue,after,state,start_time"));
    assert_eq!(load_reader(&out[..], "b.csv", &LoadOptions::default()).unwrap().workload, *w);
    let mut lines = Vec::new();
    write_jsonl(w, &mut lines).unwrap();
    assert!(String::from_utf8_lossy(&lines).starts_with("{\"job_id\":\"a\",\"submit_time\":0.000,\"num_gpu\":1,\"duration\":10.000,\"user\":\"default\",\"group\":\"default\",\"start_time\":30.500}\n"));
    assert_eq!(load_reader(&lines[..], "b.jsonl", &LoadOptions::default()).unwrap().workload, *w);
    // Without start times there is no such column.
    let t = load("job_id,submit_time,num_gpu,duration\na,0,1,10\n", "n.csv").unwrap();
    let mut out = Vec::new();
    write_generic(&t.workload, &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().starts_with(
        "job_id,submit_time,num_gpu,duration,user,group,estimate,priority,cpus,mem_mib,gpu_milli,queue,after,state\n"
    ));
    // Bad values: the file, line, field and what was expected.
    let want = "expected when the job really started: a time in seconds >= submit_time (finite, at most 1e12), or an empty cell";
    for (cell, line) in [("x", 2), ("-1", 2), ("99", 2)] {
        let text = format!("job_id,submit_time,num_gpu,duration,start_time\na,100,1,10,{cell}\n");
        let e = err(&text, "s.csv", Format::Auto);
        assert_eq!(e, format!("s.csv:{line}: field `start_time`: {want}, found \"{cell}\""));
    }
    let e = err(
        "{\"job_id\":1,\"submit_time\":5,\"num_gpu\":1,\"duration\":5,\"start_time\":4}\n",
        "t.jsonl",
        Format::Auto,
    );
    assert_eq!(e, format!("t.jsonl:1: field `start_time`: {want}, found \"4\""));
    let e = err("JobID|Submit|Start|Elapsed\n5|2024-01-01T00:00:00|soon|00:01:00\n", "sacct.txt", Format::Auto);
    assert_eq!(e, "sacct.txt:2: field `Start`: expected a date and time `YYYY-MM-DDTHH:MM:SS`, `Unknown` or `None`, found \"soon\"");
    // Slurm's clocks: a start before the submit is read as the submit, and counted.
    let t =
        load("JobID|Submit|Start|Elapsed\n5|2024-01-01T00:00:10|2024-01-01T00:00:08|00:01:00\n", "sacct.txt").unwrap();
    assert_eq!(t.workload.jobs[0].start, Some(0));
    assert_eq!(t.repaired, [("start time before the submit time: read as the submit time".to_string(), 1)]);
    // --scale-load moves the submit times away from when jobs ran: the start times go.
    let opts = LoadOptions { scale_load: Some(2.0), ..LoadOptions::default() };
    let t = load_reader(text.as_bytes(), "s.csv", &opts).unwrap();
    assert!(t.workload.jobs.iter().all(|j| j.start.is_none()));
    assert_eq!(
        t.repaired,
        [("start time dropped: --scale-load moved the submit times away from when jobs ran".to_string(), 1)]
    );
}

const HELIOS: &str = "\
job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1,u1,vcA,8,48,1,COMPLETED,2020-04-01 00:00:07,2020-04-01 00:00:09,2020-04-01 01:00:09,3600,2
2,u2,vcB,0,4,1,FAILED,2020-04-01 00:10:07,2020-04-01 00:10:07,2020-04-01 00:10:17,10,0
3,u1,vcA,1,6,1,CANCELLED,2020-04-01 00:20:07,,,0,5
";

/// Issue 18: what a user puts in a job name cannot forge another field, a newline in a name
/// does not split the record, and a job cancelled while pending (Slurm 22.05 writes StartTime =
/// EndTime, NodeList=(null), NodeCnt=0) never ran.
#[test]
fn jobcomp_names_cannot_forge_fields() {
    let text = "\
JobId=20 UserId=ann(1) GroupId=g(1) Name=a b=c Partition=evil TimeLimit=1 JobState=COMPLETED Partition=gpu TimeLimit=30 StartTime=2024-03-01T10:00:00 EndTime=2024-03-01T10:10:00 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/x TimeLimit=2 Partition=evil2 ReservationName= Tres=cpu=1,node=1,gres/gpu=2 Account=ml QOS=normal WcKey= Cluster=dev SubmitTime=2024-03-01T09:59:00 EligibleTime=2024-03-01T09:59:00 DerivedExitCode=0:0 ExitCode=0:0
JobId=21 UserId=ann(1) GroupId=g(1) Name=two
lines JobState=COMPLETED Partition=gpu TimeLimit=5 StartTime=2024-03-01T10:00:00 EndTime=2024-03-01T10:01:00 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,node=1,gres/gpu=1 Account=ml QOS=normal WcKey= Cluster=dev SubmitTime=2024-03-01T09:00:00 EligibleTime=2024-03-01T09:00:00 DerivedExitCode=0:0 ExitCode=0:0
JobId=22 UserId=ann(1) GroupId=g(1) Name=wrap JobState=CANCELLED Partition=gpu TimeLimit=222 StartTime=2024-03-01T10:05:00 EndTime=2024-03-01T10:05:00 NodeList=(null) NodeCnt=0 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4 Account=root QOS=normal WcKey= Cluster=dev SubmitTime=2024-03-01T10:04:00 EligibleTime=2024-03-01T10:04:00 DerivedExitCode=0:0 ExitCode=0:0
";
    let t = load(text, "jobcomp.txt").unwrap();
    assert_eq!((t.rows, t.dropped_never_ran, t.dropped_zero_duration, t.workload.jobs.len()), (3, 1, 0, 2));
    let w = &t.workload;
    let a = job(w, "20");
    assert_eq!((a.queue.as_deref(), a.estimate, a.gpus, a.runtime), (Some("gpu"), Some(30 * 60_000), 2, 600_000));
    let b = job(w, "21");
    assert_eq!((b.queue.as_deref(), b.estimate, b.gpus, b.runtime), (Some("gpu"), Some(5 * 60_000), 1, 60_000));
}

/// Found by the jobcomp fuzz target: a job id with a leading `\r` was kept as is, so writing the
/// workload as generic CSV (whose cells are trimmed) and reading it back changed the name.
#[test]
fn jobcomp_values_are_trimmed_like_csv_cells() {
    let text = "JobId=\r7\t UserId=\ralice(1) StartTime=2024-01-01T00:00:00 EndTime=2024-01-01T00:00:01\r\n";
    let t = load(text, "j.log").unwrap();
    let j = &t.workload.jobs[0];
    assert_eq!((j.name.as_str(), t.workload.users[0].as_str(), j.runtime), ("7", "alice", 1_000));
    let mut out = Vec::new();
    write_generic(&t.workload, &mut out).unwrap();
    assert_eq!(load_reader(&out[..], "b.csv", &LoadOptions::default()).unwrap().workload, t.workload);
}

/// The header of Alibaba's `cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv`, with rows
/// written by hand in its layout (no trace rows are copied here).
const ALIBABA_2025: &str = "\
instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time
inst_a,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
inst_b,CN,app_2,64,64,0,0,100,100,320.0,320.0,255.0,300.0,2,1000.0,1000.0,1500.0
inst_c,HN,app_1,8,8,1,1,25,25,40.0,40.0,680.0,800.0,8,1200.0,1260.5,4860.5
inst_d,CN,app_3,96,96,0,0,1,1,480.0,480.0,425.0,500.0,-1,1300.0,1300.0,
inst_e,HN,app_1,6.5,6.5,0.5,0.5,25,25,60.5,60.5,100.0,100.0,8,1400.0,1400.0,2000.0
inst_f,HN,app_4,12,12,2,2,25,25,120.0,120.0,640.0,800.0,8,1500.0,,
";

#[test]
fn alibaba_2025_instances() {
    let t = load(ALIBABA_2025, "disaggregated_DLRM_trace.csv").unwrap();
    assert_eq!(t.format, Format::Alibaba2025);
    // a existed before the trace began; d and f were still there when it ended.
    assert_eq!((t.rows, t.dropped_outside_trace, t.dropped_never_ran, t.workload.jobs.len()), (6, 3, 0, 3), "{t:?}");
    let w = &t.workload;
    let b = job(w, "inst_b");
    assert_eq!(
        (b.submit, b.runtime, b.gpus, b.gpu_milli, b.cpus, b.mem_mib),
        (0, 500_000, 0, None, Some(64), Some(327_680))
    );
    assert_eq!((w.users[b.user as usize].as_str(), b.queue.as_deref()), ("app_2", Some("CN")));
    // Waited 60.5 s for its scheduling: the run time is deletion - scheduled.
    let c = job(w, "inst_c");
    assert_eq!((c.submit, c.runtime, c.gpus, c.cpus, c.mem_mib), (200_000, 3_600_000, 1, Some(8), Some(40_960)));
    // Half a GPU, 6.5 cores (7), 60.5 GiB.
    let e = job(w, "inst_e");
    assert_eq!((e.gpus, e.gpu_milli, e.cpus, e.mem_mib), (1, Some(500), Some(7), Some(61_952)));
    assert!(t.drops().iter().any(|(why, n)| why.contains("before the trace") && *n == 3));
}

#[test]
fn philly_sizes_may_be_shares_of_one_gpu() {
    let text = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n1,0,CLOS,,0.5,100\n2,5,CLOS,,2,100\n";
    let t = load(text, "p.csv").unwrap();
    let a = job(&t.workload, "1");
    assert_eq!((a.gpus, a.gpu_milli), (1, Some(500)));
    assert_eq!((job(&t.workload, "2").gpus, job(&t.workload, "2").gpu_milli), (2, None));
    // A fraction of several GPUs has no share: the error says how to write it.
    let bad = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n1,0,CLOS,,1.5,100\n";
    let e = err(bad, "p.csv", Format::Philly);
    assert!(e.starts_with("p.csv:2: field `size`: expected a whole number of GPUs >= 0, or a share of one GPU"), "{e}");
    assert!(e.contains("generic format, with `num_gpu` and `gpu_milli`") && e.contains("found \"1.5\""), "{e}");
}

#[test]
fn helios() {
    let t = load(HELIOS, "cluster_log.csv").unwrap();
    assert_eq!(t.format, Format::Helios);
    assert_eq!((t.rows, t.dropped_zero_duration, t.workload.jobs.len()), (3, 1, 2));
    let w = &t.workload;
    let a = job(w, "1");
    assert_eq!((a.submit, a.gpus, a.cpus, a.runtime, a.queue.clone()), (0, 8, Some(48), 3_600_000, None));
    assert_eq!((w.users[a.user as usize].as_str(), w.groups[a.group as usize].as_str()), ("u1", "vcA"));
    assert_eq!(job(w, "2").submit, 600_000);
}

#[test]
fn jsonl_and_round_trips() {
    let text = "{\"job_id\":\"a\",\"submit_time\":10,\"num_gpu\":1,\"duration\":5.5,\"user\":\"u\",\"gpu_milli\":250,\"cpus\":3,\"mem_mib\":100,\"queue\":\"LS\"}\n\
                \n\
                {\"job_id\":7,\"submit_time\":12.25,\"num_gpu\":4,\"duration\":60,\"estimate\":120,\"priority\":-2,\"group\":\"g\"}\n";
    let t = load(text, "t.jsonl").unwrap();
    assert_eq!(t.format, Format::Jsonl);
    let w = &t.workload;
    let a = job(w, "a");
    assert_eq!(
        (a.submit, a.gpus, a.gpu_milli, a.runtime, a.cpus, a.mem_mib),
        (0, 1, Some(250), 5_500, Some(3), Some(100))
    );
    assert_eq!(a.queue.as_deref(), Some("LS"));
    let b = job(w, "7");
    assert_eq!((b.submit, b.gpus, b.estimate, b.priority), (2_250, 4, Some(120_000), Some(-2)));
    assert_eq!(w.groups[b.group as usize], "g");

    // generic -> jsonl -> generic keeps every job, and SWF keeps what it can hold.
    let mut csv = Vec::new();
    write_generic(w, &mut csv).unwrap();
    let back = load_reader(&csv[..], "b.csv", &LoadOptions::default()).unwrap();
    assert_eq!(back.workload, *w);
    let mut jsonl = Vec::new();
    write_jsonl(&back.workload, &mut jsonl).unwrap();
    let again = load_reader(&jsonl[..], "b.jsonl", &LoadOptions::default()).unwrap();
    assert_eq!(again.workload, *w, "{}", String::from_utf8_lossy(&jsonl));
    let mut swf = Vec::new();
    write_swf(w, Some(16), &mut swf).unwrap();
    let s = load_reader(&swf[..], "b.swf", &LoadOptions::default()).unwrap();
    assert_eq!((s.format, s.max_procs, s.workload.jobs.len()), (Format::Swf, Some(16), 2));
    let j = &s.workload.jobs[1];
    assert_eq!((j.submit, j.gpus, j.runtime, j.estimate), (2_000, 4, 60_000, Some(120_000)));
}

#[test]
fn gzip_and_truncated_gzip() {
    use std::io::Write;
    let text = "job_id,submit_time,num_gpu,duration\na,0,1,10\nb,5,2,20\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let t = load_reader(&gz[..], "t.csv.gz", &LoadOptions::default()).unwrap();
    assert_eq!((t.format, t.workload.jobs.len()), (Format::Generic, 2));
    let e = load_reader(&gz[..gz.len() - 12], "t.csv.gz", &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }), "{e}");
    assert!(e.to_string().starts_with("t.csv.gz: cannot read: "), "{e}");
}

/// Broken inputs and the exact message each gives (as documented in docs/TRACES.md).
#[test]
fn broken_inputs_give_the_documented_errors() {
    let cases: &[(&str, &str, Format, &str)] = &[
        (
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-13-09 07:01:55,66.0,1,66.0,a\n",
            "vc.csv",
            Format::Auto,
            "vc.csv:3: field `timestamp`: expected a date and time `YYYY-MM-DD HH:MM:SS` (or seconds >= 0), found \"2017-13-09 07:01:55\"",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1000,10,2,500,,LS,Running,0,10,0\n",
            "pods.csv",
            Format::Auto,
            "pods.csv:2: field `gpu_milli`: expected GPU thousandths 1..=1000 (below 1000 only with exactly 1 GPU), or 0 with 0 GPUs, found \"500\"",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1000,10,1,500,,LS,Running,0,10,20\n",
            "pods.csv",
            Format::Auto,
            "pods.csv:2: field `deletion_time`: expected a time in seconds >= the start (scheduled) time, found \"10\"",
        ),
        (
            "; MaxProcs: 8\n1 0 -1 10 2 -1 -1 2 -1 -1 1 1 1 -1 -1 -1 -1 -1\n2 5 -1 10 2 -1 -1 2 -1\n",
            "log.swf",
            Format::Auto,
            "log.swf:3: expected 18 fields (as in the header), found 9",
        ),
        (
            "1 0 -1 -7 2 -1 -1 2 -1 -1 1 1 1 -1 -1 -1 -1 -1\n",
            "log.swf",
            Format::Swf,
            "log.swf:1: field `field 4 (run time)`: expected a time in seconds >= 0, or -1 for unknown, found \"-7\"",
        ),
        (
            "JobID|User|Submit|Elapsed|Timelimit\n5|a|2024-01-01T00:00:00|1-2-3|UNLIMITED\n",
            "sacct.txt",
            Format::Auto,
            "sacct.txt:2: field `Elapsed`: expected a duration `[DAYS-]HH:MM:SS`, found \"1-2-3\"",
        ),
        (
            "JobID|User|Submit|Elapsed|Timelimit\n5|a|2024-01-01T00:00:00|00:01:00|forever\n",
            "sacct.txt",
            Format::Auto,
            "sacct.txt:2: field `Timelimit`: expected a time limit `[DAYS-]HH:MM:SS`, `UNLIMITED` or `Partition_Limit`, found \"forever\"",
        ),
        (
            "JobID|User|Submit|Elapsed|AllocTRES\n5|a|2024-01-01T00:00:00|00:01:00|gres/gpu=two\n",
            "sacct.txt",
            Format::Auto,
            "sacct.txt:2: field `AllocTRES`: expected Slurm TRES `name=count,...` (e.g. `cpu=4,mem=16G,gres/gpu=2`), found \"gres/gpu=two\"",
        ),
        (
            "JobId=1 UserId=a(1) StartTime=2024-01-01T00:00:00 EndTime=2023-12-31T00:00:00 SubmitTime=2024-01-01T00:00:00\n",
            "jobcomp.log",
            Format::Auto,
            "jobcomp.log:1: field `EndTime`: expected a date and time not before StartTime, found \"2023-12-31T00:00:00\"",
        ),
        ("JobId=1 UserId=a(1) EndTime=2024-01-01T00:00:00\n", "jobcomp.log", Format::Auto, "jobcomp.log:1: missing `StartTime=`"),
        (
            "{\"job_id\":1,\"submit_time\":0,\"num_gpu\":1,\"duration\":5}\n{\"job_id\":2,\"submit_time\":-3,\"num_gpu\":1,\"duration\":5}\n",
            "t.jsonl",
            Format::Auto,
            "t.jsonl:2: field `submit_time`: expected a time in seconds >= 0 (finite, at most 1e12), found \"-3\"",
        ),
        (
            "{\"job_id\":1,\"submit_time\":0,\"num_gpu\":1,\"duration\":5}\n{\"job_id\":2,\n",
            "t.jsonl",
            Format::Auto,
            "t.jsonl:2: expected a JSON object with the generic columns as keys: EOF while parsing a value at line 1 column 12",
        ),
        (
            "{\"job_id\":1,\"submit_time\":0,\"gpus\":1,\"duration\":5}\n",
            "t.jsonl",
            Format::Auto,
            "t.jsonl:1: unknown column(s) `gpus` for the jsonl format (known columns: `job_id`, `submit_time`, `num_gpu`, `duration`, `user`, `group`, `estimate`, `priority`, `cpus`, `mem_mib`, `gpu_milli`, `queue`, `after`, `state`, `start_time`, `gpu_model`, `gpu_mem_mib`, `features`, `job_class`, `measured_on`, `topology`)",
        ),
        (
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,606,vgg19,164,30\n1,1e400,30,133,vgg11,147,23\n",
            "60_job.csv",
            Format::Auto,
            "60_job.csv:3: field `num_gpu`: expected a whole number of GPUs >= 0, found \"1e400\"",
        ),
        ("\u{0}\u{1}binary junk\u{ff}", "junk.bin", Format::Auto, "junk.bin:1: unknown trace format: header \"\\0\\u{1}binary junk\u{ff}\" matches none"),
    ];
    for (text, name, format, want) in cases {
        let got = err(text, name, *format);
        assert!(got.starts_with(want), "\n got: {got}\nwant: {want}");
    }
}

#[test]
fn skip_bad_goes_on_and_keeps_ten_reasons() {
    let mut text = String::from("job_id,submit_time,num_gpu,duration\n");
    for i in 0..30 {
        if i % 2 == 0 {
            text.push_str(&format!("j{i},{i},1,10\n"));
        } else {
            text.push_str(&format!("j{i},{i},one,10\n"));
        }
    }
    let strict = load_reader(text.as_bytes(), "s.csv", &LoadOptions::default()).unwrap_err();
    assert_eq!(strict.to_string(), "s.csv:3: field `num_gpu`: expected a whole number of GPUs >= 0, found \"one\"");
    let opts = LoadOptions { skip_bad: true, ..LoadOptions::default() };
    let t = load_reader(text.as_bytes(), "s.csv", &opts).unwrap();
    assert_eq!((t.rows, t.skipped_bad, t.workload.jobs.len(), t.bad_reasons.len()), (30, 15, 15, 10));
    assert_eq!(t.bad_reasons[0], strict.to_string());
    assert!(t.bad_reasons[9].starts_with("s.csv:21: "), "{}", t.bad_reasons[9]);
    assert_eq!(t.drops(), [("bad row (skipped with --skip-bad)", 15)]);
}

#[test]
fn filters_max_jobs_and_scale_load() {
    let text = "job_id,submit_time,num_gpu,duration,user,group\n\
                a,100,1,10,ann,x\nb,200,1,10,bob,y\nc,300,1,10,ann,y\nd,400,1,10,cat,x\ne,500,1,10,ann,x\n";
    let opts = LoadOptions { users: vec!["ann".into()], ..LoadOptions::default() };
    let t = load_reader(text.as_bytes(), "f.csv", &opts).unwrap();
    let names: Vec<_> = t.workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!((names, t.dropped_filtered), (vec!["a", "c", "e"], 2));
    assert_eq!(t.workload.users, ["ann"]);
    let opts =
        LoadOptions { groups: vec!["x".into()], max_jobs: Some(2), scale_load: Some(2.0), ..LoadOptions::default() };
    let t = load_reader(text.as_bytes(), "f.csv", &opts).unwrap();
    let got: Vec<_> = t.workload.jobs.iter().map(|j| (j.name.as_str(), j.submit)).collect();
    assert_eq!(got, [("a", 0), ("d", 150_000)]);
    assert_eq!((t.dropped_filtered, t.dropped_max_jobs), (2, 1));
    assert_eq!(t.rows, t.workload.jobs.len() + t.dropped_total());
    assert_eq!(t.workload.users, ["ann", "cat"]);
    let bad = LoadOptions { scale_load: Some(0.0), ..LoadOptions::default() };
    let e = load_reader(text.as_bytes(), "f.csv", &bad).unwrap_err();
    assert_eq!(e.to_string(), "f.csv: invalid load options: scale_load must be between 0.001 and 1000, got 0");
    let wall = LoadOptions { from_time: Some(0), ..LoadOptions::default() };
    let e = load_reader(text.as_bytes(), "f.csv", &wall).unwrap_err();
    assert!(e.to_string().contains("the generic format has no wall-clock times"), "{e}");
}
