//! [`DistinctArrivals`]: counting requests by id rather than by header.
//!
//! A retrying gateway (HAProxy `retries` + `retry-on`, nginx
//! `proxy_next_upstream`) resends the client's request bytes unchanged: the
//! pods see the same `x-request-id` with `x-attempt: 0` up to three times,
//! possibly on three pods. No proxy marks its own retries, so the header
//! count of attempt 0 (the pods' `retrydebt_arrivals_total{attempt="0"}`)
//! counts a gateway's retries as first attempts. Only the request id tells
//! them apart, and only across every pod: so the pods list their arrivals
//! (`GET /arrivals`) and this state machine counts each id once.
//!
//! Pure: no I/O, time is an argument.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::{Duration, Instant};

/// A request id, kept as a 64-bit hash: 8 bytes whatever the id's length.
/// Two different ids collide with probability about `n^2 / 2^65` among `n`
/// remembered ids (1e-7 at a million): the later one would be taken for a
/// copy and not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdKey(pub u64);

impl IdKey {
    pub fn of(id: &str) -> Self {
        // SipHash with fixed keys: the same id hashes alike on every round.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        IdKey(h.finish())
    }
}

/// One entry of a pod's arrival log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub attempt: u32,
    /// `None`: the request carried no `x-request-id`; distinct from every other.
    pub id: Option<IdKey>,
}

/// Cumulative counts since the state machine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DistinctCounts {
    /// Distinct `(id, 0)` pairs: logical requests' first attempts, each once
    /// however many copies reached however many pods.
    pub first_attempts: u64,
    /// Distinct `(id, attempt)` pairs: attempts the clients made.
    pub client_attempts: u64,
    /// Every entry fed: what the pods received.
    pub arrivals: u64,
    /// Ids forgotten before `retention` because `max_ids` were remembered.
    pub evicted_early: u64,
}

/// What feeding one arrival counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// A new `(id, attempt)` pair.
    pub client_attempt: bool,
    /// A new `(id, 0)` pair.
    pub first_attempt: bool,
}

/// What is remembered of one id: which attempts were seen.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// Bit `min(attempt, 63)`: attempts 63 and above share one bit.
    attempts: u64,
}

/// The keys are already hashes: use them as they are.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Distinct counting over a time-bounded memory of ids.
///
/// An id is remembered for `retention` after it was first fed, then
/// forgotten (or earlier, oldest first, once `max_ids` are remembered). The
/// retention must cover a request's whole life, so that every copy and every
/// retry of it is fed while its id is still known: in the kit that is
/// `(R + 1) tau_out` = 30 s (a gateway retries within one client attempt),
/// in a user's stack a few client timeouts with backoff. A copy fed after its
/// id was forgotten counts again. Forgetting by age is what keeps memory
/// bounded: about 70 bytes per id (measured) for `rate x retention` ids (`max_ids`
/// bounds it whatever the rate).
///
/// Counting rules (see [`DistinctCounts`]): a new `(id, attempt)` pair is a
/// client attempt, and a first attempt if `attempt` is 0. An id first seen
/// with attempt 1 (its attempt 0 came before the retention, or was lost from
/// a pod's log) is no first attempt. Pairs rather than "new id with attempt
/// 0" because the meter feeds pods one after another: within a round a
/// retry on one pod can be fed before the original on another.
#[derive(Debug)]
pub struct DistinctArrivals {
    retention: Duration,
    max_ids: usize,
    seen: HashMap<IdKey, Seen, BuildHasherDefault<IdHasher>>,
    /// Ids in the order they were first fed, with that time.
    order: VecDeque<(Instant, IdKey)>,
    /// Time never runs back: an earlier `now` is taken as this.
    latest: Option<Instant>,
    counts: DistinctCounts,
}

impl DistinctArrivals {
    /// `max_ids`: at least 1.
    pub fn new(retention: Duration, max_ids: usize) -> Self {
        Self {
            retention,
            max_ids: max_ids.max(1),
            seen: HashMap::default(),
            order: VecDeque::new(),
            latest: None,
            counts: DistinctCounts::default(),
        }
    }

    pub fn counts(&self) -> DistinctCounts {
        self.counts
    }

    /// Ids remembered now.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }

    fn clock(&mut self, now: Instant) -> Instant {
        let now = self.latest.map_or(now, |l| l.max(now));
        self.latest = Some(now);
        now
    }

    /// Forgets ids first fed more than `retention` before `now`.
    pub fn expire(&mut self, now: Instant) {
        let now = self.clock(now);
        let Some(oldest) = now.checked_sub(self.retention) else {
            return;
        };
        while let Some(&(at, key)) = self.order.front() {
            if at >= oldest {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&key);
        }
    }

    /// Feeds one arrival read at `now`.
    pub fn feed(&mut self, now: Instant, arrival: Arrival) -> Counted {
        let now = self.clock(now);
        self.counts.arrivals += 1;
        let new_pair = match arrival.id {
            None => true,
            Some(key) => {
                let bit = 1u64 << arrival.attempt.min(63);
                match self.seen.get_mut(&key) {
                    Some(seen) => {
                        let new = seen.attempts & bit == 0;
                        seen.attempts |= bit;
                        new
                    }
                    None => {
                        if self.seen.len() >= self.max_ids
                            && let Some((_, old)) = self.order.pop_front()
                        {
                            self.seen.remove(&old);
                            self.counts.evicted_early += 1;
                        }
                        self.seen.insert(key, Seen { attempts: bit });
                        self.order.push_back((now, key));
                        true
                    }
                }
            }
        };
        let counted = Counted {
            client_attempt: new_pair,
            first_attempt: new_pair && arrival.attempt == 0,
        };
        self.counts.client_attempts += u64::from(counted.client_attempt);
        self.counts.first_attempts += u64::from(counted.first_attempt);
        counted
    }

