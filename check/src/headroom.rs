//! How many retries each layer can keep: the answer to "how do you calculate your retry
//! budget?" (twitter/finagle#946) and "how do you calculate min_retry_concurrency?"
//! (envoyproxy/envoy#25660) for this stack.
//!
//! The scaler law says a first-attempt autoscaler holding `u*` is trapped iff `A u* >= 1`
//! (`laws::scaler_trapped`; at fixed capacity the same with today's `rho`). A layer with `r`
//! retries under a budget of `b` retries per request multiplies by `min(1 + r, 1 + b)`
//! (`laws::layer_amplification`) and layers multiply (`laws::stacked_amplification`). With the
//! other layers as they are, giving `A_others` (the chain's `A` with this layer making one try),
//! the stack stays out iff `(1 + b) A_others u < 1`: any budget below `1 / (u A_others) - 1`,
//! and the largest whole count below it. The boundary is the law's: `A u = 1` is trapped.

use falsification_model::laws;
use serde::Serialize;

use super::amplify::{self, ClassFigure, SignalSees, Stack, class_figure};
use super::layer::{Abandoned, Budget, FailureClass, Tries, in_flight_ratio};

/// The largest retries-per-request budget one layer can have, the others giving `others_a`:
/// the supremum, so any budget below it keeps `A u < 1`. `None` when the others alone are
/// trapped.
pub fn largest_budget(others_a: f64, u: f64) -> Option<f64> {
    (!laws::trapped(others_a, u)).then(|| 1.0 / (u * others_a) - 1.0)
}

/// The most retries one layer can make, the others giving `others_a`; `None` when even none
/// keeps the stack out.
pub fn largest_retries(others_a: f64, u: f64) -> Option<u32> {
    let b = largest_budget(others_a, u)?;
    let fits = |r: u32| {
        let a = laws::stacked_amplification(&[laws::layer_amplification(r, None), others_a]);
        !laws::trapped(a, u)
    };
    // The whole numbers below the supremum; the law settles a rounding at the boundary.
    let mut r = (b.ceil() - 1.0).clamp(0.0, f64::from(u32::MAX - 1)) as u32;
    while r > 0 && !fits(r) {
        r -= 1;
    }
    while r < u32::MAX - 1 && fits(r + 1) {
        r += 1;
    }
    Some(r)
}

/// Envoy's `budget_percent` that allows `ratio` retries per request once every try times out
/// (the inverse of [`in_flight_ratio`]).
pub fn envoy_percent(ratio: f64) -> f64 {
    100.0 * ratio / (1.0 + ratio)
}

/// The utilization the trap is judged at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Held {
    /// The first-attempt autoscaler's target `u*`.
    Target,
    /// Today's utilization at fixed capacity (`--rho`).
    Today,
}

/// Each retrying layer's room, at one utilization.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headroom {
    pub utilization: f64,
    pub held: Held,
    pub layers: Vec<Allowance>,
}

/// How far one layer's retries can go, the other layers as they are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Allowance {
    pub layer: String,
    /// Its tries per request now, for timeouts.
    pub tries: f64,
    /// `A` with this layer making one try.
    pub others_a: f64,
    /// Retries per request: a budget below this keeps `A x utilization < 1`; `None` when
    /// nothing at this layer does (the others alone are trapped).
    pub budget_below: Option<f64>,
    /// The same budget as Envoy's `budget_percent`, for an Envoy or Istio budget.
    pub budget_percent_below: Option<f64>,
    /// The most retries that keep it; `None` when none does.
    pub retries_at_most: Option<u32>,
    /// For an Envoy or Istio budget, the floor that lets no more through.
    pub min_retry_concurrency: Option<Floor>,
}

/// Envoy's `min_retry_concurrency` that keeps its floor from letting more retries through than
/// the percentage and the trap allow ([`in_flight_ratio`]): `m` retries in flight for tries
/// of `T` are `m / (lambda T)` retries per request at `lambda` requests/s through one Envoy, so
/// `m <= ratio x lambda x T`, `ratio` the smaller of what the percentage allows and the
/// largest budget (strictly below that one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    /// The file's `min_retry_concurrency`.
    pub now: u32,
    /// `m` at most this times `lambda`, the first-attempt requests/s through one Envoy.
    pub per_rate: f64,
    /// The try every retry is taken to last: the per-try timeout.
    pub try_s: f64,
    /// The floor at the stack's rate (`--rho` x `--capacity`) through one Envoy.
    pub at_rate: Option<FloorAt>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FloorAt {
    pub rate: f64,
    pub at_most: u32,
}

/// The utilization the diagnosis judges the trap at: a first-attempt autoscaler's target, or,
/// without an autoscaler, today's.
fn held(stack: &Stack) -> Option<(f64, Held)> {
    match &stack.hpa {
        Some(h) if h.signal_sees == SignalSees::FirstAttempts => Some((h.target?, Held::Target)),
        Some(_) => None,
        None => stack.rho.map(|r| (r, Held::Today)),
    }
}

