//! What `check` reads from a team's files, as plain data: the retrying layers of one request path
//! (outermost first), the autoscalers, and what the service does with abandoned work. Every
//! parser (`haproxy`, `nginx`, `envoy`, `kube`, `clients`) produces these; `amplify` computes on
//! them. Nothing here does I/O.

use std::fmt;
use std::path::{Path, PathBuf};

use kit_defense::ClientDefenses;
pub use kit_defense::discipline::DisciplineSpec;
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
    /// Retries at most `ratio` x requests (tower/Finagle, Linkerd, Gateway API): the layer's
    /// factor is `1 + min(retries, ratio)`.
    Ratio { ratio: f64 },
    /// Envoy's retry budget (a cluster's `circuit_breakers`, Istio's `retryBudget`): retries in
    /// flight at most `percent`% of the requests in flight, and never fewer than
    /// `min_retry_concurrency`; [`in_flight_ratio`] is what that allows per request.
    InFlight {
        percent: f64,
        min_retry_concurrency: u32,
    },
    /// A token bucket refilled only by successes (AWS SDK retry quota, gRPC retry throttling):
    /// once every attempt fails it empties and retries stop, so in the failed state the factor
    /// is 1; `retries_paid` is how many retries the full bucket pays for before that.
    Quota { retries_paid: f64 },
}

impl Budget {
    /// Retries per request it lets through once every attempt fails: the layer's factor is
    /// `1 + min(retries, this)`.
    pub fn failed_ratio(self) -> f64 {
        match self {
            Budget::Ratio { ratio } => ratio.max(0.0),
            Budget::InFlight { percent, .. } => in_flight_ratio(percent),
            Budget::Quota { .. } => 0.0,
        }
    }
}

