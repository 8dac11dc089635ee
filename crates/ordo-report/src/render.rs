//! Renders a [`Report`] as one self-contained HTML page (inline CSS and SVG, no script, no
//! URL) or as Markdown. Both lay out the same sections (crate::sections), built from the report.

use crate::chart;
use crate::fmt::thousands;
use crate::model::Report;
use crate::sections::{overview, worth_lines, LegendEntry};
pub use crate::sections::{sections, Cell, Section, Table};
use ordo_core::words::count;
use std::fmt::Write as _;

/// docs/METRICS.md, the definitions every report carries.
pub const METRICS_MD: &str = include_str!("../../../docs/METRICS.md");

pub use crate::fmt::dur;

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

/// Which ordo made the report, and when: on every page (HTML top and bottom, Markdown top,
/// JSON `ordo_version` and `generated_at`).
pub fn made_line(r: &Report) -> String {
    let mut s = format!("Made by ordo {}", r.ordo_version);
    if !r.generated_at.is_empty() {
        s.push_str(&format!(" on {}", r.generated_at));
    }
    s.push('.');
    s
}

/// The "input" lines: where the jobs came from and the cluster.
fn input_lines(r: &Report) -> Vec<String> {
    let i = &r.input;
    let mut v = vec![format!("Input: {} ({}), {}.", i.source, i.format, count(i.jobs, "job"))];
    if let (Some(a), Some(b)) = (i.from_day, i.to_day) {
        v.push(format!("Window: days {a} to {b} of the trace."));
    }
    if i.dropped_zero_duration + i.dropped_outside_window > 0 {
        v.push(format!(
            "{} read; dropped {} with duration 0 and {} outside the window.",
            count(i.rows, "row"),
            thousands(i.dropped_zero_duration as f64),
            thousands(i.dropped_outside_window as f64)
        ));
    }
    if let Some(e) = &i.estimates {
        v.push(format!("Run-time estimates: {e}."));
    }
    v.push(format!(
        "Cluster: {} ({}), {} placement ({}); policies: {}.",
        r.cluster,
        count(r.gpus as usize, "GPU"),
        r.placement,
        i.cluster_from,
        r.policies.join(", ")
    ));
    if r.rejected_jobs > 0 {
        v.push(format!(
            "{} {} more GPUs than the cluster has and {} not run.",
            thousands(r.rejected_jobs as f64),
            if r.rejected_jobs == 1 { "job needs" } else { "jobs need" },
            if r.rejected_jobs == 1 { "was" } else { "were" }
        ));
    }
    let oracles: Vec<&str> = r.metrics.values().filter(|m| m.clairvoyant()).map(|m| m.policy.as_str()).collect();
    if !oracles.is_empty() {
        v.push(format!(
            "Oracle: the workload has no run-time estimates, so {} read each job's true run time: bounds, not policies to deploy.",
            oracles.join(", ")
        ));
    }
    v
}

/// A legend as HTML: one item per entry, its swatch and name kept together; long names wrap
/// inside the item instead of being cut.
pub(crate) fn legend_html(entries: &[LegendEntry]) -> String {
    let mut s = String::from("<div class=\"legend\">");
    for (name, c, bold) in entries {
        let class = if *bold { "item bold" } else { "item" };
        let _ = write!(
            s,
            "<span class=\"{class}\"><span class=\"swatch\" style=\"background:{}\"></span><span class=\"name\">{}</span></span>",
            chart::css_color(*c),
            esc(name)
        );
    }
    s.push_str("</div>");
    s
}

