//! Closed forms of SPEC's laws. Every function is a pure formula; times in seconds, rates per second.

use kit_defense::{ClientDefenses, Discipline};

/// Work per first attempt once every attempt fails: `R + 1` for `R` retries.
pub fn amplification(retries: u32) -> f64 {
    f64::from(retries) + 1.0
}

/// Amplification of one retrying layer: `R` retries, optionally capped by a retry budget that allows
/// retries/s up to `beta` x first attempts/s. The budget binds when `beta < R`, giving `1 + beta`.
pub fn layer_amplification(retries: u32, budget: Option<f64>) -> f64 {
    match budget {
        Some(beta) => 1.0 + f64::from(retries).min(beta.max(0.0)),
        None => amplification(retries),
    }
}

/// Layers that retry independently multiply: each attempt of an outer layer is a request to the inner one.
pub fn stacked_amplification(layers: &[f64]) -> f64 {
    layers.iter().product()
}

/// Tries a gateway makes per client attempt: `retries + 1` (one every `gateway_timeout_s`), unless
/// it stops when the client leaves (`abort_on_close`) and the client's `client_timeout_s` ends
/// first: then the tries it has started by then. A gateway that ignores the client leaving makes
/// all its tries whatever the client's timeout, so the product of the layers is reached anyway.
pub fn gateway_tries(
    retries: u32,
    gateway_timeout_s: f64,
    client_timeout_s: f64,
    abort_on_close: bool,
) -> u32 {
    let all = retries + 1;
    if !abort_on_close || gateway_timeout_s <= 0.0 {
        return all;
    }
    // Tries started strictly before the client leaves (a 1e-9 s tolerance for exact multiples).
    let started = (client_timeout_s / gateway_timeout_s - 1e-9)
        .ceil()
        .max(1.0);
    all.min(started as u32)
}

/// Trap condition: once triggered, the service stays failed forever iff `A rho >= 1`.
pub fn trapped(a: f64, rho: f64) -> bool {
    a * rho >= 1.0
}

/// Two stable states (healthy and trapped) at the same demand: `1/A <= rho < 1`.
pub fn bistable(a: f64, rho: f64) -> bool {
    trapped(a, rho) && rho < 1.0
}

/// Time from the start of a `k`-fold overload until the FIFO wait reaches `tau_out`:
/// `tau_out / (k rho - 1)`; `None` when `k rho <= 1` (the wait never grows).
pub fn time_to_trigger(k: f64, rho: f64, tau_out: f64) -> Option<f64> {
    let excess = k * rho - 1.0;
    (excess > 0.0).then(|| tau_out / excess)
}

/// Trigger size: a `k`-fold spike of length `delta` from rest pushes the wait past `tau_out` iff
/// `(k rho - 1) delta > tau_out`.
pub fn spike_triggers(k: f64, rho: f64, delta: f64, tau_out: f64) -> bool {
    (k * rho - 1.0) * delta > tau_out
}

/// For an autoscaled service the dead time is a spike nobody chose: a sustained `k`-fold step triggers
/// before the first new pod serves iff `(k rho - 1) tau > tau_out`.
pub fn step_triggers(k: f64, rho: f64, dead_time: f64, tau_out: f64) -> bool {
    spike_triggers(k, rho, dead_time, tau_out)
}

/// Recovery time after a triggering spike, counted from the spike's end:
/// `(A k rho - 1)(delta - t0) / (1 - A rho) + tau_out / (1 - rho)`, `t0 = tau_out / (k rho - 1)`.
/// `None` when the spike does not trigger or the service is trapped (`A rho >= 1`).
pub fn recovery_time(a: f64, k: f64, rho: f64, delta: f64, tau_out: f64) -> Option<f64> {
    if !spike_triggers(k, rho, delta, tau_out) || trapped(a, rho) {
        return None;
    }
    let t0 = time_to_trigger(k, rho, tau_out)?;
    Some((a * k * rho - 1.0) * (delta - t0) / (1.0 - a * rho) + tau_out / (1.0 - rho))
}

/// Long-spike form of the recovery time: `delta (A k rho - 1) / (1 - A rho)`.
pub fn recovery_time_long_spike(a: f64, k: f64, rho: f64, delta: f64) -> Option<f64> {
    (!trapped(a, rho)).then(|| delta * (a * k * rho - 1.0) / (1.0 - a * rho))
}

/// Scaler trap: a scaler holding first-attempt utilization at `u*` reaches `rho = u*`, so after a trigger
/// it stays trapped iff `u* >= 1/A`.
pub fn scaler_trapped(target_utilization: f64, a: f64) -> bool {
    trapped(a, target_utilization)
}

