//! [`SlurmCli`]: a Slurm cluster through its command-line clients (`sinfo`, `squeue`,
//! `scontrol`, `sacct`), every call bounded by a timeout, updates sent in batches to one
//! `scontrol` reading its commands from standard input.

use crate::client::{run, Backend, Batch};
use crate::config::SlurmConfig;
use crate::error::{means_job_gone, means_unreachable, SlurmError};
use crate::job::{SlurmJob, SlurmNode};
use crate::squeue::{parse_sinfo, parse_squeue, squeue_format, SINFO_FORMAT};
use crate::topology::SlurmTopology;
use std::time::{Duration, Instant};

/// A handle on a Slurm cluster through its command-line clients. Every call is bounded by
/// `timeout`: Slurm clients block while the controller is down, and the driver must not.
#[derive(Debug, Clone)]
pub struct SlurmCli {
    /// Longest time one client call may take before it is killed and reported as unreachable.
    pub timeout: Duration,
}

/// The environment of every read: times in UTC, array task lists written in full.
const READ_ENV: [(&str, &str); 2] = [("TZ", "UTC"), ("SLURM_BITSTR_LEN", "0")];

impl SlurmCli {
    /// A client with the given per-call timeout.
    pub fn new(timeout: Duration) -> Self {
        SlurmCli { timeout }
    }

    fn read(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        run(program, args, &READ_ENV, None, self.timeout)?.into_result()
    }

    /// Raw `sacct --parsable2` accounting text for all users (allocations only, `-X`), with the
    /// columns ordo's `sacct` trace format reads. `since`/`until` are passed to `-S`/`-E` as
    /// given (Slurm date syntax, e.g. `2024-05-01` or `now-7days`); `partition` to `-r`.
    pub fn sacct(
        &self,
        since: Option<&str>,
        until: Option<&str>,
        partition: Option<&str>,
    ) -> Result<String, SlurmError> {
        let mut args = vec!["--parsable2", "--allusers", "-X", "--format", SACCT_FORMAT];
        // Without -S, sacct shows only today's jobs; default to everything it has.
        args.push("-S");
        args.push(since.unwrap_or("1970-01-01T00:00:00"));
        if let Some(u) = until {
            args.push("-E");
            args.push(u);
        }
        if let Some(p) = partition {
            args.push("-r");
            args.push(p);
        }
        run("sacct", &args, &[], None, self.timeout)?.into_result()
    }

    /// Sends `commands` (one per line) to one `scontrol` and sorts its answers by job: `scontrol`
    /// prints `MESSAGE for job N` (or `N: MESSAGE` for array tasks) for each refusal.
    fn scontrol_batch(&self, jobs: &[u64], commands: String) -> Batch {
        let t0 = Instant::now();
        let mut b = Batch::default();
        let out = match run("scontrol", &[], &[], Some(&commands), self.timeout) {
            Ok(o) => o,
            Err(e) => {
                // Killed while the controller did not answer: some of these may have been applied.
                b.unknown = jobs.to_vec();
                b.stopped = Some(e);
                b.elapsed = t0.elapsed();
                return b;
            }
        };
        let mut refused: Vec<(u64, String)> = Vec::new();
        let mut other: Vec<String> = Vec::new();
        for line in out.stderr.lines().map(str::trim).filter(|l| !l.is_empty()) {
            match job_of_message(line) {
                Some((job, msg)) if jobs.contains(&job) => refused.push((job, msg)),
                _ => other.push(line.to_string()),
            }
        }
        let outage = refused.iter().any(|(_, m)| means_unreachable(m)) || other.iter().any(|m| means_unreachable(m));
        for &job in jobs {
            match refused.iter().find(|(j, _)| *j == job) {
                Some((_, m)) if means_unreachable(m) => b.unknown.push(job),
                Some((_, m)) if means_job_gone(m) => b.failed.push((job, m.clone())),
                Some((_, m)) => {
                    b.failed.push((job, m.clone()));
                    b.stopped.get_or_insert_with(|| SlurmError::Failed {
                        cmd: "scontrol".into(),
                        status: out.status.clone(),
                        stderr: m.clone(),
                    });
                }
                // After an outage began, later updates in the batch cannot be trusted.
                None if outage && !b.unknown.is_empty() => b.unknown.push(job),
                None => b.done.push(job),
            }
        }
        if outage {
            b.stopped = Some(SlurmError::Failed {
                cmd: "scontrol".into(),
                status: out.status.clone(),
                stderr: refused.iter().map(|(_, m)| m.clone()).chain(other).collect::<Vec<_>>().join("; "),
            });
        } else if !other.is_empty() && b.stopped.is_none() && !out.success {
            b.stopped =
                Some(SlurmError::Failed { cmd: "scontrol".into(), status: out.status, stderr: other.join("; ") });
        }
        b.elapsed = t0.elapsed();
        b
    }
}

/// The job a `scontrol` message is about: `MESSAGE for job N` or `N: MESSAGE` (`N` may be an
/// array task `A_T`, reported as `A`).
fn job_of_message(line: &str) -> Option<(u64, String)> {
    let id = |s: &str| s.trim().split('_').next().and_then(|x| x.parse::<u64>().ok());
    if let Some((msg, j)) = line.rsplit_once(" for job ") {
        return id(j).map(|j| (j, msg.to_string()));
    }
    let (j, msg) = line.split_once(": ")?;
    id(j).map(|j| (j, msg.to_string()))
}

impl Backend for SlurmCli {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        parse_sinfo(&self.read("sinfo", &["-h", "-N", "-o", SINFO_FORMAT])?)
    }

    fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let format = squeue_format();
        parse_squeue(&self.read("squeue", &["-h", "--all", "-t", "PD,R,CF,CG", "-O", &format])?)
    }

    fn config(&self) -> Result<Option<SlurmConfig>, SlurmError> {
        SlurmConfig::parse(&self.read("scontrol", &["show", "config"])?).map(Some)
    }

    fn topology(&self) -> Result<Option<SlurmTopology>, SlurmError> {
        crate::topology::from_scontrol(&self.read("scontrol", &["show", "topology"])?)
    }

    fn set_priorities(&self, changes: &[(u64, u64)]) -> Batch {
        let jobs: Vec<u64> = changes.iter().map(|c| c.0).collect();
        let commands: String =
            changes.iter().map(|&(j, p)| format!("update JobId={j} Priority={}\n", p.max(1))).collect();
        self.scontrol_batch(&jobs, commands)
    }

    fn reset_priorities(&self, jobs: &[u64]) -> Batch {
        let commands: String = jobs.iter().map(|j| format!("release {j}\n")).collect();
        self.scontrol_batch(jobs, commands)
    }

    fn describe(&self) -> String {
        "scontrol".into()
    }
}

/// The `sacct --format` columns ordo imports.
pub const SACCT_FORMAT: &str =
    "JobID,User,Account,Partition,Submit,Start,End,Elapsed,Timelimit,AllocTRES,ReqTRES,State,Priority,Constraints";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scontrol_messages() {
        assert_eq!(
            job_of_message("Invalid job id specified for job 999999"),
            Some((999_999, "Invalid job id specified".into()))
        );
        assert_eq!(job_of_message("4_7: Job has already finished"), Some((4, "Job has already finished".into())));
        assert_eq!(job_of_message("scontrol: error: something"), None);
    }
}
