//! `falsification trigger`: the destructive trigger test against a staging target.
//!
//! [`plan`] is pure: from `rho` and the retry policy it gives the amplification `A`, the threshold
//! `1/A`, the spike that triggers with margin (trigger-size law: `(k rho - 1) Delta >= 2 tau_out`),
//! and the predicted outcome (trapped iff `A rho >= 1`, else the closed-form and fluid recovery).
//! [`command`] prints it, and only with `--yes` and `--target` runs the `loadgen` (base, spike,
//! base), bounded by `--max-duration` and Ctrl-C, then judges the loadgen's `timeseries.csv` with
//! [`falsification_model::outcome`] and writes `plan.json`, `record.json`, `report.md` and `trigger.svg`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use plotters::style::{BLACK, BLUE, RED};
use serde::Serialize;
use tokio::process::Command;

use crate::invocation;
use crate::process::{self, Binaries};
use crate::runner::{self, plot, record};
use falsification_model::experiment::{self, Params, Scenario, Topology};
use falsification_model::outcome::{self, Criteria, Outcome, Record, Row, State};
use falsification_model::{laws, predict};
use loadgen::record::StdoutLine;

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Target URL of the staging service, e.g. http://10.0.0.5:8080/work. Nothing is sent without it.
    #[arg(long, env = "FALSIFICATION_TRIGGER_TARGET")]
    pub target: Option<String>,
    /// Base first-attempt rate, requests/s (with --capacity gives rho).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RATE")]
    pub rate: Option<f64>,
    /// Capacity of the target, requests/s.
    #[arg(long, env = "FALSIFICATION_TRIGGER_CAPACITY")]
    pub capacity: Option<f64>,
    /// Base utilization rate/capacity (instead of --capacity).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RHO")]
    pub rho: Option<f64>,
    /// Client timeout per attempt, e.g. 10s or 1500ms.
    #[arg(long, default_value = "10s", env = "FALSIFICATION_TRIGGER_TIMEOUT")]
    pub timeout: String,
    /// Retries per request, sent at once when an attempt times out.
    #[arg(long, default_value_t = 2, env = "FALSIFICATION_TRIGGER_RETRIES")]
    pub retries: u32,
    /// Retry budget: retries/s at most this fraction of first attempts/s (A = 1 + budget).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RETRY_BUDGET")]
    pub retry_budget: Option<f64>,
    /// Spike MULTIPLExDURATION, e.g. 4x20s [default: to twice the capacity, long enough that
    /// (k rho - 1) Delta = 2 x timeout]. A given spike is checked against the trigger-size law.
    #[arg(long, env = "FALSIFICATION_TRIGGER_SPIKE")]
    pub spike: Option<String>,
    /// Base load before the spike [default: 3 x timeout].
    #[arg(long, env = "FALSIFICATION_TRIGGER_BEFORE")]
    pub before: Option<String>,
    /// Base load observed after the spike [default: trapped 6 x timeout, else 1.5 x the predicted
    /// recovery + 3 x timeout].
    #[arg(long, env = "FALSIFICATION_TRIGGER_OBSERVE")]
    pub observe: Option<String>,
    /// Print the plan only; send nothing.
    #[arg(long, env = "FALSIFICATION_TRIGGER_DRY_RUN")]
    pub dry_run: bool,
    /// Confirm the destructive run against --target.
    #[arg(long, env = "FALSIFICATION_TRIGGER_YES")]
    pub yes: bool,
    /// Hard bound on the load: arrivals stop and the loadgen is stopped then [default: the planned
    /// length plus the loadgen's drain, (retries + 1) x timeout + 2 s].
    #[arg(long, env = "FALSIFICATION_TRIGGER_MAX_DURATION")]
    pub max_duration: Option<String>,
    /// Record directory (created).
    #[arg(long, default_value = "trigger-run", env = "FALSIFICATION_TRIGGER_OUT")]
    pub out: PathBuf,
    /// Seed of the loadgen's Poisson arrivals.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_TRIGGER_SEED")]
    pub seed: u64,
    /// Directory holding the `loadgen` binary [default: beside this one].
    #[arg(long, env = "FALSIFICATION_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// What the clients retry, passed to the loadgen: `timeout`, `connect`, `io`, `5xx`. Behind a
    /// retrying gateway add `5xx`: it ends a failed attempt with its own 504 before the timeout.
    #[arg(
        long,
        default_value = "timeout,connect",
        env = "FALSIFICATION_TRIGGER_RETRY_ON"
    )]
    pub retry_on: String,
    /// Base URLs of the target's pods, comma-separated, e.g. http://10.0.0.7:8080: their /metrics
    /// (the kit's pod's `retrydebt_arrivals_total`), read every second, give the amplification at
    /// the pods, which a retrying gateway in front of them multiplies.
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_TRIGGER_PODS")]
    pub pods: Vec<String>,
}

