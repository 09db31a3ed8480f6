//! Experiments as data: F0-F10 as TOML files (built in, from `experiments/`), or ad hoc from flags.
//! A file has shared `[defaults]` and `[[cases]]` that override them; both resolve to a [`Scenario`]
//! whose times are seconds from the load event (spike or step start); the warm-up runs before 0.
//! Text values ([`Span`], [`Multiple`], [`Spike`], [`Backoff`]) have one parser each, `FromStr`,
//! which the command line's flags and the files' fields both go through.

use std::str::FromStr;
use std::time::Duration;

use kit_defense::breaker::BreakerParams;
use kit_defense::discipline::{DisciplineKind, DisciplineSpec};
use kit_defense::throttle::ThrottleParams;
pub use kit_defense::{ClientDefenses, Discipline, QuotaMode};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::control::{AutoscalerConfig, Control, CpuModel};
use crate::hpa::{
    Behavior, HpaError, HpaSpec, MetricSpec, Policy, PolicyKind, ScalingRules, SelectPolicy, Target,
};
use crate::metric::Signal;
use crate::outcome::Expect;

/// The built-in experiments, as shipped in `falsification/model/experiments/`; the suite is F1-F4
/// ([`SUITE`]), every claim's experiment [`CLAIMS`].
pub const BUILTIN: [(&str, &str); 15] = [
    ("F0", include_str!("../experiments/F0.toml")),
    (
        "F0-specimen",
        include_str!("../experiments/F0-specimen.toml"),
    ),
    ("F1", include_str!("../experiments/F1.toml")),
    ("F2", include_str!("../experiments/F2.toml")),
    ("F3", include_str!("../experiments/F3.toml")),
    ("F4", include_str!("../experiments/F4.toml")),
    ("F5", include_str!("../experiments/F5.toml")),
    (
        "F5-autoscaled",
        include_str!("../experiments/F5-autoscaled.toml"),
    ),
    ("F6", include_str!("../experiments/F6.toml")),
    (
        "F6-tolerance",
        include_str!("../experiments/F6-tolerance.toml"),
    ),
    ("F7", include_str!("../experiments/F7.toml")),
    ("F8", include_str!("../experiments/F8.toml")),
    ("F9", include_str!("../experiments/F9.toml")),
    ("F10", include_str!("../experiments/F10.toml")),
    ("F11", include_str!("../experiments/F11.toml")),
];

/// What `falsification suite` runs by default: the falsification suite of SPEC.
pub const SUITE: [&str; 4] = ["F1", "F2", "F3", "F4"];

/// What `falsification suite --all` runs: an experiment for every claim of the publication.
pub const CLAIMS: [&str; 10] = [
    "F0",
    "F1",
    "F2",
    "F3",
    "F4",
    "F5",
    "F5-autoscaled",
    "F6",
    "F7",
    "F8",
];

#[derive(Debug, Error)]
pub enum ExperimentError {
    #[error(
        "unknown experiment `{0}` (built in: {builtin}; or a path to a .toml file)",
        builtin = BUILTIN.iter().map(|(id, _)| *id).collect::<Vec<_>>().join(", ")
    )]
    Unknown(String),
    // The causes are part of the message (not `source`), so a chain printer does not repeat them.
    #[error("cannot read {path}: {detail}")]
    Read {
        path: String,
        detail: std::io::Error,
    },
    #[error(
        "{name} is not a valid experiment file: {}{message}",
        location(.line, .field)
    )]
    Parse {
        name: String,
        /// 1-based.
        line: Option<usize>,
        /// The key whose value is bad.
        field: Option<String>,
        message: String,
    },
    #[error("{context}: field `{field}`: {message}, got `{value}`")]
    Field {
        context: String,
        field: &'static str,
        value: String,
        message: String,
    },
}

fn field_err(
    context: &str,
    field: &'static str,
    value: impl ToString,
    message: &str,
) -> ExperimentError {
    ExperimentError::Field {
        context: context.to_string(),
        field,
        value: value.to_string(),
        message: message.to_string(),
    }
}

/// `line 9: field `timeout`: ` as far as known.
fn location(line: &Option<usize>, field: &Option<String>) -> String {
    let mut at = String::new();
    if let Some(line) = line {
        at += &format!("line {line}: ");
    }
    if let Some(field) = field {
        at += &format!("field `{field}`: ");
    }
    at
}

/// A text value that does not parse: the value and what was expected, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("`{value}` is not {expected}{detail}")]
pub struct ValueError {
    value: String,
    expected: &'static str,
    /// The underlying parser's reason, ` (...)`, or empty.
    detail: String,
}

impl ValueError {
    fn new(value: &str, expected: &'static str) -> ValueError {
        ValueError {
            value: value.to_string(),
            expected,
            detail: String::new(),
        }
    }
}

/// Text values deserialize (from TOML) through their one parser, `FromStr`.
macro_rules! deserialize_from_str {
    ($($t:ty),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}

deserialize_from_str!(Span, Multiple, Spike, Backoff);

/// A non-negative duration, written like `10s`, `1500ms` or `2m` (humantime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(Duration);

impl Span {
    pub const fn from_secs(s: u64) -> Span {
        Span(Duration::from_secs(s))
    }

    pub fn secs(self) -> f64 {
        self.0.as_secs_f64()
    }
}

impl From<Duration> for Span {
    fn from(d: Duration) -> Span {
        Span(d)
    }
}

impl FromStr for Span {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Span, ValueError> {
        humantime::parse_duration(text.trim())
            .map(Span)
            .map_err(|e| ValueError {
                detail: format!(" ({e})"),
                ..ValueError::new(text, "a duration like 10s, 1500ms or 2m")
            })
    }
}

/// A positive multiple of the base load, written like `5x` or `2.5x`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Multiple(f64);

impl Multiple {
    const EXPECTED: &str = "a multiple like 5x";

    pub fn new(k: f64) -> Result<Multiple, ValueError> {
        if k > 0.0 && k.is_finite() {
            Ok(Multiple(k))
        } else {
            Err(ValueError::new(&format!("{k}x"), Multiple::EXPECTED))
        }
    }

    fn get(self) -> f64 {
        self.0
    }
}

impl FromStr for Multiple {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Multiple, ValueError> {
        let bad = || ValueError::new(text, Multiple::EXPECTED);
        let k = text.trim().strip_suffix('x').ok_or_else(bad)?;
        Multiple::new(k.parse().map_err(|_| bad())?).map_err(|_| bad())
    }
}

/// A spike: `k` times the base load for a positive `length`, written `MULTIPLExDURATION` like
/// `5x300s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spike {
    k: Multiple,
    length: Span,
}

impl Spike {
    const EXPECTED: &str = "a spike MULTIPLExDURATION like 5x300s";

    pub fn new(k: Multiple, length: Span) -> Result<Spike, ValueError> {
        if length.0.is_zero() {
            return Err(ValueError {
                detail: " (its duration must be positive)".into(),
                ..ValueError::new(&format!("{}x{}s", k.0, length.secs()), Spike::EXPECTED)
            });
        }
        Ok(Spike { k, length })
    }

    pub fn k(self) -> f64 {
        self.k.0
    }

    pub fn length(self) -> Span {
        self.length
    }
}

impl FromStr for Spike {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Spike, ValueError> {
        let bad = || ValueError::new(text, Spike::EXPECTED);
        let (k, length) = text.trim().split_once('x').ok_or_else(bad)?;
        let k = format!("{k}x").parse().map_err(|_| bad())?;
        let length = length.parse().map_err(|_| bad())?;
        Spike::new(k, length).map_err(|e| ValueError {
            value: text.to_string(),
            ..e
        })
    }
}

/// The load event at time 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum LoadEvent {
    None,
    /// Demand `k` times the base for `duration_s`, then back.
    Spike {
        k: f64,
        duration_s: f64,
    },
    /// Demand `k` times the base from 0 on.
    Step {
        k: f64,
    },
}

impl std::fmt::Display for LoadEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadEvent::None => write!(f, "steady load"),
            LoadEvent::Spike { k, duration_s } => write!(f, "{k}x spike for {duration_s} s"),
            LoadEvent::Step { k } => write!(f, "sustained {k}x step"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Abandoned {
    /// Servers finish work whose client has gone (the debt exists).
    Serve,
    /// Servers drop it (deadline propagation or cancellation): the reversal condition.
    Drop,
}

impl Abandoned {
    /// What pods do with abandoned work, as a verb: "finish" or "drop".
    pub fn verb(&self) -> &'static str {
        match self {
            Abandoned::Serve => "finish",
            Abandoned::Drop => "drop",
        }
    }
}

/// The pods' service-time distribution: one implementation for the pods and the request-level
/// model. Written `service = "exponential"` (a shape with a fixed CV) or
/// `service = { shape = "pareto", cv = 3 }`.
pub use kit_dist::{ServiceTime, Shape as ServiceShape};

/// `service` as files write it: a shape's name, or the shape with its CV.
#[derive(Debug, Clone, Copy)]
pub enum ServiceParams {
    Shape(ServiceShape),
    WithCv(ShapeWithCv),
}

/// By hand rather than `untagged`, so a misspelt shape is named in the error (serde's untagged
/// error says only that no variant matched).
impl<'de> Deserialize<'de> for ServiceParams {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ServiceParams;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a shape's name or { shape = NAME, cv = CV }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ServiceParams, E> {
                v.parse().map(ServiceParams::Shape).map_err(E::custom)
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                m: M,
            ) -> Result<ServiceParams, M::Error> {
                ShapeWithCv::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(ServiceParams::WithCv)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `service = { shape = "pareto", cv = 3.0 }`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeWithCv {
    pub shape: ServiceShape,
    pub cv: Option<f64>,
}

impl ServiceParams {
    fn resolve(self, context: &str) -> Result<ServiceTime, ExperimentError> {
        let (shape, cv) = match self {
            ServiceParams::Shape(shape) => (shape, None),
            ServiceParams::WithCv(ShapeWithCv { shape, cv }) => (shape, cv),
        };
        ServiceTime::new(shape, cv).map_err(|e| {
            field_err(
                context,
                "service",
                cv.map_or(shape.to_string(), |cv| format!("{shape} cv {cv}")),
                &e.to_string(),
            )
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// One FIFO served by every ready pod.
    Pooled,
    /// A FIFO per pod, arrivals spread evenly (fluid) or at random (request level) over ready pods.
    PerPod,
}

/// How attempts reach the pods (per pod; a pooled queue has no routing).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// The clients' keep-alive pool: an attempt goes on the connection answered last, else on a
    /// new connection to a ready pod at random (a Kubernetes Service picks per connection).
    #[default]
    KeepAlive,
    /// A proxy's per-request round robin over the ready pods (HAProxy `balance roundrobin`).
    RoundRobin,
    /// A proxy sends each request to the pod with the fewest requests in flight from its side
    /// (HAProxy `balance leastconn`): an attempt counts until it is answered or its client leaves.
    LeastConnections,
}

impl std::fmt::Display for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Routing::KeepAlive => "keep-alive",
            Routing::RoundRobin => "round-robin",
            Routing::LeastConnections => "least-connections",
        })
    }
}