/// Every layer that retries timeouts, when there is debt to trap: its largest budget and
/// count, and for an Envoy budget its largest floor.
pub fn headroom(stack: &Stack, timeout: &ClassFigure) -> Option<Headroom> {
    let (u, held) = held(stack)?;
    let queue_clears = amplify::queue_verdict(stack).is_some_and(|q| q.removes);
    if stack.abandoned == Abandoned::Dropped || queue_clears {
        return None;
    }
    let layers = stack
        .layers
        .iter()
        .enumerate()
        .filter(|(i, _)| timeout.tries.get(*i).is_some_and(|t| *t > 1.0))
        .map(|(i, l)| {
            let mut alone = stack.layers.clone();
            alone[i].tries = Tries::AtMost(1);
            let others_a = class_figure(&alone, FailureClass::Timeout).a;
            let budget_below = largest_budget(others_a, u);
            let envoy = match l.budget {
                Some(Budget::InFlight {
                    percent,
                    min_retry_concurrency,
                }) => Some((percent, min_retry_concurrency)),
                _ => None,
            };
            let floor = match (envoy, budget_below, l.per_try_timeout_s) {
                (Some((percent, now)), Some(b), Some(t)) => {
                    Some(floor(now, in_flight_ratio(percent), b, t, stack.rate))
                }
                _ => None,
            };
            Allowance {
                layer: l.name(),
                tries: timeout.tries[i],
                others_a,
                budget_below,
                budget_percent_below: envoy.and(budget_below).map(envoy_percent),
                retries_at_most: largest_retries(others_a, u),
                min_retry_concurrency: floor,
            }
        })
        .collect();
    Some(Headroom {
        utilization: u,
        held,
        layers,
    })
}

