//! Reading the running parts over loopback HTTP: the pods' and the loadgen's Prometheus text, and
//! the meter's external metrics API over HTTPS, exactly as the HPA controller reads it.

use std::time::Duration;

use tokio::task::JoinSet;

/// Samples `name{labels} value` of one Prometheus text body, comments skipped.
fn samples(text: &str) -> impl Iterator<Item = (&str, &str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value: f64 = value.trim().parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            Some((name.trim(), labels, value))
        })
}

/// The sum of every series of `name` whose labels contain `label` (all series when empty).
pub fn sum(text: &str, name: &str, label: &str) -> f64 {
    samples(text)
        .filter(|(n, l, _)| *n == name && l.contains(label))
        .map(|(_, _, v)| v)
        .sum()
}

/// One pod's queue at a sample, and its counters so far (cumulative since the pod started).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodQueue {
    pub depth: f64,
    pub wait_s: f64,
    /// The pod's own readiness gauge: 1 once its dead time has passed and it is not stopping.
    pub ready: bool,
    pub arrivals: f64,
    pub first_arrivals: f64,
    pub answered: f64,
    /// Served for a client that had gone.
    pub abandoned: f64,
    /// CPU seconds the work used (`retrydebt_cpu_seconds_total`).
    pub cpu_s: f64,
}

impl PodQueue {
    /// From a pod's `/metrics`.
    pub fn parse(text: &str) -> PodQueue {
        PodQueue {
            depth: sum(text, "retrydebt_queue_depth", ""),
            wait_s: sum(text, "retrydebt_wait_seconds", ""),
            ready: sum(text, "retrydebt_ready", "") > 0.0,
            arrivals: sum(text, "retrydebt_arrivals_total", ""),
            first_arrivals: sum(text, "retrydebt_arrivals_total", "attempt=\"0\""),
            answered: sum(text, "retrydebt_completions_total", "outcome=\"answered\""),
            abandoned: sum(text, "retrydebt_completions_total", "outcome=\"abandoned\""),
            cpu_s: sum(text, "retrydebt_cpu_seconds_total", ""),
        }
    }
}

/// The loadgen's counters at a sample (cumulative since its start).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadCounters {
    pub first_attempts: f64,
    pub attempts: f64,
    pub successes: f64,
    pub timeouts: f64,
    /// Attempts answered 5xx: behind a gateway, its 504 after its last try timed out.
    pub status_5xx: f64,
    pub failed: f64,
}

impl LoadCounters {
    pub fn parse(text: &str) -> LoadCounters {
        LoadCounters {
            first_attempts: sum(text, "retrydebt_loadgen_first_attempts_total", ""),
            attempts: sum(text, "retrydebt_loadgen_attempts_total", ""),
            successes: sum(text, "retrydebt_loadgen_successes_total", ""),
            timeouts: sum(text, "retrydebt_loadgen_timeouts_total", ""),
            status_5xx: sum(
                text,
                "retrydebt_loadgen_errors_total",
                "kind=\"status_5xx\"",
            ),
            failed: sum(
                text,
                "retrydebt_loadgen_requests_total",
                "outcome=\"failed\"",
            ),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn minus(&self, earlier: &LoadCounters) -> LoadCounters {
        LoadCounters {
            first_attempts: self.first_attempts - earlier.first_attempts,
            attempts: self.attempts - earlier.attempts,
            successes: self.successes - earlier.successes,
            timeouts: self.timeouts - earlier.timeouts,
            status_5xx: self.status_5xx - earlier.status_5xx,
            failed: self.failed - earlier.failed,
        }
    }
}

/// The meter's own gauges, per second of run time: first attempts (distinct request ids), what a
/// count of `x-attempt: 0` arrivals reads, and all arrivals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MeterGauges {
    pub first_attempt_rate: f64,
    /// Absent from a meter that counts only the header.
    pub header_first_attempt_rate: Option<f64>,
    pub ingress_rate: f64,
}

impl MeterGauges {
    /// From the meter's `/metrics`.
    pub fn parse(text: &str) -> MeterGauges {
        MeterGauges {
            first_attempt_rate: sum(text, "retrydebt_meter_first_attempt_rate", ""),
            header_first_attempt_rate: samples(text)
                .find(|(n, _, _)| *n == "retrydebt_meter_header_first_attempt_rate")
                .map(|(_, _, v)| v),
            ingress_rate: sum(text, "retrydebt_meter_ingress_rate", ""),
        }
    }
}

/// HTTP clients for the parts: plain for pods, loadgen and meter gauges; HTTPS that accepts the
/// meter's self-signed certificate (as the APIService's `insecureSkipTLSVerify` does).
#[derive(Clone)]
pub struct Probe {
    plain: reqwest::Client,
    api: reqwest::Client,
}

impl Probe {
    pub fn new(timeout: Duration) -> reqwest::Result<Probe> {
        let plain = reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(1)
            .build()?;
        let api = reqwest::Client::builder()
            .timeout(timeout)
            .danger_accept_invalid_certs(true)
            .build()?;
        Ok(Probe { plain, api })
    }

