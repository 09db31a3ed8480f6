//! Istio VirtualService and DestinationRule (networking.istio.io v1, v1beta1, v1alpha3; Istio
//! 1.30's defaults): a route's retries and timeouts, and the budget of the rules reaching its host.

use serde_json::Value;

use super::ISTIO;
use super::documents::show;
use super::objects::{NULL, Obj, get, join, loosest, push_unique, retries, timeout};
use crate::layer::{
    Budget, DefaultUsed, ENVOY_RETRY_ON, InputError, Layer, Parsed, RetryOn, Skipped, Tier,
    envoy_retry_on,
};

const ISTIO_RETRY_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";
const ISTIO_DEFAULTS: &str =
    "Istio 1.30 (attempts and retryOn the same since 1.12; no status code since 1.24)";
const ISTIO_RETRY_REF: &str = "istio/istio pilot/pkg/networking/core/route/retry/retry.go \
    (defaultRetryOn, NumRetries 2, no RetriableStatusCodes); istio/api \
    networking/v1alpha3/virtual_service.proto HTTPRoute.retries";
/// The status codes Istio's default policy gives Envoy with `retriable-status-codes`: none since
/// 1.24. Up to 1.23 `DefaultPolicy` set `RetriableStatusCodes: [503]` (also for a `retries`
/// without `retryOn`); 1.24 to 1.26 kept it only with `EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY=false`
/// (istio/istio#52111, release note 50506), 1.27 removed the flag (#56023).
const ISTIO_DEFAULT_CODES: &str = "none (Istio 1.24+; 503 in 1.23 and before, and in 1.24 to 1.26 \
    with EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY=false)";
const ISTIO_CODES_REF: &str = "istio/istio pilot/pkg/networking/core/route/retry/retry.go \
    (defaultPolicy: RetriableStatusCodes [503] until 1.23; istio/istio#52111, #56023)";

pub(super) fn virtual_service(
    o: &Obj,
    rules: &mut DestinationRules,
    out: &mut Parsed,
) -> Result<(), InputError> {
    if !matches!(o.version, "v1" | "v1beta1" | "v1alpha3") {
        out.skipped
            .push(o.skip(format!("{ISTIO}/{} is not read", o.version)));
        return Ok(());
    }
    let spec = o.spec();
    let (tier, bound) = vs_tier(o, spec)?;
    let http = o.list(spec, "", "http")?;
    if http.is_empty() {
        out.skipped
            .push(o.skip("no http routes: Istio retries HTTP only"));
        return Ok(());
    }
    for (i, route) in http.iter().enumerate() {
        let at = format!("http[{i}]");
        let locator = format!("VirtualService {} {at}", o.name);
        if let Some(why) = no_upstream(o, route, &at)? {
            out.skipped
                .push(Skipped::new(o.file, locator, Some(o.line), why));
            continue;
        }
        let mut layer = Layer::new("istio", tier, o.source(locator));
        istio_retries(o, route, &at, &mut layer)?;
        match o.duration(route, &at, "timeout")? {
            Some(t) => layer.overall_timeout_s = timeout(Some(t)),
            None => layer.defaults.push(DefaultUsed::new(
                "timeout",
                "none (disabled)",
                "Istio 1.30",
                "istio/api networking/v1alpha3/virtual_service.proto HTTPRoute.timeout \
                 (\"default is disabled\"); istio/istio pilot/pkg/networking/core/route/route.go \
                 setTimeout",
            )),
        }
        layer.notes.extend(bound.clone());
        istio_notes(o, route, &at, tier, &mut layer)?;
        rules.attach(o, route, &at, &mut layer)?;
        out.layers.push(layer);
    }
    Ok(())
}

/// Where a VirtualService's routes run: the sidecars (`mesh`, the default) or, when it names
/// gateways only, those gateways (an edge layer).
fn vs_tier(o: &Obj, spec: &Value) -> Result<(Tier, Option<String>), InputError> {
    let mut gateways = Vec::new();
    for (i, g) in o.list(spec, "", "gateways")?.iter().enumerate() {
        let name = g.as_str();
        gateways.push(
            name.ok_or_else(|| o.bad(&format!("gateways[{i}]"), show(g), "expected a string"))?,
        );
    }
    let mesh = gateways.is_empty() || gateways.contains(&"mesh");
    let others: Vec<&str> = gateways.into_iter().filter(|g| *g != "mesh").collect();
    Ok(match (mesh, others.is_empty()) {
        (true, true) => (Tier::Mesh, None),
        (true, false) => (
            Tier::Mesh,
            Some(format!(
                "also bound to gateway {}: traffic entering the mesh is retried there too",
                others.join(", ")
            )),
        ),
        (false, _) => (
            Tier::Edge,
            Some(format!(
                "runs at gateway {}, not at the sidecars",
                others.join(", ")
            )),
        ),
    })
}

