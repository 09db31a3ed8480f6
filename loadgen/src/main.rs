//! `loadgen` command line: parse flags (or `LOADGEN_*` env vars), run until the schedule ends
//! or Ctrl-C / SIGTERM, print a one-line summary.

use std::process::ExitCode;

use clap::Parser;

// The load itself runs on the shards' own threads; this runtime only signals, ticks and serves
// /metrics.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = loadgen::Config::parse();
    let out = config.out.clone();
    match loadgen::run(config, stop_signal()).await {
        Ok(s) => {
            let trace = match s.meta.arrival_process {
                loadgen::ArrivalKind::Trace => format!("{}: ", s.meta.schedule),
                _ => String::new(),
            };
            let rejected = if s.meta.client.is_none() {
                String::new()
            } else {
                format!(
                    ", {} throttled, {} breaker open",
                    s.throttled, s.breaker_open
                )
            };
            eprintln!(
                "loadgen: {trace}{} first attempts, {} attempts, {} succeeded, {} failed, {} unfinished, {} timeouts, {} shed{rejected}{}",
                s.first_attempts,
                s.attempts,
                s.succeeded,
                s.failed,
                s.unfinished,
                s.timeouts,
                s.shed,
                out.map(|d| format!("; records in {}", d.display()))
                    .unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::from(2)
        }
    }
}

/// Resolves on the first Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the run early");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
