//! Statistical power of a run: can it resolve the steady-state pod count it is judged on?
//!
//! The HPA reads a rate over one metric window. At a steady demand `lambda` the window holds
//! about `lambda x window` arrivals, a Poisson count, so the reading's relative noise is
//! `1 / sqrt(lambda x window)`. The HPA adds a pod whenever a sync reads more than `1 + tolerance`
//! times the target at the current pods, and the scale-down stabilization keeps that pod for its
//! window. So a run ends with one pod too many if any sync in the last stabilization window (plus
//! one period) read above the band. Compressing time shrinks the window and raises the noise:
//! at `S = 20` F4's window of 1.5 s holds about 300 first attempts, 5.8% noise against a 10%
//! tolerance, and a fifth pod is Poisson noise, not a property of the signal.

use serde::Serialize;

use crate::experiment::{HpaSignal, LoadEvent, Scenario};
use crate::laws;

/// Largest chance, over a run, that noise alone moves the final pod count for the count to be
/// judged: above it, a pod count beyond the prediction is inconclusive rather than refuted.
const MAX_NOISE_CHANCE: f64 = 0.05;

/// Time scales the embedded runner steps down through to find one with enough power.
const SCALES: [f64; 6] = [20.0, 10.0, 5.0, 4.0, 2.0, 1.0];

/// What the noise of one metric window does to a steady-state pod count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PodResolution {
    /// Pods the signal holds at the steady state the run ends in.
    pub pods: u32,
    /// Demand of the steady state, requests per run second.
    pub rate_per_s: f64,
    /// Metric window, run seconds.
    pub window_s: f64,
    /// Arrivals one window holds.
    pub per_window: f64,
    /// Relative standard deviation of one reading.
    pub relative_noise: f64,
    pub tolerance: f64,
    /// Chance that one sync reads above the tolerance band (a pod too many).
    pub chance_per_sync: f64,
    /// Syncs whose reading the final pod count still remembers.
    pub syncs: f64,
    /// Chance that the run ends with a pod too many from noise alone.
    pub chance_per_run: f64,
}

impl PodResolution {
    pub fn resolvable(&self) -> bool {
        self.chance_per_run <= MAX_NOISE_CHANCE
    }

    /// One line with the figures that decide it.
    pub fn text(&self) -> String {
        format!(
            "one {:.2} s metric window holds {:.0} arrivals at the steady {} pods: noise {:.1}% \
             against the HPA's {:.0}% tolerance; a sync reads above it with chance {:.2}%, \
             and one of the last {:.0} syncs with chance {:.1}%",
            self.window_s,
            self.per_window,
            self.pods,
            100.0 * self.relative_noise,
            100.0 * self.tolerance,
            100.0 * self.chance_per_sync,
            self.syncs,
            100.0 * self.chance_per_run,
        )
    }
}

/// Standard normal upper tail.
fn upper_tail(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// The resolution of the steady-state pod count of an autoscaled scenario in run time (already
/// time-scaled and rate-scaled); `None` without an HPA.
pub fn pod_resolution(rs: &Scenario) -> Option<PodResolution> {
    let h = rs.hpa.as_ref()?;
    let k = match rs.event {
        LoadEvent::Step { k } => k,
        _ => 1.0,
    };
    // At the steady state no attempt times out, so every signal reads the demand.
    let rate = k * rs.base_rate();
    let pods = laws::scaler_replicas(
        rate,
        h.target_utilization,
        rs.rate_per_pod,
        h.min_replicas,
        h.max_replicas,
    );
    // The CPU signal is metrics-server's shorter window of busy time: a sum of service times,
    // whose spread adds CV^2 to the variance of the count (2 for exponential).
    let (window_s, variance) = match h.signal {
        HpaSignal::Cpu => (h.cpu_window_s, 1.0 + rs.service.cv().powi(2)),
        _ => (h.metric_window_s, 1.0),
    };
    let per_window = rate * window_s;
    let relative_noise = (variance / per_window).sqrt();
    // The reading that adds a pod, over the steady reading (1 when the demand fills the target):
    // above the scale-up tolerance, the HPA's own when it sets one.
    let (_, scale_up_tolerance) = h.behavior.tolerances(h.tolerance);
    let band =
        (1.0 + scale_up_tolerance) * f64::from(pods) * h.target_utilization * rs.rate_per_pod;
    let chance_per_sync = if pods >= h.max_replicas {
        0.0
    } else {
        upper_tail((band / rate - 1.0) / relative_noise)
    };
    let remembered = h.behavior.scale_down.stabilization_window_s + h.sync_period_s;
    let syncs = (remembered.min(rs.horizon_s) / h.sync_period_s)
        .round()
        .max(1.0);
    Some(PodResolution {
        pods,
        rate_per_s: rate,
        window_s,
        per_window,
        relative_noise,
        tolerance: scale_up_tolerance,
        chance_per_sync,
        syncs,
        chance_per_run: 1.0 - (1.0 - chance_per_sync).powf(syncs),
    })
}

/// The largest of `scales` (at most `ceiling`) at which the experiment-time scenario `se` can
/// resolve its pod count; the smallest scale when none can.
pub fn largest_resolving_scale(se: &Scenario, ceiling: f64) -> f64 {
    let candidates: Vec<f64> = SCALES.iter().copied().filter(|s| *s <= ceiling).collect();
    candidates
        .iter()
        .copied()
        .find(|&s| pod_resolution(&se.time_scaled(s)).is_none_or(|r| r.resolvable()))
        .or(candidates.last().copied())
        .unwrap_or(ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::load;

    fn case(id: &str, name: &str) -> Scenario {
        load(id)
            .unwrap()
            .cases
            .into_iter()
            .find(|c| c.scenario.name == name)
            .unwrap()
            .scenario
    }

    #[test]
    fn f4_without_a_step_cannot_resolve_its_pods_at_scale_20() {
        let se = case("F4", "paired-no-step");
        let r = pod_resolution(&se.time_scaled(20.0)).unwrap();
        // 200/s over a 1.5 s window: 300 arrivals, 5.8% noise against a 10% tolerance.
        assert_eq!(r.pods, 4);
        assert!((r.per_window - 300.0).abs() < 1e-9);
        assert!((r.relative_noise - 0.0577).abs() < 1e-3, "{r:?}");
        assert!((r.chance_per_sync - 0.042).abs() < 0.002, "{r:?}");
        assert_eq!(r.syncs, 21.0);
        assert!(!r.resolvable(), "{}", r.text());
        // At S = 1 (30 s, 6,000 arrivals) noise cannot add a pod.
        let r = pod_resolution(&se).unwrap();
        assert!(r.chance_per_run < 1e-6 && r.resolvable(), "{}", r.text());
    }

    #[test]
    fn the_largest_scale_with_enough_power_is_picked() {
        let se = case("F4", "paired-no-step");
        assert_eq!(largest_resolving_scale(&se, 10.0), 5.0);
        // Half the rate needs twice the window.
        let mut half = se.clone();
        half.rate_per_pod *= 0.5;
        assert_eq!(largest_resolving_scale(&half, 10.0), 2.0);
        // Fixed capacity: nothing to resolve, the ceiling stands.
        assert_eq!(largest_resolving_scale(&case("F2", "rho-30"), 10.0), 10.0);
        assert!(pod_resolution(&case("F2", "rho-30")).is_none());
    }
}
