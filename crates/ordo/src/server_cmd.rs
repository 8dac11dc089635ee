//! `ordo server`, `ordo agent` and the client commands (`submit`, `queue`, `cancel`, `hold`,
//! `release`, `priority`, `nodes`, `explain`, `history`, `policy`, `audit`, `admin token`, `admin backup`).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_core::policy::parse_duration;
use ordo_core::words;
use ordo_server::activity::ActivitySource;
use ordo_server::agent::{AgentConfig, GpuSpec, PortRange};
use ordo_server::api::*;
use ordo_server::array::JobRef;
use ordo_server::auth::Role;
use ordo_server::client::Client;
use ordo_server::kinds;
use ordo_server::state::fmt_mib;
use ordo_server::supervise::{supervise, SuperviseArgs};
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
    /// (internal) Become a job's Unix account and execute the job (run by the supervisor).
    #[command(hide = true)]
    AgentExec(ExecCli),
    /// (internal) Copy a job's output into its `--output` file, as the job's user.
    #[command(hide = true)]
    AgentTee {
        /// The file's mode when created (octal).
        #[arg(long, default_value = "644")]
        mode: String,
        #[arg(last = true, required = true)]
        path: String,
    },
    /// Submit a job; prints its id.
    Submit(SubmitArgs),
    /// The queue, in the order the policy will run it, with each job's reason (a job array on
    /// one line, `123[0-999%50]`, with its elements' states; `--expand` lists each element).
    Queue(QueueArgs),
    /// Cancel a job (your own; admins any); `123` an array's id: every element not ended,
    /// `123_7` one element.
    Cancel(JobArgs),
    /// Hold a pending job (your own; admins any): it stays queued but never starts until
    /// released. An array's id holds its pending elements, `123_7` one element.
    Hold(JobArgs),
    /// Release a held job (your own; admins any; an admin's hold on your job only admins). An
    /// array's id releases its held elements, `123_7` one element.
    Release(JobArgs),
    /// Change a job's priority: owners may lower their own job's, only admins may raise it. An
    /// array's id changes every element not ended, `123_7` one element.
    Priority(PriorityArgs),
    /// The nodes and their GPUs.
    Nodes(ConnArgs),
    /// Node maintenance (admins): cordon, drain or resume a node.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
    /// Why a job waits, and when it is expected to start.
    Explain(JobArgs),
    /// A job's output (standard output; --err for standard error), read from its node through
    /// the server (your own jobs; admins any). --follow prints it as it grows until the job ends.
    Logs(LogsArgs),
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
    /// Bearer token (default: $ORDO_TOKEN). Other users of this machine can see a command
    /// line in `ps`: prefer ORDO_TOKEN or --token-file.
    #[arg(long)]
    token: Option<String>,
    /// A file holding the token (default: $ORDO_TOKEN_FILE).
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) to trust for an https:// server (default: $ORDO_CA, else the
    /// system's roots).
    #[arg(long)]
    ca: Option<PathBuf>,
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
        let file = self.token_file.clone().or_else(|| std::env::var_os("ORDO_TOKEN_FILE").map(PathBuf::from));
        let token = match (&self.token, file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(read_token_file(&f)?),
            (None, None) => std::env::var("ORDO_TOKEN").ok(),
        };
        if token.is_none() {
            bail!("no token: set ORDO_TOKEN or give --token-file (an admin makes one with `ordo admin token create USER --db ordo.db`)");
        }
        client_for(&server, token, self.ca.as_deref(), Duration::from_secs(60))
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
    /// The agents' lease, e.g. 15s: an agent that has had no answer from the server for this
    /// long stops its jobs; a node silent for this and --fence-grace is declared down and its
    /// jobs requeued (never while they may still run).
    #[arg(long)]
    node_timeout: Option<String>,
    /// What the server waits beyond --node-timeout before it runs a silent node's jobs
    /// elsewhere (default 5s): time for its agent to have stopped them.
    #[arg(long)]
    fence_grace: Option<String>,
    /// Permit a listen address other than loopback.
    #[arg(long)]
    allow_non_loopback: bool,
    /// TLS certificate chain (PEM): the server then speaks https only (with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve other machines over plain http (only behind a TLS proxy or on a private network:
    /// tokens would otherwise travel in clear).
    #[arg(long)]
    allow_plain_http: bool,
    /// Preemptive policies: a job runs at least this long before it may be preempted (default 60s).
    #[arg(long)]
    min_run: Option<String>,
    /// Serve /metrics without a token (config `metrics_public`).
    #[arg(long)]
    metrics_public: bool,
    /// A job whose GPUs stay under this busy % ... (config `idle_threshold`, default 5).
    #[arg(long)]
    idle_threshold: Option<f64>,
    /// ... for this long is flagged allocated-but-idle (config `idle_after`, default 30m).
    #[arg(long)]
    idle_after: Option<String>,
    /// POST a JSON notice here when a job is flagged allocated-but-idle (config `idle_webhook`).
    #[arg(long)]
    idle_webhook: Option<String>,
    /// The cluster's topology levels, lowest first, comma-separated (e.g. `block,switch`;
    /// config `topology_levels`): agents give their unit of each (`ordo agent --topology`),
    /// multi-node jobs go into the lowest unit that holds them, and `ordo submit --topology
    /// required:block` holds a job until one block does (docs/TOPOLOGY.md).
    #[arg(long, value_delimiter = ',', value_name = "LEVEL,...")]
    topology_levels: Option<Vec<String>>,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// TOML file with any of these settings, named as the flags (`token_file`, `gpus`,
    /// `work_dir`, ...; `cgroup = false` for --no-cgroup); flags override it. A service runs
    /// `ordo agent --config /etc/ordo/agent.toml`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Server URL (default: $ORDO_SERVER, else http://127.0.0.1:7700).
    #[arg(long)]
    server: Option<String>,
    /// A file holding this node's agent token (make one with `ordo admin token create NODE
    /// --agent`; keep the file readable by the agent only). Else $ORDO_TOKEN, which the agent
    /// removes from its environment at start. Jobs never see it.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Refused: a token on the command line is visible to every process through `ps`.
    #[arg(long, hide = true)]
    token: Option<String>,
    /// CA certificate(s) (PEM) to trust for an https:// server (default: $ORDO_CA).
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Run every job as this Unix account (default, when the agent runs as root: each job as
    /// the account named like its submitter).
    #[arg(long)]
    run_as: Option<String>,
    /// A TOML file mapping ordo users to Unix accounts (`alice = "alice_l"`), for submitters
    /// whose account has another name on this node.
    #[arg(long, conflicts_with = "run_as")]
    user_map: Option<PathBuf>,
    /// Variables of the agent's environment that jobs get, comma-separated (default:
    /// PATH,LANG,LC_ALL,LC_CTYPE,TZ,LD_LIBRARY_PATH). Nothing else of the agent's environment
    /// reaches a job, and never a variable named ORDO_TOKEN*.
    #[arg(long, value_delimiter = ',')]
    pass_env: Option<Vec<String>>,
    /// `auto` (NVML; the default) or a number of fake GPUs.
    #[arg(long)]
    gpus: Option<GpuSpec>,
    /// The GPUs' model, e.g. `a100` (default: NVML's name with --gpus auto, `NVIDIA H200` kept
    /// as `h200`; none for fake GPUs). Jobs that ask `ordo submit --gpu-model` run only on
    /// nodes of a model they accept.
    #[arg(long, value_name = "MODEL")]
    gpu_model: Option<String>,
    /// Memory of each GPU, e.g. 80G (default: NVML's with --gpus auto; none for fake GPUs).
    #[arg(long, value_name = "SIZE")]
    gpu_mem: Option<String>,
    /// The node's features, comma-separated (e.g. `ib,nvme`; at most 32): jobs that ask
    /// `ordo submit --feature` run only on nodes that have all of theirs.
    #[arg(long = "feature", value_delimiter = ',', value_name = "NAME,...")]
    features: Option<Vec<String>>,
    /// The node's place in the cluster's topology: its unit of each level, lowest first
    /// (e.g. `block=nvl0,switch=leaf3`), levels as the server's `--topology-levels`.
    #[arg(long, value_name = "LEVEL=UNIT,...")]
    topology: Option<String>,
    /// Node name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Where job output goes (default: ./ordo-agent-NODE).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a job is killed (default 10s).
    #[arg(long)]
    grace: Option<String>,
    /// CPU cores to offer to jobs (the first N this agent may use; default: all of them).
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory to offer to jobs, e.g. 64G (default: the machine's).
    #[arg(long)]
    mem: Option<String>,
    /// Where GPU activity comes from: `nvml` (the default with --gpus auto), `file:PATH` (a
    /// file read at every sample: lines `GPU UTIL_PCT [MEM_USED_MIB [POWER_W [SM_PCT]]]`),
    /// `seed:N` (a seeded generator, for fake GPUs) or `off` (the default with fake GPUs).
    #[arg(long)]
    gpu_activity: Option<ActivitySource>,
    /// How often GPU activity is sampled and sent (1s to 20s; default 5s).
    #[arg(long)]
    activity_every: Option<String>,
    /// The address other nodes reach this one at (a host name or IP): a multi-node job whose
    /// rank 0 runs here gets it as MASTER_ADDR (default: the node name).
    #[arg(long)]
    addr: Option<String>,
    /// TCP ports for the rendezvous (MASTER_PORT) of multi-node jobs whose rank 0 runs here:
    /// the agent hands rank 0 a port of this range that it finds free on this node (a test
    /// bind) and that none of its running jobs has, and the server gives it to the other ranks
    /// (default 29500-30499).
    #[arg(long, value_name = "LO-HI")]
    master_ports: Option<PortRange>,
    /// Run without cgroup containment (the agent refuses to start without a usable cgroup
    /// otherwise). Risky: a process a job detaches from its process group (`setsid`, a daemon)
    /// then outlives the job and keeps its GPUs while the server gives them to the next job,
    /// and `--mem` limits are not enforced.
    #[arg(long)]
    no_cgroup: bool,
    /// Most output a job may leave in its files (standard output and error together, e.g. 1G);
    /// the rest is discarded, and the job's record says so (default 1G).
    #[arg(long)]
    max_output: Option<String>,
    /// Take no new work while the work directory has less free space than this (e.g. 64M): the
    /// node drains itself, saying why in `ordo nodes`, until space is freed (default 16M).
    #[arg(long)]
    min_free: Option<String>,
}

#[derive(Args, Debug)]
pub struct SuperviseCli {
    /// The supervisor's options and the job's command, as the agent writes them (see
    /// `SuperviseArgs::parse`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ExecCli {
    /// A `cgroup.procs` file to join before anything else (repeatable).
    #[arg(long)]
    join: Vec<PathBuf>,
    #[arg(long, requires = "gid")]
    uid: Option<u32>,
    #[arg(long, requires = "uid")]
    gid: Option<u32>,
    #[arg(long, value_delimiter = ',')]
    groups: Vec<u32>,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Reads a token from a file (the first line, trimmed); refuses a file others may read.
fn read_token_file(f: &std::path::Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(f).with_context(|| format!("token file {}", f.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!(
            "token file {}: mode {:o} lets other users read it; `chmod 600 {}`",
            f.display(),
            meta.permissions().mode() & 0o777,
            f.display()
        );
    }
    let text = std::fs::read_to_string(f).with_context(|| format!("token file {}", f.display()))?;
    let t = text.lines().next().unwrap_or("").trim().to_string();
    if t.is_empty() {
        bail!("token file {}: empty", f.display());
    }
    Ok(t)
}

/// A client of `server`, trusting the CA certificates in `ca` (else $ORDO_CA, else the
/// system's roots) for https.
fn client_for(server: &str, token: Option<String>, ca: Option<&std::path::Path>, timeout: Duration) -> Result<Client> {
    let ca = ca.map(PathBuf::from).or_else(|| std::env::var_os("ORDO_CA").map(PathBuf::from));
    let ca_pem = match &ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("CA file {}", p.display()))?),
        None => None,
    };
    Ok(Client::with_ca(server, token, timeout, ca_pem.as_deref())?)
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// GPUs in all (on one node; with --nodes, split evenly over the nodes; without --nodes,
    /// --cpus and --mem and more than any node has, split over nodes as the scheduler's
    /// consolidated placement chooses: whole idle nodes, largest first, the rest on one more
    /// node, so --gpus 12 on 8-GPU nodes is 8 + 4; it runs as a multi-node job, one rank per
    /// node, each with its own ORDO_GPUS and LOCAL_WORLD_SIZE, e.g. `torchrun --nproc-per-node
    /// $ORDO_GPUS`). Default 1, or --nodes times --gpus-per-node.
    #[arg(long, conflicts_with = "gpus_per_node")]
    gpus: Option<u32>,
    /// A multi-node (gang) job on exactly N nodes (at most 64), every rank started together:
    /// `ordo submit --nodes 2 --gpus-per-node 8 -- sh -c 'torchrun --nnodes $ORDO_NNODES
    /// --node_rank $ORDO_NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT
    /// train.py'` (through a shell, so that each rank reads its own values). Each rank gets
    /// ORDO_NODELIST, ORDO_NODE_RANK, ORDO_NNODES, MASTER_ADDR (rank 0's node, its `ordo agent
    /// --addr`), MASTER_PORT (a port rank 0's agent found free on its node, `ordo agent
    /// --master-ports`), WORLD_SIZE (GPUs in all) and its
    /// CUDA_VISIBLE_DEVICES. One rank failing, or its node dying, stops every rank; cancel and
    /// preemption stop them all. Not with --cpus or --mem.
    #[arg(long, value_name = "N")]
    nodes: Option<u32>,
    /// GPUs on each node of a --nodes job.
    #[arg(long, value_name = "G", requires = "nodes")]
    gpus_per_node: Option<u32>,
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
    /// How the job's work survives a preemption: `continuous` (the default: it resumes where it
    /// stopped), `none` (it restarts from zero), `every:30m` (it checkpoints every 30 min: not
    /// preempted before its run has saved once), `signal:2m` (it saves on its stop signal and
    /// gets 2 min, at most 10, to exit before SIGKILL). docs/SERVER.md, "Checkpoints".
    #[arg(long, value_name = "RULE")]
    checkpoint: Option<String>,
    /// The signal ordo stops the job with (preemption, cancel, time limit) before SIGKILL:
    /// TERM (default), INT, HUP, USR1, USR2 (as Slurm's `--signal`).
    #[arg(long, value_name = "SIG")]
    signal: Option<String>,
    /// Not preempted before each of its runs has lasted this long (the server's `min_run` if
    /// longer), e.g. `10m`; at most 24 h and its time limit.
    #[arg(long, value_parser = crate::cli::parse_duration_arg)]
    min_run: Option<ordo_core::Time>,
    /// Time limit, e.g. 2h or 90s (default: the server's).
    #[arg(long)]
    time: Option<String>,
    /// Job name.
    #[arg(long)]
    name: Option<String>,
    /// Static priority (default 0; `ordo priority` changes it later).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// If its node goes down (for a --nodes job: any of its nodes, the other ranks are then
    /// killed first): `requeue` (default) or `fail`.
    #[arg(long)]
    on_node_failure: Option<String>,
    /// Also write the job's output (standard output and error together) to this file on the
    /// node it runs on, created as you (`%j`: the job id, `%A`: the array's id, `%a`: the
    /// element's index); relative to the current directory. `ordo logs` still shows it.
    #[arg(long)]
    output: Option<String>,
    /// GPU models the job accepts, comma-separated (e.g. `a100,h100`; a family name also
    /// matches the longer names of its models: `a100` runs on `a100-sxm4-80gb`); `ordo nodes`
    /// shows each node's. Refused when no node has one of them.
    #[arg(long, value_delimiter = ',', value_name = "MODEL,...")]
    gpu_model: Vec<String>,
    /// Least memory of each GPU, e.g. 40G.
    #[arg(long, value_name = "SIZE")]
    gpu_mem: Option<String>,
    /// Node features the job needs, all of them, comma-separated (e.g. `ib`).
    #[arg(long = "feature", value_delimiter = ',', value_name = "NAME,...")]
    features: Vec<String>,
    /// Where its nodes must or should be in the cluster's topology: `required:LEVEL` (held
    /// until one unit of that level holds it) or `preferred:LEVEL` (e.g. `required:block`;
    /// levels as the server's `--topology-levels`).
    #[arg(long, value_name = "required|preferred:LEVEL")]
    topology: Option<String>,
    /// Start only after these jobs (ids, comma-separated) completed with exit code 0; if one
    /// ends any other way this job is cancelled (DependencyNeverSatisfied). An array's id
    /// stands for every element of the array (as in Slurm), `ID_INDEX` for one element.
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = parse_job_ref)]
    after_ok: Vec<JobRef>,
    /// Start only after these jobs ended, however they ended (an array: all its elements).
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = parse_job_ref)]
    after_any: Vec<JobRef>,
    /// Start only after these jobs ended unsuccessfully (failed, timeout, cancelled, node
    /// failure); if one completes, this job is cancelled (DependencyNeverSatisfied). An
    /// array: every element must end unsuccessfully.
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = parse_job_ref)]
    after_not_ok: Vec<JobRef>,
    /// A job array: one job per index, in one request and one transaction, like Slurm's
    /// `--array`: `0-999`, `0-999:10` (every 10th), `1,3,5-7`, with `%N` to run at most N at
    /// once (`0-999%50`); at most 100,000 elements, indices up to 9,999,999. Each element
    /// gets ORDO_ARRAY_JOB_ID (the array's id: its first element's job id), ORDO_ARRAY_INDEX
    /// and ORDO_ARRAY_TASK_COUNT. `ordo queue` shows it as `ID[SPEC]`; cancel, hold, release and
    /// priority take the array's id (all its elements) or `ID_INDEX` (one element).
    #[arg(long, value_name = "SPEC", value_parser = parse_array_arg)]
    array: Option<String>,
    /// A command given without `--` before it: refused, with the command line to type instead.
    #[arg(hide = true, allow_hyphen_values = true, value_name = "COMMAND")]
    without_dashes: Vec<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "without_dashes")]
    command: Vec<String>,
}

