//! One scheduling pass: ordo-core's plan turned into bindings (a gang's pods all at once, each
//! checked against what its node has left), evictions, pod conditions and audit records.

use super::*;
use crate::words::{self, Context};
use ordo_core::{Demand, Reason};

/// Bind a pod to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// Pod uid.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node.
    pub node: String,
}

/// Evict a pod (a preemptive policy stops it for others).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evict {
    /// Pod uid.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why, in words (the pod's Event says it).
    pub why: String,
}

/// Tell a waiting pod why it waits: its `PodScheduled=False` condition, and (when the reason
/// changed, not only the position) an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Pod uid.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The message.
    pub text: String,
    /// Whether to post an Event too.
    pub event: bool,
    /// Whether it does not fit (Warning `FailedScheduling`) rather than waits its turn (Normal `Waiting`).
    pub shortage: bool,
    /// Whether the pod has no `PodScheduled=False` condition yet (its transition time is now).
    pub first: bool,
}

/// What a pass decided.
#[derive(Debug, Clone, Default)]
pub struct PassOut {
    /// Bindings to make (a gang's pods together).
    pub binds: Vec<Bind>,
    /// Evictions to make (before the bindings that need their room, which wait for it).
    pub evictions: Vec<Evict>,
    /// Conditions (and Events) to write.
    pub notes: Vec<Note>,
    /// Audit records.
    pub audit: Vec<Draft>,
    /// Ask for a pass at this time even if nothing happens (ms since the epoch).
    pub wake_at: Option<i64>,
    /// Whether the pass explained every waiting pod (the slower kind).
    pub explained: bool,
    /// Lines for the scheduler's log (the topology labels turned bad, or good again).
    pub warnings: Vec<String>,
}

impl Engine {
    /// What each open node of the pool has left now: allocatable less every pod that holds
    /// resources there (any scheduler's, ending ones, evicted ones, and ours just bound).
    pub(crate) fn node_free(&self) -> HashMap<String, Ask> {
        let mut free: HashMap<String, Ask> =
            self.nodes.values().filter(|n| n.open()).map(|n| (n.name.clone(), n.alloc)).collect();
        for p in self.pods.values().filter(|p| p.holds()) {
            if let Some(f) = p.node.as_ref().and_then(|n| free.get_mut(n)) {
                *f = f.minus(p.ask);
            }
        }
        free
    }

    /// One pass at `now`: what to bind, evict and say. The caller applies it and reports
    /// failed bindings ([`Engine::bind_failed`]) and evictions ([`Engine::evict_failed`]).
    pub fn pass(&mut self, now: i64) -> PassOut {
        let mut out = PassOut { audit: self.take_seen(), ..PassOut::default() };
        if !self.synced() {
            return out;
        }
        self.stats.passes += 1;
        if self.dirty {
            self.rebuild(now);
        }
        if !self.partial.is_empty() && self.complete_gangs(now, &mut out) {
            self.rebuild(now);
        }
        out.warnings = std::mem::take(&mut self.warnings);
        out.audit.append(&mut self.seen);
        if self.core.waiting_len() == 0 && self.held.is_empty() {
            return out;
        }
        self.core.advance(now);
        // The plan without reasons decides; the explained one (every waiting pod's reason, for
        // conditions and the audit log) costs about the whole queue (30 to 90 ms at 10,000
        // pending pods, benches/pass.rs), so it runs at most every second, and at most every
        // 0.2 ms per waiting pod (2 s at 10,000): a twentieth of the time or less. A rule on the
        // queue's length rather than a measured cost keeps the engine clock-free.
        let explain_at = self.last_explain + (self.core.waiting_len() as i64 / 5).max(1000);
        let explain = now >= explain_at;
        let plan = if explain {
            self.last_explain = now;
            self.core.schedule(now, true)
        } else {
            self.core.schedule(now, false)
        };
        out.explained = explain;
        self.preempt(&plan, now, &mut out);
        self.start(&plan, now, &mut out);
        if explain {
            self.explain_notes(&plan, now, &mut out);
        }
        out.wake_at = match plan.wake_at {
            Some(w) => Some(w.min(explain_at.max(now + 1000))),
            // Held units (incomplete gangs, pods no node could ever take) are not in ordo-core's
            // queue: their reasons are written by an explained pass, so one is due while any of
            // them has not said its current reason yet.
            None if !plan.waiting.is_empty() || self.core.waiting_len() > 0 || self.held_unsaid() => {
                Some(explain_at.max(now + 1000))
            }
            None => None,
        };
        out
    }

