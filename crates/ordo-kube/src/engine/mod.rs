//! The scheduler's state: the pods and nodes it knows (from watches), ordo-core's `Scheduler`
//! over the open nodes of its pool, and how each change reaches it. Pure: no IO, `now` is given.

use crate::audit::Draft;
use crate::objects::{Ask, NodeInfo, PodInfo};
use ordo_core::{Allocation, JobId, PolicySpec, Scheduler};
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet};

mod pass;
mod qualify;
mod rebuild;
mod views;

pub use pass::{Bind, Evict, Note, PassOut};
pub use qualify::FEATURE_PREFIX;
pub use views::{Explained, QueueLine, QueueView};

/// What the scheduler is told at start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `spec.schedulerName` of the pods it schedules.
    pub scheduler_name: String,
    /// The GPU resource name (`nvidia.com/gpu`).
    pub gpu_resource: String,
    /// The ordo-core policy.
    pub policy: PolicySpec,
    /// Estimate of a pod that gives none (no `ordo.dev/estimate`, no `activeDeadlineSeconds`), ms.
    pub default_estimate_ms: i64,
    /// Preemptive policies: a pod is not evicted before it has run this long, ms.
    pub min_run_ms: i64,
    /// Labels a node must carry to be in the pool (empty: every node).
    pub node_selector: BTreeMap<String, String>,
    /// Most pod conditions (and Events) written per pass.
    pub notes_per_pass: usize,
    /// A waiting pod's condition is rewritten when only its position moved, at most this often, ms.
    pub note_refresh_ms: i64,
    /// The node labels that give the topology gangs are placed by, lowest level first (empty:
    /// no topology, the default).
    pub topology_labels: crate::topology::TopologyLabels,
}

impl EngineConfig {
    /// Defaults for a scheduler named `name` under `policy`.
    pub fn new(name: &str, policy: PolicySpec) -> Self {
        EngineConfig {
            scheduler_name: name.to_string(),
            gpu_resource: "nvidia.com/gpu".into(),
            policy,
            default_estimate_ms: 24 * 3_600_000,
            min_run_ms: 0,
            node_selector: BTreeMap::new(),
            notes_per_pass: 200,
            note_refresh_ms: 60_000,
            topology_labels: crate::topology::TopologyLabels::default(),
        }
    }
}

/// What ordo-core sees as one job: a pod, or a gang (all its pods at once).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitKey {
    /// A pod without a gang, by uid.
    Pod(String),
    /// A gang, by namespace and name.
    Gang(String, String),
}

/// A job of ordo-core and the pods it stands for.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    pub(crate) key: UnitKey,
    /// Member pods (uids), in creation order.
    pub(crate) pods: Vec<String>,
    /// Running (bound) or waiting.
    pub(crate) running: bool,
    /// What it asks in all.
    pub(crate) ask: Ask,
    /// The estimate the policy reads, ms.
    pub(crate) estimate: i64,
    /// Earliest creation time of its pods (its submit time), ms.
    pub(crate) created: i64,
    /// Running: since when, and where (ordo-core's allocation).
    pub(crate) since: i64,
    pub(crate) alloc: Option<Allocation>,
    /// Waiting and limited to some open nodes: its requirement set (`kube-req:N`).
    pub(crate) req: Option<u32>,
    /// The topology level it asks (`ordo.dev/topology`), resolved by ordo-core.
    pub(crate) topo: ordo_core::TopoNeed,
}

/// A waiting unit that ordo-core does not hold, and why.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) pods: Vec<String>,
    pub(crate) why: String,
}

/// What the condition of a unit's pods says, to write it again only when that changes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Said {
    pub(crate) kind: u8,
    pub(crate) blocker: Option<UnitKey>,
    pub(crate) text: String,
    pub(crate) position: usize,
    pub(crate) at: i64,
}

/// Counters, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Passes run.
    pub passes: u64,
    /// Rebuilds of ordo-core's state from the pods and nodes.
    pub rebuilds: u64,
    /// Pods bound (as ordered; failures are counted again as conflicts or errors).
    pub binds: u64,
    /// Bindings refused because the pod was already bound (409).
    pub conflicts: u64,
    /// Evictions ordered.
    pub evictions: u64,
    /// Full lists of pods received (the first, and each relist after a watch expired).
    pub pod_lists: u64,
}

