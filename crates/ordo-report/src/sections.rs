//! The report's sections as data: for each topic a chart, its legend, a table and notes, every
//! number a [`Cell`] keyed by its JSON path. The HTML and Markdown renderers only lay them out.

use crate::chart::{self, Axes, Line};
use crate::fmt::{dur, fixed, gpu_hours, pct1, thousands};
use crate::model::{OwnerBy, Report};
use ordo_core::words::count;

/// One table cell: its text and, for a number, the JSON path of the value it shows.
#[derive(Debug, Clone)]
pub struct Cell {
    /// What is shown.
    pub text: String,
    /// `(dot-separated JSON path, exact value)` for numbers taken from the report.
    pub key: Option<(String, f64)>,
}

impl Cell {
    /// A cell of plain text.
    pub fn text(s: impl Into<String>) -> Cell {
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

/// One legend entry: name, colour index, emphasised (the baseline and the best policy).
pub type LegendEntry = (String, usize, bool);

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
    /// The chart's legend.
    pub legend: Vec<LegendEntry>,
    /// The numbers.
    pub table: Table,
    /// Sentences after the table (may carry numbers).
    pub notes: Vec<Vec<Cell>>,
}

fn num(key: String, v: f64, text: String) -> Cell {
    Cell { text, key: Some((key, v)) }
}
/// A duration cell.
pub fn d(key: String, v: f64) -> Cell {
    num(key, v, dur(v))
}
/// A percentage cell (one decimal).
pub fn pct(key: String, v: f64) -> Cell {
    num(key, v, pct1(v))
}
/// A number cell with `decimals` decimals and thousands separators.
pub fn f(key: String, v: f64, decimals: usize) -> Cell {
    num(key, v, fixed(v, decimals))
}
/// A GPU-hours cell ([`gpu_hours`]: whole numbers from 100 up, else one or two decimals).
pub fn gh(key: String, v: f64) -> Cell {
    num(key, v, gpu_hours(v))
}

/// A table with one row per policy: its name, then `cells(name)`.
pub fn per_policy(p: &[String], head: Vec<String>, cells: impl Fn(&String) -> Vec<Cell>) -> Table {
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

/// Whether a policy is drawn emphasised: the baseline or the best policy.
fn emphasised(r: &Report, n: &str) -> bool {
    n == r.baseline || n == r.best
}

/// The legend of per-policy charts.
pub fn policy_legend(r: &Report) -> Vec<LegendEntry> {
    r.policies.iter().enumerate().map(|(i, n)| (n.clone(), i, emphasised(r, n))).collect()
}

/// One line per policy, in the policy's colour; the baseline and the best emphasised.
fn policy_lines(r: &Report, points: impl Fn(&String) -> Vec<(f64, f64)>) -> Vec<Line> {
    r.policies
        .iter()
        .enumerate()
        .map(|(i, n)| Line { name: n.clone(), color: i, points: points(n), emphasis: emphasised(r, n) })
        .collect()
}

/// One bar series per policy: `values(policy)[category]`.
fn policy_bars(r: &Report, values: impl Fn(&String) -> Vec<f64>) -> Vec<Line> {
    policy_lines(r, |n| values(n).into_iter().enumerate().map(|(c, v)| (c as f64, v)).collect())
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
    thousands(v)
}

/// A tick label: whole numbers with separators from 100 up, else up to 1 (from 1) or 2
/// decimals, no trailing zeros.
fn fmt_g(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        return thousands(v);
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

/// A round duration as a tick label: `10s`, `1m`, `10m`, `1h`, `1d`, `10d`.
fn dur_tick(secs: f64) -> String {
    let s = secs.round();
    for (unit, len) in [("d", 86_400.0), ("h", 3_600.0), ("m", 60.0)] {
        if s >= len {
            return format!("{}{unit}", fmt_g(s / len));
        }
    }
    format!("{s:.0}s")
}

/// Builds every section of `r`, charts included: what it is worth first (cost, equivalent
/// GPUs), then where the capacity went, then what the jobs saw.
pub fn sections(r: &Report) -> Result<Vec<Section>, String> {
    let p = &r.policies;
    let mut out = vec![cost_section(r)?];
    if let Some(s) = equivalent_section(r)? {
        out.push(s);
    }
    let span_h = r.allocated_gpus.values().filter_map(|s| s.t_h.last()).fold(0.0f64, |a, &b| a.max(b));
    let (t_title, t_div) = time_axis(span_h);
    let over_time = |map: &std::collections::BTreeMap<String, crate::series::Series>| -> Vec<Line> {
        policy_lines(r, |n| map[n].t_h.iter().zip(&map[n].value).map(|(t, v)| (t / t_div, *v)).collect())
    };
    let util_col =
        if r.metrics.values().any(|m| m.utilization_window.is_some()) { "utilisation (arrival window)" } else { "-" };

    // Allocated GPUs.
    let axes = Axes { x: t_title, y: "allocated GPUs", x_fmt: &fmt_g, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
    let head = heads(&[
        "policy",
        "mean allocated GPUs (its makespan)",
        "peak",
        util_col,
        "utilisation (makespan)",
        "makespan",
    ]);
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
            "GPUs held by running jobs, averaged over {} equal intervals from the first submit to the last end of any policy, out of {}. The mean is over each policy's own makespan (its utilisation over the makespan times the GPUs).",
            r.allocated_gpus.values().next().map_or(0, |s| s.t_h.len()),
            count(r.gpus as usize, "GPU")
        ),
        svg: chart::line_chart(&over_time(&r.allocated_gpus), &axes)?,
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    });

    // Queue length.
    let axes = Axes { x: t_title, y: "waiting jobs", x_fmt: &fmt_g, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
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
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    });

