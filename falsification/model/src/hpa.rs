//! The HorizontalPodAutoscaler algorithm for External metrics and the CPU Resource metric, as upstream
//! `pkg/controller/podautoscaler` v1.36.4 computes it (replica calculator, `groupPods`,
//! `normalizeDesiredReplicasWithBehaviors`, stabilization, scaling policies). A pure state machine: the caller passes the time, the metric readings and the scale, and
//! gets a [`Decision`]; no clock, no I/O. The embedded runner and the models use this one implementation.
//!
//! Time is seconds since any origin the caller picks (monotonic). Metric readings are quantities with
//! milli precision, as the external metrics API carries them (`"1500m"` = 1.5).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The controller's default tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// The controller's default sync period (`--horizontal-pod-autoscaler-sync-period`).
pub const DEFAULT_SYNC_PERIOD_S: f64 = 15.0;
/// `--horizontal-pod-autoscaler-cpu-initialization-period`: after a pod starts, CPU samples taken
/// before one full metric window of readiness are skipped.
pub const DEFAULT_CPU_INITIALIZATION_PERIOD_S: f64 = 300.0;
/// `--horizontal-pod-autoscaler-downscale-stabilization` and the behavior's default scale-down
/// stabilization window.
pub const DEFAULT_DOWNSCALE_STABILIZATION_S: f64 = 300.0;
/// `--horizontal-pod-autoscaler-initial-readiness-delay`: readiness changes this soon after the pod
/// started count as its initial readiness.
pub const DEFAULT_INITIAL_READINESS_DELAY_S: f64 = 30.0;

/// How a metric's target is expressed (`spec.metrics[].external.target`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
pub enum Target {
    /// Target per pod: `desired = ceil(sum / target)` (ratio against status replicas for the tolerance).
    AverageValue(f64),
    /// Target for the whole metric: `desired = ceil(sum / target x ready pods)`.
    Value(f64),
    /// A Resource metric's `averageUtilization`: percent of the pods' requests (`spec.metrics[].resource`).
    Utilization(i32),
}

/// One metric of the HPA: External (`AverageValue`, `Value`) or Resource (`Utilization`, named after
/// the resource, `cpu`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSpec {
    pub name: String,
    pub target: Target,
}

/// `HPAScalingPolicy.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    Pods,
    Percent,
}

/// `HPAScalingPolicy`: at most `value` pods (or percent) per `period_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub kind: PolicyKind,
    pub value: i32,
    pub period_s: f64,
}

/// `selectPolicy`: the policy allowing the largest change (`Max`), the smallest (`Min`), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SelectPolicy {
    #[default]
    Max,
    Min,
    Disabled,
}

/// `HPAScalingRules` for one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingRules {
    pub stabilization_window_s: f64,
    pub policies: Vec<Policy>,
    pub select: SelectPolicy,
    /// This HPA's own tolerance in this direction (`HPAScalingRules.tolerance`, beta since 1.35
    /// behind the `HPAConfigurableTolerance` gate, on by default); `None` keeps the controller's
    /// `--horizontal-pod-autoscaler-tolerance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

/// `spec.behavior`. Always explicit here: the legacy no-behavior rule is not modelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Behavior {
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
}

impl Default for Behavior {
    /// The upstream defaults SPEC lists: scale-up no stabilization, 4 pods / 15 s and 100% / 15 s, Max;
    /// scale-down 300 s stabilization, 100% / 15 s.
    fn default() -> Self {
        Behavior {
            scale_up: ScalingRules {
                stabilization_window_s: 0.0,
                policies: vec![
                    Policy {
                        kind: PolicyKind::Pods,
                        value: 4,
                        period_s: 15.0,
                    },
                    Policy {
                        kind: PolicyKind::Percent,
                        value: 100,
                        period_s: 15.0,
                    },
                ],
                select: SelectPolicy::Max,
                tolerance: None,
            },
            scale_down: ScalingRules {
                stabilization_window_s: DEFAULT_DOWNSCALE_STABILIZATION_S,
                policies: vec![Policy {
                    kind: PolicyKind::Percent,
                    value: 100,
                    period_s: 15.0,
                }],
                select: SelectPolicy::Max,
                tolerance: None,
            },
        }
    }
}

impl Behavior {
    /// The tolerances applied, (scale-down, scale-up): each direction's own, else the
    /// controller's `controller`.
    pub fn tolerances(&self, controller: f64) -> (f64, f64) {
        (
            self.scale_down.tolerance.unwrap_or(controller),
            self.scale_up.tolerance.unwrap_or(controller),
        )
    }

    /// The same behavior with every window and period divided by `s` (the kit's time scale).
    pub fn time_scaled(&self, s: f64) -> Behavior {
        let scale = |r: &ScalingRules| ScalingRules {
            stabilization_window_s: r.stabilization_window_s / s,
            policies: r
                .policies
                .iter()
                .map(|p| Policy {
                    period_s: p.period_s / s,
                    ..*p
                })
                .collect(),
            select: r.select,
            tolerance: r.tolerance,
        };
        Behavior {
            scale_up: scale(&self.scale_up),
            scale_down: scale(&self.scale_down),
        }
    }
}

/// The parts of an HPA object the algorithm reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HpaSpec {
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub metrics: Vec<MetricSpec>,
    pub behavior: Behavior,
    pub tolerance: f64,
    /// Controller flags the Resource metric reads (see the constants' docs).
    pub cpu_initialization_period_s: f64,
    pub initial_readiness_delay_s: f64,
}

impl HpaSpec {
    /// The tolerances the replica calculator applies, (scale-down, scale-up).
    fn tolerances(&self) -> (f64, f64) {
        self.behavior.tolerances(self.tolerance)
    }
}

/// What the controller read for one metric at a sync.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// An External metric: the sum of its items.
    External(f64),
    /// A Resource metric: every pod the HPA's selector matches, with metrics-server's sample if any.
    Pods(Vec<PodSample>),
}

impl From<f64> for Reading {
    fn from(v: f64) -> Reading {
        Reading::External(v)
    }
}

/// `pod.status.phase`, as far as the replica calculator distinguishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Failed,
}

