//! `check`'s report as text (for people), JSON (the documented contract) and SARIF 2.1.0 (for
//! code review tools: one result per layer, one for the diagnosis, one per skipped block).

use std::fmt::Write;

use falsification_model::State;
use serde_json::{Value, json};

use super::Report;
use super::amplify::SignalSees;
use super::defenses::span;
use super::headroom::Held;
use super::layer::{Abandoned, Budget, Layer, Source, Tries};

fn secs(s: Option<f64>) -> String {
    s.map_or("none".into(), span)
}

fn place(s: &Source) -> String {
    match s.line {
        Some(l) => format!("{}:{l}", s.file.display()),
        None => s.file.display().to_string(),
    }
}

fn layer_line(i: usize, l: &Layer, tries: Option<f64>) -> String {
    let on: Vec<&str> = l.retry_on.classes().iter().map(|c| c.name()).collect();
    let limit = match l.tries {
        Tries::AtMost(n) => format!("up to {n} tries"),
        Tries::OnePerServer { servers } => format!("one try per server ({servers})"),
        Tries::Unlimited => "tries with no count limit".into(),
    };
    let mut line = format!(
        "  {}. {} ({}): {limit} on {}; per try {}, overall {}",
        i + 1,
        l.name(),
        place(&l.source),
        if on.is_empty() {
            "nothing".into()
        } else {
            on.join(", ")
        },
        secs(l.per_try_timeout_s),
        secs(l.overall_timeout_s),
    );
    match l.budget {
        Some(Budget::Ratio { ratio }) => {
            let _ = write!(line, "; budget {:.0}% of requests", ratio * 100.0);
        }
        Some(
            b @ Budget::InFlight {
                percent,
                min_retry_concurrency,
            },
        ) => {
            let _ = write!(
                line,
                "; budget {percent}% of requests in flight, at least {min_retry_concurrency} \
                 ({:.2} retries per request once every try times out)",
                b.failed_ratio()
            );
        }
        Some(Budget::Quota { retries_paid }) => {
            let _ = write!(
                line,
                "; a quota that pays {retries_paid:.0} retries, then none while every attempt fails"
            );
        }
        None => {}
    }
    if !l.defenses.is_none() {
        let _ = write!(line, "; {}", l.defenses);
    }
    if l.aborts_on_close {
        line.push_str("; stops when its caller leaves");
    }
    if let Some(t) = tries {
        let _ = write!(
            line,
            "\n     timeouts: {t:.2} tries per request from its caller"
        );
    }
    for n in &l.notes {
        let _ = write!(line, "\n     note: {n}");
    }
    line
}

fn classes_text(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "\nAmplification per failure class (attempts at the service per request):"
    );
    for c in &r.classes {
        let _ = if c.a.is_finite() {
            writeln!(
                out,
                "  {:<16} A = {:>6.2}   1/A = {:.3}",
                c.class.name(),
                c.a,
                c.threshold
            )
        } else {
            writeln!(
                out,
                "  {:<16} A unbounded (a layer retries with no count, time or budget limit)",
                c.class.name()
            )
        };
    }
    if let Some(t) = r.tau_out_s {
        let _ = writeln!(
            out,
            "  an attempt fails at the service after {}",
            secs(Some(t))
        );
    }
}

fn system_text(out: &mut String, r: &Report) {
    if let Some(h) = &r.hpa {
        let sees = match h.signal_sees {
            SignalSees::FirstAttempts => "first attempts (excludes retries and debt)",
            SignalSees::Retries => "a signal that sees retries",
            SignalSees::Debt => "busy time (CPU: sees the debt)",
        };
        let target = h
            .target
            .map_or(String::new(), |u| format!(", target u* = {u:.2}"));
        let window = h
            .scale_down_stabilization_s
            .map_or(String::new(), |w| format!(", scale-down window {w} s"));
        let _ = writeln!(
            out,
            "\nAutoscaler: {} scales on {sees}{target}, {} to {} pods{window}",
            h.name, h.min_replicas, h.max_replicas
        );
    }
    let _ = writeln!(
        out,
        "\nService: {}",
        match (r.service.abandoned, r.service.assumed) {
            (Abandoned::Served, true) =>
                "finishes abandoned work (assumed, as the publication does; say [service] \
                 abandoned = \"dropped\" in the stack file if it drops it)",
            (Abandoned::Served, false) => "finishes abandoned work",
            (Abandoned::Dropped, _) => "drops abandoned work",
        }
    );
    if let Some(source) = &r.service.discipline_source {
        let _ = writeln!(
            out,
            "Pods: {} ({}, {})",
            r.service.discipline,
            source.locator,
            place(source)
        );
        for n in &r.service.discipline_notes {
            let _ = writeln!(out, "  note: {n}");
        }
    }
}

