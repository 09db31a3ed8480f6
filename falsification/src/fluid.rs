//! The fluid model: work as a continuous flow through FIFO queues, advanced in fixed steps.
//!
//! Pooled: one queue served at `C` = ready pods x `c`; the wait an arrival sees is backlog / `C`.
//! Per pod: a queue per ready pod with arrivals (first attempts and retries) split evenly among the ready
//! pods, as a Kubernetes Service spreads connections; a new pod starts empty; a removed pod (the newest)
//! leaves the endpoints and finishes its backlog for nobody. In both, an attempt arriving to a wait of at
//! least `tau_out` times out and its retry arrives `tau_out` (+ backoff) later; abandoned work is served,
//! or never queued when servers drop it; a retry budget caps the retry flow at `ratio` x first attempts.

use crate::control::{Control, PodEvent};
use crate::experiment::{Abandoned, Scenario, Topology};
use crate::hpa::HpaError;
use crate::outcome::Record;

/// Runs the fluid model for the scenario and returns its per-second (experiment time) record.
pub fn simulate(s: &Scenario, topology: Topology) -> Result<Record, HpaError> {
    let row_step = 1.0 / s.time_scale;
    let steps_per_row = (row_step / s.fluid_dt_s).round().max(1.0);
    let dt = row_step / steps_per_row;
    let start = -s.warmup_s;
    let end = s.end();
    let mut record = Record::span(start, end, row_step);
    let mut control = match s.autoscaler() {
        Some(config) => Control::autoscaled(&config, s.pods, start)?,
        None => Control::fixed(s.pods),
    };

    let r = s.retries as usize;
    // rings[n] holds the attempts n + 1 on their way: timed out as attempt n, due `retry_delay(n + 1)` later.
    let mut rings: Vec<Vec<f64>> = (1..=s.retries)
        .map(|n| vec![0.0; (s.retry_delay(n) / dt).round().max(1.0) as usize])
        .collect();
    let offsets: Vec<f64> = (0..=s.retries).map(|n| s.attempt_offset(n)).collect();
    let mut arrivals = vec![0.0; r + 1];

    let c = s.rate_per_pod;
    let tau = s.timeout_s;
    let drop = s.abandoned == Abandoned::Drop;
    let mut pooled_backlog = 0.0;
    let mut pods: Vec<f64> = vec![0.0; s.pods as usize];
    let mut draining: Vec<f64> = Vec::new();
    let (mut first_total, mut all_total) = (0.0, 0.0);
    let mut events = Vec::new();

    let steps = ((end - start) / dt).round() as u64;
    for i in 0..steps {
        let t = start + i as f64 * dt;
        if control.next_event() <= t {
            control.advance(t, first_total, all_total, &mut events);
            for e in events.drain(..) {
                match e {
                    PodEvent::Ready => pods.push(0.0),
                    PodEvent::Removed => {
                        if let Some(b) = pods.pop().filter(|b| *b > 0.0) {
                            draining.push(b);
                        }
                    }
                }
            }
        }
        let ready = control.ready();
        let demand = s.demand(t);
        let slot = i as usize;
        arrivals[0] = demand * dt;
        for (n, ring) in rings.iter().enumerate() {
            arrivals[n + 1] = ring[slot % ring.len()];
        }
        // A budget refuses the retries beyond its cap: those requests fail with the attempts they made.
        if let Some(b) = s.retry_budget {
            let want: f64 = arrivals[1..].iter().sum();
            let cap = (b.ratio * demand + b.min_per_s) * dt;
            if want > cap {
                let keep = cap / want;
                for n in 1..=r {
                    record.row_mut(t - offsets[n]).lost += arrivals[n] * (1.0 - keep);
                    arrivals[n] *= keep;
                }
            }
        }
        let total: f64 = arrivals.iter().sum();

        // Fraction of arrivals that time out, and the largest wait an arrival faces.
        let (failing, max_wait) = match topology {
            Topology::Pooled => {
                let cap = f64::from(ready) * c;
                let wait = if cap > 0.0 {
                    pooled_backlog / cap
                } else {
                    f64::INFINITY
                };
                (if wait >= tau { 1.0 } else { 0.0 }, wait)
            }
            Topology::PerPod if pods.is_empty() => (1.0, f64::INFINITY),
            Topology::PerPod => {
                let (mut failing, mut longest) = (0usize, 0.0f64);
                for b in &pods {
                    longest = longest.max(*b);
                    failing += usize::from(*b / c >= tau);
                }
                (failing as f64 / pods.len() as f64, longest / c)
            }
        };

        let mut timed_out = 0.0;
        for n in 0..=r {
            let out = arrivals[n] * failing;
            timed_out += out;
            if n < r {
                let ring = &mut rings[n];
                let len = ring.len();
                ring[slot % len] = out;
            } else {
                record.row_mut(t - offsets[n]).lost += out;
            }
        }

        match topology {
            Topology::Pooled => {
                let queued = if drop { total * (1.0 - failing) } else { total };
                let cap = f64::from(ready) * c;
                pooled_backlog = (pooled_backlog + queued - cap * dt).max(0.0);
            }
            Topology::PerPod => {
                let share = if pods.is_empty() {
                    0.0
                } else {
                    total / pods.len() as f64
                };
                for b in &mut pods {
                    let queued = if drop && *b / c >= tau { 0.0 } else { share };
                    *b = (*b + queued - c * dt).max(0.0);
                }
                for b in &mut draining {
                    *b -= c * dt;
                }
                draining.retain(|b| *b > 0.0);
            }
        }
        first_total += arrivals[0];
        all_total += total;

        let row = record.row_mut(t);
        row.first_attempts += arrivals[0];
        row.attempts += total;
        row.timed_out += timed_out;
        row.max_wait_s = row.max_wait_s.max(max_wait);
        row.pods_ready = ready;
        row.pods_desired = control.desired();
    }
    Ok(record)
}
