//! PNG plots: each agent's share over time (`bench adapt --plot`), and cost curves (`bench scale`).
//!
//! plotters is built without its `ttf` feature, whose font-kit links fontconfig and freetype;
//! text goes through pure-Rust `ab_glyph` with a TrueType file read at run time (DejaVu Sans,
//! Debian's `fonts-dejavu-core`, or `SEMAQ_PLOT_FONT`). Without one the plot has no text.

use std::fmt::Display;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// Font files tried, in order, after `SEMAQ_PLOT_FONT`.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// Line colours (matplotlib's tab10), one per series.
const COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(255, 127, 14)];
/// Pixels per panel.
const PANEL_SIZE: (u32, u32) = (1000, 400);

/// One chart: named series of percentages per second (`None` where a second had no data).
pub struct Panel {
    /// The caption.
    pub title: String,
    /// (name, value per second) for each line.
    pub series: Vec<(String, Vec<Option<f64>>)>,
    /// The fault's window in seconds, shaded.
    pub fault: (f64, f64),
    /// Horizontal guide lines, in percent.
    pub thresholds: Vec<f64>,
}

fn failed(error: impl Display) -> anyhow::Error {
    anyhow!("cannot draw the plot: {error}")
}

/// Registers a font for plotters' "sans-serif" once; false when none could be read.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let configured = std::env::var("SEMAQ_PLOT_FONT").ok();
        let candidates = configured.iter().map(String::as_str).chain(FONT_FILES.iter().copied());
        candidates.filter_map(|path| std::fs::read(path).ok()).any(|bytes| {
            // Leaked once per process: plotters keeps registered fonts for the program's life.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// Draws the panels one above the other into a PNG at `path`.
pub fn share_chart(path: &Path, panels: &[Panel]) -> Result<()> {
    let text = font_ready();
    let height = PANEL_SIZE.1 * u32::try_from(panels.len().max(1)).unwrap_or(1);
    let root = BitMapBackend::new(path, (PANEL_SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    for (area, panel) in root.split_evenly((panels.len().max(1), 1)).iter().zip(panels) {
        draw_panel(area, panel, text)?;
    }
    root.present().map_err(failed)?;
    if !text {
        eprintln!("semaq: warning: no TrueType font found (set SEMAQ_PLOT_FONT): the plot has no labels");
    }
    Ok(())
}

fn draw_panel(area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>, panel: &Panel, text: bool) -> Result<()> {
    let seconds = panel.series.iter().map(|(_, values)| values.len()).max().unwrap_or(1).max(1) as f64;
    let mut builder = ChartBuilder::on(area);
    builder.margin(12).x_label_area_size(if text { 36 } else { 0 }).y_label_area_size(if text { 52 } else { 0 });
    if text {
        builder.caption(&panel.title, ("sans-serif", 20));
    }
    let mut chart = builder.build_cartesian_2d(0f64..seconds, 0f64..100f64).map_err(failed)?;
    let mut mesh = chart.configure_mesh();
    // No minor grid: the thresholds and the fault window should stand out.
    mesh.light_line_style(WHITE);
    if text {
        mesh.x_desc("seconds").y_desc("share of replies (%)");
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(failed)?;
    for threshold in &panel.thresholds {
        let guide = LineSeries::new([(0.0, *threshold), (seconds, *threshold)], BLACK.mix(0.5));
        chart.draw_series(guide).map_err(failed)?;
    }
    let fault = Rectangle::new([(panel.fault.0, 0.0), (panel.fault.1, 100.0)], RED.mix(0.08).filled());
    chart.draw_series(std::iter::once(fault)).map_err(failed)?;
    for (index, (name, values)) in panel.series.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        // A point sits at the middle of its second.
        let points = values.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s as f64 + 0.5, v)));
        let drawn = chart.draw_series(LineSeries::new(points, color.stroke_width(2))).map_err(failed)?;
        if text {
            drawn.label(name.as_str()).legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if text {
        let style = ("sans-serif", 14).into_font().color(&RED);
        let label = Text::new("fault", (panel.fault.0 + 0.3, 97.0), style);
        chart.draw_series(std::iter::once(label)).map_err(failed)?;
        let mut labels = chart.configure_series_labels();
        labels.background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight);
        labels.draw().map_err(failed)?;
    }
    Ok(())
}

/// One cost curve: how a figure changes with a size, one line per server.
pub struct Curve {
    /// The caption.
    pub title: String,
    /// What the x axis counts (drawn on a log scale).
    pub x_desc: String,
    /// What the y axis measures.
    pub y_desc: String,
    /// (name, points (x, y)) for each line; x must be positive.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Draws a cost curve into a PNG at `path`: log-scaled x, linear y from zero.
pub fn curve_chart(path: &Path, curve: &Curve) -> Result<()> {
    let text = font_ready();
    let points = || curve.series.iter().flat_map(|(_, points)| points.iter().copied());
    let x_max = points().map(|(x, _)| x).fold(1.0f64, f64::max);
    let x_min = points().map(|(x, _)| x).filter(|x| *x > 0.0).fold(x_max, f64::min);
    // A little room above the highest point, so the legend does not sit on it.
    let y_max = points().map(|(_, y)| y).fold(0.0f64, f64::max).max(f64::MIN_POSITIVE) * 1.25;
    let root = BitMapBackend::new(path, PANEL_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(12).x_label_area_size(if text { 36 } else { 0 }).y_label_area_size(if text { 72 } else { 0 });
    if text {
        builder.caption(&curve.title, ("sans-serif", 20));
    }
    let x_range = (x_min * 0.8..x_max * 1.25).log_scale();
    let mut chart = builder.build_cartesian_2d(x_range, 0f64..y_max).map_err(failed)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE);
    if text {
        mesh.x_desc(curve.x_desc.as_str()).y_desc(curve.y_desc.as_str());
        mesh.x_label_formatter(&|x| short_number(*x)).y_label_formatter(&|y| short_number(*y));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(failed)?;
    for (index, (name, points)) in curve.series.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let valid = points.iter().copied().filter(|(x, y)| *x > 0.0 && y.is_finite());
        let drawn = chart.draw_series(LineSeries::new(valid.clone(), color.stroke_width(2))).map_err(failed)?;
        if text {
            drawn.label(name.as_str()).legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
        chart.draw_series(valid.map(|point| Circle::new(point, 4, color.filled()))).map_err(failed)?;
    }
    if text {
        let mut labels = chart.configure_series_labels();
        labels.background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight);
        labels.draw().map_err(failed)?;
    }
    root.present().map_err(failed)?;
    if !text {
        eprintln!("semaq: warning: no TrueType font found (set SEMAQ_PLOT_FONT): the plot has no labels");
    }
    Ok(())
}

/// 1500 → "1.5k", 2000000 → "2M": axis labels that stay short.
fn short_number(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let text = format!("{scaled:.2}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(2_000_000.0), "2M");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(100.0), "100");
    }
}