/// Replicas a scaler holding `rate` at utilization `u*` of pods serving `c` each sizes:
/// `ceil(rate / (u* c))` within the bounds. On the first-attempt signal `rate = lambda`; on ingress while
/// every attempt fails `rate = A lambda`.
pub fn scaler_replicas(rate: f64, target_utilization: f64, c: f64, min: u32, max: u32) -> u32 {
    let raw = (rate / (target_utilization * c)).ceil();
    // Saturating float-to-int conversion; the clamp keeps the HPA's bounds.
    (raw as u32).clamp(min, max.max(min))
}

/// Ingress escape: holding ingress at `u* < 1` gives `A rho = u* < 1` at the capacity the ceiling allows;
/// escapes iff the capacity it reaches exceeds the failed-state work `A lambda`.
pub fn ingress_escapes(a: f64, lambda: f64, target_utilization: f64, c: f64, max: u32) -> bool {
    let replicas = scaler_replicas(a * lambda, target_utilization, c, 0, max);
    target_utilization < 1.0 && a * lambda < f64::from(replicas) * c
}

/// The longest a request the pod will serve can have waited, seconds, when its discipline
/// bounds it: `limit / c` for a bounded queue, CoDel's target once the queue stands, an AIMD
/// limit's latency threshold (its limit settles where the latency meets it). `None` for FIFO,
/// LIFO and sharing, whose queues are unbounded.
pub fn bounded_wait(d: Discipline, c: f64) -> Option<f64> {
    match d {
        Discipline::Bounded { limit } => Some(f64::from(limit) / c),
        Discipline::Codel(p) => Some(p.target_s),
        Discipline::Adaptive(a) => Some(a.latency_s),
        Discipline::Fifo | Discipline::Lifo | Discipline::Sharing { .. } => None,
    }
}

/// Whether a pod's discipline keeps it from holding debt against clients that wait `tau_out`:
/// a bound on the wait under the timeout (a shed queue never holds more than its bound, so all
/// it serves is answered in time and what it refuses costs no service), or LIFO (new arrivals
/// go first, so once demand is under capacity they are answered and the old work waits for
/// idle time). Then the failed state cannot sustain itself, whatever `A`.
pub fn discipline_holds_no_debt(d: Discipline, c: f64, tau_out: f64) -> bool {
    d == Discipline::Lifo || bounded_wait(d, c).is_some_and(|w| w < tau_out)
}

