//! The external metrics API router without a socket (`oneshot`): JSON shapes field
//! by field against the upstream Go types, and every error as a `Status`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use meter::k8s::{self, ClientCert};
use meter::rate::Rates;
use meter::state::Shared;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tower::ServiceExt;

const WINDOW: Duration = Duration::from_secs(2);
const BASE: &str = "/apis/external.metrics.k8s.io/v1beta1";

fn new_shared(require_client_cert: bool) -> Arc<Shared> {
    let (interval, history) = (Duration::from_millis(500), Duration::from_secs(60));
    Arc::new(Shared::new(WINDOW, interval, history, require_client_cert))
}

/// A shared state that has a full, fresh window of readings.
fn ready_shared(require_client_cert: bool) -> Arc<Shared> {
    let shared = new_shared(require_client_cert);
    let now = Instant::now();
    let rates = Rates {
        first_attempt: 1.5,
        ingress: 2000.25,
        retry: 1998.75,
        pods: 3,
        header_first_attempt: 4.5,
        client_attempt: 2.25,
        measured: true,
    };
    for back_ms in [2500, 2000, 1500, 1000, 500, 0] {
        let at = now - Duration::from_millis(back_ms);
        shared.publish(at, OffsetDateTime::now_utc(), rates, 3, 3);
    }
    shared
}

async fn call(shared: &Arc<Shared>, method: Method, uri: &str, cert: bool) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    if cert {
        req.extensions_mut().insert(ClientCert);
    }
    let response = k8s::router(shared.clone()).oneshot(req).await.unwrap();
    let status = response.status();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "{uri}"
    );
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[tokio::test]
async fn discovery_is_an_api_resource_list() {
    let shared = ready_shared(false);
    for path in [BASE.to_owned(), format!("{BASE}/")] {
        let (status, body) = call(&shared, Method::GET, &path, false).await;
        assert_eq!(status, StatusCode::OK);
        let resource = |name: &str| {
            json!({"name": name, "singularName": "", "namespaced": true,
                   "kind": "ExternalMetricValueList", "verbs": ["get"]})
        };
        let expected = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "external.metrics.k8s.io/v1beta1",
            "resources": [
                resource("first_attempt_rate"),
                resource("ingress_rate"),
                resource("retry_rate"),
                resource("header_first_attempt_rate"),
                resource("client_attempt_rate"),
            ],
        });
        assert_eq!(body, expected);
    }
}

#[tokio::test]
async fn values_are_an_external_metric_value_list() {
    let shared = ready_shared(false);
    let cases = [
        ("first_attempt_rate", "1500m"),
        ("ingress_rate", "2000250m"),
        ("retry_rate", "1998750m"),
        ("header_first_attempt_rate", "4500m"),
        ("client_attempt_rate", "2250m"),
    ];
    for (metric, value) in cases {
        // Any namespace is answered; a valid label selector is accepted.
        let uri = format!("{BASE}/namespaces/retry-debt/{metric}?labelSelector=app%3Dservice");
        let (status, body) = call(&shared, Method::GET, &uri, false).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(keys(&body), ["apiVersion", "items", "kind", "metadata"]);
        assert_eq!(body["kind"], "ExternalMetricValueList");
        assert_eq!(body["apiVersion"], "external.metrics.k8s.io/v1beta1");
        assert_eq!(body["metadata"], json!({}));
        let items = body["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        let item = &items[0];
        assert_eq!(
            keys(item),
            ["metricLabels", "metricName", "timestamp", "value", "window"]
        );
        assert_eq!(item["metricName"], metric);
        assert_eq!(item["metricLabels"], json!({}));
        assert_eq!(
            item["window"],
            json!(2),
            "window is an integer number of seconds"
        );
        assert!(item["window"].is_i64());
        assert_eq!(item["value"], value);
        let ts = item["timestamp"].as_str().unwrap();
        let parsed = OffsetDateTime::parse(ts, &Rfc3339).unwrap();
        assert!(
            ts.ends_with('Z') && !ts.contains('.'),
            "metav1.Time style: {ts}"
        );
        assert!(
            (OffsetDateTime::now_utc() - parsed).whole_seconds().abs() < 5,
            "{ts}"
        );
    }
}

fn assert_status(body: &Value, code: u16, reason: &str, message_part: &str) {
    let mut expected_keys = vec![
        "apiVersion",
        "code",
        "kind",
        "message",
        "metadata",
        "reason",
        "status",
    ];
    if body.get("details").is_some() {
        expected_keys.push("details");
        expected_keys.sort_unstable();
    }
    assert_eq!(keys(body), expected_keys, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["metadata"], json!({}));
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["reason"], reason);
    assert_eq!(body["code"], code);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(message_part),
        "{message:?} lacks {message_part:?}"
    );
}

