//! Submissions: checks of what a client asks for, and the group commit of many submissions in
//! one transaction.

use super::*;
use crate::array::{parse_array, ArraySpec};

/// A submission that passed its checks: who, the job (for an array, what every element is
/// made from), the array's spec and its dependencies as the scheduler keeps them (an array's
/// id expanded to its elements).
type Checked = (Principal, JobInfo, Option<ArraySpec>, Vec<AfterDep>);

impl Core {
    /// Adds a job; returns once it is committed.
    pub fn submit(&mut self, who: &Principal, req: SubmitRequest, now: i64) -> Result<JobNo, ApiError> {
        self.submit_batch(vec![(who.clone(), req)], now).pop().expect("one result per submission")
    }

    /// Adds several jobs in one transaction (group commit: concurrent submissions share one
    /// disk sync). Each result comes only after the commit; an invalid submission is refused
    /// alone, a failed commit refuses all.
    pub fn submit_batch(&mut self, items: Vec<(Principal, SubmitRequest)>, now: i64) -> Vec<Result<JobNo, ApiError>> {
        let mut extra: HashMap<String, usize> = HashMap::new();
        let checked: Vec<Result<Checked, ApiError>> = items
            .into_iter()
            .map(|(who, req)| {
                let r = self.check_submission(&who, req, now, &extra);
                if let Ok((_, a, _)) = &r {
                    *extra.entry(who.user.clone()).or_default() += a.as_ref().map_or(1, |a| a.indices.len());
                }
                r.map(|(j, a, after)| (who, j, a, after))
            })
            .collect();
        let policy = self.policy.to_string();
        // Per valid submission, the ids of its jobs (an array's elements in index order).
        let committed = (|| -> Result<Vec<Vec<JobNo>>, ApiError> {
            let tx = begin(&mut self.conn, self.group, &mut self.writes)?;
            let mut ids = Vec::new();
            for (who, j, array, _) in checked.iter().flatten() {
                let command = serde_json::to_string(&j.command).map_err(|e| internal("encode command", e))?;
                let after = match j.after.is_empty() {
                    true => None,
                    false => Some(serde_json::to_string(&j.after).map_err(|e| internal("encode after", e))?),
                };
                let mut detail = json!({"gpus": j.gpus, "nodes": j.nodes, "cpus": j.cpus, "mem_mib": j.mem_mib, "time_limit_ms": j.time_limit_ms, "no_preempt": j.no_preempt, "after": j.after});
                // A constraint on its GPUs, when it has one (audit records of others unchanged).
                if !j.gpu_models.is_empty() {
                    detail["gpu_models"] = json!(j.gpu_models);
                }
                if let Some(m) = j.gpu_mem_mib {
                    detail["gpu_mem_mib"] = json!(m);
                }
                if !j.features.is_empty() {
                    detail["features"] = json!(j.features);
                }
                if let Some(p) = &j.preempt {
                    detail["preempt"] = json!(p);
                }
                if let Some(t) = &j.topology {
                    detail["topology"] = json!(t);
                }
                if let Some(a) = array {
                    ids.push(insert_array(&tx, who, j, a, &detail, &policy, now)?);
                    continue;
                }
                // A plain job: one row, its id the next one.
                tx.prepare_cached(
                    "INSERT INTO jobs(user, name, command, cwd, gpus, cpus, mem_mib, time_limit_ms, priority, on_node_failure, state, submit, no_preempt, umask, after, nodes, output, gpu_models, gpu_mem_mib, features)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        who.user,
                        j.name,
                        command,
                        j.cwd,
                        j.gpus,
                        j.cpus,
                        j.mem_mib.map(|m| m as i64),
                        j.time_limit_ms,
                        j.priority,
                        if j.on_node_failure == OnNodeFailure::Fail { "fail" } else { "requeue" },
                        now,
                        j.no_preempt as i64,
                        j.umask,
                        after,
                        j.nodes,
                        j.output,
                        db::list_text(&j.gpu_models),
                        j.gpu_mem_mib.map(|m| m as i64),
                        db::list_text(&j.features)
                    ])
                })
                .ctx("insert job")?;
                let id = tx.last_insert_rowid() as JobNo;
                if id > u32::MAX as u64 {
                    return Err(ApiError::Conflict("job ids exhausted (more than 2^32 jobs in this database)".into()));
                }
                if let Some(p) = &j.preempt {
                    let p = serde_json::to_string(p).map_err(|e| internal("encode preempt", e))?;
                    tx.prepare_cached("UPDATE jobs SET preempt = ?1 WHERE id = ?2")
                        .and_then(|mut st| st.execute(params![p, id as i64]))
                        .ctx("store the job's checkpoints")?;
                }
                if let Some(t) = &j.topology {
                    tx.prepare_cached("UPDATE jobs SET topology = ?1 WHERE id = ?2")
                        .and_then(|mut st| st.execute(params![t, id as i64]))
                        .ctx("store the job's topology ask")?;
                }
                audit(&tx, now, &who.user, "submit", Some(id), &policy, &detail)?;
                ids.push(vec![id]);
            }
            tx.commit().ctx("commit submissions")?;
            Ok(ids)
        })();
        let mut ids = match committed {
            Ok(ids) => ids.into_iter(),
            Err(e) => {
                let msg = e.to_string();
                return checked
                    .into_iter()
                    .map(|r| r.and_then(|_| Err(internal("submission not stored", &msg))))
                    .collect();
            }
        };
        let max_up = self.nodes.values().filter(|n| n.takes_work()).map(|n| n.gpus).max().unwrap_or(0);
        checked
            .into_iter()
            .map(|r| {
                let (who, info, array, after) = r?;
                let made = ids.next().expect("ids per valid submission");
                let id = made[0];
                let members: Vec<(JobNo, Option<ArrayMember>)> = match &array {
                    None => vec![(id, None)],
                    Some(a) => {
                        self.add_array(id, a);
                        made.iter().zip(&a.indices).map(|(&e, &index)| (e, Some(ArrayMember { id, index }))).collect()
                    }
                };
                for (eid, member) in members {
                    let mut info = info.clone();
                    info.id = eid;
                    info.array = member;
                    // Checked at submission: a dependency cannot have become unmeetable since.
                    let waits = matches!(self.add_expanded_deps(eid, &after), Ok(ordo_core::DepState::Waiting { .. }));
                    if !waits
                        && (outgrows(&info, max_up)
                            || !queue_in(&mut self.sched, &self.cfg.quotas, &info, eid, now, info.time_limit_ms, now))
                    {
                        self.held.insert(eid);
                    }
                    *self.pending_per_user.entry(who.user.clone()).or_default() += 1;
                    self.pending.insert(eid, info);
                }
                Ok(id)
            })
            .collect()
    }

    /// For a job that gives no node count (nor CPUs or memory) and asks more GPUs than any
    /// node has: `Ok(0)`, its GPUs split over nodes as the core's consolidated placement
    /// chooses (whole idle nodes, largest first, the remainder on one more node: `--gpus 12` on
    /// 8-GPU nodes is 8 + 4), when the registered nodes of one kind it accepts (`fit`) could
    /// hold it on at most [`MAX_GANG_NODES`] nodes (a job's GPUs are all of one kind); else why
    /// it never could. `Ok(1)`: it fits one node.
    fn split_shape(fit: &Fit<'_>, gpus: u32) -> Result<u32, ApiError> {
        if fit.largest() >= gpus {
            return Ok(1);
        }
        // Per kind: the fewest nodes that hold it (the largest ones), and how many GPUs those
        // and all the kind's nodes have.
        let mut best: Option<(u64, u32, usize, u64)> = None;
        for group in &fit.groups {
            let mut sizes: Vec<u32> = group.iter().map(|n| n.gpus).collect();
            sizes.sort_unstable_by(|a, b| b.cmp(a));
            let total: u64 = sizes.iter().map(|&g| g as u64).sum();
            let (mut fewest, mut held) = (0, 0u64);
            for &g in &sizes {
                if held >= gpus as u64 {
                    break;
                }
                held += g as u64;
                fewest += 1;
            }
            if held >= gpus as u64 && fewest <= MAX_GANG_NODES {
                return Ok(0);
            }
            if best.is_none_or(|b| (held, std::cmp::Reverse(fewest)) > (b.0, std::cmp::Reverse(b.1))) {
                best = Some((held, fewest, sizes.len(), total));
            }
        }
        let (held, fewest, n, total) = best.unwrap_or_default();
        Err(ApiError::Unprocessable(format!(
            "the job needs {gpus} GPUs but the largest node{} has {}; split over nodes it {}",
            fit.scope(),
            fit.largest(),
            if held < gpus as u64 {
                format!("needs more than the {n} registered nodes{} have in all ({total})", fit.kind_scope())
            } else {
                format!("needs {fewest} nodes, more than a job may have ({MAX_GANG_NODES})")
            }
        )))
    }

    /// The registered nodes a job may run on: those with GPUs it accepts (`needs`), grouped by
    /// kind (GPU model, memory and features: a job's GPUs are all of one kind). An error
    /// (422) naming the constraint when no registered node satisfies it: the job could never
    /// run.
    fn fit(&self, needs: Option<&ordo_core::GpuNeeds>) -> Result<Fit<'_>, ApiError> {
        let mut list: Vec<(&str, &Node)> = self.nodes.iter().map(|(k, n)| (k.as_str(), n)).collect();
        list.sort_by_key(|(_, n)| n.seq);
        let pools = kinds_of(list.iter().copied()).map_err(|e| internal("group the nodes by kind", e))?;
        let elig = match needs {
            None => Elig::ANY,
            Some(n) => pools.eligible(&kinds::widen(n, pools.keys()), 0).map_err(|why| {
                ApiError::Unprocessable(format!(
                    "the job can never run: it asks for {} and {why}; `ordo nodes` lists each node's GPU model, memory and features",
                    n.describe()
                ))
            })?,
        };
        let mut groups: Vec<Vec<&Node>> = vec![Vec::new(); pools.keys().len()];
        for (i, (_, n)) in list.iter().enumerate() {
            let p = pools.pool_of(i as u32) as usize;
            if elig.pools == 0 || elig.pools & (1u128 << p) != 0 {
                groups[p].push(n);
            }
        }
        groups.retain(|g| !g.is_empty());
        Ok(Fit { groups, constrained: needs.is_some() })
    }

    pub(super) fn check_submission(
        &mut self,
        who: &Principal,
        req: SubmitRequest,
        now: i64,
        queued: &HashMap<String, usize>,
    ) -> Result<(JobInfo, Option<ArraySpec>, Vec<AfterDep>), ApiError> {
        if who.role == Role::Agent {
            return Err(ApiError::Forbidden("agent tokens cannot submit jobs".into()));
        }
        if req.command.is_empty() || req.command[0].is_empty() {
            return Err(ApiError::BadRequest("field `command`: give the program to run (a non-empty list)".into()));
        }
        let bytes: usize = req.command.iter().map(|a| a.len() + 1).sum();
        if bytes > self.cfg.max_command_bytes {
            return Err(ApiError::BadRequest(format!(
                "field `command`: {bytes} bytes, more than the limit of {}",
                self.cfg.max_command_bytes
            )));
        }
        if req.command.iter().any(|a| a.contains('\0')) {
            return Err(ApiError::BadRequest("field `command`: arguments may not contain NUL".into()));
        }
        if req.gpus == 0 {
            return Err(ApiError::BadRequest("field `gpus`: at least 1 (the server schedules GPU jobs)".into()));
        }
        let limit = req.time_limit_ms.unwrap_or(self.cfg.default_time_limit_ms);
        if limit <= 0 || limit > self.cfg.max_time_limit_ms {
            return Err(ApiError::BadRequest(format!(
                "field `time_limit_ms`: {limit} is outside 1..={} ms",
                self.cfg.max_time_limit_ms
            )));
        }
        let name = req.name.clone().unwrap_or_else(|| {
            std::path::Path::new(&req.command[0])
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        bounded("name", &name, MAX_NAME_BYTES)?;
        if let Some(cwd) = &req.cwd {
            bounded("cwd", cwd, MAX_CWD_BYTES)?;
            if !cwd.starts_with('/') {
                return Err(ApiError::BadRequest(format!(
                    "field `cwd`: `{cwd}` is not an absolute path (the job's directory on the node)"
                )));
            }
        }
        if let Some(m) = req.umask.filter(|&m| m > 0o777) {
            return Err(ApiError::BadRequest(format!("field `umask`: {m:o} (octal) is not a umask (at most 777)")));
        }
        let priority = req.priority.unwrap_or(0);
        if priority > 0 && who.role != Role::Admin {
            return Err(ApiError::Forbidden(format!(
                "field `priority`: {priority} is above the default (0); only admins may raise a priority, users may only lower their own"
            )));
        }
        let mut nodes = req.nodes.unwrap_or(1);
        if nodes == 0 || nodes > MAX_GANG_NODES {
            return Err(ApiError::BadRequest(format!("field `nodes`: {nodes} is outside 1..={MAX_GANG_NODES}")));
        }
        // What it asks of its GPUs beyond their number (bounded, names as the nodes' are kept).
        let gpu_models = kinds::model_list(&req.gpu_models).map_err(kinds::bad_field("gpu_models"))?;
        let features = kinds::feature_list(&req.features).map_err(kinds::bad_field("features"))?;
        let gpu_mem_mib = req.gpu_mem_mib.map(kinds::gpu_mem).transpose().map_err(kinds::bad_field("gpu_mem_mib"))?;
        // Where its nodes must or should be: a level of the server's topology.
        let topology = req
            .topology
            .as_deref()
            .map(|a| crate::topo::ask(a, &self.cfg.topology_levels))
            .transpose()
            .map_err(kinds::bad_field("topology"))?;
        let needs = ordo_core::GpuNeeds {
            models: gpu_models.clone(),
            min_mem_mib: gpu_mem_mib.unwrap_or(0),
            features: features.clone(),
            ..ordo_core::GpuNeeds::default()
        };
        if self.nodes.is_empty() {
            return Err(ApiError::Unprocessable(
                "no node has registered yet, so no job can be placed; start `ordo agent` on a GPU machine first".into(),
            ));
        }
        // The registered nodes it may run on, by kind; none: it can never run (422).
        let fit = self.fit(needs.constrains().then_some(&needs))?;
        if req.nodes.is_none() && req.cpus.is_none() && req.mem_mib.is_none() {
            nodes = Self::split_shape(&fit, req.gpus)?;
        }
        if nodes > 1 {
            if !req.gpus.is_multiple_of(nodes) {
                return Err(ApiError::BadRequest(format!(
                    "field `gpus`: a job on {nodes} nodes needs a multiple of {nodes} GPUs (the same on each node); it asks {}",
                    req.gpus
                )));
            }
            if req.cpus.is_some() || req.mem_mib.is_some() {
                return Err(ApiError::BadRequest(
                    "fields `cpus`, `mem_mib`: not supported with `nodes` above 1 (a multi-node job asks for GPUs only)"
                        .into(),
                ));
            }
        }
        let per_node = req.gpus / nodes.max(1);
        let m = fit.largest();
        if per_node > m && nodes == 1 {
            let all: Vec<&Node> = fit.groups.iter().flatten().copied().collect();
            return Err(ApiError::Unprocessable(format!(
                "the job needs {} GPUs but the largest node{} has {m} ({}, {} in all); a job that asks CPUs or memory runs on one node; without them, more GPUs than a node has are split over nodes by the placement, or give `--nodes`",
                req.gpus,
                fit.scope(),
                ordo_core::words::count(all.len(), "node"),
                ordo_core::words::count(all.iter().map(|n| n.gpus as usize).sum::<usize>(), "GPU")
            )));
        }
        // A multi-node job's nodes are all of one kind.
        let (holding, of) = fit
            .groups
            .iter()
            .map(|g| (g.iter().filter(|n| n.gpus >= per_node).count(), g.len()))
            .max()
            .unwrap_or((0, 0));
        if nodes > 1 && holding < nodes as usize {
            let of = if fit.groups.len() > 1 || fit.constrained { of } else { self.nodes.len() };
            return Err(ApiError::Unprocessable(format!(
                "the job needs {nodes} nodes with {} each, but {holding} of the {of} registered nodes{} have that many",
                ordo_core::words::count(per_node as usize, "GPU"),
                fit.kind_scope()
            )));
        }
        Self::check_cpus_mem(&fit, &self.cfg, req.gpus, req.cpus, req.mem_mib)?;
        let array = match &req.array {
            None => None,
            Some(spec) => {
                bounded("array", spec, crate::array::MAX_ARRAY_SPEC_BYTES)?;
                Some(parse_array(spec).map_err(|e| ApiError::BadRequest(format!("field `array`: {e}")))?)
            }
        };
        let adding = array.as_ref().map_or(1, |a| a.indices.len());
        self.check_pending_limits(&who.user, queued, adding)?;
        self.check_gpu_quota(&who.user, req.gpus, nodes, &needs)?;
        let expanded = self.check_after(&req.after)?;
        let onf = req.on_node_failure.unwrap_or_default();
        let output = match req.output {
            None => None,
            Some(p) => {
                bounded("output", &p, 4096)?;
                if p.is_empty() || p.contains(['\0', '\n', '\r']) {
                    return Err(ApiError::BadRequest(
                        "field `output`: a file path (not empty, without NUL or line breaks)".into(),
                    ));
                }
                if !p.starts_with('/') && req.cwd.is_none() {
                    return Err(ApiError::BadRequest(format!(
                        "field `output`: {p:?} is relative and the job has no `cwd`; give an absolute path"
                    )));
                }
                Some(p)
            }
        };
        // How it takes a preemption: bounded and checked (a rule, a grace of at most 10 min, a
        // known signal, a minimum run within its time limit); all defaults: stored as none.
        let preempt = match req.preempt {
            Some(p) if p != crate::api::PreemptSpec::default() => {
                p.check(limit).map_err(|e| ApiError::BadRequest(format!("field `preempt`: {e}")))?;
                Some(p)
            }
            _ => None,
        };
        let job = JobInfo {
            id: 0,
            user: who.user.clone(),
            name,
            command: req.command,
            cwd: req.cwd,
            gpus: req.gpus,
            cpus: req.cpus,
            mem_mib: req.mem_mib,
            time_limit_ms: limit,
            priority,
            on_node_failure: onf,
            state: JobState::Pending,
            submit: now,
            start: None,
            end: None,
            node: None,
            gpu_ids: vec![],
            exit_code: None,
            end_reason: None,
            attempts: 0,
            cancel_requested: false,
            held_by: None,
            no_preempt: req.no_preempt.unwrap_or(false),
            restarts: 0,
            executed_ms: 0,
            umask: req.umask,
            wait: None,
            after: req.after,
            activity: None,
            array: None,
            nodes,
            ranks: vec![],
            gang_stop: None,
            output,
            gpu_models,
            gpu_mem_mib,
            features,
            preempt,
            lost_ms: 0,
            topology,
        };
        Ok((job, array, expanded))
    }

    /// Refuses CPUs or memory that no registered node it may run on (`fit`) offers (or more
    /// than the configured per-job limits), alone or together with the GPUs asked. Nodes that
    /// did not report CPUs or memory do not limit them.
    fn check_cpus_mem(
        fit: &Fit<'_>,
        cfg: &ServerConfig,
        gpus: u32,
        cpus: Option<u32>,
        mem_mib: Option<u64>,
    ) -> Result<(), ApiError> {
        if cpus == Some(0) {
            return Err(ApiError::BadRequest("field `cpus`: at least 1 when given".into()));
        }
        if mem_mib == Some(0) {
            return Err(ApiError::BadRequest("field `mem_mib`: at least 1 when given".into()));
        }
        if let (Some(c), Some(limit)) = (cpus, cfg.max_job_cpus) {
            if c > limit {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {c} CPU cores but the server's limit (max_job_cpus) is {limit}"
                )));
            }
        }
        if let (Some(m), Some(limit)) = (mem_mib, cfg.max_job_mem_mib) {
            if m > limit {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {} of memory but the server's limit (max_job_mem) is {}",
                    fmt_mib(m),
                    fmt_mib(limit)
                )));
            }
        }
        let nodes = || fit.groups.iter().flatten().copied();
        let known = |f: fn(&Node) -> Option<u64>| -> Option<u64> {
            if nodes().any(|n| f(n).is_none()) {
                None
            } else {
                nodes().filter_map(f).max()
            }
        };
        if let (Some(c), Some(most)) = (cpus, known(|n| n.cpus.map(u64::from))) {
            if c as u64 > most {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {c} CPU cores but the largest node offers {most}; a job runs on one node"
                )));
            }
        }
        if let (Some(m), Some(most)) = (mem_mib, known(|n| n.mem_mib)) {
            if m > most {
                return Err(ApiError::Unprocessable(format!(
                    "the job asks for {} of memory but the largest node offers {}; a job runs on one node",
                    fmt_mib(m),
                    fmt_mib(most)
                )));
            }
        }
        if (cpus.is_some() || mem_mib.is_some()) && !nodes().any(|n| node_holds_ask(n, gpus, cpus, mem_mib)) {
            let ask = ask_text(gpus, cpus, mem_mib);
            return Err(ApiError::Unprocessable(format!(
                "no registered node offers {ask} together; a job runs on one node"
            )));
        }
        Ok(())
    }
}