/// The scheduler's state. Feed it what the watches see, ask it for a pass, tell it how the
/// pass's bindings went.
#[derive(Debug)]
pub struct Engine {
    pub(crate) cfg: EngineConfig,
    pub(crate) policy_text: String,
    pub(crate) nodes: BTreeMap<String, NodeInfo>,
    pub(crate) pods: HashMap<String, PodInfo>,
    pub(crate) core: Scheduler,
    /// ordo-core's state no longer matches the pods and nodes: rebuild before the next pass.
    pub(crate) dirty: bool,
    pods_synced: bool,
    nodes_synced: bool,
    /// ordo-core node index -> node name, and back.
    pub(crate) node_names: Vec<String>,
    pub(crate) node_idx: HashMap<String, u32>,
    /// The sets of open nodes that waiting units are limited to, and ordo-core's eligibility
    /// for each (`JobReq::elig`; `None`: not given to ordo-core, its units are held).
    pub(crate) req_sets: qualify::ReqSets,
    pub(crate) req_elig: Vec<Option<ordo_core::Elig>>,
    pub(crate) units: HashMap<JobId, Unit>,
    pub(crate) job_of: HashMap<UnitKey, JobId>,
    pub(crate) next_job: u32,
    pub(crate) held: BTreeMap<UnitKey, Held>,
    /// Gangs with some pods bound and some not (a binding that failed half-way): the rest.
    pub(crate) partial: BTreeMap<UnitKey, Vec<String>>,
    /// Pods this scheduler bound that the watch has not shown bound yet.
    pub(crate) assumed: HashSet<String>,
    /// Pods evicted and not yet gone.
    pub(crate) evicting: HashSet<String>,
    /// Units the policy chose that could not be bound yet, and why.
    pub(crate) blocked: HashMap<UnitKey, String>,
    /// What each waiting unit's pods were last told, and the reason kind last audited.
    pub(crate) said: HashMap<UnitKey, Said>,
    pub(crate) audited: HashMap<UnitKey, (u8, Option<UnitKey>)>,
    /// When the last explained plan ran, ms since the epoch.
    pub(crate) last_explain: i64,
    /// Audit records of what was seen between passes (submits, ends, nodes).
    pub(crate) seen: Vec<Draft>,
    /// Why the nodes' topology labels give no topology (a unit under two parents), as last
    /// reported; ordo then schedules without topology.
    pub(crate) topology_problem: Option<String>,
    /// Lines for the scheduler's log, taken by the next pass.
    pub(crate) warnings: Vec<String>,
    pub(crate) stats: Stats,
}

/// Whether two readings of a pod differ in anything the scheduler decides on.
fn same_for_scheduling(a: &PodInfo, b: &PodInfo) -> bool {
    a.node == b.node
        && a.ended() == b.ended()
        && a.terminating == b.terminating
        && a.ask == b.ask
        && a.gang == b.gang
        && a.estimate_ms == b.estimate_ms
        && a.priority == b.priority
        && a.constraints == b.constraints
        && a.invalid == b.invalid
        && a.topology == b.topology
        && a.user == b.user
        && a.scheduler == b.scheduler
        && a.created_ms == b.created_ms
}

