//! # Figures: throughput against a swept parameter, one line per engine
//!
//! [`plot_sweep`] draws the points of a `--sweep` as an SVG line chart with plotters' SVG
//! backend, which writes text as `<text>` elements, so no font files are needed. The x axis is
//! logarithmic when every x is positive and they span at least [`LOG_X_SPAN_MIN`]× (a sweep over
//! table sizes, or Salt Fig. 11's contention ratio); otherwise linear. Lines follow the engines
//! in the order they first appear in the points, each point marked with a dot.

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
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// One engine's line: `(x, throughput)` sorted by x.
struct Line {
    engine_index: usize,
    label: String,
    points: Vec<(f64, f64)>,
}

/// A line per engine position, in order of first appearance; an engine named twice in
/// `--compare` is labelled `name #position` (1-based).
fn lines_of(points: &[SweepPoint]) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for p in points {
        match lines.iter_mut().find(|l| l.engine_index == p.engine_index) {
            Some(l) => l.points.push((p.x, p.throughput)),
            None => lines.push(Line {
                engine_index: p.engine_index,
                label: p.engine.clone(),
                points: vec![(p.x, p.throughput)],
            }),
        }
    }
    let names: Vec<String> = lines.iter().map(|l| l.label.clone()).collect();
    for l in &mut lines {
        if names.iter().filter(|n| **n == l.label).count() > 1 {
            l.label = format!("{} #{}", l.label, l.engine_index + 1);
        }
        l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// Draws throughput (y) against each point's `x`, one line per engine, titled `title`, to the
/// SVG file `path`.
pub fn plot_sweep(points: &[SweepPoint], path: &Path, title: &str, x_label: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!points.is_empty(), "no points to draw");
    anyhow::ensure!(points.iter().all(|p| p.x.is_finite() && p.throughput.is_finite()), "a point is not finite");
    let lines = lines_of(points);
    anyhow::ensure!(lines.len() <= LINES_MAX, "{} engines, at most {LINES_MAX} lines per figure", lines.len());

    let (x_min, x_max) =
        points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.x), hi.max(p.x)));
    let y_max = points.iter().map(|p| p.throughput).fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };

    let root = SVGBackend::new(path, FIGURE_SIZE).into_drawing_area();
    root.fill(&WHITE).context("draw the background")?;
    if x_min > 0.0 && x_max / x_min >= LOG_X_SPAN_MIN {
        let x_range = (x_min / 1.5..x_max * 1.5).log_scale();
        draw(&root, x_range, y_top, &lines, title, &format!("{x_label}, log scale"))?;
    } else {
        let pad = if x_max > x_min { (x_max - x_min) * 0.05 } else { 0.5 };
        draw(&root, x_min - pad..x_max + pad, y_top, &lines, title, x_label)?;
    }
    root.present().with_context(|| format!("write {}", path.display()))
}

fn draw<X>(
    root: &DrawingArea<SVGBackend, Shift>,
    x_range: X,
    y_top: f64,
    lines: &[Line],
    title: &str,
    x_label: &str,
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
        .build_cartesian_2d(x_range, 0.0..y_top)
        .context("lay out the chart")?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("throughput (committed txn/s)")
        .light_line_style(BLACK.mix(0.04))
        .x_label_formatter(&|x| format_number(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
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
