//! Capacity for the models: fixed replicas, or the HPA module driving a ReplicaSet-like pod set through
//! the meter's readings, with the dead time between a scale decision and the new pod serving.
//! Scale-down removes pods that are not ready first, then the newest ready ones (as a ReplicaSet does).

use std::collections::VecDeque;

use crate::hpa::{Decision, Hpa, HpaError, HpaSpec, Scale};
use crate::metric::{Meter, Signal};

/// How the autoscaler is wired and timed.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalerConfig {
    pub spec: HpaSpec,
    /// The reading fed to each of `spec.metrics`, in order.
    pub signals: Vec<Signal>,
    pub sync_period_s: f64,
    /// Time of one sync; the others follow every `sync_period_s` before and after it.
    pub sync_at: f64,
    pub metric_window_s: f64,
    pub scrape_interval_s: f64,
    /// From the scale decision to the new pod's first served request.
    pub dead_time_s: f64,
}

/// A change the model must apply to its per-pod state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEvent {
    /// A new, empty pod starts serving; it is the newest.
    Ready,
    /// The newest ready pod leaves the endpoints (it finishes what it holds).
    Removed,
}

#[derive(Debug)]
struct Autoscaler {
    hpa: Hpa,
    meter: Meter,
    signals: Vec<Signal>,
    sync_period_s: f64,
    next_sync: f64,
    dead_time_s: f64,
}

/// Fixed or autoscaled capacity, advanced by the model's clock.
#[derive(Debug)]
pub struct Control {
    desired: u32,
    ready: u32,
    /// Ready times of ordered pods, oldest first.
    pending: VecDeque<f64>,
    autoscaler: Option<Autoscaler>,
    last_decision: Option<Decision>,
}

impl Control {
    /// `n` pods, all ready from the start.
    pub fn fixed(n: u32) -> Control {
        Control {
            desired: n,
            ready: n,
            pending: VecDeque::new(),
            autoscaler: None,
            last_decision: None,
        }
    }

    /// Starts with `initial` ready pods at time `start`, scaled by the HPA from then on.
    pub fn autoscaled(
        config: &AutoscalerConfig,
        initial: u32,
        start: f64,
    ) -> Result<Control, HpaError> {
        let hpa = Hpa::new(config.spec.clone())?;
        if config.signals.len() != config.spec.metrics.len() {
            return Err(HpaError::Readings {
                got: config.signals.len(),
                want: config.spec.metrics.len(),
            });
        }
        // The first sync at or after `start` on the grid through `sync_at`.
        let periods = ((start - config.sync_at) / config.sync_period_s).ceil();
        let next_sync = config.sync_at + periods * config.sync_period_s;
        Ok(Control {
            desired: initial,
            ready: initial,
            pending: VecDeque::new(),
            autoscaler: Some(Autoscaler {
                hpa,
                meter: Meter::new(config.metric_window_s, config.scrape_interval_s, start),
                signals: config.signals.clone(),
                sync_period_s: config.sync_period_s,
                next_sync,
                dead_time_s: config.dead_time_s,
            }),
            last_decision: None,
        })
    }

    /// When something next happens (a pod becomes ready, a scrape, a sync); infinity for fixed capacity.
    pub fn next_event(&self) -> f64 {
        let ready = self.pending.front().copied().unwrap_or(f64::INFINITY);
        match &self.autoscaler {
            Some(a) => ready.min(a.meter.next_scrape()).min(a.next_sync),
            None => ready,
        }
    }

