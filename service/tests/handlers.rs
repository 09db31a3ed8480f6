//! Handler tests through `Router` + `oneshot`, without a socket.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use service::{Config, Pod, app};
use tower::ServiceExt;

fn config() -> Config {
    Config {
        ready_after: Duration::ZERO.into(),
        pod_name: "pod-a".into(),
        ..Config::default()
    }
}

async fn call(pod: &Pod, req: Request<Body>) -> (StatusCode, String) {
    let resp = app(pod.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn get(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::empty()).unwrap()
}

async fn metric(pod: &Pod, series: &str) -> f64 {
    let (_, text) = call(pod, get("/metrics", &[])).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

async fn expect(pod: &Pod, expected: &[(&str, f64)]) {
    for &(series, value) in expected {
        assert_eq!(metric(pod, series).await, value, "{series}");
    }
}

#[tokio::test]
async fn work_answers_json_with_pod_attempt_and_wait() {
    let pod = Pod::new(&config());
    let _worker = pod.spawn_worker();
    let (status, body) = call(
        &pod,
        get("/work", &[("x-attempt", "2"), ("x-request-id", "r1")]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["pod"], "pod-a");
    assert_eq!(json["attempt"], 2);
    assert!(json["wait_ms"].as_u64().unwrap() < 1000, "{body}");
    expect(
        &pod,
        &[
            ("retrydebt_arrivals_total{attempt=\"2\"}", 1.0),
            ("retrydebt_completions_total{outcome=\"answered\"}", 1.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn missing_attempt_counts_as_first_and_high_attempts_are_capped() {
    let pod = Pod::new(&config());
    let _worker = pod.spawn_worker();
    assert_eq!(call(&pod, get("/work", &[])).await.0, StatusCode::OK);
    assert_eq!(
        call(&pod, get("/work", &[("x-attempt", "1234")])).await.0,
        StatusCode::OK
    );
    expect(
        &pod,
        &[
            ("retrydebt_arrivals_total{attempt=\"0\"}", 1.0),
            ("retrydebt_arrivals_total{attempt=\"99\"}", 1.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn malformed_headers_get_400_with_a_reason_and_are_counted() {
    let pod = Pod::new(&config());
    let (status, body) = call(&pod, get("/work", &[("x-attempt", "-1")])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        "x-attempt: expected a non-negative integer, got \"-1\"\n"
    );
    let (status, body) = call(&pod, get("/work", &[("x-deadline-ms", "tomorrow")])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        "x-deadline-ms: expected unix time in milliseconds, got \"tomorrow\"\n"
    );
    // Malformed requests are not arrivals (attempt="0" stays 0): they never reach the queue.
    expect(
        &pod,
        &[
            ("retrydebt_rejections_total{reason=\"bad_attempt\"}", 1.0),
            ("retrydebt_rejections_total{reason=\"bad_deadline\"}", 1.0),
            ("retrydebt_arrivals_total{attempt=\"0\"}", 0.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn unknown_path_is_404_and_other_methods_405() {
    let pod = Pod::new(&config());
    assert_eq!(call(&pod, get("/nope", &[])).await.0, StatusCode::NOT_FOUND);
    for method in ["POST", "PUT", "DELETE"] {
        let req = Request::builder()
            .method(method)
            .uri("/work")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            call(&pod, req).await.0,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method}"
        );
    }
}

#[tokio::test]
async fn full_queue_gets_503_with_retry_after_and_arrival_still_counted() {
    let pod = Pod::new(&Config {
        max_queue: Some(1),
        rate: 0.5,
        ..config()
    });
    // No worker: the first request stays queued.
    let first = tokio::spawn(app(pod.clone()).oneshot(get("/work", &[])));
    while metric(&pod, "retrydebt_queue_depth").await < 1.0 {
        tokio::task::yield_now().await;
    }
    let resp = app(pod.clone())
        .oneshot(get("/work", &[("x-attempt", "1")]))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    // One queued request of 2 s service time is ahead.
    assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
    expect(
        &pod,
        &[
            ("retrydebt_rejections_total{reason=\"queue_full\"}", 1.0),
            ("retrydebt_arrivals_total{attempt=\"1\"}", 1.0),
            ("retrydebt_wait_seconds", 2.0),
        ],
    )
    .await;
    first.abort();
}

#[tokio::test]
async fn readiness_follows_the_dead_time_and_shutdown() {
    let pod = Pod::new(&Config {
        ready_after: Duration::from_millis(300).into(),
        ..config()
    });
    assert_eq!(
        call(&pod, get("/readyz", &[])).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(call(&pod, get("/healthz", &[])).await.0, StatusCode::OK);
    expect(&pod, &[("retrydebt_ready", 0.0)]).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(call(&pod, get("/readyz", &[])).await.0, StatusCode::OK);
    expect(&pod, &[("retrydebt_ready", 1.0)]).await;
    pod.start_draining();
    assert_eq!(
        call(&pod, get("/readyz", &[])).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(call(&pod, get("/healthz", &[])).await.0, StatusCode::OK);
}

#[tokio::test]
async fn expired_request_is_dropped_with_503_in_drop_expired_mode() {
    let pod = Pod::new(&Config {
        abandoned: service::Abandoned::DropExpired,
        ..config()
    });
    let _worker = pod.spawn_worker();
    let past = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 1000;
    let (status, body) = call(&pod, get("/work", &[("x-deadline-ms", &past.to_string())])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    expect(
        &pod,
        &[
            ("retrydebt_completions_total{outcome=\"dropped\"}", 1.0),
            ("retrydebt_busy_seconds_total", 0.0),
        ],
    )
    .await;
}
