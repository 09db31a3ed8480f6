//! The pure core of the pod: a [`Backlog`] of queued requests paced against absolute
//! deadlines, ordered and shed by its [`Discipline`].
//!
//! No clocks, locks or I/O here: every call takes `now` (and the backlog owns a
//! seeded RNG), so tests drive it with synthetic instants.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use kit_defense::codel::Fate;
use kit_defense::{AdaptiveLimit, Codel, Discipline};
use rand::SeedableRng;
use rand::rngs::SmallRng;

pub use kit_dist::ServiceTime;

/// Whoever waits for a queued request: lets the worker see whether the client
/// is still there and hand it the answer.
pub trait Client {
    /// True once nobody can receive the answer any more (the connection closed).
    fn is_gone(&self) -> bool;
    /// Delivers the answer (the time the request waited before its service
    /// started); false if nobody received it, i.e. the work was abandoned.
    fn answer(self, wait: Duration) -> bool;
    /// Delivers a refusal (503 at once, unserved); false if nobody received it.
    fn refuse(self) -> bool;
}

/// What the pod does with work whose client is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Abandoned {
    /// Serve it anyway and count it `abandoned` (the debt the kit studies).
    Finish,
    /// Skip it at the head of the queue if the client disconnected.
    DropDisconnected,
    /// Skip it at the head of the queue if its `x-deadline-ms` has passed.
    DropExpired,
}

impl Abandoned {
    /// Whether the request leaving the queue at `now` (ns since the origin) is skipped.
    fn skips<C: Client>(self, entry: &Entry<C>, now: u64) -> bool {
        match self {
            Abandoned::Finish => false,
            Abandoned::DropDisconnected => entry.client.is_gone(),
            Abandoned::DropExpired => entry.deadline <= now,
        }
    }
}

/// Draws service times for a given rate; seeded so runs are reproducible. The distribution is
/// [`kit_dist::ServiceTime`], the one the request-level model draws from too.
#[derive(Debug)]
pub struct ServiceTimes {
    kind: ServiceTime,
    mean: Duration,
    mean_s: f64,
    rng: SmallRng,
}

/// The longest service time a draw gives. It only keeps the nanosecond bookkeeping (`u64`) from
/// overflowing on an absurd `--service-cv`: a Pareto with CV 10 and mean 10 ms exceeds an hour
/// with probability about 1e-12.
pub const MAX_SERVICE: Duration = Duration::from_secs(3600);

impl ServiceTimes {
    /// `rate` must be positive and finite (the CLI checks it).
    pub fn new(kind: ServiceTime, rate: f64, seed: u64) -> Self {
        let mean_s = 1.0 / rate;
        Self {
            kind,
            mean: Duration::from_secs_f64(mean_s),
            mean_s,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The distribution drawn from.
    pub fn kind(&self) -> ServiceTime {
        self.kind
    }

    /// The mean service time, `1 / rate`.
    pub fn mean(&self) -> Duration {
        self.mean
    }

    /// The next service time (deterministic: exactly the mean, no draw).
    pub fn draw(&mut self) -> Duration {
        let s = self.kind.sample(self.mean_s, &mut self.rng);
        Duration::try_from_secs_f64(s).map_or(MAX_SERVICE, |d| d.min(MAX_SERVICE))
    }
}

/// Why an arrival was turned away at once (the handler answers 503).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `--max-queue` requests already wait.
    MaxQueue,
    /// The bounded discipline's limit of waiting requests is reached.
    QueueLimit,
    /// The adaptive discipline's limit on requests in the pod (queued and in service), as it
    /// stood when the arrival met it.
    ConcurrencyLimit { limit: u32 },
}

/// What the worker does next.
#[derive(Debug)]
pub enum Step<C> {
    /// Serve the request taken from the queue: work until `done`, then answer `client` with
    /// `wait`.
    Serve {
        client: C,
        /// Time from arrival to the start of its service.
        wait: Duration,
        service: Duration,
        /// Absolute completion deadline: `max(previous done, arrival) + service`.
        done: Instant,
        /// For the adaptive limit once the answer is delivered ([`Backlog::sample`]).
        sample: Option<Sample>,
    },
    /// Skip it without service (drop modes); counts as `dropped`.
    Drop(C),
    /// Refuse it without service (CoDel: the queue has stood above its target for an
    /// interval); a `codel` rejection if its client receives the 503, else `dropped`.
    Refuse(C),
    /// Sharing: this request's service completed at or before `now`; answer it.
    Finish {
        client: C,
        wait: Duration,
        service: Duration,
    },
    /// Sharing: requests are in service and nothing happens before `until` but an arrival
    /// entering service (which only delays the completions). `started`: the service times of
    /// the requests that entered service since the last `Share`, their CPU budgets.
    Share { until: Instant, started: Duration },
}

/// An answered request's figures for the adaptive limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Its wait and service.
    pub latency: Duration,
    /// Requests in the pod (queued and in service) when it arrived.
    pub in_pod: u32,
}

