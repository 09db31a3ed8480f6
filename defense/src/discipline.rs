//! How a pod orders and sheds its queue. [`Discipline`] is the one description the pod's
//! `--discipline` flags, an experiment's `[service] discipline` and the models read.

use serde::{Deserialize, Serialize};

use crate::codel::CodelParams;
use crate::concurrency::AimdParams;
use crate::{ParamError, positive};

/// A pod's queue discipline. Every one serves at the pod's rate; they differ in which queued
/// request goes next, how many are served at once and which are refused.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Discipline {
    /// One at a time in arrival order (the trap's pod).
    #[default]
    Fifo,
    /// One at a time, the newest first: the oldest wait until the queue empties.
    Lifo,
    /// FIFO whose head is refused (503) while the queue has stayed above its target delay for
    /// an interval ([`crate::codel`]).
    Codel(CodelParams),
    /// FIFO that refuses an arrival at once (503) when `limit` requests already wait.
    Bounded { limit: u32 },
    /// Up to `limit` served at once, sharing the pod's rate equally (an event loop or a pool
    /// of `limit` threads on one core); the rest wait in arrival order.
    Sharing { limit: u32 },
    /// FIFO under an AIMD limit on the requests in the pod, queued or served; an arrival over
    /// the limit is refused at once (503) ([`crate::concurrency`]).
    Adaptive(AimdParams),
}

/// The names `--discipline` takes, one per [`Discipline`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisciplineKind {
    Fifo,
    Lifo,
    Codel,
    Bounded,
    Sharing,
    Adaptive,
}

impl DisciplineKind {
    pub const ALL: [DisciplineKind; 6] = [
        DisciplineKind::Fifo,
        DisciplineKind::Lifo,
        DisciplineKind::Codel,
        DisciplineKind::Bounded,
        DisciplineKind::Sharing,
        DisciplineKind::Adaptive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DisciplineKind::Fifo => "fifo",
            DisciplineKind::Lifo => "lifo",
            DisciplineKind::Codel => "codel",
            DisciplineKind::Bounded => "bounded",
            DisciplineKind::Sharing => "sharing",
            DisciplineKind::Adaptive => "adaptive",
        }
    }
}

impl std::fmt::Display for DisciplineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DisciplineKind {
    type Err = ParamError;
    fn from_str(s: &str) -> Result<Self, ParamError> {
        DisciplineKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                ParamError::new(
                    "discipline",
                    s,
                    "is none of fifo, lifo, codel, bounded, sharing, adaptive",
                )
            })
    }
}

impl Discipline {
    pub fn kind(&self) -> DisciplineKind {
        match self {
            Discipline::Fifo => DisciplineKind::Fifo,
            Discipline::Lifo => DisciplineKind::Lifo,
            Discipline::Codel(_) => DisciplineKind::Codel,
            Discipline::Bounded { .. } => DisciplineKind::Bounded,
            Discipline::Sharing { .. } => DisciplineKind::Sharing,
            Discipline::Adaptive(_) => DisciplineKind::Adaptive,
        }
    }

    /// The discipline of `kind` with its defaults for a pod whose mean service time is
    /// `mean_service_s`: CoDel's and the AIMD limit's times are in service times
    /// ([`CodelParams::for_service`], [`AimdParams::for_service`]); a bounded queue holds
    /// 50 requests, a sharing pod serves 8 at once.
    pub fn with_defaults(kind: DisciplineKind, mean_service_s: f64) -> Discipline {
        match kind {
            DisciplineKind::Fifo => Discipline::Fifo,
            DisciplineKind::Lifo => Discipline::Lifo,
            DisciplineKind::Codel => Discipline::Codel(CodelParams::for_service(mean_service_s)),
            DisciplineKind::Bounded => Discipline::Bounded { limit: 50 },
            DisciplineKind::Sharing => Discipline::Sharing { limit: 8 },
            DisciplineKind::Adaptive => {
                Discipline::Adaptive(AimdParams::for_service(mean_service_s))
            }
        }
    }

    /// Refuses work at once with a 503 instead of only letting it wait.
    pub fn refuses(&self) -> bool {
        matches!(
            self,
            Discipline::Codel(_) | Discipline::Bounded { .. } | Discipline::Adaptive(_)
        )
    }

    /// Its times `k` times longer, for pods whose service time is `k` times longer (a run's
    /// rate scale): CoDel's and the AIMD limit's times are in service times.
    pub fn stretched(self, k: f64) -> Discipline {
        match self {
            Discipline::Codel(c) => Discipline::Codel(CodelParams {
                target_s: c.target_s * k,
                interval_s: c.interval_s * k,
            }),
            Discipline::Adaptive(a) => Discipline::Adaptive(AimdParams {
                latency_s: a.latency_s * k,
                ..a
            }),
            other => other,
        }
    }

    /// Checks every parameter's range.
    pub fn validate(self) -> Result<Discipline, ParamError> {
        match self {
            Discipline::Codel(c) => {
                positive("codel target", c.target_s)?;
                positive("codel interval", c.interval_s)?;
            }
            Discipline::Bounded { limit } | Discipline::Sharing { limit } if limit == 0 => {
                return Err(ParamError::new("queue limit", limit, "must be at least 1"));
            }
            Discipline::Adaptive(a) => {
                a.validate()?;
            }
            _ => {}
        }
        Ok(self)
    }
}

