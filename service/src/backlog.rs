//! The pure core of the pod: a FIFO [`Backlog`] paced against absolute deadlines.
//!
//! No clocks, locks or I/O here: every call takes `now` (and the backlog owns a
//! seeded RNG), so tests drive it with synthetic instants.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

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

/// The backlog is at `--max-queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// What the worker does next with the request at the head of the queue.
#[derive(Debug)]
pub enum Step<C> {
    /// Serve it: work until `done`, then answer `client` with `wait`.
    Serve {
        client: C,
        /// Time from arrival to the start of its service.
        wait: Duration,
        service: Duration,
        /// Absolute completion deadline: `max(previous done, arrival) + service`.
        done: Instant,
    },
    /// Skip it without service (drop modes); counts as `dropped`.
    Drop(C),
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

/// FIFO of queued requests plus the server's schedule.
#[derive(Debug)]
pub struct Backlog<C> {
    origin: Instant,
    entries: VecDeque<Entry<C>>,
    /// Sum of the service times of queued requests, in ns.
    queued_work: u64,
    /// When the server finishes what it has already started (ns since origin).
    free_at: u64,
    times: ServiceTimes,
    mode: Abandoned,
    max_queue: Option<usize>,
}

impl<C: Client> Backlog<C> {
    /// An empty, idle backlog. Instants before `origin` are treated as `origin`.
    pub fn new(
        origin: Instant,
        times: ServiceTimes,
        mode: Abandoned,
        max_queue: Option<usize>,
    ) -> Self {
        Self {
            origin,
            entries: VecDeque::new(),
            queued_work: 0,
            free_at: 0,
            times,
            mode,
            max_queue,
        }
    }

    /// Queues a request that arrived at `arrival`, unless the queue is full.
    pub fn admit(
        &mut self,
        arrival: Instant,
        deadline: Option<Instant>,
        client: C,
    ) -> Result<(), Full> {
        if self.max_queue.is_some_and(|max| self.entries.len() >= max) {
            return Err(Full);
        }
        let service = nanos(self.times.draw());
        self.queued_work += service;
        self.entries.push_back(Entry {
            arrival: self.ticks(arrival),
            deadline: deadline.map_or(NO_DEADLINE, |d| self.ticks(d)),
            service,
            client,
        });
        Ok(())
    }

    /// Takes the head of the queue at `now`, which must be no earlier than the
    /// previous `Serve`'s `done`. `None` when the queue is empty.
    pub fn next(&mut self, now: Instant) -> Option<Step<C>> {
        let entry = self.entries.pop_front()?;
        self.queued_work -= entry.service;
        let skip = match self.mode {
            Abandoned::Finish => false,
            Abandoned::DropDisconnected => entry.client.is_gone(),
            Abandoned::DropExpired => entry.deadline <= self.ticks(now),
        };
        if skip {
            return Some(Step::Drop(entry.client));
        }
        // Absolute pacing: the schedule, not the time the worker woke up,
        // decides when this one starts, so timer jitter never accumulates.
        let start = self.free_at.max(entry.arrival);
        self.free_at = start + entry.service;
        Some(Step::Serve {
            client: entry.client,
            wait: Duration::from_nanos(start - entry.arrival),
            service: Duration::from_nanos(entry.service),
            done: self.origin + Duration::from_nanos(self.free_at),
        })
    }

    /// Requests waiting (not counting the one in service).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The wait a request arriving at `now` would face before its service
    /// starts: what is left of the current service plus all queued work.
    pub fn wait(&self, now: Instant) -> Duration {
        let busy = self.free_at.saturating_sub(self.ticks(now));
        Duration::from_nanos(busy + self.queued_work)
    }

    /// Mean service time (for `retry-after` hints).
    pub fn mean_service(&self) -> Duration {
        self.times.mean()
    }

    /// Empties the queue, handing back the clients (at shutdown).
    pub fn drain(&mut self) -> impl Iterator<Item = C> + '_ {
        self.queued_work = 0;
        self.entries.drain(..).map(|e| e.client)
    }

    fn ticks(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.origin))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
    }

    const MS: Duration = Duration::from_millis(1);

    fn backlog(mode: Abandoned, max: Option<usize>) -> (Instant, Backlog<Fake>) {
        let t0 = Instant::now();
        let times = ServiceTimes::new(ServiceTime::DETERMINISTIC, 100.0, 1);
        (t0, Backlog::new(t0, times, mode, max))
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
        assert_eq!(b.admit(t0, None, fake(2, false, &log)), Err(Full));
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
        assert!(size_of::<Entry<tokio::sync::oneshot::Sender<Duration>>>() <= 32);
    }
}
