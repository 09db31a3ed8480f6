//! HTTP surface: [`app`] routes `/work`, `/readyz`, `/healthz`, `/metrics`,
//! `/arrivals` (its format: [`crate::arrivals`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use crate::arrivals::check_id;
use crate::backlog::Refusal;
use crate::metrics::Rejection;
use crate::pod::Pod;
use crate::queue::Verdict;

/// The pod's routes. Other paths get 404, other methods on them 405.
pub fn app(pod: Pod) -> Router {
    Router::new()
        .route("/work", get(work))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/arrivals", get(arrivals))
        .with_state(pod)
}

/// The 200 body of `/work`.
#[derive(Debug, Serialize)]
struct Answer<'a> {
    pod: &'a str,
    attempt: u32,
    /// Time from arrival to the start of service.
    wait_ms: u64,
}

async fn work(State(pod): State<Pod>, headers: HeaderMap) -> Response {
    let arrival = Instant::now();
    let attempt = match parse_attempt(headers.get("x-attempt")) {
        Ok(a) => a,
        Err(why) => return bad_request(&pod, Rejection::BadAttempt, why),
    };
    let deadline_ms = match parse_deadline(headers.get("x-deadline-ms")) {
        Ok(d) => d,
        Err(why) => return bad_request(&pod, Rejection::BadDeadline, why),
    };
    let request_id = match headers.get("x-request-id").map(|v| check_id(v.as_bytes())) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(why)) => return bad_request(&pod, Rejection::BadRequestId, why),
    };
    // Counted and logged before queueing, also if the queue then turns it away.
    pod.metrics().arrival(attempt);
    pod.arrivals().record(attempt, request_id);
    let deadline = deadline_ms.and_then(|ms| deadline_instant(ms, arrival, SystemTime::now()));
    let reply = match pod.queue().admit(arrival, deadline) {
        Ok(reply) => reply,
        Err(refusal) => return refused(&pod, refusal),
    };
    let mut response = match reply.await {
        Ok(Verdict::Served(wait)) => {
            let answer = Answer {
                pod: pod.name(),
                attempt,
                wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            };
            axum::Json(answer).into_response()
        }
        // The worker counted it.
        Ok(Verdict::Refused) => unavailable(
            pod.queue().snapshot(Instant::now()).wait,
            "refused unserved: the queue has stood above the CoDel target for an interval (--discipline=codel)".into(),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "dropped unserved: deadline passed or pod shutting down\n",
        )
            .into_response(),
    };
    // A pod shutting down ends each keep-alive connection after its answer: the client's next
    // attempt opens a new one, which the Service puts on a ready pod.
    if pod.is_draining() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn bad_request(pod: &Pod, why: Rejection, reason: String) -> Response {
    pod.metrics().rejection(why);
    (StatusCode::BAD_REQUEST, reason + "\n").into_response()
}

/// An arrival turned away at once by `--max-queue` or the discipline.
fn refused(pod: &Pod, refusal: Refusal) -> Response {
    let snapshot = pod.queue().snapshot(Instant::now());
    let depth = snapshot.depth;
    let (why, reason) = match refusal {
        Refusal::MaxQueue => (
            Rejection::QueueFull,
            format!("queue full: {depth} requests waiting (--max-queue)"),
        ),
        Refusal::QueueLimit => (
            Rejection::QueueFull,
            format!("queue full: {depth} requests waiting (--queue-limit)"),
        ),
        Refusal::ConcurrencyLimit { limit } => (
            Rejection::Adaptive,
            format!("at the adaptive limit: {limit} requests in the pod (--discipline=adaptive)"),
        ),
    };
    pod.metrics().rejection(why);
    unavailable(snapshot.wait, reason)
}

/// 503 with `retry-after`: come back once the present backlog (`wait`) has been served.
fn unavailable(wait: Duration, reason: String) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, HeaderValue::from(secs.max(1)))],
        reason + "\n",
    )
        .into_response()
}

async fn readyz(State(pod): State<Pod>) -> (StatusCode, &'static str) {
    if pod.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics(State(pod): State<Pod>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        pod.render_metrics(),
    )
}

