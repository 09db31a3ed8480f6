//! Linkerd's retry and timeout annotations on Service, HTTPRoute and GRPCRoute (2.16 to 2.20) and
//! ServiceProfile (linkerd.io/v1alpha2).

use std::collections::BTreeMap;

use serde_json::Value;

use super::objects::{NULL, Obj, get, go_duration, join, retries, timeout};
use crate::layer::{
    Budget, DefaultUsed, InputError, Layer, Parsed, RetryOn, Tier, Tries, retried_statuses,
};

const LINKERD_HTTP: &str = "retry.linkerd.io/http";
const LINKERD_GRPC: &str = "retry.linkerd.io/grpc";
const LINKERD_LIMIT: &str = "retry.linkerd.io/limit";
const LINKERD_TIMEOUT: &str = "retry.linkerd.io/timeout";
const LINKERD_REQUEST: &str = "timeout.linkerd.io/request";
const LINKERD_DEFAULTS: &str = "Linkerd 2.16 to 2.20";
const LINKERD_REF: &str = "linkerd.io docs reference/retries.md; linkerd/linkerd2 \
    policy-controller/k8s/index/src/outbound/index/http.rs parse_http_retry";

/// Which retry annotations a resource takes: `http` on an HTTPRoute, `grpc` on a GRPCRoute,
/// both on a Service.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Proto {
    Http,
    Grpc,
    Any,
}

pub(super) fn is_linkerd(annotations: &BTreeMap<&str, &Value>) -> bool {
    annotations
        .keys()
        .any(|k| k.starts_with("retry.linkerd.io/") || k.starts_with("timeout.linkerd.io/"))
}

pub(super) fn service(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
    let annotations = o.annotations();
    if !is_linkerd(&annotations) {
        out.skipped
            .push(o.skip("no retry.linkerd.io or timeout.linkerd.io annotations"));
        return Ok(());
    }
    let locator = format!("Service {}", o.name);
    out.layers
        .push(linkerd_layer(o, &annotations, locator, None, Proto::Any)?);
    Ok(())
}

pub(super) fn grpc_route(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
    let annotations = o.annotations();
    if !is_linkerd(&annotations) {
        let why = "no Linkerd annotations, and Gateway API's GRPCRoute has no retry field";
        out.skipped.push(o.skip(why));
        return Ok(());
    }
    let rules = o.list(o.spec(), "", "rules")?;
    linkerd_route(o, &annotations, rules, Proto::Grpc, out)
}

/// An HTTPRoute or GRPCRoute Linkerd serves: a layer per rule, its annotations applying to
/// every rule and a rule's `timeouts.request` standing in for `timeout.linkerd.io/request`.
pub(super) fn linkerd_route(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    rules: &[Value],
    proto: Proto,
    out: &mut Parsed,
) -> Result<(), InputError> {
    let kind = if proto == Proto::Grpc {
        "GRPCRoute"
    } else {
        "HTTPRoute"
    };
    if rules.is_empty() {
        let locator = format!("{kind} {}", o.name);
        out.layers
            .push(linkerd_layer(o, annotations, locator, None, proto)?);
        return Ok(());
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        let t = o.mapping(rule, &at, "timeouts")?.unwrap_or(&NULL);
        let request = o.duration(t, &join(&at, "timeouts"), "request")?;
        let locator = format!("{kind} {} {at}", o.name);
        let mut layer = linkerd_layer(o, annotations, locator, timeout(request), proto)?;
        if get(rule, "retry").is_some() {
            layer.notes.push(
                "Linkerd ignores rules[].retry: it reads retry.linkerd.io annotations".into(),
            );
        }
        out.layers.push(layer);
    }
    Ok(())
}

/// A Linkerd 2.16+ layer from `retry.linkerd.io/*` and `timeout.linkerd.io/*` annotations.
fn linkerd_layer(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    locator: String,
    request_timeout: Option<f64>,
    proto: Proto,
) -> Result<Layer, InputError> {
    let mut layer = Layer::new("linkerd", Tier::Mesh, o.source(locator));
    linkerd_retries(o, annotations, proto, &mut layer)?;
    let expected = "expected a duration with a unit, like 5s";
    let request = o.annotation_as(annotations, LINKERD_REQUEST, expected, go_duration)?;
    let request = request.or(request_timeout);
    layer.overall_timeout_s = timeout(request);
    for key in ["timeout.linkerd.io/response", "timeout.linkerd.io/idle"] {
        if let Some(v) = o.annotation(annotations, key)? {
            layer.notes.push(format!("{key} {v}: not modelled"));
        }
    }
    if proto == Proto::Any {
        layer
            .notes
            .push("a ServiceProfile for this Service, if any, overrides these annotations".into());
    }
    Ok(layer)
}

