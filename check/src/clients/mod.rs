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
//! # The client's defenses, optional, in an experiment's words (kit-defense's defaults for the
//! # parameters left out):
//! throttling = { k = 2.0, window = "2m" }            # the SRE book's adaptive throttling
//! circuit_breaker = { failures = 5, open = "30s", probes = 1 }
//! retry_quota = "aws-standard"  # or "aws-adaptive" (the AWS SDK's retry_mode); not with budget
//! # library = "kit-loadgen" reads args = ["--timeout=10s", "--retries=2", ...] with the kit
//! # loadgen's own parser; library = "grpc" reads service_config = "path.json" (relative to this
//! # file) as gRPC does (`parse_grpc_service_config`).
//!
//! [service]
//! abandoned = "served"          # or "dropped"
//! pod_capacity = 100.0          # requests/s one pod serves
//! discipline = "codel"          # fifo (default), lifo, codel, bounded, sharing, adaptive; or
//! # discipline = { kind = "codel", target = "50ms", interval = "1s" } (also limit, initial,
//! # min, max, latency, backoff: an experiment's `discipline`)
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
//!
//! This file reads the stack file; `libraries` holds the built-in defaults, `kit_loadgen` the
//! loadgen's flags and `grpc` gRPC's defaults and service configs.

mod grpc;
mod kit_loadgen;
mod libraries;

use std::collections::BTreeMap;
use std::path::Path;

use falsification_model::experiment::{BreakerFile, DisciplineParams, Span, ThrottlingParams};
use kit_defense::discipline::DisciplineKind;
use kit_defense::{BreakerParams, ClientDefenses, ParamError, QuotaMode, ThrottleParams};
use serde::Deserialize;

use crate::layer::{
    Abandoned, Budget, DefaultUsed, DisciplineSpec, InputError, Layer, QueueDiscipline, RetryOn,
    Sees, Source, Tier, Tries,
};
use grpc::grpc_settings;
pub use grpc::{
    GrpcMethod, GrpcRetryPolicy, GrpcServiceConfig, GrpcThrottling, parse_grpc_service_config,
};
use kit_loadgen::loadgen_settings;
use libraries::{AWS_STANDARD_TIMEOUT_RETRIES, EVERY_CLASS, library_settings};

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
    /// `[service] discipline`: how each pod orders and sheds its queue.
    pub discipline: Option<QueueDiscipline>,
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
    // The client defenses, in an experiment's words (`[client]` of falsification/model).
    throttling: Option<ThrottlingParams>,
    circuit_breaker: Option<BreakerFile>,
    retry_quota: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    abandoned: Option<String>,
    pod_capacity: Option<f64>,
    /// A kind (`"codel"`) or a table in an experiment's words (`{ kind = "codel", target =
    /// "50ms" }`).
    discipline: Option<toml::Value>,
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
    let service = raw.service.unwrap_or_default();
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
    let discipline = service
        .discipline
        .as_ref()
        .map(|d| service_discipline(file, text, d))
        .transpose()?;
    Ok(StackFile {
        clients,
        abandoned,
        pod_capacity: service.pod_capacity,
        metrics,
        discipline,
    })
}

