//! A page in the report's style for reports other than the cluster report (`ordo batch
//! report`): the same CSS, tables whose numbers carry their JSON path, bar charts, and Markdown.

use crate::chart::{self, Axes, Line};
use crate::render::{cells_html, esc, table_html, table_md, Cell, Table, CSS};
use std::fmt::Write as _;

/// Grouped bars: one group per category, one bar per series.
#[derive(Debug, Clone, Default)]
pub struct Bars {
    /// Category names (under each group).
    pub categories: Vec<String>,
    /// `(series name, one value per category)`, each series in its own colour.
    pub series: Vec<(String, Vec<f64>)>,
    /// Y axis title, with its unit.
    pub y_title: String,
}

/// One topic of a page: intro, an optional chart, its table of numbers and notes.
#[derive(Debug, Clone, Default)]
pub struct PageSection {
    /// Anchor id.
    pub id: String,
    /// Title.
    pub title: String,
    /// What it shows, in plain words.
    pub intro: String,
    /// Its chart.
    pub bars: Option<Bars>,
    /// Its numbers.
    pub table: Table,
    /// Sentences after the table (may carry numbers).
    pub notes: Vec<Vec<Cell>>,
}

/// A whole page.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Title.
    pub title: String,
    /// The one sentence that matters most.
    pub headline: String,
    /// Lines about the input.
    pub meta: Vec<String>,
    /// The sections, in order.
    pub sections: Vec<PageSection>,
}

fn tick(v: f64) -> String {
    let s = if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.4}") };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn bars_svg(b: &Bars) -> Result<String, String> {
    let series: Vec<Line> = b
        .series
        .iter()
        .enumerate()
        .map(|(i, (name, v))| Line {
            name: name.clone(),
            color: i,
            points: v.iter().enumerate().map(|(c, &y)| (c as f64, y)).collect(),
            emphasis: true,
        })
        .collect();
    let none = |_: f64| String::new();
    let axes = Axes { x: "", y: &b.y_title, x_fmt: &none, y_fmt: &tick, x_ticks: None, y_ticks: None };
    chart::bar_chart(&b.categories, &series, &axes)
}

impl Page {
    /// One self-contained HTML page: inline CSS and SVG, no script, no URL.
    pub fn html(&self) -> Result<String, String> {
        let mut s = String::with_capacity(64 * 1024);
        let _ = write!(
            s,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title><style>{CSS}</style></head><body>\n<header><h1>{0}</h1><p class=\"headline\" id=\"headline\">{1}</p>",
            esc(&self.title),
            esc(&self.headline)
        );
        for l in &self.meta {
            let _ = write!(s, "<p class=\"meta\">{}</p>", esc(l));
        }
        let links: Vec<String> =
            self.sections.iter().map(|x| format!("<a href=\"#{}\">{}</a>", esc(&x.id), esc(&x.title))).collect();
        let _ = writeln!(s, "<p class=\"meta\">Contents: {}</p></header>", links.join(" · "));
        for x in &self.sections {
            let _ = write!(
                s,
                "<section id=\"{}\"><h2>{}</h2><p class=\"intro\">{}</p>",
                esc(&x.id),
                esc(&x.title),
                esc(&x.intro)
            );
            if let Some(b) = &x.bars {
                s.push_str(&bars_svg(b)?);
                // Each series' colour, as bars_svg draws it (series i in colour i).
                let legend: Vec<_> =
                    b.series.iter().enumerate().map(|(i, (name, _))| (name.clone(), i, false)).collect();
                s.push_str(&crate::render::legend_html(&legend));
            }
            s.push_str(&table_html(&x.table));
            for n in &x.notes {
                s.push_str(&cells_html(n, "<p class=\"note\">", "span", "</p>"));
            }
            s.push_str("</section>\n");
        }
        s.push_str("<p class=\"meta\">Made by ordo.</p>\n</body></html>\n");
        Ok(s)
    }

    /// The same content as Markdown (tables and notes; the charts are only in the HTML).
    pub fn markdown(&self) -> String {
        let mut s = format!("# {}\n\n**{}**\n\n", self.title, self.headline);
        for l in &self.meta {
            let _ = writeln!(s, "- {l}");
        }
        for x in &self.sections {
            let _ = write!(s, "\n## {}\n\n{}\n\n", x.title, x.intro);
            s.push_str(&table_md(&x.table));
            for n in &x.notes {
                let _ = writeln!(s, "\n{}", n.iter().map(|c| c.text.as_str()).collect::<String>());
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_carries_its_numbers_and_chart() {
        let cell = |t: &str, k: Option<(&str, f64)>| Cell { text: t.into(), key: k.map(|(k, v)| (k.to_string(), v)) };
        let p = Page {
            title: "Batch <costs>".into(),
            headline: "half price".into(),
            meta: vec!["12 requests".into()],
            sections: vec![PageSection {
                id: "cost".into(),
                title: "Cost".into(),
                intro: "per client".into(),
                bars: Some(Bars {
                    categories: vec!["acme".into()],
                    series: vec![("live".into(), vec![2.0]), ("batch".into(), vec![1.0])],
                    y_title: "USD".into(),
                }),
                table: Table {
                    head: vec!["client".into(), "live".into()],
                    rows: vec![vec![cell("acme", None), cell("2.00", Some(("by_client.0.cost.live", 2.0)))]],
                },
                notes: vec![vec![cell("saves ", None), cell("1.00", Some(("saving", 1.0)))]],
            }],
        };
        let h = p.html().expect("html");
        assert!(h.contains("<title>Batch &lt;costs&gt;</title>") && h.contains("<svg") && h.contains(">acme<"), "{h}");
        assert!(h.contains("data-key=\"by_client.0.cost.live\" data-value=\"2\""), "{h}");
        // The chart's legend names each series beside its colour.
        assert!(h.contains("class=\"legend\"") && h.contains(">live</span>") && h.contains(">batch</span>"), "{h}");
        let m = p.markdown();
        assert!(m.contains("| client | live |") && m.contains("saves 1.00"), "{m}");
    }
}
