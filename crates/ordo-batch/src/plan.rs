//! Planning: group requests by endpoint+model and prompt prefix, order them (client-fair or
//! shortest-first), estimate cached tokens, cost, duration under rate limits, and batch vs live.

use crate::config::{CacheRules, Limits, ModelPrice, Prices};
use crate::deadline::{due_times, earliest_deadline_first, late, predicted_sends, Deadline, Late};
use crate::input::{Endpoint, Loaded, Request, PREFIX_BLOCK};
use crate::window::Window;
use jiff::Timestamp;
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// The order in which live requests are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Deficit round robin across clients (quantum: the largest request's tokens), each client's
    /// own requests shortest first: one client's 10,000 requests cannot starve another's 10.
    Fair,
    /// Shortest (fewest estimated tokens) first over all requests.
    Sjf,
    /// The order of the file.
    Input,
}

impl std::str::FromStr for Order {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fair" => Ok(Order::Fair),
            "sjf" => Ok(Order::Sjf),
            "input" => Ok(Order::Input),
            _ => Err(format!("expected fair, sjf or input, found {s:?}")),
        }
    }
}

/// Planning options.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Order of live requests.
    pub order: Order,
    /// Output tokens assumed for a request without `max_tokens` (and the like).
    pub assumed_output_tokens: u64,
    /// Deadline of requests without their own `metadata.deadline`. A group with a request due
    /// before the batch completion window ends is sent live; live requests go earliest deadline
    /// first, and the plan names those that cannot make it.
    pub deadline: Option<Deadline>,
    /// Whether batch files may be used at all.
    pub allow_batch: bool,
    /// When sending would start (deadlines given as durations count from here).
    pub start: Timestamp,
    /// Live sending only inside this daily window.
    pub window: Option<Window>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            order: Order::Fair,
            assumed_output_tokens: 256,
            deadline: None,
            allow_batch: true,
            start: Timestamp::now(),
            window: None,
        }
    }
}

/// Output tokens counted for a request: its `max_*tokens`, else the assumed figure.
pub fn output_tokens(r: &Request, assumed: u64) -> u64 {
    r.max_output_tokens.unwrap_or(assumed)
}

/// Tokens a request takes from a tokens-per-minute limit: input plus output tokens.
pub fn rate_tokens(r: &Request, assumed: u64) -> u64 {
    r.input_tokens + output_tokens(r, assumed)
}

/// The send order: indices into `reqs`.
pub fn order_requests(reqs: &[Request], order: Order, assumed: u64) -> Vec<usize> {
    let key = |i: usize| (rate_tokens(&reqs[i], assumed), reqs[i].prefix_blocks.first().copied(), i);
    match order {
        Order::Input => (0..reqs.len()).collect(),
        Order::Sjf => {
            let mut v: Vec<usize> = (0..reqs.len()).collect();
            v.sort_by_key(|&i| key(i));
            v
        }
        Order::Fair => {
            let mut index: HashMap<&str, usize> = HashMap::new();
            let mut queues: Vec<Vec<usize>> = Vec::new();
            for (i, r) in reqs.iter().enumerate() {
                let n = queues.len();
                let q = *index.entry(&r.client).or_insert(n);
                if q == n {
                    queues.push(Vec::new());
                }
                queues[q].push(i);
            }
            for q in &mut queues {
                q.sort_by_key(|&i| key(i));
            }
            let quantum = reqs.iter().map(|r| rate_tokens(r, assumed)).max().unwrap_or(1).max(1);
            let mut heads = vec![0usize; queues.len()];
            let mut deficit = vec![0u64; queues.len()];
            let mut active: VecDeque<usize> = (0..queues.len()).collect();
            let mut out = Vec::with_capacity(reqs.len());
            while let Some(c) = active.pop_front() {
                deficit[c] += quantum;
                while heads[c] < queues[c].len() {
                    let i = queues[c][heads[c]];
                    let cost = rate_tokens(&reqs[i], assumed);
                    if cost > deficit[c] {
                        break;
                    }
                    deficit[c] -= cost;
                    out.push(i);
                    heads[c] += 1;
                }
                if heads[c] < queues[c].len() {
                    active.push_back(c);
                }
            }
            out
        }
    }
}

