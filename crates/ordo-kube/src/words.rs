//! Why a pod waits, in people's words: ordo-core's `Reason` as the one line that goes into the
//! pod's `PodScheduled=False` condition, its Event, `ordo kube queue` and `ordo kube explain`.

use crate::objects::Ask;
use ordo_core::Reason;
use serde::{Deserialize, Serialize};

/// Why a pod (or gang) waits, as shown to people and in JSON: the same shape as `ordo server`'s
/// `WaitInfo` (docs/SERVER.md), so that tools read both alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitInfo {
    /// One line for people.
    pub text: String,
    /// The scheduler's reason, when ordo-core holds the pod (absent when it is kept out: an
    /// incomplete gang, a pod no node can ever hold, an unreadable annotation).
    pub detail: Option<Reason>,
    /// Pods or gangs ahead of it in the policy's order.
    pub ahead: usize,
    /// Expected start (ms since the epoch) by running pods' time limits, when known.
    pub expected_start: Option<i64>,
}

/// The kind of a reason without the numbers that move on every pass: a condition (and an
/// Event) is written again when this changes.
pub fn reason_kind(r: Option<&Reason>) -> u8 {
    match r {
        Some(Reason::Resources { .. }) => 0,
        Some(Reason::Priority { .. }) => 1,
        Some(Reason::Reserved { .. }) => 2,
        Some(Reason::Reservation { .. }) => 3,
        Some(Reason::NodeFit { .. }) => 4,
        Some(Reason::Outranked { .. }) => 5,
        None => 6,
        Some(Reason::Quota { .. }) => 7,
        Some(Reason::Constraint { .. }) => 8,
    }
}

/// Whether a reason says the pod does not fit (an Event of type Warning, reason
/// `FailedScheduling`) rather than that it waits its turn (Normal, `Waiting`).
pub fn is_shortage(r: Option<&Reason>) -> bool {
    matches!(r, Some(Reason::Resources { .. } | Reason::NodeFit { .. } | Reason::Constraint { .. }) | None)
}

/// `14:20 UTC` for a time today (in UTC, relative to `now`), else `2026-05-04 14:20 UTC`.
pub fn clock(ms: i64, now: i64) -> String {
    use k8s_openapi::jiff::Timestamp;
    let (Ok(t), Ok(n)) = (Timestamp::from_millisecond(ms), Timestamp::from_millisecond(now)) else {
        return format!("{ms} ms");
    };
    let (t, n) = (t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC), n.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC));
    if t.date() == n.date() {
        t.strftime("%H:%M UTC").to_string()
    } else {
        t.strftime("%Y-%m-%d %H:%M UTC").to_string()
    }
}

/// `2 nvidia.com/gpu, 4 CPU and 16Gi of memory`: what a pod asks, for people.
pub fn ask_text(a: Ask, gpu_resource: &str) -> String {
    let mut parts = vec![format!("{} {gpu_resource}", a.gpus)];
    if a.cpu_milli > 0 {
        let c = if a.cpu_milli.is_multiple_of(1000) {
            format!("{}", a.cpu_milli / 1000)
        } else {
            format!("{}m", a.cpu_milli)
        };
        parts.push(format!("{c} CPU"));
    }
    if a.mem_bytes > 0 {
        parts.push(format!("{} of memory", mem_text(a.mem_bytes)));
    }
    match parts.len() {
        1 => parts.remove(0),
        _ => {
            let last = parts.pop().unwrap_or_default();
            format!("{} and {last}", parts.join(", "))
        }
    }
}

/// `16Gi`, `512Mi`, `1000` (bytes) for people.
pub fn mem_text(b: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if b >= GI && b.is_multiple_of(GI) {
        format!("{}Gi", b / GI)
    } else if b >= MI && b.is_multiple_of(MI) {
        format!("{}Mi", b / MI)
    } else {
        format!("{b}")
    }
}

/// What the words need to know about the cluster and the policy.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The policy in force, as written (`fifo`, `sjf+easy`).
    pub policy: &'a str,
    /// The GPU resource name.
    pub gpu_resource: &'a str,
    /// Most GPUs free on any one open node of the pool.
    pub most_free: u32,
    /// GPUs of the largest open node.
    pub largest: u32,
    /// Idle open nodes (all GPUs free).
    pub idle_nodes: usize,
    /// Whether the pod may use only some open nodes (its nodeSelector, node affinity or
    /// taints): the three counts above are over those, and say so.
    pub qualifying: bool,
    /// Now, ms since the epoch.
    pub now: i64,
}