/// Bursts on top of the demand: an on-off Markov-modulated Poisson process. Off for an exponential
/// `every` on average (seeded), then on for an exponential `length` on average, multiplying the
/// demand by `factor` while on (so one burst per `every + length` on average). The timeline is
/// drawn once from `seed`, so the models and the loadgen's schedule see the same bursts.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstParams {
    pub factor: f64,
    pub length: Span,
    pub every: Span,
    #[serde(default)]
    pub seed: u64,
}

/// The resolved bursts: their timeline in experiment seconds, `[start, end)` each, ascending.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bursts {
    pub factor: f64,
    pub length_s: f64,
    pub every_s: f64,
    pub seed: u64,
    pub windows: Vec<(f64, f64)>,
}

impl Bursts {
    /// Draws the timeline over `[from, to)`.
    fn draw(b: &BurstParams, from: f64, to: f64) -> Bursts {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(b.seed);
        let (length_s, every_s) = (b.length.secs(), b.every.secs());
        let mut windows = Vec::new();
        let mut t = from;
        loop {
            t += every_s * rng.sample::<f64, _>(rand_distr::Exp1);
            if t >= to {
                break;
            }
            let end = (t + length_s * rng.sample::<f64, _>(rand_distr::Exp1)).min(to);
            windows.push((t, end));
            t = end;
        }
        Bursts {
            factor: b.factor,
            length_s,
            every_s,
            seed: b.seed,
            windows,
        }
    }

    fn factor_at(&self, t: f64) -> f64 {
        let i = self.windows.partition_point(|w| w.1 <= t);
        match self.windows.get(i) {
            Some(&(start, _)) if start <= t => self.factor,
            _ => 1.0,
        }
    }
}

/// First attempts replayed from a trace file (`kit_dist::trace`'s format: send times in seconds
/// from the start of the run, which is the start of the warm-up). The loadgen replays the file
/// itself (`--trace`, sped up by the time scale, thinned by the rate scale); the request-level
/// model replays the same times, the fluid models its rate per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArrivalTrace {
    /// The file, as the loadgen reads it.
    pub path: String,
    pub arrivals: usize,
    /// Send times in this scenario's seconds from the load event (`t - warm-up`).
    #[serde(skip)]
    pub times: std::sync::Arc<[f64]>,
    /// The fraction of arrivals replayed (a rate-scaled run's thinning), and the time scale the
    /// file's times are divided by.
    pub sample: f64,
    pub speed: f64,
}

impl ArrivalTrace {
    /// Reads `path` for a scenario whose warm-up is `warmup_s` (the file's times are from the
    /// start of the warm-up).
    fn read(path: &str, warmup_s: f64) -> Result<ArrivalTrace, kit_dist::trace::TraceError> {
        let times: Vec<f64> = kit_dist::trace::read(std::path::Path::new(path))?
            .into_iter()
            .map(|t| t - warmup_s)
            .collect();
        Ok(ArrivalTrace {
            path: path.to_string(),
            arrivals: times.len(),
            times: times.into(),
            sample: 1.0,
            speed: 1.0,
        })
    }

    /// Whether arrival `index` is replayed (the loadgen's seeded thinning, seed 0).
    pub(crate) fn keeps(&self, index: usize) -> bool {
        kit_dist::trace::sampled(0, index as u64, self.sample)
    }

    /// The replayed first attempts per second around `t`: the arrivals in the second (of this
    /// scenario's time) that holds `t`, times the thinning.
    fn rate_at(&self, t: f64, second: f64) -> f64 {
        let from = (t / second).floor() * second;
        let lo = self.times.partition_point(|&x| x < from);
        let hi = self.times.partition_point(|&x| x < from + second);
        (hi - lo) as f64 * self.sample / second
    }

    /// The mean rate over the trace's span.
    fn mean_rate(&self) -> f64 {
        match (self.times.first(), self.times.last()) {
            (Some(a), Some(z)) if z > a => self.times.len() as f64 / (z - a),
            _ => 0.0,
        }
    }
}

/// Which signal(s) the HPA scales on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HpaSignal {
    First,
    Ingress,
    Paired,
    /// The pods' CPU, a Resource metric with a Utilization target (through metrics-server).
    Cpu,
}

/// Retry budget: retries per second at most `ratio` x first attempts per second (plus `min_per_s`),
/// over a sliding `ttl_s` (request level; the fluid caps the instantaneous flow).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RetryBudget {
    pub ratio: f64,
    pub min_per_s: f64,
    pub ttl_s: f64,
}

/// Delay before retry `n` (1-based), on top of the timeout: `min(cap, base 2^(n-1))`, no jitter.
/// Written `none` or `exp:BASE,CAP` like `exp:1s,8s` (flags and files); records show its seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Backoff {
    pub base_s: f64,
    pub cap_s: f64,
}

impl Backoff {
    /// Each retry right at its attempt's timeout.
    const NONE: Backoff = Backoff {
        base_s: 0.0,
        cap_s: 0.0,
    };
}

impl FromStr for Backoff {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Backoff, ValueError> {
        if text.trim() == "none" {
            return Ok(Backoff::NONE);
        }
        let bad = || ValueError::new(text, "a backoff `none` or exp:BASE,CAP like exp:1s,8s");
        let (base, cap) = text
            .trim()
            .strip_prefix("exp:")
            .and_then(|r| r.split_once(','))
            .ok_or_else(bad)?;
        let secs = |t: &str| t.parse().map(Span::secs).map_err(|_| bad());
        Ok(Backoff {
            base_s: secs(base)?,
            cap_s: secs(cap)?,
        })
    }
}

/// The proxy between the clients and the pods (F5, retry stacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum GatewayKind {
    /// HAProxy 2.6: `retries N`, `retry-on response-timeout conn-failure`, `timeout server`.
    Haproxy,
    /// nginx 1.22: `proxy_next_upstream timeout error`, `proxy_next_upstream_tries`,
    /// `proxy_read_timeout`; each try goes to the next server.
    Nginx,
}

impl std::fmt::Display for GatewayKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GatewayKind::Haproxy => "haproxy",
            GatewayKind::Nginx => "nginx",
        })
    }
}

/// A gateway that retries on its own: each client attempt becomes up to `retries + 1` attempts at
/// the pods, one every `timeout_s` (the gateway retries at once when a server times out).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gateway {
    pub kind: GatewayKind,
    pub retries: u32,
    pub timeout_s: f64,
    /// Whether the gateway stops retrying when the client has gone. Measured: HAProxy 2.6 does only
    /// with `option abortonclose` (off by default); nginx does (`proxy_ignore_client_abort off`).
    pub abort_on_close: bool,
    /// How it picks a pod for each request.
    pub balance: Balance,
}

/// A proxy's choice of pod per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// HAProxy `balance roundrobin`; nginx's default.
    RoundRobin,
    /// HAProxy `balance leastconn`; nginx `least_conn`.
    LeastConnections,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HpaSetup {
    pub signal: HpaSignal,
    /// Target utilization `u*`: the AverageValue target is `u* x rate_per_pod` per pod.
    pub target_utilization: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub tolerance: f64,
    pub sync_period_s: f64,
    /// Time of the first sync at or after the load event (its phase against the event).
    pub sync_phase_s: f64,
    pub metric_window_s: f64,
    pub scrape_interval_s: f64,
    /// From the scale decision to the new pod serving.
    pub dead_time_s: f64,
    /// Each ordered pod's own delay, in order of ordering: a measured run's, when the runner
    /// re-predicts what ran; empty before a run (every pod waits `dead_time_s`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub measured_dead_times_s: Vec<f64>,
    pub behavior: Behavior,
    /// The CPU signal: the pods' limit over their request, `l / r`. A pod busy all the time uses its
    /// limit, so utilization = busy fraction x `l / r`: it saturates there.
    pub cpu_limit_ratio: f64,
    /// metrics-server's resolution: how often it scrapes, and the window of each CPU sample.
    pub cpu_window_s: f64,
    /// The pod's HTTP path's CPU per arrival as a share of one request's CPU budget (`h mu / l`,
    /// [`crate::control::CpuModel::http_share`]); 0 unless measured.
    pub http_cpu_share: f64,
    /// The controller flags the CPU signal reads (upstream defaults 5 min and 30 s).
    pub cpu_initialization_period_s: f64,
    pub initial_readiness_delay_s: f64,
}

/// A fault the runner injects into a case (F9), in the case's time from the load event.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Fault {
    /// The meter stops answering at `at_s` (its process, or its pod, is gone) and a new one starts
    /// `length_s` later, with no history: the HPA reads no external metric meanwhile.
    MeterOutage { at_s: f64, length_s: f64 },
    /// The meter's pods stop being scraped at `at_s` (its discovery lists none: the headless
    /// Service selects no pod) and are listed again `length_s` later. The meter keeps answering
    /// and says why it has no value (503, never a zero it did not measure); its rates start over
    /// with no history, so the HPA reads no external metric until it holds a window again.
    MeterStale { at_s: f64, length_s: f64 },
    /// The oldest ready service pod is killed at `at_s`: its queue, and the debt in it, is gone;
    /// its ReplicaSet orders a replacement, ready a dead time later.
    PodKilled { at_s: f64 },
    /// The clients run as `shards` loadgen processes, each sending an equal share of the
    /// demand, and the last one dies at `at_s` and is not restarted: from then on the service
    /// sees `(shards - 1) / shards` of the demand, and what the dead shard had in flight has no
    /// outcome anyone recorded.
    ShardDied { at_s: f64, shards: u32 },
}

/// What the runner does to a running case, and when (see [`Scenario::actions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    MeterDown,
    MeterUp,
    /// The meter's discovery lists no pod (the headless Service selects none).
    UnlistPods,
    /// It lists the service's pods again.
    ListPods,
    KillPod,
    /// The last loadgen shard is killed and not restarted (a fault, F9).
    KillShard,
    /// The HPA's `minReplicas` set to this (a remedy, F10).
    SetMinReplicas(u32),
    /// A rolling update of the service's pods to a template that finishes or drops abandoned
    /// work (a remedy, F10): `kubectl rollout restart`, or a changed flag.
    RollOut(Abandoned),
}

/// What an operator does to get a trapped service out (F10), in the case's time from the load
/// event.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Remedy {
    /// The HPA's `minReplicas` raised to `min` at `at_s`, and set back `length_s` later.
    RaiseMin { at_s: f64, min: u32, length_s: f64 },
    /// A rolling update of the service's Deployment at `at_s`, with Kubernetes' default
    /// strategy (25% surge, 25% unavailable): each old pod is terminated with its queue and its
    /// replacement serves a dead time after it was ordered. The new pods finish abandoned work
    /// (`rolling-restart`: the debt goes, the behaviour stays) or drop it (`switch-to-drop`).
    RollOut { at_s: f64, abandoned: Abandoned },
}

