//! Test harness against a real kube-apiserver (`scripts/k8s-dev-apiserver.sh start DIR`, found
//! through `ORDO_K8S_DIR`): nodes and pods made by an admin, the scheduler run in-process as
//! the user `ordo` with deploy/rbac.yaml's ClusterRole, the kubelet played by patching status.
#![allow(dead_code, clippy::unwrap_used)]

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ordo_kube::client::Kube;
use ordo_kube::objects::ReadConfig;
use ordo_kube::run::{Published, RunConfig};
use ordo_kube::EngineConfig;
use serde_json::json;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One test's corner of the shared API server: its namespace, its node pool (label
/// `ordo.dev/test-pool`) and its scheduler name.
pub struct Cluster {
    pub dir: PathBuf,
    pub admin: Client,
    pub name: String,
    pub tmp: PathBuf,
}

/// The API server's directory, or `None` (the test is skipped, except under `CI=true`).
pub fn dev_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ORDO_K8S_DIR").map(PathBuf::from);
    match dir {
        Some(d) if d.join("kubeconfig").exists() => Some(d),
        _ => {
            let msg = "no Kubernetes API server: start one with `bash scripts/k8s-dev-apiserver.sh start DIR` and set ORDO_K8S_DIR=DIR";
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{msg} (CI=true: the tests against a real API server must run)");
            }
            let _ = writeln!(std::io::stderr(), "skipped: {msg}");
            None
        }
    }
}

async fn client(kubeconfig: &Path) -> Client {
    let cfg = ordo_kube::client::config(Some(kubeconfig)).await.unwrap();
    Client::try_from(cfg).unwrap()
}

/// Grants the user `ordo` deploy/rbac.yaml's ClusterRole (idempotent).
async fn grant(admin: &Client) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/rbac.yaml")).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let role: ClusterRole =
        serde_json::from_value(docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap().clone()).unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let pp = PatchParams::apply("ordo-tests").force();
    roles.patch("ordo-scheduler", &pp, &Patch::Apply(&role)).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ordo-scheduler-tests"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ordo-scheduler"},
        "subjects": [{"kind": "User", "name": "ordo"}]
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    bindings.patch("ordo-scheduler-tests", &pp, &Patch::Apply(&binding)).await.unwrap();
}

impl Cluster {
    /// A fresh corner for test `test`, or `None` when there is no API server (skipped).
    pub async fn new(test: &str) -> Option<Cluster> {
        let dir = dev_dir()?;
        let admin = client(&dir.join("kubeconfig")).await;
        grant(&admin).await;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let name = format!("{test}-{:x}", (nanos / 1000) % 0xffffff);
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
            .await
            .unwrap();
        let tmp = std::env::temp_dir().join(format!("ordo-kube-test-{name}"));
        std::fs::create_dir_all(&tmp).unwrap();
        Some(Cluster { dir, admin, name, tmp })
    }

    /// A kubeconfig for the user `ordo` (deploy/rbac.yaml's rights only).
    pub fn scheduler_kubeconfig(&self) -> PathBuf {
        let server = std::fs::read_to_string(self.dir.join("server")).unwrap();
        let token = std::fs::read_to_string(self.dir.join("ordo.token")).unwrap();
        let p = self.tmp.join("ordo.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: dev, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\nusers: [{{name: ordo, user: {{token: \"{}\"}}}}]\ncontexts: [{{name: dev, context: {{cluster: dev, user: ordo}}}}]\ncurrent-context: dev\n",
            server.trim(),
            self.dir.join("ca.crt").display(),
            token.trim()
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The scheduler's connection, as the user `ordo`.
    pub async fn kube(&self) -> Kube {
        let cfg = ordo_kube::client::config(Some(&self.scheduler_kubeconfig())).await.unwrap();
        Kube::new(cfg, &self.name, ReadConfig::new("nvidia.com/gpu")).unwrap()
    }

    /// The engine configuration for this test's scheduler and pool.
    pub fn engine_config(&self, policy: &str) -> EngineConfig {
        let mut e = EngineConfig::new(&self.name, policy.parse().unwrap());
        e.node_selector.insert("ordo.dev/test-pool".into(), self.name.clone());
        e
    }

    /// Starts the scheduler in-process under `policy`.
    pub async fn start(&self, policy: &str) -> Sched {
        self.start_with(RunConfig {
            engine: self.engine_config(policy),
            resync: Duration::from_secs(600),
            audit_log: Some(self.tmp.join("audit.jsonl")),
            bind_concurrency: 16,
            verbose: false,
        })
        .await
    }

    pub async fn start_with(&self, cfg: RunConfig) -> Sched {
        let kube = self.kube().await;
        let (tx, rx) = tokio::sync::watch::channel(Published::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            ordo_kube::run::run(kube, cfg, Some(tx), async move {
                let _ = stopped.await;
            })
            .await
        });
        Sched { stop: Some(stop), handle: Some(handle), stats: rx }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.name)
    }