/// Why a route sends nothing upstream, if it does not.
fn no_upstream(o: &Obj, route: &Value, at: &str) -> Result<Option<String>, InputError> {
    if get(route, "redirect").is_some() || get(route, "directResponse").is_some() {
        return Ok(Some(
            "answers the request itself (redirect or directResponse)".into(),
        ));
    }
    if let Some(d) = o.mapping(route, at, "delegate")? {
        let name = o.string(d, &join(at, "delegate"), "name")?.unwrap_or("?");
        return Ok(Some(format!(
            "delegates to VirtualService {name}: read that one"
        )));
    }
    if o.list(route, at, "route")?.is_empty() {
        return Ok(Some("no route".into()));
    }
    Ok(None)
}

/// A route's `retries`, or Istio's default policy when it has none (MeshConfig
/// `defaultHttpRetryPolicy`, not in these files, may replace that default mesh-wide).
fn istio_retries(o: &Obj, route: &Value, at: &str, layer: &mut Layer) -> Result<(), InputError> {
    let Some(r) = o.mapping(route, at, "retries")? else {
        layer.tries = retries(2);
        let d = DefaultUsed::new("retries.attempts", "2", ISTIO_DEFAULTS, ISTIO_RETRY_REF);
        layer.defaults.push(d);
        istio_default_retry_on(layer);
        layer
            .notes
            .push("MeshConfig defaultHttpRetryPolicy, if set, replaces this default".into());
        return Ok(());
    };
    let at = join(at, "retries");
    let attempts = o.int(r, &at, "attempts")?.unwrap_or(0);
    let attempts = u32::try_from(attempts).map_err(|_| {
        o.bad(
            &join(&at, "attempts"),
            attempts.to_string(),
            "attempts cannot be negative",
        )
    })?;
    let per_try = o.duration(r, &at, "perTryTimeout")?;
    let words = o.string(r, &at, "retryOn")?;
    o.duration(r, &at, "backoff")?;
    if attempts == 0 {
        if per_try.is_some() || words.is_some() || get(r, "retryRemoteLocalities").is_some() {
            let why = "Istio refuses a retry policy with attempts 0 (retries off) and other fields";
            let value = if get(r, "attempts").is_some() {
                "0"
            } else {
                "(absent: 0)"
            };
            return Err(o.bad(&join(&at, "attempts"), value, why));
        }
        layer.notes.push("retries off (attempts 0)".into());
        return Ok(());
    }
    layer.tries = retries(attempts);
    layer.per_try_timeout_s = timeout(per_try);
    match words {
        Some(words) => apply_istio_retry_on(words, layer),
        None => istio_default_retry_on(layer),
    }
    Ok(())
}

/// Istio's default `retryOn` and status codes (`retries` absent, or without `retryOn`): the
/// status codes are none in 1.30, so the 5xx class is not retried; up to 1.23 it was (503).
fn istio_default_retry_on(layer: &mut Layer) {
    apply_istio_retry_on(ISTIO_RETRY_ON, layer);
    layer.defaults.push(DefaultUsed::new(
        "retries.retryOn",
        ISTIO_RETRY_ON,
        ISTIO_DEFAULTS,
        ISTIO_RETRY_REF,
    ));
    layer.defaults.push(DefaultUsed::new(
        "retriable_status_codes (Envoy's, set by Istio)",
        ISTIO_DEFAULT_CODES,
        ISTIO_DEFAULTS,
        ISTIO_CODES_REF,
    ));
    layer.notes.push(
        "Istio 1.23 and older also retry a 503 by default (the 5xx class): not counted, the \
         defaults read are Istio 1.30's"
            .into(),
    );
}

