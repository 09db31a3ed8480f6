//! Capacity for the models: fixed replicas, or the HPA module driving a ReplicaSet-like pod set through
//! the meter's readings, with the dead time between a scale decision and the new pod serving.
//! Scale-down removes pods that are not ready first (the newest), then the ready ones as upstream's
//! ReplicaSet ranks them ([`ready_victim`]).
//! The CPU signal is what metrics-server would serve: each pod's busy fraction over its window times
//! the limit, every pod alike (the model's pods share the load), with the readiness facts the
//! controller's `groupPods` reads.

use std::collections::VecDeque;

use crate::hpa::{Hpa, HpaError, HpaSpec, PodSample, Reading, Scale, UsageSample};
use crate::metric::{Meter, Signal};

/// How the autoscaler is wired and timed.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalerConfig {
    pub spec: HpaSpec,
    /// The reading fed to each of `spec.metrics`, in order.
    pub signals: Vec<Signal>,
    pub sync_period_s: f64,
    /// Time of one sync; the others follow every `sync_period_s` before and after it.
    pub sync_at: f64,
    pub metric_window_s: f64,
    pub scrape_interval_s: f64,
    /// From the scale decision to the new pod's first served request.
    pub dead_time_s: f64,
    /// Each ordered pod's own delay, in order of ordering (a measured run's, re-predicted);
    /// pods beyond the list wait `dead_time_s`.
    pub each_dead_time_s: Vec<f64>,
    pub cpu: CpuModel,
    /// When the meter is down, `[from, to)`: no external reading; a new meter, with no history,
    /// scrapes from `to` on and answers once it holds a whole window.
    pub meter_outage: Option<(f64, f64)>,
    /// `minReplicas` set to the value from the time on (a remedy), in time order.
    pub min_replicas_changes: Vec<(f64, i32)>,
    /// A rolling update of the pods' template from this time (a remedy), with Kubernetes'
    /// default strategy: pods ordered from then on have the new template.
    pub rollout_at: Option<f64>,
}

impl AutoscalerConfig {
    /// The first sync at or after `t` on the grid through `sync_at`.
    pub fn first_sync_at_or_after(&self, t: f64) -> f64 {
        let periods = ((t - self.sync_at) / self.sync_period_s).ceil();
        self.sync_at + periods * self.sync_period_s
    }
}

/// Which pod a scale-down removes at `now`, given each pod in creation order (`None`: not
/// ready): the newest that is not ready, else the ready one upstream's ranking picks
/// ([`ready_victim`]). `None` when there is no pod.
pub fn scale_down_victim(pods: &[Option<ReadyPod>], now: f64) -> Option<usize> {
    if let Some(i) = pods.iter().rposition(Option::is_none) {
        return Some(i);
    }
    let ready: Vec<ReadyPod> = pods.iter().flatten().copied().collect();
    ready_victim(&ready, now)
}

/// A ready pod as the ReplicaSet controller ranks it for a scale-down, times in the cluster's
/// seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadyPod {
    pub ready_since: f64,
    pub created: f64,
    /// Its place among the pods created: [`uid_rank`] makes its UID's stand-in.
    pub serial: u64,
}

/// Which ready pod a scale-down removes at `now`: upstream's ranking (v1.36's
/// `ActivePodsWithRanks` under LogarithmicScaleDown, stable since 1.31): first the pods ready
/// for the shortest time counted in powers of two of nanoseconds, then likewise the newest
/// created, then the lower UID. Pods ready within a factor of two of each other are in one
/// bucket, so after a climb the old pods that still hold debt are as likely to go as the new
/// ones: upstream's choice among them is random (a UID), here a fixed mix of the serial
/// ([`uid_rank`]), so the models and the embedded cluster remove the same pod. `None` when
/// there is none.
pub fn ready_victim(pods: &[ReadyPod], now: f64) -> Option<usize> {
    let bucket = |since: f64| {
        let ns = (now - since) * 1e9;
        if ns >= 1.0 {
            ns.log2().floor() as i64
        } else {
            -1
        }
    };
    pods.iter()
        .enumerate()
        .min_by_key(|(_, p)| (bucket(p.ready_since), bucket(p.created), uid_rank(p.serial)))
        .map(|(i, _)| i)
}

/// A UID's stand-in for pod number `serial`: random-looking, fixed (SplitMix64's finalizer).
pub fn uid_rank(serial: u64) -> u64 {
    let mut z = serial.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A Deployment's `RollingUpdate` strategy as the deployment controller applies it
/// (`pkg/controller/deployment/rolling.go`): at most `desired + max_surge` pods, at least
/// `desired - max_unavailable` available. The kit's Deployment sets none, so Kubernetes'
/// defaults hold: 25% each, the surge rounded up and the unavailable rounded down
/// (`ResolveFenceposts`, which also makes both zero into one unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollingUpdate {
    pub max_surge_percent: u32,
    pub max_unavailable_percent: u32,
}

impl Default for RollingUpdate {
    fn default() -> Self {
        RollingUpdate {
            max_surge_percent: 25,
            max_unavailable_percent: 25,
        }
    }
}

/// The pods of a rolling update, by template: the old one's and the new one's, ready or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloutPods {
    pub old_ready: u32,
    pub old_starting: u32,
    pub new_ready: u32,
    pub new_starting: u32,
}

