//! What an attempt sends: method, path, headers and body, from the command line (`-X`, `-H`,
//! `--body`, `--body-file`) or a request file (one request or a weighted mix), and gRPC's
//! framing of a unary call's message.
//!
//! Secrets stay out of what the kit writes: a header value may come from the environment
//! (`@env:NAME`) or a file (`@file:PATH`), read when the loadgen starts, and every rendering of
//! a request for a person ([`RequestSpec::describe`]) shows a literal header value's length,
//! never the value, except for the headers in [`PUBLIC_HEADERS`]; a body is shown by its size.
//!
//! Pure but for [`RequestSet::prepare`], which reads the files and variables named.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Headers whose literal values are shown as given: they describe the request, not the caller.
pub const PUBLIC_HEADERS: [&str; 5] = [
    "content-type",
    "accept",
    "accept-encoding",
    "te",
    "grpc-encoding",
];

/// Headers the loadgen writes itself (the framing and the kit's own: `x-request-id`,
/// `x-attempt`, `x-deadline-ms`, gRPC's `grpc-timeout`), and HTTP/1.1's connection-specific
/// ones, which HTTP/2 forbids (hyper would drop them without a word).
const KIT_HEADERS: [&str; 12] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "user-agent",
    "x-request-id",
    "x-attempt",
    "x-deadline-ms",
    "grpc-timeout",
];

/// A request that cannot be built, naming the flag or file and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, RequestError> {
    Err(RequestError(msg.into()))
}

/// An HTTP method: a token (RFC 9110), as given (methods are case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Method(String);

impl Method {
    pub fn get() -> Method {
        Method("GET".into())
    }

    pub fn post() -> Method {
        Method("POST".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Idempotent by RFC 9110 section 9.2.2: sending it twice has the effect of sending it
    /// once, so a retry is safe. POST and PATCH are not: a retried payment is two payments.
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self.0.as_str(),
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        )
    }

    /// A `HEAD` answer has no body whatever its length says.
    pub fn is_head(&self) -> bool {
        self.0 == "HEAD"
    }
}

impl FromStr for Method {
    type Err = RequestError;

    fn from_str(s: &str) -> Result<Method, RequestError> {
        if s.is_empty() || !s.bytes().all(is_tchar) {
            return err(format!("method `{s}` is not an HTTP method token"));
        }
        Ok(Method(s.to_string()))
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Where a header's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    Literal(String),
    /// `@env:NAME`: the variable's value when the loadgen starts.
    Env(String),
    /// `@file:PATH`: the file's content, one trailing newline removed.
    File(PathBuf),
}

/// `-H 'Name: value'`, the value literal or `@env:NAME` / `@file:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderFlag {
    /// Lower case, as HTTP/2 sends it and HTTP/1.1 ignores the case of.
    pub name: String,
    pub value: ValueSource,
}

impl FromStr for HeaderFlag {
    type Err = RequestError;

    fn from_str(s: &str) -> Result<HeaderFlag, RequestError> {
        let Some((name, value)) = s.split_once(':') else {
            // Nothing of it is shown: it may be a pasted secret.
            return err(format!(
                "a header of {} bytes is not `Name: value`",
                s.len()
            ));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return err(format!("header name `{name}` is not a token"));
        }
        let name = name.to_ascii_lowercase();
        if KIT_HEADERS.contains(&name.as_str()) {
            return err(format!(
                "header `{name}`: the loadgen sets it itself (one of {})",
                KIT_HEADERS.join(", ")
            ));
        }
        let value = value.trim();
        let value = if let Some(var) = value.strip_prefix("@env:") {
            if var.is_empty() {
                return err(format!("header `{name}`: `@env:` names no variable"));
            }
            ValueSource::Env(var.to_string())
        } else if let Some(path) = value.strip_prefix("@file:") {
            if path.is_empty() {
                return err(format!("header `{name}`: `@file:` names no file"));
            }
            ValueSource::File(PathBuf::from(path))
        } else {
            check_value(&name, value.as_bytes())?;
            ValueSource::Literal(value.to_string())
        };
        Ok(HeaderFlag { name, value })
    }
}

/// The flag as it was given (what the loadgen's parser reads back): a literal value included.
impl fmt::Display for HeaderFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            ValueSource::Literal(v) => write!(f, "{}: {v}", self.name),
            ValueSource::Env(var) => write!(f, "{}: @env:{var}", self.name),
            ValueSource::File(p) => write!(f, "{}: @file:{}", self.name, p.display()),
        }
    }
}

