//! The fluid model: work as a continuous flow through FIFO queues, advanced in fixed steps.
//!
//! Pooled: one queue served at `C` = ready pods x `c`; the wait an arrival sees is backlog / `C`.
//! Per pod: a queue per ready pod, and the clients' keep-alive connections deciding where an attempt
//! (first or retry alike) goes ([`route`]): on the connection answered last, else a new connection to a
//! ready pod at random, as a Kubernetes Service picks an endpoint per connection. So a pod keeps the
//! attempts its answers bring back and, while no connection is idle, also takes its share of the new
//! ones; a pod that answers nothing in time gets only that share. A new pod starts empty; a removed pod
//! (the newest) leaves the endpoints, its idle connections are closed, and it finishes its backlog for
//! nobody. In both, an attempt arriving to a wait of at
//! least `tau_out` times out and its retry arrives `tau_out` (+ backoff) later; abandoned work is served,
//! or never queued when servers drop it; a retry budget caps the retry flow at `ratio` x first attempts.
//! Behind a retrying gateway, a request's attempts at the pods are one chain
//! ([`Scenario::pod_retries`]): `tau_out` is the gateway's timeout and the budget caps only the
//! client's retries.

use std::collections::VecDeque;

use crate::control::{Control, PodEvent, Totals};
use crate::experiment::{Abandoned, Scenario, Topology};
use crate::hpa::HpaError;
use crate::outcome::Record;