impl RolloutPods {
    fn old(&self) -> u32 {
        self.old_ready + self.old_starting
    }
}

/// What one pass of the deployment controller does: pods of the new template to order, old pods
/// not ready yet to delete (they go first), and old ready pods to terminate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloutStep {
    pub order_new: u32,
    pub cancel_old_starting: u32,
    pub terminate_old_ready: u32,
}

impl RollingUpdate {
    /// `(max_surge, max_unavailable)` in pods for `desired` replicas.
    pub fn fenceposts(&self, desired: u32) -> (u32, u32) {
        let surge = (u64::from(desired) * u64::from(self.max_surge_percent)).div_ceil(100) as u32;
        let unavailable =
            (u64::from(desired) * u64::from(self.max_unavailable_percent) / 100) as u32;
        if surge == 0 && unavailable == 0 {
            (0, 1)
        } else {
            (surge, unavailable)
        }
    }

    /// One pass at `desired` replicas: scale the new ReplicaSet up within the surge
    /// (`NewRSNewReplicas`), then the old ones down within what must stay available
    /// (`reconcileOldReplicaSets`: unhealthy old pods first, then ready ones).
    pub fn step(&self, desired: u32, pods: RolloutPods) -> RolloutStep {
        let (surge, unavailable) = self.fenceposts(desired);
        let new = pods.new_ready + pods.new_starting;
        let all = pods.old() + new;
        let order_new = (desired + surge)
            .saturating_sub(all)
            .min(desired.saturating_sub(new));
        let all = all + order_new;
        let new_starting = pods.new_starting + order_new;
        let min_available = desired.saturating_sub(unavailable);
        let max_scaled_down = all.saturating_sub(min_available + new_starting);
        if max_scaled_down == 0 {
            return RolloutStep {
                order_new,
                ..RolloutStep::default()
            };
        }
        let cancel_old_starting = max_scaled_down.min(pods.old_starting);
        let available = pods.old_ready + pods.new_ready;
        let terminate_old_ready = available.saturating_sub(min_available).min(pods.old_ready);
        RolloutStep {
            order_new,
            cancel_old_starting,
            terminate_old_ready,
        }
    }
}

/// The pods' CPU as the model sees it (read only for [`Signal::Cpu`]): request 1, limit
/// `limit_ratio`, sampled every `window_s` as metrics-server does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuModel {
    pub limit_ratio: f64,
    pub window_s: f64,
    /// The HTTP path's CPU per arrival as a share of one request's budget (`h mu / l`): the pod
    /// pays it out of the budget, so it shows only where arrivals outrun the budget
    /// (`http_share x arrivals > served`, the service crate's `cpu` module).
    pub http_share: f64,
    /// Service rate of one pod, to turn arrivals into budgets.
    pub rate_per_pod: f64,
}

/// The model's cumulative counters, passed at each step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    /// First attempts arrived.
    pub first: f64,
    /// All attempts arrived.
    pub all: f64,
    /// Pod-seconds of serving, over every ready pod.
    pub busy_s: f64,
}

/// A change the model must apply to its per-pod state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodEvent {
    /// A new, empty pod starts serving; it is the newest. `rolled`: it has the template of a
    /// rolling update.
    Ready { rolled: bool },
    /// The ready pod at this place in the order pods turned ready leaves the endpoints (it
    /// finishes what it holds): the scale-down's victim ([`ready_victim`]).
    Removed(usize),
    /// The ready pod at this place in the order pods turned ready is gone with its queue, and
    /// its debt never reaches anyone again: killed (a fault: the oldest, 0; its replacement is
    /// ordered), or terminated by a rolling update (what it serves in its grace reaches nobody).
    Gone(usize),
}

#[derive(Debug)]
struct Autoscaler {
    hpa: Hpa,
    meter: Meter,
    signals: Vec<Signal>,
    sync_period_s: f64,
    next_sync: f64,
    metric_window_s: f64,
    scrape_interval_s: f64,
    meter_outage: Option<(f64, f64)>,
    /// `minReplicas` changes still to come, in time order.
    min_replicas_changes: VecDeque<(f64, i32)>,
    dead_time_s: f64,
    each_dead_time_s: Vec<f64>,
    /// Pods ordered so far (the index of the next one's delay).
    ordered: usize,
    cpu: Option<CpuScraper>,
}

impl Autoscaler {
    /// The delay of the next pod ordered.
    fn next_dead_time(&mut self) -> f64 {
        let d = self.each_dead_time_s.get(self.ordered).copied();
        self.ordered += 1;
        d.unwrap_or(self.dead_time_s)
    }
}

/// A pod ordered by a scale decision: when, and when it turns ready.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ordered {
    at: f64,
    ready_at: f64,
    /// The pod's place among every pod created (its UID's stand-in, see [`ready_victim`]).
    serial: u64,
    /// It has the template of a rolling update.
    rolled: bool,
}

/// metrics-server for the model: every `window_s`, each pod's usage over the window just ended.
#[derive(Debug)]
struct CpuScraper {
    model: CpuModel,
    next: f64,
    /// The last scrape: its time and the counters then (busy and ready pod-seconds, arrivals).
    last: (f64, f64, f64, f64),
    /// The latest sample: its time and the usage of one pod, in cores.
    sample: Option<(f64, f64)>,
}

