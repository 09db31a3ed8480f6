//! The fluid model: work as a continuous flow through FIFO queues, advanced in fixed steps.
//!
//! Pooled: one queue served at `C` = ready pods x `c`; the wait an arrival sees is backlog / `C`.
//! Per pod: a queue per ready pod, and the scenario's [`Routing`] deciding where an attempt (first or
//! retry alike) goes. With the clients' keep-alive connections ([`route`]): on the connection answered
//! last, else a new connection to a ready pod at random, as a Kubernetes Service picks an endpoint per
//! connection. So a pod keeps the attempts its answers bring back and, while no connection is idle,
//! also takes its share of the new ones; a pod that answers nothing in time gets only that share.
//! Through a proxy: round robin spreads every attempt evenly ([`spread`]); least connections fills the
//! pods with the fewest attempts in flight first ([`least_connections`]), an attempt counting until it
//! is answered or its client times out. A new pod starts empty; a removed pod
//! (the ReplicaSet's victim, [`crate::control::ready_victim`]: an old pod that still holds debt as
//! likely as a new one) leaves the endpoints, its connections are closed so that its clients go on
//! the other pods' connections or new ones, and it finishes its backlog for nobody. In both, an attempt arriving to a wait of at
//! least `tau_out` times out and its retry arrives `tau_out` (+ backoff) later; abandoned work is served,
//! or never queued when servers drop it. Pods that drop expired work hold a timeout's worth and,
//! while arrivals overflow it, serve each request at the edge of its deadline: in time only when
//! its service ends within the Poisson gap before it ([`Pod::admit`]). A retry budget caps the
//! retry flow at `ratio` x first attempts.
//! Behind a retrying gateway, a request's attempts at the pods are one chain
//! (`Scenario::pod_retries`): `tau_out` is the gateway's timeout and the budget caps only the
//! client's retries.

use std::collections::VecDeque;

use kit_defense::breaker::State as BreakerState;
use kit_defense::quota::AWS_STANDARD;
use kit_defense::{AdaptiveRate, Breaker, Discipline, QuotaMode, Throttle};

use crate::control::{Control, PodEvent, Totals};
use crate::experiment::{Abandoned, Routing, Scenario, Topology};
use crate::hpa::HpaError;
use crate::outcome::Record;

/// Runs the fluid model for the scenario and returns its per-second (experiment time) record.
pub fn simulate(s: &Scenario, topology: Topology) -> Result<Record, HpaError> {
    let mut fluid = Fluid::new(s, topology)?;
    let steps = ((fluid.end - fluid.start) / fluid.dt).round() as u64;
    for i in 0..steps {
        fluid.step(i);
    }
    Ok(fluid.record)
}

/// The state of one fluid run, advanced a step of `dt` at a time.
struct Fluid<'s> {
    s: &'s Scenario,
    topology: Topology,
    dt: f64,
    start: f64,
    end: f64,
    record: Record,
    control: Control,
    /// A request's attempts at the pods, the client's and a gateway's alike, as one chain.
    retries: u32,
    /// rings[n] holds the attempts n + 1 on their way: timed out as attempt n, due
    /// `retry_delay(n + 1)` later.
    rings: Vec<Vec<f64>>,
    offsets: Vec<f64>,
    /// This step's arrivals of each attempt.
    arrivals: Vec<f64>,
    /// Service rate of one pod.
    c: f64,
    tau: f64,
    pooled_backlog: f64,
    pods: Vec<Pod>,
    draining: Vec<f64>,
    /// Steps an attempt that will time out stays in flight at a proxy: the timeout.
    in_flight_steps: usize,
    totals: Totals,
    events: Vec<PodEvent>,
    /// How the pods queue ([`Queueing`]).
    queueing: Queueing,
    /// refusals[n] holds the attempts n + 1 on their way after attempt n was refused at once
    /// (a 503): due after the backoff alone. `after_refusal` is this step's share of them.
    refusals: Vec<Vec<f64>>,
    after_refusal: Vec<f64>,
    /// Each attempt's share of a step's arrivals over the last timeout: a LIFO pod learns an
    /// attempt's fate only at its timeout, when its retry's ring is written.
    mix: Vec<Vec<f64>>,
    /// Pooled with a discipline other than FIFO: the pool as one queue at its total rate.
    pool: Option<Pod>,
    client: Gate,
}

/// The pods' queueing as the fluid sees it. Processor sharing is FIFO here: serving up to `k`
/// at once moves an answer by at most `k` service times, nothing at a timeout's scale.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Queueing {
    Fifo,
    Lifo,
    /// At most this many requests per pod; the rest refused on arrival. An AIMD limit is taken
    /// at its equilibrium: the count whose latency is its threshold, `latency x c`.
    Bounded(f64),
    /// CoDel: once the wait has stayed above `target` for `interval`, the head is refused down
    /// to a target's worth.
    Codel {
        target_s: f64,
        interval_s: f64,
    },
}

impl Queueing {
    fn of(d: Discipline, c: f64) -> Queueing {
        match d {
            Discipline::Fifo | Discipline::Sharing { .. } => Queueing::Fifo,
            Discipline::Lifo => Queueing::Lifo,
            Discipline::Bounded { limit } => Queueing::Bounded(f64::from(limit)),
            Discipline::Adaptive(a) => {
                Queueing::Bounded((a.latency_s * c).clamp(f64::from(a.min), f64::from(a.max)))
            }
            Discipline::Codel(p) => Queueing::Codel {
                target_s: p.target_s,
                interval_s: p.interval_s,
            },
        }
    }
}

