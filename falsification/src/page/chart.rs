//! Pure: the page's plots as inline SVG (plotters, drawn into a string). A chart is data
//! (`Chart`, `Scatter`); drawing it places the legend outside the data, draws a step series as
//! steps (its value holds until the next point), labels both axes with their units, marks the
//! load event and every event of the run (HPA decisions, faults, remedies, aborts) on the time
//! axis, and keeps point labels from overlapping.

use plotters::backend::SVGBackend;
use plotters::coord::Shift;
use plotters::drawing::{DrawingArea, DrawingAreaErrorKind, IntoDrawingArea};
use plotters::element::{Circle, DashedPathElement, PathElement, Polygon, Rectangle, Text};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, FontTransform, IntoFont, RGBColor, ShapeStyle, TextStyle, WHITE};

/// A colour of the page's palette (colour-blind safe, printable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Measured,
    MeasuredAlt,
    PerPod,
    Pooled,
    Demand,
    Limit,
    /// The n-th of many (one line per pod, per case, per layer).
    Nth(usize),
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Straight segments between samples (rates, waits).
    Line,
    /// The value holds until the next point (pod counts, decisions): horizontal then vertical.
    Step,
    /// A model's prediction: dashed.
    Predicted,
    /// A model's prediction of a step series (its pods): dashed steps.
    PredictedStep,
    /// A constant reference (the timeout, a threshold): thin.
    Reference,
}

impl Style {
    fn stepped(self) -> bool {
        matches!(self, Style::Step | Style::PredictedStep)
    }

    fn dashed(self) -> bool {
        matches!(self, Style::Predicted | Style::PredictedStep)
    }
}

#[derive(Debug, Clone)]
pub struct Series {
    /// Empty: left out of the legend (one line per pod).
    pub name: String,
    pub colour: Colour,
    pub style: Style,
    /// (x, y), x increasing.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: &str, colour: Colour, style: Style, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            colour,
            style,
            points,
        }
    }
}

/// What an event on the time axis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The autoscaler changed the desired pods.
    ScaleUp,
    ScaleDown,
    /// A fault the case injected (a meter outage, a killed pod or shard).
    Fault,
    /// A remedy the case applied (a floor raised, a rollout).
    Remedy,
    /// A stop rule fired and the load stopped.
    Abort,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub at: f64,
    /// Short ("4→9", "meter down"); drawn beside its marker without covering another label.
    pub label: String,
    pub kind: EventKind,
}

/// An axis: what it measures and its unit, drawn as "what (unit)".
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub unit: String,
}

impl Axis {
    pub fn new(label: &str, unit: &str) -> Axis {
        Axis {
            label: label.into(),
            unit: unit.into(),
        }
    }
}

/// The load event: a step from `from` on, or a spike over `from..to`; shaded and named.
#[derive(Debug, Clone)]
pub struct LoadMark {
    pub from: f64,
    pub to: Option<f64>,
    pub label: String,
}

/// Series over time.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub events: Vec<Event>,
    pub load: Option<LoadMark>,
    /// The y axis starts at zero unless it holds negative values; `Some` fixes its top.
    pub y_max: Option<f64>,
}

/// One labelled point of a scatter plot: filled for a measurement, hollow for a prediction.
#[derive(Debug, Clone)]
pub struct Point {
    pub label: String,
    pub colour: Colour,
    pub filled: bool,
    pub x: f64,
    pub y: f64,
}

#[derive(Debug, Clone)]
pub struct Scatter {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub points: Vec<Point>,
}

/// A bar's span on its row: from, to, and which part (its colour, `Colour::Nth(part)`).
pub type Span = (f64, f64, usize);

/// Horizontal bars on rows (the signal-to-replica lag: one row per scale decision).
#[derive(Debug, Clone)]
pub struct Bars {
    pub title: String,
    pub x: Axis,
    /// One row each, bottom up: its label and its spans (from, to, which part).
    pub rows: Vec<(String, Vec<Span>)>,
    /// The parts' names, in the legend, each its own colour (`Colour::Nth(i)`).
    pub parts: Vec<String>,
}

/// How many points `svg` keeps of a series: about one per pixel column of the plot, so a series
/// of any length costs the page a few kilobytes.
const THIN_TO: usize = 800;
/// Values this large are not measurements (and would overflow a scale's arithmetic): left out.
const PLOTTABLE: f64 = 1e12;

const WIDTH: f64 = 960.0;
const TIME_PLOT_H: f64 = 300.0;
const SCATTER_H: f64 = 520.0;
const ROW_H: f64 = 26.0;
const PAD: f64 = 10.0;
const RIGHT: f64 = 28.0;
/// Below the plot: tick labels, the axis title, then the legend's first row.
const BELOW: f64 = 46.0;
const LEGEND_ROW: f64 = 18.0;

const FONT: &str = "sans-serif";
/// plotters writes a text's size as the asked size / 1.24; asking px × 1.24 writes px.
const PX_SCALE: f64 = 1.24;
const TICK_PX: f64 = 11.0;
const TEXT_PX: f64 = 12.0;
const EVENT_PX: f64 = 11.0;

/// Event labels sit in at most this many lanes above the plot.
const LANES: usize = 4;
const LANE_H: f64 = 15.0;
const DOT_R: f64 = 5.0;

const INK: RGBColor = RGBColor(34, 34, 34);
const GRID: RGBColor = RGBColor(225, 225, 225);
const SHADE: RGBColor = RGBColor(120, 120, 120);

/// Okabe & Ito's colour-blind safe palette (yellow left out: too faint on white).
const BLUE: RGBColor = RGBColor(0, 114, 178);
const ORANGE: RGBColor = RGBColor(230, 159, 0);
const GREEN: RGBColor = RGBColor(0, 158, 115);
const VERMILLION: RGBColor = RGBColor(213, 94, 0);
const PURPLE: RGBColor = RGBColor(204, 121, 167);
const SKY: RGBColor = RGBColor(86, 180, 233);
const BLACK: RGBColor = RGBColor(0, 0, 0);

/// For `Colour::Nth`: Okabe & Ito's, then Paul Tol's muted scheme, also colour-blind safe.
const MANY: [RGBColor; 15] = [
    BLUE,
    ORANGE,
    GREEN,
    VERMILLION,
    PURPLE,
    SKY,
    RGBColor(51, 34, 136),
    RGBColor(17, 119, 51),
    RGBColor(136, 34, 85),
    RGBColor(68, 170, 153),
    RGBColor(153, 153, 51),
    RGBColor(170, 68, 153),
    RGBColor(221, 204, 119),
    RGBColor(136, 204, 238),
    RGBColor(204, 102, 119),
];

fn rgb(colour: Colour) -> RGBColor {
    match colour {
        Colour::Measured => BLUE,
        Colour::MeasuredAlt => VERMILLION,
        Colour::PerPod => GREEN,
        Colour::Pooled => ORANGE,
        Colour::Demand => SKY,
        Colour::Limit => BLACK,
        Colour::Nth(i) => MANY[i % MANY.len()],
    }
}

/// A colour dark enough for text on white (orange text would be faint).
fn darker(c: RGBColor) -> RGBColor {
    let d = |v: u8| (f64::from(v) * 0.65).round() as u8;
    RGBColor(d(c.0), d(c.1), d(c.2))
}

impl EventKind {
    const ALL: [EventKind; 5] = [
        EventKind::ScaleUp,
        EventKind::ScaleDown,
        EventKind::Fault,
        EventKind::Remedy,
        EventKind::Abort,
    ];

    fn colour(self) -> RGBColor {
        match self {
            EventKind::ScaleUp => GREEN,
            EventKind::ScaleDown => BLUE,
            EventKind::Fault => VERMILLION,
            EventKind::Remedy => PURPLE,
            EventKind::Abort => BLACK,
        }
    }

    fn name(self) -> &'static str {
        match self {
            EventKind::ScaleUp => "scale up",
            EventKind::ScaleDown => "scale down",
            EventKind::Fault => "fault",
            EventKind::Remedy => "remedy",
            EventKind::Abort => "abort",
        }
    }
}

