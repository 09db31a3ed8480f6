//! The client's defenses at each attempt it would send (`--throttle-k`, `--retry-quota
//! aws-adaptive`, `--breaker-failures`): [`ClientGate`] asks kit-defense's rules whether the
//! attempt may go, and after how long, and tells them how it ended. Pure, as [`crate::policy`]:
//! time comes in as `now` (seconds from the run's start) and randomness as an `Rng` argument.
//!
//! The order, a breaker, then the throttle, then the rate limiter, is the order of the layers
//! that hold them in a client:
//! - The breaker first: what it refuses reaches neither the throttle nor the limiter. The SRE
//!   book's throttle counts every request the application hands the RPC layer, those it then
//!   rejects itself included; an attempt an open breaker stops never gets there. Counted,
//!   such requests, which no backend could accept, would keep the throttle rejecting for a
//!   window after the breaker closed.
//! - The throttle before the limiter: the SDK's limiter sits next to the wire, and an attempt
//!   the throttle drops takes none of its tokens.
//! - The breaker's `allow` is asked on a copy first and committed last, once the throttle and
//!   the limiter have let the attempt go: a half-open breaker counts the probes it lets
//!   through and closes only when they answer, so a probe refused further in would hold it
//!   half open for good.

use kit_defense::quota::is_throttling_status;
use kit_defense::{AdaptiveRate, Breaker, ClientDefenses, QuotaMode, Throttle};
use rand::Rng;

use crate::record::{AttemptOutcome, ErrorKind, Rejected};

/// One client's throttle, rate limiter and breaker; each `None` when its flag is not given.
#[derive(Debug, Clone)]
pub struct ClientGate {
    breaker: Option<Breaker>,
    throttle: Option<Throttle>,
    limiter: Option<AdaptiveRate>,
}

impl ClientGate {
    /// The gate `defenses` describe, its windows starting at `now`. The retry quota, standard
    /// or adaptive, is [`crate::policy`]'s: only the adaptive mode's limiter is here.
    pub fn new(defenses: ClientDefenses, now: f64) -> ClientGate {
        ClientGate {
            breaker: defenses.breaker.map(Breaker::new),
            throttle: defenses.throttling.map(|p| Throttle::new(p, now)),
            limiter: (defenses.quota == Some(QuotaMode::Adaptive)).then(|| AdaptiveRate::new(now)),
        }
    }

    /// No defense: every attempt goes at once.
    pub fn is_empty(&self) -> bool {
        self.breaker.is_none() && self.throttle.is_none() && self.limiter.is_none()
    }

    /// An attempt would be sent at `now`: `Ok(delay)`, send it `delay` seconds later (the
    /// limiter's wait, at most `max_wait_s`), or which defense rejected it.
    pub fn admit(
        &mut self,
        now: f64,
        max_wait_s: f64,
        rng: &mut impl Rng,
    ) -> Result<f64, Rejected> {
        if let Some(b) = &self.breaker
            && !b.clone().allow(now)
        {
            return Err(Rejected::BreakerOpen);
        }
        if let Some(t) = &mut self.throttle
            && !t.admit(now, rng.random::<f64>())
        {
            return Err(Rejected::Throttle);
        }
        let delay = match &mut self.limiter {
            Some(l) => l.acquire(now, max_wait_s).ok_or(Rejected::RateLimit)?,
            None => 0.0,
        };
        if let Some(b) = &mut self.breaker {
            // The copy's answer: nothing has changed since.
            b.allow(now);
        }
        Ok(delay)
    }

