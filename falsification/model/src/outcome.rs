//! The ONE definition of the outcome of a run, applied alike to a model's record and to a measured one.
//!
//! A [`Record`] has one row per `step_s` (1 s of experiment time for the models). Counts are attributed
//! to the row in which the attempt was SENT (timeouts) or the logical request STARTED (lost requests), so
//! a loadgen record that counts timeouts when they fire must be shifted back by the timeout first.
//!
//! - **Recovered** (SPEC): the wait is back under the timeout, the backlog has drained (wait at or below
//!   `drained_wait_s`) and attempts succeed again, for good (to the end of the record). The recovery time
//!   is counted from the reference (end of a spike, start of a sustained step) to the end of the last row
//!   that still had a timed-out attempt or an undrained wait. This is the strict recovery the laws
//!   predict; the **goodput recovery** is what users feel: from the reference to the end of the last
//!   row whose logical requests succeeded less than 99% of the time (it and the stretch of at least
//!   1,000 requests around it, so that a measured row's counting noise is not a loss); the **debt served** is when no
//!   arrival faces a wait at the timeout any more (a pod the loadgen's pool keeps busy may hold a
//!   steady queue under it for good, which the strict rule still counts).
//! - **Trapped**: not recovered, and the failed state sustains itself: over the record's last stretch
//!   attempts still time out (or the wait is past the timeout), and the attempts offered are at least
//!   what the ready pods serve (work per first attempt times utilization at least 1 at the capacity it
//!   settled at), or the longest wait has not fallen from its peak at all. A run that is still
//!   draining at its end is **not recovered within the horizon**: slow, not trapped.
//! - **Lost fraction**: logical requests started in the accounting window that failed every attempt,
//!   over all logical requests started in it.
//! - **Provisioning** (the publication's Definition 9, for a sustained step): the time until the ready
//!   pods' capacity first meets the demand (the mean first-attempt rate over the window), the peak pods
//!   over the pods needed (the demand at the target utilization: where a perfect scaler settles), and
//!   the first-attempt work lost in seconds of that demand.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One row of a per-second record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Start of the row, seconds from the load event.
    pub t: f64,
    /// Logical requests started (first attempts sent).
    pub first_attempts: f64,
    /// Attempts sent (first and retries).
    pub attempts: f64,
    /// Attempts sent in this row that timed out.
    pub timed_out: f64,
    /// Attempts sent in this row that a pod refused at once (503: a shedding discipline).
    #[serde(default)]
    pub refused: f64,
    /// Attempts of this row the client refused itself (throttle, rate limiter, open breaker):
    /// never sent, and their requests end there.
    #[serde(default)]
    pub rejected: f64,
    /// Logical requests started in this row that failed every attempt.
    pub lost: f64,
    /// Largest wait an arrival faced in this row (over pods), seconds.
    pub max_wait_s: f64,
    pub pods_ready: u32,
    pub pods_desired: u32,
}

impl Row {
    /// Attempts of this row that failed: timed out, refused by a pod or by the client.
    pub fn failed(&self) -> f64 {
        self.timed_out + self.refused + self.rejected
    }
}

/// A per-row time series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub step_s: f64,
    pub rows: Vec<Row>,
}

impl Record {
    /// Empty rows of `step_s` covering `[start, end)`.
    pub(crate) fn span(start: f64, end: f64, step_s: f64) -> Record {
        let n = ((end - start) / step_s).ceil().max(1.0) as usize;
        let rows = (0..n)
            .map(|i| Row {
                t: start + i as f64 * step_s,
                ..Row::default()
            })
            .collect();
        Record { step_s, rows }
    }

    /// The row holding time `t` (clamped to the record).
    pub(crate) fn row_mut(&mut self, t: f64) -> &mut Row {
        let start = self.rows.first().map_or(0.0, |r| r.t);
        let i = ((t - start) / self.step_s).floor().max(0.0) as usize;
        let last = self.rows.len() - 1;
        &mut self.rows[i.min(last)]
    }
}

/// When a run counts as recovered, and over which window lost demand is counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Criteria {
    /// Recovery time is counted from here (end of a spike, start of a step).
    pub reference: f64,
    /// Accounting window `[from, to)` for lost demand, peak pods and "triggered".
    pub from: f64,
    pub to: f64,
    /// The backlog has drained once the wait is at most this above the steady wait.
    pub drained_wait_s: f64,
    /// The steady wait: what a busy pod keeps queued once the debt is served, for the
    /// configuration that ran. `None`: the record's own ([`steady_wait`], a model's); a measured
    /// run is given its per-pod prediction's, so that drained means back within the band of
    /// what the model settles at, whatever the time scale.
    pub steady_wait_s: Option<f64>,
    /// Requests per second one ready pod serves (the capacity the trap is judged against).
    pub rate_per_pod: f64,
    /// The clients' per-attempt timeout: a wait under it fails nobody.
    pub timeout_s: f64,
    /// Length of the last stretch of the record the trap is judged over.
    pub tail_s: f64,
    /// From a request's start to its final outcome: rows closer than this to the end of the record
    /// do not yet know their lost requests, so the goodput recovery ignores them.
    pub settled_s: f64,
    /// The autoscaler's target utilization, for the pods needed; `None` for fixed capacity.
    pub target_utilization: Option<f64>,
}