    /// Whether some held unit's pods have not been told its current reason.
    fn held_unsaid(&self) -> bool {
        self.held.iter().any(|(k, h)| self.said.get(k).is_none_or(|s| s.text != h.why))
    }

    fn preempt(&mut self, plan: &ordo_core::Plan, now: i64, out: &mut PassOut) {
        for &job in &plan.preempt {
            let Some(u) = self.units.get(&job).cloned() else { continue };
            if !u.running || self.core.finish(job, now).is_err() {
                self.dirty = true;
                continue;
            }
            let for_unit = plan.starts.first().and_then(|s| self.units.get(&s.job)).map(|f| self.label(&f.key));
            let why = format!(
                "preempted by ordo under {}: {} ranks ahead of it by the policy and needs its {}; {}",
                self.policy_text,
                for_unit.as_deref().unwrap_or("a waiting pod"),
                self.cfg.gpu_resource,
                "it is evicted (its controller may create it again)"
            );
            for uid in &u.pods {
                if let Some(p) = self.pods.get(uid) {
                    out.evictions.push(Evict {
                        uid: uid.clone(),
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                        why: why.clone(),
                    });
                    self.evicting.insert(uid.clone());
                    self.stats.evictions += 1;
                }
            }
            out.audit.push(Draft {
                actor: "scheduler".into(),
                kind: "preempt",
                unit: Some(self.unit_id(&u.key, u.created)),
                detail: json!({
                    "pods": self.pod_names(&u.pods), "uids": u.pods, "gpus": u.ask.gpus, "for": for_unit,
                    "ran_ms": now - u.since, "why": why,
                }),
            });
            self.job_of.remove(&u.key);
            self.units.remove(&job);
        }
    }

    fn pod_names(&self, uids: &[String]) -> Vec<String> {
        uids.iter().filter_map(|u| self.pods.get(u)).map(|p| p.key()).collect()
    }

    fn start(&mut self, plan: &ordo_core::Plan, now: i64, out: &mut PassOut) {
        if plan.starts.is_empty() {
            return;
        }
        let strict = self.cfg.policy.backfill == ordo_core::Backfill::None && !self.cfg.policy.order.preemptive();
        // The head: the first waiting unit in queue order that does not start now; a start
        // behind it is a backfill.
        let starting: HashSet<JobId> = plan.starts.iter().map(|s| s.job).collect();
        let mut ahead_of_head = HashSet::new();
        for id in self.core.waiting_ids_in_order() {
            if !starting.contains(&id) {
                break;
            }
            ahead_of_head.insert(id);
        }
        let mut free = self.node_free();
        for s in &plan.starts {
            let Some(u) = self.units.get(&s.job).cloned() else { continue };
            let parts: Vec<(String, u32)> = s
                .alloc
                .parts
                .iter()
                .filter_map(|&(n, k)| self.node_names.get(n as usize).map(|name| (name.clone(), k)))
                .collect();
            let members: Vec<&PodInfo> = u.pods.iter().filter_map(|p| self.pods.get(p)).collect();
            if members.len() != u.pods.len() || parts.len() != s.alloc.parts.len() {
                self.dirty = true;
                break;
            }
            let offer: Vec<Ask> = parts
                .iter()
                .map(|(n, k)| {
                    let f = free.get(n).copied().unwrap_or_default();
                    Ask { gpus: (*k).min(f.gpus), ..f }
                })
                .collect();
            let asks: Vec<Ask> = members.iter().map(|p| p.ask).collect();
            let split = crate::gang::split(&asks, &offer);
            let Some(split) = split else {
                let why = if members.len() > 1 {
                    format!(
                        "its {} pods cannot be split over the nodes ordo-core chose ({}) with what those nodes have left; pods whose GPU counts divide the nodes' sizes always can",
                        members.len(),
                        parts.iter().map(|(n, k)| format!("{k} on {n}")).collect::<Vec<_>>().join(", ")
                    )
                } else {
                    format!(
                        "node {} does not have what it asks left yet (pods that were evicted or are ending still hold it)",
                        parts.first().map(|p| p.0.as_str()).unwrap_or("?")
                    )
                };
                self.blocked.insert(u.key.clone(), why);
                if strict {
                    break;
                }
                continue;
            };
            if self.core.start(s.job, &s.alloc, now).is_err() {
                self.dirty = true;
                break;
            }
            let mut binds = Vec::new();
            for (i, p) in members.iter().enumerate() {
                let node = parts[split[i]].0.clone();
                if let Some(f) = free.get_mut(&node) {
                    *f = f.minus(p.ask);
                }
                binds.push(Bind { uid: p.uid.clone(), namespace: p.namespace.clone(), name: p.name.clone(), node });
            }
            for b in &binds {
                if let Some(p) = self.pods.get_mut(&b.uid) {
                    p.node = Some(b.node.clone());
                    p.bound_ms = Some(now);
                }
                self.assumed.insert(b.uid.clone());
            }
            self.stats.binds += binds.len() as u64;
            out.audit.push(Draft {
                actor: "scheduler".into(),
                kind: "start",
                unit: Some(self.unit_id(&u.key, u.created)),
                detail: json!({
                    "pods": self.pod_names(&u.pods), "uids": u.pods, "gpus": u.ask.gpus,
                    "nodes": binds.iter().map(|b| b.node.clone()).collect::<Vec<_>>(),
                    "backfill": !ahead_of_head.contains(&s.job), "waited_ms": now - u.created,
                    "gang": match &u.key { UnitKey::Gang(_, n) => Some(n.clone()), _ => None },
                }),
            });
            out.binds.extend(binds);
            if let Some(unit) = self.units.get_mut(&s.job) {
                unit.running = true;
                unit.since = now;
                unit.alloc = Some(s.alloc.clone());
            }
            self.blocked.remove(&u.key);
            self.said.remove(&u.key);
            self.audited.remove(&u.key);
        }
    }