impl<'s> Fluid<'s> {
    fn new(s: &'s Scenario, topology: Topology) -> Result<Self, HpaError> {
        let row_step = 1.0 / s.time_scale;
        let steps_per_row = (row_step / s.fluid_dt_s).round().max(1.0);
        let dt = row_step / steps_per_row;
        let start = -s.warmup_s;
        let end = s.end();
        let record = Record::span(start, end, row_step);
        let control = s.control(start)?;
        let retries = s.pod_retries();
        let rings = (1..=retries)
            .map(|n| vec![0.0; (s.retry_delay(n) / dt).round().max(1.0) as usize])
            .collect();
        let offsets = (0..=retries).map(|n| s.attempt_offset(n)).collect();
        Ok(Self {
            s,
            topology,
            dt,
            start,
            end,
            record,
            control,
            retries,
            rings,
            offsets,
            arrivals: vec![0.0; retries as usize + 1],
            c: s.rate_per_pod,
            tau: s.pod_timeout_s(),
            pooled_backlog: 0.0,
            pods: vec![Pod::new(s.pod_abandoned(false)); s.pods as usize],
            draining: Vec::new(),
            in_flight_steps: (s.pod_timeout_s() / dt).round().max(1.0) as usize,
            totals: Totals::default(),
            events: Vec::new(),
            queueing: Queueing::of(s.discipline, s.rate_per_pod),
            refusals: (1..=retries)
                .map(|n| {
                    let backoff = s.retry_delay(n) - s.pod_timeout_s();
                    vec![0.0; (backoff / dt).round().max(1.0) as usize]
                })
                .collect(),
            after_refusal: vec![0.0; retries as usize + 1],
            mix: vec![Vec::new(); (s.pod_timeout_s() / dt).round().max(1.0) as usize + 1],
            pool: (topology == Topology::Pooled
                && Queueing::of(s.discipline, s.rate_per_pod) != Queueing::Fifo)
                .then(|| Pod::new(s.pod_abandoned(false))),
            client: Gate::new(s, start),
        })
    }

    /// Advances step `i`: pod events, arrivals, timeouts, service, and the row of its time.
    fn step(&mut self, i: u64) {
        let t = self.start + i as f64 * self.dt;
        self.apply_pod_events(t);
        let ready = self.control.ready();
        let demand = self.s.demand(t);
        let slot = i as usize;
        let expired = if self.queueing == Queueing::Lifo {
            self.expire_stacked(slot)
        } else {
            0.0
        };
        let first = demand * self.dt;
        self.arrive(slot, demand);
        self.apply_budget(t, demand);
        let wanted: f64 = self.arrivals.iter().sum();
        self.gate(t);
        let total: f64 = self.arrivals.iter().sum();
        if self.queueing == Queueing::Lifo {
            let h = self.mix.len();
            self.mix[slot % h] = self
                .arrivals
                .iter()
                .map(|a| a / total.max(1e-300))
                .collect();
        }
        let (failing, refused, max_wait) = self.failing(t, slot, ready, total);
        let timed_out = self.time_out(t, slot, failing);
        self.refuse(t, slot, total, refused);
        let answered = self.serve(slot, ready, total, failing);
        let outcome = StepOutcome {
            wanted,
            sent: total,
            answered,
            failed: failing * total + refused + expired,
            refused,
            first: self.arrivals[0],
        };
        self.client.feedback(t, &outcome);
        self.totals.first += self.arrivals[0];
        self.totals.all += total;

        let row = self.record.row_mut(t);
        row.first_attempts += first;
        row.attempts += total;
        row.refused += refused;
        row.timed_out += timed_out;
        row.max_wait_s = row.max_wait_s.max(max_wait);
        row.pods_ready = ready;
        row.pods_desired = self.control.desired();
    }

    /// Lets the control act at `t`: a new ready pod starts empty; a removed pod (the victim)
    /// finishes its backlog for nobody; a pod gone (killed, or terminated by a rolling update)
    /// loses it.
    fn apply_pod_events(&mut self, t: f64) {
        if self.control.next_event() > t {
            return;
        }
        self.control.advance(t, self.totals, &mut self.events);
        let mut events = std::mem::take(&mut self.events);
        for e in events.drain(..) {
            match e {
                PodEvent::Ready { rolled } => {
                    self.pods.push(Pod::new(self.s.pod_abandoned(rolled)));
                }
                // The victim's connections close: its clients' next attempts go to the
                // others' answered or idle connections, else to new ones spread evenly.
                PodEvent::Removed(i) if i < self.pods.len() => {
                    let b = self.pods.remove(i).backlog;
                    if b > 0.0 {
                        self.draining.push(b);
                    }
                }
                PodEvent::Removed(_) => {}
                PodEvent::Gone(i) => self.lose(i),
            }
        }
        self.events = events;
    }

    /// The pod at `i` is gone with its queue; pooled, its share of the one backlog.
    fn lose(&mut self, i: usize) {
        let n = self.pods.len() as f64;
        if i < self.pods.len() {
            self.pooled_backlog *= (n - 1.0) / n;
            self.pods.remove(i);
        }
    }

    /// This step's first attempts, and the retries due from the rings.
    fn arrive(&mut self, slot: usize, demand: f64) {
        self.arrivals[0] = demand * self.dt;
        for (n, ring) in self.rings.iter().enumerate() {
            self.arrivals[n + 1] = ring[slot % ring.len()];
        }
        for (n, ring) in self.refusals.iter_mut().enumerate() {
            let len = ring.len();
            let due = std::mem::take(&mut ring[slot % len]);
            self.after_refusal[n + 1] = due;
            self.arrivals[n + 1] += due;
        }
    }

