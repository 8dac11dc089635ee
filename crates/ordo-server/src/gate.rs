//! Who is asking: every request's bearer token checked against the database (a row cached for
//! half a second, so a revoked or expired token stops working within that time), with failed
//! checks counted per peer address and per token id and answered 429 past a limit.

use crate::auth::{self, Principal, TokenRow};
use crate::state::ApiError;
use axum::http::HeaderMap;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a token's row is trusted before it is read again (revocation takes effect within it).
pub const ROW_TTL: Duration = Duration::from_millis(500);
/// Failed checks are counted over this window.
const WINDOW: Duration = Duration::from_secs(60);
/// Failed checks from one peer address within the window before it gets 429.
const PEER_LIMIT: usize = 30;
/// Failed checks of one token id within the window before it gets 429.
const ID_LIMIT: usize = 10;
/// Most peers and ids tracked at once (the oldest are forgotten first).
const MAX_TRACKED: usize = 100_000;
/// Legacy (argon2) checks running at once: each takes tens of milliseconds of CPU.
const LEGACY_SLOTS: usize = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Failures per key in a sliding window.
#[derive(Debug)]
struct Failures<K> {
    by: HashMap<K, VecDeque<Instant>>,
    order: VecDeque<K>,
}

impl<K> Default for Failures<K> {
    fn default() -> Self {
        Failures { by: HashMap::new(), order: VecDeque::new() }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Failures<K> {
    fn count(&mut self, k: &K, now: Instant) -> usize {
        match self.by.get_mut(k) {
            Some(q) => {
                while q.front().is_some_and(|t| now.duration_since(*t) > WINDOW) {
                    q.pop_front();
                }
                q.len()
            }
            None => 0,
        }
    }

    fn add(&mut self, k: K, now: Instant) -> usize {
        if !self.by.contains_key(&k) {
            if self.by.len() >= MAX_TRACKED {
                if let Some(old) = self.order.pop_front() {
                    self.by.remove(&old);
                }
            }
            self.order.push_back(k.clone());
        }
        let q = self.by.entry(k).or_default();
        q.push_back(now);
        // Only the last `limit` failures matter.
        while q.len() > PEER_LIMIT.max(ID_LIMIT) + 1 {
            q.pop_front();
        }
        q.len()
    }

    /// When the oldest counted failure leaves the window.
    fn retry_after(&self, k: &K, now: Instant) -> Duration {
        self.by
            .get(k)
            .and_then(|q| q.front())
            .map(|t| WINDOW.saturating_sub(now.duration_since(*t)))
            .unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct Limiter {
    peers: Failures<IpAddr>,
    ids: Failures<i64>,
}

#[derive(Debug, Clone)]
struct Cached {
    row: Option<TokenRow>,
    fetched: Instant,
}

/// The token checker shared by every request.
#[derive(Debug, Clone)]
pub struct Gate {
    conn: Arc<Mutex<rusqlite::Connection>>,
    rows: Arc<Mutex<HashMap<i64, Cached>>>,
    limiter: Arc<Mutex<Limiter>>,
    legacy: Arc<tokio::sync::Semaphore>,
}

impl Gate {
    /// A checker reading tokens through its own connection to the database.
    pub fn new(conn: rusqlite::Connection) -> Gate {
        Gate {
            conn: Arc::new(Mutex::new(conn)),
            rows: Arc::default(),
            limiter: Arc::default(),
            legacy: Arc::new(tokio::sync::Semaphore::new(LEGACY_SLOTS)),
        }
    }

    /// The connection (token administration runs on it).
    pub fn conn(&self) -> MutexGuard<'_, rusqlite::Connection> {
        lock(&self.conn)
    }

    /// Forgets every cached row (after a change made through this server).
    pub fn forget(&self) {
        lock(&self.rows).clear();
    }

    fn row(&self, id: i64) -> Result<Option<TokenRow>, ApiError> {
        let now = Instant::now();
        if let Some(c) = lock(&self.rows).get(&id) {
            if now.duration_since(c.fetched) < ROW_TTL {
                return Ok(c.row.clone());
            }
        }
        let row = auth::load_row(&self.conn(), id)?;
        let mut rows = lock(&self.rows);
        if rows.len() > MAX_TRACKED {
            rows.clear();
        }
        rows.insert(id, Cached { row: row.clone(), fetched: now });
        Ok(row)
    }

    /// Who sends these headers from `peer`: a valid, unrevoked, unexpired token, or 401 (429
    /// once the peer or the token id has failed too often within a minute).
    pub async fn check(&self, headers: &HeaderMap, peer: Option<IpAddr>, now_ms: i64) -> Result<Principal, ApiError> {
        let Some(h) = headers.get("authorization") else {
            return Err(ApiError::Unauthorized(
                "no token: send `Authorization: Bearer TOKEN` (ORDO_TOKEN or --token-file for the CLI)".into(),
            ));
        };
        let token =
            h.to_str().ok().and_then(|s| s.strip_prefix("Bearer ")).map(str::trim).ok_or_else(|| {
                ApiError::Unauthorized("malformed Authorization header: expected `Bearer TOKEN`".into())
            })?;
        let Some((id, secret)) = auth::split(token) else {
            return Err(self.failed(peer, None, "malformed token: expected ordo_<id>_<secret>"));
        };
        let Some(row) = self.row(id)? else {
            return Err(self.failed(peer, Some(id), "invalid token"));
        };
        if let Some(why) = row.dead(id, now_ms) {
            return Err(self.failed(peer, Some(id), &why));
        }
        if !row.legacy() {
            return if row.matches(secret) {
                Ok(row.principal)
            } else {
                Err(self.failed(peer, Some(id), "invalid token"))
            };
        }
        // A legacy argon2 hash: costly, so never for a peer or id over its limit, and at most
        // LEGACY_SLOTS at once.
        if let Some(e) = self.over_limit(peer, Some(id)) {
            return Err(e);
        }
        let _slot = self.legacy.acquire().await.map_err(|_| ApiError::Unauthorized("shutting down".into()))?;
        let (hash, s) = (row.hash.clone(), secret.to_string());
        let ok = tokio::task::spawn_blocking(move || auth::check_legacy(&hash, &s))
            .await
            .map_err(|e| ApiError::Unauthorized(format!("token check failed: {e}")))?;
        if !ok {
            return Err(self.failed(peer, Some(id), "invalid token"));
        }
        auth::upgrade(&self.conn(), id, secret)?;
        lock(&self.rows).remove(&id);
        Ok(row.principal)
    }

    fn over_limit(&self, peer: Option<IpAddr>, id: Option<i64>) -> Option<ApiError> {
        let now = Instant::now();
        let mut l = lock(&self.limiter);
        if let Some(p) = peer {
            if l.peers.count(&p, now) >= PEER_LIMIT {
                let wait = l.peers.retry_after(&p, now);
                return Some(ApiError::TooManyRequests(format!(
                    "too many failed token checks from {p} (limit {PEER_LIMIT} a minute); try again in {}s",
                    wait.as_secs().max(1)
                )));
            }
        }
        if let Some(i) = id {
            if l.ids.count(&i, now) >= ID_LIMIT {
                let wait = l.ids.retry_after(&i, now);
                return Some(ApiError::TooManyRequests(format!(
                    "too many failed checks of token {i} (limit {ID_LIMIT} a minute); try again in {}s",
                    wait.as_secs().max(1)
                )));
            }
        }
        None
    }

    /// Counts a failure; the answer is 401, or 429 once over a limit.
    fn failed(&self, peer: Option<IpAddr>, id: Option<i64>, why: &str) -> ApiError {
        let now = Instant::now();
        {
            let mut l = lock(&self.limiter);
            if let Some(p) = peer {
                if l.peers.add(p, now) == PEER_LIMIT {
                    eprintln!("ordo server: {PEER_LIMIT} failed token checks from {p} within a minute; answering 429");
                }
            }
            if let Some(i) = id {
                if l.ids.add(i, now) == ID_LIMIT {
                    eprintln!("ordo server: {ID_LIMIT} failed checks of token {i} within a minute; answering 429");
                }
            }
        }
        self.over_limit(peer, id).unwrap_or_else(|| ApiError::Unauthorized(why.to_string()))
    }
}
