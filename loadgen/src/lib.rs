//! `loadgen`: the retry-debt kit's clients. Open-loop arrivals that follow a schedule (or
//! replay a trace's send times), each a logical request of up to `retries + 1` attempts with a
//! per-attempt timeout, recorded per second.
//!
//! Layout:
//! - [`config`]: the CLI / env flags ([`Config`], clap derive) and their validation ([`config::Plan`]).
//! - [`invocation`]: [`Invocation`], the typed command line other processes start the loadgen with.
//! - [`schedule`]: piecewise-constant rate schedules and the Poisson / constant arrival times.
//! - [`trace`]: arrival traces (`--trace`): send times read from a file, sampled, sped up.
//! - [`policy`]: retry policies as pure state machines (backoff, retry budget, AWS retry quota).
//! - [`gate`]: the client-side defenses each attempt passes (circuit breaker, adaptive
//!   throttling, the AWS adaptive rate limiter), kit-defense's rules in a pure gate.
//! - [`request`]: what an attempt sends (method, path, headers, body; a weighted mix from a
//!   request file; gRPC's framing), with secrets read from the environment or files and
//!   redacted wherever a request is shown.
//! - [`targets`]: target URLs, fixed or from a file reloaded when it changes.
//! - [`tls`]: the rustls client configuration (trust, client certificates, ALPN, resumption).
//! - [`client`]: one attempt, HTTP/1.1 or h2c (hyper's connection API), with `--bind`.
//! - [`gather`]: the nap before a shard parks, so a batch's answers are read in one wake-up.
//! - [`h1`]: the lean HTTP/1.1 exchange and its response framing (a pure state machine).
//! - [`record`]: per-second rows, histograms, `timeseries.csv`, `summary.json`, Prometheus text.
//! - [`limits`]: the open-files limit and peak RSS.
//! - `pacer`: the microsecond arrival timer (a Linux timerfd on the shard's reactor).
//! - `run`: [`run`], which wires them: the shards (arrival loop and request tasks, with
//!   attempts and retries), the 1 s ticker (rows, progress line, checkpoints), `/metrics`,
//!   drain and flush.
//!
//! The `runtime` feature (on by default) holds what sends load: `targets`, `client`, `gather`,
//! `h1`, `pacer`, `run` and the binary, with tokio and hyper. Without it (`default-features =
//! false`) the crate is its flags, schedules, policies and record types, for the kit's crates
//! that start the loadgen or read its flags and records.
//!
//! Arrivals never wait for responses: each is sent at its scheduled absolute time (or as soon
//! after as the runtime allows; the lag is recorded), whatever is in flight. The work is split
//! over `--threads` shards, as wrk splits it over its threads: each shard is one thread with
//! its own single-threaded runtime, timer wheel and connection pool, and sends every n-th
//! arrival of the one schedule, so a request never hops between threads.

#[cfg(feature = "runtime")]
pub mod client;
pub mod config;
pub mod gate;
#[cfg(feature = "runtime")]
pub mod gather;
#[cfg(feature = "runtime")]
pub mod h1;
pub mod invocation;
pub mod limits;
#[cfg(all(feature = "runtime", target_os = "linux"))]
pub mod pacer;
pub mod policy;
pub mod record;
pub mod request;
#[cfg(feature = "runtime")]
mod run;
pub mod schedule;
#[cfg(feature = "runtime")]
pub mod targets;
#[cfg(feature = "runtime")]
pub mod tls;
pub mod trace;

use std::path::PathBuf;

pub use config::Config;
pub use invocation::{BudgetFlags, Invocation, Load, TargetSource, TraceFlags};
pub use record::metrics;
pub use record::{Percentiles, Row, RunMeta, Summary};
pub use schedule::{ArrivalKind, Schedule, ScheduleError};
pub use trace::TraceError;

#[cfg(feature = "runtime")]
pub use run::run;

/// File names written into `--out`.
pub const TIMESERIES_FILE: &str = "timeseries.csv";
pub const SUMMARY_FILE: &str = "summary.json";

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{0}")]
    Targets(String),
    #[error("--metrics-listen {addr}: {source}")]
    MetricsListen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("--out {}: {source}", path.display())]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting shard {shard}: {source}")]
    Shard {
        shard: usize,
        source: std::io::Error,
    },
}
