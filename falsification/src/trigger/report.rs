//! The report text: the plan as printed before a run, and `report.md` after it.

use std::fmt::Write as _;

use super::RunSettings;
use super::capacity::CapacityProbe;
use super::discipline::{Answered, Named};
use super::measure::{Decision, LayerSeries, Measured};
use super::plan::{AsBehaved, Plan};
use super::stop::{AfterAbort, Fired, Rule};
use falsification_model::laws;
use falsification_model::outcome::State;

/// The plan's lines on what is sent: each kind of request (secrets redacted) and TLS.
fn requests_text(t: &mut String, p: &Plan, target: Option<&str>, run: &RunSettings) {
    for (i, r) in p.requests.iter().enumerate() {
        let label = if i == 0 { "requests:" } else { "" };
        let _ = writeln!(t, "  {label:<18}{r}");
    }
    let r = &run.requests;
    if target.is_some_and(|t| t.starts_with("https://")) || r.tls.any() {
        let _ = writeln!(
            t,
            "  TLS:              {}, ALPN {}",
            r.tls.describe(),
            if r.http2 || r.flags.grpc {
                "h2"
            } else {
                "http/1.1"
            }
        );
    }
}

/// The plan as text, with what the run reads and the stop rules in force.
pub fn plan_text(p: &Plan, target: Option<&str>, run: &RunSettings) -> String {
    let mut t = String::new();
    let opt = |v: Option<f64>| v.map_or("never (trapped)".to_string(), |v| format!("{v:.1} s"));
    let _ = writeln!(t, "Trigger test plan");
    let _ = writeln!(t, "  target:           {}", target.unwrap_or("(none)"));
    requests_text(&mut t, p, target, run);
    let _ = writeln!(
        t,
        "  rho:              {:.3}{}",
        p.rho,
        p.rate
            .map_or(String::new(), |r| format!(" (base {r:.3}/s)"))
    );
    let _ = writeln!(
        t,
        "  retry policy:     {} retries{}, timeout {} s{}",
        p.retries,
        p.retry_budget
            .map_or(String::new(), |b| format!(", budget {b}")),
        p.timeout_s,
        if p.service_timeout_s < p.timeout_s {
            format!(
                "; the service's attempts fail at {} s (the stack's per-try timeout), which the \
                 spike and the predictions use",
                p.service_timeout_s
            )
        } else {
            String::new()
        }
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
                     is unknown unless measured (--arrivals-query, --pods) or computed from the \
                     stack's files (--stack, --config)"
                .into(),
        }
    );
    let _ = writeln!(
        t,
        "  spike:            {:.3}x for {:.3} s{} ((k rho - 1) Delta = {:.3} s, tau_out {} s)",
        p.k,
        p.spike_s,
        if p.spike_given {
            " (given)"
        } else {
            " (planned)"
        },
        p.trigger_excess_s,
        p.service_timeout_s
    );
    if let Some(m) = p.max_rate {
        let _ = writeln!(t, "  highest rate:     {m:.1}/s");
    }
    let _ = writeln!(
        t,
        "  schedule:         base {:.1} s, spike {:.1} s, then base load until the state is \
         decided (planned {:.1} s in all; at most {:.1} s, --max-duration)",
        p.before_s, p.spike_s, p.length_s, p.max_duration_s
    );
    watching_lines(&mut t, run);
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
    let _ = writeln!(
        t,
        "  DESTRUCTIVE:      sends {:.1}/s for {:.1} s to {}: the spike is meant to put it in a \
         failed state that may outlast the test",
        p.max_rate.unwrap_or(f64::NAN),
        p.spike_s,
        target.unwrap_or("the target")
    );
    t
}

