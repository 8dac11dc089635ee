//! Job dependencies (`afterok`, `afterany`, `afternotok`, as Slurm's `--dependency`): when a
//! job waiting on others may join the queue, and when it never can (`DependencyNeverSatisfied`).

use crate::model::JobId;
use crate::scheduler::HashMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a dependency waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    /// The other job must end successfully (exit 0); if it ends any other way, never.
    AfterOk,
    /// The other job must end, however it ends.
    AfterAny,
    /// The other job must end unsuccessfully (failed, timed out, cancelled, node failure); if
    /// it succeeds, never.
    AfterNotOk,
}

impl DepKind {
    /// Slurm's name: `afterok`, `afterany`, `afternotok`.
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::AfterOk => "afterok",
            DepKind::AfterAny => "afterany",
            DepKind::AfterNotOk => "afternotok",
        }
    }

    /// Whether a job that ended so (`ok`: successfully) meets this dependency.
    pub fn met_by(self, ok: bool) -> bool {
        match self {
            DepKind::AfterOk => ok,
            DepKind::AfterAny => true,
            DepKind::AfterNotOk => !ok,
        }
    }

    /// What the other job must do, for people: `complete successfully`, `end`, `fail`.
    pub fn wants(self) -> &'static str {
        match self {
            DepKind::AfterOk => "complete successfully",
            DepKind::AfterAny => "end",
            DepKind::AfterNotOk => "end unsuccessfully",
        }
    }
}

impl fmt::Display for DepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DepKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "afterok" => Ok(DepKind::AfterOk),
            "afterany" => Ok(DepKind::AfterAny),
            "afternotok" => Ok(DepKind::AfterNotOk),
            _ => Err(format!("`{s}` is not a dependency kind (afterok, afterany, afternotok)")),
        }
    }
}

/// One dependency of a job on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dep {
    /// What it waits for.
    pub kind: DepKind,
    /// The job it waits on.
    pub job: JobId,
}

/// Where a job's dependencies stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DepState {
    /// Every dependency is met: the job may join the queue.
    Met,
    /// It still waits: on `on` (the first unmet dependency) and `left` dependencies in all.
    Waiting {
        /// The first dependency not met yet.
        on: Dep,
        /// Dependencies not met yet.
        left: u32,
    },
    /// A dependency can never be met (`on` ended the wrong way, or was itself never
    /// satisfied): Slurm's `DependencyNeverSatisfied`.
    Never {
        /// The dependency that can never be met.
        on: Dep,
        /// How `on.job` ended: successfully or not.
        ok: bool,
    },
}

/// The state of `deps` given how the jobs that ended so far ended (`ended(job)`: `Some(true)`
/// for success, `Some(false)` for any other end, `None` while it has not ended).
pub fn dep_state(deps: &[Dep], ended: impl Fn(JobId) -> Option<bool>) -> DepState {
    let mut first = None;
    let mut left = 0;
    for &d in deps {
        match ended(d.job) {
            Some(ok) if d.kind.met_by(ok) => {}
            Some(ok) => return DepState::Never { on: d, ok },
            None => {
                first.get_or_insert(d);
                left += 1;
            }
        }
    }
    match first {
        None => DepState::Met,
        Some(on) => DepState::Waiting { on, left },
    }
}

/// What one end changed: jobs whose dependencies are now all met (they may join the queue),
/// and jobs that can never run (each with the dependency that failed), in the order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Jobs whose last dependency was just met.
    pub ready: Vec<JobId>,
    /// Jobs whose dependency can never be met now, with that dependency and how its job
    /// ended. They count as ended unsuccessfully (as cancelled) for their own dependents,
    /// which are in this list too when that makes them never satisfied.
    pub never: Vec<(JobId, Dep, bool)>,
}

/// The jobs that wait on others, indexed by what they wait on, so that an end finds its
/// dependents at once. A dependency names a job or a *group* ([`Dependencies::add_group`]: a job
/// array, whose id stands for every element, as in Slurm): a dependency on a group is one entry
/// however many members it has, and the group keeps counts of how its members ended, so that
/// every end costs O(the jobs it releases or cancels), whatever the fan-out. The simulator and
/// the server keep one each.
#[derive(Debug, Clone, Default)]
pub struct Dependencies {
    /// Waiting job -> its dependencies not met yet, sorted, each once.
    waiting: HashMap<JobId, Vec<Dep>>,
    /// (Job or group, kind) -> the jobs that wait for it so. A job that stopped waiting
    /// (released, never satisfiable, removed) may still be listed: it is skipped when the list
    /// is taken, which happens once, when the dependency is settled.
    dependents: HashMap<(JobId, DepKind), Vec<JobId>>,
    /// Groups by id: how many of their members have not ended, and how many ended well or not.
    groups: HashMap<JobId, Group>,
    /// Member -> its group.
    member_of: HashMap<JobId, JobId>,
}

