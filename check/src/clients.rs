//! The stack file: what `check` cannot read from configuration because it lives in code. A TOML
//! file with the clients that call the service (outermost first), what the service does with
//! abandoned work, a pod's capacity, and answers to `check`'s questions about metric names:
//!
//! ```toml
//! [[client]]
//! name = "web"                  # required
//! library = "aws-sdk-standard"  # a built-in default (LIBRARIES), or:
//! attempts = 3                  # total tries, the first included (or retries = 2, not both)
//! timeout = "2s"                # per attempt (humantime: "10s", "250ms")
//! overall_timeout = "30s"       # optional, over all attempts
//! budget = 0.2                  # optional retry budget: retries at most 20% of requests
//! retry_on = ["timeout", "connect-failure", "5xx"]   # optional; default every class
//! # library = "kit-loadgen" reads args = ["--timeout=10s", "--retries=2", ...] with the kit
//! # loadgen's own parser; library = "grpc" reads service_config = "path.json" (relative to this
//! # file) as gRPC does (`parse_grpc_service_config`).
//!
//! [service]
//! abandoned = "served"          # or "dropped"
//! pod_capacity = 100.0          # requests/s one pod serves
//!
//! [metrics]
//! "requests_total" = "every-attempt"   # or "first-attempts", "busy-time"
//! ```
//!
//! Fields beside `library` override its defaults. Each built-in default names the version it is
//! for and where upstream writes it down (see `library`): AWS SDK standard retry mode before and
//! after the 2026 update, botocore 1.43 legacy mode, gRPC (A6 retry design; grpc-go, grpc-java),
//! urllib3 2.x, requests 2.x, Go 1.26 net/http, OkHttp 5.x, Finagle, tower 0.5 and the kit's own
//! loadgen. Nothing here does I/O: the caller reads files through `read`.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::layer::{
    Abandoned, Budget, DefaultUsed, InputError, Layer, RetryOn, Sees, Source, Tier, Tries,
    protobuf_duration_s,
};

/// What a stack file says.
#[derive(Debug, Clone, PartialEq)]
pub struct StackFile {
    /// Outermost first; tier `Client`, software `client`.
    pub clients: Vec<Layer>,
    /// `[service] abandoned`.
    pub abandoned: Option<Abandoned>,
    /// `[service] pod_capacity`: requests/s one pod serves.
    pub pod_capacity: Option<f64>,
    /// `[metrics]`: the team's answers about metric names `check` cannot classify, by name.
    pub metrics: Vec<(String, Sees)>,
}

/// The names `library` takes.
pub const LIBRARIES: [&str; 11] = [
    "aws-sdk-standard",
    "aws-sdk-standard-2026",
    "botocore-legacy",
    "finagle",
    "go-net-http",
    "grpc",
    "kit-loadgen",
    "okhttp",
    "python-requests",
    "tower",
    "urllib3",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStack {
    #[serde(default)]
    client: Vec<RawClient>,
    service: Option<RawService>,
    #[serde(default)]
    metrics: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    name: String,
    library: Option<String>,
    attempts: Option<u32>,
    retries: Option<u32>,
    timeout: Option<String>,
    overall_timeout: Option<String>,
    budget: Option<f64>,
    retry_on: Option<Vec<String>>,
    args: Option<Vec<String>>,
    service_config: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    abandoned: Option<String>,
    pod_capacity: Option<f64>,
}

/// Reads a stack file. `read` reads a file a client names (a gRPC service config), given as the
/// stack file writes it: relative to the stack file's directory, which `read` joins.
pub fn parse_stack(
    file: &Path,
    text: &str,
    read: &dyn Fn(&Path) -> Result<String, InputError>,
) -> Result<StackFile, InputError> {
    let raw: RawStack = toml::from_str(text).map_err(|e| toml_error(file, text, &e))?;
    let lines = client_lines(text);
    let clients = raw
        .client
        .iter()
        .enumerate()
        .map(|(i, c)| client_layer(file, i, lines.get(i).copied(), c, read))
        .collect::<Result<Vec<_>, _>>()?;
    let service = raw.service.unwrap_or(RawService {
        abandoned: None,
        pod_capacity: None,
    });
    let abandoned = match service.abandoned.as_deref() {
        None => None,
        Some("served") => Some(Abandoned::Served),
        Some("dropped") => Some(Abandoned::Dropped),
        Some(other) => {
            return Err(InputError::field(
                file,
                "service.abandoned",
                other,
                "expected \"served\" or \"dropped\"",
            ));
        }
    };
    if let Some(c) = service.pod_capacity
        && !(c.is_finite() && c > 0.0)
    {
        return Err(InputError::field(
            file,
            "service.pod_capacity",
            &c.to_string(),
            "requests per second one pod serves: a number above 0",
        ));
    }
    let metrics = raw
        .metrics
        .into_iter()
        .map(|(name, sees)| {
            let sees = match sees.as_str() {
                "first-attempts" => Sees::FirstAttempts,
                "every-attempt" => Sees::EveryAttempt,
                "busy-time" => Sees::BusyTime,
                _ => {
                    return Err(InputError::field(
                        file,
                        &format!("metrics.{name:?}"),
                        &sees,
                        "expected \"first-attempts\", \"every-attempt\" or \"busy-time\"",
                    ));
                }
            };
            Ok((name, sees))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StackFile {
        clients,
        abandoned,
        pod_capacity: service.pod_capacity,
        metrics,
    })
}

/// toml's errors carry a byte span; the report wants a line. The message alone names an unknown
/// key (`unknown field `retires``) but not a mistyped value's key, so the line's text goes too.
fn toml_error(file: &Path, text: &str, e: &toml::de::Error) -> InputError {
    let start = e.span().map_or(0, |s| s.start.min(text.len()));
    let line = text.as_bytes()[..start]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1;
    let source = text.lines().nth(line - 1).unwrap_or("").trim();
    let why = if source.is_empty() {
        e.message().to_string()
    } else {
        format!("{} (in `{source}`)", e.message())
    };
    InputError::Syntax {
        file: file.to_path_buf(),
        line: u32::try_from(line).unwrap_or(u32::MAX),
        why,
    }
}

/// The 1-based line of each `[[client]]` header, in order (TOML allows blanks inside the brackets;
/// a header cannot be inside a multi-line string here because no client field takes one).
fn client_lines(text: &str) -> Vec<u32> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let squeezed: String = l
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            squeezed == "[[client]]"
        })
        .map(|(i, _)| u32::try_from(i + 1).unwrap_or(u32::MAX))
        .collect()
}

/// The layer field a default or note is about, so that a field the file gives drops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Tries,
    RetryOn,
    Timeout,
    OverallTimeout,
    Budget,
}

/// A client's figures before they become a [`Layer`]: a library's defaults, then the file's
/// fields over them. `None` tries: the library has no count of its own (the file must give one).
#[derive(Debug, Clone, Default)]
struct Settings {
    tries: Option<u32>,
    retry_on: Option<RetryOn>,
    per_try_timeout_s: Option<f64>,
    overall_timeout_s: Option<f64>,
    budget: Option<Budget>,
    defaults: Vec<(Setting, DefaultUsed)>,
    notes: Vec<(Option<Setting>, String)>,
}

impl Settings {
    fn default_used(
        mut self,
        about: Setting,
        setting: &str,
        value: &str,
        version: &str,
        reference: &str,
    ) -> Settings {
        self.defaults.push((
            about,
            DefaultUsed {
                setting: setting.to_string(),
                value: value.to_string(),
                version: version.to_string(),
                reference: reference.to_string(),
            },
        ));
        self
    }

    fn note(mut self, about: Option<Setting>, text: &str) -> Settings {
        self.notes.push((about, text.to_string()));
        self
    }

    /// The file gave this setting: the library's defaults and notes about it no longer apply.
    fn given(&mut self, setting: Setting) {
        self.defaults.retain(|(s, _)| *s != setting);
        self.notes.retain(|(s, _)| *s != Some(setting));
    }
}

fn client_layer(
    file: &Path,
    index: usize,
    line: Option<u32>,
    raw: &RawClient,
    read: &dyn Fn(&Path) -> Result<String, InputError>,
) -> Result<Layer, InputError> {
    let at = format!("client[{index}]");
    let library = raw.library.as_deref();
    if raw.args.is_some() && library != Some("kit-loadgen") {
        let value = raw.args.as_ref().map(|a| a.join(" ")).unwrap_or_default();
        return Err(InputError::field(
            file,
            &format!("{at}.args"),
            &value,
            "args are read only with library = \"kit-loadgen\"",
        ));
    }
    if let Some(path) = &raw.service_config
        && library != Some("grpc")
    {
        return Err(InputError::field(
            file,
            &format!("{at}.service_config"),
            path,
            "a service config is read only with library = \"grpc\"",
        ));
    }
    let mut s = match library {
        None => Settings::default(),
        Some("kit-loadgen") => loadgen_settings(file, &at, raw.args.as_deref().unwrap_or(&[]))?,
        Some("grpc") => match &raw.service_config {
            None => grpc_settings(None),
            Some(written) => {
                // `read` joins the path to the stack file's directory; errors and notes show it
                // joined too, so that they name a file one can open.
                let text = read(Path::new(written))?;
                let path = file.parent().unwrap_or(Path::new("")).join(written);
                let config = parse_grpc_service_config(&path, &text)?;
                grpc_settings(Some((&path, &config)))
            }
        },
        Some(name) => library_settings(name).ok_or_else(|| {
            InputError::field(
                file,
                &format!("{at}.library"),
                name,
                format!("not a built-in library; known: {}", LIBRARIES.join(", ")),
            )
        })?,
    };
    apply_fields(file, &at, raw, &mut s)?;
    finish(file, &at, line, raw, s)
}