/// What the plan is computed from (seconds, requests/s).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    pub rho: f64,
    pub rate: Option<f64>,
    pub timeout_s: f64,
    pub retries: u32,
    pub retry_budget: Option<f64>,
    /// `(k, Delta)` if given.
    pub spike: Option<(f64, f64)>,
    pub before_s: Option<f64>,
    pub observe_s: Option<f64>,
}

/// The trigger test's plan and prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub rho: f64,
    pub rate: Option<f64>,
    pub timeout_s: f64,
    pub retries: u32,
    pub retry_budget: Option<f64>,
    pub amplification: f64,
    /// `1/A`: the trap threshold on rho.
    pub threshold: f64,
    pub a_rho: f64,
    pub k: f64,
    pub spike_s: f64,
    pub spike_given: bool,
    /// `(k rho - 1) Delta`, to compare with the timeout.
    pub trigger_excess_s: f64,
    pub warnings: Vec<String>,
    pub trapped: bool,
    /// From the end of the spike (closed form and pooled fluid model).
    pub recovery_closed_s: Option<f64>,
    pub recovery_fluid_s: Option<f64>,
    pub before_s: f64,
    pub observe_s: f64,
    /// Arrivals end this long after the start (base, spike, observation, then R+1 timeouts of base
    /// load so requests started in the observation get their outcome).
    pub length_s: f64,
    /// Highest first-attempt rate of the schedule (`k x rate`), when the rate is known.
    pub max_rate: Option<f64>,
}

impl Plan {
    /// From a request's first attempt to its final outcome: R + 1 timeouts.
    pub fn lost_after_s(&self) -> f64 {
        f64::from(self.retries + 1) * self.timeout_s
    }
}

/// A duration flag in seconds (the experiment files' parser and error).
fn secs(flag: &'static str, text: &str) -> anyhow::Result<f64> {
    Ok(experiment::duration("command line", flag, Some(text))?)
}

/// The fluid scenario of a plan: one pool of capacity `rate/rho` (the fluid is rate-invariant,
/// so 100/s when only rho is known), spike at t = 0 after the base period.
fn scenario(p: &Plan, horizon_s: f64) -> anyhow::Result<Scenario> {
    let capacity = p.rate.map_or(100.0, |r| r / p.rho);
    let e = experiment::ad_hoc(Params {
        pods: Some(1),
        rate_per_pod: Some(capacity),
        rho: Some(p.rho),
        spike: Some(format!("{}x{}", p.k, invocation::micros(p.spike_s))),
        timeout: Some(invocation::micros(p.timeout_s)),
        retries: Some(p.retries),
        retry_budget: p.retry_budget,
        retry_budget_min_per_s: p.retry_budget.map(|_| 0.0),
        warmup: Some(invocation::micros(p.before_s)),
        horizon: Some(invocation::micros(horizon_s)),
        seeds: Some(vec![]),
        ..Params::default()
    })?;
    e.cases
        .into_iter()
        .next()
        .map(|c| c.scenario)
        .context("ad-hoc scenario has no case")
}

/// The plan: pure but for the fluid model's computation.
pub fn plan(input: &PlanInput) -> anyhow::Result<Plan> {
    let PlanInput { rho, timeout_s, .. } = *input;
    if !(rho > 0.0 && rho < 1.0) {
        bail!("rho: {rho} must be in (0, 1) (rate below capacity)");
    }
    if !(timeout_s > 0.0 && timeout_s.is_finite()) {
        bail!("timeout: {timeout_s} s must be positive");
    }
    if let Some(b) = input.retry_budget
        && !(b >= 0.0 && b.is_finite())
    {
        bail!("retry-budget: {b} must be at least 0");
    }
    let a = laws::layer_amplification(input.retries, input.retry_budget);
    let mut warnings = Vec::new();
    let (k, spike_s, spike_given) = match input.spike {
        Some((k, d)) => (k, d, true),
        // To twice the capacity: (2 - 1) Delta = 2 tau_out.
        None => (2.0 / rho, 2.0 * timeout_s, false),
    };
    let excess = (k * rho - 1.0) * spike_s;
    if spike_given {
        if !laws::spike_triggers(k, rho, spike_s, timeout_s) {
            warnings.push(format!(
                "spike {k}x{spike_s}s does not trigger: (k rho - 1) Delta = {excess:.3} s is not \
                 past the timeout {timeout_s} s"
            ));
        } else if excess < 2.0 * timeout_s {
            warnings.push(format!(
                "spike {k}x{spike_s}s has little margin: (k rho - 1) Delta = {excess:.3} s is under \
                 twice the timeout ({} s)",
                2.0 * timeout_s
            ));
        }
    }
    let trapped = laws::trapped(a, rho);
    let recovery_closed_s = laws::recovery_time(a, k, rho, spike_s, timeout_s);
    let mut p = Plan {
        rho,
        rate: input.rate,
        timeout_s,
        retries: input.retries,
        retry_budget: input.retry_budget,
        amplification: a,
        threshold: 1.0 / a,
        a_rho: a * rho,
        k,
        spike_s,
        spike_given,
        trigger_excess_s: excess,
        warnings,
        trapped,
        recovery_closed_s,
        recovery_fluid_s: None,
        before_s: input.before_s.unwrap_or(3.0 * timeout_s),
        observe_s: 0.0,
        length_s: 0.0,
        max_rate: input.rate.map(|r| r * k.max(1.0)),
    };
    // The fluid runs long enough to see the closed form's recovery (or the trap) twice over.
    let fluid_horizon = spike_s + 2.0 * recovery_closed_s.unwrap_or(0.0) + 10.0 * timeout_s;
    p.recovery_fluid_s =
        predict::fluid_outcome(&scenario(&p, fluid_horizon)?, Topology::Pooled)?.recovery_s; // from the spike's end, the scenario's reference
    p.observe_s = input.observe_s.unwrap_or(if trapped {
        6.0 * timeout_s
    } else {
        let predicted = recovery_closed_s
            .unwrap_or(0.0)
            .max(p.recovery_fluid_s.unwrap_or(0.0));
        1.5 * predicted + 3.0 * timeout_s
    });
    let s = scenario(&p, p.spike_s + p.observe_s)?;
    p.length_s = p.before_s + s.end();
    Ok(p)
}

