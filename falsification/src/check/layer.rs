//! What `check` reads from a team's files, as plain data: the retrying layers of one request path
//! (outermost first), the autoscalers, and what the service does with abandoned work. Every
//! parser (`haproxy`, `nginx`, `envoy`, `kube`, `clients`) produces these; `amplify` computes on
//! them. Nothing here does I/O.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// How a request fails at the service, and so which retries a failure sets off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureClass {
    /// The service is slow: an attempt's wait passes a per-try timeout. The class of retry debt.
    Timeout,
    /// The connection to the service cannot be made (refused, reset before a response).
    ConnectFailure,
    /// The service (or a proxy in front of it) answers 5xx.
    #[serde(rename = "5xx")]
    Status5xx,
}

impl FailureClass {
    pub const ALL: [FailureClass; 3] = [
        FailureClass::Timeout,
        FailureClass::ConnectFailure,
        FailureClass::Status5xx,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FailureClass::Timeout => "timeout",
            FailureClass::ConnectFailure => "connect-failure",
            FailureClass::Status5xx => "5xx",
        }
    }
}

/// Which failures a layer retries. A layer's own per-try timeout firing is `timeout`; a gateway
/// error (502/503/504) coming back from an inner layer is `status_5xx`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RetryOn {
    pub timeout: bool,
    pub connect_failure: bool,
    pub status_5xx: bool,
}

impl RetryOn {
    pub const NOTHING: RetryOn = RetryOn {
        timeout: false,
        connect_failure: false,
        status_5xx: false,
    };

    pub fn covers(self, class: FailureClass) -> bool {
        match class {
            FailureClass::Timeout => self.timeout,
            FailureClass::ConnectFailure => self.connect_failure,
            FailureClass::Status5xx => self.status_5xx,
        }
    }

    /// The classes, in [`FailureClass::ALL`] order, for printing and JSON.
    pub fn classes(self) -> Vec<FailureClass> {
        FailureClass::ALL
            .into_iter()
            .filter(|c| self.covers(*c))
            .collect()
    }
}

/// How many tries a layer makes for one request from its caller, the first included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tries {
    /// At most this many (`retries + 1`; normalised from each source's own word).
    AtMost(u32),
    /// No count limit (nginx `proxy_next_upstream_tries 0`): one try per upstream server.
    OnePerServer { servers: u32 },
    /// No count limit and no server list (ingress-nginx `proxy-next-upstream-tries: 0`, a
    /// Linkerd ServiceProfile route): only time limits and a budget bound the tries.
    Unlimited,
}

impl Tries {
    /// The limit on the count; `None` when there is none.
    pub fn limit(self) -> Option<u32> {
        match self {
            Tries::AtMost(n) => Some(n.max(1)),
            Tries::OnePerServer { servers } => Some(servers.max(1)),
            Tries::Unlimited => None,
        }
    }
}

/// A limit on retries relative to first attempts, in the failed state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Budget {
    /// Retries at most `ratio` x requests (tower/Finagle, Linkerd, Envoy's retry budget): the
    /// layer's factor is `1 + min(retries, ratio)`.
    Ratio { ratio: f64 },
    /// A token bucket refilled only by successes (AWS SDK retry quota, gRPC retry throttling):
    /// once every attempt fails it empties and retries stop, so in the failed state the factor
    /// is 1; `retries_paid` is how many retries the full bucket pays for before that.
    Quota { retries_paid: f64 },
}

/// Where a value came from, for the report and SARIF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    pub file: PathBuf,
    /// 1-based line of the block or key, when the format gives one.
    pub line: Option<u32>,
    /// What in the file: `backend pods`, `VirtualService reviews http[0]`, `client web`.
    pub locator: String,
}

/// A built-in default the layer's figures depend on (the file did not say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefaultUsed {
    /// The setting, in the source's own words: `retries`, `proxy_next_upstream_tries`.
    pub setting: String,
    pub value: String,
    /// Which version of the software this default is for, and where it is written down.
    pub version: String,
    pub reference: String,
}

/// Which tier a layer sits in; layers are ordered outermost first by tier, then as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    Client,
    Edge,
    Mesh,
}

