//! Measuring a run: the loadgen's closed seconds (its `--stdout-rows`) into the base phase's
//! health, the record in the spike's time, the layers' arrivals, and the [`Measured`] outcome.
//!
//! Every failed attempt counts, whatever ended it (a timeout, a gateway's 5xx, a reset): a
//! staging target's failure is what its clients see. Only seconds whose requests have their final
//! outcome enter the record, so a run stopped early cannot look recovered in its last seconds.

use serde::{Deserialize, Serialize};

use super::discipline::{self, Behaved, Second};
use super::plan::{self, AsBehaved, Plan};
use falsification_model::experiment::Discipline;
use falsification_model::outcome::{self, Criteria, Outcome, Record, Row, State};

/// One closed second of the loadgen (every attempt number summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LoadRow {
    pub second: f64,
    pub first_attempts: f64,
    pub attempts: f64,
    pub successes: f64,
    /// Attempts that failed, whatever ended them: timeouts and every error kind.
    pub failed_attempts: f64,
    pub timeouts: f64,
    pub requests_succeeded: f64,
    pub requests_failed: f64,
    /// p99 of the attempts that ended in the second (a timeout when it fired), seconds.
    pub attempt_p99_s: f64,
    /// Requests in flight at the end of the second.
    pub in_flight: f64,
}

impl LoadRow {
    /// Share of the requests that ended in the second that succeeded; `None` when none ended.
    pub fn goodput(&self) -> Option<f64> {
        let ended = self.requests_succeeded + self.requests_failed;
        (ended > 0.0).then(|| self.requests_succeeded / ended)
    }
}

/// One `--stdout-rows` second as a [`LoadRow`].
pub fn load_row(r: &loadgen::record::Row) -> LoadRow {
    let n = |v: u64| v as f64;
    LoadRow {
        second: n(r.second),
        first_attempts: n(r.first_attempts),
        attempts: n(r.attempts.iter().sum()),
        successes: n(r.successes.iter().sum()),
        failed_attempts: n(r.timeouts + r.errors.iter().sum::<u64>()),
        timeouts: n(r.timeouts),
        requests_succeeded: n(r.requests_succeeded),
        requests_failed: n(r.requests_failed),
        attempt_p99_s: r.attempt_p99_us as f64 / 1e6,
        in_flight: n(r.in_flight),
    }
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
    pub failed_attempts: f64,
    pub healthy: bool,
    /// What was seen and what to do, when the spike must not be sent.
    pub problem: Option<String>,
}

/// Judges the base phase: healthy when no attempt failed and at least [`BASE_ANSWERED_MIN`] of
/// the first attempts were answered; too few attempts to tell is not healthy either.
pub fn base_health(rows: &[LoadRow]) -> BaseHealth {
    let sum = |f: fn(&LoadRow) -> f64| rows.iter().map(f).sum::<f64>();
    let (sent, answered, failed) = (
        sum(|r| r.first_attempts),
        sum(|r| r.successes),
        sum(|r| r.failed_attempts),
    );
    let n = rows.len();
    let what_to_do = "wait until it answers again (a previous test's debt drains at the target's \
                      own rate), lower --rate, or check the target";
    let problem = if sent < BASE_SENT_MIN {
        Some(format!(
            "only {sent} first attempts in the {n} s of base load before the spike: too few to see \
             whether the target is healthy; raise --rate or --before"
        ))
    } else if failed > 0.0 {
        Some(format!(
            "{failed} attempts failed at base load ({answered} answers to {sent} first attempts \
             in {n} s): the target is already failing or too slow; {what_to_do}"
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
        failed_attempts: failed,
        healthy: problem.is_none(),
        problem,
    }
}

/// Whether the target was still failing when the load stopped: an attempt failed in the last
/// timeout's worth of seconds that sent load, or after them (attempts still out then).
pub fn failing_at_end(rows: &[LoadRow], timeout_s: f64) -> bool {
    let Some(last) = rows.iter().rposition(|r| r.first_attempts > 0.0) else {
        return false;
    };
    let from = last.saturating_sub(timeout_s.ceil().max(1.0) as usize);
    rows[from..].iter().any(|r| r.failed_attempts > 0.0)
}

/// How a layer's arrivals were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeriesKind {
    /// A per-second rate (a PromQL `rate()` query), read about every second.
    Rate,
    /// A cumulative count (the pods' counter summed), read about every second.
    Count,
}

/// One layer's arrivals as read during the run: (seconds from the spike's start, value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerSeries {
    pub layer: String,
    pub kind: SeriesKind,
    /// How far a reading lags what it measures: a `rate()` over `[w]` averages the last `w`
    /// seconds (0 for a count).
    pub lag_s: f64,
    pub readings: Vec<(f64, f64)>,
}