impl std::fmt::Display for Discipline {
    /// One line for a person: the kind and its parameters.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Discipline::Fifo | Discipline::Lifo => write!(f, "{}", self.kind()),
            Discipline::Codel(c) => write!(
                f,
                "codel (target {} ms, interval {} ms)",
                ms(c.target_s),
                ms(c.interval_s)
            ),
            Discipline::Bounded { limit } => write!(f, "bounded (503 past {limit} waiting)"),
            Discipline::Sharing { limit } => write!(f, "sharing ({limit} served at once)"),
            Discipline::Adaptive(a) => write!(
                f,
                "adaptive (AIMD limit {}..{} from {}, latency {} ms, backoff {})",
                a.min,
                a.max,
                a.initial,
                ms(a.latency_s),
                a.backoff
            ),
        }
    }
}

fn ms(s: f64) -> String {
    let v = s * 1e3;
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        format!("{v:.1}")
    }
}

/// A queue discipline as a flag, a file or an experiment writes it: its kind and the parameters
/// given. The rest take [`Discipline::with_defaults`] for the pods' mean service time (which a
/// reader of files may not know yet: see [`DisciplineSpec::needs_service_time`]). The pod's
/// flags, an experiment's `discipline` and `check`'s stack file all resolve through it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DisciplineSpec {
    pub kind: DisciplineKind,
    pub target_s: Option<f64>,
    pub interval_s: Option<f64>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
    pub latency_s: Option<f64>,
    pub backoff: Option<f64>,
}

impl DisciplineSpec {
    /// A kind with its defaults.
    pub fn of(kind: DisciplineKind) -> DisciplineSpec {
        DisciplineSpec {
            kind,
            target_s: None,
            interval_s: None,
            limit: None,
            initial: None,
            min: None,
            max: None,
            latency_s: None,
            backoff: None,
        }
    }

    /// Whether a default left out is in service times (CoDel's times, the AIMD latency).
    pub fn needs_service_time(&self) -> bool {
        match self.kind {
            DisciplineKind::Codel => self.target_s.is_none() || self.interval_s.is_none(),
            DisciplineKind::Adaptive => self.latency_s.is_none(),
            _ => false,
        }
    }

    /// The discipline, given the pods' mean service time when [`Self::needs_service_time`];
    /// `Err` names the parameter out of range.
    pub fn resolve(&self, mean_service_s: Option<f64>) -> Result<Discipline, ParamError> {
        // NaN is never read: a kind whose defaults are in service times has them all given
        // when the time is unknown (the caller asks for it otherwise).
        let base = Discipline::with_defaults(self.kind, mean_service_s.unwrap_or(f64::NAN));
        let d = match base {
            Discipline::Codel(c) => Discipline::Codel(CodelParams {
                target_s: self.target_s.unwrap_or(c.target_s),
                interval_s: self.interval_s.unwrap_or(c.interval_s),
            }),
            Discipline::Bounded { limit } => Discipline::Bounded {
                limit: self.limit.unwrap_or(limit),
            },
            Discipline::Sharing { limit } => Discipline::Sharing {
                limit: self.limit.unwrap_or(limit),
            },
            Discipline::Adaptive(a) => Discipline::Adaptive(AimdParams {
                initial: self.initial.unwrap_or(a.initial),
                min: self.min.unwrap_or(a.min),
                max: self.max.unwrap_or(a.max),
                latency_s: self.latency_s.unwrap_or(a.latency_s),
                backoff: self.backoff.unwrap_or(a.backoff),
            }),
            other => other,
        };
        d.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_scale_with_the_service_time() {
        let d = Discipline::with_defaults(DisciplineKind::Codel, 0.010);
        assert_eq!(d.to_string(), "codel (target 50 ms, interval 1000 ms)");
        let d = Discipline::with_defaults(DisciplineKind::Codel, 0.020);
        assert_eq!(d.to_string(), "codel (target 100 ms, interval 2000 ms)");
        let d = Discipline::with_defaults(DisciplineKind::Codel, 0.010).stretched(2.0);
        assert_eq!(d.to_string(), "codel (target 100 ms, interval 2000 ms)");
        assert!(d.refuses() && !Discipline::Lifo.refuses());
    }

    #[test]
    fn kinds_read_back_and_bad_ones_name_the_field() {
        for k in DisciplineKind::ALL {
            assert_eq!(k.name().parse::<DisciplineKind>().unwrap(), k);
            assert_eq!(Discipline::with_defaults(k, 0.01).kind(), k);
        }
        let e = "random".parse::<DisciplineKind>().unwrap_err().to_string();
        assert!(e.starts_with("discipline: random is none of"), "{e}");
        let e = Discipline::Bounded { limit: 0 }
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(e, "queue limit: 0 must be at least 1");
    }

    #[test]
    fn serde_names_the_kind() {
        let d = Discipline::Bounded { limit: 20 };
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(j, r#"{"kind":"bounded","limit":20}"#);
        assert_eq!(serde_json::from_str::<Discipline>(&j).unwrap(), d);
        let c: Discipline =
            serde_json::from_str(r#"{"kind":"codel","target_s":0.05,"interval_s":1.0}"#).unwrap();
        assert_eq!(c.kind(), DisciplineKind::Codel);
    }
}
