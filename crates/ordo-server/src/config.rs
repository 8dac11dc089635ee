//! The server's configuration: a TOML file (policy, listen address, timing, limits), with
//! command-line flags laid over it. Every field has a default; unknown fields are errors.

use ordo_core::policy::parse_duration;
use ordo_core::PolicySpec;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has a bad field (the message names line and field).
    #[error("config {path}: {message}")]
    Parse {
        /// File.
        path: PathBuf,
        /// Parser message, with line and column.
        message: String,
    },
    /// A field has a bad value.
    #[error("config {where_}: field `{field}`: {why}")]
    Field {
        /// File, or `command line`.
        where_: String,
        /// Field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    db: Option<PathBuf>,
    policy: Option<String>,
    heartbeat: Option<String>,
    node_timeout: Option<String>,
    fence_grace: Option<String>,
    default_time_limit: Option<String>,
    max_time_limit: Option<String>,
    max_pending_per_user: Option<usize>,
    max_command_bytes: Option<usize>,
    allow_non_loopback: Option<bool>,
    min_run: Option<String>,
    max_job_cpus: Option<u32>,
    max_job_mem: Option<String>,
    max_clock_skew: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    allow_plain_http: Option<bool>,
    header_timeout: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
    max_connections_per_addr: Option<usize>,
    max_requests_per_user: Option<usize>,
    quotas: Option<ordo_core::QuotaConfig>,
    topology_levels: Option<Vec<String>>,
    metrics_public: Option<bool>,
    idle_threshold: Option<f64>,
    idle_after: Option<String>,
    idle_webhook: Option<String>,
    reclaim: Option<RawReclaim>,
}

/// The `[reclaim]` table as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReclaim {
    action: Option<String>,
    grace: Option<String>,
    groups: Option<Vec<String>>,
    exempt_users: Option<Vec<String>>,
    exempt_groups: Option<Vec<String>>,
}

/// What the server does with a job flagged allocated-but-idle once the grace has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimAction {
    /// Cancel it (its GPUs go to the next job).
    Cancel,
    /// Stop it and put it back in the queue (it runs again later, `ORDO_RESTARTS` + 1).
    Requeue,
}

/// The reclaim rule (`[reclaim]`; docs/SERVER.md, "Giving back idle GPUs"): a running job
/// flagged allocated-but-idle that is still flagged `grace_ms` later is cancelled or requeued,
/// unless its user or group is exempt or it is outside `groups`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaim {
    /// Cancel or requeue.
    pub action: ReclaimAction,
    /// How long after the flag (ms).
    pub grace_ms: i64,
    /// Only jobs of users in these `[quotas]` groups; empty: every user.
    pub groups: Vec<String>,
    /// Users never reclaimed.
    pub exempt_users: Vec<String>,
    /// `[quotas]` groups never reclaimed.
    pub exempt_groups: Vec<String>,
}

impl ReclaimAction {
    /// Its name in the config file, the audit log and the API: `cancel`, `requeue`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimAction::Cancel => "cancel",
            ReclaimAction::Requeue => "requeue",
        }
    }
}

impl Reclaim {
    /// Whether the rule applies to a job of `user`, whose `[quotas]` group is `group`.
    pub fn applies(&self, user: &str, group: Option<&str>) -> bool {
        let in_groups = self.groups.is_empty() || group.is_some_and(|g| self.groups.iter().any(|x| x == g));
        in_groups
            && !self.exempt_users.iter().any(|u| u == user)
            && !group.is_some_and(|g| self.exempt_groups.iter().any(|x| x == g))
    }
}