    /// Processes everything due at or before `now`, given the cumulative arrival counters; pushes the
    /// pod changes to apply, in order.
    pub fn advance(
        &mut self,
        now: f64,
        first_total: f64,
        all_total: f64,
        events: &mut Vec<PodEvent>,
    ) {
        while self.next_event() <= now {
            // In time order; at equal times a pod turns ready, then the meter scrapes, then the HPA syncs.
            let ready_at = self.pending.front().copied().unwrap_or(f64::INFINITY);
            let Some(a) = self.autoscaler.as_mut() else {
                self.pending.pop_front();
                self.ready += 1;
                events.push(PodEvent::Ready);
                continue;
            };
            let scrape_at = a.meter.next_scrape();
            if ready_at <= scrape_at && ready_at <= a.next_sync {
                self.pending.pop_front();
                self.ready += 1;
                events.push(PodEvent::Ready);
                continue;
            }
            if scrape_at <= a.next_sync {
                a.meter.scrape(scrape_at, first_total, all_total);
                continue;
            }
            let at = a.next_sync;
            a.next_sync += a.sync_period_s;
            let readings: Vec<Option<f64>> =
                a.signals.iter().map(|&s| a.meter.reading(s)).collect();
            let scale = Scale {
                spec_replicas: to_i32(self.desired),
                status_replicas: to_i32(self.ready + self.pending.len() as u32),
                ready_pods: to_i32(self.ready),
            };
            let dead_time = a.dead_time_s;
            // The readings are as many as the metrics (checked at construction), so sync cannot fail.
            if let Ok(decision) = a.hpa.sync(at, &readings, scale) {
                if decision.rescale {
                    self.scale_to(at, decision.desired.max(0) as u32, dead_time, events);
                }
                self.last_decision = Some(decision);
            }
        }
    }

    fn scale_to(&mut self, now: f64, desired: u32, dead_time: f64, events: &mut Vec<PodEvent>) {
        let mut have = self.ready + self.pending.len() as u32;
        while have < desired {
            self.pending.push_back(now + dead_time);
            have += 1;
        }
        while have > desired {
            if self.pending.pop_back().is_none() {
                self.ready -= 1;
                events.push(PodEvent::Removed);
            }
            have -= 1;
        }
        self.desired = desired;
    }

    pub fn ready(&self) -> u32 {
        self.ready
    }

    pub fn desired(&self) -> u32 {
        self.desired
    }

    pub fn last_decision(&self) -> Option<&Decision> {
        self.last_decision.as_ref()
    }
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpa::{Behavior, MetricSpec, Target};

    fn config(dead_time_s: f64) -> AutoscalerConfig {
        AutoscalerConfig {
            spec: HpaSpec {
                min_replicas: 1,
                max_replicas: 50,
                metrics: vec![MetricSpec {
                    name: "first_attempt_rate".into(),
                    target: Target::AverageValue(50.0),
                }],
                behavior: Behavior::default(),
                tolerance: 0.1,
            },
            signals: vec![Signal::FirstAttempt],
            sync_period_s: 15.0,
            sync_at: 7.5,
            metric_window_s: 30.0,
            scrape_interval_s: 1.0,
            dead_time_s,
        }
    }

    #[test]
    fn pods_serve_a_dead_time_after_the_decision() {
        let mut c = Control::autoscaled(&config(90.0), 4, 0.0).unwrap();
        let mut events = Vec::new();
        // A constant 1000/s from t = 0: each second the counters grow by 1000.
        for t in 0..=200 {
            let t = f64::from(t);
            c.advance(t, 1000.0 * t, 1000.0 * t, &mut events);
            if t < 97.5 {
                assert_eq!(c.ready(), 4, "t = {t}");
            }
        }
        // Syncs at 7.5 (8), 22.5 (16), 37.5 (20): ready at 97.5, 112.5, 127.5 (seen at the next whole second).
        assert_eq!(c.desired(), 20);
        assert_eq!(c.ready(), 20);
        assert_eq!(events.iter().filter(|e| **e == PodEvent::Ready).count(), 16);
    }

    #[test]
    fn scale_down_drops_pending_pods_first_then_newest() {
        let mut c = Control::fixed(4);
        let mut events = Vec::new();
        c.scale_to(0.0, 8, 90.0, &mut events);
        assert_eq!((c.ready(), c.pending.len()), (4, 4));
        c.scale_to(1.0, 3, 90.0, &mut events);
        assert_eq!((c.ready(), c.pending.len()), (3, 0));
        assert_eq!(events, vec![PodEvent::Removed]);
        assert_eq!(c.next_event(), f64::INFINITY);
    }
}
