//! Signal-to-replica lag, pure: for each scale decision of a run, when the first-attempt demand
//! last changed, when the meter's value of the metric that drove it crossed the HPA's tolerance
//! band, when the HPA decided, and when the ready pods reached the decided count. The gaps are
//! the meter's window, the wait for a sync (and the tolerance), and the dead time: what users of
//! a metrics adapter ask for as "how long from load to pods".

use serde::{Deserialize, Serialize};

use super::probe::MeterGauges;
use super::record::Sample;
use super::seam::HpaSync;
use falsification_model::experiment::{HpaSignal, Scenario};
use falsification_model::hpa::Target;
use falsification_model::metric::Signal;

/// One scale decision and its moments, run seconds from the load event.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Lag {
    pub from: i32,
    pub to: i32,
    /// The last change of the first-attempt demand at or before the crossing (or the decision),
    /// when the crossing came within two meter windows of it; `None` when it came later (noise,
    /// or the retries, moved the reading, not the demand).
    pub demand_changed_s: Option<f64>,
    /// The start of the run of rows, up to the decision, in which the meter's value read beyond
    /// the band around `from` pods. `None` for the CPU signal (metrics-server's samples are not
    /// in the record) or when no row read beyond it (a decision on a reading between rows).
    pub crossed_s: Option<f64>,
    pub decided_s: f64,
    /// When the ready pods first reached `to` (at most `to` scaling down), if they did before the
    /// record ended.
    pub ready_s: Option<f64>,
}

impl Lag {
    /// Demand change to crossing (the meter's window).
    pub fn window_s(&self) -> Option<f64> {
        Some(self.crossed_s? - self.demand_changed_s?)
    }

    /// Crossing to decision (waiting for a sync; the tolerance).
    pub fn sync_s(&self) -> Option<f64> {
        Some(self.decided_s - self.crossed_s?)
    }

    /// Decision to ready pods (the dead time).
    pub fn dead_s(&self) -> Option<f64> {
        Some(self.ready_s? - self.decided_s)
    }

    /// Demand change to ready pods.
    pub fn total_s(&self) -> Option<f64> {
        Some(self.ready_s? - self.demand_changed_s?)
    }

    pub fn scales_up(&self) -> bool {
        self.to > self.from
    }

    /// The same moments in experiment time (`s` x run seconds).
    pub fn in_experiment_time(&self, s: f64) -> Lag {
        Lag {
            demand_changed_s: self.demand_changed_s.map(|t| t * s),
            crossed_s: self.crossed_s.map(|t| t * s),
            decided_s: self.decided_s * s,
            ready_s: self.ready_s.map(|t| t * s),
            ..*self
        }
    }
}

