//! SVG plots of the broker scenarios (plotters, SVG backend only: no font files needed).
//!
//! - `throughput-async-flush.svg`, `throughput-sync-flush.svg`: msgs/s against senders,
//!   one line per system and send mode;
//! - `latency.svg`: sync-send p50 and p99 against senders, per system.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::table::Measure;

type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Writes every plot into `dir`; returns the paths written.
pub fn write_all(dir: &Path, rows: &[Measure]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for (flush, file) in [
        ("ASYNC_FLUSH", "throughput-async-flush.svg"),
        ("SYNC_FLUSH", "throughput-sync-flush.svg"),
    ] {
        let mut series = Series::new();
        for r in rows
            .iter()
            .filter(|r| r.scenario == "produce" && r.case.ends_with(flush) && r.producers > 0)
        {
            let name = format!("{} {}", r.system, r.case.trim_end_matches(flush).trim());
            series
                .entry(name)
                .or_default()
                .push((f64::from(r.producers), r.msgs_per_s));
        }
        if series.is_empty() {
            continue;
        }
        let path = dir.join(file);
        let title = format!("1 KiB sends, {flush}: throughput vs senders");
        chart(&path, &title, "msgs/s", &series)?;
        out.push(path);
    }
    let mut lat = Series::new();
    for r in rows.iter().filter(|r| {
        r.scenario == "produce"
            && r.case.starts_with("sync")
            && r.case.ends_with("ASYNC_FLUSH")
            && r.producers > 0
    }) {
        if let Some(l) = r.latency {
            let x = f64::from(r.producers);
            lat.entry(format!("{} p50", r.system))
                .or_default()
                .push((x, l.p50_us));
            lat.entry(format!("{} p99", r.system))
                .or_default()
                .push((x, l.p99_us));
        }
    }
    if !lat.is_empty() {
        let path = dir.join("latency.svg");
        let title = "1 KiB sync sends, ASYNC_FLUSH: latency vs senders";
        chart(&path, title, "latency µs", &lat)?;
        out.push(path);
    }
    Ok(out)
}

/// One log-log chart of `series` (x: senders).
fn chart(path: &Path, title: &str, y_desc: &str, series: &Series) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let points = || series.values().flatten();
    let x_max = points().map(|p| p.0).fold(1.0, f64::max) * 1.3;
    let y_min = points()
        .map(|p| p.1)
        .filter(|y| *y > 0.0)
        .fold(f64::MAX, f64::min)
        / 1.5;
    let y_max = points().map(|p| p.1).fold(1.0, f64::max) * 1.5;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (0.8f64..x_max).log_scale(),
            (y_min.min(y_max / 10.0)..y_max).log_scale(),
        )
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .x_desc("concurrent senders")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 1000.0 {
                format!("{:.0}k", y / 1000.0)
            } else {
                format!("{y:.0}")
            }
        })
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let dashed = name.contains("p99");
        let style = color.stroke_width(if dashed { 1 } else { 2 });
        ch.draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    legend_and_write(&mut ch, &root, path)?;
    Ok(())
}

/// A chart of latency over time (x: seconds, linear; y: µs, log), one line per series;
/// written to `path`, which is returned.
pub fn timeline(path: &Path, series: &[(String, Vec<(f64, f64)>)]) -> Result<PathBuf, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let points = || series.iter().flat_map(|(_, p)| p.iter());
    let x_max = points().map(|p| p.0).fold(1.0, f64::max) * 1.02;
    let y_max = points().map(|p| p.1).fold(10.0, f64::max) * 1.5;
    let y_min = points()
        .map(|p| p.1)
        .filter(|y| *y > 0.0)
        .fold(f64::MAX, f64::min)
        .min(y_max / 10.0)
        / 1.5;
    let root = SVGBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "1 KiB sync sends: slowest send per 100 ms",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .x_desc("seconds into the timed part")
        .y_desc("latency µs")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = color.stroke_width(1);
        ch.draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    legend_and_write(&mut ch, &root, path)?;
    Ok(path.to_path_buf())
}

/// Draws the legend (upper left, on a light panel) and writes the chart to `path`.
fn legend_and_write<'a, CT: CoordTranslate>(
    ch: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    path: &Path,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