/// The error for a job's command given without `--` before it: the command line with `--`
/// put in (where the command ends the line, as it usually does).
fn dashes_missing(without: &[String]) -> anyhow::Error {
    let args: Vec<String> = std::env::args().collect();
    let n = without.len();
    let line = if args.len() > n && args[args.len() - n..] == *without {
        let mut v: Vec<String> = vec!["ordo".into()];
        v.extend(args[1..args.len() - n].iter().cloned());
        v.push("--".into());
        v.extend(without.iter().cloned());
        v.iter().map(|a| crate::cli::shell_word(a)).collect::<Vec<_>>().join(" ")
    } else {
        format!(
            "ordo submit [OPTIONS] -- {}",
            without.iter().map(|a| crate::cli::shell_word(a)).collect::<Vec<_>>().join(" ")
        )
    };
    anyhow!("the job's command goes after `--`, so that its own options are not read as ordo's: {line}")
}

/// Checks an `--array` spec here, for an early error (the server checks it again).
fn parse_array_arg(s: &str) -> std::result::Result<String, String> {
    ordo_server::array::parse_array(s).map(|_| s.to_string())
}

/// A job id, or `ARRAY_INDEX` (`123_7`) for one element of an array.
/// `--after-*` as the API takes them: an element (`ID_INDEX`) as its own job id, asked of the
/// server; a job or array id as given (the server expands an array's id to its elements).
fn after_deps(conn: &ConnArgs, lists: &[(ordo_core::DepKind, &Vec<JobRef>)]) -> Result<Vec<AfterDep>> {
    let mut out = Vec::new();
    for (kind, refs) in lists {
        for r in refs.iter() {
            let job = match r {
                JobRef::Job(id) => *id,
                JobRef::Element(..) => conn.client()?.get::<JobInfo>(&format!("/v1/jobs/{r}"))?.id,
            };
            out.push(AfterDep { kind: *kind, job });
        }
    }
    Ok(out)
}

