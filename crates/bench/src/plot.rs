//! # Figures: throughput against a swept parameter, one line per engine
//!
//! [`plot_sweep`] draws the points of a `--sweep` as an SVG line chart with plotters' SVG
//! backend, which writes text as `<text>` elements, so no font files are needed. The x axis is
//! logarithmic when every x is positive and they span at least [`LOG_X_SPAN_MIN`]× (a sweep over
//! table sizes, or Salt Fig. 11's contention ratio); otherwise linear. Lines follow the engines
//! in the order they first appear in the points, each point marked with a dot.
//! [`plot_latency_throughput`] draws a `--sweep clients=...` the way Salt Figs. 7–8 do:
//! median latency against throughput, a point per client count. Both go through
//! [`plot_series`], which draws any labelled `(x, y)` lines and is what the Omid oracle's
//! figures (throughput, latency, piggyback bytes, recovery time) use.

use crate::sweep::{format_number, SweepPoint};
use anyhow::Context as _;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Figure size in pixels.
pub const FIGURE_SIZE: (u32, u32) = (800, 500);
/// Smallest ratio of the largest to the smallest x drawn on a log scale.
pub const LOG_X_SPAN_MIN: f64 = 50.0;
/// Most engines (lines) one figure draws.
pub const LINES_MAX: usize = 16;

/// Line colours, one per engine in order of appearance (repeating past the end).
const COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 0),
    RGBColor(0, 0, 128),
];

/// One engine's line: `(x, throughput)` sorted by x.
struct Line {
    engine_index: usize,
    label: String,
    points: Vec<(f64, f64)>,
}

/// A line per engine position, in order of first appearance; an engine named twice in
/// `--compare` is labelled `name #position` (1-based). Points are `(x, throughput)`, sorted by x.
fn lines_of(points: &[SweepPoint]) -> Vec<Line> {
    lines_by(points, |p| (p.x, p.throughput), true)
}

/// [`lines_of`] with the point coordinates `xy`; without `sort_by_x` each line keeps the
/// sweep's order (the swept value's).
fn lines_by(points: &[SweepPoint], xy: impl Fn(&SweepPoint) -> (f64, f64), sort_by_x: bool) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for p in points {
        match lines.iter_mut().find(|l| l.engine_index == p.engine_index) {
            Some(l) => l.points.push(xy(p)),
            None => lines.push(Line { engine_index: p.engine_index, label: p.engine.clone(), points: vec![xy(p)] }),
        }
    }
    let names: Vec<String> = lines.iter().map(|l| l.label.clone()).collect();
    for l in &mut lines {
        if names.iter().filter(|n| **n == l.label).count() > 1 {
            l.label = format!("{} #{}", l.label, l.engine_index + 1);
        }
        if sort_by_x {
            l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
    lines
}

/// Draws median latency (y, ms) against throughput (x), one curve per engine with a point per
/// swept value in sweep order (a `--sweep clients=...`: Salt Figs. 7–8), to the SVG `path`.
pub fn plot_latency_throughput(points: &[SweepPoint], path: &Path, title: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!points.is_empty(), "no points to draw");
    let mut sorted: Vec<&SweepPoint> = points.iter().collect();
    sorted.sort_by(|a, b| a.value.total_cmp(&b.value));
    let owned: Vec<SweepPoint> = sorted.into_iter().cloned().collect();
    let lines = lines_by(&owned, |p| (p.throughput, p.p50_us as f64 / 1000.0), false);
    let series: Vec<Series> = lines.into_iter().map(|l| Series { label: l.label, points: l.points }).collect();
    let chart = Chart {
        title,
        x_label: "throughput (committed txn/s)",
        y_label: "median latency (ms)",
        x_scale: XScale::FromZero,
        y_decimals: 1,
    };
    plot_series(&series, path, &chart)
}

/// Draws throughput (y) against each point's `x`, one line per engine, titled `title`, to the
/// SVG file `path`.
pub fn plot_sweep(points: &[SweepPoint], path: &Path, title: &str, x_label: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!points.is_empty(), "no points to draw");
    let series: Vec<Series> =
        lines_of(points).into_iter().map(|l| Series { label: l.label, points: l.points }).collect();
    let chart = Chart { title, x_label, y_label: THROUGHPUT_LABEL, x_scale: XScale::Auto, y_decimals: 0 };
    plot_series(&series, path, &chart)
}

/// One labelled line of a figure: `(x, y)` points, drawn in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    /// Logarithmic when every x is positive and they span at least [`LOG_X_SPAN_MIN`]×, else
    /// linear around the points.
    Auto,
    /// Linear from 0 (latency against throughput).
    FromZero,
}

