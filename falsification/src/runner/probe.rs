//! Reading the running parts over loopback HTTP: the pods' and the loadgen's Prometheus text, and
//! the meter's external metrics API over HTTPS, exactly as the HPA controller reads it.

use std::time::Duration;

use loadgen::metrics as load;
use meter::exposition::{self, Sample};
use meter::state as gauges;
use service::metrics::{self as pod, Outcome};
use tokio::task::JoinSet;

/// The samples of one Prometheus text body, read by the meter's strict parser.
struct Body<'a>(Vec<Sample<'a>>);

impl<'a> Body<'a> {
    /// `None` when the body is not valid exposition text.
    fn read(text: &'a str) -> Option<Body<'a>> {
        exposition::parse(text).ok().map(Body)
    }

    /// The sum of every series of `name` (0 when it has none).
    fn sum(&self, name: &str) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    }

    /// The sum of the series of `name` that carry the label `key="value"` exactly.
    fn sum_where(&self, name: &str, key: &str, value: &str) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| s.labels.iter().any(|(k, v)| *k == key && v == value))
            .map(|s| s.value)
            .sum()
    }

    /// The first series of `name`, if any.
    fn first(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|s| s.name == name).map(|s| s.value)
    }
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
    /// CPU seconds the work was budgeted (`retrydebt_cpu_seconds_total`).
    pub cpu_s: f64,
    /// CPU seconds the worker spun (`retrydebt_spin_seconds_total`).
    pub spun_s: f64,
    /// CPU seconds the pod's whole process used (`process_cpu_seconds_total`).
    pub process_cpu_s: f64,
}

impl PodQueue {
    /// From a pod's `/metrics`; `None` when it is not exposition text (as when it is missing).
    pub fn read(text: &str) -> Option<PodQueue> {
        let b = Body::read(text)?;
        let completions =
            |o: Outcome| b.sum_where(pod::COMPLETIONS_TOTAL, pod::OUTCOME_LABEL, o.label());
        Some(PodQueue {
            depth: b.sum(pod::QUEUE_DEPTH),
            wait_s: b.sum(pod::WAIT_SECONDS),
            ready: b.sum(pod::READY) > 0.0,
            arrivals: b.sum(pod::ARRIVALS_TOTAL),
            first_arrivals: b.sum_where(pod::ARRIVALS_TOTAL, pod::ATTEMPT_LABEL, "0"),
            answered: completions(Outcome::Answered),
            abandoned: completions(Outcome::Abandoned),
            cpu_s: b.sum(pod::CPU_SECONDS_TOTAL),
            spun_s: b.sum(pod::SPIN_SECONDS_TOTAL),
            process_cpu_s: b.sum(pod::PROCESS_CPU_SECONDS_TOTAL),
        })
    }
}

/// The loadgen's counters at a sample (cumulative since its start).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadCounters {
    /// Logical requests started: the schedule's arrivals not shed at `--max-in-flight`, whether
    /// their first attempt went or the client refused it itself.
    pub started: f64,
    pub first_attempts: f64,
    pub attempts: f64,
    pub successes: f64,
    pub timeouts: f64,
    /// Attempts answered 5xx: behind a gateway, its 504 after its last try timed out; else a
    /// pod's refusal (503 at once).
    pub status_5xx: f64,
    /// Attempts the client refused itself (its throttle or adaptive limiter, an open breaker).
    pub rejected: f64,
    pub failed: f64,
}

impl LoadCounters {
    /// From the loadgen's `/metrics`; `None` when it is not exposition text.
    pub fn read(text: &str) -> Option<LoadCounters> {
        let b = Body::read(text)?;
        Some(LoadCounters {
            started: b.sum(load::ARRIVALS_TOTAL) - b.sum(load::SHED_TOTAL),
            first_attempts: b.sum(load::FIRST_ATTEMPTS_TOTAL),
            attempts: b.sum(load::ATTEMPTS_TOTAL),
            successes: b.sum(load::SUCCESSES_TOTAL),
            timeouts: b.sum(load::TIMEOUTS_TOTAL),
            status_5xx: b.sum_where(load::ERRORS_TOTAL, load::KIND_LABEL, load::KIND_STATUS_5XX),
            rejected: b.sum(load::ATTEMPTS_REJECTED_TOTAL),
            failed: b.sum_where(
                load::REQUESTS_TOTAL,
                load::OUTCOME_LABEL,
                load::OUTCOME_FAILED,
            ),
        })
    }