    /// Binds the remaining pods of gangs bound half-way (a binding failed, or the scheduler
    /// stopped, in the middle of one): each on the open node with the fewest free GPUs that
    /// holds it, outside the policy's order, as the gang's start was already decided.
    fn complete_gangs(&mut self, now: i64, out: &mut PassOut) -> bool {
        let mut free = self.node_free();
        let mut any = false;
        let partial = std::mem::take(&mut self.partial);
        for (key, uids) in &partial {
            for uid in uids {
                let Some(p) = self.pods.get(uid) else { continue };
                let ask = p.ask;
                let best = free.iter().filter(|(_, f)| f.holds(ask)).min_by_key(|(n, f)| (f.gpus, (*n).clone()));
                let Some((node, _)) = best.map(|(n, f)| (n.clone(), *f)) else {
                    self.blocked.insert(
                        key.clone(),
                        "the rest of its gang is bound; it waits for room on any node to join them".into(),
                    );
                    continue;
                };
                if let Some(f) = free.get_mut(&node) {
                    *f = f.minus(ask);
                }
                out.binds.push(Bind {
                    uid: uid.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    node: node.clone(),
                });
                out.audit.push(Draft {
                    actor: "scheduler".into(),
                    kind: "start",
                    unit: Some(uid.clone()),
                    detail: json!({"pods": [p.key()], "uids": [uid], "gpus": ask.gpus, "nodes": [node.clone()],
                        "why": format!("completes {}, bound in part", self.label(key))}),
                });
                if let Some(p) = self.pods.get_mut(uid) {
                    p.node = Some(node);
                    p.bound_ms = Some(now);
                }
                self.assumed.insert(uid.clone());
                self.stats.binds += 1;
                any = true;
            }
        }
        any
    }

    /// The words context for a unit limited to requirement set `req` (`None`: every open
    /// node): the most GPUs free on one of its nodes, its largest node's GPUs, its idle nodes.
    pub(crate) fn context(&self, req: Option<u32>) -> (u32, u32, usize) {
        let cap = self.core.capacity();
        let set = req.and_then(|id| self.req_sets.sets.get(id as usize));
        let mine = |i: usize| set.is_none_or(|s| s.binary_search(&(i as u32)).is_ok());
        let (free_now, per_node) = (cap.free(), cap.cap_per_node());
        let free = free_now.iter().enumerate().filter(|(i, _)| mine(*i));
        let most_free = free.clone().map(|(_, f)| *f).max().unwrap_or(0);
        let largest = (0..self.node_names.len())
            .filter(|&i| mine(i))
            .filter_map(|i| self.nodes.get(&self.node_names[i]))
            .map(|n| n.alloc.gpus)
            .max()
            .unwrap_or(0);
        let idle = free.filter(|(i, f)| per_node.get(*i).is_some_and(|c| c == *f && *c > 0)).count();
        (most_free, largest, idle)
    }