/// The plan's lines on what is read during the run and when it stops early.
fn watching_lines(t: &mut String, run: &RunSettings) {
    let w = &run.watching;
    for q in &w.arrivals_queries {
        let _ = writeln!(
            *t,
            "  arrivals at {}: {} (from {})",
            q.layer,
            q.promql,
            w.prometheus.as_deref().unwrap_or("?")
        );
    }
    if !w.pods.is_empty() {
        let _ = writeln!(
            *t,
            "  arrivals at the pods: {} summed over {}",
            w.arrivals_metric,
            w.pods.join(", ")
        );
    }
    if run.stop.rules.is_empty() {
        let _ = writeln!(
            *t,
            "  stop rules:       none but the maximum duration and Ctrl-C (add --abort-if)"
        );
    }
    for r in &run.stop.rules {
        let _ = writeln!(*t, "  stop rule:        {r}");
    }
    if run.stop.rules.iter().any(Rule::reads_prometheus) || !w.arrivals_queries.is_empty() {
        let _ = writeln!(
            *t,
            "  metrics lost:     {}",
            match run.stop.on_metrics_loss {
                super::OnMetricsLoss::Abort => "stops the load (--on-metrics-loss continue)",
                super::OnMetricsLoss::Continue => "the run goes on; unread seconds stay unread",
            }
        );
    }
    if !run.stop.rules.is_empty() {
        let _ = writeln!(
            *t,
            "  after an abort:   the target is watched, read-only, for {} s",
            run.stop.after_abort.as_secs_f64()
        );
    }
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
    let stack_a = match &p.stack {
        Some(s) => format!("{:.3} (the stack's files, `check`)", s.a),
        None => format!(
            "{:.3}, or that times a gateway's tries in front of the service",
            p.client_amplification
        ),
    };
    let n = m.layers.len();
    for (i, l) in m.layers.iter().enumerate() {
        // The innermost layer is the service: the stack's A; the ones in front of it see the
        // client's attempts times the tries of the layers in front of them.
        let configured = if i + 1 == n {
            stack_a.clone()
        } else {
            format!("at least the client's {:.3}", p.client_amplification)
        };
        let measured = l.per_first_attempt.map_or_else(
            || {
                format!(
                    "n/a ({:.0} s of failed phase after the reading's lag, under 3 s)",
                    l.over_s
                )
            },
            |a| format!("{a:.3}"),
        );
        let _ = writeln!(
            *t,
            "| arrivals at {} per first attempt, same phase | {measured} | {configured} |",
            l.layer
        );
    }
    if m.layers.is_empty() {
        let _ = writeln!(
            *t,
            "| amplification at the service | not measured (give --arrivals-query or --pods) | \
             {stack_a} |"
        );
    }
}

/// The plan's own prediction, the models' FIFO's, in a few words.
fn fifo_prediction(p: &Plan) -> String {
    let s = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.1} s"));
    if p.trapped {
        "trapped".into()
    } else {
        format!(
            "recovers {} (closed form), {} (fluid) after the spike",
            s(p.recovery_closed_s),
            s(p.recovery_fluid_s)
        )
    }
}

/// A state and its recovery after the spike, in a few words.
fn state_text(state: State, recovery_s: Option<f64>) -> String {
    match recovery_s {
        Some(r) => format!("{state} {r:.1} s after the spike"),
        None => state.to_string(),
    }
}

/// The row of the prediction with the discipline the target behaved like, beside the measured.
fn as_behaved_row(t: &mut String, m: &Measured) {
    let Some(a) = m.discipline.as_ref().and_then(|d| d.prediction.as_ref()) else {
        return;
    };
    let (discipline, predicted) = match a {
        AsBehaved::Fluid {
            discipline,
            state,
            recovery_s,
        } => (
            discipline,
            format!("fluid: {}", state_text(*state, *recovery_s)),
        ),
        AsBehaved::NotRun { discipline, why } => (discipline, format!("not predicted: {why}")),
    };
    let _ = writeln!(
        *t,
        "| as it behaved: {discipline} | {} | {predicted} |",
        state_text(m.outcome.state(), m.outcome.recovery_s)
    );
}

