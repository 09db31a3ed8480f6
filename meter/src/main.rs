use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use meter::scrape::{PodSource, parse_dns_target, parse_pod_url};
use meter::{Config, TlsFiles};

/// Reads the pods' arrival counters and arrival logs and publishes first-attempt
/// (distinct request ids), ingress and retry rates through the Kubernetes external metrics API (HTTPS) and as Prometheus gauges.
///
/// Durations take units: 100ms, 1s, 30s, 2m. Every flag can also be set from the
/// environment variable shown.
#[derive(Debug, Parser)]
#[command(version, group(ArgGroup::new("pods").required(true).args(["pods_file", "pod", "pods_dns"])))]
struct Cli {
    /// File of pod base URLs (http://host:port), one a line, re-read at every scrape.
    #[arg(long, env = "METER_PODS_FILE", value_name = "FILE")]
    pods_file: Option<PathBuf>,
    /// A pod base URL; repeat for several (env: comma-separated).
    #[arg(long, env = "METER_POD", value_name = "URL", value_delimiter = ',', value_parser = parse_pod_url)]
    pod: Vec<reqwest::Url>,
    /// Headless Service NAME:PORT, resolved at every scrape; every address is a pod.
    #[arg(long, env = "METER_PODS_DNS", value_name = "NAME:PORT", value_parser = parse_dns_target)]
    pods_dns: Option<(String, u16)>,
    /// Time between scrape rounds.
    #[arg(long, env = "METER_SCRAPE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    scrape_interval: Duration,
    /// Deadline for one pod's scrape [default: 80% of --scrape-interval].
    #[arg(long, env = "METER_SCRAPE_TIMEOUT", value_parser = humantime::parse_duration)]
    scrape_timeout: Option<Duration>,
    /// Rate window: rates are averages over this much time (the API's `window`).
    #[arg(long, env = "METER_WINDOW", default_value = "30s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Plain HTTP address for /metrics, /healthz, /readyz, /history.
    #[arg(long, env = "METER_LISTEN", default_value = "0.0.0.0:9090")]
    listen: SocketAddr,
    /// HTTPS address for the external metrics API.
    #[arg(long, env = "METER_API_LISTEN", default_value = "0.0.0.0:6443")]
    api_listen: SocketAddr,
    /// Serving certificate chain, PEM [default: self-signed, made at start].
    #[arg(
        long,
        env = "METER_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// Serving private key, PEM.
    #[arg(
        long,
        env = "METER_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// CA bundle, PEM: only API clients with a certificate it signed are served
    /// (the aggregator's requestheader-client-ca-file); others get 401.
    #[arg(long, env = "METER_CLIENT_CA", value_name = "FILE")]
    client_ca: Option<PathBuf>,
    /// Largest /metrics body read from a pod, in bytes.
    #[arg(long, env = "METER_MAX_BODY", default_value_t = 1 << 20, value_name = "BYTES")]
    max_body: usize,
    /// How much per-scrape history /history keeps.
    #[arg(long, env = "METER_HISTORY", default_value = "6h", value_parser = humantime::parse_duration)]
    history: Duration,
    /// How long a request id is remembered for the distinct first-attempt
    /// count: at least a request's whole life (all its attempts, with
    /// timeouts and backoff), or later copies count again. Memory: about 70
    /// bytes per id, new ids/s x this.
    #[arg(long, env = "METER_DISTINCT_RETENTION", default_value = "10m", value_parser = humantime::parse_duration)]
    distinct_retention: Duration,
    /// Most request ids remembered (about 70 bytes each); beyond, the oldest
    /// are forgotten early and counted in
    /// retrydebt_meter_distinct_evicted_early_total.
    #[arg(long, env = "METER_DISTINCT_MAX_IDS", default_value_t = 1 << 20, value_name = "IDS")]
    distinct_max_ids: usize,
}

impl Cli {
    fn into_config(self) -> Config {
        let pods = match (self.pods_file, self.pods_dns) {
            (Some(path), _) => PodSource::File(path),
            (None, Some((host, port))) => PodSource::Dns { host, port },
            (None, None) => PodSource::Static(self.pod),
        };
        let mut config = Config::new(pods);
        config.scrape_interval = self.scrape_interval;
        config.scrape_timeout = self
            .scrape_timeout
            .unwrap_or(self.scrape_interval.mul_f64(0.8));
        config.window = self.window;
        config.listen = self.listen;
        config.api_listen = self.api_listen;
        config.tls = self
            .tls_cert
            .zip(self.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key });
        config.client_ca = self.client_ca;
        config.max_body = self.max_body;
        config.history = self.history;
        config.distinct_retention = self.distinct_retention;
        config.distinct_max_ids = self.distinct_max_ids;
        config
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "meter=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = Cli::parse().into_config();
    match meter::run(config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meter: {e}");
            ExitCode::FAILURE
        }
    }
}