    out.push(idle_section(r)?);
    if let Some(s) = models_section(r)? {
        out.push(s);
    }
    out.extend(spread_sections(r)?);

    // JCT CDF (log x).
    let lines = policy_lines(r, |n| {
        let c = &r.jct_cdf[n];
        c.jct_s.iter().zip(&c.fraction).map(|(j, fr)| (j.max(1.0).log10(), 100.0 * fr)).collect()
    });
    let (lo, hi) = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    let log_dur = |v: f64| dur_tick(10f64.powf(v));
    let axes = Axes {
        x: "job completion time (log scale)",
        y: "jobs finished within (%)",
        x_fmt: &log_dur,
        y_fmt: &fmt_g,
        x_ticks: lo.is_finite().then(|| chart::duration_ticks(lo, hi)),
        y_ticks: Some(vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]),
    };
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
        intro: format!(
            "Share of jobs that finished within a given time of their submit (a curve further left and higher is better). {} and {} are drawn bold, the others pale.",
            r.baseline, r.best
        ),
        svg: chart::line_chart(&lines, &axes)?,
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    });

    // Wait by size class.
    let first = &r.wait_by_size[&p[0]];
    let cats: Vec<String> = r
        .size_classes
        .iter()
        .map(|(k, l)| format!("{l} ({})", count(first.get(k).map_or(0, |x| x.jobs), "job")))
        .collect();
    let bars =
        policy_bars(r, |n| r.size_classes.iter().map(|(k, _)| r.wait_by_size[n][k].mean_wait_s / 3600.0).collect());
    let axes =
        Axes { x: "GPUs asked for", y: "mean wait (hours)", x_fmt: &fmt0, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
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
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    });

    out.push(owners_section(r)?);
    Ok(out)
}

