//! Text and JSON renderings of predictions. The JSON shape is the contract documented in README.md.

use std::fmt::Write;

use crate::experiment::{Discipline, LoadEvent};
use crate::outcome::{Judgement, Outcome, State};
use crate::predict::{CasePrediction, ExperimentPrediction};

/// Pretty JSON of one or more experiments' predictions.
pub fn json(predictions: &[ExperimentPrediction]) -> serde_json::Result<String> {
    match predictions {
        [one] => serde_json::to_string_pretty(one),
        many => serde_json::to_string_pretty(many),
    }
}

fn secs(v: Option<f64>) -> String {
    match v {
        Some(s) if s >= 100.0 => format!("{s:.0} s"),
        Some(s) => format!("{s:.1} s"),
        None => "never".to_string(),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |f| format!("{:.2}%", f * 100.0))
}

fn diff(v: Option<f64>) -> String {
    v.map_or(String::new(), |d| format!("{:+.1}%", d * 100.0))
}

/// Where each model puts the threshold of a sweep of HPA targets, beside the publication's 1/A.
fn threshold_text(out: &mut String, e: &ExperimentPrediction) {
    for t in &e.thresholds {
        let _ = writeln!(
            out,
            "Scaler threshold, {} routing ({}): the target from which the HPA keeps it failed, 1/A = {:.2} (the publication's)",
            t.routing,
            t.cases.join(", "),
            t.one_over_a
        );
        let _ = writeln!(out, "  fluid pooled     {}", t.fluid_pooled);
        let _ = writeln!(out, "  fluid per-pod    {}", t.fluid_per_pod);
        if let Some(r) = &t.request_level {
            let _ = writeln!(out, "  request level    {r}");
        }
    }
}

/// A model's state in one short cell: trapped is a self-sustaining failure, not a slow recovery.
pub fn state_cell(o: &Outcome) -> String {
    match o.state() {
        State::NotRecoveredWithinHorizon => format!("not in {:.0} s", o.horizon_s),
        state => state.to_string(),
    }
}

fn line(out: &mut String, model: &str, o: &Outcome, extra: &str) {
    // "never" only for a trap; a run still draining at its horizon recovers later than it.
    let time = |t: Option<f64>| match (o.state(), t) {
        (State::NotTriggered, _) => "-".to_string(),
        (_, Some(t)) => secs(Some(t)),
        (State::Recovered, None) => "-".to_string(),
        (State::Trapped, None) => "never".to_string(),
        (State::NotRecoveredWithinHorizon, None) => format!("> {:.0} s", o.horizon_s),
    };
    let (recovery, goodput) = (time(o.recovery_s), time(o.goodput_recovery_s));
    let _ = writeln!(
        out,
        "  {model:<15} {recovery:>10}  {goodput:>10}  {:>16}  {:>4}  {:>5}  {:>8}  {extra}",
        state_cell(o),
        o.peak_pods,
        o.final_pods,
        pct(o.lost_fraction),
    );
}

fn case_text(out: &mut String, c: &CasePrediction) {
    let s = &c.parameters;
    let _ = writeln!(
        out,
        "\ncase {} (A = {:.2}, rho = {:.2}, A rho = {:.2}, {} pods, {})",
        c.name,
        c.amplification,
        s.rho,
        c.amplification * s.rho,
        s.pods,
        s.event
    );
    if !c.published.text.is_empty() {
        let _ = writeln!(out, "  published: {}", c.published.text);
    }
    let _ = writeln!(
        out,
        "  {:<15} {:>10}  {:>10}  {:>16}  {:>4}  {:>5}  {:>8}  vs published",
        "model", "recovery", "goodput", "state", "peak", "final", "lost"
    );
    let p = &c.published;
    let _ = writeln!(
        out,
        "  {:<15} {:>10}  {:>10}  {:>16}  {:>4}  {:>5}  {:>8}",
        "published",
        p.recovery_s.map_or(
            if p.trapped == Some(true) {
                "never".into()
            } else {
                "-".into()
            },
            |r| secs(Some(r))
        ),
        "",
        p.trapped
            .map_or("-".into(), |t| State::of_trap(t).to_string()),
        p.peak_pods.map_or("-".into(), |v| v.to_string()),
        p.final_pods.map_or("-".into(), |v| v.to_string()),
        pct(p.lost_fraction),
    );
    let d = &c.recovery_relative_difference;
    line(out, "closed form", &c.closed_form, &diff(d.closed_form));
    line(out, "fluid pooled", &c.fluid_pooled, &diff(d.fluid_pooled));
    line(
        out,
        "fluid per-pod",
        &c.fluid_per_pod,
        &diff(d.fluid_per_pod),
    );
    if let Some(r) = &c.request_level {
        let spread = match r.spread.recovery_s {
            Some([lo, hi]) => format!(
                "{} seeds {:?}: {}..{}",
                r.seeds.len(),
                r.topology,
                secs(Some(lo)),
                secs(hi.is_finite().then_some(hi))
            ),
            None => format!("{} seeds {:?}", r.seeds.len(), r.topology),
        };
        line(
            out,
            "request level",
            &r.median,
            &format!("{} [{spread}]", diff(d.request_level)),
        );
        // With no load event, any timeout is a trigger the service made by itself.
        if s.event == LoadEvent::None {
            let firsts: Vec<String> = r
                .seeds
                .iter()
                .zip(&r.runs)
                .map(|(seed, o)| {
                    o.first_timeout_s.map_or(format!("seed {seed} none"), |t| {
                        format!("seed {seed} {} ({})", secs(Some(t)), state_cell(o))
                    })
                })
                .collect();
            let _ = writeln!(
                out,
                "  trigger of its own (request level, first timeout): {}",
                firsts.join(", ")
            );
        }
    }
    defense_line(out, c);
    let v = &c.verdict_fluid_pooled;
    let _ = writeln!(
        out,
        "  refutation rule on the pooled fluid: {}",
        match v.judgement {
            Judgement::Held => "holds".to_string(),
            Judgement::Refuted => format!("REFUTED: {}", v.reason),
            j => format!("{j}: {}", v.reason),
        }
    );
}