/// How a group's members ended so far.
#[derive(Debug, Clone, Copy, Default)]
struct Group {
    /// Members that have not ended.
    left: u32,
    /// Members that ended successfully.
    ok: u32,
    /// Members that ended any other way.
    failed: u32,
}

impl Group {
    /// Whether a dependency of `kind` on the whole group is settled: `Some(true)` met,
    /// `Some(false)` never satisfiable, `None` not yet. `afterany`: every member ended;
    /// `afterok`: every member ended well (never once one did not); `afternotok`: every member
    /// ended unsuccessfully (never once one succeeded).
    fn settled(&self, kind: DepKind) -> Option<bool> {
        match kind {
            DepKind::AfterAny => (self.left == 0).then_some(true),
            DepKind::AfterOk if self.failed > 0 => Some(false),
            DepKind::AfterNotOk if self.ok > 0 => Some(false),
            _ => (self.left == 0).then_some(true),
        }
    }
}

impl Dependencies {
    /// Declares a group (a job array): a dependency on `id` then stands for one on every member
    /// (`members`, `id` itself among them or not). `ended` says how members that already ended
    /// ended (see [`dep_state`]). Declare a group before any dependency on it is added.
    pub fn add_group(&mut self, id: JobId, members: &[JobId], ended: impl Fn(JobId) -> Option<bool>) {
        let mut g = Group::default();
        for &m in members {
            match ended(m) {
                Some(true) => g.ok += 1,
                Some(false) => g.failed += 1,
                None => {
                    g.left += 1;
                    self.member_of.insert(m, id);
                }
            }
        }
        self.groups.insert(id, g);
    }

    /// A group's members: (not ended, ended successfully, ended otherwise); `None` for a job
    /// that names no group.
    pub fn group_counts(&self, id: JobId) -> Option<(u32, u32, u32)> {
        self.groups.get(&id).map(|g| (g.left, g.ok, g.failed))
    }

    /// Whether `id` names a group.
    pub fn is_group(&self, id: JobId) -> bool {
        self.groups.contains_key(&id)
    }

    /// How a dependency stands now: met (`Some(true)`), never (`Some(false)`), or not yet; a
    /// dependency on a declared group reads its counts, one on a job `ended`.
    pub fn settled(&self, d: Dep, ended: &impl Fn(JobId) -> Option<bool>) -> Option<bool> {
        match self.groups.get(&d.job) {
            Some(g) => g.settled(d.kind),
            None => ended(d.job).map(|ok| d.kind.met_by(ok)),
        }
    }

    /// Records a job's dependencies, given how the jobs that ended so far ended (see
    /// [`dep_state`]; a dependency on a declared group reads the group's counts). Returns the
    /// job's state: only a `Waiting` job is kept (a `Met` one may join the queue now, a `Never`
    /// one can never run).
    pub fn add(&mut self, job: JobId, deps: &[Dep], ended: impl Fn(JobId) -> Option<bool>) -> DepState {
        let mut left: Vec<Dep> = Vec::new();
        for &d in deps {
            match self.settled(d, &ended) {
                Some(true) => {}
                Some(false) => {
                    // How the job (or the group member that settled it) ended.
                    let ok = match self.groups.get(&d.job) {
                        Some(_) => d.kind == DepKind::AfterNotOk,
                        None => ended(d.job).unwrap_or(false),
                    };
                    return DepState::Never { on: d, ok };
                }
                None => left.push(d),
            }
        }
        let Some(&on) = left.first() else { return DepState::Met };
        let n = left.len() as u32;
        left.sort_unstable();
        left.dedup();
        for d in &left {
            self.dependents.entry((d.job, d.kind)).or_default().push(job);
        }
        self.waiting.insert(job, left);
        DepState::Waiting { on, left: n }
    }

    /// Forgets a waiting job (it was cancelled or removed some other way). Its dependents, if
    /// any, are not told: call [`Dependencies::ended`] for that. O(1): the lists that name it
    /// drop it when they are settled.
    pub fn remove(&mut self, job: JobId) {
        self.waiting.remove(&job);
    }

    /// Whether `job` waits on dependencies.
    pub fn is_waiting(&self, job: JobId) -> bool {
        self.waiting.contains_key(&job)
    }

    /// The dependencies of a waiting job that are not met yet.
    pub fn unmet(&self, job: JobId) -> &[Dep] {
        self.waiting.get(&job).map_or(&[], Vec::as_slice)
    }

