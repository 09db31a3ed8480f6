//! The defenses teams deploy against retry storms, as pure rules: time comes in as `now`
//! (seconds from any fixed origin, non-decreasing) and nothing here reads a clock, draws a
//! random number or does I/O. The pod (`service --discipline`), the loadgen (its client
//! defenses) and the models (fluid and request level) all decide through these types, so a
//! prediction and a measurement apply one rule.
//!
//! Bottom up:
//! - [`discipline`]: how a pod orders and sheds its queue ([`Discipline`]), with
//!   [`codel`] (the drop rule) and [`concurrency`] (an AIMD limit on requests in the pod).
//! - [`client`]: what a client does before it sends ([`ClientDefenses`]), with [`throttle`]
//!   (the SRE book's adaptive throttling), [`quota`] (the AWS SDK's retry quota and its
//!   adaptive mode's rate limiter) and [`breaker`] (a consecutive-failure circuit breaker).

pub mod breaker;
pub mod client;
pub mod codel;
pub mod concurrency;
pub mod discipline;
pub mod quota;
pub mod throttle;

pub use breaker::{Breaker, BreakerParams};
pub use client::{ClientDefenses, QuotaMode};
pub use codel::{Codel, CodelParams};
pub use concurrency::{AdaptiveLimit, AimdParams};
pub use discipline::Discipline;
pub use quota::{AdaptiveRate, RetryQuota};
pub use throttle::{Throttle, ThrottleParams};

/// A value out of its range: names the field and the value, in one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {value} {expected}")]
pub struct ParamError {
    pub field: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl ParamError {
    pub(crate) fn new(field: &'static str, value: impl ToString, expected: &'static str) -> Self {
        ParamError {
            field,
            value: value.to_string(),
            expected,
        }
    }
}

/// `Ok(v)` if `v` is finite and above zero, else the field's error.
pub(crate) fn positive(field: &'static str, v: f64) -> Result<f64, ParamError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(ParamError::new(field, v, "must be a positive number"))
    }
}
