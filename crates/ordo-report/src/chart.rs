//! Charts as inline SVG strings, drawn with plotters' SVG backend: text is emitted as SVG
//! `<text>` (no font files needed). Each chart has axis titles with units and a legend column.

use plotters::coord::Shift;
use plotters::prelude::*;

/// One colour per policy, the same in every chart (cycled beyond 16 policies).
pub const PALETTE: [(u8, u8, u8); 16] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (0, 0, 128),
    (128, 0, 0),
    (0, 128, 128),
    (255, 187, 120),
    (152, 223, 138),
    (96, 96, 32),
];

/// The colour of the `i`-th policy.
pub fn color(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// The colour of the `i`-th policy as CSS `#rrggbb`.
pub fn css_color(i: usize) -> String {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// A named series of `(x, y)` points drawn in one colour.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend label.
    pub name: String,
    /// Colour index (policy index).
    pub color: usize,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// Axis titles (with units) and tick label formatters.
pub struct Axes<'a> {
    /// X axis title.
    pub x: &'a str,
    /// Y axis title.
    pub y: &'a str,
    /// X tick label.
    pub x_fmt: &'a dyn Fn(f64) -> String,
    /// Y tick label.
    pub y_fmt: &'a dyn Fn(f64) -> String,
}

impl std::fmt::Debug for Axes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Axes").field("x", &self.x).field("y", &self.y).finish()
    }
}

const SIZE: (u32, u32) = (1000, 400);
const PLOT_W: u32 = 800;
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

fn legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, names: &[(String, usize)]) -> Result<(), String> {
    let style = TextStyle::from((FONT, 16).into_font()).color(&BLACK);
    for (row, (name, c)) in names.iter().enumerate() {
        let y = 24 + row as i32 * 20;
        area.draw(&Rectangle::new([(10, y - 6), (34, y + 6)], color(*c).filled())).map_err(err)?;
        area.draw(&Text::new(name.clone(), (42, y - 7), style.clone())).map_err(err)?;
    }
    Ok(())
}

fn range(lo: f64, hi: f64) -> std::ops::Range<f64> {
    if hi > lo {
        lo..hi
    } else {
        lo..lo + 1.0
    }
}

/// Lines sharing axes.
pub fn line_chart(lines: &[Line], axes: &Axes) -> Result<String, String> {
    draw(lines, axes, None)
}

/// Grouped bars: one group per category, one bar per series within it (series points are
/// `(category index, value)`).
pub fn bar_chart(categories: &[String], series: &[Line], axes: &Axes) -> Result<String, String> {
    draw(series, axes, Some(categories))
}

/// Draws `series` as lines, or as grouped bars over `categories`, with a legend column.
fn draw(series: &[Line], axes: &Axes, categories: Option<&[String]>) -> Result<String, String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, side) = root.split_horizontally(PLOT_W);
        let pts = || series.iter().flat_map(|l| l.points.iter());
        let y1 = pts().fold(0.0f64, |a, p| a.max(p.1));
        let (x0, x1) = match categories {
            Some(c) => (0.0, c.len().max(1) as f64),
            None => match pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.0), b.max(p.0))) {
                (a, b) if a.is_finite() => (a, b),
                _ => (0.0, 1.0),
            },
        };
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(range(x0, x1), range(0.0, y1 * 1.06))
            .map_err(err)?;
        let (xf, yf) = (|v: &f64| (axes.x_fmt)(*v), |v: &f64| (axes.y_fmt)(*v));
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(axes.x)
            .y_desc(axes.y)
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .light_line_style(RGBColor(235, 235, 235));
        if categories.is_some() {
            mesh.disable_x_mesh().x_labels(0);
        }
        mesh.draw().map_err(err)?;
        match categories {
            None => {
                for l in series {
                    chart
                        .draw_series(LineSeries::new(l.points.iter().copied(), color(l.color).stroke_width(2)))
                        .map_err(err)?;
                }
            }
            Some(cats) => {
                let w = 0.8 / series.len().max(1) as f64;
                for (si, s) in series.iter().enumerate() {
                    let bars = s.points.iter().map(|&(c, v)| {
                        let x = c + 0.1 + si as f64 * w;
                        Rectangle::new([(x, 0.0), (x + w * 0.9, v)], color(s.color).filled())
                    });
                    chart.draw_series(bars).map_err(err)?;
                }
                // Category names under each group, placed in pixels on the plot area.
                use plotters::style::text_anchor::{HPos, Pos, VPos};
                let style =
                    TextStyle::from((FONT, 16).into_font()).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
                for (i, c) in cats.iter().enumerate() {
                    let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
                    plot.draw(&Text::new(c.clone(), (px, py + 6), style.clone())).map_err(err)?;
                }
            }
        }
        legend(&side, &series.iter().map(|l| (l.name.clone(), l.color)).collect::<Vec<_>>())?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_carries_its_text_without_fonts() {
        let f = |v: f64| format!("{v:.0}");
        let axes = Axes { x: "time (days)", y: "allocated GPUs", x_fmt: &f, y_fmt: &f };
        let lines = vec![Line { name: "sjf+easy".into(), color: 0, points: vec![(0.0, 1.0), (2.0, 4.0)] }];
        let svg = line_chart(&lines, &axes).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("allocated GPUs") && svg.contains("sjf+easy"), "{svg}");
        assert!(svg.contains("<polyline") && svg.contains("#1F77B4"), "{svg}");
        let svg = bar_chart(&["1 GPU".into(), "2-4 GPUs".into()], &lines, &axes).unwrap();
        assert!(svg.contains("\n2-4 GPUs\n") && svg.contains("<rect"), "{svg}");
    }
}