#[derive(Default)]
struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// Cached input tokens of each request: the longest prompt prefix, in whole
/// [`PREFIX_BLOCK`]-byte blocks, that an earlier request to the same endpoint and model shares,
/// turned into tokens at the request's own tokens-per-byte; zero below `rules.min_tokens`,
/// rounded down to `rules.increment`. Embeddings are never cached.
pub fn cached_tokens(reqs: &[Request], rules: &CacheRules) -> Vec<u64> {
    let mut seen: HashMap<(Endpoint, Arc<str>), IdSet> = HashMap::new();
    reqs.iter()
        .map(|r| {
            if r.endpoint == Endpoint::Embeddings || r.prefix_blocks.is_empty() {
                return 0;
            }
            let set = seen.entry((r.endpoint, r.model.clone())).or_default();
            let k = r.prefix_blocks.iter().take_while(|h| set.contains(h)).count();
            set.extend(r.prefix_blocks.iter().skip(k).copied());
            if k == 0 || r.text_bytes == 0 {
                return 0;
            }
            let per_byte = r.input_tokens as f64 / r.text_bytes as f64;
            let t = ((k * PREFIX_BLOCK) as f64 * per_byte).floor() as u64;
            let t = t.min(r.input_tokens);
            if t < rules.min_tokens {
                0
            } else {
                t / rules.increment * rules.increment
            }
        })
        .collect()
}

/// Costs of one group (or the whole file) under each way of sending it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Costs {
    /// All live, no caching discount.
    pub live: f64,
    /// All live, with prefix caching.
    pub live_cached: f64,
    /// All through batch files, no caching discount.
    pub batch: f64,
    /// All through batch files, with prefix caching.
    pub batch_cached: f64,
    /// As planned (each group's route), with prefix caching.
    pub planned: f64,
}

impl Costs {
    /// `(field name, amount)` of each, in the order of the fields.
    pub fn named(&self) -> [(&'static str, f64); 5] {
        [
            ("live", self.live),
            ("live_cached", self.live_cached),
            ("batch", self.batch),
            ("batch_cached", self.batch_cached),
            ("planned", self.planned),
        ]
    }

    /// The costs of `input` input tokens (`cached` of them cached) and `out` output tokens at
    /// `p`, `planned` on `route`.
    pub fn of(p: &ModelPrice, input: u64, cached: u64, out: u64, route: Route) -> Costs {
        let live = p.cost(input, 0, out);
        let live_cached = p.cost(input - cached.min(input), cached.min(input), out);
        Costs {
            live,
            live_cached,
            batch: live * p.batch_multiplier,
            batch_cached: live_cached * p.batch_multiplier,
            planned: if route == Route::Batch { live_cached * p.batch_multiplier } else { live_cached },
        }
    }
}

impl std::ops::AddAssign for Costs {
    fn add_assign(&mut self, o: Costs) {
        self.live += o.live;
        self.live_cached += o.live_cached;
        self.batch += o.batch;
        self.batch_cached += o.batch_cached;
        self.planned += o.planned;
    }
}

/// How a group is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Provider batch files.
    Batch,
    /// Paced live calls.
    Live,
}

/// The plan for one endpoint+model group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupPlan {
    /// Endpoint path.
    pub endpoint: &'static str,
    /// Model.
    pub model: String,
    /// Requests.
    pub requests: usize,
    /// Estimated input tokens.
    pub input_tokens: u64,
    /// Of which expected to be cached.
    pub cached_tokens: u64,
    /// Output tokens (max_tokens where given, else assumed).
    pub output_tokens: u64,
    /// Bytes of the requests' lines.
    pub bytes: u64,
    /// Distinct prompt prefixes (first 256-byte blocks; prompts shorter than a block have none).
    pub prefix_groups: usize,
    /// Batch or live.
    pub route: Route,
    /// Batch files `split` writes for this group.
    pub files: usize,
    /// Seconds to send the group live under its rate limits.
    pub live_seconds: f64,
    /// Requests per minute limit used.
    pub requests_per_minute: f64,
    /// Tokens per minute limit used.
    pub tokens_per_minute: f64,
    /// Costs, when prices.toml has the model.
    pub cost: Option<Costs>,
}