/// Istio `retryOn` as Envoy gets it (retry.go `parseRetryOn`): a word that is an HTTP status
/// code goes to Envoy's `retriable_status_codes`, `retriable-status-codes` being added when
/// missing; the other words are Envoy's, read by the shared [`envoy_retry_on`]. A word that is
/// neither is ignored by Envoy, and noted: Istio's validation refuses it, so the
/// VirtualService may never have been applied.
fn istio_retry_on(words: &str) -> (RetryOn, Vec<String>) {
    let mut codes = Vec::new();
    let mut conditions = Vec::new();
    for word in words.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word.parse::<u32>() {
            Ok(code) if (100..=599).contains(&code) => codes.push(code),
            _ => conditions.push(word),
        }
    }
    if !codes.is_empty() && !conditions.contains(&"retriable-status-codes") {
        conditions.push("retriable-status-codes");
    }
    let (on, _, mut notes) = envoy_retry_on(&conditions.join(","), &codes);
    for word in conditions.iter().filter(|w| !ENVOY_RETRY_ON.contains(w)) {
        notes.push(format!(
            "retryOn {word}: Istio's validation refuses a VirtualService with it"
        ));
    }
    (on, notes)
}

fn apply_istio_retry_on(words: &str, layer: &mut Layer) {
    let (on, notes) = istio_retry_on(words);
    layer.retry_on = on;
    for note in notes {
        push_unique(&mut layer.notes, note);
    }
}

fn istio_notes(
    o: &Obj,
    route: &Value,
    at: &str,
    tier: Tier,
    layer: &mut Layer,
) -> Result<(), InputError> {
    if get(route, "mirror").is_some() || !o.list(route, at, "mirrors")?.is_empty() {
        layer
            .notes
            .push("mirrors copy requests to another service: not modelled".into());
    }
    if get(route, "fault").is_some() {
        layer.notes.push("fault injection: not modelled".into());
    }
    if tier == Tier::Mesh {
        layer.notes.push(
            "the service's own sidecar also retries, twice, requests reset before they reached \
             it (inbound reset-before-request, Istio 1.24+): not modelled"
                .into(),
        );
    }
    Ok(())
}

/// The input's DestinationRules: their retry settings go on the layers of the routes that
/// reach their host; those no route reaches are listed as skipped, with what they set.
pub(super) struct DestinationRules<'o> {
    rules: Vec<(&'o Obj<'o>, &'o str, bool)>,
}

impl<'o> DestinationRules<'o> {
    pub(super) fn collect(objects: &'o [Obj<'o>]) -> Result<Self, InputError> {
        let mut rules = Vec::new();
        for o in objects
            .iter()
            .filter(|o| o.group == ISTIO && o.kind == "DestinationRule")
        {
            let host = o.required(o.string(o.spec(), "", "host")?, "", "host")?;
            rules.push((o, host, false));
        }
        Ok(Self { rules })
    }

    pub(super) fn attach(
        &mut self,
        vs: &Obj,
        route: &Value,
        at: &str,
        layer: &mut Layer,
    ) -> Result<(), InputError> {
        let mut budgets = Vec::new();
        for (j, d) in vs.list(route, at, "route")?.iter().enumerate() {
            let at = format!("{at}.route[{j}]");
            let dest = vs.required(vs.mapping(d, &at, "destination")?, &at, "destination")?;
            let at = join(&at, "destination");
            let host = vs.required(vs.string(dest, &at, "host")?, &at, "host")?;
            let subset = vs.string(dest, &at, "subset")?;
            let found = self.rules.iter_mut().find(|(_, h, _)| same_host(h, host));
            let Some((dr, _, used)) = found else {
                budgets.push(None);
                continue;
            };
            *used = true;
            let read = dr_policy(dr, subset)?;
            budgets.push(read.budget);
            read.add_to(layer);
        }
        loosest(&budgets, "the route's destinations", layer);
        Ok(())
    }

    pub(super) fn unused(&self, out: &mut Parsed) -> Result<(), InputError> {
        for (dr, host, _) in self.rules.iter().filter(|(_, _, used)| !used) {
            let read = dr_policy(dr, None)?;
            let mut why = format!("no VirtualService route to {host} in this file. It sets ");
            match read.budget {
                Some(Budget::InFlight { percent, .. }) => {
                    why.push_str(&format!("a retry budget of {percent}%"));
                }
                _ => why.push_str("no retry budget"),
            }
            for note in &read.notes {
                why.push_str("; ");
                why.push_str(note);
            }
            why.push_str(&format!(
                ". It applies to whichever Istio route reaches {host}, Istio's default route \
                 included (2 retries on connect-failure, refused-stream)"
            ));
            out.skipped.push(dr.skip(why));
        }
        Ok(())
    }
}

