//! Client-side adaptive throttling as the Google SRE book gives it ("Handling Overload",
//! chapter 21): over the last two minutes a client counts its `requests` (every one the
//! application made, those it rejected itself included) and the backend's `accepts`, and
//! rejects a new request locally with probability
//! `max(0, (requests - K x accepts) / (requests + 1))`. With K = 2 a backend that accepts
//! half or more sees no rejection; one that accepts nothing sees almost every request stop at
//! the client. A request rejected locally fails at once and is not retried.

use serde::{Deserialize, Serialize};

use crate::{ParamError, positive};

/// The throttle's two parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleParams {
    /// The book's K: how many requests per accept pass before rejection starts.
    pub k: f64,
    /// The window the counts cover, seconds (the book: two minutes).
    pub window_s: f64,
}

impl Default for ThrottleParams {
    fn default() -> Self {
        ThrottleParams {
            k: 2.0,
            window_s: 120.0,
        }
    }
}

impl ThrottleParams {
    pub fn validate(self) -> Result<ThrottleParams, ParamError> {
        if !(self.k.is_finite() && self.k >= 1.0) {
            return Err(ParamError::new("throttle k", self.k, "must be at least 1"));
        }
        positive("throttle window", self.window_s)?;
        Ok(self)
    }
}

/// The book's rejection probability for the window's counts: one formula for the client and
/// the fluid model, which feeds it rates times the window.
pub fn rejection_probability(requests: f64, accepts: f64, k: f64) -> f64 {
    ((requests - k * accepts) / (requests + 1.0)).clamp(0.0, 1.0)
}

/// Windowed counts in buckets of a tenth of the window.
const BUCKETS: usize = 10;

/// One client's throttle: pure state, `now` and a uniform draw come in.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttle {
    params: ThrottleParams,
    width: f64,
    /// (requests, accepts) per bucket; `current` opens at `current_start`.
    buckets: [(f64, f64); BUCKETS],
    current: usize,
    current_start: f64,
}

impl Throttle {
    pub fn new(params: ThrottleParams, now: f64) -> Throttle {
        Throttle {
            params,
            width: params.window_s / BUCKETS as f64,
            buckets: [(0.0, 0.0); BUCKETS],
            current: 0,
            current_start: now,
        }
    }

    fn roll(&mut self, now: f64) {
        let mut turned = 0;
        while now >= self.current_start + self.width && turned <= BUCKETS {
            self.current = (self.current + 1) % BUCKETS;
            self.buckets[self.current] = (0.0, 0.0);
            self.current_start += self.width;
            turned += 1;
        }
        if now >= self.current_start + self.width {
            // Idle longer than the window: everything has aged out.
            self.current_start = now;
        }
    }

    /// (requests, accepts) over the window ending at `now`.
    pub fn counts(&mut self, now: f64) -> (f64, f64) {
        self.roll(now);
        self.buckets
            .iter()
            .fold((0.0, 0.0), |(r, a), (br, ba)| (r + br, a + ba))
    }

    /// The probability the next request is rejected.
    pub fn probability(&mut self, now: f64) -> f64 {
        let (requests, accepts) = self.counts(now);
        rejection_probability(requests, accepts, self.params.k)
    }

    /// The application makes a request at `now`; `uniform` is a draw in [0, 1). True: send
    /// it. Either way it counts as a request.
    pub fn admit(&mut self, now: f64, uniform: f64) -> bool {
        let p = self.probability(now);
        self.buckets[self.current].0 += 1.0;
        uniform >= p
    }

    /// A step's flow ending at `now` (the fluid model): `requests` made and `accepts` answered.
    pub fn record(&mut self, now: f64, requests: f64, accepts: f64) {
        self.roll(now);
        self.buckets[self.current].0 += requests;
        self.buckets[self.current].1 += accepts;
    }

    /// The backend accepted a request (answered it in time, not with an overload error).
    pub fn on_accept(&mut self, now: f64) {
        self.roll(now);
        self.buckets[self.current].1 += 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_books_formula() {
        assert_eq!(rejection_probability(100.0, 50.0, 2.0), 0.0);
        assert_eq!(rejection_probability(100.0, 60.0, 2.0), 0.0);
        assert!((rejection_probability(99.0, 0.0, 2.0) - 0.99).abs() < 1e-12);
        assert!((rejection_probability(199.0, 50.0, 2.0) - 0.495).abs() < 1e-12);
    }

    #[test]
    fn a_healthy_backend_sees_no_rejection_and_a_dead_one_almost_all() {
        let mut t = Throttle::new(ThrottleParams::default(), 0.0);
        for i in 0..1000 {
            let now = f64::from(i) * 0.01;
            assert!(t.admit(now, 0.0), "p must be 0 while accepts keep up");
            t.on_accept(now);
        }
        // The backend stops accepting: with 1,000 accepts in the window, a draw of 0.5 is
        // rejected once requests pass 4,000 (p > 1/2), so 3,000 more go and 7,000 stop.
        let mut rejected = 0;
        for i in 0..10_000 {
            if !t.admit(10.0 + f64::from(i) * 0.001, 0.5) {
                rejected += 1;
            }
        }
        assert!((6_990..=7_010).contains(&rejected), "{rejected}");
        assert!((t.probability(20.0) - 9000.0 / 11001.0).abs() < 1e-9);
    }

    #[test]
    fn counts_age_out_of_the_window() {
        let p = ThrottleParams {
            k: 2.0,
            window_s: 10.0,
        };
        let mut t = Throttle::new(p, 0.0);
        for _ in 0..100 {
            t.admit(0.5, 0.9);
        }
        assert!(t.probability(5.0) > 0.9);
        assert_eq!(
            t.counts(10.6),
            (0.0, 0.0),
            "the bucket of t = 0.5 left the window"
        );
        assert_eq!(t.probability(1000.0), 0.0);
    }

    #[test]
    fn k_below_one_is_refused() {
        let e = ThrottleParams {
            k: 0.5,
            window_s: 120.0,
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.to_string(), "throttle k: 0.5 must be at least 1");
    }
}
