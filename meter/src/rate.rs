//! The pure core: per-pod counter histories and Prometheus-`rate`-like rates.
//!
//! No I/O and no clock: every call takes the time as an argument, so tests drive
//! it with invented instants.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// One pod's arrival counters at one scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ArrivalCounts {
    /// `retrydebt_arrivals_total{attempt="0"}`.
    pub first_attempt: f64,
    /// The sum of `retrydebt_arrivals_total` over every attempt label.
    pub all_attempts: f64,
}

/// Summed rates (per second) over the pods that currently contribute.
///
/// [`RateWindow::rates`] fills `first_attempt` and `header_first_attempt`
/// alike from the counters; [`crate::tally::Tally`] then puts the distinct
/// count in `first_attempt` and `client_attempt`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// First attempts: distinct `(request id, attempt 0)` pairs (see
    /// [`crate::distinct`]); a gateway's copies count once.
    pub first_attempt: f64,
    /// Arrivals whose `x-attempt` header is 0: what a header-only count reads,
    /// a gateway's retries included.
    pub header_first_attempt: f64,
    /// Attempts the clients made: distinct `(request id, attempt)` pairs.
    pub client_attempt: f64,
    /// Every arrival at the pods.
    pub ingress: f64,
    /// `ingress - first_attempt`, never negative.
    pub retry: f64,
    /// Pods with a recent sample (they contribute once they have two).
    pub pods: usize,
    /// Some counter spans two samples in the window: the rates are a measurement, not the
    /// zero of a meter that has seen nothing yet.
    pub measured: bool,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    counts: ArrivalCounts,
}

/// The samples of one pod inside the window, oldest first.
#[derive(Debug, Default)]
pub struct CounterHistory {
    samples: VecDeque<Sample>,
}

impl CounterHistory {
    /// Appends a sample; one not newer than the last is ignored (time never runs back).
    pub fn push(&mut self, at: Instant, counts: ArrivalCounts) {
        if self.samples.back().is_some_and(|last| at <= last.at) {
            return;
        }
        self.samples.push_back(Sample { at, counts });
    }

    /// Drops samples taken before `oldest`.
    fn trim(&mut self, oldest: Instant) {
        while self.samples.front().is_some_and(|s| s.at < oldest) {
            self.samples.pop_front();
        }
    }

    fn last_at(&self) -> Option<Instant> {
        self.samples.back().map(|s| s.at)
    }

    /// `(first_attempt, all_attempts)` per second between the oldest and newest
    /// sample, or `None` with fewer than two samples.
    fn rates(&self) -> Option<(f64, f64)> {
        let first = self.samples.front()?;
        let last = self.samples.back()?;
        let span = last.at.duration_since(first.at).as_secs_f64();
        if span <= 0.0 {
            return None;
        }
        let first_attempt = increase(self.samples.iter().map(|s| s.counts.first_attempt));
        let all = increase(self.samples.iter().map(|s| s.counts.all_attempts));
        Some((first_attempt / span, all / span))
    }
}

/// Sum of the increases between consecutive values; a drop is a counter reset (a
/// restarted pod), after which the counter counted up from zero, as in Prometheus.
pub fn increase(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut values = values.into_iter();
    let Some(mut prev) = values.next() else {
        return 0.0;
    };
    let mut total = 0.0;
    for v in values {
        total += if v >= prev { v - prev } else { v };
        prev = v;
    }
    total
}

/// Per-pod histories over a sliding window, summed into [`Rates`].
#[derive(Debug)]
pub struct RateWindow {
    window: Duration,
    forget_after: Duration,
    pods: HashMap<String, CounterHistory>,
}

impl RateWindow {
    /// `forget_after`: a pod whose newest sample is older than this (it could not be
    /// scraped, e.g. it crashed) contributes nothing any more.
    pub fn new(window: Duration, forget_after: Duration) -> Self {
        Self {
            window,
            forget_after,
            pods: HashMap::new(),
        }
    }

    pub fn record(&mut self, pod: &str, at: Instant, counts: ArrivalCounts) {
        self.pods
            .entry(pod.to_owned())
            .or_default()
            .push(at, counts);
    }

    /// Forgets every pod not in the current pod list: a pod that has gone
    /// contributes nothing from then on.
    pub fn retain_listed(&mut self, is_listed: impl Fn(&str) -> bool) {
        self.pods.retain(|pod, _| is_listed(pod));
    }