/// Idle GPU-hours by cause (head-of-line blocking, fragmentation, empty queue) per policy.
fn idle_section(r: &Report) -> Result<Section, String> {
    let p = &r.policies;
    // The chart shows what the order moves; idle capacity with an empty queue (set by the
    // load) is in the table only, where it would otherwise dwarf the rest.
    // Constrained-idle (a fourth cause) only where some run had any: typed clusters with
    // constrained jobs.
    let constrained = r.metrics.values().any(|m| m.idle_causes.constrained_gpu_hours > 0.0);
    let mut cats = vec!["head-of-line blocking".to_string(), "fragmentation".to_string()];
    if constrained {
        cats.push("constrained-idle".into());
    }
    let bars = policy_bars(r, |n| {
        let c = &r.metrics[n].idle_causes;
        let mut v = vec![c.head_of_line_gpu_hours, c.fragmentation_gpu_hours];
        if constrained {
            v.push(c.constrained_gpu_hours);
        }
        v
    });
    let axes = Axes { x: "", y: "idle GPU-hours", x_fmt: &fmt0, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
    let mut head = heads(&["policy", "head-of-line blocking GPU-h", "fragmentation GPU-h"]);
    if constrained {
        head.push("constrained-idle GPU-h".into());
    }
    head.extend(heads(&["empty queue GPU-h", "idle GPU-h in all", "a waiting job fit by GPU count GPU-h"]));
    let t = per_policy(p, head, |n| {
        let (m, i) = (&r.metrics[n], &r.idle[n]);
        let c = &m.idle_causes;
        let mut row = vec![
            gh(format!("metrics.{n}.idle_causes.head_of_line_gpu_hours"), c.head_of_line_gpu_hours),
            gh(format!("metrics.{n}.idle_causes.fragmentation_gpu_hours"), c.fragmentation_gpu_hours),
        ];
        if constrained {
            row.push(gh(format!("metrics.{n}.idle_causes.constrained_gpu_hours"), c.constrained_gpu_hours));
        }
        row.extend([
            gh(format!("metrics.{n}.idle_causes.empty_queue_gpu_hours"), c.empty_queue_gpu_hours),
            gh(format!("idle.{n}.idle_gpu_hours"), i.idle_gpu_hours),
            gh(format!("metrics.{n}.idle_while_fit_gpu_hours"), m.idle_while_fit_gpu_hours),
        ]);
        row
    });
    let mut intro = "Idle GPU-hours from the first submit to the last end, by cause: head-of-line blocking (jobs waited and one of them fit the idle GPUs under the placement: the order, or a reservation, kept it waiting), fragmentation (jobs waited and none fit: too few idle GPUs, or idle GPUs spread over nodes), ".to_string();
    if constrained {
        intro.push_str("constrained-idle (jobs waited that would fit the idle GPUs by count, but every one of them refuses those GPUs' model, memory or features: the constraints, not the order, kept the GPUs idle), ");
    }
    intro.push_str("and empty queue (no job waited: set mostly by the load, and in a backlog by the tail after the last start; in the table, not the chart).");
    Ok(Section {
        id: "idle",
        title: "Why GPUs sat idle".into(),
        intro,
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        legend: policy_legend(r),
        table: t,
        notes: r.why.lines.iter().map(|l| vec![Cell::text(l.clone())]).collect(),
    })
}

/// Typed clusters: each GPU model's utilisation per policy (none on untyped runs).
fn models_section(r: &Report) -> Result<Option<Section>, String> {
    let p = &r.policies;
    // Every run of a report is on the same cluster: the models (and their order) are the
    // first typed run's.
    let Some(first) = r.metrics.values().find(|m| !m.utilization_by_model.is_empty()) else { return Ok(None) };
    let models: Vec<(String, u64)> = first.utilization_by_model.iter().map(|u| (u.model.clone(), u.gpus)).collect();
    let at = |n: &String, i: usize| r.metrics[n].utilization_by_model.get(i).map(|u| u.utilization);
    let cats: Vec<String> = models.iter().map(|(m, g)| format!("{m} ({})", count(*g as usize, "GPU"))).collect();
    let bars = policy_bars(r, |n| (0..models.len()).map(|i| 100.0 * at(n, i).unwrap_or(0.0)).collect());
    let axes = Axes {
        x: "GPU model",
        y: "utilisation (%)",
        x_fmt: &fmt0,
        y_fmt: &fmt_g,
        x_ticks: None,
        y_ticks: Some(vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]),
    };
    let mut head = vec!["policy".to_string()];
    head.extend(models.iter().map(|(m, g)| format!("{m} ({})", count(*g as usize, "GPU"))));
    let t = per_policy(p, head, |n| {
        (0..models.len())
            .map(|i| match at(n, i) {
                Some(u) => pct(format!("metrics.{n}.utilization_by_model.{i}.utilization"), u),
                None => Cell::text("-"),
            })
            .collect()
    });
    Ok(Some(Section {
        id: "models",
        title: "Utilisation by GPU model".into(),
        intro: "The share of each GPU model's GPU-time held by running jobs over the policy's makespan. Jobs that accept only some models, and the rule that picks a model for a job that accepts several, load the models unevenly: a model that sits idle while others are full points at constraints (see constrained-idle above) or at the pick rule (--model-pick).".into(),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    }))
}

