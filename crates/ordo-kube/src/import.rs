//! `ordo kube import`: the scheduler's own audit log (pods seen pending, bound, ended) turned
//! into a workload that `compare`, `report` and `tune` read, as `ordo slurm import` does for Slurm.

use crate::audit::AuditRecord;
use ordo_core::{Job, JobId, Workload};
use std::collections::BTreeMap;

/// What an import kept and left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Jobs in the workload (a pod, or a gang as one job).
    pub jobs: usize,
    /// Pods seen pending that were never bound (deleted while pending, or still waiting).
    pub never_started: usize,
    /// Pods bound that had not ended when the log stops.
    pub still_running: usize,
    /// Pods evicted by a preemptive policy (their run is cut short: left out).
    pub evicted: usize,
}

#[derive(Debug, Default)]
struct Seen {
    submit: Option<i64>,
    gpus: u32,
    cpu_milli: u64,
    mem_bytes: u64,
    user: String,
    namespace: String,
    estimate_ms: Option<i64>,
    gang: Option<String>,
    pod: String,
    start: Option<i64>,
    end: Option<i64>,
    evicted: bool,
}

fn text(v: &serde_json::Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

/// Builds the workload from an audit log's records: one job per pod (a gang: one job over all
/// its pods, from its first pod's creation to its last pod's end), submitted at its pod's
/// creation time, run from its binding to its end, with its user (the `ordo.dev/user`
/// annotation, else its namespace) and its namespace as group. Pods that never started,
/// have not ended or were evicted are counted and left out.
pub fn workload(records: &[AuditRecord]) -> (Workload, ImportStats) {
    let mut pods: BTreeMap<String, Seen> = BTreeMap::new();
    for r in records {
        let d = &r.detail;
        match r.kind.as_str() {
            "submit" => {
                let uid = text(d, "uid");
                let s = pods.entry(uid).or_default();
                s.submit = Some(d["created"].as_i64().unwrap_or(r.time));
                s.gpus = d["gpus"].as_u64().unwrap_or(0) as u32;
                s.cpu_milli = d["cpu_milli"].as_u64().unwrap_or(0);
                s.mem_bytes = d["mem_bytes"].as_u64().unwrap_or(0);
                s.user = text(d, "user");
                s.pod = text(d, "pod");
                s.namespace = text(d, "namespace");
                s.estimate_ms = d["estimate_ms"].as_i64();
                s.gang = d["gang"]["name"].as_str().map(|g| format!("{}/{g}", s.namespace));
            }
            "start" => {
                for uid in d["uids"].as_array().into_iter().flatten().filter_map(|u| u.as_str()) {
                    if let Some(s) = pods.get_mut(uid) {
                        // A pod evicted and bound again (same uid) keeps its first start.
                        s.start.get_or_insert(r.time);
                    }
                }
            }
            "end" => {
                if let Some(s) = pods.get_mut(d["uid"].as_str().unwrap_or_default()) {
                    s.end = Some(r.time);
                    s.evicted |= d["evicted"].as_bool().unwrap_or(false);
                }
            }
            _ => {}
        }
    }
    let mut stats = ImportStats::default();
    // Units: a pod by uid, or a gang by namespace/name.
    let mut units: BTreeMap<String, Vec<&Seen>> = BTreeMap::new();
    for (uid, s) in &pods {
        if s.submit.is_none() {
            continue;
        }
        // A unit per gang, else per pod (by uid: a pod deleted and made again is another job).
        units.entry(s.gang.clone().unwrap_or_else(|| format!("{}\u{0}{uid}", s.pod))).or_default().push(s);
    }
    let mut w = Workload::default();
    let mut rows: Vec<Job> = Vec::new();
    for (name, members) in units {
        let n = members.len();
        if members.iter().any(|s| s.evicted) {
            stats.evicted += n;
            continue;
        }
        if members.iter().any(|s| s.start.is_none()) {
            stats.never_started += n;
            continue;
        }
        if members.iter().any(|s| s.end.is_none()) {
            stats.still_running += n;
            continue;
        }
        let submit = members.iter().filter_map(|s| s.submit).min().unwrap_or(0);
        let start = members.iter().filter_map(|s| s.start).min().unwrap_or(submit);
        let end = members.iter().filter_map(|s| s.end).max().unwrap_or(start);
        let first = members[0];
        let user = if first.user.is_empty() { first.namespace.clone() } else { first.user.clone() };
        let cpus = members.iter().map(|s| s.cpu_milli).sum::<u64>().div_ceil(1000);
        let mem = members.iter().map(|s| s.mem_bytes).sum::<u64>().div_ceil(1 << 20);
        rows.push(Job {
            id: JobId(0),
            // `namespace/pod`, or `namespace/gang`.
            name: name.split('\u{0}').next().unwrap_or_default().to_string(),
            user: w.user_index(&user),
            group: w.group_index(&first.namespace),
            // A start before the creation (clock skew between the API server and ordo) is read as no wait.
            submit: submit.min(start),
            gpus: members.iter().map(|s| s.gpus).sum(),
            cpus: (cpus > 0).then(|| cpus.min(u32::MAX as u64) as u32),
            mem_mib: (mem > 0).then_some(mem),
            runtime: (end - start).max(1),
            estimate: first.estimate_ms,
            ..Job::default()
        });
    }
    // Times from the first submit on, as the trace readers give them.
    let t0 = rows.iter().map(|j| j.submit).min().unwrap_or(0);
    for j in &mut rows {
        j.submit -= t0;
    }
    for (i, j) in rows.iter_mut().enumerate() {
        j.id = JobId(i as u32);
    }
    w.jobs = rows;
    w.renumber();
    stats.jobs = w.jobs.len();
    (w, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(time: i64, kind: &str, detail: serde_json::Value) -> AuditRecord {
        AuditRecord { id: 0, time, actor: "x".into(), kind: kind.into(), job: None, policy: "fifo".into(), detail }
    }

    fn submit(uid: &str, created: i64, gpus: u32, gang: Option<&str>) -> AuditRecord {
        rec(
            created + 5,
            "submit",
            json!({"pod": format!("team-a/{uid}"), "uid": uid, "namespace": "team-a", "user": if uid == "p1" { "alice" } else { "" },
                "gpus": gpus, "cpu_milli": 1500, "mem_bytes": 3u64 << 29, "created": created, "estimate_ms": 600_000,
                "gang": gang.map(|g| json!({"name": g, "size": 2}))}),
        )
    }

    /// Worked out by hand: p1 waits 1 s and runs 10 s; the gang g (p2, p3) is created at 2 s
    /// and 2.5 s, bound at 20 s, ends at 50 s and 52 s; p4 never starts; p5 is evicted; p6
    /// is still running.
    #[test]
    fn pods_and_gangs_become_jobs() {
        let t = 1_000_000;
        let log = vec![
            submit("p1", t, 1, None),
            submit("p2", t + 2_000, 2, Some("g")),
            submit("p3", t + 2_500, 2, Some("g")),
            submit("p4", t + 3_000, 8, None),
            submit("p5", t + 3_000, 1, None),
            submit("p6", t + 3_000, 1, None),
            rec(t + 1_000, "start", json!({"uids": ["p1"]})),
            rec(t + 4_000, "start", json!({"uids": ["p5"]})),
            rec(t + 4_000, "start", json!({"uids": ["p6"]})),
            rec(t + 11_000, "end", json!({"uid": "p1", "evicted": false})),
            rec(t + 20_000, "start", json!({"uids": ["p2", "p3"]})),
            rec(t + 30_000, "end", json!({"uid": "p5", "evicted": true})),
            rec(t + 50_000, "end", json!({"uid": "p2", "evicted": false})),
            rec(t + 52_000, "end", json!({"uid": "p3", "evicted": false})),
            rec(t + 60_000, "end", json!({"uid": "p4", "evicted": false})),
        ];
        let (w, st) = workload(&log);
        assert_eq!(st, ImportStats { jobs: 2, never_started: 1, still_running: 1, evicted: 1 });
        let p1 = &w.jobs[0];
        assert_eq!((p1.name.as_str(), p1.submit, p1.runtime, p1.gpus), ("team-a/p1", 0, 10_000, 1));
        assert_eq!(w.users[p1.user as usize], "alice");
        assert_eq!((p1.cpus, p1.mem_mib, p1.estimate), (Some(2), Some(1536), Some(600_000)));
        let g = &w.jobs[1];
        assert_eq!((g.name.as_str(), g.submit, g.runtime, g.gpus), ("team-a/g", 2_000, 32_000, 4));
        // No user annotation: the namespace is the user.
        assert_eq!(w.users[g.user as usize], "team-a");
        assert_eq!(w.groups[g.group as usize], "team-a");
    }
}
