//! `library = "grpc"`: gRPC's defaults (retry design A6) and its service config
//! (`doc/service_config.md`) as far as retries go, read as grpc-go and grpc-java read it.

use std::cmp::Reverse;
use std::path::Path;

use serde_json::{Map, Value};

use super::{Setting, Settings};
use crate::layer::{Budget, InputError, RetryOn, protobuf_duration_s};

const GRPC: &str = "gRPC retry design A6 (grpc-go service_config.go, grpc-java, C-core)";
const GRPC_A6: &str = "https://github.com/grpc/proposal/blob/master/A6-client-retries.md";

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
pub(super) fn grpc_settings(config: Option<(&Path, &GrpcServiceConfig)>) -> Settings {
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
    let root: Value = serde_json::from_str(text).map_err(|e| {
        InputError::syntax(
            file,
            u32::try_from(e.line()).unwrap_or(u32::MAX),
            e.to_string(),
        )
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
    let throttling = json.key(root, "", "retryThrottling");
    let retry_throttling = throttling.map(|v| json.throttling(v)).transpose()?;
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
        let timeout = self.key(obj, path, "timeout");
        let timeout_s = timeout
            .map(|t| self.duration(&format!("{path}.timeout"), t))
            .transpose()?;
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
    use super::*;
    use crate::clients::parse_stack;
    use crate::clients::tests::*;
    use crate::layer::Tries;

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
}