    /// Rates at `now`: per pod over its samples in `[now - window, now]`, summed.
    pub fn rates(&mut self, now: Instant) -> Rates {
        let oldest = now.checked_sub(self.window);
        let forget_before = now.checked_sub(self.forget_after);
        self.pods.retain(|_, h| {
            if let Some(oldest) = oldest {
                h.trim(oldest);
            }
            match (h.last_at(), forget_before) {
                (None, _) => false,
                (Some(last), Some(limit)) => last >= limit,
                (Some(_), None) => true,
            }
        });
        let mut rates = Rates {
            pods: self.pods.len(),
            ..Rates::default()
        };
        for (first_attempt, all) in self.pods.values().filter_map(CounterHistory::rates) {
            rates.first_attempt += first_attempt;
            rates.ingress += all;
            rates.measured = true;
        }
        rates.header_first_attempt = rates.first_attempt;
        rates.retry = (rates.ingress - rates.first_attempt).max(0.0);
        rates
    }
}

/// Whether a full window of data exists and is still fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataState {
    /// Less than one window since scraping (re)started: rates cover too little time.
    Warming,
    /// A full window of data, and some pod was scraped within the last window.
    Ready,
    /// No pod could be scraped for longer than a window.
    Stale,
}

/// Tracks when successful scrapes happened, to tell [`DataState`].
#[derive(Clone, Copy, Debug)]
pub struct Coverage {
    window: Duration,
    started: Instant,
    /// Start of the current unbroken run of successful rounds.
    since: Option<Instant>,
    last_success: Option<Instant>,
}

impl Coverage {
    /// `started`: when scraping started; no success for a window after it is stale too.
    pub fn new(window: Duration, started: Instant) -> Self {
        Self {
            window,
            started,
            since: None,
            last_success: None,
        }
    }

    /// Records a scrape round in which at least one pod answered.
    pub fn success(&mut self, at: Instant) {
        // After a gap longer than a window, the old data has aged out: start over.
        let broken = self
            .last_success
            .is_none_or(|last| at.duration_since(last) > self.window);
        if broken {
            self.since = Some(at);
        }
        self.last_success = Some(at);
    }

    pub fn last_success(&self) -> Option<Instant> {
        self.last_success
    }

    pub fn state(&self, now: Instant) -> DataState {
        match (self.since, self.last_success) {
            (Some(since), Some(last)) => {
                if now.saturating_duration_since(last) > self.window {
                    DataState::Stale
                } else if now.saturating_duration_since(since) >= self.window {
                    DataState::Ready
                } else {
                    DataState::Warming
                }
            }
            _ if now.saturating_duration_since(self.started) > self.window => DataState::Stale,
            _ => DataState::Warming,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(10);

    fn counts(first_attempt: f64, all_attempts: f64) -> ArrivalCounts {
        ArrivalCounts {
            first_attempt,
            all_attempts,
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn increase_handles_resets() {
        assert_eq!(increase([]), 0.0);
        assert_eq!(increase([5.0]), 0.0);
        assert_eq!(increase([0.0, 10.0, 20.0]), 20.0);
        // 20 -> 3 is a restart: 3 arrivals since, then 7 more.
        assert_eq!(increase([0.0, 10.0, 20.0, 3.0, 10.0]), 30.0);
    }

    #[test]
    fn steady_pods_sum() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        for i in 0..=20 {
            let t = i as f64;
            w.record("a", t0 + secs(t), counts(10.0 * t, 30.0 * t));
            w.record("b", t0 + secs(t), counts(5.0 * t, 5.0 * t));
        }
        let r = w.rates(t0 + secs(20.0));
        assert!(close(r.first_attempt, 15.0), "{r:?}");
        assert!(close(r.ingress, 35.0), "{r:?}");
        assert!(close(r.retry, 20.0), "{r:?}");
        assert_eq!(r.pods, 2);
    }

    #[test]
    fn one_sample_a_pod_is_no_measurement() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        w.record("a", t0, counts(100.0, 300.0));
        let first = w.rates(t0);
        assert_eq!((first.pods, first.measured, first.ingress), (1, false, 0.0));
        w.record("a", t0 + secs(1.0), counts(110.0, 330.0));
        assert!(w.rates(t0 + secs(1.0)).measured);
    }

    #[test]
    fn counter_reset_is_not_a_negative_rate() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        // 10/s throughout; the pod restarts between t=4 and t=5 (it had counted 40,
        // then starts again from 0 and has counted 5 by t=5).
        for i in 0..=10 {
            let t = i as f64;
            let v = if i <= 4 { 10.0 * t } else { 10.0 * (t - 4.5) };
            w.record("a", t0 + secs(t), counts(v, v));
        }
        let r = w.rates(t0 + secs(10.0));
        // Lost between the last scrape before and the restart: 5 arrivals of 100.
        assert!(close(r.ingress, 9.5), "{r:?}");
    }

    #[test]
    fn window_slides_to_the_new_rate() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        let mut v = 0.0;
        for i in 1..=40 {
            v += if i <= 20 { 10.0 } else { 50.0 };
            w.record("a", t0 + secs(i as f64), counts(v, v));
        }
        // At t=40 the window [30, 40] holds only post-step samples.
        let r = w.rates(t0 + secs(40.0));
        assert!(close(r.first_attempt, 50.0), "{r:?}");
    }

