//! HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v1): the metrics it scales on and what each
//! one sees (first attempts, every attempt, busy time).

use serde_json::Value;

use super::documents::show;
use super::objects::{NULL, Obj, get, join, quantity};
use crate::layer::{Autoscaler, InputError, Parsed, ScalingMetric, Sees, Target};

const K8S: &str = "Kubernetes 1.36 (k8s.io/api v0.36)";

/// Metric names counting every attempt: request counters of ingresses and proxies, which sit
/// at or behind a retrying layer, and the kit's own `ingress_rate` and `client_attempt_rate`.
const EVERY_ATTEMPT: [&str; 8] = [
    "http_requests",
    "requests_per_second",
    "requests-per-second",
    "nginx_ingress_controller_requests",
    "istio_requests_total",
    "envoy_cluster_upstream_rq",
    "ingress_rate",
    "client_attempt_rate",
];

pub(super) fn hpa(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
    if !matches!(o.version, "v2" | "v2beta2" | "v1") {
        let why = if o.version == "v2beta1" {
            "autoscaling/v2beta1 (removed in Kubernetes 1.25) is not read: convert it to v2".into()
        } else {
            format!("autoscaling/{} is not read", o.version)
        };
        out.skipped.push(o.skip(why));
        return Ok(());
    }
    let spec = o.spec();
    // minReplicas defaults to 1 (autoscaling/v2 HorizontalPodAutoscalerSpec).
    let min = o.count(spec, "", "minReplicas")?.unwrap_or(1);
    let max = o.required(o.count(spec, "", "maxReplicas")?, "", "maxReplicas")?;
    if max == 0 || min > max {
        let why = "maxReplicas must be at least 1 and at least minReplicas";
        return Err(o.bad("maxReplicas", max.to_string(), why));
    }
    let metrics = if o.version == "v1" {
        let percent = o.int(spec, "", "targetCPUUtilizationPercentage")?;
        vec![cpu_metric(o, percent, "targetCPUUtilizationPercentage")?]
    } else {
        let metrics = o.list(spec, "", "metrics")?;
        if metrics.is_empty() {
            vec![cpu_metric(o, None, "metrics")?]
        } else {
            let read = |(i, m)| metric(o, m, &format!("metrics[{i}]"));
            metrics
                .iter()
                .enumerate()
                .map(read)
                .collect::<Result<_, _>>()?
        }
    };
    let behavior = o.mapping(spec, "", "behavior")?.unwrap_or(&NULL);
    let down = o
        .mapping(behavior, "behavior", "scaleDown")?
        .unwrap_or(&NULL);
    let window = o.int(down, "behavior.scaleDown", "stabilizationWindowSeconds")?;
    if let Some(w) = window.filter(|w| !(0..=3600).contains(w)) {
        let path = "behavior.scaleDown.stabilizationWindowSeconds";
        return Err(o.bad(path, w.to_string(), "must be from 0 to 3600"));
    }
    out.autoscalers.push(Autoscaler {
        source: o.source(format!("HorizontalPodAutoscaler {}", o.name)),
        name: o.name.to_string(),
        min_replicas: min,
        max_replicas: max,
        metrics,
        scale_down_stabilization_s: window.map(|w| w as f64),
    });
    Ok(())
}

/// The CPU metric of autoscaling/v1, or v2's default when no metric is given: 80% of the
/// request (k8s.io/api autoscaling/v2 `metrics`: "the default metric will be set to 80% average
/// CPU utilization"). The name says when it is the default: an Autoscaler has no `defaults`.
fn cpu_metric(o: &Obj, percent: Option<i64>, path: &str) -> Result<ScalingMetric, InputError> {
    if let Some(p) = percent.filter(|p| *p <= 0) {
        return Err(o.bad(path, p.to_string(), "must be a positive percentage"));
    }
    let name = match percent {
        Some(_) => "cpu".to_string(),
        None => format!("cpu (default 80%, {K8S})"),
    };
    Ok(ScalingMetric {
        name,
        sees: Sees::BusyTime,
        target: Target::Utilization(percent.unwrap_or(80) as f64 / 100.0),
    })
}