/// What crossing `crossed` of `levels` (lowest first) means, in words: `within one block`,
/// `across blocks, within one switch`, `across switches`.
pub fn crossed_label(levels: &[String], crossed: usize) -> String {
    let plural = ordo_core::words::plural;
    match (crossed, levels.get(crossed)) {
        (0, Some(l)) => format!("within one {l}"),
        (c, Some(l)) => format!("across {}, within one {l}", plural(&levels[c - 1])),
        (c, None) => format!("across {}", plural(levels.get(c.wrapping_sub(1)).map_or("unit", |s| s.as_str()))),
    }
}

/// Runs on a cluster with a network topology (`--topology`, the `gangs` workload): where gangs
/// landed (runs by levels crossed) and the GPU-hours spreading them cost, per policy (and
/// placement, `POLICY @PLACEMENT`). None without a topology.
fn spread_sections(r: &Report) -> Result<Vec<Section>, String> {
    let with: Vec<(usize, &String, &ordo_sim::metrics::SpreadStats)> = r
        .policies
        .iter()
        .enumerate()
        .filter_map(|(i, n)| r.metrics.get(n).and_then(|m| m.spread.as_ref()).map(|s| (i, n, s)))
        .collect();
    let Some(&(_, _, first)) = with.first() else { return Ok(Vec::new()) };
    let levels = &first.levels;
    let cats_n = levels.len() + 1;
    let cats: Vec<String> = (0..cats_n).map(|c| crossed_label(levels, c)).collect();
    let legend: Vec<LegendEntry> = with.iter().map(|&(i, n, _)| (n.clone(), i, emphasised(r, n))).collect();
    let runs = |s: &ordo_sim::metrics::SpreadStats| s.gang_runs_by_crossed.iter().sum::<u64>();
    let share = |part: u64, all: u64| if all > 0 { part as f64 / all as f64 } else { 0.0 };
    let rows_of = |cells: &dyn Fn(&String, &ordo_sim::metrics::SpreadStats) -> Vec<Cell>| -> Vec<Vec<Cell>> {
        with.iter()
            .map(|&(_, n, s)| {
                let mut row = vec![Cell::text(n)];
                row.extend(cells(n, s));
                row
            })
            .collect()
    };

    // Gang runs by levels crossed, as shares of each policy's gang runs.
    let bars: Vec<Line> = with
        .iter()
        .map(|&(i, n, s)| Line {
            name: n.clone(),
            color: i,
            points: (0..cats_n)
                .map(|c| (c as f64, 100.0 * share(s.gang_runs_by_crossed.get(c).copied().unwrap_or(0), runs(s))))
                .collect(),
            emphasis: emphasised(r, n),
        })
        .collect();
    let axes = Axes {
        x: "where a gang's nodes were",
        y: "gang runs (%)",
        x_fmt: &fmt0,
        y_fmt: &fmt_g,
        x_ticks: None,
        y_ticks: Some(vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]),
    };
    let mut head = heads(&["policy", "gang runs"]);
    head.extend(cats.iter().cloned());
    head.extend(heads(&["gangs", "gangs spread more than their size needs", "share of gangs"]));
    let table = Table {
        head,
        rows: rows_of(&|n, s| {
            let mut row = vec![Cell::text(thousands(runs(s) as f64))];
            for c in 0..cats_n {
                let v = s.gang_runs_by_crossed.get(c).copied().unwrap_or(0);
                row.push(f(format!("metrics.{n}.spread.gang_runs_by_crossed.{c}"), v as f64, 0));
            }
            row.push(f(format!("metrics.{n}.spread.gangs"), s.gangs as f64, 0));
            row.push(f(format!("metrics.{n}.spread.spread_gangs"), s.spread_gangs as f64, 0));
            row.push(Cell::text(pct1(share(s.spread_gangs, s.gangs))));
            row
        }),
    };
    let runs_section = Section {
        id: "spread",
        title: "Where gangs landed".into(),
        intro: format!(
            "Every run of a gang (a job on more than one node) by how far apart its nodes were in the cluster's network topology ({} levels, lowest first: {}): all in one {}, or spread over several units of one level or more. A run that crosses a level takes longer by that level's slowdown factor (docs/TOPOLOGY.md), so bars further left are better. Shares of each policy's gang runs; the table gives the counts (a preempted gang counts once per run). A gang larger than every unit of a level crosses that level wherever it goes: the last columns count the gangs that crossed more levels than their size needs.",
            levels.len(),
            levels.join(", "),
            levels.first().map_or("unit", |l| l.as_str()),
        ),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        legend: legend.clone(),
        table,
        notes: vec![],
    };

    // GPU-hours lost to spread placement.
    let bars: Vec<Line> = with
        .iter()
        .map(|&(i, n, s)| Line {
            name: n.clone(),
            color: i,
            points: vec![(0.0, s.lost_gpu_hours)],
            emphasis: emphasised(r, n),
        })
        .collect();
    let axes = Axes { x: "", y: "GPU-hours lost", x_fmt: &fmt0, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
    let table = Table {
        head: heads(&["policy", "GPU-hours lost to spread placement", "share of the GPU-hours of work", "mean JCT"]),
        rows: rows_of(&|n, s| {
            let m = &r.metrics[n];
            vec![
                gh(format!("metrics.{n}.spread.lost_gpu_hours"), s.lost_gpu_hours),
                Cell::text(pct1(share_f(s.lost_gpu_hours, m.total_gpu_hours))),
                d(format!("metrics.{n}.mean_jct_s"), m.mean_jct_s),
            ]
        }),
    };
    let least = with.iter().min_by(|a, b| a.2.lost_gpu_hours.total_cmp(&b.2.lost_gpu_hours).then(a.0.cmp(&b.0)));
    let most = with.iter().max_by(|a, b| a.2.lost_gpu_hours.total_cmp(&b.2.lost_gpu_hours).then(b.0.cmp(&a.0)));
    let mut notes = Vec::new();
    if let (Some(&(_, lo, ls)), Some(&(_, hi, hs))) = (least, most) {
        if lo != hi && hs.lost_gpu_hours > ls.lost_gpu_hours {
            notes.push(vec![
                Cell::text(format!("{lo} loses the least to spread placement, ")),
                gh(format!("metrics.{lo}.spread.lost_gpu_hours"), ls.lost_gpu_hours),
                Cell::text(" GPU-hours, against "),
                gh(format!("metrics.{hi}.spread.lost_gpu_hours"), hs.lost_gpu_hours),
                Cell::text(format!(" under {hi}.")),
            ]);
        }
    }
    let lost_section = Section {
        id: "spread-lost",
        title: "GPU-hours lost to spread placement".into(),
        intro: format!(
            "The GPU-hours gangs spent running slower because their nodes were spread: each gang's run time beyond what it would have taken in the least spread placement its size allows, times its GPUs. It is capacity the cluster spent on communication, beside the idle causes above. The unavoidable part (a gang larger than every {} crosses it wherever it goes) is not counted. Under topology placement (@topology), each gang was placed in the lowest level that held it; under the others, wherever GPUs were free.",
            levels.first().map_or("unit", |l| l.as_str()),
        ),
        svg: chart::bar_chart(&["lost to spread placement".to_string()], &bars, &axes)?,
        legend,
        table,
        notes,
    };
    Ok(vec![runs_section, lost_section])
}

