//! Pure: a comparison's page (the kit's HPA emulation against the upstream HPA): per case, each
//! figure under both and whether it is within the band, and the comparison's own report.

use maud::html;

use super::case::{self, load_event, time_axis};
use super::chart::{self, Axis, Chart, Colour, Series, Style};
use super::html::{document, figure, markdown, shell_line};
use super::read::{CaseRecord, CompareRecord};

pub fn page(c: &CompareRecord) -> String {
    let name = c
        .dir
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let body = html! {
        h1 { "The kit's HPA emulation against the upstream HPA: " (name) }
        p { "Each figure of a case under both autoscalers, in experiment time; a figure outside \
             the band is a defect of the emulation or a difference the report explains. Each \
             session's own page (report.html in its directory) has the runs in full." }
        @if c.sessions.is_none() {
            p.muted { "The two sessions are not beside this comparison (moved, or it predates \
                       naming them): the figures are here, the pods over time in each session's page." }
        }
        @for (case, figures) in &c.cases {
            @let outside = figures.iter().filter(|f| !f.within_band).count();
            h2 { (case) }
            p { @if outside == 0 { "Every figure within the band." }
                @else { (outside) " of " (figures.len()) " figures outside the band (marked)." } }
            div.scroll { table {
                thead { tr { th { "figure" } th { "emulated (embedded)" } th { "upstream (kube)" } th { "within band" } } }
                tbody { @for f in figures {
                    tr { td { (f.figure) } td.n.out[!f.within_band] { (f.emulated) }
                         td.n.out[!f.within_band] { (f.upstream) }
                         td { (if f.within_band { "yes" } else { "no" }) } }
                } }
            } }
            @if let Some((em, up)) = pods(c, case) {
                p { "Verdicts: emulated " strong { (em.summary.verdict) } ", upstream " strong { (up.summary.verdict) }
                    ". Each run in full: " a href=(beside(em)) { "emulated" } ", " a href=(beside(up)) { "upstream" } "." }
                (figure("Desired and ready pods under both autoscalers", chart::svg(&Chart {
                title: format!("{case}: pods"),
                x: time_axis(),
                y: Axis::new("pods", "count"),
                load: em.config.as_ref().and_then(|x| load_event(&x.scenario_experiment_time.event)),
                series: vec![
                    step("desired, emulated", Colour::MeasuredAlt, em, |r| r.pods_desired),
                    step("ready, emulated", Colour::Measured, em, |r| r.pods_ready),
                    step("desired, upstream", Colour::Pooled, up, |r| r.pods_desired),
                    step("ready, upstream", Colour::PerPod, up, |r| r.pods_ready),
                ],
                events: [("emulated", em), ("upstream", up)]
                    .into_iter()
                    .flat_map(|(hpa, c)| case::chart_events(c).into_iter().map(move |mut e| {
                        e.label = format!("{hpa} {}", e.label);
                        e
                    }))
                    .collect(),
                y_max: None,
            })))
            }
        }
        h2 { "Run it again" }
        @match &c.command {
            Some(argv) => { pre { code { (shell_line(argv)) } } }
            None => { p { "This comparison predates keeping its command line: its report below names the sessions it compared." } }
        }
        @if let Some(md) = &c.report_md {
            details { summary { "The comparison's report (compare.md)" } (markdown(md)) }
        }
    };
    document(&format!("Emulated vs upstream HPA: {name}"), body)
}

/// The case's record in each session, when the comparison names them.
fn pods<'a>(c: &'a CompareRecord, case: &str) -> Option<(&'a CaseRecord, &'a CaseRecord)> {
    let (em, up) = c.sessions.as_ref()?;
    let find = |s: &'a super::read::SessionRecord| {
        s.cases
            .iter()
            .find(|r| r.summary.case == case || r.name() == case)
    };
    Some((find(em)?, find(up)?))
}

fn step(name: &str, colour: Colour, c: &CaseRecord, f: fn(&super::read::Row) -> f64) -> Series {
    Series::new(
        name,
        colour,
        Style::Step,
        c.rows.iter().map(|r| (r.t, f(r))).collect(),
    )
}

/// A case's page as a link from the comparison, which sits beside its sessions.
fn beside(c: &CaseRecord) -> String {
    let part = |p: &std::path::Path| {
        p.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    };
    let session = c.dir.parent().map(part).unwrap_or_default();
    format!("../{session}/{}/report.html", part(&c.dir))
}