/// The file's own fields, over the library's defaults.
fn apply_fields(
    file: &Path,
    at: &str,
    raw: &RawClient,
    s: &mut Settings,
) -> Result<(), InputError> {
    let tries = match (raw.attempts, raw.retries) {
        (Some(_), Some(r)) => {
            return Err(InputError::field(
                file,
                &format!("{at}.retries"),
                &r.to_string(),
                "give attempts (total tries) or retries (attempts - 1), not both",
            ));
        }
        (Some(0), None) => {
            return Err(InputError::field(
                file,
                &format!("{at}.attempts"),
                "0",
                "total tries, the first included: at least 1",
            ));
        }
        (Some(a), None) => Some(a),
        (None, Some(r)) => Some(r.checked_add(1).ok_or_else(|| {
            InputError::field(file, &format!("{at}.retries"), &r.to_string(), "too many")
        })?),
        (None, None) => None,
    };
    if let Some(t) = tries {
        s.given(Setting::Tries);
        s.tries = Some(t);
    }
    if let Some(t) = &raw.timeout {
        s.given(Setting::Timeout);
        s.per_try_timeout_s = Some(duration(file, &format!("{at}.timeout"), t)?);
    }
    if let Some(t) = &raw.overall_timeout {
        s.given(Setting::OverallTimeout);
        s.overall_timeout_s = Some(duration(file, &format!("{at}.overall_timeout"), t)?);
    }
    if let Some(ratio) = raw.budget {
        if !(ratio.is_finite() && (0.0..=1000.0).contains(&ratio)) {
            return Err(InputError::field(
                file,
                &format!("{at}.budget"),
                &ratio.to_string(),
                "retries per request, e.g. 0.2: a number from 0 to 1000",
            ));
        }
        s.given(Setting::Budget);
        s.budget = Some(Budget::Ratio { ratio });
    }
    if let Some(classes) = &raw.retry_on {
        s.given(Setting::RetryOn);
        s.retry_on = Some(retry_on(file, at, classes)?);
    }
    Ok(())
}

fn retry_on(file: &Path, at: &str, classes: &[String]) -> Result<RetryOn, InputError> {
    let mut on = RetryOn::NOTHING;
    for (i, class) in classes.iter().enumerate() {
        match class.as_str() {
            "timeout" => on.timeout = true,
            "connect-failure" => on.connect_failure = true,
            "5xx" => on.status_5xx = true,
            _ => {
                return Err(InputError::field(
                    file,
                    &format!("{at}.retry_on[{i}]"),
                    class,
                    "expected \"timeout\", \"connect-failure\" or \"5xx\"",
                ));
            }
        }
    }
    Ok(on)
}

fn duration(file: &Path, path: &str, text: &str) -> Result<f64, InputError> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d.as_secs_f64()),
        Ok(_) => Err(InputError::field(file, path, text, "must be more than 0")),
        Err(e) => Err(InputError::field(
            file,
            path,
            text,
            format!("a duration such as \"10s\" or \"250ms\" ({e})"),
        )),
    }
}

/// The layer, once every figure is known. A client has no caller: it never aborts on close.
fn finish(
    file: &Path,
    at: &str,
    line: Option<u32>,
    raw: &RawClient,
    mut s: Settings,
) -> Result<Layer, InputError> {
    let Some(tries) = s.tries else {
        let why = match raw.library.as_deref() {
            Some(lib) => format!("library {lib} has no attempt count of its own: give attempts"),
            None => format!("give library (one of {}) or attempts", LIBRARIES.join(", ")),
        };
        return Err(InputError::field(file, &format!("{at}.attempts"), "", &why));
    };
    let retry_on = match s.retry_on {
        Some(on) => on,
        None => {
            s = s.default_used(
                Setting::RetryOn,
                "retry_on",
                "timeout, connect-failure, 5xx",
                "falsification check stack file",
                "retry_on not given: every class, the worst case (check/clients.rs)",
            );
            EVERY_CLASS
        }
    };
    Ok(Layer {
        software: "client".to_string(),
        tier: Tier::Client,
        source: Source {
            file: file.to_path_buf(),
            line,
            locator: format!("client {}", raw.name),
        },
        tries: Tries::AtMost(tries),
        retry_on,
        per_try_timeout_s: s.per_try_timeout_s,
        overall_timeout_s: s.overall_timeout_s,
        budget: s.budget,
        aborts_on_close: false,
        defaults: s.defaults.into_iter().map(|(_, d)| d).collect(),
        notes: s.notes.into_iter().map(|(_, n)| n).collect(),
    })
}

const AWS_GUIDE: &str = "AWS SDKs and Tools Reference Guide, \"Retry behavior\", \
                         https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html";
const AWS_PRE_2026: &str = "AWS SDK standard retry mode before the 2026 update (without \
                            AWS_NEW_RETRIES_2026=true): aws-sdk-go-v2 aws/retry, botocore 1.43 \
                            retries/standard.py";
const AWS_2026: &str = "AWS SDK standard retry mode with AWS_NEW_RETRIES_2026=true (opt-in since \
                        May 2026: aws-sdk-java-v2 2.44.0, @aws-sdk/client-* 3.1048.0, botocore \
                        1.43; the announced default from no sooner than November 2026)";
const BOTOCORE: &str = "botocore 1.43.11 (boto3 1.43.11), legacy retry mode: its default unless \
                        retry_mode is set or AWS_NEW_RETRIES_2026=true";
const GRPC: &str = "gRPC retry design A6 (grpc-go service_config.go, grpc-java, C-core)";
const GRPC_A6: &str = "https://github.com/grpc/proposal/blob/master/A6-client-retries.md";
const FINAGLE: &str = "Finagle finagle-core (twitter/finagle, RetryBudget.scala and Retries.scala)";
const EVERY_CLASS: RetryOn = RetryOn {
    timeout: true,
    connect_failure: true,
    status_5xx: true,
};
const CONNECT_ONLY: RetryOn = RetryOn {
    timeout: false,
    connect_failure: true,
    status_5xx: false,
};

/// A built-in library's defaults; `None`: not one (`kit-loadgen` and `grpc` read more than a
/// name and are built by their own functions).
fn library_settings(name: &str) -> Option<Settings> {
    match name {
        "aws-sdk-standard" => Some(aws_standard()),
        "aws-sdk-standard-2026" => Some(aws_standard_2026()),
        "botocore-legacy" => Some(botocore_legacy()),
        "urllib3" => Some(urllib3()),
        "python-requests" => Some(python_requests()),
        "go-net-http" => Some(go_net_http()),
        "okhttp" => Some(okhttp()),
        "finagle" => Some(finagle()),
        "tower" => Some(tower()),
        _ => None,
    }
}

/// Standard mode's common part: three attempts, and what it retries (transient errors, among
/// them timeouts and connection errors, 500/502/503/504, and throttling).
fn aws_common(version: &str) -> Settings {
    Settings {
        tries: Some(3),
        retry_on: Some(EVERY_CLASS),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "max_attempts",
        "3",
        version,
        &format!(
            "{AWS_GUIDE}; aws-sdk-go-v2 aws/retry/standard.go DefaultMaxAttempts; botocore \
                  retries/standard.py DEFAULT_MAX_ATTEMPTS"
        ),
    )
    .default_used(
        Setting::RetryOn,
        "retryable errors",
        "timeouts and connection errors, HTTP 500/502/503/504, throttling error codes",
        version,
        "aws-sdk-go-v2 aws/retry/standard.go DefaultRetryables, DefaultTimeouts; botocore \
         retries/standard.py TransientRetryableChecker",
    )
    .note(
        Some(Setting::Timeout),
        "no per-attempt timeout common to the AWS SDKs (botocore: read_timeout 60 s per socket \
         read; aws-sdk-go-v2: none): give timeout",
    )
    .note(
        Some(Setting::Budget),
        "the retry quota is one SDK client's bucket, not shared across clients, processes or hosts",
    )
}