impl Engine {
    /// An engine that knows nothing yet: it passes only once both pods and nodes were listed.
    pub fn new(cfg: EngineConfig) -> Self {
        let mut core = Scheduler::new(
            &ordo_core::ClusterSpec { nodes: vec![] },
            ordo_core::Placement::Consolidated,
            cfg.policy.clone(),
        );
        core.set_min_run(cfg.min_run_ms);
        Engine {
            policy_text: cfg.policy.to_string(),
            cfg,
            nodes: BTreeMap::new(),
            pods: HashMap::new(),
            core,
            dirty: true,
            pods_synced: false,
            nodes_synced: false,
            node_names: vec![],
            node_idx: HashMap::new(),
            req_sets: qualify::ReqSets::default(),
            req_elig: vec![],
            units: HashMap::new(),
            job_of: HashMap::new(),
            next_job: 0,
            held: BTreeMap::new(),
            partial: BTreeMap::new(),
            assumed: HashSet::new(),
            evicting: HashSet::new(),
            blocked: HashMap::new(),
            said: HashMap::new(),
            audited: HashMap::new(),
            last_explain: i64::MIN / 2,
            seen: vec![],
            topology_problem: None,
            warnings: vec![],
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The policy, as written.
    pub fn policy(&self) -> &str {
        &self.policy_text
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// This scheduler's pods that have not ended: `(waiting for a node, bound)`.
    pub fn pod_counts(&self) -> (u64, u64) {
        self.pods.values().filter(|p| self.ours(p)).fold((0, 0), |(w, b), p| match p.node {
            None => (w + 1, b),
            Some(_) => (w, b + 1),
        })
    }

    /// Whether both pods and nodes have been listed (before that, no pass decides anything).
    pub fn synced(&self) -> bool {
        self.pods_synced && self.nodes_synced
    }

    /// Whether ordo-core's state is consistent with itself (tests call it after passes).
    pub fn sanity_check(&self) -> Result<(), String> {
        self.core.sanity_check()
    }

    pub(crate) fn ours(&self, p: &PodInfo) -> bool {
        p.scheduler == self.cfg.scheduler_name
    }

    /// The unit a pod of ours belongs to.
    pub(crate) fn unit_key(p: &PodInfo) -> UnitKey {
        match &p.gang {
            Some(g) => UnitKey::Gang(p.namespace.clone(), g.name.clone()),
            None => UnitKey::Pod(p.uid.clone()),
        }
    }

    /// `default/train-3` or `gang default/g`.
    pub(crate) fn label(&self, k: &UnitKey) -> String {
        match k {
            UnitKey::Pod(uid) => self.pods.get(uid).map(|p| p.key()).unwrap_or_else(|| format!("pod {uid}")),
            UnitKey::Gang(ns, n) => format!("gang {ns}/{n}"),
        }
    }

    /// The unit id that names it in the audit log (see `audit::job_number`).
    pub(crate) fn unit_id(&self, k: &UnitKey, created: i64) -> String {
        match k {
            UnitKey::Pod(uid) => uid.clone(),
            UnitKey::Gang(ns, n) => format!("gang:{ns}/{n}@{created}"),
        }
    }

    fn in_pool(&self, n: &NodeInfo) -> bool {
        self.cfg.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v))
    }

    /// Whether a pod holds resources on a node of the pool.
    fn holds_in_pool(&self, p: &PodInfo) -> bool {
        p.holds() && p.node.as_ref().is_some_and(|n| self.nodes.contains_key(n))
    }

    fn record_submit(&mut self, p: &PodInfo) {
        self.seen.push(Draft {
            actor: p.user.clone(),
            kind: "submit",
            unit: Some(p.uid.clone()),
            detail: json!({
                "pod": p.key(), "uid": p.uid, "namespace": p.namespace, "user": p.user,
                "gpus": p.ask.gpus, "cpu_milli": p.ask.cpu_milli, "mem_bytes": p.ask.mem_bytes,
                "created": p.created_ms, "estimate_ms": p.estimate_ms,
                "gang": p.gang.as_ref().map(|g| json!({"name": g.name, "size": g.size})),
            }),
        });
    }

    /// A pod was added or changed.
    pub fn pod_event(&mut self, mut p: PodInfo, now: i64) {
        if p.ended() {
            self.pod_gone(&p.uid, now);
            return;
        }
        let ours = self.ours(&p);
        let uid = p.uid.clone();
        let old = self.pods.get(&uid);
        if let Some(o) = old {
            if self.assumed.contains(&uid) && p.node.is_none() && !p.terminating {
                // An event from before our binding: keep what we bound.
                p.node = o.node.clone();
                p.bound_ms = o.bound_ms;
            }
            if same_for_scheduling(o, &p) {
                if p.node.is_some() {
                    self.assumed.remove(&uid);
                }
                self.pods.insert(uid, p);
                return;
            }
            let relevant = ours || self.holds_in_pool(o) || self.holds_in_pool(&p);
            if relevant {
                self.dirty = true;
            }
            self.assumed.remove(&uid);
            self.pods.insert(uid, p);
            return;
        }
        if ours && p.node.is_none() && !p.terminating {
            self.record_submit(&p);
            if !self.dirty && p.gang.is_none() && self.submit_one(&p, now) {
                self.pods.insert(uid, p);
                return;
            }
            self.dirty = true;
        } else if self.holds_in_pool(&p) {
            self.dirty = true;
        }
        self.pods.insert(uid, p);
    }

    /// A pod was deleted, or ended.
    pub fn pod_gone(&mut self, uid: &str, now: i64) {
        let Some(old) = self.pods.remove(uid) else { return };
        self.assumed.remove(uid);
        let was_evicting = self.evicting.remove(uid);
        if !self.ours(&old) {
            if self.holds_in_pool(&old) {
                self.dirty = true;
            }
            return;
        }
        let key = Self::unit_key(&old);
        self.seen.push(Draft {
            actor: "cluster".into(),
            kind: "end",
            unit: Some(old.uid.clone()),
            detail: json!({
                "pod": old.key(), "uid": old.uid, "node": old.node, "gpus": old.ask.gpus,
                "state": if old.node.is_some() { "ended or deleted" } else { "deleted while pending" },
                "evicted": was_evicting,
            }),
        });
        self.said.remove(&key);
        self.blocked.remove(&key);
        match self.job_of.get(&key).copied() {
            Some(job) if !self.dirty => {
                let running = self.units.get(&job).is_some_and(|u| u.running);
                let only = self.units.get(&job).is_some_and(|u| u.pods.len() == 1 && u.pods[0] == uid);
                if running && only && self.core.finish(job, now).is_ok() {
                    self.units.remove(&job);
                    self.job_of.remove(&key);
                    self.said.remove(&key);
                    self.audited.remove(&key);
                } else {
                    // A waiting unit (ordo-core has no withdraw) or part of a gang.
                    self.dirty = true;
                }
            }
            _ => {
                if was_evicting || old.node.is_some() || self.held.contains_key(&key) || self.partial.contains_key(&key)
                {
                    self.dirty = true;
                }
            }
        }
    }

    /// Every pod, as listed (the first list and each relist): replaces what was known.
    pub fn pods_listed(&mut self, all: Vec<PodInfo>, now: i64) {
        let fresh: HashSet<&str> = all.iter().map(|p| p.uid.as_str()).collect();
        let gone: Vec<String> = self.pods.keys().filter(|u| !fresh.contains(u.as_str())).cloned().collect();
        for uid in gone {
            self.pod_gone(&uid, now);
        }
        for p in all {
            if p.ended() {
                continue;
            }
            if self.ours(&p) && p.node.is_none() && !p.terminating && !self.pods.contains_key(&p.uid) {
                self.record_submit(&p);
            }
            if let Some(o) = self.pods.get(&p.uid) {
                if self.assumed.contains(&p.uid) && p.node.is_none() && o.node.is_some() {
                    // The list predates our binding; the binding stands.
                    continue;
                }
            }
            if p.node.is_some() {
                self.assumed.remove(&p.uid);
            }
            self.pods.insert(p.uid.clone(), p);
        }
        self.pods_synced = true;
        self.stats.pod_lists += 1;
        self.dirty = true;
    }

    fn record_node(&mut self, n: &NodeInfo, state: &str) {
        self.seen.push(Draft {
            actor: "cluster".into(),
            kind: "node",
            unit: None,
            detail: json!({
                "node": n.name, "state": state, "gpus": n.alloc.gpus, "cpu_milli": n.alloc.cpu_milli,
                "mem_bytes": n.alloc.mem_bytes, "why": n.invalid, "gpu_model": n.gpu_model,
                "gpu_mem_mib": n.gpu_mem_mib, "warning": n.warning,
            }),
        });
    }

    fn node_state(n: &NodeInfo) -> &'static str {
        if n.invalid.is_some() {
            "invalid"
        } else if n.cordoned {
            "cordoned"
        } else if !n.ready {
            "not-ready"
        } else {
            "open"
        }
    }

