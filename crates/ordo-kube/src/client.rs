//! The API server calls the scheduler makes: connect (kubeconfig or in-cluster, TLS verified
//! against the cluster's CA), bind, write a pod's condition, post an Event, evict, list, and
//! record its settings in a ConfigMap for `ordo kube queue` and `explain` to read.

use crate::objects::{node_info, pod_info, NodeInfo, PodInfo, ReadConfig};
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Why talking to the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig (or in-cluster config) could not be read or is refused.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The settings a scheduler recorded cannot be read.
    #[error("{0}")]
    Settings(String),
    /// A call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The failure.
        #[source]
        source: Box<kube::Error>,
    },
}

impl KubeError {
    /// The HTTP status the API server answered, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Api { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            },
            KubeError::Config(_) | KubeError::Settings(_) => None,
        }
    }
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> KubeError {
    let what = what.into();
    move |e| KubeError::Api { what, source: Box::new(e) }
}

/// A connection to the API server and what the scheduler writes there.
#[derive(Clone)]
pub struct Kube {
    client: Client,
    /// The scheduler's name (Events' source).
    pub scheduler_name: String,
    /// How pods and nodes are read.
    pub read: ReadConfig,
    eviction_v1beta1: Arc<AtomicBool>,
    seq: Arc<AtomicU64>,
}

impl std::fmt::Debug for Kube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the client (its config holds the credentials).
        f.debug_struct("Kube").field("scheduler_name", &self.scheduler_name).finish_non_exhaustive()
    }
}

/// Reads the client configuration: the kubeconfig file given, else `$KUBECONFIG`,
/// `~/.kube/config` or the pod's service account (in a cluster). A kubeconfig that turns TLS
/// verification off is refused: ordo verifies the API server against the cluster's CA.
pub async fn config(kubeconfig: Option<&Path>) -> Result<Config, KubeError> {
    let cfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| KubeError::Config(format!("{}: {e}", p.display())))?;
            Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| KubeError::Config(format!("{}: {e}", p.display())))?
        }
        None => Config::infer().await.map_err(|e| KubeError::Config(e.to_string()))?,
    };
    if cfg.accept_invalid_certs {
        return Err(KubeError::Config(
            "the kubeconfig sets insecure-skip-tls-verify; ordo verifies the API server against the cluster's CA: give it certificate-authority(-data) instead".into(),
        ));
    }
    Ok(cfg)
}

