//! A queue and its servers under a discipline, event by event: what the request level runs where
//! an attempt's fate is not known on arrival (every discipline but FIFO, which Lindley's
//! recursion settles at once). Per pod a station is one pod (one server); pooled it is the one
//! queue in front of every ready pod (a server each), its count limits multiplied by the servers.
//!
//! Pure: the caller owns the clock, the attempts (a station knows each by its slot) and their
//! service times, and applies what [`Station::take`] and [`Station::complete_shared`] give
//! back. The discipline's rules are `kit_defense`'s own state machines ([`Codel`],
//! [`AdaptiveLimit`]), the ones the pod binary runs.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use kit_defense::codel::Fate;
use kit_defense::{AdaptiveLimit, Codel, Discipline};

/// An attempt the station holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Entry {
    /// The caller's handle on the attempt.
    pub slot: u32,
    pub arrived: f64,
    /// Its service time at one server's rate, seconds; `NaN` until the caller draws it (pooled
    /// draws when service starts, as the pooled FIFO does).
    pub work: f64,
    /// Requests in the station (queued and in service) that it found on arrival, per server
    /// (rounded): the adaptive limit's sample, as the pod takes it.
    pub in_pod: u32,
}

/// What leaves the queue when a server (or a share of one) frees up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Taken {
    /// Its service starts now.
    Serve(Entry),
    /// Dropped unserved: its deadline had passed and the pod drops abandoned work.
    Dropped(Entry),
    /// CoDel refused it at the head: a 503 now.
    Refused(Entry),
}

/// How a station sheds work.
#[derive(Debug, Clone)]
enum Shed {
    None,
    Codel(Codel),
    /// At most this many wait per server; an arrival finding them is refused.
    Bounded(u32),
    Adaptive(AdaptiveLimit),
}

/// An attempt in processor-sharing service: done when the station's virtual time reaches
/// `finish`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shared {
    finish: f64,
    entry: Entry,
}
impl Eq for Shared {}
impl PartialOrd for Shared {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Shared {
    fn cmp(&self, other: &Self) -> Ordering {
        self.finish
            .total_cmp(&other.finish)
            .then(self.entry.slot.cmp(&other.entry.slot))
    }
}

#[derive(Debug, Clone)]
pub(super) struct Station {
    lifo: bool,
    shed: Shed,
    /// Processor sharing: up to this many per server in service at once; `None`: one each.
    sharing: Option<u32>,
    servers: u32,
    /// Whether this pod drops abandoned work (per pod; pooled the caller decides per attempt).
    pub drops: bool,
    waiting: VecDeque<Entry>,
    /// One at a time per server: attempts in service.
    busy: u32,
    /// Processor sharing: attempts in service by finish in virtual time, the virtual time (work
    /// one attempt alone would have received) and when it was last brought up to date.
    shared: BinaryHeap<Reverse<Shared>>,
    virtual_s: f64,
    virtual_at: f64,
    /// Processor sharing: the caller's completion event is current only while its generation is
    /// this one; `dirty` when the next completion moved.
    pub generation: u32,
    dirty: bool,
    /// Attempts in the station, queued and in service.
    in_pod: u32,
}

impl Station {
    pub(super) fn new(discipline: &Discipline, servers: u32, drops: bool) -> Station {
        let (lifo, shed, sharing) = match *discipline {
            Discipline::Fifo => (false, Shed::None, None),
            Discipline::Lifo => (true, Shed::None, None),
            Discipline::Codel(p) => (false, Shed::Codel(Codel::new(p)), None),
            Discipline::Bounded { limit } => (false, Shed::Bounded(limit), None),
            Discipline::Sharing { limit } => (false, Shed::None, Some(limit.max(1))),
            Discipline::Adaptive(p) => (false, Shed::Adaptive(AdaptiveLimit::new(p)), None),
        };
        Station {
            lifo,
            shed,
            sharing,
            servers,
            drops,
            waiting: VecDeque::new(),
            busy: 0,
            shared: BinaryHeap::new(),
            virtual_s: 0.0,
            virtual_at: 0.0,
            generation: 0,
            dirty: false,
            in_pod: 0,
        }
    }

