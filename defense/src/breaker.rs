//! A consecutive-failure circuit breaker, the shape of Polly's basic breaker and of Envoy's
//! outlier detection on consecutive errors: after `failures` failed attempts in a row it opens
//! and every attempt fails locally for `open_s`; then up to `probes` attempts go through
//! (half open), and it closes when they all succeed or opens again on the first failure.

use serde::{Deserialize, Serialize};

use crate::{ParamError, positive};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerParams {
    pub failures: u32,
    pub open_s: f64,
    pub probes: u32,
}

impl Default for BreakerParams {
    /// Five failures in a row, 30 s open, one probe (Polly's examples; resilience4j's
    /// count-based window is larger but opens on a rate).
    fn default() -> Self {
        BreakerParams {
            failures: 5,
            open_s: 30.0,
            probes: 1,
        }
    }
}

impl BreakerParams {
    pub fn validate(self) -> Result<BreakerParams, ParamError> {
        if self.failures == 0 {
            return Err(ParamError::new("breaker failures", 0, "must be at least 1"));
        }
        if self.probes == 0 {
            return Err(ParamError::new("breaker probes", 0, "must be at least 1"));
        }
        positive("breaker open", self.open_s)?;
        Ok(self)
    }
}

/// Where the breaker is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum State {
    Closed { consecutive: u32 },
    Open { until: f64 },
    HalfOpen { sent: u32, succeeded: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    params: BreakerParams,
    state: State,
}

impl Breaker {
    pub fn new(params: BreakerParams) -> Breaker {
        Breaker {
            params,
            state: State::Closed { consecutive: 0 },
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// May an attempt go at `now`? An open breaker turns half open once its time is up.
    pub fn allow(&mut self, now: f64) -> bool {
        if let State::Open { until } = self.state
            && now >= until
        {
            self.state = State::HalfOpen {
                sent: 0,
                succeeded: 0,
            };
        }
        match &mut self.state {
            State::Closed { .. } => true,
            State::Open { .. } => false,
            State::HalfOpen { sent, .. } if *sent < self.params.probes => {
                *sent += 1;
                true
            }
            State::HalfOpen { .. } => false,
        }
    }

    pub fn on_success(&mut self) {
        match &mut self.state {
            State::Closed { consecutive } => *consecutive = 0,
            State::HalfOpen { succeeded, .. } => {
                *succeeded += 1;
                if *succeeded >= self.params.probes {
                    self.state = State::Closed { consecutive: 0 };
                }
            }
            State::Open { .. } => {}
        }
    }

    /// An attempt sent failed (timed out, 5xx, refused) at `now`.
    pub fn on_failure(&mut self, now: f64) {
        let open = State::Open {
            until: now + self.params.open_s,
        };
        match &mut self.state {
            State::Closed { consecutive } => {
                *consecutive += 1;
                if *consecutive >= self.params.failures {
                    self.state = open;
                }
            }
            State::HalfOpen { .. } => self.state = open,
            // A late answer of an attempt sent before it opened.
            State::Open { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_when_the_time_is_up() {
        let mut b = Breaker::new(BreakerParams {
            failures: 3,
            open_s: 10.0,
            probes: 2,
        });
        b.on_failure(0.0);
        b.on_failure(0.1);
        b.on_success();
        b.on_failure(0.2);
        b.on_failure(0.3);
        assert!(b.allow(0.3), "a success reset the count");
        b.on_failure(0.4);
        assert_eq!(b.state(), State::Open { until: 10.4 });
        assert!(!b.allow(5.0));
        assert!(b.allow(10.4) && b.allow(10.5), "two probes");
        assert!(!b.allow(10.6), "no third while half open");
        b.on_success();
        b.on_success();
        assert_eq!(b.state(), State::Closed { consecutive: 0 });
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let mut b = Breaker::new(BreakerParams {
            failures: 1,
            open_s: 1.0,
            probes: 1,
        });
        b.on_failure(0.0);
        assert!(b.allow(1.0));
        b.on_failure(1.5);
        assert_eq!(b.state(), State::Open { until: 2.5 });
        assert_eq!(
            BreakerParams {
                probes: 0,
                ..BreakerParams::default()
            }
            .validate()
            .unwrap_err()
            .to_string(),
            "breaker probes: 0 must be at least 1"
        );
    }
}
