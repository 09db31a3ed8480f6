//! The meter: reads the pods' arrival counters and arrival logs and publishes
//! first-attempt, ingress and retry rates for the autoscaler.
//!
//! First attempts are counted by distinct request id, not by the `x-attempt`
//! header: a retrying gateway resends the client's bytes unchanged (its
//! retries say `x-attempt: 0` too, and may land on other pods), and no proxy
//! marks its own retries, so only the id tells a copy from the original.
//!
//! Layout:
//! - [`rate`]: the pure core. Per-pod counter histories, Prometheus-`rate`-like
//!   rates over a window with counter resets handled, summed over pods; when data
//!   is fresh enough to publish ([`rate::Coverage`]). Time is an argument.
//! - [`distinct`]: the pure distinct count ([`distinct::DistinctArrivals`]):
//!   a time-bounded memory of request ids, cumulative first attempts (distinct
//!   `(id, 0)`), client attempts (distinct `(id, attempt)`) and arrivals.
//! - [`arrivals`]: a pod's `GET /arrivals` page, parsed strictly, and the
//!   per-pod cursor (baseline, continued, restarted).
//! - [`tally`]: [`tally::Tally`], the state the scrape loop keeps between
//!   rounds; it credits each distinct pair to the pod where its first copy
//!   was read and turns those per-pod counts into rates with the same
//!   [`rate::RateWindow`] as the pods' counters. Pure.
//! - [`exposition`]: a strict parser for the Prometheus text format and the
//!   extraction of `retrydebt_arrivals_total{attempt="N"}`.
//! - [`scrape`]: the pod list (static, file, DNS) and bounded, timed HTTP scrapes
//!   of `/metrics` and `/arrivals` with errors by reason.
//! - [`state`]: what the scrape loop publishes (latest reading, history, the
//!   meter's own metrics) for the two servers.
//! - [`k8s`]: the external metrics API (`external.metrics.k8s.io/v1beta1`) router,
//!   its JSON types and `Status` errors, Quantity formatting, label selectors.
//! - [`tls`]: the HTTPS side of that API (self-signed or given certificate,
//!   optional client CA).
//! - [`web`]: plain HTTP `/metrics`, `/healthz`, `/readyz`, `/history`.
//! - [`cli`]: the command line ([`cli::Cli`], clap) and [`MeterFlags`], the typed command line
//!   other processes start the meter with.
//!
//! [`Meter::bind`] binds both ports, [`Meter::run`] runs the scrape loop and both
//! servers until the shutdown future resolves; [`run`] does both.

pub mod arrivals;
pub mod cli;
pub mod distinct;
pub mod exposition;
pub mod k8s;
pub mod rate;
pub mod scrape;
pub mod state;
pub mod tally;
pub mod tls;
pub mod web;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use crate::cli::MeterFlags;
use crate::scrape::{PodSource, Scraper};
use crate::state::Shared;
use crate::tally::Tally;
pub use crate::tls::TlsFiles;

/// Everything the meter can fail with at start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {what} {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("server on {what}: {source}")]
    Serve {
        what: &'static str,
        source: std::io::Error,
    },
}

/// The meter's settings (the CLI flags).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub pods: PodSource,
    pub scrape_interval: Duration,
    /// Deadline for one pod's scrape, connect to last byte; at most `scrape_interval`.
    pub scrape_timeout: Duration,
    pub window: Duration,
    pub listen: SocketAddr,
    pub api_listen: SocketAddr,
    /// Serving certificate and key; a self-signed one is made at start without.
    pub tls: Option<TlsFiles>,
    /// Only clients with a certificate signed by this CA are served on the API.
    pub client_ca: Option<PathBuf>,
    /// Largest `/metrics` body read from a pod, bytes.
    pub max_body: usize,
    /// How much `/history` keeps.
    pub history: Duration,
    /// How long a request id is remembered for the distinct count.
    pub distinct_retention: Duration,
    /// Most request ids remembered (the oldest go first beyond).
    pub distinct_max_ids: usize,
}

impl Config {
    /// Defaults of the CLI for `pods`.
    pub fn new(pods: PodSource) -> Self {
        Self {
            pods,
            scrape_interval: Duration::from_secs(1),
            scrape_timeout: Duration::from_millis(800),
            window: Duration::from_secs(30),
            listen: SocketAddr::from(([0, 0, 0, 0], 9090)),
            api_listen: SocketAddr::from(([0, 0, 0, 0], 6443)),
            tls: None,
            client_ca: None,
            max_body: 1 << 20,
            history: Duration::from_secs(6 * 3600),
            // A request's whole life in the kit is (R + 1) tau_out = 30 s; ten
            // minutes also covers a user's longer timeouts and backoff.
            distinct_retention: Duration::from_secs(600),
            // About 70 MiB; at 10 minutes it binds above 1,700 new ids/s.
            distinct_max_ids: 1 << 20,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::Config(msg));
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
        if self.scrape_interval.is_zero() {
            return bad("--scrape-interval 0s: must be positive".into());
        }
        if self.scrape_timeout.is_zero() || self.scrape_timeout > self.scrape_interval {
            return bad(format!(
                "--scrape-timeout {}: must be positive and at most --scrape-interval {}",
                fmt(self.scrape_timeout),
                fmt(self.scrape_interval)
            ));
        }
        if self.window < 2 * self.scrape_interval {
            return bad(format!(
                "--window {}: must be at least twice --scrape-interval {}",
                fmt(self.window),
                fmt(self.scrape_interval)
            ));
        }
        if self.max_body == 0 {
            return bad("--max-body 0: must be positive".into());
        }
        if self.distinct_retention.is_zero() {
            return bad("--distinct-retention 0s: must be positive".into());
        }
        if self.distinct_max_ids == 0 {
            return bad("--distinct-max-ids 0: must be positive".into());
        }
        if let PodSource::Static(urls) = &self.pods
            && urls.is_empty()
        {
            return bad("--pod: give at least one pod URL".into());
        }
        Ok(())
    }
}