/// A box in pixels, y down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Rect {
    fn around((x, y): (f64, f64), r: f64) -> Rect {
        Rect {
            x0: x - r,
            y0: y - r,
            x1: x + r,
            y1: y + r,
        }
    }

    pub fn intersects(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    fn within(&self, o: &Rect) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }

    fn grow(&self, d: f64) -> Rect {
        Rect {
            x0: self.x0 - d,
            y0: self.y0 - d,
            x1: self.x1 + d,
            y1: self.y1 + d,
        }
    }

    /// The point of the box nearest to `p`.
    fn nearest(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (x.clamp(self.x0, self.x1), y.clamp(self.y0, self.y1))
    }
}

fn plottable(v: f64) -> bool {
    v.is_finite() && v.abs() < PLOTTABLE
}

/// A glyph's advance in ems, by class, at DejaVu Sans's widths (the widest common default
/// sans-serif; Arial's are narrower): an estimated box holds the real text, so boxes that do
/// not intersect mean texts that do not.
fn em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | ' ' => 0.34,
        'f' | 'r' | 't' | '(' | ')' | '[' | ']' | '-' | '/' | '"' => 0.42,
        'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
        '=' | '+' | '<' | '>' | '~' | '^' | '*' | '#' | '&' => 0.84,
        'A'..='Z' => 0.78,
        c if c.is_ascii() => 0.64,
        // Arrows, ×, CJK: as wide as a glyph gets.
        _ => 1.0,
    }
}

fn text_w(s: &str, px: f64) -> f64 {
    s.chars().map(em).sum::<f64>() * px
}

/// `s`, cut with an ellipsis to at most `w` pixels.
fn fit(s: &str, w: f64, px: f64) -> String {
    if text_w(s, px) <= w {
        return s.to_string();
    }
    let mut cut = String::new();
    let mut used = em('…') * px;
    for c in s.chars() {
        used += em(c) * px;
        if used > w {
            break;
        }
        cut.push(c);
    }
    cut.push('…');
    cut
}

fn axis_title(a: &Axis) -> String {
    if a.unit.trim().is_empty() {
        a.label.clone()
    } else {
        format!("{} ({})", a.label, a.unit)
    }
}

/// At most about `n` points of a series, keeping each bucket's lowest and highest values (a
/// spike survives) and, for a step series, only the points where the value changes.
///
/// Points with a NaN, an infinity or a value beyond ±1e12 are left out. The first and the last
/// point always stay (the series keeps its extent); a step series keeps each bucket's last
/// point too, the value it holds into the next. An `n` below 8 counts as 8.
pub fn thin(points: &[(f64, f64)], style: Style, n: usize) -> Vec<(f64, f64)> {
    let clean = points
        .iter()
        .copied()
        .filter(|&(x, y)| plottable(x) && plottable(y));
    let step = style.stepped();
    let kept: Vec<(f64, f64)> = if step {
        changes(clean)
    } else {
        clean.collect()
    };
    let n = n.max(8);
    if kept.len() <= n {
        return kept;
    }
    let per_bucket = if step { 3 } else { 2 };
    let inner = &kept[1..kept.len() - 1];
    let size = inner.len().div_ceil((n - 2) / per_bucket);
    let mut out = vec![kept[0]];
    for bucket in inner.chunks(size) {
        let by_y = |a: &(usize, &(f64, f64)), b: &(usize, &(f64, f64))| a.1.1.total_cmp(&b.1.1);
        let lowest = bucket.iter().enumerate().min_by(by_y).map_or(0, |(i, _)| i);
        let highest = bucket.iter().enumerate().max_by(by_y).map_or(0, |(i, _)| i);
        let mut picks = vec![lowest, highest];
        if step {
            picks.push(bucket.len() - 1);
        }
        picks.sort_unstable();
        picks.dedup();
        out.extend(picks.into_iter().map(|i| bucket[i]));
    }
    out.push(kept[kept.len() - 1]);
    out
}

/// A step series' points where the value changes, and its last point.
fn changes(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut kept: Vec<(f64, f64)> = Vec::new();
    let mut last = None;
    for p in points {
        if kept.last().is_none_or(|k| k.1 != p.1) {
            kept.push(p);
            last = None;
        } else {
            last = Some(p);
        }
    }
    kept.extend(last);
    kept
}

/// A linear map from values `lo..hi` to pixels `from..to` (`hi > lo` always).
#[derive(Debug, Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Scale {
    fn px(&self, v: f64) -> f64 {
        self.from + (v - self.lo) / (self.hi - self.lo) * (self.to - self.from)
    }
}

/// The plot's box and its two scales.
#[derive(Debug, Clone, Copy)]
struct Frame {
    plot: Rect,
    x: Scale,
    y: Scale,
}

impl Frame {
    /// `plot` with x over `xs` left to right and y over `ys` bottom up.
    fn new(plot: Rect, xs: (f64, f64), ys: (f64, f64)) -> Frame {
        let x = Scale {
            lo: xs.0,
            hi: xs.1,
            from: plot.x0,
            to: plot.x1,
        };
        let y = Scale {
            lo: ys.0,
            hi: ys.1,
            from: plot.y1,
            to: plot.y0,
        };
        Frame { plot, x, y }
    }

    fn at(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (self.x.px(x), self.y.px(y))
    }
}

/// Tick values, multiples of a 1-2-5 step.
#[derive(Debug, Clone)]
struct Ticks {
    step: f64,
    values: Vec<f64>,
}

impl Ticks {
    /// About `target` round steps over `lo..hi`.
    fn over(lo: f64, hi: f64, target: f64) -> Ticks {
        Ticks::every(lo, hi, Ticks::step(lo, hi, target))
    }

    /// A 1-2-5 step making about `target` steps of `lo..hi`.
    fn step(lo: f64, hi: f64, target: f64) -> f64 {
        let raw = (hi - lo) / target.max(1.0);
        let mag = 10f64.powf(raw.log10().floor());
        let unit = match raw / mag {
            n if n <= 1.0 => 1.0,
            n if n <= 2.0 => 2.0,
            n if n <= 5.0 => 5.0,
            _ => 10.0,
        };
        unit * mag
    }

    /// The multiples of `step` in `lo..=hi`.
    fn every(lo: f64, hi: f64, step: f64) -> Ticks {
        let first = (lo / step - 1e-9).ceil() as i64;
        let last = (hi / step + 1e-9).floor() as i64;
        let values = (first..=last).take(100).map(|i| i as f64 * step).collect();
        Ticks { step, values }
    }

    fn label(&self, v: f64) -> String {
        let decimals = (-self.step.log10().floor()).clamp(0.0, 12.0) as usize;
        // `+ 0.0` turns a negative zero into a zero.
        format!("{:.*}", decimals, v + 0.0)
    }

    fn widest(&self, px: f64) -> f64 {
        self.values
            .iter()
            .map(|&v| text_w(&self.label(v), px))
            .fold(0.0, f64::max)
    }
}

/// `lo..hi` made wide enough to draw (a single value gets a unit either side).
fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if hi - lo > 1e-9 * lo.abs().max(hi.abs()).max(1.0) {
        (lo, hi)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| plottable(*v))
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

/// A value axis from zero (or below, for negative values) to a round value above the highest
/// with `headroom` (a fraction of the span) to spare, or to `top` when given.
fn value_axis(
    values: impl Iterator<Item = f64>,
    headroom: f64,
    top: Option<f64>,
    target: f64,
) -> (f64, f64, Ticks) {
    let (lo, hi) = extent(values).map_or((0.0, 1.0), |(lo, hi)| (lo.min(0.0), hi.max(0.0)));
    // All zeros: zero to one.
    let hi = if hi - lo > 1e-12 { hi } else { lo + 1.0 };
    let span = hi - lo;
    let lo = if lo < 0.0 { lo - headroom * span } else { lo };
    let hi = if hi > 0.0 { hi + headroom * span } else { hi };
    if let Some(top) = top.filter(|t| plottable(*t) && *t > lo) {
        return (lo, top, Ticks::over(lo, top, target));
    }
    // Both ends on a tick.
    let step = Ticks::step(lo, hi, target);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    (lo, hi, Ticks::every(lo, hi, step))
}

