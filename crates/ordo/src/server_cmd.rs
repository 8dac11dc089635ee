//! `ordo server`, `ordo agent` and the client commands (`submit`, `queue`, `cancel`, `hold`,
//! `release`, `priority`, `nodes`, `explain`, `history`, `policy`, `audit`, `admin token create`).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_core::policy::parse_duration;
use ordo_server::agent::{AgentConfig, GpuSpec};
use ordo_server::api::*;
use ordo_server::auth::Role;
use ordo_server::client::Client;
use ordo_server::state::fmt_mib;
use ordo_server::supervise::{supervise, MemLimit, SuperviseArgs};
use ordo_server::ServerConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The server-side subcommands (flattened into `ordo`'s).
#[derive(Subcommand, Debug)]
pub enum ServerCmd {
    /// Run the scheduling server (HTTP/JSON API, SQLite state, an ordo-core policy).
    Server(ServerArgs),
    /// Run the node agent: register this machine's GPUs and run the jobs the server gives it.
    Agent(AgentArgs),
    /// (internal) Supervise one job for the agent.
    #[command(hide = true)]
    AgentSupervise(SuperviseCli),
    /// Submit a job; prints its id.
    Submit(SubmitArgs),
    /// The queue, in the order the policy will run it, with each job's reason.
    Queue(ConnArgs),
    /// Cancel a job (your own; admins any).
    Cancel(JobArgs),
    /// Hold a pending job (your own; admins any): it stays queued but never starts until released.
    Hold(JobArgs),
    /// Release a held job (your own; admins any; an admin's hold on your job only admins).
    Release(JobArgs),
    /// Change a job's priority: owners may lower their own job's, only admins may raise it.
    Priority(PriorityArgs),
    /// The nodes and their GPUs.
    Nodes(ConnArgs),
    /// Why a job waits, and when it is expected to start.
    Explain(JobArgs),
    /// Finished jobs, most recent first.
    History(HistoryArgs),
    /// Show (the default) or change the scheduling policy.
    Policy {
        #[command(subcommand)]
        cmd: Option<PolicyCmd>,
    },
    /// The audit log: starts, skips with reasons, cancels, policy changes.
    Audit(AuditArgs),
    /// Administration on the database file.
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
}

/// Where the server is and who you are.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnArgs {
    /// Server URL (default: $ORDO_SERVER, else http://127.0.0.1:7700).
    #[arg(long)]
    server: Option<String>,
    /// Bearer token (default: $ORDO_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl ConnArgs {
    fn client(&self) -> Result<Client> {
        let server = self
            .server
            .clone()
            .or_else(|| std::env::var("ORDO_SERVER").ok())
            .unwrap_or_else(|| "http://127.0.0.1:7700".into());
        let token = self.token.clone().or_else(|| std::env::var("ORDO_TOKEN").ok());
        if token.is_none() {
            bail!("no token: give --token or set ORDO_TOKEN (an admin makes one with `ordo admin token create USER --db ordo.db`)");
        }
        Ok(Client::new(&server, token, Duration::from_secs(60)))
    }
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// TOML config file (policy, listen, heartbeat, node_timeout, limits); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// SQLite database file.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Address to listen on (loopback unless --allow-non-loopback). Port 0 picks a free port.
    #[arg(long)]
    listen: Option<String>,
    /// Policy, e.g. `fifo+easy` (default: the one stored in the database, else fifo+easy).
    #[arg(long)]
    policy: Option<String>,
    /// Agent poll/heartbeat interval, e.g. 2s or 200ms.
    #[arg(long)]
    heartbeat: Option<String>,
    /// A node silent this long is declared down and its jobs requeued, e.g. 15s.
    #[arg(long)]
    node_timeout: Option<String>,
    /// Permit a listen address other than loopback.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Preemptive policies: a job runs at least this long before it may be preempted (default 60s).
    #[arg(long)]
    min_run: Option<String>,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Server URL (default: $ORDO_SERVER, else http://127.0.0.1:7700).
    #[arg(long)]
    server: Option<String>,
    /// The agent's token (default: $ORDO_TOKEN); make one with `ordo admin token create NODE --agent`.
    #[arg(long)]
    token: Option<String>,
    /// `auto` (NVML) or a number of fake GPUs.
    #[arg(long, default_value = "auto")]
    gpus: GpuSpec,
    /// Node name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Where job output goes (default: ./ordo-agent-NODE).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a job is killed.
    #[arg(long, default_value = "10s")]
    grace: String,
    /// CPU cores to offer to jobs (the first N this agent may use; default: all of them).
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory to offer to jobs, e.g. 64G (default: the machine's).
    #[arg(long)]
    mem: Option<String>,
}

#[derive(Args, Debug)]
pub struct SuperviseCli {
    #[arg(long)]
    time_limit_ms: u64,
    #[arg(long)]
    grace_ms: u64,
    #[arg(long)]
    status: PathBuf,
    #[arg(long)]
    cpu_list: Option<String>,
    #[arg(long)]
    cgroup: Option<PathBuf>,
    #[arg(long)]
    cgroup_home: Option<PathBuf>,
    #[arg(long)]
    mem_mib: Option<u64>,
    #[arg(long)]
    cgroup_v2: bool,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// GPUs (on one node).
    #[arg(long, default_value_t = 1)]
    gpus: u32,
    /// CPU cores, reserved for the job alone on its node (it is pinned to them).
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory, e.g. 16G or 512M: reserved on its node, and its limit where the agent has a
    /// writable cgroup (the job is killed past it).
    #[arg(long)]
    mem: Option<String>,
    /// Never preempt this job (under preemptive policies it keeps its GPUs until it ends).
    #[arg(long)]
    no_preempt: bool,
    /// Time limit, e.g. 2h or 90s (default: the server's).
    #[arg(long)]
    time: Option<String>,
    /// Job name.
    #[arg(long)]
    name: Option<String>,
    /// Static priority (default 0; `ordo priority` changes it later).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// If its node goes down: `requeue` (default) or `fail`.
    #[arg(long)]
    on_node_failure: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Job id.
    job: u64,
}

#[derive(Args, Debug)]
pub struct PriorityArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Job id.
    job: u64,
    /// The new priority (a whole number; higher runs first where the policy reads it).
    #[arg(allow_negative_numbers = true)]
    priority: i64,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Only this user's jobs.
    #[arg(long)]
    user: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Show the policy in force.
    Show(ConnArgs),
    /// Change the policy (admins).
    Set {
        #[command(flatten)]
        conn: ConnArgs,
        /// e.g. `sjf+easy`.
        policy: String,
    },
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Only records about this job.
    #[arg(long)]
    job: Option<u64>,
    /// Only records since: a duration ago (`1h`) or a Unix time in ms.
    #[arg(long)]
    since: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
}

#[derive(Subcommand, Debug)]
pub enum AdminCmd {
    /// Tokens.
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Create a token for USER and print it (only its argon2 hash is stored).
    Create {
        /// User (or node) name.
        user: String,
        /// An admin token.
        #[arg(long, conflicts_with = "agent")]
        admin: bool,
        /// A token for a node agent.
        #[arg(long)]
        agent: bool,
        /// The server's database.
        #[arg(long, default_value = "ordo.db")]
        db: PathBuf,
    },
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) from ms since the epoch.
pub fn fmt_time(ms: i64) -> String {
    ordo_trace::format_datetime(ms)
}

fn parse_mem(s: &str) -> Result<u64> {
    ordo_server::config::parse_size_mib(s).ok_or_else(|| anyhow!("--mem `{s}`: expected a size such as 16G, 512M"))
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn job_line(j: &JobInfo) -> String {
    let when = match j.state {
        JobState::Pending => format!("submitted {}", fmt_time(j.submit)),
        JobState::Starting | JobState::Running | JobState::Preempting => {
            format!(
                "on {} GPUs [{}] since {}",
                j.node.as_deref().unwrap_or("?"),
                ordo_server::db::ids_text(&j.gpu_ids),
                fmt_time(j.start.unwrap_or(0))
            )
        }
        _ => format!("ended {}", j.end.map(fmt_time).unwrap_or_default()),
    };
    format!("{:>6}  {:<10} {:<10} {:<16} {:>4}  {when}", j.id, j.state.as_str(), j.user, truncate(&j.name, 16), j.gpus)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "~"
    }
}

/// Runs one of these commands.
pub fn run(cmd: ServerCmd) -> Result<ExitCode> {
    match cmd {
        ServerCmd::Server(a) => {
            let mut cfg = match &a.config {
                Some(p) => ServerConfig::from_file(p)?,
                None => ServerConfig::default(),
            };
            let w = "command line";
            if let Some(d) = a.db {
                cfg.db = d;
            }
            if let Some(l) = &a.listen {
                cfg.set_listen(w, l)?;
            }
            if let Some(p) = &a.policy {
                cfg.set_policy(w, p)?;
            }
            cfg.set_timing(w, a.heartbeat.as_deref(), a.node_timeout.as_deref())?;
            if a.allow_non_loopback {
                cfg.allow_non_loopback = true;
            }
            if let Some(m) = &a.min_run {
                cfg.set_min_run(w, m)?;
            }
            cfg.validate(w)?;
            let db = cfg.db.clone();
            ordo_server::run(cfg, |addr| {
                println!("ordo server listening on http://{addr} (db {})", db.display());
                use std::io::Write;
                let _ = std::io::stdout().flush();
            })?;
        }
        ServerCmd::Agent(a) => {
            let server = a
                .server
                .or_else(|| std::env::var("ORDO_SERVER").ok())
                .unwrap_or_else(|| "http://127.0.0.1:7700".into());
            let token = a.token.or_else(|| std::env::var("ORDO_TOKEN").ok()).context(
                "no token: give --token or set ORDO_TOKEN (make one with `ordo admin token create NODE --agent`)",
            )?;
            let name = match a.name {
                Some(n) => n,
                None => std::fs::read_to_string("/etc/hostname")
                    .map(|s| s.trim().to_string())
                    .ok()
                    .filter(|s| !s.is_empty())
                    .context("--name: cannot read the host name; give --name NODE")?,
            };
            let grace = parse_duration(&a.grace)
                .with_context(|| format!("--grace `{}`: expected a duration such as 10s", a.grace))?;
            let exe = std::env::current_exe().context("locating the ordo binary for the job supervisor")?;
            let cfg = AgentConfig {
                server,
                token,
                work_dir: a.work_dir.unwrap_or_else(|| PathBuf::from(format!("ordo-agent-{name}"))),
                name,
                gpus: a.gpus,
                grace_ms: grace as u64,
                supervisor: vec![exe.to_string_lossy().into_owned(), "agent-supervise".into()],
                cpus: a.cpus,
                mem_mib: a.mem.as_deref().map(parse_mem).transpose()?,
            };
            ordo_server::agent::run(cfg)?;
        }
        ServerCmd::AgentSupervise(a) => {
            let code = supervise(&SuperviseArgs {
                command: a.command,
                time_limit_ms: a.time_limit_ms,
                grace_ms: a.grace_ms,
                status: a.status,
                cpu_list: a
                    .cpu_list
                    .as_deref()
                    .map(|l| {
                        ordo_server::agent::parse_cpu_list(l)
                            .with_context(|| format!("--cpu-list `{l}`: expected 0-3,8"))
                    })
                    .transpose()?,
                mem: match (a.cgroup, a.mem_mib) {
                    (Some(group), Some(mib)) => Some(MemLimit {
                        home: a.cgroup_home.context("--cgroup needs --cgroup-home")?,
                        group,
                        mib,
                        v2: a.cgroup_v2,
                    }),
                    (None, None) => None,
                    _ => bail!("--cgroup and --mem-mib go together"),
                },
            });
            return Ok(ExitCode::from(code as u8));
        }
        ServerCmd::Submit(a) => {
            let c = a.conn.client()?;
            let time_limit_ms = match &a.time {
                Some(t) => Some(
                    parse_duration(t)
                        .filter(|&v| v > 0)
                        .with_context(|| format!("--time `{t}`: expected a duration such as 2h, 30m, 90s"))?,
                ),
                None => None,
            };
            let on_node_failure = match a.on_node_failure.as_deref() {
                None => None,
                Some("requeue") => Some(OnNodeFailure::Requeue),
                Some("fail") => Some(OnNodeFailure::Fail),
                Some(o) => bail!("--on-node-failure `{o}`: expected `requeue` or `fail`"),
            };
            let req = SubmitRequest {
                name: a.name,
                command: a.command,
                cwd: std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
                gpus: a.gpus,
                cpus: a.cpus,
                mem_mib: a.mem.as_deref().map(parse_mem).transpose()?,
                time_limit_ms,
                priority: a.priority,
                on_node_failure,
                no_preempt: a.no_preempt.then_some(true),
            };
            let r: SubmitResponse = c.post("/v1/jobs", &req)?;
            if a.conn.json {
                print_json(&r)?;
            } else {
                println!("{}", r.id);
            }
        }
        ServerCmd::Queue(conn) => {
            let q: QueueResponse = conn.client()?.get("/v1/jobs")?;
            if conn.json {
                return print_json(&q).map(|_| ExitCode::SUCCESS);
            }
            println!("policy: {}", q.policy);
            println!("{:>6}  {:<10} {:<10} {:<16} {:>4}  details", "job", "state", "user", "name", "gpus");
            for j in &q.jobs {
                let mut l = job_line(j);
                if let Some(w) = &j.wait {
                    l = format!("{l}\n        why: {}", w.text);
                }
                println!("{l}");
            }
        }
        ServerCmd::Cancel(a) => {
            let r: serde_json::Value =
                a.conn.client()?.post(&format!("/v1/jobs/{}/cancel", a.job), &serde_json::json!({}))?;
            if a.conn.json {
                print_json(&r)?;
            } else {
                let state = r["state"].as_str().unwrap_or("?");
                if state == "cancelled" {
                    println!("job {} cancelled", a.job);
                } else {
                    println!("job {} is {state}; its agent has been told to kill it", a.job);
                }
            }
        }
        ServerCmd::Hold(a) => {
            let j: JobInfo = a.conn.client()?.post(&format!("/v1/jobs/{}/hold", a.job), &serde_json::json!({}))?;
            if a.conn.json {
                print_json(&j)?;
            } else {
                println!("job {} held by {}", j.id, j.held_by.as_deref().unwrap_or("?"));
            }
        }
        ServerCmd::Release(a) => {
            let j: JobInfo = a.conn.client()?.post(&format!("/v1/jobs/{}/release", a.job), &serde_json::json!({}))?;
            if a.conn.json {
                print_json(&j)?;
            } else {
                println!("job {} released; it is {}", j.id, j.state.as_str());
            }
        }
        ServerCmd::Priority(a) => {
            let j: JobInfo = a
                .conn
                .client()?
                .post(&format!("/v1/jobs/{}/priority", a.job), &PriorityBody { priority: a.priority })?;
            if a.conn.json {
                print_json(&j)?;
            } else {
                println!("job {} priority {}", j.id, j.priority);
            }
        }
        ServerCmd::Nodes(conn) => {
            let n: Vec<NodeInfo> = conn.client()?.get("/v1/nodes")?;
            if conn.json {
                return print_json(&n).map(|_| ExitCode::SUCCESS);
            }
            println!(
                "{:<16} {:<5} {:>4} {:>4}  {:<20} {:>9} {:>15}  jobs",
                "node", "state", "gpus", "free", "kind", "cpus used", "memory used"
            );
            for x in &n {
                let kind =
                    if x.fake { "fake".to_string() } else { x.gpu_model.clone().unwrap_or_else(|| "gpu".into()) };
                let jobs: Vec<String> = x.jobs.iter().map(|j| j.to_string()).collect();
                let cpus = x.cpus.map(|c| format!("{}/{c}", x.used_cpus)).unwrap_or_else(|| "-".into());
                let mem = x
                    .mem_mib
                    .map(|m| format!("{}/{}", fmt_mib(x.used_mem_mib), fmt_mib(m)))
                    .unwrap_or_else(|| "-".into());
                println!(
                    "{:<16} {:<5} {:>4} {:>4}  {:<20} {:>9} {:>15}  {}",
                    x.name,
                    x.state,
                    x.gpus,
                    x.free_gpus,
                    kind,
                    cpus,
                    mem,
                    jobs.join(",")
                );
            }
            for x in n.iter().filter(|x| !x.mem_limits) {
                println!("{}: memory limits: not enforced (no writable cgroup)", x.name);
            }
        }
        ServerCmd::Explain(a) => {
            let j: JobInfo = a.conn.client()?.get(&format!("/v1/jobs/{}", a.job))?;
            if a.conn.json {
                return print_json(&j).map(|_| ExitCode::SUCCESS);
            }
            println!(
                "job {} ({}, user {}, {} GPUs, priority {}): {}",
                j.id,
                j.name,
                j.user,
                j.gpus,
                j.priority,
                j.state.as_str()
            );
            match (&j.wait, j.state) {
                (Some(w), _) => {
                    println!("why it waits: {}", w.text);
                    println!("jobs ahead of it by the policy: {}", w.ahead);
                    match w.expected_start {
                        Some(t) => println!("expected start: {} UTC (by running jobs' time limits)", fmt_time(t)),
                        None => println!("expected start: not known yet"),
                    }
                }
                (None, JobState::Starting | JobState::Running | JobState::Preempting) => {
                    println!(
                        "runs on {} GPUs [{}] since {} UTC",
                        j.node.as_deref().unwrap_or("?"),
                        ordo_server::db::ids_text(&j.gpu_ids),
                        fmt_time(j.start.unwrap_or(0))
                    );
                    if j.state == JobState::Preempting {
                        println!("being preempted: its agent has been told to stop it; it then goes back to the queue");
                    }
                }
                (None, _) => println!(
                    "ended {} UTC: {}",
                    j.end.map(fmt_time).unwrap_or_default(),
                    j.end_reason.clone().unwrap_or_default()
                ),
            }
            if j.restarts > 0 {
                println!(
                    "preempted or requeued {} time{}; {:.1} s of earlier runs ({:.1} GPU-s attained)",
                    j.restarts,
                    if j.restarts == 1 { "" } else { "s" },
                    j.executed_ms as f64 / 1000.0,
                    (j.executed_ms * j.gpus as i64) as f64 / 1000.0
                );
            }
            if j.no_preempt {
                println!("never preempted (--no-preempt)");
            }
        }
        ServerCmd::History(a) => {
            let mut path = format!("/v1/history?limit={}", a.limit);
            if let Some(u) = &a.user {
                if !ordo_server::auth::valid_name(u) {
                    bail!("--user `{u}`: not a valid user name");
                }
                path.push_str(&format!("&user={u}"));
            }
            let h: Vec<JobInfo> = a.conn.client()?.get(&path)?;
            if a.conn.json {
                return print_json(&h).map(|_| ExitCode::SUCCESS);
            }
            println!("{:>6}  {:<10} {:<10} {:<16} {:>4}  details", "job", "state", "user", "name", "gpus");
            for j in &h {
                println!("{}  {}", job_line(j), j.end_reason.as_deref().unwrap_or(""));
            }
        }
        ServerCmd::Policy { cmd } => {
            let cmd = cmd.unwrap_or(PolicyCmd::Show(ConnArgs::default()));
            let (conn, r): (ConnArgs, PolicyBody) = match cmd {
                PolicyCmd::Show(conn) => {
                    let r = conn.client()?.get("/v1/policy")?;
                    (conn, r)
                }
                PolicyCmd::Set { conn, policy } => {
                    let r = conn.client()?.put("/v1/policy", &PolicyBody { policy })?;
                    (conn, r)
                }
            };
            if conn.json {
                print_json(&r)?;
            } else {
                println!("policy: {}", r.policy);
            }
        }
        ServerCmd::Audit(a) => {
            let mut path = format!("/v1/audit?limit={}", a.limit);
            if let Some(j) = a.job {
                path.push_str(&format!("&job={j}"));
            }
            if let Some(s) = &a.since {
                let t = match s.parse::<i64>() {
                    Ok(ms) if ms > 1_000_000_000_000 => ms,
                    _ => {
                        now_ms()
                            - parse_duration(s)
                                .with_context(|| format!("--since `{s}`: a duration ago (1h) or a Unix time in ms"))?
                    }
                };
                path.push_str(&format!("&since={t}"));
            }
            let recs: Vec<AuditRecord> = a.conn.client()?.get(&path)?;
            if a.conn.json {
                return print_json(&recs).map(|_| ExitCode::SUCCESS);
            }
            for r in recs {
                let job = r.job.map(|j| format!("job {j}")).unwrap_or_default();
                println!("{}  {:<10} {:<8} {:<8} [{}] {}", fmt_time(r.time), r.actor, r.kind, job, r.policy, r.detail);
            }
        }
        ServerCmd::Admin { cmd: AdminCmd::Token { cmd: TokenCmd::Create { user, admin, agent, db } } } => {
            let role = if admin {
                Role::Admin
            } else if agent {
                Role::Agent
            } else {
                Role::User
            };
            let t = ordo_server::auth::create_token(&db, &user, role)
                .with_context(|| format!("creating a token in {}", db.display()))?;
            println!("{t}");
            eprintln!("token for {user} ({}) created; it is shown only now", role.as_str());
        }
    }
    Ok(ExitCode::SUCCESS)
}