    /// The client's own defenses before anything is sent: the retry quota prices this step's
    /// retries (a request it cannot pay for ends, as under a budget), then an open breaker, the
    /// throttle and the adaptive limiter refuse attempts, whose requests end there.
    fn gate(&mut self, t: f64) {
        let (s, retries) = (self.s, self.retries as usize);
        if let Some(tokens) = self.client.tokens.as_mut() {
            let price = |n: usize, arrivals: &[f64], after: &[f64]| {
                (arrivals[n] - after[n]) * f64::from(AWS_STANDARD.timeout_cost)
                    + after[n] * f64::from(AWS_STANDARD.retry_cost)
            };
            let paid: Vec<usize> = (1..=retries)
                .filter(|n| s.is_client_retry(*n as u32))
                .collect();
            let cost: f64 = paid
                .iter()
                .map(|&n| price(n, &self.arrivals, &self.after_refusal))
                .sum();
            if cost > *tokens {
                let keep = *tokens / cost;
                for &n in &paid {
                    self.record.row_mut(t - self.offsets[n]).lost +=
                        self.arrivals[n] * (1.0 - keep);
                    self.arrivals[n] *= keep;
                    self.after_refusal[n] *= keep;
                }
                *tokens = 0.0;
            } else {
                *tokens -= cost;
            }
        }
        let total: f64 = self.arrivals.iter().sum();
        let keep = self.client.admit(t, total, self.tau);
        if keep < 1.0 {
            for n in 0..=retries {
                let out = self.arrivals[n] * (1.0 - keep);
                self.record.row_mut(t - self.offsets[n]).lost += out;
                self.record.row_mut(t).rejected += out;
                self.arrivals[n] -= out;
                self.after_refusal[n] *= keep;
            }
        }
    }

    /// What the pods refused at once this step: each attempt's share of it retries after the
    /// backoff, or, for the last attempt, ends its request. Refusals at the head of a CoDel
    /// queue are split as this step's arrivals are (they arrived a target's time ago).
    fn refuse(&mut self, t: f64, slot: usize, total: f64, refused: f64) {
        if refused <= 0.0 {
            return;
        }
        let r = self.retries as usize;
        for n in 0..=r {
            let share = if total > 0.0 {
                self.arrivals[n] / total
            } else if n == 0 {
                1.0
            } else {
                0.0
            };
            let out = refused * share;
            if n < r {
                let ring = &mut self.refusals[n];
                let len = ring.len();
                ring[slot % len] += out;
            } else {
                self.record.row_mut(t - self.offsets[n]).lost += out;
            }
        }
    }

    /// LIFO: what is still stacked a timeout after it arrived has timed out; its retries go out
    /// now (written into their rings before this step reads them).
    /// Returns the amount that timed out.
    fn expire_stacked(&mut self, slot: usize) -> f64 {
        let steps = self.in_flight_steps;
        let Some(arrived) = slot.checked_sub(steps) else {
            return 0.0;
        };
        let mut expired = 0.0;
        for p in self.pods.iter_mut().chain(self.pool.as_mut()) {
            expired += p.expire(arrived);
        }
        if expired <= 0.0 {
            return 0.0;
        }
        let h = arrived % self.mix.len();
        let mix = std::mem::take(&mut self.mix[h]);
        let sent = self.start + arrived as f64 * self.dt;
        self.record.row_mut(sent).timed_out += expired;
        let r = self.retries as usize;
        for (n, share) in mix.iter().enumerate() {
            let out = expired * share;
            if n < r {
                let ring = &mut self.rings[n];
                let len = ring.len();
                ring[arrived % len] += out;
            } else {
                self.record.row_mut(sent - self.offsets[n]).lost += out;
            }
        }
        self.mix[h] = mix;
        expired
    }

    /// A budget refuses the client's retries beyond its cap: those requests fail with the attempts
    /// they made. A gateway's tries are not the client's to refuse.
    fn apply_budget(&mut self, t: f64, demand: f64) {
        let Some(b) = self.s.retry_budget else {
            return;
        };
        let (s, retries) = (self.s, self.retries);
        let budgeted = || {
            (1..=retries)
                .filter(|n| s.is_client_retry(*n))
                .map(|n| n as usize)
        };
        let want: f64 = budgeted().map(|n| self.arrivals[n]).sum();
        let cap = (b.ratio * demand + b.min_per_s) * self.dt;
        if want > cap {
            let keep = cap / want;
            for n in budgeted() {
                self.record.row_mut(t - self.offsets[n]).lost += self.arrivals[n] * (1.0 - keep);
                self.arrivals[n] *= keep;
            }
        }
    }

    /// Fraction of arrivals that time out, the amount the pods refuse at once, and the largest
    /// wait an arrival faces.
    fn failing(&mut self, t: f64, slot: usize, ready: u32, total: f64) -> (f64, f64, f64) {
        let (c, tau, dt, q) = (self.c, self.tau, self.dt, self.queueing);
        let service = self.s.service;
        match self.topology {
            Topology::Pooled if self.pool.is_some() => {
                let cap = f64::from(ready) * c;
                let Some(p) = self.pool.as_mut() else {
                    unreachable!()
                };
                if cap <= 0.0 {
                    p.share = 0.0;
                    return (1.0, 0.0, f64::INFINITY);
                }
                p.share = total;
                p.admit_as(q, f64::from(ready), cap, tau, t, dt, |share| {
                    service.outlasted_by_gap(1.0 / cap, share / dt)
                });
                let failing = total - p.live_in - p.refused_entry;
                let fraction = if total > 0.0 { failing / total } else { 0.0 };
                (fraction, p.refused_in, p.wait(q, cap, slot, dt))
            }
            Topology::Pooled => {
                let cap = f64::from(ready) * c;
                let wait = if cap > 0.0 {
                    self.pooled_backlog / cap
                } else {
                    f64::INFINITY
                };
                (if wait >= tau { 1.0 } else { 0.0 }, 0.0, wait)
            }
            Topology::PerPod if self.pods.is_empty() => (1.0, 0.0, f64::INFINITY),
            Topology::PerPod => {
                match self.s.routing {
                    Routing::KeepAlive => route(&mut self.pods, total),
                    Routing::RoundRobin => spread(&mut self.pods, total),
                    Routing::LeastConnections => least_connections(&mut self.pods, total),
                }
                let (mut failing, mut refused, mut longest) = (0.0, 0.0, 0.0f64);
                for p in &mut self.pods {
                    longest = longest.max(p.wait(q, c, slot, dt));
                    p.admit_as(q, 1.0, c, tau, t, dt, |share| {
                        service.outlasted_by_gap(1.0 / c, share / dt)
                    });
                    failing += p.share - p.live_in - p.refused_entry;
                    refused += p.refused_in;
                    // A 503 is an answer: the client keeps its connection and its next attempt,
                    // the retry first, goes back on it to the pod that refused.
                    p.returned += p.refused_in;
                    // What a dropping pod has no room for arrived to a wait at the timeout.
                    if q == Queueing::Fifo && p.share > p.live_in + p.late_in {
                        longest = longest.max(tau);
                    }
                }
                let fraction = if total > 0.0 { failing / total } else { 0.0 };
                (fraction, refused, longest)
            }
        }
    }