/// The part of the segment `a`-`b` inside `r` (Liang-Barsky), its ends exact when inside.
fn clip(a: (f64, f64), b: (f64, f64), r: &Rect) -> Option<((f64, f64), (f64, f64))> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [
        (-dx, a.0 - r.x0),
        (dx, r.x1 - a.0),
        (-dy, a.1 - r.y0),
        (dy, r.y1 - a.1),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else if p < 0.0 {
            t0 = t0.max(q / p);
        } else {
            t1 = t1.min(q / p);
        }
    }
    if t0 > t1 {
        return None;
    }
    let at = |t: f64| (a.0 + t * dx, a.1 + t * dy);
    Some((
        if t0 == 0.0 { a } else { at(t0) },
        if t1 == 1.0 { b } else { at(t1) },
    ))
}

/// A polyline cut to the runs of it inside `r`.
fn clip_path(points: &[(f64, f64)], r: &Rect) -> Vec<Vec<(f64, f64)>> {
    let mut runs = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    for w in points.windows(2) {
        match clip(w[0], w[1], r) {
            Some((a, b)) => {
                if run.last() != Some(&a) {
                    if run.len() > 1 {
                        runs.push(std::mem::take(&mut run));
                    }
                    run = vec![a];
                }
                run.push(b);
            }
            None => {
                if run.len() > 1 {
                    runs.push(std::mem::take(&mut run));
                }
                run.clear();
            }
        }
    }
    if run.len() > 1 {
        runs.push(run);
    }
    runs
}

/// Whole pixels, without repeated points nor points between their neighbours on a horizontal
/// or vertical run (a flat stretch is its two ends; a spike in one pixel column stays).
fn pixels(run: &[(f64, f64)]) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::with_capacity(run.len());
    for &(x, y) in run {
        let p = (x.round() as i32, y.round() as i32);
        if out.last() == Some(&p) {
            continue;
        }
        if let [.., a, b] = out[..] {
            let between = |u: i32, v: i32, w: i32| u.min(w) <= v && v <= u.max(w);
            if (a.0 == b.0 && b.0 == p.0 && between(a.1, b.1, p.1))
                || (a.1 == b.1 && b.1 == p.1 && between(a.0, b.0, p.0))
            {
                out.pop();
            }
        }
        out.push(p);
    }
    out
}

/// A step series as its path: each value held until the next point's x, then the jump.
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut path = Vec::with_capacity(points.len() * 2);
    for (i, &p) in points.iter().enumerate() {
        if i > 0 {
            path.push((p.0, points[i - 1].1));
        }
        path.push(p);
    }
    path
}

/// A series' polylines in pixels, inside the plot.
fn series_paths(points: &[(f64, f64)], style: Style, frame: &Frame) -> Vec<Vec<(i32, i32)>> {
    let path = if style.stepped() {
        steps(points)
    } else {
        points.to_vec()
    };
    let px: Vec<(f64, f64)> = path.into_iter().map(|p| frame.at(p)).collect();
    clip_path(&px, &frame.plot)
        .iter()
        .map(|run| pixels(run))
        .filter(|run| run.len() > 1)
        .collect()
}

/// Each span (left, right) in the first of `count` lanes where it keeps `gap` from every span
/// already there, in the given order (put first what must be labelled); `None`: no room.
pub fn lanes(spans: &[(f64, f64)], count: usize, gap: f64) -> Vec<Option<usize>> {
    let mut taken: Vec<Vec<(f64, f64)>> = vec![Vec::new(); count];
    spans
        .iter()
        .map(|&(a, b)| {
            let free =
                |lane: &Vec<(f64, f64)>| lane.iter().all(|&(c, d)| b + gap <= c || d + gap <= a);
            let lane = taken.iter().position(free)?;
            taken[lane].push((a, b));
            Some(lane)
        })
        .collect()
}

/// Where a point's label went: its box, and whether it sits away from the point (then a leader
/// line joins them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub rect: Rect,
    pub leader: bool,
}

/// Boxes for the labels of sizes `sizes` (w, h) of dots of radius `r` at `points`, in order,
/// inside `bounds`: no box covers a dot or another box. Each tries eight places touching its dot
/// (right, left, above, below, then the corners), then rings further out in sixteen directions
/// (with a leader line); `None` when no place in `bounds` is free.
pub fn place_labels(
    points: &[(f64, f64)],
    sizes: &[(f64, f64)],
    r: f64,
    bounds: Rect,
) -> Vec<Option<Placed>> {
    let dots: Vec<Rect> = points.iter().map(|&p| Rect::around(p, r + 2.0)).collect();
    let mut taken: Vec<Rect> = Vec::new();
    let mut out = Vec::with_capacity(points.len());
    for (&p, &size) in points.iter().zip(sizes) {
        let found = candidates(p, size, r, &bounds).find(|c| {
            let padded = c.rect.grow(1.0);
            c.rect.within(&bounds) && !dots.iter().chain(&taken).any(|o| o.intersects(&padded))
        });
        if let Some(c) = found {
            taken.push(c.rect);
        }
        out.push(found);
    }
    out
}

/// Boxes of size (w, h) around the dot at `p`, nearest first.
fn candidates(
    p: (f64, f64),
    (w, h): (f64, f64),
    r: f64,
    bounds: &Rect,
) -> impl Iterator<Item = Placed> {
    const NEAR: [(f64, f64); 8] = [
        (1.0, 0.0),
        (-1.0, 0.0),
        (0.0, -1.0),
        (0.0, 1.0),
        (1.0, -1.0),
        (1.0, 1.0),
        (-1.0, -1.0),
        (-1.0, 1.0),
    ];
    let reach = (bounds.x1 - bounds.x0).hypot(bounds.y1 - bounds.y0);
    let rings = (reach / 10.0).ceil() as usize;
    let near = NEAR.into_iter().map(move |d| (d, r + 3.0, false));
    let far = (1..=rings).flat_map(move |ring| {
        (0..16).map(move |k| {
            let a = f64::from(k) * std::f64::consts::PI / 8.0;
            ((a.cos(), a.sin()), r + 3.0 + 10.0 * ring as f64, true)
        })
    });
    near.chain(far).map(move |((ux, uy), d, leader)| {
        let (ax, ay) = (p.0 + ux * d, p.1 + uy * d);
        let side = |u: f64, at: f64, len: f64| match u {
            u if u > 0.3 => (at, at + len),
            u if u < -0.3 => (at - len, at),
            _ => (at - len / 2.0, at + len / 2.0),
        };
        let ((x0, x1), (y0, y1)) = (side(ux, ax, w), side(uy, ay, h));
        Placed {
            rect: Rect { x0, y0, x1, y1 },
            leader,
        }
    })
}

/// Left to right in rows: each width's (row, left), a new row when the next would pass `right`.
fn flow(widths: &[f64], left: f64, right: f64) -> Vec<(usize, f64)> {
    let (mut row, mut x) = (0, left);
    widths
        .iter()
        .map(|&w| {
            if x > left && x + w > right {
                row += 1;
                x = left;
            }
            let at = (row, x);
            x += w;
            at
        })
        .collect()
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// A series' line: its colour, width, opacity and whether it is dashed.
#[derive(Debug, Clone, Copy)]
struct Pen {
    colour: RGBColor,
    width: u32,
    alpha: f64,
    dashed: bool,
}

impl Pen {
    fn of(s: &Series) -> Pen {
        let colour = rgb(s.colour);
        let dashed = s.style.dashed();
        // Unnamed series come many at once (one per pod): thin and light, they read as a band.
        if s.name.is_empty() {
            return Pen {
                colour,
                width: 1,
                alpha: 0.7,
                dashed,
            };
        }
        let width = if s.style == Style::Reference { 1 } else { 2 };
        Pen {
            colour,
            width,
            alpha: 1.0,
            dashed,
        }
    }

    fn solid(colour: RGBColor, width: u32, alpha: f64) -> Pen {
        Pen {
            colour,
            width,
            alpha,
            dashed: false,
        }
    }

    fn shape(self) -> ShapeStyle {
        ShapeStyle {
            color: self.colour.mix(self.alpha),
            filled: false,
            stroke_width: self.width,
        }
    }
}

fn fill(colour: RGBColor, alpha: f64) -> ShapeStyle {
    ShapeStyle {
        color: colour.mix(alpha),
        filled: true,
        stroke_width: 0,
    }
}

fn px((x, y): (f64, f64)) -> (i32, i32) {
    (x.round() as i32, y.round() as i32)
}

fn path(area: &Area, points: Vec<(i32, i32)>, pen: Pen) -> Drawn {
    if points.len() < 2 {
        return Ok(());
    }
    if pen.dashed {
        area.draw(&DashedPathElement::new(points, 6, 4, pen.shape()))
    } else {
        area.draw(&PathElement::new(points, pen.shape()))
    }
}

fn line(area: &Area, a: (f64, f64), b: (f64, f64), pen: Pen) -> Drawn {
    path(area, vec![px(a), px(b)], pen)
}

fn rect(area: &Area, r: Rect, style: ShapeStyle) -> Drawn {
    area.draw(&Rectangle::new([px((r.x0, r.y0)), px((r.x1, r.y1))], style))
}

fn text(
    area: &Area,
    s: &str,
    at: (f64, f64),
    size: f64,
    colour: RGBColor,
    anchor: (HPos, VPos),
) -> Drawn {
    if s.is_empty() {
        return Ok(());
    }
    let style = TextStyle::from((FONT, size * PX_SCALE).into_font())
        .color(&colour)
        .pos(Pos::new(anchor.0, anchor.1));
    area.draw(&Text::new(s.to_string(), px(at), style))
}

/// An event's marker: its kind by shape and colour.
fn marker(area: &Area, kind: EventKind, (x, y): (f64, f64)) -> Drawn {
    let style = fill(kind.colour(), 1.0);
    let (x, y) = px((x, y));
    let polygon = |points: Vec<(i32, i32)>| area.draw(&Polygon::new(points, style));
    match kind {
        EventKind::ScaleUp => polygon(vec![(x, y - 5), (x + 5, y + 4), (x - 5, y + 4)]),
        EventKind::ScaleDown => polygon(vec![(x, y + 5), (x + 5, y - 4), (x - 5, y - 4)]),
        EventKind::Fault => polygon(vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y)]),
        EventKind::Remedy => area.draw(&Circle::new((x, y), 4, style)),
        EventKind::Abort => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style)),
    }
}

