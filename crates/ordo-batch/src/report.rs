//! `ordo batch report`: the money of a request file for the people who pay, in the style of
//! `ordo report`: cost per client and model live, by batch and with the prefix cache, the peak
//! rate avoided, and (after `fetch` or `run`) the actual cost from the providers' usage.

use crate::config::Prices;
use crate::input::Loaded;
use crate::plan::{cached_tokens, output_tokens, ClientCost, Costs, GroupPlan, Plan, Route};
use crate::usage::Usage;
use ordo_report::page::{Bars, Page, PageSection};
use ordo_report::render::{Cell, Table};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The request rate with and without pacing.
#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    /// Requests in the first second when everything is fired at once.
    pub fired_at_once_rps: f64,
    /// The highest rate the limits allow, paced.
    pub paced_rps: f64,
    /// `fired_at_once_rps - paced_rps` (0 when the limits allow more than there is).
    pub avoided_rps: f64,
    /// Seconds to send everything live under the limits.
    pub live_seconds: f64,
    /// The off-peak window live calls are kept to, when one is given.
    pub window: Option<String>,
    /// When live sending inside the window would end (RFC 3339).
    pub live_done_at: Option<String>,
}

/// Actual cost of answered requests of one client, model and route, beside the estimate.
#[derive(Debug, Clone, Serialize)]
pub struct ActualRow {
    /// The client.
    pub client: String,
    /// The model.
    pub model: String,
    /// How they were sent (a `fetch` output: batch; a `run` output: live).
    pub route: Route,
    /// Answered requests (with usage).
    pub answered: usize,
    /// Their tokens as the provider reported them.
    pub usage: Usage,
    /// Their estimated cost on this route, with the prefix cache (as `plan` estimates).
    pub estimate: f64,
    /// Their cost from the reported usage (batch: times the batch multiplier).
    pub actual: f64,
}

/// The whole report (what `--out report.json` writes; HTML and Markdown show the same).
#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    /// Title.
    pub title: String,
    /// The request file.
    pub file: String,
    /// Its requests.
    pub requests: usize,
    /// Currency of every amount.
    pub currency: String,
    /// How tokens were counted.
    pub token_method: String,
    /// The sentence at the top.
    pub headline: String,
    /// Cost per client and endpoint+model.
    pub by_client: Vec<ClientCost>,
    /// Cost per endpoint+model group, with its route.
    pub groups: Vec<GroupPlan>,
    /// Totals.
    pub total: Costs,
    /// All live without caching minus planned.
    pub saving: f64,
    /// Models without a price (left out of the amounts).
    pub unpriced_models: Vec<String>,
    /// Request rate, fired at once vs paced.
    pub peak: Peak,
    /// Result files read for the actual cost.
    pub results: Vec<String>,
    /// Actual cost beside the estimate, per client, model and route.
    pub actual: Vec<ActualRow>,
}

/// A results file (`ordo batch fetch --out` or `ordo batch run --output`) and how its
/// requests were sent.
#[derive(Debug, Clone)]
pub struct Results {
    /// The file.
    pub path: PathBuf,
    /// Batch or live.
    pub route: Route,
}