/// A case's defenses and what each model says they refuse at base load (F11); nothing for FIFO
/// pods and bare clients.
fn defense_line(out: &mut String, c: &CasePrediction) {
    let s = &c.parameters;
    if s.discipline == Discipline::Fifo && s.client.is_none() {
        return;
    }
    let cost = |o: &Outcome| pct(o.base_refused);
    let _ = writeln!(
        out,
        "  defense: pods {}, clients {}; refused at base load: fluid {} pooled, {} per pod{}",
        s.discipline,
        s.client,
        cost(&c.fluid_pooled),
        cost(&c.fluid_per_pod),
        c.request_level.as_ref().map_or(String::new(), |r| format!(
            ", request level {}",
            cost(&r.median)
        ))
    );
}

/// The end of a run in the publication's words: healthy after T s, or failed.
fn end_state(o: &Outcome) -> String {
    match o.state() {
        State::NotTriggered => "healthy (never failed)".into(),
        State::Recovered => format!("healthy after {}", secs(o.recovery_s)),
        State::Trapped => "failed".into(),
        State::NotRecoveredWithinHorizon => format!("still draining at {:.0} s", o.horizon_s),
    }
}

/// One Definition 9 cell: `capacity met | peak / needed | lost s (fraction) | end`.
pub fn provisioning_cells(o: &Outcome) -> [String; 4] {
    let p = &o.provisioning;
    [
        p.capacity_met_s.map_or("never".into(), |t| secs(Some(t))),
        p.peak_over_needed.map_or("-".into(), |r| format!("{r:.2}")),
        match p.lost_s {
            Some(l) => format!("{} ({})", secs(Some(l)), pct(o.lost_fraction)),
            None => "-".into(),
        },
        end_state(o),
    ]
}

/// The publication's Definition 9 table for an experiment of sustained steps under an autoscaler:
/// per case, per fluid topology.
fn provisioning_text(out: &mut String, e: &ExperimentPrediction) {
    let stepped = |c: &&CasePrediction| {
        c.parameters.hpa.is_some() && matches!(c.parameters.event, LoadEvent::Step { .. })
    };
    if !e.cases.iter().any(|c| stepped(&c)) {
        return;
    }
    let _ = writeln!(
        out,
        "
Definition 9 (fluid): time until capacity meets the load, peak pods over pods needed at \
         the target, first-attempt work lost in seconds of the stepped demand, state at the end"
    );
    let _ = writeln!(
        out,
        "  {:<16} {:<9} {:>10}  {:>12}  {:>20}  state",
        "case", "fluid", "capacity", "peak/needed", "lost"
    );
    for c in e.cases.iter().filter(stepped) {
        for (topology, o) in [("pooled", &c.fluid_pooled), ("per pod", &c.fluid_per_pod)] {
            let [met, over, lost, end] = provisioning_cells(o);
            let _ = writeln!(
                out,
                "  {:<16} {topology:<9} {met:>10}  {over:>12}  {lost:>20}  {end}",
                c.name
            );
        }
    }
}

/// The human-readable report.
pub fn text(predictions: &[ExperimentPrediction]) -> String {
    let mut out = String::new();
    for e in predictions {
        let _ = writeln!(
            out,
            "{}: {} (time scale {})",
            e.experiment, e.title, e.time_scale
        );
        let _ = writeln!(
            out,
            "  condition: {}\n  refuted if: {}",
            e.condition, e.refuted_if
        );
        if e.time_scale != 1.0 {
            let _ = writeln!(
                out,
                "  times below are run time: experiment time / {}",
                e.time_scale
            );
        }
        for c in &e.cases {
            case_text(&mut out, c);
        }
        provisioning_text(&mut out, e);
        threshold_text(&mut out, e);
        out.push('\n');
    }
    out
}
