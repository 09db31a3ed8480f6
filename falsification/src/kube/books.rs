//! What the runner learns from the API each row, as pure bookkeeping: pods' transitions as the
//! record's events (the measured dead time is from a pod first seen to Ready), and the upstream
//! HPA's status as the record's decisions.

use std::collections::HashMap;

use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
};
use k8s_openapi::api::core::v1::Pod;

use crate::runner::HpaSync;
use crate::runner::probe::quantity;
use crate::runner::{PodEvent, PodEventKind};
use falsification_model::hpa::{Decision, Reason};

/// One pod of the Deployment as the runner has seen it.
struct Seen {
    /// Run seconds from the load event when it was first seen.
    at: f64,
    ready: bool,
    terminating: bool,
    restarts: i32,
}

/// The pods seen so far and what happened to them.
#[derive(Default)]
pub struct PodBook {
    pods: HashMap<String, Seen>,
    /// Run seconds from the load event, pod, what happened.
    pub events: Vec<PodEvent>,
}

/// The pods that count at a row.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCounts {
    /// Not terminating.
    pub existing: u32,
    /// Not terminating and Ready (the Service routes to them).
    pub ready: u32,
    pub ready_names: Vec<String>,
}

impl PodBook {
    /// Takes the Deployment's pods as listed at `now` (run seconds from the event).
    pub fn update(&mut self, now: f64, pods: &[Pod]) -> PodCounts {
        let mut counts = PodCounts {
            existing: 0,
            ready: 0,
            ready_names: Vec::new(),
        };
        let mut listed = Vec::new();
        for p in pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            let terminating = p.metadata.deletion_timestamp.is_some();
            let status = p.status.clone().unwrap_or_default();
            let is_ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let restarts = status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .map(|c| c.restart_count)
                .sum::<i32>();
            listed.push(name.clone());
            let events = &mut self.events;
            let seen = self.pods.entry(name.clone()).or_insert_with(|| {
                events.push(PodEvent {
                    at_s: now,
                    pod: name.clone(),
                    kind: PodEventKind::Ordered,
                });
                Seen {
                    at: now,
                    ready: false,
                    terminating: false,
                    restarts: 0,
                }
            });
            if is_ready && !seen.ready {
                seen.ready = true;
                let dead_time_s = now - seen.at;
                events.push(PodEvent {
                    at_s: now,
                    pod: name.clone(),
                    kind: PodEventKind::Ready { dead_time_s },
                });
            }
            if restarts > seen.restarts {
                seen.restarts = restarts;
                events.push(PodEvent {
                    at_s: now,
                    pod: name.clone(),
                    kind: PodEventKind::Crashed { code: None },
                });
            }
            if terminating && !seen.terminating {
                seen.terminating = true;
                events.push(PodEvent {
                    at_s: now,
                    pod: name.clone(),
                    kind: PodEventKind::Terminating,
                });
            }
            if !terminating {
                counts.existing += 1;
                if is_ready {
                    counts.ready += 1;
                    counts.ready_names.push(name);
                }
            }
        }
        let mut gone: Vec<String> = self
            .pods
            .keys()
            .filter(|k| !listed.contains(k))
            .cloned()
            .collect();
        gone.sort();
        for name in gone {
            self.pods.remove(&name);
            self.events.push(PodEvent {
                at_s: now,
                pod: name,
                kind: PodEventKind::Exited { code: None },
            });
        }
        counts
    }
}

/// The upstream HPA's decisions as the runner saw them change.
#[derive(Default)]
pub struct HpaBook {
    last: Option<(i32, Vec<Option<f64>>)>,
    pub syncs: Vec<HpaSync>,
}

impl HpaBook {
    /// Takes the HPA as read at `now`; `metrics` are its external metrics in spec order. A change
    /// of the desired replicas or of a reading is a line of `decisions.csv`: the readings as the
    /// sums the meter served, the reason from the conditions; the API shows no per-metric
    /// proposals or stabilized recommendation, so those stay empty. Returns the row's
    /// (recommendation, desired).
    pub fn update(
        &mut self,
        now: f64,
        hpa: &HorizontalPodAutoscaler,
        metrics: &[String],
    ) -> Option<(Option<i32>, i32)> {
        // Before the controller's first reconcile the status holds desiredReplicas 0 and no
        // condition: nothing was decided yet.
        let status = hpa
            .status
            .as_ref()
            .filter(|s| s.conditions.as_ref().is_some_and(|c| !c.is_empty()))?;
        let current = status.current_replicas.unwrap_or(0);
        let readings: Vec<Option<f64>> = metrics
            .iter()
            .map(|n| {
                let metrics = status.current_metrics.as_ref()?;
                // A Resource metric reads as the average utilization in percent, as the kit's HPA
                // reports it.
                if let Some(r) = metrics
                    .iter()
                    .filter_map(|m| m.resource.as_ref())
                    .find(|r| &r.name == n)
                {
                    return r.current.average_utilization.map(f64::from);
                }
                metrics
                    .iter()
                    .filter_map(|m| m.external.as_ref())
                    .find(|e| &e.metric.name == n)
                    .and_then(|e| e.current.average_value.as_ref())
                    .and_then(|q| quantity(&q.0))
                    // The status holds the average over the current replicas.
                    .map(|avg| avg * f64::from(current))
            })
            .collect();
        let desired = status.desired_replicas;
        let key = (desired, readings.clone());
        if self.last.as_ref() != Some(&key) {
            let previous = self.last.as_ref().map_or(current, |(d, _)| *d);
            self.syncs.push(HpaSync {
                t: now,
                readings,
                decision: Decision {
                    desired,
                    proposals: vec![None; metrics.len()],
                    current: vec![None; metrics.len()],
                    recommendation: None,
                    stabilized: None,
                    reason: reason(status.conditions.as_deref().unwrap_or_default()),
                    rescale: desired != previous,
                },
            });
            self.last = Some(key);
        }
        Some((None, desired))
    }
}