fn aws_standard() -> Settings {
    Settings {
        // A retry after a timeout costs 10 of the 500 tokens: 50 retries, then none while every
        // attempt fails (a success refunds 1, or its retry's cost).
        budget: Some(Budget::Quota { retries_paid: 50.0 }),
        ..aws_common(AWS_PRE_2026)
    }
    .default_used(
        Setting::Budget,
        "retry quota",
        "500 tokens; a retry costs 10 after a timeout, 5 otherwise; a success refunds 1: 50 \
         timeout retries",
        AWS_PRE_2026,
        "aws-sdk-go-v2 aws/retry/standard.go DefaultRetryRateTokens, DefaultRetryCost, \
         DefaultRetryTimeoutCost; botocore retries/quota.py, retries/standard.py RetryQuotaChecker",
    )
    .note(
        Some(Setting::Budget),
        "aws-sdk-go-v2 and botocore charge 5 tokens for 5xx and connection failures: 100 \
         retries before the quota is empty (@aws-sdk/util-retry charges 10 for every transient \
         error)",
    )
    .note(
        None,
        "aws-sdk-java-v2, aws-sdk-cpp and boto3 default to their own legacy mode before the 2026 \
         update (boto3: library botocore-legacy); with AWS_NEW_RETRIES_2026=true use \
         aws-sdk-standard-2026",
    )
}

fn aws_standard_2026() -> Settings {
    Settings {
        // 14 tokens a transient retry, timeouts included: 35 whole retries out of 500.
        budget: Some(Budget::Quota { retries_paid: 35.0 }),
        ..aws_common(AWS_2026)
    }
    .default_used(
        Setting::Budget,
        "retry quota",
        "500 tokens; a retry costs 14 (5 after throttling); a success refunds 1: 35 retries",
        AWS_2026,
        &format!(
            "{AWS_GUIDE} (retry quota table); botocore 1.43.11 retries/standard.py \
                  RetryQuotaChecker._RETRY_COST_V2; aws-sdk-go-v2 pull request 3400"
        ),
    )
    .note(
        None,
        "DynamoDB and DynamoDB Streams clients make 4 attempts",
    )
}

fn botocore_legacy() -> Settings {
    Settings {
        tries: Some(5),
        retry_on: Some(EVERY_CLASS),
        per_try_timeout_s: Some(60.0),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "max_attempts",
        "5",
        BOTOCORE,
        "botocore/data/_retry.json retry.__default__.max_attempts; botocore/configprovider.py \
         _DEFAULT_RETRY_MODE",
    )
    .default_used(
        Setting::RetryOn,
        "retry policies",
        "GENERAL_CONNECTION_ERROR (connection errors, read timeouts), HTTP 500/502/503/504/509, \
         throttling",
        BOTOCORE,
        "botocore/data/_retry.json retry.__default__.policies; botocore/retryhandler.py \
         EXCEPTION_MAP",
    )
    .default_used(
        Setting::Timeout,
        "read_timeout",
        "60s",
        BOTOCORE,
        "botocore/endpoint.py DEFAULT_TIMEOUT; botocore/config.py",
    )
    .note(
        Some(Setting::Timeout),
        "read_timeout is per socket read: a service that trickles bytes never fires it",
    )
    .note(None, "legacy mode has no retry quota")
}

fn urllib3() -> Settings {
    const V: &str = "urllib3 2.7.0 (2.x)";
    Settings {
        tries: Some(4),
        retry_on: Some(RetryOn {
            timeout: true,
            connect_failure: true,
            status_5xx: false,
        }),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "Retry.DEFAULT",
        "Retry(3): 3 retries, 4 attempts",
        V,
        "src/urllib3/util/retry.py: Retry.DEFAULT = Retry(3)",
    )
    .default_used(
        Setting::RetryOn,
        "retried errors",
        "connection errors (NewConnectionError is a ConnectTimeoutError); read errors (timeouts, \
         resets) for HEAD, GET, PUT, DELETE, OPTIONS, TRACE; no status codes (status_forcelist \
         empty)",
        V,
        "src/urllib3/util/retry.py: Retry.increment, DEFAULT_ALLOWED_METHODS, is_retry",
    )
    .note(
        Some(Setting::Timeout),
        "no timeout by default (Timeout.DEFAULT_TIMEOUT: the socket default, none): give timeout \
         (the read timeout, per socket read)",
    )
    .note(
        Some(Setting::RetryOn),
        "a POST's read error is not retried; a 413, 429 or 503 with Retry-After is",
    )
}

fn python_requests() -> Settings {
    const V: &str = "requests 2.34.2 (2.x)";
    Settings {
        tries: Some(1),
        retry_on: Some(RetryOn::NOTHING),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "HTTPAdapter max_retries",
        "0: Retry(0, read=False), 1 attempt",
        V,
        "src/requests/adapters.py: DEFAULT_RETRIES = 0, HTTPAdapter.__init__",
    )
    .note(
        None,
        "a mounted HTTPAdapter(max_retries=Retry(...)) retries as urllib3 does: describe it with \
         library = \"urllib3\" and attempts",
    )
}

fn go_net_http() -> Settings {
    const V: &str = "Go 1.26 net/http";
    Settings {
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "Transport retry",
        "once more, on a new connection, when a reused connection fails before the response",
        V,
        "src/net/http/transport.go persistConn.shouldRetryRequest",
    )
    .note(
        Some(Setting::Tries),
        "never after a new connection's failure, a timeout or a 5xx; a request with a body only \
         if it can be rewound (GetBody) and, once written, is replayable (GET, HEAD, OPTIONS, \
         TRACE or an Idempotency-Key header: request.go isReplayable)",
    )
    .note(
        Some(Setting::OverallTimeout),
        "http.Client.Timeout is 0 (none) by default and spans the whole exchange: give \
         overall_timeout",
    )
}

fn okhttp() -> Settings {
    const V: &str = "OkHttp 5.x";
    Settings {
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        per_try_timeout_s: Some(10.0),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "retryOnConnectionFailure",
        "true: a failed connection is tried again on the same route, then the host's other \
         routes; 2 attempts for a one-address host",
        V,
        "okhttp3/internal/http/RetryAndFollowUpInterceptor.kt recover(); \
         okhttp3/internal/connection/RealRoutePlanner.kt hasNext()",
    )
    .default_used(
        Setting::Timeout,
        "readTimeout",
        "10s",
        V,
        "okhttp3/OkHttpClient.kt Builder (readTimeout 10 s, callTimeout 0)",
    )
    .note(
        Some(Setting::Tries),
        "a host with N addresses (a headless Service) gets up to N+1 attempts: give attempts",
    )
    .note(
        Some(Setting::RetryOn),
        "a read timeout after the request was sent is never retried (isRecoverable); a 408, and \
         a 503 with Retry-After: 0, are repeated once",
    )
    .note(
        Some(Setting::Timeout),
        "readTimeout is per socket read: a service that trickles bytes never fires it",
    )
}

fn finagle() -> Settings {
    Settings {
        // Requeues are bounded by the budget (20% of its balance per request), not by a count;
        // any count of 2 or more gives the budget's factor.
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        budget: Some(Budget::Ratio { ratio: 0.2 }),
        ..Settings::default()
    }
    .default_used(
        Setting::Budget,
        "RetryBudget()",
        "20% of requests, plus 10 retries/s, over a 10 s ttl",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/RetryBudget.scala apply()",
    )
    .default_used(
        Setting::RetryOn,
        "Retries.Policy",
        "RetryPolicy.Never: only requests never written (RetryableWriteException) are requeued",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/Retries.scala",
    )
    .default_used(
        Setting::Tries,
        "requeues per request",
        "bounded by 20% of the budget's balance (MaxRequeuesPerReq): modelled as 2 attempts",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/Retries.scala",
    )
    .note(
        None,
        "timeouts and application failures are retried only by a RetryPolicy or ResponseClassifier \
         of your own: describe it with attempts and retry_on",
    )
}

fn tower() -> Settings {
    Settings {
        budget: Some(Budget::Ratio { ratio: 0.2 }),
        ..Settings::default()
    }
    .default_used(
        Setting::Budget,
        "TpsBudget::default()",
        "20% of requests, plus 10 retries/s, over a 10 s ttl",
        "tower 0.5.3",
        "tower/src/retry/budget/tps_budget.rs impl Default for TpsBudget",
    )
    .note(
        Some(Setting::Budget),
        "the 10 retries/s floor lets a client with little traffic retry more than 20%",
    )
}

fn grpc_base() -> Settings {
    Settings {
        tries: Some(1),
        retry_on: Some(RetryOn::NOTHING),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "retryPolicy",
        "none: no retries unless the service config has one",
        GRPC,
        &format!("{GRPC_A6} (Configuration Language)"),
    )
    .note(
        None,
        "transparent retries of RPCs that never reached the server application are not counted",
    )
    .note(
        Some(Setting::OverallTimeout),
        "the call deadline is set in code or by methodConfig timeout: give overall_timeout",
    )
}

