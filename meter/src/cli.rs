//! The meter's command line: [`Cli`], the clap parser the binary runs, and [`MeterFlags`], the
//! typed command line other processes start the meter with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use kit_argv::Argv;

use crate::scrape::{PodSource, parse_dns_target, parse_pod_url};
use crate::{Config, TlsFiles};

/// Reads the pods' arrival counters and arrival logs and publishes first-attempt
/// (distinct request ids), ingress and retry rates through the Kubernetes external metrics API (HTTPS) and as Prometheus gauges.
///
/// Durations take units: 100ms, 1s, 30s, 2m. Every flag can also be set from the
/// environment variable shown.
#[derive(Debug, Parser)]
#[command(version, group(ArgGroup::new("pods").required(true).args(["pods_file", "pod", "pods_dns"])))]
pub struct Cli {
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
    /// The meter's settings these flags give.
    pub fn into_config(self) -> Config {
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

/// The typed contract other processes use to start the meter binary: every flag a caller sets,
/// rendered by [`MeterFlags::args`] into the argv that [`Cli`] parses. `None` leaves a flag to
/// the binary's default (or its `METER_*` variable).
#[derive(Clone, Debug, PartialEq)]
pub struct MeterFlags {
    /// `--pods-file`, `--pod` (each URL; at least one) or `--pods-dns`.
    pub pods: PodSource,
    /// `--scrape-interval`.
    pub scrape_interval: Option<Duration>,
    /// `--scrape-timeout` (the binary's default: 80 % of the scrape interval).
    pub scrape_timeout: Option<Duration>,
    /// `--window`, the rate window.
    pub window: Option<Duration>,
    /// `--listen`, plain HTTP (/metrics, /healthz, /readyz, /history).
    pub listen: Option<SocketAddr>,
    /// `--api-listen`, the HTTPS external metrics API.
    pub api_listen: Option<SocketAddr>,
    /// `--tls-cert` and `--tls-key` (a self-signed certificate without).
    pub tls: Option<TlsFiles>,
    /// `--client-ca`.
    pub client_ca: Option<PathBuf>,
    /// `--max-body`, bytes.
    pub max_body: Option<usize>,
    /// `--history`.
    pub history: Option<Duration>,
    /// `--distinct-retention`.
    pub distinct_retention: Option<Duration>,
    /// `--distinct-max-ids`.
    pub distinct_max_ids: Option<usize>,
}

impl MeterFlags {
    /// The pods to scrape, every other flag left to the binary.
    pub fn new(pods: PodSource) -> MeterFlags {
        MeterFlags {
            pods,
            scrape_interval: None,
            scrape_timeout: None,
            window: None,
            listen: None,
            api_listen: None,
            tls: None,
            client_ca: None,
            max_body: None,
            history: None,
            distinct_retention: None,
            distinct_max_ids: None,
        }
    }

    /// The argv after the program name, one `--flag=value` per element.
    pub fn args(&self) -> Vec<String> {
        let mut a = Argv::new();
        match &self.pods {
            PodSource::File(path) => {
                a.value("pods-file", path.display());
            }
            PodSource::Static(urls) => {
                for url in urls {
                    a.value("pod", url);
                }
            }
            PodSource::Dns { host, port } => {
                a.value("pods-dns", format!("{host}:{port}"));
            }
        }
        a.duration("scrape-interval", self.scrape_interval)
            .duration("scrape-timeout", self.scrape_timeout)
            .duration("window", self.window)
            .opt("listen", self.listen)
            .opt("api-listen", self.api_listen);
        if let Some(tls) = &self.tls {
            a.value("tls-cert", tls.cert.display())
                .value("tls-key", tls.key.display());
        }
        a.opt("client-ca", self.client_ca.as_ref().map(|p| p.display()))
            .opt("max-body", self.max_body)
            .duration("history", self.history)
            .duration("distinct-retention", self.distinct_retention)
            .opt("distinct-max-ids", self.distinct_max_ids);
        a.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &MeterFlags) -> Config {
        let args = flags.args();
        Cli::try_parse_from(std::iter::once("meter".to_string()).chain(args.clone()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .into_config()
    }

    #[test]
    fn meter_flags_round_trip_through_the_meters_parser() {
        let tls = TlsFiles {
            cert: "/etc/meter/tls.crt".into(),
            key: "/etc/meter/tls.key".into(),
        };
        let flags = MeterFlags {
            scrape_interval: Some(Duration::from_millis(200)),
            scrape_timeout: Some(Duration::from_micros(150_001)),
            window: Some(Duration::from_secs(6)),
            listen: Some("127.0.0.1:19090".parse().unwrap()),
            api_listen: Some("[::1]:16443".parse().unwrap()),
            tls: Some(tls.clone()),
            client_ca: Some("/etc/meter/ca.crt".into()),
            max_body: Some(4096),
            history: Some(Duration::from_secs(3600)),
            distinct_retention: Some(Duration::from_nanos(60_000_000_007)),
            distinct_max_ids: Some(1000),
            ..MeterFlags::new(PodSource::Dns {
                host: "service-pods.ns.svc.cluster.local".into(),
                port: 8080,
            })
        };
        let expected = Config {
            pods: flags.pods.clone(),
            scrape_interval: Duration::from_millis(200),
            scrape_timeout: Duration::from_micros(150_001),
            window: Duration::from_secs(6),
            listen: "127.0.0.1:19090".parse().unwrap(),
            api_listen: "[::1]:16443".parse().unwrap(),
            tls: Some(tls),
            client_ca: Some("/etc/meter/ca.crt".into()),
            max_body: 4096,
            history: Duration::from_secs(3600),
            distinct_retention: Duration::from_nanos(60_000_000_007),
            distinct_max_ids: 1000,
        };
        assert_eq!(parse(&flags), expected);

        let urls: Vec<reqwest::Url> = ["http://127.0.0.1:8080", "https://[::1]:8443/base"]
            .map(|u| parse_pod_url(u).unwrap())
            .into();
        for pods in [
            PodSource::Static(urls),
            PodSource::File("/run/kit/pods.txt".into()),
        ] {
            let flags = MeterFlags {
                pods: pods.clone(),
                ..flags.clone()
            };
            assert_eq!(parse(&flags).pods, pods);
        }
    }

    #[test]
    fn meter_flags_left_out_are_the_binarys_defaults() {
        let pods = PodSource::File("pods.txt".into());
        let flags = MeterFlags::new(pods.clone());
        assert_eq!(flags.args(), ["--pods-file=pods.txt"]);
        assert_eq!(parse(&flags), Config::new(pods));
    }
}