    /// What a count limit per pod is multiplied by: the servers (at least one).
    fn per(&self) -> u32 {
        self.servers.max(1)
    }

    pub(super) fn servers(&self) -> u32 {
        self.servers
    }

    /// The attempts waiting, oldest first.
    pub(super) fn waiting(&self) -> impl Iterator<Item = &Entry> {
        self.waiting.iter()
    }

    /// An attempt arrives: `Some(its Entry::in_pod)` if it may queue (then [`Station::push`]
    /// it), `None` if it is refused at once: a bounded queue full, or the adaptive limit met by
    /// the requests it finds (pooled: `found < limit x servers`, as `found / servers < limit`).
    pub(super) fn offer(&mut self) -> Option<u32> {
        let per = self.per();
        let found = self.in_pod;
        match &mut self.shed {
            Shed::Bounded(limit)
                if self.waiting.len() as u64 >= u64::from(*limit) * u64::from(per) =>
            {
                None
            }
            Shed::Adaptive(l) if !l.admits(found / per) => {
                l.on_refused();
                None
            }
            _ => Some((found * 2 + per) / (2 * per)),
        }
    }

    pub(super) fn push(&mut self, e: Entry) {
        self.waiting.push_back(e);
        self.in_pod += 1;
    }

    /// Whether a server (or a share) is free for the next waiting attempt.
    pub(super) fn has_room(&self) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        match self.sharing {
            Some(limit) => {
                self.servers > 0
                    && (self.shared.len() as u64) < u64::from(limit) * u64::from(self.servers)
            }
            None => self.busy < self.servers,
        }
    }

    /// The next waiting attempt leaves the queue at `now` (the newest under LIFO, else the
    /// oldest): dropped if `drops` says so, else refused if CoDel does, else served. As in the
    /// pod, CoDel measures every attempt leaving the queue, dropped ones too, and hears that the
    /// queue emptied right after. The caller checks [`Station::has_room`] first, and starts a
    /// served one with [`Station::start`].
    pub(super) fn take(&mut self, now: f64, drops: impl FnOnce(&Entry) -> bool) -> Option<Taken> {
        let e = if self.lifo {
            self.waiting.pop_back()
        } else {
            self.waiting.pop_front()
        }?;
        let mut fate = Fate::Serve;
        if let Shed::Codel(c) = &mut self.shed {
            fate = c.on_dequeue(now, now - e.arrived);
            if self.waiting.is_empty() {
                c.on_empty();
            }
        }
        let taken = if drops(&e) {
            Taken::Dropped(e)
        } else if fate == Fate::Refuse {
            Taken::Refused(e)
        } else {
            Taken::Serve(e)
        };
        if !matches!(taken, Taken::Serve(_)) {
            self.in_pod -= 1;
        }
        Some(taken)
    }

    /// A taken attempt's service starts at `now` with `e.work` drawn: one server's rate, done at
    /// the instant returned; sharing, `None` (the next completion is [`Station::next_shared`]).
    pub(super) fn start(&mut self, now: f64, e: Entry) -> Option<f64> {
        if self.sharing.is_none() {
            self.busy += 1;
            return Some(now + e.work);
        }
        self.advance(now);
        self.shared.push(Reverse(Shared {
            finish: self.virtual_s + e.work,
            entry: e,
        }));
        self.dirty = true;
        None
    }

    /// One at a time: the attempt `e` finished at `now`. If it was `answered` (its client still
    /// waited), the adaptive limit takes its sample, as the pod does.
    pub(super) fn complete(&mut self, now: f64, e: &Entry, answered: bool) {
        self.busy -= 1;
        self.in_pod -= 1;
        if answered && let Shed::Adaptive(l) = &mut self.shed {
            l.on_sample(now - e.arrived, e.in_pod);
        }
    }

    /// Each attempt in shared service gets `min(1, servers / n)` of a server.
    fn share(&self) -> f64 {
        let n = self.shared.len();
        if n == 0 || self.servers == 0 {
            0.0
        } else {
            (f64::from(self.servers) / n as f64).min(1.0)
        }
    }