/// The loadgen schedule of a plan (the runner's, from the same scenario).
pub fn schedule(p: &Plan) -> anyhow::Result<String> {
    let rate = p.rate.context("rate: needed to run (give --rate)")?;
    let mut s = scenario(p, p.spike_s + p.observe_s)?;
    // The scenario's base rate is rho x capacity = rate; warm-up is the base period.
    s.rate_per_pod = rate / p.rho;
    Ok(invocation::schedule(&s, 1.0))
}

/// Highest rate of a loadgen schedule (`TIME:RATE,...,TIME:end`).
pub fn highest_rate(schedule: &str) -> f64 {
    schedule
        .split(',')
        .filter_map(|step| step.split_once(':')?.1.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

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

/// One row of the loadgen's `timeseries.csv`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LoadRow {
    pub second: f64,
    pub first_attempts: f64,
    pub attempts: f64,
    pub successes: f64,
    pub timeouts: f64,
    /// Attempts answered 5xx: behind a retrying gateway, its 504 after its last try timed out.
    pub status_5xx: f64,
    pub requests_failed: f64,
}

/// One `--stdout-rows` second as a [`LoadRow`] (attempts and successes of every attempt number).
fn load_row(r: &loadgen::record::Row) -> LoadRow {
    let n = |v: u64| v as f64;
    LoadRow {
        second: n(r.second),
        first_attempts: n(r.first_attempts),
        attempts: n(r.attempts.iter().sum()),
        successes: n(r.successes.iter().sum()),
        timeouts: n(r.timeouts),
        status_5xx: n(r.errors[loadgen::record::ErrorKind::Status5xx.index()]),
        requests_failed: n(r.requests_failed),
    }
}

/// Parses the loadgen's `timeseries.csv` (columns by header name).
pub fn parse_timeseries(text: &str) -> anyhow::Result<Vec<LoadRow>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .context("timeseries.csv is empty")?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("timeseries.csv has no column `{name}`"))
    };
    let idx = [
        col("second")?,
        col("first_attempts")?,
        col("attempts")?,
        col("successes")?,
        col("timeouts")?,
        col("requests_failed")?,
        col("errors_status_5xx")?,
    ];
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            let f: Vec<&str> = l.split(',').collect();
            let v = |i: usize| -> anyhow::Result<f64> {
                f.get(idx[i])
                    .and_then(|x| x.parse().ok())
                    .with_context(|| format!("timeseries.csv line {}: bad value", n + 2))
            };
            Ok(LoadRow {
                second: v(0)?,
                first_attempts: v(1)?,
                attempts: v(2)?,
                successes: v(3)?,
                timeouts: v(4)?,
                status_5xx: v(6)?,
                requests_failed: v(5)?,
            })
        })
        .collect()
}

/// Least share of the base phase's first attempts answered for the target to count as healthy
/// (an answer still on its way counts as not answered, so a slow target fails this too).
pub const BASE_ANSWERED_MIN: f64 = 0.9;
/// Fewest first attempts the base phase must have sent to judge the target's health.
pub const BASE_SENT_MIN: f64 = 10.0;

/// The target's health at base load, judged from the seconds closed before the spike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaseHealth {
    pub seconds: usize,
    pub first_attempts: f64,
    pub successes: f64,
    pub timeouts: f64,
    pub healthy: bool,
    /// What was seen and what to do, when the spike must not be sent.
    pub problem: Option<String>,
}