/// Drawn by plotters into a string: an `<svg>` with `width`, `height` and a `viewBox` (so CSS
/// can scale it) and no XML declaration, named by `title` for assistive technology.
fn render(width: f64, height: f64, title: &str, draw: impl FnOnce(&Area) -> Drawn) -> String {
    let size = (width.round() as u32, height.round() as u32);
    let mut out = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    if drawn.is_err() {
        // Only a failing backend gets here; the page still gets a well-formed, empty figure.
        let (w, h) = size;
        out = format!(
            "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\">\n</svg>\n"
        );
    }
    match out.find('>') {
        Some(end) => format!(
            "{} role=\"img\">\n<title>{}</title>{}",
            &out[..end],
            escape(title),
            &out[end + 1..]
        ),
        None => out,
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Room left of the plot: the y axis title, then the tick labels.
fn left_margin(y: &Ticks) -> f64 {
    PAD + 18.0 + 8.0 + y.widest(TICK_PX) + 8.0
}

fn draw_grid(area: &Area, frame: &Frame, x: &Ticks, y: Option<&Ticks>) -> Drawn {
    let p = frame.plot;
    let pen = Pen::solid(GRID, 1, 1.0);
    for &v in &x.values {
        let at = frame.x.px(v);
        line(area, (at, p.y0), (at, p.y1), pen)?;
    }
    for &v in y.map_or(&[][..], |y| &y.values) {
        let at = frame.y.px(v);
        line(area, (p.x0, at), (p.x1, at), pen)?;
    }
    Ok(())
}

/// The axes, their ticks and tick labels, and their titles "what (unit)".
fn draw_axes(
    area: &Area,
    frame: &Frame,
    x: &Ticks,
    y: Option<&Ticks>,
    titles: (&str, Option<&str>),
) -> Drawn {
    let p = frame.plot;
    let pen = Pen::solid(INK, 1, 1.0);
    line(area, (p.x0, p.y1), (p.x1, p.y1), pen)?;
    line(area, (p.x0, p.y0), (p.x0, p.y1), pen)?;
    for &v in &x.values {
        let at = frame.x.px(v);
        line(area, (at, p.y1), (at, p.y1 + 4.0), pen)?;
        text(
            area,
            &x.label(v),
            (at, p.y1 + 6.0),
            TICK_PX,
            INK,
            (HPos::Center, VPos::Top),
        )?;
    }
    for (y, &v) in y.iter().flat_map(|y| y.values.iter().map(move |v| (y, v))) {
        let at = frame.y.px(v);
        line(area, (p.x0 - 4.0, at), (p.x0, at), pen)?;
        text(
            area,
            &y.label(v),
            (p.x0 - 6.0, at),
            TICK_PX,
            INK,
            (HPos::Right, VPos::Center),
        )?;
    }
    let mid = ((p.x0 + p.x1) / 2.0, (p.y0 + p.y1) / 2.0);
    text(
        area,
        titles.0,
        (mid.0, p.y1 + 32.0),
        TEXT_PX,
        INK,
        (HPos::Center, VPos::Center),
    )?;
    if let Some(title) = titles.1 {
        let font = (FONT, TEXT_PX * PX_SCALE)
            .into_font()
            .transform(FontTransform::Rotate270);
        let style = TextStyle::from(font)
            .color(&INK)
            .pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new(title.to_string(), px((PAD + 8.0, mid.1)), style))?;
    }
    Ok(())
}

fn no_data(area: &Area, frame: &Frame) -> Drawn {
    let p = frame.plot;
    let mid = ((p.x0 + p.x1) / 2.0, (p.y0 + p.y1) / 2.0);
    text(
        area,
        "no data",
        mid,
        TEXT_PX,
        SHADE,
        (HPos::Center, VPos::Center),
    )
}

/// What a legend entry shows before its text.
#[derive(Debug, Clone, Copy)]
enum Key {
    Pen(Pen, Style),
    Event(EventKind),
    Dot(RGBColor, bool),
    Fill(RGBColor),
    /// Text only.
    Note,
}

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    text: String,
}

impl Entry {
    fn width(&self) -> f64 {
        let swatch = if matches!(self.key, Key::Note) {
            0.0
        } else {
            26.0
        };
        swatch + text_w(&self.text, TEXT_PX) + 18.0
    }
}

fn legend_flow(entries: &[Entry]) -> Vec<(usize, f64)> {
    let widths: Vec<f64> = entries
        .iter()
        .map(|e| e.width().min(WIDTH - 2.0 * PAD))
        .collect();
    flow(&widths, PAD, WIDTH - PAD)
}

fn legend_rows(entries: &[Entry]) -> usize {
    legend_flow(entries).last().map_or(0, |&(row, _)| row + 1)
}

/// The legend in rows below the plot, from `top`, clear of the data.
fn draw_legend(area: &Area, entries: &[Entry], top: f64) -> Drawn {
    for (e, (row, x)) in entries.iter().zip(legend_flow(entries)) {
        let cy = top + (row as f64 + 0.5) * LEGEND_ROW;
        let mid = (x + 10.0, cy);
        match e.key {
            Key::Pen(pen, Style::Step | Style::PredictedStep) => {
                let pts = [
                    (x, cy + 4.0),
                    (x + 10.0, cy + 4.0),
                    (x + 10.0, cy - 4.0),
                    (x + 20.0, cy - 4.0),
                ];
                path(area, pts.into_iter().map(px).collect(), pen)?;
            }
            Key::Pen(pen, _) => line(area, (x, cy), (x + 20.0, cy), pen)?,
            Key::Event(kind) => {
                line(
                    area,
                    (mid.0, cy - 7.0),
                    (mid.0, cy + 7.0),
                    Pen::solid(kind.colour(), 1, 0.6),
                )?;
                marker(area, kind, mid)?;
            }
            Key::Dot(colour, filled) => dot(area, mid, colour, filled)?,
            Key::Fill(colour) => rect(
                area,
                Rect {
                    x0: x,
                    y0: cy - 6.0,
                    x1: x + 20.0,
                    y1: cy + 6.0,
                },
                fill(colour, 1.0),
            )?,
            Key::Note => {}
        }
        let at = if matches!(e.key, Key::Note) {
            x
        } else {
            x + 26.0
        };
        let room = WIDTH - PAD - at;
        text(
            area,
            &fit(&e.text, room, TEXT_PX),
            (at, cy),
            TEXT_PX,
            INK,
            (HPos::Left, VPos::Center),
        )?;
    }
    Ok(())
}

