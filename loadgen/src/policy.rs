//! Retry policies as pure state machines: time comes in as `now` (seconds from any fixed
//! origin, non-decreasing) and randomness as an `Rng` argument, so every decision is
//! reproducible in a unit test without I/O.
//!
//! - [`Backoff`]: how long to wait before retry n (exponential, capped, optional full jitter).
//! - [`RetryBudget`]: tower / Finagle TPS budget: over a sliding `ttl` window, retries may be at
//!   most `ratio` x first attempts plus a floor of `min_per_sec` x `ttl`.
//! - [`RetryQuota`]: the AWS SDK "standard" retry quota (token bucket), kit-defense's, which
//!   the models share.
//!
//! [`RetryPolicy`] combines the three for the client.

use std::str::FromStr;
use std::time::Duration;

pub use kit_defense::RetryQuota;
use rand::Rng;

/// Exponential backoff: retry n (1-based) waits `min(cap, base * 2^(n-1))`, or a uniform
/// draw in `[0, that]` with full jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub full_jitter: bool,
}

impl Backoff {
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        let doublings = retry.saturating_sub(1).min(62);
        let grown = self
            .base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.cap);
        let ceiling = grown.min(self.cap);
        if self.full_jitter {
            ceiling.mul_f64(rng.random::<f64>())
        } else {
            ceiling
        }
    }
}

impl FromStr for Backoff {
    type Err = String;

    /// `exp:BASE,CAP[,full-jitter]`, e.g. `exp:100ms,2s,full-jitter`.
    fn from_str(s: &str) -> Result<Backoff, String> {
        let spec = s
            .strip_prefix("exp:")
            .ok_or_else(|| format!("backoff `{s}`: expected exp:BASE,CAP[,full-jitter]"))?;
        let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
        let duration = |name: &str, v: &str| {
            humantime::parse_duration(v).map_err(|e| format!("backoff {name} `{v}`: {e}"))
        };
        let (base, cap, full_jitter) = match parts.as_slice() {
            [base, cap] => (duration("base", base)?, duration("cap", cap)?, false),
            [base, cap, "full-jitter"] => (duration("base", base)?, duration("cap", cap)?, true),
            [_, _, other] => return Err(format!("backoff option `{other}`: expected full-jitter")),
            _ => {
                return Err(format!(
                    "backoff `{s}`: expected exp:BASE,CAP[,full-jitter]"
                ));
            }
        };
        if base.is_zero() || cap < base {
            return Err(format!(
                "backoff `{s}`: need 0 < BASE <= CAP, got base {} and cap {}",
                humantime::format_duration(base),
                humantime::format_duration(cap)
            ));
        }
        Ok(Backoff {
            base,
            cap,
            full_jitter,
        })
    }
}

impl std::fmt::Display for Backoff {
    /// The `--backoff` syntax that [`Backoff::from_str`] reads back: `exp:BASE,CAP[,full-jitter]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exp:{},{}{}",
            kit_argv::duration(self.base),
            kit_argv::duration(self.cap),
            if self.full_jitter { ",full-jitter" } else { "" }
        )
    }
}

/// Sliding-window retry budget (tower's `TpsBudget`, Finagle's `RetryBudget`).
///
/// The window is `SLOTS` slots of `ttl / SLOTS`; a slot older than `ttl` is forgotten.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    ratio: f64,
    reserve: f64,
    slot_width: f64,
    /// (first attempts, retries) per slot; `slots[i]` covers slot number `base_slot + i`.
    slots: [(u64, u64); RetryBudget::SLOTS],
    newest_slot: i64,
}

impl RetryBudget {
    const SLOTS: usize = 10;

    /// `ratio`: retries per first attempt; `min_per_sec`: retries/s always allowed; `ttl`: window.
    pub fn new(ratio: f64, min_per_sec: f64, ttl: Duration) -> Result<RetryBudget, String> {
        if !(0.0..=1000.0).contains(&ratio) {
            return Err(format!("retry budget ratio {ratio} must be in 0..=1000"));
        }
        if !(min_per_sec >= 0.0 && min_per_sec.is_finite()) {
            return Err(format!("retry budget minimum {min_per_sec}/s must be >= 0"));
        }
        if ttl < Duration::from_millis(10) || ttl > Duration::from_secs(3600) {
            return Err(format!(
                "retry budget ttl {} must be between 10ms and 1h",
                humantime::format_duration(ttl)
            ));
        }
        Ok(RetryBudget {
            ratio,
            reserve: min_per_sec * ttl.as_secs_f64(),
            slot_width: ttl.as_secs_f64() / Self::SLOTS as f64,
            slots: [(0, 0); Self::SLOTS],
            newest_slot: 0,
        })
    }