/// Judges the base phase: healthy when no attempt timed out and at least [`BASE_ANSWERED_MIN`]
/// of the first attempts were answered; too few attempts to tell is not healthy either.
pub fn base_health(rows: &[LoadRow]) -> BaseHealth {
    let sum = |f: fn(&LoadRow) -> f64| rows.iter().map(f).sum::<f64>();
    let (sent, answered, timeouts) = (
        sum(|r| r.first_attempts),
        sum(|r| r.successes),
        sum(|r| r.timeouts),
    );
    let n = rows.len();
    let what_to_do = "wait until it answers again (a previous test's debt drains at the target's \
                      own rate), lower --rate, or check the target";
    let problem = if sent < BASE_SENT_MIN {
        Some(format!(
            "only {sent} first attempts in the {n} s of base load before the spike: too few to see \
             whether the target is healthy; raise --rate or --before"
        ))
    } else if timeouts > 0.0 {
        Some(format!(
            "{timeouts} attempts timed out at base load ({answered} answers to {sent} first \
             attempts in {n} s): the target is already failing or too slow; {what_to_do}"
        ))
    } else if answered < BASE_ANSWERED_MIN * sent {
        Some(format!(
            "only {answered} answers to {sent} first attempts in the {n} s of base load (under \
             {:.0}%): the target is slow or refusing; {what_to_do}",
            100.0 * BASE_ANSWERED_MIN
        ))
    } else {
        None
    };
    BaseHealth {
        seconds: n,
        first_attempts: sent,
        successes: answered,
        timeouts,
        healthy: problem.is_none(),
        problem,
    }
}

/// Whether the target was still failing when the load stopped: an attempt sent in the last
/// timeout's worth of seconds that sent load timed out.
pub fn failing_at_end(record: &Record, timeout_s: f64) -> bool {
    let last = record.rows.len();
    let from = last.saturating_sub(timeout_s.ceil().max(1.0) as usize);
    record.rows[from..].iter().any(|r| r.timed_out > 0.0)
}

/// The measured record, `t` from the spike's start: timeouts moved back to the row their attempt
/// was sent, failed requests to the row they started; cut where arrivals ended (later rows only
/// hold the drain). No wait is known on a staging target: "bad" is a timed-out attempt.
pub fn measured_record(rows: &[LoadRow], p: &Plan) -> Record {
    let last_sending = rows.iter().rposition(|r| r.first_attempts > 0.0);
    // The last sending row may be partial (arrivals stopped inside it).
    let n = last_sending.unwrap_or(0);
    let mut out: Vec<Row> = rows[..n]
        .iter()
        .map(|r| Row {
            t: r.second - p.before_s,
            first_attempts: r.first_attempts,
            attempts: r.attempts,
            // The target counts as one pod of the capacity the plan assumes.
            pods_ready: 1,
            pods_desired: 1,
            ..Row::default()
        })
        .collect();
    let back = |i: usize, by: f64| i.checked_sub(by.round() as usize);
    let lost_after = p.lost_after_s();
    for (i, r) in rows.iter().enumerate() {
        if let Some(j) = back(i, p.timeout_s).filter(|j| *j < n) {
            // A gateway's 504 fails the attempt as a timeout would (up to a timeout earlier).
            out[j].timed_out += r.timeouts + r.status_5xx;
        }
        if let Some(j) = back(i, lost_after).filter(|j| *j < n) {
            out[j].lost += r.requests_failed;
        }
    }
    Record {
        step_s: 1.0,
        rows: out,
    }
}

/// What the run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    pub outcome: Outcome,
    /// Attempts per first attempt over the failed phase after the spike (from `R` timeouts after
    /// its end, when the spike's own retries are done, to the last row with a timeout).
    pub amplification: Option<f64>,
    /// Whether the run went to its planned end (not cut by Ctrl-C or --max-duration).
    pub complete: bool,
    /// The target at base load before the spike (none when the run ended before the check).
    pub health_before: Option<BaseHealth>,
    /// Whether the target was still failing when the load stopped (so the next run knows).
    pub failing_at_end: bool,
    /// The failed phase `amplification` is measured over, seconds from the start.
    pub failed_phase: Option<(f64, f64)>,
    /// Arrivals at the pods per first attempt over that phase (with `--pods`).
    pub pod_amplification: Option<f64>,
}

/// Arrivals at the pods per first attempt over `phase`: `arrivals` holds (seconds from the start,
/// the pods' cumulative arrivals), read about every second; the first attempts are the record's.
pub fn pod_amplification(
    arrivals: &[(f64, f64)],
    record: &Record,
    phase: (f64, f64),
) -> Option<f64> {
    // The pods' count at `t`, linear between readings; none outside them.
    let at = |t: f64| {
        let i = arrivals.iter().position(|(s, _)| *s >= t)?;
        let (t1, a1) = arrivals[i];
        let (t0, a0) = *arrivals.get(i.checked_sub(1)?)?;
        Some(a0 + (a1 - a0) * (t - t0) / (t1 - t0).max(1e-9))
    };
    let (from, to) = phase;
    let rows: Vec<&Row> = record
        .rows
        .iter()
        .filter(|r| r.t >= from && r.t + record.step_s <= to + 1e-9)
        .collect();
    let first: f64 = rows.iter().map(|r| r.first_attempts).sum();
    // Over exactly the rows' span, so both counts cover the same seconds.
    let pods = at(rows.last()?.t + record.step_s)? - at(rows.first()?.t)?;
    (first > 0.0).then(|| pods / first)
}

