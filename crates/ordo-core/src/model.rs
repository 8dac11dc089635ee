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
    /// Which GPUs it accepts and how fast it runs on each (typed clusters; see
    /// [`crate::pools`]); `None`: any GPU, speed 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Box<GpuNeeds>>,
}

/// What a job asks of the GPUs it runs on, beyond their number: acceptable models, memory,
/// node features, and the class and model its run time refers to (for the speed matrix,
/// [`crate::speed::Speeds`]). Names compare lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuNeeds {
    /// Acceptable GPU models; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Minimum memory of each GPU, MiB; 0: any.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_mem_mib: u64,
    /// Node features it requires (all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Its class in the speed matrix (a model name, a workload type); `None`: the default row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The GPU model its run time was measured on; `None`: speed 1 (the reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<String>,
    /// The topology level its nodes must or should share (`required:block`,
    /// `preferred:switch`; [`crate::topology`]); `None`: placed as low as it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topology::TopoAsk>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

impl GpuNeeds {
    /// True when it constrains placement (models, memory or features).
    pub fn constrains(&self) -> bool {
        !self.models.is_empty() || self.min_mem_mib > 0 || !self.features.is_empty()
    }

    /// In words: `a100|h100, >= 40 GiB, features ib`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.models.is_empty() {
            parts.push(self.models.join("|"));
        }
        if self.min_mem_mib > 0 {
            parts.push(format!(">= {} GPU memory", crate::words::mib(self.min_mem_mib)));
        }
        if !self.features.is_empty() {
            parts.push(format!("features {}", self.features.join(",")));
        }
        if parts.is_empty() {
            "any GPU".to_string()
        } else {
            parts.join(", ")
        }
    }
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
    /// Memory of each GPU in MiB, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// Node features (Slurm's `Features`, labels), lowercased.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

impl NodeSpec {
    /// A node of `gpus` GPUs and nothing else known.
    pub fn new(name: impl Into<String>, gpus: u32) -> Self {
        NodeSpec {
            name: name.into(),
            gpus,
            cpus: None,
            mem_mib: None,
            gpu_model: None,
            gpu_mem_mib: None,
            features: Vec::new(),
        }
    }
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
    /// A `COUNTxGPUS[:MODEL]` term is malformed.
    #[error("cluster spec term `{term}`: expected COUNTxGPUS[:MODEL] such as `64x8` or `16x8:a100` ({why})")]
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
    /// Parses `64x8` or `32x8,16x4` (node count x GPUs per node, comma-separated groups), each
    /// group optionally typed with its GPU model: `16x8:a100,32x8:v100`.
    pub fn parse(spec: &str) -> Result<Self, ClusterParseError> {
        let mut nodes = Vec::new();
        for term in spec.split(',').map(str::trim) {
            let bad = |why| ClusterParseError::BadTerm { term: term.to_string(), why };
            let (shape, model) = match term.split_once(':') {
                Some((s, m)) => {
                    let m = m.trim();
                    if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                        return Err(bad(
                            "the model is empty or has characters other than letters, digits, `-`, `_`, `.`",
                        ));
                    }
                    (s, Some(m.to_ascii_lowercase()))
                }
                None => (term, None),
            };
            let (count, gpus) = shape.split_once(['x', 'X']).ok_or_else(|| bad("no `x`"))?;
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
                let mut n = NodeSpec::new(format!("n{}", base + i as usize), gpus);
                n.gpu_model = model.clone();
                n.gpu_mem_mib = model.as_deref().and_then(crate::speed::known_memory_mib);
                nodes.push(n);
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

    /// A short description such as `64x8`, `32x8,16x4` or `16x8:a100,32x8:v100`.
    pub fn describe(&self) -> String {
        let mut groups: Vec<(u32, u32, Option<&str>)> = Vec::new();
        for n in &self.nodes {
            let m = n.gpu_model.as_deref();
            match groups.last_mut() {
                Some((c, g, gm)) if *g == n.gpus && *gm == m => *c += 1,
                _ => groups.push((1, n.gpus, m)),
            }
        }
        groups
            .iter()
            .map(|(c, g, m)| match m {
                Some(m) => format!("{c}x{g}:{m}"),
                None => format!("{c}x{g}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The distinct GPU models of its nodes, in order of first appearance.
    pub fn gpu_models(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self.nodes.iter().filter_map(|n| n.gpu_model.as_ref()) {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
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
        let typed = ClusterSpec::parse("2x8:A100, 1x4:v100").unwrap();
        assert_eq!(typed.describe(), "2x8:a100,1x4:v100");
        assert_eq!(typed.gpu_models(), vec!["a100".to_string(), "v100".to_string()]);
        assert_eq!(typed.nodes[2].gpu_mem_mib, Some(32 * 1024));
        assert!(ClusterSpec::parse("2x8:").is_err());
        assert!(ClusterSpec::parse("2x8:a b").is_err());
    }
}
