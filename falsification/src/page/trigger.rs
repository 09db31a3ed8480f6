//! Pure: a trigger test's page: what it decided in words, the plan beside what happened, the
//! stop rules and which fired, the amplification per layer, the discipline the target behaved
//! like, the run over time, and the command.

use maud::{Markup, html};

use super::chart::{self, Axis, Chart, Colour, Event, EventKind, LoadMark, Series, Style};
use super::html::{document, figure, markdown, num, shell_line};
use super::read::TriggerRecord;
use crate::runner::report::pct;
use crate::trigger::Decision;

pub fn page(r: &TriggerRecord, report_md: Option<&str>) -> String {
    let body = html! {
        h1 { "Trigger test of " code { (r.target) } }
        (decision(r))
        h2 { "The plan beside what happened" }
        (plan_beside(r))
        h2 { "Stop rules" }
        (stop_rules(r))
        h2 { "Amplification per layer" }
        (layers(r))
        h2 { "What the target behaved like" }
        @match &r.measured.discipline {
            Some(d) => { p { strong { (d.named) } ": " (d.why) } }
            None => { p { "Not named: the run had no failed phase to read it from (or the record predates it)." } }
        }
        h2 { "Over time" }
        @for (caption, svg) in plots(r) { (figure(&caption, svg)) }
        h2 { "Run it again" }
        @match &r.command {
            Some(argv) => { pre { code { (shell_line(argv)) } } }
            None => { p { "This record predates the recorded command: the plan above is what ran." } }
        }
        @if let Some(md) = report_md {
            details { summary { "The record's report (report.md)" } (markdown(md)) }
        }
    };
    document(&format!("Trigger test of {}", r.target), body)
}