    /// Sends the timed-out share of each attempt to its retry's ring, or, for the last attempt,
    /// records its request lost. Returns the amount timed out.
    fn time_out(&mut self, t: f64, slot: usize, failing: f64) -> f64 {
        let r = self.retries as usize;
        let mut timed_out = 0.0;
        for n in 0..=r {
            let out = self.arrivals[n] * failing;
            timed_out += out;
            if n < r {
                let ring = &mut self.rings[n];
                let len = ring.len();
                ring[slot % len] = out;
            } else {
                self.record.row_mut(t - self.offsets[n]).lost += out;
            }
        }
        timed_out
    }

    /// Queues this step's arrivals (abandoned work too, unless servers drop it) and serves a
    /// step. Returns the attempts answered in time this step, as the clients count them.
    fn serve(&mut self, slot: usize, ready: u32, total: f64, failing: f64) -> f64 {
        let (c, dt, q) = (self.c, self.dt, self.queueing);
        match self.topology {
            Topology::Pooled if self.pool.is_some() => {
                let Some(p) = self.pool.as_mut() else {
                    unreachable!()
                };
                let (answered, served) =
                    p.take_and_serve(q, f64::from(ready) * c * dt, self.in_flight_steps, slot);
                self.totals.busy_s += served / c;
                answered
            }
            Topology::Pooled => {
                // The one queue's head goes to the pods in proportion: those that drop skip
                // the abandoned work.
                let n = self.pods.len().max(1) as f64;
                let dropping = self.pods.iter().filter(|p| p.drops).count() as f64 / n;
                let queued = total * (1.0 - failing * dropping);
                let cap = f64::from(ready) * c;
                let served = (self.pooled_backlog + queued).min(cap * dt);
                self.pooled_backlog = (self.pooled_backlog + queued - cap * dt).max(0.0);
                self.totals.busy_s += served / c;
                total * (1.0 - failing)
            }
            Topology::PerPod => {
                let steps = self.in_flight_steps;
                let mut answered = 0.0;
                for p in &mut self.pods {
                    let (a, served) = p.take_and_serve(q, c * dt, steps, slot);
                    answered += a;
                    self.totals.busy_s += served / c;
                }
                for b in &mut self.draining {
                    *b -= c * dt;
                }
                self.draining.retain(|b| *b > 0.0);
                answered
            }
        }
    }
}

/// What a step's attempts met, as the client hears it.
#[derive(Debug, Clone, Copy)]
struct StepOutcome {
    /// Attempts the clients made, before their own defenses.
    wanted: f64,
    sent: f64,
    /// Answered in time this step.
    answered: f64,
    /// Of this step's, those that will time out or were refused, and stacked ones that timed
    /// out now.
    failed: f64,
    /// Refused by the pods (503).
    refused: f64,
    /// First attempts among the sent.
    first: f64,
}

/// The client's defenses in the fluid: the loadgen's state machines (one client), fed a step's
/// flows instead of single attempts.
#[derive(Debug)]
struct Gate {
    throttle: Option<Throttle>,
    breaker: Option<Breaker>,
    failures: u32,
    probes: u32,
    limiter: Option<AdaptiveRate>,
    /// The retry quota's tokens, as a flow.
    tokens: Option<f64>,
    /// The open breaker refused this step's attempts: they never reach the throttle (the
    /// loadgen's gate order).
    broken: bool,
}

impl Gate {
    fn new(s: &Scenario, start: f64) -> Gate {
        let c = s.client;
        Gate {
            throttle: c.throttling.map(|t| Throttle::new(t, start)),
            breaker: c.breaker.map(Breaker::new),
            failures: c.breaker.map_or(0, |b| b.failures),
            probes: c.breaker.map_or(0, |b| b.probes),
            limiter: (c.quota == Some(QuotaMode::Adaptive)).then(|| AdaptiveRate::new(start)),
            tokens: c.quota.map(|_| f64::from(AWS_STANDARD.capacity)),
            broken: false,
        }
    }

    /// The share of `total` attempts the client lets go at `t`: none through an open breaker,
    /// `1 - p` through the throttle, what the adaptive limiter has tokens for within `tau`.
    fn admit(&mut self, t: f64, total: f64, tau: f64) -> f64 {
        self.broken = false;
        if total <= 0.0 {
            return 1.0;
        }
        if let Some(b) = self.breaker.as_mut()
            && !b.allow(t)
        {
            self.broken = true;
            return 0.0;
        }
        let mut keep = 1.0;
        if let Some(th) = self.throttle.as_mut() {
            keep *= 1.0 - th.probability(t);
        }
        if let Some(l) = self.limiter.as_mut() {
            keep = l.acquire_flow(t, total * keep, tau) / total;
        }
        keep
    }

