//! What the scrape loop publishes and the HTTP sides read: the latest rates, the
//! data state, the per-scrape history, and the meter's own Prometheus metrics.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Key, KeyName, Label, Level, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::distinct::DistinctCounts;
use crate::rate::{Coverage, DataState, Rates};
use crate::scrape::ScrapeError;

/// One scrape round's result, as `/history` returns it.
#[derive(Clone, Debug, Serialize)]
pub struct Reading {
    #[serde(skip)]
    pub at: Instant,
    #[serde(skip)]
    pub wall: OffsetDateTime,
    /// RFC 3339, UTC, milliseconds.
    pub timestamp: String,
    pub unix_ms: i64,
    /// Distinct `(request id, attempt 0)` per second: a gateway's copies count once.
    pub first_attempt_rate: f64,
    /// Arrivals with `x-attempt: 0` per second: what a header-only count reads.
    pub header_first_attempt_rate: f64,
    /// Distinct `(request id, attempt)` per second: attempts the clients made.
    pub client_attempt_rate: f64,
    pub ingress_rate: f64,
    pub retry_rate: f64,
    /// Pods contributing to the rates.
    pub pods: usize,
    /// Whether the external metrics API served these values (full, fresh window).
    pub published: bool,
}

/// Why the API has no value to give.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("less than one window ({0:?}) of data since scraping started")]
    Warming(Duration),
    #[error("no pod could be scraped for longer than the window ({0:?})")]
    Stale(Duration),
    /// The data is recent, but no listed pod answered lately (none is listed, or every one has
    /// been silent for three rounds): the sum would be a zero nobody measured.
    #[error("no listed pod answered lately: nothing measured to serve")]
    Unmeasured,
}

struct Inner {
    coverage: Coverage,
    latest: Option<Reading>,
    history: VecDeque<Reading>,
}

/// State shared between the scrape loop and the servers.
pub struct Shared {
    pub window: Duration,
    pub scrape_interval: Duration,
    /// With `--client-ca`: only requests over a connection with a verified client certificate are served.
    pub require_client_cert: bool,
    history_cap: usize,
    started: Instant,
    inner: Mutex<Inner>,
    pub metrics: MeterMetrics,
}