/// The decision in words for a reader outside the team.
fn decision(r: &TriggerRecord) -> Markup {
    let d = r.measured.decision;
    let (class, meaning) = match d {
        Decision::Trapped => (
            "refuted",
            "the spike put the target in a failed state that outlasted it: with the retries it \
             was offered at least its capacity and kept failing (retry debt)",
        ),
        Decision::Recovered => (
            "held",
            "the target failed during the spike and then recovered by itself at the base load",
        ),
        Decision::NotTriggered => ("held", "the spike did not make it fail"),
        Decision::Aborted => (
            "inconclusive",
            "a stop rule fired and the load stopped before the state was decided",
        ),
        Decision::Undecided => ("inconclusive", "the run ended before the state was decided"),
    };
    let predicted = if r.plan.trapped {
        Decision::Trapped
    } else {
        Decision::Recovered
    };
    html! {
        div class={ "verdict " (class) } {
            strong { "Decision: " } span.word { (d.text()) } " — " (meaning) "."
            br;
            span.muted { "Predicted: " (predicted.text())
                (if d == predicted { ", as it happened" } else { "" })
                ". The load stopped " (r.measured.ended.text())
                (if r.measured.failing_at_end { "; the target was still failing then" } else { "" }) "." }
        }
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or("—".into(), |s| format!("{s:.1} s"))
}

fn plan_beside(r: &TriggerRecord) -> Markup {
    let (p, m) = (&r.plan, &r.measured.outcome);
    let sent = r
        .load_rows
        .iter()
        .map(|x| x.first_attempts)
        .fold(0.0, f64::max);
    html! {
        div.scroll { table {
            thead { tr { th { "" } th { "planned / predicted" } th { "what happened" } } }
            tbody {
                tr { td { "base load" } td.n { (num(p.rate)) " first attempts/s (ρ = " (num(p.rho)) ")" }
                     td.n { @match &r.measured.health_before {
                         Some(h) => { (num(h.successes)) " answers to " (num(h.first_attempts)) " first attempts in "
                                      (h.seconds) " s: " (if h.healthy { "healthy" } else { "unhealthy" }) }
                         None => { "not checked" }
                     } } }
                tr { td { "spike" } td.n { (num(p.k)) "× for " (num(p.spike_s)) " s (at most " (num(p.max_rate)) "/s)" }
                     td.n { "at most " (num(sent)) " first attempts in a second" } }
                tr { td { "retry policy" } td { (p.retries) " retries, timeout " (num(p.timeout_s)) " s" } td {} }
                tr { td { "triggered" } td { "yes" } td { (if m.triggered { "yes" } else { "no" }) } }
                tr { td { "state" } td { (if p.trapped { "trapped" } else { "recovers" }) } td { (r.measured.decision.text()) } }
                tr { td { "recovery after the spike (backlog drained)" }
                     td.n { @if p.trapped { "never: trapped" } @else { "closed form " (secs(p.recovery_closed_s)) ", fluid " (secs(p.recovery_fluid_s)) } }
                     td.n { (secs(m.recovery_s)) } }
                tr { td { "goodput back (99% succeed)" } td {} td.n { (secs(m.goodput_recovery_s)) } }
                tr { td { "requests lost" } td {} td.n { (pct(m.lost_fraction)) } }
                tr { td { "amplification A" } td.n { (format!("{:.2}", p.amplification)) " (threshold 1/A = " (format!("{:.2}", p.threshold)) ")" }
                     td.n { (r.measured.amplification.map_or("—".into(), |a| format!("{a:.2}"))) " at the client" } }
                tr { td { "longest run" } td.n { (num(p.max_duration_s)) " s" } td.n { (r.load_rows.len()) " s of load" } }
            }
        } }
        @if !p.warnings.is_empty() { ul { @for w in &p.warnings { li { (w) } } } }
    }
}

fn stop_rules(r: &TriggerRecord) -> Markup {
    let fired = r.abort.as_ref();
    html! {
        @if r.stop_rules.is_empty() {
            p { "None but the maximum duration and Ctrl-C." }
        } @else {
            ul { @for rule in &r.stop_rules {
                li { code { (rule) } ": "
                    @if fired.is_some_and(|f| &f.rule == rule) { strong { "fired" } } @else { "did not fire" } }
            } }
        }
        @if let Some(f) = fired {
            p { "Stopped by " code { (f.rule) } ": it " strong { "fired" } " " (format!("{:.1}", f.at_s))
                " s after the spike began; the seconds it held saw " (f.values.join(", ")) "." }
        }
    }
}

fn layers(r: &TriggerRecord) -> Markup {
    html! {
        div.scroll { table {
            thead { tr { th { "layer" } th { "attempts or arrivals per first attempt" } th { "over" } } }
            tbody {
                tr { td { "configured (the plan's A)" } td.n { (format!("{:.2}", r.plan.amplification)) } td {} }
                @if let Some(c) = r.plan.client_amplification {
                    tr { td { "the client's retries alone" } td.n { (format!("{c:.2}")) } td {} }
                }
                tr { td { "measured at the client" } td.n { (r.measured.amplification.map_or("—".into(), |a| format!("{a:.2}"))) }
                     td { (r.measured.failed_phase.map_or("no failed phase".into(), |(a, b)| format!("{} s to {} s after the spike", num(a), num(b)))) } }
                @for l in &r.measured.layers {
                    tr { td { "measured at " (l.layer) } td.n { (l.per_first_attempt.map_or("—".into(), |a| format!("{a:.2}"))) }
                         td { (num(l.over_s)) " s" } }
                }
            }
        } }
    }
}

fn plots(r: &TriggerRecord) -> Vec<(String, String)> {
    let t0 = r.plan.before_s;
    let rows = |f: &dyn Fn(&super::read::LoadRow) -> Option<f64>| -> Vec<(f64, f64)> {
        r.load_rows
            .iter()
            .filter_map(|x| Some((x.second - t0, f(x)?)))
            .collect()
    };
    let events: Vec<Event> = r
        .abort
        .iter()
        .map(|f| Event {
            at: f.at_s,
            label: "stop rule fired".into(),
            kind: EventKind::Abort,
        })
        .collect();
    let load = Some(LoadMark {
        from: 0.0,
        to: Some(r.plan.spike_s),
        label: format!("{}× spike", num(r.plan.k)),
    });
    let x = Axis::new("time from the spike's start", "s");
    let mut ratios = vec![
        Series::new(
            "successes / attempts",
            Colour::Measured,
            Style::Line,
            rows(&|x| (x.attempts > 0.0).then(|| x.successes / x.attempts)),
        ),
        Series::new(
            "attempts / first attempts",
            Colour::MeasuredAlt,
            Style::Line,
            rows(&|x| (x.first_attempts > 0.0).then(|| x.attempts / x.first_attempts)),
        ),
        Series::new(
            "configured A",
            Colour::Limit,
            Style::Reference,
            rows(&|_| Some(r.plan.amplification)),
        ),
    ];
    for (i, l) in r.layers.iter().enumerate() {
        // Arrivals at the layer per first attempt the clients sent in the same second.
        let points = rows(&|x| {
            let a = l.arrivals(x.second - t0, 1.0)?;
            (x.first_attempts > 0.0).then(|| a / x.first_attempts)
        });
        ratios.push(Series::new(
            &format!("arrivals at {} / first attempts", l.layer),
            Colour::Nth(i + 6),
            Style::Line,
            points,
        ));
    }
    let chart = |title: &str, y: Axis, series: Vec<Series>| Chart {
        title: title.into(),
        x: x.clone(),
        y,
        series,
        events: events.clone(),
        load: load.clone(),
        y_max: None,
    };
    vec![
        (
            "Requests per second the clients sent and got answered".into(),
            chart::svg(&chart(
                "Rates",
                Axis::new("per second", "1/s"),
                vec![
                    Series::new("first attempts", Colour::Demand, Style::Line, rows(&|x| Some(x.first_attempts))),
                    Series::new("attempts", Colour::MeasuredAlt, Style::Line, rows(&|x| Some(x.attempts))),
                    Series::new("successes", Colour::Measured, Style::Line, rows(&|x| Some(x.successes))),
                ],
            )),
        ),
        (
            "Success ratio and amplification (attempts, and each layer's arrivals, per first attempt)".into(),
            chart::svg(&chart("Ratios", Axis::new("ratio", "per first attempt"), ratios)),
        ),
    ]
}