/// `[service] discipline`, a kind alone or a table with `kind` and the parameters to set.
fn service_discipline(
    file: &Path,
    text: &str,
    written: &toml::Value,
) -> Result<QueueDiscipline, InputError> {
    let field = "service.discipline";
    let bad = |why: &str| InputError::field(file, field, &written.to_string(), why);
    let spec = match written {
        toml::Value::String(kind) => {
            let kind: DisciplineKind = kind.parse().map_err(|e: ParamError| bad(e.expected))?;
            DisciplineSpec::of(kind)
        }
        toml::Value::Table(_) => {
            let p: DisciplineParams = written
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.message()))?;
            let kind = p.kind.ok_or_else(|| {
                let kinds: Vec<&str> = DisciplineKind::ALL.iter().map(|k| k.name()).collect();
                bad(&format!("give kind: one of {}", kinds.join(", ")))
            })?;
            DisciplineSpec {
                kind,
                target_s: p.target.map(Span::secs),
                interval_s: p.interval.map(Span::secs),
                limit: p.limit,
                initial: p.initial,
                min: p.min,
                max: p.max,
                latency_s: p.latency.map(Span::secs),
                backoff: p.backoff,
            }
        }
        _ => return Err(bad("a kind such as \"codel\", or a table with kind")),
    };
    let line = text
        .lines()
        .position(|l| l.trim_start().starts_with("discipline"))
        .and_then(|i| u32::try_from(i + 1).ok());
    Ok(QueueDiscipline {
        source: Source::new(file, line, "[service] discipline"),
        spec,
        notes: Vec::new(),
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
    InputError::syntax(file, u32::try_from(line).unwrap_or(u32::MAX), why)
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
pub(super) enum Setting {
    Tries,
    RetryOn,
    Timeout,
    OverallTimeout,
    Budget,
    Defenses,
}

/// A client's figures before they become a [`Layer`]: a library's defaults, then the file's
/// fields over them. `None` tries: the library has no count of its own (the file must give one).
#[derive(Debug, Clone, Default)]
pub(super) struct Settings {
    pub(super) tries: Option<u32>,
    pub(super) retry_on: Option<RetryOn>,
    pub(super) per_try_timeout_s: Option<f64>,
    pub(super) overall_timeout_s: Option<f64>,
    pub(super) budget: Option<Budget>,
    pub(super) defenses: ClientDefenses,
    pub(super) defaults: Vec<(Setting, DefaultUsed)>,
    pub(super) notes: Vec<(Option<Setting>, String)>,
}

impl Settings {
    pub(super) fn default_used(
        mut self,
        about: Setting,
        setting: &str,
        value: &str,
        version: &str,
        reference: &str,
    ) -> Settings {
        self.defaults
            .push((about, DefaultUsed::new(setting, value, version, reference)));
        self
    }

    pub(super) fn note(mut self, about: Option<Setting>, text: &str) -> Settings {
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
    let bad = |key: &str, value: &str, why: &str| {
        InputError::field(file, &format!("{at}.{key}"), value, why)
    };
    let library = raw.library.as_deref();
    if raw.args.is_some() && library != Some("kit-loadgen") {
        let value = raw.args.as_ref().map(|a| a.join(" ")).unwrap_or_default();
        return Err(bad(
            "args",
            &value,
            "args are read only with library = \"kit-loadgen\"",
        ));
    }
    if let Some(path) = &raw.service_config
        && library != Some("grpc")
    {
        let why = "a service config is read only with library = \"grpc\"";
        return Err(bad("service_config", path, why));
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
            let why = format!("not a built-in library; known: {}", LIBRARIES.join(", "));
            bad("library", name, &why)
        })?,
    };
    apply_fields(raw, &mut s, &bad)?;
    let s = apply_defenses(raw, s, &bad)?;
    finish(file, line, raw, s, &bad)
}

/// A client's field refused: its key, the value and why.
type Bad<'a> = &'a dyn Fn(&str, &str, &str) -> InputError;

/// The file's own fields, over the library's defaults.
fn apply_fields(raw: &RawClient, s: &mut Settings, bad: Bad) -> Result<(), InputError> {
    let tries = match (raw.attempts, raw.retries) {
        (Some(_), Some(r)) => {
            let why = "give attempts (total tries) or retries (attempts - 1), not both";
            return Err(bad("retries", &r.to_string(), why));
        }
        (Some(0), None) => {
            let why = "total tries, the first included: at least 1";
            return Err(bad("attempts", "0", why));
        }
        (Some(a), None) => Some(a),
        (None, Some(r)) => Some(
            r.checked_add(1)
                .ok_or_else(|| bad("retries", &r.to_string(), "too many"))?,
        ),
        (None, None) => None,
    };
    if let Some(t) = tries {
        s.given(Setting::Tries);
        s.tries = Some(t);
    }
    if let Some(t) = &raw.timeout {
        s.given(Setting::Timeout);
        s.per_try_timeout_s = Some(duration("timeout", t, bad)?);
    }
    if let Some(t) = &raw.overall_timeout {
        s.given(Setting::OverallTimeout);
        s.overall_timeout_s = Some(duration("overall_timeout", t, bad)?);
    }
    if let Some(ratio) = raw.budget {
        if !(ratio.is_finite() && (0.0..=1000.0).contains(&ratio)) {
            let why = "retries per request, e.g. 0.2: a number from 0 to 1000";
            return Err(bad("budget", &ratio.to_string(), why));
        }
        s.given(Setting::Budget);
        s.budget = Some(Budget::Ratio { ratio });
    }
    if let Some(classes) = &raw.retry_on {
        s.given(Setting::RetryOn);
        s.retry_on = Some(retry_on(classes, bad)?);
    }
    Ok(())
}

/// The client's defenses: throttling and a circuit breaker with kit-defense's defaults for the
/// parameters left out, and an AWS SDK retry mode, whose quota replaces the library's budget.
fn apply_defenses(raw: &RawClient, mut s: Settings, bad: Bad) -> Result<Settings, InputError> {
    const DEFENSE: &str = "kit-defense";
    let refused = |key: &str, e: ParamError| bad(key, &e.value, &e.to_string());
    if let Some(t) = raw.throttling {
        let d = ThrottleParams::default();
        let p = ThrottleParams {
            k: t.k.unwrap_or(d.k),
            window_s: t.window.map_or(d.window_s, Span::secs),
        };
        let reference = "Google SRE book, \"Handling Overload\" (defense/src/throttle.rs)";
        if t.k.is_none() {
            s = s.default_used(Setting::Defenses, "throttling.k", "2", DEFENSE, reference);
        }
        if t.window.is_none() {
            s = s.default_used(
                Setting::Defenses,
                "throttling.window",
                "2m",
                DEFENSE,
                reference,
            );
        }
        s.defenses.throttling = Some(p.validate().map_err(|e| refused("throttling", e))?);
    }
    if let Some(b) = raw.circuit_breaker {
        let d = BreakerParams::default();
        let p = BreakerParams {
            failures: b.failures.unwrap_or(d.failures),
            open_s: b.open.map_or(d.open_s, Span::secs),
            probes: b.probes.unwrap_or(d.probes),
        };
        let reference = "Polly's basic circuit breaker (defense/src/breaker.rs)";
        for (given, key, value) in [
            (b.failures.is_some(), "circuit_breaker.failures", "5"),
            (b.open.is_some(), "circuit_breaker.open", "30s"),
            (b.probes.is_some(), "circuit_breaker.probes", "1"),
        ] {
            if !given {
                s = s.default_used(Setting::Defenses, key, value, DEFENSE, reference);
            }
        }
        s.defenses.breaker = Some(p.validate().map_err(|e| refused("circuit_breaker", e))?);
    }
    if let Some(written) = &raw.retry_quota {
        let modes = [QuotaMode::Standard, QuotaMode::Adaptive];
        let Some(mode) = modes.into_iter().find(|m| m.name() == written) else {
            let names: Vec<String> = modes.iter().map(|m| format!("{:?}", m.name())).collect();
            return Err(bad(
                "retry_quota",
                written,
                &format!("expected {}", names.join(" or ")),
            ));
        };
        if let Some(b) = raw.budget {
            let why = "give budget or retry_quota, not both";
            return Err(bad("budget", &b.to_string(), why));
        }
        // A library with the AWS quota keeps its own costs (aws-sdk-standard-2026's).
        if s.defenses.quota.is_none() {
            s.given(Setting::Budget);
            s.budget = Some(Budget::Quota {
                retries_paid: AWS_STANDARD_TIMEOUT_RETRIES,
            });
            s = s.default_used(
                Setting::Budget,
                "retry quota",
                "500 tokens; a retry costs 10 after a timeout: 50 timeout retries",
                "AWS SDK standard retry mode (kit-defense RetryQuota::aws_standard)",
                "defense/src/quota.rs",
            );
        }
        s.defenses.quota = Some(mode);
    }
    if s.defenses.quota == Some(QuotaMode::Adaptive) {
        s = s.note(
            Some(Setting::Budget),
            "aws-adaptive: its rate limiter slows only after throttling errors, never after \
             timeouts: for retry debt it is the standard quota",
        );
    }
    Ok(s)
}

fn retry_on(classes: &[String], bad: Bad) -> Result<RetryOn, InputError> {
    let mut on = RetryOn::NOTHING;
    for (i, class) in classes.iter().enumerate() {
        match class.as_str() {
            "timeout" => on.timeout = true,
            "connect-failure" => on.connect_failure = true,
            "5xx" => on.status_5xx = true,
            _ => {
                let why = "expected \"timeout\", \"connect-failure\" or \"5xx\"";
                return Err(bad(&format!("retry_on[{i}]"), class, why));
            }
        }
    }
    Ok(on)
}

fn duration(key: &str, text: &str, bad: Bad) -> Result<f64, InputError> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d.as_secs_f64()),
        Ok(_) => Err(bad(key, text, "must be more than 0")),
        Err(e) => Err(bad(
            key,
            text,
            &format!("a duration such as \"10s\" or \"250ms\" ({e})"),
        )),
    }
}