    /// Feeds a pod's entries read at `now`, after forgetting what has aged
    /// out; returns the `(first attempts, client attempts)` they added.
    pub fn feed_all(
        &mut self,
        now: Instant,
        arrivals: impl IntoIterator<Item = Arrival>,
    ) -> (u64, u64) {
        self.expire(now);
        let mut added = (0, 0);
        for a in arrivals {
            let c = self.feed(now, a);
            added.0 += u64::from(c.first_attempt);
            added.1 += u64::from(c.client_attempt);
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETENTION: Duration = Duration::from_secs(600);

    fn a(attempt: u32, id: &str) -> Arrival {
        Arrival {
            attempt,
            id: Some(IdKey::of(id)),
        }
    }

    fn counts(first_attempts: u64, client_attempts: u64, arrivals: u64) -> DistinctCounts {
        DistinctCounts {
            first_attempts,
            client_attempts,
            arrivals,
            evicted_early: 0,
        }
    }

    #[test]
    fn a_gateways_three_copies_on_three_pods_are_one_first_attempt() {
        let t0 = Instant::now();
        let mut d = DistinctArrivals::new(RETENTION, 1 << 20);
        // The same bytes reach pods a, b and c (read in that order, one round apart).
        for (i, _pod) in ["a", "b", "c"].iter().enumerate() {
            d.feed_all(t0 + Duration::from_secs(i as u64), [a(0, "r1")]);
        }
        assert_eq!(d.counts(), counts(1, 1, 3));
        assert_eq!(d.remembered(), 1);
    }

    #[test]
    fn a_client_retry_is_a_client_attempt_not_a_first_attempt() {
        let t0 = Instant::now();
        let mut d = DistinctArrivals::new(RETENTION, 1 << 20);
        d.feed_all(t0, [a(0, "r1"), a(0, "r2")]);
        d.feed_all(t0 + Duration::from_secs(10), [a(1, "r1"), a(1, "r1")]);
        d.feed_all(t0 + Duration::from_secs(20), [a(2, "r1")]);
        assert_eq!(d.counts(), counts(2, 4, 5));
        // Without an id every entry is distinct.
        let anonymous = Arrival {
            attempt: 0,
            id: None,
        };
        d.feed_all(t0 + Duration::from_secs(21), [anonymous, anonymous]);
        assert_eq!(d.counts(), counts(4, 6, 7));
    }

    #[test]
    fn an_id_first_seen_at_attempt_1_is_no_first_attempt() {
        let t0 = Instant::now();
        let mut d = DistinctArrivals::new(RETENTION, 1 << 20);
        d.feed_all(t0, [a(1, "r1"), a(1, "r1")]);
        assert_eq!(d.counts(), counts(0, 1, 2));
        // Fed out of order (another pod read later): the original still counts once.
        d.feed_all(t0, [a(0, "r1"), a(0, "r1")]);
        assert_eq!(d.counts(), counts(1, 2, 4));
    }

    #[test]
    fn ids_are_forgotten_after_the_retention() {
        let t0 = Instant::now();
        let retention = Duration::from_secs(60);
        let mut d = DistinctArrivals::new(retention, 1 << 20);
        d.feed_all(t0, [a(0, "old")]);
        d.feed_all(t0 + Duration::from_secs(30), [a(0, "new")]);
        // At t0 + 60 s "old" is exactly one retention old: still known.
        d.feed_all(t0 + retention, [a(0, "old")]);
        assert_eq!((d.counts().first_attempts, d.remembered()), (2, 2));
        // Just after, it is forgotten: a copy now counts again; "new" is still known.
        d.feed_all(
            t0 + retention + Duration::from_millis(1),
            [a(0, "old"), a(0, "new")],
        );
        assert_eq!(d.counts(), counts(3, 3, 5));
        d.expire(t0 + Duration::from_secs(200));
        assert_eq!(d.remembered(), 0);
        // Time running back is taken as no time passing.
        d.feed_all(t0, [a(0, "x")]);
        d.expire(t0 + Duration::from_secs(200));
        assert_eq!(d.remembered(), 1);
    }

    #[test]
    fn max_ids_bounds_memory_oldest_first() {
        let t0 = Instant::now();
        let mut d = DistinctArrivals::new(RETENTION, 2);
        d.feed_all(t0, [a(0, "r1"), a(0, "r2"), a(0, "r3")]);
        assert_eq!(d.remembered(), 2);
        assert_eq!(d.counts().evicted_early, 1);
        // r1 was forgotten early (counts again), r3 is known.
        d.feed_all(t0, [a(0, "r3"), a(0, "r1")]);
        assert_eq!(d.counts().first_attempts, 4);
    }

    #[test]
    fn attempts_from_63_up_share_one_bit() {
        let mut d = DistinctArrivals::new(RETENTION, 8);
        let t0 = Instant::now();
        d.feed_all(t0, [a(62, "r"), a(63, "r"), a(64, "r"), a(u32::MAX, "r")]);
        assert_eq!(d.counts(), counts(0, 2, 4));
    }
}
