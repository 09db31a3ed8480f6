//! What a client does before it sends: [`ClientDefenses`] is the one description the
//! loadgen's flags, an experiment's `[client]` and the models read.

use serde::{Deserialize, Serialize};

use crate::ParamError;
use crate::breaker::BreakerParams;
use crate::throttle::ThrottleParams;

/// The AWS SDK retry mode a client runs ([`crate::quota`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QuotaMode {
    /// The retry quota.
    #[serde(rename = "aws-standard")]
    Standard,
    /// The retry quota and the CUBIC rate limiter.
    #[serde(rename = "aws-adaptive")]
    Adaptive,
}

impl QuotaMode {
    pub fn name(self) -> &'static str {
        match self {
            QuotaMode::Standard => "aws-standard",
            QuotaMode::Adaptive => "aws-adaptive",
        }
    }
}

/// The client-side defenses of one client; none by default.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientDefenses {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttling: Option<ThrottleParams>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerParams>,
}

impl ClientDefenses {
    pub fn is_none(&self) -> bool {
        *self == ClientDefenses::default()
    }

    /// Its times in run time when experiment time runs `s` times faster.
    pub fn time_scaled(self, s: f64) -> ClientDefenses {
        ClientDefenses {
            throttling: self.throttling.map(|t| ThrottleParams {
                window_s: t.window_s / s,
                ..t
            }),
            quota: self.quota,
            breaker: self.breaker.map(|b| BreakerParams {
                open_s: b.open_s / s,
                ..b
            }),
        }
    }

    pub fn validate(self) -> Result<ClientDefenses, ParamError> {
        if let Some(t) = self.throttling {
            t.validate()?;
        }
        if let Some(b) = self.breaker {
            b.validate()?;
        }
        Ok(self)
    }
}

impl std::fmt::Display for ClientDefenses {
    /// One line for a person, `none` when there is nothing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.throttling {
            parts.push(format!("throttling (K {}, window {} s)", t.k, t.window_s));
        }
        if let Some(q) = self.quota {
            parts.push(q.name().to_string());
        }
        if let Some(b) = self.breaker {
            parts.push(format!(
                "breaker ({} failures, open {} s, {} probe{})",
                b.failures,
                b.open_s,
                b.probes,
                if b.probes == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}