/// The longest range of a PromQL expression's range selectors (`[5s]`, `[1m]`, a subquery's
/// `[1m:5s]`), in seconds: how far its rate lags; 0 when it has none.
pub fn query_window_s(promql: &str) -> f64 {
    promql
        .split('[')
        .skip(1)
        .filter_map(|rest| {
            let range = rest.split(']').next()?;
            let range = range.split(':').next()?.trim();
            humantime::parse_duration(range).ok()
        })
        .map(|d| d.as_secs_f64())
        .fold(0.0, f64::max)
}

impl LayerSeries {
    /// The reading at `t`, linear between readings; none outside them.
    fn at(&self, t: f64) -> Option<f64> {
        let r = &self.readings;
        let i = r.iter().position(|(s, _)| *s >= t)?;
        let (t1, v1) = r[i];
        if i == 0 {
            return ((t1 - t).abs() < 1e-9).then_some(v1);
        }
        let (t0, v0) = r[i - 1];
        Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0).max(1e-9))
    }

    /// Arrivals in `[t, t + step)`: the count's increase, or the rate read half its window after
    /// the middle (a `rate()` over `[w]` is centred `w/2` before its reading) times the step.
    pub fn arrivals(&self, t: f64, step: f64) -> Option<f64> {
        match self.kind {
            SeriesKind::Count => Some(self.at(t + step)? - self.at(t)?),
            SeriesKind::Rate => Some(self.at(t + step / 2.0 + self.lag_s / 2.0)? * step),
        }
    }
}