    /// A node was added or changed.
    pub fn node_event(&mut self, n: NodeInfo) {
        if !self.in_pool(&n) {
            self.node_gone(&n.name);
            return;
        }
        let old = self.nodes.get(&n.name);
        if old == Some(&n) {
            return;
        }
        if old.is_none_or(|o| {
            Self::node_state(o) != Self::node_state(&n)
                || o.alloc != n.alloc
                || (&o.gpu_model, o.gpu_mem_mib, &o.warning) != (&n.gpu_model, n.gpu_mem_mib, &n.warning)
        }) {
            self.record_node(&n, Self::node_state(&n));
        }
        self.nodes.insert(n.name.clone(), n);
        self.dirty = true;
    }

    /// A node was deleted (or left the pool).
    pub fn node_gone(&mut self, name: &str) {
        if let Some(n) = self.nodes.remove(name) {
            self.record_node(&n, "removed");
            self.dirty = true;
        }
    }

    /// Every node of the pool, as listed.
    pub fn nodes_listed(&mut self, all: Vec<NodeInfo>) {
        let fresh: HashSet<String> = all.iter().map(|n| n.name.clone()).collect();
        let gone: Vec<String> = self.nodes.keys().filter(|n| !fresh.contains(*n)).cloned().collect();
        for n in gone {
            self.node_gone(&n);
        }
        for n in all {
            self.node_event(n);
        }
        self.nodes_synced = true;
        self.dirty = true;
    }

