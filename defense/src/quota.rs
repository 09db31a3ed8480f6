//! The AWS SDKs' retry modes ("Retry behavior", AWS SDKs and Tools reference guide; botocore
//! 1.x `retries/standard.py`, `adaptive.py`, `throttling.py`, `bucket.py`):
//! - standard: [`RetryQuota`], a bucket of 500 tokens per client; a retry costs 5 (10 after a
//!   timeout) and is not sent when the bucket cannot pay; a success puts back what its last
//!   retry paid, or 1 when it needed none.
//! - adaptive: the same quota, and [`AdaptiveRate`], a client-side rate limiter (a token bucket
//!   whose fill rate follows CUBIC) that starts only after the first throttling response
//!   and from then on makes every attempt, first ones too, wait for a token. Only throttling
//!   responses lower its rate: timeouts do not.

/// The SDKs' published quota: 500 tokens, a retry costs 5, a retry after a timeout 10, a
/// success that needed no retry refunds 1. The client's [`RetryQuota`] and the fluid model's
/// flow of tokens both read these.
pub const AWS_STANDARD: QuotaCosts = QuotaCosts {
    capacity: 500,
    retry_cost: 5,
    timeout_cost: 10,
    success_refund: 1,
};

/// A retry quota's bucket and prices, tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaCosts {
    pub capacity: u32,
    pub retry_cost: u32,
    pub timeout_cost: u32,
    pub success_refund: u32,
}

/// The AWS SDK standard-mode retry quota.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryQuota {
    capacity: u32,
    available: u32,
    retry_cost: u32,
    timeout_cost: u32,
    success_refund: u32,
}

impl RetryQuota {
    /// A full bucket at [`AWS_STANDARD`]'s prices.
    pub fn aws_standard() -> RetryQuota {
        let c = AWS_STANDARD;
        RetryQuota {
            capacity: c.capacity,
            available: c.capacity,
            retry_cost: c.retry_cost,
            timeout_cost: c.timeout_cost,
            success_refund: c.success_refund,
        }
    }

    pub fn available(&self) -> u32 {
        self.available
    }

    /// Pays for a retry; `None` when the bucket cannot pay (no retry).
    pub fn acquire(&mut self, after_timeout: bool) -> Option<u32> {
        let cost = if after_timeout {
            self.timeout_cost
        } else {
            self.retry_cost
        };
        self.available = self.available.checked_sub(cost)?;
        Some(cost)
    }

    /// A request succeeded; `last_retry_cost` is what its last retry paid, if it retried.
    pub fn on_success(&mut self, last_retry_cost: Option<u32>) {
        let refund = last_retry_cost.unwrap_or(self.success_refund);
        self.available = (self.available + refund).min(self.capacity);
    }
}

/// The adaptive mode's client rate limiter, with the SDK's constants: CUBIC with scale 0.4 and
/// beta 0.7, a sending rate measured in half-second buckets smoothed by 0.8, a fill rate never
/// under 0.5/s, a new rate at most twice the measured one.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveRate {
    enabled: bool,
    // CUBIC.
    w_max: f64,
    k: f64,
    last_fail: f64,
    // The token bucket: `tokens` may go negative, each unit a reservation waiting for a fill.
    fill_rate: f64,
    capacity: f64,
    tokens: f64,
    last_fill: f64,
    // The measured rate of answers.
    measured: f64,
    bucket: f64,
    count: f64,
}

const SCALE: f64 = 0.4;
const BETA: f64 = 0.7;
const SMOOTHING: f64 = 0.8;
const BUCKET_S: f64 = 0.5;
const MIN_FILL: f64 = 0.5;
const MAX_ADJUST: f64 = 2.0;

impl AdaptiveRate {
    pub fn new(now: f64) -> AdaptiveRate {
        let mut r = AdaptiveRate {
            enabled: false,
            w_max: 0.0,
            k: 0.0,
            last_fail: now,
            fill_rate: MIN_FILL,
            capacity: 1.0,
            tokens: 0.0,
            last_fill: now,
            measured: 0.0,
            bucket: (now / BUCKET_S).floor() * BUCKET_S,
            count: 0.0,
        };
        r.k = r.zero_point();
        r
    }

    /// Whether a throttling response has turned the limiter on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The limiter's current rate, attempts per second.
    pub fn rate(&self) -> f64 {
        self.fill_rate
    }

    fn zero_point(&self) -> f64 {
        (self.w_max * (1.0 - BETA) / SCALE).cbrt()
    }

    fn refill(&mut self, now: f64) {
        let dt = (now - self.last_fill).max(0.0);
        self.tokens = (self.tokens + dt * self.fill_rate).min(self.capacity);
        self.last_fill = now;
    }

