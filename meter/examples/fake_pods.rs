//! Bench-only: serves many fake pods on loopback whose `retrydebt_arrivals_total`
//! counters and `/arrivals` logs follow a known arrival pattern (a constant
//! rate, then one step; every request id unique, so the distinct count equals
//! the header count), writes their base URLs to a pods file for the meter,
//! and exits after `--duration`.
//! Used by `scripts/bench-meter.sh`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use clap::Parser;

#[derive(Debug, Parser)]
struct Args {
    /// How many pods.
    #[arg(long, default_value_t = 50)]
    pods: usize,
    /// First attempts per second per pod before the step; attempt 1 gets half of
    /// that and attempt 2 a quarter.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// When the step happens, after start.
    #[arg(long, default_value = "45s", value_parser = humantime::parse_duration)]
    step_after: Duration,
    /// Every rate is multiplied by this at the step.
    #[arg(long, default_value_t = 5.0)]
    step_factor: f64,
    /// Where to write the pod base URLs (atomically).
    #[arg(long)]
    pods_file: PathBuf,
    /// Where to write the step's wall time, unix milliseconds.
    #[arg(long)]
    step_file: PathBuf,
    /// Exit after this long.
    #[arg(long, default_value = "150s", value_parser = humantime::parse_duration)]
    duration: Duration,
}

/// The known pattern: arrivals of attempt 0 so far, per pod.
struct Pattern {
    start: Instant,
    rate: f64,
    step_after: f64,
    step_factor: f64,
}

impl Pattern {
    fn first_attempts(&self, now: Instant) -> f64 {
        let t = now.duration_since(self.start).as_secs_f64();
        let before = t.min(self.step_after);
        let after = (t - self.step_after).max(0.0);
        self.rate * (before + self.step_factor * after)
    }

    fn body(&self, now: Instant) -> String {
        let first = self.first_attempts(now);
        format!(
            "# HELP retrydebt_arrivals_total Arrivals by attempt number.\n\
             # TYPE retrydebt_arrivals_total counter\n\
             retrydebt_arrivals_total{{attempt=\"0\"}} {}\n\
             retrydebt_arrivals_total{{attempt=\"1\"}} {}\n\
             retrydebt_arrivals_total{{attempt=\"2\"}} {}\n\
             # HELP retrydebt_queue_depth Requests waiting.\n\
             # TYPE retrydebt_queue_depth gauge\n\
             retrydebt_queue_depth 0\n",
            first.floor(),
            (first / 2.0).floor(),
            (first / 4.0).floor()
        )
    }
}

/// One pod's arrival log, brought up to the pattern's counts when read.
struct Log {
    pod: usize,
    /// Arrivals logged so far of attempts 0, 1, 2.
    logged: [u64; 3],
    /// Attempt of each entry, in order; entry `n`'s id is `<pod>-<n>`.
    attempts: Vec<u8>,
}

impl Log {
    fn page(&mut self, pattern: &Pattern, after: u64) -> String {
        let first = pattern.first_attempts(Instant::now());
        let due = [first, first / 2.0, first / 4.0].map(|v| v.floor() as u64);
        for (attempt, n) in due.iter().enumerate() {
            while self.logged[attempt] < *n {
                self.logged[attempt] += 1;
                self.attempts.push(attempt as u8);
            }
        }
        let newest = self.attempts.len() as u64;
        let from = after.min(newest) as usize;
        let listed = &self.attempts[from..(from + 8192).min(self.attempts.len())];
        let next = if listed.is_empty() {
            newest
        } else {
            (from + listed.len()) as u64
        };
        let mut out = format!(
            "next {next} newest {newest} lost 0 epoch {:016x}\n",
            self.pod
        );
        for (i, attempt) in listed.iter().enumerate() {
            let _ = writeln!(out, "{attempt} {}-{}", self.pod, from + i + 1);
        }
        out
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pattern = Arc::new(Pattern {
        start: Instant::now(),
        rate: args.rate,
        step_after: args.step_after.as_secs_f64(),
        step_factor: args.step_factor,
    });
    let step_unix_ms = (SystemTime::now() + args.step_after)
        .duration_since(UNIX_EPOCH)?
        .as_millis();
    let mut urls = String::new();
    for pod in 0..args.pods {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push_str(&format!("http://{}\n", listener.local_addr()?));
        let log = Arc::new(Mutex::new(Log {
            pod,
            logged: [0; 3],
            attempts: Vec::new(),
        }));
        let (metrics, arrivals) = (pattern.clone(), pattern.clone());
        let app = Router::new()
            .route(
                "/metrics",
                get(move || async move { metrics.body(Instant::now()) }),
            )
            .route(
                "/arrivals",
                get(
                    move |Query(q): Query<std::collections::HashMap<String, u64>>| async move {
                        let after = q.get("after").copied().unwrap_or(0);
                        log.lock().unwrap().page(&arrivals, after)
                    },
                ),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    let write = |path: &PathBuf, text: &str| -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    };
    write(&args.step_file, &format!("{step_unix_ms}\n"))?;
    write(&args.pods_file, &urls)?;
    tokio::time::sleep(args.duration).await;
    Ok(())
}