/// Titles and axes of a figure drawn by [`plot_series`].
#[derive(Clone, Copy, Debug)]
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_scale: XScale,
    /// Decimals of the y tick labels.
    pub y_decimals: usize,
}

/// Draws `series` (one line each, y from 0) to the SVG file `path`: the figure code every
/// benchmark shares (sweeps, latency-throughput curves, the Omid oracle's figures).
pub fn plot_series(series: &[Series], path: &Path, chart: &Chart<'_>) -> anyhow::Result<()> {
    anyhow::ensure!(series.iter().any(|s| !s.points.is_empty()), "no points to draw");
    anyhow::ensure!(series.len() <= LINES_MAX, "{} lines, at most {LINES_MAX} per figure", series.len());
    let all = || series.iter().flat_map(|s| s.points.iter());
    anyhow::ensure!(all().all(|p| p.0.is_finite() && p.1.is_finite()), "a point is not finite");
    let (x_min, x_max) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let y_max = all().map(|p| p.1).fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let decimals = chart.y_decimals;
    let y_format = move |y: &f64| format!("{y:.decimals$}");

    let root = SVGBackend::new(path, FIGURE_SIZE).into_drawing_area();
    root.fill(&WHITE).context("draw the background")?;
    match chart.x_scale {
        XScale::FromZero => {
            let x_top = if x_max > 0.0 { x_max * 1.1 } else { 1.0 };
            let axes = Axes { x_label: chart.x_label, y_label: chart.y_label, y_top };
            draw_lines(&root, 0.0..x_top, &axes, series, chart.title, &y_format)?;
        }
        XScale::Auto if x_min > 0.0 && x_max / x_min >= LOG_X_SPAN_MIN => {
            let x_range = (x_min / 1.5..x_max * 1.5).log_scale();
            let x_label = format!("{}, log scale", chart.x_label);
            let axes = Axes { x_label: &x_label, y_label: chart.y_label, y_top };
            draw_lines(&root, x_range, &axes, series, chart.title, &y_format)?;
        }
        XScale::Auto => {
            let pad = if x_max > x_min { (x_max - x_min) * 0.05 } else { 0.5 };
            let axes = Axes { x_label: chart.x_label, y_label: chart.y_label, y_top };
            draw_lines(&root, x_min - pad..x_max + pad, &axes, series, chart.title, &y_format)?;
        }
    }
    root.present().with_context(|| format!("write {}", path.display()))
}

const THROUGHPUT_LABEL: &str = "throughput (committed txn/s)";

/// Axis labels and the top of the y range (which starts at 0).
struct Axes<'a> {
    x_label: &'a str,
    y_label: &'a str,
    y_top: f64,
}

fn draw_lines<X>(
    root: &DrawingArea<SVGBackend, Shift>,
    x_range: X,
    axes: &Axes<'_>,
    lines: &[Series],
    title: &str,
    y_format: &dyn Fn(&f64) -> String,
) -> anyhow::Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, 0.0..axes.y_top)
        .context("lay out the chart")?;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .light_line_style(BLACK.mix(0.04))
        .x_label_formatter(&|x| format_number(*x))
        .y_label_formatter(y_format)
        .draw()
        .context("draw the axes")?;
    for (i, line) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), color.stroke_width(2)))
            .context("draw a line")?
            .label(line.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(line.points.iter().map(|&p| Circle::new(p, 3, color.filled()))).context("draw the points")?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .context("draw the legend")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_draw_to_svg_and_bad_points_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.svg");
        let chart = Chart { title: "t", x_label: "x", y_label: "y", x_scale: XScale::Auto, y_decimals: 0 };
        let line = |label: &str, points: Vec<(f64, f64)>| Series { label: label.into(), points };
        let ok = [line("a", vec![(1.0, 2.0), (512.0, 3.0)]), line("b", vec![(2.0, 1.0)])];
        plot_series(&ok, &path, &chart).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("log scale"), "a 512x span is drawn on a log axis");
        let from_zero = Chart { x_scale: XScale::FromZero, ..chart };
        plot_series(&ok, &path, &from_zero).unwrap();
        assert!(plot_series(&[], &path, &chart).is_err());
        assert!(plot_series(&[line("a", vec![])], &path, &chart).is_err());
        assert!(plot_series(&[line("a", vec![(f64::NAN, 1.0)])], &path, &chart).is_err());
        let many: Vec<Series> = (0..=LINES_MAX).map(|i| line(&i.to_string(), vec![(1.0, 1.0)])).collect();
        assert!(plot_series(&many, &path, &chart).is_err());
    }
}