/// One pod as the Resource metric's replica calculator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSample {
    pub phase: PodPhase,
    /// The pod has a deletion timestamp.
    pub deleting: bool,
    /// `status.startTime`, if the kubelet has set it.
    pub started_s: Option<f64>,
    /// The Ready condition (status, last transition), if the kubelet has set it.
    pub ready: Option<(bool, f64)>,
    /// `resources.requests` of the resource, in cores (milli precision); 0 means none is set.
    pub request: f64,
    /// metrics-server's sample: usage in cores over `window_s` ending at `timestamp_s`.
    pub metric: Option<UsageSample>,
}

impl PodSample {
    /// A running pod, not being deleted (the only kind the kit's own clusters list).
    pub fn running(
        started_s: f64,
        ready: (bool, f64),
        request: f64,
        metric: Option<UsageSample>,
    ) -> PodSample {
        PodSample {
            phase: PodPhase::Running,
            deleting: false,
            started_s: Some(started_s),
            ready: Some(ready),
            request,
            metric,
        }
    }
}

/// A metrics-server `PodMetrics` entry for one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample {
    pub usage: f64,
    pub timestamp_s: f64,
    pub window_s: f64,
}

/// The target's scale subresource and pods as the controller sees them at a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// `scale.spec.replicas` (the Deployment's replica count: the last decision).
    pub spec_replicas: i32,
    /// `scale.status.replicas` (pods that exist, ready or not).
    pub status_replicas: i32,
    /// Pods whose Ready condition is true (used by `Value` targets).
    pub ready_pods: i32,
}

/// Why the decision is what it is (the upstream condition reasons, simplified).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Reason {
    /// `scale.spec.replicas` is 0 and `minReplicas` is not: autoscaling is off.
    ScalingDisabled,
    AboveMaxReplicas,
    BelowMinReplicas,
    /// All metrics failed, or some failed while the rest would scale down: hold.
    MetricsUnavailable,
    DesiredWithinRange,
    ScaleUpLimit,
    ScaleDownLimit,
    TooManyReplicas,
    TooFewReplicas,
}

/// What one sync decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Replicas to set on the scale target (equal to the current spec when not rescaling).
    pub desired: i32,
    /// Per metric proposal, in spec order (`None` for a failed reading).
    pub proposals: Vec<Option<i32>>,
    /// Per metric, what upstream writes to `status.currentMetrics`: the External sum, or the Resource
    /// metric's average utilization in percent of the requests (`None` for a failed reading).
    pub current: Vec<Option<f64>>,
    /// The largest proposal (the recommendation before stabilization and limits).
    pub recommendation: Option<i32>,
    /// After the stabilization windows, before the rate limits.
    pub stabilized: Option<i32>,
    pub reason: Reason,
    /// Whether the scale is written (`desired != spec.replicas`).
    pub rescale: bool,
}