    fn advance(&mut self, now: f64) {
        if now > self.virtual_at {
            self.virtual_s += (now - self.virtual_at) * self.share();
            self.virtual_at = now;
        }
    }

    /// Sharing: the completion event the caller's current one stands for is due at `now`: the
    /// attempt first in line finishes, with any other done by now; they go into `done`.
    pub(super) fn complete_shared(&mut self, now: f64, done: &mut Vec<Entry>) {
        self.advance(now);
        let before = self.shared.len();
        // The event was scheduled for the first in line: it finishes even if rounding left its
        // virtual time a hair short.
        if let Some(Reverse(first)) = self.shared.pop() {
            self.virtual_s = self.virtual_s.max(first.finish);
            done.push(first.entry);
        }
        let slack = 1e-12 * self.virtual_s.abs().max(1.0);
        while let Some(Reverse(s)) = self.shared.peek()
            && s.finish <= self.virtual_s + slack
        {
            done.push(s.entry);
            self.shared.pop();
        }
        self.in_pod -= (before - self.shared.len()) as u32;
        self.dirty = true;
    }

    /// Sharing: when the next attempt in service finishes, if the last one announced moved
    /// (a new generation); `Some(None)`: none will while nothing changes.
    pub(super) fn next_shared(&mut self, now: f64) -> Option<Option<f64>> {
        if self.sharing.is_none() || !self.dirty {
            return None;
        }
        self.dirty = false;
        self.advance(now);
        self.generation = self.generation.wrapping_add(1);
        let share = self.share();
        Some(
            self.shared
                .peek()
                .filter(|_| share > 0.0)
                .map(|Reverse(s)| now + (s.finish - self.virtual_s).max(0.0) / share),
        )
    }