    /// A step's outcome. A breaker trips when a run of its failures in a row is expected within
    /// the step (`sent x f^failures >= 1` at the failing share `f` of what was sent); half open,
    /// the step's attempts are its probes.
    fn feedback(&mut self, t: f64, o: &StepOutcome) {
        let StepOutcome {
            wanted,
            sent,
            answered,
            failed,
            refused,
            first,
        } = *o;
        if let Some(th) = self.throttle.as_mut() {
            th.record(t, if self.broken { 0.0 } else { wanted }, answered);
        }
        if let Some(l) = self.limiter.as_mut() {
            l.on_responses(t, answered + refused, refused > 0.0);
        }
        if let Some(tokens) = self.tokens.as_mut()
            && sent > 0.0
        {
            // A first attempt's success refunds 1; a retry's, what it paid (after a timeout).
            let first_share = (first / sent).clamp(0.0, 1.0);
            let refund = answered
                * (first_share * f64::from(AWS_STANDARD.success_refund)
                    + (1.0 - first_share) * f64::from(AWS_STANDARD.timeout_cost));
            *tokens = (*tokens + refund).min(f64::from(AWS_STANDARD.capacity));
        }
        let (failures, probes) = (self.failures, self.probes);
        if let Some(b) = self.breaker.as_mut()
            && sent > 0.0
        {
            let f = (failed / sent).clamp(0.0, 1.0);
            match b.state() {
                BreakerState::HalfOpen { .. } if f > 0.5 => b.on_failure(t),
                BreakerState::HalfOpen { .. } => (0..probes).for_each(|_| b.on_success()),
                BreakerState::Closed { .. } if sent * f.powi(failures as i32) >= 1.0 => {
                    (0..failures).for_each(|_| b.on_failure(t));
                }
                BreakerState::Closed { .. } if f < 1.0 => b.on_success(),
                _ => {}
            }
        }
    }
}

/// One ready pod of the per-pod fluid.
#[derive(Debug, Clone, Default)]
struct Pod {
    /// It drops abandoned work instead of serving it.
    drops: bool,
    /// Queued work in arrival order: amount, and whether its client still waits for it (it arrived
    /// to a wait under the timeout).
    queue: VecDeque<(f64, bool)>,
    backlog: f64,
    /// Connections answered in the last step: the client reuses them first.
    returned: f64,
    /// Connections to this pod idle in the client's pool.
    idle: f64,
    /// Attempts routed here this step.
    share: f64,
    /// Of them, what it queues and answers in time, and what it queues and answers after the
    /// client left ([`Pod::admit`]).
    live_in: f64,
    late_in: f64,
    /// Queued work whose client still waits for it.
    live: f64,
    /// Per step, the attempts that arrived here to a wait past the timeout, over the last timeout:
    /// a proxy counts them in flight until their clients leave.
    doomed: VecDeque<f64>,
    doomed_sum: f64,
    /// Refused at once this step: of this step's share on arrival (a bound), and in all
    /// (CoDel's head too).
    refused_entry: f64,
    refused_in: f64,
    /// CoDel: since when the wait has stayed above target, and whether the queue stands.
    above_since: Option<f64>,
    standing: bool,
    /// LIFO: the work stacked, oldest first, and how many at the bottom have timed out.
    stack: Vec<Stacked>,
    expired: usize,
}

/// A step's attempts stacked on a LIFO pod.
#[derive(Debug, Clone, Copy)]
struct Stacked {
    amount: f64,
    slot: usize,
    /// Its clients still wait for it.
    live: bool,
}

impl Pod {
    fn new(abandoned: Abandoned) -> Pod {
        Pod {
            drops: abandoned == Abandoned::Drop,
            ..Pod::default()
        }
    }

    /// [`Pod::admit`] under the pods' queueing, at rate `cap`; `pods` scales a bound (one queue
    /// for the pool). A bound refuses what does not fit on arrival; a standing CoDel queue is
    /// cut at the head to a target's worth; a LIFO pod learns its arrivals' fate later.
    #[allow(clippy::too_many_arguments)]
    fn admit_as(
        &mut self,
        q: Queueing,
        pods: f64,
        cap: f64,
        tau: f64,
        t: f64,
        dt: f64,
        in_time: impl Fn(f64) -> f64,
    ) {
        self.refused_entry = 0.0;
        self.refused_in = 0.0;
        match q {
            Queueing::Fifo => self.admit(cap, tau, in_time),
            Queueing::Lifo => (self.live_in, self.late_in) = (self.share, 0.0),
            Queueing::Bounded(limit) => {
                let room = (limit * pods + cap * dt - self.backlog).max(0.0);
                let whole = self.share;
                self.share = whole.min(room);
                self.admit(cap, tau, in_time);
                self.refused_entry = whole - self.share;
                self.refused_in = self.refused_entry;
                self.share = whole;
            }
            Queueing::Codel {
                target_s,
                interval_s,
            } => {
                if self.backlog / cap >= target_s {
                    let since = *self.above_since.get_or_insert(t);
                    self.standing = t - since >= interval_s;
                } else {
                    self.above_since = None;
                    self.standing = false;
                }
                if self.standing {
                    self.refused_in = self.cut_head(self.backlog - target_s * cap);
                }
                self.admit(cap, tau, in_time);
            }
        }
    }

    /// Removes `amount` from the head of the queue; returns how much of it clients still
    /// waited for (they get their 503 now).
    fn cut_head(&mut self, mut amount: f64) -> f64 {
        let mut live = 0.0;
        while amount > 0.0 {
            let Some((a, waited)) = self.queue.front_mut() else {
                break;
            };
            let cut = a.min(amount);
            *a -= cut;
            amount -= cut;
            self.backlog -= cut;
            if *waited {
                live += cut;
                self.live = (self.live - cut).max(0.0);
            }
            if *a <= 0.0 {
                self.queue.pop_front();
            }
        }
        self.backlog = self.backlog.max(0.0);
        live
    }

    /// The longest wait an arrival faces: the backlog at the pod's rate, or on a LIFO pod the
    /// age of the oldest work still waited for.
    fn wait(&self, q: Queueing, cap: f64, slot: usize, dt: f64) -> f64 {
        match q {
            Queueing::Lifo => self
                .stack
                .get(self.expired)
                .map_or(0.0, |s| slot.saturating_sub(s.slot) as f64 * dt),
            _ => self.backlog / cap,
        }
    }

