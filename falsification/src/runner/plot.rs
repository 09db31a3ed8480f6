//! SVG plots of a run against the fluid predictions (plotters): pods over time, goodput, wait.

use std::path::Path;

use plotters::prelude::*;

use super::probe::PodQueue;
use super::record::Sample;
use crate::process::write_atomically;
use falsification_model::outcome::Record;

pub(crate) type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

use plotters::coord::types::RangedCoordf64;

type Canvas<'a> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// An SVG chart of `size` with its axes, drawn by `draw`, written atomically like every record file.
fn svg(
    path: &Path,
    size: (u32, u32),
    title: &str,
    (x_label, y_label): (&str, &str),
    (xs, ys): (std::ops::Range<f64>, std::ops::Range<f64>),
    draw: impl FnOnce(&mut Canvas) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(xs, ys)?;
        c.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
        draw(&mut c)?;
        root.present()?;
    }
    write_atomically(path, &svg)?;
    Ok(())
}

/// Lines over experiment time, with a legend of the named series.
pub(crate) fn chart(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|s| s.2.iter());
    let (x0, x1) = points().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.0), b.max(p.0))
    });
    let y1 = points().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.08;
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let axes = ("experiment time from the load event, s", y_label);
    svg(path, (960, 420), title, axes, (x0..x1, 0.0..y1), |c| {
        for (name, color, pts) in series {
            let color = *color;
            let drawn =
                c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?;
            // Unnamed series (one per pod) stay out of the legend.
            if !name.is_empty() {
                drawn
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            }
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// One point of a scatter plot: filled for a measurement, hollow for a prediction.
pub(crate) struct Point {
    pub label: String,
    pub color: RGBColor,
    pub filled: bool,
    pub x: f64,
    pub y: f64,
}

/// A scatter plot with a labelled point each, from the origin.
pub(crate) fn scatter(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[Point],
) -> anyhow::Result<()> {
    let x1 = points.iter().map(|p| p.x).fold(1.0f64, f64::max) * 1.15;
    let y1 = points.iter().map(|p| p.y).fold(1.0f64, f64::max) * 1.15;
    svg(
        path,
        (960, 520),
        title,
        (x_label, y_label),
        (0.0..x1, 0.0..y1),
        |c| {
            for p in points {
                let style = if p.filled {
                    p.color.filled()
                } else {
                    p.color.stroke_width(2)
                };
                c.draw_series([Circle::new((p.x, p.y), 6, style)])?;
                c.draw_series([Text::new(
                    p.label.clone(),
                    (p.x, p.y),
                    ("sans-serif", 13).into_font().color(&p.color),
                )])?;
            }
            Ok(())
        },
    )
}

fn curve(
    r: &Record,
    s: f64,
    f: impl Fn(&falsification_model::outcome::Row) -> f64,
) -> Vec<(f64, f64)> {
    r.rows.iter().map(|row| (row.t * s, f(row))).collect()
}

/// `pods.svg`, `goodput.svg` and `wait.svg` in `dir`.
pub fn draw(
    dir: &Path,
    samples: &[Sample],
    measured: &Record,
    pooled: &Record,
    per_pod: &Record,
    s: f64,
    timeout_s: f64,
) -> anyhow::Result<()> {
    let m = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|x| (x.t * s, f(x))).collect()
    };
    chart(
        &dir.join("pods.svg"),
        "Pods: measured vs predicted",
        "pods",
        &[
            ("measured desired", RED, m(&|x| f64::from(x.pods_desired))),
            ("measured ready", BLUE, m(&|x| f64::from(x.pods_ready))),
            (
                "fluid per pod: ready",
                GREEN,
                curve(per_pod, s, |r| f64::from(r.pods_ready)),
            ),
            (
                "fluid pooled: ready",
                MAGENTA,
                curve(pooled, s, |r| f64::from(r.pods_ready)),
            ),
        ],
    )?;
    let goodput = |r: &Record| curve(r, s, |row| (row.attempts - row.timed_out) / r.step_s);
    chart(
        &dir.join("goodput.svg"),
        "Goodput (attempts answered in time) and demand, per second of run time",
        "requests/s",
        &[
            (
                "measured successes",
                BLUE,
                samples
                    .iter()
                    .map(|x| (x.t * s, x.load.successes / measured.step_s))
                    .collect(),
            ),
            (
                "measured first attempts",
                BLACK,
                samples
                    .iter()
                    .map(|x| (x.t * s, x.load.first_attempts / measured.step_s))
                    .collect(),
            ),
            ("fluid per pod goodput", GREEN, goodput(per_pod)),
            ("fluid pooled goodput", MAGENTA, goodput(pooled)),
        ],
    )?;
    // Waits in experiment seconds, clipped at three timeouts (an empty pool's wait is infinite).
    let cap = 3.0 * timeout_s * s;
    let clip = |w: f64| w.min(cap);
    let timeout_cap = |r: &Record| curve(r, s, |row| clip(row.max_wait_s * s));
    chart(
        &dir.join("wait.svg"),
        "Largest wait an arrival faces (experiment seconds)",
        "wait, s",
        &[
            (
                "measured (sustained over 3 samples)",
                BLUE,
                m(&|x| clip(x.wait_sustained_s * s)),
            ),
            ("fluid per pod", GREEN, timeout_cap(per_pod)),
            ("fluid pooled", MAGENTA, timeout_cap(pooled)),
        ],
    )?;
    Ok(())
}

/// `pod-waits.svg`: every pod's wait over time (experiment seconds), with the timeout and the
/// drained threshold, so a pod holding debt and a pod holding a steady queue tell apart.
pub fn pod_waits(
    dir: &Path,
    samples: &[Sample],
    pods: &[Vec<(String, PodQueue)>],
    s: f64,
    timeout_s: f64,
    drained_s: f64,
) -> anyhow::Result<()> {
    let cap = 3.0 * timeout_s * s;
    let mut names: Vec<&str> = pods.iter().flatten().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let span = |v: f64| -> Vec<(f64, f64)> {
        let (a, b) = (samples.first(), samples.last());
        a.zip(b)
            .map_or(vec![], |(a, b)| vec![(a.t * s, v * s), (b.t * s, v * s)])
    };
    let mut series: Vec<Series> = vec![
        ("timeout", RED, span(timeout_s)),
        ("drained (strict recovery)", BLACK, span(drained_s)),
    ];
    for (i, name) in names.iter().enumerate() {
        let points = samples
            .iter()
            .zip(pods)
            .filter_map(|(x, row)| {
                let q = row.iter().find(|(n, _)| n == name)?;
                Some((x.t * s, (q.1.wait_s * s).min(cap)))
            })
            .collect();
        let (r, g, b) = Palette99::pick(i).to_rgba().rgb();
        series.push(("", RGBColor(r, g, b), points));
    }
    chart(
        &dir.join("pod-waits.svg"),
        "Every pod's wait (experiment seconds)",
        "wait, s",
        &series,
    )
}

/// `lag.svg`: one line per scale decision (the first at the bottom), from the demand change to
/// the crossing of the band (the meter's window), to the decision (a sync), to the ready pods
/// (the dead time), in experiment seconds. `lags` are in experiment time.
pub fn lag(dir: &Path, lags: &[super::lag::Lag]) -> anyhow::Result<()> {
    let times = || {
        lags.iter().flat_map(|l| {
            [
                l.demand_changed_s,
                l.crossed_s,
                Some(l.decided_s),
                l.ready_s,
            ]
            .into_iter()
            .flatten()
        })
    };
    let x0 = times().fold(f64::INFINITY, f64::min);
    let x1 = times().fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = if x0 < x1 {
        (x0, x1 + 0.05 * (x1 - x0))
    } else {
        (0.0, 1.0)
    };
    let rows = lags.len().max(1) as f64;
    let axes = ("experiment time from the load event, s", "scale decision");
    let title = "Signal to replicas: demand change, meter crossing, HPA decision, pods ready";
    let parts: [(&str, RGBColor); 3] = [
        ("demand to meter crossing", BLUE),
        ("crossing to HPA decision", RGBColor(230, 140, 0)),
        ("decision to pods ready", GREEN),
    ];
    svg(
        &dir.join("lag.svg"),
        (960, 120 + 16 * lags.len().min(200) as u32),
        title,
        axes,
        (x0..x1, 0.0..rows + 1.0),
        |c| {
            for (i, l) in lags.iter().enumerate() {
                let y = i as f64 + 1.0;
                let start = l.demand_changed_s.or(l.crossed_s).unwrap_or(l.decided_s);
                let spans = [
                    (l.demand_changed_s, l.crossed_s),
                    (l.crossed_s.or(l.demand_changed_s), Some(l.decided_s)),
                    (Some(l.decided_s), l.ready_s),
                ];
                for ((a, b), (_, color)) in spans.into_iter().zip(parts) {
                    if let (Some(a), Some(b)) = (a, b) {
                        c.draw_series([Rectangle::new(
                            [(a, y - 0.3), (b.max(a), y + 0.3)],
                            color.filled(),
                        )])?;
                    }
                }
                c.draw_series([Text::new(
                    format!("{} to {}", l.from, l.to),
                    (start, y + 0.45),
                    ("sans-serif", 11).into_font(),
                )])?;
            }
            for (name, color) in parts {
                c.draw_series([Rectangle::new([(x0, -1.0), (x0, -1.0)], color.filled())])?
                    .label(name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 14, y + 4)], color.filled())
                    });
            }
            c.configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
            Ok(())
        },
    )
}
