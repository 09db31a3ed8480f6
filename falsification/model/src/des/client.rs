//! The clients' defenses at the request level: one client (the loadgen is one process) whose
//! every attempt passes one gate before it is sent, and which hears every attempt's outcome.
//! The rules are `kit_defense`'s state machines, the ones the loadgen runs; this module only
//! orders them.
//!
//! The gate, in order: the breaker (`allow`), the throttle (`admit`, with a uniform draw the
//! caller gives), then, in the AWS SDK's adaptive mode, the rate limiter (`acquire` within the
//! client's timeout: a delay postpones the send, none refuses it). An attempt the throttle or
//! the limiter refuses after the breaker let it through is not sent, so it takes none of a
//! half-open breaker's probes (a probe that is never sent would never report back and would
//! hold the breaker half open for good). Retries also pay the retry quota (standard and
//! adaptive modes alike).

use kit_defense::{AdaptiveRate, Breaker, ClientDefenses, QuotaMode, RetryQuota, Throttle};

/// What the gate does with an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Pass {
    /// Send it now.
    Now,
    /// Send it after this delay (the adaptive rate limiter's token).
    After(f64),
    /// The client refuses it itself: never sent, its request ends there.
    Refused,
}

#[derive(Debug, Clone)]
pub(super) struct Client {
    breaker: Option<Breaker>,
    throttle: Option<Throttle>,
    quota: Option<RetryQuota>,
    limiter: Option<AdaptiveRate>,
    /// The longest an attempt waits for the limiter's token: the client's timeout.
    max_wait_s: f64,
}

impl Client {
    /// The client of `d` from `now`, `None` when it has no defense.
    pub(super) fn new(d: &ClientDefenses, timeout_s: f64, now: f64) -> Option<Client> {
        if d.is_none() {
            return None;
        }
        Some(Client {
            breaker: d.breaker.map(Breaker::new),
            throttle: d.throttling.map(|p| Throttle::new(p, now)),
            quota: d.quota.map(|_| RetryQuota::aws_standard()),
            limiter: (d.quota == Some(QuotaMode::Adaptive)).then(|| AdaptiveRate::new(now)),
            max_wait_s: timeout_s,
        })
    }

    /// An attempt wants to go at `now`; `uniform` draws in [0, 1) for the throttle.
    pub(super) fn pass(&mut self, now: f64, uniform: impl FnOnce() -> f64) -> Pass {
        // The breaker's answer stands only if the attempt is sent.
        let mut breaker = self.breaker.clone();
        if let Some(b) = breaker.as_mut()
            && !b.allow(now)
        {
            self.breaker = breaker;
            return Pass::Refused;
        }
        if let Some(t) = self.throttle.as_mut()
            && !t.admit(now, uniform())
        {
            return Pass::Refused;
        }
        let delay = match self
            .limiter
            .as_mut()
            .map(|l| l.acquire(now, self.max_wait_s))
        {
            None => 0.0,
            Some(Some(d)) => d,
            Some(None) => return Pass::Refused,
        };
        self.breaker = breaker;
        if delay > 0.0 {
            Pass::After(delay)
        } else {
            Pass::Now
        }
    }

    /// A retry wants to go, after a timeout or after a refusal: `Some(cost)` it may, with what
    /// it paid the quota (`previous` without a quota), `None` when the quota cannot pay.
    pub(super) fn retry_cost(&mut self, after_timeout: bool, previous: u16) -> Option<u16> {
        match self.quota.as_mut() {
            None => Some(previous),
            Some(q) => q
                .acquire(after_timeout)
                .map(|c| u16::try_from(c).unwrap_or(u16::MAX)),
        }
    }

    /// An attempt was answered in time at `now`; `cost` is what its request's last retry paid
    /// the quota (0: it sent none).
    pub(super) fn on_answered(&mut self, now: f64, cost: u16) {
        if let Some(b) = self.breaker.as_mut() {
            b.on_success();
        }
        if let Some(t) = self.throttle.as_mut() {
            t.on_accept(now);
        }
        if let Some(q) = self.quota.as_mut() {
            q.on_success((cost > 0).then_some(u32::from(cost)));
        }
        if let Some(l) = self.limiter.as_mut() {
            l.on_response(now, false);
        }
    }