#[tokio::test]
async fn errors_are_kubernetes_status_bodies() {
    let shared = ready_shared(false);
    let cases: [(Method, String, u16, &str, &str); 9] = [
        (
            Method::GET,
            format!("{BASE}/namespaces/default/nope"),
            404,
            "NotFound",
            "\"nope\"",
        ),
        (
            Method::GET,
            format!("{BASE}/namespaces/default"),
            404,
            "NotFound",
            "could not find",
        ),
        (
            Method::GET,
            "/apis/custom.metrics.k8s.io/v1beta1".into(),
            404,
            "NotFound",
            "could not find",
        ),
        (
            Method::GET,
            format!("{BASE}/namespaces/Bad_NS/first_attempt_rate"),
            400,
            "BadRequest",
            "Bad_NS",
        ),
        (
            Method::GET,
            format!("{BASE}/namespaces/default/first_attempt_rate?labelSelector=app%20in%20(x"),
            400,
            "BadRequest",
            "labelSelector",
        ),
        (
            Method::GET,
            format!("{BASE}/namespaces/default/first_attempt_rate?labelSelector=%3D%3D"),
            400,
            "BadRequest",
            "labelSelector",
        ),
        (
            Method::POST,
            format!("{BASE}/namespaces/default/first_attempt_rate"),
            405,
            "MethodNotAllowed",
            "POST",
        ),
        (
            Method::DELETE,
            BASE.into(),
            405,
            "MethodNotAllowed",
            "DELETE",
        ),
        (
            Method::PUT,
            format!("{BASE}/namespaces/default/nope"),
            405,
            "MethodNotAllowed",
            "PUT",
        ),
    ];
    for (method, uri, code, reason, part) in cases {
        let (status, body) = call(&shared, method.clone(), &uri, false).await;
        assert_eq!(status.as_u16(), code, "{method} {uri}: {body}");
        assert_status(&body, code, reason, part);
    }
    let (_, body) = call(
        &shared,
        Method::GET,
        &format!("{BASE}/namespaces/default/nope"),
        false,
    )
    .await;
    assert_eq!(
        body["details"],
        json!({"name": "nope", "group": "external.metrics.k8s.io"})
    );
}

#[tokio::test]
async fn no_value_before_a_full_window_or_when_stale() {
    let uri = format!("{BASE}/namespaces/default/ingress_rate");
    let shared = new_shared(false);
    let (status, body) = call(&shared, Method::GET, &uri, false).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_status(&body, 503, "ServiceUnavailable", "less than one window");
    // Discovery still answers 2xx: the aggregator's availability check needs it.
    assert_eq!(
        call(&shared, Method::GET, BASE, false).await.0,
        StatusCode::OK
    );

    // Data that ended more than a window ago: stale, not zero.
    let stale = new_shared(false);
    let now = Instant::now();
    for back_ms in [6000, 5000, 4000, 3000] {
        stale.publish(
            now - Duration::from_millis(back_ms),
            OffsetDateTime::now_utc(),
            Rates::default(),
            1,
            1,
        );
    }
    let (status, body) = call(&stale, Method::GET, &uri, false).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_status(&body, 503, "ServiceUnavailable", "no pod could be scraped");
}

#[tokio::test]
async fn client_certificate_required_with_a_client_ca() {
    let shared = ready_shared(true);
    let uri = format!("{BASE}/namespaces/default/first_attempt_rate");
    let (status, body) = call(&shared, Method::GET, &uri, false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_status(&body, 401, "Unauthorized", "client certificate");
    let (status, _) = call(&shared, Method::GET, BASE, false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = call(&shared, Method::GET, &uri, true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