pub fn measure(
    record: &Record,
    p: &Plan,
    complete: bool,
    health_before: Option<BaseHealth>,
) -> Measured {
    let c = Criteria {
        reference: p.spike_s,
        from: 0.0,
        to: record.rows.last().map_or(0.0, |r| r.t + 1.0),
        drained_wait_s: 0.0,
        // Unknown capacity (no --rate) cannot be reached: then only a recovery decides.
        rate_per_pod: p.rate.map_or(f64::INFINITY, |r| r / p.rho),
        timeout_s: p.timeout_s,
        tail_s: (2.0 * p.lost_after_s()).max(p.observe_s / 10.0),
        settled_s: 0.0,
        target_utilization: None,
    };
    let outcome = outcome::evaluate(record, &c);
    let from = p.spike_s + f64::from(p.retries) * p.timeout_s;
    let last_bad = record.rows.iter().rposition(|r| r.timed_out > 0.0);
    let (att, first) = last_bad.map_or((0.0, 0.0), |i| {
        record.rows[..=i]
            .iter()
            .filter(|r| r.t >= from)
            .fold((0.0, 0.0), |(a, f), r| {
                (a + r.attempts, f + r.first_attempts)
            })
    });
    Measured {
        outcome,
        amplification: (first > 0.0).then(|| att / first),
        complete,
        health_before,
        failing_at_end: failing_at_end(record, p.timeout_s),
        failed_phase: last_bad
            .filter(|_| first > 0.0)
            .map(|i| (from, record.rows[i].t + record.step_s)),
        pod_amplification: None,
    }
}

fn report_md(p: &Plan, m: &Measured, target: &str) -> String {
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
    let _ = writeln!(
        t,
        "| amplification in the failed phase | {} | {:.3} (configured) |",
        m.amplification.map_or(
            "n/a (no failed phase after the spike's retries)".into(),
            |a| { format!("{a:.3}") }
        ),
        p.amplification
    );
    if let Some(a) = m.pod_amplification {
        let _ = writeln!(
            t,
            "| arrivals at the pods per first attempt, same phase (`--pods`) | {a:.3} | \
             {:.3}, or that times a gateway's tries in front of the pods |",
            p.amplification
        );
    }
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

fn draw(dir: &Path, rows: &[LoadRow], p: &Plan) -> anyhow::Result<()> {
    let series = |f: &dyn Fn(&LoadRow) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.second - p.before_s, f(r)?)))
            .collect()
    };
    plot::chart(
        &dir.join("trigger.svg"),
        "Trigger test: success ratio and attempts per first attempt (t = 0 at the spike's start)",
        "ratio",
        &[
            (
                "successes / attempts",
                BLUE,
                series(&|r| (r.attempts > 0.0).then(|| r.successes / r.attempts)),
            ),
            (
                "attempts / first attempts",
                RED,
                series(&|r| (r.first_attempts > 0.0).then(|| r.attempts / r.first_attempts)),
            ),
            ("configured A", BLACK, series(&|_| Some(p.amplification))),
        ],
    )
}

fn plan_from_args(a: &TriggerArgs) -> anyhow::Result<Plan> {
    let rho = match (a.rho, a.rate, a.capacity) {
        (Some(r), _, _) => r,
        (None, Some(rate), Some(c)) if c > 0.0 => rate / c,
        (None, _, Some(c)) => bail!("capacity: {c} must be positive (with --rate)"),
        _ => bail!("rho: give --rho, or --rate and --capacity"),
    };
    let rate = a.rate.or_else(|| a.capacity.map(|c| rho * c));
    if let Some(r) = rate
        && !(r > 0.0 && r.is_finite())
    {
        bail!("rate: {r} must be positive");
    }
    let spike = match a.spike.as_deref() {
        None => None,
        Some(text) => {
            let (k, d) = experiment::parse_spike("command line", text)?;
            if k < 1.0 {
                bail!("spike: multiple {k} must be at least 1");
            }
            Some((k, d))
        }
    };
    plan(&PlanInput {
        rho,
        rate,
        timeout_s: secs("--timeout", &a.timeout)?,
        retries: a.retries,
        retry_budget: a.retry_budget,
        spike,
        before_s: a
            .before
            .as_deref()
            .map(|t| secs("--before", t))
            .transpose()?,
        observe_s: a
            .observe
            .as_deref()
            .map(|t| secs("--observe", t))
            .transpose()?,
    })
}