impl Criteria {
    /// The wait under which `record`'s backlog counts as drained: the steady wait (given, or
    /// the record's own) plus the band.
    pub fn drained_below_s(&self, record: &Record) -> f64 {
        self.drained_wait_s
            + self
                .steady_wait_s
                .unwrap_or_else(|| steady_wait(record, self))
    }
}

/// How well capacity followed the demand (see the module doc); `None` where it cannot be told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Provisioning {
    /// Seconds from the reference until ready pods x `c` first reaches the demand.
    pub capacity_met_s: Option<f64>,
    /// Peak ready pods over the pods needed at the target utilization.
    pub peak_over_needed: Option<f64>,
    /// First-attempt work lost, in seconds of the demand.
    pub lost_s: Option<f64>,
}

/// The figures every model and every measured run reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Strict: seconds from the reference until no attempt times out and the backlog has drained,
    /// for good; `None` if not within the record (or never triggered).
    pub recovery_s: Option<f64>,
    /// Goodput: seconds from the reference until logical requests succeed 99% of the time, for good.
    pub goodput_recovery_s: Option<f64>,
    /// Debt served: seconds from the reference until no arrival faces a wait at the timeout, for
    /// good (whatever steady queue a busy pod keeps under it).
    pub debt_served_s: Option<f64>,
    /// Triggered and recovered (strictly) within the record.
    pub recovered: bool,
    /// Triggered, not recovered, and the failed state sustains itself (see the module doc).
    pub trapped: bool,
    /// The accounting horizon the outcome was judged over, seconds from the load event.
    pub horizon_s: f64,
    /// Some attempt timed out in the accounting window.
    pub triggered: bool,
    /// When the first attempt that timed out was sent (its record row), seconds from the load
    /// event; it timed out a timeout later. With no load event, a trigger the service made itself.
    #[serde(default)]
    pub first_timeout_s: Option<f64>,
    pub peak_pods: u32,
    pub final_pods: u32,
    pub lost_fraction: Option<f64>,
    /// What a defense cost in the normal state: the share of the attempts sent over the second
    /// half of the warm-up (base load, before the event) that a pod refused or the client
    /// refused itself. `None` without a warm-up.
    #[serde(default)]
    pub base_refused: Option<f64>,
    #[serde(default)]
    pub provisioning: Provisioning,
}

/// What became of a triggered run (or that it was never triggered), in the one vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    NotTriggered,
    Recovered,
    /// Still failing at the end, but draining: it would recover given time.
    NotRecoveredWithinHorizon,
    /// Failing at the end, and the failed state sustains itself.
    Trapped,
}

impl State {
    /// What a prediction that tells only whether the failure sustains itself (the laws', a
    /// publication's) says of a triggered run.
    pub fn of_trap(trapped: bool) -> State {
        if trapped {
            State::Trapped
        } else {
            State::Recovered
        }
    }
}

/// The one wording of a state; [`Outcome::state_text`] adds the horizon a run ended at.
impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            State::NotTriggered => "not triggered",
            State::Recovered => "recovered",
            State::NotRecoveredWithinHorizon => "not recovered within the horizon",
            State::Trapped => "trapped",
        })
    }
}

impl Outcome {
    pub fn state(&self) -> State {
        match (self.triggered, self.recovered, self.trapped) {
            (false, _, _) => State::NotTriggered,
            (true, true, _) => State::Recovered,
            (true, false, true) => State::Trapped,
            (true, false, false) => State::NotRecoveredWithinHorizon,
        }
    }

    /// Not recovered by the strict rule, but the failure is over for good: the debt is served and
    /// 99% of requests succeed; only a steady queue under the timeout keeps the drain unfinished.
    pub fn failure_ended(&self) -> bool {
        self.state() == State::NotRecoveredWithinHorizon
            && self.debt_served_s.is_some()
            && self.goodput_recovery_s.is_some()
    }

    /// The state in words, with the horizon when the run ended before recovering.
    pub fn state_text(&self) -> String {
        match self.state() {
            State::NotRecoveredWithinHorizon if self.failure_ended() => format!(
                "failure over (debt served, 99% succeed), a steady queue under the timeout at {:.0} s",
                self.horizon_s
            ),
            State::NotRecoveredWithinHorizon => format!(
                "not recovered within the {:.0} s horizon (draining, not trapped)",
                self.horizon_s
            ),
            state => state.to_string(),
        }
    }
}

/// Seconds from `reference` to the end of the last row in `rows` that is `bad` (by index); `None` if the
/// last row is still bad, or if no request started after the last bad row (or after the
/// reference, when none is bad): a stretch in which nothing was sent settles nothing, so it
/// cannot show a recovery.
fn for_good(rows: &[Row], step_s: f64, reference: f64, bad: impl Fn(usize) -> bool) -> Option<f64> {
    let last_bad = (0..rows.len()).rposition(bad);
    let after = last_bad.map_or(0, |i| i + 1);
    let sent_after = rows[after..]
        .iter()
        .any(|r| r.t + step_s > reference && r.first_attempts > 0.0);
    if !sent_after {
        return None;
    }
    Some(last_bad.map_or(0.0, |i| (rows[i].t + step_s - reference).max(0.0)))
}

