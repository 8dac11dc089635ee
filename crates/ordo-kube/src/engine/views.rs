//! Read-only views for `ordo kube queue` and `ordo kube explain`: the waiting pods in the
//! policy's order with reasons and expected starts, and one pod's state in words.

use super::*;
use crate::words::WaitInfo;
use serde::{Deserialize, Serialize};

/// One waiting pod or gang in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueLine {
    /// 1-based place in the policy's order.
    pub position: usize,
    /// `namespace/name` of each pod (one, or a gang's).
    pub pods: Vec<String>,
    /// The gang's name, if a gang.
    pub gang: Option<String>,
    /// User.
    pub user: String,
    /// GPUs in all.
    pub gpus: u32,
    /// Creation time of its first pod, ms since the epoch.
    pub created: i64,
    /// Why it waits.
    pub wait: WaitInfo,
}

/// The queue now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    /// The policy.
    pub policy: String,
    /// The scheduler name.
    pub scheduler: String,
    /// Open nodes of the pool, and their GPUs in all.
    pub open_nodes: usize,
    /// GPUs of the open nodes.
    pub gpus: u64,
    /// GPUs free on them (as ordo-core sees it).
    pub free_gpus: u64,
    /// Pods of this scheduler bound and running (or about to).
    pub running_pods: usize,
    /// Waiting pods and gangs in the policy's order (those that start now first).
    pub waiting: Vec<QueueLine>,
}

/// One pod, explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explained {
    /// `namespace/name`.
    pub pod: String,
    /// `waiting`, `bound`, `ending`, or `not-ordo` (another scheduler's).
    pub state: String,
    /// Where it is bound.
    pub node: Option<String>,
    /// The queue line when it waits.
    pub line: Option<QueueLine>,
    /// What its `PodScheduled=False` condition says now (written by the running scheduler).
    pub condition: Option<String>,
    /// In words.
    pub text: String,
}

impl Engine {
    /// The queue at `now`, explained (runs an explained plan; changes nothing).
    pub fn queue(&mut self, now: i64) -> QueueView {
        if self.dirty {
            self.rebuild(now);
        }
        self.core.advance(now);
        let plan = self.core.schedule(now, true);
        // Explain the waiting pods as the scheduler's pass does: after the pods that start now
        // took their GPUs (on a copy: the view changes nothing).
        let saved = self.core.clone();
        for s in &plan.starts {
            let _ = self.core.start(s.job, &s.alloc, now);
        }
        let mut waiting = Vec::new();
        let mut order: Vec<(JobId, Option<ordo_core::Reason>)> = plan.starts.iter().map(|s| (s.job, None)).collect();
        order.extend(plan.waiting.iter().map(|(j, r)| (*j, Some(r.clone()))));
        for (i, (job, r)) in order.into_iter().enumerate() {
            let Some(u) = self.units.get(&job) else { continue };
            let wait = match r {
                Some(r) => self.wait_info(job, &r, i + 1, now),
                None => WaitInfo {
                    text: self
                        .blocked
                        .get(&u.key)
                        .map(|b| format!("chosen to start under {}, but {b}", self.policy_text))
                        .unwrap_or_else(|| "starts at the scheduler's next pass".into()),
                    detail: None,
                    ahead: i,
                    expected_start: Some(now),
                },
            };
            waiting.push(self.line(&u.key, &u.pods, i + 1, wait));
        }
        let n = waiting.len();
        let held: Vec<(UnitKey, Held)> = self.held.iter().map(|(k, h)| (k.clone(), h.clone())).collect();
        for (j, (k, h)) in held.into_iter().enumerate() {
            let wait = WaitInfo { text: h.why.clone(), detail: None, ahead: n + j, expected_start: None };
            waiting.push(self.line(&k, &h.pods, n + j + 1, wait));
        }
        let partial: Vec<(UnitKey, Vec<String>)> = self.partial.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in partial {
            let at = waiting.len();
            let wait = WaitInfo {
                text: "the rest of its gang is bound: it is bound at the next pass where it fits".into(),
                detail: None,
                ahead: at,
                expected_start: None,
            };
            waiting.push(self.line(&k, &v, at + 1, wait));
        }
        self.core = saved;
        let cap = self.core.capacity();
        QueueView {
            policy: self.policy_text.clone(),
            scheduler: self.cfg.scheduler_name.clone(),
            open_nodes: self.nodes.values().filter(|n| n.open()).count(),
            gpus: self.nodes.values().filter(|n| n.open()).map(|n| n.alloc.gpus as u64).sum(),
            free_gpus: cap.total_free(),
            running_pods: self.pods.values().filter(|p| self.ours(p) && p.holds()).count(),
            waiting,
        }
    }

    fn line(&self, key: &UnitKey, uids: &[String], position: usize, wait: WaitInfo) -> QueueLine {
        let pods: Vec<&PodInfo> = uids.iter().filter_map(|u| self.pods.get(u)).collect();
        QueueLine {
            position,
            pods: pods.iter().map(|p| p.key()).collect(),
            gang: match key {
                UnitKey::Gang(_, n) => Some(n.clone()),
                UnitKey::Pod(_) => None,
            },
            user: pods.first().map(|p| p.user.clone()).unwrap_or_default(),
            gpus: pods.iter().map(|p| p.ask.gpus).sum(),
            created: pods.iter().map(|p| p.created_ms).min().unwrap_or(0),
            wait,
        }
    }

    /// One pod (`namespace/name`), explained; `None` if no such pod is known.
    pub fn explain(&mut self, pod: &str, now: i64) -> Option<Explained> {
        let p = self.pods.values().find(|p| p.key() == pod)?.clone();
        let condition = p.waiting_message.clone();
        if !self.ours(&p) {
            return Some(Explained {
                pod: pod.into(),
                state: "not-ordo".into(),
                node: p.node.clone(),
                line: None,
                condition,
                text: format!(
                    "its schedulerName is `{}`, not `{}`: another scheduler places it",
                    p.scheduler, self.cfg.scheduler_name
                ),
            });
        }
        if let Some(node) = &p.node {
            let state = if p.terminating { "ending" } else { "bound" };
            return Some(Explained {
                pod: pod.into(),
                state: state.into(),
                node: Some(node.clone()),
                line: None,
                condition,
                text: format!("bound to node {node}"),
            });
        }
        let q = self.queue(now);
        let line = q.waiting.into_iter().find(|l| l.pods.iter().any(|x| x == pod));
        let text =
            line.as_ref().map(|l| l.wait.text.clone()).unwrap_or_else(|| "not in the queue (being deleted)".into());
        Some(Explained { pod: pod.into(), state: "waiting".into(), node: None, line, condition, text })
    }
}