fn parse_job_ref(s: &str) -> std::result::Result<JobRef, String> {
    JobRef::parse(s)
}

#[derive(Args, Debug)]
pub struct QueueArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// List every element of a job array on its own line (`123_7`), not one line per array.
    #[arg(long)]
    expand: bool,
    /// Only this user's jobs.
    #[arg(long)]
    user: Option<String>,
    /// Only jobs in this state (pending, starting, running, preempting).
    #[arg(long)]
    state: Option<String>,
    /// Only jobs running on this node (a multi-node job: on any of its nodes).
    #[arg(long)]
    node: Option<String>,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Job id; for a job array, its id (all its elements) or ID_INDEX (one element, `123_7`).
    #[arg(value_parser = parse_job_ref)]
    job: JobRef,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Job id, or ID_INDEX for an element of an array (`123_7`).
    #[arg(value_parser = parse_job_ref)]
    job: JobRef,
    /// Standard error instead of standard output.
    #[arg(long)]
    err: bool,
    /// Keep printing the output as it grows, until the job ends.
    #[arg(long, short = 'f')]
    follow: bool,
}

#[derive(Args, Debug)]
pub struct PriorityArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Job id; for a job array, its id (all its elements) or ID_INDEX (one element, `123_7`).
    #[arg(value_parser = parse_job_ref)]
    job: JobRef,
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
    /// Change the policy (admins). A change whose first decision preempts running jobs is
    /// refused, naming them, unless --preempt-now is given; --dry-run says what it would do.
    Set {
        #[command(flatten)]
        conn: ConnArgs,
        /// e.g. `sjf+easy`.
        policy: String,
        /// Change nothing: list the running jobs the new policy would preempt at once, the
        /// waiting jobs it would start, and how it reorders the queue.
        #[arg(long)]
        dry_run: bool,
        /// Apply it even though it preempts running jobs at once.
        #[arg(long)]
        preempt_now: bool,
        /// Why the order changes (required unless --dry-run): kept in the audit log with who
        /// made the change.
        #[arg(long, required_unless_present = "dry_run")]
        reason: Option<String>,
    },
}

/// `ordo node`: an admin's maintenance of one node (audited).
#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// No new work on the node; its running jobs go on.
    Cordon(NodeMaintArgs),
    /// No new work on the node; its running jobs finish, or with --deadline are stopped and
    /// requeued (their run time kept) once it passes. `ordo nodes` shows `draining`, then
    /// `drained` when no job is left: the node may then be stopped.
    Drain(NodeMaintArgs),
    /// The node takes work again.
    Resume(NodeMaintArgs),
}