impl Remedy {
    /// When `minReplicas` is raised, `[from, to)`, and to what; `None` for another remedy.
    pub fn raised_min(&self) -> Option<(f64, f64, u32)> {
        match *self {
            Remedy::RaiseMin {
                at_s,
                min,
                length_s,
            } => Some((at_s, at_s + length_s, min)),
            Remedy::RollOut { .. } => None,
        }
    }

    /// When the pods are rolled out, and what the new ones do with abandoned work.
    pub fn rollout(&self) -> Option<(f64, Abandoned)> {
        match *self {
            Remedy::RollOut { at_s, abandoned } => Some((at_s, abandoned)),
            Remedy::RaiseMin { .. } => None,
        }
    }

    /// The same remedy `s` times faster.
    pub fn time_scaled(&self, s: f64) -> Remedy {
        match *self {
            Remedy::RaiseMin {
                at_s,
                min,
                length_s,
            } => Remedy::RaiseMin {
                at_s: at_s / s,
                min,
                length_s: length_s / s,
            },
            Remedy::RollOut { at_s, abandoned } => Remedy::RollOut {
                at_s: at_s / s,
                abandoned,
            },
        }
    }
}

impl std::fmt::Display for Remedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Remedy::RaiseMin {
                at_s,
                min,
                length_s,
            } => write!(
                f,
                "minReplicas raised to {min} {at_s:.0} s after the load event and set back {length_s:.0} s later"
            ),
            Remedy::RollOut {
                at_s,
                abandoned: Abandoned::Serve,
            } => write!(
                f,
                "a rolling restart of the pods {at_s:.0} s after the load event (25% surge, 25% unavailable)"
            ),
            Remedy::RollOut {
                at_s,
                abandoned: Abandoned::Drop,
            } => write!(
                f,
                "the pods rolled out to drop abandoned work {at_s:.0} s after the load event (25% surge, 25% unavailable)"
            ),
        }
    }
}

impl Fault {
    /// The runner's steps, in time order.
    fn steps(&self) -> Vec<(f64, Action)> {
        match *self {
            Fault::MeterOutage { at_s, length_s } => vec![
                (at_s, Action::MeterDown),
                (at_s + length_s, Action::MeterUp),
            ],
            Fault::MeterStale { at_s, length_s } => vec![
                (at_s, Action::UnlistPods),
                (at_s + length_s, Action::ListPods),
            ],
            Fault::PodKilled { at_s } => vec![(at_s, Action::KillPod)],
            Fault::ShardDied { at_s, .. } => vec![(at_s, Action::KillShard)],
        }
    }

    /// When the meter measures nothing, `[from, to)`: it is down, or it scrapes no pod. To the
    /// HPA, and so to the models, both are the same: no external metric, and no history after.
    pub fn meter_outage(&self) -> Option<(f64, f64)> {
        match *self {
            Fault::MeterOutage { at_s, length_s } | Fault::MeterStale { at_s, length_s } => {
                Some((at_s, at_s + length_s))
            }
            Fault::PodKilled { .. } | Fault::ShardDied { .. } => None,
        }
    }

    /// The share of the scheduled demand the clients still send at `t`: all of it, or after a
    /// shard died, the live shards' share.
    fn demand_alive(&self, t: f64) -> f64 {
        match *self {
            Fault::ShardDied { at_s, shards } if t >= at_s => {
                f64::from(shards - 1) / f64::from(shards)
            }
            _ => 1.0,
        }
    }

    /// When a loadgen shard dies and how many shards the clients run as, if this kills one.
    pub fn shard_death(&self) -> Option<(f64, u32)> {
        match *self {
            Fault::ShardDied { at_s, shards } => Some((at_s, shards)),
            _ => None,
        }
    }

    /// What happened to the meter, for the record's prose.
    pub fn meter_state(&self) -> &'static str {
        match self {
            Fault::MeterOutage { .. } => "the meter was down",
            Fault::MeterStale { .. } => "the meter scraped no pod",
            Fault::PodKilled { .. } | Fault::ShardDied { .. } => "",
        }
    }

    /// When a pod is killed, if this kills one.
    pub fn pod_killed(&self) -> Option<f64> {
        match *self {
            Fault::PodKilled { at_s } => Some(at_s),
            Fault::MeterOutage { .. } | Fault::MeterStale { .. } | Fault::ShardDied { .. } => None,
        }
    }

    /// The same fault `s` times faster.
    pub fn time_scaled(&self, s: f64) -> Fault {
        match *self {
            Fault::MeterOutage { at_s, length_s } => Fault::MeterOutage {
                at_s: at_s / s,
                length_s: length_s / s,
            },
            Fault::MeterStale { at_s, length_s } => Fault::MeterStale {
                at_s: at_s / s,
                length_s: length_s / s,
            },
            Fault::PodKilled { at_s } => Fault::PodKilled { at_s: at_s / s },
            Fault::ShardDied { at_s, shards } => Fault::ShardDied {
                at_s: at_s / s,
                shards,
            },
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::MeterOutage { at_s, length_s } => write!(
                f,
                "the meter stops answering {at_s:.0} s after the load event and a new one starts {length_s:.0} s later"
            ),
            Fault::MeterStale { at_s, length_s } => write!(
                f,
                "the meter's discovery lists no pod from {at_s:.0} s after the load event, and lists them again {length_s:.0} s later"
            ),
            Fault::PodKilled { at_s } => {
                write!(
                    f,
                    "the oldest ready pod is killed {at_s:.0} s after the load event"
                )
            }
            Fault::ShardDied { at_s, shards } => write!(
                f,
                "the last of {shards} loadgen shards is killed {at_s:.0} s after the load event and not restarted"
            ),
        }
    }
}

/// One fully resolved case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub pods: u32,
    pub rate_per_pod: f64,
    /// Base first-attempt utilization of the initial pods.
    pub rho: f64,
    pub event: LoadEvent,
    pub timeout_s: f64,
    pub retries: u32,
    pub backoff: Backoff,
    pub retry_budget: Option<RetryBudget>,
    /// A retrying proxy between the clients (`timeout_s`, `retries`, `retry_budget`) and the pods.
    pub gateway: Option<Gateway>,
    pub abandoned: Abandoned,
    pub service: ServiceTime,
    /// How each pod orders and sheds its queue (F11; FIFO elsewhere).
    pub discipline: Discipline,
    /// What the clients do before they send (F11; nothing elsewhere).
    pub client: ClientDefenses,
    /// Topology of the request-level model (the fluid reports both).
    pub topology: Topology,
    /// How attempts reach the pods in the per-pod models and on a cluster.
    pub routing: Routing,
    /// Bursts on top of the demand, if any.
    pub bursts: Option<Bursts>,
    /// First attempts replayed from a trace instead of the Poisson demand, if any.
    pub trace: Option<ArrivalTrace>,
    pub hpa: Option<HpaSetup>,
    /// A fault injected during the run (F9), if any.
    pub fault: Option<Fault>,
    /// A remedy applied during the run (F10), if any.
    pub remedy: Option<Remedy>,
    pub warmup_s: f64,
    /// Accounting window after the event: lost demand counts requests started in `[0, horizon)`.
    pub horizon_s: f64,
    /// "Backlog drained": the wait is at or below this.
    pub drained_wait_s: f64,
    pub seeds: Vec<u64>,
    pub fluid_dt_s: f64,
    pub time_scale: f64,
}

impl Scenario {
    /// Base first-attempt demand per second.
    pub fn base_rate(&self) -> f64 {
        self.rho * f64::from(self.pods) * self.rate_per_pod
    }

    /// First-attempt demand at time `t`.
    pub fn demand(&self, t: f64) -> f64 {
        self.scheduled_demand(t) * self.fault.map_or(1.0, |f| f.demand_alive(t))
    }

    /// The first-attempt rate the clients are told to send at `t`, all shards together: the
    /// schedule the loadgen gets. [`Scenario::demand`] is what reaches the service.
    pub fn scheduled_demand(&self, t: f64) -> f64 {
        if let Some(trace) = &self.trace {
            return trace.rate_at(t, 1.0 / self.time_scale);
        }
        let k = match self.event {
            LoadEvent::Spike { k, duration_s } if (0.0..duration_s).contains(&t) => k,
            LoadEvent::Step { k } if t >= 0.0 => k,
            _ => 1.0,
        };
        let burst = self.bursts.as_ref().map_or(1.0, |b| b.factor_at(t));
        k * burst * self.base_rate()
    }

    /// Times at which the demand changes, ascending.
    pub fn demand_changes(&self) -> Vec<f64> {
        let mut changes = match self.event {
            LoadEvent::None => vec![],
            LoadEvent::Spike { duration_s, .. } => vec![0.0, duration_s],
            LoadEvent::Step { .. } => vec![0.0],
        };
        if let Some(b) = &self.bursts {
            changes.extend(b.windows.iter().flat_map(|&(a, z)| [a, z]));
        }
        changes.extend(self.fault.and_then(|f| f.shard_death()).map(|(at, _)| at));
        changes.sort_by(f64::total_cmp);
        changes.dedup();
        changes
    }

    /// Recovery is counted from the end of a spike, or from the start of a step.
    pub fn recovery_reference(&self) -> f64 {
        match self.event {
            LoadEvent::Spike { duration_s, .. } => duration_s,
            _ => 0.0,
        }
    }

    /// The proxy in front of the pods: the retrying gateway, or, for a proxy's routing, an HAProxy
    /// that only routes (no retries, a server timeout the clients always reach first, and it stops
    /// when its client leaves), so the models' chain of attempts is the clients' alone.
    pub fn proxy(&self) -> Option<Gateway> {
        let balance = match self.routing {
            _ if self.gateway.is_some() => return self.gateway,
            Routing::KeepAlive => return None,
            Routing::RoundRobin => Balance::RoundRobin,
            Routing::LeastConnections => Balance::LeastConnections,
        };
        Some(Gateway {
            kind: GatewayKind::Haproxy,
            retries: 0,
            timeout_s: 2.0 * self.timeout_s,
            abort_on_close: true,
            balance,
        })
    }

    /// Attempts a client attempt becomes at the pods: `gateway.retries + 1` when the gateway
    /// retries through the client's whole timeout or ignores the client leaving, else the tries it
    /// starts before the client leaves.
    pub fn gateway_tries(&self) -> u32 {
        self.gateway.map_or(1, |g| {
            crate::laws::gateway_tries(g.retries, g.timeout_s, self.timeout_s, g.abort_on_close)
        })
    }

    /// The models chain a request's attempts at the pods: attempt `n + 1` follows attempt `n`'s
    /// timeout. Index `n` of that chain is client attempt `n / tries`, gateway try `n % tries`.
    pub(crate) fn pod_retries(&self) -> u32 {
        (self.retries + 1) * self.gateway_tries() - 1
    }