    /// The earliest time (by running units' estimates) at which `d` fits: running units taken
    /// on an empty copy of the cluster, then given back in the order of their expected ends.
    pub(crate) fn earliest_fit(&self, d: Demand, now: i64) -> Option<i64> {
        let cap = self.core.capacity();
        if cap.fits_for(d) {
            return Some(now);
        }
        let mut what_if = cap.empty_like();
        let mut ends: Vec<(i64, JobId, &Allocation)> = Vec::new();
        for (job, u) in self.units.iter().filter(|(_, u)| u.running) {
            if let Some(a) = &u.alloc {
                if what_if.take_what_if(a) {
                    ends.push(((u.since + u.estimate).max(now + 1), *job, a));
                }
            }
        }
        ends.sort_unstable_by_key(|(t, j, _)| (*t, *j));
        for (t, _, a) in ends {
            what_if.give(a);
            if what_if.fits_for(d) {
                return Some(t);
            }
        }
        None
    }

    /// What a unit asks of ordo-core's capacity: its GPUs, CPU and memory, on the nodes it may use.
    pub(crate) fn demand(&self, u: &Unit, mem_mib: u64) -> Demand {
        let mut d =
            Demand::new(u.ask.gpus, None, u.ask.cpu_milli.min(u32::MAX as u64) as u32, mem_mib).with_topo(u.topo);
        if u.pods.len() == 1 && u.ask.gpus > 0 {
            d = d.on_nodes(1);
        }
        match u.req.and_then(|id| self.req_elig.get(id as usize).copied().flatten()) {
            Some(e) => d.within(e),
            None => d,
        }
    }

    /// The wait of one unit ordo-core holds, in words, with its expected start.
    pub(crate) fn wait_info(&self, job: JobId, r: &Reason, position: usize, now: i64) -> words::WaitInfo {
        let Some(u) = self.units.get(&job) else {
            return words::WaitInfo {
                text: "unknown".into(),
                detail: Some(r.clone()),
                ahead: position - 1,
                expected_start: None,
            };
        };
        let (most_free, largest, idle_nodes) = self.context(u.req);
        let cx = Context {
            policy: &self.policy_text,
            gpu_resource: &self.cfg.gpu_resource,
            most_free,
            largest,
            idle_nodes,
            qualifying: u.req.is_some(),
            now,
        };
        let mem: u64 = u.pods.iter().filter_map(|p| self.pods.get(p)).map(|p| p.ask.mem_mib_up()).sum();
        let (blocker, expected) = match r {
            Reason::Priority { behind } => {
                let head = self.units.get(behind);
                let e = head.and_then(|h| {
                    let hm = h.pods.iter().filter_map(|p| self.pods.get(p)).map(|p| p.ask.mem_mib_up()).sum();
                    self.earliest_fit(self.demand(h, hm), now)
                });
                (head.map(|h| self.label(&h.key)), e)
            }
            Reason::Reserved { for_job, .. } => (self.units.get(for_job).map(|h| self.label(&h.key)), None),
            Reason::Reservation { start } => (None, Some(*start)),
            Reason::Outranked { .. } => (None, None),
            _ => (None, self.earliest_fit(self.demand(u, mem), now)),
        };
        let mut text = words::waiting_text(&cx, r, u.ask, u.pods.len(), blocker.as_deref(), position, expected);
        // Limited to some nodes and short of room there while others have it: say why those
        // do not qualify, first.
        if let Some(why) = u.req.filter(|_| words::is_shortage(Some(r))).and_then(|id| self.room_words(u, id)) {
            text = format!("{why}; {text}");
        }
        if let Some(b) = self.blocked.get(&u.key) {
            text = format!("chosen to start under {}, but {b}", self.policy_text);
        }
        words::WaitInfo { text, detail: Some(r.clone()), ahead: position - 1, expected_start: expected }
    }