impl HeaderFlag {
    /// For a person or a record: a literal value is replaced by its length unless the header
    /// is public.
    pub fn redacted(&self) -> String {
        match &self.value {
            ValueSource::Literal(v) if !PUBLIC_HEADERS.contains(&self.name.as_str()) => {
                format!("{}: <redacted, {} bytes>", self.name, v.len())
            }
            _ => self.to_string(),
        }
    }

    fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<u8>, RequestError> {
        let value = match &self.value {
            ValueSource::Literal(v) => v.clone().into_bytes(),
            ValueSource::Env(var) => env(var)
                .ok_or_else(|| {
                    RequestError(format!(
                        "header `{}`: environment variable {var} is not set",
                        self.name
                    ))
                })?
                .into_bytes(),
            ValueSource::File(path) => {
                let mut v = std::fs::read(path).map_err(|e| {
                    RequestError(format!(
                        "header `{}`: @file:{}: {e}",
                        self.name,
                        path.display()
                    ))
                })?;
                if v.last() == Some(&b'\n') {
                    v.pop();
                    if v.last() == Some(&b'\r') {
                        v.pop();
                    }
                }
                v
            }
        };
        check_value(&self.name, &value)?;
        Ok(value)
    }
}

/// A value is visible ASCII, spaces and tabs, and obs-text (RFC 9110 field-value, what
/// `http::HeaderValue` takes): no control character, of which CR and LF would end the header
/// (and smuggle another) on HTTP/1.1. The error never shows the value.
fn check_value(name: &str, value: &[u8]) -> Result<(), RequestError> {
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return err(format!(
            "header `{name}`: its value holds a control character such as CR, LF or NUL ({} \
             bytes)",
            value.len()
        ));
    }
    Ok(())
}

/// A request target in origin form: `/`, then visible ASCII only (no space or control
/// character, which would break the request line).
fn check_path(path: &str) -> Result<(), RequestError> {
    if !path.starts_with('/') {
        return err(format!("request path `{path}`: must start with `/`"));
    }
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return err(format!(
            "request path `{}`: only visible ASCII (percent-encode the rest)",
            path.escape_debug()
        ));
    }
    Ok(())
}

/// A request's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Inline(String),
    File(PathBuf),
}

impl Body {
    fn bytes(&self) -> Result<Vec<u8>, RequestError> {
        match self {
            Body::Inline(s) => Ok(s.clone().into_bytes()),
            Body::File(p) => std::fs::read(p)
                .map_err(|e| RequestError(format!("body file {}: {e}", p.display()))),
        }
    }
}

/// One kind of request: what the command line gives, or one entry of a request file.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Default `GET`, or `POST` with a body.
    pub method: Option<Method>,
    /// Origin-form path and query, e.g. `/orders?x=1`, replacing the target URL's.
    pub path: Option<String>,
    pub headers: Vec<HeaderFlag>,
    pub body: Option<Body>,
    /// Share of the requests, relative to the file's other entries.
    pub weight: f64,
}

impl RequestSpec {
    pub fn method(&self) -> Method {
        self.method.clone().unwrap_or_else(|| {
            if self.body.is_some() {
                Method::post()
            } else {
                Method::get()
            }
        })
    }

    /// One line for a person or a record, secrets redacted.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} {}",
            self.method(),
            self.path.as_deref().unwrap_or("(target's path)")
        );
        for h in &self.headers {
            s.push_str(&format!("; {}", h.redacted()));
        }
        match &self.body {
            Some(Body::Inline(b)) => s.push_str(&format!("; body {} bytes", b.len())),
            Some(Body::File(p)) => s.push_str(&format!("; body from {}", p.display())),
            None => {}
        }
        s
    }
}

/// What every attempt sends: the flags' one request, or a request file's weighted mix, with
/// the flags' headers added to each.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSet {
    pub requests: Vec<RequestSpec>,
    /// gRPC unary calls: each body is the call's one message.
    pub grpc: bool,
}

/// A request file: `[[request]]` tables.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RequestFile {
    request: Vec<FileEntry>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    #[serde(default = "one")]
    weight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    /// Relative to the request file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    body_file: Option<PathBuf>,
}

/// The name of the request file in a [`RequestSet::bundle`].
pub const BUNDLE_REQUEST_FILE: &str = "requests.toml";

fn one() -> f64 {
    1.0
}

