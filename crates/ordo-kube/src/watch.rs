//! Watches of pods and nodes (kube-runtime's watcher: list, then watch; relist when the watch
//! expires with 410 Gone or the API server restarts; a full relist every resync period).

use crate::client::ACTIVE_PODS;
use crate::objects::{node_info, pod_info, NodeInfo, PodInfo, ReadConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::{self, watcher, Event};
use kube::{Api, Client};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// What the watches tell the scheduling loop.
#[derive(Debug)]
pub enum Seen {
    /// A pod was added or changed.
    Pod(Box<PodInfo>),
    /// A pod was deleted, or ended (uid).
    PodGone(String),
    /// Every pod that has not ended (a list, or a relist).
    Pods(Vec<PodInfo>),
    /// A node was added or changed.
    Node(NodeInfo),
    /// A node was deleted or left the pool (name).
    NodeGone(String),
    /// Every node of the pool.
    Nodes(Vec<NodeInfo>),
    /// A watch failed (it retries by itself, with backoff).
    Error(String),
}

/// Spawns the pod watch: every pod that has not ended, in every namespace.
pub fn spawn_pods(client: Client, read: ReadConfig, resync: Duration, tx: UnboundedSender<Seen>) {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::all(client);
        let cfg = watcher::Config::default().fields(ACTIVE_PODS);
        let to = Mapping {
            read: move |p: &Pod| pod_info(p, &read).map_err(|e| e.to_string()),
            one: |p| Seen::Pod(Box::new(p)),
            all: Seen::Pods,
            gone: |p: &Pod| p.metadata.uid.clone().map(Seen::PodGone),
        };
        run(api, cfg, resync, tx, to).await;
    });
}

/// Spawns the node watch: the nodes with the pool's labels (`k=v,k2=v2`; empty: all).
pub fn spawn_nodes(client: Client, read: ReadConfig, labels: String, resync: Duration, tx: UnboundedSender<Seen>) {
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut cfg = watcher::Config::default();
        if !labels.is_empty() {
            cfg = cfg.labels(&labels);
        }
        let to = Mapping {
            read: move |n: &Node| node_info(n, &read).map_err(|e| e.to_string()),
            one: Seen::Node,
            all: Seen::Nodes,
            gone: |n: &Node| n.metadata.name.clone().map(Seen::NodeGone),
        };
        run(api, cfg, resync, tx, to).await;
    });
}

/// How one kind of object becomes what the loop is told.
struct Mapping<K, T, R> {
    /// The object read (or why it is ignored).
    read: R,
    /// One added or changed.
    one: fn(T) -> Seen,
    /// All of them, listed.
    all: fn(Vec<T>) -> Seen,
    /// One deleted.
    gone: fn(&K) -> Option<Seen>,
}

/// One watch, restarted (a full relist) every `resync`, until the receiver is gone.
async fn run<K, T, R>(
    api: Api<K>,
    cfg: watcher::Config,
    resync: Duration,
    tx: UnboundedSender<Seen>,
    to: Mapping<K, T, R>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    R: Fn(&K) -> Result<T, String>,
{
    let Mapping { read, one, all, gone } = to;
    use kube::runtime::WatchStreamExt;
    loop {
        let mut stream = watcher(api.clone(), cfg.clone()).default_backoff().boxed();
        let until = tokio::time::sleep(resync);
        tokio::pin!(until);
        let mut listing: Option<Vec<T>> = None;
        loop {
            let ev = tokio::select! {
                ev = stream.next() => ev,
                _ = &mut until => break,
            };
            let Some(ev) = ev else { break };
            let msg = match ev {
                Ok(Event::Init) => {
                    listing = Some(Vec::new());
                    None
                }
                Ok(Event::InitApply(o)) => {
                    match (read(&o), listing.as_mut()) {
                        (Ok(v), Some(l)) => l.push(v),
                        (Ok(v), None) => listing = Some(vec![v]),
                        (Err(e), _) => {
                            let _ = tx.send(Seen::Error(format!("ignored an object: {e}")));
                        }
                    }
                    None
                }
                Ok(Event::InitDone) => Some(all(listing.take().unwrap_or_default())),
                Ok(Event::Apply(o)) => match read(&o) {
                    Ok(v) => Some(one(v)),
                    Err(e) => Some(Seen::Error(format!("ignored an object: {e}"))),
                },
                Ok(Event::Delete(o)) => gone(&o),
                Err(e) => Some(Seen::Error(e.to_string())),
            };
            if let Some(m) = msg {
                if tx.send(m).is_err() {
                    return;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}