/// Fixed or autoscaled capacity, advanced by the model's clock.
#[derive(Debug)]
pub(crate) struct Control {
    desired: u32,
    ready: u32,
    /// Each ready pod (ordered, turned ready), in the order they turned ready (the newest are
    /// removed first).
    ready_since: Vec<Ordered>,
    /// Ready pod-seconds so far, up to `clock`.
    ready_s: f64,
    clock: f64,
    /// Pods ordered and not ready yet, in order of ordering (with their own delays, not always
    /// in order of readiness).
    pending: VecDeque<Ordered>,
    autoscaler: Option<Autoscaler>,
    /// When the oldest ready pod is killed (a fault), until it is.
    kill_at: Option<f64>,
    /// When a rolling update starts (a remedy), until it does.
    rollout_at: Option<f64>,
    /// Pods ordered from now on have the new template.
    rolled_out: bool,
    /// When the run starts: the initial pods turned ready then, as far as a ReplicaSet's
    /// ranking can tell.
    start: f64,
    /// Pods created so far (the initial ones included): the next one's serial.
    created: u64,
}

impl Control {
    /// `n` pods, all ready from the start.
    pub(crate) fn fixed(n: u32) -> Control {
        Control {
            desired: n,
            ready: n,
            ready_since: Vec::new(),
            ready_s: 0.0,
            clock: 0.0,
            pending: VecDeque::new(),
            autoscaler: None,
            kill_at: None,
            rollout_at: None,
            rolled_out: false,
            start: 0.0,
            created: u64::from(n),
        }
    }

    /// The same control, with the oldest ready pod killed at `at` (a fault).
    pub(crate) fn killing_at(self, at: Option<f64>) -> Control {
        Control {
            kill_at: at,
            ..self
        }
    }

    /// Starts with `initial` ready pods at time `start`, scaled by the HPA from then on.
    pub(crate) fn autoscaled(
        config: &AutoscalerConfig,
        initial: u32,
        start: f64,
    ) -> Result<Control, HpaError> {
        let hpa = Hpa::new(config.spec.clone())?;
        if config.signals.len() != config.spec.metrics.len() {
            return Err(HpaError::Readings {
                got: config.signals.len(),
                want: config.spec.metrics.len(),
            });
        }
        let next_sync = config.first_sync_at_or_after(start);
        // The initial pods have been ready for longer than any initialization period.
        let long_ago = start - config.spec.cpu_initialization_period_s - config.dead_time_s - 1.0;
        let initial_pod = |serial| Ordered {
            at: long_ago - config.dead_time_s,
            ready_at: long_ago,
            serial,
            rolled: false,
        };
        let cpu = config.signals.contains(&Signal::Cpu).then_some(CpuScraper {
            model: config.cpu,
            next: start + config.cpu.window_s,
            last: (start, 0.0, 0.0, 0.0),
            sample: None,
        });
        Ok(Control {
            desired: initial,
            ready: initial,
            ready_since: (0..u64::from(initial)).map(initial_pod).collect(),
            ready_s: 0.0,
            clock: start,
            pending: VecDeque::new(),
            autoscaler: Some(Autoscaler {
                hpa,
                meter: Meter::new(config.metric_window_s, config.scrape_interval_s, start),
                signals: config.signals.clone(),
                sync_period_s: config.sync_period_s,
                next_sync,
                metric_window_s: config.metric_window_s,
                scrape_interval_s: config.scrape_interval_s,
                meter_outage: config.meter_outage,
                min_replicas_changes: config.min_replicas_changes.iter().copied().collect(),
                dead_time_s: config.dead_time_s,
                each_dead_time_s: config.each_dead_time_s.clone(),
                ordered: 0,
                cpu,
            }),
            kill_at: None,
            rollout_at: config.rollout_at,
            rolled_out: false,
            start,
            created: u64::from(initial),
        })
    }

    /// When something next happens (a pod becomes ready, a scrape, a sync); infinity for fixed capacity.
    pub(crate) fn next_event(&self) -> f64 {
        let ready = self
            .next_ready()
            .map_or(f64::INFINITY, |(_, p)| p.ready_at)
            .min(self.kill_at.unwrap_or(f64::INFINITY))
            .min(self.rollout_at.unwrap_or(f64::INFINITY));
        match &self.autoscaler {
            Some(a) => {
                let cpu = a.cpu.as_ref().map_or(f64::INFINITY, |c| c.next);
                ready.min(a.meter.next_scrape()).min(a.next_sync).min(cpu)
            }
            None => ready,
        }
    }