/// The server's settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (loopback unless `allow_non_loopback`).
    pub listen: SocketAddr,
    /// SQLite database file.
    pub db: PathBuf,
    /// Policy used when the database holds none (a `policy set` is kept in the database).
    pub policy: PolicySpec,
    /// Whether `policy` was given explicitly (then it overrides the database's at start).
    pub policy_given: bool,
    /// Agents poll at this interval (each poll is a heartbeat), ms.
    pub heartbeat_ms: u64,
    /// The agents' lease, ms: an agent that has had no answer to a poll sent less than this
    /// long ago stops its jobs (its supervisors kill them).
    pub node_timeout_ms: u64,
    /// A node silent for the lease and this grace is down and its jobs run elsewhere, ms: long
    /// enough for its agent to have stopped them (so that no job runs twice at once).
    pub fence_grace_ms: u64,
    /// Time limit of a job that gives none, ms.
    pub default_time_limit_ms: i64,
    /// Largest time limit accepted, ms.
    pub max_time_limit_ms: i64,
    /// Most pending jobs one user may have.
    pub max_pending_per_user: usize,
    /// Largest command (all arguments together) accepted, bytes.
    pub max_command_bytes: usize,
    /// Permit listening on a non-loopback address.
    pub allow_non_loopback: bool,
    /// Preemptive policies: a job runs at least this long (ms) before it may be preempted.
    pub min_run_ms: i64,
    /// Most CPU cores one job may ask for (besides the largest node's), if limited.
    pub max_job_cpus: Option<u32>,
    /// Most memory one job may ask for, MiB (besides the largest node's), if limited.
    pub max_job_mem_mib: Option<u64>,
    /// How far an agent's clock may be from the server's, ms: an agent further off is refused
    /// at registration, and times an agent reports are checked against the server's clock
    /// with this much slack.
    pub max_clock_skew_ms: i64,
    /// PEM certificate chain for TLS (with `tls_key`): the server then speaks only https.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Permit plain http on a non-loopback address (behind a TLS proxy or on a private
    /// network); without it, serving other machines needs TLS.
    pub allow_plain_http: bool,
    /// A connection must send a request's headers (and finish its TLS handshake) within this, ms.
    pub header_timeout_ms: u64,
    /// A request's body must arrive within this (after its headers), ms.
    pub body_timeout_ms: u64,
    /// Most client connections open at once.
    pub max_connections: usize,
    /// Most client connections open at once from one address.
    pub max_connections_per_addr: usize,
    /// Most requests one user (or admin) may have in progress at once; agents may have 16.
    /// Users' requests in progress together are held to three quarters of `max_connections`,
    /// so that agents always find room.
    pub max_requests_per_user: usize,
    /// Per-user and per-group limits and shares (the `[quotas]` table; docs/SERVER.md,
    /// "Quotas and shares"). GPU fractions are of the GPUs of the nodes that are up.
    pub quotas: ordo_core::QuotaConfig,
    /// The cluster's topology levels, lowest first (`topology_levels = ["block", "switch"]`,
    /// `--topology-levels block,switch`): agents declare their unit of each (`ordo agent
    /// --topology`) and multi-node jobs are placed within the lowest unit that holds them.
    /// Empty: no topology.
    pub topology_levels: Vec<String>,
    /// Serve `/metrics` without a token (for a Prometheus that cannot send one).
    pub metrics_public: bool,
    /// A running job whose GPUs stay under this busy % ...
    pub idle_threshold_pct: f64,
    /// ... for this long (ms) is flagged allocated-but-idle.
    pub idle_after_ms: i64,
    /// Where allocated-but-idle notices are POSTed (JSON), if anywhere.
    pub idle_webhook: Option<String>,
    /// What to do with jobs that stay allocated-but-idle (`[reclaim]`); `None`: only notify.
    pub reclaim: Option<Reclaim>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7700)),
            db: PathBuf::from("ordo.db"),
            policy: "fifo+easy".parse().expect("built-in policy name"),
            policy_given: false,
            heartbeat_ms: 2_000,
            node_timeout_ms: 15_000,
            fence_grace_ms: 5_000,
            default_time_limit_ms: 3_600_000,
            max_time_limit_ms: 30 * 86_400_000,
            max_pending_per_user: 100_000,
            max_command_bytes: 64 * 1024,
            allow_non_loopback: false,
            min_run_ms: 60_000,
            max_job_cpus: None,
            max_job_mem_mib: None,
            max_clock_skew_ms: 300_000,
            tls_cert: None,
            tls_key: None,
            allow_plain_http: false,
            header_timeout_ms: 10_000,
            body_timeout_ms: 10_000,
            max_connections: 4096,
            max_connections_per_addr: 512,
            max_requests_per_user: 32,
            quotas: ordo_core::QuotaConfig::default(),
            topology_levels: Vec::new(),
            metrics_public: false,
            idle_threshold_pct: 5.0,
            idle_after_ms: 30 * 60_000,
            idle_webhook: None,
            reclaim: None,
        }
    }
}