/// Strict: seconds from `reference` to recovery for good, `None` if the last row is still bad.
fn recovery_s(record: &Record, c: &Criteria) -> Option<f64> {
    let drained = c.drained_below_s(record);
    let rows = &record.rows;
    for_good(rows, record.step_s, c.reference, |i| {
        rows[i].failed() > 0.0 || rows[i].max_wait_s > drained
    })
}

/// The wait a record settles at: over its last stretch (`tail_s`) nothing timed out and the
/// longest wait is flat (within 1%) and under the timeout; else zero. Keep-alive clients make it
/// more than zero: a pod busy to its capacity answers as many attempts as its answers bring
/// back, so whatever it still holds when the debt is served stays queued (the per-pod fluid's
/// F3 ingress keeps 1.8 s). A real queue wanders around that level instead of holding it, which
/// is why a measured run is judged against its prediction's steady wait, not its own.
pub fn steady_wait(record: &Record, c: &Criteria) -> f64 {
    let end = record.rows.last().map_or(0.0, |r| r.t + record.step_s);
    let tail: Vec<&Row> = record
        .rows
        .iter()
        .filter(|r| r.t >= end - c.tail_s - 1e-9)
        .collect();
    let (low, high) = tail.iter().fold((f64::INFINITY, 0.0f64), |(l, h), r| {
        (l.min(r.max_wait_s), h.max(r.max_wait_s))
    });
    let flat = high - low <= (0.01 * high).max(1e-9);
    if tail.is_empty() || !flat || high >= c.timeout_s || tail.iter().any(|r| r.failed() > 0.0) {
        return 0.0;
    }
    high
}

/// Debt served: seconds from `reference` until no arrival faces a wait at the timeout, for good.
/// Per pod this is when the old pods' debt is gone, whatever steady queue a busy pod keeps.
fn debt_served_s(record: &Record, c: &Criteria) -> Option<f64> {
    // A record without waits (a staging target's) cannot tell: no wait is not a served debt.
    if record.rows.iter().all(|r| r.max_wait_s <= 0.0) {
        return None;
    }
    let rows = &record.rows;
    for_good(rows, record.step_s, c.reference, |i| {
        rows[i].max_wait_s >= c.timeout_s
    })
}

/// Requests a stretch must hold before its lost fraction is read against 1%. A measured row is
/// a count: at rate scale 0.5 and S = 20 a row of 5 s holds about 150 requests, where one lost
/// is 0.7% and two are 1.3%, so a row-by-row rule reads counting noise as a loss (F6 rr-30 on
/// 7 Dec: 4 of 40 pods still in debt lost 0.2% of requests, and the rows that lost 2 by chance
/// put its goodput back at 845 s against 146 s per pod). Over 1,000 requests 1% is 10: a true
/// loss of 0.2% (2 expected) passes it with probability 1e-5, a true 2% (20) stays under it
/// with probability 0.5%. Where a model's rows hold more than that each, its figure is the
/// row-by-row one.
pub const GOODPUT_STRETCH_REQUESTS: f64 = 1_000.0;

/// Goodput: seconds from `reference` until logical requests succeed 99% of the time for good,
/// over the rows whose requests have their final outcome. A row is still losing when it lost
/// more than 1% of the requests it started and so did the stretch around it: the fewest rows
/// centred on it that hold [`GOODPUT_STRETCH_REQUESTS`] (or all that is known). Centred, so
/// that neither a sharp return nor a gradual one is moved: a stretch from the row onwards
/// placed F6 ka-40's (9 of 193 lost, then none) a row early, diluting it with the rows after.
fn goodput_recovery_s(record: &Record, c: &Criteria) -> Option<f64> {
    let end = record.rows.last().map_or(0.0, |r| r.t + record.step_s);
    let known = record
        .rows
        .iter()
        .take_while(|r| r.t + record.step_s + c.settled_s <= end + 1e-9)
        .count();
    let rows = &record.rows[..known];
    let over = |started: f64, lost: f64| started > 0.0 && lost > 0.01 * started;
    let losing: Vec<bool> = (0..rows.len())
        .map(|i| {
            if !over(rows[i].first_attempts, rows[i].lost) {
                return false;
            }
            let (mut lo, mut hi) = (i, i);
            let (mut started, mut lost) = (rows[i].first_attempts, rows[i].lost);
            while started < GOODPUT_STRETCH_REQUESTS && (lo > 0 || hi + 1 < rows.len()) {
                if hi + 1 < rows.len() {
                    hi += 1;
                    started += rows[hi].first_attempts;
                    lost += rows[hi].lost;
                }
                if lo > 0 && started < GOODPUT_STRETCH_REQUESTS {
                    lo -= 1;
                    started += rows[lo].first_attempts;
                    lost += rows[lo].lost;
                }
            }
            over(started, lost)
        })
        .collect();
    for_good(rows, record.step_s, c.reference, |i| losing[i])
}