/// `GET /arrivals?after=N`: the arrival log after sequence number `N`.
async fn arrivals(State(pod): State<Pod>, RawQuery(query): RawQuery) -> Response {
    let after = match parse_after(query.as_deref().unwrap_or("")) {
        Ok(after) => after,
        Err(why) => return (StatusCode::BAD_REQUEST, why + "\n").into_response(),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        pod.arrivals().page(after),
    )
        .into_response()
}

/// The `/arrivals` query: only `after`, plain decimal digits, absent = 0.
fn parse_after(query: &str) -> Result<u64, String> {
    let mut after = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "after" {
            return Err(format!(
                "unknown query parameter {key:?}: /arrivals takes only after=N"
            ));
        }
        let ok = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
        after = value.parse().ok().filter(|_| ok).ok_or_else(|| {
            format!("after: expected a sequence number (decimal, 0 to 18446744073709551615), got {value:?}")
        })?;
    }
    Ok(after)
}

/// `x-attempt`: decimal, 0 for the first attempt; missing means 0.
fn parse_attempt(value: Option<&HeaderValue>) -> Result<u32, String> {
    value.map_or(Ok(0), |v| {
        parse_decimal(v).ok_or_else(|| {
            format!(
                "x-attempt: expected a non-negative integer, got {}",
                shown(v)
            )
        })
    })
}

/// `x-deadline-ms`: unix time in milliseconds, optional.
fn parse_deadline(value: Option<&HeaderValue>) -> Result<Option<u64>, String> {
    value
        .map(|v| {
            parse_decimal(v).ok_or_else(|| {
                format!(
                    "x-deadline-ms: expected unix time in milliseconds, got {}",
                    shown(v)
                )
            })
        })
        .transpose()
}

/// Plain ASCII digits only (no sign, no spaces).
fn parse_decimal<T: std::str::FromStr>(v: &HeaderValue) -> Option<T> {
    let s = v.to_str().ok()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn shown(v: &HeaderValue) -> String {
    format!("{:?}", String::from_utf8_lossy(v.as_bytes()))
}

/// Maps a unix-ms deadline onto the monotonic clock the queue runs on. A
/// deadline already past maps to `arrival` (expired on arrival); one too far
/// ahead to represent means no deadline.
fn deadline_instant(deadline_ms: u64, arrival: Instant, now: SystemTime) -> Option<Instant> {
    let deadline = UNIX_EPOCH + Duration::from_millis(deadline_ms);
    match deadline.duration_since(now) {
        Ok(ahead) => arrival.checked_add(ahead),
        Err(_) => Some(arrival),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn attempt_parsing() {
        assert_eq!(parse_attempt(None), Ok(0));
        assert_eq!(parse_attempt(Some(&hv("3"))), Ok(3));
        for bad in ["", "-1", "+1", " 1", "1.0", "x", "99999999999"] {
            let err = parse_attempt(Some(&hv(bad))).unwrap_err();
            assert!(
                err.starts_with("x-attempt:") && err.contains(&format!("{bad:?}")),
                "{err}"
            );
        }
        let err = parse_attempt(Some(&HeaderValue::from_bytes(b"\xff").unwrap())).unwrap_err();
        assert!(err.contains('\u{fffd}'), "{err}");
    }

    #[test]
    fn deadline_parsing_and_mapping() {
        assert_eq!(parse_deadline(None), Ok(None));
        assert_eq!(
            parse_deadline(Some(&hv("1700000000000"))),
            Ok(Some(1_700_000_000_000))
        );
        let err = parse_deadline(Some(&hv("soon"))).unwrap_err();
        assert_eq!(
            err,
            "x-deadline-ms: expected unix time in milliseconds, got \"soon\""
        );

        let arrival = Instant::now();
        let now = UNIX_EPOCH + Duration::from_millis(1_000_000);
        assert_eq!(
            deadline_instant(1_000_250, arrival, now),
            Some(arrival + Duration::from_millis(250))
        );
        assert_eq!(deadline_instant(999_000, arrival, now), Some(arrival));
    }
}