/// The upstream HPA's conditions as the kit's decision reasons.
pub fn reason(conditions: &[HorizontalPodAutoscalerCondition]) -> Reason {
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if let Some(c) = find("ScalingActive")
        && c.status == "False"
    {
        return if c.reason.as_deref() == Some("ScalingDisabled") {
            Reason::ScalingDisabled
        } else {
            Reason::MetricsUnavailable
        };
    }
    match find("ScalingLimited").and_then(|c| c.reason.as_deref()) {
        Some("TooFewReplicas") => Reason::TooFewReplicas,
        Some("TooManyReplicas") => Reason::TooManyReplicas,
        Some("ScaleUpLimit") => Reason::ScaleUpLimit,
        Some("ScaleDownLimit") => Reason::ScaleDownLimit,
        _ => Reason::DesiredWithinRange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ready: bool, terminating: bool) -> Pod {
        let mut v = json!({
            "metadata": {"name": name},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        });
        if terminating {
            v["metadata"]["deletionTimestamp"] = json!("2026-12-03T11:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pod_seen_then_ready_gives_its_dead_time_and_leaving_pods_are_events() {
        let mut b = PodBook::default();
        let c = b.update(1.0, &[pod("a", true, false), pod("b", false, false)]);
        assert_eq!(
            (c.existing, c.ready, c.ready_names),
            (2, 1, vec!["a".to_string()])
        );
        let c = b.update(19.5, &[pod("a", true, true), pod("b", true, false)]);
        assert_eq!((c.existing, c.ready), (1, 1));
        b.update(25.0, &[pod("b", true, false)]);
        let kinds: Vec<(f64, &str, &PodEventKind)> = b
            .events
            .iter()
            .map(|e| (e.at_s, e.pod.as_str(), &e.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                (1.0, "a", &PodEventKind::Ordered),
                (1.0, "a", &PodEventKind::Ready { dead_time_s: 0.0 }),
                (1.0, "b", &PodEventKind::Ordered),
                (19.5, "a", &PodEventKind::Terminating),
                (19.5, "b", &PodEventKind::Ready { dead_time_s: 18.5 }),
                (25.0, "a", &PodEventKind::Exited { code: None }),
            ]
        );
    }

    fn hpa(
        desired: i32,
        current: i32,
        first: &str,
        limited: Option<&str>,
    ) -> HorizontalPodAutoscaler {
        let mut conditions = vec![json!({"type": "ScalingActive", "status": "True"})];
        if let Some(r) = limited {
            conditions.push(json!({"type": "ScalingLimited", "status": "True", "reason": r}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "service"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "service"}, "maxReplicas": 50},
            "status": {
                "desiredReplicas": desired,
                "currentReplicas": current,
                "currentMetrics": [{"type": "External", "external": {
                    "metric": {"name": "first_attempt_rate"},
                    "current": {"averageValue": first}
                }}],
                "conditions": conditions
            }
        }))
        .unwrap()
    }

    #[test]
    fn hpa_status_changes_are_decisions_with_summed_readings() {
        let names = vec!["first_attempt_rate".to_string(), "ingress_rate".to_string()];
        let mut b = HpaBook::default();
        // A new HPA's status before the controller's first reconcile: nothing decided.
        let created: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "service"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "service"}, "maxReplicas": 50},
            "status": {"desiredReplicas": 0, "currentReplicas": 4}
        }))
        .unwrap();
        assert_eq!(b.update(-1.0, &created, &names), None);
        assert!(b.syncs.is_empty());
        assert_eq!(
            b.update(0.0, &hpa(4, 4, "50", None), &names),
            Some((None, 4))
        );
        assert_eq!(
            b.update(1.0, &hpa(4, 4, "50", None), &names),
            Some((None, 4))
        );
        assert_eq!(
            b.update(2.0, &hpa(8, 4, "125500m", Some("ScaleUpLimit")), &names),
            Some((None, 8))
        );
        assert_eq!(
            b.syncs.len(),
            2,
            "an unchanged status is not a new decision"
        );
        let s = &b.syncs[1];
        assert_eq!(s.readings, [Some(502.0), None]);
        assert_eq!(s.decision.reason, Reason::ScaleUpLimit);
        assert!(s.decision.rescale && !b.syncs[0].decision.rescale);
        let unavailable: HorizontalPodAutoscalerCondition = serde_json::from_value(
            json!({"type": "ScalingActive", "status": "False", "reason": "FailedGetExternalMetric"}),
        )
        .unwrap();
        assert_eq!(reason(&[unavailable]), Reason::MetricsUnavailable);
    }
}
