//! The pod's counters and their Prometheus text rendering.
//!
//! Hand-rolled rather than `metrics-exporter-prometheus`: the contract needs a
//! fractional counter (`retrydebt_busy_seconds_total`), which the `metrics`
//! facade cannot express (its counters are `u64`), and gauges computed from
//! the queue at scrape time. Plain atomics keep the hot path lock-free.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Attempt numbers at or above this share one label, to bound cardinality.
pub const ATTEMPT_CAP: u32 = 99;

// The exposition's names: the contract the meter and the harness read.

/// Counter of requests accepted, by [`ATTEMPT_LABEL`].
pub const ARRIVALS_TOTAL: &str = "retrydebt_arrivals_total";
/// Counter of requests that left the queue, by [`OUTCOME_LABEL`] ([`Outcome::label`]).
pub const COMPLETIONS_TOTAL: &str = "retrydebt_completions_total";
/// Counter of requests turned away unserved with a 400 or a 503 the pod chose, by
/// [`REASON_LABEL`]: malformed, a full queue or the adaptive limit before queueing; CoDel at
/// the head of the queue.
pub const REJECTIONS_TOTAL: &str = "retrydebt_rejections_total";
/// Gauge: requests waiting in the queue.
pub const QUEUE_DEPTH: &str = "retrydebt_queue_depth";
/// Gauge: the wait the newest arrival faces, seconds.
pub const WAIT_SECONDS: &str = "retrydebt_wait_seconds";
/// Counter: seconds spent serving (fractional).
pub const BUSY_SECONDS_TOTAL: &str = "retrydebt_busy_seconds_total";
/// Counter: CPU seconds the work used (fractional).
pub const CPU_SECONDS_TOTAL: &str = "retrydebt_cpu_seconds_total";
/// Counter: CPU seconds the worker spun (`--work=spin`).
pub const SPIN_SECONDS_TOTAL: &str = "retrydebt_spin_seconds_total";
/// Counter: CPU seconds the whole process used, as the kernel counts them (the client
/// libraries' standard name).
pub const PROCESS_CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
/// Gauge: 1 when ready, else 0.
pub const READY: &str = "retrydebt_ready";
/// Gauge: the adaptive discipline's limit on requests in the pod; only with
/// `--discipline=adaptive`.
pub const CONCURRENCY_LIMIT: &str = "retrydebt_concurrency_limit";
/// [`ARRIVALS_TOTAL`]'s label: the attempt number (`x-attempt`), "0" for a first attempt.
pub const ATTEMPT_LABEL: &str = "attempt";
/// [`COMPLETIONS_TOTAL`]'s label; its values are [`Outcome::label`].
pub const OUTCOME_LABEL: &str = "outcome";
/// [`REJECTIONS_TOTAL`]'s label.
pub const REASON_LABEL: &str = "reason";

/// Why a request was turned away unserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    BadAttempt,
    BadDeadline,
    /// `--max-queue`, or the bounded discipline's `--queue-limit`.
    QueueFull,
    BadRequestId,
    /// Refused at the head of the queue by CoDel.
    Codel,
    /// Over the adaptive limit on requests in the pod.
    Adaptive,
}

/// `reason` labels, indexed by [`Rejection`].
const REJECTION_LABELS: [&str; 6] = [
    "bad_attempt",
    "bad_deadline",
    "queue_full",
    "bad_request_id",
    "codel",
    "adaptive",
];

/// How a queued request left the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served and its client received the answer.
    Answered,
    /// Served for nobody: the client had gone.
    Abandoned,
    /// Skipped without service by a drop mode.
    Dropped,
}

impl Outcome {
    /// Its [`OUTCOME_LABEL`] value in [`COMPLETIONS_TOTAL`].
    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Abandoned => "abandoned",
            Outcome::Dropped => "dropped",
        }
    }
}

/// `outcome` labels, indexed by [`Outcome`].
const OUTCOME_LABELS: [&str; 3] = [
    Outcome::Answered.label(),
    Outcome::Abandoned.label(),
    Outcome::Dropped.label(),
];

/// Counters shared by the handlers and the worker.
#[derive(Debug)]
pub struct Metrics {
    arrivals: [AtomicU64; ATTEMPT_CAP as usize + 1],
    completions: [AtomicU64; 3],
    rejections: [AtomicU64; REJECTION_LABELS.len()],
    busy_nanos: AtomicU64,
    cpu_nanos: AtomicU64,
    spin_nanos: AtomicU64,
    /// [`NO_LIMIT`] unless the discipline is adaptive.
    concurrency_limit: AtomicU64,
}