/// One client's requests to one endpoint and model, and what they cost each way.
#[derive(Debug, Clone, Serialize)]
pub struct ClientCost {
    /// The client.
    pub client: String,
    /// Endpoint path.
    pub endpoint: &'static str,
    /// Model.
    pub model: String,
    /// Requests.
    pub requests: usize,
    /// Estimated input tokens.
    pub input_tokens: u64,
    /// Of which expected to be cached.
    pub cached_tokens: u64,
    /// Output tokens (max_tokens where given, else assumed).
    pub output_tokens: u64,
    /// The route of their endpoint+model group.
    pub route: Route,
    /// Costs, when prices.toml has the model.
    pub cost: Option<Costs>,
}

/// One client in the live-order comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ClientPlan {
    /// Client name.
    pub client: String,
    /// Its requests.
    pub requests: usize,
    /// Its tokens (input + output).
    pub tokens: u64,
    /// Seconds until its last request is sent, in file order.
    pub done_input_order_s: f64,
    /// Seconds until its last request is sent, in the planned order.
    pub done_planned_s: f64,
    /// Seconds until half its requests are sent, in file order.
    pub half_input_order_s: f64,
    /// Seconds until half its requests are sent, in the planned order.
    pub half_planned_s: f64,
}

/// A whole plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The request file.
    pub file: String,
    /// Valid requests.
    pub requests: usize,
    /// Bad lines left out (with --skip-bad).
    pub skipped_lines: usize,
    /// How tokens were counted.
    pub token_method: String,
    /// Currency of costs.
    pub currency: String,
    /// Order used for live requests.
    pub order: Order,
    /// Per endpoint+model group.
    pub groups: Vec<GroupPlan>,
    /// Sum of the groups' costs (groups without a price are left out).
    pub total_cost: Costs,
    /// Costs per client and endpoint+model, in order of first appearance.
    pub by_client: Vec<ClientCost>,
    /// Models without a price.
    pub unpriced_models: Vec<String>,
    /// Seconds to send everything live (`ordo batch run`) under the limits, groups in parallel.
    pub live_seconds: f64,
    /// Requests sent in the first second when everything is fired at once.
    pub peak_rps_unpaced: f64,
    /// Highest request rate (per second) allowed by the limits when paced.
    pub peak_rps_paced: f64,
    /// Requests that would be sent after their deadline in the planned live order (when there
    /// are deadlines).
    pub late_requests: Option<usize>,
    /// Those requests, earliest deadline first.
    pub late: Vec<Late>,
    /// The live sending window, when there is one.
    pub window: Option<String>,
    /// When live sending would end under the limits and inside the window (RFC 3339), when
    /// there is a window.
    pub live_done_at: Option<String>,
    /// Per client, file order vs planned order.
    pub clients: Vec<ClientPlan>,
    /// The first custom_ids of the planned live order.
    pub order_preview: Vec<String>,
}

/// Send times (seconds from the start) of requests sent live in `order`, each model paced by
/// its own limits: the fluid bound max(requests/rpm, tokens/tpm) of what went before.
pub(crate) fn send_times(reqs: &[Request], order: &[usize], limits: &Limits, assumed: u64) -> Vec<f64> {
    let mut t = vec![0.0; reqs.len()];
    let mut acc: HashMap<&str, (f64, f64, f64, f64)> = HashMap::new();
    for &i in order {
        let r = &reqs[i];
        let e = acc.entry(&r.model).or_insert_with(|| {
            let l = limits.for_model(&r.model);
            (0.0, 0.0, l.requests_per_minute / 60.0, l.tokens_per_minute / 60.0)
        });
        t[i] = (e.0 / e.2).max(e.1 / e.3);
        e.0 += 1.0;
        e.1 += rate_tokens(r, assumed) as f64;
    }
    t
}