/// What the target behaved like and why, and which prediction applies to it.
fn discipline_text(p: &Plan, m: &Measured) -> Option<String> {
    let d = m.discipline.as_ref()?;
    let b = &d.behaved;
    let first = match (d.first_failure_s, d.first_failure_fifo_s) {
        (Some(s), Some(f)) => format!(
            " The first attempt failed {s:.0} s after the spike began; a FIFO of the planned \
             capacity fails its first {f:.1} s after."
        ),
        _ => String::new(),
    };
    let fifo = fifo_prediction(p);
    let applies = match (b.named, &d.prediction) {
        (Named::FifoOrSharing, _) => format!(
            "The models' assumption holds: their FIFO prediction ({fifo}) is the one for it."
        ),
        (
            _,
            Some(AsBehaved::Fluid {
                discipline,
                state,
                recovery_s,
            }),
        ) => format!(
            "This is not the models' assumption (a FIFO that finishes abandoned work): their \
             FIFO prediction ({fifo}) does not apply to it. Predicted with {discipline}, the pooled \
             fluid model says {}; measured: {}.",
            state_text(*state, *recovery_s),
            state_text(m.outcome.state(), m.outcome.recovery_s)
        ),
        (_, Some(AsBehaved::NotRun { discipline, why })) => format!(
            "This is not the models' assumption (a FIFO that finishes abandoned work): their \
             FIFO prediction ({fifo}) does not apply to it, and {discipline} is not predicted: \
             {why}."
        ),
        (_, None) => match b.kind {
            Answered::KeepsAnswering => format!(
                "It kept answering: not the models' assumption (a FIFO that finishes abandoned \
                 work), so their FIFO prediction ({fifo}) does not apply to it, and this run \
                 cannot say which would."
            ),
            Answered::Partly => format!(
                "Part of its work still reached clients: this is not the models' assumption (a \
                 FIFO that finishes abandoned work, whose answers stop while it fails), so \
                 expect a measured recovery shorter than their prediction ({fifo})."
            ),
            Answered::FinishesAbandoned => format!(
                "Its answers were the models' FIFO's: their prediction ({fifo}) is the only one \
                 this run supports."
            ),
        },
    };
    Some(format!(
        "**What the target behaved like: {}.** Why: {}.{first}\n\n{applies}",
        b.named.text(),
        b.why
    ))
}

/// `report.md`: the plan, the target's health before and after, measured against predicted.
pub fn report_md(p: &Plan, m: &Measured, target: &str, probed: Option<&CapacityProbe>) -> String {
    let f = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.1} s"));
    let mut t = String::new();
    let _ = writeln!(t, "# Trigger test of {target}\n");
    let _ = writeln!(
        t,
        "**Decision: {}.** {}\n",
        m.decision.text(),
        match m.ended {
            super::measure::Ended::Decided => "The load stopped once it was decided.",
            super::measure::Ended::MaxDuration => "The load ran to the maximum duration.",
            super::measure::Ended::Interrupted => "The run was interrupted (Ctrl-C).",
            super::measure::Ended::Aborted => "A stop rule stopped the load (below).",
            super::measure::Ended::Unhealthy => "No spike was sent.",
            super::measure::Ended::LoadFailed => "The load failed (the error is below the report).",
        }
    );
    if let Some(c) = probed {
        let _ = writeln!(
            t,
            "Capacity measured first: {:.1} answers/s ({} workers back to back for {} s, {} \
             answered, {} failed); the plan's rho follows from it.\n",
            c.capacity, c.concurrency, c.duration_s, c.answered, c.failed
        );
    }
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
            "**still failing** (attempts in its last timeout's worth of load failed): let it \
             drain before another run"
        } else {
            "answering (no attempt of the last timeout's worth of load failed)"
        }
    );
    let _ = writeln!(t, "| | measured | predicted |\n|---|---|---|");
    let _ = writeln!(
        t,
        "| triggered | {} | {} |",
        m.outcome.triggered,
        laws::spike_triggers(p.k, p.rho, p.spike_s, p.service_timeout_s)
    );
    let _ = writeln!(
        t,
        "| state | {} | {} |",
        m.decision.text(),
        State::of_trap(p.trapped)
    );
    let _ = writeln!(
        t,
        "| recovery after the spike (strict: backlog drained) | {} | closed form {}, fluid {} |",
        f(m.outcome.recovery_s),
        f(p.recovery_closed_s),
        f(p.recovery_fluid_s)
    );
    as_behaved_row(&mut t, m);
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
    if let Some(d) = discipline_text(p, m) {
        let _ = writeln!(t, "\n{d}");
    }
    let _ = writeln!(
        t,
        "\n{}Recovery is counted from the end of the spike to the end of the last second that sent \
         an attempt which failed, whatever ended it (a timeout, a gateway's 5xx, a reset: the \
         kit's `outcome` definition; no wait is read on a staging target); seconds whose requests \
         had no outcome when the load stopped are left out. Files: `plan.json`, `record.json`, \
         `report.html` (the page, with the plots), `loadgen/` (the loadgen's `timeseries.csv` \
         and `summary.json`), `loadgen.log`.",
        if m.decision == Decision::Undecided {
            "**Undecided:** the run ended before the state was decided; figures cover what ran. \
             Give a longer --max-duration to decide it.\n\n"
        } else {
            ""
        }
    );
    t
}