fn fixes_text(out: &mut String, r: &Report) {
    if r.fixes.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nWhat to change, ranked:");
    for (i, f) in r.fixes.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {}{}: A = {:.2}, {}",
            i + 1,
            f.change,
            f.layer
                .as_ref()
                .map_or(String::new(), |l| format!(" ({l})")),
            f.a,
            if f.removes_second_state {
                "removes the second state"
            } else {
                "the second state remains"
            }
        );
    }
}

/// Each retrying layer's largest budget and count (envoyproxy/envoy#25660, twitter/finagle#946).
fn headroom_text(out: &mut String, r: &Report) {
    let Some(h) = r.retry_allowances.as_ref().filter(|h| !h.layers.is_empty()) else {
        return;
    };
    let at = match h.held {
        Held::Target => "the target u*",
        Held::Today => "today's utilization",
    };
    let _ = writeln!(
        out,
        "\nThe most each layer can retry, the others as they are (1/A must stay above {at} = \
         {:.2}):",
        h.utilization
    );
    for a in &h.layers {
        let room = match (a.budget_below, a.retries_at_most) {
            (Some(b), Some(n)) => format!(
                "a budget below {} retries per request{}, or at most {n} retr{}",
                down(b),
                a.budget_percent_below.map_or(String::new(), |p| format!(
                    " (budget_percent below {}%)",
                    percent(p)
                )),
                if n == 1 { "y" } else { "ies" }
            ),
            _ => "nothing at this layer is enough: the others alone are trapped".into(),
        };
        let _ = writeln!(
            out,
            "  {}: {:.2} tries now, the others A = {:.2}: {room}",
            a.layer, a.tries, a.others_a
        );
        if let Some(f) = &a.min_retry_concurrency {
            let at_rate = f.at_rate.as_ref().map_or(String::new(), |x| {
                format!("; at {}/s: at most {}", x.rate, x.at_most)
            });
            let _ = writeln!(
                out,
                "     min_retry_concurrency {}: at most {:.2} x the requests/s through one Envoy \
                 (tries of {}){at_rate}",
                f.now,
                f.per_rate,
                span(f.try_s)
            );
        }
    }
}

/// Two decimals, rounded down: "below 0.33" must not overstate a supremum of 0.335 (the 1e-6
/// keeps a supremum of 1 computed as 0.99999... at 1.00).
fn down(x: f64) -> String {
    format!("{:.2}", ((x * 100.0) + 1e-6).floor() / 100.0)
}

/// A percentage to a tenth, rounded down likewise: "33.3", "10".
fn percent(x: f64) -> String {
    (((x * 10.0) + 1e-6).floor() / 10.0).to_string()
}

fn provenance_text(out: &mut String, r: &Report) {
    let defaults: Vec<String> = r
        .layers
        .iter()
        .flat_map(|l| {
            l.defaults.iter().map(move |d| {
                format!(
                    "  {}: {} = {} ({}; {})",
                    l.name(),
                    d.setting,
                    d.value,
                    d.version,
                    d.reference
                )
            })
        })
        .collect();
    if !defaults.is_empty() {
        let _ = writeln!(
            out,
            "\nDefaults used (not in the files):\n{}",
            defaults.join("\n")
        );
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped:");
        for s in &r.skipped {
            let _ = writeln!(out, "  {}: {}: {}", s.file.display(), s.what, s.why);
        }
    }
}

/// The report for people.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Layers, outermost first:");
    if r.layers.is_empty() {
        let _ = writeln!(out, "  (none retries: A = 1)");
    }
    for (i, l) in r.layers.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}",
            layer_line(i, l, r.timeout().tries.get(i).copied())
        );
    }
    if !r.other_routes.is_empty() {
        let _ = writeln!(
            out,
            "  (the path with the largest A for timeouts; also read, each checked on its own \
             path: {}; --route picks one)",
            r.other_routes.join(", ")
        );
    }
    classes_text(&mut out, r);
    system_text(&mut out, r);
    let _ = writeln!(out, "\nVerdict:");
    for reason in &r.reasons {
        let _ = writeln!(out, "  {reason}");
    }
    if let Some(t) = &r.trigger {
        trigger_text(&mut out, t);
    }
    fixes_text(&mut out, r);
    headroom_text(&mut out, r);
    provenance_text(&mut out, r);
    out
}