    /// Queues this step's admitted share and serves `work`: returns what was answered in time
    /// and the work served (the busy time's).
    fn take_and_serve(&mut self, q: Queueing, work: f64, steps: usize, slot: usize) -> (f64, f64) {
        let before = self.returned;
        if q == Queueing::Lifo {
            if self.share > 0.0 {
                self.stack.push(Stacked {
                    amount: self.share,
                    slot,
                    live: true,
                });
                self.backlog += self.share;
                self.live += self.share;
            }
        } else {
            self.doomed_in_flight(self.share - self.live_in - self.refused_entry, steps);
            self.enqueue(self.live_in, true);
            self.enqueue(self.late_in, false);
        }
        let served = if q == Queueing::Lifo {
            self.serve_stack(work)
        } else {
            let queued = self.backlog;
            self.serve(work);
            queued - self.backlog
        };
        (self.returned - before, served)
    }

    /// LIFO: serves `work` from the top of the stack; a pod that drops skips what timed out.
    /// Returns the work served.
    fn serve_stack(&mut self, work: f64) -> f64 {
        let mut left = work;
        while left > 0.0 {
            let Some(top) = self.stack.last_mut() else {
                break;
            };
            if !top.live && self.drops {
                self.backlog -= top.amount;
                self.stack.pop();
                continue;
            }
            let done = top.amount.min(left);
            top.amount -= done;
            left -= done;
            self.backlog -= done;
            if top.live {
                self.returned += done;
                self.live = (self.live - done).max(0.0);
            }
            if top.amount <= 0.0 {
                self.stack.pop();
            }
        }
        self.expired = self.expired.min(self.stack.len());
        self.backlog = self.backlog.max(0.0);
        work - left
    }

    /// LIFO: work stacked at or before step `arrived` and still waited for has timed out.
    /// Returns how much.
    fn expire(&mut self, arrived: usize) -> f64 {
        let mut out = 0.0;
        while let Some(s) = self.stack.get_mut(self.expired) {
            if s.slot > arrived {
                break;
            }
            if s.live {
                s.live = false;
                out += s.amount;
                self.live = (self.live - s.amount).max(0.0);
            }
            self.expired += 1;
        }
        out
    }

    /// Splits this step's `share` into what is answered in time (`live_in`), what is queued and
    /// answered after its client left (`late_in`), and the rest, dropped. A wait at the timeout
    /// `tau` fails every arrival; a pod that finishes abandoned work queues them all the same.
    /// A pod that drops expired work at the head of its queue holds no more than the timeout's
    /// worth: what does not fit is dropped, and while arrivals overflow it the head is always
    /// the oldest request not yet expired. Its slack to the deadline is then the gap from the
    /// last expired arrival to the next, a Poisson gap at this pod's arrival rate, and it is
    /// answered in time only if its service ends first (`in_time(share)`, the service times'
    /// [`kit_dist::ServiceTime::outlasted_by_gap`]). F7 on 7 Dec: the four pods served 45-60
    /// requests a row in the spike, 3-14 of them in time.
    fn admit(&mut self, c: f64, tau: f64, in_time: impl Fn(f64) -> f64) {
        let room = tau * c - self.backlog;
        (self.live_in, self.late_in) = if room <= 0.0 {
            (0.0, if self.drops { 0.0 } else { self.share })
        } else if !self.drops || self.share <= room {
            (self.share, 0.0)
        } else {
            let p = in_time(self.share);
            (room * p, room * (1.0 - p))
        };
    }

    fn enqueue(&mut self, amount: f64, waited: bool) {
        if amount <= 0.0 {
            return;
        }
        match self.queue.back_mut() {
            Some((a, w)) if *w == waited => *a += amount,
            _ => self.queue.push_back((amount, waited)),
        }
        self.backlog += amount;
        if waited {
            self.live += amount;
        }
    }

    /// Attempts in flight at a proxy: the live ones queued here and those still timing out.
    fn in_flight(&self) -> f64 {
        self.live + self.doomed_sum
    }

    /// Adds this step's doomed arrivals to the window of the last `steps` steps.
    fn doomed_in_flight(&mut self, amount: f64, steps: usize) {
        self.doomed.push_back(amount);
        self.doomed_sum += amount;
        while self.doomed.len() > steps {
            self.doomed_sum -= self.doomed.pop_front().unwrap_or(0.0);
        }
        self.doomed_sum = self.doomed_sum.max(0.0);
    }

    /// Serves up to `work` from the head; what it answers returns its connection.
    fn serve(&mut self, mut work: f64) {
        while work > 0.0 {
            let Some((amount, waited)) = self.queue.front_mut() else {
                break;
            };
            let done = amount.min(work);
            *amount -= done;
            work -= done;
            self.backlog -= done;
            if *waited {
                self.returned += done;
                self.live = (self.live - done).max(0.0);
            }
            if *amount <= 0.0 {
                self.queue.pop_front();
            }
        }
        self.backlog = self.backlog.max(0.0);
    }
}

/// Routes `total` attempts over the ready pods as a keep-alive HTTP/1.1 client does (the loadgen's
/// LIFO pool of idle connections): first on the connections just answered, then on older idle ones,
/// and only the rest on new connections, spread evenly (a random endpoint per connection). Answered
/// connections not needed now stay idle. Sets every pod's `share`.
fn route(pods: &mut [Pod], total: f64) {
    let returned: f64 = pods.iter().map(|p| p.returned).sum();
    let reused = total.min(returned);
    let idle: f64 = pods.iter().map(|p| p.idle).sum();
    let from_idle = (total - reused).min(idle);
    let new = (total - reused - from_idle) / pods.len() as f64;
    for p in pods.iter_mut() {
        let again = if returned > 0.0 {
            reused * p.returned / returned
        } else {
            0.0
        };
        let old = if idle > 0.0 {
            from_idle * p.idle / idle
        } else {
            0.0
        };
        p.idle += p.returned - again - old;
        p.returned = 0.0;
        p.share = again + old + new;
    }
}

