//! What the defenses change in the diagnosis: the pods' queue discipline (a pod that refuses
//! work past a bound, or serves the newest first, holds no debt from its queue) and the
//! clients' throttling and circuit breakers (which cut what a client sends once it fails).
//! Where the kit has a law, it is applied; where it has none yet, the reason says what is
//! known and points at the measurement (F11).

use kit_defense::Discipline;

use super::layer::Layer;

/// Where what the kit has no law for is measured.
pub const MEASURED: &str = "measured in F11, see RESULTS.md";

/// A time for a person: milliseconds under a second.
pub fn span(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s} s")
    }
}

/// What the pods' discipline does to the trap.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueVerdict {
    /// The pods hold no debt from their queue: no second state, whatever `A`.
    pub removes: bool,
    pub reason: String,
}

/// The pods' discipline against `tau_out_s`, the wait that fails an attempt (the chain's
/// shortest timeout), with a request's mean service time at one pod when known; `None` for FIFO
/// pods or a chain without a timeout.
///
/// The debt of the trap is work served after its client has gone: a pod that refuses an
/// arrival once a bound's worth is waiting (bounded, adaptive) never makes one wait past that
/// bound, so when the bound is under `tau_out` no attempt times out in its queue. CoDel holds
/// the wait near its target once the queue has stood an interval, and LIFO serves fresh
/// attempts before abandoned ones: no closed form, so those say where they are measured.
pub fn queue_verdict(
    discipline: Discipline,
    service_s: Option<f64>,
    tau_out_s: Option<f64>,
) -> Option<QueueVerdict> {
    let tau = tau_out_s?;
    let wait = |n: u32| service_s.map(|s| f64::from(n) * s);
    let removes = |reason: String| QueueVerdict {
        removes: true,
        reason: format!("no second state from the queue: {reason}"),
    };
    let keeps = |reason: String| QueueVerdict {
        removes: false,
        reason,
    };
    let fails = span(tau);
    let verdict = match discipline {
        Discipline::Fifo => return None,
        Discipline::Sharing { limit } => keeps(format!(
            "the pods serve {limit} at once and queue the rest in arrival order: abandoned work \
             is still served, so the condition applies"
        )),
        Discipline::Lifo => removes(format!(
            "the pods serve newest first, so abandoned work waits behind fresh attempts instead \
             of ahead of them ({MEASURED})"
        )),
        Discipline::Bounded { limit } => match wait(limit) {
            Some(w) if w < tau => removes(format!(
                "the pods refuse work past {limit} waiting (503 at once), at most {} of wait, \
                 under the {fails} that fails an attempt",
                span(w)
            )),
            Some(w) => keeps(format!(
                "the pods refuse work past {limit} waiting, but that is {} of wait, not under \
                 the {fails} that fails an attempt: attempts still time out in the queue",
                span(w)
            )),
            None => keeps(format!(
                "the pods refuse work past {limit} waiting: give a pod's capacity to compare \
                 that wait with the {fails} that fails an attempt"
            )),
        },
        Discipline::Adaptive(a) => match wait(a.max) {
            Some(w) if w < tau => removes(format!(
                "the pods refuse work past their adaptive limit, at most {} in a pod: {} of \
                 wait, under the {fails} that fails an attempt",
                a.max,
                span(w)
            )),
            _ if a.latency_s < tau => removes(format!(
                "the pods refuse work past an adaptive limit that shrinks while requests take \
                 over {}, which holds the wait near that, under the {fails} that fails an \
                 attempt ({MEASURED})",
                span(a.latency_s)
            )),
            _ => keeps(format!(
                "the pods' adaptive limit lets requests take {} before it shrinks, not under \
                 the {fails} that fails an attempt: attempts still time out in the queue",
                span(a.latency_s)
            )),
        },
        Discipline::Codel(c) if c.target_s + c.interval_s < tau => removes(format!(
            "the pods refuse work that waited past {} once the queue has stood for {}, under \
             the {fails} that fails an attempt ({MEASURED})",
            span(c.target_s),
            span(c.interval_s)
        )),
        Discipline::Codel(c) => keeps(format!(
            "the pods' CoDel refuses work only after {} of wait, not under the {fails} that \
             fails an attempt: attempts still time out in the queue",
            span(c.target_s + c.interval_s)
        )),
    };
    Some(verdict)
}

/// What the clients' throttling and circuit breakers change once the service has failed, given
/// each layer's tries per request for timeouts. Neither changes whether a trigger opens the
/// trap (`A rho >= 1` while the backend still accepts); both cut what the client sends once it
/// is failing, which the kit has no law for.
pub fn client_reasons(layers: &[Layer], tries: &[f64]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let tries = tries.get(i).copied().unwrap_or(1.0);
        if let Some(t) = l.defenses.throttling {
            out.push(throttling_reason(l, t.k));
        }
        if let Some(b) = l.defenses.breaker {
            out.push(format!(
                "{} has a circuit breaker ({} failures in a row, open {}): once every attempt \
                 fails it opens and sends {} probe{} per {} instead of {tries:.2} tries per \
                 request, so the retries that hold the pods there stop; whether the service \
                 then recovers or cycles is {MEASURED}",
                l.name(),
                b.failures,
                span(b.open_s),
                b.probes,
                if b.probes == 1 { "" } else { "s" },
                span(b.open_s),
            ));
        }
    }
    out
}

