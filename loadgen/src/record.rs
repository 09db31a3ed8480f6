//! What a run records: per-second rows, totals, latency histograms, and their three
//! renderings (`timeseries.csv`, `summary.json`, Prometheus text).
//!
//! Every event takes one short lock and reads the clock *inside* it, so events are applied in
//! time order and each lands in the row of the second in which it happened (seconds counted
//! from the start of the run). A row is closed when the first event (or the 1 s ticker) of a
//! later second arrives; its `in_flight` is then exactly the count at the end of its second.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use kit_defense::ClientDefenses;
use serde::{Deserialize, Serialize};

use crate::policy::Denied;

/// Why an attempt failed (a timeout is counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Connection refused, reset or unreachable while connecting.
    Connect,
    /// The TLS handshake failed (certificate refused, no common protocol, reset during it).
    Tls,
    /// `EADDRNOTAVAIL`: no free source port / address (see `--bind`).
    AddrNotAvailable,
    /// `EMFILE`/`ENFILE`: out of file descriptors.
    OpenFiles,
    /// No target to send to (empty targets file).
    NoTarget,
    /// The connection failed after it was set up, before a whole response arrived.
    Io,
    /// The server answered 5xx.
    Status5xx,
    /// The server answered something else that is not 2xx.
    StatusOther,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::Connect,
        ErrorKind::AddrNotAvailable,
        ErrorKind::OpenFiles,
        ErrorKind::NoTarget,
        ErrorKind::Io,
        ErrorKind::Status5xx,
        ErrorKind::StatusOther,
        ErrorKind::Tls,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::AddrNotAvailable => "addr_not_available",
            ErrorKind::OpenFiles => "open_files",
            ErrorKind::NoTarget => "no_target",
            ErrorKind::Io => "io",
            ErrorKind::Status5xx => "status_5xx",
            ErrorKind::StatusOther => "status_other",
        }
    }

    pub fn index(self) -> usize {
        ErrorKind::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Timeout,
    Error(ErrorKind),
}

/// Which client defense rejected an attempt locally ([`crate::gate`]): it is not sent, and
/// its request fails at once, with no retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The circuit breaker is open (or half open with its probes out).
    BreakerOpen,
    /// The adaptive throttle drew a rejection.
    Throttle,
    /// The adaptive mode's rate limiter would hold the attempt longer than its timeout.
    RateLimit,
}

/// How one logical request ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RequestOutcome {
    /// Some attempt succeeded; latency from the first send to that success.
    Succeeded(Duration),
    /// Every attempt it was allowed failed (or a retry was denied, or a client defense
    /// rejected an attempt).
    Failed,
    /// The run stopped before it finished (no retry after the stop, or drain ran out).
    Unfinished,
}

/// Counters of one second (or, summed, of the whole run).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Row {
    pub second: u64,
    /// Arrivals the schedule made (admitted or shed).
    pub arrivals: u64,
    pub first_attempts: u64,
    /// Attempts sent, by attempt number (0 = first attempt).
    pub attempts: Vec<u64>,
    /// Attempts that succeeded, by attempt number.
    pub successes: Vec<u64>,
    pub timeouts: u64,
    pub errors: [u64; ErrorKind::ALL.len()],
    pub denied_budget: u64,
    pub denied_quota: u64,
    pub shed: u64,
    pub requests_succeeded: u64,
    pub requests_failed: u64,
    pub requests_unfinished: u64,
    /// Requests in flight at the end of the second.
    pub in_flight: u64,
    /// p99 of the send lag of first attempts sent in this second, microseconds.
    pub send_lag_p99_us: u64,
    /// p99 of the latency of the attempts that ended in this second, whatever ended them (a
    /// timeout counts when it fired), microseconds: what a stop rule on the clients' p99 reads.
    #[serde(default)]
    pub attempt_p99_us: u64,
    /// Attempts rejected locally by the client's throttle or adaptive rate limiter (not sent;
    /// their requests failed).
    #[serde(default)]
    pub throttled: u64,
    /// Attempts rejected locally because the client's circuit breaker was open.
    #[serde(default)]
    pub breaker_open: u64,
}

impl Row {
    fn new(second: u64, attempt_numbers: usize) -> Row {
        Row {
            second,
            attempts: vec![0; attempt_numbers],
            successes: vec![0; attempt_numbers],
            ..Row::default()
        }
    }