/// gRPC's figures: no retries, or the service config's. gRPC has no per-try timeout: the
/// deadline spans every attempt, so its own expiry ends the call and is never retried.
fn grpc_settings(config: Option<(&Path, &GrpcServiceConfig)>) -> Settings {
    let Some((path, config)) = config else {
        return grpc_base();
    };
    let shown = path.display();
    let mut s = grpc_base();
    s.notes
        .extend(config.notes.iter().map(|n| (None, format!("{shown}: {n}"))));
    if let Some(t) = &config.retry_throttling {
        s.budget = Some(Budget::Quota {
            retries_paid: t.max_tokens / 2.0,
        });
        s = s.note(
            Some(Setting::Budget),
            &format!(
                "{shown}: retryThrottling (maxTokens {}, tokenRatio {}) is per server name; \
                 failed first attempts spend tokens too, so {} retries is an upper bound",
                t.max_tokens,
                t.token_ratio,
                t.max_tokens / 2.0
            ),
        );
    }
    let chosen = config
        .methods
        .iter()
        .enumerate()
        .max_by_key(|(i, m)| (m.attempts(), Reverse(*i)));
    let Some((chosen, method)) = chosen else {
        return s;
    };
    for (i, other) in config
        .methods
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != chosen)
    {
        s = s.note(
            None,
            &format!(
                "{shown}: methodConfig[{i}] ({}) makes {} attempts: the figures take \
                 methodConfig[{chosen}], the most",
                other.names.join(", "),
                other.attempts()
            ),
        );
    }
    if method.timeout_s.is_some() {
        s.given(Setting::OverallTimeout);
        s.overall_timeout_s = method.timeout_s;
    }
    let Some(policy) = &method.retry else {
        return s;
    };
    s = s.note(
        None,
        &format!(
            "{shown}: methodConfig[{chosen}] ({}) retries {} up to maxAttempts {}",
            method.names.join(", "),
            policy.retryable_status_codes.join(", "),
            policy.max_attempts
        ),
    );
    s.given(Setting::Tries);
    s.tries = Some(policy.attempts());
    s.retry_on = Some(policy.retry_on());
    if policy.max_attempts > GRPC_MAX_ATTEMPTS {
        s = s.default_used(
            Setting::Tries,
            "maxAttempts limit",
            &format!(
                "{GRPC_MAX_ATTEMPTS} (the config asks {})",
                policy.max_attempts
            ),
            "gRPC clients' default (grpc-go defaultMaxCallAttempts, grpc-java maxRetryAttempts)",
            &format!("{GRPC_A6} (Limits on Retries and Hedges)"),
        );
    }
    let unmodelled: Vec<&str> = policy
        .retryable_status_codes
        .iter()
        .map(String::as_str)
        .filter(|c| grpc_class(c) == RetryOn::NOTHING)
        .collect();
    if !unmodelled.is_empty() {
        s = s.note(
            Some(Setting::RetryOn),
            &format!(
                "{shown}: also retries {}: not one of check's failure classes",
                unmodelled.join(", ")
            ),
        );
    }
    s
}

/// Reads the kit loadgen's flags as `loadgen` would.
fn loadgen_settings(file: &Path, at: &str, args: &[String]) -> Result<Settings, InputError> {
    let (config, defaults) = loadgen::config::parse_argv(args).map_err(|e| {
        let shown = e.to_string();
        let first = shown
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        InputError::field(file, &format!("{at}.args"), &args.join(" "), first)
    })?;
    if let Some(r) = config.retry_budget
        && !(r.is_finite() && (0.0..=1000.0).contains(&r))
    {
        return Err(InputError::field(
            file,
            &format!("{at}.args"),
            &format!("--retry-budget {r}"),
            "retries per first attempt: from 0 to 1000",
        ));
    }
    // The loadgen's own defaults, for the flags the args leave out.
    const V: &str = concat!("kit loadgen ", env!("CARGO_PKG_VERSION"));
    let mut s = loadgen_figures(&config);
    let retry_on: Vec<&str> = config.retry_on.iter().map(|r| r.name()).collect();
    for (default, flag, about, value) in [
        (
            defaults.timeout,
            "--timeout",
            Setting::Timeout,
            humantime::format_duration(config.timeout).to_string(),
        ),
        (
            defaults.retries,
            "--retries",
            Setting::Tries,
            config.retries.to_string(),
        ),
        (
            defaults.retry_on,
            "--retry-on",
            Setting::RetryOn,
            retry_on.join(","),
        ),
    ] {
        if default {
            s = s.default_used(about, flag, &value, V, "loadgen/src/config.rs Config");
        }
    }
    Ok(s)
}

/// The flags' figures: `connect` and `io` (a connection failing mid-exchange, before a response)
/// are both connection failures to `check`.
fn loadgen_figures(config: &loadgen::Config) -> Settings {
    use loadgen::config::RetryOn as Flag;
    let has = |f: Flag| config.retry_on.contains(&f);
    let mut s = Settings {
        tries: Some(config.retries.saturating_add(1)),
        retry_on: Some(RetryOn {
            timeout: has(Flag::Timeout),
            connect_failure: has(Flag::Connect) || has(Flag::Io),
            status_5xx: has(Flag::Status5xx),
        }),
        per_try_timeout_s: Some(config.timeout.as_secs_f64()),
        ..Settings::default()
    };
    if let Some(ratio) = config.retry_budget {
        s.budget = Some(Budget::Ratio { ratio });
        s = s.note(
            Some(Setting::Budget),
            &format!(
                "--retry-budget also allows {}/s over a {} window (--retry-budget-min, \
                 --retry-budget-ttl)",
                config.retry_budget_min,
                humantime::format_duration(config.retry_budget_ttl)
            ),
        );
    }
    if config.retry_quota.is_some() {
        if config.retry_budget.is_some() {
            s = s.note(
                Some(Setting::Budget),
                "--retry-budget and --retry-quota both: the quota, which empties while every \
                 attempt fails, sets the figures",
            );
        }
        // aws-standard: 500 tokens, 10 a retry after a timeout (5 otherwise).
        s.budget = Some(Budget::Quota { retries_paid: 50.0 });
        s = s.note(
            Some(Setting::Budget),
            "--retry-quota aws-standard: 50 retries after timeouts (500 tokens, 10 each), 100 \
             after other failures (5 each)",
        );
    }
    if let Some(b) = config.backoff {
        s = s.note(
            None,
            &format!("--backoff {b}: retries wait; the counts do not change"),
        );
    }
    if config.deadline {
        s = s.note(
            None,
            "--deadline sends x-deadline-ms so the service can drop expired work: if it does, \
             say [service] abandoned = \"dropped\"",
        );
    }
    s
}

/// A gRPC service config (`doc/service_config.md`, retry design A6), as far as retries go.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcServiceConfig {
    pub methods: Vec<GrpcMethod>,
    pub retry_throttling: Option<GrpcThrottling>,
    /// What gRPC ignores, or reads differently between implementations.
    pub notes: Vec<String>,
}

/// One `methodConfig` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcMethod {
    /// `service/method`, `service/*` for a whole service, `*` for every one.
    pub names: Vec<String>,
    /// `timeout`: the call's deadline, over all attempts.
    pub timeout_s: Option<f64>,
    /// `None`: no retries (none given, or one gRPC ignores as invalid).
    pub retry: Option<GrpcRetryPolicy>,
}

impl GrpcMethod {
    pub fn attempts(&self) -> u32 {
        self.retry.as_ref().map_or(1, GrpcRetryPolicy::attempts)
    }
}

/// `retryPolicy`, valid as gRPC requires (else it is ignored: `GrpcMethod::retry` is `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcRetryPolicy {
    /// As written; gRPC clients make at most [`GRPC_MAX_ATTEMPTS`].
    pub max_attempts: u32,
    pub initial_backoff_s: f64,
    pub max_backoff_s: f64,
    pub backoff_multiplier: f64,
    /// Code names, as `UNAVAILABLE` (numbers are read as their names).
    pub retryable_status_codes: Vec<String>,
}

/// gRPC clients treat a larger `maxAttempts` as this (A6, "Limits on Retries and Hedges";
/// grpc-go `defaultMaxCallAttempts`, grpc-java `maxRetryAttempts`; a client can raise it).
pub const GRPC_MAX_ATTEMPTS: u32 = 5;

impl GrpcRetryPolicy {
    pub fn attempts(&self) -> u32 {
        self.max_attempts.min(GRPC_MAX_ATTEMPTS)
    }

    pub fn retry_on(&self) -> RetryOn {
        self.retryable_status_codes
            .iter()
            .map(|c| grpc_class(c))
            .fold(RetryOn::NOTHING, |a, b| RetryOn {
                timeout: a.timeout || b.timeout,
                connect_failure: a.connect_failure || b.connect_failure,
                status_5xx: a.status_5xx || b.status_5xx,
            })
    }
}

/// `retryThrottling`: a token bucket per server name; no retries while tokens <= maxTokens / 2.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcThrottling {
    pub max_tokens: f64,
    pub token_ratio: f64,
}

