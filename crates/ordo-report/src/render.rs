//! Renders a [`Report`] as one self-contained HTML page (inline CSS and SVG, no script, no
//! URL) or as Markdown. Both come from the same sections and tables, built from the report.

use crate::chart::{self, Axes, Line};
use crate::model::{OwnerBy, Report};
use std::fmt::Write as _;

/// docs/METRICS.md, the definitions every report carries.
pub const METRICS_MD: &str = include_str!("../../../docs/METRICS.md");

/// Formats seconds as a short human duration (`42s`, `7.5m`, `3.2h`, `4.1d`).
pub fn dur(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.0}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 86400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86400.0)
    }
}

/// One table cell: its text and, for a number, the JSON path of the value it shows.
#[derive(Debug, Clone)]
pub struct Cell {
    /// What is shown.
    pub text: String,
    /// `(dot-separated JSON path, exact value)` for numbers taken from the report.
    pub key: Option<(String, f64)>,
}

impl Cell {
    fn text(s: impl Into<String>) -> Cell {
        Cell { text: s.into(), key: None }
    }
}

/// A table: header and rows.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column titles.
    pub head: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<Cell>>,
}

/// One topic: a chart and its table of numbers.
#[derive(Debug, Clone)]
pub struct Section {
    /// Anchor id.
    pub id: &'static str,
    /// Title.
    pub title: String,
    /// What the section shows, in plain words.
    pub intro: String,
    /// The chart (an `<svg>` element).
    pub svg: String,
    /// The numbers.
    pub table: Table,
    /// Sentences after the table (may carry numbers).
    pub notes: Vec<Vec<Cell>>,
}

fn num(key: String, v: f64, text: String) -> Cell {
    Cell { text, key: Some((key, v)) }
}
fn d(key: String, v: f64) -> Cell {
    num(key, v, dur(v))
}
fn pct(key: String, v: f64) -> Cell {
    num(key, v, format!("{:.1}%", 100.0 * v))
}
fn f(key: String, v: f64, decimals: usize) -> Cell {
    num(key, v, format!("{v:.decimals$}"))
}

/// A table with one row per policy: its name, then `cells(name)`.
fn per_policy(p: &[String], head: Vec<String>, cells: impl Fn(&String) -> Vec<Cell>) -> Table {
    let rows = p
        .iter()
        .map(|n| {
            let mut row = vec![Cell::text(n)];
            row.extend(cells(n));
            row
        })
        .collect();
    Table { head, rows }
}

/// One line per policy, in the policy's colour.
fn policy_lines(p: &[String], points: impl Fn(&String) -> Vec<(f64, f64)>) -> Vec<Line> {
    p.iter().enumerate().map(|(i, n)| Line { name: n.clone(), color: i, points: points(n) }).collect()
}

/// One bar series per policy: `values(policy)[category]`.
fn policy_bars(p: &[String], values: impl Fn(&String) -> Vec<f64>) -> Vec<Line> {
    policy_lines(p, |n| values(n).into_iter().enumerate().map(|(c, v)| (c as f64, v)).collect())
}

fn heads(h: &[&str]) -> Vec<String> {
    h.iter().map(|x| x.to_string()).collect()
}

fn time_axis(span_h: f64) -> (&'static str, f64) {
    if span_h > 72.0 {
        ("time since first submit (days)", 24.0)
    } else {
        ("time since first submit (hours)", 1.0)
    }
}

