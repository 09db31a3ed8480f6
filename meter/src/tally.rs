//! [`Tally`]: what the scrape loop keeps between rounds, pure (time is an
//! argument): the pods' counter windows, the per-pod cursors into their
//! arrival logs, the distinct count, and the distinct count's own window.
//!
//! The distinct counts go through the same [`RateWindow`] as the pods'
//! counters, as per-pod counter series: each new distinct pair is credited to
//! the pod on which the meter read its first copy, and each pod's credit is
//! sampled when the pod answers, at the same instant as its counters. So
//! windows, per-pod spans, a pod leaving the list or going silent, coverage
//! and publication behave exactly as for the header count, and without a
//! gateway (every id once) the two agree pod by pod. (One series for the
//! whole meter would keep a departed pod's arrivals in the window where its
//! counters drop out at once.)

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::arrivals::{Cursor, ReadKind};
use crate::distinct::{DistinctArrivals, DistinctCounts};
use crate::rate::{ArrivalCounts, RateWindow, Rates};
use crate::scrape::PodScrape;

#[derive(Debug)]
pub struct Tally {
    pods: RateWindow,
    /// Per pod: distinct first attempts and client attempts credited to it.
    distinct_window: RateWindow,
    distinct: DistinctArrivals,
    cursors: HashMap<String, Cursor>,
    /// Per pod, cumulative: (first attempts, client attempts) credited.
    credit: HashMap<String, (u64, u64)>,
    /// Rounds ended so far.
    round: u64,
    lost: u64,
}

/// Rounds in a row a pod's read may fail and the next read still go on from its cursor (the ring
/// keeps about 20 minutes at the pod's rate, and what it overwrote is counted lost); after that
/// many failed rounds its next read is a baseline.
/// Counted in rounds, not time: a slow round (a slow DNS lookup of the pods, a busy node) must
/// not turn every pod's next read into a baseline that skips what arrived meanwhile.
const FORGET_AFTER_ROUNDS: u64 = 3;

impl Tally {
    /// `forget_after` as for [`RateWindow::new`]; a pod not read in
    /// [`FORGET_AFTER_ROUNDS`] rounds loses its cursor (its next read is a
    /// baseline again, as a new pod's is). `retention`, `max_ids`: of
    /// [`DistinctArrivals`].
    pub fn new(
        window: Duration,
        forget_after: Duration,
        retention: Duration,
        max_ids: usize,
    ) -> Self {
        Self {
            pods: RateWindow::new(window, forget_after),
            distinct_window: RateWindow::new(window, forget_after),
            distinct: DistinctArrivals::new(retention, max_ids),
            cursors: HashMap::new(),
            credit: HashMap::new(),
            round: 0,
            lost: 0,
        }
    }

    /// Forgets every pod not in the current pod list (counters and cursor).
    pub fn retain_listed(&mut self, is_listed: impl Fn(&str) -> bool) {
        self.pods.retain_listed(&is_listed);
        self.distinct_window.retain_listed(&is_listed);
        self.cursors.retain(|pod, _| is_listed(pod));
        self.credit.retain(|pod, _| is_listed(pod));
    }

    /// Where to read `pod`'s log from this round; `None`: take a baseline.
    pub fn cursor(&self, pod: &str) -> Option<Cursor> {
        self.cursors
            .get(pod)
            .filter(|c| self.round - c.round <= FORGET_AFTER_ROUNDS)
            .copied()
    }

    /// Records what `pod` answered at `at`.
    pub fn record(&mut self, pod: &str, at: Instant, scrape: PodScrape) {
        self.pods.record(pod, at, scrape.counts);
        let read = scrape.arrivals;
        let credit = self.credit.entry(pod.to_owned()).or_default();
        if read.kind != ReadKind::Baseline {
            let (first, client) = self.distinct.feed_all(at, read.entries);
            credit.0 += first;
            credit.1 += client;
            self.lost += read.lost;
        }
        let counts = ArrivalCounts {
            first_attempt: credit.0 as f64,
            all_attempts: credit.1 as f64,
        };
        self.distinct_window.record(pod, at, counts);
        self.cursors.insert(
            pod.to_owned(),
            Cursor {
                epoch: read.epoch,
                next: read.next,
                round: self.round,
            },
        );
    }