    /// The tower / Finagle defaults SPEC lists: 20 % of requests, 10 retries/s minimum, 10 s ttl.
    pub fn default_ratio(ratio: f64) -> Result<RetryBudget, String> {
        RetryBudget::new(ratio, 10.0, Duration::from_secs(10))
    }

    fn slot(&mut self, now: f64) -> &mut (u64, u64) {
        let n = (now / self.slot_width).floor() as i64;
        // Forget slots that left the window (all of them after a long quiet spell).
        let stale = (n - self.newest_slot).clamp(0, Self::SLOTS as i64);
        for k in 1..=stale {
            self.slots[((self.newest_slot + k).rem_euclid(Self::SLOTS as i64)) as usize] = (0, 0);
        }
        self.newest_slot = self.newest_slot.max(n);
        &mut self.slots[n.rem_euclid(Self::SLOTS as i64) as usize]
    }

    /// A first attempt was sent: it earns `ratio` of a retry.
    pub fn deposit(&mut self, now: f64) {
        self.slot(now).0 += 1;
    }

    /// Retries still allowed in the window at `now`.
    pub fn balance(&mut self, now: f64) -> f64 {
        self.slot(now);
        let (firsts, retries) = self
            .slots
            .iter()
            .fold((0u64, 0u64), |(f, r), s| (f + s.0, r + s.1));
        self.reserve + self.ratio * firsts as f64 - retries as f64
    }

    /// Takes one retry from the budget if it has one.
    pub fn try_withdraw(&mut self, now: f64) -> bool {
        if self.balance(now) >= 1.0 {
            self.slot(now).1 += 1;
            true
        } else {
            false
        }
    }
}

/// Why a retry was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Budget,
    Quota,
}

/// A retry that may go: wait `delay` first; `quota_cost` is what the quota charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Permit {
    pub delay: Duration,
    pub quota_cost: Option<u32>,
}

/// The client's combined policy. Budget before quota: a retry the budget refuses costs no tokens.
#[derive(Debug, Clone, Default)]
pub struct RetryPolicy {
    pub backoff: Option<Backoff>,
    pub budget: Option<RetryBudget>,
    pub quota: Option<RetryQuota>,
}

impl RetryPolicy {
    pub fn first_attempt(&mut self, now: f64) {
        if let Some(b) = &mut self.budget {
            b.deposit(now);
        }
    }

    /// May retry number `retry` (1-based) go, and after how long?
    pub fn permit_retry(
        &mut self,
        now: f64,
        retry: u32,
        after_timeout: bool,
        rng: &mut impl Rng,
    ) -> Result<Permit, Denied> {
        if let Some(b) = &mut self.budget
            && !b.try_withdraw(now)
        {
            return Err(Denied::Budget);
        }
        let quota_cost = match &mut self.quota {
            Some(q) => Some(q.acquire(after_timeout).ok_or(Denied::Quota)?),
            None => None,
        };
        let delay = self.backoff.map_or(Duration::ZERO, |b| b.delay(retry, rng));
        Ok(Permit { delay, quota_cost })
    }

