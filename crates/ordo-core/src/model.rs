//! The cluster and job model: what a node offers and what a job asks for.
//! Plain data; every other module reads these types.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a job inside its [`Workload`] (dense, `0..jobs.len()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u32);

impl JobId {
    /// The index as `usize`, for slice access.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One job as the scheduler sees it. `Default` gives a 0-GPU, 0-length job of user and group 0,
/// for building jobs field by field (`Job { gpus: 2, ..Job::default() }`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Dense index in the workload.
    pub id: JobId,
    /// The job's own name or id from its source (trace id, server id).
    pub name: String,
    /// Index into [`Workload::users`].
    pub user: u32,
    /// Index into [`Workload::groups`].
    pub group: u32,
    /// Submit (arrival) time.
    pub submit: Time,
    /// GPUs requested (may be 0 for CPU-only jobs).
    pub gpus: u32,
    /// CPU cores requested, if known.
    pub cpus: Option<u32>,
    /// Memory requested in MiB, if known.
    pub mem_mib: Option<u64>,
    /// True run time (from the trace). The simulator uses it to end the job; policies must not
    /// read it unless they run in oracle mode (see [`Job::estimate_or_oracle`]).
    pub runtime: Time,
    /// The user's run-time estimate (time limit), if any.
    pub estimate: Option<Time>,
    /// A static priority (higher runs first where a policy uses it), if any.
    pub priority: Option<i64>,
    /// For a job that asks for a fraction of one GPU (`gpus == 1`): its share in thousandths
    /// (1..=999), as Alibaba's `gpu_milli`. `None`: whole GPUs.
    pub gpu_milli: Option<u32>,
    /// Queue, partition or QoS class name from the source, if any.
    pub queue: Option<String>,
    /// Jobs it waits on (`afterok`, `afterany`, `afternotok`): it joins the queue only once
    /// they are met, and never runs if one can never be met (see [`crate::deps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<crate::deps::Dep>,
    /// It ended unsuccessfully in its source (failed, timed out, cancelled): what
    /// `afterok`/`afternotok` dependencies on it see. It still runs for its run time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// When it really started in its source (an imported accounting's start time; the
    /// workload's time scale), if known. Only the as-run row reads it (`ordo_sim::asrun`): the
    /// simulator and the policies never do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Time>,
}

impl Job {
    /// The run-time estimate a policy may use: the user's estimate if present, otherwise the
    /// true run time (the "oracle" case, which every output must mark).
    pub fn estimate_or_oracle(&self) -> Time {
        self.estimate.unwrap_or(self.runtime)
    }

    /// Its share of one GPU in thousandths when it asks a fraction ([`fractional_share`]).
    pub fn share_milli(&self) -> Option<u32> {
        fractional_share(self.gpus, self.gpu_milli)
    }

    /// GPU-seconds of true work (GPUs x run time), in GPU-milliseconds; a fractional job
    /// counts its share (250 thousandths for 1 s: 250 GPU-ms).
    pub fn gpu_time(&self) -> i128 {
        match self.share_milli() {
            Some(m) => m as i128 * self.runtime as i128 / 1000,
            None => self.gpus as i128 * self.runtime as i128,
        }
    }
}

/// The share of one GPU (thousandths) a job asking `gpus` GPUs and `gpu_milli` really holds:
/// a share counts only for a one-GPU job and below 1000; anything else is whole GPUs (`None`).
#[inline]
pub fn fractional_share(gpus: u32, gpu_milli: Option<u32>) -> Option<u32> {
    gpu_milli.filter(|m| gpus == 1 && (1..1000).contains(m))
}

/// A set of jobs plus the names their user and group indices refer to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Jobs, indexed by [`JobId`]; not necessarily sorted by submit time.
    pub jobs: Vec<Job>,
    /// User names; `Job::user` indexes this.
    pub users: Vec<String>,
    /// Group names; `Job::group` indexes this.
    pub groups: Vec<String>,
}

impl Workload {
    /// Interns a user name and returns its index.
    pub fn user_index(&mut self, name: &str) -> u32 {
        intern(&mut self.users, name)
    }

    /// Interns a group name and returns its index.
    pub fn group_index(&mut self, name: &str) -> u32 {
        intern(&mut self.groups, name)
    }

    /// True when no job carries a user estimate, so estimate-based policies run as oracles.
    pub fn has_estimates(&self) -> bool {
        !self.jobs.is_empty() && self.jobs.iter().all(|j| j.estimate.is_some())
    }

    /// Re-numbers jobs densely in (submit, original index) order so that `JobId(i)` is `jobs[i]`.
    /// Dependencies ([`Job::after`]) follow their jobs to the new ids.
    pub fn renumber(&mut self) {
        self.jobs.sort_by_key(|j| (j.submit, j.id));
        let deps = self.jobs.iter().any(|j| !j.after.is_empty());
        let mut new_of: std::collections::HashMap<JobId, JobId> = std::collections::HashMap::new();
        for (i, j) in self.jobs.iter_mut().enumerate() {
            if deps {
                new_of.insert(j.id, JobId(i as u32));
            }
            j.id = JobId(i as u32);
        }
        if deps {
            for j in &mut self.jobs {
                // A dependency on a job not in the workload is dropped (taken as met).
                j.after.retain_mut(|d| match new_of.get(&d.job) {
                    Some(&n) => {
                        d.job = n;
                        true
                    }
                    None => false,
                });
            }
        }
    }
}