/// Whether a record still failing at its end sustains the failure: over its last `tail_s` attempts
/// still time out (or the wait is past the timeout), and the attempts offered reach the ready
/// pods' capacity, or the longest wait has not fallen from its peak.
fn self_sustaining(record: &Record, c: &Criteria) -> bool {
    let end = record.rows.last().map_or(0.0, |r| r.t + record.step_s);
    let tail: Vec<&Row> = record
        .rows
        .iter()
        .filter(|r| r.t >= end - c.tail_s - 1e-9)
        .collect();
    let (offered, capacity) = tail.iter().fold((0.0, 0.0), |(o, cap), r| {
        (
            o + r.attempts,
            cap + f64::from(r.pods_ready) * c.rate_per_pod * record.step_s,
        )
    });
    // The wait over the stretch's last fifth against the largest since the reference: a failure
    // that sustains itself has not drained at all (2% allowed for a measured queue's noise). A
    // slow drain still counts: F2 at 30% measured at S = 10 fell only 7% in the 500 s after its
    // spike, with the offered load at 0.9 of capacity.
    let part = (tail.len() / 5).max(1);
    let recent = &tail[tail.len().saturating_sub(part)..];
    let last = recent.iter().map(|r| r.max_wait_s).sum::<f64>() / recent.len().max(1) as f64;
    let peak = record
        .rows
        .iter()
        .filter(|r| r.t >= c.reference)
        .map(|r| r.max_wait_s)
        .fold(0.0, f64::max);
    // A record without waits (a staging target's) is judged by the load alone.
    let wait_known = peak > 0.0;
    // Still failing: attempts time out in the stretch, or the wait at its end is past the timeout.
    // A steady queue under the timeout (a pod the pool keeps busy) is not a failure at all.
    let failing = tail.iter().any(|r| r.failed() > 0.0) || last >= c.timeout_s;
    failing && (offered >= capacity || (wait_known && last >= 0.98 * peak))
}

fn in_window<'a>(record: &'a Record, c: &Criteria) -> impl Iterator<Item = &'a Row> {
    let (from, to) = (c.from, c.to);
    record
        .rows
        .iter()
        .filter(move |r| r.t >= from - 1e-9 && r.t < to - 1e-9)
}

/// Lost logical requests over started ones in the window; `None` when none started.
fn lost_fraction(record: &Record, c: &Criteria) -> Option<f64> {
    let (lost, started) =
        in_window(record, c).fold((0.0, 0.0), |(l, s), r| (l + r.lost, s + r.first_attempts));
    (started > 0.0).then(|| lost / started)
}

/// The Definition 9 figures of a record (see the module doc).
fn provisioning(record: &Record, c: &Criteria) -> Provisioning {
    let (rows, started, lost, peak) = in_window(record, c).fold((0, 0.0, 0.0, 0u32), |a, r| {
        (
            a.0 + 1,
            a.1 + r.first_attempts,
            a.2 + r.lost,
            a.3.max(r.pods_ready),
        )
    });
    if rows == 0 || started <= 0.0 {
        return Provisioning::default();
    }
    let demand = started / (f64::from(rows) * record.step_s);
    Provisioning {
        capacity_met_s: in_window(record, c)
            .find(|r| f64::from(r.pods_ready) * c.rate_per_pod >= demand)
            .map(|r| (r.t - c.reference).max(0.0)),
        peak_over_needed: c
            .target_utilization
            .map(|u| f64::from(peak) / (demand / (u * c.rate_per_pod))),
        lost_s: Some(lost / demand),
    }
}

fn triggered(record: &Record, c: &Criteria) -> bool {
    in_window(record, c).any(|r| r.failed() > 0.0)
}

pub fn evaluate(record: &Record, c: &Criteria) -> Outcome {
    let triggered = triggered(record, c);
    let recovery = recovery_s(record, c).filter(|_| triggered);
    let recovered = recovery.is_some();
    Outcome {
        recovery_s: recovery,
        goodput_recovery_s: goodput_recovery_s(record, c).filter(|_| triggered),
        debt_served_s: debt_served_s(record, c).filter(|_| triggered),
        recovered,
        trapped: triggered && !recovered && self_sustaining(record, c),
        horizon_s: c.to,
        triggered,
        first_timeout_s: in_window(record, c).find(|r| r.failed() > 0.0).map(|r| r.t),
        peak_pods: in_window(record, c)
            .map(|r| r.pods_ready)
            .max()
            .unwrap_or(0),
        final_pods: record.rows.last().map_or(0, |r| r.pods_ready),
        lost_fraction: lost_fraction(record, c),
        base_refused: base_refused(record),
        provisioning: provisioning(record, c),
    }
}

/// Refused attempts over attempts in the second half of the rows before the event (t < 0).
fn base_refused(record: &Record) -> Option<f64> {
    let start = record.rows.first()?.t;
    let base = record
        .rows
        .iter()
        .filter(|r| r.t >= start / 2.0 && r.t < 0.0);
    let (refused, attempts) = base.fold((0.0, 0.0), |(f, a), r| {
        (f + r.refused + r.rejected, a + r.attempts + r.rejected)
    });
    (attempts > 0.0).then(|| refused / attempts)
}

/// A case's refutation rule in machine form: what must hold for the prediction to stand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `false`: refuted if any attempt times out.
    pub triggered: Option<bool>,
    /// `true`: refuted if it stays failed; `false`: refuted if it recovers on its own.
    pub recovers: Option<bool>,
    /// Refuted if it ends with more ready pods than this (the clean signal's steady state).
    pub max_final_pods: Option<u32>,
}