/// The measured record, `t` from the spike's start: failed attempts moved back by one timeout
/// (an attempt fails at most a timeout after it was sent; an error that came sooner shifts the
/// failed stretch earlier by at most that, so a fast failure's recovery reads up to that much
/// early), failed requests back by (R + 1) timeouts. Only rows that sent load and whose requests
/// have their outcome: the loadgen stops without a drain, so the last (R + 1) timeouts of rows
/// (or of the rows seen so far) are cut. `attempts` are what the service is offered: the larger
/// of the client's attempts and the arrivals `service` read (a gateway's tries add to them);
/// with `service`, the record ends at its last reading, so the two are never mixed.
pub fn measured_record(rows: &[LoadRow], p: &Plan, service: Option<&LayerSeries>) -> Record {
    let lost_after = p.lost_after_s();
    // The last sending row may be partial (arrivals stopped inside it).
    let mut n = rows
        .iter()
        .rposition(|r| r.first_attempts > 0.0)
        .unwrap_or(0)
        .min(rows.len().saturating_sub(lost_after.ceil() as usize + 1));
    if let Some(s) = service {
        let read = rows[..n]
            .iter()
            .rposition(|r| s.arrivals(r.second - p.before_s, 1.0).is_some());
        n = read.map_or(0, |i| i + 1);
    }
    let mut out: Vec<Row> = rows[..n]
        .iter()
        .map(|r| {
            let t = r.second - p.before_s;
            Row {
                t,
                first_attempts: r.first_attempts,
                attempts: service
                    .and_then(|s| s.arrivals(t, 1.0))
                    .map_or(r.attempts, |a| a.max(r.attempts)),
                // The target counts as one pod of the capacity the plan assumes.
                pods_ready: 1,
                pods_desired: 1,
                ..Row::default()
            }
        })
        .collect();
    let back = |i: usize, by: f64| i.checked_sub(by.round() as usize);
    for (i, r) in rows.iter().enumerate() {
        if let Some(j) = back(i, p.timeout_s).filter(|j| *j < n) {
            out[j].timed_out += r.failed_attempts;
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

/// What the test decided about the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// No attempt failed after the spike.
    NotTriggered,
    Recovered,
    /// Still failing, and the failure sustains itself: the service is offered at least its
    /// capacity.
    Trapped,
    /// The run ended (max duration, Ctrl-C, a stopped loadgen) before the state was decided.
    Undecided,
    /// A stop rule ended the load.
    Aborted,
}

impl Decision {
    pub fn text(self) -> &'static str {
        match self {
            Decision::NotTriggered => "not triggered (no attempt failed after the spike)",
            Decision::Recovered => "recovered",
            Decision::Trapped => "trapped (still failing while offered at least its capacity)",
            Decision::Undecided => "undecided (the run ended while the state was still open)",
            Decision::Aborted => "aborted by a stop rule",
        }
    }
}

/// The outcome's criteria for a plan's record.
fn criteria(record: &Record, p: &Plan) -> Criteria {
    Criteria {
        reference: p.spike_s,
        from: 0.0,
        to: record.rows.last().map_or(0.0, |r| r.t + 1.0),
        drained_wait_s: 0.0,
        // A staging target's record has no waits.
        steady_wait_s: Some(0.0),
        // Unknown capacity (no --rate) cannot be reached: then only a recovery decides.
        rate_per_pod: p.rate.map_or(f64::INFINITY, |r| r / p.rho),
        timeout_s: p.timeout_s,
        tail_s: hold_s(p),
        settled_s: 0.0,
        target_utilization: None,
    }
}

/// How long a state must have held at the end of the record to be decided: a recovery that
/// long clean, a trap failing that long at capacity.
pub fn hold_s(p: &Plan) -> f64 {
    (2.0 * p.lost_after_s()).max(5.0 * p.timeout_s).max(5.0)
}

/// The state the record decides, if any: recovered and clean for [`hold_s`], trapped over a
/// [`hold_s`] tail that starts after the spike's own tries are over (the clients' `(R + 1)`
/// timeouts, and the service layer's lag: a rate read over a window still holds the spike's),
/// or never triggered once the spike's requests have their outcome.
pub fn decided(record: &Record, p: &Plan, service_lag_s: f64) -> Option<Decision> {
    let end = record.rows.last()?.t + record.step_s;
    let o = outcome::evaluate(record, &criteria(record, p));
    let spike_done = p.spike_s + p.lost_after_s() + service_lag_s;
    match o.state() {
        State::Recovered => {
            let clean_since = p.spike_s + o.recovery_s?;
            (end - clean_since >= hold_s(p)).then_some(Decision::Recovered)
        }
        State::Trapped => (end - hold_s(p) >= spike_done).then_some(Decision::Trapped),
        State::NotTriggered => {
            (end >= p.spike_s + p.lost_after_s() + hold_s(p)).then_some(Decision::NotTriggered)
        }
        State::NotRecoveredWithinHorizon => None,
    }
}

/// Arrivals at one layer per first attempt over the failed phase; `None` when the phase left
/// after the layer's lag is under 3 s (too short to tell).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerAmplification {
    pub layer: String,
    pub per_first_attempt: Option<f64>,
    /// Seconds of the phase the figure is over.
    pub over_s: f64,
}

/// What the target behaved like in the failed phase, and the plan's spike predicted with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Behaviour {
    #[serde(flatten)]
    pub behaved: Behaved,
    /// Seconds from the spike's start to the first failed attempt, and what a FIFO of the
    /// planned capacity gives: the queue reaches the timeout after `timeout / (k rho - 1)`, and
    /// the attempt sent then fails a timeout later.
    pub first_failure_s: Option<f64>,
    pub first_failure_fifo_s: Option<f64>,
    /// With the discipline it behaved like, when that is not the models' FIFO.
    pub prediction: Option<AsBehaved>,
}

/// What the target behaved like over `phase` (seconds from the spike's start), from the
/// clients' seconds (`discipline::classify`), and the plan predicted with it; `None` without a
/// capacity or a second in the phase.
fn behaviour(rows: &[LoadRow], p: &Plan, phase: (f64, f64)) -> Option<Behaviour> {
    let seconds: Vec<Second> = rows
        .iter()
        .map(|r| Second {
            t: r.second - p.before_s,
            attempts: r.attempts,
            successes: r.successes,
            timeouts: r.timeouts,
            refused: r.failed_attempts - r.timeouts,
            in_flight: r.in_flight,
        })
        .collect();
    let behaved = discipline::classify(&seconds, phase, p.rate? / p.rho, p.timeout_s)?;
    let excess = p.k * p.rho - 1.0;
    Some(Behaviour {
        prediction: behaved
            .model
            .filter(|d| *d != Discipline::Fifo)
            .map(|d| plan::predict_as(p, d)),
        behaved,
        first_failure_s: rows
            .iter()
            .find(|r| r.second >= p.before_s && r.failed_attempts > 0.0)
            .map(|r| r.second - p.before_s),
        first_failure_fifo_s: (excess > 0.0)
            .then(|| p.service_timeout_s / excess + p.service_timeout_s),
    })
}

