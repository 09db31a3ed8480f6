//! An adaptive limit on the requests in a pod, queued or in service: additive increase,
//! multiplicative decrease on the measured latency, as Netflix's concurrency-limits
//! `AIMDLimit` (v0.3) does and Envoy's adaptive concurrency filter aims at with its gradient.
//! A sample whose latency exceeded `latency_s`, or that was refused, shrinks the limit by
//! `backoff`; one in time grows it by one while at least half the limit is in use (a limit
//! nobody presses against is not evidence it could be higher).

use serde::{Deserialize, Serialize};

use crate::{ParamError, positive};

/// The AIMD limit's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AimdParams {
    pub initial: u32,
    pub min: u32,
    pub max: u32,
    /// A latency (wait and service) above this shrinks the limit, seconds.
    pub latency_s: f64,
    /// The factor a late sample multiplies the limit by, in (0, 1).
    pub backoff: f64,
}

impl AimdParams {
    /// Netflix's defaults for the limits (initial 20, max 200, backoff 0.9) with a minimum of
    /// one, and the latency threshold at 20 mean service times (200 ms at the kit's 10 ms):
    /// Netflix's is a fixed 5 s for RPCs of milliseconds, far past a pod's normal latency;
    /// 20 S is past the 99.9th percentile of an M/M/1 pod's sojourn at half load (about 14 S)
    /// yet under the clients' timeout.
    pub fn for_service(mean_service_s: f64) -> AimdParams {
        AimdParams {
            initial: 20,
            min: 1,
            max: 200,
            latency_s: 20.0 * mean_service_s,
            backoff: 0.9,
        }
    }

    pub fn validate(self) -> Result<AimdParams, ParamError> {
        positive("adaptive latency", self.latency_s)?;
        if !(self.backoff > 0.0 && self.backoff < 1.0) {
            return Err(ParamError::new(
                "adaptive backoff",
                self.backoff,
                "must be in (0, 1)",
            ));
        }
        if self.min == 0 || self.min > self.max {
            return Err(ParamError::new(
                "adaptive min",
                self.min,
                "must be at least 1 and at most max",
            ));
        }
        if !(self.min..=self.max).contains(&self.initial) {
            return Err(ParamError::new(
                "adaptive initial",
                self.initial,
                "must lie between min and max",
            ));
        }
        Ok(self)
    }
}

/// The limit's state.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveLimit {
    params: AimdParams,
    limit: f64,
}

impl AdaptiveLimit {
    pub fn new(params: AimdParams) -> AdaptiveLimit {
        AdaptiveLimit {
            params,
            limit: f64::from(params.initial),
        }
    }

    /// The limit now, whole requests.
    pub fn limit(&self) -> u32 {
        self.limit as u32
    }

    /// Whether an arrival finding `in_pod` requests (queued and in service) may enter.
    pub fn admits(&self, in_pod: u32) -> bool {
        in_pod < self.limit()
    }

    /// A request left after `latency_s` with `in_pod` requests in the pod at its start.
    pub fn on_sample(&mut self, latency_s: f64, in_pod: u32) {
        if latency_s > self.params.latency_s {
            self.shrink();
        } else if 2 * in_pod >= self.limit() {
            self.limit = (self.limit + 1.0).min(f64::from(self.params.max));
        }
    }

    /// A request was refused: the limit was met.
    pub fn on_refused(&mut self) {
        self.shrink();
    }

    fn shrink(&mut self) {
        self.limit = (self.limit * self.params.backoff).max(f64::from(self.params.min));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> AimdParams {
        AimdParams {
            initial: 10,
            min: 2,
            max: 12,
            latency_s: 0.1,
            backoff: 0.5,
        }
    }

    #[test]
    fn grows_by_one_while_pressed_and_up_to_max() {
        let mut l = AdaptiveLimit::new(params());
        l.on_sample(0.01, 4);
        assert_eq!(l.limit(), 10, "under half the limit in use: no evidence");
        for _ in 0..5 {
            l.on_sample(0.01, 6);
        }
        assert_eq!(l.limit(), 12);
        assert!(l.admits(11) && !l.admits(12));
    }

    #[test]
    fn a_late_sample_or_a_refusal_halves_it_down_to_min() {
        let mut l = AdaptiveLimit::new(params());
        l.on_sample(0.2, 1);
        assert_eq!(l.limit(), 5);
        l.on_refused();
        l.on_refused();
        assert_eq!(l.limit(), 2, "floored at min");
    }

    #[test]
    fn parameters_out_of_range_name_the_field() {
        let bad = AimdParams {
            backoff: 1.0,
            ..params()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "adaptive backoff: 1 must be in (0, 1)"
        );
        let bad = AimdParams {
            initial: 1,
            ..params()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .starts_with("adaptive initial")
        );
        assert!(AimdParams::for_service(0.01).validate().is_ok());
    }
}
