//! Gateway API HTTPRoute (gateway.networking.k8s.io v1, v1beta1; v1.6) with
//! XBackendTrafficPolicy (gateway.networking.x-k8s.io v1alpha1): retries, timeouts, budgets.

use serde_json::Value;

use super::documents::show;
use super::istio::PolicyRead;
use super::linkerd::{Proto, is_linkerd, linkerd_route};
use super::objects::{NULL, Obj, as_int, join, loosest, retries, timeout};
use super::{GATEWAY, GATEWAY_X};
use crate::layer::{
    Budget, DefaultUsed, InputError, Layer, Parsed, RetryOn, Tier, Tries, retried_codes,
};

const GATEWAY_SPEC: &str = "Gateway API v1.6: implementation-specific";
const GATEWAY_REF: &str = "kubernetes-sigs/gateway-api apis/v1/httproute_types.go";

pub(super) fn http_route(
    o: &Obj,
    policies: &mut BackendPolicies,
    out: &mut Parsed,
) -> Result<(), InputError> {
    if o.group == GATEWAY && !matches!(o.version, "v1" | "v1beta1") {
        out.skipped
            .push(o.skip(format!("{GATEWAY}/{} is not read", o.version)));
        return Ok(());
    }
    let annotations = o.annotations();
    let rules = o.list(o.spec(), "", "rules")?;
    // Linkerd reads its annotations, not `rules[].retry`: a route it serves is a Linkerd layer.
    if o.group == "policy.linkerd.io" || is_linkerd(&annotations) {
        return linkerd_route(o, &annotations, rules, Proto::Http, out);
    }
    if rules.is_empty() {
        out.skipped.push(o.skip("no rules"));
        return Ok(());
    }
    let tier = route_tier(o)?;
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        let locator = format!("HTTPRoute {} {at}", o.name);
        let mut layer = Layer::new("gateway-api", tier, o.source(locator));
        match o.mapping(rule, &at, "retry")? {
            Some(r) => gateway_retry(o, r, &join(&at, "retry"), &mut layer)?,
            None => layer.defaults.push(DefaultUsed::new(
                "rules[].retry",
                "absent: no retries (Istio 1.30 applies its own default instead: 2 retries on \
                 connect-failure, refused-stream)",
                GATEWAY_SPEC,
                GATEWAY_REF,
            )),
        }
        gateway_timeouts(o, rule, &at, &mut layer)?;
        policies.attach(&backend_services(o, rule, &at)?, &mut layer);
        layer.defaults.push(DefaultUsed::new(
            "aborts on close",
            "yes",
            "Envoy- and nginx-based implementations",
            "Envoy resets the upstream request when the downstream one goes; nginx \
             proxy_ignore_client_abort is off by default",
        ));
        out.layers.push(layer);
    }
    Ok(())
}

/// A route attached to Services only is a mesh route (GAMMA); to a Gateway, an edge one.
fn route_tier(o: &Obj) -> Result<Tier, InputError> {
    let parents = o.list(o.spec(), "", "parentRefs")?;
    let mut services = !parents.is_empty();
    for (i, p) in parents.iter().enumerate() {
        services &= o.string(p, &format!("parentRefs[{i}]"), "kind")? == Some("Service");
    }
    Ok(if services { Tier::Mesh } else { Tier::Edge })
}

fn gateway_retry(o: &Obj, r: &Value, at: &str, layer: &mut Layer) -> Result<(), InputError> {
    let attempts = match o.int(r, at, "attempts")? {
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
        Some(n) => return Err(o.bad(&join(at, "attempts"), n.to_string(), "must be at least 1")),
        None => {
            layer.defaults.push(DefaultUsed::new(
                "retry.attempts",
                "2 (as Istio 1.30 does)",
                GATEWAY_SPEC,
                "kubernetes-sigs/gateway-api apis/v1/httproute_types.go HTTPRouteRetry.Attempts; \
                 istio/istio pilot/pkg/config/kube/gateway/conversion.go",
            ));
            2
        }
    };
    // `attempts` counts retries (conformance HTTPRouteRetryWithTimeouts: "attempts: 2" succeeds
    // after 2 retries). Connection errors and backendRequest timeouts are retried (the spec's
    // SHOULD, conformance feature HTTPRouteRetryBackendTimeout); statuses only as listed.
    layer.tries = retries(attempts);
    layer.retry_on = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: false,
    };
    let mut codes = Vec::new();
    for (j, c) in o.list(r, at, "codes")?.iter().enumerate() {
        let code = as_int(c)
            .and_then(|c| u32::try_from(c).ok())
            .filter(|c| (400..=599).contains(c))
            .ok_or_else(|| {
                o.bad(
                    &format!("{at}.codes[{j}]"),
                    show(c),
                    "expected a status code from 400 to 599",
                )
            })?;
        codes.push(code);
    }
    let (status_5xx, note) = retried_codes(&codes);
    layer.retry_on.status_5xx = status_5xx;
    layer
        .notes
        .push(note.unwrap_or_else(|| "no codes: no status is retried".to_string()));
    o.duration(r, at, "backoff")?;
    layer.notes.push(
        "Istio 1.30, as the implementation, retries connect-failure, refused-stream and the \
         codes, not backendRequest timeouts"
            .into(),
    );
    Ok(())
}