/// The one verdict on a run, modelled or measured: what its refutation rule made of it, or none
/// for a measured run that did not go to its end. Its words are the records' (`summary.json`,
/// `predict --format json`, the reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Judgement {
    Held,
    Refuted,
    /// The run cannot decide: it ended while still draining, or its noise can move what is judged.
    Inconclusive,
    /// The run was interrupted before its end: no verdict.
    Incomplete,
}

impl Judgement {
    pub fn word(self) -> &'static str {
        match self {
            Judgement::Held => "held",
            Judgement::Refuted => "refuted",
            Judgement::Inconclusive => "inconclusive",
            Judgement::Incomplete => "incomplete",
        }
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.word())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub judgement: Judgement,
    pub reason: String,
}

impl Verdict {
    pub fn held(&self) -> bool {
        self.judgement == Judgement::Held
    }
}

/// What a verdict rests on besides the outcome.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// The prediction's recovery time, for a run that ended before recovering.
    pub predicted_recovery_s: Option<f64>,
    /// The prediction for the configuration that ran ends the same way, draining with 99%
    /// succeeding again (its goodput recovery): debt left on pods no client reaches any more,
    /// which drain at their own rate, past the horizon.
    pub predicted_draining_goodput_s: Option<f64>,
    /// Why the run cannot resolve its steady-state pod count (the noise of one metric window
    /// against the HPA's tolerance), when it cannot.
    pub pods_unresolved: Option<String>,
}