    /// An attempt the gate let go ended at `now` with `outcome`; `status` is the answer's
    /// HTTP status, if one came.
    /// - The throttle counts an accept for an answer in time with 2xx only.
    /// - The limiter hears every answer, throttling (429, 503) or not; a timeout or a
    ///   connection that failed is no answer (the SDK's limiter never sees one).
    /// - The breaker counts a failure for a timeout, a connection or exchange that failed, a
    ///   5xx or a 429, and a success for any other answer: the backend answered (as Envoy's
    ///   consecutive-5xx rule; a half-open breaker needs every probe to end one way or the
    ///   other).
    pub fn on_end(&mut self, now: f64, outcome: AttemptOutcome, status: Option<u16>) {
        let succeeded = outcome == AttemptOutcome::Success;
        if succeeded && let Some(t) = &mut self.throttle {
            t.on_accept(now);
        }
        if outcome != AttemptOutcome::Timeout
            && let (Some(l), Some(s)) = (&mut self.limiter, status)
        {
            l.on_response(now, is_throttling_status(s));
        }
        if let Some(b) = &mut self.breaker {
            let answered = match outcome {
                AttemptOutcome::Success => true,
                AttemptOutcome::Error(ErrorKind::StatusOther) => {
                    !status.is_some_and(is_throttling_status)
                }
                AttemptOutcome::Timeout | AttemptOutcome::Error(_) => false,
            };
            if answered {
                b.on_success();
            } else {
                b.on_failure(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kit_defense::breaker::State;
    use kit_defense::{BreakerParams, ThrottleParams};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const OK: (AttemptOutcome, Option<u16>) = (AttemptOutcome::Success, Some(200));
    const UNAVAILABLE: (AttemptOutcome, Option<u16>) =
        (AttemptOutcome::Error(ErrorKind::Status5xx), Some(503));
    const TIMEOUT: (AttemptOutcome, Option<u16>) = (AttemptOutcome::Timeout, None);

    fn gate(defenses: ClientDefenses) -> ClientGate {
        ClientGate::new(defenses, 0.0)
    }

    fn breaker(failures: u32, open_s: f64, probes: u32) -> Option<BreakerParams> {
        Some(BreakerParams {
            failures,
            open_s,
            probes,
        })
    }

    fn end(g: &mut ClientGate, now: f64, (outcome, status): (AttemptOutcome, Option<u16>)) {
        g.on_end(now, outcome, status);
    }

    #[test]
    fn no_defense_lets_everything_go_at_once() {
        let mut g = gate(ClientDefenses::default());
        let mut rng = SmallRng::seed_from_u64(1);
        assert!(g.is_empty());
        for i in 0..100 {
            assert_eq!(g.admit(f64::from(i), 1.0, &mut rng), Ok(0.0));
            end(&mut g, f64::from(i), TIMEOUT);
        }
        // The standard quota is the retry policy's: no gate of its own.
        let standard = gate(ClientDefenses {
            quota: Some(QuotaMode::Standard),
            ..ClientDefenses::default()
        });
        assert!(standard.is_empty());
    }

    #[test]
    fn the_breaker_opens_after_n_failures_in_a_row_then_lets_its_probes_go() {
        let mut g = gate(ClientDefenses {
            breaker: breaker(3, 10.0, 2),
            ..ClientDefenses::default()
        });
        let mut rng = SmallRng::seed_from_u64(2);
        for i in 0..3 {
            let now = f64::from(i) * 0.1;
            assert_eq!(g.admit(now, 1.0, &mut rng), Ok(0.0));
            end(&mut g, now, UNAVAILABLE);
        }
        assert_eq!(g.admit(5.0, 1.0, &mut rng), Err(Rejected::BreakerOpen));
        // Open from the third failure (0.2 s) for 10 s; then two probes, and no third.
        assert_eq!(g.admit(10.1, 1.0, &mut rng), Err(Rejected::BreakerOpen));
        assert_eq!(g.admit(10.25, 1.0, &mut rng), Ok(0.0));
        assert_eq!(g.admit(10.25, 1.0, &mut rng), Ok(0.0));
        assert_eq!(g.admit(10.3, 1.0, &mut rng), Err(Rejected::BreakerOpen));
        end(&mut g, 10.4, OK);
        // A 404 is an answer: the backend is up, and the second probe closes it.
        end(
            &mut g,
            10.4,
            (AttemptOutcome::Error(ErrorKind::StatusOther), Some(404)),
        );
        assert_eq!(g.admit(10.5, 1.0, &mut rng), Ok(0.0));
        // A 429 and a timeout are failures as a 503 is: three in a row open it again.
        end(
            &mut g,
            11.0,
            (AttemptOutcome::Error(ErrorKind::StatusOther), Some(429)),
        );
        end(&mut g, 11.1, TIMEOUT);
        end(&mut g, 11.2, (AttemptOutcome::Error(ErrorKind::Io), None));
        assert_eq!(g.admit(11.3, 1.0, &mut rng), Err(Rejected::BreakerOpen));
    }

    #[test]
    fn the_throttle_rejects_almost_every_attempt_once_nothing_is_accepted() {
        let mut g = gate(ClientDefenses {
            throttling: Some(ThrottleParams::default()),
            ..ClientDefenses::default()
        });
        let mut rng = SmallRng::seed_from_u64(3);
        // A healthy backend: K = 2 and every attempt accepted, so none is rejected.
        for i in 0..1000 {
            let now = f64::from(i) * 0.01;
            assert_eq!(g.admit(now, 1.0, &mut rng), Ok(0.0));
            end(&mut g, now, OK);
        }
        // The backend stops answering at 10 s. Its 1,000 accepts cover 2,000 requests while
        // they are in the 2-minute window: the next 1,000 attempts all go, then rejections
        // grow with the requests that get no accept.
        let mut rejected = Vec::new();
        for i in 0..10_000 {
            let now = 10.0 + f64::from(i) * 0.01;
            match g.admit(now, 1.0, &mut rng) {
                Ok(_) => end(&mut g, now + 1.0, TIMEOUT),
                Err(why) => {
                    assert_eq!(why, Rejected::Throttle);
                    rejected.push(i);
                }
            }
        }
        assert!(rejected[0] >= 1000, "{:?}", &rejected[..5]);
        // p = (r - 2,000) / (r + 1) for r requests in the window: about 5,600 of the 10,000.
        assert!(
            (5_000..6_500).contains(&rejected.len()),
            "{}",
            rejected.len()
        );
        // Once the accepts have left the window, p = r / (r + 1).
        let late = (0..1000)
            .filter(|i| {
                g.admit(130.0 + f64::from(*i) * 0.001, 1.0, &mut rng)
                    .is_err()
            })
            .count();
        assert!(
            late > 990,
            "{late} of 1,000 rejected with no accept in the window"
        );
    }

    #[test]
    fn an_open_breaker_stops_an_attempt_before_the_throttle_counts_it() {
        let mut g = gate(ClientDefenses {
            throttling: Some(ThrottleParams::default()),
            breaker: breaker(1, 60.0, 1),
            ..ClientDefenses::default()
        });
        let mut rng = SmallRng::seed_from_u64(4);
        assert_eq!(g.admit(0.0, 1.0, &mut rng), Ok(0.0));
        end(&mut g, 0.5, UNAVAILABLE);
        for i in 0..100 {
            assert_eq!(
                g.admit(1.0 + f64::from(i) * 0.1, 1.0, &mut rng),
                Err(Rejected::BreakerOpen)
            );
        }
        let throttle = g.throttle.as_mut().unwrap();
        assert_eq!(throttle.counts(11.0), (1.0, 0.0), "only the attempt sent");
    }

    #[test]
    fn a_half_open_breaker_gives_its_probe_only_to_an_attempt_that_goes() {
        let mut g = gate(ClientDefenses {
            throttling: Some(ThrottleParams::default()),
            breaker: breaker(3, 1.0, 1),
            ..ClientDefenses::default()
        });
        let mut rng = SmallRng::seed_from_u64(5);
        // 200 attempts answered 404: the breaker hears answers, the throttle no accept, so it
        // rejects nearly all; then three that time out open the breaker.
        for _ in 0..200 {
            if g.admit(0.0, 1.0, &mut rng).is_ok() {
                end(
                    &mut g,
                    0.0,
                    (AttemptOutcome::Error(ErrorKind::StatusOther), Some(404)),
                );
            }
        }
        while !matches!(g.breaker.as_ref().unwrap().state(), State::Open { .. }) {
            if g.admit(0.0, 1.0, &mut rng).is_ok() {
                end(&mut g, 0.0, TIMEOUT);
            }
        }
        let mut throttled = 0;
        loop {
            match g.admit(2.0, 1.0, &mut rng) {
                Err(Rejected::Throttle) => throttled += 1,
                Ok(_) => break,
                Err(other) => panic!("{other:?} before the probe went"),
            }
        }
        assert!(
            throttled > 10,
            "the throttle refused {throttled} before the probe"
        );
        assert_eq!(
            g.breaker.as_ref().unwrap().state(),
            State::HalfOpen {
                sent: 1,
                succeeded: 0
            }
        );
        assert_eq!(g.admit(2.0, 1.0, &mut rng), Err(Rejected::BreakerOpen));
        end(&mut g, 2.1, OK);
        assert_eq!(
            g.breaker.as_ref().unwrap().state(),
            State::Closed { consecutive: 0 }
        );
    }

    #[test]
    fn the_adaptive_limiter_delays_attempts_after_a_503_and_never_after_timeouts() {
        let adaptive = ClientDefenses {
            quota: Some(QuotaMode::Adaptive),
            ..ClientDefenses::default()
        };
        let mut rng = SmallRng::seed_from_u64(6);
        // Timeouts are no answers: the limiter never starts.
        let mut g = gate(adaptive);
        for i in 0..1000 {
            let now = f64::from(i) * 0.01;
            assert_eq!(g.admit(now, 0.1, &mut rng), Ok(0.0));
            end(&mut g, now, TIMEOUT);
        }
        // 100 answers a second, then one 503: the rate falls to about 70/s, and attempts
        // that want to go together wait for their tokens, in turn.
        let mut g = gate(adaptive);
        for i in 0..1000 {
            let now = f64::from(i) * 0.01;
            assert_eq!(g.admit(now, 0.1, &mut rng), Ok(0.0));
            end(&mut g, now, OK);
        }
        end(&mut g, 10.0, UNAVAILABLE);
        let delays: Vec<f64> = (0..200)
            .map_while(|_| g.admit(10.0, 0.1, &mut rng).ok())
            .collect();
        assert!(
            delays.windows(2).all(|w| w[0] <= w[1]) && delays[delays.len() - 1] > 0.05,
            "{delays:?}"
        );
        assert!((70..=85).contains(&delays.len()), "{}", delays.len());
        assert_eq!(g.admit(10.0, 0.1, &mut rng), Err(Rejected::RateLimit));
        assert!(g.admit(10.0, 10.0, &mut rng).unwrap() > 0.1);
    }
}