    /// Jobs waiting on dependencies.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no job waits on dependencies.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// A job ended (`ok`: successfully). Its dependents whose dependencies are now all met are
    /// released; those that can never be met are removed, and count as ended unsuccessfully
    /// for their own dependents and for their group (transitively). Costs O(dependencies
    /// settled + jobs released or removed), each with a small constant.
    pub fn ended(&mut self, job: JobId, ok: bool) -> Released {
        let mut out = Released::default();
        if self.dependents.is_empty() && self.member_of.is_empty() {
            // Nothing waits on any job and no group is open: nothing to settle.
            return out;
        }
        let mut todo = vec![(job, ok)];
        while let Some((j, ok)) = todo.pop() {
            // Dependencies on `j` itself (not when `j` names a group: those wait for its members).
            if !self.groups.contains_key(&j) {
                for kind in [DepKind::AfterOk, DepKind::AfterAny, DepKind::AfterNotOk] {
                    self.settle(Dep { kind, job: j }, kind.met_by(ok), ok, &mut out, &mut todo);
                }
            }
            // Its group's counts, and the dependencies on the group that this end settles.
            if let Some(gid) = self.member_of.remove(&j) {
                let Some(g) = self.groups.get_mut(&gid) else { continue };
                let before = *g;
                g.left = g.left.saturating_sub(1);
                if ok {
                    g.ok += 1;
                } else {
                    g.failed += 1;
                }
                let now = *g;
                for kind in [DepKind::AfterOk, DepKind::AfterAny, DepKind::AfterNotOk] {
                    if let (None, Some(met)) = (before.settled(kind), now.settled(kind)) {
                        self.settle(Dep { kind, job: gid }, met, ok, &mut out, &mut todo);
                    }
                }
            }
        }
        out
    }

    /// Settles dependency `d` for every job that waits on it: met, or never satisfiable (`ok`:
    /// how the job that settled it ended). Never-satisfiable jobs go on `todo` as ended
    /// unsuccessfully.
    fn settle(&mut self, d: Dep, met: bool, ok: bool, out: &mut Released, todo: &mut Vec<(JobId, bool)>) {
        let Some(ws) = self.dependents.remove(&(d.job, d.kind)) else { return };
        for w in ws {
            let Some(left) = self.waiting.get_mut(&w) else { continue };
            let Ok(at) = left.binary_search(&d) else { continue };
            if !met {
                self.waiting.remove(&w);
                out.never.push((w, d, ok));
                todo.push((w, false));
                continue;
            }
            left.remove(at);
            if left.is_empty() {
                self.waiting.remove(&w);
                out.ready.push(w);
            }
        }
    }
}

