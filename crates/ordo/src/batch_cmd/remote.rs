//! `ordo batch submit|status|fetch|cancel`: the providers' batch endpoints (docs/BATCH.md).
//! Argument parsing and printing only; the work is in `ordo_batch::submit`.

use super::{api_key, load_limits, parse_duration_s};
use anyhow::{bail, Context, Result};
use clap::Args;
use ordo_batch::http::{Api, HttpOptions};
use ordo_batch::provider::Provider;
use ordo_batch::results::{merge, Merged};
use ordo_batch::source::Source;
use ordo_batch::state::{default_state_path, State};
use ordo_batch::submit::{check_source, prepare, Session};
use ordo_batch::{LoadOptions, TokenMode};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Where the state is and how to reach the provider.
#[derive(Args, Debug)]
pub struct Access {
    /// State file of the submission (default for `submit`: beside the input, INPUT.ordo-batch.json).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Read the API key from this file (else $ORDO_API_KEY, else $OPENAI_API_KEY / $ANTHROPIC_API_KEY).
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Timeout of one HTTP exchange, seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
}

/// `ordo batch submit`
#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// Request file (JSONL, OpenAI batch-input shape) or a directory written by `ordo batch split`.
    /// Optional when --state names an existing submission.
    file: Option<PathBuf>,
    /// The provider's batch API: openai (Files API + /v1/batches) or anthropic (Message Batches).
    #[arg(long)]
    provider: Option<Provider>,
    /// Base URL of the provider's API (default: https://api.openai.com or https://api.anthropic.com).
    #[arg(long)]
    endpoint: Option<String>,
    #[command(flatten)]
    access: Access,
    /// Provider limits: the [batch] requests and bytes per batch (see docs/BATCH.md).
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Leave bad lines out (they are listed) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Resubmit every request without a successful answer (failed, expired, cancelled) as new
    /// batches. Every batch must have ended and been fetched.
    #[arg(long)]
    retry_failed: bool,
    /// Print the batches as JSON.
    #[arg(long)]
    json: bool,
}

/// `ordo batch status` / `ordo batch cancel`
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    access: Access,
    /// Poll until every batch has ended.
    #[arg(long)]
    wait: bool,
    /// Time between polls with --wait (e.g. 30s, 5m).
    #[arg(long, default_value = "60s")]
    poll: String,
    /// Print the batches as JSON.
    #[arg(long)]
    json: bool,
}

/// `ordo batch fetch`
#[derive(Args, Debug)]
pub struct FetchArgs {
    #[command(flatten)]
    status: StatusArgs,
    /// Merged output: one line per request, in input order (OpenAI batch-output shape).
    #[arg(long)]
    out: PathBuf,
}

fn state_path(a: &Access, file: Option<&Path>) -> Result<PathBuf> {
    match (&a.state, file) {
        (Some(s), _) => Ok(s.clone()),
        (None, Some(f)) => Ok(default_state_path(f)),
        (None, None) => bail!("--state: which submission? (give --state FILE, or the request file to submit)"),
    }
}

fn api(a: &Access, state: &State) -> Result<Api> {
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        bail!("--timeout: expected seconds > 0");
    }
    let key = api_key(a.api_key_file.as_deref(), Some(state.provider.key_env()))?;
    if key.is_none() && !crate::progress::quiet_flag() {
        eprintln!(
            "note: no API key (--api-key-file, $ORDO_API_KEY or ${}); sending without one",
            state.provider.key_env()
        );
    }
    let opts = HttpOptions { timeout: Duration::from_secs_f64(a.timeout), ..HttpOptions::default() };
    Ok(Api::new(state.provider, &state.endpoint, key, opts))
}

/// The submitted input again (bad lines skipped, as a submission with --skip-bad did; one
/// without it had none), checked against the state's digest.
fn load_source(state: &State) -> Result<Source> {
    let opts = LoadOptions { skip_bad: true, tokens: TokenMode::Approx, threads: 0 };
    let source = Source::load(&state.input, &opts)?;
    check_source(state, &source)?;
    Ok(source)
}