/// The lag of every scale decision in `syncs`, from the rows `samples` (each observed at its
/// end, `t + step`) of the run-time scenario `rs`.
pub fn lags(samples: &[Sample], syncs: &[HpaSync], rs: &Scenario, step: f64) -> Vec<Lag> {
    let Some(h) = rs.hpa.as_ref() else {
        return Vec::new();
    };
    let Some(config) = rs.autoscaler() else {
        return Vec::new();
    };
    let (down, up) = h.behavior.tolerances(h.tolerance);
    let changes: Vec<f64> = rs.demand_changes();
    let observed = |x: &Sample| x.t + step;
    let mut from = i32::try_from(rs.pods).unwrap_or(i32::MAX);
    let mut out = Vec::new();
    for sync in syncs.iter().filter(|s| s.decision.rescale) {
        let d = &sync.decision;
        let to = d.desired;
        let scales_up = to > from;
        // The metric that drove it: the largest proposal (upstream takes the largest); where the
        // proposals are not known (a real HPA's status), whichever metric crossed first.
        let driver = d
            .proposals
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.map(|p| (i, p)))
            .max_by_key(|&(_, p)| p)
            .map(|(i, _)| vec![i])
            .unwrap_or_else(|| (0..config.spec.metrics.len()).collect());
        let band = |i: usize| {
            let per_pod = match config.spec.metrics.get(i)?.target {
                Target::AverageValue(v) => v,
                Target::Value(_) | Target::Utilization(_) => return None,
            };
            let signal = *config.signals.get(i)?;
            let limit = if scales_up {
                (1.0 + up) * per_pod * f64::from(from)
            } else {
                (1.0 - down) * per_pod * f64::from(from)
            };
            Some((signal, limit))
        };
        let crossed_at = |(signal, limit): (Signal, f64)| {
            let beyond = |x: &Sample| {
                x.meter
                    .as_ref()
                    .and_then(|m| gauge(m, signal))
                    .is_some_and(|v| if scales_up { v > limit } else { v < limit })
            };
            // The first row of the run of rows beyond the band that ends at the decision.
            let before: Vec<&Sample> = samples
                .iter()
                .filter(|x| observed(x) <= sync.t + 1e-9)
                .collect();
            let run = before.iter().rev().take_while(|x| beyond(x)).count();
            (run > 0).then(|| observed(before[before.len() - run]))
        };
        let crossed_s = driver
            .into_iter()
            .filter_map(|i| band(i).and_then(crossed_at))
            .reduce(f64::min);
        let cause = crossed_s.unwrap_or(sync.t);
        let demand_changed_s = changes
            .iter()
            .copied()
            .filter(|&c| c <= cause + 1e-9 && c >= -rs.warmup_s)
            .fold(None, |latest: Option<f64>, c| {
                Some(latest.map_or(c, |l| l.max(c)))
            })
            .filter(|&c| cause - c <= 2.0 * h.metric_window_s);
        let ready_s = samples
            .iter()
            .filter(|x| observed(x) >= sync.t)
            .find(|x| {
                let ready = i32::try_from(x.pods_ready).unwrap_or(i32::MAX);
                if scales_up { ready >= to } else { ready <= to }
            })
            .map(observed);
        out.push(Lag {
            from,
            to,
            demand_changed_s,
            crossed_s,
            decided_s: sync.t,
            ready_s,
        });
        from = to;
    }
    out
}

fn gauge(m: &MeterGauges, signal: Signal) -> Option<f64> {
    match signal {
        Signal::FirstAttempt => Some(m.first_attempt_rate),
        Signal::Ingress => Some(m.ingress_rate),
        Signal::Retry => Some(m.ingress_rate - m.first_attempt_rate),
        Signal::Cpu => None,
    }
}

/// Smallest, median and largest of the present values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub min_s: f64,
    pub median_s: f64,
    pub max_s: f64,
}

impl Spread {
    pub fn of(values: impl Iterator<Item = Option<f64>>) -> Option<Spread> {
        let mut v: Vec<f64> = values.flatten().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (n > 0).then(|| Spread {
            n,
            min_s: v[0],
            median_s: if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            },
            max_s: v[n - 1],
        })
    }
}

/// The distribution of the scale-ups' lags, by part, in the lags' time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distribution {
    pub scale_ups: usize,
    pub scale_downs: usize,
    pub window: Option<Spread>,
    pub sync: Option<Spread>,
    pub dead: Option<Spread>,
    pub total: Option<Spread>,
}

impl Distribution {
    /// Over the scale-ups (the lag users ask about); scale-downs are counted.
    pub fn of(lags: &[Lag]) -> Distribution {
        let ups = || lags.iter().filter(|l| l.scales_up());
        Distribution {
            scale_ups: ups().count(),
            scale_downs: lags.len() - ups().count(),
            window: Spread::of(ups().map(Lag::window_s)),
            sync: Spread::of(ups().map(Lag::sync_s)),
            dead: Spread::of(ups().map(Lag::dead_s)),
            total: Spread::of(ups().map(Lag::total_s)),
        }
    }
}