fn money(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

/// Titles of the columns of [`cost_cells`].
const COST_HEADS: [&str; 5] = ["live", "live+cache", "batch", "batch+cache", "planned"];

/// The five amounts of `cost` as cells keyed `{key}.live` ... (`no price` without one).
fn cost_cells(key: &str, cost: Option<&Costs>) -> Vec<Cell> {
    match cost {
        Some(x) => {
            x.named().into_iter().map(|(f, v)| Cell { text: money(v), key: Some((format!("{key}.{f}"), v)) }).collect()
        }
        None => vec![Cell { text: "no price".into(), key: None }],
    }
}

fn pct(new: f64, old: f64) -> String {
    if old > 0.0 {
        format!("{:+.1}%", (new / old - 1.0) * 100.0)
    } else {
        "-".into()
    }
}

/// Read the answered requests of `results` and price their usage.
fn actual_rows(
    loaded: &Loaded,
    prices: &Prices,
    assumed: u64,
    results: &[Results],
) -> Result<Vec<ActualRow>, crate::BatchError> {
    let reqs = &loaded.requests;
    let cached = cached_tokens(reqs, &prices.cache);
    let by_id: HashMap<&str, usize> = reqs.iter().enumerate().map(|(i, r)| (r.custom_id.as_str(), i)).collect();
    let mut rows: Vec<ActualRow> = Vec::new();
    let mut index: HashMap<(String, String, Route), usize> = HashMap::new();
    for res in results {
        let text = std::fs::read_to_string(&res.path).map_err(|e| crate::BatchError::io(&res.path, e))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line).map_err(|e| {
                crate::BatchError::Invalid(format!("{}:{}: not valid JSON: {e}", res.path.display(), n + 1))
            })?;
            let Some(&i) = v["custom_id"].as_str().and_then(|id| by_id.get(id)) else {
                return Err(crate::BatchError::Invalid(format!(
                    "{}:{}: custom_id {} is not a request of {}",
                    res.path.display(),
                    n + 1,
                    v["custom_id"],
                    loaded.path.display()
                )));
            };
            let ok =
                v["error"].is_null() && v["response"]["status_code"].as_u64().is_some_and(|s| (200..300).contains(&s));
            let (Some(u), Some(p)) =
                (ok.then(|| Usage::of(&v["response"]["body"])).flatten(), prices.for_model(&reqs[i].model))
            else {
                continue;
            };
            let r = &reqs[i];
            let est = Costs::of(&p, r.input_tokens, cached[i], output_tokens(r, assumed), res.route);
            let key = (r.client.to_string(), r.model.to_string(), res.route);
            let k = *index.entry(key).or_insert_with(|| {
                rows.push(ActualRow {
                    client: r.client.to_string(),
                    model: r.model.to_string(),
                    route: res.route,
                    answered: 0,
                    usage: Usage::default(),
                    estimate: 0.0,
                    actual: 0.0,
                });
                rows.len() - 1
            });
            let row = &mut rows[k];
            row.answered += 1;
            row.usage += u;
            let mult = if res.route == Route::Batch { p.batch_multiplier } else { 1.0 };
            row.actual += u.cost(&p) * mult;
            row.estimate += if res.route == Route::Batch { est.batch_cached } else { est.live_cached };
        }
    }
    Ok(rows)
}

impl BatchReport {
    /// The report of `loaded` as planned (`plan`), with the actual cost of `results`.
    pub fn build(
        title: &str,
        loaded: &Loaded,
        plan: &Plan,
        prices: &Prices,
        assumed: u64,
        results: &[Results],
    ) -> Result<BatchReport, crate::BatchError> {
        let actual = actual_rows(loaded, prices, assumed, results)?;
        let t = &plan.total_cost;
        let cur = &plan.currency;
        let mut headline = format!(
            "Planned {} {cur} (batch files where allowed, prompt cache) against {} {cur} all live without caching ({}).",
            money(t.planned),
            money(t.live),
            pct(t.planned, t.live)
        );
        if !actual.is_empty() {
            let (e, a): (f64, f64) = actual.iter().fold((0.0, 0.0), |(e, a), r| (e + r.estimate, a + r.actual));
            headline.push_str(&format!(
                " Actual for {} answered requests: {} {cur} against {} estimated ({}).",
                actual.iter().map(|r| r.answered).sum::<usize>(),
                money(a),
                money(e),
                pct(a, e)
            ));
        }
        Ok(BatchReport {
            title: title.to_string(),
            file: plan.file.clone(),
            requests: plan.requests,
            currency: cur.clone(),
            token_method: plan.token_method.clone(),
            headline,
            by_client: plan.by_client.clone(),
            groups: plan.groups.clone(),
            total: *t,
            saving: t.live - t.planned,
            unpriced_models: plan.unpriced_models.clone(),
            peak: Peak {
                fired_at_once_rps: plan.peak_rps_unpaced,
                paced_rps: plan.peak_rps_paced,
                avoided_rps: (plan.peak_rps_unpaced - plan.peak_rps_paced).max(0.0),
                live_seconds: plan.live_seconds,
                window: plan.window.clone(),
                live_done_at: plan.live_done_at.clone(),
            },
            results: results.iter().map(|r| r.path.display().to_string()).collect(),
            actual,
        })
    }