/// The backlog at one instant, as a scrape and the shutdown read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Requests waiting, not counting those in service.
    pub depth: usize,
    /// The wait an arrival now would face ([`Backlog::wait`]).
    pub wait: Duration,
    /// Nothing waits and nothing is in service.
    pub idle: bool,
}

/// One queued request, kept small: a million of them may wait in a trapped pod.
/// Times are nanoseconds since the backlog's origin.
#[derive(Debug)]
struct Entry<C> {
    arrival: u64,
    /// `NO_DEADLINE` when the request carried none.
    deadline: u64,
    service: u64,
    client: C,
}

const NO_DEADLINE: u64 = u64::MAX;

/// The requests waiting, and the sum of their service times.
#[derive(Debug)]
struct Waiting<C> {
    entries: VecDeque<Entry<C>>,
    /// ns.
    work: u64,
}

impl<C> Waiting<C> {
    fn push(&mut self, entry: Entry<C>) {
        self.work += entry.service;
        self.entries.push_back(entry);
    }

    /// The oldest, or the newest.
    fn pop(&mut self, newest: bool) -> Option<Entry<C>> {
        let entry = if newest {
            self.entries.pop_back()
        } else {
            self.entries.pop_front()
        }?;
        self.work -= entry.service;
        Some(entry)
    }
}

/// The discipline's own state.
#[derive(Debug)]
enum Rule<C> {
    Fifo,
    Lifo,
    Codel(Codel),
    /// At most this many wait.
    Bounded(usize),
    Sharing(Sharing<C>),
    Adaptive(Adaptive),
}

#[derive(Debug)]
struct Adaptive {
    limit: AdaptiveLimit,
    /// Each queued request's `in_pod` at its arrival, in queue order: its sample needs it.
    /// Apart from the entries, which a million abandoned requests keep small; the limit keeps
    /// this short.
    in_pod: VecDeque<u32>,
}

/// The queued requests plus the server's schedule.
#[derive(Debug)]
pub struct Backlog<C> {
    origin: Instant,
    waiting: Waiting<C>,
    /// When the server finishes what it has already started (ns since origin); the
    /// one-at-a-time disciplines' schedule (sharing keeps its own).
    free_at: u64,
    times: ServiceTimes,
    mode: Abandoned,
    max_queue: Option<usize>,
    rule: Rule<C>,
}

impl<C: Client> Backlog<C> {
    /// An empty, idle backlog. Instants before `origin` are treated as `origin`.
    pub fn new(
        origin: Instant,
        times: ServiceTimes,
        mode: Abandoned,
        max_queue: Option<usize>,
        discipline: Discipline,
    ) -> Self {
        let rule = match discipline {
            Discipline::Fifo => Rule::Fifo,
            Discipline::Lifo => Rule::Lifo,
            Discipline::Codel(params) => Rule::Codel(Codel::new(params)),
            Discipline::Bounded { limit } => Rule::Bounded(limit as usize),
            Discipline::Sharing { limit } => Rule::Sharing(Sharing::new(limit as usize)),
            Discipline::Adaptive(params) => Rule::Adaptive(Adaptive {
                limit: AdaptiveLimit::new(params),
                in_pod: VecDeque::new(),
            }),
        };
        Self {
            origin,
            waiting: Waiting {
                entries: VecDeque::new(),
                work: 0,
            },
            free_at: 0,
            times,
            mode,
            max_queue,
            rule,
        }
    }

    /// Queues a request that arrived at `arrival`, unless `--max-queue` or the discipline
    /// refuses it.
    pub fn admit(
        &mut self,
        arrival: Instant,
        deadline: Option<Instant>,
        client: C,
    ) -> Result<(), Refusal> {
        let waiting = self.waiting.entries.len();
        if self.max_queue.is_some_and(|max| waiting >= max) {
            return Err(Refusal::MaxQueue);
        }
        let arrival = self.ticks(arrival);
        match &mut self.rule {
            Rule::Bounded(limit) if waiting >= *limit => return Err(Refusal::QueueLimit),
            Rule::Adaptive(a) => {
                // The one in service counts until its scheduled completion.
                let in_pod = waiting + usize::from(self.free_at > arrival);
                let in_pod = u32::try_from(in_pod).unwrap_or(u32::MAX);
                if !a.limit.admits(in_pod) {
                    let limit = a.limit.limit();
                    a.limit.on_refused();
                    return Err(Refusal::ConcurrencyLimit { limit });
                }
                a.in_pod.push_back(in_pod);
            }
            _ => {}
        }
        let service = nanos(self.times.draw());
        let deadline = deadline.map_or(NO_DEADLINE, |d| self.ticks(d));
        self.waiting.push(Entry {
            arrival,
            deadline,
            service,
            client,
        });
        Ok(())
    }