    /// Processes everything due at or before `now`, given the model's cumulative counters; pushes the
    /// pod changes to apply, in order.
    pub(crate) fn advance(&mut self, now: f64, totals: Totals, events: &mut Vec<PodEvent>) {
        while self.next_event() <= now {
            // In time order; at equal times a pod turns ready, then the meters scrape, then the HPA syncs.
            let next_ready = self.next_ready();
            let ready_at = next_ready.map_or(f64::INFINITY, |(_, p)| p.ready_at);
            // A kill comes before anything due at the same time or later.
            let others = self.autoscaler.as_ref().map_or(f64::INFINITY, |a| {
                let cpu = a.cpu.as_ref().map_or(f64::INFINITY, |c| c.next);
                a.meter.next_scrape().min(a.next_sync).min(cpu)
            });
            if self.act_on_pods(now.min(ready_at).min(others), events) {
                continue;
            }
            let ready_now = self.ready_s_at(now);
            let Some(a) = self.autoscaler.as_mut() else {
                let mut rolled = false;
                if let Some((i, pod)) = next_ready {
                    self.pending.remove(i);
                    self.ready_since.push(pod);
                    rolled = pod.rolled;
                }
                self.ready += 1;
                events.push(PodEvent::Ready { rolled });
                continue;
            };
            let scrape_at = a.meter.next_scrape();
            let cpu_at = a.cpu.as_ref().map_or(f64::INFINITY, |c| c.next);
            if let Some((i, pod)) =
                next_ready.filter(|_| ready_at <= scrape_at.min(cpu_at) && ready_at <= a.next_sync)
            {
                self.accrue(ready_at);
                self.pending.remove(i);
                self.ready += 1;
                self.ready_since.push(pod);
                events.push(PodEvent::Ready { rolled: pod.rolled });
                self.roll(ready_at, events);
                continue;
            }
            if scrape_at <= a.next_sync && scrape_at <= cpu_at {
                match a.meter_outage {
                    // Down: nothing scraped; the meter that comes back has no history.
                    Some((from, to)) if (from..to).contains(&scrape_at) => {
                        let next = scrape_at + a.scrape_interval_s;
                        a.meter = Meter::new(a.metric_window_s, a.scrape_interval_s, next);
                    }
                    _ => a.meter.scrape(scrape_at, totals.first, totals.all),
                }
                continue;
            }
            if let Some(c) = a.cpu.as_mut().filter(|c| c.next <= a.next_sync) {
                // Counters are as of `now`; the scrape happens within the model's step before it.
                let ready_s = ready_now;
                let (t0, busy0, ready0, all0) = c.last;
                let pod_seconds = ready_s - ready0;
                if pod_seconds > 0.0 {
                    let busy = (totals.busy_s - busy0) / pod_seconds;
                    let http = c.model.http_share * (totals.all - all0)
                        / (c.model.rate_per_pod * pod_seconds);
                    let used = busy.max(http).clamp(0.0, 1.0);
                    c.sample = Some((c.next, used * c.model.limit_ratio));
                }
                c.last = (c.next.max(t0), totals.busy_s, ready_s, totals.all);
                c.next += c.model.window_s;
                continue;
            }
            let at = a.next_sync;
            a.next_sync += a.sync_period_s;
            // The HPA object as edited by then: the controller reads it at each sync.
            while let Some((_, min)) = a.min_replicas_changes.front().filter(|c| c.0 <= at) {
                a.hpa.set_min_replicas(*min);
                a.min_replicas_changes.pop_front();
            }
            let pods = a
                .cpu
                .as_ref()
                .map(|c| pod_samples(&self.ready_since, &self.pending, c));
            // Down, then warming: the new meter answers 503 until it holds a whole window (the
            // meter's `Unavailable::Warming`).
            let meter_down = a
                .meter_outage
                .is_some_and(|(from, to)| (from..to + a.metric_window_s).contains(&at));
            let readings: Vec<Option<Reading>> = a
                .signals
                .iter()
                .map(|&s| match s {
                    Signal::Cpu => pods.clone().map(Reading::Pods),
                    _ if meter_down => None,
                    _ => a.meter.reading(s).map(Reading::External),
                })
                .collect();
            let scale = Scale {
                spec_replicas: to_i32(self.desired),
                status_replicas: to_i32(self.ready + self.pending.len() as u32),
                ready_pods: to_i32(self.ready),
            };
            // The readings are as many as the metrics (checked at construction), so sync cannot fail.
            if let Ok(decision) = a.hpa.sync(at, &readings, scale)
                && decision.rescale
            {
                self.scale_to(at, decision.desired.max(0) as u32, events);
                self.roll(at, events);
            }
        }
    }

    /// A kill (a fault) or the start of a rolling update (a remedy) due by `by`, before
    /// anything else due then; whether there was one.
    fn act_on_pods(&mut self, by: f64, events: &mut Vec<PodEvent>) -> bool {
        if let Some(k) = self.kill_at.filter(|k| *k <= by) {
            self.kill(k, events);
            return true;
        }
        if let Some(r) = self.rollout_at.filter(|r| *r <= by) {
            self.rollout_at = None;
            self.rolled_out = true;
            self.roll(r, events);
            return true;
        }
        false
    }

    /// Kills the oldest ready pod at `at`; its ReplicaSet orders the replacement at once.
    fn kill(&mut self, at: f64, events: &mut Vec<PodEvent>) {
        self.kill_at = None;
        if self.ready == 0 {
            return;
        }
        self.accrue(at);
        self.ready -= 1;
        // Fixed capacity keeps no ready times.
        if !self.ready_since.is_empty() {
            self.ready_since.remove(0);
        }
        events.push(PodEvent::Gone(0));
        self.order(at);
    }