/// Whether a client defense stops retries (or all attempts) once the service fails for good:
/// the retry quota runs dry (500 tokens pay 50 retries after timeouts), the throttle's
/// rejection tends to 1 as accepts tend to 0, an open breaker sends nothing. The amplification
/// of a sustained failure is then 1: the trap `A rho >= 1` becomes `rho >= 1`.
pub fn client_stops_retrying(c: ClientDefenses) -> bool {
    c.quota.is_some() || c.throttling.is_some() || c.breaker.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn amplification_counts_budgets_and_layers() {
        assert_eq!(amplification(2), 3.0);
        assert_eq!(layer_amplification(2, None), 3.0);
        assert_eq!(layer_amplification(2, Some(0.2)), 1.2);
        // A budget looser than the count does not bind.
        assert_eq!(layer_amplification(2, Some(5.0)), 3.0);
        // Two layers of 3 attempts each: 9 attempts at the bottom.
        assert_eq!(stacked_amplification(&[3.0, 3.0]), 9.0);
        // HAProxy measured: 3 tries at the pod after the client left at 0.7 s (0.5 s server timeout)
        // without `option abortonclose`, 2 with it.
        assert_eq!(gateway_tries(2, 0.5, 0.7, false), 3);
        assert_eq!(gateway_tries(2, 0.5, 0.7, true), 2);
        assert_eq!(gateway_tries(2, 0.5, 1.5, true), 3);
        assert_eq!(gateway_tries(2, 0.5, 10.0, true), 3);
        assert_eq!(gateway_tries(2, 0.5, 0.2, true), 1);
        assert!(close(stacked_amplification(&[3.0, 1.2]), 3.6, 1e-12));
    }

    #[test]
    fn trap_condition_and_bistability() {
        assert!(!trapped(3.0, 0.3)); // A rho = 0.9
        assert!(trapped(3.0, 0.4)); // 1.2
        assert!(trapped(3.0, 1.0 / 3.0)); // boundary counts as trapped
        assert!(bistable(3.0, 0.5));
        assert!(!bistable(3.0, 1.2)); // overloaded even without retries
        assert!(!bistable(3.0, 0.2));
    }

    #[test]
    fn trigger_size() {
        // rho 0.3, 5x: k rho - 1 = 0.5; 300 s * 0.5 = 150 > 10.
        assert!(spike_triggers(5.0, 0.3, 300.0, 10.0));
        assert!(close(time_to_trigger(5.0, 0.3, 10.0).unwrap(), 20.0, 1e-12));
        // 0.5 * 20 = 10 is not past the timeout.
        assert!(!spike_triggers(5.0, 0.3, 20.0, 10.0));
        // k rho <= 1: no length triggers.
        assert!(!spike_triggers(3.0, 0.3, 1e9, 10.0));
        assert_eq!(time_to_trigger(3.0, 0.3, 10.0), None);
        // F3 step: (5 * 0.5 - 1) * 90 = 135 > 10, triggers 6.67 s after the step.
        assert!(step_triggers(5.0, 0.5, 90.0, 10.0));
        assert!(close(
            time_to_trigger(5.0, 0.5, 10.0).unwrap(),
            10.0 / 1.5,
            1e-12
        ));
    }

    #[test]
    fn recovery_time_by_hand() {
        // F2 at 30%: t0 = 20; (4.5 - 1)(300 - 20) / 0.1 + 10 / 0.7 = 9800 + 14.2857.
        let t = recovery_time(3.0, 5.0, 0.3, 300.0, 10.0).unwrap();
        assert!(close(t, 9800.0 + 10.0 / 0.7, 1e-6), "{t}");
        // Long-spike form: 300 * 3.5 / 0.1 = 10500.
        assert!(close(
            recovery_time_long_spike(3.0, 5.0, 0.3, 300.0).unwrap(),
            10500.0,
            1e-6
        ));
        // 40%: trapped, never.
        assert_eq!(recovery_time(3.0, 5.0, 0.4, 300.0, 10.0), None);
        assert_eq!(recovery_time_long_spike(3.0, 5.0, 0.4, 300.0), None);
        // A spike too small to trigger has no recovery to make.
        assert_eq!(recovery_time(3.0, 5.0, 0.3, 10.0, 10.0), None);
        // Diverges as A rho -> 1.
        let near = recovery_time(3.0, 5.0, 0.333, 300.0, 10.0).unwrap();
        assert!(near > 1e6, "{near}");
    }

    #[test]
    fn scaler_trap_and_ingress_escape() {
        assert!(scaler_trapped(0.5, 3.0));
        assert!(!scaler_trapped(0.3, 3.0));
        assert!(scaler_trapped(0.9, 1.2)); // budget 0.2: 1/1.2 = 0.833
        assert!(!scaler_trapped(0.8, 1.2));
        // F3: 1000/s at 50/s per pod = 20 pods; ingress 3000/s wants 60, ceiling 50.
        assert_eq!(scaler_replicas(1000.0, 0.5, 100.0, 1, 50), 20);
        assert_eq!(scaler_replicas(3.0 * 1000.0, 0.5, 100.0, 1, 50), 50);
        assert_eq!(scaler_replicas(3.0 * 1000.0, 0.5, 100.0, 1, 100), 60);
        assert!(ingress_escapes(3.0, 1000.0, 0.5, 100.0, 50)); // 3000 < 5000
        assert!(!ingress_escapes(3.0, 1000.0, 0.5, 100.0, 25)); // 3000 >= 2500
    }

    #[test]
    fn a_bound_under_the_timeout_or_lifo_holds_no_debt() {
        use kit_defense::{ClientDefenses, Discipline, QuotaMode};
        let bounded = |limit| Discipline::Bounded { limit };
        assert_eq!(bounded_wait(bounded(50), 100.0), Some(0.5));
        assert!(discipline_holds_no_debt(bounded(50), 100.0, 10.0));
        assert!(
            !discipline_holds_no_debt(bounded(2000), 100.0, 10.0),
            "20 s of queue"
        );
        assert!(discipline_holds_no_debt(Discipline::Lifo, 100.0, 10.0));
        assert!(!discipline_holds_no_debt(Discipline::Fifo, 100.0, 10.0));
        assert!(!discipline_holds_no_debt(
            Discipline::Sharing { limit: 8 },
            100.0,
            10.0
        ));
        let quota = ClientDefenses {
            quota: Some(QuotaMode::Standard),
            ..ClientDefenses::default()
        };
        assert!(client_stops_retrying(quota) && !client_stops_retrying(ClientDefenses::default()));
    }
}