/// One layer that may retry: a client library, a proxy, a mesh sidecar.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    /// `haproxy`, `nginx`, `envoy`, `istio`, `linkerd`, `gateway-api`, `ingress-nginx`,
    /// `client`.
    pub software: String,
    pub tier: Tier,
    pub source: Source,
    pub tries: Tries,
    pub retry_on: RetryOn,
    /// Each try's timeout (HAProxy `timeout server`, nginx `proxy_read_timeout`, Envoy
    /// `per_try_timeout`); `None`: a try waits as long as the layer does.
    pub per_try_timeout_s: Option<f64>,
    /// The layer's whole-request limit over all its tries (Envoy route `timeout`, nginx
    /// `proxy_next_upstream_timeout`, a gRPC deadline); `None`: none.
    pub overall_timeout_s: Option<f64>,
    pub budget: Option<Budget>,
    /// Whether the layer stops its tries (and closes its inner connection) when its caller has
    /// gone. HAProxy only with `option abortonclose`; nginx unless `proxy_ignore_client_abort`;
    /// Envoy does; a client has no caller.
    pub aborts_on_close: bool,
    pub defaults: Vec<DefaultUsed>,
    /// What the reader noticed and the figures do not model (`option redispatch`, outlier
    /// detection, non-idempotent requests not retried).
    pub notes: Vec<String>,
}

impl Layer {
    /// The layer as the report names it: `haproxy backend pods`, `client web`.
    pub fn name(&self) -> String {
        if self.source.locator.starts_with(&self.software) {
            self.source.locator.clone()
        } else {
            format!("{} {}", self.software, self.source.locator)
        }
    }
}

/// What an autoscaler's metric sees of the load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "sees", content = "metric")]
pub enum Sees {
    /// First attempts only: retries and debt excluded (the clean signal).
    FirstAttempts,
    /// Every attempt the service receives, retries included (ingress).
    EveryAttempt,
    /// The pods' busy time (CPU): sees the debt, saturates at the limit.
    BusyTime,
    /// A metric `check` cannot classify: asked about, never guessed. Holds the metric's name.
    Unknown(String),
}

/// An autoscaler metric's target, as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "value")]
pub enum Target {
    /// A fraction of the pods' request (Resource `averageUtilization` / 100).
    Utilization(f64),
    /// A value per pod (`averageValue`): a utilization once the pod's capacity is known.
    AverageValue(f64),
    /// A total value (`value`) across the pods.
    Value(f64),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingMetric {
    /// As the HPA names it: `cpu`, `first_attempts_per_second`, `External requests_total{...}`.
    pub name: String,
    pub sees: Sees,
    pub target: Target,
}

/// A HorizontalPodAutoscaler (autoscaling/v2), as far as the trap is concerned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Autoscaler {
    pub source: Source,
    pub name: String,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Upstream takes the largest recommendation of its metrics.
    pub metrics: Vec<ScalingMetric>,
    /// `behavior.scaleDown.stabilizationWindowSeconds` when set.
    pub scale_down_stabilization_s: Option<f64>,
}

/// What the service does with work whose client has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Abandoned {
    /// Finishes it (the publication's assumption, and most servers').
    Served,
    /// Drops it (cancellation on disconnect, deadline propagation): no debt.
    Dropped,
}

/// A document or block a reader saw and did not use, listed in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub file: PathBuf,
    pub what: String,
    pub why: String,
}

/// Everything read from one file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parsed {
    pub layers: Vec<Layer>,
    pub autoscalers: Vec<Autoscaler>,
    pub skipped: Vec<Skipped>,
}

/// A file `check` cannot read: the file and the field named, nothing guessed. Exit code 2.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("{file}: {why}")]
    Unreadable { file: PathBuf, why: String },
    #[error("{file}: line {line}: {why}")]
    Syntax {
        file: PathBuf,
        line: u32,
        why: String,
    },
    #[error("{file}: {field} = {value:?}: {why}")]
    Field {
        file: PathBuf,
        field: String,
        value: String,
        why: String,
    },
    #[error("{file}: not a Kubernetes YAML, HAProxy, nginx, Envoy or stack file ({why})")]
    UnknownKind { file: PathBuf, why: String },
    /// A question the kit will not guess the answer to (an unclassified metric, a target with
    /// no capacity to make it a utilization).
    #[error("{question}")]
    Question { question: String },
}

impl InputError {
    pub fn syntax(file: &Path, line: u32, why: impl Into<String>) -> InputError {
        InputError::Syntax {
            file: file.to_path_buf(),
            line,
            why: why.into(),
        }
    }

    pub fn field(file: &Path, field: &str, value: &str, why: impl Into<String>) -> InputError {
        InputError::Field {
            file: file.to_path_buf(),
            field: field.to_string(),
            value: value.to_string(),
            why: why.into(),
        }
    }
}

/// Input files larger than this are refused (a configuration is kilobytes; a hostile file is not).
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