const NO_LIMIT: u64 = u64::MAX;

impl Default for Metrics {
    fn default() -> Self {
        Self {
            arrivals: std::array::from_fn(|_| AtomicU64::new(0)),
            completions: Default::default(),
            rejections: Default::default(),
            busy_nanos: AtomicU64::new(0),
            cpu_nanos: AtomicU64::new(0),
            spin_nanos: AtomicU64::new(0),
            concurrency_limit: AtomicU64::new(NO_LIMIT),
        }
    }
}

/// The values computed from the queue at scrape time.
#[derive(Clone, Copy, Debug)]
pub struct Gauges {
    pub queue_depth: usize,
    pub wait: Duration,
    pub ready: bool,
}

impl Metrics {
    pub fn arrival(&self, attempt: u32) {
        self.arrivals[attempt.min(ATTEMPT_CAP) as usize].fetch_add(1, Relaxed);
    }

    pub fn rejection(&self, why: Rejection) {
        self.rejections[why as usize].fetch_add(1, Relaxed);
    }

    pub fn completion(&self, outcome: Outcome) {
        self.completions[outcome as usize].fetch_add(1, Relaxed);
    }

    pub fn busy(&self, service: Duration) {
        add_nanos(&self.busy_nanos, service);
    }

    /// CPU the work used: its share of a service time (see `--cpu-limit`).
    pub fn cpu(&self, used: Duration) {
        add_nanos(&self.cpu_nanos, used);
    }

    /// CPU the worker thread spun for a request.
    pub fn spun(&self, used: Duration) {
        add_nanos(&self.spin_nanos, used);
    }

    /// The adaptive discipline's limit now.
    pub fn concurrency_limit(&self, limit: u32) {
        self.concurrency_limit.store(u64::from(limit), Relaxed);
    }

    /// Completions so far with this outcome.
    pub fn completions(&self, outcome: Outcome) -> u64 {
        self.completions[outcome as usize].load(Relaxed)
    }