/// Parses Slurm's dependency list: `afterok:12:13,afterany:14` (kinds `afterok`, `afterany`,
/// `afternotok`, each with one or more job names separated by `:`; lists separated by `,` or
/// `?`). Names are returned as written; the caller resolves them. An empty text is no dependency.
pub fn parse_dep_list(s: &str) -> Result<Vec<(DepKind, String)>, String> {
    let mut out = Vec::new();
    for part in s.split([',', '?']).map(str::trim).filter(|p| !p.is_empty()) {
        let mut it = part.split(':');
        let kind: DepKind = it.next().unwrap_or_default().parse()?;
        let mut any = false;
        for name in it.map(str::trim) {
            if name.is_empty() {
                return Err(format!("`{part}`: an empty job id"));
            }
            out.push((kind, name.to_string()));
            any = true;
        }
        if !any {
            return Err(format!("`{part}`: expected {kind}:JOB[:JOB...]"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(kind: DepKind, j: u32) -> Dep {
        Dep { kind, job: JobId(j) }
    }

    #[test]
    fn states_follow_how_jobs_ended() {
        let deps = [d(DepKind::AfterOk, 1), d(DepKind::AfterAny, 2), d(DepKind::AfterNotOk, 3)];
        assert_eq!(dep_state(&deps, |_| None), DepState::Waiting { on: deps[0], left: 3 });
        let ends = |j: JobId| match j.0 {
            1 => Some(true),
            2 => Some(false),
            3 => Some(false),
            _ => None,
        };
        assert_eq!(dep_state(&deps, ends), DepState::Met);
        assert_eq!(dep_state(&deps, |_| Some(true)), DepState::Never { on: deps[2], ok: true });
        assert_eq!(dep_state(&[], |_| None), DepState::Met);
    }

    #[test]
    fn ends_release_and_cascade() {
        let mut g = Dependencies::default();
        // 2 after 1 ok, 3 after 2 ok, 4 after 1 notok, 5 after 2 any.
        assert!(matches!(g.add(JobId(2), &[d(DepKind::AfterOk, 1)], |_| None), DepState::Waiting { .. }));
        g.add(JobId(3), &[d(DepKind::AfterOk, 2)], |_| None);
        g.add(JobId(4), &[d(DepKind::AfterNotOk, 1)], |_| None);
        g.add(JobId(5), &[d(DepKind::AfterAny, 2), d(DepKind::AfterAny, 2)], |_| None);
        assert_eq!(g.len(), 4);
        // 1 fails: 2 never (and so 3 never, 2 counting as not ok), 4 ready, 5 ready (any end).
        let r = g.ended(JobId(1), false);
        assert_eq!(r.ready, vec![JobId(4), JobId(5)]);
        assert_eq!(r.never, vec![(JobId(2), d(DepKind::AfterOk, 1), false), (JobId(3), d(DepKind::AfterOk, 2), false)]);
        assert!(g.is_empty());
        // Already ended jobs count at once.
        assert_eq!(g.add(JobId(9), &[d(DepKind::AfterOk, 1)], |_| Some(true)), DepState::Met);
        assert!(g.is_empty());
    }

    #[test]
    fn two_kinds_on_one_job_are_settled_by_its_one_end() {
        let mut g = Dependencies::default();
        g.add(JobId(3), &[d(DepKind::AfterOk, 1), d(DepKind::AfterAny, 1)], |_| None);
        g.add(JobId(4), &[d(DepKind::AfterAny, 1), d(DepKind::AfterNotOk, 1)], |_| None);
        let r = g.ended(JobId(1), true);
        assert_eq!(r.ready, vec![JobId(3)]);
        assert_eq!(r.never, vec![(JobId(4), d(DepKind::AfterNotOk, 1), true)]);
        assert!(g.is_empty());
    }

    #[test]
    fn a_group_stands_for_its_members() {
        let mut g = Dependencies::default();
        let m = [JobId(10), JobId(11), JobId(12)];
        // Member 12 already ended successfully.
        g.add_group(JobId(10), &m, |j| (j == JobId(12)).then_some(true));
        assert!(g.is_group(JobId(10)));
        assert!(matches!(g.add(JobId(20), &[d(DepKind::AfterOk, 10)], |_| None), DepState::Waiting { .. }));
        g.add(JobId(21), &[d(DepKind::AfterAny, 10)], |_| None);
        // One member succeeded already: `afternotok` on the group can never be met.
        let never = g.add(JobId(22), &[d(DepKind::AfterNotOk, 10)], |_| None);
        assert_eq!(never, DepState::Never { on: d(DepKind::AfterNotOk, 10), ok: true });
        // Member 10 (whose id is the group's) ends well: no dependency on "10" is settled by it
        // alone (it names the group).
        let r = g.ended(JobId(10), true);
        assert_eq!(r, Released::default());
        assert_eq!(g.len(), 2);
        // Member 11 fails: afterok never; afterany met (every member ended).
        let r = g.ended(JobId(11), false);
        assert_eq!(r.never, vec![(JobId(20), d(DepKind::AfterOk, 10), false)]);
        assert_eq!(r.ready, vec![JobId(21)]);
        assert!(g.is_empty());
        // Later dependencies read the group's counts.
        assert_eq!(g.add(JobId(30), &[d(DepKind::AfterAny, 10)], |_| None), DepState::Met);
        assert!(matches!(g.add(JobId(31), &[d(DepKind::AfterOk, 10)], |_| None), DepState::Never { .. }));
    }

    #[test]
    fn a_fan_out_through_groups_costs_the_jobs_it_touches() {
        // X; A = n jobs after X (afterok); B = n jobs after the whole of A (afterany): X failing
        // cancels every A and releases every B, with 2n dependency entries in all.
        let n = 20_000u32;
        let mut g = Dependencies::default();
        let a: Vec<JobId> = (1..=n).map(JobId).collect();
        g.add_group(JobId(1), &a, |_| None);
        for &j in &a {
            g.add(j, &[d(DepKind::AfterOk, 0)], |_| None);
        }
        for k in 0..n {
            g.add(JobId(n + 1 + k), &[d(DepKind::AfterAny, 1)], |_| None);
        }
        let r = g.ended(JobId(0), false);
        assert_eq!(r.never.len(), n as usize);
        assert_eq!(r.ready.len(), n as usize);
        assert!(g.is_empty());
    }

    #[test]
    fn parses_slurm_lists() {
        let l = parse_dep_list("afterok:12:13,afterany:x?after_not_ok:7").unwrap();
        assert_eq!(
            l,
            vec![
                (DepKind::AfterOk, "12".into()),
                (DepKind::AfterOk, "13".into()),
                (DepKind::AfterAny, "x".into()),
                (DepKind::AfterNotOk, "7".into())
            ]
        );
        assert!(parse_dep_list("after:1").is_err());
        assert!(parse_dep_list("afterok").is_err());
        assert!(parse_dep_list("afterok::1").is_err());
        assert_eq!(parse_dep_list("").unwrap(), vec![]);
    }
}
