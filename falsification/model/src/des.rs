//! The request-level model: a seeded discrete-event simulation of individual requests. Poisson first
//! attempts following the scenario's demand (its bursts too) or the times of its trace, service
//! times drawn from the pods' own
//! distribution (`kit_dist`: deterministic, exponential, lognormal, Pareto), each attempt timing
//! out `tau_out` after it was sent (its retry follows after the backoff), the same retry budget and the
//! same HPA module (through [`Control`]) as the fluid model.
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

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Exp1;

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

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Attempt `attempt` (>= 1) of the request started at `start`.
    Retry { start: f64, attempt: u32 },
    /// A pooled server finishes its request.
    Completion,
    /// Per pod: an attempt was answered in time; its connection to pod `pod` is idle again.
    Answered { pod: u64 },
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
}

struct Sim<'a> {
    s: &'a Scenario,
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
}

/// Runs the request-level model with `seed`.
pub fn simulate(s: &Scenario, topology: Topology, seed: u64) -> Result<Run, HpaError> {
    let start = -s.warmup_s;
    let end = s.end();
    let mut control = s.control(start)?;
    let pooled = topology == Topology::Pooled;
    let mut sim = Sim::new(s, pooled, seed, start, end);
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
            match e.kind {
                Kind::Retry { start, attempt } => {
                    // The client's budget: a gateway's tries are not the client's to refuse.
                    let allowed = !s.is_client_retry(attempt)
                        || sim.budget.as_mut().is_none_or(|b| b.withdraw(now));
                    if allowed {
                        sim.arrive(now, start, attempt, control.ready(), pooled);
                    } else {
                        sim.record.row_mut(start).lost += 1.0;
                    }
                }
                // Only the clients' own pool reuses connections; a proxy picks per attempt.
                Kind::Answered { pod } if s.routing == Routing::KeepAlive => {
                    sim.connections.push(pod);
                }
                Kind::Answered { .. } => {}
                Kind::Completion => {
                    if sim.retiring > 0 {
                        sim.retiring -= 1;
                    } else {
                        sim.idle += 1;
                    }
                    sim.start_service(now);
                }
            }
        } else {
            if let Some(b) = sim.budget.as_mut() {
                b.deposit(now);
            }
            sim.record.row_mut(now).first_attempts += 1.0;
            sim.arrive(now, now, 0, control.ready(), pooled);
            next_first = sim.next_arrival(now, &changes);
        }
    }
    // Nothing is sent from `end` on, but pooled attempts sent before it still time out in the queue.
    while pooled && sim.next_timeout() < end + s.pod_timeout_s() {
        let at = sim.next_timeout();
        sim.time_out_head(at);
        events += 1;
    }
    fill_pods(&mut sim.record, s.pods);
    Ok(Run {
        record: sim.record,
        events,
    })
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
    fn new(s: &'a Scenario, pooled: bool, seed: u64, start: f64, end: f64) -> Sim<'a> {
        Sim {
            s,
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
            drops: vec![s.pod_abandoned(false) == Abandoned::Drop; s.pods as usize],
            totals: Totals::default(),
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

    fn arrive(&mut self, now: f64, start: f64, attempt: u32, ready: u32, pooled: bool) {
        self.totals.all += 1.0;
        if attempt == 0 {
            self.totals.first += 1.0;
        }
        self.record.row_mut(now).attempts += 1.0;
        if pooled {
            self.queue.push_back(Queued {
                arrived: now,
                start,
                attempt,
            });
            self.start_service(now);
            return;
        }
        if ready == 0 || self.free_at.is_empty() {
            // No endpoint: the attempt fails at once; count it as timed out.
            self.timed_out(now, now, start, attempt);
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
            self.timed_out(now + self.s.pod_timeout_s(), now, start, attempt);
        } else {
            self.heap.push(Event {
                at: done,
                kind: Kind::Answered {
                    pod: self.free_at[pod].0,
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

    /// Attempt `attempt` sent at `sent` timed out at `at`: retry it or count the request lost.
    fn timed_out(&mut self, at: f64, sent: f64, start: f64, attempt: u32) {
        self.record.row_mut(sent).timed_out += 1.0;
        if attempt < self.s.pod_retries() {
            let next = attempt + 1;
            let retry_at = at + self.s.retry_delay(next) - self.s.pod_timeout_s();
            self.heap.push(Event {
                at: retry_at,
                kind: Kind::Retry {
                    start,
                    attempt: next,
                },
            });
        } else {
            self.record.row_mut(start).lost += 1.0;
        }
    }

    /// Pooled: whether the server taking an abandoned attempt drops it: a server picked at
    /// random, weighted as the ready pods (a draw only while a rolling update mixes them).
    fn pooled_drops(&mut self) -> bool {
        let n = self.drops.len();
        let dropping = self.drops.iter().filter(|d| **d).count();
        match dropping {
            0 => false,
            d if d == n => true,
            d => self.rng.random_range(0..n) < d,
        }
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
        self.timed_out(now, q.arrived, q.start, q.attempt);
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
                self.timed_out(
                    q.arrived + self.s.pod_timeout_s(),
                    q.arrived,
                    q.start,
                    q.attempt,
                );
            }
        }
    }
}