    /// A binding of ours failed: `conflict` when the pod was already bound (409), with where
    /// the API server says it is now (if it was read back).
    pub fn bind_failed(&mut self, uid: &str, conflict: bool, now_bound_to: Option<PodInfo>) {
        self.assumed.remove(uid);
        if conflict {
            self.stats.conflicts += 1;
        }
        match now_bound_to {
            Some(p) => {
                self.pods.insert(p.uid.clone(), p);
            }
            None => {
                if let Some(p) = self.pods.get_mut(uid) {
                    p.node = None;
                    p.bound_ms = None;
                }
            }
        }
        self.dirty = true;
    }

    /// An eviction of ours failed (refused by a disruption budget, or the pod is gone).
    pub fn evict_failed(&mut self, uid: &str) {
        self.evicting.remove(uid);
        self.dirty = true;
    }

    /// Audit records of what was seen since the last call (the pass takes them too).
    pub fn take_seen(&mut self) -> Vec<Draft> {
        std::mem::take(&mut self.seen)
    }

    /// Submits one new waiting pod without a gang to ordo-core (the common case, no rebuild).
    /// False when it must wait for a rebuild (it cannot be placed as written).
    fn submit_one(&mut self, p: &PodInfo, now: i64) -> bool {
        // A topology ask is resolved (or held, saying why) by the rebuild.
        if p.invalid.is_some() || p.topology.is_some() {
            return false;
        }
        let open = self.open_nodes();
        // Limited to a set of nodes not seen at the last rebuild (ordo-core's nodes lack its
        // feature), or to none: the rebuild places or holds it.
        let (req, nodes) = match qualify::Qualifier::new(open.clone()).qual(&[p]) {
            qualify::Qual::Any => (None, open),
            qualify::Qual::Nodes(set) => match self.req_sets.known(&set) {
                Some(id) if self.req_elig.get(id as usize).is_some_and(Option::is_some) => {
                    (Some(id), set.iter().filter_map(|&i| open.get(i as usize).copied()).collect())
                }
                _ => return false,
            },
            qualify::Qual::NoNode => return false,
        };
        // Larger than every node it may use: the rebuild holds it with its reason.
        if !nodes.iter().any(|n| n.alloc.gpus >= p.ask.gpus) {
            return false;
        }
        let key = UnitKey::Pod(p.uid.clone());
        let unit = Unit {
            key: key.clone(),
            pods: vec![p.uid.clone()],
            running: false,
            ask: p.ask,
            estimate: p.estimate_ms.unwrap_or(self.cfg.default_estimate_ms),
            created: p.created_ms,
            since: 0,
            alloc: None,
            req,
            topo: ordo_core::TopoNeed::NONE,
        };
        let job = JobId(self.next_job);
        let mut req = self.req(job, &unit, &[p]);
        if let Some(e) = unit.req.and_then(|id| self.req_elig.get(id as usize).copied().flatten()) {
            req.elig = e;
        }
        if self.core.submit(req, now).is_err() {
            return false;
        }
        self.next_job += 1;
        self.job_of.insert(key, job);
        self.units.insert(job, unit);
        true
    }

    /// ordo-core's request for a unit of `pods`.
    pub(crate) fn req(&self, job: JobId, u: &Unit, pods: &[&PodInfo]) -> ordo_core::scheduler::JobReq {
        let mut r = ordo_core::scheduler::JobReq::new(job, u.created, u.ask.gpus, u.estimate.max(1));
        r.cpus = u.ask.cpu_milli.min(u32::MAX as u64) as u32;
        r.mem_mib = pods.iter().map(|p| p.ask.mem_mib_up()).sum();
        r.priority = pods.iter().map(|p| p.priority).max().unwrap_or(0);
        let user = pods.first().map(|p| p.user.as_str()).unwrap_or("");
        let group = pods.first().map(|p| p.namespace.as_str()).unwrap_or("");
        r.user = name_index(user);
        r.group = name_index(group);
        r.topo = u.topo;
        // A pod runs on one node: without the shape, a typed cluster's pool of small nodes
        // would take it over several.
        if pods.len() == 1 && u.ask.gpus > 0 {
            r.nodes = 1;
        }
        r
    }
}

/// FNV-1a of a name: the same index for the same user or namespace across restarts.
fn name_index(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}