/// The layer, once every figure is known. A client has no caller: it never aborts on close.
fn finish(
    file: &Path,
    line: Option<u32>,
    raw: &RawClient,
    mut s: Settings,
    bad: Bad,
) -> Result<Layer, InputError> {
    let Some(tries) = s.tries else {
        let why = match raw.library.as_deref() {
            Some(lib) => format!("library {lib} has no attempt count of its own: give attempts"),
            None => format!("give library (one of {}) or attempts", LIBRARIES.join(", ")),
        };
        return Err(bad("attempts", "", &why));
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
    let source = Source::new(file, line, format!("client {}", raw.name));
    Ok(Layer {
        tries: Tries::AtMost(tries),
        retry_on,
        per_try_timeout_s: s.per_try_timeout_s,
        overall_timeout_s: s.overall_timeout_s,
        budget: s.budget,
        defenses: s.defenses,
        aborts_on_close: false,
        defaults: s.defaults.into_iter().map(|(_, d)| d).collect(),
        notes: s.notes.into_iter().map(|(_, n)| n).collect(),
        ..Layer::new("client", Tier::Client, source)
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    pub(super) fn data_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients")
    }

    pub(super) fn no_read(p: &Path) -> Result<String, InputError> {
        panic!("unexpected read of {}", p.display())
    }

    pub(super) fn parse(text: &str) -> Result<StackFile, InputError> {
        parse_stack(Path::new("stack.toml"), text, &no_read)
    }

    pub(super) fn one(text: &str) -> Layer {
        let mut s = parse(text).unwrap();
        assert_eq!(s.clients.len(), 1);
        s.clients.remove(0)
    }

    pub(super) fn field_of(e: InputError) -> (String, String, String) {
        match e {
            InputError::Field {
                field, value, why, ..
            } => (field, value, why),
            other => panic!("not a field error: {other:?}"),
        }
    }

    pub(super) fn read_data(p: &Path) -> Result<String, InputError> {
        std::fs::read_to_string(p).map_err(|e| InputError::Unreadable {
            file: p.to_path_buf(),
            why: e.to_string(),
        })
    }

    pub(super) fn data(name: &str) -> (PathBuf, String) {
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
    fn a_discipline_is_a_kind_or_a_table() {
        let spec = |text: &str| parse(text).unwrap().discipline.unwrap().spec;
        assert_eq!(
            spec("[service]\ndiscipline = \"lifo\"\n"),
            DisciplineSpec::of(DisciplineKind::Lifo)
        );
        let codel = spec(
            "[service]\ndiscipline = { kind = \"codel\", target = \"50ms\", interval = \"1s\" }\n",
        );
        assert_eq!((codel.target_s, codel.interval_s), (Some(0.05), Some(1.0)));
        assert!(!codel.needs_service_time());
        let bounded = parse(
            "[service]\npod_capacity = 10.0\ndiscipline = { kind = \"bounded\", limit = 20 }\n",
        )
        .unwrap()
        .discipline
        .unwrap();
        assert_eq!(bounded.source.line, Some(3));
        assert_eq!(
            bounded.spec.resolve(None).unwrap(),
            kit_defense::Discipline::Bounded { limit: 20 }
        );
        for (text, value, why) in [
            ("\"random\"", "\"random\"", "is none of fifo, lifo, codel"),
            ("{ limit = 5 }", "{ limit = 5 }", "give kind"),
            (
                "{ kind = \"codel\", targt = \"5ms\" }",
                "targt",
                "unknown field",
            ),
            (
                "{ kind = \"codel\", target = \"soon\" }",
                "soon",
                "a duration",
            ),
            ("3", "3", "a kind such as"),
        ] {
            let e = parse(&format!("[service]\ndiscipline = {text}\n")).unwrap_err();
            let (f, v, w) = field_of(e);
            assert_eq!(f, "service.discipline");
            assert!(v.contains(value) || w.contains(value), "{text}: {v} {w}");
            assert!(w.contains(why), "{text}: {w}");
        }
        // A parameter out of range is refused where it is resolved, naming it.
        let zero = spec("[service]\ndiscipline = { kind = \"bounded\", limit = 0 }\n");
        assert_eq!(
            zero.resolve(None).unwrap_err().to_string(),
            "queue limit: 0 must be at least 1"
        );
    }

    #[test]
    fn client_defenses_take_their_defaults_and_name_bad_values() {
        let c = one(
            "[[client]]\nname = \"web\"\nattempts = 3\nthrottling = { k = 3.0 }\n\
             circuit_breaker = { open = \"10s\" }\n",
        );
        let t = c.defenses.throttling.unwrap();
        assert_eq!((t.k, t.window_s), (3.0, 120.0));
        let b = c.defenses.breaker.unwrap();
        assert_eq!((b.failures, b.open_s, b.probes), (5, 10.0, 1));
        let used: Vec<&str> = c.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(
            used,
            [
                "throttling.window",
                "circuit_breaker.failures",
                "circuit_breaker.probes",
                "retry_on"
            ]
        );
        for (text, field, value) in [
            ("throttling = { k = 0.5 }", "client[0].throttling", "0.5"),
            (
                "circuit_breaker = { failures = 0 }",
                "client[0].circuit_breaker",
                "0",
            ),
            (
                "retry_quota = \"aws-legacy\"",
                "client[0].retry_quota",
                "aws-legacy",
            ),
            (
                "retry_quota = \"aws-standard\"\nbudget = 0.2",
                "client[0].budget",
                "0.2",
            ),
        ] {
            let text = format!("[[client]]\nname = \"a\"\nattempts = 2\n{text}\n");
            let (f, v, why) = field_of(parse(&text).unwrap_err());
            assert_eq!((f.as_str(), v.as_str()), (field, value), "{why}");
        }
        let e = parse("[[client]]\nname = \"a\"\nattempts = 2\nthrottling = { K = 2.0 }\n");
        assert!(
            matches!(e, Err(InputError::Syntax { line: 4, .. })),
            "{e:?}"
        );
    }

    #[test]
    fn a_retry_quota_is_the_aws_sdks_retry_mode() {
        // retry_mode = adaptive: the standard quota, and a note that its rate limiter does not
        // slow on timeouts.
        let c = one(
            "[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard-2026\"\n\
             retry_quota = \"aws-adaptive\"\n",
        );
        assert_eq!(c.defenses.quota, Some(QuotaMode::Adaptive));
        assert_eq!(c.budget, Some(Budget::Quota { retries_paid: 35.0 }));
        assert!(c.notes.iter().any(|n| n.contains("never after timeouts")));
        // The library alone is the standard mode.
        let s = one("[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard\"\n");
        assert_eq!(s.defenses.quota, Some(QuotaMode::Standard));
        // A client without a quota of its own gets the standard costs, with where they are from.
        let plain = one("[[client]]\nname = \"w\"\nattempts = 3\nretry_quota = \"aws-standard\"\n");
        assert_eq!(plain.budget, Some(Budget::Quota { retries_paid: 50.0 }));
        assert!(plain.defaults.iter().any(|d| d.setting == "retry quota"));
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
        let (path, text) = data("stack-defenses.toml");
        let s = parse_stack(&path, &text, &beside).unwrap();
        let d = s.clients[0].defenses;
        assert_eq!(
            (
                d.throttling.unwrap().window_s,
                d.breaker.unwrap().open_s,
                d.quota
            ),
            (120.0, 30.0, Some(QuotaMode::Adaptive))
        );
        let codel = s.discipline.unwrap().spec.resolve(None).unwrap();
        assert_eq!(codel.to_string(), "codel (target 50 ms, interval 500 ms)");
    }
}
