//! `ordo batch plan|split|run|submit|status|fetch|cancel`: ordo's ordering applied to requests
//! for AI APIs (see docs/BATCH.md). Argument parsing and printing only; the work is in ordo-batch.

mod remote;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ordo_batch::budget::Budget;
use ordo_batch::deadline::Deadline;
use ordo_batch::http::ApiKey;
use ordo_batch::plan::Route;
use ordo_batch::report::{BatchReport, Results};
use ordo_batch::window::Window;
use ordo_batch::{Limits, LoadOptions, Order, PlanOptions, Prices, RunOptions, TokenMode};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `ordo batch ...`
#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(subcommand)]
    cmd: BatchCmd,
}

#[derive(Subcommand, Debug)]
enum BatchCmd {
    /// Estimate tokens, group and order the requests, and show cost, duration and routes.
    Plan(PlanArgs),
    /// Write provider batch files within the per-file limits, grouped as planned.
    Split(SplitArgs),
    /// Send the requests live to an OpenAI-compatible endpoint, paced and resumable.
    Run(RunArgs),
    /// Upload the requests and create provider batches (OpenAI or Anthropic); resumable.
    Submit(remote::SubmitArgs),
    /// Show each batch's status and counts.
    Status(remote::StatusArgs),
    /// Download results and errors and merge them into one output, in input order.
    Fetch(remote::FetchArgs),
    /// Cancel every batch that has not ended.
    Cancel(remote::StatusArgs),
    /// The money, as a page like `ordo report`: cost per client and model live vs batch vs
    /// cached, the peak avoided, and the actual cost of fetched or run results.
    Report(ReportArgs),
}

#[derive(Args, Debug)]
struct Common {
    /// Request file: JSONL in the OpenAI batch-input shape.
    file: PathBuf,
    /// Provider limits (see docs/BATCH.md); default: 500 requests and 200,000 tokens a minute.
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Leave bad lines out (they are listed) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Token counting: exact, approx (calibrated on a sample) or auto (exact up to 20,000 requests).
    #[arg(long, default_value = "auto")]
    tokens: TokenMode,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    planning: Planning,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// When live calls may go.
#[derive(Args, Debug)]
struct When {
    /// Deadline of requests without their own `metadata.deadline`: a time after the start (2h,
    /// 90m) or an RFC 3339 time. Requests go earliest deadline first; those that cannot make it
    /// are named before anything is sent; a deadline before the batch window ends means live.
    #[arg(long)]
    deadline: Option<String>,
    /// Send live calls only inside this daily window, e.g. 22:00-06:00 (off-peak); pause outside it.
    #[arg(long)]
    window: Option<String>,
    /// Time zone of --window: an IANA name such as Europe/Bucharest or UTC (default: the system's).
    #[arg(long, requires = "window")]
    tz: Option<String>,
}

impl When {
    fn deadline(&self) -> Result<Option<Deadline>> {
        self.deadline.as_deref().map(|d| Deadline::parse(d).map_err(|e| anyhow::anyhow!("--deadline: {e}"))).transpose()
    }

    fn window(&self) -> Result<Option<Window>> {
        self.window.as_deref().map(|w| Window::parse(w, self.tz.as_deref()).map_err(anyhow::Error::msg)).transpose()
    }
}

/// What `plan` and `report` both take.
#[derive(Args, Debug)]
struct Planning {
    /// Prices per model (see docs/BATCH.md); without it costs are not shown.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Live order: fair (round robin across clients, shortest first within each), sjf, input.
    #[arg(long, default_value = "fair")]
    order: Order,
    /// Output tokens assumed for a request without max_tokens.
    #[arg(long, default_value_t = 256)]
    output_tokens: u64,
    #[command(flatten)]
    when: When,
    /// Never plan batch files.
    #[arg(long)]
    no_batch: bool,
}

impl Planning {
    fn options(&self) -> Result<PlanOptions> {
        Ok(PlanOptions {
            order: self.order,
            assumed_output_tokens: self.output_tokens,
            deadline: self.when.deadline()?,
            allow_batch: !self.no_batch,
            window: self.when.window()?,
            ..PlanOptions::default()
        })
    }
}

#[derive(Args, Debug)]
struct ReportArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    planning: Planning,
    /// Output of `ordo batch fetch --out` (answered through the batch API; repeatable): the
    /// actual cost from the usage it reports.
    #[arg(long)]
    batch_results: Vec<PathBuf>,
    /// Output of `ordo batch run` (answered live; repeatable): the actual cost.
    #[arg(long)]
    live_results: Vec<PathBuf>,
    /// Where to write the report: .html (default), .md or .json (`-`: standard output, HTML).
    #[arg(long)]
    out: PathBuf,
    /// Title at the top of the report.
    #[arg(long, default_value = "ordo batch report")]
    title: String,
}

