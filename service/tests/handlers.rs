//! Handler tests through `Router` + `oneshot`, without a socket.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kit_defense::{AimdParams, CodelParams, Discipline};
use service::{Config, DisciplineArg, Pod, app};
use tokio::task::JoinHandle;
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

/// Each series reaches its value within a second. The worker thread counts an
/// answer just after handing it over, so a handler can reply (and the test
/// scrape) a moment before the count moves.
async fn expect(pod: &Pod, expected: &[(&str, f64)]) {
    for &(series, value) in expected {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            let seen = metric(pod, series).await;
            if seen == value {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series}: {seen}, expected {value}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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

/// A pod of this discipline at `rate`, ready at once.
fn disciplined(discipline: Discipline, rate: f64) -> Pod {
    Pod::new(&Config {
        rate,
        discipline: DisciplineArg(discipline),
        ..config()
    })
}

/// `n` requests sent at once; each task yields the status, `retry-after` and body.
fn burst(pod: &Pod, n: usize) -> Vec<JoinHandle<(StatusCode, Option<String>, String)>> {
    (0..n)
        .map(|_| {
            let router = app(pod.clone());
            tokio::spawn(async move {
                let resp = router.oneshot(get("/work", &[])).await.unwrap();
                let status = resp.status();
                let retry = resp.headers().get(header::RETRY_AFTER);
                let retry = retry.map(|v| v.to_str().unwrap().to_owned());
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, retry, String::from_utf8(body.to_vec()).unwrap())
            })
        })
        .collect()
}

/// The answers of the tasks that end within a second; the others (still queued) are aborted.
async fn answered_at_once(
    tasks: Vec<JoinHandle<(StatusCode, Option<String>, String)>>,
    expected: usize,
) -> Vec<(StatusCode, Option<String>, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while tasks.iter().filter(|t| t.is_finished()).count() < expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than {expected} answered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut answers = Vec::new();
    for task in tasks {
        if task.is_finished() {
            answers.push(task.await.unwrap());
        } else {
            task.abort();
        }
    }
    answers
}

#[tokio::test]
async fn a_bounded_pod_answers_a_burst_past_its_limit_with_503() {
    // 1 s a request, no worker: what is admitted stays queued.
    let pod = disciplined(Discipline::Bounded { limit: 2 }, 1.0);
    let tasks = burst(&pod, 5);
    expect(
        &pod,
        &[
            ("retrydebt_rejections_total{reason=\"queue_full\"}", 3.0),
            ("retrydebt_queue_depth", 2.0),
            ("retrydebt_arrivals_total{attempt=\"0\"}", 5.0),
        ],
    )
    .await;
    let refused = answered_at_once(tasks, 3).await;
    assert_eq!(refused.len(), 3, "{refused:?}");
    for (status, retry, body) in refused {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        // Two queued requests of 1 s each are ahead.
        assert_eq!(retry.as_deref(), Some("2"));
        assert_eq!(body, "queue full: 2 requests waiting (--queue-limit)\n");
    }
}

#[tokio::test]
async fn a_codel_pod_refuses_a_burst_at_the_head_once_the_queue_stood() {
    // 10 ms a request: request k of the burst waits about 10k ms. From the third on every wait
    // is over the 20 ms target; 50 ms later the rest are refused at once.
    let codel = CodelParams {
        target_s: 0.020,
        interval_s: 0.050,
    };
    let pod = disciplined(Discipline::Codel(codel), 100.0);
    let _worker = pod.spawn_worker();
    let mut served = 0;
    let mut refused = 0;
    for task in burst(&pod, 30) {
        let (status, retry, body) = task.await.unwrap();
        if status == StatusCode::OK {
            served += 1;
        } else {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert!(retry.is_some(), "{body}");
            assert!(body.contains("--discipline=codel"), "{body}");
            refused += 1;
        }
    }
    assert!(
        (3..=15).contains(&served),
        "{served} served, {refused} refused"
    );
    expect(
        &pod,
        &[
            (
                "retrydebt_rejections_total{reason=\"codel\"}",
                f64::from(refused),
            ),
            (
                "retrydebt_completions_total{outcome=\"answered\"}",
                f64::from(served),
            ),
            ("retrydebt_busy_seconds_total", f64::from(served) * 0.01),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_adaptive_pod_refuses_at_its_limit_and_shows_it() {
    let aimd = AimdParams {
        initial: 2,
        min: 1,
        max: 4,
        latency_s: 1.0,
        backoff: 0.5,
    };
    // No worker: the first two stay in the pod.
    let pod = disciplined(Discipline::Adaptive(aimd), 1.0);
    expect(&pod, &[("retrydebt_concurrency_limit", 2.0)]).await;
    let refused = answered_at_once(burst(&pod, 3), 1).await;
    assert_eq!(refused.len(), 1);
    let (status, retry, body) = &refused[0];
    assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.as_deref(), Some("2"));
    assert_eq!(
        body,
        "at the adaptive limit: 2 requests in the pod (--discipline=adaptive)\n"
    );
    // The refusal shrank the limit.
    expect(
        &pod,
        &[
            ("retrydebt_rejections_total{reason=\"adaptive\"}", 1.0),
            ("retrydebt_concurrency_limit", 1.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_sharing_pod_serves_its_limit_at_once_and_the_rest_wait() {
    // 100 ms a request; two share the rate: both done after about 200 ms, having waited for
    // nothing. The third waits for a place until then, and is done 100 ms later.
    let pod = disciplined(Discipline::Sharing { limit: 2 }, 10.0);
    let _worker = pod.spawn_worker();
    let t0 = Instant::now();
    let mut answers = Vec::new();
    for task in burst(&pod, 3) {
        let (status, _, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        answers.push((json["wait_ms"].as_u64().unwrap(), t0.elapsed()));
    }
    answers.sort();
    let [(w0, d0), (w1, d1), (w2, d2)] = answers[..] else {
        panic!("{answers:?}")
    };
    assert!(w0 < 20 && w1 < 20, "{answers:?}");
    assert!((150..=260).contains(&w2), "{answers:?}");
    let ms = Duration::from_millis;
    assert!(
        d0 >= ms(180) && d1 >= ms(180) && d2 >= ms(280),
        "{answers:?}"
    );
    expect(&pod, &[("retrydebt_busy_seconds_total", 0.3)]).await;
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

/// A pod that turns every `/work` away at once (503, queue full) but still
/// counts and logs it: arrivals without waiting for service.
fn logging_pod(arrival_log_size: usize) -> Pod {
    Pod::new(&Config {
        max_queue: Some(0),
        arrival_log_size,
        ..config()
    })
}

async fn arrive(pod: &Pod, attempt: u32, id: Option<&str>) {
    let attempt = attempt.to_string();
    let mut headers = vec![("x-attempt", attempt.as_str())];
    headers.extend(id.map(|id| ("x-request-id", id)));
    let (status, body) = call(pod, get("/work", &headers)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

/// `/arrivals?after=N`: the first line's fields and the entry lines.
async fn arrivals(pod: &Pod, after: u64) -> (Vec<(String, u64)>, Vec<String>) {
    let resp = app(pod.clone())
        .oneshot(get(&format!("/arrivals?after={after}"), &[]))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(head.len(), 8, "{text}");
    assert_eq!(
        [head[0], head[2], head[4], head[6]],
        ["next", "newest", "lost", "epoch"]
    );
    assert_eq!(head[7].len(), 16, "{text}");
    let fields = [0, 2, 4]
        .iter()
        .map(|&i| (head[i].to_owned(), head[i + 1].parse().unwrap()))
        .collect();
    (fields, lines.map(str::to_owned).collect())
}

fn head(next: u64, newest: u64, lost: u64) -> Vec<(String, u64)> {
    vec![
        ("next".into(), next),
        ("newest".into(), newest),
        ("lost".into(), lost),
    ]
}

#[tokio::test]
async fn arrivals_lists_ids_and_attempts_and_pages_by_after() {
    let pod = logging_pod(1 << 17);
    assert_eq!(arrivals(&pod, 0).await, (head(0, 0, 0), vec![]));
    arrive(&pod, 0, Some("r-1")).await;
    arrive(&pod, 0, Some("r-1")).await; // a gateway's copy: same bytes
    arrive(&pod, 1, Some("r-1")).await;
    arrive(&pod, 0, None).await;
    let (h, lines) = arrivals(&pod, 0).await;
    assert_eq!(h, head(4, 4, 0));
    assert_eq!(lines, ["0 r-1", "0 r-1", "1 r-1", "0"]);
    assert_eq!(
        arrivals(&pod, 2).await,
        (head(4, 4, 0), vec!["1 r-1".into(), "0".into()])
    );
    assert_eq!(arrivals(&pod, 4).await, (head(4, 4, 0), vec![]));
    // A cursor past the newest (another life of the pod): `next` goes back.
    assert_eq!(arrivals(&pod, 99).await, (head(4, 4, 0), vec![]));
    // The counters agree with the log.
    expect(
        &pod,
        &[
            ("retrydebt_arrivals_total{attempt=\"0\"}", 3.0),
            ("retrydebt_arrivals_total{attempt=\"1\"}", 1.0),
        ],
    )
    .await;

    // Pages are capped; the caller follows `next` until it reaches `newest`.
    let cap = service::arrivals::PAGE_ENTRIES as u64;
    for i in 0..cap {
        arrive(&pod, 0, Some(&format!("p{i}"))).await;
    }
    let (h, lines) = arrivals(&pod, 0).await;
    assert_eq!((h, lines.len() as u64), (head(cap, cap + 4, 0), cap));
    let (h, lines) = arrivals(&pod, cap).await;
    assert_eq!(h, head(cap + 4, cap + 4, 0));
    let want: Vec<String> = (cap - 4..cap).map(|i| format!("0 p{i}")).collect();
    assert_eq!(lines, want);
}

#[tokio::test]
async fn arrivals_overwritten_before_they_were_read_are_reported_lost() {
    let pod = logging_pod(3);
    for i in 1..=5 {
        arrive(&pod, 0, Some(&format!("r{i}"))).await;
    }
    let (h, lines) = arrivals(&pod, 0).await;
    assert_eq!(h, head(5, 5, 2));
    assert_eq!(lines, ["0 r3", "0 r4", "0 r5"]);
    assert_eq!(arrivals(&pod, 1).await.0, head(5, 5, 1));
    let (h, lines) = arrivals(&pod, 3).await;
    assert_eq!(
        (h, lines),
        (head(5, 5, 0), vec!["0 r4".into(), "0 r5".into()])
    );
}

#[tokio::test]
async fn bad_after_and_bad_request_ids_get_400_naming_field_and_value() {
    let pod = logging_pod(16);
    for (query, want) in [
        ("after=-1", "after: expected a sequence number"),
        ("after=x", "\"x\""),
        ("after=", "\"\""),
        ("after=18446744073709551616", "\"18446744073709551616\""),
        ("after=1&limit=5", "unknown query parameter \"limit\""),
    ] {
        let (status, body) = call(&pod, get(&format!("/arrivals?{query}"), &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert!(
            body.contains(want) && body.ends_with('\n') && body.lines().count() == 1,
            "{query}: {body}"
        );
    }
    let (status, body) = call(&pod, get("/arrivals?after=-1", &[])).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "after: expected a sequence number (decimal, 0 to 18446744073709551615), got \"-1\"\n"
        )
    );
    // No `after` means from the start.
    assert_eq!(call(&pod, get("/arrivals", &[])).await.0, StatusCode::OK);

    let long = "x".repeat(129);
    for bad in [long.as_str(), "has space", ""] {
        let (status, body) = call(&pod, get("/work", &[("x-request-id", bad)])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert!(
            body.starts_with("x-request-id: expected 1 to 128 visible ASCII characters, got ")
                && body.lines().count() == 1,
            "{body}"
        );
    }
    // Rejected requests are neither arrivals nor logged.
    expect(
        &pod,
        &[
            ("retrydebt_rejections_total{reason=\"bad_request_id\"}", 3.0),
            ("retrydebt_arrivals_total{attempt=\"0\"}", 0.0),
        ],
    )
    .await;
    assert_eq!(arrivals(&pod, 0).await, (head(0, 0, 0), vec![]));
    // 128 bytes is fine.
    arrive(&pod, 0, Some(&"y".repeat(128))).await;
    assert_eq!(arrivals(&pod, 0).await.0, head(1, 1, 0));
}
