//! Pods and nodes as the scheduler reads them: what a pod asks (GPUs, CPU, memory, gang,
//! estimate, user) and what a node offers, from the API objects, never panicking on bad input.

use crate::affinity::{Constraints, Requirement, Term};
pub use crate::affinity::{Taint, Toleration};
use crate::quantity::Quantity;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod, ResourceRequirements};
use std::collections::BTreeMap;

/// The annotation prefix of everything ordo reads from a pod.
pub const PREFIX: &str = "ordo.dev/";
/// Gang name: pods with the same name in one namespace are bound all or none.
pub const ANN_GANG: &str = "ordo.dev/gang";
/// Gang size: how many pods the gang has (every member says the same).
pub const ANN_GANG_SIZE: &str = "ordo.dev/gang-size";
/// The node label that names its GPU model by default (NVIDIA GPU feature discovery's).
pub const DEFAULT_GPU_MODEL_LABEL: &str = "nvidia.com/gpu.product";
/// The node label with the memory of each GPU in MiB (NVIDIA GPU feature discovery's).
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// Run-time estimate (`2h`, `30m`, `90s`): what `sjf`, backfill and expected starts read.
pub const ANN_ESTIMATE: &str = "ordo.dev/estimate";
/// The user a pod runs for (fair-share policies, import); default: its namespace.
pub const ANN_USER: &str = "ordo.dev/user";
/// The topology level a pod's (gang's) nodes must or should share: `required:block`,
/// `preferred:rack` (levels from `--topology-labels`).
pub const ANN_TOPOLOGY: &str = "ordo.dev/topology";

/// Resources asked or offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    /// GPUs (the configured extended resource, `nvidia.com/gpu` by default).
    pub gpus: u32,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub mem_bytes: u64,
}

impl Ask {
    /// Sum of two asks.
    pub fn plus(self, o: Ask) -> Ask {
        Ask {
            gpus: self.gpus.saturating_add(o.gpus),
            cpu_milli: self.cpu_milli.saturating_add(o.cpu_milli),
            mem_bytes: self.mem_bytes.saturating_add(o.mem_bytes),
        }
    }

    /// `self` less `o`, floored at zero.
    pub fn minus(self, o: Ask) -> Ask {
        Ask {
            gpus: self.gpus.saturating_sub(o.gpus),
            cpu_milli: self.cpu_milli.saturating_sub(o.cpu_milli),
            mem_bytes: self.mem_bytes.saturating_sub(o.mem_bytes),
        }
    }

    /// Whether `o` fits in `self`.
    pub fn holds(self, o: Ask) -> bool {
        self.gpus >= o.gpus && self.cpu_milli >= o.cpu_milli && self.mem_bytes >= o.mem_bytes
    }

    /// Memory in MiB, rounded up (what ordo-core reads for a request).
    pub fn mem_mib_up(self) -> u64 {
        self.mem_bytes.div_ceil(1 << 20)
    }

    /// Memory in MiB, rounded down (what ordo-core reads for a node).
    pub fn mem_mib_down(self) -> u64 {
        self.mem_bytes >> 20
    }
}

/// A pod's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not yet running (bound or not).
    Pending,
    /// Running.
    Running,
    /// Ended (holds nothing).
    Succeeded,
    /// Ended (holds nothing).
    Failed,
    /// Unknown (its node stopped reporting): still holds its resources.
    Unknown,
}

/// A gang reference: the pod belongs to gang `name` of `size` pods in its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangRef {
    /// Gang name (namespace-local).
    pub name: String,
    /// Pods in the gang.
    pub size: u32,
}

/// A pod as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.schedulerName`.
    pub scheduler: String,
    /// `spec.nodeName`, once bound.
    pub node: Option<String>,
    /// `status.phase`.
    pub phase: Phase,
    /// Being deleted (it holds its resources until it is gone).
    pub terminating: bool,
    /// `metadata.creationTimestamp`, ms since the epoch (the submit time).
    pub created_ms: i64,
    /// When it was bound (`PodScheduled=True`'s transition time), ms since the epoch.
    pub bound_ms: Option<i64>,
    /// What it asks.
    pub ask: Ask,
    /// Its gang, if any.
    pub gang: Option<GangRef>,
    /// User (`ordo.dev/user`, else the namespace).
    pub user: String,
    /// Run-time estimate, ms (`ordo.dev/estimate`, else `spec.activeDeadlineSeconds`).
    pub estimate_ms: Option<i64>,
    /// `spec.priority` (from its PriorityClass).
    pub priority: i64,
    /// What limits it to some nodes: `spec.nodeSelector`, required node affinity, tolerations.
    pub constraints: Constraints,
    /// The topology level it asks (`ordo.dev/topology`), if any.
    pub topology: Option<ordo_core::TopoAsk>,
    /// Why ordo cannot schedule it as written (a bad annotation), if so.
    pub invalid: Option<String>,
    /// The message of its `PodScheduled=False` condition, if it has one.
    pub waiting_message: Option<String>,
    /// The pod's controller (ownerReference with `controller: true`), uid.
    pub owner: Option<String>,
}