    /// Ends a round at `now`: forgets request ids that have aged out, also
    /// when no pod answered.
    pub fn end_round(&mut self, now: Instant) {
        self.distinct.expire(now);
        self.round += 1;
    }

    /// Rates at `now`: ingress and the header count from the pods' counters,
    /// first and client attempts from the distinct count.
    pub fn rates(&mut self, now: Instant) -> Rates {
        let mut rates = self.pods.rates(now);
        let distinct = self.distinct_window.rates(now);
        rates.first_attempt = distinct.first_attempt;
        rates.client_attempt = distinct.ingress;
        rates.measured = rates.measured && distinct.measured;
        rates.retry = (rates.ingress - rates.first_attempt).max(0.0);
        rates
    }

    /// The distinct counts so far.
    pub fn counts(&self) -> DistinctCounts {
        self.distinct.counts()
    }

    /// Request ids remembered now.
    pub fn remembered(&self) -> usize {
        self.distinct.remembered()
    }

    /// Log entries the pods overwrote before the meter read them, so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::Read;
    use crate::distinct::{Arrival, IdKey};

    const W: Duration = Duration::from_secs(10);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn tally() -> Tally {
        Tally::new(W, secs(3), secs(600), 1 << 20)
    }

    /// One simulated pod: its counters and its log.
    #[derive(Default)]
    struct Pod {
        counts: ArrivalCounts,
        log: Vec<Arrival>,
        epoch: u64,
    }

    impl Pod {
        fn arrive(&mut self, attempt: u32, id: &str) {
            self.counts.all_attempts += 1.0;
            if attempt == 0 {
                self.counts.first_attempt += 1.0;
            }
            self.log.push(Arrival {
                attempt,
                id: Some(IdKey::of(id)),
            });
        }

        /// What the scraper would return to `cursor` (one page is enough here).
        fn scrape(&self, cursor: Option<Cursor>) -> PodScrape {
            let newest = self.log.len() as u64;
            let (kind, after) = match cursor {
                None => (ReadKind::Baseline, newest),
                Some(c) if c.epoch != self.epoch || c.next > newest => (ReadKind::Restarted, 0),
                Some(c) => (ReadKind::Continued, c.next),
            };
            PodScrape {
                counts: self.counts,
                arrivals: Read {
                    kind,
                    epoch: self.epoch,
                    next: newest,
                    lost: 0,
                    entries: self.log[after as usize..].to_vec(),
                },
            }
        }
    }

