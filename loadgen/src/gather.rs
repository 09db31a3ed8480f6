//! The answer gather: a shard about to sleep on its reactor right after sending a batch naps
//! first, for up to `--answer-gather` and never past its next arrival, so that the batch's
//! answers are read after one `epoll_wait` instead of one each.
//!
//! Why: a shard that sends a batch of arrivals and parks is woken by the first answer, reads
//! it, parks again, and is woken by the next: against a fast server at 10,000/s that was about
//! 0.65 `epoll_wait` per request, where oha (which spends more CPU per answer, so more answers
//! wait for it) makes 0.4. epoll has no "wait for at least n events", so the wait for more
//! answers is a nap (one `clock_nanosleep`) before the park. With the nap ending at the next
//! arrival's due time, that arrival's timer and the batch's answers come in one `epoll_wait`.
//!
//! What it costs: nothing in the latencies, which end at the kernel's receive time of the
//! answer (`SO_TIMESTAMPNS`, see [`crate::client::stamp_receive_times`]), not at the read.
//! Arrivals keep their schedule. A connection comes back to the pool, and an attempt timeout
//! fires, up to one nap late. A nap that gathers fewer than two answers (a slow server) saved
//! nothing, so the next batches skip it, for twice as many each time it happens again (up to
//! [`MAX_SKIP`]).
//!
//! [`Gather`] is the policy, a pure state machine fed with the time; the thread-local
//! functions below are its wiring to the shard's runtime (`on_thread_park`) and its exchanges.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Batches left without a nap, at most, after naps that kept gathering fewer than two answers.
pub const MAX_SKIP: u32 = 64;
/// A nap shorter than this is not worth its system call.
const MIN_NAP: Duration = Duration::from_micros(5);

/// When a shard naps before it parks.
#[derive(Debug, Default)]
pub struct Gather {
    window: Duration,
    /// Requests written since the last park.
    sent: u32,
    /// Answers read since the last park.
    answered: u32,
    /// When the shard's next arrival is due, while it waits for one.
    next_due: Option<Instant>,
    /// The last park napped, and the answers read since tell whether that paid.
    napped: bool,
    /// Batches still to send without a nap, and how many the next fruitless nap skips.
    skip: u32,
    backoff: u32,
}

impl Gather {
    /// `window` zero: never nap.
    pub fn new(window: Duration) -> Gather {
        Gather {
            window,
            ..Gather::default()
        }
    }

    pub fn sent(&mut self) {
        self.sent += 1;
    }

    pub fn answered(&mut self) {
        self.answered += 1;
    }

    pub fn next_due(&mut self, at: Option<Instant>) {
        self.next_due = at;
    }

    /// The shard is about to park at `now`: how long to nap first, if at all.
    pub fn nap(&mut self, now: Instant) -> Option<Duration> {
        let sent = std::mem::take(&mut self.sent);
        let answered = std::mem::take(&mut self.answered);
        if std::mem::take(&mut self.napped) {
            if answered >= 2 {
                self.backoff = 0;
            } else {
                self.backoff = (self.backoff * 2).clamp(1, MAX_SKIP);
                self.skip = self.backoff;
            }
        }
        // One request sent: its answer costs one wake-up with or without a nap.
        if sent < 2 || self.window.is_zero() {
            return None;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        let until_due = self
            .next_due
            .map_or(self.window, |due| due.saturating_duration_since(now));
        let nap = self.window.min(until_due);
        self.napped = nap >= MIN_NAP;
        self.napped.then_some(nap)
    }
}

thread_local! {
    // Each shard is one thread with its own runtime: one gather per shard.
    static GATHER: RefCell<Gather> = RefCell::default();
}

/// Sets the shard thread's window; until then it never naps.
pub fn init(window: Duration) {
    GATHER.set(Gather::new(window));
}

/// A request was written.
pub fn sent() {
    GATHER.with_borrow_mut(Gather::sent);
}

/// An answer was read.
pub fn answered() {
    GATHER.with_borrow_mut(Gather::answered);
}

/// The shard waits for an arrival due at `at` (`None`: it does not).
pub fn next_due(at: Option<Instant>) {
    GATHER.with_borrow_mut(|g| g.next_due(at));
}

/// The runtime's `on_thread_park` hook: naps if the gather says so.
pub fn before_park() {
    if let Some(nap) = GATHER.with_borrow_mut(|g| g.nap(Instant::now())) {
        std::thread::sleep(nap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_micros(50);

    /// `n` requests sent, `k` answered, then a park at `now`.
    fn batch(g: &mut Gather, n: u32, k: u32, now: Instant) -> Option<Duration> {
        (0..n).for_each(|_| g.sent());
        (0..k).for_each(|_| g.answered());
        g.nap(now)
    }

    #[test]
    fn naps_after_a_batch_but_not_after_one_request_or_with_no_window() {
        let t = Instant::now();
        let mut g = Gather::new(W);
        assert_eq!(batch(&mut g, 1, 0, t), None);
        assert_eq!(batch(&mut g, 0, 0, t), None);
        assert_eq!(batch(&mut g, 10, 0, t), Some(W));
        let mut off = Gather::new(Duration::ZERO);
        assert_eq!(batch(&mut off, 10, 0, t), None);
    }

    #[test]
    fn a_nap_never_runs_past_the_next_arrival() {
        let t = Instant::now();
        let mut g = Gather::new(W);
        g.next_due(Some(t + Duration::from_micros(20)));
        assert_eq!(batch(&mut g, 10, 0, t), Some(Duration::from_micros(20)));
        // Gathered answers: the nap paid.
        g.next_due(Some(t + Duration::from_micros(2)));
        assert_eq!(batch(&mut g, 0, 10, t), None);
        assert_eq!(batch(&mut g, 10, 0, t), None, "too short to be worth it");
        g.next_due(Some(t - Duration::from_micros(30)));
        assert_eq!(batch(&mut g, 10, 0, t), None, "overdue");
        g.next_due(None);
        assert_eq!(batch(&mut g, 10, 0, t), Some(W));
    }

    #[test]
    fn fruitless_naps_are_skipped_for_longer_each_time_and_resume_once_one_pays() {
        let t = Instant::now();
        let mut g = Gather::new(W);
        assert_eq!(batch(&mut g, 10, 0, t), Some(W));
        // A slow server: one answer came in the nap's wake-up. Skip 1, then nap again.
        assert_eq!(batch(&mut g, 10, 1, t), None);
        assert_eq!(batch(&mut g, 10, 0, t), Some(W));
        // Fruitless again: skip 2.
        assert_eq!(batch(&mut g, 10, 0, t), None);
        assert_eq!(batch(&mut g, 10, 0, t), None);
        assert_eq!(batch(&mut g, 10, 0, t), Some(W));
        // This one gathers: no skip from now on.
        assert_eq!(batch(&mut g, 10, 10, t), Some(W));
        assert_eq!(batch(&mut g, 10, 10, t), Some(W));
        // The skip never grows past MAX_SKIP.
        let mut skipped = 0;
        for _ in 0..10_000 {
            match batch(&mut g, 10, 0, t) {
                Some(_) => skipped = 0,
                None => skipped += 1,
            }
            assert!(skipped <= MAX_SKIP);
        }
    }
}