impl PodInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether it holds resources on a node: bound and not ended.
    pub fn holds(&self) -> bool {
        self.node.is_some() && !matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// Whether it has ended.
    pub fn ended(&self) -> bool {
        matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// Whether it may go to node `n` (labels, taints; not its room), or the first check that fails.
    pub fn qualifies(&self, n: &NodeInfo) -> Result<(), crate::affinity::Unmet> {
        self.constraints.check(&n.name, &n.labels, &n.taints)
    }
}

/// A node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// `status.allocatable`.
    pub alloc: Ask,
    /// `spec.unschedulable` (cordoned).
    pub cordoned: bool,
    /// `Ready=True`.
    pub ready: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `NoSchedule`/`NoExecute` taints.
    pub taints: Vec<Taint>,
    /// Its GPU model, from the label `ReadConfig::gpu_model_label` (`nvidia.com/gpu.product`).
    pub gpu_model: Option<String>,
    /// Memory of each GPU in MiB, from the label `nvidia.com/gpu.memory`.
    pub gpu_mem_mib: Option<u64>,
    /// Why its allocatable could not be read, if so (it then takes no pods).
    pub invalid: Option<String>,
    /// A label ordo reads that it could not read (the node still takes pods), if so.
    pub warning: Option<String>,
}

impl NodeInfo {
    /// Whether new pods may go there.
    pub fn open(&self) -> bool {
        !self.cordoned && self.ready && self.invalid.is_none()
    }
}

/// What the readers need to know.
#[derive(Debug, Clone)]
pub struct ReadConfig {
    /// The GPU resource name (`nvidia.com/gpu`).
    pub gpu_resource: String,
    /// The node label that names the GPU model (`nvidia.com/gpu.product`).
    pub gpu_model_label: String,
}

impl ReadConfig {
    /// Reads GPUs as `gpu_resource` and models from the default label.
    pub fn new(gpu_resource: &str) -> Self {
        ReadConfig { gpu_resource: gpu_resource.into(), gpu_model_label: DEFAULT_GPU_MODEL_LABEL.into() }
    }
}

/// Why an object cannot be identified at all (it is then ignored, and logged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} without {field}")]
pub struct ObjectError {
    /// `pod` or `node`.
    pub kind: &'static str,
    /// The missing field.
    pub field: &'static str,
}

fn ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_millisecond()
}

/// One container's (or the overhead's) ask for `res`: requests, else limits.
fn ask_of(r: Option<&ResourceRequirements>, cfg: &ReadConfig, errs: &mut Vec<String>) -> Ask {
    let mut a = Ask::default();
    let Some(r) = r else { return a };
    let get = |name: &str| {
        r.requests.as_ref().and_then(|m| m.get(name)).or_else(|| r.limits.as_ref().and_then(|m| m.get(name)))
    };
    if let Some(q) = get(&cfg.gpu_resource) {
        match Quantity::parse(&q.0).map(|q| q.whole()) {
            Ok(Some(g)) if g <= u32::MAX as u64 => a.gpus = g as u32,
            Ok(_) => errs.push(format!("{} `{}` is not a whole number", cfg.gpu_resource, q.0)),
            Err(e) => errs.push(format!("{}: {e}", cfg.gpu_resource)),
        }
    }
    if let Some(q) = get("cpu") {
        match Quantity::parse(&q.0) {
            Ok(v) => a.cpu_milli = v.milli_up(),
            Err(e) => errs.push(format!("cpu: {e}")),
        }
    }
    if let Some(q) = get("memory") {
        match Quantity::parse(&q.0) {
            Ok(v) => a.mem_bytes = v.bytes_up(),
            Err(e) => errs.push(format!("memory: {e}")),
        }
    }
    a
}

fn max_ask(a: Ask, b: Ask) -> Ask {
    Ask { gpus: a.gpus.max(b.gpus), cpu_milli: a.cpu_milli.max(b.cpu_milli), mem_bytes: a.mem_bytes.max(b.mem_bytes) }
}

