//! The picture of tollgate's Grafana dashboard (`docs/grafana-dashboard.json`) drawn
//! from the series a real Prometheus recorded (`scripts/prometheus-check` writes them):
//! requests per second by outcome, the share rejected against the quota's, and the
//! store's latency.
//!
//! The series file has one sample per line, tab-separated: seconds since the start,
//! the series' name, its value. `#` starts a comment.
//!
//! ```
//! use tollgate_lab::dashboard::Series;
//! let series = Series::parse("# t\tseries\tvalue\n0\tallowed\t20\n1\tallowed\t19.5\n")?;
//! assert_eq!(series[0].name, "allowed");
//! assert_eq!(series[0].points, [(0.0, 20.0), (1.0, 19.5)]);
//! # Ok::<(), tollgate_lab::LabError>(())
//! ```

use std::path::Path;

use plotters::prelude::*;

use super::LabError;
use super::plot::{FAMILY, colour, font_ready, plot_error};

/// One series over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name in the file (`allowed`, `rejected`, `shadow_rejected`, `share`,
    /// `expected_share`, `p50_ms`, `p99_ms`).
    pub name: String,
    /// `(seconds, value)`, in the file's order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// Reads a series file (see the module docs).
    pub fn parse(text: &str) -> Result<Vec<Series>, LabError> {
        let mut all: Vec<Series> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || LabError::Plot(format!("line {}: expected t, series, value", number + 1));
            let mut cells = line.split('\t');
            let (Some(t), Some(name), Some(value)) = (cells.next(), cells.next(), cells.next())
            else {
                return Err(bad());
            };
            let point = (
                t.parse().map_err(|_| bad())?,
                value.parse().map_err(|_| bad())?,
            );
            match all.iter_mut().find(|s| s.name == name) {
                Some(series) => series.points.push(point),
                None => all.push(Series {
                    name: name.to_owned(),
                    points: vec![point],
                }),
            }
        }
        Ok(all)
    }
}

/// The panels: title, y axis, and the series each draws.
const PANELS: [(&str, &str, &[&str]); 3] = [
    (
        "Requests per second, by outcome",
        "requests / s",
        &["allowed", "rejected", "shadow_rejected"],
    ),
    (
        "Share rejected (api), against 1 - quota / offered",
        "share",
        &["share", "expected_share"],
    ),
    ("Store call latency (decide)", "ms", &["p50_ms", "p99_ms"]),
];

/// Draws the three panels of `series` into `png`, one above the other.
pub fn draw(series: &[Series], png: &Path) -> Result<(), LabError> {
    font_ready()?;
    let root = BitMapBackend::new(png, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let end = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(t, _)| t))
        .fold(1.0, f64::max);
    for (area, (title, unit, names)) in root.split_evenly((3, 1)).iter().zip(PANELS) {
        let lines: Vec<&Series> = names
            .iter()
            .filter_map(|name| series.iter().find(|s| s.name == *name))
            .collect();
        let top = lines
            .iter()
            .flat_map(|s| s.points.iter().map(|&(_, y)| y))
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FAMILY, 20))
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..end, 0f64..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(unit)
            .label_style((FAMILY, 13))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(plot_error)?;
        for (i, line) in lines.into_iter().enumerate() {
            let c = colour(i);
            let style = if line.name.starts_with("expected") {
                RGBColor(200, 0, 0).stroke_width(1)
            } else {
                c.stroke_width(2)
            };
            chart
                .draw_series(LineSeries::new(line.points.iter().copied(), style))
                .map_err(plot_error)?
                .label(line.name.replace('_', " "))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .draw()
            .map_err(plot_error)?;
    }
    root.present().map_err(plot_error)
}