    fn add(&mut self, other: &Row) {
        let add_all = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        self.arrivals += other.arrivals;
        self.first_attempts += other.first_attempts;
        add_all(&mut self.attempts, &other.attempts);
        add_all(&mut self.successes, &other.successes);
        self.timeouts += other.timeouts;
        add_all(&mut self.errors, &other.errors);
        self.denied_budget += other.denied_budget;
        self.denied_quota += other.denied_quota;
        self.shed += other.shed;
        self.requests_succeeded += other.requests_succeeded;
        self.requests_failed += other.requests_failed;
        self.requests_unfinished += other.requests_unfinished;
        self.throttled += other.throttled;
        self.breaker_open += other.breaker_open;
        // Percentiles do not add: shards merged keep the worst.
        self.attempt_p99_us = self.attempt_p99_us.max(other.attempt_p99_us);
    }
}

/// A closed second with the Unix time it began: one `--stdout-rows` line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedRow {
    pub unix_time: f64,
    #[serde(flatten)]
    pub row: Row,
}

/// One line of `--stdout-rows` output: `{"row":{...}}` per second, `{"summary":{...}}` last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// One line at a time, printed or parsed and dropped: a row's size does not pile up.
#[allow(clippy::large_enum_variant)]
pub enum StdoutLine {
    Row(TimedRow),
    Summary(Box<Summary>),
}

