//! PNG plots of each agent's share over time (`bench adapt --plot`).
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