fn trigger_text(out: &mut String, t: &super::TriggerFigure) {
    let _ = writeln!(
        out,
        "\nAt utilization {:.2} (A rho = {:.2}): the smallest trigger is {} of excess work{}",
        t.rho,
        t.a_rho,
        secs(Some(t.smallest_trigger_s)),
        t.smallest_trigger_requests
            .map_or(String::new(), |n| format!(
                ", {n:.0} requests beyond what the service serves"
            )),
    );
    if !t.shortest_spikes.is_empty() {
        let spikes: Vec<String> = t
            .shortest_spikes
            .iter()
            .map(|(k, s)| format!("{k}x for {s:.1} s"))
            .collect();
        let _ = writeln!(out, "  shortest spikes that trigger: {}", spikes.join(", "));
    }
    if let Some(s) = &t.spike {
        let state = if s.triggers {
            State::of_trap(s.trapped)
        } else {
            State::NotTriggered
        };
        let closed = match (state, s.recovery_closed_s) {
            (State::Trapped, _) => " (A rho >= 1: it never recovers)".to_string(),
            (_, Some(r)) => format!(" {r:.0} s after it ends (closed form)"),
            _ => String::new(),
        };
        let fluid = s
            .recovery_fluid_s
            .map_or(String::new(), |r| format!("; pooled fluid model: {r:.0} s"));
        let _ = writeln!(
            out,
            "  a {}x spike for {} s: {state}{closed}{fluid}",
            s.k, s.length_s
        );
    }
}

/// The JSON contract: the report's fields.
pub fn json(r: &Report) -> Value {
    json!(r)
}

fn location(s: &Source) -> Value {
    let mut physical = json!({ "artifactLocation": { "uri": s.file.display().to_string() } });
    if let Some(line) = s.line {
        physical["region"] = json!({ "startLine": line });
    }
    json!({
        "physicalLocation": physical,
        "logicalLocations": [{ "name": s.locator }],
    })
}

/// SARIF 2.1.0: the diagnosis at the layer that multiplies most (an error when a second state
/// exists), a note per layer, a warning per skipped block.
pub fn sarif(r: &Report) -> Value {
    // Where the fixes point: the layer that multiplies most, else the autoscaler.
    let diagnosis_locations: Vec<Value> = match super::amplify::most_multiplying(r.timeout()) {
        Some(i) => vec![location(&r.layers[i].source)],
        None => r
            .hpa
            .as_ref()
            .map(|h| vec![location(&h.source)])
            .unwrap_or_default(),
    };
    let mut results = vec![json!({
        "ruleId": "retry-debt/second-state",
        "level": if r.second_state { "error" } else { "note" },
        "message": { "text": format!(
            "{} (A = {:.2} for timeouts, 1/A = {:.3}){}",
            r.reasons.join("; "),
            r.timeout().a,
            r.timeout().threshold,
            r.fixes.first().map_or(String::new(), |f| format!(". First fix: {}", f.change)),
        ) },
        "locations": diagnosis_locations,
    })];
    for (i, l) in r.layers.iter().enumerate() {
        results.push(json!({
            "ruleId": "retry-debt/layer",
            "level": "note",
            "message": { "text": format!(
                "{} multiplies timeouts by {:.2} ({})",
                l.name(),
                r.timeout().tries.get(i).copied().unwrap_or(1.0),
                l.tries.limit().map_or("no count limit".into(), |n| format!("{n} tries at most"))
            ) },
            "locations": [location(&l.source)],
        }));
    }
    for s in &r.skipped {
        results.push(json!({
            "ruleId": "retry-debt/skipped",
            "level": "warning",
            "message": { "text": format!("{}: {}", s.what, s.why) },
            "locations": [{ "physicalLocation": { "artifactLocation": { "uri": s.file.display().to_string() } } }],
        }));
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "falsification check",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": [
                    { "id": "retry-debt/second-state", "shortDescription": { "text": "The service has a second (failed) state a trigger can put it in" } },
                    { "id": "retry-debt/layer", "shortDescription": { "text": "A layer that retries, and its factor on timeouts" } },
                    { "id": "retry-debt/skipped", "shortDescription": { "text": "A block check did not read" } },
                ],
            } },
            "results": results,
        }],
    })
}