/// The status codes, by number.
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Which of `check`'s failure classes a retried status code covers.
///
/// - `UNAVAILABLE`: a connection that cannot be made or breaks fails the RPC with it, and a
///   proxy's 502/503/504 reaches a gRPC client as it (grpc `doc/http-grpc-status-mapping.md`):
///   connection failures and 5xx.
/// - `INTERNAL`, `UNKNOWN`: the server failed (HTTP 500 and other codes map to `UNKNOWN`): 5xx.
/// - `DEADLINE_EXCEEDED`: never the client's own timeout firing. gRPC has no per-try timeout; its
///   deadline spans every attempt, and once it passes the call is over (A6, "Maximum Number of
///   Retries"). A retried `DEADLINE_EXCEEDED` is an inner layer's answer after its own deadline
///   (a server propagating deadlines, a proxy's timeout), which the layer model counts as an inner
///   layer's gateway error: 5xx.
fn grpc_class(code: &str) -> RetryOn {
    match code {
        "UNAVAILABLE" => RetryOn {
            timeout: false,
            connect_failure: true,
            status_5xx: true,
        },
        "INTERNAL" | "UNKNOWN" | "DEADLINE_EXCEEDED" => RetryOn {
            timeout: false,
            connect_failure: false,
            status_5xx: true,
        },
        _ => RetryOn::NOTHING,
    }
}

/// Reads a gRPC service config (JSON) as grpc-go does: a `retryPolicy` gRPC would ignore as invalid
/// is noted and left out; a config it would reject (a wrong type, an unknown status code, bad
/// `retryThrottling`) is an error naming the field.
pub fn parse_grpc_service_config(file: &Path, text: &str) -> Result<GrpcServiceConfig, InputError> {
    let root: Value = serde_json::from_str(text).map_err(|e| InputError::Syntax {
        file: file.to_path_buf(),
        line: u32::try_from(e.line()).unwrap_or(u32::MAX),
        why: e.to_string(),
    })?;
    let mut json = Json {
        file,
        notes: Vec::new(),
    };
    let root = json.object(&root, "")?;
    let mut methods = Vec::new();
    if let Some(list) = json.key(root, "", "methodConfig") {
        let Value::Array(list) = list else {
            return Err(json.bad("methodConfig", list, "a list of method configs"));
        };
        for (i, m) in list.iter().enumerate() {
            if let Some(method) = json.method(&format!("methodConfig[{i}]"), m)? {
                methods.push(method);
            }
        }
    }
    let retry_throttling = match json.key(root, "", "retryThrottling") {
        None => None,
        Some(v) => Some(json.throttling(v)?),
    };
    Ok(GrpcServiceConfig {
        methods,
        retry_throttling,
        notes: json.notes,
    })
}

/// A reader of service-config JSON that names each field by its path for errors and notes.
struct Json<'a> {
    file: &'a Path,
    notes: Vec<String>,
}

impl Json<'_> {
    fn bad(&self, path: &str, value: &Value, why: &str) -> InputError {
        InputError::field(self.file, path, &value.to_string(), why)
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, InputError> {
        v.as_object().ok_or_else(|| {
            let shown = if path.is_empty() { "(the file)" } else { path };
            self.bad(shown, v, "a JSON object")
        })
    }

    /// A key as the spec spells it, or in another case: grpc-go's JSON reading ignores case (its
    /// own retry example writes `MaxAttempts`); grpc-java and C-core do not, which is noted.
    fn key<'v>(&mut self, obj: &'v Map<String, Value>, path: &str, key: &str) -> Option<&'v Value> {
        if let Some(v) = obj.get(key) {
            return Some(v);
        }
        let (written, v) = obj.iter().find(|(k, _)| k.eq_ignore_ascii_case(key))?;
        self.notes.push(format!(
            "{path}{}{written} is read as {key} by grpc-go only (grpc-java and C-core need {key})",
            if path.is_empty() { "" } else { "." }
        ));
        Some(v)
    }

    fn method(&mut self, path: &str, v: &Value) -> Result<Option<GrpcMethod>, InputError> {
        let obj = self.object(v, path)?;
        let Some(names) = self.key(obj, path, "name") else {
            self.notes
                .push(format!("{path} has no name: gRPC ignores it"));
            return Ok(None);
        };
        let names = self.names(&format!("{path}.name"), names)?;
        let timeout_s = match self.key(obj, path, "timeout") {
            None => None,
            Some(t) => Some(self.duration(&format!("{path}.timeout"), t)?),
        };
        let retry = match self.key(obj, path, "retryPolicy") {
            None => None,
            Some(p) => self.retry_policy(&format!("{path}.retryPolicy"), p)?,
        };
        if let Some(h) = self.key(obj, path, "hedgingPolicy") {
            self.notes.push(format!(
                "{path}.hedgingPolicy {h} is not modelled: grpc-go ignores it, grpc-java sends \
                 the copies without waiting for a failure"
            ));
        }
        if let Some(Value::Bool(true)) = self.key(obj, path, "waitForReady") {
            self.notes.push(format!(
                "{path}.waitForReady: an RPC waits for a connection (until its deadline) instead \
                 of failing UNAVAILABLE"
            ));
        }
        Ok(Some(GrpcMethod {
            names,
            timeout_s,
            retry,
        }))
    }

    fn names(&mut self, path: &str, v: &Value) -> Result<Vec<String>, InputError> {
        let Value::Array(list) = v else {
            return Err(self.bad(path, v, "a list of {service, method}"));
        };
        let mut out = Vec::new();
        for (i, n) in list.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let obj = self.object(n, &at)?;
            let text = |json: &mut Self, key: &str| -> Result<String, InputError> {
                match json.key(obj, &at, key) {
                    None => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(other) => Err(json.bad(&format!("{at}.{key}"), other, "a string")),
                }
            };
            let (service, method) = (text(self, "service")?, text(self, "method")?);
            out.push(match (service.is_empty(), method.is_empty()) {
                (true, true) => "*".to_string(),
                (true, false) => {
                    return Err(self.bad(
                        &at,
                        n,
                        "a method needs its service (grpc-go refuses it)",
                    ));
                }
                (false, true) => format!("{service}/*"),
                (false, false) => format!("{service}/{method}"),
            });
        }
        Ok(out)
    }

    fn retry_policy(
        &mut self,
        path: &str,
        v: &Value,
    ) -> Result<Option<GrpcRetryPolicy>, InputError> {
        let obj = self.object(v, path)?;
        let at = |key: &str| format!("{path}.{key}");
        let max_attempts = match self.key(obj, path, "maxAttempts") {
            None => 0,
            Some(n) => n
                .as_u64()
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .ok_or_else(|| self.bad(&at("maxAttempts"), n, "a whole number"))?,
        };
        let mut durations = [0.0; 2];
        for (slot, key) in durations.iter_mut().zip(["initialBackoff", "maxBackoff"]) {
            if let Some(d) = self.key(obj, path, key) {
                *slot = self.duration(&at(key), d)?;
            }
        }
        let backoff_multiplier = match self.key(obj, path, "backoffMultiplier") {
            None => 0.0,
            Some(m) => m
                .as_f64()
                .ok_or_else(|| self.bad(&at("backoffMultiplier"), m, "a number"))?,
        };
        let codes = match self.key(obj, path, "retryableStatusCodes") {
            None => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, c)| self.code(&format!("{path}.retryableStatusCodes[{i}]"), c))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(self.bad(&at("retryableStatusCodes"), other, "a list")),
        };
        // grpc-go convertRetryPolicy: such a policy is ignored (with a warning), not refused.
        let invalid = [
            (max_attempts <= 1, "maxAttempts must be 2 or more"),
            (durations[0] <= 0.0, "initialBackoff must be above 0"),
            (durations[1] <= 0.0, "maxBackoff must be above 0"),
            (
                backoff_multiplier <= 0.0,
                "backoffMultiplier must be above 0",
            ),
            (codes.is_empty(), "retryableStatusCodes must not be empty"),
        ];
        if let Some((_, why)) = invalid.iter().find(|(bad, _)| *bad) {
            self.notes
                .push(format!("{path} is ignored by gRPC ({why}): no retries"));
            return Ok(None);
        }
        Ok(Some(GrpcRetryPolicy {
            max_attempts,
            initial_backoff_s: durations[0],
            max_backoff_s: durations[1],
            backoff_multiplier,
            retryable_status_codes: codes,
        }))
    }

    /// A status code by name (`"UNAVAILABLE"`) or number (`14`), as grpc-go reads them.
    fn code(&self, path: &str, v: &Value) -> Result<String, InputError> {
        let found = match v {
            Value::String(s) => GRPC_CODES.iter().find(|c| **c == s.as_str()),
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .and_then(|n| GRPC_CODES.get(n)),
            _ => None,
        };
        found.map(|c| (*c).to_string()).ok_or_else(|| {
            self.bad(
                path,
                v,
                "a gRPC status code, as \"UNAVAILABLE\" (upper case) or 14",
            )
        })
    }

    /// A protobuf JSON Duration, `"0.5s"` ([`protobuf_duration_s`], as grpc-java and protobuf
    /// read it). grpc-go also takes one with no whole seconds or no decimals after the point
    /// (`".01s"`, `"1.s"`: internal/serviceconfig `Duration.UnmarshalJSON`, "both are optional
    /// but one is required"), and its own retry example writes `".01s"`: read as grpc-go reads
    /// it, and noted.
    fn duration(&mut self, path: &str, v: &Value) -> Result<f64, InputError> {
        let Value::String(s) = v else {
            let why =
                "a protobuf JSON duration: a string of seconds with \"s\" appended, as \"0.5s\"";
            return Err(self.bad(path, v, why));
        };
        let why = match protobuf_duration_s(s) {
            Ok(secs) => return Ok(secs),
            Err(why) => why,
        };
        match grpc_go_only(s).map(|written| protobuf_duration_s(&written)) {
            Some(Ok(secs)) => {
                self.notes.push(format!(
                    "{path} {s} is read as {secs}s by grpc-go only (grpc-java and protobuf's JSON \
                     parser need whole seconds and decimals after a point, as \"0.01s\")"
                ));
                Ok(secs)
            }
            _ => Err(self.bad(path, v, why)),
        }
    }

    /// grpc-go refuses the whole config for throttling outside its ranges.
    fn throttling(&mut self, v: &Value) -> Result<GrpcThrottling, InputError> {
        let obj = self.object(v, "retryThrottling")?;
        let max = self.number(obj, "maxTokens")?;
        let ratio = self.number(obj, "tokenRatio")?;
        if !(max.1 > 0.0 && max.1 <= 1000.0) {
            return Err(self.bad("retryThrottling.maxTokens", max.0, "must be in (0, 1000]"));
        }
        if ratio.1 <= 0.0 {
            return Err(self.bad("retryThrottling.tokenRatio", ratio.0, "must be above 0"));
        }
        Ok(GrpcThrottling {
            max_tokens: max.1,
            token_ratio: ratio.1,
        })
    }

    /// A required number of `retryThrottling`, with the value as written (for errors).
    fn number<'v>(
        &mut self,
        obj: &'v Map<String, Value>,
        key: &str,
    ) -> Result<(&'v Value, f64), InputError> {
        let path = format!("retryThrottling.{key}");
        match self.key(obj, "retryThrottling", key) {
            Some(v) => v
                .as_f64()
                .map(|n| (v, n))
                .ok_or_else(|| self.bad(&path, v, "a number")),
            None => Err(self.bad(&path, &Value::Null, "required")),
        }
    }
}