/// The `retry.linkerd.io/*` annotations on a layer. What linkerd2-proxy retries
/// (linkerd/app/outbound/src/http/logical/policy/route/retry.rs `is_retryable`): a response with
/// a listed status (or gRPC code), a try that passes the retry timeout (a response-headers
/// timeout), an HTTP/2 REFUSED_STREAM and a fail-fast error (no endpoint ready for the queue's
/// failfast timeout, answered 503). Not connection errors ("connection errors require changes to
/// the endpoint stack"): a refused connection does not fail the request, the balancer holds it
/// until an endpoint is ready, and connections are retried per endpoint with backoff, not per
/// request. So the connect-failure class is not retried; the fail-fast answer is noted.
fn linkerd_retries(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    proto: Proto,
    layer: &mut Layer,
) -> Result<(), InputError> {
    let expected = "expected a whole number of retries up to 65535";
    let limit = o.annotation_as(annotations, LINKERD_LIMIT, expected, |v| {
        v.trim().parse().ok()
    })?;
    // `limit: 0` reads as unset, as the policy controller does.
    let limit: u16 = limit.unwrap_or(0);
    let expected = "expected a duration with a unit, like 300ms";
    let retry_timeout = o.annotation_as(annotations, LINKERD_TIMEOUT, expected, go_duration)?;
    let retry_timeout = timeout(retry_timeout);
    let http = match o.annotation(annotations, LINKERD_HTTP)? {
        Some(v) if proto == Proto::Grpc => {
            layer
                .notes
                .push(format!("{LINKERD_HTTP} {v} is ignored on a GRPCRoute"));
            None
        }
        _ => {
            let expected = "expected status codes, ranges, 5xx or gateway-error";
            o.annotation_as(annotations, LINKERD_HTTP, expected, linkerd_statuses)?
        }
    };
    let grpc = linkerd_grpc(o, annotations, proto, layer)?;
    if !(limit > 0 || retry_timeout.is_some() || http.is_some() || grpc) {
        return Ok(());
    }
    if limit == 0 {
        let d = DefaultUsed::new(LINKERD_LIMIT, "1", LINKERD_DEFAULTS, LINKERD_REF);
        layer.defaults.push(d);
    }
    if http.is_none() && proto != Proto::Grpc {
        let value = "absent: no HTTP status is retried";
        let d = DefaultUsed::new(LINKERD_HTTP, value, LINKERD_DEFAULTS, LINKERD_REF);
        layer.defaults.push(d);
    }
    let (status_5xx, status_note) = retried_statuses(http.as_deref().unwrap_or_default());
    layer.notes.extend(status_note);
    layer.tries = retries(u32::from(limit.max(1)));
    layer.retry_on = RetryOn {
        timeout: retry_timeout.is_some(),
        connect_failure: false,
        status_5xx: status_5xx || (grpc && proto == Proto::Grpc),
    };
    layer.per_try_timeout_s = retry_timeout;
    layer.notes.push(
        "connection errors are not retried: a refused connection holds the request until an \
         endpoint is ready, or fails it fast (503), which is retried but sends nothing to the \
         service; HTTP/2 refused streams are retried; requests with a body over 64 KiB are not \
         retried"
            .into(),
    );
    Ok(())
}