#[derive(Args, Debug)]
pub struct NodeMaintArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// The node's name (as `ordo nodes` shows it).
    node: String,
    /// Why (required for cordon and drain; shown by `ordo nodes`, `ordo explain`, the
    /// dashboard and /metrics).
    #[arg(long)]
    reason: Option<String>,
    /// For drain: stop and requeue the jobs still on the node after this long (`30m`, `2h`).
    #[arg(long)]
    deadline: Option<String>,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Only records about this job (`123_7`: element 7 of array 123).
    #[arg(long, value_parser = parse_job_ref)]
    job: Option<JobRef>,
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
    /// Copy the database to FILE while the server runs.
    ///
    /// SQLite's online backup: the database as of one commit, checked, written beside FILE and
    /// renamed onto it only when complete (a killed backup leaves FILE as it was). Restore: stop
    /// the server, move the database away with its -wal and -shm files, put FILE in its place
    /// (docs/INSTALL.md).
    Backup {
        /// The server's database.
        #[arg(long, default_value = "ordo.db")]
        db: PathBuf,
        /// Where the copy goes (replaced only once the new copy is complete).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Create a token for USER and print it (only a digest of it is stored).
    Create {
        /// User (or node) name.
        user: String,
        /// An admin token.
        #[arg(long, conflicts_with = "agent")]
        admin: bool,
        /// A token for the node agent of node USER (it may speak for that node only).
        #[arg(long)]
        agent: bool,
        /// It stops working after this long, e.g. 90d or 12h (default: never).
        #[arg(long)]
        expires: Option<String>,
        /// The server's database.
        #[arg(long, default_value = "ordo.db")]
        db: PathBuf,
    },
    /// List every token: id, user, role, created, expiry, revocation (never the secret).
    List {
        /// The server's database.
        #[arg(long, default_value = "ordo.db")]
        db: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke the token with id ID, or every token of USER; a running server refuses it within
    /// a second.
    Revoke {
        /// A token id (the number in ordo_<id>_...) or a user or node name.
        target: String,
        /// The server's database.
        #[arg(long, default_value = "ordo.db")]
        db: PathBuf,
    },
}

/// What a policy change did, or would do (`--dry-run`), in words.
fn print_policy_change(r: &PolicyChanged) {
    let verb = if r.applied { "" } else { "would " };
    if r.applied {
        println!("policy: {}", clean(&r.policy));
    } else {
        println!("policy: {} (dry run: {} would be in force; nothing changed)", clean(&r.policy), clean(&r.asked));
    }
    let jobs = |v: &[PolicyEffect]| {
        v.iter()
            .map(|e| match e.ran_ms {
                Some(ms) => format!("{} ({}, ran {})", e.job, clean(&e.user), ordo_server::state::fmt_rel(ms)),
                None => format!("{} ({})", e.job, clean(&e.user)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match r.preempt.len() {
        0 => println!("{verb}preempt: no running job"),
        n => println!("{verb}preempt {} at once: {}", words::count(n, "running job"), jobs(&r.preempt)),
    }
    match r.start.len() {
        0 => println!("{verb}start: no waiting job"),
        n => println!("{verb}start {} at once: {}", words::count(n, "waiting job"), jobs(&r.start)),
    }
    println!("{verb}change the place in the queue of {}", words::count(r.reordered, "waiting job"));
    if r.order_before != r.order_after {
        println!("queue before: {}", r.order_before.join(" "));
        println!("queue after:  {}", r.order_after.join(" "));
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) from ms since the epoch.
pub fn fmt_time(ms: i64) -> String {
    ordo_trace::format_datetime(ms)
}

/// `--gpu-mem SIZE` in MiB, bounded as the server bounds it.
fn gpu_mem_arg(s: &str) -> Result<u64> {
    let m = ordo_server::config::parse_size_mib(s)
        .ok_or_else(|| anyhow!("--gpu-mem `{s}`: expected a size such as 40G, 80G"))?;
    kinds::gpu_mem(m).map_err(|e| anyhow!("--gpu-mem `{s}`: {e}"))
}

fn parse_mem(s: &str) -> Result<u64> {
    ordo_server::config::parse_size_mib(s).ok_or_else(|| anyhow!("--mem `{s}`: expected a size such as 16G, 512M"))
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A string from the server made safe for a terminal: control characters (a newline that would
/// forge a row, an escape sequence that would drive the terminal) and the invisible characters
/// that reorder or hide text (bidirectional overrides and isolates such as U+202E, which would
/// show `exe.txt` as `txt.exe`; zero-width characters) are shown escaped, `\n`, `\u{1b}`,
/// `\u{202e}`. Every server-provided string in human-readable output goes through this.
pub fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(unsafe_char) {
        s.chars().map(|c| if unsafe_char(c) { c.escape_default().to_string() } else { c.to_string() }).collect()
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Whether a character must not reach a terminal as it is: control characters, bidirectional
/// formatting characters (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) and zero-width
/// ones (U+200B-U+200D, U+2060, U+FEFF).
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// What a hold, release or priority change was applied to: a job, an element, or (the array's
/// id given) every element of an array concerned.
fn what_changed(asked: JobRef, j: &JobInfo) -> String {
    match (asked, j.array) {
        (JobRef::Job(id), Some(a)) if a.id == id => format!("array {id} (its elements)"),
        _ => format!("job {}", j.id_text()),
    }
}

/// An array in `ordo queue`: `123[0-999%50]` with its elements' states, then why its next
/// element waits.
fn array_lines(q: &QueueResponse, id: JobNo, elems: &[&JobInfo]) -> String {
    let spec = q.arrays.iter().find(|a| a.id == id).map(|a| a.spec.clone()).unwrap_or_else(|| "?".into());
    let mut counts: std::collections::BTreeMap<JobState, usize> = std::collections::BTreeMap::new();
    for j in elems {
        *counts.entry(j.state).or_default() += 1;
    }
    let states: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
    let first = elems[0];
    let mut l = format!(
        "{:>6}  {:<10} {:<10} {:<16} {:>4}  {}",
        format!("{id}[{}]", clean(&spec)),
        "array",
        clean(&first.user),
        truncate(&clean(&first.name), 16),
        first.gpus,
        states.join(", ")
    );
    if let Some(next) = elems.iter().find(|j| j.wait.is_some()) {
        let w = next.wait.as_ref().map(|w| clean(&w.text).into_owned()).unwrap_or_default();
        l = format!("{l}\n        why ({}, next to start): {w}", next.id_text());
    }
    l
}

fn job_line(j: &JobInfo) -> String {
    let when = match j.state {
        JobState::Pending => format!("submitted {}", fmt_time(j.submit)),
        JobState::Starting | JobState::Running | JobState::Preempting => {
            let on = if j.ranks.is_empty() {
                format!("{} GPUs [{}]", clean(j.node.as_deref().unwrap_or("?")), ordo_server::db::ids_text(&j.gpu_ids))
            } else {
                let ranks: Vec<String> = j
                    .ranks
                    .iter()
                    .map(|r| format!("{} [{}]", clean(&r.node), ordo_server::db::ids_text(&r.gpu_ids)))
                    .collect();
                format!("{} nodes: {}", j.ranks.len(), ranks.join(", "))
            };
            format!("on {on} since {}", fmt_time(j.start.unwrap_or(0)))
        }
        _ => format!("ended {}", j.end.map(fmt_time).unwrap_or_default()),
    };
    format!(
        "{:>6}  {:<10} {:<10} {:<16} {:>4}  {when}",
        j.id_text(),
        j.state.as_str(),
        clean(&j.user),
        truncate(&clean(&j.name), 16),
        j.gpus
    )
}

/// A job's GPU activity in words: `busy 47% (p10 12%, peak 40.0 GiB)`.
fn busy_text(a: &JobActivity) -> String {
    let peak = a.peak_mem_mib.map(|m| format!(", peak {:.1} GiB", m as f64 / 1024.0)).unwrap_or_default();
    format!("busy {:.0}% (p10 {:.0}%{peak})", a.mean_busy_pct, a.p10_busy_pct)
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
            if let Some(g) = &a.fence_grace {
                cfg.fence_grace_ms = parse_duration(g)
                    .filter(|&t| t > 0)
                    .with_context(|| format!("--fence-grace `{g}`: expected a duration such as 5s"))?
                    as u64;
            }
            if a.allow_non_loopback {
                cfg.allow_non_loopback = true;
            }
            if a.allow_plain_http {
                cfg.allow_plain_http = true;
            }
            if a.tls_cert.is_some() {
                cfg.tls_cert = a.tls_cert.clone();
                cfg.tls_key = a.tls_key.clone();
            }
            if let Some(m) = &a.min_run {
                cfg.set_min_run(w, m)?;
            }
            if a.metrics_public {
                cfg.metrics_public = true;
            }
            cfg.set_idle(w, a.idle_threshold, a.idle_after.as_deref(), a.idle_webhook.as_deref())?;
            if let Some(l) = &a.topology_levels {
                cfg.set_topology_levels(w, l)?;
            }
            cfg.validate(w)?;
            let db = cfg.db.clone();
            ordo_server::run(cfg, |url| {
                println!("ordo server listening on {url} (db {})", db.display());
                use std::io::Write;
                let _ = std::io::stdout().flush();
            })?;
        }
        ServerCmd::Agent(a) => {
            use ordo_server::agent_file::{text, AgentFile};
            let file = match &a.config {
                Some(p) => AgentFile::read(p)?,
                None => AgentFile::default(),
            };
            let server = a
                .server
                .or(file.server.clone())
                .or_else(|| std::env::var("ORDO_SERVER").ok())
                .unwrap_or_else(|| "http://127.0.0.1:7700".into());
            if a.token.is_some() {
                bail!("--token: an agent's token on its command line is visible to every process (jobs included) through `ps`; put it in a file readable by the agent only and give --token-file FILE, or set ORDO_TOKEN");
            }
            let token = match a.token_file.as_ref().or(file.token_file.as_ref()) {
                Some(f) => read_token_file(f)?,
                None => std::env::var("ORDO_TOKEN").ok().filter(|t| !t.is_empty()).context(
                    "no token: give --token-file FILE or set ORDO_TOKEN (make one with `ordo admin token create NODE --agent`)",
                )?,
            };
            // Jobs start from a clean environment anyway; the agent keeps no copy either.
            std::env::remove_var("ORDO_TOKEN");
            let euid = nix_euid();
            let (run_as, user_map) = match (a.run_as, a.user_map) {
                (None, None) => (file.run_as.clone(), file.user_map.clone()),
                given => given,
            };
            let run_as =
                ordo_server::runas::RunAs::new(run_as.as_deref(), user_map.as_deref(), euid).map_err(|e| anyhow!(e))?;
            let pass_env = a
                .pass_env
                .or(file.pass_env.clone())
                .unwrap_or_else(|| ordo_server::runas::DEFAULT_PASS_ENV.iter().map(|s| s.to_string()).collect());
            let name = match a.name.or(file.name.clone()) {
                Some(n) => n,
                None => std::fs::read_to_string("/etc/hostname")
                    .map(|s| s.trim().to_string())
                    .ok()
                    .filter(|s| !s.is_empty())
                    .context("--name: cannot read the host name; give --name NODE")?,
            };
            let gpus = match (a.gpus, file.gpus()) {
                (Some(g), _) => g,
                (None, Some(g)) => g.parse().map_err(|e| anyhow!("gpus: {e}"))?,
                (None, None) => GpuSpec::Auto,
            };
            let grace_s = a.grace.or(text(&file.grace)).unwrap_or_else(|| "10s".into());
            let grace = parse_duration(&grace_s)
                .with_context(|| format!("--grace `{grace_s}`: expected a duration such as 10s"))?;
            let exe = std::env::current_exe().context("locating the ordo binary for the job supervisor")?;
            let every_s = a.activity_every.or(text(&file.activity_every)).unwrap_or_else(|| "5s".into());
            let activity_every = parse_duration(&every_s)
                .filter(|t| (1_000..=20_000).contains(t))
                .with_context(|| format!("--activity-every `{every_s}`: expected a duration from 1s to 20s"))?;
            let activity = match (a.gpu_activity, text(&file.gpu_activity)) {
                (Some(s), _) => s,
                (None, Some(s)) => s.parse().map_err(|e| anyhow!("gpu_activity: {e}"))?,
                (None, None) => match gpus {
                    GpuSpec::Auto => ActivitySource::Nvml,
                    GpuSpec::Fake(_) => ActivitySource::Off,
                },
            };
            let master_ports = match (a.master_ports, text(&file.master_ports)) {
                (Some(p), _) => p,
                (None, Some(p)) => p.parse().map_err(|e| anyhow!("master_ports: {e}"))?,
                (None, None) => PortRange::default(),
            };
            let max_output = a.max_output.or(text(&file.max_output)).unwrap_or_else(|| "1G".into());
            let min_free = a.min_free.or(text(&file.min_free)).unwrap_or_else(|| "16M".into());
            let cfg = AgentConfig {
                server,
                token,
                work_dir: a
                    .work_dir
                    .or(file.work_dir.clone())
                    .unwrap_or_else(|| PathBuf::from(format!("ordo-agent-{name}"))),
                name,
                gpus,
                grace_ms: grace as u64,
                supervisor: vec![exe.to_string_lossy().into_owned(), "agent-supervise".into()],
                cpus: a.cpus.or(file.cpus),
                mem_mib: a.mem.or(text(&file.mem)).as_deref().map(parse_mem).transpose()?,
                run_as,
                pass_env,
                ca_pem: match a.ca.or(file.ca.clone()).or_else(|| std::env::var_os("ORDO_CA").map(PathBuf::from)) {
                    Some(p) => Some(std::fs::read(&p).with_context(|| format!("CA file {}", p.display()))?),
                    None => None,
                },
                activity,
                activity_every_ms: activity_every as u64,
                addr: a.addr.or(file.addr.clone()),
                master_ports,
                contain: !a.no_cgroup && file.cgroup != Some(false),
                max_output: parse_mem(&max_output)
                    .with_context(|| format!("--max-output `{max_output}`"))?
                    .saturating_mul(1024 * 1024),
                min_free_mib: parse_mem(&min_free).with_context(|| format!("--min-free `{min_free}`"))?,
                gpu_model: match a.gpu_model.or(text(&file.gpu_model)) {
                    Some(m) => Some(kinds::model_name(&m).map_err(|e| anyhow!("--gpu-model: {e}"))?),
                    None => None,
                },
                gpu_mem_mib: match a.gpu_mem.or(text(&file.gpu_mem)) {
                    Some(m) => Some(gpu_mem_arg(&m)?),
                    None => None,
                },
                features: kinds::feature_list(&a.features.or(file.features()).unwrap_or_default())
                    .map_err(|e| anyhow!("--feature: {e}"))?,
                topology: match a.topology.or(text(&file.topology)) {
                    Some(t) => ordo_server::topo::parse_place(&t).map_err(|e| anyhow!("--topology: {e}"))?,
                    None => Default::default(),
                },
            };
            ordo_server::agent::run(cfg)?;
        }
        ServerCmd::AgentSupervise(a) => {
            let helper = vec![
                std::env::current_exe()
                    .context("locating the ordo binary for agent-exec")?
                    .to_string_lossy()
                    .into_owned(),
                "agent-exec".into(),
            ];
            let args = SuperviseArgs::parse(&a.args, helper).map_err(|e| anyhow!("agent-supervise: {e}"))?;
            let code = supervise(&args);
            return Ok(ExitCode::from(code as u8));
        }
        ServerCmd::AgentTee { mode, path } => {
            let mode = u32::from_str_radix(&mode, 8).map_err(|_| anyhow!("--mode `{mode}`: expected octal"))?;
            return Ok(ExitCode::from(ordo_server::agent::tee_main(&path, mode & 0o777) as u8));
        }
        ServerCmd::AgentExec(a) => {
            let ids = match (a.uid, a.gid) {
                (Some(uid), Some(gid)) => Some(ordo_server::supervise::RunAsIds { uid, gid, groups: a.groups }),
                _ => None,
            };
            let code = ordo_server::supervise::exec_as(&a.join, ids.as_ref(), &a.command);
            return Ok(ExitCode::from(code as u8));
        }
        ServerCmd::Submit(a) => {
            if !a.without_dashes.is_empty() {
                return Err(dashes_missing(&a.without_dashes));
            }
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
                gpus: match (a.gpus, a.gpus_per_node) {
                    (Some(g), _) => g,
                    (None, Some(g)) => g.saturating_mul(a.nodes.unwrap_or(1)),
                    (None, None) => a.nodes.unwrap_or(1),
                },
                nodes: a.nodes,
                output: a.output,
                cpus: a.cpus,
                mem_mib: a.mem.as_deref().map(parse_mem).transpose()?,
                time_limit_ms,
                priority: a.priority,
                on_node_failure,
                no_preempt: a.no_preempt.then_some(true),
                preempt: (a.checkpoint.is_some() || a.signal.is_some() || a.min_run.is_some()).then(|| {
                    ordo_server::api::PreemptSpec {
                        checkpoint: a.checkpoint,
                        signal: a.signal.map(|s| s.trim_start_matches("SIG").to_ascii_uppercase()),
                        min_run_ms: a.min_run,
                    }
                }),
                umask: current_umask(),
                after: after_deps(
                    &a.conn,
                    &[
                        (ordo_core::DepKind::AfterOk, &a.after_ok),
                        (ordo_core::DepKind::AfterAny, &a.after_any),
                        (ordo_core::DepKind::AfterNotOk, &a.after_not_ok),
                    ],
                )?,
                array: a.array,
                gpu_models: kinds::model_list(&a.gpu_model).map_err(|e| anyhow!("--gpu-model: {e}"))?,
                gpu_mem_mib: a.gpu_mem.as_deref().map(gpu_mem_arg).transpose()?,
                features: kinds::feature_list(&a.features).map_err(|e| anyhow!("--feature: {e}"))?,
                topology: a.topology.clone(),
            };
            let r: SubmitResponse = c.post("/v1/jobs", &req)?;
            if a.conn.json {
                print_json(&r)?;
            } else {
                println!("{}", r.id);
            }
        }
        ServerCmd::Queue(QueueArgs { conn, expand, user, state, node }) => {
            let mut q: QueueResponse = conn.client()?.get("/v1/jobs")?;
            if let Some(s) = &state {
                if JobState::parse(s).is_none() {
                    bail!("--state `{s}`: expected pending, starting, running or preempting");
                }
            }
            q.jobs.retain(|j| {
                user.as_ref().is_none_or(|u| &j.user == u)
                    && state.as_ref().is_none_or(|s| j.state.as_str() == s)
                    && node.as_ref().is_none_or(|n| j.rank_on(n).is_some() && j.state != JobState::Pending)
            });
            if conn.json {
                return print_json(&q).map(|_| ExitCode::SUCCESS);
            }
            println!("policy: {}", clean(&q.policy));
            println!("{:>6}  {:<10} {:<10} {:<16} {:>4}  details", "job", "state", "user", "name", "gpus");
            // Each array's elements, in listing order.
            let mut arrays: std::collections::HashMap<JobNo, Vec<&JobInfo>> = std::collections::HashMap::new();
            for j in &q.jobs {
                if let Some(a) = j.array {
                    arrays.entry(a.id).or_default().push(j);
                }
            }
            for j in &q.jobs {
                match j.array {
                    Some(a) if !expand => {
                        // One line per array, where its first listed element is.
                        if let Some(elems) = arrays.remove(&a.id) {
                            println!("{}", array_lines(&q, a.id, &elems));
                        }
                    }
                    _ => {
                        let mut l = job_line(j);
                        if let Some(w) = &j.wait {
                            l = format!("{l}\n        why: {}", clean(&w.text));
                        }
                        println!("{l}");
                    }
                }
            }
        }
        ServerCmd::Cancel(a) => {
            let r: serde_json::Value =
                a.conn.client()?.post(&format!("/v1/jobs/{}/cancel", a.job), &serde_json::json!({}))?;
            if a.conn.json {
                print_json(&r)?;
            } else {
                let state = r["state"].as_str().unwrap_or("?");
                let n = r["cancelled"].as_u64().unwrap_or(1);
                if n > 1 {
                    println!("array {}: {n} elements cancelled (running ones are being killed by their agents)", a.job);
                } else if state == "cancelled" {
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
                println!("{} held by {}", what_changed(a.job, &j), clean(j.held_by.as_deref().unwrap_or("?")));
            }
        }
        ServerCmd::Release(a) => {
            let j: JobInfo = a.conn.client()?.post(&format!("/v1/jobs/{}/release", a.job), &serde_json::json!({}))?;
            if a.conn.json {
                print_json(&j)?;
            } else {
                println!("{} released; it is {}", what_changed(a.job, &j), j.state.as_str());
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
                println!("{} priority {}", what_changed(a.job, &j), j.priority);
            }
        }
        ServerCmd::Node { cmd } => {
            let (action, a) = match cmd {
                NodeCmd::Cordon(a) => ("cordon", a),
                NodeCmd::Drain(a) => ("drain", a),
                NodeCmd::Resume(a) => ("resume", a),
            };
            if a.deadline.is_some() && action != "drain" {
                bail!("--deadline: only `ordo node drain` has a deadline");
            }
            if action != "resume" && a.reason.as_deref().is_none_or(|r| r.trim().is_empty()) {
                bail!("--reason: required to {action} a node (say why, for whoever looks at it next)");
            }
            let deadline_ms = match &a.deadline {
                Some(d) => Some(
                    parse_duration(d)
                        .ok_or_else(|| anyhow!("--deadline `{d}`: expected a duration such as 30m or 2h"))?,
                ),
                None => None,
            };
            let req = NodeMaintRequest { action: action.into(), reason: a.reason.clone(), deadline_ms };
            let n: NodeInfo = a.conn.client()?.post(&format!("/v1/nodes/{}/maintenance", a.node), &req)?;
            if a.conn.json {
                return print_json(&n).map(|_| ExitCode::SUCCESS);
            }
            let jobs = match n.job_ids.len() {
                0 => "no job on it".to_string(),
                k => format!("{} on it ({})", words::count(k, "job"), n.job_ids.join(",")),
            };
            println!("{}: {}; {jobs}", clean(&n.name), n.status);
            if let Some(d) = n.maint.as_ref().and_then(|m| m.deadline) {
                println!("jobs still on it at {} are stopped and requeued", fmt_time(d));
            }
        }
        ServerCmd::Nodes(conn) => {
            let n: Vec<NodeInfo> = conn.client()?.get("/v1/nodes")?;
            if conn.json {
                return print_json(&n).map(|_| ExitCode::SUCCESS);
            }
            println!(
                "{:<16} {:<8} {:>4} {:>4} {:>5}  {:<24} {:>9} {:>15}  jobs",
                "node", "state", "gpus", "free", "busy", "kind", "cpus used", "memory used"
            );
            for x in &n {
                // Model (fake or real), memory of each GPU, features: `fake a100, 80G, ib`.
                let mut kind =
                    clean(&kinds::node_kind_text(x.fake, x.gpu_model.as_deref(), x.gpu_mem_mib, &x.features))
                        .into_owned();
                // Its place in the topology, when it gave one: `fake [block=b0,switch=s0]`.
                if let Some(t) = ordo_server::topo::place_text(&x.topology) {
                    kind.push_str(&format!(" [{}]", clean(&t)));
                }
                let jobs = &x.job_ids;
                let cpus = x.cpus.map(|c| format!("{}/{c}", x.used_cpus)).unwrap_or_else(|| "-".into());
                let mem = x
                    .mem_mib
                    .map(|m| format!("{}/{}", fmt_mib(x.used_mem_mib), fmt_mib(m)))
                    .unwrap_or_else(|| "-".into());
                let busy = x.busy_pct.map(|b| format!("{b:.0}%")).unwrap_or_else(|| "-".into());
                let state = if x.status.is_empty() { x.state.as_str() } else { x.status.as_str() };
                println!(
                    "{:<16} {:<8} {:>4} {:>4} {:>5}  {:<24} {:>9} {:>15}  {}",
                    clean(&x.name),
                    state,
                    x.gpus,
                    x.free_gpus,
                    busy,
                    kind,
                    cpus,
                    mem,
                    jobs.join(",")
                );
            }
            for x in &n {
                if let Some(m) = &x.maint {
                    let until = m.deadline.map(|d| format!("; jobs stopped at {}", fmt_time(d))).unwrap_or_default();
                    let what = if m.kind == MaintKind::Cordon { "cordoned" } else { "drained" };
                    println!(
                        "{}: {what} by {} at {}: {}{until}",
                        clean(&x.name),
                        clean(&m.by),
                        fmt_time(m.since),
                        clean(&m.reason)
                    );
                }
                if let Some(why) = &x.drain {
                    println!("{}: takes no new work: {}", clean(&x.name), clean(why));
                }
            }
            for x in n.iter().filter(|x| !x.mem_limits) {
                println!("{}: memory limits: not enforced (no writable cgroup)", clean(&x.name));
            }
            for x in &n {
                for j in &x.idle_jobs {
                    println!(
                        "{}: job {j} is ALLOCATED-BUT-IDLE: it holds GPUs but kept them under the idle threshold (`ordo explain {j}`)",
                        clean(&x.name)
                    );
                }
            }
            if n.iter().any(|x| x.busy_pct.is_some()) {
                println!("busy: mean share of time a kernel ran on the node's GPUs, from the agent's latest samples");
            }
        }
        ServerCmd::Logs(a) => {
            use std::io::Write;
            let client = a.conn.client()?;
            let stream = if a.err { "err" } else { "out" };
            let mut offset = 0u64;
            let mut out = std::io::stdout().lock();
            loop {
                let l: JobLogs = client.get(&format!("/v1/jobs/{}/logs?stream={stream}&offset={offset}", a.job))?;
                if a.conn.json {
                    print_json(&l)?;
                } else {
                    out.write_all(l.data.as_bytes())?;
                    out.flush()?;
                }
                let more = l.next < l.size;
                offset = l.next;
                if more {
                    continue;
                }
                if !a.follow || l.ended {
                    if !a.conn.json && !a.follow {
                        eprintln!(
                            "({} of job {}'s {stream} on node {}, {})",
                            words::count(l.size as usize, "byte"),
                            l.job,
                            clean(&l.node),
                            clean(&l.path)
                        );
                    }
                    break;
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        ServerCmd::Explain(a) => {
            let j: JobInfo = a.conn.client()?.get(&format!("/v1/jobs/{}", a.job))?;
            if a.conn.json {
                return print_json(&j).map(|_| ExitCode::SUCCESS);
            }
            println!(
                "job {} ({}, user {}, {}{}, priority {}): {}",
                j.id_text(),
                clean(&j.name),
                clean(&j.user),
                words::count(j.gpus as usize, "GPU"),
                match (j.nodes, j.ranks.len()) {
                    (_, r) if r > 1 => format!(" on {r} nodes"),
                    (0, _) => " split over nodes by the placement".to_string(),
                    (n, _) if n > 1 => format!(" on {n} nodes"),
                    _ => String::new(),
                },
                j.priority,
                j.state.as_str()
            );
            if let Some(n) = j.needs() {
                println!("runs only on GPUs of: {}", clean(&n.describe()));
            }
            match (&j.wait, j.state) {
                (Some(w), _) => {
                    println!("why it waits: {}", clean(&w.text));
                    println!("jobs ahead of it by the policy: {}", w.ahead);
                    match w.expected_start {
                        Some(t) => println!("expected start: {} UTC (by running jobs' time limits)", fmt_time(t)),
                        None => println!("expected start: not known yet"),
                    }
                }
                (None, JobState::Starting | JobState::Running | JobState::Preempting) => {
                    println!(
                        "runs on {} GPUs [{}] since {} UTC",
                        clean(j.node.as_deref().unwrap_or("?")),
                        ordo_server::db::ids_text(&j.gpu_ids),
                        fmt_time(j.start.unwrap_or(0))
                    );
                    for (i, r) in j.ranks.iter().enumerate() {
                        let how = match (r.started, r.ended) {
                            (_, true) => "stopped",
                            (true, false) => "running",
                            (false, false) => "starting",
                        };
                        println!(
                            "  rank {i}: {} GPUs [{}], {how}",
                            clean(&r.node),
                            ordo_server::db::ids_text(&r.gpu_ids)
                        );
                    }
                    if let Some(s) = &j.gang_stop {
                        println!("being stopped: {} (its other ranks are being killed)", clean(&s.reason));
                    }
                    if j.state == JobState::Preempting {
                        println!("being preempted: its agent has been told to stop it; it then goes back to the queue");
                    }
                }
                (None, _) => println!(
                    "ended {} UTC: {}",
                    j.end.map(fmt_time).unwrap_or_default(),
                    clean(j.end_reason.as_deref().unwrap_or_default())
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
            if let Some(p) = &j.preempt {
                let mut parts = vec![format!("checkpoint {}", p.checkpoint.as_deref().unwrap_or("continuous"))];
                if let Some(s) = &p.signal {
                    parts.push(format!("stopped with SIG{s}"));
                }
                if let Some(m) = p.min_run_ms {
                    parts.push(format!("runs at least {:.0} s before a preemption", m as f64 / 1000.0));
                }
                if j.lost_ms > 0 {
                    parts.push(format!("{:.1} s of run time lost to preemptions", j.lost_ms as f64 / 1000.0));
                }
                println!("preemption: {}", parts.join("; "));
            }
            // Where its output is: on the node of its (last) run, rank 0's for a multi-node job.
            if let Some(node) = j.ranks.first().map(|r| r.node.as_str()).or(j.node.as_deref()) {
                println!(
                    "output: on node {}, job-{}.out and job-{}.err in its agent's work directory; `ordo logs {}` shows it",
                    clean(node),
                    j.id,
                    j.id,
                    j.id_text()
                );
            }
            if let Some(m) = j.array {
                println!(
                    "element {} of job array {} (job id {}; `ordo queue` shows the array, `ordo cancel {}` cancels all of it)",
                    m.index, m.id, j.id, m.id
                );
            }
            if let Some(a) = &j.activity {
                println!(
                    "GPU activity: {} over {} GPU samples (busy: the share of time a kernel ran, NVML utilization.gpu)",
                    busy_text(a),
                    a.samples
                );
                match (a.idle_flagged, a.idle_since) {
                    (Some(f), Some(s)) => println!(
                        "ALLOCATED-BUT-IDLE: its GPUs have been under the idle threshold since {} UTC (flagged {} UTC)",
                        fmt_time(s),
                        fmt_time(f)
                    ),
                    (None, Some(s)) => println!(
                        "under the idle threshold since {} UTC (not yet long enough to be flagged)",
                        fmt_time(s)
                    ),
                    _ => {}
                }
                if let (Some(at), Some(how)) = (a.reclaim_at, a.reclaim_action.as_deref()) {
                    println!(
                        "RECLAIM: the server's reclaim rule will {how} it at {} UTC unless its GPUs get busy again",
                        fmt_time(at)
                    );
                }
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
                let busy = j.activity.as_ref().map(|a| format!("{}; ", busy_text(a))).unwrap_or_default();
                println!("{}  {busy}{}", job_line(j), clean(j.end_reason.as_deref().unwrap_or("")));
            }
        }
        ServerCmd::Policy { cmd } => {
            let cmd = cmd.unwrap_or(PolicyCmd::Show(ConnArgs::default()));
            match cmd {
                PolicyCmd::Show(conn) => {
                    let r: PolicyBody = conn.client()?.get("/v1/policy")?;
                    if conn.json {
                        print_json(&r)?;
                    } else {
                        println!("policy: {}", clean(&r.policy));
                    }
                }
                PolicyCmd::Set { conn, policy, dry_run, preempt_now, reason } => {
                    let r: PolicyChanged =
                        conn.client()?.put("/v1/policy", &PolicyChange { policy, dry_run, preempt_now, reason })?;
                    if conn.json {
                        print_json(&r)?;
                    } else {
                        print_policy_change(&r);
                    }
                }
            }
        }
        ServerCmd::Audit(a) => {
            let mut path = format!("/v1/audit?limit={}", a.limit);
            let job = match a.job {
                None => None,
                Some(JobRef::Job(id)) => Some(id),
                // The element's own job id.
                Some(r) => Some(a.conn.client()?.get::<JobInfo>(&format!("/v1/jobs/{r}"))?.id),
            };
            if let Some(j) = job {
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
                println!(
                    "{}  {:<10} {:<8} {:<8} [{}] {}",
                    fmt_time(r.time),
                    clean(&r.actor),
                    clean(&r.kind),
                    job,
                    clean(&r.policy),
                    r.detail
                );
            }
        }
        ServerCmd::Admin { cmd: AdminCmd::Token { cmd } } => return token_cmd(cmd),
        ServerCmd::Admin { cmd: AdminCmd::Backup { db, out } } => {
            let t0 = std::time::Instant::now();
            let b = ordo_server::db::backup(&db, &out)?;
            let last = b.last_job.map(|j| format!(", the last job {j}")).unwrap_or_default();
            println!(
                "backed up {} to {}: schema version {}, {} jobs{last}, {} bytes, checked, in {:.2} s",
                db.display(),
                out.display(),
                b.schema_version,
                b.jobs,
                b.bytes,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// This process's effective user id.
fn nix_euid() -> u32 {
    ordo_server::runas::current_user().uid
}

/// This process's umask (from /proc/self/status, which reads it without changing it).
fn current_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let v = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(v.trim(), 8).ok()
}

/// `ordo admin token create|list|revoke` on the database file (the server need not run; a running
/// one sees a revocation within a second).
fn token_cmd(cmd: TokenCmd) -> Result<ExitCode> {
    use ordo_server::auth;
    let open = |db: &std::path::Path| ordo_server::db::open(db).with_context(|| format!("opening {}", db.display()));
    // Listing or revoking never makes a database: a wrong or missing --db would otherwise
    // create an empty one and show no token (or revoke nothing) without a word.
    let existing = |db: &std::path::Path| {
        if !db.exists() {
            anyhow::bail!(
                "no database at {}: give the server's with --db (the package's is /var/lib/ordo/ordo.db)",
                db.display()
            );
        }
        open(db)
    };
    match cmd {
        TokenCmd::Create { user, admin, agent, expires, db } => {
            let role = if admin {
                Role::Admin
            } else if agent {
                Role::Agent
            } else {
                Role::User
            };
            let now = now_ms();
            let expires = match &expires {
                Some(e) => Some(
                    now + parse_duration(e)
                        .filter(|&v| v > 0)
                        .with_context(|| format!("--expires `{e}`: expected a duration such as 90d, 12h"))?,
                ),
                None => None,
            };
            let conn = open(&db)?;
            let t = auth::create_token_in(&conn, &user, role, expires, now)
                .with_context(|| format!("creating a token in {}", db.display()))?;
            let id = auth::split(&t).map(|(id, _)| id);
            local_audit(
                &conn,
                serde_json::json!({"event": "create", "id": id, "user": user, "role": role, "expires": expires}),
            )?;
            println!("{t}");
            let until = expires.map(|e| format!(", valid until {} UTC", fmt_time(e))).unwrap_or_default();
            eprintln!("token for {user} ({}) created{until}; it is shown only now", role.as_str());
        }
        TokenCmd::List { db, json } => {
            let list = auth::list_tokens(&existing(&db)?)?;
            if json {
                return print_json(&list).map(|_| ExitCode::SUCCESS);
            }
            println!("{:>5}  {:<20} {:<6} {:<20} {:<20} state", "id", "user", "role", "created (UTC)", "expires (UTC)");
            let now = now_ms();
            for t in list {
                let state = match (t.revoked, t.expires) {
                    (Some(r), _) => format!("revoked {}", fmt_time(r)),
                    (None, Some(e)) if e <= now => "expired".to_string(),
                    _ => "valid".to_string(),
                };
                println!(
                    "{:>5}  {:<20} {:<6} {:<20} {:<20} {state}",
                    t.id,
                    clean(&t.user),
                    t.role.as_str(),
                    fmt_time(t.created),
                    t.expires.map(fmt_time).unwrap_or_else(|| "never".into())
                );
            }
        }
        TokenCmd::Revoke { target, db } => {
            let conn = existing(&db)?;
            let ids = auth::revoke(&conn, &target, now_ms())?;
            local_audit(&conn, serde_json::json!({"event": "revoke", "target": target, "ids": ids}))?;
            if ids.is_empty() {
                println!("{target}: already revoked");
            } else {
                let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                println!("revoked token{} {}", if ids.len() == 1 { "" } else { "s" }, list.join(", "));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An audit record of a token change made on the database file, by the local Unix account.
fn local_audit(conn: &ordo_server::db::Connection, detail: serde_json::Value) -> Result<()> {
    let policy = ordo_server::db::meta_get(conn, "policy")?.unwrap_or_default();
    let actor = format!("local:{}", ordo_server::runas::current_user().name);
    ordo_server::db::audit(conn, now_ms(), &actor, "token", None, &policy, &detail)?;
    Ok(())
}