    /// What the worker does at `now`: take the request the discipline serves next (at `now`
    /// no earlier than the previous `Serve`'s `done`), or, sharing, answer one that completed
    /// or work on. `None` when there is nothing to do.
    pub fn next(&mut self, now: Instant) -> Option<Step<C>> {
        let now = self.ticks(now);
        if let Rule::Sharing(sharing) = &mut self.rule {
            return sharing.next(now, &mut self.waiting, self.mode, self.origin);
        }
        let entry = self.waiting.pop(matches!(self.rule, Rule::Lifo))?;
        // Absolute pacing: the schedule, not the time the worker woke up,
        // decides when this one starts, so timer jitter never accumulates.
        let start = self.free_at.max(entry.arrival);
        let mut fate = Fate::Serve;
        let mut in_pod = None;
        match &mut self.rule {
            // Every request leaving the queue is a sojourn CoDel measures.
            Rule::Codel(codel) => {
                fate = codel.on_dequeue(secs(start), secs(start - entry.arrival));
                if self.waiting.entries.is_empty() {
                    codel.on_empty();
                }
            }
            Rule::Adaptive(a) => in_pod = a.in_pod.pop_front(),
            _ => {}
        }
        if self.mode.skips(&entry, now) {
            return Some(Step::Drop(entry.client));
        }
        if fate == Fate::Refuse {
            return Some(Step::Refuse(entry.client));
        }
        self.free_at = start + entry.service;
        let latency = Duration::from_nanos(self.free_at - entry.arrival);
        Some(Step::Serve {
            client: entry.client,
            wait: Duration::from_nanos(start - entry.arrival),
            service: Duration::from_nanos(entry.service),
            done: self.origin + Duration::from_nanos(self.free_at),
            sample: in_pod.map(|in_pod| Sample { latency, in_pod }),
        })
    }

    /// An answered request's sample, for the adaptive limit.
    pub fn sample(&mut self, sample: Sample) {
        if let Rule::Adaptive(a) = &mut self.rule {
            a.limit
                .on_sample(sample.latency.as_secs_f64(), sample.in_pod);
        }
    }

    /// The adaptive discipline's limit on requests in the pod now.
    pub fn concurrency_limit(&self) -> Option<u32> {
        match &self.rule {
            Rule::Adaptive(a) => Some(a.limit.limit()),
            _ => None,
        }
    }

    /// Requests waiting (not counting those in service).
    pub fn len(&self) -> usize {
        self.waiting.entries.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.entries.is_empty()
    }

    /// The wait a request arriving at `now` would face before its service starts, if no other
    /// came: what is left of the current service plus all queued work; under LIFO only the
    /// former (it goes next); sharing, none while a place in service is free, else at most
    /// all the work present. With drop modes and CoDel an upper bound: what they skip or
    /// refuse takes no time.
    pub fn wait(&self, now: Instant) -> Duration {
        let now = self.ticks(now);
        let rest = self.free_at.saturating_sub(now);
        Duration::from_nanos(match &self.rule {
            Rule::Lifo => rest,
            Rule::Sharing(sharing) => sharing.wait(now, self.waiting.work),
            _ => rest + self.waiting.work,
        })
    }

    /// Depth, wait and idleness at `now`.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        let serving = match &self.rule {
            Rule::Sharing(sharing) => !sharing.serving.is_empty(),
            _ => self.free_at > self.ticks(now),
        };
        Snapshot {
            depth: self.len(),
            wait: self.wait(now),
            idle: self.is_empty() && !serving,
        }
    }

    /// Mean service time (for `retry-after` hints).
    pub fn mean_service(&self) -> Duration {
        self.times.mean()
    }

    /// Empties the queue, and a sharing pod's service, handing back the clients (at shutdown).
    pub fn drain(&mut self) -> impl Iterator<Item = C> + '_ {
        self.waiting.work = 0;
        let serving = match &mut self.rule {
            Rule::Sharing(sharing) => std::mem::take(&mut sharing.serving),
            Rule::Adaptive(a) => {
                a.in_pod.clear();
                Vec::new()
            }
            _ => Vec::new(),
        };
        serving
            .into_iter()
            .map(|s| s.client)
            .chain(self.waiting.entries.drain(..).map(|e| e.client))
    }

    fn ticks(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.origin))
    }
}

