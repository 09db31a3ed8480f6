//! Pure: one case's part of a page, from its record read back: the verdict in words, the
//! configuration one line each, measured beside every model with the ratio, the plots with the
//! run's events on their time axis, the events, the command that runs it again, the record's
//! own report.

use maud::{Markup, html};

use super::chart::{self, Axis, Bars, Chart, Colour, Event, EventKind, LoadMark, Series, Style};
use super::html::{Verdict, figure, markdown, num, shell_line, verdict_box};
use super::read::{CaseRecord, ModelRow, Row, RunEvent};
use crate::runner::fidelity::{MODELS, Table};
use crate::runner::judge::{BAND, Matches};
use crate::runner::lag::Lag;
use falsification_model::experiment::HpaSignal;

/// The time axis of every case plot.
pub fn time_axis() -> Axis {
    Axis::new("experiment time from the load event", "s")
}

/// The whole of one case, headed at `level` (`h1` on its own page, `h2` in a session).
pub fn section(c: &CaseRecord, own_page: bool) -> Markup {
    let s = &c.summary;
    let title = c.config.as_ref().map_or("", |x| x.title.as_str());
    html! {
        section id=(anchor(c)) {
            @if own_page { h1 { (c.name()) ": " (title) } } @else { h2 { (c.name()) ": " (title) } }
            // On its own page the parts sit under the h1, in a session under the case's h2.
            (verdict_box(&verdict(c)))
            (claim(c))
            (part(own_page, "What ran"))
            (configuration(c))
            (part(own_page, "Measured beside the models"))
            (figures(c))
            (part(own_page, "Plots"))
            p.muted {
                "Experiment time (run time × S = " (num(s.time_scale)) "), from the load event. \
                 Marks on the time axis: the load event (shaded), HPA decisions (▲ up, ▼ down), \
                 faults and remedies."
            }
            @if c.models.is_none() {
                p { "This record was written before the models' curves were kept (models.csv): \
                     the plots show what was measured, the table above each model's figures." }
            }
            @for (caption, svg) in plots(c) { (figure(&caption, svg)) }
            (part(own_page, "Events"))
            (events(c))
            (part(own_page, "Run it again"))
            (command(c))
            @if let Some(md) = &c.report_md {
                details {
                    summary { "The record's report (report.md)" }
                    (markdown(md))
                }
            }
            p.muted { "Record: " code { (c.dir.display()) } }
        }
    }
}

/// A part's heading, one level under the case's.
fn part(own_page: bool, text: &str) -> Markup {
    html! { @if own_page { h2 { (text) } } @else { h3 { (text) } } }
}

/// The case's verdict with the publication's figure for it.
pub fn verdict(c: &CaseRecord) -> Verdict<'_> {
    Verdict {
        name: c.name(),
        judgement: c.summary.verdict,
        reason: &c.extra.reason,
        published: c
            .extra
            .published
            .as_ref()
            .map(|p| p.text.as_str())
            .filter(|t| !t.is_empty()),
    }
}

/// The id a session's summary links to.
pub fn anchor(c: &CaseRecord) -> String {
    format!("{}-{}", c.summary.experiment, c.summary.case)
}

/// The claim, its refutation rule, what was published and which model the run matched.
fn claim(c: &CaseRecord) -> Markup {
    html! {
        @if let Some(x) = &c.config {
            p { strong { "The claim: " } (x.condition) ". " strong { "Refuted if " } (x.refuted_if) "." }
        }
        @if let Some(m) = c.summary.matches {
            p { "The measurement matches " (match m {
                Matches::Both => "both fluid models (they agree here)",
                Matches::PerPod => "the per-pod fluid model (one queue per pod, as clusters run)",
                Matches::Pooled => "the pooled fluid model (one shared queue, the publication's)",
                Matches::Neither => "neither fluid model within the bands",
            }) "." }
        }
        @if !c.extra.complete { p { strong { "The run was interrupted:" } " its figures cover only the part that ran." } }
    }
}

