//! The external metrics API (`external.metrics.k8s.io/v1beta1`) as the HPA and the
//! aggregator consume it: discovery, metric values, and `Status` errors.
//!
//! JSON shapes follow the upstream Go types field by field: `metav1.APIResourceList`
//! / `APIResource`, `external_metrics/v1beta1.ExternalMetricValueList` /
//! `ExternalMetricValue`, `metav1.Status`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::state::{Reading, Shared, Unavailable, rfc3339_seconds};

pub const GROUP: &str = "external.metrics.k8s.io";
pub const GROUP_VERSION: &str = "external.metrics.k8s.io/v1beta1";
/// The discovery path, which the aggregator's availability check probes.
pub const DISCOVERY_PATH: &str = "/apis/external.metrics.k8s.io/v1beta1";

/// The metrics the meter serves (GUIDE contract).
pub const METRICS: [&str; 5] = [
    "first_attempt_rate",
    "ingress_rate",
    "retry_rate",
    "header_first_attempt_rate",
    "client_attempt_rate",
];

fn metric_value(metric: &str, r: &Reading) -> Option<f64> {
    match metric {
        "first_attempt_rate" => Some(r.first_attempt_rate),
        "header_first_attempt_rate" => Some(r.header_first_attempt_rate),
        "client_attempt_rate" => Some(r.client_attempt_rate),
        "ingress_rate" => Some(r.ingress_rate),
        "retry_rate" => Some(r.retry_rate),
        _ => None,
    }
}

/// Marks a request that came over a TLS connection with a verified client certificate.
#[derive(Clone, Copy, Debug)]
pub struct ClientCert;

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceList {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub group_version: &'static str,
    pub resources: Vec<ApiResource>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    pub name: &'static str,
    /// Upstream serializes it without `omitempty`; external metrics leave it empty.
    pub singular_name: &'static str,
    pub namespaced: bool,
    pub kind: &'static str,
    pub verbs: Vec<&'static str>,
}

pub fn discovery() -> ApiResourceList {
    ApiResourceList {
        kind: "APIResourceList",
        api_version: "v1",
        group_version: GROUP_VERSION,
        resources: METRICS
            .iter()
            .map(|&name| ApiResource {
                name,
                singular_name: "",
                namespaced: true,
                kind: "ExternalMetricValueList",
                verbs: vec!["get"],
            })
            .collect(),
    }
}