/// Reads a pod. Fails only for a pod without uid, namespace or name; anything else that cannot
/// be read makes it `invalid` with the reason (it then waits, saying why).
pub fn pod_info(p: &Pod, cfg: &ReadConfig) -> Result<PodInfo, ObjectError> {
    let md = &p.metadata;
    let uid = md.uid.clone().ok_or(ObjectError { kind: "pod", field: "metadata.uid" })?;
    let name = md.name.clone().ok_or(ObjectError { kind: "pod", field: "metadata.name" })?;
    let namespace = md.namespace.clone().ok_or(ObjectError { kind: "pod", field: "metadata.namespace" })?;
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let mut errs = Vec::new();
    // The effective request: the containers' sum, or the largest init container if more
    // (init containers run one at a time, before the others), plus the pod's overhead.
    let mut ask = Ask::default();
    let mut init = Ask::default();
    if let Some(s) = spec {
        for c in &s.containers {
            ask = ask.plus(ask_of(c.resources.as_ref(), cfg, &mut errs));
        }
        for c in s.init_containers.iter().flatten() {
            init = max_ask(init, ask_of(c.resources.as_ref(), cfg, &mut errs));
        }
        if let Some(o) = &s.overhead {
            let r = ResourceRequirements { requests: Some(o.clone()), ..Default::default() };
            ask = max_ask(ask, init).plus(ask_of(Some(&r), cfg, &mut errs));
        } else {
            ask = max_ask(ask, init);
        }
    }
    let ann = md.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(|v| v.trim().to_string());
    let gang = match (get(ANN_GANG), get(ANN_GANG_SIZE)) {
        (None, None) => None,
        (Some(n), Some(s)) => match s.parse::<u32>() {
            Ok(size) if size >= 1 && !n.is_empty() => Some(GangRef { name: n, size }),
            _ => {
                errs.push(format!("annotation {ANN_GANG_SIZE} `{s}` is not a positive whole number"));
                None
            }
        },
        (Some(_), None) => {
            errs.push(format!("annotation {ANN_GANG} without {ANN_GANG_SIZE}"));
            None
        }
        (None, Some(_)) => {
            errs.push(format!("annotation {ANN_GANG_SIZE} without {ANN_GANG}"));
            None
        }
    };
    let estimate_ms = match get(ANN_ESTIMATE) {
        Some(e) => match ordo_core::policy::parse_duration(&e) {
            Some(v) if v > 0 => Some(v),
            _ => {
                errs.push(format!("annotation {ANN_ESTIMATE} `{e}` is not a duration such as 2h, 30m or 90s"));
                None
            }
        },
        None => spec.and_then(|s| s.active_deadline_seconds).filter(|&s| s > 0).map(|s| s.saturating_mul(1000)),
    };
    let topology = match get(ANN_TOPOLOGY) {
        Some(t) => match t.parse::<ordo_core::TopoAsk>() {
            Ok(a) => Some(a),
            Err(e) => {
                errs.push(format!("annotation {ANN_TOPOLOGY}: {e}"));
                None
            }
        },
        None => None,
    };
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => Phase::Running,
        Some("Succeeded") => Phase::Succeeded,
        Some("Failed") => Phase::Failed,
        Some("Unknown") => Phase::Unknown,
        _ => Phase::Pending,
    };
    let conds = status.and_then(|s| s.conditions.as_ref());
    let scheduled = conds.and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let bound_ms = scheduled.filter(|c| c.status == "True").and_then(|c| c.last_transition_time.as_ref()).map(ms);
    let waiting_message = scheduled.filter(|c| c.status == "False").and_then(|c| c.message.clone());
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|ns| {
            let reqs = |v: &Option<Vec<NodeSelectorRequirement>>| -> Vec<Requirement> {
                v.iter()
                    .flatten()
                    .map(|r| Requirement {
                        key: r.key.clone(),
                        operator: r.operator.clone(),
                        values: r.values.clone().unwrap_or_default(),
                    })
                    .collect()
            };
            ns.node_selector_terms
                .iter()
                .map(|t| Term { exprs: reqs(&t.match_expressions), fields: reqs(&t.match_fields) })
                .collect()
        });
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Toleration {
                    key: t.key.clone().unwrap_or_default(),
                    operator: t.operator.clone().unwrap_or_default(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let owner =
        md.owner_references.as_ref().and_then(|o| o.iter().find(|r| r.controller == Some(true))).map(|r| r.uid.clone());
    Ok(PodInfo {
        user: get(ANN_USER).filter(|u| !u.is_empty()).unwrap_or_else(|| namespace.clone()),
        uid,
        namespace,
        name,
        scheduler: spec.and_then(|s| s.scheduler_name.clone()).unwrap_or_else(|| "default-scheduler".into()),
        node: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        phase,
        terminating: md.deletion_timestamp.is_some(),
        created_ms: md.creation_timestamp.as_ref().map(ms).unwrap_or(0),
        bound_ms,
        ask,
        gang,
        estimate_ms,
        priority: spec.and_then(|s| s.priority).map(i64::from).unwrap_or(0),
        constraints: Constraints {
            node_selector: spec.and_then(|s| s.node_selector.clone()).unwrap_or_default(),
            required,
            tolerations,
        },
        topology,
        invalid: (!errs.is_empty()).then(|| errs.join("; ")),
        waiting_message,
        owner,
    })
}

/// Reads a node. Fails only for a node without a name; an allocatable that cannot be read makes
/// it `invalid` (no pods go there).
pub fn node_info(n: &Node, cfg: &ReadConfig) -> Result<NodeInfo, ObjectError> {
    let name = n.metadata.name.clone().ok_or(ObjectError { kind: "node", field: "metadata.name" })?;
    let status = n.status.as_ref();
    let mut errs = Vec::new();
    let mut alloc = Ask::default();
    if let Some(m) = status.and_then(|s| s.allocatable.as_ref()) {
        if let Some(q) = m.get(&cfg.gpu_resource) {
            match Quantity::parse(&q.0).map(|q| q.whole()) {
                Ok(Some(g)) => alloc.gpus = g.min(u32::MAX as u64) as u32,
                Ok(None) => errs.push(format!("allocatable {} `{}` is not a whole number", cfg.gpu_resource, q.0)),
                Err(e) => errs.push(format!("allocatable {}: {e}", cfg.gpu_resource)),
            }
        }
        match m.get("cpu").map(|q| Quantity::parse(&q.0)) {
            Some(Ok(v)) => alloc.cpu_milli = v.milli_down(),
            Some(Err(e)) => errs.push(format!("allocatable cpu: {e}")),
            None => {}
        }
        match m.get("memory").map(|q| Quantity::parse(&q.0)) {
            Some(Ok(v)) => alloc.mem_bytes = v.bytes_down(),
            Some(Err(e)) => errs.push(format!("allocatable memory: {e}")),
            None => {}
        }
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = n.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter(|t| Taint::effect_filters(&t.effect))
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let labels = n.metadata.labels.clone().unwrap_or_default();
    let gpu_model = labels.get(&cfg.gpu_model_label).map(|m| m.trim().to_string()).filter(|m| !m.is_empty());
    let mut warning = None;
    let gpu_mem_mib = labels.get(GPU_MEMORY_LABEL).and_then(|m| match m.trim().parse::<u64>() {
        Ok(v) if v > 0 => Some(v),
        _ => {
            warning = Some(format!(
                "label {GPU_MEMORY_LABEL} `{m}` is not a positive whole number of MiB; the GPUs' memory is taken as unknown"
            ));
            None
        }
    });
    Ok(NodeInfo {
        name,
        alloc,
        cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready,
        labels,
        taints,
        gpu_model,
        gpu_mem_mib,
        invalid: (!errs.is_empty()).then(|| errs.join("; ")),
        warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json).expect("a pod");
        pod_info(&p, &ReadConfig::new("nvidia.com/gpu")).expect("readable")
    }

    #[test]
    fn reads_requests_gangs_and_estimates() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:01Z",
                "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": "4", "ordo.dev/estimate": "2h",
                    "ordo.dev/topology": " Required:Block "}},
            "spec": {"schedulerName": "ordo", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "1500m", "memory": "1Gi"}}},
                {"name": "d", "resources": {"requests": {"cpu": "500m"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]}
        }));
        assert_eq!(p.ask, Ask { gpus: 2, cpu_milli: 4000, mem_bytes: 1 << 30 });
        assert_eq!(p.gang, Some(GangRef { name: "g".into(), size: 4 }));
        assert_eq!(p.estimate_ms, Some(7_200_000));
        assert_eq!(p.topology, Some(ordo_core::TopoAsk { level: "block".into(), required: true }));
        assert_eq!(p.created_ms, 1_704_067_201_000);
        assert_eq!(p.user, "ns");
        assert!(p.invalid.is_none());
    }

    #[test]
    fn bad_annotations_make_the_pod_invalid_not_a_panic() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1",
                "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": "many", "ordo.dev/estimate": "soon",
                    "ordo.dev/topology": "block"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}
        }));
        let why = p.invalid.expect("invalid");
        assert!(why.contains("gang-size `many`"), "{why}");
        assert!(why.contains("estimate `soon`"), "{why}");
        assert!(why.contains("not a whole number"), "{why}");
        assert!(
            why.contains(
                "annotation ordo.dev/topology: topology ask `block`: expected `required:LEVEL` or `preferred:LEVEL`"
            ),
            "{why}"
        );
        assert_eq!(p.topology, None);
        let no_uid: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}})).expect("pod");
        assert!(pod_info(&no_uid, &ReadConfig::new("nvidia.com/gpu")).is_err());
    }

    fn node(json: serde_json::Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json).expect("a node");
        node_info(&n, &ReadConfig::new("nvidia.com/gpu")).expect("readable")
    }

    #[test]
    fn reads_selector_affinity_and_tolerations_and_checks_them_against_nodes() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [],
                "nodeSelector": {"pool": "gpu"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-special"]}]}
                ]}, "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
                ]}},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
        }));
        let terms = p.constraints.required.as_ref().expect("required affinity read");
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0].exprs[0].to_string(), "nvidia.com/gpu.memory Gt 40000");
        assert_eq!(terms[1].fields[0].to_string(), "metadata.name In [n-special]");
        let a100 = node(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.memory": "81920"}},
            "spec": {"taints": [{"key": "gpu", "value": "x", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"}]}
        }));
        assert_eq!(a100.gpu_model.as_deref(), Some("NVIDIA-A100-SXM4-80GB"));
        assert_eq!(a100.gpu_mem_mib, Some(81920));
        assert_eq!(a100.taints.len(), 1, "PreferNoSchedule is not kept");
        assert_eq!(p.qualifies(&a100), Ok(()));
        let t4 = node(serde_json::json!({
            "metadata": {"name": "n2", "labels": {"pool": "gpu", "nvidia.com/gpu.memory": "15360"}},
            "spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]}
        }));
        assert_eq!(p.qualifies(&t4).unwrap_err().to_string(), "untolerated taint dedicated=infer:NoExecute");
        let special = node(serde_json::json!({"metadata": {"name": "n-special", "labels": {"pool": "gpu"}}}));
        assert_eq!(p.qualifies(&special), Ok(()));
        let other = node(serde_json::json!({"metadata": {"name": "n3", "labels": {"pool": "cpu"}}}));
        assert_eq!(p.qualifies(&other).unwrap_err().to_string(), "node selector pool=gpu not met");
    }

    #[test]
    fn the_gpu_model_label_is_configurable_and_a_bad_memory_label_is_said() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"gpu-type": "h100", "nvidia.com/gpu.product": "x",
                "nvidia.com/gpu.memory": "80GB"}}
        }))
        .expect("a node");
        let cfg = ReadConfig { gpu_model_label: "gpu-type".into(), ..ReadConfig::new("nvidia.com/gpu") };
        let n = node_info(&n, &cfg).expect("readable");
        assert_eq!(n.gpu_model.as_deref(), Some("h100"));
        assert_eq!(n.gpu_mem_mib, None);
        let w = n.warning.expect("a warning");
        assert!(w.contains("nvidia.com/gpu.memory `80GB`"), "{w}");
        assert!(n.invalid.is_none(), "a bad label does not close the node");
    }

    proptest::proptest! {
        /// Whatever text a user puts in requests, limits and ordo's annotations, reading the pod
        /// never panics: it is read, or marked invalid with a reason.
        #[test]
        fn any_text_in_requests_and_annotations_is_read_or_refused(
            gpu in "\\PC{0,12}", cpu in "[0-9.eEmkMGi+-]{0,12}", mem in "[0-9.eEkKMGTPi+-]{0,14}",
            size in "\\PC{0,6}", est in "[0-9.smhd ]{0,8}", topo in "(required|preferred|x)?:?\\PC{0,8}",
        ) {
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "namespace": "ns", "uid": "u",
                    "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": size, "ordo.dev/estimate": est,
                        "ordo.dev/topology": topo}},
                "spec": {"containers": [{"name": "c", "resources": {
                    "limits": {"nvidia.com/gpu": gpu}, "requests": {"cpu": cpu, "memory": mem}}}]}
            })).expect("a pod");
            let info = pod_info(&p, &ReadConfig::new("nvidia.com/gpu")).expect("readable");
            if info.invalid.is_none() {
                proptest::prop_assert!(info.gang.as_ref().is_some_and(|g| g.size > 0));
                proptest::prop_assert!(info.topology.is_some());
            }
        }
    }
}