#[derive(Args, Debug)]
struct SplitArgs {
    #[command(flatten)]
    common: Common,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Write even if the directory already holds batch files.
    #[arg(long)]
    force: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Base URL of the OpenAI-compatible server (e.g. https://api.openai.com or http://127.0.0.1:8000/v1).
    #[arg(long)]
    endpoint: String,
    /// Prices per model, for the spend shown.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Output JSONL (default: FILE with `.out.jsonl`); appended to when resuming.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Progress file (default: OUTPUT.progress).
    #[arg(long)]
    progress: Option<PathBuf>,
    /// Read the API key from this file (else from $ORDO_API_KEY; none: no Authorization header).
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Send order: fair, sjf or input.
    #[arg(long, default_value = "fair")]
    order: Order,
    /// Output tokens assumed (against tokens per minute) for a request without max_tokens.
    #[arg(long, default_value_t = 256)]
    output_tokens: u64,
    /// Retries after 5xx/408/transport errors.
    #[arg(long, default_value_t = 6)]
    max_retries: u32,
    /// Resend requests that were in flight when an earlier run was killed (at-least-once).
    #[arg(long)]
    resend_unknown: bool,
    /// Seed of the backoff jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timeout of one HTTP exchange, seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    #[command(flatten)]
    when: When,
    /// Stop a client before it spends more than AMOUNT (in the prices' currency, counting
    /// earlier runs' answers): `5` for every client or `acme=2.5` for one; repeatable; needs --prices.
    #[arg(long, value_name = "[CLIENT=]AMOUNT")]
    max_cost: Vec<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// What a run will do, before it starts (on stderr): the window, and requests that cannot
/// make their deadline.
fn print_preview(p: &ordo_batch::run::Preview, opts: &RunOptions) {
    if let Some(w) = &opts.window {
        eprintln!(
            "window: {}: {} requests to send, the first at {}, the last about {}",
            w.describe(),
            p.to_send,
            w.local(&p.first_send),
            w.local(&p.last_send)
        );
    }
    if !p.late.is_empty() {
        eprintln!(
            "deadline: {} of {} requests cannot be sent before their deadline under the limits (earliest deadline first):",
            p.late.len(),
            p.to_send
        );
        for l in p.late.iter().take(10) {
            eprintln!("  {} (line {}): due {}, earliest {}", l.custom_id, l.line, l.due, l.earliest);
        }
        if p.late.len() > 10 {
            eprintln!("  ... and {} more (all in --json's `late`)", p.late.len() - 10);
        }
    }
}

fn parse_duration_s(s: &str, flag: &str) -> Result<f64> {
    ordo_batch::deadline::parse_duration(s).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

fn load_limits(p: Option<&std::path::Path>) -> Result<Limits> {
    Ok(match p {
        Some(p) => Limits::load(p)?,
        None => Limits::default(),
    })
}

/// The API key: the first line of `file`, else `$ORDO_API_KEY`, else `$fallback_env`; never
/// printed. None: no key (local servers).
fn api_key(file: Option<&std::path::Path>, fallback_env: Option<&str>) -> Result<Option<ApiKey>> {
    if let Some(p) = file {
        let k = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let k = k.lines().next().unwrap_or("").trim().to_string();
        if k.is_empty() {
            bail!("{}: the API key file is empty", p.display());
        }
        return Ok(Some(ApiKey::new(&k)));
    }
    let env = |name: &str| std::env::var(name).ok().filter(|k| !k.trim().is_empty()).map(|k| ApiKey::new(&k));
    Ok(env("ORDO_API_KEY").or_else(|| fallback_env.and_then(env)))
}

fn load(c: &Common) -> Result<(ordo_batch::Loaded, Limits)> {
    let limits = load_limits(c.limits.as_deref())?;
    let opts = LoadOptions { skip_bad: c.skip_bad, tokens: c.tokens, threads: 0 };
    let loaded = ordo_batch::load_path(&c.file, &opts)?;
    for e in &loaded.skipped {
        eprintln!("skipped {}:{}: {}", c.file.display(), e.line, e.reason);
    }
    Ok((loaded, limits))
}

fn prices(p: &Option<PathBuf>) -> Result<Prices> {
    Ok(match p {
        Some(p) => Prices::load(p)?,
        None => Prices::default(),
    })
}

/// Run `ordo batch ...`.
pub fn run(a: BatchArgs) -> Result<ExitCode> {
    match a.cmd {
        BatchCmd::Plan(p) => {
            let (loaded, limits) = load(&p.common)?;
            let prices = prices(&p.planning.prices)?;
            let plan = ordo_batch::make_plan(&loaded, &limits, &prices, &p.planning.options()?);
            if p.json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{plan}");
            }
        }
        BatchCmd::Split(s) => {
            let (loaded, limits) = load(&s.common)?;
            let sum = ordo_batch::split(&loaded, &limits.batch, &s.out, s.force)?;
            for f in &sum.files {
                println!("{}  {} {}  {} requests  {} bytes", f.file, f.endpoint, f.model, f.requests, f.bytes);
            }
            println!("wrote {} batch files and manifest.json to {}", sum.files.len(), sum.dir.display());
        }
        BatchCmd::Run(r) => {
            let api_key = api_key(r.api_key_file.as_deref(), None)?;
            if !(r.timeout > 0.0 && r.timeout.is_finite()) {
                bail!("--timeout: expected seconds > 0");
            }
            let (loaded, limits) = load(&r.common)?;
            let prices = prices(&r.prices)?;
            let output = r.output.clone().unwrap_or_else(|| r.common.file.with_extension("out.jsonl"));
            let mut opts = RunOptions::new(&r.endpoint, &output);
            if let Some(p) = &r.progress {
                opts.progress = p.clone();
            }
            opts.api_key = api_key;
            opts.concurrency = r.concurrency;
            opts.order = r.order;
            opts.assumed_output_tokens = r.output_tokens;
            opts.max_retries = r.max_retries;
            opts.resend_unknown = r.resend_unknown;
            opts.seed = r.seed;
            opts.timeout = Duration::from_secs_f64(r.timeout);
            opts.quiet = crate::progress::quiet();
            opts.window = r.when.window()?;
            opts.default_deadline = r.when.deadline()?;
            opts.budget = Budget::parse(&r.max_cost).map_err(anyhow::Error::msg)?;
            if opts.api_key.is_none() && !crate::progress::quiet_flag() {
                eprintln!("note: no API key ($ORDO_API_KEY or --api-key-file); sending without Authorization");
            }
            print_preview(&ordo_batch::run::preview(&loaded, &limits, &opts)?, &opts);
            let s = ordo_batch::run(&loaded, &limits, &prices, &opts)?;
            if r.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!(
                    "{} requests: {} answered now ({} failed), {} answered before, {} unknown skipped, {} unknown resent",
                    s.requests,
                    s.ok + s.failed,
                    s.failed,
                    s.already_done,
                    s.unknown_skipped.len(),
                    s.unknown_resent
                );
                println!(
                    "{} HTTP attempts, {} retries after 429, {} after errors; {:.1}s, {:.1} requests/s; spent {:.4} {}",
                    s.attempts,
                    s.retries_429,
                    s.retries_other,
                    s.elapsed_s,
                    (s.ok + s.failed) as f64 / s.elapsed_s.max(1e-9),
                    s.spend,
                    prices.currency
                );
                println!("output: {}  progress: {}", opts.output.display(), opts.progress.display());
            }
            if !s.unknown_skipped.is_empty() {
                eprintln!(
                    "warning: {} requests were in flight when an earlier run stopped; their outcome is unknown and \
                     they were not sent again (at-most-once). Rerun with --resend-unknown to send them (at-least-once): {}",
                    s.unknown_skipped.len(),
                    s.unknown_skipped.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
                );
            }
            for o in &s.over_budget {
                eprintln!(
                    "max-cost: {} stopped at {:.4} of its {:.4} {}; {} of its requests not sent (raise --max-cost and rerun to send them)",
                    o.client, o.spent, o.limit, prices.currency, o.not_sent
                );
            }
            if s.failed > 0 || !s.over_budget.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
        BatchCmd::Report(a) => {
            let (loaded, limits) = load(&a.common)?;
            let prices = prices(&a.planning.prices)?;
            let plan = ordo_batch::make_plan(&loaded, &limits, &prices, &a.planning.options()?);
            let mut results = Vec::new();
            for (paths, route) in [(&a.batch_results, Route::Batch), (&a.live_results, Route::Live)] {
                results.extend(paths.iter().map(|p| Results { path: p.clone(), route }));
            }
            let report = BatchReport::build(&a.title, &loaded, &plan, &prices, a.planning.output_tokens, &results)?;
            let text = match ordo_batch::report::format_of(&a.out) {
                "json" => serde_json::to_string_pretty(&report)? + "\n",
                "md" => report.page().markdown(),
                _ => report.page().html().map_err(anyhow::Error::msg)?,
            };
            if a.out.as_os_str() == "-" {
                print!("{text}");
            } else {
                std::fs::write(&a.out, text).with_context(|| format!("writing {}", a.out.display()))?;
                println!("{}", report.headline);
                println!("wrote {}", a.out.display());
            }
        }
        BatchCmd::Submit(a) => return remote::submit(a),
        BatchCmd::Status(a) => return remote::status(a),
        BatchCmd::Fetch(a) => return remote::fetch(a),
        BatchCmd::Cancel(a) => return remote::cancel(a),
    }
    Ok(ExitCode::SUCCESS)
}