    /// An attempt wants to go at `now`: the delay until its token, or `None` if that is more
    /// than `max_wait_s` (the SDK would block the caller; an open-loop client gives up).
    pub fn acquire(&mut self, now: f64, max_wait_s: f64) -> Option<f64> {
        if !self.enabled {
            return Some(0.0);
        }
        self.refill(now);
        let wait = if self.tokens >= 1.0 {
            0.0
        } else {
            (1.0 - self.tokens) / self.fill_rate
        };
        if wait > max_wait_s {
            return None;
        }
        self.tokens -= 1.0;
        Some(wait)
    }

    /// `amount` attempts want to go within a step ending at `now` (the fluid model's flow):
    /// how many get a token waiting at most `max_wait_s`.
    pub fn acquire_flow(&mut self, now: f64, amount: f64, max_wait_s: f64) -> f64 {
        if !self.enabled {
            return amount;
        }
        self.refill(now);
        let sent = amount.min((self.tokens + self.fill_rate * max_wait_s).max(0.0));
        self.tokens -= sent;
        sent
    }

    /// `answers` answers came in the step ending at `now` (the fluid model's flow), throttling
    /// ones among them if `throttled`: one rate update for the step, as for its last answer.
    pub fn on_responses(&mut self, now: f64, answers: f64, throttled: bool) {
        if answers <= 0.0 {
            return;
        }
        self.count += answers - 1.0;
        self.on_response(now, throttled);
    }

    /// An answer came at `now`; `throttled` if it was a throttling response.
    pub fn on_response(&mut self, now: f64, throttled: bool) {
        let measured = self.measure(now);
        let new_rate = if throttled {
            let base = if self.enabled {
                measured.min(self.fill_rate)
            } else {
                measured
            };
            self.enabled = true;
            self.w_max = base;
            self.k = self.zero_point();
            self.last_fail = now;
            base * BETA
        } else {
            SCALE * (now - self.last_fail - self.k).powi(3) + self.w_max
        };
        self.set_rate(now, new_rate.min(MAX_ADJUST * measured));
    }

    fn measure(&mut self, now: f64) -> f64 {
        self.count += 1.0;
        let bucket = (now / BUCKET_S).floor() * BUCKET_S;
        if bucket > self.bucket {
            let rate = self.count / (bucket - self.bucket);
            self.measured = rate * SMOOTHING + self.measured * (1.0 - SMOOTHING);
            self.count = 0.0;
            self.bucket = bucket;
        }
        self.measured
    }

    fn set_rate(&mut self, now: f64, rate: f64) {
        self.refill(now);
        self.fill_rate = rate.max(MIN_FILL);
        self.capacity = rate.max(1.0);
        self.tokens = self.tokens.min(self.capacity);
    }
}

/// Whether an HTTP status is a throttling response for the adaptive mode. The SDK reads AWS
/// error codes (`Throttling`, `SlowDown`, ...); a service the kit tests has none, so 429 and
/// 503 (what a shedding pod answers) stand for them.
pub fn is_throttling_status(status: u16) -> bool {
    status == 429 || status == 503
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_pays_and_refunds_as_the_sdk_does() {
        let mut q = RetryQuota::aws_standard();
        for _ in 0..50 {
            assert_eq!(q.acquire(true), Some(10));
        }
        assert_eq!(q.available(), 0);
        assert_eq!(q.acquire(false), None, "an empty bucket sends no retry");
        q.on_success(Some(10));
        q.on_success(None);
        assert_eq!(q.available(), 11);
        assert_eq!(q.acquire(false), Some(5));
    }

    #[test]
    fn the_limiter_waits_for_a_throttling_response_and_timeouts_never_start_it() {
        let mut r = AdaptiveRate::new(0.0);
        for i in 0..1000 {
            let now = f64::from(i) * 0.01;
            assert_eq!(r.acquire(now, 1.0), Some(0.0));
            r.on_response(now, false);
        }
        assert!(!r.enabled());
        // 100 answers/s measured; a throttle cuts the rate to 0.7 of it.
        r.on_response(10.0, true);
        assert!(r.enabled());
        assert!((r.rate() - 70.0).abs() < 10.0, "{}", r.rate());
        // Attempts now wait for tokens: of 200 wanted in one instant, a full bucket's 70
        // go and 7 more within a wait of 0.1 s; the rest give up.
        let sent = (0..200).filter(|_| r.acquire(10.0, 0.1).is_some()).count();
        assert!((70..=85).contains(&sent), "{sent}");
    }

    #[test]
    fn cubic_recovers_to_the_rate_it_was_cut_from() {
        let mut r = AdaptiveRate::new(0.0);
        for i in 0..500 {
            r.on_response(f64::from(i) * 0.01, false);
        }
        r.on_response(5.0, true);
        let cut = r.rate();
        // After K seconds without a throttle the cubic is back at w_max.
        let k = r.k;
        for i in 1..=200 {
            r.on_response(5.0 + k * f64::from(i) / 200.0, false);
        }
        assert!(
            r.rate() > cut / BETA * 0.95,
            "{} vs {}",
            r.rate(),
            cut / BETA
        );
        assert!(is_throttling_status(503) && !is_throttling_status(504));
    }
}
