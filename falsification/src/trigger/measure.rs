//! Measuring a run: the loadgen's rows (its `--stdout-rows` seconds, its `timeseries.csv`) into
//! the base phase's health, the record in the spike's time and the [`Measured`] outcome.

use anyhow::Context;
use serde::Serialize;

use super::plan::Plan;
use crate::table::Table;
use falsification_model::outcome::{self, Criteria, Outcome, Record, Row};

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
pub fn load_row(r: &loadgen::record::Row) -> LoadRow {
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
    let t = Table::parse(text).context("timeseries.csv")?;
    let col = |name: &str| t.column(name).context("timeseries.csv");
    let idx = [
        col("second")?,
        col("first_attempts")?,
        col("attempts")?,
        col("successes")?,
        col("timeouts")?,
        col("requests_failed")?,
        col("errors_status_5xx")?,
    ];
    t.rows()
        .map(|row| {
            let v = |i: usize| -> anyhow::Result<f64> {
                row.number(idx[i])
                    .with_context(|| format!("timeseries.csv line {}: bad value", row.line()))
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
    /// The failed phase `amplification` is measured over, seconds from the spike's start.
    pub failed_phase: Option<(f64, f64)>,
    /// Arrivals at the pods per first attempt over that phase (with `--pods`).
    pub pod_amplification: Option<f64>,
}

/// Arrivals at the pods per first attempt over `phase`: `arrivals` holds (seconds from the
/// spike's start, the pods' cumulative arrivals), read about every second; the first attempts
/// are the record's.
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

/// What watching a run saw besides the loadgen's records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watched {
    /// Whether the run went to its planned end (not cut by Ctrl-C or --max-duration).
    pub complete: bool,
    /// The target at base load, when the run got as far as the check.
    pub health_before: Option<BaseHealth>,
    /// The pods' cumulative arrivals (with `--pods`): (seconds from the spike's start, count).
    pub pod_arrivals: Vec<(f64, f64)>,
}

/// Judges a measured record against the plan: its outcome, and the amplification (at the
/// clients, and at the pods when they were read) of its failed phase.
pub fn measure(record: &Record, p: &Plan, watched: Watched) -> Measured {
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
    let failed_phase = last_bad
        .filter(|_| first > 0.0)
        .map(|i| (from, record.rows[i].t + record.step_s));
    Measured {
        outcome,
        amplification: (first > 0.0).then(|| att / first),
        complete: watched.complete,
        health_before: watched.health_before,
        failing_at_end: failing_at_end(record, p.timeout_s),
        failed_phase,
        pod_amplification: failed_phase
            .and_then(|phase| pod_amplification(&watched.pod_arrivals, record, phase)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::plan::{plan, tests::input};

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
        let watched = Watched {
            complete: true,
            ..Watched::default()
        };
        let m = measure(&rec, &p, watched);
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