/// Envoy's concurrency budget as retries per request once every try times out.
///
/// Envoy lets a retry start while the retries in flight are below `max(percent x (active +
/// pending requests), min_retry_concurrency)` (source/common/upstream/resource_manager_impl.h,
/// `RetryBudgetImpl::max`). A retry holds its place from when it is scheduled until its try
/// ends (retry_state_impl.cc `resetRetry`), and the active requests are every try, retries
/// among them. Once every try lasts its per-try timeout `T`, `lambda` requests/s make `lambda T`
/// first tries and `r T` retries in flight: `r T <= p (lambda + r) T` gives at most
/// `p / (1 - p)` retries per request (20%: 0.25; 50%: 1; 100%: no limit). Backoff holds the
/// place a little longer, so this is the most it allows.
///
/// `min_retry_concurrency` is a floor: `m` retries in flight whatever the load, that is `m / T`
/// retries/s, or `m / (lambda T)` per request at `lambda` requests/s through one Envoy (each
/// Envoy counts its own). It lets more through than the percentage when
/// `m > p / (1 - p) x lambda T`: at low rates, and on sidecars, which each see a share.
pub fn in_flight_ratio(percent: f64) -> f64 {
    let p = (percent / 100.0).clamp(0.0, 1.0);
    if p >= 1.0 {
        f64::INFINITY
    } else {
        p / (1.0 - p)
    }
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

impl Source {
    pub fn new(file: &Path, line: Option<u32>, locator: impl Into<String>) -> Source {
        Source {
            file: file.to_path_buf(),
            line,
            locator: locator.into(),
        }
    }
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

impl DefaultUsed {
    pub fn new(setting: &str, value: &str, version: &str, reference: impl Into<String>) -> Self {
        DefaultUsed {
            setting: setting.into(),
            value: value.into(),
            version: version.into(),
            reference: reference.into(),
        }
    }
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
    /// A client's own defenses (throttling, an AWS retry mode, a circuit breaker).
    #[serde(skip_serializing_if = "ClientDefenses::is_none")]
    pub defenses: ClientDefenses,
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
    /// A layer that makes one try with no timeout and stops when its caller goes; each reader
    /// sets what its file says.
    pub fn new(software: &str, tier: Tier, source: Source) -> Layer {
        Layer {
            software: software.to_string(),
            tier,
            source,
            tries: Tries::AtMost(1),
            retry_on: RetryOn::NOTHING,
            per_try_timeout_s: None,
            overall_timeout_s: None,
            budget: None,
            defenses: ClientDefenses::default(),
            aborts_on_close: true,
            defaults: Vec::new(),
            notes: Vec::new(),
        }
    }

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

impl Skipped {
    /// `what` at its line, when the format gives one.
    pub fn new(
        file: &Path,
        what: impl fmt::Display,
        line: Option<u32>,
        why: impl Into<String>,
    ) -> Self {
        let line = line.map(|l| format!(" (line {l})")).unwrap_or_default();
        Skipped {
            file: file.to_path_buf(),
            what: format!("{what}{line}"),
            why: why.into(),
        }
    }
}

/// The pods' queue discipline, or a limit in front of them that sheds as one (Envoy's adaptive
/// concurrency filter), as a file gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueDiscipline {
    pub source: Source,
    pub spec: DisciplineSpec,
    pub notes: Vec<String>,
}

/// Everything read from one file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parsed {
    pub layers: Vec<Layer>,
    pub autoscalers: Vec<Autoscaler>,
    pub skipped: Vec<Skipped>,
    pub disciplines: Vec<QueueDiscipline>,
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

// === Shared readings ===
//
// What more than one reader meets (HTTP status codes, Envoy `retry_on` words, protobuf JSON
// durations, nginx's read timeout) is read here, once, so that the readers agree.

/// The gateway errors: what a proxy answers its caller when it gives up (502 bad gateway, 503 no
/// server, 504 gateway timeout). The chain model in `amplify` propagates an inner layer's giving
/// up as one of these, so a layer that retries any of them retries the 5xx class; a retried 500,
/// 501 or other status alone is noted, not counted.
pub const GATEWAY_ERRORS: [u32; 3] = [502, 503, 504];

/// Whether a layer that retries these HTTP statuses (inclusive ranges; a code is `(c, c)`)
/// retries the 5xx class, and a note on what it retries, `None` when no status is given. Every
/// reader's status codes (nginx and ingress-nginx `http_5xx`, HAProxy `retry-on`, Envoy and Istio
/// retriable status codes, Gateway API `codes`, Linkerd `retry.linkerd.io/http`) go through here.
pub fn retried_statuses(ranges: &[(u32, u32)]) -> (bool, Option<String>) {
    if ranges.is_empty() {
        return (false, None);
    }
    let covered = |c: u32| ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c));
    let gateway: Vec<String> = GATEWAY_ERRORS
        .into_iter()
        .filter(|c| covered(*c))
        .map(|c| c.to_string())
        .collect();
    let written = |(lo, hi): &(u32, u32)| {
        if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}-{hi}")
        }
    };
    let all: Vec<String> = ranges.iter().map(written).collect();
    let others: Vec<String> = ranges
        .iter()
        .filter(|(lo, hi)| (*lo..=*hi).any(|c| !GATEWAY_ERRORS.contains(&c)))
        .map(written)
        .collect();
    let mut parts = Vec::new();
    match gateway.len() {
        0 => {}
        3 => parts.push("502, 503 and 504 are the 5xx class".to_string()),
        _ => parts.push(format!(
            "of the gateway errors only {}, counted as the 5xx class",
            gateway.join(" and ")
        )),
    }
    if !others.is_empty() {
        parts.push(format!(
            "{} outside the three failure classes (a proxy that gives up answers 502, 503 or 504)",
            others.join(", ")
        ));
    }
    let note = format!("retries status {}: {}", all.join(", "), parts.join("; "));
    (!gateway.is_empty(), Some(note))
}

/// [`retried_statuses`] for single codes.
pub fn retried_codes(codes: &[u32]) -> (bool, Option<String>) {
    let ranges: Vec<(u32, u32)> = codes.iter().map(|c| (*c, *c)).collect();
    retried_statuses(&ranges)
}

