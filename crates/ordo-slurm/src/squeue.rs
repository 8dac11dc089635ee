//! Reading `squeue`'s and `sinfo`'s text output in the formats ordo asks for: `|`-separated
//! fields, times in UTC. Text is ten times quicker than `squeue --json` on a long queue. A job's
//! constraint (`Feature`, last) may itself hold `|` (`[ib|nvme]`): what follows the other
//! fields is all its own.

use crate::error::SlurmError;
use crate::job::{constraint_text, feature_list, partition_list, ArrayPart, JobState, SlurmJob, SlurmNode};
use crate::json::spread;
use crate::values::{array_tasks, asked_types, gres_gpus, gres_types, hostlist, tres};

/// The `squeue -O` fields ordo reads, in order (each written `NAME:|`, so `|` ends every field).
/// `Feature` (the job's constraint) is last: it may hold `|` itself.
pub const SQUEUE_FIELDS: [&str; 23] = [
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "State",
    "PriorityLong",
    "Nice",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "UserName",
    "Account",
    "Partition",
    "tres",
    "tres-alloc",
    "NodeList",
    "Reason",
    "NumCPUs",
    "tres-per-job",
    "tres-per-node",
    "NumNodes",
    "ReqSwitch",
    "Wait4Switch",
    "Feature",
];

/// The `-O` argument for [`SQUEUE_FIELDS`].
pub fn squeue_format() -> String {
    SQUEUE_FIELDS.iter().map(|f| format!("{f}:|")).collect::<Vec<_>>().join(",")
}

/// Most nodes one job's node list may name (a bound on what a malformed list can allocate).
const MAX_HOSTS: usize = 1_000_000;

/// Parses `squeue -h -O <squeue_format()>` output, run with `TZ=UTC`.
pub fn parse_squeue(text: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line, i + 1)?);
    }
    Ok(out)
}