/// `metav1.ListMeta` with every field empty (all are `omitempty`).
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct EmptyMeta {}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricValueList {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub metadata: EmptyMeta,
    pub items: Vec<ExternalMetricValue>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricValue {
    pub metric_name: String,
    pub metric_labels: BTreeMap<String, String>,
    /// `metav1.Time`: RFC 3339, UTC, whole seconds.
    pub timestamp: String,
    /// `WindowSeconds *int64` with JSON name `window`.
    pub window: i64,
    /// A `resource.Quantity` string.
    pub value: String,
}

/// `metav1.Status` for errors.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub metadata: EmptyMeta,
    pub status: &'static str,
    pub message: String,
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    pub code: u16,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct StatusDetails {
    pub name: String,
    pub group: &'static str,
}

/// A Kubernetes `Status` failure response.
pub fn status_error(code: StatusCode, message: String, details: Option<StatusDetails>) -> Response {
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    let status = Status {
        kind: "Status",
        api_version: "v1",
        metadata: EmptyMeta::default(),
        status: "Failure",
        message,
        reason,
        details,
        code: code.as_u16(),
    };
    json(code, &status)
}

fn json(code: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = (code, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A non-negative value as a canonical decimal `resource.Quantity` string, at
/// milli precision: 1.5 -> "1500m", 1500 -> "1500", 2000 -> "2k", 0 -> "0".
pub fn quantity(v: f64) -> String {
    let milli = if v.is_finite() && v > 0.0 {
        (v * 1000.0).round() as u64
    } else {
        0
    };
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let mut n = milli / 1000;
    let mut suffix = 0;
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    while n != 0 && n % 1000 == 0 && suffix + 1 < SUFFIXES.len() {
        n /= 1000;
        suffix += 1;
    }
    format!("{n}{}", SUFFIXES[suffix])
}

/// The API router: everything goes through one handler so that every error,
/// including unknown paths, is a `Status` body.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

enum Route<'a> {
    Discovery,
    Value { namespace: &'a str, metric: &'a str },
}

fn route(path: &str) -> Option<Route<'_>> {
    let rest = path.strip_prefix(DISCOVERY_PATH)?;
    if rest.is_empty() || rest == "/" {
        return Some(Route::Discovery);
    }
    let rest = rest.strip_prefix("/namespaces/")?;
    let (namespace, metric) = rest.split_once('/')?;
    if metric.is_empty() || metric.contains('/') {
        return None;
    }
    Some(Route::Value { namespace, metric })
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request<Body>) -> Response {
    let response = answer(&shared, &req);
    shared.metrics.api_request(response.status().as_u16());
    response
}

fn answer(shared: &Shared, req: &Request<Body>) -> Response {
    if shared.require_client_cert && req.extensions().get::<ClientCert>().is_none() {
        return status_error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized: a client certificate signed by --client-ca is required".into(),
            None,
        );
    }
    let path = req.uri().path();
    let Some(route) = route(path) else {
        return status_error(
            StatusCode::NOT_FOUND,
            format!("the server could not find the requested resource {path:?}"),
            None,
        );
    };
    if req.method() != Method::GET {
        return status_error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "the server does not allow method {} on {path:?}: only GET",
                req.method()
            ),
            None,
        );
    }
    let (namespace, metric) = match route {
        Route::Discovery => return json(StatusCode::OK, &discovery()),
        Route::Value { namespace, metric } => (namespace, metric),
    };
    if let Err(reason) = check_dns_label(namespace) {
        return status_error(
            StatusCode::BAD_REQUEST,
            format!("invalid namespace {namespace:?}: {reason}"),
            None,
        );
    }
    if !METRICS.contains(&metric) {
        let details = StatusDetails {
            name: metric.to_owned(),
            group: GROUP,
        };
        return status_error(
            StatusCode::NOT_FOUND,
            format!(
                "external metric {metric:?} not found: this meter serves {}",
                METRICS.join(", ")
            ),
            Some(details),
        );
    }
    let query = match Query::<BTreeMap<String, String>>::try_from_uri(req.uri()) {
        Ok(Query(q)) => q,
        Err(e) => {
            return status_error(
                StatusCode::BAD_REQUEST,
                format!("invalid query string: {e}"),
                None,
            );
        }
    };
    let selector = query.get("labelSelector").map_or("", String::as_str);
    if let Err(reason) = check_label_selector(selector) {
        return status_error(
            StatusCode::BAD_REQUEST,
            format!("invalid labelSelector {selector:?}: {reason}"),
            None,
        );
    }
    let reading = match shared.current(Instant::now()) {
        Ok(r) => r,
        Err(e @ (Unavailable::Warming(_) | Unavailable::Stale(_) | Unavailable::Unmeasured)) => {
            return status_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no value for {metric:?}: {e}"),
                None,
            );
        }
    };
    let value = metric_value(metric, &reading).unwrap_or_default();
    let list = ExternalMetricValueList {
        kind: "ExternalMetricValueList",
        api_version: GROUP_VERSION,
        metadata: EmptyMeta::default(),
        items: vec![ExternalMetricValue {
            metric_name: metric.to_owned(),
            metric_labels: BTreeMap::new(),
            timestamp: rfc3339_seconds(reading.wall),
            window: shared.window.as_secs_f64().ceil() as i64,
            value: quantity(value),
        }],
    };
    json(StatusCode::OK, &list)
}

/// DNS-1123 label: 1-63 of `[a-z0-9-]`, alphanumeric at both ends.
fn check_dns_label(s: &str) -> Result<(), String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if s.is_empty() || s.len() > 63 || !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err(
            "must be a DNS-1123 label (1-63 of a-z, 0-9, '-', alphanumeric at both ends)".into(),
        );
    }
    Ok(())
}

/// A label name or value: up to 63 of `[A-Za-z0-9_.-]`, alphanumeric at both ends.
fn check_label_part(s: &str, what: &str) -> Result<(), String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ok_ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if s.len() > 63 || !ok_chars || !ok_ends {
        return Err(format!("bad {what} {s:?}"));
    }
    Ok(())
}

/// A label key: `[prefix/]name`, the prefix a DNS-1123 subdomain.
fn check_label_key(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            let labels_ok =
                prefix.len() <= 253 && prefix.split('.').all(|l| check_dns_label(l).is_ok());
            if !labels_ok {
                return Err(format!("bad key prefix {prefix:?}"));
            }
            name
        }
        None => key,
    };
    check_label_part(name, "key")
}

fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        Ok(())
    } else {
        check_label_part(value, "value")
    }
}