/// What the run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    pub outcome: Outcome,
    pub decision: Decision,
    /// Attempts per first attempt at the client over the failed phase after the spike (from `R`
    /// timeouts after its end, when the spike's own retries are done, to the last failing row).
    pub amplification: Option<f64>,
    /// Arrivals per first attempt at each layer read (`--arrivals-query`, `--arrivals-metric`),
    /// outermost first, over the same phase.
    pub layers: Vec<LayerAmplification>,
    /// How the watch ended.
    pub ended: Ended,
    /// The target at base load before the spike (none when the run ended before the check).
    pub health_before: Option<BaseHealth>,
    /// Whether the target was still failing when the load stopped (so the next run knows).
    pub failing_at_end: bool,
    /// The failed phase the amplifications are measured over, seconds from the spike's start.
    pub failed_phase: Option<(f64, f64)>,
    pub discipline: Option<Behaviour>,
}

/// Why the load stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ended {
    /// The state was decided: the load stopped then.
    Decided,
    MaxDuration,
    /// The loadgen (or a shard) failed.
    LoadFailed,
    Interrupted,
    /// A stop rule fired.
    Aborted,
    /// The base phase found the target unhealthy: no spike was sent.
    Unhealthy,
}

impl Ended {
    pub fn text(self) -> &'static str {
        match self {
            Ended::Decided => "once the state was decided",
            Ended::MaxDuration => "at the maximum duration, the state still open",
            Ended::LoadFailed => "when the loadgen failed",
            Ended::Interrupted => "on Ctrl-C",
            Ended::Aborted => "when a stop rule fired",
            Ended::Unhealthy => "before the spike: the target was unhealthy at base load",
        }
    }
}

/// What watching a run saw besides the loadgen's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Watched {
    pub ended: Ended,
    /// What the run decided while it went, when it stopped on a decision.
    pub decided: Option<Decision>,
    /// The target at base load, when the run got as far as the check.
    pub health_before: Option<BaseHealth>,
    /// Each layer's arrivals, outermost first (the last is the service itself).
    pub layers: Vec<LayerSeries>,
}

/// Rows fewer than this after a layer's lag leave its amplification untold.
const LAYER_PHASE_MIN_S: f64 = 3.0;

/// Arrivals at a layer per first attempt over `phase`, from its lag on (a rate over a window
/// still holds the spike's tries for that long), over the rows it has a reading for; and the
/// seconds that covers.
fn layer_amplification(s: &LayerSeries, record: &Record, phase: (f64, f64)) -> (Option<f64>, f64) {
    let from = phase.0 + s.lag_s;
    let (arrivals, first, seconds) = record
        .rows
        .iter()
        .filter(|r| r.t >= from && r.t + record.step_s <= phase.1 + 1e-9)
        .filter_map(|r| Some((s.arrivals(r.t, record.step_s)?, r.first_attempts)))
        .fold((0.0, 0.0, 0.0), |(a, f, n), (ra, rf)| {
            (a + ra, f + rf, n + record.step_s)
        });
    let figure = (seconds >= LAYER_PHASE_MIN_S && first > 0.0).then(|| arrivals / first);
    (figure, seconds)
}

