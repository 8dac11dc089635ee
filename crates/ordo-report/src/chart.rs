//! Charts as inline SVG strings, drawn with plotters' SVG backend: text is emitted as SVG
//! `<text>` (no font files needed). Each chart has axis titles with units and tick marks at
//! round values; the legend is HTML beside it (render.rs), so long policy names wrap there
//! instead of being cut inside the picture.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
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
    /// Drawn bold and opaque (the baseline and the best policy); the others thin and pale, so
    /// that many lines do not hide the two that matter.
    pub emphasis: bool,
}

/// Axis titles (with units), tick label formatters and, for log axes, the tick positions.
pub struct Axes<'a> {
    /// X axis title.
    pub x: &'a str,
    /// Y axis title.
    pub y: &'a str,
    /// X tick label.
    pub x_fmt: &'a dyn Fn(f64) -> String,
    /// Y tick label.
    pub y_fmt: &'a dyn Fn(f64) -> String,
    /// X ticks (axis values); `None`: round values chosen for the range.
    pub x_ticks: Option<Vec<f64>>,
    /// Y ticks; `None`: round values chosen for the range.
    pub y_ticks: Option<Vec<f64>>,
}

impl std::fmt::Debug for Axes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Axes").field("x", &self.x).field("y", &self.y).finish()
    }
}

const SIZE: (u32, u32) = (1000, 400);
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

fn range(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi)
    } else {
        (lo, lo + 1.0)
    }
}

/// A linear f64 axis whose ticks are given: plotters chooses its own for plain ranges, and
/// its `WithKeyPoints` combinator has no label formatter for `f64`.
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let frac = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (frac * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// About `n` ticks at round values (1, 2 or 5 times a power of ten) covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) || n == 0 {
        return vec![lo];
    }
    let raw = span / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= n as f64).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Log10 positions of round durations (1 s, 10 s, 1 min, 10 min, 1 h, 10 h, 1 day, 10 days,
/// 100 days) within `[lo, hi]` (log10 seconds).
pub fn duration_ticks(lo: f64, hi: f64) -> Vec<f64> {
    [1.0, 10.0, 60.0, 600.0, 3600.0, 36_000.0, 86_400.0, 864_000.0, 8_640_000.0]
        .iter()
        .map(|s: &f64| s.log10())
        .filter(|v| *v >= lo - 1e-9 && *v <= hi + 1e-9)
        .collect()
}

/// Log10 positions of powers of ten within `[lo, hi]` (log10 values).
pub fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.ceil() as i64, hi.floor() as i64);
    (a..=b).map(|k| k as f64).collect()
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

/// Draws `series` as lines, or as grouped bars over `categories`.
fn draw(series: &[Line], axes: &Axes, categories: Option<&[String]>) -> Result<String, String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let pts = || series.iter().flat_map(|l| l.points.iter());
        let y1 = pts().fold(0.0f64, |a, p| a.max(p.1));
        let (x0, x1) = match categories {
            Some(c) => (0.0, c.len().max(1) as f64),
            None => match pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.0), b.max(p.0))) {
                (a, b) if a.is_finite() => range(a, b),
                _ => (0.0, 1.0),
            },
        };
        let (y0, y1) = range(0.0, y1 * 1.06);
        let xt = match (&axes.x_ticks, categories) {
            (_, Some(_)) => vec![],
            (Some(t), None) => t.clone(),
            (None, None) => nice_ticks(x0, x1, 8),
        };
        let yt = axes.y_ticks.clone().unwrap_or_else(|| nice_ticks(y0, y1, 6));
        let mut chart = ChartBuilder::on(&root)
            .margin(14)
            .margin_right(28)
            .x_label_area_size(if categories.is_some() { 40 } else { 48 })
            .y_label_area_size(80)
            .build_cartesian_2d(Ticked { lo: x0, hi: x1, ticks: xt }, Ticked { lo: y0, hi: y1, ticks: yt })
            .map_err(err)?;
        let (xf, yf) = (|v: &f64| (axes.x_fmt)(*v), |v: &f64| (axes.y_fmt)(*v));
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(axes.x)
            .y_desc(axes.y)
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 17))
            .bold_line_style(RGBColor(225, 225, 225));
        if categories.is_some() {
            mesh.disable_x_mesh();
        }
        mesh.draw().map_err(err)?;
        match categories {
            None => {
                // Pale lines first, so the emphasised ones are drawn on top.
                for l in series.iter().filter(|l| !l.emphasis).chain(series.iter().filter(|l| l.emphasis)) {
                    let style = if l.emphasis {
                        color(l.color).stroke_width(3)
                    } else {
                        color(l.color).mix(0.45).stroke_width(1)
                    };
                    chart.draw_series(LineSeries::new(l.points.iter().copied(), style)).map_err(err)?;
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
                    root.draw(&Text::new(c.clone(), (px, py + 8), style.clone())).map_err(err)?;
                }
            }
        }
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
        let axes = Axes { x: "time (days)", y: "allocated GPUs", x_fmt: &f, y_fmt: &f, x_ticks: None, y_ticks: None };
        let lines = vec![
            Line { name: "sjf+easy".into(), color: 0, points: vec![(0.0, 1.0), (2.0, 4.0)], emphasis: true },
            Line { name: "sgf".into(), color: 1, points: vec![(0.0, 2.0), (2.0, 3.0)], emphasis: false },
        ];
        let svg = line_chart(&lines, &axes).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("allocated GPUs"), "{svg}");
        assert!(svg.contains("<polyline") && svg.contains("#1F77B4"), "{svg}");
        let svg = bar_chart(&["1 GPU".into(), "2-4 GPUs".into()], &lines, &axes).unwrap();
        assert!(svg.contains("\n2-4 GPUs\n") && svg.contains("<rect"), "{svg}");
    }

    #[test]
    fn ticks_fall_on_round_values() {
        assert_eq!(nice_ticks(0.0, 512.0, 6), vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0]);
        assert_eq!(nice_ticks(0.0, 9.3, 6), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
        let d = duration_ticks(0.5, 6.2);
        let secs: Vec<f64> = d.iter().map(|v| 10f64.powf(*v).round()).collect();
        assert_eq!(secs, vec![10.0, 60.0, 600.0, 3600.0, 36_000.0, 86_400.0, 864_000.0]);
        assert_eq!(decade_ticks(-0.1, 3.4), vec![0.0, 1.0, 2.0, 3.0]);
    }
}