fn dur(where_: &str, field: &'static str, v: &str) -> Result<i64, ConfigError> {
    match parse_duration(v) {
        Some(t) if t > 0 => Ok(t),
        _ => Err(ConfigError::Field {
            where_: where_.to_string(),
            field,
            why: format!("`{v}` is not a positive duration such as 500ms, 30s, 2h, 7d"),
        }),
    }
}

impl ServerConfig {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let raw: RawConfig =
            toml::from_str(&text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        let mut c = ServerConfig::default();
        let w = path.display().to_string();
        if let Some(l) = raw.listen {
            c.set_listen(&w, &l)?;
        }
        if let Some(d) = raw.db {
            c.db = d;
        }
        if let Some(p) = raw.policy {
            c.set_policy(&w, &p)?;
        }
        if let Some(v) = raw.heartbeat {
            c.heartbeat_ms = dur(&w, "heartbeat", &v)? as u64;
        }
        if let Some(v) = raw.node_timeout {
            c.node_timeout_ms = dur(&w, "node_timeout", &v)? as u64;
        }
        if let Some(v) = raw.fence_grace {
            c.fence_grace_ms = dur(&w, "fence_grace", &v)? as u64;
        }
        if let Some(v) = raw.default_time_limit {
            c.default_time_limit_ms = dur(&w, "default_time_limit", &v)?;
        }
        if let Some(v) = raw.max_time_limit {
            c.max_time_limit_ms = dur(&w, "max_time_limit", &v)?;
        }
        if let Some(v) = raw.max_pending_per_user {
            if v == 0 {
                return Err(ConfigError::Field {
                    where_: w,
                    field: "max_pending_per_user",
                    why: "must be at least 1 (0 would refuse every submission)".into(),
                });
            }
            c.max_pending_per_user = v;
        }
        if let Some(v) = raw.max_command_bytes {
            if !(1..=crate::api::MAX_BODY_BYTES / 2).contains(&v) {
                return Err(ConfigError::Field {
                    where_: w,
                    field: "max_command_bytes",
                    why: format!("{v} is outside 1..={}", crate::api::MAX_BODY_BYTES / 2),
                });
            }
            c.max_command_bytes = v;
        }
        if let Some(v) = raw.max_clock_skew {
            c.max_clock_skew_ms = dur(&w, "max_clock_skew", &v)?;
        }
        c.tls_cert = raw.tls_cert;
        c.tls_key = raw.tls_key;
        if let Some(v) = raw.allow_plain_http {
            c.allow_plain_http = v;
        }
        if let Some(v) = raw.header_timeout {
            c.header_timeout_ms = dur(&w, "header_timeout", &v)? as u64;
        }
        if let Some(v) = raw.body_timeout {
            c.body_timeout_ms = dur(&w, "body_timeout", &v)? as u64;
        }
        for (field, v, dst) in [
            ("max_connections_per_addr", raw.max_connections_per_addr, &mut c.max_connections_per_addr),
            ("max_requests_per_user", raw.max_requests_per_user, &mut c.max_requests_per_user),
        ] {
            match v {
                Some(0) => {
                    return Err(ConfigError::Field { where_: w, field, why: "must be at least 1".into() });
                }
                Some(v) => *dst = v,
                None => {}
            }
        }
        if let Some(v) = raw.max_connections {
            if v == 0 {
                return Err(ConfigError::Field {
                    where_: w,
                    field: "max_connections",
                    why: "must be at least 1".into(),
                });
            }
            c.max_connections = v;
        }
        if let Some(v) = raw.allow_non_loopback {
            c.allow_non_loopback = v;
        }
        if let Some(v) = raw.metrics_public {
            c.metrics_public = v;
        }
        c.set_idle(&w, raw.idle_threshold, raw.idle_after.as_deref(), raw.idle_webhook.as_deref())?;
        if let Some(r) = raw.reclaim {
            let field = |field: &'static str, why: String| ConfigError::Field { where_: w.clone(), field, why };
            let action = match r.action.as_deref() {
                Some("cancel") => ReclaimAction::Cancel,
                Some("requeue") => ReclaimAction::Requeue,
                Some(other) => {
                    return Err(field("reclaim.action", format!("`{}` is not cancel or requeue", other.escape_debug())))
                }
                None => return Err(field("reclaim.action", "missing: give cancel or requeue".into())),
            };
            let grace_ms = match &r.grace {
                Some(g) => dur(&w, "reclaim.grace", g)?,
                None => return Err(field("reclaim.grace", "missing: a duration such as 30m".into())),
            };
            let names = |f: &'static str, v: Option<Vec<String>>| -> Result<Vec<String>, ConfigError> {
                let v = v.unwrap_or_default();
                if v.len() > 1024 || v.iter().any(|n| n.is_empty() || n.len() > 256 || n.chars().any(char::is_control))
                {
                    return Err(field(f, "at most 1,024 names of 1 to 256 characters, no control characters".into()));
                }
                Ok(v)
            };
            c.reclaim = Some(Reclaim {
                action,
                grace_ms,
                groups: names("reclaim.groups", r.groups)?,
                exempt_users: names("reclaim.exempt_users", r.exempt_users)?,
                exempt_groups: names("reclaim.exempt_groups", r.exempt_groups)?,
            });
        }
        if let Some(v) = raw.min_run {
            c.set_min_run(&w, &v)?;
        }
        if let Some(v) = raw.max_job_cpus {
            if v == 0 {
                return Err(ConfigError::Field { where_: w, field: "max_job_cpus", why: "must be at least 1".into() });
            }
            c.max_job_cpus = Some(v);
        }
        if let Some(v) = raw.max_job_mem {
            let m = parse_size_mib(&v).filter(|&m| m > 0).ok_or_else(|| ConfigError::Field {
                where_: w.clone(),
                field: "max_job_mem",
                why: format!("`{v}` is not a positive size such as 512M, 16G"),
            })?;
            c.max_job_mem_mib = Some(m);
        }
        if let Some(q) = raw.quotas {
            q.check().map_err(|why| ConfigError::Field { where_: w.clone(), field: "quotas", why })?;
            c.quotas = q;
        }
        if let Some(v) = raw.topology_levels {
            c.set_topology_levels(&w, &v)?;
        }
        c.validate(&w)?;
        Ok(c)
    }

    /// Sets the topology levels (lowest first), checked.
    pub fn set_topology_levels(&mut self, where_: &str, v: &[String]) -> Result<(), ConfigError> {
        self.topology_levels = crate::topo::levels(v).map_err(|why| ConfigError::Field {
            where_: where_.into(),
            field: "topology_levels",
            why,
        })?;
        Ok(())
    }

    /// Sets the listen address from text.
    pub fn set_listen(&mut self, where_: &str, v: &str) -> Result<(), ConfigError> {
        self.listen = v.parse().map_err(|_| ConfigError::Field {
            where_: where_.into(),
            field: "listen",
            why: format!("`{v}` is not an address such as 127.0.0.1:7700"),
        })?;
        Ok(())
    }

    /// Sets the policy from its name.
    pub fn set_policy(&mut self, where_: &str, v: &str) -> Result<(), ConfigError> {
        let p: PolicySpec = v.parse().map_err(|e| ConfigError::Field {
            where_: where_.into(),
            field: "policy",
            why: format!("{e}"),
        })?;
        check_policy(&p).map_err(|why| ConfigError::Field { where_: where_.into(), field: "policy", why })?;
        self.policy = p;
        self.policy_given = true;
        Ok(())
    }

    /// Sets the shortest run before a preemption from a duration such as `60s` (`0s`: none).
    pub fn set_min_run(&mut self, where_: &str, v: &str) -> Result<(), ConfigError> {
        match parse_duration(v) {
            Some(t) if (0..=self.max_time_limit_ms).contains(&t) => {
                self.min_run_ms = t;
                Ok(())
            }
            _ => Err(ConfigError::Field {
                where_: where_.to_string(),
                field: "min_run",
                why: format!("`{v}` is not a duration from 0s to max_time_limit, such as 0s, 30s, 10m"),
            }),
        }
    }

    /// Sets the allocated-but-idle rule: the busy % threshold (0-100), how long under it (a
    /// duration such as `30m`) and the webhook URL (`http://` or `https://`) notices go to.
    pub fn set_idle(
        &mut self,
        where_: &str,
        threshold: Option<f64>,
        after: Option<&str>,
        webhook: Option<&str>,
    ) -> Result<(), ConfigError> {
        if let Some(t) = threshold {
            if !(t.is_finite() && (0.0..=100.0).contains(&t)) {
                return Err(ConfigError::Field {
                    where_: where_.into(),
                    field: "idle_threshold",
                    why: format!("{t} is not a busy percentage from 0 to 100"),
                });
            }
            self.idle_threshold_pct = t;
        }
        if let Some(a) = after {
            self.idle_after_ms = dur(where_, "idle_after", a)?;
        }
        if let Some(u) = webhook {
            let ok = (u.starts_with("http://") || u.starts_with("https://"))
                && u.len() <= 2048
                && !u.chars().any(|c| c.is_control() || c.is_whitespace());
            if !ok {
                return Err(ConfigError::Field {
                    where_: where_.into(),
                    field: "idle_webhook",
                    why: format!("`{u}` is not an http:// or https:// URL"),
                });
            }
            self.idle_webhook = Some(u.to_string());
        }
        Ok(())
    }

    /// Sets heartbeat and node time-out from durations such as `200ms`.
    pub fn set_timing(
        &mut self,
        where_: &str,
        heartbeat: Option<&str>,
        timeout: Option<&str>,
    ) -> Result<(), ConfigError> {
        if let Some(h) = heartbeat {
            self.heartbeat_ms = dur(where_, "heartbeat", h)? as u64;
        }
        if let Some(t) = timeout {
            self.node_timeout_ms = dur(where_, "node_timeout", t)? as u64;
        }
        Ok(())
    }

    /// Checks relations between fields.
    pub fn validate(&self, where_: &str) -> Result<(), ConfigError> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError::Field {
                where_: where_.into(),
                field: "tls_cert",
                why: "tls_cert and tls_key go together (--tls-cert C --tls-key K)".into(),
            });
        }
        if !self.allow_non_loopback && !self.listen.ip().is_loopback() {
            return Err(ConfigError::Field {
                where_: where_.into(),
                field: "listen",
                why: format!(
                    "{} is not a loopback address; set allow_non_loopback = true (or --allow-non-loopback) to serve other machines",
                    self.listen
                ),
            });
        }
        if !self.listen.ip().is_loopback() && self.tls_cert.is_none() && !self.allow_plain_http {
            return Err(ConfigError::Field {
                where_: where_.into(),
                field: "listen",
                why: format!(
                    "{} serves other machines, whose agents and users would send their tokens in clear: give --tls-cert and --tls-key, or set allow_plain_http = true (--allow-plain-http) when a TLS proxy or a private network protects the traffic",
                    self.listen
                ),
            });
        }
        if self.node_timeout_ms <= self.heartbeat_ms {
            return Err(ConfigError::Field {
                where_: where_.into(),
                field: "node_timeout",
                why: format!(
                    "{} ms must be longer than the heartbeat ({} ms)",
                    self.node_timeout_ms, self.heartbeat_ms
                ),
            });
        }
        if self.default_time_limit_ms > self.max_time_limit_ms {
            return Err(ConfigError::Field {
                where_: where_.into(),
                field: "default_time_limit",
                why: "longer than max_time_limit".into(),
            });
        }
        Ok(())
    }
}

/// Whether the server can run this policy. Every policy `ordo-core` parses runs: preemptive
/// orders (`srtf`, `las`, `gittins`, `rr:quantum=..`) stop jobs through their agents and
/// requeue them. Pooled placement (a job across nodes) is the one thing the server cannot do,
/// and the server always places consolidated, so nothing is refused today; the check stays
/// the single place to refuse a policy should the core gain one the server cannot carry out.
pub fn check_policy(p: &PolicySpec) -> Result<(), String> {
    let _ = p;
    Ok(())
}

/// Parses a size such as `512M`, `16G`, `1T`, `2048` (MiB) into MiB (rounded up).
pub fn parse_size_mib(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1.0 / 1024.0),
        Some('M') => (&t[..t.len() - 1], 1.0),
        Some('G') => (&t[..t.len() - 1], 1024.0),
        Some('T') => (&t[..t.len() - 1], 1024.0 * 1024.0),
        _ => (t, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * mult < 1e15).then(|| (v * mult).ceil() as u64)
}