/// Applies the rule to an outcome (measured or modelled).
pub fn verdict(expect: &Expect, o: &Outcome, evidence: &Evidence) -> Verdict {
    let (mut refuted, mut undecided, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(t) = expect.triggered
        && t != o.triggered
    {
        refuted.push(
            if o.triggered {
                "attempts timed out without a trigger"
            } else {
                "no attempt timed out"
            }
            .to_string(),
        );
    }
    if let Some(r) = expect.recovers {
        match (r, o.state()) {
            (true, State::Trapped) => {
                refuted.push("stayed failed (trapped: the failure sustains itself)".to_string())
            }
            // The rule's "stays failed" is over: the strict drain is a figure, not the verdict.
            (true, State::NotRecoveredWithinHorizon) if o.failure_ended() => notes.push(format!(
                "the failure ended: debt served at {:.0} s, 99% succeed from {:.0} s; a steady \
                 queue under the timeout kept the strict drain from finishing in {:.0} s",
                o.debt_served_s.unwrap_or_default(),
                o.goodput_recovery_s.unwrap_or_default(),
                o.horizon_s
            )),
            // The run and the prediction for it end alike: the clients are served again for
            // good, nothing sustains the failure, and the debt left drains past the horizon.
            (true, State::NotRecoveredWithinHorizon)
                if o.goodput_recovery_s.is_some()
                    && evidence.predicted_draining_goodput_s.is_some() =>
            {
                notes.push(format!(
                    "the failure ended for the clients: 99% succeed from {:.0} s (predicted {:.0} \
                     s); debt left on pods no client reaches drains past the {:.0} s it ran, as \
                     predicted",
                    o.goodput_recovery_s.unwrap_or_default(),
                    evidence.predicted_draining_goodput_s.unwrap_or_default(),
                    o.horizon_s
                ));
            }
            (true, State::NotRecoveredWithinHorizon) => undecided.push(format!(
                "not recovered within the {:.0} s it ran (predicted recovery at {}); still draining",
                o.horizon_s,
                evidence
                    .predicted_recovery_s
                    .map_or("none".to_string(), |t| format!("{t:.0} s")),
            )),
            (false, State::Recovered) => refuted.push("recovered on its own".to_string()),
            (false, State::NotRecoveredWithinHorizon) => refuted.push(
                "not trapped: still failing at the end, but draining (the failure does not sustain itself)"
                    .to_string(),
            ),
            _ => {}
        }
    }
    if let Some(m) = expect.max_final_pods
        && o.final_pods > m
    {
        let held = format!("holds {} pods, more than {m}", o.final_pods);
        match &evidence.pods_unresolved {
            Some(why) => undecided.push(format!("{held}: inconclusive at this scale ({why})")),
            None => refuted.push(held),
        }
    }
    let (judgement, reasons) = if !refuted.is_empty() {
        (Judgement::Refuted, refuted)
    } else if !undecided.is_empty() {
        (Judgement::Inconclusive, undecided)
    } else {
        let mut reasons = vec!["as predicted".to_string()];
        reasons.extend(notes);
        (Judgement::Held, reasons)
    };
    Verdict {
        judgement,
        reason: reasons.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: f64, timed_out: f64, wait: f64) -> Row {
        Row {
            t,
            first_attempts: 100.0,
            attempts: 100.0,
            timed_out,
            max_wait_s: wait,
            pods_ready: 4,
            pods_desired: 4,
            lost: 0.0,
            ..Row::default()
        }
    }

    fn criteria() -> Criteria {
        Criteria {
            reference: 2.0,
            from: 0.0,
            to: 10.0,
            drained_wait_s: 0.5,
            // As a measured run is judged: against a prediction that settles empty.
            steady_wait_s: Some(0.0),
            // 4 pods x 30/s = 120/s of capacity against the rows' 100 attempts/s.
            rate_per_pod: 30.0,
            timeout_s: 10.0,
            tail_s: 5.0,
            settled_s: 2.0,
            target_utilization: Some(0.5),
        }
    }

    #[test]
    fn recovery_is_end_of_last_bad_row_after_reference() {
        let mut rows: Vec<Row> = (0..10).map(|t| row(f64::from(t), 0.0, 0.0)).collect();
        rows[1].timed_out = 5.0;
        rows[4].max_wait_s = 3.0; // no timeout but backlog not drained
        let r = Record { step_s: 1.0, rows };
        // Last bad row starts at 4, ends at 5: 3 s after the reference at 2.
        assert_eq!(recovery_s(&r, &criteria()), Some(3.0));
        let o = evaluate(&r, &criteria());
        assert!(o.triggered && !o.trapped);
        assert_eq!(o.recovery_s, Some(3.0));
    }

    #[test]
    fn failing_at_the_end_without_draining_is_trapped() {
        let r = Record {
            step_s: 1.0,
            rows: (0..10).map(|t| row(f64::from(t), 1.0, 20.0)).collect(),
        };
        let o = evaluate(&r, &criteria());
        assert!(o.trapped && !o.recovered);
        assert_eq!(o.state(), State::Trapped);
        assert_eq!(o.recovery_s, None);
    }

    #[test]
    fn failing_at_the_end_while_draining_is_not_recovered_within_the_horizon() {
        // The wait falls 2 s per second under capacity: slow, not trapped.
        let rows = (0..10)
            .map(|t| row(f64::from(t), 1.0, 40.0 - 2.0 * f64::from(t)))
            .collect();
        let o = evaluate(&Record { step_s: 1.0, rows }, &criteria());
        assert!(o.triggered && !o.recovered && !o.trapped, "{o:?}");
        assert_eq!(o.state(), State::NotRecoveredWithinHorizon);
        assert!(
            o.state_text()
                .contains("not recovered within the 10 s horizon")
        );
    }

    #[test]
    fn the_debt_is_served_when_no_wait_reaches_the_timeout_again() {
        let mut rows: Vec<Row> = (0..10).map(|t| row(f64::from(t), 0.0, 3.0)).collect();
        rows[4].max_wait_s = 12.0;
        let r = Record { step_s: 1.0, rows };
        // The wait last stood at the 10 s timeout in row 4 (ends at 5, 3 s after the reference);
        // a steady 3 s queue stays, so the strict recovery never comes.
        assert_eq!(debt_served_s(&r, &criteria()), Some(3.0));
        assert_eq!(recovery_s(&r, &criteria()), None);
    }

    #[test]
    fn a_steady_queue_under_the_timeout_is_not_a_trap() {
        // One pod keeps 3 s of queue (over the drained threshold, under the 10 s timeout), and
        // nothing times out late in the record: not recovered by the strict rule, not trapped.
        let mut rows: Vec<Row> = (0..10).map(|t| row(f64::from(t), 0.0, 3.0)).collect();
        rows[1].timed_out = 5.0;
        let o = evaluate(&Record { step_s: 1.0, rows }, &criteria());
        assert_eq!(o.state(), State::NotRecoveredWithinHorizon, "{o:?}");
    }

    #[test]
    fn attempts_beyond_capacity_are_trapped_even_while_the_wait_wobbles() {
        let mut c = criteria();
        c.rate_per_pod = 20.0; // 80/s of capacity against 100 attempts/s
        let rows = (0..10)
            .map(|t| row(f64::from(t), 1.0, 40.0 - 2.0 * f64::from(t)))
            .collect();
        assert!(evaluate(&Record { step_s: 1.0, rows }, &c).trapped);
    }

    #[test]
    fn a_model_drains_to_the_wait_it_settles_at_and_a_measured_run_to_its_predictions() {
        // The wait falls 9, 8, ... to a pod's 3 s it keeps for good (the pool keeps it busy).
        let mut rows: Vec<Row> = (0..12)
            .map(|t| row(f64::from(t), 0.0, (9.0 - f64::from(t)).max(3.0)))
            .collect();
        rows[1].timed_out = 5.0;
        let r = Record { step_s: 1.0, rows };
        let own = Criteria {
            steady_wait_s: None,
            ..criteria()
        };
        assert_eq!(steady_wait(&r, &own), 3.0);
        // Drained once within 0.5 s of it: the row at t = 6 (3 s) is the first for good; the
        // last above 3.5 s is t = 5, so recovered at its end, 4 s after the reference at 2.
        assert_eq!(evaluate(&r, &own).recovery_s, Some(4.0));
        // A measured run given its prediction's 3 s is judged alike; given none, never drains.
        assert_eq!(evaluate(&r, &criteria()).recovery_s, None);
        let given = Criteria {
            steady_wait_s: Some(3.0),
            ..criteria()
        };
        assert_eq!(evaluate(&r, &given).recovery_s, Some(4.0));
        // Still falling over the tail, or failing: no steady wait.
        let falling: Vec<Row> = (0..10)
            .map(|t| row(f64::from(t), 0.0, 9.0 - 0.5 * f64::from(t)))
            .collect();
        assert_eq!(
            steady_wait(
                &Record {
                    step_s: 1.0,
                    rows: falling
                },
                &own
            ),
            0.0
        );
        let failing: Vec<Row> = (0..10).map(|t| row(f64::from(t), 1.0, 3.0)).collect();
        assert_eq!(
            steady_wait(
                &Record {
                    step_s: 1.0,
                    rows: failing
                },
                &own
            ),
            0.0
        );
    }

    #[test]
    fn goodput_recovers_when_requests_succeed_again_before_the_strict_recovery() {
        let mut rows: Vec<Row> = (0..10).map(|t| row(f64::from(t), 0.0, 0.0)).collect();
        rows[2].lost = 50.0;
        rows[3].lost = 0.5; // 0.5% lost: good enough for users
        rows[5].max_wait_s = 3.0; // the backlog drains later
        rows[9].lost = 80.0; // not yet settled: ignored
        rows[2].timed_out = 50.0;
        let o = evaluate(&Record { step_s: 1.0, rows }, &criteria());
        assert_eq!(o.goodput_recovery_s, Some(1.0));
        assert_eq!(o.recovery_s, Some(4.0));
    }

    #[test]
    fn a_rows_counting_noise_is_no_loss_but_a_stretch_losing_two_percent_is() {
        // Rows of 150 requests, as a measured run at rate scale 0.5 and S = 20 holds: the
        // failure ends with row 2, then a pod still in debt loses 2 of a row now and then (1.3%
        // of that row, 0.2% of the requests).
        let c = Criteria {
            to: 40.0,
            ..criteria()
        };
        let rows = |lost: &dyn Fn(usize) -> f64| Record {
            step_s: 1.0,
            rows: (0..40)
                .map(|i| Row {
                    first_attempts: 150.0,
                    attempts: 150.0,
                    lost: lost(i),
                    ..row(i as f64, 0.0, 0.0)
                })
                .collect(),
        };
        let noise = rows(&|i| match i {
            0..=2 => 50.0,
            10 | 20 | 30 => 2.0,
            _ => 0.0,
        });
        assert_eq!(goodput_recovery_s(&noise, &c), Some(1.0));
        // A true 2% through row 20 (3 of each row): the stretch of rows 17-23 around row 20
        // holds four such rows, 12 of 1,050, and it ends where the loss did.
        let plateau = rows(&|i| if (3..=20).contains(&i) { 3.0 } else { 0.0 });
        assert_eq!(goodput_recovery_s(&plateau, &c), Some(19.0));
        // A sharp return (20% then none) is placed where it happened.
        let sharp = rows(&|i| if i <= 12 { 30.0 } else { 0.0 });
        assert_eq!(goodput_recovery_s(&sharp, &c), Some(11.0));
    }

    #[test]
    fn a_stretch_with_nothing_sent_decides_nothing() {
        // Failing until row 6, then nothing sent: the quiet rows settle nothing.
        let mut rows: Vec<Row> = (0..10)
            .map(|t| Row {
                lost: 100.0,
                ..row(f64::from(t), 1.0, 0.0)
            })
            .collect();
        for r in &mut rows[7..] {
            *r = Row {
                t: r.t,
                ..Row::default()
            };
        }
        let r = Record { step_s: 1.0, rows };
        assert_eq!(recovery_s(&r, &criteria()), None);
        assert_eq!(goodput_recovery_s(&r, &criteria()), None);
        // A record that ends before its reference shows nothing either.
        let short = Record {
            step_s: 1.0,
            rows: (0..2).map(|t| row(f64::from(t), 0.0, 0.0)).collect(),
        };
        assert_eq!(recovery_s(&short, &criteria()), None);
    }

    #[test]
    fn a_record_without_waits_cannot_tell_the_debt_served() {
        let r = Record {
            step_s: 1.0,
            rows: (0..10).map(|t| row(f64::from(t), 0.0, 0.0)).collect(),
        };
        assert_eq!(debt_served_s(&r, &criteria()), None);
        assert_eq!(recovery_s(&r, &criteria()), Some(0.0));
    }

    #[test]
    fn untriggered_run_has_no_recovery() {
        let r = Record {
            step_s: 1.0,
            rows: (0..10).map(|t| row(f64::from(t), 0.0, 0.01)).collect(),
        };
        let o = evaluate(&r, &criteria());
        assert!(!o.triggered && !o.trapped);
        assert_eq!(o.recovery_s, None);
        assert_eq!(o.lost_fraction, Some(0.0));
    }

    #[test]
    fn lost_fraction_counts_started_requests_in_window() {
        let mut rows: Vec<Row> = (0..12).map(|t| row(f64::from(t), 0.0, 0.0)).collect();
        for r in &mut rows[5..] {
            r.lost = 100.0;
        }
        let r = Record { step_s: 1.0, rows };
        // Window [0, 10): rows 5..9 lost = 500 of 1000 started.
        assert_eq!(lost_fraction(&r, &criteria()), Some(0.5));
    }

    #[test]
    fn provisioning_follows_capacity_against_the_demand() {
        // 100 first attempts/s; c = 30/s, a 50% target: 100 / 15 = 6.67 pods needed. Pods ready
        // 2, 2, 3, 4, 10, then 7: capacity (x 30) first reaches 100/s at t = 3 (4 pods).
        let pods = [2, 2, 3, 4, 10, 7, 7, 7, 7, 7];
        let rows: Vec<Row> = pods
            .iter()
            .enumerate()
            .map(|(t, &p)| Row {
                pods_ready: p,
                lost: if t < 3 { 50.0 } else { 0.0 },
                ..row(t as f64, 0.0, 0.0)
            })
            .collect();
        let r = Record { step_s: 1.0, rows };
        let c = Criteria {
            reference: 0.0,
            ..criteria()
        };
        let p = provisioning(&r, &c);
        assert_eq!(p.capacity_met_s, Some(3.0));
        assert!((p.peak_over_needed.unwrap() - 10.0 / (100.0 / 15.0)).abs() < 1e-9);
        // 150 requests lost at 100/s: 1.5 s of the demand.
        assert!((p.lost_s.unwrap() - 1.5).abs() < 1e-9);
        // Fixed capacity has no target, so no pods needed.
        let fixed = Criteria {
            target_utilization: None,
            ..c
        };
        assert_eq!(provisioning(&r, &fixed).peak_over_needed, None);
    }

    fn outcome(triggered: bool, recovered: bool, trapped: bool) -> Outcome {
        Outcome {
            recovery_s: recovered.then_some(100.0),
            goodput_recovery_s: recovered.then_some(80.0),
            debt_served_s: recovered.then_some(90.0),
            recovered,
            trapped,
            horizon_s: 1000.0,
            triggered,
            peak_pods: 20,
            final_pods: 20,
            lost_fraction: Some(0.99),
            first_timeout_s: None,
            base_refused: None,
            provisioning: Provisioning::default(),
        }
    }

    fn expect(recovers: Option<bool>, max_final_pods: Option<u32>) -> Expect {
        Expect {
            recovers,
            max_final_pods,
            ..Default::default()
        }
    }

    #[test]
    fn verdicts() {
        let none = Evidence::default();
        let trapped = outcome(true, false, true);
        let draining = outcome(true, false, false);
        let recovered = outcome(true, true, false);
        let judge = |e: &Expect, o: &Outcome| verdict(e, o, &none).judgement;
        assert_eq!(judge(&expect(Some(false), None), &trapped), Judgement::Held);
        assert_eq!(
            judge(&expect(Some(false), None), &recovered),
            Judgement::Refuted
        );
        assert_eq!(
            judge(&expect(Some(false), None), &draining),
            Judgement::Refuted
        );
        let v = verdict(&expect(Some(true), None), &trapped, &none);
        assert_eq!(v.judgement, Judgement::Refuted);
        assert!(v.reason.starts_with("stayed failed"));
        assert_eq!(
            judge(&expect(Some(true), None), &recovered),
            Judgement::Held
        );
        // Ended before recovering while still draining: never refuted on that ground alone.
        let v = verdict(
            &expect(Some(true), None),
            &draining,
            &Evidence {
                predicted_recovery_s: Some(1580.0),
                ..Evidence::default()
            },
        );
        assert_eq!(v.judgement, Judgement::Inconclusive);
        assert!(
            v.reason
                .contains("not recovered within the 1000 s it ran (predicted recovery at 1580 s)"),
            "{}",
            v.reason
        );
        // Served again for good, and predicted to end draining too: the rule's "stays failed"
        // is refuted by neither; without the prediction's agreement, or without the clients
        // served again, it stays undecided.
        let served_again = Outcome {
            goodput_recovery_s: Some(650.0),
            ..draining
        };
        let agreeing = Evidence {
            predicted_draining_goodput_s: Some(560.0),
            ..Evidence::default()
        };
        let v = verdict(&expect(Some(true), None), &served_again, &agreeing);
        assert_eq!(v.judgement, Judgement::Held, "{}", v.reason);
        assert!(
            v.reason
                .contains("99% succeed from 650 s (predicted 560 s)"),
            "{}",
            v.reason
        );
        assert_eq!(
            judge(&expect(Some(true), None), &served_again),
            Judgement::Inconclusive
        );
        assert_eq!(
            verdict(&expect(Some(true), None), &draining, &agreeing).judgement,
            Judgement::Inconclusive
        );
        // Debt served and 99% succeeding, a steady queue under the timeout left: the failure is over.
        let ended = Outcome {
            debt_served_s: Some(600.0),
            goodput_recovery_s: Some(550.0),
            ..draining
        };
        assert!(ended.failure_ended());
        assert_eq!(judge(&expect(Some(true), None), &ended), Judgement::Held);
        assert_eq!(
            judge(&expect(Some(false), None), &ended),
            Judgement::Refuted
        );
        let v = verdict(&expect(None, Some(4)), &trapped, &none);
        assert_eq!(v.judgement, Judgement::Refuted);
        assert!(v.reason.contains("20 pods"));
        let noisy = Evidence {
            pods_unresolved: Some("noise 5.8% of one window".into()),
            ..Evidence::default()
        };
        let v = verdict(&expect(None, Some(4)), &trapped, &noisy);
        assert_eq!(v.judgement, Judgement::Inconclusive);
        assert!(v.reason.contains("inconclusive at this scale (noise 5.8%"));
        let untriggered = Expect {
            triggered: Some(false),
            ..Default::default()
        };
        assert_eq!(judge(&untriggered, &trapped), Judgement::Refuted);
    }
}
