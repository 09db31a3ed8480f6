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
        })
    }

    /// Advances step `i`: pod events, arrivals, timeouts, service, and the row of its time.
    fn step(&mut self, i: u64) {
        let t = self.start + i as f64 * self.dt;
        self.apply_pod_events(t);
        let ready = self.control.ready();
        let demand = self.s.demand(t);
        let slot = i as usize;
        self.arrive(slot, demand);
        self.apply_budget(t, demand);
        let total: f64 = self.arrivals.iter().sum();
        let (failing, max_wait) = self.failing(ready, total);
        let timed_out = self.time_out(t, slot, failing);
        self.serve(ready, total, failing);
        self.totals.first += self.arrivals[0];
        self.totals.all += total;

        let row = self.record.row_mut(t);
        row.first_attempts += self.arrivals[0];
        row.attempts += total;
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

    /// Fraction of arrivals that time out, and the largest wait an arrival faces.
    fn failing(&mut self, ready: u32, total: f64) -> (f64, f64) {
        let (c, tau) = (self.c, self.tau);
        match self.topology {
            Topology::Pooled => {
                let cap = f64::from(ready) * c;
                let wait = if cap > 0.0 {
                    self.pooled_backlog / cap
                } else {
                    f64::INFINITY
                };
                (if wait >= tau { 1.0 } else { 0.0 }, wait)
            }
            Topology::PerPod if self.pods.is_empty() => (1.0, f64::INFINITY),
            Topology::PerPod => {
                match self.s.routing {
                    Routing::KeepAlive => route(&mut self.pods, total),
                    Routing::RoundRobin => spread(&mut self.pods, total),
                    Routing::LeastConnections => least_connections(&mut self.pods, total),
                }
                let (service, dt) = (self.s.service, self.dt);
                let (mut failing, mut longest) = (0.0, 0.0f64);
                for p in &mut self.pods {
                    longest = longest.max(p.backlog);
                    p.admit(c, tau, |share| {
                        service.outlasted_by_gap(1.0 / c, share / dt)
                    });
                    failing += p.share - p.live_in;
                    // What a dropping pod has no room for arrived to a wait at the timeout.
                    if p.share > p.live_in + p.late_in {
                        longest = longest.max(tau * c);
                    }
                }
                let fraction = if total > 0.0 { failing / total } else { 0.0 };
                (fraction, longest / c)
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

    /// Queues this step's arrivals (abandoned work too, unless servers drop it) and serves a step.
    fn serve(&mut self, ready: u32, total: f64, failing: f64) {
        let (c, dt) = (self.c, self.dt);
        match self.topology {
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
            }
            Topology::PerPod => {
                let steps = self.in_flight_steps;
                for p in &mut self.pods {
                    p.doomed_in_flight(p.share - p.live_in, steps);
                    p.enqueue(p.live_in, true);
                    p.enqueue(p.late_in, false);
                    let before = p.backlog;
                    p.serve(c * dt);
                    self.totals.busy_s += (before - p.backlog) / c;
                }
                for b in &mut self.draining {
                    *b -= c * dt;
                }
                self.draining.retain(|b| *b > 0.0);
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
}

impl Pod {
    fn new(abandoned: Abandoned) -> Pod {
        Pod {
            drops: abandoned == Abandoned::Drop,
            ..Pod::default()
        }
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