impl StdoutLine {
    /// The line as printed, without its newline.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

fn histogram() -> Histogram<u64> {
    // Microseconds from 1 us to 1 h, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

struct State {
    rows: Vec<Row>,
    current: Row,
    lag_this_second: Histogram<u64>,
    attempts_this_second: Histogram<u64>,
    send_lag: Histogram<u64>,
    attempt_latency: Histogram<u64>,
    request_latency: Histogram<u64>,
    timeout_lateness: Histogram<u64>,
    in_flight: u64,
    peak_in_flight: u64,
}

impl State {
    /// Fills the current second's gauges and percentiles (so far, for a partial last row).
    fn fill_current(&mut self) {
        self.current.in_flight = self.in_flight;
        self.current.send_lag_p99_us = self.lag_this_second.value_at_quantile(0.99);
        self.current.attempt_p99_us = self.attempts_this_second.value_at_quantile(0.99);
    }
}

/// The run's record, shared by every task.
pub struct Recorder {
    start: Instant,
    start_unix: f64,
    attempt_numbers: usize,
    state: Mutex<State>,
}

impl Recorder {
    /// `retries` fixes the attempt-number columns: 0..=retries.
    pub fn new(start: Instant, retries: u32) -> Recorder {
        let attempt_numbers = retries as usize + 1;
        let start_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
            - start.elapsed().as_secs_f64();
        Recorder {
            start,
            start_unix,
            attempt_numbers,
            state: Mutex::new(State {
                rows: Vec::new(),
                current: Row::new(0, attempt_numbers),
                lag_this_second: histogram(),
                attempts_this_second: histogram(),
                send_lag: histogram(),
                attempt_latency: histogram(),
                request_latency: histogram(),
                timeout_lateness: histogram(),
                in_flight: 0,
                peak_in_flight: 0,
            }),
        }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// Locks the state and closes every second that has ended.
    fn now(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave counters half-updated in a way that
        // matters more than losing the record, so keep going with the data.
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let second = self.start.elapsed().as_secs();
        while st.current.second < second {
            let next = Row::new(st.current.second + 1, self.attempt_numbers);
            st.fill_current();
            st.lag_this_second.reset();
            st.attempts_this_second.reset();
            let closed = std::mem::replace(&mut st.current, next);
            st.rows.push(closed);
        }
        st
    }

    /// Closes finished seconds even when nothing happens (the 1 s ticker calls this).
    pub fn tick(&self) {
        drop(self.now());
    }

    /// An arrival: admitted (now in flight) unless `max_in_flight` requests already are.
    pub fn admit(&self, max_in_flight: u64) -> bool {
        let mut st = self.now();
        st.current.arrivals += 1;
        if st.in_flight >= max_in_flight {
            st.current.shed += 1;
            return false;
        }
        st.in_flight += 1;
        st.peak_in_flight = st.peak_in_flight.max(st.in_flight);
        true
    }

    /// Attempt `attempt` is being sent; a first attempt brings its send lag.
    pub fn attempt_sent(&self, attempt: u32, send_lag: Option<Duration>) {
        let mut st = self.now();
        let n = (attempt as usize).min(self.attempt_numbers - 1);
        st.current.attempts[n] += 1;
        if attempt == 0 {
            st.current.first_attempts += 1;
        }
        if let Some(lag) = send_lag {
            let us = micros(lag);
            st.lag_this_second.saturating_record(us);
            st.send_lag.saturating_record(us);
        }
    }

    /// Attempt `attempt` ended after `latency`. Attempt latency is recorded for attempts that
    /// got a response (any status); a timeout records how late it fired instead.
    pub fn attempt_done(
        &self,
        attempt: u32,
        outcome: AttemptOutcome,
        latency: Duration,
        timeout: Duration,
    ) {
        let mut st = self.now();
        st.attempts_this_second.saturating_record(micros(latency));
        match outcome {
            AttemptOutcome::Success => {
                let n = (attempt as usize).min(self.attempt_numbers - 1);
                st.current.successes[n] += 1;
                st.attempt_latency.saturating_record(micros(latency));
            }
            AttemptOutcome::Timeout => {
                st.current.timeouts += 1;
                st.timeout_lateness
                    .saturating_record(micros(latency.saturating_sub(timeout)));
            }
            AttemptOutcome::Error(kind) => {
                st.current.errors[kind.index()] += 1;
                if matches!(kind, ErrorKind::Status5xx | ErrorKind::StatusOther) {
                    st.attempt_latency.saturating_record(micros(latency));
                }
            }
        }
    }

    pub fn retry_denied(&self, why: Denied) {
        let mut st = self.now();
        match why {
            Denied::Budget => st.current.denied_budget += 1,
            Denied::Quota => st.current.denied_quota += 1,
        }
    }

    /// A client defense rejected an attempt before it was sent.
    pub fn attempt_rejected(&self, why: Rejected) {
        let mut st = self.now();
        match why {
            Rejected::Throttle | Rejected::RateLimit => st.current.throttled += 1,
            Rejected::BreakerOpen => st.current.breaker_open += 1,
        }
    }

    pub fn request_done(&self, outcome: RequestOutcome) {
        let mut st = self.now();
        st.in_flight = st.in_flight.saturating_sub(1);
        match outcome {
            RequestOutcome::Succeeded(latency) => {
                st.current.requests_succeeded += 1;
                st.request_latency.saturating_record(micros(latency));
            }
            RequestOutcome::Failed => st.current.requests_failed += 1,
            RequestOutcome::Unfinished => st.current.requests_unfinished += 1,
        }
    }

    /// Requests still in flight when the drain ran out: counted unfinished, none lost.
    pub fn cut_unfinished(&self) {
        let mut st = self.now();
        let left = std::mem::take(&mut st.in_flight);
        st.current.requests_unfinished += left;
    }

    pub fn in_flight(&self) -> u64 {
        self.now().in_flight
    }

    /// Sum of every row so far, including the current partial one.
    pub fn totals(&self) -> Row {
        let st = self.now();
        let mut total = Row::new(0, self.attempt_numbers);
        st.rows.iter().for_each(|r| total.add(r));
        total.add(&st.current);
        total.in_flight = st.in_flight;
        total
    }

    /// Closed seconds from the `first`-th on, with their Unix times; with `final_row`, the
    /// current partial second too (at the end of the run).
    pub fn rows_from(&self, first: usize, final_row: bool) -> Vec<TimedRow> {
        let mut st = self.now();
        if final_row {
            st.fill_current();
        }
        let partial = final_row.then_some(&st.current);
        st.rows
            .iter()
            .skip(first)
            .chain(partial)
            .map(|r| TimedRow {
                unix_time: self.start_unix + r.second as f64,
                row: r.clone(),
            })
            .collect()
    }

    /// `timeseries.csv`: closed seconds, plus the current partial second when `final_row`.
    pub fn csv(&self, final_row: bool) -> String {
        let mut st = self.now();
        let mut out = String::new();
        out.push_str("second,unix_time,arrivals,first_attempts,attempts");
        for n in 0..self.attempt_numbers {
            let _ = write!(out, ",attempts_{n}");
        }
        out.push_str(",successes");
        for n in 0..self.attempt_numbers {
            let _ = write!(out, ",successes_{n}");
        }
        out.push_str(",timeouts");
        for kind in ErrorKind::ALL {
            let _ = write!(out, ",errors_{}", kind.name());
        }
        // Columns added later go last, so readers by position keep working.
        out.push_str(",denied_budget,denied_quota,shed,requests_succeeded,requests_failed,requests_unfinished,in_flight,send_lag_p99_ms,attempt_p99_ms,throttled,breaker_open\n");
        if final_row {
            st.fill_current();
        }
        let partial = final_row.then_some(&st.current);
        for r in st.rows.iter().chain(partial) {
            let _ = write!(
                out,
                "{},{:.3},{},{},{}",
                r.second,
                self.start_unix + r.second as f64,
                r.arrivals,
                r.first_attempts,
                r.attempts.iter().sum::<u64>()
            );
            r.attempts.iter().for_each(|v| {
                let _ = write!(out, ",{v}");
            });
            let _ = write!(out, ",{}", r.successes.iter().sum::<u64>());
            r.successes.iter().for_each(|v| {
                let _ = write!(out, ",{v}");
            });
            let _ = write!(out, ",{}", r.timeouts);
            r.errors.iter().for_each(|v| {
                let _ = write!(out, ",{v}");
            });
            let _ = writeln!(
                out,
                ",{},{},{},{},{},{},{},{:.3},{:.3},{},{}",
                r.denied_budget,
                r.denied_quota,
                r.shed,
                r.requests_succeeded,
                r.requests_failed,
                r.requests_unfinished,
                r.in_flight,
                r.send_lag_p99_us as f64 / 1000.0,
                r.attempt_p99_us as f64 / 1000.0,
                r.throttled,
                r.breaker_open
            );
        }
        out
    }

    /// Totals and latency percentiles (see `Summary`).
    pub fn summary(&self, meta: RunMeta) -> Summary {
        let total = self.totals();
        let st = self.now();
        Summary {
            meta,
            started_unix: self.start_unix,
            elapsed_seconds: self.start.elapsed().as_secs_f64(),
            arrivals: total.arrivals,
            first_attempts: total.first_attempts,
            attempts: total.attempts.iter().sum(),
            attempts_by_number: total.attempts.clone(),
            successes_by_number: total.successes.clone(),
            succeeded: total.requests_succeeded,
            failed: total.requests_failed,
            unfinished: total.requests_unfinished,
            timeouts: total.timeouts,
            errors: ErrorKind::ALL
                .iter()
                .map(|k| (k.name().to_string(), total.errors[k.index()]))
                .collect(),
            denied_budget: total.denied_budget,
            denied_quota: total.denied_quota,
            throttled: total.throttled,
            breaker_open: total.breaker_open,
            shed: total.shed,
            peak_in_flight: st.peak_in_flight,
            attempt_latency_seconds: Percentiles::of(&st.attempt_latency),
            request_latency_seconds: Percentiles::of(&st.request_latency),
            send_lag_seconds: Percentiles::of(&st.send_lag),
            timeout_lateness_seconds: Percentiles::of(&st.timeout_lateness),
            max_rss_bytes: crate::limits::max_rss_bytes(),
            tls_handshakes: None,
        }
    }

    /// Prometheus text exposition of the live counters.
    pub fn prometheus(&self) -> String {
        let t = self.totals();
        let st = self.now();
        let mut out = String::new();
        counter_families(&mut out, &t);
        family(
            &mut out,
            metrics::IN_FLIGHT,
            "gauge",
            "Logical requests in flight.",
            &plain(st.in_flight),
        );
        latency_families(&mut out, &st);
        out
    }
}

/// The wire names of [`Recorder::prometheus`], owned here for the readers (the harness).
pub mod metrics {
    /// Counter: arrivals the schedule made, admitted or shed.
    pub const ARRIVALS_TOTAL: &str = "retrydebt_loadgen_arrivals_total";
    /// Counter: first attempts sent.
    pub const FIRST_ATTEMPTS_TOTAL: &str = "retrydebt_loadgen_first_attempts_total";
    /// Counter: attempts sent, by [`ATTEMPT_LABEL`].
    pub const ATTEMPTS_TOTAL: &str = "retrydebt_loadgen_attempts_total";
    /// Counter: attempts that succeeded, by [`ATTEMPT_LABEL`].
    pub const SUCCESSES_TOTAL: &str = "retrydebt_loadgen_successes_total";
    /// Counter: attempts abandoned at the per-attempt timeout.
    pub const TIMEOUTS_TOTAL: &str = "retrydebt_loadgen_timeouts_total";
    /// Counter: attempts failed other than by timeout, by [`KIND_LABEL`]
    /// (values: [`ErrorKind::name`](super::ErrorKind::name), e.g. [`KIND_STATUS_5XX`]).
    pub const ERRORS_TOTAL: &str = "retrydebt_loadgen_errors_total";
    /// Counter: retries a policy refused, by [`POLICY_LABEL`].
    pub const RETRIES_DENIED_TOTAL: &str = "retrydebt_loadgen_retries_denied_total";
    /// Counter: attempts a client defense rejected locally, by [`DEFENSE_LABEL`].
    pub const ATTEMPTS_REJECTED_TOTAL: &str = "retrydebt_loadgen_attempts_rejected_total";
    /// Counter: arrivals shed at `--max-in-flight`.
    pub const SHED_TOTAL: &str = "retrydebt_loadgen_shed_total";
    /// Counter: logical requests finished, by [`OUTCOME_LABEL`].
    pub const REQUESTS_TOTAL: &str = "retrydebt_loadgen_requests_total";
    /// Gauge: logical requests in flight.
    pub const IN_FLIGHT: &str = "retrydebt_loadgen_in_flight";
    /// Summary: latency of attempts that got a response, seconds.
    pub const ATTEMPT_LATENCY_SECONDS: &str = "retrydebt_loadgen_attempt_latency_seconds";
    /// Summary: latency from first send to success, seconds.
    pub const REQUEST_LATENCY_SECONDS: &str = "retrydebt_loadgen_request_latency_seconds";
    /// Summary: lag of first attempts behind their schedule, seconds.
    pub const SEND_LAG_SECONDS: &str = "retrydebt_loadgen_send_lag_seconds";

    /// The attempt number, "0" for a first attempt.
    pub const ATTEMPT_LABEL: &str = "attempt";
    /// Why an attempt failed: an [`ErrorKind::name`](super::ErrorKind::name).
    pub const KIND_LABEL: &str = "kind";
    /// [`KIND_LABEL`] of attempts answered 5xx.
    pub const KIND_STATUS_5XX: &str = super::ErrorKind::Status5xx.name();
    /// Which retry policy refused.
    pub const POLICY_LABEL: &str = "policy";
    pub const POLICY_BUDGET: &str = "budget";
    pub const POLICY_QUOTA: &str = "quota";
    /// Which client defense rejected an attempt: the throttle (adaptive throttling or the
    /// adaptive rate limiter, the record's `throttled`) or the open breaker (`breaker_open`).
    pub const DEFENSE_LABEL: &str = "defense";
    pub const DEFENSE_THROTTLE: &str = "throttle";
    pub const DEFENSE_BREAKER: &str = "breaker";
    /// How a logical request ended.
    pub const OUTCOME_LABEL: &str = "outcome";
    pub const OUTCOME_SUCCEEDED: &str = "succeeded";
    pub const OUTCOME_FAILED: &str = "failed";
    pub const OUTCOME_UNFINISHED: &str = "unfinished";
    /// A summary's quantile label.
    pub const QUANTILE_LABEL: &str = "quantile";
}

/// `# HELP`, `# TYPE` and the samples of one family; a sample's string is its label set (or
/// a `_sum`/`_count` suffix), written right after the name.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (suffix_labels, v) in samples {
        let _ = writeln!(out, "{name}{suffix_labels} {v}");
    }
}

/// `{key="value"}`.
fn label(key: &str, value: impl std::fmt::Display) -> String {
    format!("{{{key}=\"{value}\"}}")
}

/// One unlabelled sample.
fn plain(v: u64) -> Vec<(String, f64)> {
    vec![(String::new(), v as f64)]
}

/// One sample per attempt number.
fn by_attempt(v: &[u64]) -> Vec<(String, f64)> {
    v.iter()
        .enumerate()
        .map(|(n, c)| (label(metrics::ATTEMPT_LABEL, n), *c as f64))
        .collect()
}

/// The counter families, from the run's totals.
fn counter_families(out: &mut String, t: &Row) {
    use metrics::*;
    family(
        out,
        ARRIVALS_TOTAL,
        "counter",
        "Arrivals the schedule made, admitted or shed.",
        &plain(t.arrivals),
    );
    family(
        out,
        FIRST_ATTEMPTS_TOTAL,
        "counter",
        "First attempts sent.",
        &plain(t.first_attempts),
    );
    family(
        out,
        ATTEMPTS_TOTAL,
        "counter",
        "Attempts sent, by attempt number (0 = first).",
        &by_attempt(&t.attempts),
    );
    family(
        out,
        SUCCESSES_TOTAL,
        "counter",
        "Attempts that succeeded (2xx), by attempt number.",
        &by_attempt(&t.successes),
    );
    family(
        out,
        TIMEOUTS_TOTAL,
        "counter",
        "Attempts abandoned at the per-attempt timeout.",
        &plain(t.timeouts),
    );
    let errors: Vec<(String, f64)> = ErrorKind::ALL
        .iter()
        .map(|k| (label(KIND_LABEL, k.name()), t.errors[k.index()] as f64))
        .collect();
    family(
        out,
        ERRORS_TOTAL,
        "counter",
        "Attempts that failed other than by timeout, by kind.",
        &errors,
    );
    let denied = vec![
        (label(POLICY_LABEL, POLICY_BUDGET), t.denied_budget as f64),
        (label(POLICY_LABEL, POLICY_QUOTA), t.denied_quota as f64),
    ];
    family(
        out,
        RETRIES_DENIED_TOTAL,
        "counter",
        "Retries not sent because a retry policy refused them.",
        &denied,
    );
    let rejected = vec![
        (label(DEFENSE_LABEL, DEFENSE_THROTTLE), t.throttled as f64),
        (label(DEFENSE_LABEL, DEFENSE_BREAKER), t.breaker_open as f64),
    ];
    family(
        out,
        ATTEMPTS_REJECTED_TOTAL,
        "counter",
        "Attempts not sent because a client defense (throttle, open breaker) rejected them.",
        &rejected,
    );
    family(
        out,
        SHED_TOTAL,
        "counter",
        "Arrivals not sent because --max-in-flight requests were in flight.",
        &plain(t.shed),
    );
    let requests = vec![
        (
            label(OUTCOME_LABEL, OUTCOME_SUCCEEDED),
            t.requests_succeeded as f64,
        ),
        (
            label(OUTCOME_LABEL, OUTCOME_FAILED),
            t.requests_failed as f64,
        ),
        (
            label(OUTCOME_LABEL, OUTCOME_UNFINISHED),
            t.requests_unfinished as f64,
        ),
    ];
    family(
        out,
        REQUESTS_TOTAL,
        "counter",
        "Logical requests finished, by outcome.",
        &requests,
    );
}

/// The latency summaries: quantiles, `_sum` and `_count`, in seconds.
fn latency_families(out: &mut String, st: &State) {
    for (name, help, h) in [
        (
            metrics::ATTEMPT_LATENCY_SECONDS,
            "Latency of attempts that got a response.",
            &st.attempt_latency,
        ),
        (
            metrics::REQUEST_LATENCY_SECONDS,
            "Latency from first send to success.",
            &st.request_latency,
        ),
        (
            metrics::SEND_LAG_SECONDS,
            "Lag of first attempts behind their scheduled send time.",
            &st.send_lag,
        ),
    ] {
        let mut samples: Vec<(String, f64)> = [0.5, 0.9, 0.99, 0.999]
            .iter()
            .map(|q| {
                (
                    label(metrics::QUANTILE_LABEL, q),
                    h.value_at_quantile(*q) as f64 / 1e6,
                )
            })
            .collect();
        samples.push(("_sum".into(), h.mean() * h.len() as f64 / 1e6));
        samples.push(("_count".into(), h.len() as f64));
        family(out, name, "summary", help, &samples);
    }
}

/// Latency percentiles in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let q = |v: u64| v as f64 / 1e6;
        Percentiles {
            count: h.len(),
            p50: q(h.value_at_quantile(0.5)),
            p90: q(h.value_at_quantile(0.9)),
            p99: q(h.value_at_quantile(0.99)),
            p99_9: q(h.value_at_quantile(0.999)),
            max: q(h.max()),
        }
    }
}