fn dot(area: &Area, at: (f64, f64), colour: RGBColor, filled: bool) -> Drawn {
    let r = DOT_R as i32;
    let style = if filled {
        fill(colour, 1.0)
    } else {
        Pen::solid(colour, 2, 1.0).shape()
    };
    area.draw(&Circle::new(px(at), r, style))
}

/// A label above the plot, in a lane: an event's (with its kind's marker) or the load mark's.
#[derive(Debug, Clone)]
struct Mark {
    x: f64,
    text: String,
    /// `None`: the load mark.
    kind: Option<EventKind>,
    lane: Option<usize>,
    /// Its text left of the marker: it would pass the right edge.
    flip: bool,
}

impl Mark {
    fn span(&self) -> (f64, f64) {
        let w = text_w(&self.text, EVENT_PX);
        if self.flip {
            (self.x - 8.0 - w, self.x + 6.0)
        } else {
            (self.x - 6.0, self.x + 8.0 + w)
        }
    }
}

/// The load mark's label first (it always finds a lane), then the aborts', the faults' and
/// remedies', then the scale decisions', each from the left.
fn lane_marks(events: &[&Event], load: Option<&LoadMark>, x: &Scale) -> Vec<Mark> {
    let load = load.map(|l| (x.px(l.from), fit(&l.label, 240.0, EVENT_PX), None));
    let events = events
        .iter()
        .map(|e| (x.px(e.at), fit(&e.label, 160.0, EVENT_PX), Some(e.kind)));
    let mut marks: Vec<Mark> = load
        .into_iter()
        .chain(events)
        .map(|(x, text, kind)| {
            let flip = x + 8.0 + text_w(&text, EVENT_PX) > WIDTH - 4.0;
            Mark {
                x,
                text,
                kind,
                lane: None,
                flip,
            }
        })
        .collect();
    // Aborts, faults and remedies are few and matter most: labelled before the scale decisions.
    let rank = |m: &Mark| match m.kind {
        None => 0,
        Some(EventKind::Abort) => 1,
        Some(EventKind::Fault | EventKind::Remedy) => 2,
        Some(EventKind::ScaleUp | EventKind::ScaleDown) => 3,
    };
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by_key(|&i| rank(&marks[i]));
    let spans: Vec<(f64, f64)> = order.iter().map(|&i| marks[i].span()).collect();
    for (&i, lane) in order.iter().zip(lanes(&spans, LANES, 6.0)) {
        marks[i].lane = lane;
    }
    marks
}

/// The chart as an `<svg>` element to inline into HTML (no XML declaration, a `viewBox` so it
/// scales to the page's width, no external reference).
///
/// Series are thinned (`thin`) to about 800 points each, so callers pass them raw. Events are
/// thin vertical lines coloured and marked by kind; their labels sit in up to four lanes above
/// the plot, each from the left in the lowest lane where it keeps clear of every other label.
/// Too many events for that: the labels that find no room are left out (their lines stay, marked
/// at the plot's top) and the legend says how many. The load mark's label goes first, so it
/// always shows, then aborts', faults' and remedies', then the scale decisions'.
pub fn svg(chart: &Chart) -> String {
    let series: Vec<(&Series, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|s| (s, thin(&s.points, s.style, THIN_TO)))
        .collect();
    let mut events: Vec<&Event> = chart.events.iter().filter(|e| plottable(e.at)).collect();
    events.sort_by(|a, b| a.at.total_cmp(&b.at));
    let load = chart.load.as_ref().filter(|l| plottable(l.from));
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|p| p.0));
    let load_xs = load
        .into_iter()
        .flat_map(|l| [Some(l.from), l.to].into_iter().flatten());
    let xs = xs.chain(events.iter().map(|e| e.at)).chain(load_xs);
    let (x_lo, x_hi) = extent(xs).map_or((0.0, 1.0), |(lo, hi)| widen(lo, hi));
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|p| p.1));
    let (y_lo, y_hi, y_ticks) = value_axis(ys, 0.05, chart.y_max, TIME_PLOT_H / 45.0);
    let x = Scale {
        lo: x_lo,
        hi: x_hi,
        from: left_margin(&y_ticks),
        to: WIDTH - RIGHT,
    };
    let marks = lane_marks(&events, load, &x);
    let lanes_used = marks
        .iter()
        .filter_map(|m| m.lane)
        .max()
        .map_or(0, |l| l + 1);
    let top = PAD + lanes_used as f64 * LANE_H + if lanes_used > 0 { 4.0 } else { 0.0 };
    let plot = Rect {
        x0: x.from,
        y0: top,
        x1: x.to,
        y1: top + TIME_PLOT_H,
    };
    let frame = Frame::new(plot, (x_lo, x_hi), (y_lo, y_hi));
    let x_ticks = Ticks::over(x_lo, x_hi, (plot.x1 - plot.x0) / 90.0);
    let unlabelled = marks.iter().filter(|m| m.lane.is_none()).count();
    let legend = time_legend(&series, &events, unlabelled);
    let height = plot.y1 + BELOW + legend_rows(&legend) as f64 * LEGEND_ROW + PAD;
    let titles = (axis_title(&chart.x), axis_title(&chart.y));
    render(WIDTH, height, &chart.title, |area| {
        draw_grid(area, &frame, &x_ticks, Some(&y_ticks))?;
        draw_load(area, &frame, load)?;
        // Many events' lines would hide the data: past 40, fainter.
        let alpha = if events.len() > 40 { 0.3 } else { 0.6 };
        for e in &events {
            let at = frame.x.px(e.at);
            let pen = Pen::solid(e.kind.colour(), 1, alpha);
            line(area, (at, plot.y0), (at, plot.y1), pen)?;
        }
        for (s, points) in &series {
            draw_series(area, &frame, s, points)?;
        }
        if series.iter().all(|(_, p)| p.is_empty()) {
            no_data(area, &frame)?;
        }
        draw_axes(
            area,
            &frame,
            &x_ticks,
            Some(&y_ticks),
            (&titles.0, Some(&titles.1)),
        )?;
        draw_marks(area, &frame, &marks)?;
        draw_legend(area, &legend, plot.y1 + BELOW)
    })
}

/// A spike (`from..to`) shaded; a step a line at `from`, lightly shaded to the right edge.
fn draw_load(area: &Area, frame: &Frame, load: Option<&LoadMark>) -> Drawn {
    let Some(load) = load else { return Ok(()) };
    let p = frame.plot;
    let from = frame.x.px(load.from).clamp(p.x0, p.x1);
    match load.to.filter(|t| plottable(*t)) {
        Some(to) => {
            let to = frame.x.px(to).clamp(p.x0, p.x1);
            rect(
                area,
                Rect {
                    x0: from.min(to),
                    y0: p.y0,
                    x1: from.max(to),
                    y1: p.y1,
                },
                fill(SHADE, 0.18),
            )
        }
        None => {
            rect(
                area,
                Rect {
                    x0: from,
                    y0: p.y0,
                    x1: p.x1,
                    y1: p.y1,
                },
                fill(SHADE, 0.06),
            )?;
            line(area, (from, p.y0), (from, p.y1), Pen::solid(SHADE, 2, 0.8))
        }
    }
}

fn draw_series(area: &Area, frame: &Frame, s: &Series, points: &[(f64, f64)]) -> Drawn {
    let pen = Pen::of(s);
    if let [only] = points {
        // One sample has no line: a dot, if it is inside the plot.
        let at = frame.at(*only);
        if Rect::around(at, 0.0).within(&frame.plot) {
            area.draw(&Circle::new(px(at), 3, fill(pen.colour, pen.alpha)))?;
        }
        return Ok(());
    }
    for run in series_paths(points, s.style, frame) {
        path(area, run, pen)?;
    }
    Ok(())
}

/// The lanes' labels, each after its marker; an event without a label is marked at the plot's top.
fn draw_marks(area: &Area, frame: &Frame, marks: &[Mark]) -> Drawn {
    for m in marks {
        let Some(lane) = m.lane else {
            if let Some(kind) = m.kind {
                marker(area, kind, (m.x, frame.plot.y0 + 6.0))?;
            }
            continue;
        };
        let cy = frame.plot.y0 - 4.0 - (lane as f64 + 0.5) * LANE_H;
        match m.kind {
            Some(kind) => marker(area, kind, (m.x, cy))?,
            None => rect(
                area,
                Rect {
                    x0: m.x - 4.0,
                    y0: cy - 4.0,
                    x1: m.x + 4.0,
                    y1: cy + 4.0,
                },
                fill(SHADE, 0.6),
            )?,
        }
        let colour = m.kind.map_or(INK, |k| darker(k.colour()));
        let (at, h) = if m.flip {
            (m.x - 8.0, HPos::Right)
        } else {
            (m.x + 8.0, HPos::Left)
        };
        text(area, &m.text, (at, cy), EVENT_PX, colour, (h, VPos::Center))?;
    }
    Ok(())
}