impl Kube {
    /// Connects with `cfg`.
    pub fn new(cfg: Config, scheduler_name: &str, read: ReadConfig) -> Result<Kube, KubeError> {
        let client = Client::try_from(cfg).map_err(|e| KubeError::Config(e.to_string()))?;
        Ok(Kube {
            client,
            scheduler_name: scheduler_name.to_string(),
            read,
            eviction_v1beta1: Arc::new(AtomicBool::new(false)),
            seq: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The underlying client (for watches).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Binds a pod to a node through its `binding` subresource, with the pod's uid as a
    /// precondition (a pod deleted and created again under the same name is not bound).
    pub async fn bind(&self, ns: &str, name: &str, uid: &str, node: &str) -> Result<(), KubeError> {
        let b = Binding {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                uid: Some(uid.to_string()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..ObjectReference::default()
            },
        };
        self.pods(ns)
            .create_subresource::<Binding, serde_json::Value>("binding", name, &PostParams::default(), &b)
            .await
            .map(|_| ())
            .map_err(api_err(format!("bind {ns}/{name} to {node}")))
    }

    /// Reads one pod back (after a conflict), `None` if it is gone.
    pub async fn get_pod(&self, ns: &str, name: &str) -> Result<Option<PodInfo>, KubeError> {
        let p = self.pods(ns).get_opt(name).await.map_err(api_err(format!("read pod {ns}/{name}")))?;
        Ok(p.and_then(|p| pod_info(&p, &self.read).ok()))
    }

    /// Sets the pod's `PodScheduled=False` condition with ordo's message (reason `Unschedulable`
    /// when it does not fit, `Waiting` when it waits its turn), as `kubectl describe` shows it.
    pub async fn set_waiting(
        &self,
        ns: &str,
        name: &str,
        text: &str,
        shortage: bool,
        first: bool,
    ) -> Result<(), KubeError> {
        let now = Time(Timestamp::now());
        let mut cond = serde_json::json!({
            "type": "PodScheduled", "status": "False",
            "reason": if shortage { "Unschedulable" } else { "Waiting" },
            "message": text, "lastProbeTime": now,
        });
        if first {
            cond["lastTransitionTime"] = serde_json::json!(now);
        }
        let patch = serde_json::json!({"status": {"conditions": [cond]}});
        self.pods(ns)
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map(|_| ())
            .map_err(api_err(format!("set the condition of {ns}/{name}")))
    }

    /// Posts an Event about a pod (`Warning` or `Normal`, with a reason such as
    /// `FailedScheduling`, `Waiting`, `Scheduled`, `Preempted`).
    pub async fn event(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        warning: bool,
        reason: &str,
        text: &str,
    ) -> Result<(), KubeError> {
        let now = Timestamp::now();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}{:04x}", now.as_nanosecond(), seq & 0xffff)),
                namespace: Some(ns.to_string()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                uid: Some(uid.to_string()),
                ..ObjectReference::default()
            },
            reason: Some(reason.to_string()),
            message: Some(text.to_string()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            source: Some(EventSource { component: Some(self.scheduler_name.clone()), host: None }),
            reporting_component: Some(self.scheduler_name.clone()),
            reporting_instance: Some(self.scheduler_name.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some(if reason == "Scheduled" { "Binding" } else { "Scheduling" }.into()),
            count: Some(1),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &ev)
            .await
            .map(|_| ())
            .map_err(api_err(format!("post an Event for {ns}/{name}")))
    }

    /// Evicts a pod through the Eviction API (`policy/v1`, or `policy/v1beta1` on API servers
    /// before 1.22), so that disruption budgets are honoured.
    pub async fn evict(&self, ns: &str, name: &str) -> Result<(), KubeError> {
        let body = |v: &str| serde_json::json!({"apiVersion": v, "kind": "Eviction", "metadata": {"name": name, "namespace": ns}});
        let api = self.pods(ns);
        let post = |v: &'static str| {
            let b = body(v);
            let api = api.clone();
            async move { api.create_subresource::<_, serde_json::Value>("eviction", name, &PostParams::default(), &b).await }
        };
        if !self.eviction_v1beta1.load(Ordering::Relaxed) {
            match post("policy/v1").await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if matches!(s.code, 400 | 404 | 415) && s.message.contains("policy/v1") => {
                    self.eviction_v1beta1.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(api_err(format!("evict {ns}/{name}"))(e)),
            }
        }
        post("policy/v1beta1").await.map(|_| ()).map_err(api_err(format!("evict {ns}/{name}")))
    }

    /// Every pod that has not ended, and every node matching `labels` (`k=v,k2=v2`; empty: all).
    pub async fn list(&self, labels: &str) -> Result<(Vec<PodInfo>, Vec<NodeInfo>), KubeError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(ACTIVE_PODS);
        let pl = pods.list(&lp).await.map_err(api_err("list pods"))?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut lp = ListParams::default();
        if !labels.is_empty() {
            lp = lp.labels(labels);
        }
        let nl = nodes.list(&lp).await.map_err(api_err("list nodes"))?;
        let p = pl.items.iter().filter_map(|p| pod_info(p, &self.read).ok()).collect();
        let n = nl.items.iter().filter_map(|n| node_info(n, &self.read).ok()).collect();
        Ok((p, n))
    }
}

/// The ConfigMap in which the scheduler named `scheduler` records its settings.
pub fn settings_name(scheduler: &str) -> String {
    format!("ordo-scheduler-{scheduler}")
}

/// The settings a running scheduler records (ConfigMap [`settings_name`], keys as below), so
/// that `ordo kube queue` and `explain` rebuild its state without being told its policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// `data.policy`: the ordering policy.
    pub policy: String,
    /// `data.gpu-resource`.
    pub gpu_resource: String,
    /// `data.gpu-model-label`: the node label that names the GPU model (absent in the settings
    /// of schedulers before it: the default, `nvidia.com/gpu.product`).
    pub gpu_model_label: String,
    /// `data.node-selector`: `k=v,k2=v2` (empty: every node).
    pub node_selector: String,
    /// `data.default-estimate-ms`.
    pub default_estimate_ms: i64,
    /// `data.topology-labels`: `LABEL=LEVEL,...`, lowest level first (absent or empty: no
    /// topology; the key is written only when there is one).
    pub topology_labels: String,
    /// `data.started`: when the scheduler started (RFC 3339).
    pub started: String,
    /// `data.ordo-version`.
    pub ordo_version: String,
}