/// The conditions Envoy's router parses (`parseRetryOn`, `parseRetryGrpcOn` in
/// source/common/router/retry_state_impl.cc); it ignores any other word.
pub const ENVOY_RETRY_ON: [&str; 16] = [
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// Envoy `retry_on` conditions (comma-separated, blanks trimmed, as Envoy splits them) with the
/// policy's `retriable_status_codes`, as failure classes; whether any condition Envoy knows is
/// there (with none, Envoy does not retry); and notes. Used for Envoy routes and for Istio, which
/// passes its `retryOn` words on to Envoy.
///
/// Read against retry_state_impl.cc `wouldRetryFromReset`: a per-try timeout is a local reset
/// after the request started, which `5xx`, `gateway-error` and `reset` retry; a failed
/// connection is retried by `connect-failure`, `reset-before-request`, `reset`, `5xx` and
/// `gateway-error`. `refused-stream` retries only an HTTP/2 REFUSED_STREAM reset and
/// `http3-post-connect-failure` only an HTTP/3 request failing after the connection was made:
/// neither a refused connection, so both are noted. A word Envoy does not know is ignored by
/// Envoy, and noted.
pub fn envoy_retry_on(conditions: &str, codes: &[u32]) -> (RetryOn, bool, Vec<String>) {
    let mut on = RetryOn::NOTHING;
    let mut known = false;
    let (mut notes, mut grpc) = (Vec::new(), Vec::new());
    let mut status_codes = false;
    for cond in conditions
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        known |= ENVOY_RETRY_ON.contains(&cond);
        match cond {
            "5xx" | "gateway-error" => {
                on = RetryOn {
                    timeout: true,
                    connect_failure: true,
                    status_5xx: true,
                };
            }
            "reset" => (on.timeout, on.connect_failure) = (true, true),
            "connect-failure" | "reset-before-request" => on.connect_failure = true,
            "retriable-status-codes" => status_codes = true,
            "refused-stream" => notes.push(
                "retry_on refused-stream: an HTTP/2 REFUSED_STREAM reset, not a refused \
                 connection: outside the three failure classes"
                    .to_string(),
            ),
            "http3-post-connect-failure" => notes.push(
                "retry_on http3-post-connect-failure: an HTTP/3 request failing once connected, \
                 retried over TCP: outside the three failure classes"
                    .to_string(),
            ),
            "retriable-4xx" | "envoy-ratelimited" | "retriable-headers" => {
                notes.push(format!(
                    "retry_on {cond}: outside the three failure classes"
                ));
            }
            "cancelled" | "deadline-exceeded" | "internal" | "resource-exhausted"
            | "unavailable" => grpc.push(cond),
            _ => notes.push(format!(
                "retry_on {cond}: not a condition Envoy knows; it ignores it"
            )),
        }
    }
    if status_codes {
        let (gateway, note) = retried_codes(codes);
        on.status_5xx |= gateway;
        notes.push(note.unwrap_or_else(|| {
            "retriable-status-codes without retriable_status_codes: no status is retried".into()
        }));
    } else if !codes.is_empty() {
        notes.push(
            "retriable_status_codes without retriable-status-codes in retry_on: Envoy ignores \
             them"
                .into(),
        );
    }
    if !grpc.is_empty() {
        notes.push(format!(
            "retries gRPC status {}: for a gRPC service that is its 5xx class, not counted here",
            grpc.join(", ")
        ));
    }
    (on, known, notes)
}

/// Why nginx's read timeout cannot be 0 (nginx `proxy_read_timeout`, ingress-nginx
/// `proxy-read-timeout`).
pub const NGINX_ZERO_READ_TIMEOUT: &str = "0 is not \"no timeout\" in nginx 1.22: \
    ngx_http_upstream arms the read timer with 0 ms (ngx_add_timer), which expires on the next \
    turn of the event loop, so every try times out at once unless its response is already \
    there; set the wait you mean";

/// nginx's read timeout in seconds as a per-try timeout: `Err` ([`NGINX_ZERO_READ_TIMEOUT`])
/// for 0, which nginx does not read as "none". Both nginx readers go through here.
pub fn nginx_read_timeout_s(seconds: f64) -> Result<f64, &'static str> {
    if seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(NGINX_ZERO_READ_TIMEOUT)
    }
}