/// The registered nodes a submission may run on, grouped by kind ([`Core::fit`]).
struct Fit<'a> {
    /// One group per kind of node it accepts (all kinds for a job without a constraint).
    groups: Vec<Vec<&'a Node>>,
    /// Whether the job limits the kinds it accepts.
    constrained: bool,
}

impl Fit<'_> {
    /// GPUs of the largest node it may run on.
    fn largest(&self) -> u32 {
        self.groups.iter().flatten().map(|n| n.gpus).max().unwrap_or(0)
    }

    /// Which nodes a figure is about, for people: ` with GPUs it accepts` for a constrained
    /// job, nothing otherwise.
    fn scope(&self) -> &'static str {
        if self.constrained {
            " with GPUs it accepts"
        } else {
            ""
        }
    }

    /// [`Fit::scope`] for the nodes of one kind: ` of one kind it accepts` when there is more
    /// than one kind or a constraint, nothing otherwise.
    fn kind_scope(&self) -> &'static str {
        match (self.constrained, self.groups.len() > 1) {
            (true, _) => " of one kind it accepts",
            (false, true) => " of one kind",
            (false, false) => "",
        }
    }
}

/// Inserts an array's elements (and an audit record each) with two statements over the list of
/// its indices (`json_each`), whatever its size: a 10,000-element array costs two statements,
/// not 20,000. The elements take the ids that follow the largest one (the transaction holds the
/// database's write lock), the first naming the array. Returns their ids in index order.
#[allow(clippy::too_many_arguments)]
fn insert_array(
    tx: &rusqlite::Savepoint<'_>,
    who: &Principal,
    j: &JobInfo,
    a: &crate::array::ArraySpec,
    detail: &serde_json::Value,
    policy: &str,
    now: i64,
) -> Result<Vec<JobNo>, ApiError> {
    let first: i64 = tx.query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM jobs", [], |r| r.get(0)).ctx("insert array")?;
    let n = a.indices.len() as i64;
    if first + n - 1 > u32::MAX as i64 {
        return Err(ApiError::Conflict("job ids exhausted (more than 2^32 jobs in this database)".into()));
    }
    tx.execute(
        "INSERT INTO arrays(id, user, spec, elements, max_running, submit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![first, who.user, a.canonical(), n, a.max_running, now],
    )
    .ctx("insert array")?;
    super::ingest::insert_elements(tx, &who.user, j, a, first as JobNo, (0, n as usize), detail, policy, now)?;
    Ok((first..first + n).map(|i| i as JobNo).collect())
}