    /// Reasons of an explained plan: audit `skip` records where a unit's reason changed, and
    /// conditions for the pods whose reason changed (first, in policy order) or whose
    /// position moved and was last written long enough ago, up to the pass's budget.
    fn explain_notes(&mut self, plan: &ordo_core::Plan, now: i64, out: &mut PassOut) {
        let mut budget = self.cfg.notes_per_pass;
        let mut refresh: Vec<(JobId, usize)> = Vec::new();
        for (i, (job, r)) in plan.waiting.iter().enumerate() {
            let Some(u) = self.units.get(job) else { continue };
            let key = u.key.clone();
            let blocker = match r {
                Reason::Priority { behind } => self.units.get(behind).map(|h| h.key.clone()),
                Reason::Reserved { for_job, .. } => self.units.get(for_job).map(|h| h.key.clone()),
                _ => None,
            };
            let kind = words::reason_kind(Some(r)) + if self.blocked.contains_key(&key) { 10 } else { 0 };
            if self.audited.get(&key) != Some(&(kind, blocker.clone())) {
                out.audit.push(Draft {
                    actor: "scheduler".into(),
                    kind: "skip",
                    unit: Some(self.unit_id(&key, u.created)),
                    detail: json!({"pods": self.pod_names(&u.pods), "reason": r, "position": i + 1,
                        "behind": blocker.as_ref().map(|b| self.label(b)), "blocked": self.blocked.get(&key)}),
                });
                self.audited.insert(key.clone(), (kind, blocker.clone()));
            }
            let said = self.said.get(&key);
            let changed = said.is_none_or(|s| s.kind != kind || s.blocker != blocker);
            if changed && budget > 0 {
                budget -= 1;
                let w = self.wait_info(*job, r, i + 1, now);
                self.note(&key, w.text, kind, blocker, i + 1, now, true, words::is_shortage(Some(r)), out);
            } else if said.is_some_and(|s| s.position != i + 1 && now - s.at >= self.cfg.note_refresh_ms) {
                refresh.push((*job, i + 1));
            }
        }
        let n = plan.waiting.len();
        let held: Vec<(UnitKey, Held)> = self.held.iter().map(|(k, h)| (k.clone(), h.clone())).collect();
        for (j, (key, h)) in held.into_iter().enumerate() {
            let kind = 6;
            let changed = self.said.get(&key).is_none_or(|s| s.text != h.why);
            if changed && budget > 0 {
                budget -= 1;
                if self.audited.get(&key) != Some(&(kind, None)) {
                    out.audit.push(Draft {
                        actor: "scheduler".into(),
                        kind: "skip",
                        unit: Some(match &key {
                            UnitKey::Pod(uid) => uid.clone(),
                            k => self.unit_id(k, 0),
                        }),
                        detail: json!({"pods": self.pod_names(&h.pods), "position": n + j + 1, "why": h.why}),
                    });
                    self.audited.insert(key.clone(), (kind, None));
                }
                self.note_pods(&key, &h.pods, h.why.clone(), kind, None, n + j + 1, now, true, true, out);
            }
        }
        for (job, position) in refresh {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let Some(r) = plan.waiting.get(position - 1).map(|(_, r)| r.clone()) else { continue };
            let Some(u) = self.units.get(&job) else { continue };
            let key = u.key.clone();
            let (kind, blocker) = self.said.get(&key).map(|s| (s.kind, s.blocker.clone())).unwrap_or((0, None));
            let w = self.wait_info(job, &r, position, now);
            self.note(&key, w.text, kind, blocker, position, now, false, words::is_shortage(Some(&r)), out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn note(
        &mut self,
        key: &UnitKey,
        text: String,
        kind: u8,
        blocker: Option<UnitKey>,
        position: usize,
        now: i64,
        event: bool,
        shortage: bool,
        out: &mut PassOut,
    ) {
        let Some(&job) = self.job_of.get(key) else { return };
        let pods = self.units.get(&job).map(|u| u.pods.clone()).unwrap_or_default();
        self.note_pods(key, &pods, text, kind, blocker, position, now, event, shortage, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn note_pods(
        &mut self,
        key: &UnitKey,
        pods: &[String],
        text: String,
        kind: u8,
        blocker: Option<UnitKey>,
        position: usize,
        now: i64,
        event: bool,
        shortage: bool,
        out: &mut PassOut,
    ) {
        for uid in pods {
            let Some(p) = self.pods.get(uid) else { continue };
            // After a restart the pod may already say it.
            if p.waiting_message.as_deref() == Some(text.as_str()) {
                continue;
            }
            out.notes.push(Note {
                uid: uid.clone(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                text: text.clone(),
                event,
                shortage,
                first: p.waiting_message.is_none(),
            });
        }
        self.said.insert(key.clone(), Said { kind, blocker, text, position, at: now });
    }
}