/// A proxy's per-request round robin: every ready pod gets the same share.
fn spread(pods: &mut [Pod], total: f64) {
    let each = total / pods.len() as f64;
    for p in pods.iter_mut() {
        p.share = each;
    }
}

/// A proxy's least connections: each attempt goes to a pod with the fewest in flight, so a step's
/// attempts fill the lowest pods up to a common level (water filling).
fn least_connections(pods: &mut [Pod], total: f64) {
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&a, &b| pods[a].in_flight().total_cmp(&pods[b].in_flight()));
    // Raise the level over the k lowest pods until the attempts are used up.
    let (mut level, mut left, mut k) = (0.0, total, 0);
    while k < order.len() {
        level = pods[order[k]].in_flight();
        k += 1;
        let next = order.get(k).map_or(f64::INFINITY, |&i| pods[i].in_flight());
        let room = (next - level) * k as f64;
        if room >= left {
            level += left / k as f64;
            left = 0.0;
            break;
        }
        left -= room;
        level = next;
    }
    debug_assert!(left <= 1e-9 * total.max(1.0));
    for p in pods.iter_mut() {
        p.share = (level - p.in_flight()).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_bring_attempts_back_and_only_the_rest_open_new_connections() {
        let healthy = Pod {
            returned: 3.0,
            ..Pod::default()
        };
        let mut pods = vec![healthy.clone(), Pod::default()];
        // The answers cover the attempts: the pod that answered nothing gets none.
        route(&mut pods, 2.0);
        assert_eq!((pods[0].share, pods[1].share), (2.0, 0.0));
        assert_eq!(pods[0].idle, 1.0, "the answer not needed stays idle");
        // More attempts than answers and idle connections: the rest spread evenly.
        pods[0].returned = 3.0;
        route(&mut pods, 6.0);
        assert_eq!((pods[0].share, pods[1].share), (5.0, 1.0));
        assert_eq!(pods[0].idle, 0.0);
    }

    #[test]
    fn a_scale_downs_reconnections_spread_over_the_ready_pods_debt_or_not() {
        // A pod in debt answers nothing in time; a healthy one and the victim answered.
        let debt = Pod {
            backlog: 500.0,
            ..Pod::default()
        };
        let healthy = Pod {
            returned: 2.0,
            ..Pod::default()
        };
        let victim = Pod {
            returned: 3.0,
            ..Pod::default()
        };
        let mut pods = vec![debt, healthy, victim];
        // The victim leaves with its connections (PodEvent::Removed(2)): its clients' attempts
        // take the healthy pod's answered connections, the rest open new ones, one per ready
        // pod alike: the pod in debt gets its even share of them.
        pods.remove(2);
        route(&mut pods, 6.0);
        assert_eq!((pods[0].share, pods[1].share), (2.0, 4.0));
        // A timed-out attempt's connection is reset: nothing of it comes back, so the next
        // step the pod in debt gets only new connections' share again.
        pods[1].returned = 4.0;
        route(&mut pods, 6.0);
        assert_eq!((pods[0].share, pods[1].share), (1.0, 5.0));
    }

    #[test]
    fn a_pod_that_drops_expired_work_answers_late_what_it_serves_at_its_deadline() {
        // Capacity 100/s, timeout 1 s: room for 100 requests; 40 queued leave room for 60.
        let pod = |drops: bool, share: f64| {
            let mut p = Pod {
                drops,
                share,
                ..Pod::default()
            };
            p.enqueue(40.0, true);
            p.admit(100.0, 1.0, |share| if share == 90.0 { 0.25 } else { 1.0 });
            (p.live_in, p.late_in)
        };
        // Under its room, all in time, dropping or not.
        assert_eq!(pod(true, 50.0), (50.0, 0.0));
        // Overflowing it, the room is served, a quarter in time; the other 30 are dropped.
        assert_eq!(pod(true, 90.0), (15.0, 45.0));
        // A pod that finishes abandoned work queues everything under the timeout.
        assert_eq!(pod(false, 90.0), (90.0, 0.0));
        // At the timeout: dropped, or queued for nobody.
        let full = |drops: bool| {
            let mut p = Pod {
                drops,
                share: 10.0,
                ..Pod::default()
            };
            p.enqueue(100.0, true);
            p.admit(100.0, 1.0, |_| 1.0);
            (p.live_in, p.late_in)
        };
        assert_eq!(full(true), (0.0, 0.0));
        assert_eq!(full(false), (0.0, 10.0));
    }

    #[test]
    fn least_connections_fills_the_pods_with_fewest_in_flight_first() {
        let busy = Pod {
            live: 4.0,
            ..Pod::default()
        };
        let mut doomed = Pod::default();
        doomed.doomed_in_flight(3.0, 2);
        let mut pods = vec![busy, doomed, Pod::default()];
        // 2 attempts: all to the empty pod (level 0 -> 2, under the doomed pod's 3).
        least_connections(&mut pods, 2.0);
        let shares: Vec<f64> = pods.iter().map(|p| p.share).collect();
        assert_eq!(shares, [0.0, 0.0, 2.0]);
        // 7 attempts: level 4 over the two lowest (1 + 4), then 2 more over all three.
        least_connections(&mut pods, 7.0);
        let shares: Vec<f64> = pods.iter().map(|p| p.share).collect();
        let want = [2.0 / 3.0, 1.0 + 2.0 / 3.0, 4.0 + 2.0 / 3.0];
        for (got, want) in shares.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{shares:?}");
        }
        // A doomed attempt leaves the count once its timeout has passed.
        pods[1].doomed_in_flight(0.0, 2);
        pods[1].doomed_in_flight(0.0, 2);
        assert_eq!(pods[1].in_flight(), 0.0);
    }

    #[test]
    fn round_robin_spreads_evenly_whatever_the_pods_answered() {
        let mut pods = vec![
            Pod {
                returned: 5.0,
                ..Pod::default()
            },
            Pod::default(),
        ];
        spread(&mut pods, 3.0);
        assert_eq!((pods[0].share, pods[1].share), (1.5, 1.5));
    }

    #[test]
    fn a_pod_answers_what_arrived_under_the_timeout_in_order() {
        let mut p = Pod::default();
        p.enqueue(2.0, false);
        p.enqueue(1.0, true);
        p.serve(2.5);
        assert_eq!((p.backlog, p.returned), (0.5, 0.5));
    }
}