    /// How long a client attempt lasts when it fails: its timeout, or the gateway's 504 after its
    /// last try timed out if that comes first.
    pub fn client_attempt_s(&self) -> f64 {
        self.gateway.map_or(self.timeout_s, |g| {
            self.timeout_s.min(f64::from(g.retries + 1) * g.timeout_s)
        })
    }

    /// How long the pod-facing side waits for an attempt: the gateway's server timeout, or the
    /// client's own timeout without a gateway.
    pub fn pod_timeout_s(&self) -> f64 {
        self.gateway.map_or(self.timeout_s, |g| g.timeout_s)
    }

    /// Whether pod attempt `n` (1-based in the chain) is a client's retry: the attempts a client's
    /// retry budget counts and its backoff delays.
    pub(crate) fn is_client_retry(&self, n: u32) -> bool {
        n > 0 && n.is_multiple_of(self.gateway_tries())
    }

    /// From a timed-out attempt `n - 1` to attempt `n` (1-based) arriving at the pods: the pod
    /// timeout, plus the client's backoff when `n` is a client retry (a gateway retries at once).
    pub(crate) fn retry_delay(&self, n: u32) -> f64 {
        if !self.is_client_retry(n) {
            return self.pod_timeout_s();
        }
        let i = n / self.gateway_tries();
        let backoff = (self.backoff.base_s * 2f64.powi(i as i32 - 1)).min(self.backoff.cap_s);
        self.pod_timeout_s() + backoff
    }

    /// From a request's first attempt to its attempt `n` at the pods.
    pub(crate) fn attempt_offset(&self, n: u32) -> f64 {
        (1..=n).map(|i| self.retry_delay(i)).sum()
    }

    /// From a request's first attempt to its final outcome (its last attempt timed out).
    pub fn settled_s(&self) -> f64 {
        self.attempt_offset(self.pod_retries()) + self.pod_timeout_s()
    }

    /// The models run until every request started within the horizon has its outcome.
    pub fn end(&self) -> f64 {
        self.horizon_s + self.settled_s()
    }

    /// Amplification `A` of the configured retry stack: the client's layer times the gateway's
    /// tries per client attempt.
    pub fn amplification(&self) -> f64 {
        crate::laws::stacked_amplification(&[
            crate::laws::layer_amplification(self.retries, self.retry_budget.map(|b| b.ratio)),
            f64::from(self.gateway_tries()),
        ])
    }

    /// What a pod does with abandoned work: the case's, or, for a pod of a rolling update
    /// (`rolled`), the new template's.
    pub fn pod_abandoned(&self, rolled: bool) -> Abandoned {
        match self.remedy.and_then(|r| r.rollout()) {
            Some((_, new)) if rolled => new,
            _ => self.abandoned,
        }
    }

    /// What the runner does during the case (the fault's and the remedy's actions), in time
    /// order.
    pub fn actions(&self) -> Vec<(f64, Action)> {
        let mut actions = self.fault.map(|f| f.steps()).unwrap_or_default();
        if let (Some((from, to, min)), Some(h)) =
            (self.remedy.and_then(|r| r.raised_min()), &self.hpa)
        {
            actions.push((from, Action::SetMinReplicas(min)));
            actions.push((to, Action::SetMinReplicas(h.min_replicas)));
        }
        if let Some((at, abandoned)) = self.remedy.and_then(|r| r.rollout()) {
            actions.push((at, Action::RollOut(abandoned)));
        }
        actions.sort_by(|a, b| a.0.total_cmp(&b.0));
        actions
    }

    /// The models' capacity from `start`: the autoscaler's, else the fixed pods, with the
    /// case's pod-killing fault, if any.
    pub(crate) fn control(&self, start: f64) -> Result<Control, HpaError> {
        let control = match self.autoscaler() {
            Some(config) => Control::autoscaled(&config, self.pods, start)?,
            None => Control::fixed(self.pods),
        };
        Ok(control.killing_at(self.fault.and_then(|f| f.pod_killed())))
    }

    /// The autoscaler wiring for the control module.
    pub fn autoscaler(&self) -> Option<AutoscalerConfig> {
        let h = self.hpa.as_ref()?;
        let per_pod = h.target_utilization * self.rate_per_pod;
        let metric = |name: &str| MetricSpec {
            name: name.into(),
            target: Target::AverageValue(per_pod),
        };
        let (metrics, signals) = match h.signal {
            HpaSignal::First => (
                vec![metric("first_attempt_rate")],
                vec![Signal::FirstAttempt],
            ),
            HpaSignal::Ingress => (vec![metric("ingress_rate")], vec![Signal::Ingress]),
            HpaSignal::Paired => (
                vec![metric("first_attempt_rate"), metric("ingress_rate")],
                vec![Signal::FirstAttempt, Signal::Ingress],
            ),
            HpaSignal::Cpu => (
                vec![MetricSpec {
                    name: "cpu".into(),
                    target: Target::Utilization((h.target_utilization * 100.0).round() as i32),
                }],
                vec![Signal::Cpu],
            ),
        };
        Some(AutoscalerConfig {
            spec: HpaSpec {
                min_replicas: h.min_replicas as i32,
                max_replicas: h.max_replicas as i32,
                metrics,
                behavior: h.behavior.clone(),
                tolerance: h.tolerance,
                cpu_initialization_period_s: h.cpu_initialization_period_s,
                initial_readiness_delay_s: h.initial_readiness_delay_s,
            },
            signals,
            sync_period_s: h.sync_period_s,
            sync_at: h.sync_phase_s,
            metric_window_s: h.metric_window_s,
            scrape_interval_s: h.scrape_interval_s,
            dead_time_s: h.dead_time_s,
            each_dead_time_s: h.measured_dead_times_s.clone(),
            cpu: CpuModel {
                limit_ratio: h.cpu_limit_ratio,
                window_s: h.cpu_window_s,
                http_share: h.http_cpu_share,
                rate_per_pod: self.rate_per_pod,
            },
            meter_outage: self.fault.and_then(|f| f.meter_outage()),
            min_replicas_changes: self
                .actions()
                .into_iter()
                .filter_map(|(at, a)| match a {
                    Action::SetMinReplicas(min) => Some((at, min as i32)),
                    _ => None,
                })
                .collect(),
            rollout_at: self.remedy.and_then(|r| r.rollout()).map(|(at, _)| at),
        })
    }

    /// The same experiment `s` times faster: every duration divided by `s`, rates unchanged.
    pub fn time_scaled(&self, s: f64) -> Scenario {
        let mut x = self.clone();
        x.event = match self.event {
            LoadEvent::Spike { k, duration_s } => LoadEvent::Spike {
                k,
                duration_s: duration_s / s,
            },
            e => e,
        };
        x.timeout_s /= s;
        x.gateway = self.gateway.map(|g| Gateway {
            timeout_s: g.timeout_s / s,
            ..g
        });
        x.backoff = Backoff {
            base_s: self.backoff.base_s / s,
            cap_s: self.backoff.cap_s / s,
        };
        x.retry_budget = self.retry_budget.map(|b| RetryBudget {
            ttl_s: b.ttl_s / s,
            ..b
        });
        x.hpa = self.hpa.as_ref().map(|h| HpaSetup {
            sync_period_s: h.sync_period_s / s,
            sync_phase_s: h.sync_phase_s / s,
            metric_window_s: h.metric_window_s / s,
            scrape_interval_s: h.scrape_interval_s / s,
            dead_time_s: h.dead_time_s / s,
            measured_dead_times_s: h.measured_dead_times_s.iter().map(|d| d / s).collect(),
            behavior: h.behavior.time_scaled(s),
            cpu_window_s: h.cpu_window_s / s,
            cpu_initialization_period_s: h.cpu_initialization_period_s / s,
            initial_readiness_delay_s: h.initial_readiness_delay_s / s,
            ..h.clone()
        });
        // A discipline's times are in service times (CoDel's target above a pod's queueing
        // noise, the AIMD limit's latency threshold), and the time scale leaves the pods' rate,
        // so their service time, alone: they keep their values. Run at a scale whose timeout
        // stays well above them (F11: S = 5).
        x.client = self.client.time_scaled(s);
        x.fault = self.fault.map(|f| f.time_scaled(s));
        x.remedy = self.remedy.map(|r| r.time_scaled(s));
        x.trace = self.trace.as_ref().map(|t| ArrivalTrace {
            times: t.times.iter().map(|x| x / s).collect(),
            speed: t.speed * s,
            ..t.clone()
        });
        x.bursts = self.bursts.as_ref().map(|b| Bursts {
            length_s: b.length_s / s,
            every_s: b.every_s / s,
            windows: b.windows.iter().map(|&(a, z)| (a / s, z / s)).collect(),
            ..b.clone()
        });
        x.warmup_s /= s;
        x.horizon_s /= s;
        x.drained_wait_s /= s;
        x.fluid_dt_s /= s;
        x.time_scale = self.time_scale * s;
        x
    }
}

/// What was published for a case (all optional), in experiment seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub recovery_s: Option<f64>,
    pub trapped: Option<bool>,
    pub peak_pods: Option<u32>,
    pub final_pods: Option<u32>,
    pub lost_fraction: Option<f64>,
    #[serde(default)]
    pub text: String,
}

impl Published {
    fn time_scaled(&self, s: f64) -> Published {
        Published {
            recovery_s: self.recovery_s.map(|r| r / s),
            ..self.clone()
        }
    }
}

/// One case of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Case {
    pub scenario: Scenario,
    pub published: Published,
    pub expect: Expect,
}

/// A named experiment: its cases, its condition and refutation rule in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Experiment {
    pub id: String,
    pub title: String,
    pub condition: String,
    pub refuted_if: String,
    pub cases: Vec<Case>,
}

impl Experiment {
    pub(crate) fn time_scaled(&self, s: f64) -> Experiment {
        let cases = self
            .cases
            .iter()
            .map(|c| Case {
                scenario: c.scenario.time_scaled(s),
                published: c.published.time_scaled(s),
                expect: c.expect.clone(),
            })
            .collect();
        Experiment {
            cases,
            ..self.clone()
        }
    }
}

/// Loads a built-in experiment by id (one of [`BUILTIN`], any case) or a TOML file by path.
pub fn load(name: &str) -> Result<Experiment, ExperimentError> {
    load_with(name, &Params::default())
}

/// Like [`load`], with `overrides` taking precedence over every case's parameters.
pub fn load_with(name: &str, overrides: &Params) -> Result<Experiment, ExperimentError> {
    load_cases_with(name, overrides, None)
}

/// As [`load_with`], resolving only the case named `only` when given (the overrides may not suit
/// the others: a shorter horizon before another case's fault, say). A name no case has gives an
/// experiment of no case.
pub fn load_cases_with(
    name: &str,
    overrides: &Params,
    only: Option<&str>,
) -> Result<Experiment, ExperimentError> {
    if let Some((_, text)) = BUILTIN.iter().find(|(id, _)| id.eq_ignore_ascii_case(name)) {
        return parse_with(name, text, overrides, only);
    }
    if name.ends_with(".toml") {
        let text = std::fs::read_to_string(name).map_err(|detail| ExperimentError::Read {
            path: name.to_string(),
            detail,
        })?;
        return parse_with(name, &text, overrides, only);
    }
    Err(ExperimentError::Unknown(name.to_string()))
}