    /// Arrivals so far, all attempts.
    pub fn arrivals(&self) -> u64 {
        self.arrivals.iter().map(|a| a.load(Relaxed)).sum()
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self, g: Gauges) -> String {
        let mut out = String::with_capacity(2048);
        header(
            &mut out,
            ARRIVALS_TOTAL,
            "counter",
            "Requests accepted, by attempt number (x-attempt, 99 = 99 or more), counted before queueing.",
        );
        for (attempt, n) in self.arrivals.iter().enumerate() {
            let n = n.load(Relaxed);
            // First attempts always appear; retry series once they exist.
            if attempt == 0 || n > 0 {
                let _ = writeln!(out, "{ARRIVALS_TOTAL}{{{ATTEMPT_LABEL}=\"{attempt}\"}} {n}");
            }
        }
        header(
            &mut out,
            COMPLETIONS_TOTAL,
            "counter",
            "Requests that left the queue: answered, abandoned (served for a client that had gone) or dropped (skipped unserved).",
        );
        labelled(
            &mut out,
            COMPLETIONS_TOTAL,
            OUTCOME_LABEL,
            &OUTCOME_LABELS,
            &self.completions,
        );
        header(
            &mut out,
            REJECTIONS_TOTAL,
            "counter",
            "Requests turned away unserved, by reason: malformed (400), or 503 for a full queue (--max-queue, --queue-limit) or the adaptive limit before queueing, or CoDel at the head of the queue.",
        );
        labelled(
            &mut out,
            REJECTIONS_TOTAL,
            REASON_LABEL,
            &REJECTION_LABELS,
            &self.rejections,
        );
        let busy = Duration::from_nanos(self.busy_nanos.load(Relaxed)).as_secs_f64();
        let cpu = Duration::from_nanos(self.cpu_nanos.load(Relaxed)).as_secs_f64();
        let spun = Duration::from_nanos(self.spin_nanos.load(Relaxed)).as_secs_f64();
        let series = [
            (
                QUEUE_DEPTH,
                "gauge",
                "Requests waiting in the queue, not counting those in service.",
                g.queue_depth as f64,
            ),
            (
                WAIT_SECONDS,
                "gauge",
                "Wait the newest arrival faces before its service starts: rest of the current service plus all queued work (LIFO: the former; sharing: none while a place in service is free).",
                g.wait.as_secs_f64(),
            ),
            (
                BUSY_SECONDS_TOTAL,
                "counter",
                "Seconds spent serving requests (answered or abandoned).",
                busy,
            ),
            (
                CPU_SECONDS_TOTAL,
                "counter",
                "CPU seconds the work was budgeted: each service time times the CPU limit (with --work=spin the process uses this, the HTTP path included; counted alike when it sleeps).",
                cpu,
            ),
            (
                SPIN_SECONDS_TOTAL,
                "counter",
                "CPU seconds the worker spun (--work=spin): the budget less what the HTTP path used.",
                spun,
            ),
            (
                PROCESS_CPU_SECONDS_TOTAL,
                "counter",
                "Total user and system CPU time spent in seconds (the whole process, as cAdvisor counts the container).",
                crate::cpu::process_seconds(),
            ),
            (
                READY,
                "gauge",
                "1 once the dead time (--ready-after) has passed and the pod is not shutting down, else 0.",
                f64::from(u8::from(g.ready)),
            ),
        ];
        for (name, kind, help, value) in series {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        self.render_limit(&mut out);
        out
    }

    /// The adaptive limit's gauge, for the discipline that has one.
    fn render_limit(&self, out: &mut String) {
        let limit = self.concurrency_limit.load(Relaxed);
        if limit != NO_LIMIT {
            header(
                out,
                CONCURRENCY_LIMIT,
                "gauge",
                "The adaptive discipline's AIMD limit on requests in the pod (queued and in service); an arrival at it gets 503.",
            );
            let _ = writeln!(out, "{CONCURRENCY_LIMIT} {limit}");
        }
    }
}

/// One series per label value, zeros included.
fn labelled<const N: usize>(
    out: &mut String,
    name: &str,
    key: &str,
    labels: &[&str; N],
    counts: &[AtomicU64; N],
) {
    for (label, n) in labels.iter().zip(counts) {
        let _ = writeln!(out, "{name}{{{key}=\"{label}\"}} {}", n.load(Relaxed));
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn add_nanos(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_contract_names_with_capped_attempts() {
        let m = Metrics::default();
        m.arrival(0);
        m.arrival(2);
        m.arrival(150);
        m.arrival(99);
        m.completion(Outcome::Abandoned);
        m.rejection(Rejection::QueueFull);
        m.busy(Duration::from_millis(1500));
        m.cpu(Duration::from_millis(30));
        m.spun(Duration::from_millis(20));
        let text = m.render(Gauges {
            queue_depth: 7,
            wait: Duration::from_millis(250),
            ready: true,
        });
        for line in [
            "retrydebt_arrivals_total{attempt=\"0\"} 1",
            "retrydebt_arrivals_total{attempt=\"2\"} 1",
            "retrydebt_arrivals_total{attempt=\"99\"} 2",
            "retrydebt_completions_total{outcome=\"answered\"} 0",
            "retrydebt_completions_total{outcome=\"abandoned\"} 1",
            "retrydebt_completions_total{outcome=\"dropped\"} 0",
            "retrydebt_rejections_total{reason=\"queue_full\"} 1",
            "retrydebt_rejections_total{reason=\"bad_attempt\"} 0",
            "retrydebt_rejections_total{reason=\"bad_request_id\"} 0",
            "retrydebt_queue_depth 7",
            "retrydebt_wait_seconds 0.25",
            "retrydebt_busy_seconds_total 1.5",
            "retrydebt_cpu_seconds_total 0.03",
            "retrydebt_spin_seconds_total 0.02",
            "# TYPE process_cpu_seconds_total counter",
            "retrydebt_ready 1",
            "# TYPE retrydebt_busy_seconds_total counter",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("attempt=\"1\""));
        assert!(
            !text.contains(CONCURRENCY_LIMIT),
            "only for the adaptive discipline"
        );
        assert_eq!(m.arrivals(), 4);
    }

    #[test]
    fn renders_the_disciplines_refusals_and_the_adaptive_limit() {
        let m = Metrics::default();
        m.rejection(Rejection::Codel);
        m.rejection(Rejection::Adaptive);
        m.rejection(Rejection::Adaptive);
        m.concurrency_limit(17);
        let text = m.render(Gauges {
            queue_depth: 0,
            wait: Duration::ZERO,
            ready: true,
        });
        for line in [
            "retrydebt_rejections_total{reason=\"codel\"} 1",
            "retrydebt_rejections_total{reason=\"adaptive\"} 2",
            "retrydebt_rejections_total{reason=\"queue_full\"} 0",
            "# TYPE retrydebt_concurrency_limit gauge",
            "retrydebt_concurrency_limit 17",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