/// Costs per client and endpoint+model group (`per_client`: each client's requests in input
/// order; `group_of`: each request's group), rows in order of first appearance.
fn client_costs(
    reqs: &[Request],
    per_client: &[(String, Vec<usize>)],
    group_of: &[u32],
    groups: &[GroupPlan],
    cached: &[u64],
    prices: &Prices,
    assumed: u64,
) -> Vec<ClientCost> {
    // Rows (with their first request) of each client; a client uses few groups, so its rows
    // are found by a scan of its own.
    let mut rows: Vec<(usize, ClientCost)> = Vec::new();
    for (client, idx) in per_client {
        let mut mine: Vec<(u32, usize)> = Vec::new();
        for &i in idx {
            let r = &reqs[i];
            let g = group_of[i];
            let k = match mine.iter().find(|(gg, _)| *gg == g) {
                Some(&(_, k)) => k,
                None => {
                    mine.push((g, rows.len()));
                    rows.push((
                        i,
                        ClientCost {
                            client: client.clone(),
                            endpoint: r.endpoint.url(),
                            model: r.model.to_string(),
                            requests: 0,
                            input_tokens: 0,
                            cached_tokens: 0,
                            output_tokens: 0,
                            route: groups[g as usize].route,
                            cost: None,
                        },
                    ));
                    rows.len() - 1
                }
            };
            let row = &mut rows[k].1;
            row.requests += 1;
            row.input_tokens += r.input_tokens;
            row.cached_tokens += cached[i];
            row.output_tokens += output_tokens(r, assumed);
        }
    }
    rows.sort_by_key(|(first, _)| *first);
    rows.into_iter()
        .map(|(_, mut c)| {
            c.cost = prices
                .for_model(&c.model)
                .map(|p| Costs::of(&p, c.input_tokens, c.cached_tokens, c.output_tokens, c.route));
            c
        })
        .collect()
}

