//! The ONE definition of the outcome of a run, applied alike to a model's record and to a measured one.
//!
//! A [`Record`] has one row per `step_s` (1 s of experiment time for the models). Counts are attributed
//! to the row in which the attempt was SENT (timeouts) or the logical request STARTED (lost requests), so
//! a loadgen record that counts timeouts when they fire must be shifted back by the timeout first.
//!
//! - **Recovered** (SPEC): the wait is back under the timeout, the backlog has drained (wait at or below
//!   `drained_wait_s`) and attempts succeed again, for good (to the end of the record). The recovery time
//!   is counted from the reference (end of a spike, start of a sustained step) to the end of the last row
//!   that still had a timed-out attempt or an undrained wait.
//! - **Lost fraction**: logical requests started in the accounting window that failed every attempt,
//!   over all logical requests started in it.

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
    /// Logical requests started in this row that failed every attempt.
    pub lost: f64,
    /// Largest wait an arrival faced in this row (over pods), seconds.
    pub max_wait_s: f64,
    pub pods_ready: u32,
    pub pods_desired: u32,
}

/// A per-row time series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub step_s: f64,
    pub rows: Vec<Row>,
}

impl Record {
    /// Empty rows of `step_s` covering `[start, end)`.
    pub fn span(start: f64, end: f64, step_s: f64) -> Record {
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
    pub fn row_mut(&mut self, t: f64) -> &mut Row {
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
    pub drained_wait_s: f64,
}

/// The figures every model and every measured run reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Seconds from the reference until recovered for good; `None` if never (or never triggered).
    pub recovery_s: Option<f64>,
    /// Triggered and not recovered by the end of the record.
    pub trapped: bool,
    /// Some attempt timed out in the accounting window.
    pub triggered: bool,
    pub peak_pods: u32,
    pub final_pods: u32,
    pub lost_fraction: Option<f64>,
}

/// Seconds from `reference` to recovery for good, `None` if the last row is still bad.
pub fn recovery_s(record: &Record, c: &Criteria) -> Option<f64> {
    let bad = |r: &Row| r.timed_out > 0.0 || r.max_wait_s > c.drained_wait_s;
    match record.rows.iter().rposition(bad) {
        None => Some(0.0),
        Some(i) if i + 1 == record.rows.len() => None,
        Some(i) => Some((record.rows[i].t + record.step_s - c.reference).max(0.0)),
    }
}

fn in_window<'a>(record: &'a Record, c: &Criteria) -> impl Iterator<Item = &'a Row> {
    let (from, to) = (c.from, c.to);
    record
        .rows
        .iter()
        .filter(move |r| r.t >= from - 1e-9 && r.t < to - 1e-9)
}

/// Lost logical requests over started ones in the window; `None` when none started.
pub fn lost_fraction(record: &Record, c: &Criteria) -> Option<f64> {
    let (lost, started) =
        in_window(record, c).fold((0.0, 0.0), |(l, s), r| (l + r.lost, s + r.first_attempts));
    (started > 0.0).then(|| lost / started)
}

pub fn triggered(record: &Record, c: &Criteria) -> bool {
    in_window(record, c).any(|r| r.timed_out > 0.0)
}

pub fn evaluate(record: &Record, c: &Criteria) -> Outcome {
    let triggered = triggered(record, c);
    let recovery = recovery_s(record, c);
    Outcome {
        recovery_s: if triggered { recovery } else { None },
        trapped: triggered && recovery.is_none(),
        triggered,
        peak_pods: in_window(record, c)
            .map(|r| r.pods_ready)
            .max()
            .unwrap_or(0),
        final_pods: record.rows.last().map_or(0, |r| r.pods_ready),
        lost_fraction: lost_fraction(record, c),
    }
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub held: bool,
    pub reason: String,
}

/// Applies the rule to an outcome (measured or modelled).
pub fn verdict(expect: &Expect, o: &Outcome) -> Verdict {
    let mut broken = Vec::new();
    if let Some(t) = expect.triggered
        && t != o.triggered
    {
        broken.push(
            if o.triggered {
                "attempts timed out without a trigger"
            } else {
                "no attempt timed out"
            }
            .to_string(),
        );
    }
    if let Some(r) = expect.recovers {
        let recovered = o.triggered && !o.trapped;
        if r && o.trapped {
            broken.push("stayed failed".to_string());
        }
        if !r && recovered {
            broken.push("recovered on its own".to_string());
        }
    }
    if let Some(m) = expect.max_final_pods
        && o.final_pods > m
    {
        broken.push(format!("holds {} pods, more than {m}", o.final_pods));
    }
    let held = broken.is_empty();
    Verdict {
        held,
        reason: if held {
            "as predicted".to_string()
        } else {
            broken.join("; ")
        },
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
        }
    }

    fn criteria() -> Criteria {
        Criteria {
            reference: 2.0,
            from: 0.0,
            to: 10.0,
            drained_wait_s: 0.5,
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
    fn still_bad_at_the_end_is_trapped() {
        let r = Record {
            step_s: 1.0,
            rows: (0..10).map(|t| row(f64::from(t), 1.0, 20.0)).collect(),
        };
        let o = evaluate(&r, &criteria());
        assert!(o.trapped);
        assert_eq!(o.recovery_s, None);
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
    fn verdicts() {
        let trapped = Outcome {
            recovery_s: None,
            trapped: true,
            triggered: true,
            peak_pods: 20,
            final_pods: 20,
            lost_fraction: Some(0.99),
        };
        assert!(
            verdict(
                &Expect {
                    recovers: Some(false),
                    ..Default::default()
                },
                &trapped
            )
            .held
        );
        let v = verdict(
            &Expect {
                recovers: Some(true),
                ..Default::default()
            },
            &trapped,
        );
        assert_eq!(
            v,
            Verdict {
                held: false,
                reason: "stayed failed".into()
            }
        );
        let v = verdict(
            &Expect {
                max_final_pods: Some(4),
                ..Default::default()
            },
            &trapped,
        );
        assert!(!v.held && v.reason.contains("20 pods"));
        let v = verdict(
            &Expect {
                triggered: Some(false),
                ..Default::default()
            },
            &trapped,
        );
        assert!(!v.held);
    }
}