fn intern(names: &mut Vec<String>, name: &str) -> u32 {
    // Linear search is fine for the handful of users traces have; a map would not be faster
    // below a few hundred names, and interning happens once per job at load time.
    if let Some(i) = names.iter().rposition(|n| n == name) {
        return i as u32;
    }
    names.push(name.to_string());
    (names.len() - 1) as u32
}

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// GPUs on the node.
    pub gpus: u32,
    /// CPU cores, if modelled.
    pub cpus: Option<u32>,
    /// Memory in MiB, if modelled.
    pub mem_mib: Option<u64>,
    /// GPU model name, if known.
    pub gpu_model: Option<String>,
}

/// A cluster: a list of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// The nodes, in a fixed order (placement breaks ties by this order).
    pub nodes: Vec<NodeSpec>,
}

/// Why a cluster description could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClusterParseError {
    /// A `COUNTxGPUS` term is malformed.
    #[error("cluster spec term `{term}`: expected COUNTxGPUS such as `64x8` ({why})")]
    BadTerm {
        /// The offending term.
        term: String,
        /// What was wrong.
        why: &'static str,
    },
    /// The cluster has no GPUs at all.
    #[error("cluster spec `{0}` has no nodes")]
    Empty(String),
}

impl ClusterSpec {
    /// Parses `64x8` or `32x8,16x4` (node count x GPUs per node, comma-separated groups).
    pub fn parse(spec: &str) -> Result<Self, ClusterParseError> {
        let mut nodes = Vec::new();
        for term in spec.split(',').map(str::trim) {
            let bad = |why| ClusterParseError::BadTerm { term: term.to_string(), why };
            let (count, gpus) = term.split_once(['x', 'X']).ok_or_else(|| bad("no `x`"))?;
            let count: u32 = count.trim().parse().map_err(|_| bad("node count is not a whole number"))?;
            let gpus: u32 = gpus.trim().parse().map_err(|_| bad("GPUs per node is not a whole number"))?;
            if count == 0 {
                return Err(bad("node count must be at least 1"));
            }
            if count > 1_000_000 || gpus > 1024 {
                return Err(bad("too large (at most 1,000,000 nodes of 1,024 GPUs)"));
            }
            let base = nodes.len();
            for i in 0..count {
                nodes.push(NodeSpec {
                    name: format!("n{}", base + i as usize),
                    gpus,
                    cpus: None,
                    mem_mib: None,
                    gpu_model: None,
                });
            }
        }
        if nodes.is_empty() {
            return Err(ClusterParseError::Empty(spec.to_string()));
        }
        Ok(ClusterSpec { nodes })
    }

    /// A cluster of `count` identical nodes with `gpus` GPUs each.
    pub fn uniform(count: u32, gpus: u32) -> Self {
        ClusterSpec::parse(&format!("{count}x{gpus}")).expect("uniform spec is valid")
    }

    /// Total GPUs.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| n.gpus as u64).sum()
    }

    /// GPUs of the largest node.
    pub fn max_node_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).max().unwrap_or(0)
    }

    /// A short description such as `64x8` or `32x8,16x4`.
    pub fn describe(&self) -> String {
        let mut groups: Vec<(u32, u32)> = Vec::new();
        for n in &self.nodes {
            match groups.last_mut() {
                Some((c, g)) if *g == n.gpus => *c += 1,
                _ => groups.push((1, n.gpus)),
            }
        }
        groups.iter().map(|(c, g)| format!("{c}x{g}")).collect::<Vec<_>>().join(",")
    }

    /// [`describe`](Self::describe) when that is short (at most 40 characters); for clusters
    /// with many node groups (an Alibaba node list), node counts per GPU size, largest first:
    /// `1213 nodes: 395x8,...`.
    pub fn summary(&self) -> String {
        let d = self.describe();
        if d.len() <= 40 {
            return d;
        }
        let mut by: Vec<(u32, usize)> = Vec::new();
        for n in &self.nodes {
            match by.iter_mut().find(|b| b.0 == n.gpus) {
                Some(b) => b.1 += 1,
                None => by.push((n.gpus, 1)),
            }
        }
        by.sort_by_key(|b| std::cmp::Reverse(b.0));
        let parts: Vec<String> = by.iter().map(|(g, n)| format!("{n}x{g}")).collect();
        format!("{} nodes: {}", self.nodes.len(), parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_specs() {
        let c = ClusterSpec::parse("2x8, 1x4").unwrap();
        assert_eq!(c.nodes.len(), 3);
        assert_eq!(c.total_gpus(), 20);
        assert_eq!(c.describe(), "2x8,1x4");
        assert_eq!(c.summary(), "2x8,1x4");
        let mixed = ClusterSpec::parse(&["1x8", "1x4"].repeat(10).join(",")).unwrap();
        assert_eq!(mixed.summary(), "20 nodes: 10x8,10x4");
        assert!(ClusterSpec::parse("8").is_err());
        assert!(ClusterSpec::parse("0x8").is_err());
        assert!(ClusterSpec::parse("ax8").is_err());
    }
}
