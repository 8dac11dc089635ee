//! Bearer tokens: `ordo_<id>_<secret>`, stored only as digests, each bound to one name and role,
//! with an optional expiry, revocable at once. Listing, creating and revoking them.
//!
//! The secret is 192 random bits, so a fast unkeyed digest (BLAKE2b-256) is as safe to store
//! as a slow password hash and costs microseconds to check: wrong secrets cannot tie up the
//! server's CPU. Tokens made by earlier versions carry argon2 hashes; they still work (checked at
//! a bounded concurrency, see `http.rs`) and are re-stored as digests at their first use.

use crate::db::{self, Ctx, DbError};
use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;
use blake2::digest::consts::U32;
use blake2::{Blake2b, Digest};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::Path;
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submit, see the queue, cancel own jobs.
    User,
    /// Everything, including other users' jobs and the policy.
    Admin,
    /// A node agent: register, poll, report, for the node its token is named after only.
    Agent,
}

impl Role {
    /// Name in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::Agent => "agent",
        }
    }

    fn parse(s: &str) -> Role {
        match s {
            "admin" => Role::Admin,
            "agent" => Role::Agent,
            _ => Role::User,
        }
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// User (or node) name.
    pub user: String,
    /// Role.
    pub role: Role,
}

/// Why a token could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Database trouble.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// A bad user name.
    #[error("user name `{0}`: use 1-64 letters, digits, `-`, `_` or `.`")]
    BadName(String),
    /// Nothing matched a revocation.
    #[error("no token has id or user `{0}`")]
    NoSuchToken(String),
}

fn random_hex(bytes: usize) -> Result<String, AuthError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(hex(&buf))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Prefix of a stored digest (anything else in the `hash` column is a legacy argon2 hash).
const DIGEST: &str = "blake2b256:";

/// The stored form of a secret.
pub fn digest(secret: &str) -> String {
    format!("{DIGEST}{}", hex(&Blake2b::<U32>::digest(secret.as_bytes())))
}

/// Whether a user or node name is acceptable.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Creates a token for `user` in the database at `path` and returns it (shown once; only its
/// digest is kept). `expires`: when it stops working (ms since the epoch).
pub fn create_token(path: &Path, user: &str, role: Role) -> Result<String, AuthError> {
    let conn = db::open(path)?;
    create_token_in(&conn, user, role, None, crate::api::now_ms())
}

/// [`create_token`] on an open connection, with an optional expiry time.
pub fn create_token_in(
    conn: &Connection,
    user: &str,
    role: Role,
    expires: Option<i64>,
    now: i64,
) -> Result<String, AuthError> {
    if !valid_name(user) {
        return Err(AuthError::BadName(user.to_string()));
    }
    let secret = random_hex(24)?;
    conn.execute(
        "INSERT INTO tokens(user, role, hash, created, expires) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![user, role.as_str(), digest(&secret), now, expires],
    )
    .ctx("store token")?;
    let id = conn.last_insert_rowid();
    Ok(format!("ordo_{id}_{secret}"))
}

/// A token as `ordo admin token list` shows it (never its secret nor its digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Id (the number in `ordo_<id>_...`).
    pub id: i64,
    /// The user or node it speaks for.
    pub user: String,
    /// Its role.
    pub role: Role,
    /// When it was made (ms since the epoch).
    pub created: i64,
    /// When it stops working, if it does.
    pub expires: Option<i64>,
    /// When it was revoked, if it was.
    pub revoked: Option<i64>,
}

/// Every token, by id.
pub fn list_tokens(conn: &Connection) -> Result<Vec<TokenInfo>, DbError> {
    let mut st =
        conn.prepare("SELECT id, user, role, created, expires, revoked FROM tokens ORDER BY id").ctx("list tokens")?;
    let rows = st
        .query_map([], |r| {
            Ok(TokenInfo {
                id: r.get(0)?,
                user: r.get(1)?,
                role: Role::parse(&r.get::<_, String>(2)?),
                created: r.get(3)?,
                expires: r.get(4)?,
                revoked: r.get(5)?,
            })
        })
        .ctx("list tokens")?;
    rows.collect::<Result<Vec<_>, _>>().ctx("list tokens")
}