/// The floor for a budget of floor `now` that allows `allowed` retries per request, `below` the
/// largest budget, tries of `try_s`, at `rate` first attempts/s when known.
fn floor(now: u32, allowed: f64, below: f64, try_s: f64, rate: Option<f64>) -> Floor {
    let ratio = allowed.min(below.max(0.0));
    let at_rate = rate.map(|rate| {
        let in_flight = ratio * rate * try_s;
        // Strictly below the largest budget; up to what the percentage allows.
        let m = if below <= allowed {
            in_flight.ceil() - 1.0
        } else {
            in_flight.floor()
        };
        FloorAt {
            rate,
            at_most: m.clamp(0.0, f64::from(u32::MAX)) as u32,
        }
    });
    Floor {
        now,
        per_rate: ratio * try_s,
        try_s,
        at_rate,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::amplify::HpaFigure;
    use crate::layer::{Layer, RetryOn, Source, Tier};

    const EVERY: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: true,
    };

    fn layer(tries: u32, per_try_s: f64, tier: Tier, budget: Option<Budget>) -> Layer {
        Layer {
            tries: Tries::AtMost(tries),
            retry_on: EVERY,
            per_try_timeout_s: Some(per_try_s),
            budget,
            aborts_on_close: false,
            ..Layer::new("t", tier, Source::new(&PathBuf::from("t"), None, "t"))
        }
    }

    fn scaled_at(target: f64, layers: Vec<Layer>) -> Stack {
        let hpa = HpaFigure {
            name: "web".into(),
            source: Source::new(&PathBuf::from("hpa.yaml"), None, "web"),
            signal_sees: SignalSees::FirstAttempts,
            target: Some(target),
            min_replicas: 1,
            max_replicas: 10,
            scale_down_stabilization_s: None,
        };
        Stack::new(layers, Some(hpa), Abandoned::Served)
    }

    #[test]
    fn one_client_with_two_retries_under_a_half_target() {
        // A = 3 at u* = 0.5: trapped.
        assert!(laws::scaler_trapped(0.5, 3.0));
        // (1 + b) x 0.5 < 1: any budget below 1 retry per request.
        assert_eq!(largest_budget(1.0, 0.5), Some(1.0));
        assert!(!laws::scaler_trapped(0.5, 1.0 + 0.999));
        // One retry gives A = 2, A u* = 1: the law counts the boundary as trapped.
        assert!(laws::scaler_trapped(0.5, 2.0));
        assert_eq!(largest_retries(1.0, 0.5), Some(0));
        // Others at A = 2 already trap a 0.5 target: nothing at this layer helps.
        assert_eq!(largest_budget(2.0, 0.5), None);
        assert_eq!(largest_retries(2.0, 0.5), None);
        // At 0.2: b < 4, so 3 retries (A 4 x 0.2 = 0.8) and not 4 (A 5 x 0.2 = 1).
        assert_eq!(largest_retries(1.0, 0.2), Some(3));
        assert_eq!(largest_retries(1.0, 0.3), Some(2));
    }

    #[test]
    fn the_stack_gives_each_layer_its_room_with_the_others_as_they_are() {
        let stack = scaled_at(0.5, vec![layer(3, 10.0, Tier::Client, None)]);
        let timeout = class_figure(&stack.layers, FailureClass::Timeout);
        let h = headroom(&stack, &timeout).unwrap();
        assert_eq!((h.utilization, h.held), (0.5, Held::Target));
        let [a] = h.layers.as_slice() else { panic!() };
        assert_eq!((a.tries, a.others_a), (3.0, 1.0));
        assert_eq!(a.budget_below, Some(1.0));
        assert_eq!(a.retries_at_most, Some(0));
        assert_eq!(
            (a.budget_percent_below, &a.min_retry_concurrency),
            (None, &None)
        );
        // F5's stack, client 3 x gateway 3: at 0.2, each layer's others give 3.
        let f5 = scaled_at(
            0.2,
            vec![
                layer(3, 10.0, Tier::Client, None),
                layer(3, 3.0, Tier::Edge, None),
            ],
        );
        let timeout = class_figure(&f5.layers, FailureClass::Timeout);
        let h = headroom(&f5, &timeout).unwrap();
        for a in &h.layers {
            assert_eq!(a.others_a, 3.0);
            // (1 + b) x 3 x 0.2 < 1: b < 2/3; one retry gives 1.2.
            assert!((a.budget_below.unwrap() - 2.0 / 3.0).abs() < 1e-12);
            assert_eq!(a.retries_at_most, Some(0));
        }
    }

    #[test]
    fn envoys_percentage_and_floor() {
        // 20% of the requests in flight: 0.25 retries per request; 50%: one.
        assert!((in_flight_ratio(20.0) - 0.25).abs() < 1e-12);
        assert!((envoy_percent(1.0) - 50.0).abs() < 1e-12);
        assert!(in_flight_ratio(100.0).is_infinite());
        let envoy = Budget::InFlight {
            percent: 20.0,
            min_retry_concurrency: 3,
        };
        // A client's 2 retries of 10 s over Envoy's 4 tries of 1 s under its 20% budget.
        let stack = Stack {
            rate: Some(40.0),
            ..scaled_at(
                0.4,
                vec![
                    layer(3, 10.0, Tier::Client, None),
                    layer(4, 1.0, Tier::Edge, Some(envoy)),
                ],
            )
        };
        let timeout = class_figure(&stack.layers, FailureClass::Timeout);
        assert_eq!(timeout.tries, [3.0, 1.25]);
        let h = headroom(&stack, &timeout).unwrap();
        let e = &h.layers[1];
        assert_eq!(e.others_a, 3.0);
        // (1 + b) x 3 x 0.4 < 1: nothing helps there; the client's room is at A_others 1.25.
        assert_eq!(e.budget_below, None);
        assert_eq!(e.min_retry_concurrency, None);
        let c = &h.layers[0];
        assert_eq!(c.others_a, 1.25);
        assert!((c.budget_below.unwrap() - 1.0).abs() < 1e-12);
        // At u* = 0.2 Envoy may let b < 1/(0.2 x 3) - 1 = 2/3 through: budget_percent < 40%;
        // its 20% (0.25) is tighter, so the floor may reach 0.25 x 40/s x 1 s = 10.
        let calm = Stack {
            hpa: scaled_at(0.2, Vec::new()).hpa,
            ..stack
        };
        let h = headroom(&calm, &timeout).unwrap();
        let e = &h.layers[1];
        assert!((e.budget_percent_below.unwrap() - 40.0).abs() < 1e-9);
        let f = e.min_retry_concurrency.as_ref().unwrap();
        assert_eq!((f.per_rate, f.try_s), (0.25, 1.0));
        assert_eq!(f.at_rate.as_ref().unwrap().at_most, 10);
        // Where the largest budget binds, strictly below it: 0.5 x 40 x 1 = 20 gives 19.
        assert_eq!(
            floor(3, 1.0, 0.5, 1.0, Some(40.0)).at_rate.unwrap().at_most,
            19
        );
    }

    #[test]
    fn no_room_is_computed_without_debt_or_a_first_attempt_target() {
        let layers = vec![layer(3, 10.0, Tier::Client, None)];
        let timeout = class_figure(&layers, FailureClass::Timeout);
        let dropped = Stack::new(layers.clone(), None, Abandoned::Dropped);
        assert_eq!(
            headroom(
                &Stack {
                    rho: Some(0.5),
                    ..dropped
                },
                &timeout
            ),
            None
        );
        let no_rho = Stack::new(layers.clone(), None, Abandoned::Served);
        assert_eq!(headroom(&no_rho, &timeout), None);
        let today = headroom(
            &Stack {
                rho: Some(0.3),
                ..no_rho
            },
            &timeout,
        )
        .unwrap();
        assert_eq!(
            (today.held, today.layers[0].retries_at_most),
            (Held::Today, Some(2))
        );
    }
}