impl Shared {
    pub fn new(
        window: Duration,
        scrape_interval: Duration,
        history: Duration,
        require_client_cert: bool,
    ) -> Self {
        let rounds = history.as_secs_f64() / scrape_interval.as_secs_f64();
        let started = Instant::now();
        Self {
            window,
            scrape_interval,
            require_client_cert,
            history_cap: (rounds.ceil() as usize).clamp(1, 1_000_000),
            started,
            inner: Mutex::new(Inner {
                coverage: Coverage::new(window, started),
                latest: None,
                history: VecDeque::new(),
            }),
            metrics: MeterMetrics::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain data behind: keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one scrape round that ended at `at`.
    pub fn publish(
        &self,
        at: Instant,
        wall: OffsetDateTime,
        rates: Rates,
        listed: usize,
        scraped: usize,
    ) {
        let mut inner = self.lock();
        if scraped > 0 {
            inner.coverage.success(at);
        }
        // A round with no pod's counters spanning two samples measured nothing: serving its zero
        // would scale the service in exactly when the meter lost its pods.
        let published = inner.coverage.state(at) == DataState::Ready && rates.measured;
        let reading = Reading {
            at,
            wall,
            timestamp: rfc3339_millis(wall),
            unix_ms: (wall.unix_timestamp_nanos() / 1_000_000) as i64,
            first_attempt_rate: rates.first_attempt,
            header_first_attempt_rate: rates.header_first_attempt,
            client_attempt_rate: rates.client_attempt,
            ingress_rate: rates.ingress,
            retry_rate: rates.retry,
            pods: rates.pods,
            published,
        };
        if inner.history.len() == self.history_cap {
            inner.history.pop_front();
        }
        inner.history.push_back(reading.clone());
        inner.latest = Some(reading);
        drop(inner);
        let m = &self.metrics;
        // A round whose counters do not span two samples measured nothing: the gauges keep what
        // was measured (or stay absent), and `published` and the scrape age say how old it is.
        if rates.measured {
            let g = m.rates();
            g.first_attempt_rate.set(rates.first_attempt);
            g.header_first_attempt_rate.set(rates.header_first_attempt);
            g.client_attempt_rate.set(rates.client_attempt);
            g.ingress_rate.set(rates.ingress);
            g.retry_rate.set(rates.retry);
        }
        m.pods_listed.set(listed as f64);
        m.pods_scraped.set(scraped as f64);
        m.pods_contributing.set(rates.pods as f64);
    }

    /// The reading the API may serve at `now`, or why there is none.
    pub fn current(&self, now: Instant) -> Result<Reading, Unavailable> {
        let inner = self.lock();
        match (inner.coverage.state(now), &inner.latest) {
            (DataState::Ready, Some(reading)) if reading.published => Ok(reading.clone()),
            (DataState::Ready, Some(_)) => Err(Unavailable::Unmeasured),
            (DataState::Stale, _) => Err(Unavailable::Stale(self.window)),
            _ => Err(Unavailable::Warming(self.window)),
        }
    }

    /// Readings of the last `seconds` (all retained ones with `None`), oldest first.
    pub fn history(&self, now: Instant, seconds: Option<u64>) -> Vec<Reading> {
        let inner = self.lock();
        let oldest = seconds.and_then(|s| now.checked_sub(Duration::from_secs(s)));
        inner
            .history
            .iter()
            .filter(|r| oldest.is_none_or(|o| r.at >= o))
            .cloned()
            .collect()
    }

    /// The Prometheus text of the meter's own metrics at `now`.
    pub fn render_metrics(&self, now: Instant) -> String {
        let last = self.lock().coverage.last_success();
        let age = now.saturating_duration_since(last.unwrap_or(self.started));
        self.metrics.last_scrape_age.set(age.as_secs_f64());
        // What the API would answer now.
        let published = self.current(now).is_ok();
        self.metrics.published.set(f64::from(u8::from(published)));
        self.metrics.handle.render()
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2025-01-02T03:04:05.678Z`.
pub fn rfc3339_millis(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let whole = t
        .replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_default();
    // `whole` ends in "Z"; put the milliseconds before it.
    format!("{}.{:03}Z", whole.trim_end_matches('Z'), t.millisecond())
}

/// RFC 3339 in UTC, whole seconds, as Kubernetes `metav1.Time` marshals.
pub fn rfc3339_seconds(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// The meter's own metrics, kept in a local (not global) recorder so several
/// meters can run in one process (the tests, the embedded runner).
pub struct MeterMetrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Registered at the first published round: before it, the rates are absent from the
    /// exposition rather than a zero nobody measured.
    rates: OnceLock<RateGauges>,
    distinct_ids: Gauge,
    distinct_first_attempts: Counter,
    distinct_client_attempts: Counter,
    arrivals_read: Counter,
    arrivals_lost: Counter,
    distinct_evicted_early: Counter,
    pods_listed: Gauge,
    pods_scraped: Gauge,
    pods_contributing: Gauge,
    last_scrape_age: Gauge,
    published: Gauge,
    pub scrapes: Counter,
    pub discovery_errors: Counter,
    scrape_errors: HashMap<&'static str, Counter>,
}

/// The published rates' gauges.
struct RateGauges {
    first_attempt_rate: Gauge,
    header_first_attempt_rate: Gauge,
    client_attempt_rate: Gauge,
    ingress_rate: Gauge,
    retry_rate: Gauge,
}

/// The rates' names and help texts, described at start and registered at the first round.
const RATES: [(&str, &str); 5] = [
    (
        FIRST_ATTEMPT_RATE,
        "First attempts per second over the window: distinct request ids with attempt 0 over all pods (a gateway's copies count once).",
    ),
    (
        HEADER_FIRST_ATTEMPT_RATE,
        "Arrivals with x-attempt 0 per second, summed over pods, over the window: a header-only count, a gateway's retries included.",
    ),
    (
        CLIENT_ATTEMPT_RATE,
        "Attempts the clients made per second over the window: distinct (request id, attempt) pairs over all pods.",
    ),
    (
        INGRESS_RATE,
        "All attempts per second, summed over pods, over the window.",
    ),
    (
        RETRY_RATE,
        "Retries (attempt >= 1) per second: ingress minus first attempts.",
    ),
];

const META: Metadata<'static> = Metadata::new("meter", Level::INFO, None);

// The meter's own exposition names (`GET /metrics`), owned here for the readers (the harness).

/// Gauge: distinct `(request id, attempt 0)` per second over the window.
pub const FIRST_ATTEMPT_RATE: &str = "retrydebt_meter_first_attempt_rate";
/// Gauge: arrivals with `x-attempt: 0` per second (a header-only count).
pub const HEADER_FIRST_ATTEMPT_RATE: &str = "retrydebt_meter_header_first_attempt_rate";
/// Gauge: distinct `(request id, attempt)` per second.
pub const CLIENT_ATTEMPT_RATE: &str = "retrydebt_meter_client_attempt_rate";
/// Gauge: request ids remembered for the distinct count.
pub const DISTINCT_IDS: &str = "retrydebt_meter_distinct_ids";
pub const DISTINCT_FIRST_ATTEMPTS_TOTAL: &str = "retrydebt_meter_distinct_first_attempts_total";
pub const DISTINCT_CLIENT_ATTEMPTS_TOTAL: &str = "retrydebt_meter_distinct_client_attempts_total";
pub const ARRIVALS_READ_TOTAL: &str = "retrydebt_meter_arrivals_read_total";
pub const ARRIVALS_LOST_TOTAL: &str = "retrydebt_meter_arrivals_lost_total";
pub const DISTINCT_EVICTED_EARLY_TOTAL: &str = "retrydebt_meter_distinct_evicted_early_total";
/// Gauge: all attempts per second, summed over pods.
pub const INGRESS_RATE: &str = "retrydebt_meter_ingress_rate";
/// Gauge: retries per second.
pub const RETRY_RATE: &str = "retrydebt_meter_retry_rate";
pub const PODS_LISTED: &str = "retrydebt_meter_pods_listed";
pub const PODS_SCRAPED: &str = "retrydebt_meter_pods_scraped";
pub const PODS_CONTRIBUTING: &str = "retrydebt_meter_pods_contributing";
pub const LAST_SCRAPE_AGE_SECONDS: &str = "retrydebt_meter_last_scrape_age_seconds";
/// Gauge: 1 while the external metrics API serves values.
pub const PUBLISHED: &str = "retrydebt_meter_published";
pub const SCRAPES_TOTAL: &str = "retrydebt_meter_scrapes_total";
pub const DISCOVERY_ERRORS_TOTAL: &str = "retrydebt_meter_discovery_errors_total";
/// Counter by [`REASON_LABEL`] (values: `ScrapeError::REASONS`).
pub const SCRAPE_ERRORS_TOTAL: &str = "retrydebt_meter_scrape_errors_total";
/// Counter by [`CODE_LABEL`] (the HTTP status code).
pub const API_REQUESTS_TOTAL: &str = "retrydebt_meter_api_requests_total";
pub const REASON_LABEL: &str = "reason";
pub const CODE_LABEL: &str = "code";

/// Describes and registers metrics on one recorder.
struct Register<'a>(&'a PrometheusRecorder);

impl Register<'_> {
    fn gauge(&self, name: &'static str, unit: Option<Unit>, help: &'static str) -> Gauge {
        self.0.describe_gauge(
            KeyName::from_const_str(name),
            unit,
            SharedString::const_str(help),
        );
        self.0.register_gauge(&Key::from_static_name(name), &META)
    }

    fn describe_gauge(&self, name: &'static str, help: &'static str) {
        self.0.describe_gauge(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        );
    }

    fn describe_counter(&self, name: &'static str, help: &'static str) {
        self.0.describe_counter(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        );
    }

    fn counter(&self, name: &'static str, help: &'static str) -> Counter {
        self.describe_counter(name, help);
        self.0.register_counter(&Key::from_static_name(name), &META)
    }

    /// One counter per scrape error reason, zeros included.
    fn scrape_errors(&self) -> HashMap<&'static str, Counter> {
        self.describe_counter(SCRAPE_ERRORS_TOTAL, "Pod scrapes that failed, by reason.");
        ScrapeError::REASONS
            .iter()
            .map(|&reason| {
                let key =
                    Key::from_parts(SCRAPE_ERRORS_TOTAL, vec![Label::new(REASON_LABEL, reason)]);
                (reason, self.0.register_counter(&key, &META))
            })
            .collect()
    }
}

impl MeterMetrics {
    fn new() -> Self {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let r = Register(&recorder);
        r.describe_counter(
            API_REQUESTS_TOTAL,
            "External metrics API requests answered, by HTTP status code.",
        );
        for (name, help) in RATES {
            r.describe_gauge(name, help);
        }
        Self {
            rates: OnceLock::new(),
            distinct_ids: r.gauge(
                DISTINCT_IDS,
                None,
                "Request ids remembered for the distinct count (--distinct-retention, --distinct-max-ids).",
            ),
            distinct_first_attempts: r.counter(
                DISTINCT_FIRST_ATTEMPTS_TOTAL,
                "Distinct (request id, attempt 0) pairs read from the pods' arrival logs.",
            ),
            distinct_client_attempts: r.counter(
                DISTINCT_CLIENT_ATTEMPTS_TOTAL,
                "Distinct (request id, attempt) pairs read from the pods' arrival logs.",
            ),
            arrivals_read: r.counter(
                ARRIVALS_READ_TOTAL,
                "Entries read from the pods' arrival logs (GET /arrivals), copies included.",
            ),
            arrivals_lost: r.counter(
                ARRIVALS_LOST_TOTAL,
                "Entries a pod's arrival log overwrote before the meter read them (missing from the distinct count).",
            ),
            distinct_evicted_early: r.counter(
                DISTINCT_EVICTED_EARLY_TOTAL,
                "Request ids forgotten before --distinct-retention because --distinct-max-ids were remembered.",
            ),
            pods_listed: r.gauge(
                PODS_LISTED,
                None,
                "Pods in the pod list at the last scrape round.",
            ),
            pods_scraped: r.gauge(
                PODS_SCRAPED,
                None,
                "Pods that answered at the last scrape round.",
            ),
            pods_contributing: r.gauge(
                PODS_CONTRIBUTING,
                None,
                "Pods whose counters make up the published rates.",
            ),
            last_scrape_age: r.gauge(
                LAST_SCRAPE_AGE_SECONDS,
                Some(Unit::Seconds),
                "Seconds since some pod was last scraped successfully (since start if none was).",
            ),
            published: r.gauge(
                PUBLISHED,
                None,
                "1 if the external metrics API serves values (full, fresh window), else 0.",
            ),
            scrapes: r.counter(SCRAPES_TOTAL, "Pod scrapes attempted."),
            discovery_errors: r.counter(
                DISCOVERY_ERRORS_TOTAL,
                "Failures to read the pods file (or a bad line in it) or to resolve the pods DNS name.",
            ),
            scrape_errors: r.scrape_errors(),
            handle,
            recorder,
        }
    }

    /// The rates' gauges, registered on the first call (the first published round).
    fn rates(&self) -> &RateGauges {
        self.rates.get_or_init(|| {
            let g = |name| {
                self.recorder
                    .register_gauge(&Key::from_static_name(name), &META)
            };
            RateGauges {
                first_attempt_rate: g(FIRST_ATTEMPT_RATE),
                header_first_attempt_rate: g(HEADER_FIRST_ATTEMPT_RATE),
                client_attempt_rate: g(CLIENT_ATTEMPT_RATE),
                ingress_rate: g(INGRESS_RATE),
                retry_rate: g(RETRY_RATE),
            }
        })
    }

    /// The distinct count's cumulative figures after a round.
    pub fn distinct(&self, counts: DistinctCounts, remembered: usize, lost: u64) {
        self.distinct_first_attempts.absolute(counts.first_attempts);
        self.distinct_client_attempts
            .absolute(counts.client_attempts);
        self.arrivals_read.absolute(counts.arrivals);
        self.distinct_evicted_early.absolute(counts.evicted_early);
        self.arrivals_lost.absolute(lost);
        self.distinct_ids.set(remembered as f64);
    }

    pub fn scrape_error(&self, reason: &str) {
        if let Some(c) = self.scrape_errors.get(reason) {
            c.increment(1);
        }
    }

    pub fn api_request(&self, code: u16) {
        let key = Key::from_parts(
            API_REQUESTS_TOTAL,
            vec![Label::new(CODE_LABEL, code.to_string())],
        );
        self.recorder.register_counter(&key, &META).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(text: &str, name: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(name))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_rates_are_absent_until_a_round_measured_them() {
        let s = Shared::new(
            Duration::from_secs(30),
            Duration::from_secs(1),
            Duration::from_secs(60),
            false,
        );
        let now = Instant::now();
        // At start, and after a round no pod contributed to: no series, not a zero.
        assert!(samples(&s.render_metrics(now), FIRST_ATTEMPT_RATE).is_empty());
        let wall = OffsetDateTime::now_utc();
        // The first round after a start: pods listed, one sample each, no rate yet.
        let first_round = Rates {
            pods: 2,
            ..Rates::default()
        };
        s.publish(now, wall, first_round, 2, 2);
        assert!(samples(&s.render_metrics(now), INGRESS_RATE).is_empty());
        let measured = Rates {
            first_attempt: 100.0,
            ingress: 300.0,
            retry: 200.0,
            pods: 2,
            measured: true,
            ..Rates::default()
        };
        s.publish(now, wall, measured, 2, 2);
        let text = s.render_metrics(now);
        assert_eq!(
            samples(&text, INGRESS_RATE),
            vec![format!("{INGRESS_RATE} 300")]
        );
        // A later round that measured nothing leaves the last measurement; the age says how old.
        s.publish(now, wall, Rates::default(), 2, 0);
        assert_eq!(
            samples(&s.render_metrics(now), FIRST_ATTEMPT_RATE),
            vec![format!("{FIRST_ATTEMPT_RATE} 100")]
        );
    }

    #[test]
    fn the_api_never_serves_a_zero_it_did_not_measure() {
        let (window, round) = (Duration::from_secs(10), Duration::from_secs(1));
        let s = Shared::new(window, round, Duration::from_secs(60), false);
        let t0 = Instant::now();
        let wall = OffsetDateTime::now_utc();
        let measured = Rates {
            first_attempt: 100.0,
            ingress: 300.0,
            pods: 2,
            measured: true,
            ..Rates::default()
        };
        for i in 0..=11 {
            s.publish(t0 + round * i, wall, measured, 2, 2);
        }
        let at = t0 + round * 11;
        assert_eq!(s.current(at).map(|r| r.ingress_rate), Ok(300.0));
        // The pods leave the list (or stop answering and are forgotten): the data is recent, the
        // round measured nothing, and the API says so instead of serving 0.
        s.publish(at + round, wall, Rates::default(), 0, 0);
        assert_eq!(
            s.current(at + round).map(|r| r.ingress_rate),
            Err(Unavailable::Unmeasured)
        );
        // A window later it is stale; the pods come back and it warms a window before serving.
        assert_eq!(
            s.current(at + window + round * 2).map(|r| r.ingress_rate),
            Err(Unavailable::Stale(window))
        );
        let back = at + window + round * 3;
        s.publish(back, wall, measured, 2, 2);
        assert_eq!(
            s.current(back).map(|r| r.ingress_rate),
            Err(Unavailable::Warming(window))
        );
    }
}