fn fmt0(v: f64) -> String {
    format!("{v:.0}")
}
/// A tick label: whole numbers from 100 up, else up to 1 (from 1) or 2 decimals, no trailing zeros.
fn fmt_g(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Builds every section of `r`, charts included.
pub fn sections(r: &Report) -> Result<Vec<Section>, String> {
    let p = &r.policies;
    let mut out = Vec::new();
    let span_h = r.allocated_gpus.values().filter_map(|s| s.t_h.last()).fold(0.0f64, |a, &b| a.max(b));
    let (t_title, t_div) = time_axis(span_h);
    let over_time = |map: &std::collections::BTreeMap<String, crate::series::Series>| -> Vec<Line> {
        policy_lines(p, |n| map[n].t_h.iter().zip(&map[n].value).map(|(t, v)| (t / t_div, *v)).collect())
    };
    let util_col = if r.metrics.values().any(|m| m.utilization_window.is_some()) { "utilisation" } else { "-" };

    // Allocated GPUs.
    let axes = Axes { x: t_title, y: "allocated GPUs", x_fmt: &fmt_g, y_fmt: &fmt_g };
    let head = heads(&["policy", "mean allocated GPUs", "peak", util_col, "util (makespan)", "makespan"]);
    let t = per_policy(p, head, |n| {
        let (s, m) = (&r.allocated_gpus[n], &r.metrics[n]);
        vec![
            f(format!("allocated_gpus.{n}.mean"), s.mean, 1),
            f(format!("allocated_gpus.{n}.peak"), s.peak, 0),
            match m.utilization_window {
                Some(u) => pct(format!("metrics.{n}.utilization_window"), u),
                None => Cell::text("-"),
            },
            pct(format!("metrics.{n}.utilization_makespan"), m.utilization_makespan),
            d(format!("metrics.{n}.makespan_s"), m.makespan_s),
        ]
    });
    out.push(Section {
        id: "allocated",
        title: "Allocated GPUs over time".into(),
        intro: format!(
            "GPUs held by running jobs, averaged over {} equal intervals from the first submit to the last end, out of {} GPUs.",
            r.allocated_gpus.values().next().map_or(0, |s| s.t_h.len()),
            r.gpus
        ),
        svg: chart::line_chart(&over_time(&r.allocated_gpus), &axes)?,
        table: t,
        notes: vec![],
    });

    // Queue length.
    let axes = Axes { x: t_title, y: "waiting jobs", x_fmt: &fmt_g, y_fmt: &fmt_g };
    let head = heads(&["policy", "mean waiting jobs", "peak", "mean wait", "p95 wait", "p99 wait"]);
    let t = per_policy(p, head, |n| {
        let (s, m) = (&r.queue_length[n], &r.metrics[n]);
        vec![
            f(format!("metrics.{n}.mean_queue_len"), m.mean_queue_len, 1),
            f(format!("queue_length.{n}.peak"), s.peak, 0),
            d(format!("metrics.{n}.mean_wait_s"), m.mean_wait_s),
            d(format!("metrics.{n}.p95_wait_s"), m.p95_wait_s),
            d(format!("metrics.{n}.p99_wait_s"), m.p99_wait_s),
        ]
    });
    out.push(Section {
        id: "queue",
        title: "Queue length over time".into(),
        intro: "Jobs submitted but not running (before their first start, and between runs when preempted), averaged over the same intervals.".into(),
        svg: chart::line_chart(&over_time(&r.queue_length), &axes)?,
        table: t,
        notes: vec![],
    });

    // Idle while waiting.
    let cats = vec!["idle while jobs waited".to_string(), "... and a waiting job would have fit".to_string()];
    let bars = policy_bars(p, |n| {
        let m = &r.metrics[n];
        vec![m.idle_while_waiting_gpu_hours, m.idle_while_fit_gpu_hours]
    });
    let axes = Axes { x: "", y: "GPU-hours", x_fmt: &fmt0, y_fmt: &fmt_g };
    let head = heads(&[
        "policy",
        "idle GPU-h while jobs waited",
        "of which a waiting job fit",
        "idle GPU-h in all",
        "share idle while jobs waited",
    ]);
    let t = per_policy(p, head, |n| {
        let (m, i) = (&r.metrics[n], &r.idle[n]);
        vec![
            f(format!("metrics.{n}.idle_while_waiting_gpu_hours"), m.idle_while_waiting_gpu_hours, 0),
            f(format!("metrics.{n}.idle_while_fit_gpu_hours"), m.idle_while_fit_gpu_hours, 0),
            f(format!("idle.{n}.idle_gpu_hours"), i.idle_gpu_hours, 0),
            pct(format!("idle.{n}.idle_while_waiting_share"), i.idle_while_waiting_share),
        ]
    });
    out.push(Section {
        id: "idle",
        title: "GPU-hours idle while jobs waited".into(),
        intro: "GPUs that sat idle although jobs were waiting: capacity the order left unused. The second group counts only the instants at which the smallest waiting job asked for no more GPUs than were idle.".into(),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        table: t,
        notes: vec![],
    });

    // JCT CDF (log x).
    let lines = policy_lines(p, |n| {
        let c = &r.jct_cdf[n];
        c.jct_s.iter().zip(&c.fraction).map(|(j, fr)| (j.max(1.0).log10(), 100.0 * fr)).collect()
    });
    let log_dur = |v: f64| dur(10f64.powf(v));
    let axes =
        Axes { x: "job completion time (log scale)", y: "jobs finished within (%)", x_fmt: &log_dur, y_fmt: &fmt_g };
    let head = heads(&["policy", "mean JCT", "p50 JCT", "p95 JCT", "p99 JCT", "max JCT", "mean bounded slowdown"]);
    let t = per_policy(p, head, |n| {
        let m = &r.metrics[n];
        vec![
            d(format!("metrics.{n}.mean_jct_s"), m.mean_jct_s),
            d(format!("metrics.{n}.p50_jct_s"), m.p50_jct_s),
            d(format!("metrics.{n}.p95_jct_s"), m.p95_jct_s),
            d(format!("metrics.{n}.p99_jct_s"), m.p99_jct_s),
            d(format!("metrics.{n}.max_jct_s"), m.max_jct_s),
            f(format!("metrics.{n}.mean_bounded_slowdown"), m.mean_bounded_slowdown, 1),
        ]
    });
    out.push(Section {
        id: "jct",
        title: "Job completion time distribution".into(),
        intro: "Share of jobs that finished within a given time of their submit (a curve further left and higher is better).".into(),
        svg: chart::line_chart(&lines, &axes)?,
        table: t,
        notes: vec![],
    });

    // Wait by size class.
    let first = &r.wait_by_size[&p[0]];
    let cats: Vec<String> =
        r.size_classes.iter().map(|(k, l)| format!("{l} ({} jobs)", first.get(k).map_or(0, |x| x.jobs))).collect();
    let bars =
        policy_bars(p, |n| r.size_classes.iter().map(|(k, _)| r.wait_by_size[n][k].mean_wait_s / 3600.0).collect());
    let axes = Axes { x: "GPUs asked for", y: "mean wait (hours)", x_fmt: &fmt0, y_fmt: &fmt_g };
    let mut head = vec!["policy".to_string()];
    for (_, l) in &r.size_classes {
        head.push(format!("{l}: mean"));
        head.push(format!("{l}: p99"));
    }
    let t = per_policy(p, head, |n| {
        let mut row = Vec::new();
        for (k, _) in &r.size_classes {
            let s = &r.wait_by_size[n][k];
            row.push(d(format!("wait_by_size.{n}.{k}.mean_wait_s"), s.mean_wait_s));
            row.push(d(format!("wait_by_size.{n}.{k}.p99_wait_s"), s.p99_wait_s));
        }
        row
    });
    out.push(Section {
        id: "size",
        title: "Wait by job size".into(),
        intro: "How long jobs waited (mean and 99th percentile), by the GPUs they asked for: orders that favour small or short jobs shift the wait onto large ones.".into(),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        table: t,
        notes: vec![],
    });

    // Owners.
    let o = &r.owners;
    let who = match o.by {
        OwnerBy::User => "user",
        OwnerBy::Group => "group",
    };
    let bars = policy_bars(p, |n| {
        o.names.iter().map(|name| o.by_policy[n][name].mean_bounded_slowdown.max(1.0).log10()).collect()
    });
    let pow10 = |v: f64| fmt_g(10f64.powf(v));
    let x_title = format!("{who} (largest share of GPU-hours first)");
    let axes = Axes { x: &x_title, y: "mean bounded slowdown (log scale)", x_fmt: &fmt0, y_fmt: &pow10 };
    // One column per owner (at most top N + 1), one row per figure: this stays narrow however
    // many policies are compared.
    let mut head = vec![String::new()];
    head.extend(o.names.iter().cloned());
    let mut t = Table { head, rows: vec![] };
    let share_row = |label: &str, cell: &dyn Fn(&String) -> Cell| {
        let mut row = vec![Cell::text(label)];
        row.extend(o.names.iter().map(cell));
        row
    };
    t.rows.push(share_row("jobs", &|n| f(format!("owners.share.{n}.jobs"), o.share[n].jobs as f64, 0)));
    t.rows.push(share_row("GPU-hours of work", &|n| f(format!("owners.share.{n}.gpu_hours"), o.share[n].gpu_hours, 0)));
    t.rows.push(share_row("share of the work", &|n| pct(format!("owners.share.{n}.share"), o.share[n].share)));
    for pol in p {
        let label = format!("slowdown under {pol}");
        t.rows.push(share_row(&label, &|n| {
            f(format!("owners.by_policy.{pol}.{n}.mean_bounded_slowdown"), o.by_policy[pol][n].mean_bounded_slowdown, 1)
        }));
    }
    let has_others = o.names.last().is_some_and(|x| x == "(others)");
    let shown = o.names.len() - usize::from(has_others);
    out.push(Section {
        id: "owners",
        title: format!("Share and slowdown per {who}"),
        intro: format!(
            "Each {who}'s share of the GPU-hours of work (the same under every policy) and the mean bounded slowdown its jobs saw under each policy (1 = no wait: no bar). {}",
            if has_others {
                format!("The {shown} largest by share; the rest are summed as (others).")
            } else if shown == 1 {
                format!("The workload has a single {who}.")
            } else {
                format!("All {shown} {who}s of the workload.")
            }
        ),
        svg: chart::bar_chart(&o.names, &bars, &axes)?,
        table: t,
        notes: vec![],
    });

    out.push(cost_section(r)?);
    if let Some(s) = equivalent_section(r)? {
        out.push(s);
    }
    Ok(out)
}

fn cost_section(r: &Report) -> Result<Section, String> {
    let p = &r.policies;
    let c = &r.cost;
    let (unit, money) = match &c.price {
        Some(pr) => (format!("{} per 30-day month", pr.currency), true),
        None => ("GPU-hours per 30-day month".to_string(), false),
    };
    let cats = vec!["idle capacity".to_string(), "idle while jobs waited".to_string()];
    let bars = policy_bars(p, |n| {
        let row = &c.per_policy[n];
        if money {
            vec![row.idle_cost_per_month.unwrap_or(0.0), row.idle_wait_cost_per_month.unwrap_or(0.0)]
        } else {
            vec![row.idle_gpu_hours_per_month, row.idle_wait_gpu_hours_per_month]
        }
    });
    let axes = Axes { x: "", y: &unit, x_fmt: &fmt0, y_fmt: &fmt_g };
    let mut head =
        vec!["policy".to_string(), "idle GPU-h / month".to_string(), "idle while waiting GPU-h / month".to_string()];
    if let Some(pr) = &c.price {
        head.push(format!("idle {} / month", pr.currency));
        head.push(format!("idle while waiting {} / month", pr.currency));
    }
    let t = per_policy(p, head, |n| {
        let row = &c.per_policy[n];
        let mut cells = vec![
            f(format!("cost.per_policy.{n}.idle_gpu_hours_per_month"), row.idle_gpu_hours_per_month, 0),
            f(format!("cost.per_policy.{n}.idle_wait_gpu_hours_per_month"), row.idle_wait_gpu_hours_per_month, 0),
        ];
        if let (Some(a), Some(b)) = (row.idle_cost_per_month, row.idle_wait_cost_per_month) {
            cells.push(f(format!("cost.per_policy.{n}.idle_cost_per_month"), a, 0));
            cells.push(f(format!("cost.per_policy.{n}.idle_wait_cost_per_month"), b, 0));
        }
        cells
    });
    let mut note = vec![Cell::text(format!("{} instead of {} saves ", r.best, r.baseline))];
    note.push(f("cost.saving_gpu_hours_per_month".into(), c.saving_gpu_hours_per_month, 0));
    note.push(Cell::text(" GPU-hours per month that sat idle while jobs waited (negative: it idles more)"));
    match (&c.price, c.saving_per_month) {
        (Some(pr), Some(s)) => {
            note.push(Cell::text(format!(", worth {} ", pr.currency)));
            note.push(f("cost.saving_per_month".into(), s, 0));
            note.push(Cell::text(format!(" per month at {:.2} {} per GPU-hour.", pr.per_gpu_hour, pr.currency)));
        }
        _ => note.push(Cell::text(
            ". To see this in money, give a price: `--gpu-hour-price 2.10 --currency EUR` (any three-letter currency code).",
        )),
    }
    Ok(Section {
        id: "cost",
        title: "Cost of idle capacity".into(),
        intro: "Idle capacity per 30-day month: (1 - utilisation) x GPUs x 720 h (utilisation as in the headline), and the GPU-hours idle while jobs waited, scaled from the run's makespan to 720 h.".into(),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        table: t,
        notes: vec![note],
    })
}

fn equivalent_section(r: &Report) -> Result<Option<Section>, String> {
    let Some(e) = &r.equivalent_gpus else { return Ok(None) };
    let bi = r.policies.iter().position(|x| *x == e.baseline).unwrap_or(0);
    let xi = r.policies.iter().position(|x| *x == e.best).unwrap_or(0);
    let base_jct = r.metrics.get(&e.baseline).map_or(0.0, |m| m.mean_jct_s);
    let mut pts = vec![(0.0, base_jct / 3600.0)];
    pts.extend(e.probes.iter().map(|q| (q.extra_gpus as f64, q.mean_jct_s / 3600.0)));
    let xmax = pts.iter().map(|q| q.0).fold(1.0f64, f64::max);
    let lines = vec![
        Line { name: format!("{} with more GPUs", e.baseline), color: bi, points: pts },
        Line {
            name: format!("{} (target)", e.best),
            color: xi,
            points: vec![(0.0, e.target_mean_jct_s / 3600.0), (xmax, e.target_mean_jct_s / 3600.0)],
        },
    ];
    let axes = Axes { x: "GPUs added", y: "mean JCT (hours)", x_fmt: &fmt0, y_fmt: &fmt_g };
    let mut t = Table { head: ["GPUs added", "nodes added", "mean JCT"].map(String::from).to_vec(), rows: vec![] };
    for (i, q) in e.probes.iter().enumerate() {
        t.rows.push(vec![
            f(format!("equivalent_gpus.probes.{i}.extra_gpus"), q.extra_gpus as f64, 0),
            f(format!("equivalent_gpus.probes.{i}.extra_nodes"), q.extra_nodes as f64, 0),
            d(format!("equivalent_gpus.probes.{i}.mean_jct_s"), q.mean_jct_s),
        ]);
    }
    let mut note = vec![Cell::text(e.message.clone())];
    if let Some(g) = e.extra_gpus {
        note.push(Cell::text(" Equivalent GPUs: "));
        note.push(f("equivalent_gpus.extra_gpus".into(), g as f64, 0));
        note.push(Cell::text("."));
    }
    Ok(Some(Section {
        id: "equivalent",
        title: "Equivalent GPUs".into(),
        intro: format!(
            "How many GPUs {} would need added (nodes like the cluster's most common one, {} GPUs each) to match {}'s mean JCT, found by simulating larger clusters: doubling, then a search between the last size that fell short and the first that reached it (at most {} more nodes).",
            e.baseline, e.node_gpus, e.best, e.cap_extra_nodes
        ),
        svg: chart::line_chart(&lines, &axes)?,
        table: t,
        notes: vec![note],
    }))
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn cell_html(c: &Cell, tag: &str) -> String {
    match &c.key {
        Some((k, v)) => format!("<{tag} data-key=\"{}\" data-value=\"{v}\">{}</{tag}>", esc(k), esc(&c.text)),
        None => format!("<{tag}>{}</{tag}>", esc(&c.text)),
    }
}

/// `open`, each cell as `<tag>`, `close`.
pub(crate) fn cells_html(cells: &[Cell], open: &str, tag: &str, close: &str) -> String {
    let mut s = String::from(open);
    for c in cells {
        s.push_str(&cell_html(c, tag));
    }
    s.push_str(close);
    s
}

pub(crate) fn table_html(t: &Table) -> String {
    let mut s = String::from("<div class=\"scroll\"><table><thead><tr>");
    for h in &t.head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        s.push_str(&cells_html(r, "<tr>", "td", "</tr>"));
    }
    s.push_str("</tbody></table></div>");
    s
}

/// The "input" lines: where the jobs came from and the cluster.
fn input_lines(r: &Report) -> Vec<String> {
    let i = &r.input;
    let mut v = vec![format!("Input: {} ({}), {} jobs.", i.source, i.format, i.jobs)];
    if let (Some(a), Some(b)) = (i.from_day, i.to_day) {
        v.push(format!("Window: days {a} to {b} of the trace."));
    }
    if i.dropped_zero_duration + i.dropped_outside_window > 0 {
        v.push(format!(
            "{} rows read; dropped {} with duration 0 and {} outside the window.",
            i.rows, i.dropped_zero_duration, i.dropped_outside_window
        ));
    }
    if let Some(e) = &i.estimates {
        v.push(format!("Run-time estimates: {e}."));
    }
    v.push(format!(
        "Cluster: {} ({} GPUs), {} placement; policies: {}.",
        r.cluster,
        r.gpus,
        r.placement,
        r.policies.join(", ")
    ));
    if r.rejected_jobs > 0 {
        v.push(format!("{} jobs need more GPUs than the cluster has and were not run.", r.rejected_jobs));
    }
    if r.metrics.values().any(|m| m.estimates == "oracle") {
        v.push("Oracle: the workload has no run-time estimates, so policies that read them (sjf, srtf, any backfill) read each job's true run time.".into());
    }
    v
}

fn overview(r: &Report) -> Table {
    let head =
        heads(&["policy", "estimates", "mean JCT", "p99 wait", "utilisation", "idle-wait GPU-h", "fair (users)"]);
    per_policy(&r.policies, head, |n| {
        let m = &r.metrics[n];
        let util = match m.utilization_window {
            Some(u) => pct(format!("metrics.{n}.utilization_window"), u),
            None => pct(format!("metrics.{n}.utilization_makespan"), m.utilization_makespan),
        };
        vec![
            Cell::text(&m.estimates),
            d(format!("metrics.{n}.mean_jct_s"), m.mean_jct_s),
            d(format!("metrics.{n}.p99_wait_s"), m.p99_wait_s),
            util,
            f(format!("metrics.{n}.idle_while_waiting_gpu_hours"), m.idle_while_waiting_gpu_hours, 0),
            f(format!("metrics.{n}.fairness_users"), m.fairness_users, 2),
        ]
    })
}

pub(crate) const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d1d1f;max-width:1240px;margin:24px auto;padding:0 16px;line-height:1.45}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:0 0 6px;border-bottom:2px solid #e3e3e3;padding-bottom:4px}
.headline{font-size:18px;background:#f1f6fd;border-left:4px solid #1f77b4;padding:10px 14px;margin:14px 0}
.meta{color:#555;font-size:14px;margin:2px 0}section,.definitions{margin:28px 0}.intro{color:#444;font-size:14px}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border-bottom:1px solid #e6e6e6;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f7f7f7;font-weight:600}td:first-child,th:first-child{text-align:left}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin:0 4px 0 10px;vertical-align:-1px}
.legend{font-size:13px;margin:8px 0}.note{font-size:14px}svg{max-width:100%;height:auto;display:block}
.definitions table td,.definitions table th{white-space:normal;text-align:left;vertical-align:top}.definitions{font-size:14px}";

/// The report as one self-contained HTML page: inline CSS and SVG, no script, no URL.
pub fn html(r: &Report) -> Result<String, String> {
    let secs = sections(r)?;
    let mut s = String::with_capacity(256 * 1024);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>\n<header><h1>{}</h1>",
        esc(&r.title),
        esc(&r.title)
    );
    let _ = write!(s, "<p class=\"headline\" id=\"headline\">{}</p>", esc(&r.headline));
    for l in input_lines(r) {
        let _ = write!(s, "<p class=\"meta\">{}</p>", esc(&l));
    }
    s.push_str("<div class=\"legend\">Colours:");
    for (i, n) in r.policies.iter().enumerate() {
        let _ = write!(s, "<span class=\"swatch\" style=\"background:{}\"></span>{}", chart::css_color(i), esc(n));
    }
    s.push_str("</div>");
    s.push_str(&table_html(&overview(r)));
    s.push_str("<p class=\"meta\">Contents: ");
    let links: Vec<String> = secs.iter().map(|x| format!("<a href=\"#{}\">{}</a>", x.id, esc(&x.title))).collect();
    s.push_str(&links.join(" · "));
    s.push_str(" · <a href=\"#definitions\">Definitions</a></p></header>\n");
    for x in &secs {
        let _ =
            write!(s, "<section id=\"{}\"><h2>{}</h2><p class=\"intro\">{}</p>", x.id, esc(&x.title), esc(&x.intro));
        s.push_str(&x.svg);
        s.push_str(&table_html(&x.table));
        for n in &x.notes {
            s.push_str(&cells_html(n, "<p class=\"note\">", "span", "</p>"));
        }
        s.push_str("</section>\n");
    }
    s.push_str("<div class=\"definitions\" id=\"definitions\">");
    let defs = definitions_md();
    let parser = pulldown_cmark::Parser::new_ext(&defs, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(&mut s, parser);
    s.push_str("<p class=\"meta\">Made by ordo report.</p></div>\n</body></html>\n");
    Ok(s)
}

/// docs/METRICS.md one heading level down, under the title "Metric definitions".
fn definitions_md() -> String {
    let mut s = String::with_capacity(METRICS_MD.len() + 64);
    for line in METRICS_MD.lines() {
        if line.trim() == "# Metrics" {
            s.push_str("## Metric definitions\n");
        } else if line.starts_with('#') {
            let _ = writeln!(s, "#{line}");
        } else {
            let _ = writeln!(s, "{line}");
        }
    }
    s
}

fn md_cell(c: &Cell) -> String {
    c.text.replace('|', "\\|")
}

pub(crate) fn table_md(t: &Table) -> String {
    let mut s = format!("| {} |\n", t.head.iter().map(|h| h.replace('|', "\\|")).collect::<Vec<_>>().join(" | "));
    s.push_str(&format!("|{}\n", "---|".repeat(t.head.len())));
    for r in &t.rows {
        s.push_str(&format!("| {} |\n", r.iter().map(md_cell).collect::<Vec<_>>().join(" | ")));
    }
    s
}

/// The same content as Markdown: tables and notes (the charts are only in the HTML), and the
/// definitions of docs/METRICS.md with its headings moved two levels down.
pub fn markdown(r: &Report) -> Result<String, String> {
    let secs = sections(r)?;
    let mut s = format!("# {}\n\n**{}**\n\n", r.title, r.headline);
    for l in input_lines(r) {
        let _ = writeln!(s, "- {l}");
    }
    s.push('\n');
    s.push_str(&table_md(&overview(r)));
    for x in &secs {
        let _ = write!(s, "\n## {}\n\n{}\n\n", x.title, x.intro);
        s.push_str(&table_md(&x.table));
        for n in &x.notes {
            let _ = writeln!(s, "\n{}", n.iter().map(|c| c.text.as_str()).collect::<String>());
        }
    }
    s.push('\n');
    s.push_str(&definitions_md());
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            (dur(42.0), dur(450.0), dur(3.2 * 3600.0), dur(4.1 * 86400.0)),
            ("42s".into(), "7.5m".into(), "3.2h".into(), "4.1d".into())
        );
    }

    #[test]
    fn metrics_definitions_render_as_html() {
        let mut s = String::new();
        pulldown_cmark::html::push_html(
            &mut s,
            pulldown_cmark::Parser::new_ext(METRICS_MD, pulldown_cmark::Options::ENABLE_TABLES),
        );
        assert!(s.contains("<table>") && s.contains("Jain's index over users of each user"), "{s}");
        assert!(s.contains("<code>idle_while_waiting_gpu_hours</code>"));
    }
}
