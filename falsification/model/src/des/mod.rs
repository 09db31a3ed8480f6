//! The request-level model: a seeded discrete-event simulation of individual requests. Poisson first
//! attempts following the scenario's demand (its bursts too) or the times of its trace, service
//! times drawn from the pods' own
//! distribution (`kit_dist`: deterministic, exponential, lognormal, Pareto), each attempt timing
//! out `tau_out` after it was sent (its retry follows after the backoff), the same retry budget and the
//! same HPA module (through `Control`) as the fluid model.
//! Behind a retrying gateway, a request's attempts at the pods are one chain
//! (`Scenario::pod_retries`): the gateway's tries follow each other at its timeout, the client's
//! retries after their backoff, and a retry budget counts only the client's.
//!
//! Per pod, an attempt goes where a keep-alive HTTP/1.1 client sends it: on the connection answered
//! last (a LIFO pool of idle connections, each to one pod), else on a new connection to a ready pod
//! chosen at random; a connection whose attempt timed out is closed. Through a proxy (the scenario's
//! [`Routing`]) the proxy picks per attempt instead: the next pod in turn, or the pod with the fewest
//! attempts in flight (each counts until it is answered or its client times out, ties in turn). Its
//! FIFO fate is known on arrival
//! (start = max(arrival, pod free), Lindley's recursion), so an arrival is one event, and an answer in
//! time one more (its connection goes back to the pool). Pooled, one FIFO
//! feeds every ready pod: attempts wait in a queue whose deadlines are in arrival order, so timeouts
//! are found by scanning its head.
//!
//! Every other discipline of the pods ([`Discipline`]) runs event by event in a `station`: per
//! pod one station per pod, pooled one station in front of every ready pod (a server each, its
//! count limits multiplied by the ready pods). There an attempt's fate is decided when it leaves
//! the queue, so each attempt has a deadline event (its client's timeout: counted as timed out
//! and retried as above, while the attempt stays queued) and a completion event:
//! - LIFO: the newest waiting attempt is served next; one whose client has gone is served when
//!   its turn comes (abandoned work served), or dropped then if the pod drops expired work.
//! - CoDel: FIFO, `Codel::on_dequeue` at each service start; a refused attempt is answered 503
//!   then, and its client retries after the backoff only (a client already gone hears nothing).
//! - Bounded: an arrival finding `limit` waiting (per ready pod, pooled) gets a 503 at once.
//! - Sharing: up to `limit` attempts in service at once (per ready pod, pooled), each at
//!   `min(1, servers / n)` of a pod's rate (completions in virtual time); the rest wait FIFO.
//!   Work whose client left is still served to the end, or dropped before its service starts.
//! - Adaptive: FIFO under `AdaptiveLimit` on the attempts in the pod (pooled: per ready pod); an
//!   arrival over it gets a 503 at once (`on_refused`), each completion whose client still
//!   waits is a sample (`on_sample(wait + service, found in the pod at arrival)`), as the pod
//!   takes them.
//!
//! Per pod, a 503 leaves its keep-alive connection open (the pod closes connections only when
//! it stops): it goes back to the pool at once, so the client's next attempt, its retry too,
//! takes it to the same pod. A pod that stops or is killed finishes its queue, as in FIFO.
//! A 503 counts in `refused` of the row its attempt was sent in. The clients' own defenses (one
//! client, as the loadgen is one process) are in `client`: every attempt passes its gate
//! before it is sent (a refusal counts in `rejected`, and its request is lost at once), retries
//! pay its quota after the retry budget, and it hears every attempt's outcome when it happens.
//! Without a discipline or a client defense the model is the FIFO above, draw for draw.

mod client;
mod station;
#[cfg(test)]
mod tests;

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use kit_defense::Discipline;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Exp1;

use self::client::{Client, Pass};
use self::station::{Entry, Station, Taken};
use crate::budget::BudgetState;
use crate::control::{PodEvent, Totals};
use crate::experiment::{Abandoned, Routing, Scenario, Topology};
use crate::hpa::HpaError;
use crate::outcome::Record;

/// A request-level run: its record and how many events it took.
#[derive(Debug, Clone)]
pub struct Run {
    pub record: Record,
    pub events: u64,
}