fn share_f(part: f64, all: f64) -> f64 {
    if all > 0.0 {
        part / all
    } else {
        0.0
    }
}

fn owners_section(r: &Report) -> Result<Section, String> {
    let p = &r.policies;
    let o = &r.owners;
    let who = match o.by {
        OwnerBy::User => "user",
        OwnerBy::Group => "group",
    };
    let bars = policy_bars(r, |n| {
        o.names.iter().map(|name| o.by_policy[n][name].mean_bounded_slowdown.max(1.0).log10()).collect()
    });
    let top = bars.iter().flat_map(|l| l.points.iter().map(|q| q.1)).fold(0.0f64, f64::max);
    let pow10 = |v: f64| fmt_g(10f64.powf(v));
    let x_title = format!("{who} (largest share of GPU-hours first)");
    let axes = Axes {
        x: &x_title,
        y: "mean bounded slowdown (log scale)",
        x_fmt: &fmt0,
        y_fmt: &pow10,
        x_ticks: None,
        y_ticks: Some(chart::decade_ticks(0.0, top.max(1.0))),
    };
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
    t.rows.push(share_row("GPU-hours of work", &|n| gh(format!("owners.share.{n}.gpu_hours"), o.share[n].gpu_hours)));
    t.rows.push(share_row("share of the work", &|n| pct(format!("owners.share.{n}.share"), o.share[n].share)));
    for pol in p {
        let label = format!("slowdown under {pol}");
        t.rows.push(share_row(&label, &|n| {
            f(format!("owners.by_policy.{pol}.{n}.mean_bounded_slowdown"), o.by_policy[pol][n].mean_bounded_slowdown, 1)
        }));
    }
    let has_others = o.names.last().is_some_and(|x| x == "(others)");
    let shown = o.names.len() - usize::from(has_others);
    Ok(Section {
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
        legend: policy_legend(r),
        table: t,
        notes: vec![],
    })
}

