//! A retry budget as tower and Finagle keep it: over a sliding `ttl`, retries may be at most
//! `ratio` x first attempts plus `min_per_s` x `ttl`. Pure state: time is an input.

use crate::experiment::RetryBudget;

const BUCKETS: usize = 10;

#[derive(Debug, Clone)]
pub(crate) struct BudgetState {
    budget: RetryBudget,
    width: f64,
    /// (first attempts, retries) per bucket of `ttl / BUCKETS`.
    buckets: [(f64, f64); BUCKETS],
    /// Index of the bucket that `current_start` opens.
    current: usize,
    current_start: f64,
}

impl BudgetState {
    pub(crate) fn new(budget: RetryBudget, now: f64) -> BudgetState {
        BudgetState {
            budget,
            width: budget.ttl_s / BUCKETS as f64,
            buckets: [(0.0, 0.0); BUCKETS],
            current: 0,
            current_start: now,
        }
    }

    fn roll(&mut self, now: f64) {
        let mut steps = 0;
        while now >= self.current_start + self.width && steps <= BUCKETS {
            self.current = (self.current + 1) % BUCKETS;
            self.buckets[self.current] = (0.0, 0.0);
            self.current_start += self.width;
            steps += 1;
        }
        if now >= self.current_start + self.width {
            // Idle for longer than the ttl: everything has expired.
            let skipped = ((now - self.current_start) / self.width).floor();
            self.current_start += skipped * self.width;
        }
    }

    /// A first attempt was sent.
    pub(crate) fn deposit(&mut self, now: f64) {
        self.roll(now);
        self.buckets[self.current].0 += 1.0;
    }

    /// Asks to send a retry; counts it when allowed.
    pub(crate) fn withdraw(&mut self, now: f64) -> bool {
        self.roll(now);
        let (firsts, retries) = self
            .buckets
            .iter()
            .fold((0.0, 0.0), |(f, r), b| (f + b.0, r + b.1));
        let allowed =
            retries < self.budget.ratio * firsts + self.budget.min_per_s * self.budget.ttl_s;
        if allowed {
            self.buckets[self.current].1 += 1.0;
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_capped_at_ratio_of_first_attempts() {
        let mut b = BudgetState::new(
            RetryBudget {
                ratio: 0.2,
                min_per_s: 0.0,
                ttl_s: 10.0,
            },
            0.0,
        );
        for i in 0..100 {
            b.deposit(f64::from(i) * 0.01);
        }
        let allowed = (0..100).filter(|_| b.withdraw(1.0)).count();
        assert_eq!(allowed, 20);
        // After the ttl the deposits have expired.
        assert!(!b.withdraw(12.0));
    }

    #[test]
    fn minimum_allows_retries_without_traffic() {
        let mut b = BudgetState::new(
            RetryBudget {
                ratio: 0.2,
                min_per_s: 1.0,
                ttl_s: 10.0,
            },
            0.0,
        );
        let allowed = (0..100).filter(|_| b.withdraw(0.5)).count();
        assert_eq!(allowed, 10);
    }
}