/// Processor sharing: up to `limit` requests in service at once, each progressing at `rate / n`
/// (`n` of them in service), so the pod's rate is unchanged; the rest wait in arrival order.
/// Each one in service keeps its remaining work, and the next completion is at
/// `at + min remaining × n`. Entries into service and completions are replayed at their own
/// instants, so the schedule does not depend on when the worker looks.
#[derive(Debug)]
struct Sharing<C> {
    limit: usize,
    serving: Vec<Shared<C>>,
    /// The instant `serving`'s remaining work is counted at (ns since the origin).
    at: u64,
    /// Service times of the requests that entered service since the last [`Step::Share`], ns.
    started: u64,
}

/// A request in service on a sharing pod.
#[derive(Debug)]
struct Shared<C> {
    client: C,
    /// From its arrival to its entry into service, ns.
    wait: u64,
    service: u64,
    /// Work left, in ns of the pod's whole rate.
    remaining: f64,
}

impl<C: Client> Sharing<C> {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            serving: Vec::new(),
            at: 0,
            started: 0,
        }
    }

    /// The next event at or before `now`, in the order they happened: a completion to answer,
    /// or a request dropped as it would enter service; else when to look again.
    fn next(
        &mut self,
        now: u64,
        waiting: &mut Waiting<C>,
        mode: Abandoned,
        origin: Instant,
    ) -> Option<Step<C>> {
        loop {
            let done = self.next_completion();
            let enter = waiting
                .entries
                .front()
                .filter(|_| self.serving.len() < self.limit)
                .map(|e| e.arrival.max(self.at));
            // At a tie the completion first: it frees the place the next one takes.
            if let Some((i, t)) = done.filter(|&(_, t)| t <= now && enter.is_none_or(|e| t <= e)) {
                self.advance(t);
                let s = self.serving.remove(i);
                return Some(Step::Finish {
                    client: s.client,
                    wait: Duration::from_nanos(s.wait),
                    service: Duration::from_nanos(s.service),
                });
            }
            if let Some(t) = enter.filter(|&t| t <= now) {
                self.advance(t);
                let entry = waiting.pop(false)?;
                if mode.skips(&entry, t) {
                    return Some(Step::Drop(entry.client));
                }
                self.started += entry.service;
                self.serving.push(Shared {
                    client: entry.client,
                    wait: t - entry.arrival,
                    service: entry.service,
                    remaining: entry.service as f64,
                });
                continue;
            }
            let until = done.map(|(_, t)| t).into_iter().chain(enter).min()?;
            return Some(Step::Share {
                until: origin + Duration::from_nanos(until),
                started: Duration::from_nanos(std::mem::take(&mut self.started)),
            });
        }
    }

    /// The first in service to complete, and when: its remaining work times the number
    /// sharing the rate.
    fn next_completion(&self) -> Option<(usize, u64)> {
        let n = self.serving.len() as f64;
        let (i, first) = self
            .serving
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.remaining.total_cmp(&b.1.remaining))?;
        Some((i, self.at + (first.remaining * n).round().max(0.0) as u64))
    }

    /// Counts the work done up to `t`: each in service got `1 / n` of the time since `at`.
    fn advance(&mut self, t: u64) {
        if !self.serving.is_empty() {
            let each = (t - self.at) as f64 / self.serving.len() as f64;
            for s in &mut self.serving {
                s.remaining -= each;
            }
        }
        self.at = t;
    }

    /// None while a place is free; else at most the work present: it enters service before
    /// the server has done all of it.
    fn wait(&self, now: u64, queued_work: u64) -> u64 {
        if self.serving.len() < self.limit {
            return 0;
        }
        let serving: f64 = self.serving.iter().map(|s| s.remaining).sum();
        let done_since = now.saturating_sub(self.at) as f64;
        (serving + queued_work as f64 - done_since).max(0.0) as u64
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// ns since the origin as the seconds kit-defense's rules take.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A client that records answers into a shared log.
    #[derive(Debug)]
    struct Fake {
        id: u32,
        gone: bool,
        log: Rc<RefCell<Vec<(u32, Duration)>>>,
    }

    impl Client for Fake {
        fn is_gone(&self) -> bool {
            self.gone
        }
        fn answer(self, wait: Duration) -> bool {
            self.log.borrow_mut().push((self.id, wait));
            !self.gone
        }
        fn refuse(self) -> bool {
            !self.gone
        }
    }

    const MS: Duration = Duration::from_millis(1);

    fn backlog(mode: Abandoned, max: Option<usize>) -> (Instant, Backlog<Fake>) {
        disciplined(Discipline::Fifo, mode, max)
    }

    /// 10 ms a request.
    fn disciplined(
        discipline: Discipline,
        mode: Abandoned,
        max: Option<usize>,
    ) -> (Instant, Backlog<Fake>) {
        let t0 = Instant::now();
        let times = ServiceTimes::new(ServiceTime::DETERMINISTIC, 100.0, 1);
        (t0, Backlog::new(t0, times, mode, max, discipline))
    }

    fn fake(id: u32, gone: bool, log: &Rc<RefCell<Vec<(u32, Duration)>>>) -> Fake {
        Fake {
            id,
            gone,
            log: log.clone(),
        }
    }

    /// Runs the worker's loop on synthetic time: always wakes exactly at `done`.
    fn serve_all(b: &mut Backlog<Fake>, mut now: Instant) -> (Vec<Instant>, u32) {
        let mut dones = Vec::new();
        let mut dropped = 0;
        while let Some(step) = b.next(now) {
            match step {
                Step::Serve {
                    client, done, wait, ..
                } => {
                    now = now.max(done);
                    dones.push(done);
                    client.answer(wait);
                }
                Step::Drop(_) => dropped += 1,
                other => panic!("a one-at-a-time discipline's step: {other:?}"),
            }
        }
        (dones, dropped)
    }

    #[test]
    fn serves_in_arrival_order_paced_against_absolute_deadlines() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::Finish, None);
        for id in 0..5 {
            b.admit(t0 + MS * id, None, fake(id, false, &log)).unwrap();
        }
        // The worker wakes late (t0 + 25 ms): the schedule still starts at the
        // first arrival, so the late wake-up does not shift later completions.
        let (dones, _) = serve_all(&mut b, t0 + MS * 25);
        let expected: Vec<_> = (1..=5).map(|k| t0 + 10 * MS * k).collect();
        assert_eq!(dones, expected);
        let ids: Vec<_> = log.borrow().iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        // Request k arrived at k ms and started at 10k ms.
        assert_eq!(log.borrow()[3].1, MS * 27);
    }

    #[test]
    fn idle_server_starts_at_the_arrival() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::Finish, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        serve_all(&mut b, t0);
        b.admit(t0 + MS * 100, None, fake(1, false, &log)).unwrap();
        let (dones, _) = serve_all(&mut b, t0 + MS * 100);
        assert_eq!(dones, [t0 + MS * 110]);
        assert_eq!(log.borrow()[1].1, Duration::ZERO);
    }

    #[test]
    fn finish_mode_serves_work_whose_client_is_gone() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::Finish, None);
        b.admit(t0, Some(t0), fake(0, true, &log)).unwrap();
        let (dones, dropped) = serve_all(&mut b, t0 + MS * 50);
        assert_eq!((dones.len(), dropped), (1, 0));
    }

    #[test]
    fn drop_disconnected_skips_gone_clients_without_service_time() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::DropDisconnected, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        b.admit(t0, None, fake(1, true, &log)).unwrap();
        b.admit(t0, Some(t0), fake(2, false, &log)).unwrap(); // deadline ignored here
        let (dones, dropped) = serve_all(&mut b, t0);
        assert_eq!(dropped, 1);
        assert_eq!(dones, [t0 + MS * 10, t0 + MS * 20]);
        let ids: Vec<_> = log.borrow().iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 2]);
    }

    #[test]
    fn drop_expired_skips_requests_past_their_deadline_at_the_head() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::DropExpired, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        // Reaches the head at 10 ms, after its 5 ms deadline.
        b.admit(t0, Some(t0 + MS * 5), fake(1, false, &log))
            .unwrap();
        // Reaches the head at 10 ms, before its 15 ms deadline.
        b.admit(t0, Some(t0 + MS * 15), fake(2, false, &log))
            .unwrap();
        b.admit(t0, None, fake(3, true, &log)).unwrap(); // gone but no deadline
        let (dones, dropped) = serve_all(&mut b, t0);
        assert_eq!(dropped, 1);
        assert_eq!(dones.len(), 3);
        let ids: Vec<_> = log.borrow().iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 2, 3]);
    }

    #[test]
    fn max_queue_rejects_past_the_limit() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::Finish, Some(2));
        assert!(b.admit(t0, None, fake(0, false, &log)).is_ok());
        assert!(b.admit(t0, None, fake(1, false, &log)).is_ok());
        assert_eq!(
            b.admit(t0, None, fake(2, false, &log)),
            Err(Refusal::MaxQueue)
        );
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn wait_is_remaining_service_plus_queued_work() {
        let log = Rc::default();
        let (t0, mut b) = backlog(Abandoned::Finish, None);
        assert_eq!(b.wait(t0), Duration::ZERO);
        for id in 0..3 {
            b.admit(t0, None, fake(id, false, &log)).unwrap();
        }
        assert_eq!(b.wait(t0), MS * 30);
        assert!(b.next(t0).is_some()); // in service until 10 ms
        assert_eq!(b.wait(t0 + MS * 4), MS * 26);
        assert_eq!(b.drain().count(), 2);
        assert_eq!(b.wait(t0 + MS * 10), Duration::ZERO);
    }

    #[test]
    fn exponential_times_are_seeded_with_the_right_mean() {
        let draw = |seed| {
            let mut t = ServiceTimes::new(ServiceTime::EXPONENTIAL, 100.0, seed);
            (0..20_000).map(|_| t.draw()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let mean = draw(7).iter().sum::<Duration>().as_secs_f64() / 20_000.0;
        assert!((mean - 0.01).abs() < 0.0005, "mean {mean}");
    }

    #[test]
    fn pareto_times_are_seeded_heavy_tailed_with_the_right_mean() {
        let pareto = ServiceTime::new(kit_dist::Shape::Pareto, Some(3.0)).unwrap();
        let draw = |seed| {
            let mut t = ServiceTimes::new(pareto, 100.0, seed);
            (0..200_000).map(|_| t.draw()).collect::<Vec<_>>()
        };
        let times = draw(7);
        assert_eq!(times, draw(7));
        assert_ne!(times[..100], draw(8)[..100]);
        let mean = times.iter().sum::<Duration>().as_secs_f64() / 200_000.0;
        assert!((mean - 0.01).abs() < 0.0005, "mean {mean}");
        // The tail: x_m = mean (alpha - 1) / alpha ~ 5.1 ms is the floor, and about 450 of the
        // draws are over 10 times the mean (P(X > 100 ms) = (x_m / 100 ms)^alpha ~ 2.2e-3).
        let alpha = pareto.pareto_alpha().unwrap();
        let floor = Duration::from_secs_f64(0.01 * (alpha - 1.0) / alpha);
        assert!(times.iter().all(|&t| t + Duration::from_nanos(1) >= floor));
        let long = times.iter().filter(|&&t| t > MS * 100).count();
        assert!((300..600).contains(&long), "{long} draws over 100 ms");
    }

    #[test]
    fn draws_are_capped() {
        let wild = ServiceTime::new(kit_dist::Shape::Pareto, Some(1e12)).unwrap();
        // Mean 1e9 s: every draw is past the cap (x_m = mean / 2 at alpha ~ 2).
        let mut t = ServiceTimes::new(wild, 1e-9, 1);
        assert!((0..1000).all(|_| t.draw() == MAX_SERVICE));
    }

    #[test]
    fn entries_stay_small() {
        // A queued request must fit the 256-byte budget with its oneshot.
        assert!(size_of::<Entry<crate::queue::Reply>>() <= 32);
    }

    fn ids(log: &Rc<RefCell<Vec<(u32, Duration)>>>) -> Vec<u32> {
        log.borrow().iter().map(|(id, _)| *id).collect()
    }

    #[test]
    fn lifo_serves_the_newest_first_and_drops_what_it_takes() {
        let log = Rc::default();
        let (t0, mut b) = disciplined(Discipline::Lifo, Abandoned::DropDisconnected, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        let Some(Step::Serve { client, wait, .. }) = b.next(t0) else {
            panic!("the first is served at once")
        };
        client.answer(wait);
        for id in 1..=3 {
            b.admit(t0 + MS * id, None, fake(id, id == 2, &log))
                .unwrap();
        }
        // The newest goes next: it waits only for the rest of the service in progress.
        assert_eq!(b.wait(t0 + MS * 4), MS * 6);
        let (dones, dropped) = serve_all(&mut b, t0 + MS * 10);
        assert_eq!(dropped, 1, "2 left while it waited");
        assert_eq!(dones, [t0 + MS * 20, t0 + MS * 30]);
        assert_eq!(ids(&log), [0, 3, 1]);
        // 1 arrived at 1 ms and started at 20 ms.
        assert_eq!(log.borrow()[2].1, MS * 19);
    }

    #[test]
    fn codel_refuses_at_the_head_once_waits_stayed_over_target_for_an_interval() {
        let log = Rc::default();
        let codel = kit_defense::CodelParams {
            target_s: 0.015,
            interval_s: 0.050,
        };
        let (t0, mut b) = disciplined(Discipline::Codel(codel), Abandoned::Finish, None);
        for id in 0..10 {
            b.admit(t0, None, fake(id, false, &log)).unwrap();
        }
        // Request k starts at 10k ms having waited as long. From 20 ms every wait is over the
        // 15 ms target; at 70 ms it has stayed so for the 50 ms interval: the rest are refused
        // at once, without service.
        let mut now = t0;
        let mut refused = Vec::new();
        while let Some(step) = b.next(now) {
            match step {
                Step::Serve {
                    client, wait, done, ..
                } => {
                    now = done;
                    client.answer(wait);
                }
                Step::Refuse(client) => refused.push(client.id),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ids(&log), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(refused, [7, 8, 9]);
        assert_eq!(now, t0 + MS * 70);
        // The queue emptied: it stands no more, and the refusals took no time.
        b.admit(t0 + MS * 75, None, fake(10, false, &log)).unwrap();
        let Some(Step::Serve { wait, done, .. }) = b.next(t0 + MS * 75) else {
            panic!("served after the queue emptied")
        };
        assert_eq!((wait, done), (Duration::ZERO, t0 + MS * 85));
    }

    #[test]
    fn bounded_refuses_arrivals_while_its_limit_waits() {
        let log = Rc::default();
        let (t0, mut b) = disciplined(Discipline::Bounded { limit: 2 }, Abandoned::Finish, Some(5));
        assert!(b.admit(t0, None, fake(0, false, &log)).is_ok());
        assert!(b.admit(t0, None, fake(1, false, &log)).is_ok());
        let third = b.admit(t0, None, fake(2, false, &log));
        assert_eq!(third, Err(Refusal::QueueLimit));
        // The one in service does not wait: a place is free again.
        assert!(b.next(t0).is_some());
        assert!(b.admit(t0, None, fake(3, false, &log)).is_ok());
        assert_eq!(b.len(), 2);
        // --max-queue stays a hard cap under any discipline.
        let (t0, mut b) = disciplined(Discipline::Bounded { limit: 2 }, Abandoned::Finish, Some(1));
        assert!(b.admit(t0, None, fake(0, false, &log)).is_ok());
        let second = b.admit(t0, None, fake(1, false, &log));
        assert_eq!(second, Err(Refusal::MaxQueue));
    }

    /// Runs a sharing pod's steps on synthetic time, waking exactly at each `until`: the
    /// completions `(id, wait, at)`.
    fn share_all(b: &mut Backlog<Fake>, mut now: Instant) -> Vec<(u32, Duration, Instant)> {
        let mut finished = Vec::new();
        while let Some(step) = b.next(now) {
            match step {
                Step::Finish { client, wait, .. } => finished.push((client.id, wait, now)),
                Step::Share { until, .. } => now = until,
                other => panic!("{other:?}"),
            }
        }
        finished
    }

    #[test]
    fn sharing_serves_together_at_a_share_of_the_rate_and_the_rest_wait() {
        let log = Rc::default();
        let (t0, mut b) = disciplined(Discipline::Sharing { limit: 2 }, Abandoned::Finish, None);
        for id in 0..3 {
            b.admit(t0, None, fake(id, false, &log)).unwrap();
        }
        assert_eq!(b.len(), 3);
        let Some(Step::Share { until, started }) = b.next(t0) else {
            panic!("two enter service")
        };
        // Two of 10 ms each at half the rate: both done at 20 ms; their budgets to spin.
        assert_eq!((until, started), (t0 + MS * 20, MS * 20));
        assert_eq!(b.len(), 1);
        // The third waits for a place: at most all the work present.
        assert_eq!(b.wait(t0 + MS * 5), MS * 25);
        assert_eq!(
            share_all(&mut b, t0),
            [
                (0, Duration::ZERO, t0 + MS * 20),
                (1, Duration::ZERO, t0 + MS * 20),
                (2, MS * 20, t0 + MS * 30),
            ]
        );
        assert!(b.snapshot(t0 + MS * 30).idle);
    }

    #[test]
    fn sharing_replays_arrivals_at_their_instants_whenever_the_worker_looks() {
        let log = Rc::default();
        let (t0, mut b) = disciplined(Discipline::Sharing { limit: 8 }, Abandoned::Finish, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        assert!(matches!(b.next(t0), Some(Step::Share { until, .. }) if until == t0 + MS * 10));
        // At 5 ms the first has 5 ms of work left and shares the rate from then on: done at
        // 15 ms; the second then runs alone: done at 20 ms. The pod's rate is unchanged.
        b.admit(t0 + MS * 5, None, fake(1, false, &log)).unwrap();
        assert_eq!(b.wait(t0 + MS * 5), Duration::ZERO, "a place is free");
        assert!(!b.snapshot(t0 + MS * 5).idle);
        // The worker looks late, at 30 ms: the schedule is the same.
        let Some(Step::Finish {
            client, service, ..
        }) = b.next(t0 + MS * 30)
        else {
            panic!("the first completed")
        };
        assert_eq!((client.id, service), (0, MS * 10));
        assert_eq!(
            share_all(&mut b, t0 + MS * 30),
            [(1, Duration::ZERO, t0 + MS * 30)]
        );
        // Looking on time instead.
        let (t0, mut b) = disciplined(Discipline::Sharing { limit: 8 }, Abandoned::Finish, None);
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        b.next(t0);
        b.admit(t0 + MS * 5, None, fake(1, false, &log)).unwrap();
        let Some(Step::Share { until, started }) = b.next(t0 + MS * 5) else {
            panic!("the second entered service")
        };
        assert_eq!((until, started), (t0 + MS * 15, MS * 10));
        assert_eq!(
            share_all(&mut b, until),
            [
                (0, Duration::ZERO, t0 + MS * 15),
                (1, Duration::ZERO, t0 + MS * 20)
            ]
        );
    }

    #[test]
    fn sharing_drops_as_a_request_would_enter_service_and_drains_those_in_service() {
        let log = Rc::default();
        let (t0, mut b) = disciplined(
            Discipline::Sharing { limit: 1 },
            Abandoned::DropExpired,
            None,
        );
        b.admit(t0, None, fake(0, false, &log)).unwrap();
        b.admit(t0, Some(t0 + MS * 5), fake(1, false, &log))
            .unwrap();
        b.admit(t0, None, fake(2, false, &log)).unwrap();
        assert!(matches!(b.next(t0), Some(Step::Share { .. })));
        assert!(matches!(b.next(t0 + MS * 10), Some(Step::Finish { .. })));
        // 1 would enter at 10 ms, after its deadline.
        assert!(matches!(b.next(t0 + MS * 10), Some(Step::Drop(c)) if c.id == 1));
        assert!(
            matches!(b.next(t0 + MS * 10), Some(Step::Share { until, .. }) if until == t0 + MS * 20)
        );
        assert!(!b.snapshot(t0 + MS * 15).idle);
        assert_eq!(b.drain().map(|c| c.id).collect::<Vec<_>>(), [2]);
        assert!(b.next(t0 + MS * 30).is_none());
    }

    #[test]
    fn adaptive_refuses_over_its_limit_and_shrinks_after_a_late_answer() {
        let log = Rc::default();
        let aimd = kit_defense::AimdParams {
            initial: 4,
            min: 1,
            max: 8,
            latency_s: 0.015,
            backoff: 0.5,
        };
        let (t0, mut b) = disciplined(Discipline::Adaptive(aimd), Abandoned::Finish, None);
        for id in 0..4 {
            b.admit(t0, None, fake(id, false, &log)).unwrap();
        }
        // Four in the pod: the fifth is refused, and the refusal halves the limit.
        let fifth = b.admit(t0, None, fake(4, false, &log));
        assert_eq!(fifth, Err(Refusal::ConcurrencyLimit { limit: 4 }));
        assert_eq!(b.concurrency_limit(), Some(2));
        let mut samples = Vec::new();
        for now in [t0, t0 + MS * 10] {
            let Some(Step::Serve { sample, .. }) = b.next(now) else {
                panic!("served")
            };
            samples.push(sample.unwrap());
            b.sample(sample.unwrap());
        }
        // The first answered in 10 ms, in time, with the pod empty at its arrival: no change.
        // The second in 20 ms, over the 15 ms latency: halved.
        assert_eq!(
            samples,
            [
                Sample {
                    latency: MS * 10,
                    in_pod: 0
                },
                Sample {
                    latency: MS * 20,
                    in_pod: 1
                },
            ]
        );
        assert_eq!(b.concurrency_limit(), Some(1));
        // Two wait and one is in service: over the limit.
        let late = b.admit(t0 + MS * 15, None, fake(5, false, &log));
        assert_eq!(late, Err(Refusal::ConcurrencyLimit { limit: 1 }));
        assert_eq!(b.drain().count(), 2);
        assert!(b.admit(t0 + MS * 20, None, fake(6, false, &log)).is_ok());
    }
}
