//! What the scheduler's integration tests share.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::{Plan, Scheduler};

/// Runs one pass at `now`, after `advance` when asked (a pass must be right without it):
/// the explained and the fast plan must decide the same and wake at the same instant; commits
/// the preemptions and the starts, then checks the scheduler's invariants.
pub fn pass_after(s: &mut Scheduler, now: i64, advance: bool) -> Plan {
    if advance {
        s.advance(now);
    }
    let plan = s.schedule(now, true);
    let fast = s.schedule(now, false);
    assert_eq!(plan.starts, fast.starts, "explain decided differently at {now}");
    assert_eq!(plan.preempt, fast.preempt, "explain preempted differently at {now}");
    assert_eq!(plan.wake_at, fast.wake_at, "explain wakes differently at {now}");
    for p in &plan.preempt {
        s.preempt(*p, now).unwrap();
    }
    for st in &plan.starts {
        s.start(st.job, &st.alloc, now).unwrap();
    }
    s.sanity_check().unwrap();
    plan
}