/// A spec the algorithm cannot run.
#[derive(Debug, Error, PartialEq)]
pub enum HpaError {
    #[error("hpa: min_replicas {0} must be at least 1 and at most max_replicas {1}")]
    Bounds(i32, i32),
    #[error("hpa: at least one metric is needed")]
    NoMetrics,
    #[error("hpa: metric {name}: target must be positive, got {value}")]
    Target { name: String, value: f64 },
    #[error("hpa: tolerance must be within [0, 1), got {0}")]
    Tolerance(f64),
    #[error("hpa: {0} tolerance must be a finite number >= 0, got {1}")]
    DirectionTolerance(&'static str, f64),
    #[error(
        "hpa: {direction} policy needs a positive value and period, got value {value} period {period_s}s"
    )]
    Policy {
        direction: &'static str,
        value: i32,
        period_s: f64,
    },
    #[error("hpa: {0} stabilization window must be >= 0")]
    Window(&'static str),
    #[error("hpa: {0} must be >= 0 s, got {1}")]
    Flag(&'static str, f64),
    #[error("hpa: sync called with {got} metric readings for {want} metrics")]
    Readings { got: usize, want: usize },
}

#[derive(Debug, Clone, Copy)]
struct Timed {
    at: f64,
    value: i32,
}

/// The HPA controller's state for one HPA object: recommendation history and scale events.
#[derive(Debug, Clone)]
pub struct Hpa {
    spec: HpaSpec,
    recommendations: Vec<Timed>,
    scale_up_events: Vec<Timed>,
    scale_down_events: Vec<Timed>,
}

impl Hpa {
    pub fn new(spec: HpaSpec) -> Result<Hpa, HpaError> {
        if spec.min_replicas < 1 || spec.min_replicas > spec.max_replicas {
            return Err(HpaError::Bounds(spec.min_replicas, spec.max_replicas));
        }
        if spec.metrics.is_empty() {
            return Err(HpaError::NoMetrics);
        }
        for m in &spec.metrics {
            let v = match m.target {
                Target::AverageValue(v) | Target::Value(v) => v,
                Target::Utilization(percent) => f64::from(percent),
            };
            if !(v > 0.0 && v.is_finite()) {
                return Err(HpaError::Target {
                    name: m.name.clone(),
                    value: v,
                });
            }
        }
        if !(0.0..1.0).contains(&spec.tolerance) {
            return Err(HpaError::Tolerance(spec.tolerance));
        }
        for (direction, t) in [
            ("scale-up", spec.behavior.scale_up.tolerance),
            ("scale-down", spec.behavior.scale_down.tolerance),
        ] {
            // Upstream's validation: a tolerance, when set, is a non-negative quantity.
            if let Some(t) = t.filter(|t| !(t.is_finite() && *t >= 0.0)) {
                return Err(HpaError::DirectionTolerance(direction, t));
            }
        }
        for (flag, v) in [
            (
                "cpu initialization period",
                spec.cpu_initialization_period_s,
            ),
            ("initial readiness delay", spec.initial_readiness_delay_s),
        ] {
            if v.is_nan() || v < 0.0 {
                return Err(HpaError::Flag(flag, v));
            }
        }
        for (direction, rules) in [
            ("scaleUp", &spec.behavior.scale_up),
            ("scaleDown", &spec.behavior.scale_down),
        ] {
            if rules.stabilization_window_s.is_nan() || rules.stabilization_window_s < 0.0 {
                return Err(HpaError::Window(direction));
            }
            for p in &rules.policies {
                if p.value <= 0 || p.period_s.is_nan() || p.period_s <= 0.0 {
                    return Err(HpaError::Policy {
                        direction,
                        value: p.value,
                        period_s: p.period_s,
                    });
                }
            }
        }
        Ok(Hpa {
            spec,
            recommendations: Vec::new(),
            scale_up_events: Vec::new(),
            scale_down_events: Vec::new(),
        })
    }

    /// One reconcile: `readings[i]` is what the controller read for metric `i` (`None` when it could
    /// not be read).
    pub fn sync(
        &mut self,
        now: f64,
        readings: &[Option<Reading>],
        scale: Scale,
    ) -> Result<Decision, HpaError> {
        if readings.len() != self.spec.metrics.len() {
            return Err(HpaError::Readings {
                got: readings.len(),
                want: self.spec.metrics.len(),
            });
        }
        let current = scale.spec_replicas;
        if self.recommendations.is_empty() {
            self.recommendations.push(Timed {
                at: now,
                value: current,
            });
        }
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        let held = |reason, proposals, current_metrics| Decision {
            desired: current,
            proposals,
            current: current_metrics,
            recommendation: None,
            stabilized: None,
            reason,
            rescale: false,
        };
        let mut decision = if current == 0 {
            held(Reason::ScalingDisabled, vec![], vec![])
        } else if current > max || current < min {
            let (desired, reason) = if current > max {
                (max, Reason::AboveMaxReplicas)
            } else {
                (min, Reason::BelowMinReplicas)
            };
            Decision {
                desired,
                proposals: vec![],
                current: vec![],
                recommendation: None,
                stabilized: None,
                reason,
                rescale: true,
            }
        } else {
            let (proposals, current_metrics): (Vec<Option<i32>>, Vec<Option<f64>>) = self
                .spec
                .metrics
                .iter()
                .zip(readings)
                .map(|(m, r)| {
                    match r
                        .as_ref()
                        .and_then(|r| self.proposal(now, m.target, r, scale))
                    {
                        Some((p, v)) => (Some(p), Some(v)),
                        None => (None, None),
                    }
                })
                .unzip();
            let invalid = proposals.iter().filter(|p| p.is_none()).count();
            let largest = proposals.iter().flatten().copied().max().unwrap_or(0);
            // Upstream refuses to act on partial data that would scale down.
            if invalid == proposals.len() || (invalid > 0 && largest < current) {
                held(Reason::MetricsUnavailable, proposals, current_metrics)
            } else {
                let stabilized = self.stabilize(now, current, largest);
                let (desired, reason) = self.limit_rate(now, current, stabilized);
                Decision {
                    desired,
                    proposals,
                    current: current_metrics,
                    recommendation: Some(largest),
                    stabilized: Some(stabilized),
                    reason,
                    rescale: desired != current,
                }
            }
        };
        if decision.rescale {
            self.store_scale_event(now, current, decision.desired);
        } else {
            decision.desired = current;
        }
        Ok(decision)
    }

    /// The replica calculator for one metric: the proposal and the value upstream reports as current.
    /// `None` when the reading does not fit the target's kind or has no usable data.
    fn proposal(
        &self,
        now: f64,
        target: Target,
        reading: &Reading,
        scale: Scale,
    ) -> Option<(i32, f64)> {
        match (target, reading) {
            (Target::AverageValue(per_pod), &Reading::External(sum)) => {
                // `GetExternalPerPodMetricReplicas`.
                let usage = milli(sum) as f64;
                let per_pod = milli(per_pod) as f64;
                let ratio = usage / (per_pod * f64::from(scale.status_replicas));
                let p = if self.within_tolerance(ratio) {
                    scale.status_replicas
                } else {
                    ceil_i32(usage / per_pod)
                };
                Some((p, sum))
            }
            (Target::Value(total), &Reading::External(sum)) => {
                // `GetExternalMetricReplicas` / `getUsageRatioReplicaCount`.
                let ratio = milli(sum) as f64 / milli(total) as f64;
                let p = if scale.spec_replicas == 0 {
                    ceil_i32(ratio)
                } else if self.within_tolerance(ratio) {
                    scale.spec_replicas
                } else {
                    ceil_i32(ratio * f64::from(scale.ready_pods))
                };
                Some((p, sum))
            }
            (Target::Utilization(percent), Reading::Pods(pods)) => {
                self.resource_proposal(now, percent, pods, scale.spec_replicas)
            }
            _ => None,
        }
    }

    /// `GetResourceReplicas` with `groupPods` (replica_calculator.go, v1.36.4), for a Resource metric
    /// read at `now`. Returns the proposal and the current average utilization in percent.
    fn resource_proposal(
        &self,
        now: f64,
        target_percent: i32,
        pods: &[PodSample],
        current: i32,
    ) -> Option<(i32, f64)> {
        // (usage, request) in milli-cores of the pods whose samples count, then the others by group.
        let mut counted: Vec<(i64, i64)> = Vec::new();
        let (mut unready, mut missing) = (Vec::new(), Vec::new());
        for p in pods {
            // Deleted and failed pods are ignored altogether.
            if p.deleting || p.phase == PodPhase::Failed {
                continue;
            }
            // A missing request makes the metric fail (`calculateRequests`).
            let request = milli(p.request);
            if request <= 0 {
                return None;
            }
            if p.phase == PodPhase::Pending {
                unready.push(request);
                continue;
            }
            let Some(m) = p.metric else {
                missing.push(request);
                continue;
            };
            let skipped = match (p.ready, p.started_s) {
                (Some((ready, since)), Some(started)) => {
                    if started + self.spec.cpu_initialization_period_s > now {
                        // Still initializing: skip the sample until one full window of readiness.
                        !ready || m.timestamp_s < since + m.window_s
                    } else {
                        // Afterwards: skip an unready pod that has never been ready.
                        !ready && started + self.spec.initial_readiness_delay_s > since
                    }
                }
                _ => true,
            };
            if skipped {
                unready.push(request);
            } else {
                counted.push((milli_ceil(m.usage), request));
            }
        }
        if counted.is_empty() {
            return None;
        }
        let ready_pods = counted.len();
        let (ratio, utilization) = utilization_ratio(&counted, target_percent);
        let report = f64::from(utilization);
        let up_with_unready = !unready.is_empty() && ratio > 1.0;
        if !up_with_unready && missing.is_empty() {
            let p = if self.within_tolerance(ratio) {
                current
            } else {
                ceil_i32(ratio * ready_pods as f64)
            };
            return Some((p, report));
        }
        // Missing samples count as the request (or the target above 100%) going down, as 0 going up.
        if ratio < 1.0 {
            let fallback = i64::from(target_percent.max(100));
            counted.extend(missing.iter().map(|&r| (r * fallback / 100, r)));
        } else if ratio > 1.0 {
            counted.extend(missing.iter().map(|&r| (0, r)));
        }
        // Going up, pods whose samples were skipped count as idle.
        if up_with_unready {
            counted.extend(unready.iter().map(|&r| (0, r)));
        }
        let (new_ratio, _) = utilization_ratio(&counted, target_percent);
        let flips = (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0);
        if self.within_tolerance(new_ratio) || flips {
            return Some((current, report));
        }
        let proposed = ceil_i32(new_ratio * counted.len() as f64);
        if (new_ratio < 1.0 && proposed > current) || (new_ratio > 1.0 && proposed < current) {
            return Some((current, report));
        }
        Some((proposed, report))
    }

    /// The object's `minReplicas` edited (kubectl patch, an operator's remedy); the next sync reads
    /// it. A value outside `[1, maxReplicas]` is clamped into it, as validation would refuse it.
    pub fn set_min_replicas(&mut self, min: i32) {
        self.spec.min_replicas = min.clamp(1, self.spec.max_replicas);
    }

    /// `tolerances.isWithin`: below 1 against the scale-down tolerance, above 1 against the
    /// scale-up one; each is the HPA's own when its behavior sets it, else the controller's.
    fn within_tolerance(&self, ratio: f64) -> bool {
        let (down, up) = self.spec.tolerances();
        (1.0 - down) <= ratio && ratio <= (1.0 + up)
    }

    /// `stabilizeRecommendationWithBehaviors`: the recommendation is held between the lowest one of the
    /// scale-up window and the highest one of the scale-down window; the raw recommendation is recorded.
    fn stabilize(&mut self, now: f64, current: i32, desired: i32) -> i32 {
        let up = &self.spec.behavior.scale_up;
        let down = &self.spec.behavior.scale_down;
        let up_cutoff = now - up.stabilization_window_s;
        let down_cutoff = now - down.stabilization_window_s;
        let (mut up_rec, mut down_rec) = (desired, desired);
        for r in &self.recommendations {
            if r.at > up_cutoff {
                up_rec = up_rec.min(r.value);
            }
            if r.at > down_cutoff {
                down_rec = down_rec.max(r.value);
            }
        }
        // Entries older than both windows never matter again (time only moves forward).
        self.recommendations
            .retain(|r| !(r.at < up_cutoff && r.at < down_cutoff));
        self.recommendations.push(Timed {
            at: now,
            value: desired,
        });
        current.max(up_rec).min(down_rec)
    }

    /// `convertDesiredReplicasWithBehaviorRate`: the scaling policies and min/max bounds.
    fn limit_rate(&self, now: f64, current: i32, desired: i32) -> (i32, Reason) {
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        if desired > current {
            let limit = self
                .scale_limit(now, current, &self.spec.behavior.scale_up, true)
                .max(current);
            let (allowed, reason) = if max > limit {
                (limit, Reason::ScaleUpLimit)
            } else {
                (max, Reason::TooManyReplicas)
            };
            if desired > allowed {
                return (allowed, reason);
            }
        } else if desired < current {
            let limit = self
                .scale_limit(now, current, &self.spec.behavior.scale_down, false)
                .min(current);
            let (allowed, reason) = if min < limit {
                (limit, Reason::ScaleDownLimit)
            } else {
                (min, Reason::TooFewReplicas)
            };
            if desired < allowed {
                return (allowed, reason);
            }
        }
        (desired, Reason::DesiredWithinRange)
    }

    /// `calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWithBehaviors`: per policy, the
    /// replica count at the start of its period (undoing the changes made within it) plus or minus what
    /// the policy allows; `selectPolicy` picks the largest or the smallest change.
    fn scale_limit(&self, now: f64, current: i32, rules: &ScalingRules, up: bool) -> i32 {
        if rules.select == SelectPolicy::Disabled {
            return current;
        }
        let largest_change = rules.select == SelectPolicy::Max;
        let mut result: Option<i32> = None;
        for p in &rules.policies {
            let added = changes_within(&self.scale_up_events, now, p.period_s);
            let deleted = changes_within(&self.scale_down_events, now, p.period_s);
            let start = f64::from(current - added + deleted);
            let proposed = match (p.kind, up) {
                (PolicyKind::Pods, true) => start as i32 + p.value,
                (PolicyKind::Percent, true) => {
                    (start * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
                }
                (PolicyKind::Pods, false) => start as i32 - p.value,
                // Upstream truncates toward zero here.
                (PolicyKind::Percent, false) => (start * (1.0 - f64::from(p.value) / 100.0)) as i32,
            };
            // The largest change is the highest limit going up and the lowest going down.
            let pick_high = largest_change == up;
            result = Some(match result {
                None => proposed,
                Some(r) if pick_high => r.max(proposed),
                Some(r) => r.min(proposed),
            });
        }
        result.unwrap_or(current)
    }

    fn store_scale_event(&mut self, now: f64, previous: i32, new: i32) {
        let (events, rules, change) = if new > previous {
            (
                &mut self.scale_up_events,
                &self.spec.behavior.scale_up,
                new - previous,
            )
        } else {
            (
                &mut self.scale_down_events,
                &self.spec.behavior.scale_down,
                previous - new,
            )
        };
        let longest = rules
            .policies
            .iter()
            .map(|p| p.period_s)
            .fold(0.0, f64::max);
        events.retain(|e| e.at >= now - longest);
        events.push(Timed {
            at: now,
            value: change,
        });
    }
}

/// Sum of the changes recorded strictly after `now - period` (upstream's `After(cutoff)`).
fn changes_within(events: &[Timed], now: f64, period: f64) -> i32 {
    events
        .iter()
        .filter(|e| e.at > now - period)
        .map(|e| e.value)
        .sum()
}

/// A quantity's milli-value. Readings arrive with milli precision, so rounding recovers them exactly.
fn milli(v: f64) -> i64 {
    (v * 1000.0).round() as i64
}

/// `Quantity.MilliValue()` of a finer quantity (metrics-server reports nano-cores): rounded up.
fn milli_ceil(v: f64) -> i64 {
    (v * 1000.0 - 1e-6).ceil() as i64
}

/// `GetResourceUtilizationRatio`: the whole percent of the requests used (truncated, as upstream's
/// integer division), and its ratio to the target.
fn utilization_ratio(pods: &[(i64, i64)], target_percent: i32) -> (f64, i32) {
    let usage: i64 = pods.iter().map(|p| p.0).sum();
    let requests: i64 = pods.iter().map(|p| p.1).sum();
    let percent = (usage * 100 / requests) as i32;
    (f64::from(percent) / f64::from(target_percent), percent)
}

fn ceil_i32(v: f64) -> i32 {
    v.ceil() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(metrics: Vec<MetricSpec>, min: i32, max: i32) -> HpaSpec {
        HpaSpec {
            min_replicas: min,
            max_replicas: max,
            metrics,
            behavior: Behavior::default(),
            tolerance: 0.1,
            cpu_initialization_period_s: DEFAULT_CPU_INITIALIZATION_PERIOD_S,
            initial_readiness_delay_s: DEFAULT_INITIAL_READINESS_DELAY_S,
        }
    }

    /// External readings.
    fn ext(values: &[Option<f64>]) -> Vec<Option<Reading>> {
        values.iter().map(|v| v.map(Reading::External)).collect()
    }

    fn avg(name: &str, v: f64) -> MetricSpec {
        MetricSpec {
            name: name.into(),
            target: Target::AverageValue(v),
        }
    }

    /// `n` pods exist, `ready` of them ready.
    fn starting(n: i32, ready: i32) -> Scale {
        Scale {
            spec_replicas: n,
            status_replicas: n,
            ready_pods: ready,
        }
    }

    fn scale(n: i32) -> Scale {
        starting(n, n)
    }

    #[test]
    fn tolerance_band_holds_replicas() {
        let mut hpa = Hpa::new(spec(vec![avg("first_attempt_rate", 50.0)], 1, 50)).unwrap();
        // 4 pods, target 50 each = 200; 219 is ratio 1.095: inside the band.
        let d = hpa.sync(0.0, &ext(&[Some(219.0)]), scale(4)).unwrap();
        assert_eq!((d.desired, d.rescale), (4, false));
        // 181 is ratio 0.905: inside.
        let d = hpa.sync(15.0, &ext(&[Some(181.0)]), scale(4)).unwrap();
        assert_eq!(d.desired, 4);
        // 221 is 1.105: out, ceil(221/50) = 5.
        let d = hpa.sync(30.0, &ext(&[Some(221.0)]), scale(4)).unwrap();
        assert_eq!((d.desired, d.rescale), (5, true));
    }

    #[test]
    fn an_hpa_tolerance_per_direction_replaces_the_controller_flag() {
        let mut s = spec(vec![avg("first_attempt_rate", 50.0)], 1, 50);
        s.behavior.scale_up.tolerance = Some(0.02);
        s.behavior.scale_down.tolerance = Some(0.5);
        let mut hpa = Hpa::new(s.clone()).unwrap();
        // 219 over 4 x 50 is ratio 1.095: outside the HPA's 2% scale-up band, ceil(219/50) = 5.
        let d = hpa.sync(0.0, &ext(&[Some(219.0)]), scale(4)).unwrap();
        assert_eq!((d.desired, d.rescale), (5, true));
        // 160 over 5 x 50 is 0.64: inside its 50% scale-down band (outside the controller's 10%).
        let d = hpa.sync(15.0, &ext(&[Some(160.0)]), scale(5)).unwrap();
        assert_eq!(d.proposals, vec![Some(5)]);
        assert_eq!(s.tolerances(), (0.5, 0.02));
        // Upstream refuses a negative tolerance; any non-negative one is valid, even above 1.
        s.behavior.scale_up.tolerance = Some(-0.1);
        assert_eq!(
            Hpa::new(s.clone()).unwrap_err(),
            HpaError::DirectionTolerance("scale-up", -0.1)
        );
        s.behavior.scale_up.tolerance = Some(2.0);
        assert!(Hpa::new(s).is_ok());
    }

    #[test]
    fn average_value_uses_status_replicas_and_value_uses_ready_pods() {
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 100)).unwrap();
        // 8 pods exist (4 still starting): ratio 1000/(50*8) = 2.5 -> ceil(1000/50) = 20, limited to 16.
        let d = hpa
            .sync(0.0, &ext(&[Some(1000.0)]), starting(8, 4))
            .unwrap();
        assert_eq!(d.proposals, vec![Some(20)]);
        assert_eq!(d.desired, 16);
        assert_eq!(d.reason, Reason::ScaleUpLimit);

        let value = MetricSpec {
            name: "m".into(),
            target: Target::Value(200.0),
        };
        let mut hpa = Hpa::new(spec(vec![value], 1, 100)).unwrap();
        // ratio 1000/200 = 5, times 4 ready pods = 20 (not times the 8 that exist).
        let d = hpa
            .sync(0.0, &ext(&[Some(1000.0)]), starting(8, 4))
            .unwrap();
        assert_eq!(d.proposals, vec![Some(20)]);
        // ratio 1.05 is inside the tolerance: spec replicas kept.
        let d = hpa
            .sync(15.0, &ext(&[Some(210.0)]), starting(16, 8))
            .unwrap();
        assert_eq!(d.proposals, vec![Some(16)]);
    }

    #[test]
    fn largest_metric_wins() {
        let mut hpa =
            Hpa::new(spec(vec![avg("first", 50.0), avg("ingress", 50.0)], 1, 50)).unwrap();
        let d = hpa
            .sync(0.0, &ext(&[Some(200.0), Some(400.0)]), scale(4))
            .unwrap();
        assert_eq!(d.proposals, vec![Some(4), Some(8)]);
        assert_eq!(d.desired, 8);
        // Healthy: both agree, nothing changes.
        let mut hpa =
            Hpa::new(spec(vec![avg("first", 50.0), avg("ingress", 50.0)], 1, 50)).unwrap();
        let d = hpa
            .sync(0.0, &ext(&[Some(200.0), Some(200.0)]), scale(4))
            .unwrap();
        assert_eq!((d.desired, d.rescale), (4, false));
    }

    #[test]
    fn scale_up_policies_4_pods_or_100_percent_per_15s() {
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 50)).unwrap();
        // From 4: max(4 + 4, 4 * 2) = 8.
        let d = hpa.sync(0.0, &ext(&[Some(3000.0)]), scale(4)).unwrap();
        assert_eq!(d.desired, 8);
        // 10 s later the event is within the 15 s period: the period started at 4, so still 8.
        let d = hpa.sync(10.0, &ext(&[Some(3000.0)]), scale(8)).unwrap();
        assert_eq!((d.desired, d.rescale), (8, false));
        // At exactly 15 s the event is no longer strictly inside the period: 8 -> 16.
        let d = hpa.sync(15.0, &ext(&[Some(3000.0)]), scale(8)).unwrap();
        assert_eq!(d.desired, 16);
        let d = hpa.sync(30.0, &ext(&[Some(3000.0)]), scale(16)).unwrap();
        assert_eq!(d.desired, 32);
        // 60 wanted, ceiling 50.
        let d = hpa.sync(45.0, &ext(&[Some(3000.0)]), scale(32)).unwrap();
        assert_eq!((d.desired, d.reason), (50, Reason::TooManyReplicas));
        // Small counts: 4 pods beats 100% of 1.
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 50)).unwrap();
        assert_eq!(
            hpa.sync(0.0, &ext(&[Some(3000.0)]), scale(1))
                .unwrap()
                .desired,
            5
        );
    }

    #[test]
    fn select_policy_min_and_disabled() {
        let mut s = spec(vec![avg("m", 50.0)], 1, 50);
        s.behavior.scale_up.select = SelectPolicy::Min;
        let mut hpa = Hpa::new(s.clone()).unwrap();
        // From 10 pods: min(10 + 4, 10 * 2) = 14.
        assert_eq!(
            hpa.sync(0.0, &ext(&[Some(3000.0)]), scale(10))
                .unwrap()
                .desired,
            14
        );
        s.behavior.scale_up.select = SelectPolicy::Disabled;
        let mut hpa = Hpa::new(s).unwrap();
        let d = hpa.sync(0.0, &ext(&[Some(3000.0)]), scale(10)).unwrap();
        assert_eq!((d.desired, d.rescale), (10, false));
    }

    #[test]
    fn scale_down_waits_for_the_300s_window_maximum() {
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 50)).unwrap();
        // A high recommendation at t = 0 (60 -> capped to 50).
        let d = hpa.sync(0.0, &ext(&[Some(3000.0)]), scale(50)).unwrap();
        assert_eq!((d.desired, d.rescale), (50, false));
        // Load falls to 1000 (20 pods wanted) but 60 is within the window.
        for t in (15..300).step_by(15) {
            let d = hpa
                .sync(f64::from(t), &ext(&[Some(1000.0)]), scale(50))
                .unwrap();
            assert_eq!(d.desired, 50, "t = {t}");
        }
        // At 300 s the t = 0 recommendation is no longer strictly inside: 100% / 15 s allows 20 at once.
        let d = hpa.sync(300.0, &ext(&[Some(1000.0)]), scale(50)).unwrap();
        assert_eq!((d.desired, d.reason), (20, Reason::DesiredWithinRange));
    }

    #[test]
    fn scale_down_percent_policy_truncates_and_min_replicas_bounds() {
        let mut s = spec(vec![avg("m", 50.0)], 3, 50);
        s.behavior.scale_down = ScalingRules {
            stabilization_window_s: 0.0,
            policies: vec![Policy {
                kind: PolicyKind::Percent,
                value: 50,
                period_s: 60.0,
            }],
            select: SelectPolicy::Max,
            tolerance: None,
        };
        let mut hpa = Hpa::new(s).unwrap();
        // 9 pods, nothing wanted: 50% of 9 = trunc(4.5) = 4 kept.
        let d = hpa.sync(0.0, &ext(&[Some(0.0)]), scale(9)).unwrap();
        assert_eq!((d.desired, d.reason), (4, Reason::ScaleDownLimit));
        // Within the same 60 s period the start count is still 9: no further.
        let d = hpa.sync(15.0, &ext(&[Some(0.0)]), scale(4)).unwrap();
        assert_eq!(d.desired, 4);
        // Next period: limit trunc(4 * 0.5) = 2, but minReplicas is 3.
        let d = hpa.sync(60.0, &ext(&[Some(0.0)]), scale(4)).unwrap();
        assert_eq!((d.desired, d.reason), (3, Reason::TooFewReplicas));
    }

    #[test]
    fn bounds_outside_range_are_corrected_first() {
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 2, 10)).unwrap();
        let d = hpa.sync(0.0, &ext(&[Some(0.0)]), scale(12)).unwrap();
        assert_eq!((d.desired, d.reason), (10, Reason::AboveMaxReplicas));
        let d = hpa.sync(15.0, &ext(&[Some(0.0)]), scale(1)).unwrap();
        assert_eq!((d.desired, d.reason), (2, Reason::BelowMinReplicas));
        let d = hpa.sync(30.0, &ext(&[Some(0.0)]), scale(0)).unwrap();
        assert_eq!(
            (d.desired, d.reason, d.rescale),
            (0, Reason::ScalingDisabled, false)
        );
    }

    #[test]
    fn missing_metrics_never_scale_down() {
        let mut hpa = Hpa::new(spec(vec![avg("a", 50.0), avg("b", 50.0)], 1, 50)).unwrap();
        let d = hpa.sync(0.0, &ext(&[None, None]), scale(8)).unwrap();
        assert_eq!((d.desired, d.reason), (8, Reason::MetricsUnavailable));
        let d = hpa
            .sync(15.0, &ext(&[Some(100.0), None]), scale(8))
            .unwrap();
        assert_eq!((d.desired, d.reason), (8, Reason::MetricsUnavailable));
        // A partial reading that scales up is acted on.
        let d = hpa
            .sync(30.0, &ext(&[Some(1000.0), None]), scale(8))
            .unwrap();
        assert_eq!(d.desired, 16);
    }

    #[test]
    fn milli_precision_absorbs_float_noise() {
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 50)).unwrap();
        // 1000.0000000001 would be 21 pods without the quantity's milli precision.
        assert_eq!(
            hpa.sync(0.0, &ext(&[Some(1000.0 + 1e-10)]), scale(16))
                .unwrap()
                .desired,
            20
        );
    }

    #[test]
    fn bad_specs_are_refused_with_the_field() {
        let e = Hpa::new(spec(vec![avg("m", 50.0)], 0, 5)).unwrap_err();
        assert!(e.to_string().contains("min_replicas 0"));
        let e = Hpa::new(spec(vec![avg("m", -1.0)], 1, 5)).unwrap_err();
        assert!(e.to_string().contains("metric m"));
        let mut hpa = Hpa::new(spec(vec![avg("m", 50.0)], 1, 5)).unwrap();
        assert!(hpa.sync(0.0, &ext(&[]), scale(1)).is_err());
    }

    #[test]
    fn scale_up_stabilization_takes_the_lowest_recent_recommendation() {
        let mut s = spec(vec![avg("m", 50.0)], 1, 50);
        s.behavior.scale_up.stabilization_window_s = 60.0;
        let mut hpa = Hpa::new(s).unwrap();
        // The initial recommendation (4, at t = 0) is within the window: no scale-up yet.
        let d = hpa.sync(0.0, &ext(&[Some(1000.0)]), scale(4)).unwrap();
        assert_eq!((d.stabilized, d.desired), (Some(4), 4));
        // 15 s later the lowest recent recommendation is still 4.
        assert_eq!(
            hpa.sync(15.0, &ext(&[Some(1000.0)]), scale(4))
                .unwrap()
                .desired,
            4
        );
        // At 60 s the t = 0 entries have left the window: 20 recommended, limited to 8.
        let d = hpa.sync(60.0, &ext(&[Some(1000.0)]), scale(4)).unwrap();
        assert_eq!((d.stabilized, d.desired), (Some(20), 8));
    }

    #[test]
    fn a_scale_down_within_the_period_raises_the_scale_up_base() {
        let mut s = spec(vec![avg("m", 50.0)], 1, 50);
        s.behavior.scale_down.stabilization_window_s = 0.0;
        s.behavior.scale_up.policies = vec![Policy {
            kind: PolicyKind::Pods,
            value: 2,
            period_s: 60.0,
        }];
        let mut hpa = Hpa::new(s).unwrap();
        // 10 -> 6 (100% down allowed, 300/50 = 6).
        assert_eq!(
            hpa.sync(0.0, &ext(&[Some(300.0)]), scale(10))
                .unwrap()
                .desired,
            6
        );
        // Within 60 s the period started at 10 (6 + 4 deleted): up to 10 + 2 = 12 allowed.
        assert_eq!(
            hpa.sync(15.0, &ext(&[Some(1000.0)]), scale(6))
                .unwrap()
                .desired,
            12
        );
        // And the 6 added count against the next scale-up in the same period: 12 - 6 + 4 + 2 = 12.
        let d = hpa.sync(30.0, &ext(&[Some(1000.0)]), scale(12)).unwrap();
        assert_eq!((d.desired, d.rescale), (12, false));
    }

    #[test]
    fn default_behavior_matches_spec() {
        let b = Behavior::default();
        assert_eq!(b.scale_up.stabilization_window_s, 0.0);
        assert_eq!(b.scale_up.select, SelectPolicy::Max);
        assert_eq!(b.scale_up.policies.len(), 2);
        assert_eq!(b.scale_down.stabilization_window_s, 300.0);
        assert_eq!(
            b.scale_down.policies[0],
            Policy {
                kind: PolicyKind::Percent,
                value: 100,
                period_s: 15.0
            }
        );
        let s = b.time_scaled(10.0);
        assert_eq!(s.scale_down.stabilization_window_s, 30.0);
        assert_eq!(s.scale_up.policies[0].period_s, 1.5);
    }
    // The Resource metric, worked from upstream's replica_calculator_test.go (v1.36.4): requests 1 core,
    // a 60 s metric window, pods started long before `NOW` unless a case says otherwise.
    const NOW: f64 = 10_000.0;

    fn cpu_hpa(target_percent: i32) -> Hpa {
        Hpa::new(spec(
            vec![MetricSpec {
                name: "cpu".into(),
                target: Target::Utilization(target_percent),
            }],
            1,
            100,
        ))
        .unwrap()
    }

    /// A running pod, ready since long ago, using `usage` cores.
    fn busy(usage: f64) -> PodSample {
        PodSample {
            phase: PodPhase::Running,
            deleting: false,
            started_s: Some(NOW - 1000.0),
            ready: Some((true, NOW - 990.0)),
            request: 1.0,
            metric: Some(UsageSample {
                usage,
                timestamp_s: NOW,
                window_s: 60.0,
            }),
        }
    }

    fn unready(mut p: PodSample) -> PodSample {
        p.ready = Some((false, p.started_s.unwrap()));
        p
    }

    fn cpu_sync(target: i32, pods: Vec<PodSample>, current: i32) -> Decision {
        cpu_hpa(target)
            .sync(NOW, &[Some(Reading::Pods(pods))], scale(current))
            .unwrap()
    }

    #[test]
    fn cpu_scale_up_is_the_ready_pods_times_the_usage_ratio() {
        // TestReplicaCalcScaleUp: 300m, 500m, 700m at a 30% target: 50%, ceil(50/30 x 3) = 5.
        let d = cpu_sync(30, vec![busy(0.3), busy(0.5), busy(0.7)], 3);
        assert_eq!((d.proposals[0], d.current[0]), (Some(5), Some(50.0)));
        // Within the tolerance (33% of 30%: ratio 1.1 exactly is inside): held.
        let d = cpu_sync(30, vec![busy(0.33), busy(0.33), busy(0.33)], 3);
        assert_eq!(d.proposals[0], Some(3));
        // Utilization is whole percent, truncated: 3 x 0.3339 = 33.39% reads 33% (ratio 1.1, held).
        let d = cpu_sync(30, vec![busy(0.3339); 3], 3);
        assert_eq!((d.proposals[0], d.current[0]), (Some(3), Some(33.0)));
    }

    #[test]
    fn cpu_unready_pods_count_as_idle_going_up() {
        // TestReplicaCalcScaleUpUnreadyLessScale: the unready pod's 300m is dropped; 60% of the two
        // ready, then 1.2 / 3 pods with the unready one at 0: 40% -> ceil(40/30 x 3) = 4.
        let pods = vec![unready(busy(0.3)), busy(0.5), busy(0.7)];
        let d = cpu_sync(30, pods, 3);
        assert_eq!((d.proposals[0], d.current[0]), (Some(4), Some(60.0)));
        // TestReplicaCalcScaleUpUnreadyNoScale: 40% from the one ready pod, 400m / 3 pods = 13%:
        // the direction flips, so the current replicas.
        let d = cpu_sync(
            30,
            vec![busy(0.4), unready(busy(0.5)), unready(busy(0.7))],
            3,
        );
        assert_eq!((d.proposals[0], d.current[0]), (Some(3), Some(40.0)));
        // The saturation the F0 experiment rests on: ready pods at their limit (l = r, 100%) at a
        // 50% target can at most double the pods that count, however many are still starting.
        let mut pods = vec![busy(1.0); 10];
        pods.extend((0..10).map(|_| unready(busy(0.0))));
        let d = cpu_sync(50, pods, 20);
        // 10 cores / 20 pods = 50%: within the tolerance, held at the 20 already ordered.
        assert_eq!(d.proposals[0], Some(20));
    }

    #[test]
    fn cpu_samples_are_skipped_until_a_window_of_readiness_in_the_initialization_period() {
        // TestReplicaCalcScaleUpHotCpuLessScale: a pod started 30 s ago, ready 10 s ago, with a 60 s
        // window: its sample predates a full window of readiness, so it is unready (counted as 0).
        let mut hot = busy(0.3);
        hot.started_s = Some(NOW - 30.0);
        hot.ready = Some((true, NOW - 10.0));
        let d = cpu_sync(30, vec![hot.clone(), busy(0.5), busy(0.7)], 3);
        assert_eq!(d.proposals[0], Some(4));
        // A full window after it turned ready, its sample counts: as TestReplicaCalcScaleUp.
        hot.ready = Some((true, NOW - 60.0));
        let d = cpu_sync(30, vec![hot, busy(0.5), busy(0.7)], 3);
        assert_eq!(d.proposals[0], Some(5));
    }

    #[test]
    fn cpu_after_initialization_only_never_ready_pods_are_skipped() {
        // Past the initialization period, an unready pod that was ready once counts with its sample
        // (its readiness changed more than the initial readiness delay after start).
        let mut was_ready = busy(0.7);
        was_ready.ready = Some((false, NOW - 100.0));
        let d = cpu_sync(30, vec![busy(0.3), busy(0.5), was_ready.clone()], 3);
        assert_eq!(d.proposals[0], Some(5));
        // Became unready within the delay of its start: it has never been ready, so skipped: 40% of
        // the two going up, then 0.8 cores / 3 pods = 26% going down: the direction flips, held.
        was_ready.ready = Some((false, NOW - 1000.0 + 20.0));
        let d = cpu_sync(30, vec![busy(0.3), busy(0.5), was_ready], 3);
        assert_eq!((d.proposals[0], d.current[0]), (Some(3), Some(40.0)));
    }

    #[test]
    fn cpu_missing_samples_count_as_idle_up_and_as_the_request_down() {
        // TestReplicaCalcMissingMetricsUnreadyScaleUp: 100m unready, 2000m ready, one pod missing:
        // 200% / 50% going up; the missing and the unready pod count 0: 2 cores / 3 = 66% -> 4.
        let mut missing = busy(0.0);
        missing.metric = None;
        let d = cpu_sync(50, vec![unready(busy(0.1)), busy(2.0), missing.clone()], 3);
        assert_eq!((d.proposals[0], d.current[0]), (Some(4), Some(200.0)));
        // TestReplicaCalcMissingMetricsNoChangeGt: 190% of a 100% target with one pod missing:
        // counted as 0 the ratio is 0.95, inside the tolerance: held at 2.
        let d = cpu_sync(100, vec![busy(1.9), missing.clone()], 2);
        assert_eq!(d.proposals[0], Some(2));
        // Going down a missing pod counts as its full request: 10% with one missing is (0.1 + 1) / 2
        // = 55% of a 50% target, inside the tolerance: held, not halved.
        let d = cpu_sync(50, vec![busy(0.1), missing], 2);
        assert_eq!(d.proposals[0], Some(2));
    }

    #[test]
    fn cpu_failed_deleted_and_pending_pods() {
        // TestReplicaCalcScaleUpIgnoresFailedPods: 500m, 700m ready, two failed: 60% / 30% -> 4.
        let mut failed = busy(0.0);
        failed.phase = PodPhase::Failed;
        let d = cpu_sync(30, vec![busy(0.5), busy(0.7), failed.clone(), failed], 2);
        assert_eq!(d.proposals[0], Some(4));
        // A deleting pod is ignored the same way; a pending one counts as idle going up.
        let mut deleting = busy(0.9);
        deleting.deleting = true;
        let mut pending = busy(0.0);
        pending.phase = PodPhase::Pending;
        pending.metric = None;
        let d = cpu_sync(30, vec![busy(0.5), busy(0.7), deleting, pending], 3);
        // 60% of the two; then 1.2 cores / 3 pods = 40%: ceil(40/30 x 3) = 4.
        assert_eq!(d.proposals[0], Some(4));
    }

    #[test]
    fn cpu_without_usable_samples_fails_the_metric() {
        let mut hpa = cpu_hpa(50);
        // No pod counts: the metric fails, and a sole failed metric holds the replicas.
        let d = hpa
            .sync(
                NOW,
                &[Some(Reading::Pods(vec![unready(busy(1.0))]))],
                scale(1),
            )
            .unwrap();
        assert_eq!(
            (d.proposals[0], d.reason),
            (None, Reason::MetricsUnavailable)
        );
        // A pod without a request fails it too (upstream: "missing request for cpu").
        let mut no_request = busy(1.0);
        no_request.request = 0.0;
        let d = hpa
            .sync(
                NOW + 15.0,
                &[Some(Reading::Pods(vec![no_request]))],
                scale(1),
            )
            .unwrap();
        assert_eq!(d.proposals[0], None);
        // A reading of the wrong kind for the target is no reading.
        let d = hpa.sync(NOW + 30.0, &ext(&[Some(1.0)]), scale(1)).unwrap();
        assert_eq!(d.proposals[0], None);
    }
}