/// Revokes the token with id `target`, or every token of the user (or node) `target`; returns
/// the ids revoked now (already revoked ones are left as they are).
pub fn revoke(conn: &Connection, target: &str, now: i64) -> Result<Vec<i64>, AuthError> {
    let ids: Vec<i64> = match target.parse::<i64>() {
        Ok(id) => conn
            .query_row("SELECT id FROM tokens WHERE id = ?1", params![id], |r| r.get(0))
            .optional()
            .ctx("find token")?
            .into_iter()
            .collect(),
        Err(_) => {
            let mut st = conn.prepare("SELECT id FROM tokens WHERE user = ?1").ctx("find tokens")?;
            let rows = st.query_map(params![target], |r| r.get(0)).ctx("find tokens")?;
            rows.collect::<Result<Vec<_>, _>>().ctx("find tokens")?
        }
    };
    if ids.is_empty() {
        return Err(AuthError::NoSuchToken(target.to_string()));
    }
    let mut done = Vec::new();
    for id in ids {
        let n = conn
            .execute("UPDATE tokens SET revoked = ?2 WHERE id = ?1 AND revoked IS NULL", params![id, now])
            .ctx("revoke token")?;
        if n > 0 {
            done.push(id);
        }
    }
    Ok(done)
}

/// A token split into its id and secret; `None` when it does not have the `ordo_<id>_<secret>`
/// shape.
pub fn split(token: &str) -> Option<(i64, &str)> {
    let rest = token.strip_prefix("ordo_")?;
    let (id, secret) = rest.split_once('_')?;
    Some((id.parse().ok()?, secret))
}

/// A token's row as the server checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// Who it speaks for.
    pub principal: Principal,
    /// The stored digest (or legacy argon2 hash).
    pub hash: String,
    /// Expiry time.
    pub expires: Option<i64>,
    /// Revocation time.
    pub revoked: Option<i64>,
}

impl TokenRow {
    /// Whether the stored hash is a legacy (slow) argon2 hash.
    pub fn legacy(&self) -> bool {
        !self.hash.starts_with(DIGEST)
    }

    /// Whether `secret` matches the stored digest (constant time). For a legacy row this is
    /// always false: use [`check_legacy`].
    pub fn matches(&self, secret: &str) -> bool {
        !self.legacy() && bool::from(digest(secret).as_bytes().ct_eq(self.hash.as_bytes()))
    }

    /// Why the token no longer works at `now`, if it does not.
    pub fn dead(&self, id: i64, now: i64) -> Option<String> {
        if let Some(t) = self.revoked {
            return Some(format!("token {id} was revoked (at {t} ms since the epoch)"));
        }
        match self.expires {
            Some(t) if t <= now => Some(format!("token {id} expired (at {t} ms since the epoch)")),
            _ => None,
        }
    }
}

/// Reads a token's row.
pub fn load_row(conn: &Connection, id: i64) -> Result<Option<TokenRow>, DbError> {
    conn.query_row("SELECT user, role, hash, expires, revoked FROM tokens WHERE id = ?1", params![id], |r| {
        Ok(TokenRow {
            principal: Principal { user: r.get(0)?, role: Role::parse(&r.get::<_, String>(1)?) },
            hash: r.get(2)?,
            expires: r.get(3)?,
            revoked: r.get(4)?,
        })
    })
    .optional()
    .ctx("look up token")
}

/// Checks a secret against a legacy argon2 hash (slow: tens of milliseconds of CPU).
pub fn check_legacy(hash: &str, secret: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| Argon2::default().verify_password(secret.as_bytes(), &parsed).is_ok())
}

/// Re-stores a legacy token's secret as a digest once it has been checked.
pub fn upgrade(conn: &Connection, id: i64, secret: &str) -> Result<(), DbError> {
    conn.execute("UPDATE tokens SET hash = ?2 WHERE id = ?1", params![id, digest(secret)]).ctx("upgrade token hash")?;
    Ok(())
}

/// Checks a token against the database at `now` (no cache, no rate limit: the server's
/// `http.rs` adds those): who it speaks for, or `None` when it is unknown, wrong, revoked or
/// expired.
pub fn verify(conn: &Connection, token: &str, now: i64) -> Result<Option<Principal>, DbError> {
    let Some((id, secret)) = split(token) else { return Ok(None) };
    let Some(row) = load_row(conn, id)? else { return Ok(None) };
    if row.dead(id, now).is_some() {
        return Ok(None);
    }
    let ok = if row.legacy() { check_legacy(&row.hash, secret) } else { row.matches(secret) };
    Ok(ok.then_some(row.principal))
}
