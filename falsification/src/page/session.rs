//! Pure: a session's page (a run's or a suite's cases): every case's verdict first, the signals
//! side by side and Definition 9's region when the session compares stepped cases, then each
//! case whole.

use maud::{Markup, html};

use super::case::{self, time_axis};
use super::chart::{self, Axis, Chart, Colour, Event, Point, Scatter, Series, Style};
use super::html::{document, figure, markdown, verdict_box};
use super::read::{CaseRecord, SessionRecord};
use crate::runner::report::{pct, recovery_cell};

pub fn page(s: &SessionRecord) -> String {
    let name = s
        .dir
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    // A run of one experiment is headed by its claim; a suite by its directory.
    let first = s.cases.first();
    let one = first.filter(|f| {
        s.cases
            .iter()
            .all(|c| c.summary.experiment == f.summary.experiment)
    });
    let heading = match one.and_then(|f| Some((f, f.config.as_ref()?))) {
        Some((f, x)) => format!("{}: {}", f.summary.experiment, x.title),
        None => format!("Session {name}"),
    };
    let body = html! {
        h1 { (heading) }
        p.muted { "Session " (name) }
        p { (s.cases.len()) " case(s). Figures in experiment time (run time × the time scale S)." }
        (verdicts(s))
        @if !s.unreadable.is_empty() {
            h2 { "Cases without a readable record" }
            ul { @for (case, why) in &s.unreadable { li { (case) ": " (why) } } }
        }
        (side_by_side(&s.cases))
        @if let Some(md) = &s.index_md {
            details { summary { "The session's index (index.md: Definition 9, thresholds, stacks)" } (markdown(md)) }
        }
        @for c in &s.cases { (case::section(c, false)) }
    };
    document(&heading, body)
}

/// Each case's verdict in words, then one line per case with the headline figures.
fn verdicts(s: &SessionRecord) -> Markup {
    html! {
        @for c in &s.cases { (verdict_box(&case::verdict(c))) }
        div.scroll { table {
            thead { tr { th { "case" } th { "verdict" }
                th { "recovery: measured / per pod / pooled" } th { "lost demand: measured / per pod / pooled" } } }
            tbody { @for c in &s.cases {
                @let m = &c.summary.measured;
                @let f = &c.summary.predicted_experiment_time;
                tr {
                    td { a href={ "#" (case::anchor(c)) } { (c.name()) } }
                    td { span class={ "word " (c.summary.verdict.word()) } { (c.summary.verdict.word()) } }
                    td { (recovery_cell(m)) " / " (recovery_cell(&f.fluid_per_pod)) " / " (recovery_cell(&f.fluid_pooled)) }
                    td { (pct(m.lost_fraction)) " / " (pct(f.fluid_per_pod.lost_fraction)) " / " (pct(f.fluid_pooled.lost_fraction)) }
                }
            } }
        } }
    }
}

/// Stepped cases (those with a provisioning figure) side by side: ready pods, goodput, and the
/// achievable region (peak pods over the pods needed against the first-attempt work lost).
fn side_by_side(cases: &[CaseRecord]) -> Markup {
    let stepped: Vec<&CaseRecord> = cases
        .iter()
        .filter(|c| c.summary.measured.provisioning.peak_over_needed.is_some())
        .collect();
    if stepped.len() < 2 {
        return html! {};
    }
    let per_case = |f: &dyn Fn(&CaseRecord) -> Vec<(f64, f64)>, style| -> Vec<Series> {
        stepped
            .iter()
            .enumerate()
            .map(|(i, c)| Series::new(&c.name(), Colour::Nth(i), style, f(c)))
            .collect()
    };
    // Each case's own HPA decisions, named by its case.
    let events: Vec<Event> = stepped
        .iter()
        .flat_map(|c| {
            case::chart_events(c).into_iter().map(|mut e| {
                e.label = format!("{} {}", c.summary.case, e.label);
                e
            })
        })
        .collect();
    let chart = |title: &str, y: (&str, &str), series| Chart {
        title: title.into(),
        x: time_axis(),
        y: Axis::new(y.0, y.1),
        series,
        events: events.clone(),
        load: stepped[0]
            .config
            .as_ref()
            .and_then(|x| case::load_event(&x.scenario_experiment_time.event)),
        y_max: None,
    };
    let pods = chart(
        "Ready pods, one line per case",
        ("ready pods", "count"),
        per_case(
            &|c| c.rows.iter().map(|r| (r.t, r.pods_ready)).collect(),
            Style::Step,
        ),
    );
    let goodput = chart(
        "Goodput, one line per case",
        ("attempts answered in time per run second", "1/s"),
        per_case(
            &|c| {
                c.rows
                    .iter()
                    .map(|r| (r.t, r.successes / c.row_step_run_s))
                    .collect()
            },
            Style::Line,
        ),
    );
    let points = stepped
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            let f = &c.summary.predicted_experiment_time;
            [
                ("measured", &c.summary.measured, true),
                ("per pod", &f.fluid_per_pod, false),
                ("pooled", &f.fluid_pooled, false),
            ]
            .into_iter()
            .filter_map(move |(source, o, filled)| {
                Some(Point {
                    label: format!("{} {source}", c.name()),
                    colour: Colour::Nth(i),
                    filled,
                    x: o.provisioning.peak_over_needed?,
                    y: o.lost_fraction? * 100.0,
                })
            })
        })
        .collect();
    let region = Scatter {
        title: "Achievable region".into(),
        x: Axis::new("peak pods / pods needed at the target", "ratio"),
        y: Axis::new("first-attempt work lost", "%"),
        points,
    };
    html! {
        h2 { "The signals side by side" }
        p { "The same load under each case's autoscaler signal. The region (the publication's \
             Definition 9): a signal is better the closer it sits to the origin, paying neither in \
             pods beyond what the load needs nor in work lost; filled points are measured, \
             hollow ones predicted." }
        (figure("Ready pods, one line per case", chart::svg(&pods)))
        (figure("Goodput, one line per case", chart::svg(&goodput)))
        (figure("Achievable region: over-provisioning against first-attempt work lost (Definition 9)", chart::scatter_svg(&region)))
    }
}