fn parse_line(line: &str, n: usize) -> Result<SlurmJob, SlurmError> {
    let mut f: Vec<&str> = line.split('|').map(str::trim).collect();
    // Every field ends with `|`, so the last split part is empty; a constraint with `|` in it
    // (the last field) splits into more parts, joined back here.
    let last = SQUEUE_FIELDS.len() - 1;
    let joined: String;
    if f.len() > SQUEUE_FIELDS.len() + 1 && f.last() == Some(&"") {
        // From after the `|` that ends the field before it to the last `|`.
        let from = line.match_indices('|').nth(last - 1).map_or(0, |(i, _)| i + 1);
        let to = line.rfind('|').unwrap_or(line.len());
        joined = line.get(from..to).unwrap_or("").trim().to_string();
        f.truncate(last);
        f.push(&joined);
        f.push("");
    }
    if f.len() != SQUEUE_FIELDS.len() + 1 {
        return Err(SlurmError::Parse {
            source_name: "squeue".into(),
            location: format!("line {n}"),
            what: format!(
                "expected {} `|`-terminated fields ({}), found {}: `{line}`",
                SQUEUE_FIELDS.len(),
                SQUEUE_FIELDS.join(","),
                f.len().saturating_sub(1)
            ),
        });
    }
    let bad = |k: usize, expected: &str| SlurmError::Parse {
        source_name: "squeue".into(),
        location: format!("line {n}, field {}", SQUEUE_FIELDS[k]),
        what: format!("expected {expected}, found `{}`", f[k]),
    };
    let int = |k: usize| f[k].parse::<i64>().map_err(|_| bad(k, "a number"));
    let id = f[0].parse::<u64>().ok().filter(|&v| v > 0).ok_or_else(|| bad(0, "a job id > 0"))?;
    let state = JobState::from_slurm(f[3]);
    let priority = f[4].parse::<u64>().map_err(|_| bad(4, "a priority"))?;
    let nice = int(5)?;
    let time_limit_min = match f[6] {
        "UNLIMITED" | "INVALID" | "NOT_SET" | "Partition_Limit" | "N/A" | "" => None,
        t => Some(
            ordo_trace::parse_slurm_duration(t.as_bytes())
                .map(|ms| (ms / 60_000) as u64)
                .ok_or_else(|| bad(6, "a time limit ([D-]HH:MM:SS or UNLIMITED)"))?,
        ),
    };
    let time = |k: usize| -> Result<i64, SlurmError> {
        match f[k] {
            "N/A" | "Unknown" | "None" | "" => Ok(0),
            t => ordo_trace::parse_datetime(t.as_bytes())
                .map(|ms| ms / 1000)
                .ok_or_else(|| bad(k, "a date and time YYYY-MM-DDTHH:MM:SS")),
        }
    };
    let running = state == JobState::Running;
    let req = tres(f[12]).ok_or_else(|| bad(12, "Slurm TRES `name=count,...`"))?;
    let alloc_t = tres(f[13]).ok_or_else(|| bad(13, "Slurm TRES `name=count,...`"))?;
    let mut asked = if running && f[13] != "N/A" && !f[13].is_empty() { alloc_t } else { req };
    if asked.gpus == 0 {
        // GPUs not tracked as a TRES (`AccountingStorageTRES` without `gres/gpu`, the default
        // of Slurm 24.11 without accounting): the job's own request, per job or per node.
        let per = |k: usize| match f[k] {
            "N/A" | "" | "(null)" => Some(0),
            t => gres_gpus(t),
        };
        let per_job = per(17).ok_or_else(|| bad(17, "a gres request such as gres/gpu:4"))?;
        let per_node = per(18).ok_or_else(|| bad(18, "a gres request such as gres/gpu:4"))?;
        let nodes: u32 = f[19].split('-').next().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
        asked.gpus = if per_job > 0 { per_job } else { per_node.saturating_mul(nodes) };
    }
    let types = asked_types(f[17], f[18], f[12]).ok_or_else(|| bad(18, "a gres request such as gres/gpu:a100:4"))?;
    let mut alloc = Vec::new();
    if running {
        let names = hostlist(f[14], MAX_HOSTS).ok_or_else(|| bad(14, "a host list such as n[1-3]"))?;
        alloc = spread(&names, asked.gpus);
    }
    let cpus = if asked.cpus > 0 { asked.cpus } else { int(16)?.clamp(0, u32::MAX as i64) as u32 };
    // `--switches=N@TIME`: 0 and `0:00` when not asked (`N/A` where the field is not known).
    let switches = match f[20] {
        "N/A" | "" => 0,
        t => t.parse::<u32>().map_err(|_| bad(20, "a switch count"))?,
    };
    let switch_wait_s = match f[21] {
        "N/A" | "" | "UNLIMITED" | "INVALID" => 0,
        t => ordo_trace::parse_slurm_duration(t.as_bytes())
            .map(|ms| (ms / 1000) as u64)
            .ok_or_else(|| bad(21, "a wait ([D-]HH:MM:SS)"))?,
    };
    let array_job_id = match f[1] {
        "N/A" | "" | "0" => 0,
        a => a.parse::<u64>().map_err(|_| bad(1, "an array job id"))?,
    };
    let array = if array_job_id == 0 || (f[2] == "N/A" && array_job_id == id) {
        None
    } else {
        let (task, tasks, throttle) = match f[2].parse::<u32>() {
            Ok(t) => (Some(t), 1, None),
            Err(_) => {
                let (c, t) = array_tasks(f[2]).ok_or_else(|| bad(2, "an array task list such as 0-49%5"))?;
                (None, c, t)
            }
        };
        Some(ArrayPart { array_job_id, task, tasks, throttle })
    };
    Ok(SlurmJob {
        id,
        state,
        priority,
        nice,
        time_limit_min,
        submit: time(7)?,
        start: time(8)?,
        user: f[9].to_string(),
        account: f[10].to_string(),
        partitions: partition_list(f[11]),
        gpus: asked.gpus,
        cpus,
        // Memory is not in the allocated TRES where it is not a consumable resource.
        mem_mib: if asked.mem_mib > 0 { asked.mem_mib } else { req.mem_mib },
        alloc,
        reason: f[15].to_string(),
        array,
        gpu_types: types,
        constraint: constraint_text(f[22]),
        switches,
        switch_wait_s,
    })
}

/// The `sinfo` format ordo reads: node, gres, CPUs, memory, state, partition, active features
/// (one line per node and partition).
pub const SINFO_FORMAT: &str = "%N|%G|%c|%m|%T|%R|%b";

