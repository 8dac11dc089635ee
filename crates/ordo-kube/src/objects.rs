//! Pods and nodes as the scheduler reads them: what a pod asks (GPUs, CPU, memory, gang,
//! estimate, user) and what a node offers, from the API objects, never panicking on bad input.

use crate::quantity::Quantity;
use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements};
use std::collections::BTreeMap;

/// The annotation prefix of everything ordo reads from a pod.
pub const PREFIX: &str = "ordo.dev/";
/// Gang name: pods with the same name in one namespace are bound all or none.
pub const ANN_GANG: &str = "ordo.dev/gang";
/// Gang size: how many pods the gang has (every member says the same).
pub const ANN_GANG_SIZE: &str = "ordo.dev/gang-size";
/// Run-time estimate (`2h`, `30m`, `90s`): what `sjf`, backfill and expected starts read.
pub const ANN_ESTIMATE: &str = "ordo.dev/estimate";
/// The user a pod runs for (fair-share policies, import); default: its namespace.
pub const ANN_USER: &str = "ordo.dev/user";

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

/// A toleration, as far as ordo checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    /// Key (empty with `Exists`: every taint).
    pub key: String,
    /// `Exists` or `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect (empty: every effect).
    pub effect: String,
}

/// A taint that keeps pods off a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// `NoSchedule` or `NoExecute` (`PreferNoSchedule` is not kept).
    pub effect: String,
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
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Whether it has required node affinity (which ordo does not evaluate).
    pub affinity: bool,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
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

    /// Whether it tolerates a taint.
    pub fn tolerates(&self, t: &Taint) -> bool {
        self.tolerations.iter().any(|o| {
            let key = if o.exists { o.key.is_empty() || o.key == t.key } else { o.key == t.key && o.value == t.value };
            (o.effect.is_empty() || o.effect == t.effect) && key
        })
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
    /// Why its allocatable could not be read, if so (it then takes no pods).
    pub invalid: Option<String>,
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
    let affinity = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|n| n.required_during_scheduling_ignored_during_execution.is_some());
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Toleration {
                    key: t.key.clone().unwrap_or_default(),
                    exists: t.operator.as_deref() == Some("Exists"),
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
        node_selector: spec.and_then(|s| s.node_selector.clone()).unwrap_or_default(),
        affinity,
        tolerations,
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
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(NodeInfo {
        name,
        alloc,
        cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints,
        invalid: (!errs.is_empty()).then(|| errs.join("; ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json).expect("a pod");
        pod_info(&p, &ReadConfig { gpu_resource: "nvidia.com/gpu".into() }).expect("readable")
    }

    #[test]
    fn reads_requests_gangs_and_estimates() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:01Z",
                "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": "4", "ordo.dev/estimate": "2h"}},
            "spec": {"schedulerName": "ordo", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "1500m", "memory": "1Gi"}}},
                {"name": "d", "resources": {"requests": {"cpu": "500m"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]}
        }));
        assert_eq!(p.ask, Ask { gpus: 2, cpu_milli: 4000, mem_bytes: 1 << 30 });
        assert_eq!(p.gang, Some(GangRef { name: "g".into(), size: 4 }));
        assert_eq!(p.estimate_ms, Some(7_200_000));
        assert_eq!(p.created_ms, 1_704_067_201_000);
        assert_eq!(p.user, "ns");
        assert!(p.invalid.is_none());
    }

    #[test]
    fn bad_annotations_make_the_pod_invalid_not_a_panic() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1",
                "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": "many", "ordo.dev/estimate": "soon"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}
        }));
        let why = p.invalid.expect("invalid");
        assert!(why.contains("gang-size `many`"), "{why}");
        assert!(why.contains("estimate `soon`"), "{why}");
        assert!(why.contains("not a whole number"), "{why}");
        let no_uid: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}})).expect("pod");
        assert!(pod_info(&no_uid, &ReadConfig { gpu_resource: "nvidia.com/gpu".into() }).is_err());
    }

    #[test]
    fn tolerations_match_taints() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
        }));
        let t = Taint { key: "gpu".into(), value: "x".into(), effect: "NoSchedule".into() };
        assert!(p.tolerates(&t));
        assert!(!p.tolerates(&Taint { effect: "NoExecute".into(), ..t.clone() }));
        assert!(!p.tolerates(&Taint { key: "other".into(), ..t }));
    }

    proptest::proptest! {
        /// Whatever text a user puts in requests, limits and ordo's annotations, reading the pod
        /// never panics: it is read, or marked invalid with a reason.
        #[test]
        fn any_text_in_requests_and_annotations_is_read_or_refused(
            gpu in "\\PC{0,12}", cpu in "[0-9.eEmkMGi+-]{0,12}", mem in "[0-9.eEkKMGTPi+-]{0,14}",
            size in "\\PC{0,6}", est in "[0-9.smhd ]{0,8}",
        ) {
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "namespace": "ns", "uid": "u",
                    "annotations": {"ordo.dev/gang": "g", "ordo.dev/gang-size": size, "ordo.dev/estimate": est}},
                "spec": {"containers": [{"name": "c", "resources": {
                    "limits": {"nvidia.com/gpu": gpu}, "requests": {"cpu": cpu, "memory": mem}}}]}
            })).expect("a pod");
            let info = pod_info(&p, &ReadConfig { gpu_resource: "nvidia.com/gpu".into() }).expect("readable");
            if info.invalid.is_none() {
                proptest::prop_assert!(info.gang.as_ref().is_some_and(|g| g.size > 0));
            }
        }
    }
}