/// What ran, copied into `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunMeta {
    pub schedule: String,
    pub arrival_process: crate::schedule::ArrivalKind,
    pub seed: u64,
    pub timeout_seconds: f64,
    pub retries: u32,
    pub retry_on: Vec<String>,
    pub http2: bool,
    pub open_files_limit: u64,
    /// What the attempts sent, one line per kind of request, secrets redacted
    /// ([`crate::request::RequestSet::describe`]).
    #[serde(default)]
    pub requests: Vec<String>,
    /// How the target's certificate was checked, for `https://` targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// The client's defenses: throttling, retry quota, breaker; left out when none.
    #[serde(default, skip_serializing_if = "ClientDefenses::is_none")]
    pub client: ClientDefenses,
}

/// `summary.json`. Every count is over the whole run; latencies are in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    #[serde(flatten)]
    pub meta: RunMeta,
    pub started_unix: f64,
    pub elapsed_seconds: f64,
    pub arrivals: u64,
    pub first_attempts: u64,
    pub attempts: u64,
    pub attempts_by_number: Vec<u64>,
    pub successes_by_number: Vec<u64>,
    pub succeeded: u64,
    pub failed: u64,
    pub unfinished: u64,
    pub timeouts: u64,
    pub errors: std::collections::BTreeMap<String, u64>,
    pub denied_budget: u64,
    pub denied_quota: u64,
    /// Attempts the client's throttle or adaptive rate limiter rejected locally.
    #[serde(default)]
    pub throttled: u64,
    /// Attempts rejected locally while the client's circuit breaker was open.
    #[serde(default)]
    pub breaker_open: u64,
    pub shed: u64,
    pub peak_in_flight: u64,
    pub attempt_latency_seconds: Percentiles,
    pub request_latency_seconds: Percentiles,
    pub send_lag_seconds: Percentiles,
    pub timeout_lateness_seconds: Percentiles,
    pub max_rss_bytes: Option<u64>,
    /// TLS handshakes, for `https://` targets: a retry on a new connection resumes a session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshakes: Option<TlsHandshakes>,
}