impl RequestSet {
    /// The flags' request, or the file's mix with `headers` added to each entry.
    pub fn from_parts(
        method: Option<Method>,
        headers: &[HeaderFlag],
        body: Option<Body>,
        file: Option<&Path>,
        grpc: bool,
    ) -> Result<RequestSet, RequestError> {
        let requests = match file {
            None => vec![RequestSpec {
                method,
                path: None,
                headers: headers.to_vec(),
                body,
                weight: 1.0,
            }],
            Some(path) => read_file(path, headers)?,
        };
        let set = RequestSet { requests, grpc };
        set.check().map_err(|e| match file {
            Some(p) => RequestError(format!("request file {}: {}", p.display(), e.0)),
            None => e,
        })?;
        Ok(set)
    }

    fn check(&self) -> Result<(), RequestError> {
        if self.grpc && self.requests.iter().any(|r| r.body.is_none()) {
            return err("--grpc: give the call's protobuf message with --body-file");
        }
        for r in &self.requests {
            if let Some(p) = &r.path {
                check_path(p)?;
            }
            if self.grpc && r.method() != Method::post() {
                return err(format!(
                    "method {}: a gRPC call is a POST (drop --method)",
                    r.method()
                ));
            }
        }
        Ok(())
    }

    /// Methods a retry would resend that are not idempotent (gRPC calls count as POSTs: no
    /// schema says a method is idempotent).
    pub fn unsafe_to_retry(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.requests {
            let m = r.method();
            let name = if self.grpc {
                format!("gRPC {}", r.path.as_deref().unwrap_or("call"))
            } else if m.is_idempotent() {
                continue;
            } else {
                m.to_string()
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    /// One line per kind of request, secrets redacted.
    pub fn describe(&self) -> Vec<String> {
        let total: f64 = self.requests.iter().map(|r| r.weight).sum();
        self.requests
            .iter()
            .map(|r| {
                let share = if self.requests.len() > 1 {
                    format!("{:.0}% ", 100.0 * r.weight / total)
                } else {
                    String::new()
                };
                let grpc = if self.grpc { "gRPC " } else { "" };
                format!("{share}{grpc}{}", r.describe())
            })
            .collect()
    }

    /// Reads the bodies and header values: what each attempt sends. `env` looks up a variable.
    pub fn prepare(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Prepared, RequestError> {
        let mut kinds = Vec::with_capacity(self.requests.len());
        let mut cumulative = Vec::with_capacity(self.requests.len());
        let mut sum = 0.0;
        for r in &self.requests {
            let mut body = r
                .body
                .as_ref()
                .map(Body::bytes)
                .transpose()?
                .unwrap_or_default();
            let mut headers = r
                .headers
                .iter()
                .map(|h| Ok((h.name.clone(), h.resolve(env)?)))
                .collect::<Result<Vec<_>, RequestError>>()?;
            if self.grpc {
                body = grpc_frame(&body)?;
                // gRPC's own: `te: trailers` (HTTP/2 allows no other `te`) and a gRPC content
                // type (`application/grpc+proto` and the like are kept).
                headers.retain(|(n, v)| {
                    n != "te" && (n != "content-type" || v.starts_with(b"application/grpc"))
                });
                if !headers.iter().any(|(n, _)| n == "content-type") {
                    headers.push(("content-type".into(), b"application/grpc".to_vec()));
                }
                headers.push(("te".into(), b"trailers".to_vec()));
            }
            sum += r.weight;
            cumulative.push(sum);
            kinds.push(PreparedRequest {
                method: r.method(),
                path: r.path.clone(),
                headers,
                body,
            });
        }
        Ok(Prepared {
            kinds,
            cumulative,
            grpc: self.grpc,
        })
    }
}

impl RequestSet {
    /// The set as files for a process that sees none of this one's environment or files (a
    /// loadgen pod, the files mounted at `dir` from a Secret): [`BUNDLE_REQUEST_FILE`], whose
    /// header values are public literals or `@file:` references under `dir`, and the files it
    /// names, each value read now (a secret goes into a file, never into the request file).
    pub fn bundle(
        &self,
        dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, Vec<u8>>, RequestError> {
        let mut files = BTreeMap::new();
        let mut entries = Vec::with_capacity(self.requests.len());
        for (i, r) in self.requests.iter().enumerate() {
            let mut headers = Vec::with_capacity(r.headers.len());
            for (j, h) in r.headers.iter().enumerate() {
                match &h.value {
                    ValueSource::Literal(_) if PUBLIC_HEADERS.contains(&h.name.as_str()) => {
                        headers.push(h.to_string());
                    }
                    _ => {
                        let name = format!("header-{i}-{j}");
                        files.insert(name.clone(), h.resolve(env)?);
                        headers.push(format!("{}: @file:{}", h.name, dir.join(&name).display()));
                    }
                }
            }
            let body_file = match &r.body {
                Some(b) => {
                    let name = format!("body-{i}");
                    files.insert(name.clone(), b.bytes()?);
                    Some(PathBuf::from(name))
                }
                None => None,
            };
            entries.push(FileEntry {
                weight: r.weight,
                method: r.method.as_ref().map(ToString::to_string),
                path: r.path.clone(),
                headers,
                body: None,
                body_file,
            });
        }
        let text = toml::to_string(&RequestFile { request: entries })
            .map_err(|e| RequestError(format!("request file: {e}")))?;
        files.insert(BUNDLE_REQUEST_FILE.into(), text.into_bytes());
        Ok(files)
    }
}

fn read_file(path: &Path, extra: &[HeaderFlag]) -> Result<Vec<RequestSpec>, RequestError> {
    let at = |e: String| RequestError(format!("request file {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
    // The parser's own text quotes the line, which may hold a secret: its message and
    // position only.
    let file: RequestFile = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map_or(0, |s| text[..s.start].matches('\n').count() + 1);
        at(format!("line {line}: {}", e.message()))
    })?;
    if file.request.is_empty() {
        return Err(at("no [[request]]".into()));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    file.request
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let at = |msg: String| at(format!("request {}: {msg}", i + 1));
            if !(e.weight.is_finite() && e.weight > 0.0) {
                return Err(at(format!("weight {} is not a positive number", e.weight)));
            }
            let method = e
                .method
                .map(|m| m.parse::<Method>())
                .transpose()
                .map_err(|e| at(e.0))?;
            let mut headers = e
                .headers
                .iter()
                .map(|h| h.parse::<HeaderFlag>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| at(e.0))?;
            headers.extend(extra.iter().cloned());
            let body = match (e.body, e.body_file) {
                (Some(_), Some(_)) => return Err(at("both body and body_file".into())),
                (Some(b), None) => Some(Body::Inline(b)),
                (None, Some(f)) => Some(Body::File(dir.join(f))),
                (None, None) => None,
            };
            Ok(RequestSpec {
                method,
                path: e.path,
                headers,
                body,
                weight: e.weight,
            })
        })
        .collect()
}

/// A request ready to write: its values read.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedRequest {
    pub method: Method,
    pub path: Option<String>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// The prepared kinds of request and their weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    kinds: Vec<PreparedRequest>,
    cumulative: Vec<f64>,
    pub grpc: bool,
}

impl Prepared {
    /// A plain `GET` of the target's path: what the kit's own runs send.
    pub fn get() -> Prepared {
        Prepared {
            kinds: vec![PreparedRequest {
                method: Method::get(),
                path: None,
                headers: Vec::new(),
                body: Vec::new(),
            }],
            cumulative: vec![1.0],
            grpc: false,
        }
    }

    /// The kind of request for a uniform draw `u` in `[0, 1)`, by weight.
    pub fn pick(&self, u: f64) -> &PreparedRequest {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let at = u * total;
        let i = self.cumulative.partition_point(|&c| c <= at);
        &self.kinds[i.min(self.kinds.len() - 1)]
    }

    pub fn is_mix(&self) -> bool {
        self.kinds.len() > 1
    }
}

/// gRPC's length-prefixed message: a compression flag (0, none) and the length, big-endian.
pub fn grpc_frame(message: &[u8]) -> Result<Vec<u8>, RequestError> {
    let len = u32::try_from(message.len())
        .map_err(|_| RequestError(format!("gRPC message of {} bytes", message.len())))?;
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    Ok(out)
}

/// `grpc-timeout`: the deadline in whole milliseconds, rounded up so the server never gives
/// up before the client (at most 8 digits, as the spec allows; longer ones in seconds).
pub fn grpc_timeout(timeout: std::time::Duration) -> String {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", timeout.as_secs().clamp(1, 99_999_999))
    }
}

/// A gRPC status code (from `grpc-status`), as the loadgen counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcOutcome {
    Ok,
    /// DEADLINE_EXCEEDED (4): the call's deadline passed, a timeout.
    Deadline,
    /// UNAVAILABLE (14) and RESOURCE_EXHAUSTED (8): the server refused or could not be
    /// reached, as a 503.
    Unavailable,
    /// Any other code, as a non-5xx failure.
    Other,
}

impl GrpcOutcome {
    pub fn of(code: u32) -> GrpcOutcome {
        match code {
            0 => GrpcOutcome::Ok,
            4 => GrpcOutcome::Deadline,
            8 | 14 => GrpcOutcome::Unavailable,
            _ => GrpcOutcome::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn headers_parse_render_back_and_redact() {
        let h: HeaderFlag = "Authorization:  Bearer abc".parse().unwrap();
        assert_eq!(h.name, "authorization");
        assert_eq!(h.to_string(), "authorization: Bearer abc");
        assert_eq!(h.redacted(), "authorization: <redacted, 10 bytes>");
        assert_eq!(h.to_string().parse::<HeaderFlag>().unwrap(), h);
        let ct: HeaderFlag = "content-type: application/json".parse().unwrap();
        assert_eq!(ct.redacted(), "content-type: application/json");
        let e: HeaderFlag = "x-api-key: @env:API_KEY".parse().unwrap();
        assert_eq!(e.value, ValueSource::Env("API_KEY".into()));
        assert_eq!(e.redacted(), "x-api-key: @env:API_KEY");
        let f: HeaderFlag = "x-api-key: @file:/run/key".parse().unwrap();
        assert_eq!(f.value, ValueSource::File("/run/key".into()));
        for bad in [
            "no colon",
            "bad name: x",
            ": x",
            "host: a",
            "x-attempt: 1",
            "a: @env:",
        ] {
            assert!(bad.parse::<HeaderFlag>().is_err(), "{bad}");
        }
        let e = "s3cret".parse::<HeaderFlag>().unwrap_err();
        assert!(!e.0.contains("s3cret"), "{e}");
        assert!("upgrade: h2c".parse::<HeaderFlag>().is_err());
    }

    #[test]
    fn values_come_from_the_environment_and_files_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "from-file\n").unwrap();
        let env = |v: &str| (v == "TOKEN").then(|| "Bearer t0k".to_string());
        let set = RequestSet::from_parts(
            None,
            &[
                "authorization: @env:TOKEN".parse().unwrap(),
                format!("x-key: @file:{}", key.display()).parse().unwrap(),
            ],
            Some(Body::Inline("{\"sku\":1}".into())),
            None,
            false,
        )
        .unwrap();
        let p = set.prepare(&env).unwrap();
        let r = p.pick(0.5);
        assert_eq!(r.method, Method::post(), "a body makes a POST");
        assert_eq!(
            r.headers,
            [
                ("authorization".to_string(), b"Bearer t0k".to_vec()),
                ("x-key".to_string(), b"from-file".to_vec())
            ]
        );
        let e = set.prepare(&no_env).unwrap_err();
        assert!(e.0.contains("TOKEN is not set"), "{e}");
        let smuggle = |v: &str| (v == "TOKEN").then(|| "a\r\nx-evil: 1".to_string());
        let e = set.prepare(&smuggle).unwrap_err();
        assert!(e.0.contains("CR, LF") && !e.0.contains("evil"), "{e}");
        let bell = |v: &str| (v == "TOKEN").then(|| "a\u{7}b".to_string());
        assert!(set.prepare(&bell).is_err(), "any control character");
        assert_eq!(set.unsafe_to_retry(), ["POST"]);
        assert!(
            set.describe()[0].contains("body 9 bytes") && set.describe()[0].contains("@env:TOKEN")
        );
    }

