//! The retry-debt pod: one queue served at a fixed rate, by default FIFO and one
//! request at a time, which by default finishes work whose client has gone.
//!
//! Layout, from the pure core outwards:
//!
//! - [`backlog`]: [`Backlog`], the queue and its schedule (absolute completion
//!   deadlines, seeded service times, drop modes) under its discipline
//!   (`kit_defense::Discipline`: FIFO, LIFO, CoDel, bounded, processor sharing,
//!   an adaptive limit). Pure: time is an argument.
//! - [`queue`]: [`Queue`], the backlog behind a lock, and the single worker
//!   thread that sleeps or spins through each service time (sharing: through
//!   each stretch until the next completion or arrival).
//! - [`cpu`]: the process's and the worker's CPU clocks, and [`CpuAccount`](cpu::CpuAccount),
//!   which makes the spin pay for the HTTP path's CPU (pure).
//! - [`metrics`]: the counters and their Prometheus text.
//! - [`arrivals`]: [`ArrivalLog`], the bounded log of `(x-request-id,
//!   x-attempt)` behind `GET /arrivals`, from which the meter counts distinct
//!   requests (a gateway's retries repeat the client's headers); its wire
//!   format is in the module doc.
//! - [`pod`]: [`Pod`], the state the handlers share (queue, counters, readiness).
//! - [`http`]: [`app`], the routes (`/work`, `/readyz`, `/healthz`, `/metrics`,
//!   `/arrivals`).
//! - [`server`]: [`run`], the accept loop with HTTP/1 limits and the graceful
//!   shutdown; [`bind`] and [`shutdown_signal`] for `main`.
//! - [`config`]: [`Config`], every flag also from an environment variable
//!   ([`DisciplineArg`]: `--discipline` and its parameters, resolved);
//!   [`PodFlags`], the typed command line other processes start a pod with.

pub mod arrivals;
pub mod backlog;
pub mod config;
pub mod cpu;
pub mod http;
pub mod metrics;
pub mod pod;
pub mod queue;
pub mod server;

pub use arrivals::ArrivalLog;
pub use backlog::{Abandoned, Backlog, ServiceTime};
pub use config::{Config, DisciplineArg, PodFlags};
pub use http::app;
pub use pod::Pod;
pub use queue::{Queue, Work, Worker};
pub use server::{Report, bind, run, shutdown_signal};

/// Why the pod could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(std::io::Error),
}