impl Settings {
    fn to_data(&self) -> BTreeMap<String, String> {
        let topology = (!self.topology_labels.is_empty()).then(|| ("topology-labels", self.topology_labels.clone()));
        [
            ("policy", self.policy.clone()),
            ("gpu-resource", self.gpu_resource.clone()),
            ("gpu-model-label", self.gpu_model_label.clone()),
            ("node-selector", self.node_selector.clone()),
            ("default-estimate-ms", self.default_estimate_ms.to_string()),
            ("started", self.started.clone()),
            ("ordo-version", self.ordo_version.clone()),
        ]
        .into_iter()
        .chain(topology)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Reads the settings from a ConfigMap's data; says which key is missing or bad.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Settings, String> {
        let get = |k: &str| data.get(k).cloned().ok_or_else(|| format!("no `{k}` in its data"));
        let est = get("default-estimate-ms")?;
        Ok(Settings {
            policy: get("policy")?,
            gpu_resource: get("gpu-resource")?,
            gpu_model_label: data
                .get("gpu-model-label")
                .cloned()
                .unwrap_or_else(|| crate::objects::DEFAULT_GPU_MODEL_LABEL.into()),
            node_selector: data.get("node-selector").cloned().unwrap_or_default(),
            default_estimate_ms: est
                .parse()
                .map_err(|_| format!("`default-estimate-ms`: expected milliseconds, found `{est}`"))?,
            topology_labels: data.get("topology-labels").cloned().unwrap_or_default(),
            started: data.get("started").cloned().unwrap_or_default(),
            ordo_version: data.get("ordo-version").cloned().unwrap_or_default(),
        })
    }
}

impl Kube {
    /// Records `settings` in the ConfigMap [`settings_name`] of namespace `ns` (created, or
    /// replaced when it exists).
    pub async fn record_settings(&self, ns: &str, settings: &Settings) -> Result<(), KubeError> {
        let name = settings_name(&self.scheduler_name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let what = format!("record the scheduler's settings in ConfigMap {ns}/{name}");
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.to_string()),
                labels: Some([("app.kubernetes.io/name".to_string(), "ordo-scheduler".to_string())].into()),
                ..ObjectMeta::default()
            },
            data: Some(settings.to_data()),
            ..ConfigMap::default()
        };
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let old = api.get(&name).await.map_err(api_err(what.clone()))?;
                cm.metadata.resource_version = old.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &cm).await.map(|_| ()).map_err(api_err(what))
            }
            Err(e) => Err(api_err(what)(e)),
        }
    }

    /// The settings the scheduler named as this client's recorded in namespace `ns`; `None`
    /// when there is no such ConfigMap.
    pub async fn read_settings(&self, ns: &str) -> Result<Option<Settings>, KubeError> {
        let name = settings_name(&self.scheduler_name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let Some(cm) = api.get_opt(&name).await.map_err(api_err(format!("read ConfigMap {ns}/{name}")))? else {
            return Ok(None);
        };
        Settings::from_data(&cm.data.unwrap_or_default())
            .map(Some)
            .map_err(|e| KubeError::Settings(format!("ConfigMap {ns}/{name}: {e}")))
    }
}

/// The pods the scheduler watches: those that have not ended (a pod that ends leaves the watch
/// as a deletion), as kube-scheduler does.
pub const ACTIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

#[cfg(test)]
mod tests {
    use super::Settings;

    #[test]
    fn settings_read_back_from_their_configmap_data_and_name_a_bad_key() {
        let s = Settings {
            policy: "sjf+easy".into(),
            gpu_resource: "nvidia.com/gpu".into(),
            gpu_model_label: "gpu-type".into(),
            node_selector: "pool=a".into(),
            default_estimate_ms: 3_600_000,
            topology_labels: "nvidia.com/gpu.clique=block,topology.kubernetes.io/zone=zone".into(),
            started: "2026-12-04T06:00:00Z".into(),
            ordo_version: "0.1.0".into(),
        };
        let mut data = s.to_data();
        assert_eq!(Settings::from_data(&data), Ok(s.clone()));
        // Without a topology the key is not written (the ConfigMap is as before), and an older
        // scheduler's settings read as no topology.
        let plain = Settings { topology_labels: String::new(), ..s.clone() };
        assert!(!plain.to_data().contains_key("topology-labels"));
        assert_eq!(Settings::from_data(&plain.to_data()), Ok(plain));
        // An older scheduler's settings have no GPU model label: the default.
        data.remove("gpu-model-label");
        assert_eq!(
            Settings::from_data(&data).map(|r| r.gpu_model_label),
            Ok(crate::objects::DEFAULT_GPU_MODEL_LABEL.to_string())
        );
        data.insert("default-estimate-ms".into(), "1h".into());
        assert_eq!(
            Settings::from_data(&data),
            Err("`default-estimate-ms`: expected milliseconds, found `1h`".to_string())
        );
        data.remove("policy");
        assert_eq!(Settings::from_data(&data), Err("no `policy` in its data".to_string()));
    }
}