/// Whether two Istio hosts name one service: equal, or one is the other's short name
/// (`reviews`, `reviews.default.svc.cluster.local`); namespaces are not resolved.
fn same_host(a: &str, b: &str) -> bool {
    let short_of =
        |short: &str, long: &str| !short.contains('.') && long.split('.').next() == Some(short);
    a == b || short_of(a, b) || short_of(b, a)
}

/// What a DestinationRule does to retries, for one subset.
#[derive(Default)]
pub(super) struct PolicyRead {
    pub(super) budget: Option<Budget>,
    pub(super) defaults: Vec<DefaultUsed>,
    pub(super) notes: Vec<String>,
}

impl PolicyRead {
    /// Adds the defaults and notes to the layer of a route that sends to this destination.
    pub(super) fn add_to(&self, layer: &mut Layer) {
        for d in &self.defaults {
            if !layer.defaults.contains(d) {
                layer.defaults.push(d.clone());
            }
        }
        for note in &self.notes {
            push_unique(&mut layer.notes, note.clone());
        }
    }
}

/// A DestinationRule's retry settings for a subset: a field of the subset's own
/// `trafficPolicy` overrides the top level's, as Istio merges them.
fn dr_policy(o: &Obj, subset: Option<&str>) -> Result<PolicyRead, InputError> {
    let spec = o.spec();
    let mut policies = Vec::new();
    if let Some(name) = subset {
        for (i, s) in o.list(spec, "", "subsets")?.iter().enumerate() {
            let at = format!("subsets[{i}]");
            if o.string(s, &at, "name")? == Some(name)
                && let Some(p) = o.mapping(s, &at, "trafficPolicy")?
            {
                policies.push((p, join(&at, "trafficPolicy")));
            }
        }
    }
    if let Some(p) = o.mapping(spec, "", "trafficPolicy")? {
        policies.push((p, "trafficPolicy".to_string()));
    }
    let pick = |key: &str| policies.iter().find(|(p, _)| get(p, key).is_some());
    let mut read = PolicyRead::default();
    if let Some((p, at)) = pick("retryBudget") {
        let budget = o.required(o.mapping(p, at, "retryBudget")?, at, "retryBudget")?;
        istio_budget(o, budget, &join(at, "retryBudget"), &mut read)?;
    }
    if let Some((p, at)) = pick("connectionPool") {
        let pool = o.mapping(p, at, "connectionPool")?.unwrap_or(&NULL);
        let at = join(at, "connectionPool");
        let http = o.mapping(pool, &at, "http")?.unwrap_or(&NULL);
        if let Some(n) = o.int(http, &join(&at, "http"), "maxRetries")? {
            read.notes.push(format!(
                "connectionPool.http.maxRetries {n}: at most {n} retries in flight to the whole \
                 service (an Envoy circuit breaker, ignored beside a retryBudget): not modelled"
            ));
        }
    }
    if pick("outlierDetection").is_some() {
        let note = "outlierDetection ejects hosts after consecutive errors: not modelled";
        read.notes.push(note.into());
    }
    if pick("portLevelSettings").is_some() {
        read.notes
            .push("portLevelSettings override per port: not read".into());
    }
    Ok(read)
}