/// An experiment of one case from flags, on the kit's defaults.
pub fn ad_hoc(params: Params) -> Result<Experiment, ExperimentError> {
    let scenario = params.resolve("ad-hoc", "ad-hoc")?;
    Ok(Experiment {
        id: "ad-hoc".into(),
        title: "ad-hoc scenario from flags".into(),
        condition: String::new(),
        refuted_if: String::new(),
        cases: vec![Case {
            scenario,
            published: Published::default(),
            expect: Expect::default(),
        }],
    })
}

fn parse_with(
    name: &str,
    text: &str,
    overrides: &Params,
    only: Option<&str>,
) -> Result<Experiment, ExperimentError> {
    let file: ExperimentFile = toml::from_str(text).map_err(|e| parse_error(name, text, &e))?;
    let mut cases = Vec::new();
    for c in file.cases {
        if only.is_some_and(|o| o != c.name) {
            continue;
        }
        let context = format!("{} case {}", file.id, c.name);
        let base = match &c.from {
            Some(from) => builtin_case_params(&context, from)?.over(file.defaults.clone()),
            None => file.defaults.clone(),
        };
        let mut params = overrides.clone().over(c.params.over(base));
        // A trace named in a file is found beside it.
        if let (Some(t), Some(dir)) = (&params.trace, std::path::Path::new(name).parent())
            && overrides.trace.is_none()
            && name.ends_with(".toml")
            && std::path::Path::new(t).is_relative()
        {
            params.trace = Some(dir.join(t).display().to_string());
        }
        cases.push(Case {
            scenario: params.resolve(&c.name, &context)?,
            published: c.published,
            expect: c.expect,
        });
    }
    Ok(Experiment {
        id: file.id,
        title: file.title,
        condition: file.condition,
        refuted_if: file.refuted_if,
        cases,
    })
}

/// The parameters of a built-in case named `ID:case`, its experiment's defaults under them.
fn builtin_case_params(context: &str, from: &str) -> Result<Params, ExperimentError> {
    let unknown = || field_err(context, "from", from, "names no built-in case (ID:case)");
    let (id, case) = from.split_once(':').ok_or_else(unknown)?;
    let (_, text) = BUILTIN
        .iter()
        .find(|(i, _)| i.eq_ignore_ascii_case(id))
        .ok_or_else(unknown)?;
    let file: ExperimentFile = toml::from_str(text).map_err(|e| parse_error(id, text, &e))?;
    let c = file
        .cases
        .into_iter()
        .find(|c| c.name == case)
        .ok_or_else(unknown)?;
    Ok(c.params.over(file.defaults))
}

/// A TOML error in one line: its line, the key whose value it is (if it is a value's), what.
fn parse_error(name: &str, text: &str, e: &toml::de::Error) -> ExperimentError {
    let before = e.span().and_then(|s| text.get(..s.start));
    ExperimentError::Parse {
        name: name.to_string(),
        line: before.map(|b| b.matches('\n').count() + 1),
        field: before.and_then(key_before),
        message: e.message().trim().replace('\n', "; "),
    }
}

/// The key of the `key = value` whose value starts where `before` ends, if one does.
fn key_before(before: &str) -> Option<String> {
    let line = before.rsplit('\n').next().unwrap_or(before);
    let key = line.trim_end().strip_suffix('=')?.trim_end();
    let in_key = |c: char| c.is_ascii_alphanumeric() || "_-.\"'".contains(c);
    let start = key
        .char_indices()
        .rev()
        .find(|&(_, c)| !in_key(c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let key = &key[start..];
    (!key.is_empty()).then(|| key.to_string())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    id: String,
    title: String,
    condition: String,
    refuted_if: String,
    #[serde(default)]
    defaults: Params,
    cases: Vec<CaseFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    name: String,
    /// A built-in case this one varies (`"F3:first-attempt"`): its parameters under this
    /// case's own, over this file's defaults.
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    params: Params,
    #[serde(default)]
    published: Published,
    #[serde(default)]
    expect: Expect,
}

/// Scenario parameters as written in files and flags: every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub pods: Option<u32>,
    pub rate_per_pod: Option<f64>,
    pub rho: Option<f64>,
    pub spike: Option<Spike>,
    /// A sustained step.
    pub step: Option<Multiple>,
    pub timeout: Option<Span>,
    pub retries: Option<u32>,
    pub backoff: Option<Backoff>,
    pub retry_budget: Option<f64>,
    pub retry_budget_min_per_s: Option<f64>,
    pub retry_budget_ttl: Option<Span>,
    pub gateway: Option<GatewayParams>,
    pub abandoned: Option<Abandoned>,
    pub service: Option<ServiceParams>,
    pub topology: Option<Topology>,
    pub routing: Option<Routing>,
    pub bursts: Option<BurstParams>,
    /// A trace file of first-attempt send times (relative paths: from the experiment file's
    /// folder, or the working directory for flags).
    pub trace: Option<String>,
    pub warmup: Option<Span>,
    pub horizon: Option<Span>,
    pub drained_wait: Option<Span>,
    pub seeds: Option<Vec<u64>>,
    pub fluid_dt: Option<Span>,
    pub hpa: Option<HpaParams>,
    /// `fault = { kind = "meter-outage", at = "300s", length = "60s" }` (or `"meter-stale"`), or
    /// `{ kind = "pod-killed", at = "600s" }`.
    pub fault: Option<FaultParams>,
    /// `remedy = { kind = "raise-min", at = "300s", min = 40, length = "600s" }`.
    pub remedy: Option<RemedyParams>,
    /// `discipline = { kind = "codel", target = "50ms", interval = "1s" }`; parameters left
    /// out take `Discipline::with_defaults` for the pods' service time.
    pub discipline: Option<DisciplineParams>,
    /// `client = { throttling = { k = 2.0 }, quota = "aws-standard", breaker = { failures = 5 } }`.
    pub client: Option<ClientParams>,
}

/// A pod's discipline as written in files: the kind, and any parameter to set.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisciplineParams {
    pub kind: Option<DisciplineKind>,
    pub target: Option<Span>,
    pub interval: Option<Span>,
    pub limit: Option<u32>,
    pub initial: Option<u32>,
    pub min: Option<u32>,
    pub max: Option<u32>,
    pub latency: Option<Span>,
    pub backoff: Option<f64>,
}

impl DisciplineParams {
    fn over(self, base: DisciplineParams) -> DisciplineParams {
        // Another kind's parameters do not carry over.
        if self.kind.is_some() && base.kind.is_some() && self.kind != base.kind {
            return self;
        }
        DisciplineParams {
            kind: self.kind.or(base.kind),
            target: self.target.or(base.target),
            interval: self.interval.or(base.interval),
            limit: self.limit.or(base.limit),
            initial: self.initial.or(base.initial),
            min: self.min.or(base.min),
            max: self.max.or(base.max),
            latency: self.latency.or(base.latency),
            backoff: self.backoff.or(base.backoff),
        }
    }

    fn resolve(self, context: &str, mean_service_s: f64) -> Result<Discipline, ExperimentError> {
        DisciplineSpec {
            kind: self.kind.unwrap_or(DisciplineKind::Fifo),
            target_s: self.target.map(Span::secs),
            interval_s: self.interval.map(Span::secs),
            limit: self.limit,
            initial: self.initial,
            min: self.min,
            max: self.max,
            latency_s: self.latency.map(Span::secs),
            backoff: self.backoff,
        }
        .resolve(Some(mean_service_s))
        .map_err(|e| defense_err(context, e))
    }
}

