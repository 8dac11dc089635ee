//! Rebuilding ordo-core's state from the pods and nodes: the open nodes of the pool less what
//! other pods hold, our bound pods as running jobs, our waiting pods and complete gangs queued.

use super::qualify::{feature, kind_of, none_qualify, unmet_on, Kind, Qual, Qualifier, ReqSets};
use super::*;
use ordo_core::{ClusterSpec, Demand, Elig, GpuNeeds, ModelPick, NodeSpec, Placement, Speeds};

impl Engine {
    /// Rebuilds ordo-core's state: nodes in name order; running units in the order they were
    /// bound; waiting units in creation order (then namespace and name). A running unit that
    /// ordo-core cannot hold where it is (it overcommits a node, or sits on a node that is
    /// closed) is counted as another scheduler's pods are: its node is shrunk by what it holds.
    /// A waiting unit limited to some open nodes (nodeSelector, required node affinity, taints)
    /// asks ordo-core for the synthetic feature of that set of nodes, which those nodes have.
    pub(crate) fn rebuild(&mut self, now: i64) {
        self.stats.rebuilds += 1;
        let open: Vec<&NodeInfo> = self.open_nodes();
        let names: Vec<String> = open.iter().map(|n| n.name.clone()).collect();
        let idx: HashMap<String, u32> = names.iter().enumerate().map(|(i, n)| (n.clone(), i as u32)).collect();

        // Our pods by unit: running (bound, on an open node) and waiting.
        let mut running: BTreeMap<UnitKey, Vec<&PodInfo>> = BTreeMap::new();
        let mut waiting: BTreeMap<UnitKey, Vec<&PodInfo>> = BTreeMap::new();
        let mut off_core: HashSet<UnitKey> = HashSet::new();
        for p in self.pods.values().filter(|p| self.ours(p) && !p.ended()) {
            let key = Self::unit_key(p);
            if p.node.is_some() {
                if p.terminating || self.evicting.contains(&p.uid) || !idx.contains_key(p.node.as_deref().unwrap_or(""))
                {
                    off_core.insert(key.clone());
                }
                running.entry(key).or_default().push(p);
            } else if !p.terminating {
                waiting.entry(key).or_default().push(p);
            }
        }
        for v in running.values_mut().chain(waiting.values_mut()) {
            v.sort_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name)));
        }
        let mut order: Vec<(&UnitKey, i64)> =
            running.iter().map(|(k, v)| (k, v.iter().filter_map(|p| p.bound_ms).min().unwrap_or(now))).collect();
        order.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));

        // Waiting units: pods without a gang, complete gangs; the rest is held with why.
        let mut held = BTreeMap::new();
        let mut partial = BTreeMap::new();
        let mut queue: Vec<(i64, String, &UnitKey, &Vec<&PodInfo>)> = Vec::new();
        for (key, pods) in &waiting {
            let uids: Vec<String> = pods.iter().map(|p| p.uid.clone()).collect();
            let why =
                pods.iter().find_map(|p| p.invalid.as_ref().map(|w| format!("cannot be scheduled as written: {w}")));
            if let Some(why) = why {
                held.insert(key.clone(), Held { pods: uids, why });
                continue;
            }
            if let UnitKey::Gang(ns, name) = key {
                let bound = running.get(key).map_or(0, |v| v.len());
                if bound > 0 {
                    partial.insert(key.clone(), uids);
                    continue;
                }
                let size = pods.iter().filter_map(|p| p.gang.as_ref().map(|g| g.size)).max().unwrap_or(1) as usize;
                if pods.len() < size {
                    held.insert(
                        key.clone(),
                        Held {
                            pods: uids,
                            why: format!(
                                "gang {ns}/{name} has {} of its {}; it is bound all or none once all exist",
                                pods.len(),
                                ordo_core::words::count(size, "pod")
                            ),
                        },
                    );
                    continue;
                }
            }
            let first = pods[0];
            queue.push((first.created_ms, first.key(), key, pods));
        }
        queue.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        // Which open nodes each may use. A pod runs on one node, so one larger than every node
        // it may use waits (ordo-core would place it over several, which a pod cannot use).
        let mut qualifier = Qualifier::new(open.clone());
        let mut req_sets = ReqSets::default();
        let mut queued: Vec<(i64, &UnitKey, &Vec<&PodInfo>, Option<u32>)> = Vec::new();
        for (created, _, key, pods) in queue {
            let uids = || pods.iter().map(|p| p.uid.clone()).collect::<Vec<_>>();
            let set = match qualifier.qual(pods) {
                Qual::NoNode => {
                    let unmet = unmet_on(pods, open.iter().copied());
                    let why = format!("{}; it waits until one does", none_qualify(open.len(), &unmet, "qualify"));
                    let why = if pods.len() > 1 { format!("gang of {} pods: {why}", pods.len()) } else { why };
                    held.insert(key.clone(), Held { pods: uids(), why });
                    continue;
                }
                Qual::Any => None,
                Qual::Nodes(set) => Some(set),
            };
            let largest = match &set {
                None => open.iter().map(|n| n.alloc.gpus).max().unwrap_or(0),
                Some(s) => s.iter().filter_map(|&i| open.get(i as usize)).map(|n| n.alloc.gpus).max().unwrap_or(0),
            };
            if let Some(big) = pods.iter().find(|p| p.ask.gpus > largest) {
                let res = &self.cfg.gpu_resource;
                let which =
                    if set.is_some() { "open node of the pool that qualifies" } else { "open node of the pool" };
                let why = format!(
                    "needs {} on one node, but no {which} is that large (the largest has {largest} {res}); it waits until one is",
                    crate::words::ask_text(big.ask, res)
                );
                let why = if pods.len() > 1 { format!("its pod {}: {why}", big.key()) } else { why };
                held.insert(key.clone(), Held { pods: uids(), why });
                continue;
            }
            queued.push((created, key, pods, set.map(|s| req_sets.id(s))));
        }
        // ordo-core tells at most 128 kinds of node apart: the sets seen last beyond that are
        // not given to it, and their units wait, held.
        let keep = req_sets.fit_kinds(&open);
        let features = req_sets.node_features(names.len(), keep);

        // The topology of the open nodes, in ordo-core's node order, from their labels; labels
        // that put a unit under two parents give none (reported once, until they change).
        let (topology, problem) = match self.cfg.topology_labels.build(&open) {
            None => (None, None),
            Some(Ok(t)) => (Some(std::sync::Arc::new(t)), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        let mut topology_unset = None;

        let preemptive = self.cfg.policy.order.preemptive();
        let mut core;
        let mut units: HashMap<JobId, Unit>;
        let mut job_of: HashMap<UnitKey, JobId>;
        let mut next: u32;
        let mut typed_err = None;
        // At most a few rounds: each one moves the units ordo-core refused off the core.
        loop {
            // What others hold on each open node: pods of other schedulers, ours that are off
            // the core (ending, evicted, or refused), in bytes and thousandths.
            let mut other: Vec<Ask> = vec![Ask::default(); names.len()];
            for p in self.pods.values().filter(|p| p.holds()) {
                let Some(&n) = p.node.as_ref().and_then(|n| idx.get(n)) else { continue };
                if !self.ours(p) || off_core.contains(&Self::unit_key(p)) {
                    other[n as usize] = other[n as usize].plus(p.ask);
                }
            }
            let spec = ClusterSpec {
                nodes: open
                    .iter()
                    .zip(&other)
                    .zip(&features)
                    .map(|((n, o), f)| {
                        let free = n.alloc.minus(*o);
                        NodeSpec {
                            name: n.name.clone(),
                            gpus: free.gpus,
                            cpus: Some(free.cpu_milli.min(u32::MAX as u64) as u32),
                            mem_mib: Some(free.mem_mib_down()),
                            gpu_model: n.gpu_model.clone(),
                            gpu_mem_mib: n.gpu_mem_mib,
                            features: f.clone(),
                        }
                    })
                    .collect(),
            };
            // Typed: pools by GPU model, GPU memory and features (one pool when the nodes are all
            // alike, which places exactly as an untyped scheduler).
            let policy = self.cfg.policy.clone();
            core = match Scheduler::typed(
                &spec,
                Placement::Consolidated,
                policy,
                &Speeds::default(),
                ModelPick::default(),
            ) {
                Ok(c) => c,
                Err(e) => {
                    typed_err = Some(e);
                    Scheduler::new(&spec, Placement::Consolidated, self.cfg.policy.clone())
                }
            };
            core.set_min_run(self.cfg.min_run_ms);
            if let Some(t) = &topology {
                // It describes exactly these nodes and nothing is submitted yet: it cannot fail
                // but for a bug, which the log then says.
                if let Err(e) = core.set_topology(t.clone()) {
                    topology_unset = Some(format!("ordo kube: the topology was not set ({e}); scheduling without it"));
                }
            }
            units = HashMap::new();
            job_of = HashMap::new();
            next = 0;
            let mut refused = Vec::new();
            for &(key, since) in &order {
                if off_core.contains(key) {
                    continue;
                }
                let pods = &running[key];
                let unit = Unit {
                    key: key.clone(),
                    pods: pods.iter().map(|p| p.uid.clone()).collect(),
                    running: true,
                    ask: pods.iter().fold(Ask::default(), |a, p| a.plus(p.ask)),
                    estimate: self.estimate_of(pods),
                    created: pods.iter().map(|p| p.created_ms).min().unwrap_or(now),
                    since,
                    alloc: None,
                    req: None,
                    topo: ordo_core::TopoNeed::NONE,
                };
                let job = JobId(next);
                let mut req = self.req(job, &unit, pods);
                let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
                for p in pods {
                    if let Some(&n) = p.node.as_ref().and_then(|n| idx.get(n)) {
                        *per_node.entry(n).or_default() += p.ask.gpus;
                    }
                }
                let bare = Allocation { parts: per_node.into_iter().collect(), detail: None };
                let demand = Demand::new(req.gpus, None, req.cpus, req.mem_mib);
                let ok = match core.capacity().complete(&bare, demand) {
                    Some(alloc) => {
                        let committed = if preemptive {
                            core.submit(req, since).is_ok() && core.start(job, &alloc, since).is_ok()
                        } else {
                            req.estimate = (since + unit.estimate - now).max(1);
                            core.submit(req, now).is_ok() && core.start(job, &alloc, now).is_ok()
                        };
                        committed.then_some(alloc)
                    }
                    None => None,
                };
                match ok {
                    Some(alloc) => {
                        next += 1;
                        job_of.insert(key.clone(), job);
                        units.insert(job, Unit { alloc: Some(alloc), ..unit });
                    }
                    None => refused.push(key.clone()),
                }
            }
            if refused.is_empty() {
                break;
            }
            off_core.extend(refused);
        }

        // ordo-core's eligibility of each requirement set it was given (every node of the set
        // has the set's feature, so it cannot fail but for a bug: the units are then held).
        let mut req_elig = Vec::with_capacity(req_sets.sets.len());
        for id in 0..req_sets.sets.len() as u32 {
            let needs = GpuNeeds { features: vec![feature(id)], ..GpuNeeds::default() };
            req_elig.push(match &typed_err {
                Some(e) => Err(format!("ordo-core cannot tell its nodes apart ({e})")),
                None if id as usize >= keep => Err(format!(
                    "ordo-core tells at most {} kinds of node apart (GPU model, GPU memory and the sets of nodes pods are limited to), and the nodes it may use would be one more; it waits until fewer are needed",
                    ordo_core::pools::MAX_POOLS
                )),
                None => core.eligibility(&needs),
            });
        }
        let no_features = Vec::new();
        for (created, key, pods, req) in queued {
            let elig = match req.map(|id| &req_elig[id as usize]) {
                None => Elig::ANY,
                Some(Ok(e)) => *e,
                Some(Err(e)) => {
                    let why = format!("cannot be limited to the nodes that qualify: {e}");
                    held.insert(key.clone(), Held { pods: pods.iter().map(|p| p.uid.clone()).collect(), why });
                    continue;
                }
            };
            let topo = match self.topology_need(&core, pods, problem.as_deref()) {
                Ok(t) => t,
                Err(why) => {
                    held.insert(key.clone(), Held { pods: pods.iter().map(|p| p.uid.clone()).collect(), why });
                    continue;
                }
            };
            let unit = Unit {
                key: key.clone(),
                pods: pods.iter().map(|p| p.uid.clone()).collect(),
                running: false,
                ask: pods.iter().fold(Ask::default(), |a, p| a.plus(p.ask)),
                estimate: self.estimate_of(pods),
                created,
                since: 0,
                alloc: None,
                req,
                topo,
            };
            let job = JobId(next);
            let mut r = self.req(job, &unit, pods);
            r.elig = elig;
            match core.submit(r, now) {
                Ok(()) => {
                    next += 1;
                    job_of.insert(key.clone(), job);
                    units.insert(job, unit);
                }
                Err(e) => {
                    let nodes: Vec<&NodeInfo> = match req {
                        None => open.clone(),
                        Some(id) => {
                            req_sets.sets[id as usize].iter().filter_map(|&i| open.get(i as usize).copied()).collect()
                        }
                    };
                    // A gang's GPUs come from one pool: nodes of one kind (GPU model, memory, features).
                    let mut kinds: HashMap<Kind<'_>, u64> = HashMap::new();
                    for n in &nodes {
                        let f = idx.get(&n.name).and_then(|&i| features.get(i as usize)).unwrap_or(&no_features);
                        *kinds.entry(kind_of(n, f)).or_default() += n.alloc.gpus as u64;
                    }
                    let one_kind = kinds.values().copied().max().unwrap_or(0);
                    let why = self.never_fits(&unit, pods.len(), &e, &nodes, one_kind);
                    held.insert(key.clone(), Held { pods: unit.pods, why });
                }
            }
        }
        self.core = core;
        self.units = units;
        self.job_of = job_of;
        self.next_job = next;
        self.held = held;
        self.partial = partial;
        self.req_elig = req_elig.into_iter().map(|e| e.ok()).collect();
        self.req_sets = req_sets;
        self.node_names = names;
        self.node_idx = idx;
        self.blocked.retain(|k, _| self.job_of.contains_key(k));
        self.dirty = false;
        self.report_topology(problem.as_deref());
        self.warnings.extend(topology_unset);
    }

    /// Logs and audits the topology labels' problem when it changes (`None`: no problem).
    fn report_topology(&mut self, problem: Option<&str>) {
        if self.topology_problem.as_deref() == problem {
            return;
        }
        let labels = self.cfg.topology_labels.to_string();
        self.warnings.push(match problem {
            Some(p) => format!(
                "ordo kube: warning: the nodes' topology labels ({labels}) give no topology: {p}; gangs are placed without topology, and pods that require a level wait, until the labels are fixed"
            ),
            None => format!("ordo kube: the nodes' topology labels ({labels}) give a topology again"),
        });
        self.seen.push(Draft {
            actor: "cluster".into(),
            kind: "topology",
            unit: None,
            detail: json!({"labels": labels, "problem": problem}),
        });
        self.topology_problem = problem.map(str::to_string);
    }

    /// The topology level a waiting unit asks (its pods' `ordo.dev/topology`, which must agree),
    /// resolved by `core`; why it waits instead, in words: its pods disagree, it names a level
    /// the labels do not give, or it requires one while there is no topology (none configured,
    /// or labels with `problem`). Without a topology, a `preferred:` ask is ignored.
    fn topology_need(
        &self,
        core: &Scheduler,
        pods: &[&PodInfo],
        problem: Option<&str>,
    ) -> Result<ordo_core::TopoNeed, String> {
        let ann = crate::objects::ANN_TOPOLOGY;
        let mut asks = pods.iter().filter_map(|p| p.topology.as_ref().map(|a| (p, a)));
        let Some((first, ask)) = asks.next() else { return Ok(ordo_core::TopoNeed::NONE) };
        if let Some((other, b)) = asks.find(|(_, b)| *b != ask) {
            return Err(format!(
                "its pods ask different topology levels ({ann} `{ask}` on {}, `{b}` on {}); it waits until they ask the same",
                first.key(),
                other.key()
            ));
        }
        if core.topology().is_some() {
            return core
                .topology_need(ask)
                .map_err(|e| format!("{ann} `{ask}`: {e}; it waits until it names one of them"));
        }
        if !ask.required {
            return Ok(ordo_core::TopoNeed::NONE);
        }
        Err(match problem {
            Some(p) => format!(
                "{ann} `{ask}`, but the nodes' topology labels give no topology ({p}); it waits until they are fixed"
            ),
            None => format!(
                "{ann} `{ask}`, but this scheduler reads no topology (start it with --topology-labels, such as nvidia.com/gpu.clique=block); it waits until it does"
            ),
        })
    }

    /// A unit's estimate: the largest of its pods', each its own or the default.
    pub(crate) fn estimate_of(&self, pods: &[&PodInfo]) -> i64 {
        pods.iter()
            .map(|p| p.estimate_ms.unwrap_or(self.cfg.default_estimate_ms))
            .max()
            .unwrap_or(self.cfg.default_estimate_ms)
    }

    /// Why a unit can never be placed on the open nodes of the pool it may use, in words.
    /// `one_kind`: the most GPUs on the nodes of one kind (GPU model, memory and features), where
    /// a gang's GPUs must all come from.
    fn never_fits(
        &self,
        u: &Unit,
        pods: usize,
        e: &ordo_core::scheduler::SubmitError,
        nodes: &[&NodeInfo],
        one_kind: u64,
    ) -> String {
        let res = &self.cfg.gpu_resource;
        let largest = nodes.iter().map(|n| n.alloc.gpus).max().unwrap_or(0);
        let total: u64 = nodes.iter().map(|n| n.alloc.gpus as u64).sum();
        let what = crate::words::ask_text(u.ask, res);
        match e {
            // No unit of its required level is that large, even empty.
            ordo_core::scheduler::SubmitError::NeverPlaced { why, .. } if u.topo.required && why.contains(" within one ") => {
                let who = if pods > 1 { format!("gang of {pods} pods ") } else { String::new() };
                format!("{who}{why} with nothing of ordo's running; it waits until the topology has a larger one")
            }
            _ if pods > 1 && total >= u.ask.gpus as u64 && one_kind < u.ask.gpus as u64 => {
                format!(
                    "gang of {pods} pods needs {} {res} in all on nodes of one kind (one GPU model and memory, the same qualifying sets), and the most on one kind is {one_kind}; it waits until there are more",
                    u.ask.gpus
                )
            }
            ordo_core::scheduler::SubmitError::NeverFits { .. } if pods == 1 && largest >= u.ask.gpus => format!(
                "needs {what} on one node; pods of other schedulers (or pods ending) hold part of every open node large enough; it waits until they end"
            ),
            ordo_core::scheduler::SubmitError::NeverFits { .. } if pods == 1 => format!(
                "needs {what} on one node, but no open node of the pool is that large (the largest has {largest} {res}); it waits until one is"
            ),
            ordo_core::scheduler::SubmitError::NeverFits { .. } => format!(
                "gang of {pods} pods needs {} {res} in all, more than the open nodes of the pool have ({total}); it waits until they do",
                u.ask.gpus
            ),
            _ => format!("needs {what}, which no open node of the pool can ever hold ({e}); it waits until one can"),
        }
    }
}