/// What happens at an instant. Kept to 16 bytes (an event to 24): the FIFO model's speed is
/// its heap's. `cost` is what the request's last retry paid the client's quota (0: none).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Attempt `attempt` (>= 1) of the request started at `start`, after the one before timed
    /// out (`after_timeout`) or was refused.
    Retry {
        start: f64,
        attempt: u32,
        cost: u16,
        after_timeout: bool,
    },
    /// An attempt the client's rate limiter held back is sent.
    Send { start: f64, attempt: u32, cost: u16 },
    /// A pooled server finishes its request.
    Completion,
    /// Per pod: an attempt was answered in time; its connection to pod `pod` is idle again.
    Answered { pod: u64, cost: u16 },
    /// Pooled FIFO with a client defense: an attempt answered in time reaches its client.
    Replied { cost: u16 },
    /// With a client defense: a timeout decided earlier reaches its client.
    TimedOut { start: f64, attempt: u32, cost: u16 },
    /// Station: the client of the attempt in `slot` stops waiting, if the slot still holds the
    /// attempt of that `generation`.
    Deadline { slot: u32, generation: u32 },
    /// Station `station` (one attempt per server) finishes the attempt in `slot`.
    Done { station: u32, slot: u32 },
    /// Station `station` (sharing): the attempt first in line finishes, if `generation` is
    /// still the station's.
    Shared { station: u32, generation: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Event {
    at: f64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.at.total_cmp(&other.at) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed: the heap pops the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at)
    }
}

/// An instant ordered by `total_cmp`, for the heaps of attempts in flight.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Until(f64);
impl Eq for Until {}
impl PartialOrd for Until {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Until {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    arrived: f64,
    start: f64,
    attempt: u32,
    cost: u16,
}

/// An attempt a station holds or its client waits for.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Bumped when the slot is freed, so that its deadline event knows it is stale.
    generation: u32,
    start: f64,
    sent: f64,
    attempt: u32,
    cost: u16,
    /// The station (per pod, the pod's id).
    station: u32,
    /// Attempts it found in the station on arrival, per server (`Entry::in_pod`).
    in_pod: u32,
    /// Its client still waits for it.
    waiting: bool,
    /// Its station still holds it (queued or in service).
    held: bool,
}

struct Sim<'a> {
    s: &'a Scenario,
    pooled: bool,
    rng: SmallRng,
    record: Record,
    heap: BinaryHeap<Event>,
    budget: Option<BudgetState>,
    /// Per pod: each ready pod's id and when its server is free (creation order, so ids ascend).
    free_at: Vec<(u64, f64)>,
    next_pod: u64,
    /// Per pod: idle connections by pod id, the last answered on top.
    connections: Vec<u64>,
    /// Per pod through a proxy: when each attempt in flight at each pod (as `free_at`) stops
    /// counting, and whose turn is next.
    in_flight: Vec<BinaryHeap<Reverse<Until>>>,
    turn: usize,
    /// The next arrival of the scenario's trace, if it replays one.
    trace_next: usize,
    /// Pooled: the FIFO, how many at its head have timed out, idle servers, servers to retire.
    queue: VecDeque<Queued>,
    timed_out_head: usize,
    idle: u32,
    retiring: u32,
    /// Whether each ready pod drops abandoned work, in the order they turned ready (pooled and
    /// per pod alike; per pod it runs beside `free_at`).
    drops: Vec<bool>,
    /// Arrivals so far, and service time started (counted when it starts: the CPU signal's windows
    /// are thousands of service times long).
    totals: Totals,
    /// The client's defenses, if it has any.
    client: Option<Client>,
    /// A discipline but FIFO: the stations (per pod by pod id, pooled one), the attempts they
    /// hold (slots, free ones listed), attempts in flight at each per-pod station (least
    /// connections), and room for a sharing station's finished attempts.
    stations: Vec<Station>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    flying: Vec<u32>,
    finished: Vec<Entry>,
}

/// Runs the request-level model with `seed`.
pub fn simulate(s: &Scenario, topology: Topology, seed: u64) -> Result<Run, HpaError> {
    run(s, topology, seed, s.discipline != Discipline::Fifo).map(|(run, _)| run)
}