fn gateway_timeouts(o: &Obj, rule: &Value, at: &str, layer: &mut Layer) -> Result<(), InputError> {
    let t = o.mapping(rule, at, "timeouts")?.unwrap_or(&NULL);
    let at = join(at, "timeouts");
    let request = o.duration(t, &at, "request")?;
    let backend = o.duration(t, &at, "backendRequest")?;
    if let (Some(r), Some(b)) = (timeout(request), timeout(backend))
        && b > r
    {
        let why = "backendRequest timeout cannot be longer than request timeout";
        return Err(o.bad(&join(&at, "backendRequest"), format!("{b}s"), why));
    }
    layer.overall_timeout_s = timeout(request);
    layer.per_try_timeout_s = timeout(backend);
    let reference = "kubernetes-sigs/gateway-api apis/v1/httproute_types.go HTTPRouteTimeouts";
    if request.is_none() {
        let d = DefaultUsed::new("timeouts.request", "none assumed", GATEWAY_SPEC, reference);
        layer.defaults.push(d);
    }
    if backend.is_none() && layer.tries != Tries::AtMost(1) {
        let value = "none assumed: a try waits as long as the request";
        layer.defaults.push(DefaultUsed::new(
            "timeouts.backendRequest",
            value,
            GATEWAY_SPEC,
            reference,
        ));
    }
    Ok(())
}

/// The Services a rule sends to (a backendRef is a core Service unless it says otherwise).
fn backend_services<'o>(
    o: &Obj<'o>,
    rule: &'o Value,
    at: &str,
) -> Result<Vec<&'o str>, InputError> {
    let mut names = Vec::new();
    for (j, b) in o.list(rule, at, "backendRefs")?.iter().enumerate() {
        let at = format!("{at}.backendRefs[{j}]");
        let kind = o.string(b, &at, "kind")?.unwrap_or("Service");
        let group = o.string(b, &at, "group")?.unwrap_or("");
        if kind == "Service" && matches!(group, "" | "core") {
            names.push(o.required(o.string(b, &at, "name")?, &at, "name")?);
        }
    }
    Ok(names)
}

/// The input's XBackendTrafficPolicies (Gateway API experimental): retry budgets on Services,
/// put on the layers of the rules that send to them.
pub(super) struct BackendPolicies<'o> {
    policies: Vec<BackendPolicy<'o>>,
}

struct BackendPolicy<'o> {
    obj: &'o Obj<'o>,
    services: Vec<&'o str>,
    budget: Option<Budget>,
    read: PolicyRead,
    used: bool,
}

impl<'o> BackendPolicies<'o> {
    pub(super) fn collect(objects: &'o [Obj<'o>]) -> Result<Self, InputError> {
        let mut policies = Vec::new();
        let kinds = ["XBackendTrafficPolicy", "BackendTrafficPolicy"];
        for o in objects
            .iter()
            .filter(|o| o.group == GATEWAY_X && kinds.contains(&o.kind))
        {
            let mut services = Vec::new();
            for (i, t) in o.list(o.spec(), "", "targetRefs")?.iter().enumerate() {
                let at = format!("targetRefs[{i}]");
                let group = o.string(t, &at, "group")?.unwrap_or("");
                if o.string(t, &at, "kind")? == Some("Service") && matches!(group, "" | "core") {
                    services.push(o.required(o.string(t, &at, "name")?, &at, "name")?);
                }
            }
            let mut read = PolicyRead::default();
            let constraint = o.mapping(o.spec(), "", "retryConstraint")?;
            let budget = constraint
                .map(|c| retry_constraint(o, c, &mut read))
                .transpose()?;
            policies.push(BackendPolicy {
                obj: o,
                services,
                budget,
                read,
                used: false,
            });
        }
        Ok(Self { policies })
    }

    pub(super) fn attach(&mut self, services: &[&str], layer: &mut Layer) {
        let mut budgets = Vec::new();
        for service in services {
            let found = self
                .policies
                .iter_mut()
                .find(|p| p.budget.is_some() && p.services.contains(service));
            let Some(policy) = found else {
                budgets.push(None);
                continue;
            };
            policy.used = true;
            budgets.push(policy.budget);
            policy.read.add_to(layer);
        }
        loosest(&budgets, "the rule's backends", layer);
    }

    pub(super) fn unused(&self, out: &mut Parsed) {
        for p in self.policies.iter().filter(|p| !p.used) {
            let why = match p.budget {
                None => "no retryConstraint: nothing `check` reads".to_string(),
                Some(_) => format!(
                    "no HTTPRoute rule in this file sends to Service {}: its retry budget applies \
                     to the routes that do",
                    p.services.join(", ")
                ),
            };
            out.skipped.push(p.obj.skip(why));
        }
    }
}