/// Judges a run: the record from its rows, the outcome and decision, the amplification at the
/// client and at each layer read over the failed phase, and what the target behaved like.
pub fn measure(rows: &[LoadRow], p: &Plan, watched: &Watched) -> (Record, Measured) {
    let service = watched.layers.last();
    let record = measured_record(rows, p, service);
    let outcome = outcome::evaluate(&record, &criteria(&record, p));
    let decision = match watched.ended {
        Ended::Aborted => Decision::Aborted,
        // The decision the run stopped on is the one reported.
        Ended::Decided if watched.decided.is_some() => {
            watched.decided.unwrap_or(Decision::Undecided)
        }
        // A recovery without the hold after it stands when the run went to its bound.
        _ => {
            decided(&record, p, service.map_or(0.0, |s| s.lag_s)).unwrap_or(match outcome.state() {
                State::Recovered if watched.ended == Ended::MaxDuration => Decision::Recovered,
                _ => Decision::Undecided,
            })
        }
    };
    // The client's attempts, not the service's arrivals the record may hold.
    let from = p.spike_s + f64::from(p.retries) * p.timeout_s;
    let last_bad = record.rows.iter().rposition(|r| r.timed_out > 0.0);
    let first_bad = record.rows.iter().position(|r| r.timed_out > 0.0);
    let phase = last_bad.map(|i| (from, record.rows[i].t + record.step_s));
    let sum = |f: fn(&LoadRow) -> f64| {
        let (from, to) = phase?;
        let total = rows
            .iter()
            .filter(|r| {
                let t = r.second - p.before_s;
                t >= from && t + 1.0 <= to + 1e-9
            })
            .map(f)
            .sum::<f64>();
        Some(total)
    };
    let (attempts, first) = (
        sum(|r| r.attempts).unwrap_or(0.0),
        sum(|r| r.first_attempts).unwrap_or(0.0),
    );
    let failed_phase = phase.filter(|_| first > 0.0);
    let measured = Measured {
        outcome,
        decision,
        amplification: (first > 0.0).then(|| attempts / first),
        layers: failed_phase.map_or_else(Vec::new, |ph| {
            watched
                .layers
                .iter()
                .map(|s| {
                    let (per_first_attempt, over_s) = layer_amplification(s, &record, ph);
                    LayerAmplification {
                        layer: s.layer.clone(),
                        per_first_attempt,
                        over_s,
                    }
                })
                .collect()
        }),
        ended: watched.ended,
        health_before: watched.health_before.clone(),
        failing_at_end: failing_at_end(rows, p.timeout_s),
        failed_phase,
        // From a timeout after the first failing second (a FIFO still answers what was sent
        // before its wait reached the timeout) to the last.
        discipline: first_bad
            .zip(phase)
            .and_then(|(i, (_, end))| behaviour(rows, p, (record.rows[i].t + p.timeout_s, end))),
    };
    (record, measured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::discipline::{Answered, Named};
    use crate::trigger::plan::{plan, tests::input};

    /// Seconds 0..`n` at 50 first attempts/s; attempts sent in `failing` fail, three per
    /// request, `ended_by` seconds later (a timeout's 1 s, or a gateway's 5xx sooner).
    fn rows(n: u32, failing: std::ops::Range<u32>, ended_by: u32) -> Vec<LoadRow> {
        (0..n)
            .map(|s| {
                let sent_failing = failing.contains(&s);
                let fails_now = s >= ended_by && failing.contains(&(s - ended_by));
                LoadRow {
                    second: f64::from(s),
                    first_attempts: 50.0,
                    attempts: if sent_failing { 150.0 } else { 50.0 },
                    successes: if sent_failing { 0.0 } else { 50.0 },
                    failed_attempts: if fails_now { 150.0 } else { 0.0 },
                    requests_succeeded: if sent_failing { 0.0 } else { 50.0 },
                    requests_failed: if fails_now { 50.0 } else { 0.0 },
                    ..LoadRow::default()
                }
            })
            .collect()
    }

    fn watched(ended: Ended) -> Watched {
        Watched {
            ended,
            decided: None,
            health_before: None,
            layers: Vec::new(),
        }
    }

    #[test]
    fn a_recovery_is_measured_from_every_failed_attempt() {
        let p = plan(&input(0.5)).unwrap(); // before 3 s, spike 2 s, timeout 1 s, R = 2
        let r = rows(40, 4..12, 1);
        let (rec, m) = measure(&r, &p, &watched(Ended::MaxDuration));
        // The last (R + 1) timeouts of rows have no outcome yet: cut.
        assert_eq!(rec.rows.len(), 36);
        // Last failing row sent at second 11 = t 8, ends t 9; spike ends at t 2: 7 s.
        assert_eq!(m.outcome.recovery_s, Some(7.0));
        assert_eq!(m.decision, Decision::Recovered);
        assert_eq!(m.amplification, Some(3.0));
        assert!(!m.failing_at_end, "answering again when the load stopped");
        assert_eq!(
            m.outcome.debt_served_s, None,
            "a target without waits cannot tell"
        );
    }

    #[test]
    fn a_gateways_5xx_fails_the_request_as_a_timeout_does() {
        // The case: from second 4 on every attempt ends in the gateway's 5xx, sooner than
        // the client's timeout, to the end of the run.
        let p = plan(&input(0.2)).unwrap(); // capacity 100/s, base 20/s
        let mut r = rows(60, 4..60, 1);
        for x in &mut r {
            (x.first_attempts, x.attempts) = (20.0, 60.0);
        }
        let (_, m) = measure(&r, &p, &watched(Ended::MaxDuration));
        assert!(m.failing_at_end);
        assert_eq!(m.outcome.goodput_recovery_s, None, "{:?}", m.outcome);
        assert_eq!(m.outcome.recovery_s, None);
        assert!(!m.outcome.failure_ended(), "{}", m.outcome.state_text());
        // The client sends 3x at rho 0.2, under the capacity: without the service's arrivals
        // the trap is not shown, and the run is undecided.
        assert_eq!(m.decision, Decision::Undecided);
    }

    #[test]
    fn the_services_arrivals_decide_the_trap() {
        let p = plan(&input(0.2)).unwrap(); // capacity 100/s, base 20/s
        let mut r = rows(60, 4..60, 1);
        for x in &mut r {
            (x.first_attempts, x.attempts) = (20.0, 60.0);
        }
        // A gateway multiplies by 3: the service sees 180/s, past its 100/s.
        let service = LayerSeries {
            layer: "app".into(),
            kind: SeriesKind::Rate,
            lag_s: 5.0,
            readings: (0..120)
                .map(|i| (f64::from(i) * 0.5 - 3.0, 180.0))
                .collect(),
        };
        let w = Watched {
            layers: vec![service],
            ..watched(Ended::Decided)
        };
        let (rec, m) = measure(&r, &p, &w);
        assert_eq!(decided(&rec, &p, 5.0), Some(Decision::Trapped));
        assert_eq!(m.decision, Decision::Trapped);
        let a = m.layers[0].per_first_attempt.unwrap();
        assert!((a - 9.0).abs() < 1e-9, "{a}");
        assert_eq!(
            m.discipline.unwrap().behaved.kind,
            Answered::FinishesAbandoned
        );
    }

    #[test]
    fn unsettled_seconds_are_cut_from_a_stopped_run() {
        let p = plan(&input(0.5)).unwrap(); // (R + 1) x timeout = 3 s
        let r = rows(20, 4..12, 1);
        assert_eq!(measured_record(&r, &p, None).rows.len(), 16);
        // Failing to the end of a stopped run: nothing after the failure decides anything.
        let r = rows(20, 4..20, 1);
        let (_, m) = measure(&r, &p, &watched(Ended::Interrupted));
        assert_eq!(m.outcome.goodput_recovery_s, None);
        assert_eq!(m.outcome.recovery_s, None);
    }

    #[test]
    fn a_recovery_is_decided_only_after_it_has_held() {
        let p = plan(&input(0.5)).unwrap(); // hold: max(2 x 3, 5 x 1, 5) = 6 s
        let rec = |n| measured_record(&rows(n, 4..12, 1), &p, None);
        // Clean from t 9 (second 12): decided once 6 s more have their outcome (3 s later).
        assert_eq!(decided(&rec(20), &p, 0.0), None);
        assert_eq!(decided(&rec(22), &p, 0.0), Some(Decision::Recovered));
    }

    fn base_row(second: u64, sent: f64, answered: f64, failed: f64) -> LoadRow {
        LoadRow {
            second: second as f64,
            first_attempts: sent,
            attempts: sent,
            successes: answered,
            failed_attempts: failed,
            ..LoadRow::default()
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
        assert!(problem(&silent).contains("20 attempts failed at base load"));
        // Slow or refusing, but nothing failed yet: under 90% answered.
        let slow = [base_row(0, 20.0, 10.0, 0.0), base_row(1, 20.0, 15.0, 0.0)];
        assert!(problem(&slow).contains("only 25 answers to 40 first attempts"));
        // Too little load to tell is not a licence to send the spike.
        assert!(problem(&[base_row(0, 4.0, 4.0, 0.0)]).contains("too few"));
        assert!(!base_health(&[]).healthy);
    }

    #[test]
    fn a_target_still_failing_at_the_end_is_reported_failing() {
        let r = |fail_from: usize| -> Vec<LoadRow> {
            (0..10)
                .map(|i| base_row(i as u64, 5.0, 5.0, if i >= fail_from { 5.0 } else { 0.0 }))
                .collect()
        };
        assert!(failing_at_end(&r(9), 2.0));
        assert!(failing_at_end(&r(7), 2.0));
        // Failures that stopped more than one timeout before the end: answering again.
        assert!(!failing_at_end(&r(10), 2.0));
        assert!(!failing_at_end(&[], 2.0));
    }

    #[test]
    fn layer_arrivals_come_from_counts_and_rates() {
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
        let count = LayerSeries {
            layer: "pods".into(),
            kind: SeriesKind::Count,
            lag_s: 0.0,
            readings: [0.3, 5.1, 19.0, 21.5, 30.2, 44.9, 50.0, 59.7]
                .iter()
                .map(|&t| (t, pods(t)))
                .collect(),
        };
        // Whole rows 31..49: 190 first attempts, 1,710 arrivals.
        let (a, seconds) = layer_amplification(&count, &record, (30.2, 50.0));
        assert!((a.unwrap() - 9.0).abs() < 1e-9, "{a:?}");
        assert_eq!(seconds, 19.0);
        // Rows without a reading are left out, not guessed.
        let (a, seconds) = layer_amplification(&count, &record, (0.0, 50.0));
        assert!(a.is_some() && seconds < 50.0, "{a:?} over {seconds} s");
        // Too few seconds read: nothing to say.
        assert_eq!(
            layer_amplification(&count, &record, (70.0, 80.0)),
            (None, 0.0)
        );
        let rate = LayerSeries {
            layer: "app".into(),
            kind: SeriesKind::Rate,
            lag_s: 5.0,
            readings: (0..60).map(|t| (f64::from(t), 90.0)).collect(),
        };
        let a = layer_amplification(&rate, &record, (30.0, 50.0)).0.unwrap();
        assert!((a - 9.0).abs() < 1e-9, "{a}");
        assert_eq!(
            query_window_s("sum(rate(x{code=~\"5[0-9]+\"}[30s]))/sum(rate(y[1m]))"),
            60.0
        );
        assert_eq!(query_window_s("max_over_time(rate(x[5s])[2m:10s])"), 120.0);
        assert_eq!(query_window_s("sum(x)"), 0.0);
    }

    #[test]
    fn a_target_that_answers_the_newest_is_predicted_as_lifo() {
        // A rho 1.5: the models' FIFO is trapped.
        let p = plan(&input(0.5)).unwrap(); // capacity 100/s, before 3 s
        // From the spike on it answers 95/s in 20 ms while 10 attempts/s time out.
        let r: Vec<LoadRow> = (0..20)
            .map(|s| {
                let timeouts = if s >= 4 { 10.0 } else { 0.0 };
                LoadRow {
                    second: f64::from(s),
                    first_attempts: 100.0,
                    attempts: 100.0 + timeouts,
                    successes: 95.0,
                    failed_attempts: timeouts,
                    timeouts,
                    in_flight: timeouts + 95.0 * 0.02,
                    ..LoadRow::default()
                }
            })
            .collect();
        let d = behaviour(&r, &p, (2.0, 10.0)).unwrap();
        assert_eq!(d.behaved.kind, Answered::KeepsAnswering);
        assert_eq!(d.behaved.named, Named::Lifo, "{}", d.behaved.why);
        assert!((d.behaved.answered_share - 0.95).abs() < 1e-9);
        assert_eq!(d.first_failure_s, Some(1.0));
        // LIFO escapes where the models' FIFO is trapped, once the spike's requests are over.
        assert!(p.trapped);
        match d.prediction {
            Some(AsBehaved::Fluid {
                discipline: Discipline::Lifo,
                state: State::Recovered,
                recovery_s: Some(r),
            }) => assert!(r <= p.lost_after_s(), "{r}"),
            other => panic!("{other:?}"),
        }
        let short = behaviour(&r, &p, (2.0, 3.0)).unwrap();
        assert_eq!(short.behaved.named, Named::CannotTell, "too short a phase");
        assert_eq!(short.prediction, None);
    }
}
