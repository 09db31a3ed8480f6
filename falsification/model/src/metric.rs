//! Rate-over-window readings computed the way the kit's meter computes them: cumulative counters
//! scraped every `scrape_s`, rate = increase over the last `window_s` / `window_s`, published with milli
//! precision. Before a full window exists, the increase since the first scrape over the time covered.

use std::collections::VecDeque;

/// A windowed rate of one cumulative counter.
#[derive(Debug, Clone)]
struct WindowRate {
    window_s: f64,
    samples: VecDeque<(f64, f64)>,
}

impl WindowRate {
    fn new(window_s: f64) -> WindowRate {
        WindowRate {
            window_s,
            samples: VecDeque::new(),
        }
    }

    /// Records a scrape of the cumulative counter `total` at time `t`.
    fn observe(&mut self, t: f64, total: f64) {
        self.samples.push_back((t, total));
        // Keep exactly one sample at or before the window's start.
        while self.samples.len() > 2 && self.samples[1].0 <= t - self.window_s + 1e-9 {
            self.samples.pop_front();
        }
    }

    /// The current reading, or `None` before two scrapes.
    fn rate(&self) -> Option<f64> {
        let (&(t1, v1), &(t0, v0)) = (self.samples.back()?, self.samples.front()?);
        let span = (t1 - t0).min(self.window_s);
        (span > 0.0).then(|| round_milli((v1 - v0) / span))
    }
}

/// The meter's three signals over the same window, read from arrival counters by attempt.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    scrape_s: f64,
    next_scrape: f64,
    first: WindowRate,
    all: WindowRate,
}

/// Which reading the autoscaler is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `first_attempt_rate`: arrivals with attempt 0.
    FirstAttempt,
    /// `ingress_rate`: all arrivals, retries included.
    Ingress,
    /// `retry_rate`: ingress minus first attempts.
    Retry,
    /// The pods' CPU: not the meter's, read from each pod as metrics-server would (a Resource metric).
    Cpu,
}

impl Meter {
    pub(crate) fn new(window_s: f64, scrape_s: f64, start: f64) -> Meter {
        Meter {
            scrape_s,
            next_scrape: start,
            first: WindowRate::new(window_s),
            all: WindowRate::new(window_s),
        }
    }

    /// When the next scrape is due.
    pub(crate) fn next_scrape(&self) -> f64 {
        self.next_scrape
    }

    /// Scrapes the cumulative counters (first attempts, all attempts) at `now`.
    pub(crate) fn scrape(&mut self, now: f64, first_total: f64, all_total: f64) {
        self.first.observe(now, first_total);
        self.all.observe(now, all_total);
        self.next_scrape += self.scrape_s;
    }

    /// The meter's reading of `signal`; `None` before two scrapes, and always for [`Signal::Cpu`].
    pub(crate) fn reading(&self, signal: Signal) -> Option<f64> {
        match signal {
            Signal::FirstAttempt => self.first.rate(),
            Signal::Ingress => self.all.rate(),
            Signal::Retry => Some(round_milli(self.all.rate()? - self.first.rate()?)),
            Signal::Cpu => None,
        }
    }
}

/// The meter publishes quantities in milli-units.
fn round_milli(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_increase_over_window() {
        let mut w = WindowRate::new(30.0);
        assert_eq!(w.rate(), None);
        // 200/s for 60 s, then 1000/s.
        let mut total = 0.0;
        for t in 0..=60 {
            if t > 0 {
                total += 200.0;
            }
            w.observe(f64::from(t), total);
        }
        assert_eq!(w.rate(), Some(200.0));
        for t in 61..=75 {
            total += 1000.0;
            w.observe(f64::from(t), total);
        }
        // Half the window at 1000: (15 * 200 + 15 * 1000) / 30 = 600.
        assert_eq!(w.rate(), Some(600.0));
        for t in 76..=90 {
            total += 1000.0;
            w.observe(f64::from(t), total);
        }
        assert_eq!(w.rate(), Some(1000.0));
    }

    #[test]
    fn partial_window_uses_time_covered() {
        let mut w = WindowRate::new(30.0);
        w.observe(0.0, 0.0);
        w.observe(10.0, 500.0);
        assert_eq!(w.rate(), Some(50.0));
    }

    #[test]
    fn meter_signals() {
        let mut m = Meter::new(30.0, 1.0, 0.0);
        for t in 0..=40 {
            let t = f64::from(t);
            m.scrape(t, 100.0 * t, 300.0 * t);
        }
        assert_eq!(m.next_scrape(), 41.0);
        assert_eq!(m.reading(Signal::FirstAttempt), Some(100.0));
        assert_eq!(m.reading(Signal::Ingress), Some(300.0));
        assert_eq!(m.reading(Signal::Retry), Some(200.0));
    }
}