/// The line for a waiting unit that ordo-core holds. `what` names it (`default/train-3`,
/// `gang default/g (4 pods)`), `ask` is what it asks in all, `blocker` names the unit a reason
/// points at, `position` is its 1-based place in the policy's order and `expected` the
/// expected start when known.
pub fn waiting_text(
    cx: &Context<'_>,
    r: &Reason,
    ask: Ask,
    pods: usize,
    blocker: Option<&str>,
    position: usize,
    expected: Option<i64>,
) -> String {
    let res = cx.gpu_resource;
    let (any_node, open_node) =
        if cx.qualifying { ("any qualifying node", "qualifying open node") } else { ("any node", "open node") };
    let tail = |s: String| {
        let mut s = format!("{s}; position {position}");
        if let Some(t) = expected {
            s.push_str(&format!("; expected start {} by time limits", clock(t, cx.now)));
        }
        s
    };
    let need = match pods {
        1 => format!("needs {} on one node", ask_text(ask, res)),
        n if ask.gpus > cx.largest => format!("gang of {n} pods needs {} {res} in all, on whole idle nodes", ask.gpus),
        n => format!("gang of {n} pods needs {} in all", ask_text(ask, res)),
    };
    match r {
        Reason::Resources { .. } if pods > 1 && ask.gpus > cx.largest => {
            tail(format!(
                "{need}; {} {} idle",
                ordo_core::words::count(cx.idle_nodes, open_node),
                ordo_core::words::agree(cx.idle_nodes, "is", "are")
            ))
        }
        Reason::Resources { .. } => tail(format!("{need}; the most free on {any_node} is {}", cx.most_free)),
        // ordo-core's "no node has 4 free GPUs" (or, for a pod, which it asks on one node, "needs
        // 1 nodes with 4 free GPUs each, ..."): say how far off the best node is.
        Reason::NodeFit { why, .. } if why.starts_with("no node has") || why.starts_with("needs 1 nodes with") => {
            tail(format!("{need}; the most free on {any_node} is {}", cx.most_free))
        }
        // Held by its required topology level: ordo-core's words say it all ("needs 16 GPUs
        // within one block; the most free in any block is 12").
        Reason::NodeFit { why, .. } if pods > 1 && why.starts_with("needs ") && why.contains(" within one ") => {
            tail(format!("gang of {pods} pods {why}"))
        }
        Reason::NodeFit { why, .. } => tail(format!("{need}; {why}")),
        // A pod limited by its nodeSelector, affinity or taints: ordo-core's words name its
        // synthetic features (`kube-req:N`); say how far off its best node is instead (the
        // engine puts why the nodes with room do not qualify first).
        Reason::Constraint { .. } if cx.qualifying => {
            tail(format!("{need}; the most free on {any_node} is {}", cx.most_free))
        }
        Reason::Constraint { why, .. } => tail(format!("{need}; {why}")),
        Reason::Priority { .. } => tail(format!(
            "waiting behind {} under {} (strict order: nothing starts before it)",
            blocker.unwrap_or("a pod that does not fit"),
            cx.policy
        )),
        Reason::Reserved { until, .. } => tail(format!(
            "it fits now, but the {res} are reserved for {} under {}, which starts by {}",
            blocker.unwrap_or("an earlier pod"),
            cx.policy,
            clock(*until, cx.now)
        )),
        Reason::Reservation { start } => {
            tail(format!("holds a reservation under {} to start at {}", cx.policy, clock(*start, cx.now)))
        }
        Reason::Outranked { need } => tail(format!(
            "outranked under {}: pods ahead of it by the policy hold the {need} {res} it needs; it starts when they end or fall behind it",
            cx.policy
        )),
        // ordo kube sets no quotas; an array's or owner's limit would read so.
        Reason::Quota { scope, holds, limit, need, model, .. } => {
            let whose = match scope {
                ordo_core::QuotaScope::User => "its user's",
                ordo_core::QuotaScope::Group => "its group's",
                ordo_core::QuotaScope::Array => "its array's",
            };
            let of = model.as_ref().map_or(String::new(), |m| format!(" for {m}"));
            tail(format!("{need} more would pass {whose} quota{of} ({holds} of {limit} held)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_the_issue_says() {
        let now = 1_767_269_400_000; // 2026-01-01 12:10 UTC
        let cx = Context {
            policy: "fifo",
            gpu_resource: "nvidia.com/gpu",
            most_free: 6,
            largest: 8,
            idle_nodes: 0,
            qualifying: false,
            now,
        };
        let a = Ask { gpus: 8, ..Ask::default() };
        let t = waiting_text(&cx, &Reason::Resources { need: 8, free: 10 }, a, 1, None, 1, None);
        assert_eq!(t, "needs 8 nvidia.com/gpu on one node; the most free on any node is 6; position 1");
        let q = Context { qualifying: true, ..cx };
        let t = waiting_text(&q, &Reason::Resources { need: 8, free: 10 }, a, 1, None, 1, None);
        assert_eq!(t, "needs 8 nvidia.com/gpu on one node; the most free on any qualifying node is 6; position 1");
        let t = waiting_text(
            &cx,
            &Reason::Priority { behind: ordo_core::JobId(3) },
            Ask { gpus: 1, ..a },
            1,
            Some("default/train-7"),
            3,
            Some(now + 2 * 3_600_000),
        );
        assert_eq!(
            t,
            "waiting behind default/train-7 under fifo (strict order: nothing starts before it); position 3; expected start 14:10 UTC by time limits"
        );
        let quota = |model: Option<&str>| Reason::Quota {
            scope: ordo_core::QuotaScope::User,
            id: 1,
            holds: 4,
            limit: 4,
            need: 2,
            model: model.map(String::from),
        };
        let t = waiting_text(&cx, &quota(Some("a100")), Ask { gpus: 2, ..a }, 1, None, 2, None);
        assert_eq!(t, "2 more would pass its user's quota for a100 (4 of 4 held); position 2");
        let t = waiting_text(&cx, &quota(None), Ask { gpus: 2, ..a }, 1, None, 2, None);
        assert_eq!(t, "2 more would pass its user's quota (4 of 4 held); position 2");
        // A gang held by its required topology level says ordo-core's words.
        let topo = Reason::NodeFit {
            need: 16,
            why: "needs 16 GPUs within one block; the most free in any block is 12".into(),
        };
        let t = waiting_text(&cx, &topo, Ask { gpus: 16, ..a }, 2, None, 1, None);
        assert_eq!(t, "gang of 2 pods needs 16 GPUs within one block; the most free in any block is 12; position 1");
        assert_eq!(clock(now + 86_400_000, now), "2026-01-02 12:10 UTC");
        assert_eq!(
            ask_text(Ask { gpus: 2, cpu_milli: 1500, mem_bytes: 16 << 30 }, "nvidia.com/gpu"),
            "2 nvidia.com/gpu, 1500m CPU and 16Gi of memory"
        );
    }
}