/// A protobuf JSON `google.protobuf.Duration` in seconds (Envoy's durations, a gRPC service
/// config's): whole seconds, then optionally `.` and 1 to 9 digits, then `s` ("1s", "0.25s",
/// "1.000340012s"), at most 315,576,000,000 s. As protobuf's own parser reads it
/// (src/google/protobuf/json/internal/parser.cc `ParseDuration`: "duration must start with an
/// integer", `TakeNanosAndAdvance`), and grpc-java's copy of it: ".5s" and "1.s" are refused
/// (grpc-go alone takes them). A negative duration is refused: no timeout read here is one.
pub fn protobuf_duration_s(text: &str) -> Result<f64, &'static str> {
    const FORM: &str = "not a protobuf JSON duration: whole seconds, up to 9 decimals, then s, \
                        as \"0.25s\" (not \".25s\")";
    let number = text.strip_suffix('s').ok_or(FORM)?;
    if number.starts_with('-') {
        return Err("a negative duration");
    }
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f) || f.len() > 9) {
        return Err(FORM);
    }
    let too_long = "over protobuf's limit of 315576000000 s (10,000 years)";
    match whole.parse::<u64>() {
        Ok(s) if s <= 315_576_000_000 => number.parse::<f64>().map_err(|_| FORM),
        _ => Err(too_long),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gateway_errors_are_the_5xx_class() {
        for code in GATEWAY_ERRORS {
            assert!(retried_codes(&[code]).0, "{code}");
        }
        for code in [500, 501, 505, 429, 404] {
            let (class, note) = retried_codes(&[code]);
            assert!(!class, "{code}");
            assert!(note.unwrap().contains("outside the three failure classes"));
        }
        assert_eq!(retried_codes(&[]), (false, None));
        let (class, note) = retried_codes(&[500, 503]);
        assert!(class);
        let note = note.unwrap();
        assert!(note.starts_with("retries status 500, 503"), "{note}");
        assert!(note.contains("only 503"), "{note}");
        assert!(note.contains("500 outside"), "{note}");
        let (class, note) = retried_codes(&[502, 503, 504]);
        assert!(class);
        assert!(!note.unwrap().contains("outside"));
        assert!(retried_statuses(&[(500, 599)]).0);
        assert!(!retried_statuses(&[(500, 501), (505, 599)]).0);
        assert!(retried_statuses(&[(503, 503), (429, 429)]).0);
    }

    #[test]
    fn envoy_words_are_read_once() {
        let on = |w: &str| envoy_retry_on(w, &[]).0;
        let connect = RetryOn {
            connect_failure: true,
            ..RetryOn::NOTHING
        };
        assert_eq!(on("connect-failure,refused-stream"), connect);
        assert_eq!(on("refused-stream"), RetryOn::NOTHING);
        assert_eq!(on("http3-post-connect-failure"), RetryOn::NOTHING);
        assert_eq!(on("reset-before-request"), connect);
        assert!(on("gateway-error").status_5xx && on("5xx").timeout);
        assert_eq!(on("reset").classes().len(), 2);
        // An unknown word is ignored, as Envoy does: noted, not an error.
        let (known_on, known, notes) = envoy_retry_on("5xx,sometimes", &[]);
        assert!(known && known_on.status_5xx);
        assert!(notes.iter().any(|n| n.contains("sometimes")));
        assert!(!envoy_retry_on("sometimes", &[]).1);
        // Codes count only with retriable-status-codes, and only the gateway errors.
        assert!(
            envoy_retry_on("retriable-status-codes", &[503])
                .0
                .status_5xx
        );
        assert!(
            !envoy_retry_on("retriable-status-codes", &[500])
                .0
                .status_5xx
        );
        assert!(!envoy_retry_on("connect-failure", &[503]).0.status_5xx);
    }

    #[test]
    fn a_zero_nginx_read_timeout_is_refused() {
        assert_eq!(nginx_read_timeout_s(60.0), Ok(60.0));
        assert_eq!(nginx_read_timeout_s(0.0), Err(NGINX_ZERO_READ_TIMEOUT));
    }

    #[test]
    fn protobuf_durations_as_protobuf_reads_them() {
        for (text, s) in [
            ("1s", 1.0),
            ("0.25s", 0.25),
            ("1.5s", 1.5),
            ("01s", 1.0),
            ("0.000000001s", 1e-9),
            ("315576000000s", 315_576_000_000.0),
        ] {
            assert_eq!(protobuf_duration_s(text), Ok(s), "{text}");
        }
        for text in [
            ".5s",
            "1.s",
            "1",
            "s",
            "",
            "-1s",
            "+1s",
            "1e3s",
            "1 s",
            " 1s",
            "1.5ss",
            "0.0000000001s",
            "315576000001s",
            "99999999999999999999s",
        ] {
            assert!(protobuf_duration_s(text).is_err(), "{text}");
        }
    }
}