    /// The ready pods behind a pooled station changed at `now`. A server going away finishes
    /// the attempt it serves (one at a time); sharing, the rest share what is left at once.
    pub(super) fn set_servers(&mut self, now: f64, servers: u32) {
        if self.sharing.is_some() {
            self.advance(now);
            self.dirty = true;
        }
        self.servers = servers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kit_defense::{AimdParams, CodelParams};

    fn entry(slot: u32, arrived: f64, work: f64) -> Entry {
        Entry {
            slot,
            arrived,
            work,
            in_pod: 0,
        }
    }

    fn push(st: &mut Station, e: Entry) {
        let in_pod = st.offer().expect("admitted");
        st.push(Entry { in_pod, ..e });
    }

    #[test]
    fn lifo_takes_the_newest_and_fifo_the_oldest() {
        for (d, first) in [(Discipline::Lifo, 2), (Discipline::Fifo, 0)] {
            let mut st = Station::new(&d, 1, false);
            for i in 0..3 {
                push(&mut st, entry(i, f64::from(i), 0.1));
            }
            let Some(Taken::Serve(e)) = st.take(3.0, |_| false) else {
                panic!("served")
            };
            assert_eq!(e.slot, first, "{d:?}");
            assert_eq!(st.start(3.0, e), Some(3.1));
            assert!(!st.has_room(), "one server, busy");
        }
    }

    #[test]
    fn a_bounded_queue_refuses_past_its_limit_per_server() {
        let mut st = Station::new(&Discipline::Bounded { limit: 2 }, 1, false);
        push(&mut st, entry(0, 0.0, 1.0));
        push(&mut st, entry(1, 0.0, 1.0));
        assert_eq!(st.offer(), None, "two wait: the third is refused");
        let mut pooled = Station::new(&Discipline::Bounded { limit: 2 }, 3, false);
        for i in 0..6 {
            push(&mut pooled, entry(i, 0.0, 1.0));
        }
        assert_eq!(pooled.offer(), None, "2 per server over 3 servers");
    }

    #[test]
    fn codel_refuses_the_head_of_a_standing_queue_and_drops_go_first() {
        let p = CodelParams {
            target_s: 0.01,
            interval_s: 0.1,
        };
        let mut st = Station::new(&Discipline::Codel(p), 1, false);
        for i in 0..4 {
            push(&mut st, entry(i, 0.0, 0.05));
        }
        // Waited 0.5 s: above target; the interval starts, then the queue stands: a drop
        // goes first, and is measured too.
        assert!(matches!(st.take(0.5, |_| false), Some(Taken::Serve(_))));
        assert!(matches!(st.take(0.7, |_| true), Some(Taken::Dropped(_))));
        assert!(matches!(st.take(0.7, |_| false), Some(Taken::Refused(_))));
        assert_eq!(st.in_pod, 2, "one served, one left in the queue");
        assert!(matches!(st.take(0.8, |_| false), Some(Taken::Refused(_))));
        assert_eq!(st.take(0.9, |_| false), None);
    }

    #[test]
    fn the_adaptive_limit_counts_queued_and_served() {
        let p = AimdParams {
            initial: 2,
            min: 1,
            max: 4,
            latency_s: 1.0,
            backoff: 0.5,
        };
        let mut st = Station::new(&Discipline::Adaptive(p), 1, false);
        push(&mut st, entry(0, 0.0, 0.1));
        push(&mut st, entry(1, 0.0, 0.1));
        assert_eq!(st.offer(), None, "limit 2 met; the refusal halves it");
        let serve = |st: &mut Station, now: f64, answered: bool| {
            let Some(Taken::Serve(e)) = st.take(now, |_| false) else {
                panic!()
            };
            st.start(now, e);
            st.complete(now + 2.0, &e, answered);
            e
        };
        // Its sample: it found nobody (2 x 0 < 1), and waited too long for nobody.
        assert_eq!(serve(&mut st, 0.0, false).in_pod, 0);
        assert_eq!(st.offer(), None, "limit 1, one in the pod");
        // Answered, late, having found one: the limit shrinks (to its floor).
        assert_eq!(serve(&mut st, 2.0, true).in_pod, 1);
        assert_eq!(st.offer(), Some(0), "limit 1, the pod empty");
        st.push(entry(2, 4.0, 0.1));
        let Some(Taken::Serve(e)) = st.take(4.0, |_| false) else {
            panic!()
        };
        st.start(4.0, e);
        st.complete(4.1, &Entry { in_pod: 1, ..e }, true);
        assert_eq!(st.offer(), Some(0), "in time with one found: limit 2");
        st.push(entry(3, 4.1, 0.1));
        assert_eq!(st.offer(), Some(1));
        st.push(entry(4, 4.1, 0.1));
        assert_eq!(st.offer(), None, "limit 2 met");
        // Pooled over 3 servers: 2 per server, 6 in all.
        let mut pooled = Station::new(&Discipline::Adaptive(p), 3, false);
        for i in 0..6 {
            push(&mut pooled, entry(i, 0.0, 1.0));
        }
        assert_eq!(pooled.offer(), None);
    }

    #[test]
    fn sharing_serves_up_to_its_limit_at_equal_rates() {
        let mut st = Station::new(&Discipline::Sharing { limit: 2 }, 1, false);
        for (i, w) in [1.0, 2.0, 0.5].into_iter().enumerate() {
            push(&mut st, entry(i as u32, 0.0, w));
        }
        while st.has_room() {
            let Some(Taken::Serve(e)) = st.take(0.0, |_| false) else {
                panic!()
            };
            assert_eq!(st.start(0.0, e), None);
        }
        // Two share the server at half rate each: the 1 s one finishes at 2 s.
        assert_eq!(st.next_shared(0.0), Some(Some(2.0)));
        let mut done = Vec::new();
        st.complete_shared(2.0, &mut done);
        assert_eq!(done.iter().map(|e| e.slot).collect::<Vec<_>>(), [0]);
        // The 0.5 s one joins the 2 s one (1 s left): both at half rate, 0.5 s done at 3 s.
        let Some(Taken::Serve(e)) = st.take(2.0, |_| false) else {
            panic!()
        };
        st.start(2.0, e);
        assert_eq!(st.next_shared(2.0), Some(Some(3.0)));
        done.clear();
        st.complete_shared(3.0, &mut done);
        assert_eq!(done[0].slot, 2);
        // Alone, the last has 0.5 s left at full rate.
        assert_eq!(st.next_shared(3.0), Some(Some(3.5)));
        assert_eq!(st.next_shared(3.0), None, "nothing moved since");
    }
}