    /// Runs rounds at 1 s from `t0`: each second `arrive(second, pods)`, then
    /// every pod is read.
    fn run(
        t: &mut Tally,
        pods: &mut [Pod],
        t0: Instant,
        seconds: std::ops::Range<u64>,
        arrive: impl Fn(u64, &mut [Pod]),
    ) {
        for s in seconds {
            arrive(s, pods);
            let now = t0 + secs(s);
            for (i, pod) in pods.iter().enumerate() {
                let name = format!("http://pod{i}");
                let cursor = t.cursor(&name);
                t.record(&name, now, pod.scrape(cursor));
            }
            t.end_round(now);
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn without_a_gateway_distinct_and_header_counts_agree() {
        let t0 = Instant::now();
        let mut t = tally();
        let mut pods: Vec<Pod> = (0..2).map(|_| Pod::default()).collect();
        // Each second: 10 new requests on pod 0 and 4 on pod 1; every request
        // of two seconds ago retries once, on the other pod.
        run(&mut t, &mut pods, t0, 0..30, |s, pods| {
            for (p, n) in [(0, 10), (1, 4)] {
                for i in 0..n {
                    pods[p].arrive(0, &format!("s{s}-p{p}-{i}"));
                }
                if s >= 2 {
                    for i in 0..n {
                        pods[1 - p].arrive(1, &format!("s{}-p{p}-{i}", s - 2));
                    }
                }
            }
        });
        let r = t.rates(t0 + secs(29));
        assert!(close(r.first_attempt, 14.0), "{r:?}");
        assert!(close(r.first_attempt, r.header_first_attempt), "{r:?}");
        assert!(close(r.client_attempt, 28.0), "{r:?}");
        assert!(close(r.ingress, 28.0), "{r:?}");
        assert!(close(r.retry, 14.0), "{r:?}");
        assert_eq!(t.lost(), 0);
    }

    #[test]
    fn a_gateways_copies_count_once_in_the_distinct_rates() {
        let t0 = Instant::now();
        let mut t = tally();
        let mut pods: Vec<Pod> = (0..3).map(|_| Pod::default()).collect();
        // Each second 10 requests, each sent by the gateway to all 3 pods.
        run(&mut t, &mut pods, t0, 0..30, |s, pods| {
            for i in 0..10 {
                for pod in pods.iter_mut() {
                    pod.arrive(0, &format!("s{s}-{i}"));
                }
            }
        });
        let r = t.rates(t0 + secs(29));
        assert!(close(r.header_first_attempt, 30.0), "{r:?}");
        assert!(close(r.first_attempt, 10.0), "{r:?}");
        assert!(close(r.client_attempt, 10.0), "{r:?}");
        assert!(close(r.ingress, 30.0), "{r:?}");
        assert!(close(r.retry, 20.0), "{r:?}");
        let c = t.counts();
        assert_eq!((c.first_attempts, c.arrivals), (290, 870), "{c:?}");
    }

    #[test]
    fn a_new_pod_starts_from_a_baseline_and_a_restarted_one_from_zero() {
        let t0 = Instant::now();
        let mut t = tally();
        let mut pod = Pod {
            epoch: 1,
            ..Pod::default()
        };
        // 100 arrivals before the meter first reads it: a baseline, not counted.
        for i in 0..100 {
            pod.arrive(0, &format!("old{i}"));
        }
        let mut pods = vec![pod];
        run(&mut t, &mut pods, t0, 0..5, |s, pods| {
            if s > 0 {
                pods[0].arrive(0, &format!("r{s}"));
            }
        });
        assert_eq!(t.counts().first_attempts, 4);
        // The pod restarts with a new log: its 3 entries all count.
        pods[0] = Pod {
            epoch: 2,
            ..Pod::default()
        };
        run(&mut t, &mut pods, t0, 5..6, |_, pods| {
            for i in 0..3 {
                pods[0].arrive(0, &format!("new{i}"));
            }
        });
        assert_eq!(t.counts().first_attempts, 7);
        // Unread for a whole minute of wall time but read every round: it reads on.
        pods[0].arrive(0, "slow round");
        run(&mut t, &mut pods, t0, 66..67, |_, _| {});
        assert_eq!(t.counts().first_attempts, 8);
        // Its reads failed in three rounds in a row: the next read is a baseline.
        for r in 0..FORGET_AFTER_ROUNDS {
            assert!(t.cursor("http://pod0").is_some(), "round {r}");
            t.end_round(t0 + secs(67 + r));
        }
        assert_eq!(t.cursor("http://pod0"), None);
        run(&mut t, &mut pods, t0, 71..72, |_, pods| {
            pods[0].arrive(0, "after the gap")
        });
        assert_eq!(t.counts().first_attempts, 8);
        t.retain_listed(|_| false);
        assert_eq!(t.cursor("http://pod0"), None);
    }

    #[test]
    fn lost_entries_are_counted() {
        let t0 = Instant::now();
        let mut t = tally();
        let read = |kind, lost| PodScrape {
            counts: ArrivalCounts::default(),
            arrivals: Read {
                kind,
                epoch: 1,
                next: 10,
                lost,
                entries: Vec::new(),
            },
        };
        // A baseline's "lost" is history from before the meter looked.
        t.record("p", t0, read(ReadKind::Baseline, 0));
        t.record("p", t0 + secs(1), read(ReadKind::Continued, 5));
        t.record("p", t0 + secs(2), read(ReadKind::Restarted, 2));
        assert_eq!(t.lost(), 7);
    }
}