/// `falsification trigger`.
#[expect(clippy::too_many_lines, reason = "written before the house lint; to split")]
pub fn command(a: &TriggerArgs) -> anyhow::Result<()> {
    let p = plan_from_args(a)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(plan_text(&p, a.target.as_deref()).as_bytes())?;
    stdout.flush()?;
    if a.dry_run {
        return Ok(());
    }
    let Some(target) = a.target.as_deref() else {
        bail!("refusing to send load: no --target (use --dry-run for the plan only)");
    };
    if !a.yes {
        bail!("refusing to send load to {target} without --yes (use --dry-run for the plan only)");
    }
    let schedule = schedule(&p)?;
    let max_rate = p.max_rate.context("rate: needed to run")?;
    // The schedule is built from the plan: it cannot exceed the plan's highest rate.
    if highest_rate(&schedule) > max_rate * (1.0 + 1e-9) {
        bail!("schedule {schedule} exceeds the plan's highest rate {max_rate}/s");
    }
    let max_duration = match a.max_duration.as_deref() {
        Some(t) => secs("--max-duration", t)?,
        None => p.length_s + p.lost_after_s() + 2.0,
    };
    if max_duration <= 0.0 {
        bail!("max-duration: {max_duration} s must be positive");
    }
    let loadgen = Binaries::find(a.bin_dir.as_deref(), "loadgen")?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    record::write(&a.out, "plan.json", &record::json(&p))?;
    writeln!(
        stdout,
        "running: schedule {schedule}, max duration {max_duration} s"
    )?;
    drop(stdout);

    let mut cmd = Command::new(&loadgen);
    cmd.arg("--target")
        .arg(target)
        .arg(format!("--schedule={schedule}"))
        .arg(format!("--duration={}", invocation::micros(max_duration)))
        .arg(format!("--timeout={}", invocation::micros(p.timeout_s)))
        .arg(format!("--retries={}", p.retries))
        .arg(format!("--retry-on={}", a.retry_on))
        .arg("--arrivals=poisson")
        .arg(format!("--seed={}", a.seed))
        .arg("--out")
        .arg(a.out.join("loadgen"));
    if let Some(b) = p.retry_budget {
        // The plan models the budget without a minimum retry rate (`scenario`): so must the clients.
        cmd.arg(format!("--retry-budget={b}"))
            .arg("--retry-budget-min=0");
    }
    // The loadgen prints each closed second: the base phase is judged from them before the spike.
    cmd.arg("--stdout-rows");
    let rt = tokio::runtime::Runtime::new()?;
    let mut arrivals: Vec<(f64, f64)> = Vec::new();
    let (complete, health) = rt.block_on(async {
        let log = std::fs::File::create(a.out.join("loadgen.log"))
            .with_context(|| format!("creating {}", a.out.join("loadgen.log").display()))?;
        let mut child = process::spawn_child_to(cmd, log, std::process::Stdio::piped())
            .with_context(|| format!("starting {}", loadgen.display()))?;
        let rows = std::sync::Arc::new(std::sync::Mutex::new(Vec::<LoadRow>::new()));
        if let Some(out) = child.stdout.take() {
            let rows = rows.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(out));
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(StdoutLine::Row(r)) = serde_json::from_str(&line) {
                        rows.lock().unwrap_or_else(|e| e.into_inner()).push(load_row(&r.row));
                    }
                }
            });
        }
        let mut interrupt = runner::interrupt_signal();
        let started = tokio::time::Instant::now();
        let mut pods_tick = tokio::time::interval(Duration::from_secs(1));
        let probe = runner::probe::Probe::new(Duration::from_millis(800))?;
        // A stopped loadgen may let attempts in flight finish for one timeout, then writes files.
        let grace = Duration::from_secs_f64(p.timeout_s + 5.0);
        let expiry = tokio::time::sleep(Duration::from_secs_f64(max_duration));
        // Half a second before the spike: the seconds closed by then are the base phase's.
        let check = tokio::time::sleep(Duration::from_secs_f64((p.before_s - 0.5).max(0.0)));
        tokio::pin!(expiry, check);
        let mut health: Option<BaseHealth> = None;
        loop {
            tokio::select! {
                status = child.wait() => {
                    let status = status?;
                    if !status.success() {
                        bail!("loadgen failed ({status}): see {}", a.out.join("loadgen.log").display());
                    }
                    return Ok((max_duration >= p.length_s, health));
                }
                _ = pods_tick.tick(), if !a.pods.is_empty() => {
                    let urls = a.pods.iter().map(|u| (u.clone(), u.trim_end_matches('/').to_string())).collect();
                    let read = probe.pods(urls).await;
                    // Only a round that read every pod is a total.
                    if read.len() == a.pods.len() {
                        let total = read.iter().map(|(_, q)| q.arrivals).sum();
                        // In the record's time: seconds from the spike's start.
                        arrivals.push((started.elapsed().as_secs_f64() - p.before_s, total));
                    }
                }
                _ = &mut check, if health.is_none() => {
                    let h = base_health(&rows.lock().unwrap_or_else(|e| e.into_inner()));
                    let unhealthy = !h.healthy;
                    health = Some(h);
                    if unhealthy {
                        eprintln!("the target is not healthy at base load: stopping before the spike");
                        process::stop(&mut child, grace).await;
                        return Ok((false, health));
                    }
                }
                _ = &mut expiry => {
                    eprintln!("max duration {max_duration} s reached: stopping all load");
                    process::stop(&mut child, grace).await;
                    return Ok((false, health));
                }
                _ = interrupt.changed() => {
                    eprintln!("interrupted: stopping all load, keeping the record");
                    process::stop(&mut child, grace).await;
                    return Ok((false, health));
                }
            }
        }
    })?;
    let csv_path = a.out.join("loadgen").join("timeseries.csv");
    let text = std::fs::read_to_string(&csv_path)
        .with_context(|| format!("reading {} (see loadgen.log)", csv_path.display()))?;
    let rows = parse_timeseries(&text)?;
    let rec = measured_record(&rows, &p);
    let stopped_unhealthy = health.as_ref().and_then(|h| h.problem.clone());
    let mut m = measure(&rec, &p, complete, health);
    m.pod_amplification = m
        .failed_phase
        .and_then(|phase| pod_amplification(&arrivals, &rec, phase));
    #[derive(Serialize)]
    struct RecordFile<'a> {
        target: &'a str,
        plan: &'a Plan,
        measured: &'a Measured,
        record: &'a Record,
    }
    record::write(
        &a.out,
        "record.json",
        &record::json(&RecordFile {
            target,
            plan: &p,
            measured: &m,
            record: &rec,
        }),
    )?;
    let md = report_md(&p, &m, target);
    record::write(&a.out, "report.md", &md)?;
    draw(&a.out, &rows, &p)?;
    print!("{md}");
    if let Some(problem) = stopped_unhealthy {
        bail!("stopped before the spike, nothing more sent: {problem}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(rho: f64) -> PlanInput {
        PlanInput {
            rho,
            rate: Some(rho * 100.0),
            timeout_s: 1.0,
            retries: 2,
            retry_budget: None,
            spike: None,
            before_s: None,
            observe_s: None,
        }
    }

    #[test]
    fn planned_spike_triggers_with_margin_and_trap_follows_a_rho() {
        let p = plan(&input(0.5)).unwrap();
        assert_eq!(p.amplification, 3.0);
        assert!((p.threshold - 1.0 / 3.0).abs() < 1e-12);
        assert!(p.trapped && p.recovery_closed_s.is_none() && p.recovery_fluid_s.is_none());
        assert!(p.trigger_excess_s >= 2.0 * p.timeout_s - 1e-9);
        assert!(p.warnings.is_empty());
        assert_eq!(p.max_rate, Some(200.0)); // twice the capacity 100/s: k = 4
        assert_eq!(p.k, 4.0);
    }

    #[test]
    fn recovering_plan_agrees_with_closed_form_and_fluid() {
        let p = plan(&input(0.2)).unwrap();
        assert!(!p.trapped);
        // k = 10, Delta = 2: (6 - 1)(2 - 1)/0.4 + 1/0.8 = 13.75.
        let closed = p.recovery_closed_s.unwrap();
        assert!((closed - 13.75).abs() < 1e-9, "{closed}");
        let fluid = p.recovery_fluid_s.unwrap();
        assert!(
            (fluid - closed).abs() < 0.25 * closed,
            "{fluid} vs {closed}"
        );
        assert!(p.observe_s > closed);
    }

    #[test]
    fn budget_lowers_amplification_and_given_spike_is_checked() {
        let mut i = input(0.5);
        i.retry_budget = Some(0.2);
        i.spike = Some((3.0, 1.0)); // (1.5 - 1) x 1 = 0.5 < 1: no trigger
        let p = plan(&i).unwrap();
        assert!((p.amplification - 1.2).abs() < 1e-12);
        assert!(!p.trapped);
        assert!(
            p.warnings[0].contains("does not trigger"),
            "{:?}",
            p.warnings
        );
        i.spike = Some((3.0, 3.0)); // 1.5: triggers, under 2 x timeout
        let p = plan(&i).unwrap();
        assert!(p.warnings[0].contains("little margin"), "{:?}", p.warnings);
    }

    #[test]
    fn bad_input_is_named() {
        let e = plan(&input(1.2)).unwrap_err().to_string();
        assert!(e.starts_with("rho:"), "{e}");
        let mut i = input(0.3);
        i.timeout_s = 0.0;
        assert!(plan(&i).unwrap_err().to_string().starts_with("timeout:"));
    }

    #[test]
    fn schedule_is_base_spike_base_within_the_highest_rate() {
        let p = plan(&input(0.5)).unwrap();
        let s = schedule(&p).unwrap();
        assert_eq!(highest_rate(&s), 200.0);
        assert!(s.starts_with("0us:50,3000000us:200,5000000us:50,"), "{s}");
        assert!(s.ends_with(":end"));
    }

    #[test]
    fn measured_record_judges_recovery_and_amplification() {
        let p = plan(&input(0.5)).unwrap(); // before 3 s, spike 2 s, timeout 1 s, R = 2
        // Seconds 0..20; timeouts fire (row i) for attempts sent at i - 1, from second 4 to 12.
        let rows: Vec<LoadRow> = (0..20)
            .map(|s| {
                let failing = (4..12).contains(&s);
                LoadRow {
                    second: f64::from(s),
                    first_attempts: 50.0,
                    attempts: if failing { 150.0 } else { 50.0 },
                    successes: if failing { 0.0 } else { 50.0 },
                    // Behind a gateway a third of the failed attempts end in its 504.
                    timeouts: if (5..13).contains(&s) { 100.0 } else { 0.0 },
                    status_5xx: if (5..13).contains(&s) { 50.0 } else { 0.0 },
                    requests_failed: 0.0,
                }
            })
            .collect();
        let rec = measured_record(&rows, &p);
        assert_eq!(rec.rows.len(), 19);
        let m = measure(&rec, &p, true, None);
        // Last bad row sent at second 11 = t 8, ends t 9; spike ends at t 2: 7 s.
        assert_eq!(m.outcome.recovery_s, Some(7.0));
        assert!(!m.outcome.trapped);
        assert_eq!(m.amplification, Some(3.0));
        assert!(!m.failing_at_end, "answering again when the load stopped");
        let csv = "second,first_attempts,attempts,successes,timeouts,requests_failed,\
                   errors_status_5xx\n0,5,6,5,1,0,2\n";
        let row = parse_timeseries(csv).unwrap()[0];
        assert_eq!((row.timeouts, row.status_5xx), (1.0, 2.0));
        assert!(parse_timeseries("second\n1\n").is_err());
    }

    fn base_row(second: u64, sent: f64, answered: f64, timeouts: f64) -> LoadRow {
        LoadRow {
            second: second as f64,
            first_attempts: sent,
            attempts: sent,
            successes: answered,
            timeouts,
            status_5xx: 0.0,
            requests_failed: 0.0,
        }
    }

    #[test]
    fn base_health_lets_the_spike_go_only_to_a_target_that_answers() {
        let healthy: Vec<LoadRow> = (0..3).map(|s| base_row(s, 20.0, 20.0, 0.0)).collect();
        let h = base_health(&healthy);
        assert!(h.healthy, "{h:?}");
        assert_eq!((h.first_attempts, h.successes, h.seconds), (60.0, 60.0, 3));
        let problem = |rows: &[LoadRow]| base_health(rows).problem.expect("judged not healthy");
        // A target that answers nothing: the first timeouts fire a timeout after the first sends.
        let silent = [base_row(0, 20.0, 0.0, 0.0), base_row(1, 20.0, 0.0, 20.0)];
        assert!(problem(&silent).contains("20 attempts timed out at base load"));
        // Slow or refusing, but nothing timed out yet: under 90% answered.
        let slow = [base_row(0, 20.0, 10.0, 0.0), base_row(1, 20.0, 15.0, 0.0)];
        assert!(problem(&slow).contains("only 25 answers to 40 first attempts"));
        // Too little load to tell is not a licence to send the spike.
        assert!(problem(&[base_row(0, 4.0, 4.0, 0.0)]).contains("too few"));
        assert!(!base_health(&[]).healthy);
    }

    #[test]
    fn a_target_still_timing_out_at_the_end_is_reported_failing() {
        let rows = |bad_from: usize| Record {
            step_s: 1.0,
            rows: (0..10)
                .map(|i| Row {
                    t: i as f64,
                    timed_out: if i >= bad_from { 5.0 } else { 0.0 },
                    ..Row::default()
                })
                .collect(),
        };
        assert!(failing_at_end(&rows(9), 2.0));
        assert!(failing_at_end(&rows(8), 2.0));
        // Timeouts that stopped more than one timeout before the end: answering again.
        assert!(!failing_at_end(&rows(10), 2.0));
        assert!(!failing_at_end(
            &Record {
                step_s: 1.0,
                rows: vec![]
            },
            2.0
        ));
    }

    #[test]
    fn pod_amplification_reads_the_pods_over_the_failed_phase() {
        // 10 first attempts a second; the pods see 90 a second from t = 20 (A = 9 behind a
        // gateway), read at uneven instants.
        let record = Record {
            step_s: 1.0,
            rows: (0..60)
                .map(|t| Row {
                    t: f64::from(t),
                    first_attempts: 10.0,
                    ..Default::default()
                })
                .collect(),
        };
        let pods = |t: f64| {
            if t < 20.0 {
                10.0 * t
            } else {
                200.0 + 90.0 * (t - 20.0)
            }
        };
        let readings: Vec<(f64, f64)> = [0.3, 5.1, 19.0, 21.5, 30.2, 44.9, 50.0, 59.7]
            .iter()
            .map(|&t| (t, pods(t)))
            .collect();
        // Whole rows 31..49: 190 first attempts, 1,710 arrivals.
        let a = pod_amplification(&readings, &record, (30.2, 50.0)).unwrap();
        assert!((a - 9.0).abs() < 1e-9, "{a}");
        // Outside the readings: nothing to say.
        assert_eq!(pod_amplification(&readings, &record, (0.0, 50.0)), None);
        assert_eq!(pod_amplification(&[], &record, (30.0, 50.0)), None);
    }
}