    #[test]
    fn a_request_file_is_a_weighted_mix_with_the_flags_headers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("order.json"), "{\"sku\": 2}").unwrap();
        let file = dir.path().join("requests.toml");
        std::fs::write(
            &file,
            r#"
[[request]]
weight = 3
path = "/items"

[[request]]
method = "POST"
path = "/orders"
headers = ["content-type: application/json"]
body_file = "order.json"
"#,
        )
        .unwrap();
        let extra: HeaderFlag = "authorization: Bearer x".parse().unwrap();
        let set =
            RequestSet::from_parts(None, std::slice::from_ref(&extra), None, Some(&file), false)
                .unwrap();
        assert_eq!(set.requests.len(), 2);
        assert!(set.requests.iter().all(|r| r.headers.contains(&extra)));
        let p = set.prepare(&no_env).unwrap();
        assert!(p.is_mix());
        assert_eq!(p.pick(0.0).path.as_deref(), Some("/items"));
        assert_eq!(p.pick(0.74).method, Method::get());
        let post = p.pick(0.76);
        assert_eq!(
            (post.method.as_str(), &post.body[..]),
            ("POST", &b"{\"sku\": 2}"[..])
        );
        assert_eq!(
            set.describe()[0],
            "75% GET /items; authorization: <redacted, 8 bytes>"
        );
        for (text, want) in [
            ("[[request]]\nweight = 0\n", "weight 0"),
            ("[[request]]\nmethod = \"GE T\"\n", "GE T"),
            ("[[request]]\nbody = \"a\"\nbody_file = \"b\"\n", "both"),
            ("[[request]]\nurl = \"/\"\n", "url"),
            ("request = []\n", "no [[request]]"),
            ("[[request]]\npath = \"items\"\n", "`/`"),
            ("[[request]]\npath = \"/a b\"\n", "visible ASCII"),
            ("[[request]]\nheaders = [\"x: s3cret\"\n", "line 2"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = RequestSet::from_parts(None, &[], None, Some(&file), false).unwrap_err();
            assert!(
                e.0.contains(want) && e.0.contains("requests.toml") && !e.0.contains("s3cret"),
                "{want}: {e}"
            );
        }
    }