/// The stop rule that fired, and what the read-only watch after it saw.
pub fn after_abort_text(
    f: &Fired,
    a: &AfterAbort,
    rules: &[Rule],
    layers: &[LayerSeries],
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n## Stopped by a stop rule\n\n`{}` fired {:.0} s after the spike began; it had held \
         for {} s: {}.\n",
        f.rule,
        f.at_s,
        f.values.len(),
        f.values.join(", ")
    );
    let _ = writeln!(
        t,
        "All load stopped then (no new first attempt, attempts in flight abandoned). Watched \
         read-only for {:.0} s after:\n",
        a.watched_s
    );
    for (i, rule) in rules.iter().enumerate() {
        let held: Vec<f64> = a
            .samples
            .iter()
            .filter(|(_, c)| matches!(c.get(i), Some(Some(c)) if c.holds == Some(true)))
            .map(|(t, _)| *t)
            .collect();
        let line = match (
            held.last(),
            a.samples
                .iter()
                .any(|(_, c)| c.get(i).is_some_and(Option::is_some)),
        ) {
            (_, false) => "not read without load (it reads the clients)".to_string(),
            (None, true) => "did not hold once the load stopped".to_string(),
            (Some(last), true) if *last + 1.5 >= a.stopped_at_s + a.watched_s => {
                "**still held at the end of the watch: the target has not recovered by itself**"
                    .to_string()
            }
            (Some(last), true) => format!(
                "held until {:.0} s after the stop, then no more: recovered by itself",
                last - a.stopped_at_s
            ),
        };
        let _ = writeln!(t, "- `{rule}`: {line}");
    }
    for l in layers {
        let rates: Vec<(f64, f64)> = a
            .samples
            .iter()
            .filter_map(|(s, _)| Some((*s, l.arrivals(*s, 1.0)?)))
            .collect();
        let Some(&(_, first)) = rates.first() else {
            continue;
        };
        let quiet = 0.1 * first;
        let fell = rates.iter().find(|(_, r)| *r <= quiet);
        // A counter of arrivals falls as the load stops (after its reading's lag); one of
        // requests served goes on while the service works off its queue of abandoned requests.
        let _ = writeln!(
            t,
            "- {}: {first:.1}/s when the load stopped; {} (a `rate()` over its window lags {:.0} s)",
            l.layer,
            match fell {
                Some((s, _)) => format!(
                    "under a tenth of that {:.0} s after the stop",
                    s - a.stopped_at_s
                ),
                None => "still over a tenth of that at the end of the watch".to_string(),
            },
            l.lag_s
        );
    }
    t
}