    /// Two processes' counters together (loadgen shards).
    pub fn plus(&self, other: &LoadCounters) -> LoadCounters {
        LoadCounters {
            started: self.started + other.started,
            first_attempts: self.first_attempts + other.first_attempts,
            attempts: self.attempts + other.attempts,
            successes: self.successes + other.successes,
            timeouts: self.timeouts + other.timeouts,
            status_5xx: self.status_5xx + other.status_5xx,
            rejected: self.rejected + other.rejected,
            failed: self.failed + other.failed,
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn minus(&self, earlier: &LoadCounters) -> LoadCounters {
        LoadCounters {
            started: self.started - earlier.started,
            first_attempts: self.first_attempts - earlier.first_attempts,
            attempts: self.attempts - earlier.attempts,
            successes: self.successes - earlier.successes,
            timeouts: self.timeouts - earlier.timeouts,
            status_5xx: self.status_5xx - earlier.status_5xx,
            rejected: self.rejected - earlier.rejected,
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
    /// Whether the external metrics API serves a value (`retrydebt_meter_published`); the rates
    /// above are the last measured ones either way.
    pub published: bool,
}

impl MeterGauges {
    /// From the meter's `/metrics`; `None` when it is not exposition text or holds no rates yet.
    pub fn read(text: &str) -> Option<MeterGauges> {
        let b = Body::read(text)?;
        // A meter that has measured nothing yet leaves its rates out: no reading, not a zero.
        Some(MeterGauges {
            first_attempt_rate: b.first(gauges::FIRST_ATTEMPT_RATE)?,
            header_first_attempt_rate: b.first(gauges::HEADER_FIRST_ATTEMPT_RATE),
            ingress_rate: b.first(gauges::INGRESS_RATE)?,
            published: b.first(gauges::PUBLISHED).is_none_or(|v| v > 0.0),
        })
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
        LoadCounters::read(&text)
    }

    pub async fn meter(&self, addr: std::net::SocketAddr) -> Option<MeterGauges> {
        let text = self.text(format!("http://{addr}/metrics")).await?;
        MeterGauges::read(&text)
    }

    /// Every pod's queue by name, given `(name, base URL)`, scraped concurrently; pods that do
    /// not answer, or answer something that is not exposition text, are left out.
    pub async fn pods(&self, pods: Vec<(String, String)>) -> Vec<(String, PodQueue)> {
        let mut set = JoinSet::new();
        for (name, base) in pods {
            let me = self.clone();
            set.spawn(async move {
                let text = me.text(format!("{base}/metrics")).await?;
                Some((name, PodQueue::read(&text)?))
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
            retrydebt_loadgen_arrivals_total 11\n\
            retrydebt_loadgen_shed_total 1\n\
            retrydebt_loadgen_first_attempts_total 10\n\
            retrydebt_loadgen_attempts_total{attempt=\"0\"} 10\n\
            retrydebt_loadgen_attempts_total{attempt=\"1\"} 4\n\
            retrydebt_loadgen_successes_total{attempt=\"0\"} 6\n\
            retrydebt_loadgen_timeouts_total 5\n\
            retrydebt_loadgen_errors_total{kind=\"status_5xx\"} 3\n\
            retrydebt_loadgen_errors_total{kind=\"io\"} 1\n\
            retrydebt_loadgen_attempts_rejected_total{defense=\"throttle\"} 2\n\
            retrydebt_loadgen_attempts_rejected_total{defense=\"breaker\"} 1\n\
            retrydebt_loadgen_requests_total{outcome=\"succeeded\"} 6\n\
            retrydebt_loadgen_requests_total{outcome=\"failed\"} 2\n";
        let c = LoadCounters::read(text).unwrap();
        assert_eq!(
            c,
            LoadCounters {
                started: 10.0,
                first_attempts: 10.0,
                attempts: 14.0,
                successes: 6.0,
                timeouts: 5.0,
                status_5xx: 3.0,
                rejected: 3.0,
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
            retrydebt_cpu_seconds_total 1.25\nretrydebt_spin_seconds_total 0.75\n\
            process_cpu_seconds_total 1.5\n";
        assert_eq!(
            PodQueue::read(text).unwrap(),
            PodQueue {
                depth: 2.0,
                wait_s: 0.5,
                ready: true,
                arrivals: 10.0,
                first_arrivals: 7.0,
                answered: 5.0,
                abandoned: 2.0,
                cpu_s: 1.25,
                spun_s: 0.75,
                process_cpu_s: 1.5,
            }
        );
    }

    #[test]
    fn labels_match_exactly_and_garbage_is_unreadable() {
        let text = "retrydebt_loadgen_errors_total{kind=\"status_5xx\"} 3\n\
            retrydebt_loadgen_errors_total{kind=\"status_5xx_gateway\"} 4\n\
            retrydebt_loadgen_requests_total{outcome=\"failed\",shard=\"a\"} 2\n\
            retrydebt_loadgen_requests_total{outcome=\"not_failed\"} 9\n";
        let c = LoadCounters::read(text).unwrap();
        assert_eq!((c.status_5xx, c.failed), (3.0, 2.0));
        let garbage = "<html>502 Bad Gateway</html>\n";
        assert_eq!(LoadCounters::read(garbage), None);
        assert_eq!(PodQueue::read(garbage), None);
        assert_eq!(MeterGauges::read(garbage), None);
        // A meter with no rates yet gives no reading (not a zero).
        assert_eq!(MeterGauges::read("retrydebt_meter_published 0\n"), None);
        let meter = MeterGauges::read(
            "retrydebt_meter_first_attempt_rate 2.5\nretrydebt_meter_ingress_rate 7.5\n",
        )
        .unwrap();
        assert_eq!(
            (meter.first_attempt_rate, meter.header_first_attempt_rate),
            (2.5, None)
        );
        assert!(meter.published, "no gauge: nothing says it is not");
        // The last rates stay while the API says it has nothing to serve.
        let blind = MeterGauges::read(
            "retrydebt_meter_first_attempt_rate 2.5\nretrydebt_meter_ingress_rate 7.5\n\
             retrydebt_meter_published 0\n",
        )
        .unwrap();
        assert!(!blind.published);
    }

    /// What the producers really write reads back: the pod's, the loadgen's and the meter's.
    #[test]
    fn reads_what_the_producers_write() {
        let m = service::metrics::Metrics::default();
        m.arrival(0);
        m.arrival(0);
        m.arrival(1);
        m.completion(Outcome::Answered);
        m.completion(Outcome::Abandoned);
        m.completion(Outcome::Dropped);
        let text = m.render(service::metrics::Gauges {
            queue_depth: 3,
            wait: Duration::from_millis(500),
            ready: true,
        });
        let q = PodQueue::read(&text).unwrap();
        assert_eq!(
            (q.depth, q.wait_s, q.ready, q.arrivals, q.first_arrivals),
            (3.0, 0.5, true, 3.0, 2.0)
        );
        assert_eq!((q.answered, q.abandoned), (1.0, 1.0));

        let rec = loadgen::record::Recorder::new(std::time::Instant::now(), 1);
        assert!(rec.admit(10));
        rec.attempt_sent(0, None);
        rec.attempt_done(
            0,
            loadgen::record::AttemptOutcome::Error(loadgen::record::ErrorKind::Status5xx),
            Duration::from_millis(1),
            Duration::from_secs(1),
        );
        rec.attempt_sent(1, None);
        rec.request_done(loadgen::record::RequestOutcome::Failed);
        let c = LoadCounters::read(&rec.prometheus()).unwrap();
        assert_eq!(
            c,
            LoadCounters {
                started: 1.0,
                first_attempts: 1.0,
                attempts: 2.0,
                successes: 0.0,
                timeouts: 0.0,
                status_5xx: 1.0,
                rejected: 0.0,
                failed: 1.0
            }
        );

        let shared = meter::state::Shared::new(
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::from_secs(10),
            false,
        );
        let now = std::time::Instant::now();
        assert_eq!(MeterGauges::read(&shared.render_metrics(now)), None);
        let rates = meter::rate::Rates {
            first_attempt: 4.0,
            ingress: 12.0,
            pods: 1,
            measured: true,
            ..meter::rate::Rates::default()
        };
        shared.publish(now, time::OffsetDateTime::now_utc(), rates, 1, 1);
        let g = MeterGauges::read(&shared.render_metrics(now)).unwrap();
        assert_eq!(
            (
                g.first_attempt_rate,
                g.header_first_attempt_rate,
                g.ingress_rate
            ),
            (4.0, Some(0.0), 12.0)
        );
    }
}