    #[test]
    fn a_bundle_reads_back_as_the_same_requests_with_secrets_in_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let env = |v: &str| (v == "TOKEN").then(|| "Bearer s3cret".to_string());
        let set = RequestSet::from_parts(
            Some("PUT".parse().unwrap()),
            &[
                "authorization: @env:TOKEN".parse().unwrap(),
                "x-api-key: literal-s3cret".parse().unwrap(),
                "content-type: application/json".parse().unwrap(),
            ],
            Some(Body::Inline("{}".into())),
            None,
            false,
        )
        .unwrap();
        let files = set.bundle(dir.path(), &env).unwrap();
        let toml = String::from_utf8(files[BUNDLE_REQUEST_FILE].clone()).unwrap();
        assert!(!toml.contains("s3cret"), "{toml}");
        assert!(toml.contains("content-type: application/json"), "{toml}");
        for (name, bytes) in &files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let back = RequestSet::from_parts(
            None,
            &[],
            None,
            Some(&dir.path().join(BUNDLE_REQUEST_FILE)),
            false,
        )
        .unwrap();
        let no_env = |_: &str| None;
        assert_eq!(
            back.prepare(&no_env).unwrap(),
            set.prepare(&env).unwrap(),
            "the pod sends what this process would"
        );
    }

    #[test]
    fn idempotency_follows_rfc_9110() {
        for m in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"] {
            assert!(m.parse::<Method>().unwrap().is_idempotent(), "{m}");
        }
        for m in ["POST", "PATCH", "get"] {
            assert!(!m.parse::<Method>().unwrap().is_idempotent(), "{m}");
        }
        let get = RequestSet::from_parts(None, &[], None, None, false).unwrap();
        assert!(get.unsafe_to_retry().is_empty());
    }

    #[test]
    fn grpc_frames_the_message_and_maps_status() {
        assert_eq!(grpc_frame(b"ab").unwrap(), [0, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(grpc_timeout(Duration::from_micros(1500)), "2m");
        assert_eq!(grpc_timeout(Duration::from_secs(10)), "10000m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
        assert_eq!(GrpcOutcome::of(0), GrpcOutcome::Ok);
        assert_eq!(GrpcOutcome::of(4), GrpcOutcome::Deadline);
        assert_eq!(GrpcOutcome::of(14), GrpcOutcome::Unavailable);
        assert_eq!(GrpcOutcome::of(3), GrpcOutcome::Other);
        let e = RequestSet::from_parts(None, &[], None, None, true).unwrap_err();
        assert!(e.0.contains("--body-file"), "{e}");
        let set = RequestSet::from_parts(
            Some(Method::get()),
            &[],
            Some(Body::Inline("x".into())),
            None,
            true,
        );
        assert!(set.unwrap_err().0.contains("a gRPC call is a POST"));
        let set =
            RequestSet::from_parts(None, &[], Some(Body::Inline("x".into())), None, true).unwrap();
        let p = set.prepare(&no_env).unwrap();
        let r = p.pick(0.1);
        assert_eq!(r.body, [0, 0, 0, 0, 1, b'x']);
        assert!(r.headers.contains(&("te".into(), b"trailers".to_vec())));
        assert_eq!(set.unsafe_to_retry(), ["gRPC call"]);
    }
}