fn metric(o: &Obj, m: &Value, at: &str) -> Result<ScalingMetric, InputError> {
    let kind = o.required(o.string(m, at, "type")?, at, "type")?;
    let key = match kind {
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "Pods" => "pods",
        "Object" => "object",
        "External" => "external",
        other => {
            return Err(o.bad(
                &join(at, "type"),
                other,
                "not a metric type of autoscaling/v2",
            ));
        }
    };
    let source = o.required(o.mapping(m, at, key)?, at, key)?;
    let at = join(at, key);
    let target = target(o, source, &at)?;
    let (name, sees) = match kind {
        "Resource" | "ContainerResource" => {
            let resource = o.required(o.string(source, &at, "name")?, &at, "name")?;
            let name = match o.string(source, &at, "container")? {
                Some(c) => format!("{resource} (container {c})"),
                None => resource.to_string(),
            };
            // CPU is busy time; memory does not follow the request rate: asked, not guessed.
            let sees = match resource {
                "cpu" => Sees::BusyTime,
                other => Sees::Unknown(other.to_string()),
            };
            (name, sees)
        }
        _ => custom_metric(o, kind, source, &at)?,
    };
    Ok(ScalingMetric { name, sees, target })
}

/// A Pods, Object or External metric: its name as shown, and what it sees.
fn custom_metric(o: &Obj, kind: &str, src: &Value, at: &str) -> Result<(String, Sees), InputError> {
    let metric = o.required(o.mapping(src, at, "metric")?, at, "metric")?;
    let at_metric = join(at, "metric");
    let name = o.required(o.string(metric, &at_metric, "name")?, &at_metric, "name")?;
    let labels = selector(o, metric, &at_metric)?;
    let shown_labels = if labels.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}{v}")).collect();
        format!("{{{}}}", pairs.join(","))
    };
    let shown = match kind {
        "Pods" => format!("{name}{shown_labels}"),
        "Object" => {
            let described = o.mapping(src, at, "describedObject")?.unwrap_or(&NULL);
            let what = o.string(described, &join(at, "describedObject"), "kind")?;
            let which = o.string(described, &join(at, "describedObject"), "name")?;
            let object = format!("{}/{}", what.unwrap_or("?"), which.unwrap_or("?"));
            format!("Object {object} {name}{shown_labels}")
        }
        _ => format!("{kind} {name}{shown_labels}"),
    };
    Ok((shown, sees(name, &labels)))
}

/// A metric's label selector as (key, `=value` or ` op (values)`) pairs, keys sorted.
fn selector(o: &Obj, metric: &Value, at: &str) -> Result<Vec<(String, String)>, InputError> {
    let Some(selector) = o.mapping(metric, at, "selector")? else {
        return Ok(Vec::new());
    };
    let at = join(at, "selector");
    let mut labels = Vec::new();
    if let Some(match_labels) = o.mapping(selector, &at, "matchLabels")? {
        let at = join(&at, "matchLabels");
        for key in match_labels.as_object().into_iter().flat_map(|m| m.keys()) {
            let value = o.required(o.string(match_labels, &at, key)?, &at, key)?;
            labels.push((key.clone(), format!("={value}")));
        }
    }
    let expressions = o.list(selector, &at, "matchExpressions")?;
    for (i, e) in expressions.iter().enumerate() {
        let at = format!("{at}.matchExpressions[{i}]");
        let key = o.required(o.string(e, &at, "key")?, &at, "key")?;
        let op = o.required(o.string(e, &at, "operator")?, &at, "operator")?;
        let values: Vec<String> = o.list(e, &at, "values")?.iter().map(show).collect();
        labels.push((key.to_string(), format!(" {op} ({})", values.join(","))));
    }
    Ok(labels)
}