/// Runs the fluid model for the scenario and returns its per-second (experiment time) record.
#[expect(
    clippy::too_many_lines,
    reason = "written before the house lint; to split"
)]
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

    // A request's attempts at the pods, the client's and a gateway's alike, as one chain.
    let retries = s.pod_retries();
    let r = retries as usize;
    // rings[n] holds the attempts n + 1 on their way: timed out as attempt n, due `retry_delay(n + 1)` later.
    let mut rings: Vec<Vec<f64>> = (1..=retries)
        .map(|n| vec![0.0; (s.retry_delay(n) / dt).round().max(1.0) as usize])
        .collect();
    let offsets: Vec<f64> = (0..=retries).map(|n| s.attempt_offset(n)).collect();
    let mut arrivals = vec![0.0; r + 1];

    let c = s.rate_per_pod;
    let tau = s.pod_timeout_s();
    let drop = s.abandoned == Abandoned::Drop;
    let mut pooled_backlog = 0.0;
    let mut pods: Vec<Pod> = vec![Pod::default(); s.pods as usize];
    let mut draining: Vec<f64> = Vec::new();
    let mut totals = Totals::default();
    let mut events = Vec::new();

    let steps = ((end - start) / dt).round() as u64;
    for i in 0..steps {
        let t = start + i as f64 * dt;
        if control.next_event() <= t {
            control.advance(t, totals, &mut events);
            for e in events.drain(..) {
                match e {
                    PodEvent::Ready => pods.push(Pod::default()),
                    PodEvent::Removed => {
                        if let Some(b) = pods.pop().map(|p| p.backlog).filter(|b| *b > 0.0) {
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
        // A budget refuses the client's retries beyond its cap: those requests fail with the attempts
        // they made. A gateway's tries are not the client's to refuse.
        if let Some(b) = s.retry_budget {
            let budgeted = || {
                (1..=retries)
                    .filter(|n| s.is_client_retry(*n))
                    .map(|n| n as usize)
            };
            let want: f64 = budgeted().map(|n| arrivals[n]).sum();
            let cap = (b.ratio * demand + b.min_per_s) * dt;
            if want > cap {
                let keep = cap / want;
                for n in budgeted() {
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
                route(&mut pods, total);
                let (mut failing, mut longest) = (0.0, 0.0f64);
                for p in &pods {
                    longest = longest.max(p.backlog);
                    if p.backlog / c >= tau {
                        failing += p.share;
                    }
                }
                let fraction = if total > 0.0 { failing / total } else { 0.0 };
                (fraction, longest / c)
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
                let served = (pooled_backlog + queued).min(cap * dt);
                pooled_backlog = (pooled_backlog + queued - cap * dt).max(0.0);
                totals.busy_s += served / c;
            }
            Topology::PerPod => {
                for p in &mut pods {
                    let waited = p.backlog / c < tau;
                    if waited || !drop {
                        p.enqueue(p.share, waited);
                    }
                    let before = p.backlog;
                    p.serve(c * dt);
                    totals.busy_s += (before - p.backlog) / c;
                }
                for b in &mut draining {
                    *b -= c * dt;
                }
                draining.retain(|b| *b > 0.0);
            }
        }
        totals.first += arrivals[0];
        totals.all += total;

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

/// One ready pod of the per-pod fluid.
#[derive(Debug, Clone, Default)]
struct Pod {
    /// Queued work in arrival order: amount, and whether its client still waits for it (it arrived
    /// to a wait under the timeout).
    queue: VecDeque<(f64, bool)>,
    backlog: f64,
    /// Connections answered in the last step: the client reuses them first.
    returned: f64,
    /// Connections to this pod idle in the client's pool.
    idle: f64,
    /// Attempts routed here this step.
    share: f64,
}

impl Pod {
    fn enqueue(&mut self, amount: f64, waited: bool) {
        if amount <= 0.0 {
            return;
        }
        match self.queue.back_mut() {
            Some((a, w)) if *w == waited => *a += amount,
            _ => self.queue.push_back((amount, waited)),
        }
        self.backlog += amount;
    }

    /// Serves up to `work` from the head; what it answers returns its connection.
    fn serve(&mut self, mut work: f64) {
        while work > 0.0 {
            let Some((amount, waited)) = self.queue.front_mut() else {
                break;
            };
            let done = amount.min(work);
            *amount -= done;
            work -= done;
            self.backlog -= done;
            if *waited {
                self.returned += done;
            }
            if *amount <= 0.0 {
                self.queue.pop_front();
            }
        }
        self.backlog = self.backlog.max(0.0);
    }
}

/// Routes `total` attempts over the ready pods as a keep-alive HTTP/1.1 client does (the loadgen's
/// LIFO pool of idle connections): first on the connections just answered, then on older idle ones,
/// and only the rest on new connections, spread evenly (a random endpoint per connection). Answered
/// connections not needed now stay idle. Sets every pod's `share`.
fn route(pods: &mut [Pod], total: f64) {
    let returned: f64 = pods.iter().map(|p| p.returned).sum();
    let reused = total.min(returned);
    let idle: f64 = pods.iter().map(|p| p.idle).sum();
    let from_idle = (total - reused).min(idle);
    let new = (total - reused - from_idle) / pods.len() as f64;
    for p in pods.iter_mut() {
        let again = if returned > 0.0 {
            reused * p.returned / returned
        } else {
            0.0
        };
        let old = if idle > 0.0 {
            from_idle * p.idle / idle
        } else {
            0.0
        };
        p.idle += p.returned - again - old;
        p.returned = 0.0;
        p.share = again + old + new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_bring_attempts_back_and_only_the_rest_open_new_connections() {
        let healthy = Pod {
            returned: 3.0,
            ..Pod::default()
        };
        let mut pods = vec![healthy.clone(), Pod::default()];
        // The answers cover the attempts: the pod that answered nothing gets none.
        route(&mut pods, 2.0);
        assert_eq!((pods[0].share, pods[1].share), (2.0, 0.0));
        assert_eq!(pods[0].idle, 1.0, "the answer not needed stays idle");
        // More attempts than answers and idle connections: the rest spread evenly.
        pods[0].returned = 3.0;
        route(&mut pods, 6.0);
        assert_eq!((pods[0].share, pods[1].share), (5.0, 1.0));
        assert_eq!(pods[0].idle, 0.0);
    }

    #[test]
    fn a_pod_answers_what_arrived_under_the_timeout_in_order() {
        let mut p = Pod::default();
        p.enqueue(2.0, false);
        p.enqueue(1.0, true);
        p.serve(2.5);
        assert_eq!((p.backlog, p.returned), (0.5, 0.5));
    }
}