/// Named series (once per name), the kinds of events shown, and how many event labels are left out.
fn time_legend(
    series: &[(&Series, Vec<(f64, f64)>)],
    events: &[&Event],
    unlabelled: usize,
) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for (s, _) in series.iter().filter(|(s, _)| !s.name.is_empty()) {
        if !entries.iter().any(|e| e.text == s.name) {
            entries.push(Entry {
                key: Key::Pen(Pen::of(s), s.style),
                text: s.name.clone(),
            });
        }
    }
    for kind in EventKind::ALL
        .into_iter()
        .filter(|k| events.iter().any(|e| e.kind == *k))
    {
        entries.push(Entry {
            key: Key::Event(kind),
            text: kind.name().to_string(),
        });
    }
    if unlabelled > 0 {
        let s = if unlabelled == 1 { "" } else { "s" };
        let text = format!("{unlabelled} event label{s} left out (no room)");
        entries.push(Entry {
            key: Key::Note,
            text,
        });
    }
    entries
}

/// Each point with its label, clear of the other labels and points (`place_labels`); a label
/// with no room left in the plot is listed in the legend instead, with its point's mark.
pub fn scatter_svg(scatter: &Scatter) -> String {
    let points: Vec<&Point> = scatter
        .points
        .iter()
        .filter(|p| plottable(p.x) && plottable(p.y))
        .collect();
    let mut legend: Vec<Entry> = [(true, "measured"), (false, "predicted")]
        .into_iter()
        .filter(|(filled, _)| points.iter().any(|p| p.filled == *filled))
        .map(|(filled, text)| Entry {
            key: Key::Dot(SHADE, filled),
            text: text.to_string(),
        })
        .collect();
    let plot_h = SCATTER_H - 2.0 * PAD - BELOW - LEGEND_ROW;
    let (y_lo, y_hi, y_ticks) = value_axis(points.iter().map(|p| p.y), 0.15, None, plot_h / 45.0);
    let left = left_margin(&y_ticks);
    let target = (WIDTH - RIGHT - left) / 90.0;
    let (x_lo, x_hi, x_ticks) = value_axis(points.iter().map(|p| p.x), 0.15, None, target);
    let plot = Rect {
        x0: left,
        y0: PAD,
        x1: WIDTH - RIGHT,
        y1: PAD + plot_h,
    };
    let frame = Frame::new(plot, (x_lo, x_hi), (y_lo, y_hi));
    let at: Vec<(f64, f64)> = points.iter().map(|p| frame.at((p.x, p.y))).collect();
    let sizes: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (text_w(&p.label, TEXT_PX) + 4.0, TEXT_PX + 4.0))
        .collect();
    let placed = place_labels(&at, &sizes, DOT_R, plot.grow(-2.0));
    for (p, place) in points.iter().zip(&placed) {
        if place.is_none() && !p.label.is_empty() {
            legend.push(Entry {
                key: Key::Dot(rgb(p.colour), p.filled),
                text: p.label.clone(),
            });
        }
    }
    let height = plot.y1 + BELOW + legend_rows(&legend) as f64 * LEGEND_ROW + PAD;
    let titles = (axis_title(&scatter.x), axis_title(&scatter.y));
    render(WIDTH, height, &scatter.title, |area| {
        draw_grid(area, &frame, &x_ticks, Some(&y_ticks))?;
        draw_axes(
            area,
            &frame,
            &x_ticks,
            Some(&y_ticks),
            (&titles.0, Some(&titles.1)),
        )?;
        if points.is_empty() {
            no_data(area, &frame)?;
        }
        for ((p, &centre), place) in points.iter().zip(&at).zip(&placed) {
            if let Some(place) = place.filter(|_| !p.label.is_empty()) {
                draw_label(area, p, centre, place)?;
            }
        }
        // Measured under predicted: a hollow ring on a filled dot shows both.
        for filled in [true, false] {
            for (p, &centre) in points.iter().zip(&at).filter(|(p, _)| p.filled == filled) {
                dot(area, centre, rgb(p.colour), p.filled)?;
            }
        }
        draw_legend(area, &legend, plot.y1 + BELOW)
    })
}

/// A point's label in its place, joined to the point by a leader line when away from it.
fn draw_label(area: &Area, p: &Point, centre: (f64, f64), place: Placed) -> Drawn {
    let colour = darker(rgb(p.colour));
    let r = place.rect;
    if place.leader {
        let end = r.nearest(centre);
        let (dx, dy) = (end.0 - centre.0, end.1 - centre.1);
        let d = dx.hypot(dy).max(1.0) / (DOT_R + 1.0);
        line(
            area,
            (centre.0 + dx / d, centre.1 + dy / d),
            end,
            Pen::solid(colour, 1, 0.7),
        )?;
    }
    // The estimated box is wider than most texts: the text keeps to the side facing its point.
    let (x, h) = match centre.0 {
        c if c <= r.x0 => (r.x0 + 2.0, HPos::Left),
        c if c >= r.x1 => (r.x1 - 2.0, HPos::Right),
        _ => ((r.x0 + r.x1) / 2.0, HPos::Center),
    };
    let y = (r.y0 + r.y1) / 2.0;
    text(area, &p.label, (x, y), TEXT_PX, colour, (h, VPos::Center))
}