fn istio_budget(o: &Obj, b: &Value, at: &str, read: &mut PolicyRead) -> Result<(), InputError> {
    let version = "Istio 1.30 (1.27 to 1.29 applied 0.2% by a bug, istio/istio#59504)";
    let reference = "istio/istio pilot/pkg/networking/core/cluster_traffic_policy.go \
        applyRetryBudget; istio/api networking/v1alpha3/destination_rule.proto \
        TrafficPolicy.RetryBudget";
    let percent = match o.number(b, at, "percent")? {
        Some(p) if (0.0..=100.0).contains(&p) => p,
        Some(p) => return Err(o.bad(&join(at, "percent"), p.to_string(), "must be from 0 to 100")),
        None => {
            read.defaults.push(DefaultUsed::new(
                "retryBudget.percent",
                "20",
                version,
                reference,
            ));
            20.0
        }
    };
    let min = match o.count(b, at, "minRetryConcurrency")?.filter(|n| *n > 0) {
        Some(n) => n,
        None => {
            let setting = "retryBudget.minRetryConcurrency";
            read.defaults
                .push(DefaultUsed::new(setting, "3", "Istio 1.27+", reference));
            3
        }
    };
    o.duration(b, at, "budgetInterval")?;
    // Istio writes it into the cluster's Envoy circuit breaker: Envoy's budget.
    read.budget = Some(Budget::InFlight {
        percent,
        min_retry_concurrency: min,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::tests::*;
    use crate::layer::Tries;

    #[test]
    fn istio_docs_retry_example() {
        let parsed = ok(data!("istio-docs-retries.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!((layer.software.as_str(), layer.tier), ("istio", Tier::Mesh));
        assert_eq!(layer.source.locator, "VirtualService ratings http[0]");
        // attempts: 3 retries, so 4 tries; retryOn absent: Istio's default, no 5xx, no timeout.
        // The default's status codes come with it (none in 1.30: 503 up to 1.23).
        assert_eq!(layer.tries, Tries::AtMost(4));
        assert_eq!(layer.per_try_timeout_s, Some(2.0));
        assert_eq!(layer.retry_on, on(false, true, false));
        assert_eq!(
            settings(layer),
            [
                "retries.retryOn",
                "retriable_status_codes (Envoy's, set by Istio)",
                "timeout"
            ]
        );
        assert!(layer.aborts_on_close);
    }

    #[test]
    fn istio_default_policy_applies_without_retries() {
        let parsed = ok(data!("istio-docs-timeout.yaml"));
        let layer = &parsed.layers[0];
        assert_eq!(layer.tries, Tries::AtMost(3));
        assert_eq!(layer.overall_timeout_s, Some(10.0));
        assert_eq!(layer.retry_on, on(false, true, false));
        assert_eq!(
            settings(layer),
            [
                "retries.attempts",
                "retries.retryOn",
                "retriable_status_codes (Envoy's, set by Istio)"
            ]
        );
        assert_eq!(layer.defaults[0].value, "2");
        assert_eq!(layer.defaults[1].value, ISTIO_RETRY_ON);
        assert!(layer.defaults[0].version.contains("1.30"));
        // Istio 1.30's DefaultPolicy has no RetriableStatusCodes (503 was dropped in 1.24): the
        // 5xx class is not retried, and the default and the older one are both written down.
        assert!(layer.defaults[2].value.starts_with("none"));
        assert!(layer.defaults[2].value.contains("503 in 1.23"));
        assert!(has_note(layer, "Istio 1.23 and older also retry a 503"));
    }

    #[test]
    fn istio_gateway_bound_routes_are_edge() {
        let parsed = ok(data!("istio-bookinfo-gateway.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(layer.tier, Tier::Edge);
        assert_eq!(layer.source.line, Some(18));
        assert!(has_note(layer, "runs at gateway bookinfo-gateway"));
        assert_eq!(parsed.skipped[0].what, "Gateway bookinfo-gateway (line 1)");
    }

    #[test]
    fn istio_routes_are_one_layer_each() {
        let parsed = ok(data!("istio-ratings-test-delay.yaml"));
        let locators: Vec<&str> = parsed
            .layers
            .iter()
            .map(|l| l.source.locator.as_str())
            .collect();
        assert_eq!(
            locators,
            [
                "VirtualService ratings http[0]",
                "VirtualService ratings http[1]"
            ]
        );
        assert!(has_note(&parsed.layers[0], "fault injection"));
        assert!(!has_note(&parsed.layers[1], "fault injection"));
    }

    #[test]
    fn destination_rules_attach_to_the_routes_reaching_their_host() {
        let parsed = ok(data!("istio-dr-budget.yaml"));
        let [jason, rest] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(jason.tries, Tries::AtMost(5));
        assert_eq!(jason.retry_on, on(true, true, true));
        assert_eq!(
            (jason.per_try_timeout_s, jason.overall_timeout_s),
            (Some(0.5), Some(3.0))
        );
        // Subset v1's own retryBudget overrides the top level's, minRetryConcurrency included.
        assert_eq!(
            jason.budget,
            Some(Budget::InFlight {
                percent: 25.0,
                min_retry_concurrency: 3
            })
        );
        assert_eq!(settings(jason), ["retryBudget.minRetryConcurrency"]);
        assert!(has_note(jason, "maxRetries 3"));
        assert!(has_note(jason, "outlierDetection"));
        // A short and a full host name reach the same rule.
        assert_eq!(
            rest.budget,
            Some(Budget::InFlight {
                percent: 10.0,
                min_retry_concurrency: 5
            })
        );
        assert_eq!(rest.retry_on, on(true, true, true));
        assert!(has_note(rest, "retries status 503"));
        let [ratings] = parsed.skipped.as_slice() else {
            panic!()
        };
        assert_eq!(ratings.what, "DestinationRule ratings (line 70)");
        assert!(ratings.why.contains("no VirtualService route to ratings"));
        assert!(ratings.why.contains("a retry budget of 20%"));
    }

    #[test]
    fn a_destination_rule_alone_is_listed() {
        let parsed = ok(data!("istio-destination-rule-reviews.yaml"));
        assert!(parsed.layers.is_empty());
        assert!(parsed.skipped[0].why.contains("no retry budget"));
    }

    #[test]
    fn istio_refuses_what_istio_refuses() {
        let (field, value) = field_error(ok_err(data!("hostile-negative-attempts.yaml")));
        assert_eq!(field, "VirtualService reviews http[0].retries.attempts");
        assert_eq!(value, "-1");
        let vs = |http: &str| {
            text(&format!(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r}}\n\
                 spec: {{http: [{{route: [{{destination: {{host: r}}}}], {http}}}]}}\n"
            ))
        };
        let (field, _) = field_error(vs("retries: {perTryTimeout: 2s}"));
        assert_eq!(field, "VirtualService r http[0].retries.attempts");
        // An unknown retryOn word: Istio's webhook refuses it, Envoy ignores it; read as Envoy.
        let sometimes = vs("retries: {attempts: 2, retryOn: '5xx,sometimes'}").unwrap();
        assert_eq!(sometimes.layers[0].retry_on, on(true, true, true));
        assert!(has_note(
            &sometimes.layers[0],
            "sometimes: not a condition Envoy knows"
        ));
        let (field, _) = field_error(vs("retries: {attempts: 2, perTryTimeout: soon}"));
        assert_eq!(field, "VirtualService r http[0].retries.perTryTimeout");
        let (field, _) = field_error(vs("retries: {attempts: '3'}"));
        assert_eq!(field, "VirtualService r http[0].retries.attempts");
        let off = vs("retries: {attempts: 0}").unwrap();
        assert_eq!(off.layers[0].tries, Tries::AtMost(1));
        let redirect = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
                        metadata: {name: r}\n\
                        spec: {http: [{redirect: {uri: /x}}]}\n";
        let parsed = text(redirect).unwrap();
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped[0].what, "VirtualService r http[0] (line 1)");
    }

    #[test]
    fn istio_retry_on_words() {
        let classes = |w: &str| istio_retry_on(w).0;
        let notes = |w: &str| istio_retry_on(w).1;
        assert_eq!(
            classes("connect-failure,refused-stream"),
            on(false, true, false)
        );
        assert_eq!(classes("reset"), on(true, true, false));
        assert_eq!(classes("5xx"), on(true, true, true));
        assert_eq!(classes("gateway-error"), on(true, true, true));
        assert_eq!(classes("503"), on(false, false, true));
        assert_eq!(classes("429,retriable-4xx"), on(false, false, false));
        assert_eq!(classes(" unavailable , cancelled "), RetryOn::NOTHING);
        // Envoy's reading, shared with the Envoy reader: a refused stream or an HTTP/3 failure
        // after connecting is not a refused connection.
        assert_eq!(classes("refused-stream"), RetryOn::NOTHING);
        assert_eq!(classes("http3-post-connect-failure"), RetryOn::NOTHING);
        assert!(has(&notes("refused-stream"), "REFUSED_STREAM"));
        // A retried 500 or 501 alone is noted; the 5xx class is 502, 503, 504.
        assert_eq!(classes("500,501"), RetryOn::NOTHING);
        assert!(has(&notes("500"), "500 outside the three failure classes"));
        assert!(classes("500,504").status_5xx);
        // A word neither Envoy nor a status code: Envoy ignores it, noted (Istio refuses it).
        assert_eq!(classes("5xx,never"), on(true, true, true));
        assert!(has(
            &notes("5xx,never"),
            "never: not a condition Envoy knows"
        ));
        assert!(has(&notes("999"), "Istio's validation refuses"));
    }

    fn has(notes: &[String], part: &str) -> bool {
        notes.iter().any(|n| n.contains(part))
    }
}