    #[test]
    fn gone_pods_contribute_nothing() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        for i in 0..=5 {
            let t = i as f64;
            w.record("a", t0 + secs(t), counts(10.0 * t, 10.0 * t));
            w.record("b", t0 + secs(t), counts(20.0 * t, 20.0 * t));
        }
        assert!(close(w.rates(t0 + secs(5.0)).ingress, 30.0));
        // "b" leaves the pod list: gone at once.
        w.retain_listed(|p| p != "b");
        let r = w.rates(t0 + secs(5.0));
        assert!(close(r.ingress, 10.0), "{r:?}");
        assert_eq!(r.pods, 1);
        // "a" stops answering: still counted shortly after, forgotten after 3 s.
        assert!(close(w.rates(t0 + secs(7.0)).ingress, 10.0));
        let r = w.rates(t0 + secs(8.5));
        assert_eq!(r, Rates::default());
    }

    #[test]
    fn new_pod_counts_over_its_own_span() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(W, secs(3.0));
        for i in 0..=10 {
            let t = i as f64;
            w.record("a", t0 + secs(t), counts(10.0 * t, 10.0 * t));
            if i >= 8 {
                // Started at t=7 with a counter already at 1000 (no effect on rate).
                w.record(
                    "b",
                    t0 + secs(t),
                    counts(1000.0 + 4.0 * t, 1000.0 + 4.0 * t),
                );
            }
        }
        let r = w.rates(t0 + secs(10.0));
        assert!(close(r.ingress, 14.0), "{r:?}");
        assert_eq!(r.pods, 2);
    }

    #[test]
    fn out_of_order_samples_are_ignored() {
        let t0 = Instant::now();
        let mut h = CounterHistory::default();
        h.push(t0 + secs(2.0), counts(20.0, 20.0));
        h.push(t0 + secs(1.0), counts(0.0, 0.0));
        h.push(t0 + secs(2.0), counts(99.0, 99.0));
        assert_eq!(h.rates(), None);
        h.push(t0 + secs(4.0), counts(40.0, 40.0));
        assert_eq!(h.rates(), Some((10.0, 10.0)));
    }

    #[test]
    fn coverage_warms_up_goes_stale_and_restarts() {
        let t0 = Instant::now();
        let mut c = Coverage::new(W, t0);
        assert_eq!(c.state(t0), DataState::Warming);
        assert_eq!(
            c.state(t0 + secs(10.5)),
            DataState::Stale,
            "nothing ever scraped"
        );
        for i in 0..=10 {
            c.success(t0 + secs(i as f64));
        }
        assert_eq!(c.state(t0 + secs(9.5)), DataState::Warming);
        assert_eq!(c.state(t0 + secs(10.0)), DataState::Ready);
        assert_eq!(c.state(t0 + secs(20.0)), DataState::Ready);
        assert_eq!(c.state(t0 + secs(20.5)), DataState::Stale);
        // Scraping comes back after the gap: a full window is needed again.
        c.success(t0 + secs(30.0));
        assert_eq!(c.state(t0 + secs(30.0)), DataState::Warming);
        c.success(t0 + secs(40.0));
        assert_eq!(c.state(t0 + secs(40.0)), DataState::Ready);
    }
}