/// The model, FIFO in stations too when `stations` (the tests' check on Lindley's recursion),
/// with its totals at the end.
fn run(
    s: &Scenario,
    topology: Topology,
    seed: u64,
    stations: bool,
) -> Result<(Run, Totals), HpaError> {
    let start = -s.warmup_s;
    let end = s.end();
    let mut control = s.control(start)?;
    let pooled = topology == Topology::Pooled;
    let mut sim = Sim::new(s, pooled, seed, (start, end), stations);
    let changes = s.demand_changes();
    let mut next_first = sim.next_arrival(start, &changes);
    let mut pod_events = Vec::new();
    let mut events = 0u64;
    loop {
        let heap_at = sim.heap.peek().map_or(f64::INFINITY, |e| e.at);
        let scan_at = if pooled {
            sim.next_timeout()
        } else {
            f64::INFINITY
        };
        let control_at = control.next_event();
        let now = next_first.min(heap_at).min(scan_at).min(control_at);
        if now >= end {
            break;
        }
        events += 1;
        if control_at == now {
            control.advance(now, sim.totals, &mut pod_events);
            for e in pod_events.drain(..) {
                sim.pod_change(now, e, pooled);
            }
            let row = sim.record.row_mut(now);
            row.pods_ready = control.ready();
            row.pods_desired = control.desired();
        } else if scan_at == now {
            sim.time_out_head(now);
        } else if heap_at == now {
            let Some(e) = sim.heap.pop() else { break };
            sim.on_event(now, e.kind, control.ready());
        } else {
            if let Some(b) = sim.budget.as_mut() {
                b.deposit(now);
            }
            sim.record.row_mut(now).first_attempts += 1.0;
            sim.send(now, now, 0, 0, control.ready());
            next_first = sim.next_arrival(now, &changes);
        }
    }
    // Nothing is sent from `end` on, but pooled attempts sent before it still time out in the queue.
    while pooled && sim.next_timeout() < end + s.pod_timeout_s() {
        let at = sim.next_timeout();
        sim.time_out_head(at);
        events += 1;
    }
    events += sim.drain(end + s.pod_timeout_s());
    fill_pods(&mut sim.record, s.pods);
    Ok((
        Run {
            record: sim.record,
            events,
        },
        sim.totals,
    ))
}

/// Pooled: whether a server of the ready pods (`drops`: whether each drops abandoned work) drops
/// the abandoned attempt it takes.
fn pooled_drops(drops: &[bool], rng: &mut SmallRng) -> bool {
    let n = drops.len();
    let dropping = drops.iter().filter(|d| **d).count();
    match dropping {
        0 => false,
        d if d == n => true,
        d => rng.random_range(0..n) < d,
    }
}

/// Rows without a control event carry the pod counts of the row before.
fn fill_pods(record: &mut Record, initial: u32) {
    let mut last = (initial, initial);
    for r in &mut record.rows {
        if r.pods_ready == 0 && r.pods_desired == 0 {
            (r.pods_ready, r.pods_desired) = last;
        }
        last = (r.pods_ready, r.pods_desired);
    }
}

impl<'a> Sim<'a> {
    fn new(s: &'a Scenario, pooled: bool, seed: u64, span: (f64, f64), stations: bool) -> Sim<'a> {
        let (start, end) = span;
        let drops = s.pod_abandoned(false) == Abandoned::Drop;
        let stations = match (stations, pooled) {
            (false, _) => Vec::new(),
            (true, true) => vec![Station::new(&s.discipline, s.pods, false)],
            (true, false) => (0..s.pods)
                .map(|_| Station::new(&s.discipline, 1, drops))
                .collect(),
        };
        Sim {
            s,
            pooled,
            rng: SmallRng::seed_from_u64(seed),
            record: Record::span(start, end, 1.0 / s.time_scale),
            heap: BinaryHeap::new(),
            budget: s.retry_budget.map(|b| BudgetState::new(b, start)),
            free_at: if pooled {
                Vec::new()
            } else {
                (0..u64::from(s.pods)).map(|id| (id, start)).collect()
            },
            next_pod: u64::from(s.pods),
            connections: Vec::new(),
            in_flight: if pooled {
                Vec::new()
            } else {
                vec![BinaryHeap::new(); s.pods as usize]
            },
            turn: 0,
            trace_next: 0,
            queue: VecDeque::new(),
            timed_out_head: 0,
            idle: if pooled { s.pods } else { 0 },
            retiring: 0,
            drops: vec![drops; s.pods as usize],
            totals: Totals::default(),
            client: Client::new(&s.client, s.timeout_s, start),
            flying: if pooled || stations.is_empty() {
                Vec::new()
            } else {
                vec![0; s.pods as usize]
            },
            stations,
            slots: Vec::new(),
            free_slots: Vec::new(),
            finished: Vec::new(),
        }
    }
}

impl Sim<'_> {
    /// Next first attempt after `now`: the trace's next replayed time, or Poisson, exact across
    /// the demand's steps (memorylessness).
    fn next_arrival(&mut self, mut now: f64, changes: &[f64]) -> f64 {
        if let Some(trace) = &self.s.trace {
            while self.trace_next < trace.times.len() {
                let i = self.trace_next;
                self.trace_next += 1;
                if trace.keeps(i) {
                    return trace.times[i];
                }
            }
            return f64::INFINITY;
        }
        loop {
            let rate = self.s.demand(now);
            let next_change = changes
                .iter()
                .copied()
                .find(|&c| c > now)
                .unwrap_or(f64::INFINITY);
            let gap: f64 = self.rng.sample(Exp1);
            let candidate = if rate > 0.0 {
                now + gap / rate
            } else {
                f64::INFINITY
            };
            if candidate <= next_change {
                return candidate;
            }
            now = next_change;
        }
    }