/// What an autoscaler metric counts, by its name and selector; `Unknown` when the name says
/// neither, never guessed. First attempts: the kit's `first_attempt_rate` and its kin, or a
/// selector on `attempt=0`. Every attempt: request counters behind a retrying layer.
fn sees(name: &str, labels: &[(String, String)]) -> Sees {
    let first = |s: &str| {
        let s = s.to_ascii_lowercase();
        s.contains("first_attempt") || s.contains("first-attempt")
    };
    let first_label = labels
        .iter()
        .any(|(k, v)| first(k) || first(v) || (k == "attempt" && v == "=0"));
    if first(name) || first_label {
        return Sees::FirstAttempts;
    }
    let lower = name.to_ascii_lowercase();
    // A count of retries alone is neither (the kit's own names start `retrydebt_`).
    let retries_only = lower.contains("_retr") || lower.starts_with("retry_");
    if !retries_only && EVERY_ATTEMPT.iter().any(|m| lower.contains(m)) {
        return Sees::EveryAttempt;
    }
    Sees::Unknown(name.to_string())
}

fn target(o: &Obj, source: &Value, at: &str) -> Result<Target, InputError> {
    let t = o.required(o.mapping(source, at, "target")?, at, "target")?;
    let at = join(at, "target");
    let kind = o.required(o.string(t, &at, "type")?, &at, "type")?;
    let positive = |key: &str| -> Result<f64, InputError> {
        let v = o.required(get(t, key), &at, key)?;
        quantity(v)
            .filter(|q| *q > 0.0)
            .ok_or_else(|| o.bad(&join(&at, key), show(v), "expected a positive quantity"))
    };
    match kind {
        "Utilization" => {
            let percent = o.required(
                o.int(t, &at, "averageUtilization")?,
                &at,
                "averageUtilization",
            )?;
            if percent <= 0 {
                let why = "must be a positive percentage";
                return Err(o.bad(&join(&at, "averageUtilization"), percent.to_string(), why));
            }
            Ok(Target::Utilization(percent as f64 / 100.0))
        }
        "AverageValue" => Ok(Target::AverageValue(positive("averageValue")?)),
        "Value" => Ok(Target::Value(positive("value")?)),
        other => Err(o.bad(
            &join(&at, "type"),
            other,
            "expected Utilization, AverageValue or Value",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::tests::*;

    #[test]
    fn the_kits_gateway_overlay_scales_on_first_attempts() {
        let parsed = ok(data!("kit-gateway-kustomize.yaml"));
        assert!(parsed.layers.is_empty());
        let [hpa] = parsed.autoscalers.as_slice() else {
            panic!("{:?}", parsed.autoscalers)
        };
        assert_eq!(
            (hpa.name.as_str(), hpa.min_replicas, hpa.max_replicas),
            ("service", 4, 50)
        );
        assert_eq!(hpa.source.line, Some(389));
        assert_eq!(hpa.scale_down_stabilization_s, Some(300.0));
        assert_eq!(
            hpa.metrics,
            vec![ScalingMetric {
                name: "External first_attempt_rate".into(),
                sees: Sees::FirstAttempts,
                target: Target::AverageValue(50.0),
            }]
        );
        // Everything else is listed, the HAProxy ConfigMap and the plain Services included.
        assert_eq!(parsed.skipped.len(), 14);
        assert!(
            parsed
                .skipped
                .iter()
                .any(|s| s.what == "ConfigMap gateway (line 47)")
        );
    }

    #[test]
    fn kit_metric_names_are_classified() {
        let none: &[(String, String)] = &[];
        for first in [
            "first_attempt_rate",
            "retrydebt_meter_first_attempt_rate",
            "retrydebt_meter_header_first_attempt_rate",
            "checkout-first-attempts",
        ] {
            assert_eq!(sees(first, none), Sees::FirstAttempts, "{first}");
        }
        for every in [
            "ingress_rate",
            "retrydebt_meter_ingress_rate",
            "retrydebt_meter_client_attempt_rate",
            "http_requests_total",
            "nginx_ingress_controller_requests",
            "istio_requests_total",
            "envoy_cluster_upstream_rq_total",
            "requests-per-second",
        ] {
            assert_eq!(sees(every, none), Sees::EveryAttempt, "{every}");
        }
        for unknown in [
            "retrydebt_meter_retry_rate",
            "envoy_cluster_upstream_rq_retry",
            "queue_depth",
        ] {
            assert_eq!(
                sees(unknown, none),
                Sees::Unknown(unknown.into()),
                "{unknown}"
            );
        }
        let attempt_zero = [("attempt".to_string(), "=0".to_string())];
        assert_eq!(
            sees("http_requests_total", &attempt_zero),
            Sees::FirstAttempts
        );
    }

    #[test]
    fn the_walkthrough_hpa_reads_cpu_packets_and_requests() {
        let parsed = ok(data!("hpa-walkthrough-multiple-metrics.yaml"));
        let metrics = &parsed.autoscalers[0].metrics;
        assert_eq!(metrics[0].sees, Sees::BusyTime);
        assert_eq!(metrics[0].target, Target::Utilization(0.5));
        assert_eq!(metrics[1].sees, Sees::Unknown("packets-per-second".into()));
        assert_eq!(metrics[1].target, Target::AverageValue(1000.0));
        assert_eq!(
            metrics[2].name,
            "Object Ingress/main-route requests-per-second"
        );
        assert_eq!(metrics[2].sees, Sees::EveryAttempt);
        assert_eq!(metrics[2].target, Target::Value(10_000.0));
    }

    #[test]
    fn hpa_defaults_and_v1() {
        let v2 = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: a}\n\
                  spec: {maxReplicas: 5}\n";
        let hpa = &text(v2).unwrap().autoscalers[0];
        assert_eq!(hpa.min_replicas, 1);
        assert_eq!(hpa.metrics[0].sees, Sees::BusyTime);
        assert_eq!(hpa.metrics[0].target, Target::Utilization(0.8));
        assert!(hpa.metrics[0].name.starts_with("cpu (default 80%"));
        let v1 = "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: a}\n\
                  spec: {minReplicas: 2, maxReplicas: 5, targetCPUUtilizationPercentage: 70}\n";
        let hpa = &text(v1).unwrap().autoscalers[0];
        assert_eq!(hpa.metrics[0].target, Target::Utilization(0.7));
        assert_eq!(hpa.metrics[0].name, "cpu");
    }

    #[test]
    fn hpa_bad_values_name_the_field() {
        let hpa = |spec: &str| {
            text(&format!(
                "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: a}}\n\
                 spec: {spec}\n"
            ))
        };
        let (field, _) = field_error(hpa("{minReplicas: 3}"));
        assert_eq!(field, "HorizontalPodAutoscaler a maxReplicas");
        let (field, value) = field_error(hpa("{minReplicas: 6, maxReplicas: 5}"));
        assert_eq!(
            (field.as_str(), value.as_str()),
            ("HorizontalPodAutoscaler a maxReplicas", "5")
        );
        let (field, value) = field_error(hpa(
            "{maxReplicas: 5, metrics: [{type: Pods, pods: {metric: {name: x}, \
             target: {type: AverageValue, averageValue: 5x}}}]}",
        ));
        assert_eq!(
            field,
            "HorizontalPodAutoscaler a metrics[0].pods.target.averageValue"
        );
        assert_eq!(value, "5x");
        let (field, _) = field_error(hpa("{maxReplicas: 5, metrics: [{type: Sideways}]}"));
        assert_eq!(field, "HorizontalPodAutoscaler a metrics[0].type");
        let (field, _) = field_error(hpa("{maxReplicas: -5}"));
        assert_eq!(field, "HorizontalPodAutoscaler a maxReplicas");
    }
}