/// Which signal's gauge the report names for a case (the CPU signal has none in the record).
pub fn gauge_name(signal: HpaSignal) -> &'static str {
    match signal {
        HpaSignal::First => "first_attempt_rate",
        HpaSignal::Ingress => "ingress_rate",
        HpaSignal::Paired => "first_attempt_rate or ingress_rate (the larger proposal)",
        HpaSignal::Cpu => "CPU (metrics-server, not sampled in the record)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;
    use falsification_model::hpa::{Decision, Reason};

    fn row(t: f64, ready: u32, first: f64) -> Sample {
        Sample {
            t,
            pods_ready: ready,
            meter: Some(MeterGauges {
                first_attempt_rate: first,
                header_first_attempt_rate: None,
                ingress_rate: first * 3.0,
                published: true,
            }),
            ..Sample::default()
        }
    }

    fn decided(t: f64, desired: i32) -> HpaSync {
        HpaSync {
            t,
            readings: vec![None],
            decision: Decision {
                desired,
                proposals: vec![Some(desired)],
                current: vec![None],
                recommendation: Some(desired),
                stabilized: Some(desired),
                reason: Reason::DesiredWithinRange,
                rescale: true,
            },
        }
    }

    #[test]
    fn a_step_is_followed_through_the_meter_the_sync_and_the_dead_time() {
        // F3 first-attempt, experiment time: 4 pods at rho 0.5 of 100/s, target 50/s per pod, a 5x
        // step at 0; the band around 4 pods is 1.1 x 50 x 4 = 220/s.
        let rs = load("F3").unwrap().cases[0].scenario.clone();
        let step = 5.0;
        let mut samples = Vec::new();
        for i in -4..60 {
            let t = f64::from(i) * step;
            // The meter's 30 s window ramps from 200/s to 1,000/s over the rows after the step.
            let first = 200.0 + 800.0 * ((t + step) / 30.0).clamp(0.0, 1.0);
            let ready = if t + step >= 120.0 { 20 } else { 4 };
            samples.push(row(t, ready, first));
        }
        let syncs = [decided(22.5, 20), decided(500.0, 12)];
        let lags = lags(&samples, &syncs, &rs, step);
        assert_eq!(lags.len(), 2);
        let l = lags[0];
        assert_eq!((l.from, l.to), (4, 20));
        assert_eq!(l.demand_changed_s, Some(0.0));
        // The row ending at 5 s reads 333/s, beyond 220/s: crossed then.
        assert_eq!(l.crossed_s, Some(5.0));
        assert_eq!(l.ready_s, Some(120.0));
        assert_eq!(
            (l.window_s(), l.sync_s(), l.dead_s(), l.total_s()),
            (Some(5.0), Some(17.5), Some(97.5), Some(120.0))
        );
        // The scale-down from 20 to 12 happened on a reading between rows: no crossing seen
        // (every row reads above 0.9 x 50 x 20 = 900/s), the ready pods never fell to 12.
        let d = lags[1];
        assert_eq!((d.from, d.to, d.crossed_s, d.ready_s), (20, 12, None, None));
        // 500 s after the step is more than two meter windows: not the demand's doing.
        assert_eq!(d.demand_changed_s, None);
        let exp: Vec<Lag> = lags.iter().map(|l| l.in_experiment_time(2.0)).collect();
        let dist = Distribution::of(&exp);
        assert_eq!((dist.scale_ups, dist.scale_downs), (1, 1));
        assert_eq!(dist.total.unwrap().median_s, 240.0);
    }

    #[test]
    fn spread_takes_the_middle_of_an_even_count() {
        let s = Spread::of([Some(1.0), None, Some(3.0), Some(2.0), Some(10.0)].into_iter());
        assert_eq!(
            s,
            Some(Spread {
                n: 4,
                min_s: 1.0,
                median_s: 2.5,
                max_s: 10.0
            })
        );
        assert_eq!(Spread::of([None].into_iter()), None);
    }
}