/// `retry.linkerd.io/grpc`: gRPC codes, noted (they are not the HTTP classes); whether set.
fn linkerd_grpc(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    proto: Proto,
    layer: &mut Layer,
) -> Result<bool, InputError> {
    let Some(v) = o.annotation(annotations, LINKERD_GRPC)? else {
        return Ok(false);
    };
    if proto == Proto::Http {
        layer
            .notes
            .push(format!("{LINKERD_GRPC} {v} is ignored on an HTTPRoute"));
        return Ok(false);
    }
    let codes = [
        "cancelled",
        "deadline-exceeded",
        "internal",
        "resource-exhausted",
        "unavailable",
    ];
    if let Some(bad) = v
        .split(',')
        .map(str::trim)
        .find(|c| !codes.contains(&c.to_ascii_lowercase().as_str()))
    {
        let why = format!("{bad:?} is not a gRPC code Linkerd retries on");
        return Err(o.bad(&format!("annotations[{LINKERD_GRPC:?}]"), v, why));
    }
    // On a GRPCRoute the service speaks gRPC: an error status is its 5xx; on a Service, unknown.
    if proto == Proto::Grpc {
        layer
            .notes
            .push(format!("retries gRPC status {v}: counted as the 5xx class"));
    } else {
        let note = format!("retries gRPC status {v}: the 5xx class if the service speaks gRPC");
        layer.notes.push(format!("{note}, not counted here"));
    }
    Ok(true)
}

/// `retry.linkerd.io/http`: `5xx`, `gateway-error`, codes and `lo-hi` ranges, as status ranges.
fn linkerd_statuses(v: &str) -> Option<Vec<(u32, u32)>> {
    let code = |s: &str| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|c| (100..600).contains(c))
    };
    v.split(',')
        .map(|c| {
            let c = c.trim();
            if c.eq_ignore_ascii_case("5xx") {
                return Some((500, 599));
            }
            if c.eq_ignore_ascii_case("gateway-error") {
                return Some((502, 504));
            }
            if let Some(n) = code(c) {
                return Some((n, n));
            }
            let (lo, hi) = c.split_once('-')?;
            let (lo, hi) = (code(lo)?, code(hi)?);
            (lo <= hi).then_some((lo, hi))
        })
        .collect()
}