/// One row per entry, bottom up, its spans coloured by part (`Colour::Nth(part)`); the x axis
/// from zero (or below) to a round value past the last span.
pub fn bars_svg(bars: &Bars) -> String {
    let ends = bars
        .rows
        .iter()
        .flat_map(|(_, spans)| spans.iter().flat_map(|&(a, b, _)| [a, b]));
    let labels: Vec<String> = bars
        .rows
        .iter()
        .map(|(label, _)| fit(label, 300.0, TEXT_PX))
        .collect();
    let widest = labels
        .iter()
        .map(|l| text_w(l, TEXT_PX))
        .fold(0.0, f64::max);
    let plot_h = bars.rows.len().max(1) as f64 * ROW_H;
    let plot = Rect {
        x0: PAD + widest + 12.0,
        y0: PAD,
        x1: WIDTH - RIGHT,
        y1: PAD + plot_h,
    };
    let (lo, hi, ticks) = value_axis(ends, 0.0, None, (plot.x1 - plot.x0) / 90.0);
    // No value axis: rows are placed by index.
    let frame = Frame::new(plot, (lo, hi), (0.0, 1.0));
    let legend: Vec<Entry> = bars
        .parts
        .iter()
        .enumerate()
        .map(|(i, part)| Entry {
            key: Key::Fill(rgb(Colour::Nth(i))),
            text: part.clone(),
        })
        .collect();
    let height = plot.y1 + BELOW + legend_rows(&legend) as f64 * LEGEND_ROW + PAD;
    render(WIDTH, height, &bars.title, |area| {
        draw_grid(area, &frame, &ticks, None)?;
        if bars.rows.is_empty() {
            no_data(area, &frame)?;
        }
        for (row, ((_, spans), label)) in bars.rows.iter().zip(&labels).enumerate() {
            let cy = plot.y1 - (row as f64 + 0.5) * ROW_H;
            text(
                area,
                label,
                (plot.x0 - 8.0, cy),
                TEXT_PX,
                INK,
                (HPos::Right, VPos::Center),
            )?;
            for &(a, b, part) in spans
                .iter()
                .filter(|(a, b, _)| plottable(*a) && plottable(*b))
            {
                let (a, b) = (frame.x.px(a.min(b)), frame.x.px(a.max(b)));
                // A zero-length span still shows, one pixel wide.
                let r = Rect {
                    x0: a,
                    y0: cy - 8.0,
                    x1: b.max(a + 1.0),
                    y1: cy + 8.0,
                };
                rect(area, r, fill(rgb(Colour::Nth(part)), 1.0))?;
            }
        }
        draw_axes(area, &frame, &ticks, None, (&axis_title(&bars.x), None))?;
        draw_legend(area, &legend, plot.y1 + BELOW)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<Series>, events: Vec<Event>) -> Chart {
        Chart {
            title: "pods <over> time".into(),
            x: Axis::new("experiment time from the load event", "s"),
            y: Axis::new("pods", "count"),
            series,
            events,
            load: Some(LoadMark {
                from: 0.0,
                to: None,
                label: "load ×3".into(),
            }),
            y_max: None,
        }
    }

    /// The points of every polyline drawn in `stroke` at `width`, legend swatches included.
    fn polylines(svg: &str, stroke: &str, width: u32) -> Vec<Vec<(i32, i32)>> {
        let attrs = format!("stroke=\"{stroke}\" stroke-width=\"{width}\" points=\"");
        svg.lines()
            .filter(|l| l.starts_with("<polyline"))
            .filter_map(|l| l.split_once(&attrs))
            .map(|(_, rest)| {
                let points = rest.split('"').next().unwrap_or_default();
                points
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').expect("x,y");
                        (x.parse().expect("x"), y.parse().expect("y"))
                    })
                    .collect()
            })
            .collect()
    }

    /// The polylines in `stroke` at `width` above the x axis (the first line drawn in ink), the
    /// legend's swatches left out.
    fn data_polylines(svg: &str, stroke: &str, width: u32) -> Vec<Vec<(i32, i32)>> {
        let axis = polylines(svg, "#222222", 1)[0][0].1;
        let mut paths = polylines(svg, stroke, width);
        paths.retain(|path| path.iter().all(|p| p.1 <= axis));
        paths
    }

    fn noisy(n: usize, seed: u64) -> Vec<(f64, f64)> {
        let mut state = seed;
        (0..n)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (
                    i as f64 * 0.25 - 60.0,
                    1.0 + (state >> 40) as f64 / (1u64 << 24) as f64,
                )
            })
            .collect()
    }

    #[test]
    fn a_step_series_holds_its_value_until_the_next_point() {
        let points = vec![
            (0.0, 1.0),
            (10.0, 1.0),
            (20.0, 3.0),
            (30.0, 2.0),
            (40.0, 2.0),
        ];
        let step = svg(&chart(
            vec![Series::new(
                "desired",
                Colour::Measured,
                Style::Step,
                points.clone(),
            )],
            vec![],
        ));
        let paths = data_polylines(&step, "#0072B2", 2);
        assert_eq!(paths.len(), 1, "{step}");
        let path = &paths[0];
        // Horizontal, vertical, horizontal, vertical, horizontal: no segment slants.
        assert_eq!(path.len(), 6, "{path:?}");
        for (i, w) in path.windows(2).enumerate() {
            let horizontal = w[0].1 == w[1].1 && w[0].0 < w[1].0;
            let vertical = w[0].0 == w[1].0 && w[0].1 != w[1].1;
            assert!(
                if i % 2 == 0 { horizontal } else { vertical },
                "segment {i} of {path:?}"
            );
        }
        // The same points as a line slant from 10 s to 20 s.
        let line = svg(&chart(
            vec![Series::new(
                "desired",
                Colour::Measured,
                Style::Line,
                points,
            )],
            vec![],
        ));
        let path = &data_polylines(&line, "#0072B2", 2)[0];
        assert!(
            path.windows(2)
                .any(|w| w[0].0 != w[1].0 && w[0].1 != w[1].1),
            "{path:?}"
        );
    }

    #[test]
    fn a_fixed_top_clips_what_passes_it() {
        let mut c = chart(
            vec![Series::new(
                "wait",
                Colour::Measured,
                Style::Line,
                vec![(0.0, 0.0), (1.0, 10.0), (2.0, 0.0)],
            )],
            vec![],
        );
        c.y_max = Some(5.0);
        let out = svg(&c);
        let top = polylines(&out, "#222222", 1)[1][0].1;
        let runs = data_polylines(&out, "#0072B2", 2);
        assert_eq!(runs.len(), 2, "up to the top, then down from it: {runs:?}");
        assert!(
            runs.iter().flatten().all(|p| p.1 >= top),
            "{runs:?} above {top}"
        );
        assert!(runs.iter().flatten().any(|p| p.1 == top));
    }

    #[test]
    fn predicted_is_dashed_and_reference_thin() {
        let flat = vec![(0.0, 5.0), (100.0, 5.0)];
        let out = svg(&chart(
            vec![
                Series::new("fluid", Colour::Pooled, Style::Predicted, flat.clone()),
                Series::new(
                    "timeout",
                    Colour::Limit,
                    Style::Reference,
                    vec![(0.0, 2.0), (100.0, 2.0)],
                ),
            ],
            vec![],
        ));
        let dashes = data_polylines(&out, "#E69F00", 2);
        assert!(dashes.len() > 20, "{} dashes", dashes.len());
        assert!(dashes.iter().all(|d| d.len() == 2 && d[1].0 - d[0].0 <= 6));
        assert_eq!(
            data_polylines(&out, "#000000", 1).len(),
            1,
            "the timeout, thin"
        );
    }

    #[test]
    fn thin_keeps_spikes_and_ends_and_bounds_the_count() {
        let mut points: Vec<(f64, f64)> = (0..4000).map(|i| (f64::from(i), 1.0)).collect();
        points[2345].1 = 100.0;
        points[777].1 = -50.0;
        let thinned = thin(&points, Style::Line, 800);
        assert!(thinned.len() <= 800, "{}", thinned.len());
        assert!(thinned.contains(&(2345.0, 100.0)));
        assert!(thinned.contains(&(777.0, -50.0)));
        assert_eq!(thinned.first(), Some(&(0.0, 1.0)));
        assert_eq!(thinned.last(), Some(&(3999.0, 1.0)));
        assert!(thinned.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
        let noise = noisy(4000, 7);
        let thinned = thin(&noise, Style::Line, 800);
        assert!((700..=800).contains(&thinned.len()), "{}", thinned.len());
        let max = noise.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        assert!(thinned.iter().any(|p| p.1 == max));
    }

    #[test]
    fn thin_keeps_a_step_series_change_points() {
        let values = [4.0, 4.0, 4.0, 9.0, 9.0, 14.0, 14.0, 14.0, 12.0, 12.0];
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as f64, v))
            .collect();
        assert_eq!(
            thin(&points, Style::Step, 800),
            vec![
                (0.0, 4.0),
                (3.0, 9.0),
                (5.0, 14.0),
                (8.0, 12.0),
                (9.0, 12.0)
            ]
        );
        // Changing at every sample: bucketed, still bounded.
        let flapping: Vec<(f64, f64)> = (0..5000)
            .map(|i| (f64::from(i), f64::from(i % 2)))
            .collect();
        let thinned = thin(&flapping, Style::Step, 800);
        assert!(
            thinned.len() <= 800 && thinned.len() > 400,
            "{}",
            thinned.len()
        );
        assert_eq!(thinned.last(), Some(&(4999.0, 1.0)));
    }

    #[test]
    fn thin_skips_what_cannot_be_drawn() {
        let points = [
            (0.0, f64::NAN),
            (1.0, 2.0),
            (f64::INFINITY, 3.0),
            (3.0, f64::NEG_INFINITY),
            (4.0, 1e300),
        ];
        assert_eq!(thin(&points, Style::Line, 800), vec![(1.0, 2.0)]);
        assert!(thin(&[], Style::Step, 0).is_empty());
    }

    #[test]
    fn close_points_get_labels_that_cover_neither_labels_nor_points() {
        // Eight points within a few pixels of each other, as the Definition 9 cases are.
        let points: Vec<(f64, f64)> = (0..8)
            .map(|i| (400.0 + f64::from(i % 3) * 3.0, 200.0 + f64::from(i) * 2.0))
            .collect();
        let sizes: Vec<(f64, f64)> = (0..8)
            .map(|i| (120.0 + f64::from(i) * 10.0, 16.0))
            .collect();
        let bounds = Rect {
            x0: 50.0,
            y0: 10.0,
            x1: 900.0,
            y1: 450.0,
        };
        let placed = place_labels(&points, &sizes, DOT_R, bounds);
        let boxes: Vec<Rect> = placed
            .iter()
            .map(|p| p.expect("room enough").rect)
            .collect();
        for (i, a) in boxes.iter().enumerate() {
            assert!(a.within(&bounds));
            assert!((a.x1 - a.x0 - sizes[i].0).abs() < 1e-9);
            for b in &boxes[i + 1..] {
                assert!(!a.intersects(b), "{a:?} and {b:?}");
            }
            for &p in &points {
                assert!(!a.intersects(&Rect::around(p, DOT_R)), "{a:?} covers {p:?}");
            }
        }
        // The first sits right beside its point; crowded ones further out, with a leader.
        assert!(!placed[0].unwrap().leader);
        assert!(placed.iter().any(|p| p.unwrap().leader));
    }

    #[test]
    fn a_label_with_no_room_is_left_unplaced() {
        let bounds = Rect {
            x0: 0.0,
            y0: 0.0,
            x1: 60.0,
            y1: 30.0,
        };
        let placed = place_labels(&[(30.0, 15.0)], &[(200.0, 16.0)], DOT_R, bounds);
        assert_eq!(placed, vec![None]);
    }

    #[test]
    fn lanes_keep_labels_apart_and_give_up_when_full() {
        let spans: Vec<(f64, f64)> = (0..40)
            .map(|i| (f64::from(i) * 10.0, f64::from(i) * 10.0 + 45.0))
            .collect();
        let lanes_of = lanes(&spans, 3, 6.0);
        assert!(lanes_of.iter().any(Option::is_none));
        assert_eq!(lanes_of[0], Some(0));
        for (i, a) in spans.iter().enumerate() {
            for (j, b) in spans.iter().enumerate().skip(i + 1) {
                if lanes_of[i].is_some() && lanes_of[i] == lanes_of[j] {
                    assert!(a.1 + 6.0 <= b.0 || b.1 + 6.0 <= a.0, "{a:?} and {b:?}");
                }
            }
        }
    }

    #[test]
    fn event_labels_never_overlap() {
        let kinds = EventKind::ALL;
        let events: Vec<Event> = (0..200)
            .map(|i| Event {
                at: f64::from(i) * 5.0 - 40.0,
                label: format!("{}→{}", i, i + 1),
                kind: kinds[i as usize % 5],
            })
            .collect();
        let refs: Vec<&Event> = events.iter().collect();
        let load = LoadMark {
            from: 0.0,
            to: Some(60.0),
            label: "spike".into(),
        };
        let x = Scale {
            lo: -60.0,
            hi: 1000.0,
            from: 60.0,
            to: WIDTH - RIGHT,
        };
        let marks = lane_marks(&refs, Some(&load), &x);
        assert_eq!(marks[0].lane, Some(0), "the load mark's label always shows");
        assert!(marks.iter().any(|m| m.lane.is_none()));
        assert!(
            marks
                .iter()
                .any(|m| m.kind == Some(EventKind::Abort) && m.lane.is_some())
        );
        for (i, a) in marks.iter().enumerate() {
            let (a0, a1) = a.span();
            assert!(a0 >= 0.0 && a1 <= WIDTH, "{a:?}");
            for b in &marks[i + 1..] {
                let (b0, b1) = b.span();
                if a.lane.is_some() && a.lane == b.lane {
                    assert!(a1 <= b0 || b1 <= a0, "{a:?} and {b:?}");
                }
            }
        }
        let out = svg(&chart(
            vec![Series::new(
                "x",
                Colour::Measured,
                Style::Line,
                noisy(100, 1),
            )],
            events,
        ));
        assert!(out.contains("event labels left out"));
    }

    #[test]
    fn unnamed_series_stay_out_of_the_legend() {
        let mut many: Vec<Series> = (0..50)
            .map(|i| Series::new("", Colour::Nth(i), Style::Line, noisy(50, i as u64)))
            .collect();
        many.push(Series::new(
            "timeout",
            Colour::Limit,
            Style::Reference,
            vec![(0.0, 2.0), (10.0, 2.0)],
        ));
        let thinned: Vec<(&Series, Vec<(f64, f64)>)> =
            many.iter().map(|s| (s, s.points.clone())).collect();
        let legend = time_legend(&thinned, &[], 0);
        let texts: Vec<&str> = legend.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts, ["timeout"]);
    }

    #[test]
    fn fifty_pods_of_four_thousand_samples_stay_small() {
        let pods: Vec<Series> = (0..50)
            .map(|i| Series::new("", Colour::Nth(i), Style::Line, noisy(4000, i as u64)))
            .collect();
        let out = svg(&chart(pods, vec![]));
        assert!(out.len() < 400_000, "{} bytes", out.len());
    }

    #[test]
    fn every_chart_is_an_inline_svg_even_from_odd_data() {
        let odd = vec![
            Series::new("empty", Colour::Measured, Style::Step, vec![]),
            Series::new("one", Colour::Pooled, Style::Line, vec![(5.0, 3.0)]),
            Series::new(
                "nan",
                Colour::PerPod,
                Style::Predicted,
                vec![(5.0, f64::NAN), (f64::INFINITY, 1.0)],
            ),
            Series::new(
                "zero",
                Colour::Nth(99),
                Style::Reference,
                vec![(5.0, 0.0), (5.0, 0.0)],
            ),
        ];
        let event = Event {
            at: f64::NAN,
            label: "lost".into(),
            kind: EventKind::Fault,
        };
        let mut odd_chart = chart(odd, vec![event]);
        odd_chart.y_max = Some(f64::NAN);
        odd_chart.load = Some(LoadMark {
            from: 5.0,
            to: Some(f64::INFINITY),
            label: String::new(),
        });
        let point = |x: f64, y: f64| Point {
            label: "first-attempt <measured>".into(),
            colour: Colour::Measured,
            filled: true,
            x,
            y,
        };
        let charts = [
            svg(&odd_chart),
            svg(&chart(vec![], vec![])),
            svg(&chart(
                vec![Series::new(
                    "zeros",
                    Colour::Demand,
                    Style::Line,
                    vec![(0.0, 0.0), (1.0, 0.0)],
                )],
                vec![],
            )),
            scatter_svg(&Scatter {
                title: "Definition 9 region".into(),
                x: Axis::new("over-provisioning", "pod·s"),
                y: Axis::new("work lost", "%"),
                points: vec![point(1.0, 2.0), point(f64::NAN, 1.0), point(1.0, 2.0)],
            }),
            scatter_svg(&Scatter {
                title: String::new(),
                x: Axis::new("a", ""),
                y: Axis::new("b", ""),
                points: vec![],
            }),
            bars_svg(&Bars {
                title: "lag".into(),
                x: Axis::new("lag", "s"),
                rows: vec![
                    (
                        "4→9".into(),
                        vec![(0.0, 3.0, 0), (3.0, f64::NAN, 1), (5.0, 5.0, 7)],
                    ),
                    ("none".into(), vec![]),
                ],
                parts: vec!["signal".into()],
            }),
            bars_svg(&Bars {
                title: "none".into(),
                x: Axis::new("lag", "s"),
                rows: vec![],
                parts: vec![],
            }),
        ];
        for out in &charts {
            assert!(out.starts_with("<svg "), "{out}");
            assert!(!out.contains("<?xml"));
            assert!(out.contains(" viewBox=\"0 0 960 "));
            assert!(out.contains("<title>"));
            assert!(out.trim_end().ends_with("</svg>"));
            assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
            assert!(
                !out.contains("<measured>") && !out.contains("pods <over>"),
                "escaped"
            );
        }
        assert!(charts[0].contains("<title>pods &lt;over&gt; time</title>"));
    }

    #[test]
    fn drawing_is_deterministic() {
        let c = chart(
            vec![Series::new(
                "goodput",
                Colour::Measured,
                Style::Line,
                noisy(3000, 3),
            )],
            vec![],
        );
        assert_eq!(svg(&c), svg(&c));
    }

    #[test]
    fn axes_say_what_and_unit() {
        let out = svg(&chart(
            vec![Series::new(
                "x",
                Colour::Measured,
                Style::Line,
                noisy(10, 1),
            )],
            vec![],
        ));
        assert!(out.contains(">\nexperiment time from the load event (s)\n</text>"));
        assert!(out.contains(">\npods (count)\n</text>"));
        assert!(out.contains("font-family=\"sans-serif\""));
    }
}