/// The price in words: `at 2.10 EUR per GPU-hour`.
fn at_price(p: &crate::model::Price) -> String {
    format!("at {:.2} {} per GPU-hour", p.per_gpu_hour, p.currency)
}

/// What another order is worth, in sentences a manager can forward, each number keyed: the
/// equivalent GPUs (in money with a price), the idle capacity the order wins back, and apart
/// from it the idle capacity no order can change.
pub fn worth_lines(r: &Report) -> Vec<Vec<Cell>> {
    equivalent_line(r).into_iter().chain(saving_line(r)).chain(load_idle_line(r)).collect()
}

/// What the best policy saves against the baseline, in words with keyed numbers: the
/// idle-while-waiting GPU-hours (and money) per month; `None` when the baseline is the best.
pub fn saving_line(r: &Report) -> Option<Vec<Cell>> {
    if r.best == r.baseline {
        return None;
    }
    let c = &r.cost;
    let saving = c.saving_gpu_hours_per_month;
    let mut line = vec![Cell::text(format!("Busy GPUs: {} instead of {} leaves ", r.best, r.baseline))];
    if saving >= 0.0 {
        line.push(f("cost.saving_gpu_hours_per_month".into(), saving, 0));
        line.push(Cell::text(" fewer GPU-hours per month idle while jobs wait"));
    } else {
        line.push(Cell::text(thousands(-saving)));
        line.push(Cell::text(
            " more GPU-hours per month idle while jobs wait (it trades utilisation for completion time)",
        ));
    }
    match (&c.price, c.saving_per_month) {
        (Some(pr), Some(s)) if s >= 0.0 => {
            line.push(Cell::text(format!(", worth {} ", pr.currency)));
            line.push(f("cost.saving_per_month".into(), s, 0));
            line.push(Cell::text(format!(" per month {}", at_price(pr))));
        }
        (Some(pr), Some(s)) => {
            line.push(Cell::text(format!(", costing {} {} per month {}", pr.currency, thousands(-s), at_price(pr))));
        }
        _ => {}
    }
    line.push(Cell::text(format!(" (per 30-day month, scaled from {}).", c.basis)));
    if r.equivalent_gpus.as_ref().is_some_and(|e| e.extra_gpus.is_some()) {
        line.push(Cell::text(
            " This counts only the GPU-hours the order puts to work; what it does for completion times is what the equivalent GPUs above measure.",
        ));
    }
    if c.price.is_none() {
        line.push(Cell::text(
            " To see it in money, give a price: `--gpu-hour-price 2.10 --currency EUR` (any three-letter currency code).",
        ));
    }
    Some(line)
}

/// The idle capacity no order can change (no job waiting), apart from what the order changes.
pub fn load_idle_line(r: &Report) -> Option<Vec<Cell>> {
    let b = &r.baseline;
    let row = r.cost.per_policy.get(b)?;
    let mut line = vec![Cell::text(format!("Not the order's to change: under {b}, "))];
    line.push(f(format!("cost.per_policy.{b}.idle_empty_gpu_hours_per_month"), row.idle_empty_gpu_hours_per_month, 0));
    line.push(Cell::text(" GPU-hours per month"));
    if let (Some(pr), Some(m)) = (&r.cost.price, row.idle_empty_cost_per_month) {
        line.push(Cell::text(format!(" ({} ", pr.currency)));
        line.push(f(format!("cost.per_policy.{b}.idle_empty_cost_per_month"), m, 0));
        line.push(Cell::text(")"));
    }
    line.push(Cell::text(
        " sit idle with no job waiting: the load leaves them idle, and no order can put them to work.",
    ));
    Some(line)
}