/// Make the plan for a loaded file.
pub fn make_plan(loaded: &Loaded, limits: &Limits, prices: &Prices, opts: &PlanOptions) -> Plan {
    let reqs = &loaded.requests;
    let assumed = opts.assumed_output_tokens;
    let cached = cached_tokens(reqs, &prices.cache);
    let window_s = limits.batch.completion_window_hours * 3600.0;
    let due = due_times(reqs, opts.deadline, opts.start);
    let batch_by = opts.start.checked_add(jiff::SignedDuration::from_secs_f64(window_s)).unwrap_or(Timestamp::MAX);
    let has_deadlines = due.iter().any(Option::is_some);

    // Groups in first-appearance order.
    let mut gindex: HashMap<(Endpoint, &str), usize> = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut group_of: Vec<u32> = Vec::with_capacity(reqs.len());
    for (i, r) in reqs.iter().enumerate() {
        let n = members.len();
        let g = *gindex.entry((r.endpoint, &r.model)).or_insert(n);
        if g == n {
            members.push(Vec::new());
        }
        members[g].push(i);
        group_of.push(g as u32);
    }
    let mut groups = Vec::new();
    let mut total = Costs::default();
    let mut unpriced = Vec::new();
    let mut peak_paced = 0.0;
    for m in &members {
        let first = &reqs[m[0]];
        let lim = limits.for_model(&first.model);
        let input: u64 = m.iter().map(|&i| reqs[i].input_tokens).sum();
        let cach: u64 = m.iter().map(|&i| cached[i]).sum();
        let out: u64 = m.iter().map(|&i| output_tokens(&reqs[i], assumed)).sum();
        let bytes: u64 = m.iter().map(|&i| (reqs[i].span.1 - reqs[i].span.0 + 1) as u64).sum();
        let prefixes: HashSet<u64> = m.iter().filter_map(|&i| reqs[i].prefix_blocks.first().copied()).collect();
        let live_seconds =
            (m.len() as f64 / lim.requests_per_minute).max((input + out) as f64 / lim.tokens_per_minute) * 60.0;
        let in_time = m.iter().all(|&i| due[i].is_none_or(|d| d >= batch_by));
        let route = if opts.allow_batch && in_time && m.len() as u64 >= limits.batch.min_requests {
            Route::Batch
        } else {
            Route::Live
        };
        let sizes: Vec<usize> = m.iter().map(|&i| reqs[i].span.1 - reqs[i].span.0 + 1).collect();
        let files = crate::split::count_files(&sizes, &limits.batch);
        let avg_tokens = (input + out) as f64 / m.len() as f64;
        peak_paced += (lim.requests_per_minute / 60.0).min(lim.tokens_per_minute / 60.0 / avg_tokens.max(1.0));
        let cost = prices.for_model(&first.model).map(|p| {
            let c = Costs::of(&p, input, cach, out, route);
            total += c;
            c
        });
        if cost.is_none() {
            unpriced.push(first.model.to_string());
        }
        groups.push(GroupPlan {
            endpoint: first.endpoint.url(),
            model: first.model.to_string(),
            requests: m.len(),
            input_tokens: input,
            cached_tokens: cach,
            output_tokens: out,
            bytes,
            prefix_groups: prefixes.len(),
            route,
            files,
            live_seconds,
            requests_per_minute: lim.requests_per_minute,
            tokens_per_minute: lim.tokens_per_minute,
            cost,
        });
    }

    // Clients in first-appearance order.
    let mut cindex: HashMap<&str, usize> = HashMap::new();
    let mut per_client: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let n = per_client.len();
        let c = *cindex.entry(&r.client).or_insert(n);
        if c == n {
            per_client.push((r.client.to_string(), Vec::new()));
        }
        per_client[c].1.push(i);
    }
    let by_client = client_costs(reqs, &per_client, &group_of, &groups, &cached, prices, assumed);

    let mut order = order_requests(reqs, opts.order, assumed);
    if has_deadlines {
        earliest_deadline_first(&mut order, &due);
    }
    let input_order: Vec<usize> = (0..reqs.len()).collect();
    let t_plan = send_times(reqs, &order, limits, assumed);
    let t_input = send_times(reqs, &input_order, limits, assumed);
    let live_seconds = t_plan.iter().copied().fold(0.0, f64::max);
    // Wall-clock send times matter only for deadlines and windows (a million requests without
    // either skip them).
    let sends = if has_deadlines || opts.window.is_some() {
        predicted_sends(reqs, &order, limits, assumed, opts.start, opts.window.as_ref())
    } else {
        Vec::new()
    };
    let late_list = if has_deadlines { late(reqs, &due, &sends) } else { Vec::new() };

    let clients = per_client
        .into_iter()
        .map(|(client, idx)| {
            let stats = |t: &[f64]| {
                let mut v: Vec<f64> = idx.iter().map(|&i| t[i]).collect();
                v.sort_by(f64::total_cmp);
                (v[v.len() - 1], v[(v.len() - 1) / 2])
            };
            let (done_i, half_i) = stats(&t_input);
            let (done_p, half_p) = stats(&t_plan);
            ClientPlan {
                client,
                requests: idx.len(),
                tokens: idx.iter().map(|&i| rate_tokens(&reqs[i], assumed)).sum(),
                done_input_order_s: done_i,
                done_planned_s: done_p,
                half_input_order_s: half_i,
                half_planned_s: half_p,
            }
        })
        .collect();

    Plan {
        file: loaded.path.display().to_string(),
        requests: reqs.len(),
        skipped_lines: loaded.skipped.len(),
        token_method: loaded.token_method.clone(),
        currency: prices.currency.clone(),
        order: opts.order,
        groups,
        total_cost: total,
        by_client,
        unpriced_models: unpriced,
        live_seconds,
        peak_rps_unpaced: reqs.len() as f64,
        peak_rps_paced: peak_paced,
        late_requests: has_deadlines.then_some(late_list.len()),
        late: late_list,
        window: opts.window.as_ref().map(|w| w.describe().to_string()),
        live_done_at: opts
            .window
            .as_ref()
            .map(|_| crate::deadline::whole_seconds(sends.iter().max().copied().unwrap_or(opts.start))),
        clients,
        order_preview: order.iter().take(20).map(|&i| reqs[i].custom_id.clone()).collect(),
    }
}

/// Seconds as a short human duration.
pub fn fmt_duration(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 86400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86400.0)
    }
}

