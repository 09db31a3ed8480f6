//! The report text: the plan as printed before a run, and `report.md` after it.

use std::fmt::Write as _;

use super::measure::Measured;
use super::plan::Plan;
use falsification_model::laws;
use falsification_model::outcome::State;

/// The plan as text.
pub fn plan_text(p: &Plan, target: Option<&str>) -> String {
    let mut t = String::new();
    let opt = |v: Option<f64>| v.map_or("never (trapped)".to_string(), |v| format!("{v:.1} s"));
    let _ = writeln!(t, "Trigger test plan");
    let _ = writeln!(t, "  target:           {}", target.unwrap_or("(none)"));
    let _ = writeln!(
        t,
        "  rho:              {:.3}{}",
        p.rho,
        p.rate.map_or(String::new(), |r| format!(" (base {r}/s)"))
    );
    let _ = writeln!(
        t,
        "  retry policy:     {} retries{}, timeout {} s",
        p.retries,
        p.retry_budget
            .map_or(String::new(), |b| format!(", budget {b}")),
        p.timeout_s
    );
    let _ = writeln!(
        t,
        "  amplification A:  {:.3}, threshold 1/A = {:.3}, A rho = {:.3}",
        p.amplification, p.threshold, p.a_rho
    );
    let _ = writeln!(
        t,
        "  A from:           {}",
        match &p.stack {
            Some(s) => format!(
                "the stack's files ({}), computed by `falsification check`; the client alone: {:.3}",
                s.files.join(", "),
                p.client_amplification
            ),
            None => "the client's retries alone: past the client the amplification at the service \
                     is unknown unless measured (--pods) or computed from the stack's files \
                     (--stack, --config)"
                .into(),
        }
    );
    let _ = writeln!(
        t,
        "  spike:            {:.3}x for {:.3} s{} ((k rho - 1) Delta = {:.3} s, timeout {} s)",
        p.k,
        p.spike_s,
        if p.spike_given {
            " (given)"
        } else {
            " (planned)"
        },
        p.trigger_excess_s,
        p.timeout_s
    );
    if let Some(m) = p.max_rate {
        let _ = writeln!(t, "  highest rate:     {m:.1}/s");
    }
    let _ = writeln!(
        t,
        "  schedule:         base {:.1} s, spike {:.1} s, base {:.1} s (arrivals end at {:.1} s)",
        p.before_s,
        p.spike_s,
        p.length_s - p.before_s - p.spike_s,
        p.length_s
    );
    let _ = writeln!(
        t,
        "  prediction:       {}",
        if p.trapped {
            "TRAPPED (A rho >= 1): the timeouts never stop on their own".to_string()
        } else {
            format!(
                "recovers: closed form {}, fluid model {} after the spike",
                opt(p.recovery_closed_s),
                opt(p.recovery_fluid_s)
            )
        }
    );
    for w in &p.warnings {
        let _ = writeln!(t, "  WARNING: {w}");
    }
    t
}

/// The measured amplification beside the configured one: at the client, and at the pods when
/// `--pods` read them, against the stack's `A` when `check` computed it.
fn amplification_rows(t: &mut String, p: &Plan, m: &Measured) {
    let _ = writeln!(
        *t,
        "| amplification in the failed phase, at the client | {} | {:.3} (the client's retries) |",
        m.amplification.map_or(
            "n/a (no failed phase after the spike's retries)".into(),
            |a| { format!("{a:.3}") }
        ),
        p.client_amplification
    );
    if let Some(a) = m.pod_amplification {
        let _ = writeln!(
            *t,
            "| arrivals at the pods per first attempt, same phase (`--pods`) | {a:.3} | {} |",
            match &p.stack {
                Some(s) => format!("{:.3} (the stack's files, `check`)", s.a),
                None => format!(
                    "{:.3}, or that times a gateway's tries in front of the pods",
                    p.client_amplification
                ),
            }
        );
    } else if let Some(s) = &p.stack {
        let _ = writeln!(
            *t,
            "| amplification at the service | not measured (give --pods) | {:.3} (the stack's \
             files, `check`) |",
            s.a
        );
    }
}

/// `report.md`: the plan, the target's health before and after, measured against predicted.
pub fn report_md(p: &Plan, m: &Measured, target: &str) -> String {
    let f = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.1} s"));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Trigger test\n\n```\n{}```\n",
        plan_text(p, Some(target))
    );
    let _ = writeln!(
        t,
        "Target before the spike: {}\n\nWhen the load stopped: {}\n",
        match &m.health_before {
            None => "not checked (the run ended before the spike)".to_string(),
            Some(h) => match &h.problem {
                None => format!(
                    "healthy ({} answers to {} first attempts in {} s of base load, no timeouts)",
                    h.successes, h.first_attempts, h.seconds
                ),
                Some(why) => format!("**not healthy: the spike was not sent.** {why}"),
            },
        },
        if m.failing_at_end {
            "**still failing** (attempts in its last timeout's worth of load timed out): let it \
             drain before another run"
        } else {
            "answering (no attempt of the last timeout's worth of load timed out)"
        }
    );
    let _ = writeln!(t, "| | measured | predicted |\n|---|---|---|");
    let _ = writeln!(
        t,
        "| triggered | {} | {} |",
        m.outcome.triggered,
        laws::spike_triggers(p.k, p.rho, p.spike_s, p.timeout_s)
    );
    // A run cut short while failing has not shown a trap, only no recovery yet.
    let state = match (m.outcome.state(), m.complete) {
        (State::Trapped | State::NotRecoveredWithinHorizon, false) => {
            "not recovered when the run was cut".to_string()
        }
        _ => m.outcome.state_text(),
    };
    let _ = writeln!(
        t,
        "| state at the end | {state} | {} |",
        if p.trapped { "trapped" } else { "recovers" }
    );
    let _ = writeln!(
        t,
        "| recovery after the spike (strict: backlog drained) | {} | closed form {}, fluid {} |",
        f(m.outcome.recovery_s),
        f(p.recovery_closed_s),
        f(p.recovery_fluid_s)
    );
    let _ = writeln!(
        t,
        "| goodput recovery (99% of requests succeed again) | {} | |",
        f(m.outcome.goodput_recovery_s),
    );
    amplification_rows(&mut t, p, m);
    let _ = writeln!(
        t,
        "| lost fraction | {} | |",
        m.outcome
            .lost_fraction
            .map_or("n/a".into(), |l| format!("{l:.4}"))
    );
    let _ = writeln!(
        t,
        "\n{}Recovery is counted from the end of the spike to the end of the last second that sent \
         an attempt which timed out (the kit's `outcome` definition; no wait is read on a staging \
         target). Files: `plan.json`, `record.json`, `trigger.svg`, `loadgen/` (the loadgen's \
         `timeseries.csv` and `summary.json`), `loadgen.log`.",
        if m.complete {
            ""
        } else {
            "**Incomplete run** (stopped by Ctrl-C or --max-duration): figures cover what ran.\n\n"
        }
    );
    t
}