fn load_state(path: &Path) -> Result<State> {
    if !path.exists() {
        bail!("{}: no such state file (it is written by `ordo batch submit`)", path.display());
    }
    Ok(State::load(path)?)
}

fn print_note(n: &str) {
    eprintln!("{n}");
}

/// A hint when some parts have no batch yet (a `submit` was interrupted or has not run).
fn not_created_hint(state: &State, path: &Path) {
    let n = state.parts.iter().filter(|p| p.batch_id.is_none() && !p.cancelled_before_create).count();
    if n > 0 {
        eprintln!(
            "{n} of {} batches are not created yet (an interrupted submit?): run `ordo batch submit --state {}`",
            state.parts.len(),
            path.display()
        );
    }
}

/// Every batch of the state, as a table or JSON.
fn print_parts(state: &State, json: bool) -> Result<()> {
    let views = ordo_batch::submit::views(state);
    if json {
        println!("{}", serde_json::to_string_pretty(&views)?);
        return Ok(());
    }
    println!(
        "{:<14} {:>3} {:<18} {:<12} {:>8} {:>9} {:>7} {:>8} {:>9} {:>10}",
        "part", "try", "batch", "status", "requests", "succeeded", "failed", "expired", "cancelled", "processing"
    );
    for v in &views {
        println!(
            "{:<14} {:>3} {:<18} {:<12} {:>8} {:>9} {:>7} {:>8} {:>9} {:>10}",
            v.name,
            v.attempt,
            v.batch_id.as_deref().unwrap_or("-"),
            v.status,
            v.requests,
            v.counts.succeeded,
            v.counts.failed,
            v.counts.expired,
            v.counts.canceled,
            v.counts.processing
        );
    }
    Ok(())
}