#[cfg(test)]
mod defenses {
    use super::*;
    use crate::experiment::load;
    use crate::predict::fluid_outcome;

    fn case(name: &str) -> Scenario {
        let e = load("F11").unwrap();
        e.cases
            .into_iter()
            .find(|c| c.scenario.name == name)
            .unwrap()
            .scenario
    }

    #[test]
    fn pods_that_bound_their_wait_or_serve_newest_first_escape_the_spike_fifo_stays_in() {
        for (name, trapped) in [
            ("spike-fifo", true),
            ("spike-sharing", true),
            ("spike-lifo", false),
            ("spike-codel", false),
            ("spike-bounded", false),
            ("spike-adaptive", false),
        ] {
            let o = fluid_outcome(&case(name), Topology::PerPod).unwrap();
            assert!(o.triggered, "{name}");
            assert_eq!(
                (o.trapped, o.recovered),
                (trapped, !trapped),
                "{name}: {o:?}"
            );
        }
    }

    #[test]
    fn a_503_brings_the_retry_back_to_the_pod_that_refused_it() {
        // F3's step with bounded pods: per pod, the four pods that refused during the climb keep
        // every keep-alive connection and the pods the HPA adds get none; pooled, it recovers.
        let s = case("step-bounded");
        let per_pod = fluid_outcome(&s, Topology::PerPod).unwrap();
        assert!(!per_pod.recovered, "{per_pod:?}");
        assert!(per_pod.lost_fraction.unwrap() > 0.5);
        assert!(fluid_outcome(&s, Topology::Pooled).unwrap().recovered);
    }

    #[test]
    fn a_bounded_pod_never_makes_an_arrival_wait_past_its_bound() {
        let s = case("spike-bounded");
        let r = simulate(&s, Topology::PerPod).unwrap();
        let longest = r.rows.iter().map(|r| r.max_wait_s).fold(0.0, f64::max);
        // 50 waiting at 100/s, and the step's service on top.
        assert!(longest <= 0.5 + 2.0 * s.fluid_dt_s, "{longest}");
        assert!(r.rows.iter().map(|r| r.refused).sum::<f64>() > 0.0);
        assert_eq!(r.rows.iter().map(|r| r.timed_out).sum::<f64>(), 0.0);
    }

    #[test]
    fn client_defenses_end_the_retries_of_a_failed_service() {
        for name in ["spike-throttling", "spike-aws-standard", "spike-breaker"] {
            let o = fluid_outcome(&case(name), Topology::PerPod).unwrap();
            assert!(o.recovered && !o.trapped, "{name}: {o:?}");
        }
        // The adaptive mode's limiter waits for throttling answers; FIFO pods only time out,
        // so it is the standard quota alone.
        let standard = simulate(&case("spike-aws-standard"), Topology::PerPod).unwrap();
        let adaptive = simulate(&case("spike-aws-adaptive"), Topology::PerPod).unwrap();
        assert_eq!(standard.rows, adaptive.rows);
        // The throttle rejects at the client: counted apart, and it never rejects at base load.
        let r = simulate(&case("spike-throttling"), Topology::PerPod).unwrap();
        assert!(r.rows.iter().map(|r| r.rejected).sum::<f64>() > 0.0);
        assert!(
            r.rows
                .iter()
                .filter(|r| r.t < 0.0)
                .all(|r| r.rejected == 0.0)
        );
    }

    #[test]
    fn a_lifo_pod_serves_the_newest_and_times_out_what_stays_stacked() {
        let mut p = Pod::new(Abandoned::Serve);
        p.share = 3.0;
        p.take_and_serve(Queueing::Lifo, 1.0, 10, 0);
        p.share = 2.0;
        // The newest two first: nothing of step 0's is answered.
        assert_eq!(p.take_and_serve(Queueing::Lifo, 2.0, 10, 1), (2.0, 2.0));
        assert_eq!(p.stack.len(), 1);
        assert_eq!(p.expire(0), 2.0, "step 0's rest timed out");
        assert_eq!(
            p.wait(Queueing::Lifo, 100.0, 5, 0.1),
            0.0,
            "nothing live waits"
        );
        // Served later for nobody, unless the pod drops what timed out.
        p.share = 0.0;
        assert_eq!(p.take_and_serve(Queueing::Lifo, 5.0, 10, 2), (0.0, 2.0));
        assert_eq!(p.backlog, 0.0);
    }

    #[test]
    fn a_standing_codel_queue_is_cut_to_a_targets_worth_at_the_head() {
        let q = Queueing::Codel {
            target_s: 0.05,
            interval_s: 1.0,
        };
        let mut p = Pod::new(Abandoned::Serve);
        p.enqueue(30.0, true);
        // 0.3 s of wait at 100/s: above target, but only standing after the interval.
        p.admit_as(q, 1.0, 100.0, 10.0, 0.0, 0.01, |_| 1.0);
        assert_eq!(p.refused_in, 0.0);
        p.admit_as(q, 1.0, 100.0, 10.0, 1.0, 0.01, |_| 1.0);
        assert!((p.refused_in - 25.0).abs() < 1e-9, "{}", p.refused_in);
        assert!((p.backlog - 5.0).abs() < 1e-9);
    }
}
