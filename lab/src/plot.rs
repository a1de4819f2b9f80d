//! Charts of a [`Report`], drawn with `plotters` as PNG and SVG.
//!
//! Text is drawn with an embedded subset of `DejaVu Sans` (printable ASCII and a few
//! symbols; licence in `lab/src/font/LICENSE-DejaVu.txt`), so no system font or
//! fontconfig is needed.
//!
//! ```no_run
//! use tollgate_lab::{Lab, plot};
//! let report = Lab::default().run()?;
//! let written = plot::write_all(&report, std::path::Path::new("target/lab"))?;
//! assert_eq!(written.len(), 2 * (report.patterns.len() + 1));
//! # Ok::<(), tollgate_lab::LabError>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use super::table::label;
use super::{LabError, LeaseReport, PatternReport, Report, admitted_times, window_count};

/// `DejaVu Sans`, cut down to what the charts print.
const FONT: &[u8] = include_bytes!("font/DejaVuSans-subset.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

/// The ideal limiter's line.
const IDEAL: RGBColor = RGBColor(190, 190, 190);
/// One colour per algorithm, in the lab's order: the Okabe–Ito palette, readable by
/// colour-blind readers, black for the exact log (drawn over the ideal grey).
const COLOURS: [RGBColor; 7] = [
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(0, 0, 0),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
];

pub(crate) fn colour(index: usize) -> RGBColor {
    COLOURS[index % COLOURS.len()]
}

pub(crate) fn font_ready() -> Result<(), LabError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    if *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok()) {
        Ok(())
    } else {
        Err(LabError::Plot(
            "the embedded font could not be read".to_owned(),
        ))
    }
}

/// Writes every chart of `report` into `dir` (created if needed) as PNG and SVG: one
/// per pattern (`<pattern>.png`, `.svg`) and `summary.png`/`.svg`. Returns the paths.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, LabError> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for pattern in &report.patterns {
        written.extend(pattern_chart(report, pattern, dir, pattern.pattern.name())?);
    }
    written.extend(summary_chart(report, dir, "summary")?);
    Ok(written)
}

/// Draws one pattern: the ideal limiter's admissions in the trailing window of length
/// `P` (grey) and each algorithm's, over time, with the quota as a dashed line. For a
/// pattern with several clients, the busiest client (key 0) is drawn. Writes
/// `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
pub fn pattern_chart(
    report: &Report,
    pattern: &PatternReport,
    dir: &Path,
    stem: &str,
) -> Result<Vec<PathBuf>, LabError> {
    font_ready()?;
    let (png, svg) = files(dir, stem);
    let size = (1100, 560);
    draw_pattern(
        report,
        pattern,
        &BitMapBackend::new(&png, size).into_drawing_area(),
    )?;
    draw_pattern(
        report,
        pattern,
        &SVGBackend::new(&svg, size).into_drawing_area(),
    )?;
    Ok(vec![png, svg])
}

/// Draws the summary: wrongly admitted and wrongly rejected shares per algorithm,
/// averaged over the patterns. Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
pub fn summary_chart(report: &Report, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, LabError> {
    font_ready()?;
    let (png, svg) = files(dir, stem);
    let size = (1100, 480);
    draw_summary(report, &BitMapBackend::new(&png, size).into_drawing_area())?;
    draw_summary(report, &SVGBackend::new(&svg, size).into_drawing_area())?;
    Ok(vec![png, svg])
}

/// Not `Path::with_extension`: stems like `steady-0.5x` contain dots.
fn files(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{stem}.png")),
        dir.join(format!("{stem}.svg")),
    )
}

pub(crate) fn plot_error(e: impl std::fmt::Display) -> LabError {
    LabError::Plot(e.to_string())
}

/// Seconds on the x axis, sampled every `P/100`.
fn series(times: &[u64], period_us: u64, duration_us: u64) -> Vec<(f64, f64)> {
    let step = (period_us / 100).max(1);
    (0..=duration_us / step)
        .map(|i| {
            let t = i * step;
            (t as f64 / 1e6, window_count(times, t, period_us) as f64)
        })
        .collect()
}

fn draw_pattern<DB: DrawingBackend>(
    report: &Report,
    pattern: &PatternReport,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), LabError> {
    let limit = report.quota.limit() as f64;
    let period = u64::try_from(report.quota.period().as_micros()).unwrap_or(u64::MAX);
    let duration = pattern.pattern.duration_us();
    let busiest = |admitted: &[bool]| {
        admitted_times(&pattern.pattern, admitted)
            .into_iter()
            .next()
            .unwrap_or_default()
    };
    let ideal = series(&busiest(&pattern.ideal), period, duration);
    let lines: Vec<(String, Vec<(f64, f64)>)> = pattern
        .results
        .iter()
        .map(|(trace, _)| {
            (
                label(trace.algorithm),
                series(&busiest(&trace.admitted), period, duration),
            )
        })
        .collect();
    let top = lines
        .iter()
        .flat_map(|(_, s)| s.iter().map(|&(_, y)| y))
        .fold(limit * 1.2, f64::max)
        * 1.08;

    root.fill(&WHITE).map_err(plot_error)?;
    let who = if pattern.pattern.keys() > 1 {
        ", busiest client"
    } else {
        ""
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "{}: admitted in the last {} ({}{who})",
                pattern.pattern.name(),
                humane(report.quota.period()),
                report.quota
            ),
            (FAMILY, 22),
        )
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..duration as f64 / 1e6, 0f64..top)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("admitted in the trailing window")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FAMILY, 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(plot_error)?;
    chart
        .draw_series(LineSeries::new(ideal, IDEAL.stroke_width(7)))
        .map_err(plot_error)?
        .label("ideal sliding window")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], IDEAL.stroke_width(7)));
    let end = duration as f64 / 1e6;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.0, limit), (end, limit)],
            6,
            4,
            RGBColor(200, 0, 0).stroke_width(1),
        ))
        .map_err(plot_error)?
        .label("quota L")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(200, 0, 0)));
    for (i, (name, line)) in lines.into_iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))
            .map_err(plot_error)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    finish(&mut chart, root)
}