fn configuration(c: &CaseRecord) -> Markup {
    let s = &c.summary;
    let Some(x) = c.config.as_ref().map(|x| &x.scenario_experiment_time) else {
        return html! { p.muted { "experiment.toml is missing from this record: the configuration is not known." } };
    };
    let base = x.rho * f64::from(x.pods) * x.rate_per_pod;
    html! {
        ul.config {
            li { "Pods: " (x.pods) " at the start"
                @if let Some(h) = &x.hpa { ", " (h.min_replicas) " to " (h.max_replicas) " by the autoscaler" } }
            li { "Rate: each pod serves " (num(x.rate_per_pod)) " requests/s; base load ρ = " (num(x.rho))
                 " (" (num(base)) " first attempts/s)" }
            li { "Load event: " (load_event(&x.event).map_or("none".into(), |l| l.label)) }
            li { "Timeout and retries: " (num(x.timeout_s)) " s per attempt, " (x.retries) " retries (up to "
                 (x.retries + 1) " attempts a request)" }
            @if let Some(h) = &x.hpa {
                li { "Autoscaler signal: " (signal_words(h.signal)) "; target " (num(h.target_utilization * 100.0))
                     "% utilization; a new pod is ready " (num(h.dead_time_s)) " s after it is ordered" }
            } @else { li { "Autoscaler: none (fixed pods)" } }
            li { "Time scale: S = " (num(s.time_scale)) " (the run went S times faster; figures in experiment time), rate scale " (num(s.rate_scale)) }
            li { "Cluster: " (s.cluster) "; HPA: " (c.extra.hpa) }
            li { "Horizon: " (num(x.horizon_s)) " s after the load event" }
            @if let Some(r) = &x.routing { li { "Routing: " (r) } }
            @if let Some(d) = x.discipline.as_ref().and_then(|d| d.get("kind")).and_then(|k| k.as_str()) {
                li { "Queue discipline: " (d) }
            }
        }
    }
}

fn signal_words(signal: HpaSignal) -> &'static str {
    match signal {
        HpaSignal::First => "first attempts",
        HpaSignal::Ingress => "ingress (every attempt)",
        HpaSignal::Paired => "first attempts and ingress, paired",
        HpaSignal::Cpu => "CPU",
    }
}

/// The load event of an experiment's `event` table: its shaded span and its name.
pub fn load_event(event: &toml::Value) -> Option<LoadMark> {
    let kind = event.get("kind")?.as_str()?;
    let k = event
        .get("k")
        .and_then(toml::Value::as_float)
        .unwrap_or(1.0);
    match kind {
        "step" => Some(LoadMark {
            from: 0.0,
            to: None,
            label: format!("{}× step at 0 s", num(k)),
        }),
        "spike" => {
            let d = event.get("duration_s").and_then(toml::Value::as_float)?;
            Some(LoadMark {
                from: 0.0,
                to: Some(d),
                label: format!("{}× spike for {} s", num(k), num(d)),
            })
        }
        _ => None,
    }
}

/// Measured beside each model, the ratio, and what is outside the band marked.
fn figures(c: &CaseRecord) -> Markup {
    let t = Table::of(&c.summary);
    let (within, of) = t.per_pod_within();
    // A model with no figure in this record (runs do not run the request level) gets no column.
    let shown: Vec<usize> = (0..MODELS.len())
        .filter(|&i| t.figures.iter().any(|f| f.predicted[i].is_some()))
        .collect();
    html! {
        div.scroll { table {
            thead { tr { th { "figure" } th { "measured" }
                @for &i in &shown { th { (MODELS[i]) } th { "ratio" } } } }
            tbody { @for f in &t.figures {
                tr { td { (f.name) } td.n { (f.measured.text()) }
                    @for &i in &shown {
                        @match &f.predicted[i] {
                            Some(p) => {
                                td.n.out[p.outside] { (p.value.text()) }
                                td.n.out[p.outside] { (p.ratio.map_or(if p.outside { "differs".into() } else { String::new() }, |r| format!("{r:.2}"))) }
                            }
                            None => { td.n { "n/a" } td {} }
                        }
                    }
                }
            } }
        } }
        p.muted { (within) " of " (of) " figures within " (num(BAND * 100.0)) "% of the per-pod prediction; \
                  marked (red): outside " (num(BAND * 100.0)) "%, or one side lacks the figure. Ratio: measured / predicted. \
                  Recoveries and lost demand in experiment seconds from the load event." }
    }
}