/// A retryConstraint's budget: `percent` of the requests over `interval` may be retries
/// (defaults 20% and 10s), with `minRetryRate` always allowed (default 10 per second).
fn retry_constraint(o: &Obj, c: &Value, read: &mut PolicyRead) -> Result<Budget, InputError> {
    let reference = "kubernetes-sigs/gateway-api apisx/v1alpha1/xbackendtrafficpolicy_types.go";
    let version = "Gateway API v1.6 (experimental)";
    let at = "retryConstraint";
    let budget = o.mapping(c, at, "budget")?.unwrap_or(&NULL);
    let percent = match o.int(budget, "retryConstraint.budget", "percent")? {
        Some(p) if (0..=100).contains(&p) => p,
        Some(p) => {
            let path = "retryConstraint.budget.percent";
            return Err(o.bad(path, p.to_string(), "must be from 0 to 100"));
        }
        None => {
            read.defaults.push(DefaultUsed::new(
                "retryConstraint.budget.percent",
                "20",
                version,
                reference,
            ));
            20
        }
    };
    o.duration(budget, "retryConstraint.budget", "interval")?;
    let rate = o.mapping(c, at, "minRetryRate")?.unwrap_or(&NULL);
    let count = o.count(rate, "retryConstraint.minRetryRate", "count")?;
    if count.is_none() {
        let setting = "retryConstraint.minRetryRate";
        read.defaults
            .push(DefaultUsed::new(setting, "10 per 1s", version, reference));
    }
    read.notes.push(format!(
        "retry budget: retries may be {percent}% of the requests to the Service over the \
         interval, and {} per minRetryRate interval always",
        count.unwrap_or(10)
    ));
    Ok(Budget::Ratio {
        ratio: percent as f64 / 100.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::tests::*;

    #[test]
    fn gateway_api_attempts_count_retries() {
        let parsed = ok(data!("gateway-api-retry-with-timeouts.yaml"));
        let [first, second] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(
            (first.software.as_str(), first.tier),
            ("gateway-api", Tier::Edge)
        );
        assert_eq!(first.tries, Tries::AtMost(3));
        assert_eq!(first.per_try_timeout_s, Some(0.2));
        assert_eq!(first.retry_on, on(true, true, false));
        assert_eq!(second.tries, Tries::AtMost(6));
        assert_eq!(
            (second.per_try_timeout_s, second.overall_timeout_s),
            (Some(0.2), Some(0.4))
        );
        // codes: [500]: a retried 500 alone is noted, not the 5xx class (502, 503, 504).
        assert_eq!(second.retry_on, on(true, true, false));
        assert!(has_note(second, "retries status 500: 500 outside"));
        let parsed = ok(data!("gateway-api-retry.yaml"));
        assert_eq!(parsed.layers[0].tries, Tries::AtMost(4));
        assert!(has_note(
            &parsed.layers[1],
            "retries status 500, 502, 503, 504"
        ));
    }

    #[test]
    fn gateway_api_timeouts_without_retry() {
        let parsed = ok(data!("gateway-api-timeout-example.yaml"));
        let layer = &parsed.layers[0];
        assert_eq!(layer.tries, Tries::AtMost(1));
        assert_eq!(
            (layer.per_try_timeout_s, layer.overall_timeout_s),
            (Some(2.0), Some(10.0))
        );
        assert_eq!(settings(layer), ["rules[].retry", "aborts on close"]);
    }

    #[test]
    fn backend_traffic_policy_budgets_the_rules_sending_to_its_service() {
        let parsed = ok(data!("gateway-api-budget.yaml"));
        let [cart, rest] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(cart.budget, Some(Budget::Ratio { ratio: 0.3 }));
        assert!(settings(cart).contains(&"retryConstraint.minRetryRate"));
        assert!(has_note(cart, "retries status 503, 429"));
        assert_eq!(rest.budget, None);
        assert!(parsed.skipped.is_empty());
        let alone = ok(data!("gateway-api-gep3388-backendtrafficpolicy.yaml"));
        assert!(alone.skipped[0].why.contains("sends to Service foo"));
    }

    #[test]
    fn gateway_api_bad_values_and_mesh_routes() {
        let route = |rule: &str, parent: &str| {
            text(&format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r}}\n\
                 spec: {{parentRefs: [{parent}], rules: [{rule}]}}\n"
            ))
        };
        let (field, _) = field_error(route("{retry: {attempts: 0}}", "{name: gw}"));
        assert_eq!(field, "HTTPRoute r rules[0].retry.attempts");
        let (field, _) = field_error(route("{retry: {codes: [200]}}", "{name: gw}"));
        assert_eq!(field, "HTTPRoute r rules[0].retry.codes[0]");
        let long = "{timeouts: {request: 1s, backendRequest: 2s}}";
        let (field, _) = field_error(route(long, "{name: gw}"));
        assert_eq!(field, "HTTPRoute r rules[0].timeouts.backendRequest");
        let mesh = route("{retry: {}}", "{kind: Service, name: s}").unwrap();
        assert_eq!(mesh.layers[0].tier, Tier::Mesh);
        assert_eq!(mesh.layers[0].tries, Tries::AtMost(3));
        assert_eq!(settings(&mesh.layers[0])[0], "retry.attempts");
    }
}
