//! The real server: accept loop, HTTP/1 limits, graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::Error;
use crate::config::Config;
use crate::http::app;
use crate::metrics::Outcome;
use crate::pod::Pod;

/// How often the shutdown phase checks whether the queue has drained.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// How long a draining pod waits with no arrival before it stops: kube-proxy's default
/// `--iptables-min-sync-period`, the time a Service takes to drop a terminating endpoint.
const QUIET: Duration = Duration::from_secs(1);
/// Bound on closing connections once the queue is gone (answers are written
/// immediately then, so this only cuts off clients that stopped reading).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors) before retrying.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// What the pod did, returned when [`run`] ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// Arrivals over the pod's life (well-formed requests, all attempts).
    pub arrivals: u64,
    pub answered: u64,
    pub abandoned: u64,
    pub dropped: u64,
    /// Requests still queued or in service when the grace period ended;
    /// their clients got 503.
    pub left: usize,
}

/// Binds the listening socket.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Resolves on SIGTERM (Kubernetes) or Ctrl-C.
pub fn shutdown_signal() -> Result<impl Future<Output = ()>, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => info!("Ctrl-C received"),
        }
    })
}

/// Serves the pod on `listener` until `shutdown` resolves; then readiness
/// turns false, arrivals are still accepted and the queue is served until it
/// is empty or `--shutdown-grace` has passed; what is left is dropped,
/// counted and logged.
pub async fn run(listener: TcpListener, config: Config, shutdown: impl Future) -> Report {
    let pod = Pod::new(&config);
    let worker = pod.spawn_worker();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(*config.header_read_timeout)
        .max_header_size(config.max_header_bytes);
    let server = Server {
        listener,
        router: app(pod.clone()),
        http,
        graceful: GracefulShutdown::new(),
    };
    info!(
        addr = ?server.listener.local_addr().ok(),
        pod = pod.name(),
        rate = config.rate,
        service_time = %config.service_time.0,
        abandoned = ?config.abandoned,
        work = ?config.work,
        ready_after = %config.ready_after,
        max_queue = ?config.max_queue,
        discipline = %config.discipline.0,
        "serving"
    );

    server.accept_until(shutdown).await;
    pod.start_draining();
    info!(grace = %config.shutdown_grace, "shutting down: not ready; still accepting while the queue is served");
    let grace_end = Instant::now() + *config.shutdown_grace;
    server.accept_until(drained(&pod, grace_end)).await;

    let left = worker.stop();
    let Server {
        listener, graceful, ..
    } = server;
    drop(listener);
    if tokio::time::timeout(CLOSE_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("some connections did not close within {CLOSE_TIMEOUT:?}");
    }
    let m = pod.metrics();
    let report = Report {
        arrivals: m.arrivals(),
        answered: m.completions(Outcome::Answered),
        abandoned: m.completions(Outcome::Abandoned),
        dropped: m.completions(Outcome::Dropped),
        left,
    };
    if left > 0 {
        warn!(
            left,
            "grace period over: requests left unserved in the queue"
        );
    }
    info!(?report, "stopped");
    report
}

/// Resolves once the queue is empty and idle and no request has arrived for [`QUIET`], or at
/// `grace_end`. A pod that leaves as soon as its queue is empty answers 503 to what still
/// comes: behind a Service the clients' keep-alive connections and kube-proxy's rules reach it
/// until its endpoint is gone (the one-machine cluster's scale-downs lost 39 and 127 requests
/// in one row each to 503s this way, where the embedded cluster, which unlists a pod before
/// stopping it, lost none). Draining, it closes each connection after its answer, so the
/// clients reconnect to ready pods.
async fn drained(pod: &Pod, grace_end: Instant) {
    let mut seen = pod.metrics().arrivals();
    let mut quiet_since = Instant::now();
    loop {
        let now = Instant::now();
        let arrivals = pod.metrics().arrivals();
        if arrivals != seen {
            (seen, quiet_since) = (arrivals, now);
        }
        let idle = pod.queue().snapshot(std::time::Instant::now()).idle;
        if (idle && now >= quiet_since + QUIET) || now >= grace_end {
            return;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

struct Server {
    listener: TcpListener,
    router: Router,
    http: http1::Builder,
    graceful: GracefulShutdown,
}

impl Server {
    async fn accept_until(&self, until: impl Future) {
        tokio::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => return,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => self.serve(stream),
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
    }

    fn serve(&self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(self.router.clone());
        let conn = self
            .graceful
            .watch(self.http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