/// A ServiceProfile (the pre-2.16 way, still read by Linkerd): a layer per route. A retryable
/// route retries failed responses (5xx unless `responseClasses` say otherwise) with no count
/// limit, bounded by the profile's retry budget only; errors and timeouts are not retried
/// (linkerd2-proxy linkerd/app/outbound/src/http/retry.rs).
pub(super) fn service_profile(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
    if o.version != "v1alpha2" {
        out.skipped
            .push(o.skip(format!("linkerd.io/{} is not read", o.version)));
        return Ok(());
    }
    let spec = o.spec();
    let reference = "linkerd/linkerd2 controller/api/destination/profile_translator.go";
    let version = "Linkerd 2.20 (ServiceProfile)";
    let budget = o.mapping(spec, "", "retryBudget")?.unwrap_or(&NULL);
    let ratio = o.number(budget, "retryBudget", "retryRatio")?;
    if let Some(r) = ratio.filter(|r| *r < 0.0) {
        return Err(o.bad(
            "retryBudget.retryRatio",
            r.to_string(),
            "must not be negative",
        ));
    }
    let per_second = o.count(budget, "retryBudget", "minRetriesPerSecond")?;
    o.duration(budget, "retryBudget", "ttl")?;
    for (i, route) in o.list(spec, "", "routes")?.iter().enumerate() {
        let at = format!("routes[{i}]");
        let name = o.string(route, &at, "name")?.unwrap_or("?");
        let locator = format!("ServiceProfile {} {at} ({name})", o.name);
        let mut layer = Layer::new("linkerd", Tier::Mesh, o.source(locator));
        layer.overall_timeout_s = timeout(o.duration(route, &at, "timeout")?);
        if get(route, "timeout").is_none() {
            let value = "none (since Linkerd 2.9, linkerd/linkerd2#4958)";
            layer
                .defaults
                .push(DefaultUsed::new("timeout", value, version, reference));
        }
        if o.boolean(route, &at, "isRetryable")? == Some(true) {
            layer.tries = Tries::Unlimited;
            layer.retry_on.status_5xx = true;
            layer.budget = Some(Budget::Ratio {
                ratio: ratio.unwrap_or(0.2),
            });
            if ratio.is_none() {
                let d = DefaultUsed::new("retryBudget.retryRatio", "0.2", version, reference);
                layer.defaults.push(d);
            }
            if per_second.is_none() {
                let d =
                    DefaultUsed::new("retryBudget.minRetriesPerSecond", "10", version, reference);
                layer.defaults.push(d);
            }
            layer.notes.push(format!(
                "no count limit: the budget bounds retries, plus {} per second always allowed; \
                 errors and timeouts are not retried",
                per_second.unwrap_or(10)
            ));
            if get(route, "responseClasses").is_some() {
                layer
                    .notes
                    .push("failures are as responseClasses classify them".into());
            }
        }
        out.layers.push(layer);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::tests::*;
    use crate::layer::Tries;

    #[test]
    fn linkerd_route_annotations() {
        let parsed = ok(data!("linkerd-httproute-retries.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(
            (layer.software.as_str(), layer.tier),
            ("linkerd", Tier::Mesh)
        );
        assert_eq!(layer.tries, Tries::AtMost(3));
        assert_eq!(layer.per_try_timeout_s, Some(0.3));
        // Statuses and the retry timeout; a refused connection is not retried per request.
        assert_eq!(layer.retry_on, on(true, false, true));
        assert!(has_note(layer, "connection errors are not retried"));
        assert!(layer.defaults.is_empty());
        let grpc = ok(data!("linkerd-grpcroute-retries.yaml"));
        assert_eq!(grpc.layers[0].retry_on, on(true, false, true));
        assert_eq!(grpc.layers[0].per_try_timeout_s, Some(0.4));
        let timeouts = ok(data!("linkerd-httproute-timeouts.yaml"));
        assert_eq!(timeouts.layers[0].tries, Tries::AtMost(1));
        assert_eq!(timeouts.layers[0].overall_timeout_s, Some(2.0));
    }

    #[test]
    fn linkerd_service_annotations_default_to_one_retry() {
        let parsed = ok(data!("linkerd-service-annotations.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(layer.source.locator, "Service books");
        assert_eq!(layer.tries, Tries::AtMost(2));
        assert_eq!(settings(layer), [LINKERD_LIMIT]);
        assert_eq!(
            (layer.per_try_timeout_s, layer.overall_timeout_s),
            (Some(0.5), Some(5.0))
        );
        assert_eq!(parsed.skipped[0].what, "Service plain (line 18)");
    }

    #[test]
    fn linkerd_service_profiles_have_a_budget_and_no_count() {
        let parsed = ok(data!("linkerd-serviceprofile.yaml"));
        let [head, get, put] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(head.tries, Tries::Unlimited);
        assert_eq!(head.retry_on, on(false, false, true));
        assert_eq!(head.budget, Some(Budget::Ratio { ratio: 0.2 }));
        assert_eq!(settings(head), ["timeout"]);
        assert_eq!(get.tries, Tries::AtMost(1));
        assert_eq!(get.budget, None);
        assert_eq!(put.overall_timeout_s, Some(0.015));
        let defaults = ["retryBudget.retryRatio", "retryBudget.minRetriesPerSecond"];
        assert_eq!(settings(put), defaults);
    }

    #[test]
    fn linkerd_bad_annotations() {
        let service = |annotations: &str| {
            text(&format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  \
                 annotations: {{{annotations}}}\n"
            ))
        };
        let (field, value) = field_error(service("retry.linkerd.io/limit: 'lots'"));
        assert_eq!(field, "Service s annotations[\"retry.linkerd.io/limit\"]");
        assert_eq!(value, "lots");
        let (_, value) = field_error(service("retry.linkerd.io/http: '5xx,600'"));
        assert_eq!(value, "5xx,600");
        let (_, value) = field_error(service("retry.linkerd.io/timeout: '5'"));
        assert_eq!(value, "5");
        let (_, value) = field_error(service("retry.linkerd.io/limit: 2"));
        assert_eq!(value, "2");
        let ranges = service("retry.linkerd.io/http: '429,502-503'").unwrap();
        assert_eq!(ranges.layers[0].retry_on, on(false, false, true));
        // 500 and 501 are not the 5xx class; 5xx and 500-504 reach the gateway errors.
        for (http, class) in [
            ("500", false),
            ("500-501", false),
            ("5xx", true),
            ("500-504", true),
        ] {
            let parsed = service(&format!("retry.linkerd.io/http: '{http}'")).unwrap();
            assert_eq!(parsed.layers[0].retry_on.status_5xx, class, "{http}");
        }
    }
}