/// A meter with both ports bound, ready to [`run`](Meter::run).
pub struct Meter {
    config: Config,
    listener: TcpListener,
    api_listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    scraper: Scraper,
    shared: Arc<Shared>,
}

impl Meter {
    pub async fn bind(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let tls = tls::server_config(config.tls.as_ref(), config.client_ca.as_deref())?;
        let scraper = Scraper::new(config.scrape_timeout, config.max_body)?;
        let bind = |what: &'static str, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { what, addr, source })
        };
        let listener = bind("--listen", config.listen).await?;
        let api_listener = bind("--api-listen", config.api_listen).await?;
        let shared = Arc::new(Shared::new(
            config.window,
            config.scrape_interval,
            config.history,
            config.client_ca.is_some(),
        ));
        Ok(Self {
            config,
            listener,
            api_listener,
            tls,
            scraper,
            shared,
        })
    }

    /// The plain-HTTP address (`/metrics`, `/history`, ...).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The HTTPS external metrics API address.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_listener
            .local_addr()
            .unwrap_or(self.config.api_listen)
    }

    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        tracing::info!(listen = %self.local_addr(), api_listen = %self.api_addr(), "meter running");
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let (shared, scraper, config) = (self.shared.clone(), self.scraper, self.config.clone());
        let mut stop = stop_rx.clone();
        tasks.spawn(async move {
            tokio::select! {
                _ = scrape_loop(shared, config, scraper) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            Ok(())
        });
        let mut stop = stop_rx.clone();
        let web = web::router(self.shared.clone());
        let listener = self.listener;
        tasks.spawn(async move {
            axum::serve(listener, web)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
                .map_err(|source| Error::Serve {
                    what: "--listen",
                    source,
                })
        });
        let api = k8s::router(self.shared.clone());
        tasks.spawn(async move {
            tls::serve(self.api_listener, self.tls, api, stop_rx).await;
            Ok(())
        });
        // Stop on the shutdown signal or on the first task failing.
        let first = tokio::select! {
            _ = shutdown => None,
            done = tasks.join_next() => done,
        };
        let _ = stop_tx.send(true);
        let mut result = first_error(first);
        while let Some(done) = tasks.join_next().await {
            result = result.and(first_error(Some(done)));
        }
        result
    }
}

fn first_error(
    done: Option<Result<Result<(), Error>, tokio::task::JoinError>>,
) -> Result<(), Error> {
    match done {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(Error::Serve {
            what: "meter task",
            source: std::io::Error::other(e.to_string()),
        }),
        None => Ok(()),
    }
}

/// Binds and runs a meter until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
    Meter::bind(config).await?.run(shutdown).await
}

/// Scrapes every pod once per interval and publishes the rates.
async fn scrape_loop(shared: Arc<Shared>, config: Config, scraper: Scraper) {
    // A pod that could not be read for three rounds is taken as gone.
    let mut tally = Tally::new(
        config.window,
        3 * config.scrape_interval,
        config.distinct_retention,
        config.distinct_max_ids,
    );
    let mut ticker = tokio::time::interval(config.scrape_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_discovery_error = String::new();
    loop {
        ticker.tick().await;
        let (pods, errors) = config.pods.discover().await;
        shared
            .metrics
            .discovery_errors
            .increment(errors.len() as u64);
        // Log a discovery problem when it changes, not every round.
        let summary = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if summary != last_discovery_error {
            if !summary.is_empty() {
                tracing::warn!("pod discovery: {summary}");
            }
            last_discovery_error = summary;
        }
        tally.retain_listed(|pod| pods.iter().any(|u| u.as_str() == pod));
        let mut scrapes = JoinSet::new();
        for pod in &pods {
            let (scraper, pod) = (scraper.clone(), pod.clone());
            let cursor = tally.cursor(pod.as_str());
            scrapes.spawn(async move {
                let result = scraper.scrape(&pod, cursor).await;
                (pod, Instant::now(), result)
            });
        }
        let mut scraped = 0;
        while let Some(done) = scrapes.join_next().await {
            let Ok((pod, at, result)) = done else {
                continue;
            };
            shared.metrics.scrapes.increment(1);
            match result {
                Ok(scrape) => {
                    if scrape.arrivals.kind == arrivals::ReadKind::Restarted {
                        tracing::debug!("{pod}: restarted, reading its arrival log from the start");
                    }
                    tally.record(pod.as_str(), at, scrape);
                    scraped += 1;
                }
                Err(e) => {
                    shared.metrics.scrape_error(e.reason());
                    tracing::debug!("scrape {pod}: {e}");
                }
            }
        }
        let now = Instant::now();
        tally.end_round(now);
        let rates = tally.rates(now);
        shared
            .metrics
            .distinct(tally.counts(), tally.remembered(), tally.lost());
        shared.publish(
            now,
            time::OffsetDateTime::now_utc(),
            rates,
            pods.len(),
            scraped,
        );
    }
}