    pub fn on_success(&mut self, last_quota_cost: Option<u32>) {
        if let Some(q) = &mut self.quota {
            q.on_success(last_quota_cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_up_to_cap() {
        let b: Backoff = "exp:100ms,1s".parse().unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let delays: Vec<Duration> = (1..=6).map(|n| b.delay(n, &mut rng)).collect();
        assert_eq!(
            delays,
            [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]
        );
        assert_eq!(
            b.delay(1000, &mut rng),
            1000 * MS,
            "huge retry numbers stay capped"
        );
    }

    #[test]
    fn full_jitter_is_uniform_below_the_ceiling() {
        let b: Backoff = "exp:100ms,1s,full-jitter".parse().unwrap();
        let mut rng = SmallRng::seed_from_u64(2);
        let draws: Vec<f64> = (0..4000)
            .map(|_| b.delay(3, &mut rng).as_secs_f64())
            .collect();
        assert!(draws.iter().all(|&d| (0.0..=0.4).contains(&d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.2).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn backoff_parse_errors() {
        for bad in [
            "lin:1s,2s",
            "exp:1s",
            "exp:0s,1s",
            "exp:2s,1s",
            "exp:1s,2s,half",
            "exp:x,1s",
        ] {
            let e = bad.parse::<Backoff>().unwrap_err();
            assert!(e.contains("backoff"), "{bad}: {e}");
        }
    }

    #[test]
    fn budget_allows_ratio_of_first_attempts_plus_minimum() {
        let mut b = RetryBudget::new(0.2, 1.0, Duration::from_secs(10)).unwrap();
        // Reserve: 1/s x 10 s = 10 retries with no traffic at all.
        let granted = (0..100).filter(|_| b.try_withdraw(0.0)).count();
        assert_eq!(granted, 10);
        // 100 first attempts earn 20 more.
        for _ in 0..100 {
            b.deposit(0.5);
        }
        let granted = (0..100).filter(|_| b.try_withdraw(0.5)).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn budget_window_slides() {
        let mut b = RetryBudget::new(0.5, 0.0, Duration::from_secs(10)).unwrap();
        for _ in 0..10 {
            b.deposit(0.0);
        }
        assert_eq!((0..10).filter(|_| b.try_withdraw(1.0)).count(), 5);
        assert!(!b.try_withdraw(9.9), "still inside the window, spent");
        // At 10.05 s the slot of t=0 (deposits and the withdrawals of t=1 s stay) is gone.
        assert!(
            b.balance(10.05) < 0.0,
            "withdrawals at 1 s still count, deposits gone"
        );
        assert!(
            b.balance(11.05).abs() < 1e-9,
            "everything forgotten after ttl"
        );
        for _ in 0..4 {
            b.deposit(100.0);
        }
        assert_eq!((0..10).filter(|_| b.try_withdraw(100.0)).count(), 2);
    }

    #[test]
    fn budget_rejects_bad_parameters() {
        assert!(RetryBudget::new(-0.1, 1.0, Duration::from_secs(10)).is_err());
        assert!(RetryBudget::new(0.2, -1.0, Duration::from_secs(10)).is_err());
        assert!(RetryBudget::new(0.2, 1.0, Duration::ZERO).is_err());
    }

    #[test]
    fn the_quota_charges_a_retry_after_a_timeout_double_and_refuses_when_empty() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut p = RetryPolicy {
            quota: Some(RetryQuota::aws_standard()),
            ..RetryPolicy::default()
        };
        let paid = |p: &mut RetryPolicy, after_timeout, rng: &mut SmallRng| {
            p.permit_retry(0.0, 1, after_timeout, rng)
                .map(|permit| permit.quota_cost)
        };
        assert_eq!(paid(&mut p, false, &mut rng), Ok(Some(5)));
        assert_eq!(paid(&mut p, true, &mut rng), Ok(Some(10)));
        p.on_success(Some(10));
        p.on_success(None);
        assert_eq!(p.quota.as_ref().unwrap().available(), 496);
        // 49 more timeout retries leave 6 tokens: one more plain retry, then none.
        for _ in 0..49 {
            assert!(paid(&mut p, true, &mut rng).is_ok());
        }
        assert_eq!(paid(&mut p, true, &mut rng), Err(Denied::Quota));
        assert_eq!(paid(&mut p, false, &mut rng), Ok(Some(5)));
        assert_eq!(paid(&mut p, false, &mut rng), Err(Denied::Quota));
    }

    #[test]
    fn combined_policy_checks_budget_before_quota() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut p = RetryPolicy {
            backoff: Some("exp:10ms,40ms".parse().unwrap()),
            budget: Some(RetryBudget::new(0.0, 0.1, Duration::from_secs(10)).unwrap()),
            quota: Some(RetryQuota::aws_standard()),
        };
        p.first_attempt(0.0);
        let permit = p.permit_retry(0.0, 2, true, &mut rng).unwrap();
        assert_eq!(
            permit,
            Permit {
                delay: 20 * MS,
                quota_cost: Some(10)
            }
        );
        assert_eq!(p.permit_retry(0.0, 1, true, &mut rng), Err(Denied::Budget));
        assert_eq!(
            p.quota.as_ref().unwrap().available(),
            490,
            "refused by budget: no tokens"
        );
        p.on_success(permit.quota_cost);
        assert_eq!(p.quota.as_ref().unwrap().available(), 500);
        let mut plain = RetryPolicy::default();
        assert_eq!(
            plain.permit_retry(0.0, 1, false, &mut rng),
            Ok(Permit {
                delay: Duration::ZERO,
                quota_cost: None
            })
        );
    }
}