    async fn text(&self, url: String) -> Option<String> {
        let r = self.plain.get(url).send().await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.text().await.ok()
    }

    pub async fn loadgen(&self, addr: std::net::SocketAddr) -> Option<LoadCounters> {
        let text = self.text(format!("http://{addr}/metrics")).await?;
        Some(LoadCounters::parse(&text))
    }

    pub async fn meter(&self, addr: std::net::SocketAddr) -> Option<MeterGauges> {
        let text = self.text(format!("http://{addr}/metrics")).await?;
        Some(MeterGauges::parse(&text))
    }

    /// Every pod's queue by name, given `(name, base URL)`, scraped concurrently; pods that do
    /// not answer are left out.
    pub async fn pods(&self, pods: Vec<(String, String)>) -> Vec<(String, PodQueue)> {
        let mut set = JoinSet::new();
        for (name, base) in pods {
            let me = self.clone();
            set.spawn(async move {
                let text = me.text(format!("{base}/metrics")).await?;
                Some((name, PodQueue::parse(&text)))
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(Some(q)) = r {
                out.push(q);
            }
        }
        out
    }

    /// `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/default/<metric>`, the items summed
    /// as the HPA does; `None` when the API errs (e.g. 503 while the meter's window fills).
    pub async fn external_metric(&self, api: std::net::SocketAddr, metric: &str) -> Option<f64> {
        let url = format!(
            "https://{api}/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{metric}"
        );
        let r = self.api.get(url).send().await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        let list: serde_json::Value = r.json().await.ok()?;
        list.get("items")?
            .as_array()?
            .iter()
            .map(|item| quantity(item.get("value")?.as_str()?))
            .sum()
    }

    /// Whether a plain-HTTP endpoint answers 2xx.
    pub async fn up(&self, url: &str) -> bool {
        matches!(self.plain.get(url).send().await, Ok(r) if r.status().is_success())
    }
}

/// A Kubernetes `resource.Quantity` string as a number: decimal SI (`1500m`, `2k`), binary SI
/// (`1Ki`) or exponent (`1e3`) suffixes.
pub fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = s.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|v| v * factor);
        }
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_the_meter_writes_them() {
        assert_eq!(quantity("1500m"), Some(1.5));
        assert_eq!(quantity("100"), Some(100.0));
        assert_eq!(quantity("2k"), Some(2000.0));
        assert_eq!(quantity("0"), Some(0.0));
        assert_eq!(quantity("1Ki"), Some(1024.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("12.5"), Some(12.5));
        assert_eq!(quantity("abc"), None);
        assert_eq!(quantity(""), None);
    }

    #[test]
    fn loadgen_counters_summed_over_attempt_labels() {
        let text = "# HELP x\n# TYPE retrydebt_loadgen_attempts_total counter\n\
            retrydebt_loadgen_first_attempts_total 10\n\
            retrydebt_loadgen_attempts_total{attempt=\"0\"} 10\n\
            retrydebt_loadgen_attempts_total{attempt=\"1\"} 4\n\
            retrydebt_loadgen_successes_total{attempt=\"0\"} 6\n\
            retrydebt_loadgen_timeouts_total 5\n\
            retrydebt_loadgen_errors_total{kind=\"status_5xx\"} 3\n\
            retrydebt_loadgen_errors_total{kind=\"io\"} 1\n\
            retrydebt_loadgen_requests_total{outcome=\"succeeded\"} 6\n\
            retrydebt_loadgen_requests_total{outcome=\"failed\"} 2\n";
        let c = LoadCounters::parse(text);
        assert_eq!(
            c,
            LoadCounters {
                first_attempts: 10.0,
                attempts: 14.0,
                successes: 6.0,
                timeouts: 5.0,
                status_5xx: 3.0,
                failed: 2.0
            }
        );
        assert_eq!(c.minus(&c), LoadCounters::default());
    }

    #[test]
    fn a_pods_counters_as_the_service_exports_them() {
        let text = "retrydebt_arrivals_total{attempt=\"0\"} 7\n\
            retrydebt_arrivals_total{attempt=\"1\"} 3\n\
            retrydebt_completions_total{outcome=\"answered\"} 5\n\
            retrydebt_completions_total{outcome=\"abandoned\"} 2\n\
            retrydebt_completions_total{outcome=\"dropped\"} 1\n\
            retrydebt_queue_depth 2\nretrydebt_wait_seconds 0.5\nretrydebt_ready 1\n\
            retrydebt_cpu_seconds_total 1.25\n";
        assert_eq!(
            PodQueue::parse(text),
            PodQueue {
                depth: 2.0,
                wait_s: 0.5,
                ready: true,
                arrivals: 10.0,
                first_arrivals: 7.0,
                answered: 5.0,
                abandoned: 2.0,
                cpu_s: 1.25,
            }
        );
    }
}
