//! The run record: per-row samples as measured, the measured [`Record`] the outcome definition is
//! applied to, and the files (`timeseries.csv`, `summary.json`, `report.md`), written atomically.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::probe::{LoadCounters, MeterGauges, PodQueue};
use crate::gateway::GatewayCounters;
use crate::process::{WriteError, write_atomically};
use falsification_model::outcome::{Outcome, Provisioning, Record, Row};

/// One row of the run, `step` run seconds long, as sampled at its end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Start of the row, run seconds from the load event (negative in the warm-up).
    pub t: f64,
    /// Loadgen counts in the row, when they happened (timeouts when they fired).
    pub load: LoadCounters,
    pub pods_desired: u32,
    pub pods_ready: u32,
    pub pods_existing: u32,
    pub queue_total: f64,
    pub queue_max: f64,
    /// Largest wait an arrival faced at a ready pod at the sample.
    pub wait_max_s: f64,
    /// Largest wait held over the last [`SUSTAIN`] samples (the backlog; see [`sustained`]).
    pub wait_sustained_s: f64,
    pub meter: Option<MeterGauges>,
    pub hpa_recommendation: Option<i32>,
    pub hpa_desired: Option<i32>,
    /// The gateway's counts in the row, when the case has one.
    pub gateway: Option<GatewayCounters>,
}

/// Samples a wait must persist to count as backlog rather than a queue's random excursion.
pub const SUSTAIN: usize = 3;

/// Per pod, the smallest wait over its last `SUSTAIN` samples; the largest of those over pods.
/// A real backlog (a pod holding debt) persists from sample to sample; a stable queue's
/// excursion of a few service times does not, and would otherwise read as "not drained".
/// `history` holds each sample's waits by pod; a pod counts over the samples it appears in.
pub fn sustained(history: &[HashMap<String, f64>]) -> f64 {
    let recent = &history[history.len().saturating_sub(SUSTAIN)..];
    let Some(latest) = recent.last() else {
        return 0.0;
    };
    latest
        .keys()
        .map(|pod| {
            recent
                .iter()
                .filter_map(|waits| waits.get(pod).copied())
                .fold(f64::INFINITY, f64::min)
        })
        .fold(0.0, f64::max)
}