/// The clients' defenses as written in files.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientParams {
    pub throttling: Option<ThrottlingParams>,
    pub quota: Option<QuotaMode>,
    pub breaker: Option<BreakerFile>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottlingParams {
    pub k: Option<f64>,
    pub window: Option<Span>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerFile {
    pub failures: Option<u32>,
    pub open: Option<Span>,
    pub probes: Option<u32>,
}

impl ClientParams {
    fn over(self, base: ClientParams) -> ClientParams {
        ClientParams {
            throttling: self.throttling.or(base.throttling),
            quota: self.quota.or(base.quota),
            breaker: self.breaker.or(base.breaker),
        }
    }

    fn resolve(self, context: &str) -> Result<ClientDefenses, ExperimentError> {
        let t = ThrottleParams::default();
        let b = BreakerParams::default();
        ClientDefenses {
            throttling: self.throttling.map(|p| ThrottleParams {
                k: p.k.unwrap_or(t.k),
                window_s: p.window.map_or(t.window_s, Span::secs),
            }),
            quota: self.quota,
            breaker: self.breaker.map(|p| BreakerParams {
                failures: p.failures.unwrap_or(b.failures),
                open_s: p.open.map_or(b.open_s, Span::secs),
                probes: p.probes.unwrap_or(b.probes),
            }),
        }
        .validate()
        .map_err(|e| defense_err(context, e))
    }
}

/// A defense's parameter out of range, as the one-line field error.
fn defense_err(context: &str, e: kit_defense::ParamError) -> ExperimentError {
    field_err(context, e.field, e.value, e.expected)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemedyKind {
    RaiseMin,
    RollingRestart,
    SwitchToDrop,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemedyParams {
    pub kind: RemedyKind,
    pub at: Span,
    /// `raise-min` only.
    pub min: Option<u32>,
    /// `raise-min` only.
    pub length: Option<Span>,
}

impl RemedyParams {
    fn resolve(
        &self,
        context: &str,
        hpa: Option<&HpaSetup>,
        horizon_s: f64,
    ) -> Result<Remedy, ExperimentError> {
        let kind = match self.kind {
            RemedyKind::RaiseMin => "raise-min",
            RemedyKind::RollingRestart => "rolling-restart",
            RemedyKind::SwitchToDrop => "switch-to-drop",
        };
        let Some(h) = hpa else {
            return Err(field_err(context, "remedy", kind, "needs an hpa"));
        };
        let at_s = self.at.secs();
        if at_s >= horizon_s {
            return Err(field_err(
                context,
                "remedy.at",
                format!("{at_s}s"),
                &format!("must fall within the horizon ({horizon_s} s)"),
            ));
        }
        let rollout = |abandoned| {
            if let Some(min) = self.min {
                return Err(field_err(
                    context,
                    "remedy.min",
                    min,
                    &format!("has no meaning for {kind}"),
                ));
            }
            if let Some(length) = self.length {
                return Err(field_err(
                    context,
                    "remedy.length",
                    format!("{}s", length.secs()),
                    &format!("has no meaning for {kind}"),
                ));
            }
            Ok(Remedy::RollOut { at_s, abandoned })
        };
        match self.kind {
            RemedyKind::RollingRestart => rollout(Abandoned::Serve),
            RemedyKind::SwitchToDrop => rollout(Abandoned::Drop),
            RemedyKind::RaiseMin => {
                let (Some(min), Some(length)) = (self.min, self.length) else {
                    return Err(field_err(context, "remedy", kind, "needs min and length"));
                };
                let length_s = positive(context, "remedy.length", length.secs())?;
                if at_s + length_s >= horizon_s {
                    return Err(field_err(
                        context,
                        "remedy.length",
                        format!("{length_s}s"),
                        &format!("must end within the horizon ({horizon_s} s)"),
                    ));
                }
                if min <= h.min_replicas || min > h.max_replicas {
                    return Err(field_err(
                        context,
                        "remedy.min",
                        min,
                        &format!(
                            "must be above minReplicas ({}) and at most maxReplicas ({})",
                            h.min_replicas, h.max_replicas
                        ),
                    ));
                }
                Ok(Remedy::RaiseMin {
                    at_s,
                    min,
                    length_s,
                })
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    MeterOutage,
    MeterStale,
    PodKilled,
    ShardDied,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultParams {
    pub kind: FaultKind,
    pub at: Span,
    pub length: Option<Span>,
    /// `shard-died` only: how many loadgen shards share the demand.
    pub shards: Option<u32>,
}

impl FaultParams {
    fn resolve(&self, context: &str, horizon_s: f64) -> Result<Fault, ExperimentError> {
        let at_s = self.at.secs();
        if at_s >= horizon_s {
            return Err(field_err(
                context,
                "fault.at",
                format!("{at_s}s"),
                &format!("must fall within the horizon ({horizon_s} s)"),
            ));
        }
        match (self.kind, self.length) {
            (kind @ (FaultKind::MeterOutage | FaultKind::MeterStale), Some(length)) => {
                let length_s = positive(context, "fault.length", length.secs())?;
                if at_s + length_s >= horizon_s {
                    return Err(field_err(
                        context,
                        "fault.length",
                        format!("{length_s}s"),
                        &format!("must end within the horizon ({horizon_s} s)"),
                    ));
                }
                Ok(if kind == FaultKind::MeterOutage {
                    Fault::MeterOutage { at_s, length_s }
                } else {
                    Fault::MeterStale { at_s, length_s }
                })
            }
            (FaultKind::MeterOutage | FaultKind::MeterStale, None) => Err(field_err(
                context,
                "fault.length",
                "",
                "is required for a meter-outage or meter-stale fault",
            )),
            (FaultKind::PodKilled, None) => Ok(Fault::PodKilled { at_s }),
            (FaultKind::ShardDied, None) => match self.shards {
                Some(shards) if shards >= 2 => Ok(Fault::ShardDied { at_s, shards }),
                other => Err(field_err(
                    context,
                    "fault.shards",
                    other.map_or(String::new(), |n| n.to_string()),
                    "is required for a shard-died fault, at least 2",
                )),
            },
            (FaultKind::PodKilled | FaultKind::ShardDied, Some(length)) => Err(field_err(
                context,
                "fault.length",
                format!("{}s", length.secs()),
                "has no meaning for a pod-killed or shard-died fault",
            )),
        }
    }
}

/// `gateway = { kind = "haproxy", retries = 2, timeout = "3s" }`; flags override field by field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayParams {
    pub kind: Option<GatewayKind>,
    /// Default 2.
    pub retries: Option<u32>,
    /// Its server timeout per try. Default: the client's timeout over the tries, so they fit.
    pub timeout: Option<Span>,
    /// Default: what the proxy does by default (HAProxy no, nginx yes).
    pub abort_on_close: Option<bool>,
}

impl GatewayParams {
    fn over(self, base: GatewayParams) -> GatewayParams {
        GatewayParams {
            kind: self.kind.or(base.kind),
            retries: self.retries.or(base.retries),
            timeout: self.timeout.or(base.timeout),
            abort_on_close: self.abort_on_close.or(base.abort_on_close),
        }
    }

    fn resolve(&self, context: &str, client_timeout_s: f64) -> Result<Gateway, ExperimentError> {
        let Some(kind) = self.kind else {
            return Err(field_err(
                context,
                "gateway.kind",
                "",
                "is required with any other gateway setting (haproxy or nginx)",
            ));
        };
        let retries = self.retries.unwrap_or(2);
        let timeout_s = match &self.timeout {
            Some(t) => positive(context, "gateway.timeout", t.secs())?,
            None => client_timeout_s / f64::from(retries + 1),
        };
        let g = Gateway {
            kind,
            retries,
            timeout_s,
            abort_on_close: self.abort_on_close.unwrap_or(kind == GatewayKind::Nginx),
            balance: Balance::RoundRobin,
        };
        // A gateway that keeps trying after the client left overlaps the client's next attempt
        // with its own tries: the models' chain of attempts cannot hold that.
        let tries_s = f64::from(g.retries + 1) * g.timeout_s;
        if !g.abort_on_close && client_timeout_s < tries_s - 1e-9 {
            return Err(field_err(
                context,
                "timeout",
                format!("{client_timeout_s}s"),
                &format!(
                    "must cover the gateway's {} tries of {} s ({tries_s} s) when it ignores the client leaving",
                    g.retries + 1,
                    g.timeout_s
                ),
            ));
        }
        Ok(g)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HpaParams {
    pub signal: Option<HpaSignal>,
    pub target: Option<f64>,
    pub min: Option<u32>,
    pub max: Option<u32>,
    pub tolerance: Option<f64>,
    /// The HPA's own tolerances (`behavior.scaleUp/scaleDown.tolerance`); unset keeps `tolerance`.
    pub scale_up_tolerance: Option<f64>,
    pub scale_down_tolerance: Option<f64>,
    pub sync_period: Option<Span>,
    pub sync_phase: Option<Span>,
    pub metric_window: Option<Span>,
    pub scrape_interval: Option<Span>,
    pub dead_time: Option<Span>,
    pub behavior: Option<BehaviorParams>,
    /// `l / r` of the pods' CPU (the CPU signal's saturation), default 1.
    pub cpu_limit_ratio: Option<f64>,
    /// metrics-server's resolution, default `15s`.
    pub cpu_window: Option<Span>,
    /// The HTTP path's CPU per arrival as a share of one request's CPU budget, default 0.
    pub http_cpu_share: Option<f64>,
    /// Controller flags, defaults `300s` and `30s`.
    pub cpu_initialization_period: Option<Span>,
    pub initial_readiness_delay: Option<Span>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaviorParams {
    pub scale_up: RulesParams,
    pub scale_down: RulesParams,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesParams {
    pub stabilization_window: Span,
    pub select: SelectPolicy,
    pub policies: Vec<PolicyParams>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyParams {
    #[serde(rename = "type")]
    pub kind: PolicyKind,
    pub value: i32,
    pub period: Span,
}

impl Params {
    /// The kit's defaults (SPEC's kit sizes and the HPA facts).
    fn kit() -> Params {
        Params {
            pods: Some(4),
            rate_per_pod: Some(100.0),
            timeout: Some(Span::from_secs(10)),
            retries: Some(2),
            backoff: Some(Backoff::NONE),
            retry_budget_min_per_s: Some(0.0),
            retry_budget_ttl: Some(Span::from_secs(10)),
            abandoned: Some(Abandoned::Serve),
            service: Some(ServiceParams::Shape(ServiceShape::Exponential)),
            topology: Some(Topology::Pooled),
            warmup: Some(Span::from_secs(60)),
            horizon: Some(Span::from_secs(3600)),
            seeds: Some(vec![1, 2, 3]),
            ..Params::default()
        }
    }

    /// `self` where set, else `base`.
    fn over(self, base: Params) -> Params {
        Params {
            pods: self.pods.or(base.pods),
            rate_per_pod: self.rate_per_pod.or(base.rate_per_pod),
            rho: self.rho.or(base.rho),
            spike: self.spike.or(base.spike),
            step: self.step.or(base.step),
            timeout: self.timeout.or(base.timeout),
            retries: self.retries.or(base.retries),
            backoff: self.backoff.or(base.backoff),
            retry_budget: self.retry_budget.or(base.retry_budget),
            retry_budget_min_per_s: self.retry_budget_min_per_s.or(base.retry_budget_min_per_s),
            retry_budget_ttl: self.retry_budget_ttl.or(base.retry_budget_ttl),
            gateway: match (self.gateway, base.gateway) {
                (Some(a), Some(b)) => Some(a.over(b)),
                (a, b) => a.or(b),
            },
            abandoned: self.abandoned.or(base.abandoned),
            service: self.service.or(base.service),
            topology: self.topology.or(base.topology),
            routing: self.routing.or(base.routing),
            bursts: self.bursts.or(base.bursts),
            trace: self.trace.or(base.trace),
            warmup: self.warmup.or(base.warmup),
            horizon: self.horizon.or(base.horizon),
            drained_wait: self.drained_wait.or(base.drained_wait),
            seeds: self.seeds.or(base.seeds),
            fluid_dt: self.fluid_dt.or(base.fluid_dt),
            fault: self.fault.or(base.fault),
            remedy: self.remedy.or(base.remedy),
            discipline: match (self.discipline, base.discipline) {
                (Some(a), Some(b)) => Some(a.over(b)),
                (a, b) => a.or(b),
            },
            client: match (self.client, base.client) {
                (Some(a), Some(b)) => Some(a.over(b)),
                (a, b) => a.or(b),
            },
            hpa: match (self.hpa, base.hpa) {
                (Some(a), Some(b)) => Some(a.over(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// Checks and resolves into a scenario; missing fields take the kit's defaults.
    fn resolve(self, name: &str, context: &str) -> Result<Scenario, ExperimentError> {
        let p = self.over(Params::kit());
        let pods = p.pods.unwrap_or(4);
        if pods == 0 {
            return Err(field_err(context, "pods", pods, "must be at least 1"));
        }
        let rate_per_pod = positive(
            context,
            "rate_per_pod",
            required(context, "rate_per_pod", p.rate_per_pod)?,
        )?;
        // A trace gives its own rho (below).
        let rho = match (p.rho, &p.trace) {
            (None, Some(_)) => 1.0,
            (rho, _) => positive(context, "rho", required(context, "rho", rho)?)?,
        };
        let event = load_event(context, p.spike, p.step)?;
        let timeout_s = positive(
            context,
            "timeout",
            required(context, "timeout", p.timeout)?.secs(),
        )?;
        let retry_budget = retry_budget(context, &p)?;
        let hpa = p.hpa.map(|h| h.resolve(context, pods)).transpose()?;
        let warmup_s = required(context, "warmup", p.warmup)?.secs();
        let horizon_s = positive(
            context,
            "horizon",
            required(context, "horizon", p.horizon)?.secs(),
        )?;
        let gateway = p
            .gateway
            .as_ref()
            .map(|g| g.resolve(context, timeout_s))
            .transpose()?;
        let (routing, bursts) = routing_and_bursts(
            context,
            p.routing,
            p.bursts.as_ref(),
            gateway.is_some(),
            warmup_s,
            horizon_s,
        )?;
        let trace = trace_of(
            context,
            p.trace.as_deref(),
            bursts.is_some(),
            event,
            warmup_s,
        )?;
        // With a trace, rho is its mean rate over the pods' capacity.
        let rho = trace
            .as_ref()
            .map_or(rho, |t| t.mean_rate() / (f64::from(pods) * rate_per_pod));
        let (discipline, client) = (
            p.discipline
                .unwrap_or_default()
                .resolve(context, 1.0 / rate_per_pod)?,
            p.client.unwrap_or_default().resolve(context)?,
        );
        let fluid_dt_s = match p.fluid_dt {
            Some(d) => positive(context, "fluid_dt", d.secs())?,
            // 1/200 of the timeout: the figures are the same from 1/5000 to 1/100 (README).
            None => timeout_s / 200.0,
        };
        Ok(Scenario {
            name: name.to_string(),
            pods,
            rate_per_pod,
            rho,
            event,
            timeout_s,
            retries: p.retries.unwrap_or(2),
            backoff: p.backoff.unwrap_or(Backoff::NONE),
            retry_budget,
            gateway,
            abandoned: p.abandoned.unwrap_or(Abandoned::Serve),
            service: match p.service {
                Some(service) => service.resolve(context)?,
                None => ServiceTime::EXPONENTIAL,
            },
            discipline,
            client,
            topology: p.topology.unwrap_or(Topology::Pooled),
            routing,
            bursts,
            trace,
            // Before `hpa` moves: the remedy is checked against it.
            remedy: p
                .remedy
                .map(|r| r.resolve(context, hpa.as_ref(), horizon_s))
                .transpose()?,
            hpa,
            fault: p.fault.map(|f| f.resolve(context, horizon_s)).transpose()?,
            warmup_s,
            horizon_s,
            // A quarter of the timeout by default, for the models as for a measured run: a pod the
            // loadgen's pool keeps busy holds a steady queue of a few service times, which is not
            // debt; the debt is a wait of the order of the timeout.
            drained_wait_s: p.drained_wait.map_or(timeout_s / 4.0, Span::secs),
            seeds: p.seeds.unwrap_or_default(),
            fluid_dt_s,
            time_scale: 1.0,
        })
    }
}

/// The client's retry budget of a case's parameters, if it has one.
fn retry_budget(context: &str, p: &Params) -> Result<Option<RetryBudget>, ExperimentError> {
    match p.retry_budget {
        None => Ok(None),
        Some(ratio) if ratio >= 0.0 && ratio.is_finite() => Ok(Some(RetryBudget {
            ratio,
            min_per_s: p.retry_budget_min_per_s.unwrap_or(0.0).max(0.0),
            ttl_s: positive(
                context,
                "retry_budget_ttl",
                required(context, "retry_budget_ttl", p.retry_budget_ttl)?.secs(),
            )?,
        })),
        Some(ratio) => Err(field_err(context, "retry_budget", ratio, "must be >= 0")),
    }
}

/// The routing (not with a retrying gateway, whose own balance decides) and the bursts' timeline
/// over the warm-up and the horizon.
fn routing_and_bursts(
    context: &str,
    routing: Option<Routing>,
    bursts: Option<&BurstParams>,
    has_gateway: bool,
    warmup_s: f64,
    horizon_s: f64,
) -> Result<(Routing, Option<Bursts>), ExperimentError> {
    let routing = routing.unwrap_or_default();
    if has_gateway && routing != Routing::KeepAlive {
        return Err(field_err(
            context,
            "routing",
            routing,
            "cannot be combined with a retrying `gateway` (its own balance decides)",
        ));
    }
    let bursts = match bursts {
        None => None,
        Some(b) => {
            if !(b.factor.is_finite() && b.factor > 0.0) {
                return Err(field_err(
                    context,
                    "bursts.factor",
                    b.factor,
                    "must be positive",
                ));
            }
            positive(context, "bursts.length", b.length.secs())?;
            positive(context, "bursts.every", b.every.secs())?;
            Some(Bursts::draw(b, -warmup_s, horizon_s))
        }
    };
    Ok((routing, bursts))
}

/// The trace a case replays, read from its file: it replaces the demand, so no load event or
/// bursts beside it.
fn trace_of(
    context: &str,
    path: Option<&str>,
    bursts: bool,
    event: LoadEvent,
    warmup_s: f64,
) -> Result<Option<ArrivalTrace>, ExperimentError> {
    let Some(path) = path else {
        return Ok(None);
    };
    if bursts || !matches!(event, LoadEvent::None) {
        return Err(field_err(
            context,
            "trace",
            path,
            "replaces the demand: it cannot be combined with a spike, a step or bursts",
        ));
    }
    ArrivalTrace::read(path, warmup_s)
        .map(Some)
        .map_err(|e| field_err(context, "trace", path, &e.to_string()))
}

/// A spike, a step, or neither (not both).
fn load_event(
    context: &str,
    spike: Option<Spike>,
    step: Option<Multiple>,
) -> Result<LoadEvent, ExperimentError> {
    Ok(match (spike, step) {
        (Some(_), Some(_)) => {
            return Err(field_err(
                context,
                "step",
                "",
                "cannot be combined with `spike`",
            ));
        }
        (Some(s), None) => LoadEvent::Spike {
            k: s.k(),
            duration_s: s.length().secs(),
        },
        (None, Some(k)) => LoadEvent::Step { k: k.get() },
        (None, None) => LoadEvent::None,
    })
}

impl HpaParams {
    fn over(self, base: HpaParams) -> HpaParams {
        HpaParams {
            signal: self.signal.or(base.signal),
            target: self.target.or(base.target),
            min: self.min.or(base.min),
            max: self.max.or(base.max),
            tolerance: self.tolerance.or(base.tolerance),
            scale_up_tolerance: self.scale_up_tolerance.or(base.scale_up_tolerance),
            scale_down_tolerance: self.scale_down_tolerance.or(base.scale_down_tolerance),
            sync_period: self.sync_period.or(base.sync_period),
            sync_phase: self.sync_phase.or(base.sync_phase),
            metric_window: self.metric_window.or(base.metric_window),
            scrape_interval: self.scrape_interval.or(base.scrape_interval),
            dead_time: self.dead_time.or(base.dead_time),
            behavior: self.behavior.or(base.behavior),
            cpu_limit_ratio: self.cpu_limit_ratio.or(base.cpu_limit_ratio),
            cpu_window: self.cpu_window.or(base.cpu_window),
            http_cpu_share: self.http_cpu_share.or(base.http_cpu_share),
            cpu_initialization_period: self
                .cpu_initialization_period
                .or(base.cpu_initialization_period),
            initial_readiness_delay: self
                .initial_readiness_delay
                .or(base.initial_readiness_delay),
        }
    }

    fn resolve(self, context: &str, pods: u32) -> Result<HpaSetup, ExperimentError> {
        let d = |v: Option<Span>, default: u64| v.unwrap_or(Span::from_secs(default)).secs();
        let target_utilization = self.target.unwrap_or(0.5);
        if !(target_utilization > 0.0 && target_utilization.is_finite()) {
            return Err(field_err(
                context,
                "hpa.target",
                target_utilization,
                "must be a positive utilization",
            ));
        }
        let sync_period_s = positive(context, "hpa.sync_period", d(self.sync_period, 15))?;
        let mut behavior = match self.behavior {
            Some(b) => Behavior {
                scale_up: b.scale_up.resolve(),
                scale_down: b.scale_down.resolve(),
            },
            None => Behavior::default(),
        };
        for (field, value, rules) in [
            (
                "hpa.scale_up_tolerance",
                self.scale_up_tolerance,
                &mut behavior.scale_up,
            ),
            (
                "hpa.scale_down_tolerance",
                self.scale_down_tolerance,
                &mut behavior.scale_down,
            ),
        ] {
            if let Some(t) = value {
                // A Kubernetes quantity in milli-units carries it exactly.
                let milli = t * 1000.0;
                if !(t.is_finite() && t >= 0.0 && (milli.round() - milli).abs() < 1e-6) {
                    return Err(field_err(
                        context,
                        field,
                        t,
                        "must be a number >= 0 in steps of 0.001",
                    ));
                }
                rules.tolerance = Some(t);
            }
        }
        Ok(HpaSetup {
            signal: self.signal.unwrap_or(HpaSignal::First),
            target_utilization,
            min_replicas: self.min.unwrap_or(pods),
            max_replicas: self.max.unwrap_or(50),
            tolerance: self.tolerance.unwrap_or(crate::hpa::DEFAULT_TOLERANCE),
            sync_phase_s: self.sync_phase.map_or(sync_period_s / 2.0, Span::secs),
            sync_period_s,
            metric_window_s: positive(context, "hpa.metric_window", d(self.metric_window, 30))?,
            scrape_interval_s: positive(
                context,
                "hpa.scrape_interval",
                d(self.scrape_interval, 1),
            )?,
            dead_time_s: d(self.dead_time, 90),
            measured_dead_times_s: Vec::new(),
            behavior,
            cpu_limit_ratio: positive(
                context,
                "hpa.cpu_limit_ratio",
                self.cpu_limit_ratio.unwrap_or(1.0),
            )?,
            cpu_window_s: positive(context, "hpa.cpu_window", d(self.cpu_window, 15))?,
            http_cpu_share: share(
                context,
                "hpa.http_cpu_share",
                self.http_cpu_share.unwrap_or(0.0),
            )?,
            cpu_initialization_period_s: d(self.cpu_initialization_period, 300),
            initial_readiness_delay_s: d(self.initial_readiness_delay, 30),
        })
    }
}

impl RulesParams {
    fn resolve(&self) -> ScalingRules {
        ScalingRules {
            stabilization_window_s: self.stabilization_window.secs(),
            policies: self
                .policies
                .iter()
                .map(|p| Policy {
                    kind: p.kind,
                    value: p.value,
                    period_s: p.period.secs(),
                })
                .collect(),
            select: self.select,
            tolerance: None,
        }
    }
}

fn positive(context: &str, field: &'static str, v: f64) -> Result<f64, ExperimentError> {
    if v > 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(field_err(context, field, v, "must be positive"))
    }
}

/// A share of something: in [0, 1].
fn share(context: &str, field: &'static str, v: f64) -> Result<f64, ExperimentError> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(field_err(context, field, v, "must be within 0 and 1"))
    }
}

/// A field the kit's defaults set: missing only if they do not.
fn required<T>(context: &str, field: &'static str, v: Option<T>) -> Result<T, ExperimentError> {
    v.ok_or_else(|| field_err(context, field, "", "is required"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses an experiment file's text; `name` is used in error messages.
    fn parse(name: &str, text: &str) -> Result<Experiment, ExperimentError> {
        parse_with(name, text, &Params::default(), None)
    }

    #[test]
    fn builtin_experiments_load() {
        for (id, _) in BUILTIN {
            let e = load(id).unwrap();
            assert_eq!(e.id, id);
            assert!(!e.cases.is_empty());
        }
        let f2 = load("f2").unwrap();
        let s = &f2.cases[0].scenario;
        assert_eq!(
            s.event,
            LoadEvent::Spike {
                k: 5.0,
                duration_s: 300.0
            }
        );
        assert_eq!((s.pods, s.retries, s.timeout_s), (4, 2, 10.0));
        assert_eq!(s.recovery_reference(), 300.0);
        assert_eq!(s.demand(-1.0), 120.0);
        assert_eq!(s.demand(0.0), 600.0);
        assert_eq!(s.demand(300.0), 120.0);
    }

    #[test]
    fn time_scale_divides_every_duration() {
        let f3 = load("F3").unwrap().time_scaled(10.0);
        let s = &f3.cases[0].scenario;
        assert_eq!(s.timeout_s, 1.0);
        let h = s.hpa.as_ref().unwrap();
        assert_eq!(
            (h.sync_period_s, h.dead_time_s, h.metric_window_s),
            (1.5, 9.0, 3.0)
        );
        assert_eq!(h.behavior.scale_down.stabilization_window_s, 30.0);
        assert_eq!(s.rate_per_pod, 100.0);
        let f2 = load("F2").unwrap().time_scaled(10.0);
        assert_eq!(f2.cases[0].published.recovery_s, Some(975.6));
    }

    #[test]
    fn bad_fields_are_named() {
        let text = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n[cases.params]\nrho=0.3\ntimeout='ten'\n";
        let e = parse("x", text).unwrap_err().to_string();
        assert!(e.contains("`timeout`") && e.contains("ten"), "{e}");
        assert!(
            e.starts_with(
                "x is not a valid experiment file: line 9: field `timeout`: `ten` is not a duration"
            ),
            "{e}"
        );
        let text = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n[cases.params]\nrho=0.3\nspike='5y300s'\n";
        let e = parse("x", text).unwrap_err().to_string();
        assert!(e.contains("`spike`"), "{e}");
        let text = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n[cases.params]\nrhoo=0.3\n";
        let e = parse("x", text).unwrap_err().to_string();
        assert!(
            e.contains("line 8: unknown field `rhoo`") && !e.contains('\n'),
            "{e}"
        );
        // In an inline table, and semantic checks after parsing name the case.
        let text = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[defaults]\nrho=0.3\n\
                    gateway = { kind = 'nginx', timeout = '3q' }\n[[cases]]\nname='a'\n";
        let e = parse("x", text).unwrap_err().to_string();
        assert!(
            e.contains("line 7: field `timeout`: `3q` is not a duration"),
            "{e}"
        );
        let text = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n[cases.params]\nrho=0.3\ntimeout='0s'\n";
        let e = parse("x", text).unwrap_err().to_string();
        assert_eq!(e, "X case a: field `timeout`: must be positive, got `0`");
        // A misspelt shape is named; a file's bad cv is reported as the file's field, not a flag.
        let head = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n\
                    [cases.params]\nrho=0.3\n";
        let e = parse("x", &format!("{head}service='paretoo'\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 9") && e.contains("\"paretoo\"") && !e.contains('\n'),
            "{e}"
        );
        let e = parse("x", &format!("{head}service={{ shape='pareto', cv=-1 }}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`service`: cv -1 must be") && !e.contains("--service"),
            "{e}"
        );
        let e = parse("x", &format!("{head}service={{ shape='pareto', cvv=3 }}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `cvv`"), "{e}");
        assert!(matches!(load("F99"), Err(ExperimentError::Unknown(_))));
    }

    #[test]
    fn faults_remedies_and_tolerances_are_checked_by_field() {
        let head = "id='X'\ntitle='t'\ncondition='c'\nrefuted_if='r'\n[[cases]]\nname='a'\n\
                    [cases.params]\nrho=0.3\nstep='5x'\nhorizon='100s'\n";
        let err = |tail: &str| {
            parse("x", &format!("{head}{tail}\n"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("fault = { kind = 'meter-outage', at = '10s' }"),
            "X case a: field `fault.length`: is required for a meter-outage or meter-stale fault, got ``"
        );
        assert!(err("fault = { kind = 'pod-killed', at = '200s' }").contains("within the horizon"));
        assert!(err("fault = { kind = 'meteor', at = '1s' }").contains("unknown variant `meteor`"));
        assert!(
            err("remedy = { kind = 'raise-min', at = '1s', min = 8, length = '9s' }")
                .contains("needs an hpa")
        );
        let hpa = "hpa = { min = 4, max = 10 }";
        assert!(
            err(&format!(
                "remedy = {{ kind = 'raise-min', at = '1s', min = 11, length = '9s' }}\n{hpa}"
            ))
            .contains("field `remedy.min`: must be above minReplicas (4) and at most maxReplicas (10), got `11`")
        );
        assert!(
            err(&format!(
                "remedy = {{ kind = 'rolling-restart', at = '1s', min = 8 }}\n{hpa}"
            ))
            .contains("field `remedy.min`: has no meaning for rolling-restart, got `8`")
        );
        assert!(
            err(&format!(
                "remedy = {{ kind = 'raise-min', at = '1s' }}\n{hpa}"
            ))
            .contains("field `remedy`: needs min and length, got `raise-min`")
        );
        let switch = parse(
            "x",
            &format!("{head}remedy = {{ kind = 'switch-to-drop', at = '20s' }}\n{hpa}\n"),
        )
        .unwrap();
        let s = &switch.cases[0].scenario;
        assert_eq!(s.actions(), vec![(20.0, Action::RollOut(Abandoned::Drop))]);
        assert_eq!(
            (s.pod_abandoned(false), s.pod_abandoned(true)),
            (Abandoned::Serve, Abandoned::Drop)
        );
        assert_eq!(s.autoscaler().and_then(|a| a.rollout_at), Some(20.0));
        assert!(err("hpa = { scale_up_tolerance = -0.5 }").contains(
            "field `hpa.scale_up_tolerance`: must be a number >= 0 in steps of 0.001, got `-0.5`"
        ));
        let ok = parse(
            "x",
            &format!(
                "{head}fault = {{ kind = 'meter-outage', at = '10s', length = '30s' }}\n\
                 remedy = {{ kind = 'raise-min', at = '20s', min = 8, length = '40s' }}\n\
                 hpa = {{ min = 4, scale_down_tolerance = 0.2 }}\n"
            ),
        )
        .unwrap();
        let s = &ok.cases[0].scenario;
        assert_eq!(
            s.actions(),
            vec![
                (10.0, Action::MeterDown),
                (20.0, Action::SetMinReplicas(8)),
                (40.0, Action::MeterUp),
                (60.0, Action::SetMinReplicas(4)),
            ]
        );
        let h = s.hpa.as_ref().unwrap();
        assert_eq!(h.behavior.tolerances(h.tolerance), (0.2, 0.1));
        // Run time divides the times, not the floor.
        assert_eq!(
            s.time_scaled(10.0).actions()[1],
            (2.0, Action::SetMinReplicas(8))
        );
    }

    #[test]
    fn text_values_have_one_parser_and_one_line_errors() {
        assert_eq!("1500ms".parse::<Span>().unwrap().secs(), 1.5);
        assert_eq!(" 2m ".parse::<Span>().unwrap(), Span::from_secs(120));
        let s: Spike = "2.5x300s".parse().unwrap();
        assert_eq!((s.k(), s.length().secs()), (2.5, 300.0));
        assert_eq!("5x".parse::<Multiple>().unwrap().get(), 5.0);
        assert_eq!("none".parse::<Backoff>().unwrap(), Backoff::NONE);
        for (e, value, expected) in [
            ("ten".parse::<Span>().unwrap_err(), "ten", "a duration like"),
            ("-1s".parse::<Span>().unwrap_err(), "-1s", "a duration like"),
            (
                "5".parse::<Multiple>().unwrap_err(),
                "5",
                "a multiple like 5x",
            ),
            (
                "0x".parse::<Multiple>().unwrap_err(),
                "0x",
                "a multiple like 5x",
            ),
            ("5y300s".parse::<Spike>().unwrap_err(), "5y300s", "a spike"),
            ("4x".parse::<Spike>().unwrap_err(), "4x", "a spike"),
            (
                "5x0s".parse::<Spike>().unwrap_err(),
                "5x0s",
                "must be positive",
            ),
            ("lin".parse::<Backoff>().unwrap_err(), "lin", "a backoff"),
            (
                "exp:1s".parse::<Backoff>().unwrap_err(),
                "exp:1s",
                "a backoff",
            ),
        ] {
            let e = e.to_string();
            assert!(e.starts_with(&format!("`{value}` is not ")), "{e}");
            assert!(e.contains(expected) && !e.contains('\n'), "{e}");
        }
        let e = Spike::new(Multiple::new(3.0).unwrap(), Span::from_secs(0)).unwrap_err();
        assert!(e.to_string().starts_with("`3x0s` is not a spike"), "{e}");
        assert!(Multiple::new(f64::NAN).is_err());
    }

    #[test]
    fn backoff_delays() {
        let mut s = load("F2").unwrap().cases[0].scenario.clone();
        assert_eq!(s.attempt_offset(2), 20.0);
        s.backoff = "exp:1s,1500ms".parse().unwrap();
        assert_eq!(s.retry_delay(1), 11.0);
        assert_eq!(s.retry_delay(2), 11.5);
        assert_eq!(s.amplification(), 3.0);
    }

    #[test]
    fn a_gateway_must_fit_the_models_chain() {
        let with = |gateway: &str| {
            parse(
                "t",
                &format!(
                    "id = \"t\"\ntitle = \"\"\ncondition = \"\"\nrefuted_if = \"\"\n\
                     [defaults]\nrho = 0.1\ntimeout = \"10s\"\ngateway = {gateway}\n[[cases]]\nname = \"c\"\n"
                ),
            )
        };
        // The client's 10 s cover 3 tries of 3 s: A = 9.
        let e = with("{ kind = \"haproxy\", retries = 2, timeout = \"3s\" }").unwrap();
        assert_eq!(e.cases[0].scenario.amplification(), 9.0);
        // Tries of 5 s: a gateway that ignores the client leaving overlaps its next attempt.
        let err = with("{ kind = \"haproxy\", timeout = \"5s\" }")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("field `timeout`") && err.contains("15 s"),
            "{err}"
        );
        // One that stops when the client leaves makes the 2 tries started by then: A = 6.
        let e = with("{ kind = \"nginx\", timeout = \"5s\" }").unwrap();
        assert_eq!(e.cases[0].scenario.amplification(), 6.0);
        // No timeout: the client's over the tries.
        let e = with("{ kind = \"haproxy\", retries = 4 }").unwrap();
        assert_eq!(e.cases[0].scenario.pod_timeout_s(), 2.0);
        let err = with("{ retries = 1 }").unwrap_err().to_string();
        assert!(err.contains("gateway.kind"), "{err}");
    }
}