    /// A node of this test's pool with `gpus` GPUs, 64 CPUs and 256Gi, Ready.
    pub async fn node(&self, name: &str, gpus: u32) {
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("{}-{name}", self.name), "labels": {"ordo.dev/test-pool": self.name}},
            "status": {
                "capacity": {"nvidia.com/gpu": gpus.to_string(), "cpu": "64", "memory": "256Gi", "pods": "110"},
                "allocatable": {"nvidia.com/gpu": gpus.to_string(), "cpu": "64", "memory": "256Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}]
            }
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &n).await.unwrap();
        // The API server's TaintNodesByCondition admission taints a new node not-ready; the node
        // lifecycle controller (absent here) lifts it once the kubelet says Ready: play it.
        let p = json!({"spec": {"taints": []}});
        nodes.patch(&self.node_name(name), &PatchParams::default(), &Patch::Merge(&p)).await.unwrap();
    }

    /// A node as [`Cluster::node`] with more labels and with `taints` (a JSON list of taints).
    pub async fn node_with(&self, name: &str, gpus: u32, labels: serde_json::Value, taints: serde_json::Value) {
        self.node(name, gpus).await;
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let p = json!({"metadata": {"labels": labels}, "spec": {"taints": taints}});
        nodes.patch(&self.node_name(name), &PatchParams::default(), &Patch::Merge(&p)).await.unwrap();
    }

    pub fn node_name(&self, name: &str) -> String {
        format!("{}-{name}", self.name)
    }

    pub async fn delete_node(&self, name: &str) {
        let nodes: Api<Node> = Api::all(self.admin.clone());
        nodes.delete(&self.node_name(name), &DeleteParams::default()).await.unwrap();
    }

    pub async fn cordon(&self, name: &str, on: bool) {
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let p = json!({"spec": {"unschedulable": on}});
        nodes.patch(&self.node_name(name), &PatchParams::default(), &Patch::Merge(&p)).await.unwrap();
    }

    /// A pod of this test's scheduler asking `gpus` GPUs and 1 CPU, with annotations.
    pub async fn pod(&self, name: &str, gpus: u32, annotations: serde_json::Value) {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "schedulerName": self.name,
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}, "requests": {"cpu": "1", "memory": "1Gi"}}}]
            }
        }))
        .unwrap();
        self.pods().create(&PostParams::default(), &p).await.unwrap();
    }

    /// A pod as [`Cluster::pod`] (no annotations) with more fields in its spec (`nodeSelector`,
    /// `affinity`, `tolerations`).
    pub async fn pod_with(&self, name: &str, gpus: u32, spec: serde_json::Value) {
        let mut p = json!({
            "metadata": {"name": name},
            "spec": {
                "schedulerName": self.name,
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}, "requests": {"cpu": "1", "memory": "1Gi"}}}]
            }
        });
        if let (Some(to), Some(from)) = (p["spec"].as_object_mut(), spec.as_object()) {
            to.extend(from.clone());
        }
        self.pods().create(&PostParams::default(), &serde_json::from_value(p).unwrap()).await.unwrap();
    }

    /// Plays the kubelet: sets a pod's phase.
    pub async fn set_phase(&self, name: &str, phase: &str) {
        let p = json!({"status": {"phase": phase}});
        self.pods().patch_status(name, &PatchParams::default(), &Patch::Merge(&p)).await.unwrap();
    }

    /// Plays the kubelet for a pod being deleted: removes it at once.
    pub async fn force_delete(&self, name: &str) {
        let _ =
            self.pods().delete(name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await;
    }

    /// Every pod of the namespace: name -> (node, PodScheduled=False message, being deleted).
    pub async fn state(&self) -> std::collections::BTreeMap<String, (Option<String>, Option<String>, bool)> {
        let l = self.pods().list(&ListParams::default()).await.unwrap();
        l.items
            .into_iter()
            .map(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                let msg = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
                    .and_then(|c| c.message.clone());
                (p.metadata.name.unwrap(), (node, msg, p.metadata.deletion_timestamp.is_some()))
            })
            .collect()
    }

    pub async fn node_of(&self, pod: &str) -> Option<String> {
        self.state().await.get(pod).and_then(|s| s.0.clone())
    }

    pub async fn message(&self, pod: &str) -> Option<String> {
        self.state().await.get(pod).and_then(|s| s.1.clone())
    }

    /// Events about a pod: (type, reason, message).
    pub async fn events(&self, pod: &str) -> Vec<(String, String, String)> {
        let ev: Api<Event> = Api::namespaced(self.admin.clone(), &self.name);
        let l = ev.list(&ListParams::default()).await.unwrap();
        l.items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(pod))
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    /// The pod's events once one of them satisfies `f`, or whatever there is after `secs`
    /// seconds: the scheduler records events after it sets the pod's condition, so a single read
    /// can come too early.
    pub async fn events_once(
        &self,
        pod: &str,
        secs: u64,
        f: impl Fn(&(String, String, String)) -> bool,
    ) -> Vec<(String, String, String)> {
        let t0 = Instant::now();
        loop {
            let ev = self.events(pod).await;
            if ev.iter().any(&f) || t0.elapsed() > Duration::from_secs(secs) {
                return ev;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Checks that no node of the pool holds more GPUs, CPU or memory than it has, counting
    /// every pod bound there that has not ended.
    pub async fn assert_no_overcommit(&self) {
        let read = ReadConfig::new("nvidia.com/gpu");
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let lp = ListParams::default().labels(&format!("ordo.dev/test-pool={}", self.name));
        let all: Api<Pod> = Api::all(self.admin.clone());
        let pods: Vec<_> = all
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|p| ordo_kube::objects::pod_info(p, &read).ok())
            .filter(|p| p.holds())
            .collect();
        for n in nodes.list(&lp).await.unwrap().items {
            let n = ordo_kube::objects::node_info(&n, &read).unwrap();
            let used = pods
                .iter()
                .filter(|p| p.node.as_deref() == Some(n.name.as_str()))
                .fold(ordo_kube::objects::Ask::default(), |a, p| a.plus(p.ask));
            assert!(n.alloc.holds(used), "node {} overcommitted: {:?} of {:?}", n.name, used, n.alloc);
        }
    }

    /// Waits up to `secs` for `f` to hold over the namespace's pods.
    pub async fn wait_for(
        &self,
        what: &str,
        secs: u64,
        f: impl Fn(&std::collections::BTreeMap<String, (Option<String>, Option<String>, bool)>) -> bool,
    ) {
        let t0 = Instant::now();
        loop {
            let s = self.state().await;
            if f(&s) {
                return;
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                panic!("timed out after {secs} s waiting for {what}; pods: {s:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes this test's pods and nodes (namespaces cannot be deleted without a controller).
    pub async fn cleanup(&self) {
        let l = self.pods().list(&ListParams::default()).await.unwrap();
        for p in l.items {
            self.force_delete(p.metadata.name.as_deref().unwrap_or("")).await;
        }
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let lp = ListParams::default().labels(&format!("ordo.dev/test-pool={}", self.name));
        for n in nodes.list(&lp).await.unwrap().items {
            let _ = nodes.delete(n.metadata.name.as_deref().unwrap_or(""), &DeleteParams::default()).await;
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// A scheduler running in-process.
pub struct Sched {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<Result<(), ordo_kube::run::RunError>>>,
    pub stats: tokio::sync::watch::Receiver<Published>,
}

impl Sched {
    /// Stops it and waits until it has.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }

    pub fn stats(&self) -> Published {
        *self.stats.borrow()
    }
}

/// Bound pods of a state.
pub fn bound(s: &std::collections::BTreeMap<String, (Option<String>, Option<String>, bool)>) -> Vec<String> {
    s.iter().filter(|(_, v)| v.0.is_some()).map(|(k, _)| k.clone()).collect()
}