/// The run's events on the time axis: HPA decisions, faults and remedies.
pub fn chart_events(c: &CaseRecord) -> Vec<Event> {
    run_events(c).into_iter().map(|(e, _)| e).collect()
}

/// The run's events with what the record says of each (an action's detail).
fn run_events(c: &CaseRecord) -> Vec<(Event, String)> {
    let mut out = Vec::new();
    let mut before = c.rows.first().map_or(0.0, |r| r.pods_desired);
    for &(t, desired) in &c.rescales {
        let kind = if desired >= before {
            EventKind::ScaleUp
        } else {
            EventKind::ScaleDown
        };
        let label = format!("{}→{}", num(before), num(desired));
        out.push((Event { at: t, label, kind }, String::new()));
        before = desired;
    }
    out.extend(c.events.iter().filter_map(|e| {
        let event = Event {
            at: e.t,
            // A killed pod is named in the detail; its row names no one.
            label: if e.who == "-" {
                format!("pod {}", e.what)
            } else {
                format!("{} {}", e.who, e.what)
            },
            kind: action_kind(e)?,
        };
        Some((event, e.detail.clone()))
    }));
    out
}

/// A fault or a remedy the case applied; `None` for a pod's ordinary life (ordered, ready, ...).
fn action_kind(e: &RunEvent) -> Option<EventKind> {
    match e.what.as_str() {
        "down" | "up" | "pods-unlisted" | "pods-listed" | "kill" | "shard-killed" | "crashed" => {
            Some(EventKind::Fault)
        }
        "min-replicas" | "rolled-out" => Some(EventKind::Remedy),
        _ => None,
    }
}

/// What every plot of a case shares: its time axis's marks, its rows, its models' rows.
struct Plots<'a> {
    c: &'a CaseRecord,
    load: Option<LoadMark>,
    events: Vec<Event>,
    models: &'a [ModelRow],
}