    fn service_time(&mut self) -> f64 {
        self.s
            .service
            .sample(1.0 / self.s.rate_per_pod, &mut self.rng)
    }

    fn pod_change(&mut self, now: f64, e: PodEvent, pooled: bool) {
        match e {
            PodEvent::Ready { rolled } => self
                .drops
                .push(self.s.pod_abandoned(rolled) == Abandoned::Drop),
            PodEvent::Removed(i) => {
                if i < self.drops.len() {
                    self.drops.remove(i);
                }
            }
            PodEvent::Gone(i) => {
                if i < self.drops.len() {
                    self.drops.remove(i);
                }
            }
        }
        if !self.stations.is_empty() {
            self.station_pod_change(now, e);
            return;
        }
        match (e, pooled) {
            (PodEvent::Ready { .. }, true) => {
                self.idle += 1;
                self.start_service(now);
            }
            (PodEvent::Ready { .. }, false) => {
                self.free_at.push((self.next_pod, now));
                self.in_flight.push(BinaryHeap::new());
                self.next_pod += 1;
            }
            // Graceful stop: a busy pooled server leaves after its current request.
            (PodEvent::Removed(_), true) if self.idle > 0 => self.idle -= 1,
            (PodEvent::Removed(_), true) => self.retiring += 1,
            // Per pod, the removed pod's queued work is already scheduled; it just gets no more (its
            // idle connections are skipped when next taken).
            (PodEvent::Removed(i), false) => {
                if i < self.free_at.len() {
                    self.free_at.remove(i);
                    self.in_flight.remove(i);
                }
            }
            // A pod gone (killed, or terminated by a rolling update): pooled, like a stop (the
            // queue is the pool's); per pod, it gets no more work. Outcomes already drawn for its
            // queue stand: the request level does not take back answers the pod would have given
            // (the fluid does).
            (PodEvent::Gone(_), true) if self.idle > 0 => self.idle -= 1,
            (PodEvent::Gone(_), true) => self.retiring += 1,
            (PodEvent::Gone(i), false) => {
                if i < self.free_at.len() {
                    self.free_at.remove(i);
                    self.in_flight.remove(i);
                }
            }
        }
    }

    /// An attempt reaches the pods at `now` (sent through the client's gate).
    fn arrive(&mut self, now: f64, start: f64, attempt: u32, cost: u16, ready: u32) {
        self.totals.all += 1.0;
        if attempt == 0 {
            self.totals.first += 1.0;
        }
        self.record.row_mut(now).attempts += 1.0;
        if !self.stations.is_empty() {
            self.arrive_at_station(now, start, attempt, cost, ready);
            return;
        }
        if self.pooled {
            self.queue.push_back(Queued {
                arrived: now,
                start,
                attempt,
                cost,
            });
            self.start_service(now);
            return;
        }
        if ready == 0 || self.free_at.is_empty() {
            // No endpoint: the attempt fails at once; count it as timed out.
            self.timed_out(now, now, start, attempt, cost);
            return;
        }
        let pod = match self.s.routing {
            Routing::KeepAlive => self.pick_pod(),
            Routing::RoundRobin => self.next_in_turn(),
            Routing::LeastConnections => self.least_in_flight(now),
        };
        let begin = self.free_at[pod].1.max(now);
        let wait = begin - now;
        let row = self.record.row_mut(now);
        row.max_wait_s = row.max_wait_s.max(wait);
        let dropped = self.drops[pod] && wait >= self.s.pod_timeout_s();
        let done = if dropped {
            f64::INFINITY
        } else {
            begin + self.service_time()
        };
        if !dropped {
            self.free_at[pod].1 = done;
            self.totals.busy_s += done - begin;
        }
        if self.s.routing == Routing::LeastConnections {
            let until = done.min(now + self.s.pod_timeout_s());
            self.in_flight[pod].push(Reverse(Until(until)));
        }
        if done - now > self.s.pod_timeout_s() {
            self.times_out_later(now + self.s.pod_timeout_s(), now, start, attempt, cost);
        } else {
            self.heap.push(Event {
                at: done,
                kind: Kind::Answered {
                    pod: self.free_at[pod].0,
                    cost,
                },
            });
        }
    }

    /// The pod (index into `free_at`) of the idle connection answered last whose pod is still
    /// ready, else of a new connection: a ready pod at random.
    fn pick_pod(&mut self) -> usize {
        while let Some(id) = self.connections.pop() {
            if let Ok(pod) = self.free_at.binary_search_by_key(&id, |p| p.0) {
                return pod;
            }
        }
        self.rng.random_range(0..self.free_at.len())
    }