/// Parses `sinfo -h -N -o '%N|%G|%c|%m|%T|%R|%b'`: a node listed under several partitions
/// becomes one node with all of them.
pub fn parse_sinfo(text: &str) -> Result<Vec<SlurmNode>, SlurmError> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad =
            |what: String| SlurmError::Parse { source_name: "sinfo".into(), location: format!("line {}", i + 1), what };
        let f: Vec<&str> = line.split('|').collect();
        if f.len() != 7 {
            return Err(bad(format!(
                "expected 7 `|`-separated fields (name|gres|cpus|memory|state|partition|features), found `{line}`"
            )));
        }
        let unreadable = || bad(format!("gres `{}` has an unreadable GPU count", f[1]));
        let gpus = gres_gpus(f[1]).ok_or_else(unreadable)?;
        let gpu_types = gres_types(f[1]).ok_or_else(unreadable)?;
        let part = f[5].trim();
        if let Some(n) = nodes.iter_mut().find(|n| n.name == f[0]) {
            if !part.is_empty() && !n.partitions.iter().any(|p| p == part) {
                n.partitions.push(part.to_string());
            }
            continue;
        }
        nodes.push(SlurmNode {
            name: f[0].to_string(),
            gpus,
            cpus: f[2].trim().parse().ok(),
            mem_mib: f[3].trim().trim_end_matches('+').parse().ok(),
            state: f[4].trim().to_string(),
            partitions: partition_list(part),
            gpu_types,
            features: feature_list(f[6]),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn reads_sinfo_with_partitions() {
        let n = parse_sinfo(
            "n1|gpu:8|2|4000|idle|gpu|(null)\nn3|gpu:4(S:0)|2|4000|drained|gpu|(null)\nn3|gpu:4(S:0)|2|4000|drained|other|(null)\n",
        )
        .unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].gpus, n[0].cpus, n[0].mem_mib), (8, Some(2), Some(4000)));
        assert_eq!(n[1].partitions, ["gpu", "other"]);
        assert!(!n[0].unavailable() && n[1].unavailable());
        let e = parse_sinfo("n1|gpu:8|2\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("7 `|`-separated"), "{e}");
        let e = parse_sinfo("n1|gpu:q|2|1|idle|gpu|(null)\n").unwrap_err().to_string();
        assert!(e.contains("gpu:q"), "{e}");
    }

    /// Lines as Slurm 22.05's `squeue -h -O` prints them for the dev cluster (a running job, a
    /// pending one, an array's pending record with a throttle, a niced job in two partitions).
    #[test]
    fn reads_squeue_text() {
        let text = "\
1|1|N/A|RUNNING|4294901759|0|10:00:00|2026-12-01T05:40:11|2026-12-01T05:40:12|root|root|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=8|cpu=1,node=1,billing=1,gres/gpu=8|n1|None|1|N/A|N/A|1|0|0:00|(null)|
5004|5004|N/A|PENDING|4294896756|0|5:00|2026-12-01T05:44:02|N/A|root|ml|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4||Priority|1|N/A|N/A|1|0|0:00|(null)|
4|4|2-49%5|PENDING|4294901756|0|3:00|2026-12-01T05:40:11|N/A|bob|ml|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2||JobArrayTaskLimit|1|N/A|N/A|1|0|0:00|(null)|
5|5|N/A|PENDING|4294901655|100|1-00:00:00|2026-12-01T05:40:11|N/A|root|root|gpu,other|cpu=2,mem=100M,node=1,billing=2,gres/gpu=1|N/A||Priority|2|N/A|N/A|1|0|0:00|(null)|
7|5|3|RUNNING|4294901756|0|UNLIMITED|2026-12-01T05:40:11|2026-12-01T05:40:12|bob|ml|gpu|cpu=4,node=2,billing=4,gres/gpu=6|cpu=4,node=2,billing=4,gres/gpu=6|n[2-3]|None|4|N/A|N/A|1|0|0:00|(null)|
";
        let j = parse_squeue(text).unwrap();
        assert_eq!(j.len(), 5);
        assert_eq!((j[0].id, &j[0].state, j[0].gpus, j[0].cpus), (1, &JobState::Running, 8, 1));
        assert_eq!(j[0].alloc, vec![("n1".to_string(), 8)]);
        assert_eq!(j[0].start, 1_796_103_612);
        assert_eq!((j[1].time_limit_min, j[1].mem_mib, j[1].account.as_str()), (Some(5), 4000, "ml"));
        assert_eq!(j[2].array, Some(ArrayPart { array_job_id: 4, task: None, tasks: 48, throttle: Some(5) }));
        assert_eq!((j[3].nice, j[3].time_limit_min, j[3].partitions.len()), (100, Some(1440), 2));
        assert_eq!(j[4].array.as_ref().map(|a| a.task), Some(Some(3)));
        assert_eq!(j[4].alloc, vec![("n2".to_string(), 3), ("n3".to_string(), 3)]);
        assert_eq!(j[4].time_limit_min, None);
    }

    /// Slurm 24.11.5 (Debian trixie) without accounting: GPUs are not a TRES, so they are read
    /// from the job's gres request (`tres-per-node`), for pending, array and running jobs.
    #[test]
    fn reads_gpus_not_tracked_as_tres() {
        let text = "\
4|4|N/A|PENDING|4294901756|0|5:00|2026-12-01T07:23:13|2026-12-01T07:33:13|root|(null)|gpu|cpu=1,mem=4000M,node=1,billing=1|cpu=1,mem=4000M,node=1,billing=1||Resources|1|N/A|gres/gpu:4|1|0|0:00|(null)|
7|7|0-9%2|PENDING|4294901753|0|4:00|2026-12-01T07:23:13|2026-12-01T07:35:00|root|(null)|gpu|cpu=1,mem=4000M,node=1,billing=1|cpu=1,mem=4000M,node=1,billing=1||Priority|1|N/A|gres/gpu:1|1|0|0:00|(null)|
1|1|N/A|RUNNING|4294901759|0|10:00|2026-12-01T07:23:13|2026-12-01T07:23:13|root|(null)|gpu|cpu=1,node=1,billing=1|cpu=1,node=1,billing=1|n1|None|1|N/A|gres/gpu:8|1|0|0:00|(null)|
9|9|N/A|PENDING|4294901750|0|5:00|2026-12-01T07:23:13|N/A|root|(null)|gpu|cpu=2,node=2,billing=2|cpu=2,node=2,billing=2||Priority|2|N/A|gres/gpu:3|2|0|0:00|(null)|
";
        let j = parse_squeue(text).unwrap();
        assert_eq!(j.iter().map(|j| j.gpus).collect::<Vec<_>>(), vec![4, 1, 8, 6]);
        assert_eq!(j[1].tasks(), 10);
        assert_eq!(j[2].alloc, vec![("n1".to_string(), 8)]);
        let bad = text.lines().next().unwrap().replace("gres/gpu:4", "gres/gpu:four");
        let e = parse_squeue(&bad).unwrap_err().to_string();
        assert!(e.contains("field tres-per-node"), "{e}");
    }

    /// Lines as `squeue` and `sinfo` print them on the dev cluster with typed GPUs (n1: 8 a100,
    /// features ib and nvme; n2: 8 a100, ib; n3: 4 v100), Slurm 22.05 then 24.11: two a100
    /// jobs and a v100 job (`--gpus=v100:2`, per job) running, `--gres=gpu:a100:2
    /// --constraint=ib&nvme` and `--gres=gpu:2 --constraint=[ib|nvme]` pending.
    #[test]
    fn reads_typed_gres_and_constraints() {
        let v22 = "\
17|17|N/A|PENDING|4294901745|0|5:00|2026-12-04T10:47:44|2026-12-04T10:52:44|root|root|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2||Resources|1|N/A|gres:gpu:a100:2|1|0|0:00|ib&nvme|
18|18|N/A|PENDING|4294901744|0|5:00|2026-12-04T10:47:44|2026-12-04T10:52:44|root|root|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2||Priority|1|N/A|gres:gpu:2|1|0|0:00|[ib|nvme]|
15|15|N/A|RUNNING|4294901747|0|5:00|2026-12-04T10:47:44|2026-12-04T10:47:44|root|root|gpu|cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=8|cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=8|n1|None|1|N/A|gres:gpu:a100:8|1|0|0:00|(null)|
19|19|N/A|RUNNING|4294901743|0|5:00|2026-12-04T10:47:44|2026-12-04T10:47:44|root|root|gpu|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:v100=2|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:v100=2|n3|None|1|gres:gpu:v100:2|N/A|1|0|0:00|(null)|
";
        let v24 = "\
10|10|N/A|PENDING|4294901750|0|5:00|2026-12-04T10:47:46|2026-12-04T10:52:46|root|(null)|gpu|cpu=1,mem=4000M,node=1,billing=1|cpu=1,mem=4000M,node=1,billing=1||Resources|1|N/A|gres/gpu:a100:2|1|0|0:00|ib&nvme|
11|11|N/A|PENDING|4294901749|0|5:00|2026-12-04T10:47:46|2026-12-04T10:52:46|root|(null)|gpu|cpu=1,mem=4000M,node=1,billing=1|cpu=1,mem=4000M,node=1,billing=1||Priority|1|N/A|gres/gpu:2|1|0|0:00|[ib|nvme]|
8|8|N/A|RUNNING|4294901752|0|5:00|2026-12-04T10:47:46|2026-12-04T10:47:46|root|(null)|gpu|cpu=1,node=1,billing=1|cpu=1,node=1,billing=1|n1|None|1|N/A|gres/gpu:a100:8|1|0|0:00|(null)|
12|12|N/A|RUNNING|4294901748|0|5:00|2026-12-04T10:47:46|2026-12-04T10:47:46|root|(null)|gpu|cpu=1,node=1,billing=1|cpu=1,node=1,billing=1|n3|None|1|gres/gpu:v100:2|N/A|1|0|0:00|(null)|
";
        for text in [v22, v24] {
            let j = parse_squeue(text).unwrap();
            let got: Vec<(u32, Vec<String>, Option<&str>)> =
                j.iter().map(|j| (j.gpus, j.gpu_types.clone(), j.constraint.as_deref())).collect();
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            assert_eq!(
                got,
                vec![
                    (2, s(&["a100"]), Some("ib&nvme")),
                    (2, s(&[]), Some("[ib|nvme]")),
                    (8, s(&["a100"]), None),
                    (2, s(&["v100"]), None)
                ],
                "{text}"
            );
            assert_eq!((j[1].reason.as_str(), j[1].tasks()), ("Priority", 1));
            assert_eq!(j[3].alloc, vec![("n3".to_string(), 2)]);
        }
        let n = parse_sinfo(
            "n1|gpu:a100:8|2|4000|mixed-|gpu|ib,nvme\nn2|gpu:a100:8|2|4000|mixed-|gpu|ib\n\
             n3|gpu:v100:4|2|4000|mixed|gpu|(null)\nn3|gpu:v100:4|2|4000|mixed|other|(null)\n",
        )
        .unwrap();
        let got: Vec<(&str, u32, Vec<String>, Vec<String>)> =
            n.iter().map(|n| (n.name.as_str(), n.gpus, n.gpu_types.clone(), n.features.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("n1", 8, vec!["a100".to_string()], vec!["ib".to_string(), "nvme".to_string()]),
                ("n2", 8, vec!["a100".to_string()], vec!["ib".to_string()]),
                ("n3", 4, vec!["v100".to_string()], vec![])
            ]
        );
    }

    /// Lines as Slurm 22.05 prints them on the dev cluster with `topology/tree`
    /// (`slurm-dev-cluster.sh start DIR --topology`): `sbatch --switches=1 --gpus=10 -N2` (the
    /// controller's default wait, 5 minutes), a job without, and `--switches=2@1:00`.
    #[test]
    fn reads_switches() {
        let text = "\
2|2|N/A|PENDING|4294901758|0|5:00|2026-12-05T20:24:49|2027-12-05T20:24:49|root|(null)|gpu|cpu=2,mem=8000M,node=2,billing=2|cpu=2,mem=8000M,node=2,billing=2||Resources|2|gres:gpu:10|N/A|2|1|5:00|(null)|
1|1|N/A|RUNNING|4294901759|0|365-00:00:00|2026-12-05T20:24:49|2026-12-05T20:24:49|root|(null)|gpu|cpu=1,node=1,billing=1|cpu=1,node=1,billing=1|n2|None|1|N/A|gres:gpu:8|1|0|0:00|(null)|
4|4|N/A|RUNNING|4294901756|0|5:00|2026-12-05T20:28:34|2026-12-05T20:28:34|root|(null)|gpu|cpu=1,node=1,billing=1|cpu=1,node=1,billing=1|n1|None|1|gres:gpu:2|N/A|1|2|1:00|(null)|
";
        let j = parse_squeue(text).unwrap();
        let got: Vec<(u64, u32, u32, u64)> = j.iter().map(|j| (j.id, j.gpus, j.switches, j.switch_wait_s)).collect();
        assert_eq!(got, vec![(2, 10, 1, 300), (1, 8, 0, 0), (4, 2, 2, 60)]);
        let e = parse_squeue(&text.replace("|1|5:00|", "|one|5:00|")).unwrap_err().to_string();
        assert!(e.contains("line 1, field ReqSwitch") && e.contains("`one`"), "{e}");
    }

    #[test]
    fn bad_squeue_lines_name_line_and_field() {
        let line = |prio: &str| {
            format!(
                "5|5|N/A|PENDING|{prio}|0|5:00|2026-12-01T05:44:02|N/A|u|a|gpu|gres/gpu=1|N/A||Priority|1|N/A|N/A|1|0|0:00|(null)|\n"
            )
        };
        let e = parse_squeue(&line("high")).unwrap_err().to_string();
        assert!(e.contains("line 1, field PriorityLong") && e.contains("`high`"), "{e}");
        let e = parse_squeue("5|5|N/A\n").unwrap_err().to_string();
        assert!(e.contains("expected 23"), "{e}");
        let e = parse_squeue(&line("1").replace("2026-12-01T05:44:02", "yesterday")).unwrap_err().to_string();
        assert!(e.contains("SubmitTime"), "{e}");
    }
}
