//! Reads of the database made off the state lock, on a read-only connection of their own: job
//! outcomes for `/metrics` and GPU-hours per user and group for the dashboard.

use crate::activity_api::{Usage, UsageResponse};
use crate::db::{Ctx, DbError};
use rusqlite::{params, Connection, OpenFlags};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// A read-only connection to the server's database.
#[derive(Debug, Clone)]
pub struct Reader {
    conn: Arc<Mutex<Connection>>,
}

impl Reader {
    /// Opens `path` (which the state has created) read-only.
    pub fn open(path: &Path) -> Result<Reader, DbError> {
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .ctx(&format!("open {} read-only", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
        Ok(Reader { conn: Arc::new(Mutex::new(conn)) })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ended jobs by final state: every job the database holds (so the counts survive restarts).
    pub fn outcomes(&self) -> Result<BTreeMap<String, u64>, DbError> {
        let conn = self.conn();
        let mut st = conn
            .prepare_cached(
                "SELECT state, COUNT(*) FROM jobs WHERE state IN ('completed','failed','cancelled','timeout') GROUP BY state",
            )
            .ctx("count outcomes")?;
        let rows =
            st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))).ctx("count outcomes")?;
        let mut out: BTreeMap<String, u64> =
            ["completed", "failed", "cancelled", "timeout"].iter().map(|s| (s.to_string(), 0)).collect();
        for r in rows {
            let (s, n) = r.ctx("count outcomes")?;
            out.insert(s, n);
        }
        Ok(out)
    }

    /// GPU-hours held in `[since, until]` per user and per group: each job's current or last run
    /// (running jobs up to `until`), clipped to the span, plus the run time of its earlier
    /// (preempted) runs, counted within the span from its submit time on.
    pub fn usage(&self, since: i64, until: i64) -> Result<UsageResponse, DbError> {
        let conn = self.conn();
        let mut st = conn
            .prepare_cached(
                "SELECT user, gpus, submit, start, end_time, executed_ms FROM jobs
                 WHERE (start IS NOT NULL AND (end_time IS NULL OR end_time > ?1)) OR (executed_ms > 0 AND (end_time IS NULL OR end_time > ?1))",
            )
            .ctx("usage")?;
        let rows = st
            .query_map(params![since], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .ctx("usage")?;
        let mut per_user: HashMap<String, f64> = HashMap::new();
        for r in rows {
            let (user, gpus, submit, start, end, executed) = r.ctx("usage")?;
            let mut ms = 0i64;
            if let Some(s) = start {
                let e = end.unwrap_or(until).min(until);
                ms += (e - s.max(since)).max(0);
            }
            if executed > 0 {
                let last = start.or(end).unwrap_or(until).min(until);
                ms += executed.min((last - submit.max(since)).max(0));
            }
            *per_user.entry(user).or_default() += gpus as f64 * ms as f64 / 3_600_000.0;
        }
        let total: f64 = per_user.values().sum();
        let mut per_group: HashMap<String, f64> = HashMap::new();
        for (u, h) in &per_user {
            *per_group.entry(crate::state::group_of(u)).or_default() += h;
        }
        let list = |m: HashMap<String, f64>| {
            let mut v: Vec<Usage> = m
                .into_iter()
                .filter(|(_, h)| *h > 0.0)
                .map(|(name, gpu_hours)| Usage {
                    name,
                    gpu_hours,
                    share: if total > 0.0 { gpu_hours / total } else { 0.0 },
                })
                .collect();
            v.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours).then_with(|| a.name.cmp(&b.name)));
            v
        };
        Ok(UsageResponse { since, until, total_gpu_hours: total, users: list(per_user), groups: list(per_group) })
    }
}