#[derive(Debug, PartialEq)]
enum Token<'a> {
    Word(&'a str),
    Not,
    Eq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

fn lex(s: &str) -> Result<Vec<Token<'_>>, String> {
    let mut tokens = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return Ok(tokens);
        };
        let (token, len) = match c {
            '!' if rest.starts_with("!=") => (Token::NotEq, 2),
            '!' => (Token::Not, 1),
            '=' if rest.starts_with("==") => (Token::Eq, 2),
            '=' => (Token::Eq, 1),
            '>' => (Token::Gt, 1),
            '<' => (Token::Lt, 1),
            ',' => (Token::Comma, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || "!=<>,()".contains(c))
                    .unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = &rest[len..];
    }
}

/// Validates a Kubernetes label selector (`labels.Parse` grammar): `k`, `!k`,
/// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`, joined by `,`.
/// The meter serves one unlabelled series per metric, so a valid selector does
/// not filter it (see README).
pub fn check_label_selector(s: &str) -> Result<(), String> {
    let tokens = lex(s)?;
    let mut t = tokens.iter().peekable();
    if t.peek().is_none() {
        return Ok(());
    }
    loop {
        let negated = t.next_if_eq(&&Token::Not).is_some();
        let key = match t.next() {
            Some(Token::Word(k)) => *k,
            other => return Err(format!("expected a key, found {other:?}")),
        };
        check_label_key(key)?;
        if !negated {
            match t.next() {
                None => return Ok(()),
                Some(Token::Comma) => continue,
                Some(Token::Eq | Token::NotEq) => match t.peek() {
                    Some(Token::Word(v)) => {
                        check_label_value(v)?;
                        t.next();
                    }
                    None | Some(Token::Comma) => {}
                    Some(other) => {
                        return Err(format!("expected a value after {key:?}, found {other:?}"));
                    }
                },
                Some(Token::Gt | Token::Lt) => match t.next() {
                    Some(Token::Word(v)) if v.parse::<i64>().is_ok() => {}
                    other => {
                        return Err(format!(
                            "expected an integer after {key:?}, found {other:?}"
                        ));
                    }
                },
                Some(Token::Word("in" | "notin")) => {
                    if t.next() != Some(&Token::Open) {
                        return Err(format!("expected '(' after {key:?} in/notin"));
                    }
                    loop {
                        match t.next() {
                            Some(Token::Word(v)) => check_label_value(v)?,
                            other => {
                                return Err(format!(
                                    "expected a value in the set of {key:?}, found {other:?}"
                                ));
                            }
                        }
                        match t.next() {
                            Some(Token::Comma) => {}
                            Some(Token::Close) => break,
                            other => {
                                return Err(format!(
                                    "expected ',' or ')' in the set of {key:?}, found {other:?}"
                                ));
                            }
                        }
                    }
                }
                Some(other) => return Err(format!("unexpected {other:?} after key {key:?}")),
            }
        }
        match t.next() {
            None => return Ok(()),
            Some(Token::Comma) => {}
            Some(other) => return Err(format!("expected ',' or the end, found {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical() {
        assert_eq!(quantity(0.0), "0");
        assert_eq!(quantity(1.5), "1500m");
        assert_eq!(quantity(0.0004), "0");
        assert_eq!(quantity(0.0123), "12m");
        assert_eq!(quantity(100.0), "100");
        assert_eq!(quantity(1500.0), "1500");
        assert_eq!(quantity(2000.0), "2k");
        assert_eq!(quantity(3_000_000.0), "3M");
        assert_eq!(quantity(-1.0), "0");
        assert_eq!(quantity(f64::NAN), "0");
    }

    #[test]
    fn selectors() {
        for ok in [
            "",
            "app=service",
            "app==service,tier!=db",
            "app in (a, b),!legacy",
            "example.com/role notin (x)",
            "has_key",
            "app=",
            "n>3,n<10",
            " app = x , b ",
        ] {
            assert_eq!(check_label_selector(ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "app=a b",
            "=x",
            "app in a",
            "app in ()",
            "app in (a",
            "app==-x",
            "-app=x",
            "n>x",
            "app=x,",
            "!app=x",
            "Bad_Prefix!/x=y",
            "a(b",
        ] {
            assert!(check_label_selector(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn routes() {
        assert!(matches!(
            route("/apis/external.metrics.k8s.io/v1beta1"),
            Some(Route::Discovery)
        ));
        assert!(matches!(
            route("/apis/external.metrics.k8s.io/v1beta1/"),
            Some(Route::Discovery)
        ));
        assert!(matches!(
            route("/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/m"),
            Some(Route::Value {
                namespace: "ns",
                metric: "m"
            })
        ));
        for none in [
            "/",
            "/apis",
            "/apis/external.metrics.k8s.io/v1beta1x",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/m/x",
            "/apis/external.metrics.k8s.io/v1beta1/first_attempt_rate",
        ] {
            assert!(route(none).is_none(), "{none}");
        }
    }
}
