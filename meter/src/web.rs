//! The plain-HTTP side on `--listen`: `/metrics`, `/healthz`, `/readyz`, `/history`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde::Serialize;

use crate::state::{Reading, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/history", get(history))
        .with_state(shared)
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let text = shared.render_metrics(Instant::now());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    match shared.current(Instant::now()) {
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")).into_response(),
    }
}

/// The `/history` body.
#[derive(Debug, Serialize)]
pub struct History {
    pub window_seconds: f64,
    pub scrape_interval_seconds: f64,
    pub readings: Vec<Reading>,
}

async fn history(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let seconds = match query.get("seconds").map(|s| s.parse::<u64>()) {
        None => None,
        Some(Ok(n)) if n > 0 => Some(n),
        Some(_) => {
            let got = query.get("seconds").map_or("", String::as_str);
            return (
                StatusCode::BAD_REQUEST,
                format!("seconds must be a positive whole number, got {got:?}\n"),
            )
                .into_response();
        }
    };
    let body = History {
        window_seconds: shared.window.as_secs_f64(),
        scrape_interval_seconds: shared.scrape_interval.as_secs_f64(),
        readings: shared.history(Instant::now(), seconds),
    };
    Json(body).into_response()
}