/// The equivalent-GPU result in words, with the GPUs keyed (and in money per month with a
/// price); `None` when not asked for.
pub fn equivalent_line(r: &Report) -> Option<Vec<Cell>> {
    let e = r.equivalent_gpus.as_ref()?;
    let mut line = vec![Cell::text(e.message.clone())];
    if let Some(g) = e.extra_gpus {
        line.push(Cell::text(" Equivalent GPUs: "));
        line.push(f("equivalent_gpus.extra_gpus".into(), g as f64, 0));
        match (&r.cost.price, e.cost_per_month) {
            (Some(pr), Some(m)) => {
                line.push(Cell::text(format!(", worth {} ", pr.currency)));
                line.push(f("equivalent_gpus.cost_per_month".into(), m, 0));
                line.push(Cell::text(format!(
                    " per month {}: what {} GPUs would cost to give {} {}'s completion times (found on {} of history).",
                    at_price(pr),
                    thousands(g as f64),
                    e.baseline,
                    e.best,
                    crate::model::days(r.cost.basis_days)
                )));
            }
            _ => line.push(Cell::text(format!(" (found on {} of history).", crate::model::days(r.cost.basis_days)))),
        }
    }
    Some(line)
}

fn cost_section(r: &Report) -> Result<Section, String> {
    let p = &r.policies;
    let c = &r.cost;
    let (unit, money) = match &c.price {
        Some(pr) => (format!("{} per 30-day month", pr.currency), true),
        None => ("GPU-hours per 30-day month".to_string(), false),
    };
    // Only what the order changes is drawn: idle capacity with no job waiting (set by the
    // load) would dwarf it; it is in the table and the note below.
    let cats = vec!["idle: head-of-line blocking".to_string(), "idle: fragmentation".to_string()];
    let price = c.price.as_ref().map_or(1.0, |pr| pr.per_gpu_hour);
    let bars = policy_bars(r, |n| {
        let row = &c.per_policy[n];
        let k = if money { price } else { 1.0 };
        vec![row.head_of_line_gpu_hours_per_month * k, row.fragmentation_gpu_hours_per_month * k]
    });
    let axes = Axes { x: "", y: &unit, x_fmt: &fmt0, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
    let mut head = heads(&[
        "policy",
        "idle while jobs waited GPU-h / month (the order)",
        "of which head-of-line blocking",
        "of which fragmentation",
        "idle, no job waiting GPU-h / month (the load)",
        "idle GPU-h / month in all",
    ]);
    let constrained = c.per_policy.values().any(|row| row.constrained_gpu_hours_per_month > 0.0);
    if constrained {
        head.insert(5, "idle, constraints GPU-h / month (constrained-idle)".into());
    }
    if let Some(pr) = &c.price {
        head.push(format!("idle while jobs waited {} / month", pr.currency));
        head.push(format!("idle, no job waiting {} / month", pr.currency));
    }
    let t = per_policy(p, head, |n| {
        let row = &c.per_policy[n];
        let key = |k: &str| format!("cost.per_policy.{n}.{k}");
        let mut cells = vec![
            f(key("idle_wait_gpu_hours_per_month"), row.idle_wait_gpu_hours_per_month, 0),
            f(key("head_of_line_gpu_hours_per_month"), row.head_of_line_gpu_hours_per_month, 0),
            f(key("fragmentation_gpu_hours_per_month"), row.fragmentation_gpu_hours_per_month, 0),
            f(key("idle_empty_gpu_hours_per_month"), row.idle_empty_gpu_hours_per_month, 0),
            f(key("idle_gpu_hours_per_month"), row.idle_gpu_hours_per_month, 0),
        ];
        if constrained {
            cells.insert(4, f(key("constrained_gpu_hours_per_month"), row.constrained_gpu_hours_per_month, 0));
        }
        if let (Some(a), Some(b)) = (row.idle_wait_cost_per_month, row.idle_empty_cost_per_month) {
            cells.push(f(key("idle_wait_cost_per_month"), a, 0));
            cells.push(f(key("idle_empty_cost_per_month"), b, 0));
        }
        cells
    });
    Ok(Section {
        id: "cost",
        title: "What idle capacity costs".into(),
        intro: format!(
            "Per 30-day month, scaled from {}: GPU-hours idle while jobs waited, by cause (head-of-line blocking, fragmentation), which is what another order can win back, drawn in the chart; and apart from them, GPU-hours idle with no job waiting, which the load sets and no order can use (table only){}. Together, with restart overhead, they are (1 - utilisation) x GPUs x 720 h, utilisation as in the headline.",
            c.basis,
            if constrained {
                "; on this typed cluster also GPU-hours idle while the only waiting jobs that would fit refused those GPUs' model, memory or features (constrained-idle: the constraints hold them, table only)"
            } else {
                ""
            }
        ),
        svg: chart::bar_chart(&cats, &bars, &axes)?,
        legend: policy_legend(r),
        table: t,
        notes: saving_line(r).into_iter().chain(load_idle_line(r)).collect(),
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
        Line { name: format!("{} with more GPUs", e.baseline), color: bi, points: pts, emphasis: true },
        Line {
            name: format!("{} (target)", e.best),
            color: xi,
            points: vec![(0.0, e.target_mean_jct_s / 3600.0), (xmax, e.target_mean_jct_s / 3600.0)],
            emphasis: true,
        },
    ];
    let legend = lines.iter().map(|l| (l.name.clone(), l.color, true)).collect();
    let axes =
        Axes { x: "GPUs added", y: "mean JCT (hours)", x_fmt: &fmt0, y_fmt: &fmt_g, x_ticks: None, y_ticks: None };
    let mut t = Table { head: ["GPUs added", "nodes added", "mean JCT"].map(String::from).to_vec(), rows: vec![] };
    for (i, q) in e.probes.iter().enumerate() {
        t.rows.push(vec![
            f(format!("equivalent_gpus.probes.{i}.extra_gpus"), q.extra_gpus as f64, 0),
            f(format!("equivalent_gpus.probes.{i}.extra_nodes"), q.extra_nodes as f64, 0),
            d(format!("equivalent_gpus.probes.{i}.mean_jct_s"), q.mean_jct_s),
        ]);
    }
    Ok(Some(Section {
        id: "equivalent",
        title: "Equivalent GPUs".into(),
        intro: format!(
            "How many GPUs {} would need added (nodes like the cluster's most common one, {} each) to match {}'s mean JCT, found by simulating larger clusters: doubling, then a search between the last size that fell short and the first that reached it (at most {}).",
            e.baseline,
            count(e.node_gpus as usize, "GPU"),
            e.best,
            count(e.cap_extra_nodes as usize, "more node")
        ),
        svg: chart::line_chart(&lines, &axes)?,
        legend,
        table: t,
        notes: equivalent_line(r).into_iter().collect(),
    }))
}

/// The overview table at the top: one row per policy, the headline's figures.
pub fn overview(r: &Report) -> Table {
    let util = if r.metrics.values().any(|m| m.utilization_window.is_some()) {
        "utilisation (arrival window)"
    } else {
        "utilisation (makespan)"
    };
    let head = heads(&[
        "policy",
        "estimates",
        "mean JCT",
        "p99 wait",
        util,
        "head-of-line GPU-h",
        "fragmentation GPU-h",
        "fair (users)",
    ]);
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
            gh(format!("metrics.{n}.idle_causes.head_of_line_gpu_hours"), m.idle_causes.head_of_line_gpu_hours),
            gh(format!("metrics.{n}.idle_causes.fragmentation_gpu_hours"), m.idle_causes.fragmentation_gpu_hours),
            f(format!("metrics.{n}.fairness_users"), m.fairness_users, 2),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_read_as_round_values() {
        let labels: Vec<String> = chart::duration_ticks(0.0, 7.0).iter().map(|v| dur_tick(10f64.powf(*v))).collect();
        assert_eq!(labels, vec!["1s", "10s", "1m", "10m", "1h", "10h", "1d", "10d", "100d"]);
        assert_eq!((fmt_g(1700.0), fmt_g(2.5), fmt_g(0.25)), ("1,700".into(), "2.5".into(), "0.25".into()));
    }
}