    /// Round robin over the ready pods.
    fn next_in_turn(&mut self) -> usize {
        self.turn = (self.turn + 1) % self.free_at.len();
        self.turn
    }

    /// The pod with the fewest attempts in flight at `now`; ties go in turn.
    fn least_in_flight(&mut self, now: f64) -> usize {
        let n = self.in_flight.len();
        let mut best = (usize::MAX, 0);
        for k in 0..n {
            let i = (self.turn + 1 + k) % n;
            let heap = &mut self.in_flight[i];
            while heap.peek().is_some_and(|Reverse(Until(t))| *t <= now) {
                heap.pop();
            }
            if heap.len() < best.0 {
                best = (heap.len(), i);
            }
        }
        self.turn = best.1;
        best.1
    }

    /// Attempt `attempt` sent at `sent` timed out at `at` (now): retry it or count the request
    /// lost.
    fn timed_out(&mut self, at: f64, sent: f64, start: f64, attempt: u32, cost: u16) {
        self.record.row_mut(sent).timed_out += 1.0;
        self.heard_timeout(at, start, attempt, cost);
    }

    /// As [`Sim::timed_out`], for a timeout at `at` after now: counted now, and the client hears
    /// it at `at` (at once without a client defense: nothing else depends on when).
    fn times_out_later(&mut self, at: f64, sent: f64, start: f64, attempt: u32, cost: u16) {
        if self.client.is_none() {
            self.timed_out(at, sent, start, attempt, cost);
            return;
        }
        self.record.row_mut(sent).timed_out += 1.0;
        self.heap.push(Event {
            at,
            kind: Kind::TimedOut {
                start,
                attempt,
                cost,
            },
        });
    }

    /// The timeout of attempt `attempt` at `at`: the client hears it (if it is the last try of a
    /// gateway's for its attempt), and it is retried or its request lost.
    fn heard_timeout(&mut self, at: f64, start: f64, attempt: u32, cost: u16) {
        if let Some(c) = self.client.as_mut()
            && (attempt + 1).is_multiple_of(self.s.gateway_tries())
        {
            c.on_timed_out(at);
        }
        if attempt < self.s.pod_retries() {
            let next = attempt + 1;
            let retry_at = at + self.s.retry_delay(next) - self.s.pod_timeout_s();
            self.heap.push(Event {
                at: retry_at,
                kind: Kind::Retry {
                    start,
                    attempt: next,
                    cost,
                    after_timeout: true,
                },
            });
        } else {
            self.record.row_mut(start).lost += 1.0;
        }
    }

    /// Pooled: whether the server taking an abandoned attempt drops it: a server picked at
    /// random, weighted as the ready pods (a draw only while a rolling update mixes them).
    fn pooled_drops(&mut self) -> bool {
        pooled_drops(&self.drops, &mut self.rng)
    }

    /// Pooled: when the oldest queued attempt not yet timed out will time out.
    fn next_timeout(&self) -> f64 {
        self.queue
            .get(self.timed_out_head)
            .map_or(f64::INFINITY, |q| q.arrived + self.s.pod_timeout_s())
    }

    fn time_out_head(&mut self, now: f64) {
        let q = self.queue[self.timed_out_head];
        self.timed_out_head += 1;
        self.timed_out(now, q.arrived, q.start, q.attempt, q.cost);
    }

    /// Pooled: idle servers take from the head of the queue.
    fn start_service(&mut self, now: f64) {
        while self.idle > 0 {
            let Some(q) = self.queue.pop_front() else {
                return;
            };
            let already_timed_out = self.timed_out_head > 0;
            if already_timed_out {
                self.timed_out_head -= 1;
                if self.pooled_drops() {
                    continue;
                }
            }
            let wait = now - q.arrived;
            let row = self.record.row_mut(q.arrived);
            row.max_wait_s = row.max_wait_s.max(wait);
            let done = now + self.service_time();
            self.totals.busy_s += done - now;
            self.idle -= 1;
            self.heap.push(Event {
                at: done,
                kind: Kind::Completion,
            });
            if !already_timed_out && done - q.arrived > self.s.pod_timeout_s() {
                self.times_out_later(
                    q.arrived + self.s.pod_timeout_s(),
                    q.arrived,
                    q.start,
                    q.attempt,
                    q.cost,
                );
            } else if !already_timed_out && self.client.is_some() {
                self.heap.push(Event {
                    at: done,
                    kind: Kind::Replied { cost: q.cost },
                });
            }
        }
    }
}