impl Plots<'_> {
    fn measured(&self, f: impl Fn(&Row) -> f64) -> Vec<(f64, f64)> {
        self.c.rows.iter().map(|r| (r.t, f(r))).collect()
    }

    fn model(
        &self,
        name: &str,
        colour: Colour,
        style: Style,
        f: impl Fn(&ModelRow) -> f64,
    ) -> Series {
        let points = self
            .models
            .iter()
            .filter(|m| m.model == name)
            .map(|m| (m.t, f(m)))
            .collect();
        Series::new(&format!("fluid {name}"), colour, style, points)
    }

    /// A chart over the case's time axis with its marks; empty series left out.
    fn chart(
        &self,
        title: &str,
        y: (&str, &str),
        lines: Vec<Series>,
        y_max: Option<f64>,
    ) -> String {
        chart::svg(&Chart {
            title: title.into(),
            x: time_axis(),
            y: Axis::new(y.0, y.1),
            series: lines.into_iter().filter(|s| !s.points.is_empty()).collect(),
            events: self.events.clone(),
            load: self.load.clone(),
            y_max,
        })
    }

    fn pods(&self) -> String {
        self.chart(
            "Pods",
            ("pods", "count"),
            vec![
                Series::new(
                    "measured desired",
                    Colour::MeasuredAlt,
                    Style::Step,
                    self.measured(|r| r.pods_desired),
                ),
                Series::new(
                    "measured ready",
                    Colour::Measured,
                    Style::Step,
                    self.measured(|r| r.pods_ready),
                ),
                self.model("per-pod", Colour::PerPod, Style::PredictedStep, |m| {
                    m.pods_ready
                }),
                self.model("pooled", Colour::Pooled, Style::PredictedStep, |m| {
                    m.pods_ready
                }),
            ],
            None,
        )
    }

    fn goodput(&self) -> String {
        let per_s = 1.0 / self.c.row_step_run_s;
        self.chart(
            "Goodput and demand",
            ("requests per run second", "1/s"),
            vec![
                Series::new(
                    "demand: first attempts",
                    Colour::Demand,
                    Style::Line,
                    self.measured(|r| r.first_attempts * per_s),
                ),
                Series::new(
                    "measured goodput",
                    Colour::Measured,
                    Style::Line,
                    self.measured(|r| r.successes * per_s),
                ),
                self.model("per-pod", Colour::PerPod, Style::Predicted, |m| m.goodput),
                self.model("pooled", Colour::Pooled, Style::Predicted, |m| m.goodput),
            ],
            None,
        )
    }

    /// The timeout across the record, when the configuration is known.
    fn timeout(&self) -> Series {
        let span = (self.c.rows.first(), self.c.rows.last());
        let points = match (span, self.timeout_s()) {
            ((Some(a), Some(b)), Some(t)) => vec![(a.t, t), (b.t, t)],
            _ => vec![],
        };
        Series::new("timeout", Colour::Limit, Style::Reference, points)
    }

    fn timeout_s(&self) -> Option<f64> {
        self.c
            .config
            .as_ref()
            .map(|x| x.scenario_experiment_time.timeout_s)
    }

    /// Waits clipped at three timeouts: an empty pool's wait is unbounded.
    fn clip(&self, w: f64) -> f64 {
        self.timeout_s().map_or(w, |t| w.min(3.0 * t))
    }

    fn wait_top(&self) -> Option<f64> {
        self.timeout_s().map(|t| 3.15 * t)
    }

    fn waits(&self) -> String {
        let s = self.c.summary.time_scale;
        self.chart(
            "Waits",
            ("wait", "s, experiment time"),
            vec![
                self.timeout(),
                Series::new(
                    "measured (sustained over 3 rows)",
                    Colour::Measured,
                    Style::Line,
                    self.measured(|r| self.clip(r.wait_sustained_s * s)),
                ),
                self.model("per-pod", Colour::PerPod, Style::Predicted, |m| {
                    self.clip(m.wait_s)
                }),
                self.model("pooled", Colour::Pooled, Style::Predicted, |m| {
                    self.clip(m.wait_s)
                }),
            ],
            self.wait_top(),
        )
    }

    fn pod_waits(&self) -> String {
        let mut lines = vec![self.timeout()];
        // Strict recovery needs every pod's wait at or below this: a queue above it holds debt.
        let drained = self
            .c
            .extra
            .measured
            .as_ref()
            .and_then(|m| m.drained_wait_run_s);
        if let (Some(d), Some(a), Some(b)) = (drained, self.c.rows.first(), self.c.rows.last()) {
            let d = d * self.c.summary.time_scale;
            let points = vec![(a.t, d), (b.t, d)];
            lines.push(Series::new(
                "drained (strict recovery)",
                Colour::Demand,
                Style::Reference,
                points,
            ));
        }
        lines.extend(self.c.pod_waits.values().enumerate().map(|(i, points)| {
            let clipped = points.iter().map(|&(t, w)| (t, self.clip(w))).collect();
            Series::new("", Colour::Nth(i), Style::Line, clipped)
        }));
        self.chart(
            "Every pod's wait",
            ("wait", "s, experiment time"),
            lines,
            self.wait_top(),
        )
    }

    fn signals(&self) -> String {
        let nan = f64::NAN;
        self.chart(
            "Signals",
            ("rate per run second", "1/s"),
            vec![
                Series::new(
                    "first attempts",
                    Colour::Measured,
                    Style::Line,
                    self.measured(|r| r.meter_first.unwrap_or(nan)),
                ),
                Series::new(
                    "ingress (every attempt)",
                    Colour::MeasuredAlt,
                    Style::Line,
                    self.measured(|r| r.meter_ingress.unwrap_or(nan)),
                ),
            ],
            None,
        )
    }
}