/// TLS handshakes by kind.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct TlsHandshakes {
    pub full: u64,
    pub resumed: u64,
}

/// Writes `path` atomically: a temporary file beside it, flushed, then renamed over it.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorder whose run began 2.5 s ago (events now land in second 2), with five arrivals:
    /// one shed, one that succeeds on its retry after a timeout, one that fails to connect and is
    /// denied its retry by the quota, one whose first attempt the rate limiter rejects and one
    /// whose first attempt the open breaker rejects.
    fn recorded() -> Recorder {
        let rec = Recorder::new(Instant::now() - Duration::from_millis(2500), 1);
        assert!(rec.admit(2));
        assert!(rec.admit(2));
        assert!(!rec.admit(2), "third arrival is shed");
        rec.attempt_sent(0, Some(Duration::from_micros(700)));
        rec.attempt_done(
            0,
            AttemptOutcome::Timeout,
            Duration::from_millis(1002),
            Duration::from_secs(1),
        );
        rec.attempt_sent(1, None);
        rec.attempt_done(
            1,
            AttemptOutcome::Success,
            Duration::from_millis(3),
            Duration::from_secs(1),
        );
        rec.request_done(RequestOutcome::Succeeded(Duration::from_millis(1005)));
        rec.attempt_sent(0, Some(Duration::from_micros(300)));
        rec.attempt_done(
            0,
            AttemptOutcome::Error(ErrorKind::Connect),
            Duration::ZERO,
            Duration::from_secs(1),
        );
        rec.request_done(RequestOutcome::Failed);
        rec.retry_denied(Denied::Quota);
        for why in [Rejected::RateLimit, Rejected::BreakerOpen] {
            assert!(rec.admit(2));
            rec.attempt_rejected(why);
            rec.request_done(RequestOutcome::Failed);
        }
        rec
    }

    fn summary_of(rec: &Recorder) -> Summary {
        rec.summary(RunMeta {
            schedule: "0s:1".into(),
            arrival_process: crate::schedule::ArrivalKind::Poisson,
            seed: 1,
            timeout_seconds: 1.0,
            retries: 1,
            retry_on: vec!["timeout".into()],
            http2: false,
            open_files_limit: 1024,
            requests: vec!["GET (target's path)".into()],
            tls: None,
            client: ClientDefenses::default(),
        })
    }

    #[test]
    fn rows_attribute_events_to_their_second() {
        let rec = recorded();
        let csv = rec.csv(true);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4, "header + seconds 0, 1, 2:\n{csv}");
        assert_eq!(
            lines[0],
            "second,unix_time,arrivals,first_attempts,attempts,attempts_0,attempts_1,successes,successes_0,successes_1,timeouts,errors_connect,errors_addr_not_available,errors_open_files,errors_no_target,errors_io,errors_status_5xx,errors_status_other,errors_tls,denied_budget,denied_quota,shed,requests_succeeded,requests_failed,requests_unfinished,in_flight,send_lag_p99_ms,attempt_p99_ms,throttled,breaker_open"
        );
        let cells: Vec<&str> = lines[3].split(',').collect();
        assert_eq!(cells[0], "2");
        assert_eq!(
            [
                "5", "2", "3", "2", "1", "1", "0", "1", "1", "1", "0", "0", "0", "0", "0", "0",
                "0", "0", "1", "1", "1", "3", "0", "0", "0.700"
            ]
            .as_slice(),
            &cells[2..cells.len() - 3]
        );
        // The p99 of the second's three attempts is its timeout, counted when it fired.
        let p99: f64 = cells[cells.len() - 3].parse().unwrap();
        assert!((1002.0..1004.0).contains(&p99), "{p99}");
        assert_eq!(
            cells[cells.len() - 2..],
            ["1", "1"],
            "throttled, breaker_open"
        );
        assert!(lines[1].starts_with("0,") && lines[1].ends_with(",0,0,0,0,0,0,0,0.000,0.000,0,0"));
    }

    #[test]
    fn summary_totals_add_up() {
        let s = summary_of(&recorded());
        assert_eq!(
            (
                s.arrivals,
                s.first_attempts,
                s.attempts,
                s.succeeded,
                s.failed,
                s.timeouts,
                s.shed
            ),
            (5, 2, 3, 1, 3, 1, 1)
        );
        assert_eq!((s.throttled, s.breaker_open), (1, 1));
        assert_eq!(s.attempts_by_number, [2, 1]);
        assert_eq!(s.errors["connect"], 1);
        assert!((s.timeout_lateness_seconds.max - 0.002).abs() < 1e-5);
        let json = serde_json::to_value(&s).unwrap();
        for key in [
            "first_attempts",
            "attempts",
            "succeeded",
            "failed",
            "timeouts",
            "shed",
            "throttled",
            "breaker_open",
            "seed",
            "schedule",
        ] {
            assert!(json.get(key).is_some(), "summary.json lacks {key}");
        }
        assert!(json["request_latency_seconds"]["p99_9"].as_f64().unwrap() > 1.0);
        assert!(json.get("client").is_none(), "no defense, no `client`");
        // A summary written before the client defenses reads with none of them.
        let mut older = json.clone();
        for key in ["throttled", "breaker_open"] {
            older.as_object_mut().unwrap().remove(key);
        }
        let read: Summary = serde_json::from_value(older).unwrap();
        assert_eq!((read.throttled, read.breaker_open), (0, 0));
        let mut defended = s.clone();
        defended.meta.client.quota = Some(kit_defense::QuotaMode::Adaptive);
        let json = serde_json::to_value(&defended).unwrap();
        assert_eq!(json["client"], serde_json::json!({"quota": "aws-adaptive"}));
    }

    /// A `--stdout-rows` line, printed and read back (floats to within JSON's decimal round trip).
    fn printed_and_read(line: StdoutLine) -> StdoutLine {
        let text = line.json();
        assert!(!text.contains('\n'), "{text}");
        serde_json::from_str::<StdoutLine>(&text).unwrap()
    }

    #[test]
    fn stdout_rows_give_every_second_its_unix_time_and_read_back() {
        let rec = recorded();
        let rows = rec.rows_from(1, true);
        assert_eq!(rows.len(), 2, "seconds 1 and 2");
        assert_eq!(rows[1].unix_time - rows[0].unix_time, 1.0);
        let StdoutLine::Row(r) = printed_and_read(StdoutLine::Row(rows[1].clone())) else {
            panic!("a row line reads back as a row")
        };
        assert_eq!(r.row, rows[1].row);
        assert!((r.unix_time - rows[1].unix_time).abs() < 1e-6);
        assert!(
            StdoutLine::Row(rows[1].clone())
                .json()
                .starts_with("{\"row\":{\"unix_time\":")
        );
    }

    #[test]
    fn stdout_summary_reads_back() {
        let s = summary_of(&recorded());
        let StdoutLine::Summary(again) = printed_and_read(StdoutLine::Summary(Box::new(s.clone())))
        else {
            panic!("a summary line reads back as a summary")
        };
        assert_eq!(
            (
                again.first_attempts,
                again.attempts,
                again.failed,
                again.meta
            ),
            (s.first_attempts, s.attempts, s.failed, s.meta.clone())
        );
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.csv");
        write_atomically(&p, b"one\n").unwrap();
        write_atomically(&p, b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }
}