/// The measured record in run seconds, counts moved to the row their attempt was sent (failed
/// attempts: timeouts, and a gateway's 5xx, `attempt_s` earlier) or their request started (lost:
/// `lost_after_s` earlier). Without a gateway (`refusals`) a 5xx is a pod's refusal, answered at
/// once: it stays in its row, as what the client refused itself.
pub fn measured_record(
    samples: &[Sample],
    step: f64,
    attempt_s: f64,
    lost_after_s: f64,
    refusals: bool,
) -> Record {
    let mut rows: Vec<Row> = samples
        .iter()
        .map(|s| Row {
            t: s.t,
            first_attempts: s.load.started,
            attempts: s.load.attempts,
            timed_out: 0.0,
            refused: 0.0,
            rejected: 0.0,
            lost: 0.0,
            max_wait_s: s.wait_sustained_s,
            pods_ready: s.pods_ready,
            pods_desired: s.pods_desired,
        })
        .collect();
    let shift = |i: usize, by: f64| i.saturating_sub((by / step).round() as usize);
    for (i, s) in samples.iter().enumerate() {
        if refusals {
            rows[shift(i, attempt_s)].timed_out += s.load.timeouts;
            rows[i].refused += s.load.status_5xx;
        } else {
            rows[shift(i, attempt_s)].timed_out += s.load.timeouts + s.load.status_5xx;
        }
        rows[i].rejected += s.load.rejected;
        rows[shift(i, lost_after_s)].lost += s.load.failed;
    }
    Record { step_s: step, rows }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// `timeseries.csv`: one row per sample.
pub fn csv(samples: &[Sample], record: &Record, time_scale: f64) -> String {
    let mut out = String::from(
        "t_run_s,t_exp_s,first_attempts,attempts,successes,timeouts_fired,timeouts_sent,\
         failed_fired,lost_started,pods_desired,pods_ready,pods_existing,queue_total,queue_max,\
         wait_max_s,wait_sustained_s,meter_first_attempt_rate,meter_ingress_rate,\
         hpa_recommendation,hpa_desired\n",
    );
    for (s, r) in samples.iter().zip(&record.rows) {
        let _ = writeln!(
            out,
            "{:.3},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{:.4},{},{},{},{}",
            s.t,
            s.t * time_scale,
            s.load.first_attempts,
            s.load.attempts,
            s.load.successes,
            s.load.timeouts,
            r.timed_out,
            s.load.failed,
            r.lost,
            s.pods_desired,
            s.pods_ready,
            s.pods_existing,
            s.queue_total,
            s.queue_max,
            s.wait_max_s,
            s.wait_sustained_s,
            opt(s.meter.map(|m| m.first_attempt_rate)),
            opt(s.meter.map(|m| m.ingress_rate)),
            opt(s.hpa_recommendation),
            opt(s.hpa_desired),
        );
    }
    out
}

/// The models' curves a record holds beside its measurement.
pub const MODELS_CSV: &str = "models.csv";

/// `models.csv`: each fluid model's ready pods, goodput (attempts answered, per run second) and
/// largest wait (experiment seconds) over the record's rows of `row_step_s` run seconds: a row's
/// mean goodput, its last pods, its largest wait. The page draws them beside the measurement at
/// the measurement's own resolution (a model's step-by-step goodput alternates at its `dt`).
pub fn models_csv(models: &[(&str, &Record)], row_step_s: f64, time_scale: f64) -> String {
    let mut out = String::from("model,t_exp_s,pods_ready,goodput_per_s,max_wait_exp_s\n");
    for (name, r) in models {
        let Some(t0) = r.rows.first().map(|x| x.t) else {
            continue;
        };
        let row_of = |t: f64| ((t - t0) / row_step_s + 1e-9).floor();
        for rows in r.rows.chunk_by(|a, b| row_of(a.t) == row_of(b.t)) {
            let answered: f64 = rows
                .iter()
                .map(|x| (x.attempts - x.failed()).max(0.0))
                .sum();
            let span = rows.len() as f64 * r.step_s;
            let wait = rows.iter().map(|x| x.max_wait_s).fold(0.0, f64::max);
            let last = rows[rows.len() - 1];
            let _ = writeln!(
                out,
                "{name},{:.1},{},{:.3},{:.4}",
                (t0 + row_of(rows[0].t) * row_step_s) * time_scale,
                last.pods_ready,
                answered / span,
                wait * time_scale,
            );
        }
    }
    out
}

/// `pods.csv`: one line per pod per row, long format. Counts are the row's (the difference of
/// the pod's own counters since its previous line; all it counted before, on its first line).
pub fn pods_csv(samples: &[Sample], pods: &[Vec<(String, PodQueue)>], time_scale: f64) -> String {
    let mut out = String::from(
        "t_run_s,t_exp_s,pod,ready,arrivals,first_arrivals,answered,abandoned,queue,wait_s\n",
    );
    let mut before: HashMap<&str, PodQueue> = HashMap::new();
    for (s, row) in samples.iter().zip(pods) {
        for (pod, q) in row {
            let b = before.insert(pod, *q).unwrap_or_default();
            let _ = writeln!(
                out,
                "{:.3},{:.1},{pod},{},{},{},{},{},{},{:.4}",
                s.t,
                s.t * time_scale,
                u8::from(q.ready),
                q.arrivals - b.arrivals,
                q.first_arrivals - b.first_arrivals,
                q.answered - b.answered,
                q.abandoned - b.abandoned,
                q.depth,
                q.wait_s,
            );
        }
    }
    out
}

/// An outcome's times in experiment seconds (run seconds x the time scale).
pub fn in_experiment_time(o: &Outcome, time_scale: f64) -> Outcome {
    Outcome {
        recovery_s: o.recovery_s.map(|r| r * time_scale),
        goodput_recovery_s: o.goodput_recovery_s.map(|r| r * time_scale),
        debt_served_s: o.debt_served_s.map(|r| r * time_scale),
        horizon_s: o.horizon_s * time_scale,
        first_timeout_s: o.first_timeout_s.map(|t| t * time_scale),
        provisioning: Provisioning {
            capacity_met_s: o.provisioning.capacity_met_s.map(|t| t * time_scale),
            lost_s: o.provisioning.lost_s.map(|t| t * time_scale),
            ..o.provisioning
        },
        ..*o
    }
}

/// Writes `name` in `dir` atomically.
pub fn write(dir: &Path, name: &str, contents: &str) -> Result<(), WriteError> {
    write_atomically(&dir.join(name), contents)
}

/// Pretty JSON of anything serialisable.
pub fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sustained_ignores_one_sample_excursions() {
        let at = |a: f64, b: f64| HashMap::from([("a".to_string(), a), ("b".to_string(), b)]);
        let h = vec![at(0.0, 5.0), at(0.3, 5.0), at(0.0, 4.0)];
        // Pod 0 spiked once; pod 1 held at least 4 s over the three samples.
        assert_eq!(sustained(&h), 4.0);
        assert_eq!(sustained(&[]), 0.0);
    }

    #[test]
    fn counts_move_to_the_row_they_were_sent() {
        let samples: Vec<Sample> = (0..8)
            .map(|i| Sample {
                t: f64::from(i) * 0.5,
                load: LoadCounters {
                    first_attempts: 10.0,
                    attempts: 10.0,
                    timeouts: if i == 5 { 3.0 } else { 0.0 },
                    failed: if i == 7 { 1.0 } else { 0.0 },
                    ..LoadCounters::default()
                },
                ..Sample::default()
            })
            .collect();
        let r = measured_record(&samples, 0.5, 1.0, 3.0, false);
        assert_eq!(r.rows[3].timed_out, 3.0);
        assert_eq!(r.rows[1].lost, 1.0);
        let text = csv(&samples, &r, 10.0);
        assert_eq!(text.lines().count(), 9);
        assert!(
            text.lines()
                .nth(4)
                .unwrap()
                .starts_with("1.500,15.0,10,10,0,0,3,")
        );
    }

    #[test]
    fn pod_lines_count_each_pods_row() {
        let samples: Vec<Sample> = (0..2)
            .map(|i| Sample {
                t: f64::from(i),
                ..Sample::default()
            })
            .collect();
        let q = |arrivals: f64, ready: bool| PodQueue {
            arrivals,
            ready,
            ..PodQueue::default()
        };
        let pods = vec![
            vec![("pod-1".to_string(), q(5.0, true))],
            vec![
                ("pod-1".to_string(), q(12.0, true)),
                ("pod-2".to_string(), q(0.0, false)),
            ],
        ];
        let text = pods_csv(&samples, &pods, 10.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "0.000,0.0,pod-1,1,5,0,0,0,0,0.0000");
        assert_eq!(lines[2], "1.000,10.0,pod-1,1,7,0,0,0,0,0.0000");
        assert_eq!(lines[3], "1.000,10.0,pod-2,0,0,0,0,0,0,0.0000");
    }
}
