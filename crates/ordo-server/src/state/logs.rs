//! `ordo logs`: a job's output, read on its node by its agent and passed on by the server.
//! The server keeps, per node, the requests its agent has yet to be given (with its next poll);
//! the answers go back to the waiting handlers outside the state (`http.rs`). Nothing is stored.

use super::*;

impl Core {
    /// Asks the agent of the node of `r`'s (last) run for a piece of its output: the job's
    /// owner or an admin only. Returns the node and whether the job has ended.
    pub fn ask_logs(
        &mut self,
        who: &Principal,
        r: crate::array::JobRef,
        stream: LogStream,
        offset: u64,
        max: u64,
        ask: u64,
    ) -> Result<(String, bool, String), ApiError> {
        if let crate::array::JobRef::Job(a) = r {
            if self.arrays.contains_key(&a) || self.is_array(a)? {
                return Err(ApiError::BadRequest(format!(
                    "{a} is an array: name one element, as `{a}_INDEX` (its elements' outputs are separate)"
                )));
            }
        }
        let id = match self.resolve(r)? {
            arrays::Target::One(id) => id,
            arrays::Target::Array(a, _) => {
                return Err(ApiError::BadRequest(format!(
                    "{a} is an array: name one element, as `{a}_INDEX` (its elements' outputs are separate)"
                )))
            }
        };
        let j = match self.active.get(&id).or_else(|| self.pending.get(&id)) {
            Some(j) => j.clone(),
            None => db::load_job(&self.conn, id)?.ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?,
        };
        if who.role != Role::Admin && who.user != j.user {
            return Err(ApiError::Forbidden(format!(
                "job {} belongs to {}; only its owner or an admin may read its output",
                j.id_text(),
                j.user
            )));
        }
        let node =
            j.ranks.first().map(|r| r.node.clone()).or_else(|| j.node.clone()).ok_or_else(|| {
                ApiError::Conflict(format!("job {} has not started: it has no output yet", j.id_text()))
            })?;
        match self.nodes.get(&node) {
            Some(n) if n.up => {}
            _ => {
                return Err(ApiError::Conflict(format!(
                    "job {}'s output is on node {node}, which is down; it is in that node's agent work directory, \
                     job-{}.{}",
                    j.id_text(),
                    j.id,
                    stream.ext()
                )))
            }
        }
        let pending = self.log_asks.entry(node.clone()).or_default();
        if pending.len() >= MAX_LOG_ASKS_PER_NODE {
            return Err(ApiError::TooManyRequests(format!(
                "{MAX_LOG_ASKS_PER_NODE} requests for output wait for node {node}'s agent; try again in a moment"
            )));
        }
        pending.push(LogAsk { ask, job: id, stream, offset, max: max.clamp(1, MAX_LOG_CHUNK) });
        self.to_wake.insert(node.clone());
        Ok((node, matches!(j.state, JobState::Completed | JobState::Failed | JobState::Cancelled), j.id_text()))
    }

    /// Forgets a request for output nobody waits for any more (its handler timed out).
    pub fn forget_log_ask(&mut self, node: &str, ask: u64) {
        if let Some(v) = self.log_asks.get_mut(node) {
            v.retain(|a| a.ask != ask);
        }
    }

    /// The requests for output that a node's agent is to be given with this poll.
    pub(super) fn take_log_asks(&mut self, node: &str) -> Vec<LogAsk> {
        self.log_asks.remove(node).unwrap_or_default()
    }
}

/// Most requests for output that wait for one node's agent at once.
const MAX_LOG_ASKS_PER_NODE: usize = 64;