/// A duration grpc-go takes and protobuf does not (`".01s"`, `"1.s"`), in protobuf's form.
fn grpc_go_only(text: &str) -> Option<String> {
    let (whole, fraction) = text.strip_suffix('s')?.split_once('.')?;
    match (whole.is_empty(), fraction.is_empty()) {
        (true, false) => Some(format!("0.{fraction}s")),
        (false, true) => Some(format!("{whole}s")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn data_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients")
    }

    fn no_read(p: &Path) -> Result<String, InputError> {
        panic!("unexpected read of {}", p.display())
    }

    fn parse(text: &str) -> Result<StackFile, InputError> {
        parse_stack(Path::new("stack.toml"), text, &no_read)
    }

    fn one(text: &str) -> Layer {
        let mut s = parse(text).unwrap();
        assert_eq!(s.clients.len(), 1);
        s.clients.remove(0)
    }

    fn field_of(e: InputError) -> (String, String, String) {
        match e {
            InputError::Field {
                field, value, why, ..
            } => (field, value, why),
            other => panic!("not a field error: {other:?}"),
        }
    }

    fn read_data(p: &Path) -> Result<String, InputError> {
        std::fs::read_to_string(p).map_err(|e| InputError::Unreadable {
            file: p.to_path_buf(),
            why: e.to_string(),
        })
    }

    fn data(name: &str) -> (PathBuf, String) {
        let path = data_dir().join(name);
        let text = read_data(&path).unwrap();
        (path, text)
    }

    #[test]
    fn attempts_client_with_every_field() {
        let c = one(
            "[[client]]\nname = \"web\"\nattempts = 3\ntimeout = \"250ms\"\n\
             overall_timeout = \"2s\"\nbudget = 0.2\nretry_on = [\"timeout\", \"5xx\"]\n",
        );
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.per_try_timeout_s, Some(0.25));
        assert_eq!(c.overall_timeout_s, Some(2.0));
        assert_eq!(c.budget, Some(Budget::Ratio { ratio: 0.2 }));
        assert_eq!(
            c.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: false,
                status_5xx: true
            }
        );
        assert_eq!((c.software.as_str(), c.tier), ("client", Tier::Client));
        assert!(!c.aborts_on_close);
        assert_eq!(c.source.line, Some(1));
        assert_eq!(c.source.locator, "client web");
        assert!(c.defaults.is_empty() && c.notes.is_empty(), "{c:?}");
    }

    #[test]
    fn retries_are_attempts_minus_one_and_retry_on_defaults_to_every_class() {
        let c = one("[[client]]\nname = \"a\"\nretries = 2\ntimeout = \"1s\"\n");
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.retry_on, EVERY_CLASS);
        assert_eq!(c.defaults.len(), 1);
        assert_eq!(c.defaults[0].setting, "retry_on");
        let e = parse("[[client]]\nname = \"a\"\nretries = 2\nattempts = 3\n").unwrap_err();
        let (f, v, why) = field_of(e);
        assert_eq!((f.as_str(), v.as_str()), ("client[0].retries", "2"));
        assert!(why.contains("not both"), "{why}");
        let (f, _, why) = field_of(parse("[[client]]\nname = \"a\"\n").unwrap_err());
        assert_eq!(f, "client[0].attempts");
        assert!(why.contains("aws-sdk-standard"), "{why}");
        let (f, v, _) = field_of(parse("[[client]]\nname = \"a\"\nattempts = 0\n").unwrap_err());
        assert_eq!((f.as_str(), v.as_str()), ("client[0].attempts", "0"));
    }

    #[test]
    fn aws_standard_with_an_overridden_timeout() {
        let c =
            one("[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard\"\ntimeout = \"2s\"\n");
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.retry_on, EVERY_CLASS);
        assert_eq!(c.per_try_timeout_s, Some(2.0));
        assert_eq!(c.budget, Some(Budget::Quota { retries_paid: 50.0 }));
        let settings: Vec<&str> = c.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(
            settings,
            ["max_attempts", "retryable errors", "retry quota"]
        );
        assert!(
            c.defaults
                .iter()
                .all(|d| !d.version.is_empty() && !d.reference.is_empty())
        );
        assert!(
            !c.notes.iter().any(|n| n.contains("give timeout")),
            "the file gave the timeout: {:?}",
            c.notes
        );
        let new = one("[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard-2026\"\n");
        assert_eq!(new.budget, Some(Budget::Quota { retries_paid: 35.0 }));
        assert!(new.notes.iter().any(|n| n.contains("give timeout")));
        let over = one(
            "[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard\"\nattempts = 5\n\
                        budget = 0.1\n",
        );
        assert_eq!(over.tries, Tries::AtMost(5));
        assert_eq!(over.budget, Some(Budget::Ratio { ratio: 0.1 }));
        let left: Vec<&str> = over.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(left, ["retryable errors"]);
    }

    #[test]
    fn every_library_builds_a_layer_with_its_sources() {
        for lib in LIBRARIES {
            let extra = match lib {
                "tower" => "attempts = 2\n",
                _ => "",
            };
            let c = one(&format!(
                "[[client]]\nname = \"c\"\nlibrary = \"{lib}\"\n{extra}"
            ));
            assert!(c.tries.limit().is_none_or(|n| n >= 1), "{lib}");
            assert!(!c.defaults.is_empty(), "{lib}: no default named");
            for d in &c.defaults {
                assert!(
                    !d.version.is_empty() && !d.reference.is_empty(),
                    "{lib}: {d:?}"
                );
            }
        }
        let (f, _, why) =
            field_of(parse("[[client]]\nname = \"t\"\nlibrary = \"tower\"\n").unwrap_err());
        assert_eq!(f, "client[0].attempts");
        assert!(why.contains("tower has no attempt count"), "{why}");
        let req = one("[[client]]\nname = \"p\"\nlibrary = \"python-requests\"\n");
        assert_eq!(
            (req.tries, req.retry_on),
            (Tries::AtMost(1), RetryOn::NOTHING)
        );
        let u = one("[[client]]\nname = \"p\"\nlibrary = \"urllib3\"\n");
        assert_eq!(u.tries, Tries::AtMost(4));
        assert!(u.retry_on.timeout && u.retry_on.connect_failure && !u.retry_on.status_5xx);
        let go = one("[[client]]\nname = \"g\"\nlibrary = \"go-net-http\"\n");
        assert_eq!((go.tries, go.retry_on), (Tries::AtMost(2), CONNECT_ONLY));
        let f = one("[[client]]\nname = \"f\"\nlibrary = \"finagle\"\n");
        assert_eq!(f.budget, Some(Budget::Ratio { ratio: 0.2 }));
        let b = one("[[client]]\nname = \"b\"\nlibrary = \"botocore-legacy\"\n");
        assert_eq!(
            (b.tries, b.per_try_timeout_s, b.budget),
            (Tries::AtMost(5), Some(60.0), None)
        );
    }

    #[test]
    fn unknown_library_lists_the_known_ones() {
        let e = parse("[[client]]\nname = \"a\"\nattempts = 1\n[[client]]\nname = \"b\"\nlibrary = \"hyper\"\n")
            .unwrap_err();
        let (f, v, why) = field_of(e);
        assert_eq!((f.as_str(), v.as_str()), ("client[1].library", "hyper"));
        for lib in LIBRARIES {
            assert!(why.contains(lib), "{why}");
        }
    }

    #[test]
    fn bad_values_name_the_field_and_the_value() {
        for (text, want_field, want_value) in [
            (
                "timeout = \"10 parsecs\"",
                "client[0].timeout",
                "10 parsecs",
            ),
            ("timeout = \"0s\"", "client[0].timeout", "0s"),
            (
                "overall_timeout = \"soon\"",
                "client[0].overall_timeout",
                "soon",
            ),
            ("budget = -0.5", "client[0].budget", "-0.5"),
            (
                "retry_on = [\"timeout\", \"4xx\"]",
                "client[0].retry_on[1]",
                "4xx",
            ),
            ("args = [\"--retries=1\"]", "client[0].args", "--retries=1"),
            (
                "service_config = \"sc.json\"",
                "client[0].service_config",
                "sc.json",
            ),
        ] {
            let text = format!("[[client]]\nname = \"a\"\nattempts = 2\n{text}\n");
            let (f, v, why) = field_of(parse(&text).unwrap_err());
            assert_eq!((f.as_str(), v.as_str()), (want_field, want_value), "{why}");
        }
        let e = parse(
            "[[client]]\nname = \"a\"\nattempts = 2\n[[client]]\nname = \"b\"\n\
                       attempts = 2\ntimeout = \"ten\"\n",
        )
        .unwrap_err();
        assert_eq!(field_of(e).0, "client[1].timeout");
    }

    #[test]
    fn unknown_keys_and_syntax_errors_give_the_line() {
        let e = parse("[[client]]\nname = \"a\"\nattempts = 2\nretires = 2\n").unwrap_err();
        let InputError::Syntax { line, why, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(line, 4);
        assert!(why.contains("retires"), "{why}");
        let e =
            parse("[service]\nabandoned = \"served\"\n\n[[client]\nname = \"a\"\n").unwrap_err();
        let InputError::Syntax { line, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(line, 4);
        let e = parse("[[client]]\nname = \"a\"\nattempts = \"three\"\n").unwrap_err();
        let InputError::Syntax { line, why, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(line, 3);
        assert!(why.contains("attempts = \"three\""), "{why}");
        let e = parse("[srvice]\n").unwrap_err();
        assert!(matches!(e, InputError::Syntax { line: 1, ref why, .. } if why.contains("srvice")));
    }

    #[test]
    fn service_and_metric_answers() {
        let s = parse(
            "[service]\nabandoned = \"dropped\"\npod_capacity = 120.5\n\n[metrics]\n\
             \"requests_total\" = \"every-attempt\"\nfirst_attempts_per_second = \"first-attempts\"\n\
             cpu_seconds = \"busy-time\"\n",
        )
        .unwrap();
        assert!(s.clients.is_empty());
        assert_eq!(s.abandoned, Some(Abandoned::Dropped));
        assert_eq!(s.pod_capacity, Some(120.5));
        assert_eq!(
            s.metrics,
            [
                ("cpu_seconds".to_string(), Sees::BusyTime),
                ("first_attempts_per_second".to_string(), Sees::FirstAttempts),
                ("requests_total".to_string(), Sees::EveryAttempt),
            ]
        );
        let (f, v, _) = field_of(parse("[service]\nabandoned = \"finished\"\n").unwrap_err());
        assert_eq!((f.as_str(), v.as_str()), ("service.abandoned", "finished"));
        let (f, v, _) = field_of(parse("[service]\npod_capacity = 0.0\n").unwrap_err());
        assert_eq!((f.as_str(), v.as_str()), ("service.pod_capacity", "0"));
        let (f, v, _) = field_of(parse("[metrics]\nrps = \"all\"\n").unwrap_err());
        assert_eq!((f.as_str(), v.as_str()), ("metrics.\"rps\"", "all"));
    }

    #[test]
    fn kit_loadgen_args_as_f5() {
        let c = one(
            "[[client]]\nname = \"loadgen\"\nlibrary = \"kit-loadgen\"\n\
             args = [\"--timeout=10s\", \"--retries=2\", \"--retry-on=timeout,5xx\"]\n",
        );
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.per_try_timeout_s, Some(10.0));
        assert_eq!(
            c.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: false,
                status_5xx: true
            }
        );
        assert_eq!((c.budget, c.overall_timeout_s), (None, None));
        assert!(c.defaults.is_empty(), "{:?}", c.defaults);
    }

    #[test]
    fn kit_loadgen_defaults_budgets_and_deadline() {
        let c =
            one("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [\"--deadline\"]\n");
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(
            c.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: true,
                status_5xx: false
            }
        );
        let flags: Vec<(&str, &str)> = c
            .defaults
            .iter()
            .map(|d| (d.setting.as_str(), d.value.as_str()))
            .collect();
        assert_eq!(
            flags,
            [
                ("--timeout", "10s"),
                ("--retries", "2"),
                ("--retry-on", "timeout,connect")
            ]
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("abandoned = \"dropped\"")),
            "{:?}",
            c.notes
        );
        let q = one("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\n\
             args = [\"--retry-quota\", \"aws-standard\", \"--retry-on=io\", \"--backoff=exp:100ms,1s\"]\n");
        assert_eq!(q.budget, Some(Budget::Quota { retries_paid: 50.0 }));
        assert_eq!(q.retry_on, CONNECT_ONLY);
        let b = one(
            "[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [\"--retry-budget=0.2\"]\n\
                     timeout = \"3s\"\n",
        );
        assert_eq!(b.budget, Some(Budget::Ratio { ratio: 0.2 }));
        assert_eq!(b.per_try_timeout_s, Some(3.0), "a field overrides the args");
        assert!(!b.defaults.iter().any(|d| d.setting == "--timeout"));
        for (args, needle) in [
            ("\"--retries=many\"", "many"),
            ("\"--retry-on=timeout,teapot\"", "teapot"),
            ("\"--frobnicate\"", "frobnicate"),
            ("\"--retry-budget=-1\"", "--retry-budget"),
        ] {
            let text =
                format!("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [{args}]\n");
            let (f, v, why) = field_of(parse(&text).unwrap_err());
            assert_eq!(f, "client[0].args");
            assert!(v.contains(needle) || why.contains(needle), "{v} / {why}");
            assert!(!why.contains("Usage"), "{why}");
        }
    }

    #[test]
    fn loadgen_flags_read_no_environment_and_need_no_target() {
        // A LOADGEN_* variable in the shell that runs `check` must not change what the file says.
        for arg in loadgen_command().get_arguments() {
            assert_eq!(arg.get_env(), None, "{}", arg.get_id());
        }
        let c = loadgen_settings(
            Path::new("s.toml"),
            "client[0]",
            &["--retries=1".to_string()],
        )
        .unwrap();
        assert_eq!(c.tries, Some(2));
    }

    #[test]
    fn grpc_java_example_verbatim() {
        let (path, text) = data("grpc-java-retrying_service_config.json");
        let config = parse_grpc_service_config(&path, &text).unwrap();
        assert_eq!(config.methods.len(), 1);
        let m = &config.methods[0];
        assert_eq!(m.names, ["helloworld.Greeter/SayHello"]);
        let policy = m.retry.as_ref().unwrap();
        assert_eq!(
            (
                policy.max_attempts,
                policy.initial_backoff_s,
                policy.max_backoff_s
            ),
            (5, 0.5, 30.0)
        );
        assert_eq!(policy.backoff_multiplier, 2.0);
        assert_eq!(policy.retryable_status_codes, ["UNAVAILABLE"]);
        assert_eq!(
            policy.retry_on(),
            RetryOn {
                timeout: false,
                connect_failure: true,
                status_5xx: true
            }
        );
        assert!(config.notes.is_empty(), "{:?}", config.notes);
        assert_eq!(config.retry_throttling, None);
    }

    #[test]
    fn grpc_go_example_verbatim_with_its_capitalised_keys() {
        let (path, text) = data("grpc-go-retry-example.json");
        let config = parse_grpc_service_config(&path, &text).unwrap();
        let m = &config.methods[0];
        assert_eq!(m.names, ["grpc.examples.echo.Echo/*"]);
        let policy = m.retry.as_ref().unwrap();
        assert_eq!((policy.max_attempts, policy.initial_backoff_s), (4, 0.01));
        assert!(
            config
                .notes
                .iter()
                .any(|n| n.contains("MaxAttempts is read as maxAttempts by grpc-go only")),
            "{:?}",
            config.notes
        );
        assert!(config.notes.iter().any(|n| n.contains("waitForReady")));
        assert!(
            config
                .notes
                .iter()
                .any(|n| n.contains("initialBackoff .01s is read as 0.01s by grpc-go only")),
            "{:?}",
            config.notes
        );
    }

    /// Durations are protobuf's (the parser Envoy's reader uses too); grpc-go's extra forms are
    /// read with a note, anything else is refused.
    #[test]
    fn grpc_durations_are_protobuf_durations() {
        let timeout = |t: &str| {
            let text = format!(r#"{{"methodConfig": [{{"name": [{{}}], "timeout": "{t}"}}]}}"#);
            parse_grpc_service_config(Path::new("sc.json"), &text)
        };
        let exact = timeout("1.5s").unwrap();
        assert_eq!(exact.methods[0].timeout_s, Some(1.5));
        assert!(exact.notes.is_empty(), "{:?}", exact.notes);
        for (go, secs) in [(".5s", 0.5), ("2.s", 2.0)] {
            let config = timeout(go).unwrap();
            assert_eq!(config.methods[0].timeout_s, Some(secs), "{go}");
            assert!(
                config.notes.iter().any(|n| n.contains("by grpc-go only")),
                "{go}: {:?}",
                config.notes
            );
        }
        for bad in [
            "0.0000000001s",
            "1e3s",
            "-1s",
            ".s",
            "1.2.3s",
            "1 s",
            "315576000001s",
        ] {
            let e = timeout(bad).unwrap_err();
            assert_eq!(field_of(e).0, "methodConfig[0].timeout", "{bad}");
        }
    }

    #[test]
    fn grpc_limits_throttling_and_the_chosen_method() {
        let text = r#"{
          "methodConfig": [
            {"name": [{"service": "a.A", "method": "Get"}], "timeout": "1.5s",
             "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                             "backoffMultiplier": 2, "retryableStatusCodes": ["INTERNAL"]}},
            {"name": [{"service": "a.A"}], "timeout": "10s",
             "retryPolicy": {"maxAttempts": 8, "initialBackoff": ".1s", "maxBackoff": "1s",
                             "backoffMultiplier": 2,
                             "retryableStatusCodes": [14, "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"]}}
          ],
          "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
        }"#;
        let path = Path::new("sc.json");
        let config = parse_grpc_service_config(path, text).unwrap();
        let s = grpc_settings(Some((path, &config)));
        assert_eq!(s.tries, Some(GRPC_MAX_ATTEMPTS));
        assert_eq!(s.overall_timeout_s, Some(10.0));
        assert_eq!(s.per_try_timeout_s, None, "gRPC has no per-try timeout");
        assert_eq!(
            s.retry_on,
            Some(RetryOn {
                timeout: false,
                connect_failure: true,
                status_5xx: true
            })
        );
        assert_eq!(s.budget, Some(Budget::Quota { retries_paid: 5.0 }));
        assert!(
            s.defaults
                .iter()
                .any(|(_, d)| d.setting == "maxAttempts limit" && d.value.contains("asks 8"))
        );
        let notes: Vec<&str> = s.notes.iter().map(|(_, n)| n.as_str()).collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("methodConfig[0] (a.A/Get) makes 3 attempts")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("RESOURCE_EXHAUSTED")),
            "{notes:?}"
        );
        assert!(
            !notes.iter().any(|n| n.contains("give overall_timeout")),
            "{notes:?}"
        );
    }

    #[test]
    fn grpc_ignores_an_invalid_policy_and_refuses_a_broken_config() {
        let text = r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 1,
            "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
        let config = parse_grpc_service_config(Path::new("sc.json"), text).unwrap();
        assert_eq!(config.methods[0].names, ["*"]);
        assert_eq!(config.methods[0].retry, None);
        assert!(
            config.notes[0].contains("maxAttempts must be 2 or more"),
            "{:?}",
            config.notes
        );
        for (text, want) in [
            (
                r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"retryableStatusCodes": ["unavailable"]}}]}"#,
                "methodConfig[0].retryPolicy.retryableStatusCodes[0]",
            ),
            (
                r#"{"methodConfig": [{"name": [{}], "timeout": "10"}]}"#,
                "methodConfig[0].timeout",
            ),
            (
                r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": "4"}}]}"#,
                "methodConfig[0].retryPolicy.maxAttempts",
            ),
            (
                r#"{"retryThrottling": {"maxTokens": 2000, "tokenRatio": 0.1}}"#,
                "retryThrottling.maxTokens",
            ),
            (
                r#"{"retryThrottling": {"maxTokens": 10}}"#,
                "retryThrottling.tokenRatio",
            ),
            (
                r#"{"methodConfig": [{"name": [{"method": "Get"}]}]}"#,
                "methodConfig[0].name[0]",
            ),
            (r#"[]"#, "(the file)"),
        ] {
            let e = parse_grpc_service_config(Path::new("sc.json"), text).unwrap_err();
            assert_eq!(field_of(e).0, want, "{text}");
        }
        let e = parse_grpc_service_config(Path::new("sc.json"), "{\n  \"methodConfig\": [\n,\n]}")
            .unwrap_err();
        assert!(matches!(e, InputError::Syntax { line: 3, .. }), "{e:?}");
    }

    #[test]
    fn grpc_client_reads_its_service_config_beside_the_stack_file() {
        let read = |p: &Path| -> Result<String, InputError> {
            assert_eq!(
                p,
                Path::new("sc/retry.json"),
                "as written: read joins the directory"
            );
            Ok(
                r#"{"methodConfig": [{"name": [{"service": "s.S"}], "timeout": "3s"}]}"#
                    .to_string(),
            )
        };
        let text =
            "[[client]]\nname = \"g\"\nlibrary = \"grpc\"\nservice_config = \"sc/retry.json\"\n";
        let c = parse_stack(Path::new("conf/stack.toml"), text, &read)
            .unwrap()
            .clients
            .remove(0);
        assert_eq!((c.tries, c.retry_on), (Tries::AtMost(1), RetryOn::NOTHING));
        assert_eq!(c.overall_timeout_s, Some(3.0));
        let bare = one("[[client]]\nname = \"g\"\nlibrary = \"grpc\"\noverall_timeout = \"5s\"\n");
        assert_eq!(
            (bare.tries, bare.overall_timeout_s),
            (Tries::AtMost(1), Some(5.0))
        );
        assert!(
            !bare
                .notes
                .iter()
                .any(|n| n.contains("give overall_timeout"))
        );
        let failing = |p: &Path| -> Result<String, InputError> {
            Err(InputError::Unreadable {
                file: p.to_path_buf(),
                why: "gone".into(),
            })
        };
        let broken =
            |_: &Path| -> Result<String, InputError> { Ok("{\"methodConfig\": 3}".into()) };
        let e = parse_stack(Path::new("conf/stack.toml"), text, &broken).unwrap_err();
        assert!(
            matches!(e, InputError::Field { ref file, ref field, .. }
                if file == Path::new("conf/sc/retry.json") && field == "methodConfig"),
            "{e:?}"
        );
        let e = parse_stack(Path::new("stack.toml"), text, &failing).unwrap_err();
        assert!(
            matches!(e, InputError::Unreadable { ref file, .. } if file == Path::new("sc/retry.json"))
        );
    }

    #[test]
    fn example_stack_files_parse() {
        let beside = |p: &Path| read_data(&data_dir().join(p));
        let (path, text) = data("stack-libraries.toml");
        let s = parse_stack(&path, &text, &beside).unwrap();
        let names: Vec<&str> = s
            .clients
            .iter()
            .map(|c| c.source.locator.as_str())
            .collect();
        assert_eq!(names, ["client storefront", "client orders-api"]);
        assert_eq!(s.clients[0].tries, Tries::AtMost(4));
        assert_eq!(s.clients[1].tries, Tries::AtMost(5));
        assert_eq!(s.clients[1].overall_timeout_s, Some(4.0));
        assert_eq!(s.abandoned, Some(Abandoned::Served));
        let (path, text) = data("stack-aws.toml");
        let s = parse_stack(&path, &text, &beside).unwrap();
        assert_eq!(
            s.clients[0].budget,
            Some(Budget::Quota { retries_paid: 50.0 })
        );
        let (path, text) = data("stack-attempts.toml");
        let s = parse_stack(&path, &text, &beside).unwrap();
        assert_eq!(s.clients[0].tries, Tries::AtMost(3));
        assert!(!s.metrics.is_empty());
        let (path, text) = data("stack-kit-loadgen-f5.toml");
        let s = parse_stack(&path, &text, &beside).unwrap();
        assert_eq!(s.clients[0].tries, Tries::AtMost(3));
        assert_eq!(s.clients[0].per_try_timeout_s, Some(10.0));
        assert_eq!(s.pod_capacity, Some(100.0));
    }
}