/// Each scale decision as a row: demand change to meter crossing, to decision, to pods ready.
fn lag(decisions: &[Lag]) -> String {
    chart::bars_svg(&Bars {
        title: "Signal to replicas".into(),
        x: time_axis(),
        rows: decisions
            .iter()
            .map(|d| {
                let crossed = d.crossed_s.or(d.demand_changed_s);
                let spans = [
                    (d.demand_changed_s, d.crossed_s, 0),
                    (crossed, Some(d.decided_s), 1),
                    (Some(d.decided_s), d.ready_s, 2),
                ];
                (
                    format!("{} to {}", d.from, d.to),
                    spans
                        .into_iter()
                        .filter_map(|(a, b, i)| Some((a?, b?.max(a?), i)))
                        .collect(),
                )
            })
            .collect(),
        parts: vec![
            "demand to meter crossing".into(),
            "crossing to HPA decision".into(),
            "decision to pods ready".into(),
        ],
    })
}

/// The case's plots, each with its caption.
fn plots(c: &CaseRecord) -> Vec<(String, String)> {
    let p = Plots {
        c,
        load: c
            .config
            .as_ref()
            .and_then(|x| load_event(&x.scenario_experiment_time.event)),
        events: chart_events(c),
        models: c.models.as_deref().unwrap_or_default(),
    };
    let mut out = vec![
        (
            "Pods: desired and ready, measured and predicted".into(),
            p.pods(),
        ),
        (
            "Goodput (attempts answered in time) and demand (first attempts)".into(),
            p.goodput(),
        ),
        ("Largest wait an arrival faces".into(), p.waits()),
    ];
    if !c.pod_waits.is_empty() {
        out.push((
            format!(
                "Every pod's wait ({} pods, one line each): a steady queue under the timeout is not debt",
                c.pod_waits.len()
            ),
            p.pod_waits(),
        ));
    }
    if c.rows.iter().any(|r| r.meter_first.is_some()) {
        out.push((
            "The autoscaler's signals as the meter published them".into(),
            p.signals(),
        ));
    }
    if let Some(l) = c.extra.lag.as_ref().filter(|l| !l.decisions.is_empty()) {
        out.push((
            "Signal to replicas: each scale decision from the demand change to the pods ready"
                .into(),
            lag(&l.decisions),
        ));
    }
    out
}

/// The HPA's decisions, the faults and remedies, and how many pods came and went.
fn events(c: &CaseRecord) -> Markup {
    let list = run_events(c);
    let count = |what: &str| c.events.iter().filter(|e| e.what == what).count();
    html! {
        @if list.is_empty() { p { "No HPA decision, fault or remedy in this run." } } @else {
            div.scroll { table {
                thead { tr { th { "time (s)" } th { "what" } th { "detail" } } }
                tbody { @for (e, detail) in &list {
                    tr { td.n { (num(e.at)) } td { (match e.kind {
                        EventKind::ScaleUp => "HPA scaled up",
                        EventKind::ScaleDown => "HPA scaled down",
                        EventKind::Fault => "fault",
                        EventKind::Remedy => "remedy",
                        EventKind::Abort => "abort",
                    }) } td { (e.label) " " (detail) } }
                } }
            } }
        }
        p.muted { "Pods: " (count("ordered")) " ordered, " (count("ready")) " ready, "
            (count("terminating")) " terminated, " (count("crashed")) " crashed (events.csv has each)." }
    }
}

/// The command that ran this case, as the record keeps it; rebuilt from the record when it
/// keeps none (written by an older version), and said so.
fn command(c: &CaseRecord) -> Markup {
    match &c.extra.command {
        Some(argv) => html! {
            pre { code { (shell_line(argv)) } }
            p.muted { "The command that wrote this record (a session's command runs all its cases)." }
        },
        None => {
            let mut cmd = Table::of(&c.summary).command;
            if let Some(seed) = c.config.as_ref().and_then(|x| x.seed) {
                cmd.push_str(&format!(" --seed {seed}"));
            }
            html! {
                pre { code { (cmd) } }
                p.muted { "Rebuilt from the record, which predates keeping the command line: \
                           flags beyond the case, scales, horizon and seed are not in it." }
            }
        }
    }
}
