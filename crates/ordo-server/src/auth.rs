//! Bearer tokens: `ordo_<id>_<secret>`, stored only as argon2 hashes. A token is checked once
//! against its hash; the server then remembers it in memory for the rest of its life.

use crate::db::{self, Ctx, DbError};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submit, see the queue, cancel own jobs.
    User,
    /// Everything, including other users' jobs and the policy.
    Admin,
    /// A node agent: register, poll, report.
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
    /// Hashing failed.
    #[error("argon2: {0}")]
    Hash(String),
    /// A bad user name.
    #[error("user name `{0}`: use 1-64 letters, digits, `-`, `_` or `.`")]
    BadName(String),
}

fn random_hex(bytes: usize) -> Result<String, AuthError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether a user or node name is acceptable.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Creates a token for `user` in the database at `path` and returns it (shown once; only its
/// hash is kept).
pub fn create_token(path: &Path, user: &str, role: Role) -> Result<String, AuthError> {
    let conn = db::open(path)?;
    create_token_in(&conn, user, role)
}

/// [`create_token`] on an open connection.
pub fn create_token_in(conn: &Connection, user: &str, role: Role) -> Result<String, AuthError> {
    if !valid_name(user) {
        return Err(AuthError::BadName(user.to_string()));
    }
    let secret = random_hex(24)?;
    let salt_hex = random_hex(16)?;
    let salt = SaltString::from_b64(&salt_hex).map_err(|e| AuthError::Hash(e.to_string()))?;
    let hash = Argon2::default().hash_password(secret.as_bytes(), &salt).map_err(|e| AuthError::Hash(e.to_string()))?;
    conn.execute(
        "INSERT INTO tokens(user, role, hash, created) VALUES (?1, ?2, ?3, ?4)",
        params![user, role.as_str(), hash.to_string(), crate::api::now_ms()],
    )
    .ctx("store token")?;
    let id = conn.last_insert_rowid();
    Ok(format!("ordo_{id}_{secret}"))
}

/// Checks a token against the database: `Ok(None)` when it is unknown or wrong.
pub fn verify(conn: &Connection, token: &str) -> Result<Option<Principal>, DbError> {
    let Some(rest) = token.strip_prefix("ordo_") else { return Ok(None) };
    let Some((id, secret)) = rest.split_once('_') else { return Ok(None) };
    let Ok(id) = id.parse::<i64>() else { return Ok(None) };
    let row: Option<(String, String, String)> = conn
        .query_row("SELECT user, role, hash FROM tokens WHERE id = ?1", params![id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .ctx("look up token")?;
    let Some((user, role, hash)) = row else { return Ok(None) };
    let Ok(parsed) = PasswordHash::new(&hash) else { return Ok(None) };
    if Argon2::default().verify_password(secret.as_bytes(), &parsed).is_err() {
        return Ok(None);
    }
    let role = match role.as_str() {
        "admin" => Role::Admin,
        "agent" => Role::Agent,
        _ => Role::User,
    };
    Ok(Some(Principal { user, role }))
}