    /// The page (HTML or Markdown) of this report.
    pub fn page(&self) -> Page {
        let cur = &self.currency;
        let txt = |s: &str| Cell { text: s.to_string(), key: None };
        let num = |k: String, v: f64, t: String| Cell { text: t, key: Some((k, v)) };
        let m = |k: String, v: f64| num(k, v, money(v));
        let n = |k: String, v: f64| num(k, v, format!("{v:.0}"));
        let route = |r: Route| txt(if r == Route::Batch { "batch" } else { "live" });
        // Column titles, then those of the five amounts.
        let heads = |h: &[&str]| h.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cost_heads = |h: &[&str]| h.iter().chain(&COST_HEADS).map(|x| x.to_string()).collect::<Vec<_>>();
        let mut sections = Vec::new();

        // Cost per client and model.
        let priced: Vec<(usize, &ClientCost)> =
            self.by_client.iter().enumerate().filter(|(_, c)| c.cost.is_some()).collect();
        let mut t = Table {
            head: cost_heads(&["client", "model", "route", "requests", "input tok", "cached tok", "output tok"]),
            rows: vec![],
        };
        for (i, c) in self.by_client.iter().enumerate() {
            let k = |f: &str| format!("by_client.{i}.{f}");
            let mut row = vec![
                txt(&c.client),
                txt(&c.model),
                route(c.route),
                n(k("requests"), c.requests as f64),
                n(k("input_tokens"), c.input_tokens as f64),
                n(k("cached_tokens"), c.cached_tokens as f64),
                n(k("output_tokens"), c.output_tokens as f64),
            ];
            row.extend(cost_cells(&k("cost"), c.cost.as_ref()));
            t.rows.push(row);
        }
        let shown: Vec<&(usize, &ClientCost)> = priced.iter().take(12).collect();
        let bars = Bars {
            categories: shown.iter().map(|(_, c)| format!("{} {}", c.client, c.model)).collect(),
            series: [("live", 0), ("live + cache", 1), ("batch", 2), ("batch + cache", 3)]
                .into_iter()
                .map(|(name, f)| {
                    let v = shown
                        .iter()
                        .map(|(_, c)| {
                            let x = c.cost.unwrap_or_default();
                            [x.live, x.live_cached, x.batch, x.batch_cached][f]
                        })
                        .collect();
                    (name.to_string(), v)
                })
                .collect(),
            y_title: cur.clone(),
        };
        sections.push(PageSection {
            id: "clients".into(),
            title: "Cost per client and model".into(),
            intro: format!(
                "What each client's requests cost ({cur}): all live at list price, live with the provider's prompt cache on shared prefixes, through the batch endpoint (batch price), and both. Planned: batch for the groups routed to batch files, live with the cache for the rest.{}",
                if priced.len() > 12 { " The chart shows the first 12 rows." } else { "" }
            ),
            bars: (!shown.is_empty()).then_some(bars),
            table: t,
            notes: vec![],
        });

        // Per endpoint and model, and totals.
        let mut t =
            Table { head: cost_heads(&["endpoint", "model", "route", "requests", "batch files"]), rows: vec![] };
        for (i, g) in self.groups.iter().enumerate() {
            let k = |f: &str| format!("groups.{i}.{f}");
            let mut row = vec![
                txt(g.endpoint),
                txt(&g.model),
                route(g.route),
                n(k("requests"), g.requests as f64),
                n(k("files"), g.files as f64),
            ];
            row.extend(cost_cells(&k("cost"), g.cost.as_ref()));
            t.rows.push(row);
        }
        let x = &self.total;
        let mut total = vec![txt("total"), txt(""), txt(""), n("requests".into(), self.requests as f64), txt("")];
        total.extend(cost_cells("total", Some(x)));
        t.rows.push(total);
        let mut notes = vec![vec![
            txt("Planned against all live without caching: "),
            num(
                "saving".into(),
                x.live - x.planned,
                format!("{} {cur} less ({})", money(x.live - x.planned), pct(x.planned, x.live)),
            ),
            txt("."),
        ]];
        if !self.unpriced_models.is_empty() {
            notes.push(vec![txt(&format!("No price in prices.toml (left out): {}.", self.unpriced_models.join(", ")))]);
        }
        sections.push(PageSection {
            id: "groups".into(),
            title: "Cost per endpoint and model".into(),
            intro: "A batch file holds one endpoint and one model; a group goes to batch files when batch is allowed, no deadline is shorter than the batch window and it has enough requests (limits.toml `[batch] min_requests`).".into(),
            bars: None,
            table: t,
            notes,
        });

        // Peak.
        let p = &self.peak;
        let t = Table {
            head: heads(&[
                "requests",
                "fired at once (per s)",
                "paced by the limits (per s)",
                "peak avoided (per s)",
                "live duration (s)",
                "window",
                "live done at",
            ]),
            rows: vec![vec![
                n("requests".into(), self.requests as f64),
                num("peak.fired_at_once_rps".into(), p.fired_at_once_rps, format!("{:.1}", p.fired_at_once_rps)),
                num("peak.paced_rps".into(), p.paced_rps, format!("{:.1}", p.paced_rps)),
                num("peak.avoided_rps".into(), p.avoided_rps, format!("{:.1}", p.avoided_rps)),
                num("peak.live_seconds".into(), p.live_seconds, format!("{:.1}", p.live_seconds)),
                txt(p.window.as_deref().unwrap_or("any time")),
                txt(p.live_done_at.as_deref().unwrap_or("-")),
            ]],
        };
        let window_note = match &p.window {
            Some(w) => format!("Live calls go only {w}, away from peak hours; batch files are processed by the provider within its batch window."),
            None => "Give --window (e.g. 22:00-06:00 --tz Europe/Bucharest) to keep live calls to off-peak hours.".to_string(),
        };
        sections.push(PageSection {
            id: "peak".into(),
            title: "Peak request rate".into(),
            intro: "Requests per second if every request were fired at once, against the rate the provider's limits allow when ordo paces them (token buckets per model).".into(),
            bars: Some(Bars {
                categories: vec!["requests per second".into()],
                series: vec![("fired at once".into(), vec![p.fired_at_once_rps]), ("paced".into(), vec![p.paced_rps])],
                y_title: "requests per second".into(),
            }),
            table: t,
            notes: vec![vec![txt(&window_note)]],
        });

        // Actual.
        if !self.actual.is_empty() {
            let mut t = Table {
                head: heads(&[
                    "client",
                    "model",
                    "route",
                    "answered",
                    "input tok",
                    "cached tok",
                    "cache write tok",
                    "output tok",
                    "estimate",
                    "actual",
                    "difference",
                ]),
                rows: vec![],
            };
            for (i, r) in self.actual.iter().enumerate() {
                let k = |f: &str| format!("actual.{i}.{f}");
                t.rows.push(vec![
                    txt(&r.client),
                    txt(&r.model),
                    route(r.route),
                    n(k("answered"), r.answered as f64),
                    n(k("usage.input"), r.usage.input as f64),
                    n(k("usage.cached"), r.usage.cached as f64),
                    n(k("usage.cache_write"), r.usage.cache_write as f64),
                    n(k("usage.output"), r.usage.output as f64),
                    m(k("estimate"), r.estimate),
                    m(k("actual"), r.actual),
                    txt(&pct(r.actual, r.estimate)),
                ]);
            }
            let bars = Bars {
                categories: self.actual.iter().take(12).map(|r| format!("{} {}", r.client, r.model)).collect(),
                series: vec![
                    ("estimate".into(), self.actual.iter().take(12).map(|r| r.estimate).collect()),
                    ("actual".into(), self.actual.iter().take(12).map(|r| r.actual).collect()),
                ],
                y_title: cur.clone(),
            };
            sections.push(PageSection {
                id: "actual".into(),
                title: "Actual cost from the providers' usage".into(),
                intro: format!(
                    "Answered requests in {}, priced from the usage each answer reports (batch answers at the batch price), beside ordo's estimate for the same requests. Estimates count every max_tokens as output, so answers that stop early cost less.",
                    self.results.join(", ")
                ),
                bars: Some(bars),
                table: t,
                notes: vec![],
            });
        }

        Page {
            title: self.title.clone(),
            headline: self.headline.clone(),
            meta: vec![
                format!("Input: {}, {} requests; tokens: {}.", self.file, self.requests, self.token_method),
                format!("Amounts in {cur}, from prices.toml."),
            ],
            sections,
        }
    }
}

/// The format of `--out` from its extension: `md`, `json`, else `html`.
pub fn format_of(out: &Path) -> &'static str {
    match out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("md" | "markdown") => "md",
        Some("json") => "json",
        _ => "html",
    }
}