/// `ordo batch submit`
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let path = state_path(&a.access, a.file.as_deref())?;
    let limits = load_limits(a.limits.as_deref())?;
    let (state, source) = if path.exists() {
        let state = load_state(&path)?;
        if let Some(f) = &a.file {
            let f = std::fs::canonicalize(f).with_context(|| format!("reading {}", f.display()))?;
            if f != state.input {
                bail!("{}: this state file is for {}, not {}", path.display(), state.input.display(), f.display());
            }
        }
        if a.provider.is_some_and(|p| p != state.provider) {
            bail!(
                "{}: this submission is for {}; use another --state for another provider",
                path.display(),
                state.provider.name()
            );
        }
        if a.endpoint.as_deref().is_some_and(|e| e.trim_end_matches('/') != state.endpoint) {
            bail!(
                "{}: this submission goes to {}; use another --state for another endpoint",
                path.display(),
                state.endpoint
            );
        }
        let source = load_source(&state)?;
        (state, source)
    } else {
        if a.retry_failed {
            bail!("--retry-failed: {} does not exist; nothing was submitted yet", path.display());
        }
        let Some(file) = &a.file else {
            bail!("{}: no such state file; give the request file to submit", path.display())
        };
        let Some(provider) = a.provider else { bail!("--provider: which batch API? openai or anthropic") };
        let endpoint = a.endpoint.clone().unwrap_or_else(|| provider.default_endpoint().to_string());
        let opts = LoadOptions { skip_bad: a.skip_bad, tokens: TokenMode::Approx, threads: 0 };
        let source = Source::load(file, &opts)?;
        for f in &source.files {
            for e in &f.skipped {
                eprintln!("skipped {}:{}: {}", f.path.display(), e.line, e.reason);
            }
        }
        let state = prepare(provider, &endpoint, &source, &limits.batch)?;
        state.save(&path)?;
        (state, source)
    };
    let api = api(&a.access, &state)?;
    let mut s = Session { api: &api, state, path: &path, source: &source };
    if a.retry_failed {
        let n = s.add_retry(&limits.batch)?;
        if n == 0 {
            println!("nothing to retry: every request has a successful answer");
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("resubmitting {n} requests without a successful answer");
    }
    s.submit(&mut print_note)?;
    print_parts(&s.state, a.json)?;
    if !a.json {
        println!(
            "state: {}  (next: ordo batch status --state {0}; ordo batch fetch --state {0} --out results.jsonl)",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn poll_until_done(s: &mut Session, a: &StatusArgs) -> Result<()> {
    let every = Duration::from_secs_f64(parse_duration_s(&a.poll, "--poll")?);
    loop {
        s.refresh(&mut print_note)?;
        if !a.wait || s.all_finished() {
            return Ok(());
        }
        if s.state.parts.iter().any(|p| p.batch_id.is_none() && !p.cancelled_before_create) {
            bail!(
                "--wait: some batches are not created yet, so they will never end; run `ordo batch submit --state {}` first",
                s.path.display()
            );
        }
        std::thread::sleep(every);
    }
}

/// `ordo batch status`
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let path = state_path(&a.access, None)?;
    let state = load_state(&path)?;
    let source = load_source(&state)?;
    let api = api(&a.access, &state)?;
    let mut s = Session { api: &api, state, path: &path, source: &source };
    poll_until_done(&mut s, &a)?;
    print_parts(&s.state, a.json)?;
    not_created_hint(&s.state, &path);
    Ok(ExitCode::SUCCESS)
}

fn print_merged(m: &Merged, state_path: &Path, out: &Path) {
    let mut codes: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in &m.failed {
        *codes.entry(f.code.as_str()).or_default() += 1;
    }
    let detail: Vec<String> = codes.iter().map(|(c, n)| format!("{n} {c}")).collect();
    println!(
        "{} requests: {} succeeded, {} failed{}, {} pending",
        m.requests,
        m.succeeded,
        m.failed.len(),
        if detail.is_empty() { String::new() } else { format!(" ({})", detail.join(", ")) },
        m.pending.len()
    );
    for f in m.failed.iter().take(10) {
        println!("  {}: {} {}", f.custom_id, f.code, f.message);
    }
    if m.failed.len() > 10 {
        println!("  ... and {} more (all in {})", m.failed.len() - 10, out.display());
    }
    println!("output: {} ({} lines, input order)", out.display(), m.written);
    if !m.failed.is_empty() && m.pending.is_empty() {
        println!("resubmit the failed ones: ordo batch submit --state {} --retry-failed", state_path.display());
    }
    if !m.pending.is_empty() {
        println!(
            "not ended yet: fetch again later, or wait with: ordo batch fetch --state {} --out {} --wait",
            state_path.display(),
            out.display()
        );
    }
}

/// `ordo batch fetch`
pub fn fetch(a: FetchArgs) -> Result<ExitCode> {
    let path = state_path(&a.status.access, None)?;
    let state = load_state(&path)?;
    let source = load_source(&state)?;
    let api = api(&a.status.access, &state)?;
    let mut s = Session { api: &api, state, path: &path, source: &source };
    poll_until_done(&mut s, &a.status)?;
    s.download(&mut print_note)?;
    let m = merge(&s.state, &path, &source, Some(&a.out))?;
    if a.status.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        print_merged(&m, &path, &a.out);
    }
    not_created_hint(&s.state, &path);
    Ok(if m.succeeded == m.requests { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `ordo batch cancel`
pub fn cancel(a: StatusArgs) -> Result<ExitCode> {
    let path = state_path(&a.access, None)?;
    let state = load_state(&path)?;
    let source = load_source(&state)?;
    let api = api(&a.access, &state)?;
    let mut s = Session { api: &api, state, path: &path, source: &source };
    s.cancel(&mut print_note)?;
    poll_until_done(&mut s, &a)?;
    print_parts(&s.state, a.json)?;
    Ok(ExitCode::SUCCESS)
}