/// What happens at an instant, the client's gate and outcomes, and the stations.
impl Sim<'_> {
    /// The event `kind` due at `now`, with `ready` pods.
    fn on_event(&mut self, now: f64, kind: Kind, ready: u32) {
        match kind {
            Kind::Retry {
                start,
                attempt,
                cost,
                after_timeout,
            } => self.retry(now, (start, attempt, cost), after_timeout, ready),
            Kind::Send {
                start,
                attempt,
                cost,
            } => self.arrive(now, start, attempt, cost, ready),
            Kind::Answered { pod, cost } => {
                if let Some(c) = self.client.as_mut() {
                    c.on_answered(now, cost);
                }
                // Only the clients' own pool reuses connections; a proxy picks per attempt.
                if self.s.routing == Routing::KeepAlive {
                    self.connections.push(pod);
                }
            }
            Kind::Replied { cost } => {
                if let Some(c) = self.client.as_mut() {
                    c.on_answered(now, cost);
                }
            }
            Kind::Completion => {
                if self.retiring > 0 {
                    self.retiring -= 1;
                } else {
                    self.idle += 1;
                }
                self.start_service(now);
            }
            Kind::TimedOut {
                start,
                attempt,
                cost,
            } => self.heard_timeout(now, start, attempt, cost),
            Kind::Deadline { slot, generation } => self.deadline(now, slot, generation),
            Kind::Done { station, slot } => {
                let sl = self.slots[slot as usize];
                let e = Entry {
                    slot,
                    arrived: sl.sent,
                    work: 0.0,
                    in_pod: sl.in_pod,
                };
                self.stations[station as usize].complete(now, &e, sl.waiting);
                self.answer(now, slot);
                self.serve(now, station as usize);
            }
            Kind::Shared {
                station,
                generation,
            } => {
                let k = station as usize;
                if self.stations[k].generation != generation {
                    return;
                }
                let mut done = std::mem::take(&mut self.finished);
                self.stations[k].complete_shared(now, &mut done);
                for e in done.drain(..) {
                    self.answer(now, e.slot);
                }
                self.finished = done;
                self.serve(now, k);
            }
        }
    }

    /// Attempt `attempt` of the request started at `start` (`(start, attempt, cost)`) is due:
    /// the retry budget (a client's retries only: a gateway's tries are not the client's to
    /// refuse), then the client's quota, then its gate.
    fn retry(&mut self, now: f64, a: (f64, u32, u16), after_timeout: bool, ready: u32) {
        let (start, attempt, cost) = a;
        let client_retry = self.s.is_client_retry(attempt);
        let allowed = !client_retry || self.budget.as_mut().is_none_or(|b| b.withdraw(now));
        if !allowed {
            self.record.row_mut(start).lost += 1.0;
            return;
        }
        if !client_retry {
            self.arrive(now, start, attempt, cost, ready);
            return;
        }
        let cost = match self
            .client
            .as_mut()
            .map(|c| c.retry_cost(after_timeout, cost))
        {
            None => cost,
            Some(Some(paid)) => paid,
            Some(None) => {
                self.record.row_mut(start).lost += 1.0;
                return;
            }
        };
        self.send(now, start, attempt, cost, ready);
    }

    /// A client attempt wants to go at `now`: through the client's gate to the pods, later, or
    /// nowhere (its request is lost).
    fn send(&mut self, now: f64, start: f64, attempt: u32, cost: u16, ready: u32) {
        let pass = match self.client.as_mut() {
            None => Pass::Now,
            Some(c) => {
                let rng = &mut self.rng;
                c.pass(now, || rng.random::<f64>())
            }
        };
        match pass {
            Pass::Now => self.arrive(now, start, attempt, cost, ready),
            Pass::After(delay) => self.heap.push(Event {
                at: now + delay,
                kind: Kind::Send {
                    start,
                    attempt,
                    cost,
                },
            }),
            Pass::Refused => {
                self.record.row_mut(now).rejected += 1.0;
                self.record.row_mut(start).lost += 1.0;
            }
        }
    }

    /// A pod answered attempt `attempt`, sent at `sent`, with a 503 at `now`: the client hears
    /// it at once and retries after its backoff (its next attempt, past a gateway's tries: a
    /// gateway passes a 503 on), or the request is lost.
    fn refused(&mut self, now: f64, sent: f64, start: f64, attempt: u32, cost: u16) {
        self.record.row_mut(sent).refused += 1.0;
        if let Some(c) = self.client.as_mut() {
            c.on_refused(now);
        }
        let tries = self.s.gateway_tries();
        let next = (attempt / tries + 1) * tries;
        if next <= self.s.pod_retries() {
            let backoff = (self.s.retry_delay(next) - self.s.pod_timeout_s()).max(0.0);
            self.heap.push(Event {
                at: now + backoff,
                kind: Kind::Retry {
                    start,
                    attempt: next,
                    cost,
                    after_timeout: false,
                },
            });
        } else {
            self.record.row_mut(start).lost += 1.0;
        }
    }

    /// An attempt reaches the stations: per pod routed as the FIFO model routes it, refused at
    /// once if the station sheds it, else queued with its deadline.
    fn arrive_at_station(&mut self, now: f64, start: f64, attempt: u32, cost: u16, ready: u32) {
        let (k, pod) = if self.pooled {
            (0, None)
        } else {
            if ready == 0 || self.free_at.is_empty() {
                // No endpoint: the attempt fails at once; count it as timed out.
                self.timed_out(now, now, start, attempt, cost);
                return;
            }
            let i = match self.s.routing {
                Routing::KeepAlive => self.pick_pod(),
                Routing::RoundRobin => self.next_in_turn(),
                Routing::LeastConnections => self.least_flying(),
            };
            let id = self.free_at[i].0;
            (id as usize, Some(id))
        };
        let Some(in_pod) = self.stations[k].offer() else {
            if let Some(id) = pod
                && self.s.routing == Routing::KeepAlive
            {
                self.connections.push(id);
            }
            self.refused(now, now, start, attempt, cost);
            return;
        };
        // Per pod the service time is drawn on arrival, as Lindley's recursion does; pooled when
        // service starts, as the pooled FIFO does (a station of FIFO repeats both, draw for draw).
        let work = if self.pooled {
            f64::NAN
        } else {
            self.service_time()
        };
        let slot = self.new_slot(Slot {
            generation: 0,
            start,
            sent: now,
            attempt,
            cost,
            station: k as u32,
            in_pod,
            waiting: true,
            held: true,
        });
        if pod.is_some() {
            self.flying[k] += 1;
        }
        let generation = self.slots[slot as usize].generation;
        self.heap.push(Event {
            at: now + self.s.pod_timeout_s(),
            kind: Kind::Deadline { slot, generation },
        });
        self.stations[k].push(Entry {
            slot,
            arrived: now,
            work,
            in_pod,
        });
        self.serve(now, k);
    }

    /// Station `k`'s free servers (or shares) take from its queue at `now`.
    fn serve(&mut self, now: f64, k: usize) {
        let timeout = self.s.pod_timeout_s();
        while self.stations[k].has_room() {
            let (pooled, own) = (self.pooled, self.stations[k].drops);
            let (drops, rng) = (&self.drops, &mut self.rng);
            let expired = |e: &Entry| {
                now - e.arrived >= timeout
                    && if pooled {
                        pooled_drops(drops, rng)
                    } else {
                        own
                    }
            };
            let Some(taken) = self.stations[k].take(now, expired) else {
                break;
            };
            match taken {
                Taken::Dropped(e) => {
                    self.note_wait(now, &e);
                    self.slots[e.slot as usize].held = false;
                    self.free_if_done(e.slot);
                }
                Taken::Refused(e) => {
                    self.note_wait(now, &e);
                    self.refused_late(now, e.slot);
                }
                Taken::Serve(mut e) => {
                    self.note_wait(now, &e);
                    if e.work.is_nan() {
                        e.work = self.service_time();
                    }
                    self.totals.busy_s += e.work;
                    if let Some(done) = self.stations[k].start(now, e) {
                        self.heap.push(Event {
                            at: done,
                            kind: Kind::Done {
                                station: k as u32,
                                slot: e.slot,
                            },
                        });
                    }
                }
            }
        }
        if let Some(Some(at)) = self.stations[k].next_shared(now) {
            let generation = self.stations[k].generation;
            self.heap.push(Event {
                at,
                kind: Kind::Shared {
                    station: k as u32,
                    generation,
                },
            });
        }
    }

    /// `e` leaves the queue at `now`: its wait counts in the row it arrived in.
    fn note_wait(&mut self, now: f64, e: &Entry) {
        let row = self.record.row_mut(e.arrived);
        row.max_wait_s = row.max_wait_s.max(now - e.arrived);
    }

    /// The client of the attempt in `slot` stops waiting for it, answered or refused: its
    /// connection (keep-alive, per pod) is idle again.
    fn settle(&mut self, slot: u32) -> Slot {
        let sl = self.slots[slot as usize];
        self.slots[slot as usize].waiting = false;
        if !self.pooled {
            self.flying[sl.station as usize] -= 1;
            if self.s.routing == Routing::KeepAlive {
                self.connections.push(u64::from(sl.station));
            }
        }
        sl
    }

    /// CoDel refused the attempt in `slot` at `now`: a 503 its client hears if it still waits.
    fn refused_late(&mut self, now: f64, slot: u32) {
        self.slots[slot as usize].held = false;
        if self.slots[slot as usize].waiting {
            let sl = self.settle(slot);
            self.refused(now, sl.sent, sl.start, sl.attempt, sl.cost);
        }
        self.free_if_done(slot);
    }

    /// The attempt in `slot` was served to the end at `now`: answered in time if its client
    /// still waits, else served for nobody.
    fn answer(&mut self, now: f64, slot: u32) {
        self.slots[slot as usize].held = false;
        if self.slots[slot as usize].waiting {
            let sl = self.settle(slot);
            if let Some(c) = self.client.as_mut() {
                c.on_answered(now, sl.cost);
            }
        }
        self.free_if_done(slot);
    }

    /// The client's timeout of the attempt in `slot` (of `generation`) is due at `now`.
    fn deadline(&mut self, now: f64, slot: u32, generation: u32) {
        let sl = self.slots[slot as usize];
        if sl.generation != generation || !sl.waiting {
            return;
        }
        self.slots[slot as usize].waiting = false;
        if !self.pooled {
            self.flying[sl.station as usize] -= 1;
        }
        self.timed_out(now, sl.sent, sl.start, sl.attempt, sl.cost);
        self.free_if_done(slot);
    }

    fn new_slot(&mut self, slot: Slot) -> u32 {
        match self.free_slots.pop() {
            Some(i) => {
                let generation = self.slots[i as usize].generation;
                self.slots[i as usize] = Slot { generation, ..slot };
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Frees `slot` once neither its client nor its station holds it.
    fn free_if_done(&mut self, slot: u32) {
        let sl = &mut self.slots[slot as usize];
        if !sl.waiting && !sl.held {
            sl.generation = sl.generation.wrapping_add(1);
            self.free_slots.push(slot);
        }
    }

    /// Per pod with least connections: the ready pod with the fewest attempts in flight (each
    /// counts until it is answered, refused or its client times out); ties go in turn.
    fn least_flying(&mut self) -> usize {
        let n = self.free_at.len();
        let mut best = (u32::MAX, 0);
        for k in 0..n {
            let i = (self.turn + 1 + k) % n;
            let flying = self.flying[self.free_at[i].0 as usize];
            if flying < best.0 {
                best = (flying, i);
            }
        }
        self.turn = best.1;
        best.1
    }

    /// The ready pods changed at `now` (the drop flags already follow them). Per pod a new pod
    /// is a new station, and a pod that leaves finishes its queue (graceful stop; a killed one
    /// too: as in the FIFO model, answers already due stand). Pooled, the servers change: one
    /// leaving finishes the attempt it serves.
    fn station_pod_change(&mut self, now: f64, e: PodEvent) {
        if self.pooled {
            let servers = self.stations[0].servers();
            let servers = match e {
                PodEvent::Ready { .. } => servers + 1,
                PodEvent::Removed(_) | PodEvent::Gone(_) => servers.saturating_sub(1),
            };
            self.stations[0].set_servers(now, servers);
            self.serve(now, 0);
            return;
        }
        match e {
            PodEvent::Ready { .. } => {
                let drops = self.drops.last().copied().unwrap_or(false);
                self.free_at.push((self.next_pod, now));
                self.in_flight.push(BinaryHeap::new());
                self.stations
                    .push(Station::new(&self.s.discipline, 1, drops));
                self.flying.push(0);
                self.next_pod += 1;
            }
            PodEvent::Removed(i) | PodEvent::Gone(i) => {
                if i < self.free_at.len() {
                    self.free_at.remove(i);
                    self.in_flight.remove(i);
                }
            }
        }
    }

    /// After `end` nothing is sent, but the stations' attempts sent before it are still served,
    /// refused or timed out until `until`; what still waits then has waited at least that long.
    /// Returns the events it took.
    fn drain(&mut self, until: f64) -> u64 {
        if self.stations.is_empty() {
            return 0;
        }
        let mut events = 0;
        while let Some(&e) = self.heap.peek()
            && e.at < until
        {
            self.heap.pop();
            if matches!(
                e.kind,
                Kind::Deadline { .. } | Kind::Done { .. } | Kind::Shared { .. }
            ) {
                events += 1;
                self.on_event(e.at, e.kind, 0);
            }
        }
        for st in &self.stations {
            for e in st.waiting() {
                let row = self.record.row_mut(e.arrived);
                row.max_wait_s = row.max_wait_s.max(until - e.arrived);
            }
        }
        events
    }
}