fn draw_summary<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), LabError> {
    let names: Vec<String> = report.summary.iter().map(|s| label(s.algorithm)).collect();
    let bars: Vec<(f64, f64)> = report
        .summary
        .iter()
        .map(|s| (s.wrongly_admitted * 100.0, s.wrongly_rejected * 100.0))
        .collect();
    let caption = format!(
        "Decisions that differ from the ideal sliding window ({}, mean over patterns)",
        report.quota
    );
    let bars = Bars {
        caption,
        y_desc: "share of requests (%)",
        names,
        values: bars,
        labels: ["wrongly admitted", "wrongly rejected"],
    };
    draw_bars(&bars, root)
}

/// Two bars per algorithm.
struct Bars {
    caption: String,
    y_desc: &'static str,
    names: Vec<String>,
    values: Vec<(f64, f64)>,
    labels: [&'static str; 2],
}

fn draw_bars<DB: DrawingBackend>(
    Bars {
        caption,
        y_desc,
        names,
        values: bars,
        labels,
    }: &Bars,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), LabError> {
    let top = bars.iter().map(|&(a, r)| a.max(r)).fold(1.0, f64::max) * 1.15;
    let count = names.len() as f64;

    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(root)
        .caption(caption, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5f64..count - 0.5, 0f64..top)
        .map_err(plot_error)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&label_of)
        .y_desc(*y_desc)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FAMILY, 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(plot_error)?;
    let first = RGBColor(213, 94, 0);
    let second = RGBColor(0, 114, 178);
    chart
        .draw_series(bars.iter().enumerate().map(|(i, &(a, _))| {
            let x = i as f64;
            Rectangle::new([(x - 0.36, 0.0), (x - 0.02, a)], first.filled())
        }))
        .map_err(plot_error)?
        .label(labels[0])
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], first.filled()));
    chart
        .draw_series(bars.iter().enumerate().map(|(i, &(_, r))| {
            let x = i as f64;
            Rectangle::new([(x + 0.02, 0.0), (x + 0.36, r)], second.filled())
        }))
        .map_err(plot_error)?
        .label(labels[1])
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], second.filled()));
    finish(&mut chart, root)
}

/// Draws what leases cost and save, per algorithm: the under-admission (admitted
/// without leases but not with them, %) and the store calls per decision (%). Writes
/// `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
///
/// ```no_run
/// use tollgate_lab::{Lab, plot};
/// let report = Lab::default().run_leases(4)?;
/// plot::lease_chart(&report, std::path::Path::new("target/lab"), "leases")?;
/// # Ok::<(), tollgate_lab::LabError>(())
/// ```
pub fn lease_chart(report: &LeaseReport, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, LabError> {
    font_ready()?;
    std::fs::create_dir_all(dir)?;
    let summary = report.summary();
    let bars = Bars {
        caption: format!(
            "Leases: {} processes, {} (sum over patterns)",
            report.processes, report.quota
        ),
        y_desc: "%",
        names: summary.iter().map(|s| label(s.algorithm)).collect(),
        values: summary
            .iter()
            .map(|s| {
                let lost = s.plain_admitted.saturating_sub(s.leased_admitted) as f64 * 100.0
                    / s.plain_admitted.max(1) as f64;
                (lost, s.calls_per_decision * 100.0)
            })
            .collect(),
        labels: ["under-admission", "store calls per decision"],
    };
    let (png, svg) = files(dir, stem);
    let size = (1100, 480);
    draw_bars(&bars, &BitMapBackend::new(&png, size).into_drawing_area())?;
    draw_bars(&bars, &SVGBackend::new(&svg, size).into_drawing_area())?;
    Ok(vec![png, svg])
}

/// Draws the legend in the upper right corner and writes the file.
fn finish<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), LabError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}

/// A period as the chart title says it: "minute", "hour", or seconds.
fn humane(period: std::time::Duration) -> String {
    match (period.as_secs(), period.subsec_nanos()) {
        (1, 0) => "second".to_owned(),
        (60, 0) => "minute".to_owned(),
        (3600, 0) => "hour".to_owned(),
        _ => format!("{} s", period.as_secs_f64()),
    }
}
