//! SVG plots of the speed comparison (`docs/bench/*.svg`), drawn with `plotters` (SVG backend
//! only: no font rendering or bitmap code is built; text is left to the SVG viewer).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// What the plots show (medians over rounds).
pub struct Data {
    /// Server labels, in table order.
    pub servers: Vec<String>,
    /// Sequential calls/s per server.
    pub sequential: Vec<f64>,
    /// Calls/s with 8 in flight per server.
    pub inflight: Vec<f64>,
    /// Server CPU µs per call per server.
    pub cpu_us: Vec<f64>,
    /// (bundles, spawn → initialized ms).
    pub cold: Vec<(f64, f64)>,
    /// (sessions, bare rmcp calls/s, Quiver calls/s).
    pub http: Vec<(usize, f64, f64)>,
}

const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const ORANGE: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// Writes `calls.svg`, `cpu.svg`, `cold-start.svg` and `http.svg` into `dir`.
pub fn write_all(dir: &Path, d: &Data) -> Result<()> {
    let mut bars = Vec::new();
    for (i, name) in d.servers.iter().enumerate() {
        bars.push((format!("{name}, sequential"), d.sequential[i], BLUE));
        bars.push((format!("{name}, 8 in flight"), d.inflight[i], ORANGE));
    }
    horizontal_bars(&dir.join("calls.svg"), "echo tools/call over stdio: calls per second", &bars)?;
    let cpu: Vec<_> = d.servers.iter().zip(&d.cpu_us).map(|(n, v)| (n.clone(), *v, BLUE)).collect();
    horizontal_bars(&dir.join("cpu.svg"), "server CPU per echo call (µs)", &cpu)?;
    let mut http = Vec::new();
    for (n, bare, quiver) in &d.http {
        http.push((format!("bare rmcp, {n} sessions"), *bare, BLUE));
        http.push((format!("Quiver, {n} sessions"), *quiver, ORANGE));
    }
    horizontal_bars(&dir.join("http.svg"), "streamable HTTP: calls per second", &http)?;
    line(&dir.join("cold-start.svg"), "spawn → initialized (ms) by signed bundles", &d.cold)
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting failed: {e:?}")
}

fn horizontal_bars(path: &Path, title: &str, bars: &[(String, f64, RGBColor)]) -> Result<()> {
    let n = bars.len() as i32;
    let max = bars.iter().map(|b| b.1).filter(|v| v.is_finite()).fold(0.0, f64::max).max(1.0) * 1.1;
    let height = 60 + 26 * bars.len() as u32;
    let root = SVGBackend::new(path, (820, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d(0f64..max, (0..n).into_segmented())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                bars.get(*i as usize).map(|b| b.0.clone()).unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().filter(|(_, b)| b.1.is_finite()).map(|(i, b)| {
            let i = i as i32;
            let mut r =
                Rectangle::new([(0.0, SegmentValue::Exact(i)), (b.1, SegmentValue::Exact(i + 1))], b.2.filled());
            r.set_margin(3, 3, 0, 0);
            r
        }))
        .map_err(err)?;
    root.present().map_err(err)
}

fn line(path: &Path, title: &str, points: &[(f64, f64)]) -> Result<()> {
    let max_x = points.iter().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let max_y = points.iter().map(|p| p.1).filter(|v| v.is_finite()).fold(1.0, f64::max) * 1.15;
    let root = SVGBackend::new(path, (640, 360)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)
        .map_err(err)?;
    chart.configure_mesh().x_desc("signed bundles").y_desc("ms").draw().map_err(err)?;
    let mut line = vec![(0.0, 0.0)];
    line.extend(points.iter().copied().filter(|p| p.1.is_finite()));
    chart.draw_series(std::iter::once(PathElement::new(line, BLUE.stroke_width(2)))).map_err(err)?;
    chart
        .draw_series(points.iter().filter(|p| p.1.is_finite()).map(|p| Circle::new(*p, 4, BLUE.filled())))
        .map_err(err)?;
    chart
        .draw_series(
            points.iter().filter(|p| p.1.is_finite()).map(|p| {
                Text::new(format!("{:.0} ms", p.1), (p.0, p.1 + max_y * 0.04), ("sans-serif", 13).into_font())
            }),
        )
        .map_err(err)?;
    root.present().map_err(err)
}