/// The SRE book's throttle sends every request while `requests < K x accepts`, and about
/// `K x accepts` after that.
fn throttling_reason(l: &Layer, k: f64) -> String {
    format!(
        "{} throttles (K = {k}): while the backend accepts more than 1/K = {:.0}% of its \
         requests it sends them all, so the trap condition A rho >= 1 holds; below that it \
         sends about K x the accepts, and once every attempt fails almost nothing; what \
         follows is {MEASURED}",
        l.name(),
        100.0 / k
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use kit_defense::{AimdParams, BreakerParams, ClientDefenses, CodelParams, ThrottleParams};

    use super::*;
    use crate::layer::{Source, Tier};

    /// At 10 ms a request, against a 10 s timeout.
    fn pods(d: Discipline) -> Option<QueueVerdict> {
        queue_verdict(d, Some(0.01), Some(10.0))
    }

    #[test]
    fn a_bound_under_the_timeout_leaves_no_debt_and_one_over_it_does() {
        assert_eq!(pods(Discipline::Fifo), None);
        // 50 waiting at 10 ms each: 500 ms of wait, under 10 s.
        let q = pods(Discipline::Bounded { limit: 50 }).unwrap();
        assert!(q.removes);
        assert_eq!(
            q.reason,
            "no second state from the queue: the pods refuse work past 50 waiting (503 at \
             once), at most 500 ms of wait, under the 10 s that fails an attempt"
        );
        // 2000 waiting at 10 ms: 20 s, past the timeout.
        let q = pods(Discipline::Bounded { limit: 2000 }).unwrap();
        assert!(
            !q.removes && q.reason.contains("attempts still time out"),
            "{q:?}"
        );
        // Without a pod's capacity the bound cannot be compared.
        let q = queue_verdict(Discipline::Bounded { limit: 50 }, None, Some(10.0)).unwrap();
        assert!(
            !q.removes && q.reason.contains("give a pod's capacity"),
            "{q:?}"
        );
        // No timeout in the chain: nothing to hold the bound against.
        assert_eq!(queue_verdict(Discipline::Lifo, Some(0.01), None), None);
    }

    #[test]
    fn lifo_codel_and_the_adaptive_limit_say_where_they_are_measured() {
        for d in [
            Discipline::Lifo,
            Discipline::Codel(CodelParams::for_service(0.01)),
            Discipline::Adaptive(AimdParams {
                max: 2000,
                ..AimdParams::for_service(0.01)
            }),
        ] {
            let q = pods(d).unwrap();
            assert!(q.removes && q.reason.contains(MEASURED), "{d}: {q:?}");
        }
        // An adaptive limit of at most 200 at 10 ms is a bound: 2 s, no measurement needed.
        let q = pods(Discipline::Adaptive(AimdParams::for_service(0.01))).unwrap();
        assert!(q.removes && !q.reason.contains(MEASURED), "{q:?}");
        // CoDel acting only after 12 s of wait does not help a 10 s timeout.
        let late = Discipline::Codel(CodelParams {
            target_s: 2.0,
            interval_s: 10.0,
        });
        assert!(!pods(late).unwrap().removes);
        let sharing = pods(Discipline::Sharing { limit: 8 }).unwrap();
        assert!(!sharing.removes && sharing.reason.contains("the condition applies"));
    }

    #[test]
    fn throttling_and_breakers_say_what_they_cut_and_where_it_is_measured() {
        let client = Layer {
            defenses: ClientDefenses {
                throttling: Some(ThrottleParams::default()),
                breaker: Some(BreakerParams::default()),
                ..ClientDefenses::default()
            },
            ..Layer::new(
                "client",
                Tier::Client,
                Source::new(&PathBuf::from("stack.toml"), Some(1), "client web"),
            )
        };
        let reasons = client_reasons(&[client], &[3.0]);
        let [throttle, breaker] = reasons.as_slice() else {
            panic!("{reasons:?}")
        };
        assert!(
            throttle.starts_with("client web throttles (K = 2)")
                && throttle.contains("more than 1/K = 50% of its requests")
                && throttle.contains("A rho >= 1 holds")
                && throttle.ends_with(MEASURED),
            "{throttle}"
        );
        assert!(
            breaker.contains("sends 1 probe per 30 s instead of 3.00 tries")
                && breaker.ends_with(MEASURED),
            "{breaker}"
        );
    }
}