    /// The deployment controller's passes of a rolling update at `now`, until one changes
    /// nothing; the update ends when no pod has the old template.
    fn roll(&mut self, now: f64, events: &mut Vec<PodEvent>) {
        while self.rolling() {
            let old_ready = self.ready_since.iter().filter(|p| !p.rolled).count() as u32;
            let old_starting = self.pending.iter().filter(|p| !p.rolled).count() as u32;
            let pods = RolloutPods {
                old_ready,
                old_starting,
                new_ready: self.ready - old_ready,
                new_starting: self.pending.len() as u32 - old_starting,
            };
            let step = RollingUpdate::default().step(self.desired, pods);
            if step == RolloutStep::default() {
                return;
            }
            for _ in 0..step.order_new {
                self.order(now);
            }
            for _ in 0..step.cancel_old_starting {
                if let Some(i) = self.pending.iter().rposition(|p| !p.rolled) {
                    self.pending.remove(i);
                    self.uncount_order();
                }
            }
            // A ReplicaSet deletes the pods ready for the shortest time first.
            for _ in 0..step.terminate_old_ready {
                if let Some(i) = self.ready_since.iter().rposition(|p| !p.rolled) {
                    self.accrue(now);
                    self.ready -= 1;
                    self.ready_since.remove(i);
                    events.push(PodEvent::Gone(i));
                }
            }
        }
    }

    /// A rolling update is under way: it started, and some pod has the old template.
    fn rolling(&self) -> bool {
        self.rolled_out
            && (self.ready_since.iter().any(|p| !p.rolled)
                || self.pending.iter().any(|p| !p.rolled))
    }

    /// Orders a pod at `now`: it turns ready its dead time later.
    fn order(&mut self, now: f64) {
        // Fixed capacity never orders pods; with an autoscaler each has its delay.
        let dead_time = self
            .autoscaler
            .as_mut()
            .map_or(0.0, Autoscaler::next_dead_time);
        self.pending.push_back(Ordered {
            at: now,
            ready_at: now + dead_time,
            serial: self.created,
            rolled: self.rolled_out,
        });
        self.created += 1;
    }

    /// A cancelled order never turns ready: a measured run's list of delays holds only pods
    /// that did, so the next pod ordered takes this one's.
    fn uncount_order(&mut self) {
        if let Some(a) = self.autoscaler.as_mut() {
            a.ordered = a.ordered.saturating_sub(1);
        }
    }

    /// The pending pod that turns ready first (the earliest ordered among equals), and where it is.
    fn next_ready(&self) -> Option<(usize, Ordered)> {
        self.pending
            .iter()
            .copied()
            .enumerate()
            .min_by(|(_, a), (_, b)| a.ready_at.total_cmp(&b.ready_at))
    }

    fn scale_to(&mut self, now: f64, desired: u32, events: &mut Vec<PodEvent>) {
        let mut have = self.ready + self.pending.len() as u32;
        while have < desired {
            self.order(now);
            have += 1;
        }
        // During a rolling update the surge may stay (the deployment controller scales its
        // ReplicaSets within it).
        let surge = if self.rolling() {
            RollingUpdate::default().fenceposts(desired).0
        } else {
            0
        };
        // Pending pods are the not-ready ones, newest last: [`scale_down_victim`]'s rule; then
        // the ready ones by upstream's ranking.
        while have > desired + surge {
            if self.pending.pop_back().is_some() {
                self.uncount_order();
            } else {
                self.accrue(now);
                self.ready -= 1;
                let start = self.start;
                let ranked: Vec<ReadyPod> = self
                    .ready_since
                    .iter()
                    .map(|p| ReadyPod {
                        ready_since: p.ready_at.max(start),
                        created: p.at.max(start),
                        serial: p.serial,
                    })
                    .collect();
                // Fixed capacity keeps no ready times: the newest.
                let i = ready_victim(&ranked, now).unwrap_or(self.ready as usize);
                if i < self.ready_since.len() {
                    self.ready_since.remove(i);
                }
                events.push(PodEvent::Removed(i));
            }
            have -= 1;
        }
        self.desired = desired;
    }

    /// Ready pod-seconds up to `t` (nothing more for a time before the last count).
    fn ready_s_at(&self, t: f64) -> f64 {
        self.ready_s + f64::from(self.ready) * (t - self.clock).max(0.0)
    }

    /// Counts the ready pod-seconds up to `t`, before the ready pods change.
    fn accrue(&mut self, t: f64) {
        self.ready_s = self.ready_s_at(t);
        self.clock = self.clock.max(t);
    }

    pub(crate) fn ready(&self) -> u32 {
        self.ready
    }

    pub(crate) fn desired(&self) -> u32 {
        self.desired
    }
}