    /// A pod refused an attempt with a 503 at `now`: a failure, and a throttling response.
    pub(super) fn on_refused(&mut self, now: f64) {
        if let Some(b) = self.breaker.as_mut() {
            b.on_failure(now);
        }
        if let Some(l) = self.limiter.as_mut() {
            l.on_response(now, true);
        }
    }

    /// An attempt timed out at `now`: a failure (the limiter never hears of timeouts).
    pub(super) fn on_timed_out(&mut self, now: f64) {
        if let Some(b) = self.breaker.as_mut() {
            b.on_failure(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kit_defense::BreakerParams;
    use kit_defense::throttle::ThrottleParams;

    #[test]
    fn no_defense_is_no_client() {
        assert!(Client::new(&ClientDefenses::default(), 10.0, 0.0).is_none());
    }

    #[test]
    fn a_probe_the_throttle_refuses_leaves_the_breaker_its_probe() {
        let d = ClientDefenses {
            throttling: Some(ThrottleParams {
                k: 2.0,
                window_s: 100.0,
            }),
            breaker: Some(BreakerParams {
                failures: 1,
                open_s: 5.0,
                probes: 1,
            }),
            quota: None,
        };
        let mut c = Client::new(&d, 10.0, 0.0).unwrap();
        assert_eq!(c.pass(0.0, || 0.5), Pass::Now);
        c.on_timed_out(1.0);
        assert_eq!(c.pass(2.0, || 0.0), Pass::Refused, "open until 6 s");
        // Half open at 6 s; the throttle (1 request in 2, nothing accepted) refuses a draw of 0.
        assert_eq!(c.pass(6.0, || 0.0), Pass::Refused);
        // The probe is still there for the next attempt the throttle lets go.
        assert_eq!(c.pass(6.5, || 0.99), Pass::Now);
        assert_eq!(c.pass(6.6, || 0.99), Pass::Refused, "one probe out");
        c.on_answered(7.0, 0);
        assert_eq!(c.pass(7.1, || 0.99), Pass::Now, "closed again");
    }

    #[test]
    fn retries_pay_the_quota_and_successes_refund_it() {
        let d = ClientDefenses {
            quota: Some(QuotaMode::Standard),
            ..ClientDefenses::default()
        };
        let mut c = Client::new(&d, 10.0, 0.0).unwrap();
        for _ in 0..50 {
            assert_eq!(c.retry_cost(true, 0), Some(10));
        }
        assert_eq!(c.retry_cost(false, 0), None, "500 tokens spent");
        c.on_answered(1.0, 10);
        assert_eq!(c.retry_cost(false, 0), Some(5));
        let none = Client::new(
            &ClientDefenses {
                breaker: Some(BreakerParams::default()),
                ..ClientDefenses::default()
            },
            10.0,
            0.0,
        );
        assert_eq!(none.unwrap().retry_cost(true, 7), Some(7), "no quota: free");
    }

    #[test]
    fn the_adaptive_mode_delays_or_refuses_after_a_503() {
        let d = ClientDefenses {
            quota: Some(QuotaMode::Adaptive),
            ..ClientDefenses::default()
        };
        let mut c = Client::new(&d, 0.5, 0.0).unwrap();
        for i in 0..400 {
            let now = f64::from(i) * 0.01;
            assert_eq!(c.pass(now, || 0.0), Pass::Now);
            c.on_answered(now, 0);
        }
        c.on_refused(4.0);
        let passes: Vec<Pass> = (0..200).map(|_| c.pass(4.0, || 0.0)).collect();
        assert!(
            passes.iter().any(|p| matches!(p, Pass::After(_))),
            "{passes:?}"
        );
        assert_eq!(
            passes.last(),
            Some(&Pass::Refused),
            "a wait past the timeout"
        );
    }
}