pub(crate) const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d1d1f;max-width:1240px;margin:24px auto;padding:0 16px;line-height:1.45}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:0 0 6px;border-bottom:2px solid #e3e3e3;padding-bottom:4px}
.headline{font-size:18px;background:#f1f6fd;border-left:4px solid #1f77b4;padding:10px 14px;margin:14px 0}
.worth{font-size:17px;font-weight:600;margin:6px 0}.warning{font-size:14px;background:#fff4e5;border-left:4px solid #e08a00;padding:6px 12px}
.meta{color:#555;font-size:14px;margin:2px 0}section,.definitions{margin:28px 0}.intro{color:#444;font-size:14px}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%}th,td{border-bottom:1px solid #e6e6e6;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f7f7f7;font-weight:600;white-space:normal;vertical-align:bottom}td:first-child,th:first-child{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:6em;max-width:26em}
.legend{font-size:13px;margin:6px 0 10px;display:flex;flex-wrap:wrap;gap:4px 16px}.legend .item{display:inline-flex;align-items:baseline;max-width:100%}
.legend .name{overflow-wrap:anywhere}.legend .bold{font-weight:700}
.swatch{display:inline-block;flex:none;width:12px;height:12px;border-radius:2px;margin-right:5px;position:relative;top:1px}
.note{font-size:14px}svg{width:100%;max-width:100%;height:auto;display:block}
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
    let _ = write!(s, "<p class=\"meta\" id=\"made\">{}</p>", esc(&made_line(r)));
    let _ = write!(s, "<p class=\"headline\" id=\"headline\">{}</p>", esc(&r.headline));
    // What it is worth first: equivalent GPUs, money, and apart what no order changes.
    for line in worth_lines(r) {
        s.push_str(&cells_html(&line, "<p class=\"worth\">", "span", "</p>"));
    }
    if let Some(w) = &r.cost.short_history {
        let _ = write!(s, "<p class=\"warning\" id=\"short-history\">Warning: {}</p>", esc(w));
    }
    for (i, l) in r.as_run.iter().flat_map(|a| &a.lines).enumerate() {
        let _ = write!(s, "<p class=\"worth\" id=\"as-run-{i}\">As run: {}</p>", esc(l));
    }
    let _ = write!(s, "<p class=\"meta\" id=\"load\">Load: {}.</p>", esc(&r.load.text));
    if let Some(w) = &r.load.warning {
        let _ = write!(s, "<p class=\"warning\">Warning: {}</p>", esc(w));
    }
    let _ = write!(s, "<p class=\"meta\">Bounds: {}.</p>", esc(&r.bounds));
    for l in &r.why.lines {
        let _ = write!(s, "<p class=\"meta\">Why: {}</p>", esc(l));
    }
    for l in input_lines(r) {
        let _ = write!(s, "<p class=\"meta\">{}</p>", esc(&l));
    }
    s.push_str(&legend_html(&crate::sections::policy_legend(r)));
    s.push_str(&table_html(&overview(r)));
    s.push_str("<p class=\"meta\">Contents: ");
    let links: Vec<String> = secs.iter().map(|x| format!("<a href=\"#{}\">{}</a>", x.id, esc(&x.title))).collect();
    s.push_str(&links.join(" · "));
    s.push_str(" · <a href=\"#definitions\">Definitions</a></p></header>\n");
    for x in &secs {
        let _ =
            write!(s, "<section id=\"{}\"><h2>{}</h2><p class=\"intro\">{}</p>", x.id, esc(&x.title), esc(&x.intro));
        s.push_str(&x.svg);
        s.push_str(&legend_html(&x.legend));
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
    let _ = write!(s, "<p class=\"meta\">{}</p></div>\n</body></html>\n", esc(&made_line(r)));
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
    let mut s = format!("# {}\n\n_{}_\n\n**{}**\n\n", r.title, made_line(r), r.headline);
    for line in worth_lines(r) {
        let _ = writeln!(s, "{}\n", line.iter().map(|c| c.text.as_str()).collect::<String>());
    }
    if let Some(w) = &r.cost.short_history {
        let _ = writeln!(s, "**Warning:** {w}\n");
    }
    for l in r.as_run.iter().flat_map(|a| &a.lines) {
        let _ = writeln!(s, "**As run:** {l}\n");
    }
    let _ = writeln!(s, "- Load: {}.", r.load.text);
    if let Some(w) = &r.load.warning {
        let _ = writeln!(s, "- **Warning:** {w}");
    }
    let _ = writeln!(s, "- Bounds: {}.", r.bounds);
    for l in &r.why.lines {
        let _ = writeln!(s, "- Why: {l}");
    }
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