/// The pods as the controller's `groupPods` sees them: ready ones with the latest sample and
/// their ready time; ordered ones running but not ready, idle, started at their order.
fn pod_samples(
    ready_since: &[Ordered],
    pending: &VecDeque<Ordered>,
    cpu: &CpuScraper,
) -> Vec<PodSample> {
    let sample = |usage: f64| {
        cpu.sample.map(|(at, _)| UsageSample {
            usage,
            timestamp_s: at,
            window_s: cpu.model.window_s,
        })
    };
    let usage = cpu.sample.map_or(0.0, |(_, u)| u);
    let ready = ready_since
        .iter()
        .map(|p| PodSample::running(p.at, (true, p.ready_at), 1.0, sample(usage)));
    let starting = pending.iter().map(|p| {
        let ordered = p.at;
        // metrics-server has a sample once it has scraped the pod after it started.
        let metric = sample(0.0).filter(|s| s.timestamp_s > ordered);
        PodSample::running(ordered, (false, ordered), 1.0, metric)
    });
    ready.chain(starting).collect()
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpa::{
        Behavior, DEFAULT_CPU_INITIALIZATION_PERIOD_S, DEFAULT_INITIAL_READINESS_DELAY_S,
        MetricSpec, Target,
    };

    fn config(dead_time_s: f64) -> AutoscalerConfig {
        AutoscalerConfig {
            spec: HpaSpec {
                min_replicas: 1,
                max_replicas: 50,
                metrics: vec![MetricSpec {
                    name: "first_attempt_rate".into(),
                    target: Target::AverageValue(50.0),
                }],
                behavior: Behavior::default(),
                tolerance: 0.1,
                cpu_initialization_period_s: DEFAULT_CPU_INITIALIZATION_PERIOD_S,
                initial_readiness_delay_s: DEFAULT_INITIAL_READINESS_DELAY_S,
            },
            signals: vec![Signal::FirstAttempt],
            sync_period_s: 15.0,
            sync_at: 7.5,
            metric_window_s: 30.0,
            scrape_interval_s: 1.0,
            dead_time_s,
            each_dead_time_s: Vec::new(),
            cpu: CpuModel {
                limit_ratio: 1.0,
                window_s: 15.0,
                http_share: 0.0,
                rate_per_pod: 100.0,
            },
            meter_outage: None,
            min_replicas_changes: Vec::new(),
            rollout_at: None,
        }
    }

    /// Counters after `t` s of 1000 first attempts/s.
    fn steady(t: f64) -> Totals {
        Totals {
            first: 1000.0 * t,
            all: 1000.0 * t,
            busy_s: 0.0,
        }
    }

    #[test]
    fn cpu_at_its_limit_doubles_the_pods_that_count_per_round() {
        // 1000/s on pods serving 100/s, l = r, a 50% target: busy pods read 100%, twice the target,
        // so each round at most doubles the pods whose samples count; pods still starting count
        // as idle and hold the replicas until they are ready and a window has passed.
        let mut cfg = config(90.0);
        cfg.spec.metrics = vec![MetricSpec {
            name: "cpu".into(),
            target: Target::Utilization(50),
        }];
        cfg.signals = vec![Signal::Cpu];
        let mut c = Control::autoscaled(&cfg, 4, 0.0).unwrap();
        let mut events = Vec::new();
        let mut busy_s = 0.0;
        let mut desired_at = Vec::new();
        for t in 0..=300 {
            let t = f64::from(t);
            c.advance(
                t,
                Totals {
                    busy_s,
                    ..steady(t)
                },
                &mut events,
            );
            busy_s += f64::from(c.ready()).min(10.0);
            desired_at.push(c.desired());
        }
        // No sample before the first scrape at 15 s: held. 22.5 s: 4 pods at 100% -> 8, ready at
        // 112.5 s; counted once a sample is a window past that (the scrape at 135 s): 16 at 142.5 s.
        assert_eq!(desired_at[20], 4);
        assert_eq!(desired_at[23], 8);
        assert_eq!(desired_at[142], 8);
        assert_eq!(desired_at[143], 16);
        // Ready at 232.5 s, counted from the scrape at 255 s: 16 busy pods (1000/s over 16 x 100/s
        // is 62.5%) -> ceil(16 x 62/50) = 20 at 262.5 s.
        assert_eq!(desired_at[262], 16);
        assert_eq!(desired_at[263], 20);
    }

    #[test]
    fn the_http_cpu_shows_only_where_arrivals_outrun_the_budget() {
        // 10 pods half busy at 100/s, 1000 arrivals/s (100 a pod): the HTTP path at 30% of a
        // request's budget uses 0.3 of the limit, under the 0.5 busy: the read is 50%, no
        // change. At 80% it uses 0.8, over the busy: the read is 80% -> ceil(10 x 80/50) = 16.
        let desired_with = |http_share: f64| {
            let mut cfg = config(90.0);
            cfg.spec.metrics = vec![MetricSpec {
                name: "cpu".into(),
                target: Target::Utilization(50),
            }];
            cfg.signals = vec![Signal::Cpu];
            cfg.cpu.http_share = http_share;
            let mut c = Control::autoscaled(&cfg, 10, 0.0).unwrap();
            let mut events = Vec::new();
            for t in 0..=30 {
                let t = f64::from(t);
                c.advance(
                    t,
                    Totals {
                        busy_s: 5.0 * t,
                        ..steady(t)
                    },
                    &mut events,
                );
            }
            c.desired()
        };
        assert_eq!(desired_with(0.3), 10);
        assert_eq!(desired_with(0.8), 16);
    }

    #[test]
    fn pods_serve_a_dead_time_after_the_decision() {
        let mut c = Control::autoscaled(&config(90.0), 4, 0.0).unwrap();
        let mut events = Vec::new();
        // A constant 1000/s from t = 0: each second the counters grow by 1000.
        for t in 0..=200 {
            let t = f64::from(t);
            c.advance(t, steady(t), &mut events);
            if t < 97.5 {
                assert_eq!(c.ready(), 4, "t = {t}");
            }
        }
        // Syncs at 7.5 (8), 22.5 (16), 37.5 (20): ready at 97.5, 112.5, 127.5 (seen at the next whole second).
        assert_eq!(c.desired(), 20);
        assert_eq!(c.ready(), 20);
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, PodEvent::Ready { .. }))
                .count(),
            16
        );
    }

    #[test]
    fn each_ordered_pod_waits_its_own_dead_time_then_the_mean() {
        // The first two pods ordered wait 150 s and 30 s; the rest the 90 s of the config.
        let mut cfg = config(90.0);
        cfg.each_dead_time_s = vec![150.0, 30.0];
        let mut c = Control::autoscaled(&cfg, 4, 0.0).unwrap();
        let mut events = Vec::new();
        let mut ready_at = Vec::new();
        for t in 0..=200 {
            let t = f64::from(t);
            c.advance(t, steady(t), &mut events);
            ready_at.push(c.ready());
        }
        // The sync at 7.5 s orders 4 (to 8), ready at 157.5, 37.5, 97.5, 97.5: the second is
        // ready first though ordered after the first. The 8 ordered at 22.5 s and the 4 at
        // 37.5 s wait the 90 s.
        assert_eq!(ready_at[37], 4);
        assert_eq!(ready_at[38], 5);
        assert_eq!(ready_at[97], 5);
        assert_eq!(ready_at[98], 7);
        assert_eq!(ready_at[113], 15);
        assert_eq!(ready_at[128], 19);
        assert_eq!(ready_at[157], 19);
        assert_eq!(ready_at[158], 20);
    }

    #[test]
    fn a_meter_outage_holds_the_replicas_until_the_new_meter_has_a_window() {
        // Down from 30 s to 60 s; the new meter answers from 90 s (a whole window).
        let mut cfg = config(90.0);
        cfg.meter_outage = Some((30.0, 60.0));
        let mut c = Control::autoscaled(&cfg, 4, 0.0).unwrap();
        let mut events = Vec::new();
        let mut desired_at = Vec::new();
        for t in 0..=120 {
            let t = f64::from(t);
            c.advance(t, steady(t), &mut events);
            desired_at.push(c.desired());
        }
        // 7.5 s: 8; 22.5 s: 16; 37.5-82.5 s: no reading, held at 16 (not 20, not scaled in).
        assert_eq!(desired_at[23], 16);
        assert_eq!(desired_at[89], 16);
        // 97.5 s: the new meter's whole window reads 1000/s: 20.
        assert_eq!(desired_at[98], 20);
    }

    #[test]
    fn a_killed_pod_is_replaced_a_dead_time_later() {
        let mut c = Control::autoscaled(&config(90.0), 4, 0.0)
            .unwrap()
            .killing_at(Some(3.0));
        let mut events = Vec::new();
        // 100/s: the HPA keeps 4 pods (2 pods' worth at a target of 50).
        let low = |t: f64| Totals {
            first: 200.0 * t,
            all: 200.0 * t,
            busy_s: 0.0,
        };
        let mut ready_at = Vec::new();
        for t in 0..=100 {
            let t = f64::from(t);
            c.advance(t, low(t), &mut events);
            ready_at.push(c.ready());
        }
        assert_eq!(events.first(), Some(&PodEvent::Gone(0)));
        assert_eq!(
            (ready_at[2], ready_at[3], ready_at[92], ready_at[93]),
            (4, 3, 3, 4)
        );
        assert_eq!(c.desired(), 4);
        let mut fixed = Control::fixed(2).killing_at(Some(1.0));
        let mut events = Vec::new();
        fixed.advance(1.0, Totals::default(), &mut events);
        assert_eq!(
            events,
            vec![PodEvent::Gone(0), PodEvent::Ready { rolled: false }]
        );
        assert_eq!(fixed.ready(), 2);
    }

    #[test]
    fn a_rolling_update_keeps_within_the_default_surge_and_unavailable() {
        let r = RollingUpdate::default();
        assert_eq!(r.fenceposts(20), (5, 5));
        assert_eq!(r.fenceposts(4), (1, 1));
        assert_eq!(r.fenceposts(2), (1, 0));
        assert_eq!(r.fenceposts(0), (0, 1));
        // 20 ready old pods: 5 new ordered and 5 old terminated at once (15 must stay
        // available); the next pass orders 5 more new ones up to the 25 allowed, and stops.
        let first = r.step(
            20,
            RolloutPods {
                old_ready: 20,
                ..RolloutPods::default()
            },
        );
        assert_eq!(
            first,
            RolloutStep {
                order_new: 5,
                cancel_old_starting: 0,
                terminate_old_ready: 5
            }
        );
        let second = RolloutPods {
            old_ready: 15,
            new_starting: 5,
            ..RolloutPods::default()
        };
        assert_eq!(
            r.step(20, second),
            RolloutStep {
                order_new: 5,
                ..RolloutStep::default()
            }
        );
        let waiting = RolloutPods {
            new_starting: 10,
            ..second
        };
        assert_eq!(r.step(20, waiting), RolloutStep::default());
        // Ten new pods ready: ten old ones go, and ten more new are ordered.
        let ten_ready = RolloutPods {
            old_ready: 15,
            new_ready: 10,
            ..RolloutPods::default()
        };
        assert_eq!(r.step(20, ten_ready).terminate_old_ready, 10);
        // Old pods not ready yet go before ready ones, within what may be scaled down: 6
        // wanted (surge 2, unavailable 1), 8 with the 2 new ones ordered, 5 must stay available
        // and the 2 new ones are not: 1 may go, a starting one, no ready one.
        let starting = RolloutPods {
            old_ready: 4,
            old_starting: 2,
            ..RolloutPods::default()
        };
        assert_eq!(
            r.step(6, starting),
            RolloutStep {
                order_new: 2,
                cancel_old_starting: 1,
                terminate_old_ready: 0
            }
        );
    }

    #[test]
    fn a_rolled_out_deployment_replaces_every_pod_a_dead_time_at_a_time() {
        let mut cfg = config(90.0);
        cfg.rollout_at = Some(10.0);
        let mut c = Control::autoscaled(&cfg, 4, 0.0).unwrap();
        // 200/s: the HPA keeps 4 pods (surge 1, unavailable 1).
        let low = |t: f64| Totals {
            first: 200.0 * t,
            all: 200.0 * t,
            busy_s: 0.0,
        };
        let mut events = Vec::new();
        let mut ready_at = Vec::new();
        for t in 0..=300 {
            let t = f64::from(t);
            c.advance(t, low(t), &mut events);
            ready_at.push(c.ready());
        }
        // 10 s: one old pod terminated (the newest), two new ordered; 100 s: both ready, two
        // old terminated, two more ordered; 190 s: the last old one goes.
        assert_eq!(events[0], PodEvent::Gone(3));
        assert_eq!(
            (ready_at[9], ready_at[10], ready_at[99], ready_at[100]),
            (4, 3, 3, 3)
        );
        assert_eq!((ready_at[189], ready_at[190], ready_at[300]), (3, 4, 4));
        let terminated = events
            .iter()
            .filter(|e| matches!(e, PodEvent::Gone(_)))
            .count();
        let new = events
            .iter()
            .filter(|e| **e == PodEvent::Ready { rolled: true })
            .count();
        assert_eq!((terminated, new), (4, 4));
        assert!(!c.rolling());
        assert_eq!(c.desired(), 4);
    }

    #[test]
    fn the_victim_is_the_newest_not_ready_pod_else_upstreams_ranking() {
        let ready = |ready_since| {
            Some(ReadyPod {
                ready_since,
                created: ready_since,
                serial: 0,
            })
        };
        assert_eq!(
            scale_down_victim(&[ready(0.0), None, ready(0.0), None, ready(0.0)], 100.0),
            Some(3)
        );
        // The one ready for 10 s goes before the one ready for 100 s, whatever their order.
        assert_eq!(
            scale_down_victim(&[ready(90.0), ready(0.0)], 100.0),
            Some(0)
        );
        assert_eq!(scale_down_victim(&[None, ready(0.0)], 100.0), Some(0));
        assert_eq!(scale_down_victim(&[], 100.0), None);
    }

    #[test]
    fn a_ready_victim_is_the_youngest_by_powers_of_two_then_a_uid() {
        let pod = |ready_since, serial| ReadyPod {
            ready_since,
            created: ready_since - 1.0,
            serial,
        };
        // At 100 s: ready 90 s (bucket 2^36 ns = 68.7 s) against 40 s and 50 s (2^35 ns =
        // 34.4 s): one of the young two, by UID.
        let young = [pod(10.0, 0), pod(60.0, 1), pod(50.0, 2)];
        let v = ready_victim(&young, 100.0).unwrap();
        assert!(v == 1 || v == 2);
        let by_uid = if uid_rank(1) < uid_rank(2) { 1 } else { 2 };
        assert_eq!(v, by_uid);
        // Old pods ready 100 s and new ones 75 s are one bucket: an old pod may go first.
        let mixed: Vec<ReadyPod> = (0..8)
            .map(|i| pod(if i < 4 { 0.0 } else { 25.0 }, i))
            .collect();
        let v = ready_victim(&mixed, 100.0).unwrap();
        let lowest = (0..8u64).min_by_key(|&i| uid_rank(i)).unwrap() as usize;
        assert_eq!(v, lowest);
        assert_eq!(ready_victim(&[], 1.0), None);
        // The stand-in UIDs are not in serial order.
        let ranks: Vec<u64> = (0..8).map(uid_rank).collect();
        assert!(ranks.windows(2).any(|w| w[0] > w[1]) && ranks.windows(2).any(|w| w[0] < w[1]));
    }

    #[test]
    fn the_sync_grid_runs_through_sync_at() {
        let c = AutoscalerConfig {
            sync_period_s: 15.0,
            sync_at: 7.5,
            ..config(0.0)
        };
        assert_eq!(c.first_sync_at_or_after(-60.0), -52.5);
        assert_eq!(c.first_sync_at_or_after(7.5), 7.5);
        assert_eq!(c.first_sync_at_or_after(7.6), 22.5);
    }

    #[test]
    fn scale_down_drops_pending_pods_first_then_newest() {
        let mut c = Control::fixed(4);
        let mut events = Vec::new();
        c.scale_to(0.0, 8, &mut events);
        assert_eq!((c.ready(), c.pending.len()), (4, 4));
        c.scale_to(1.0, 3, &mut events);
        assert_eq!((c.ready(), c.pending.len()), (3, 0));
        assert_eq!(events, vec![PodEvent::Removed(3)]);
        assert_eq!(c.next_event(), f64::INFINITY);
    }
}