fn money(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "input:  {}: {} requests", self.file, self.requests)?;
        if self.skipped_lines > 0 {
            writeln!(f, "        {} bad lines left out (--skip-bad)", self.skipped_lines)?;
        }
        writeln!(f, "tokens: {}", self.token_method)?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<22} {:<24} {:>9} {:>12} {:>12} {:>11} {:>8} {:>6} {:>6} {:>9}",
            "endpoint",
            "model",
            "requests",
            "input tok",
            "cached tok",
            "output tok",
            "prefixes",
            "route",
            "files",
            "live time"
        )?;
        for g in &self.groups {
            writeln!(
                f,
                "{:<22} {:<24} {:>9} {:>12} {:>12} {:>11} {:>8} {:>6} {:>6} {:>9}",
                g.endpoint,
                g.model,
                g.requests,
                g.input_tokens,
                g.cached_tokens,
                g.output_tokens,
                g.prefix_groups,
                match g.route {
                    Route::Batch => "batch",
                    Route::Live => "live",
                },
                g.files,
                fmt_duration(g.live_seconds)
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<48} {:>11} {:>11} {:>11} {:>13} {:>11}",
            format!("cost ({})", self.currency),
            "live",
            "live+cache",
            "batch",
            "batch+cache",
            "planned"
        )?;
        for g in &self.groups {
            match &g.cost {
                Some(c) => writeln!(
                    f,
                    "  {:<46} {:>11} {:>11} {:>11} {:>13} {:>11}",
                    format!("{} {}", g.endpoint, g.model),
                    money(c.live),
                    money(c.live_cached),
                    money(c.batch),
                    money(c.batch_cached),
                    money(c.planned)
                )?,
                None => writeln!(f, "  {:<46} no price in prices.toml", format!("{} {}", g.endpoint, g.model))?,
            }
        }
        let t = &self.total_cost;
        writeln!(
            f,
            "  {:<46} {:>11} {:>11} {:>11} {:>13} {:>11}",
            "total",
            money(t.live),
            money(t.live_cached),
            money(t.batch),
            money(t.batch_cached),
            money(t.planned)
        )?;
        if t.live > 0.0 {
            writeln!(f, "  planned vs all live without caching: {:+.1}%", (t.planned / t.live - 1.0) * 100.0)?;
        }
        if self.by_client.iter().any(|c| c.cost.is_some()) {
            writeln!(f)?;
            writeln!(
                f,
                "{:<48} {:>11} {:>11} {:>11} {:>13} {:>11}",
                format!("cost per client and model ({})", self.currency),
                "live",
                "live+cache",
                "batch",
                "batch+cache",
                "planned"
            )?;
            for c in &self.by_client {
                let label = format!("{} {}", c.client, c.model);
                match &c.cost {
                    Some(x) => writeln!(
                        f,
                        "  {:<46} {:>11} {:>11} {:>11} {:>13} {:>11}",
                        label,
                        money(x.live),
                        money(x.live_cached),
                        money(x.batch),
                        money(x.batch_cached),
                        money(x.planned)
                    )?,
                    None => writeln!(f, "  {label:<46} no price in prices.toml")?,
                }
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "live (`ordo batch run`, {} order): {} to send everything under the limits",
            match self.order {
                Order::Fair => "fair",
                Order::Sjf => "shortest-first",
                Order::Input => "file",
            },
            fmt_duration(self.live_seconds)
        )?;
        writeln!(
            f,
            "peak request rate: {:.0}/s if fired at once; {:.1}/s paced by the limits",
            self.peak_rps_unpaced, self.peak_rps_paced
        )?;
        if let (Some(w), Some(t)) = (&self.window, &self.live_done_at) {
            writeln!(f, "window: live calls only {w}: the last would go at {t}")?;
        }
        if let Some(l) = self.late_requests {
            writeln!(
                f,
                "deadlines: earliest first; {l} requests cannot be sent before their deadline under the limits"
            )?;
            for x in self.late.iter().take(10) {
                writeln!(
                    f,
                    "  {} (line {}): due {}, earliest {} ({} late)",
                    x.custom_id,
                    x.line,
                    x.due,
                    x.earliest,
                    fmt_duration(x.late_s)
                )?;
            }
            if self.late.len() > 10 {
                writeln!(f, "  ... and {} more (all in --json)", self.late.len() - 10)?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<20} {:>9} {:>12} {:>14} {:>14} {:>14} {:>14}",
            "client", "requests", "tokens", "half (file)", "half (plan)", "done (file)", "done (plan)"
        )?;
        for c in &self.clients {
            writeln!(
                f,
                "{:<20} {:>9} {:>12} {:>14} {:>14} {:>14} {:>14}",
                c.client,
                c.requests,
                c.tokens,
                fmt_duration(c.half_input_order_s),
                fmt_duration(c.half_planned_s),
                fmt_duration(c.done_input_order_s),
                fmt_duration(c.done_planned_s)
            )?;
        }
        writeln!(f, "order: {} ...", self.order_preview.join(", "))
    }
}
