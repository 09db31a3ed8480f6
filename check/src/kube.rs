//! Kubernetes YAML for `check`: multi-document files and `kubectl get -o yaml` Lists. Read:
//! HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v1); Istio VirtualService and
//! DestinationRule (networking.istio.io v1, v1beta1, v1alpha3; Istio 1.30's defaults); Gateway
//! API HTTPRoute (gateway.networking.k8s.io v1, v1beta1; v1.6) with XBackendTrafficPolicy
//! (gateway.networking.x-k8s.io v1alpha1); ingress-nginx Ingress annotations and the controller
//! ConfigMap (controller v1.15); Linkerd's retry and timeout annotations on Service, HTTPRoute and
//! GRPCRoute (2.16 to 2.20) and ServiceProfile (linkerd.io/v1alpha2). Everything else is listed as
//! skipped. Each default a figure rests on is recorded with its version and where it is written.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

use super::layer::{
    Autoscaler, Budget, DefaultUsed, ENVOY_RETRY_ON, InputError, Layer, Parsed, RetryOn,
    ScalingMetric, Sees, Skipped, Source, Target, Tier, Tries, envoy_retry_on,
    nginx_read_timeout_s, retried_codes, retried_statuses,
};

/// Reads Kubernetes YAML (multi-document, or a List): HPAs, Istio, Gateway API, ingress-nginx,
/// Linkerd.
pub fn parse(file: &Path, text: &str) -> Result<Parsed, InputError> {
    let (located, skipped) = read(file, text)?;
    let objects: Vec<Obj> = located.iter().map(|l| Obj::new(file, l)).collect();
    let mut out = Parsed {
        skipped,
        ..Parsed::default()
    };
    let mut rules = DestinationRules::collect(&objects)?;
    let mut policies = BackendPolicies::collect(&objects)?;
    let nginx = objects.iter().find(|o| is_nginx_config(o));
    for o in &objects {
        match (o.group, o.kind) {
            ("autoscaling", "HorizontalPodAutoscaler") => hpa(o, &mut out)?,
            (ISTIO, "VirtualService") => virtual_service(o, &mut rules, &mut out)?,
            (GATEWAY, "HTTPRoute") | ("policy.linkerd.io", "HTTPRoute") => {
                http_route(o, &mut policies, &mut out)?;
            }
            (GATEWAY, "GRPCRoute") => grpc_route(o, &mut out)?,
            ("networking.k8s.io" | "extensions", "Ingress") => ingress(o, nginx, &mut out)?,
            ("", "Service") => service(o, &mut out)?,
            ("linkerd.io", "ServiceProfile") => service_profile(o, &mut out)?,
            // Read with the objects they act on, below.
            (ISTIO, "DestinationRule") | (GATEWAY_X, "XBackendTrafficPolicy") => {}
            (GATEWAY_X, "BackendTrafficPolicy") => {}
            ("", "ConfigMap") if nginx.is_some_and(|c| std::ptr::eq(c, o)) => {}
            _ if o.kind.is_empty() => out.skipped.push(o.skip("no kind: not a Kubernetes object")),
            _ => out.skipped.push(o.skip("not a kind `check` reads")),
        }
    }
    rules.unused(&mut out)?;
    policies.unused(&mut out);
    let read_by_ingress = out.layers.iter().any(|l| l.software == "ingress-nginx");
    if let Some(config) = nginx.filter(|_| !read_by_ingress) {
        let why = "ingress-nginx controller ConfigMap: its keys are the defaults of Ingresses, and \
                   no ingress-nginx Ingress is in this file";
        out.skipped.push(config.skip(why));
    }
    Ok(out)
}

const ISTIO: &str = "networking.istio.io";
const GATEWAY: &str = "gateway.networking.k8s.io";
const GATEWAY_X: &str = "gateway.networking.x-k8s.io";

/// Tries with no count limit (an nginx `tries 0`, a Linkerd ServiceProfile): only time and a
/// budget bound them.
const NO_COUNT_LIMIT: Tries = Tries::Unlimited;

// === Documents ===

/// One object of the input and the line it starts on.
struct Located {
    line: u32,
    value: Value,
}

/// The objects of a multi-document input, Lists unpacked; what is not an object is skipped.
fn read(file: &Path, text: &str) -> Result<(Vec<Located>, Vec<Skipped>), InputError> {
    // A rendered chart can hold more than the default 1024 documents; the size cap (4 MiB)
    // bounds them instead. Depth, nodes and aliases keep their defaults against hostile input.
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! { max_documents: 65_536 },
    };
    let docs: Vec<Spanned<Body>> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| syntax(file, &e))?;
    let mut objects = Vec::new();
    let mut skipped = Vec::new();
    let not_object = |line: u32, what: &str| Skipped {
        file: file.to_path_buf(),
        what: format!("document at line {line}"),
        why: format!("{what}, not a Kubernetes object"),
    };
    for doc in docs {
        let line = line_of(&doc.referenced);
        match doc.value {
            Body::Other(what) => skipped.push(not_object(line, what)),
            Body::Mapping {
                mut value,
                item_lines,
            } if is_list(&value) => {
                let items = match value["items"].take() {
                    Value::Array(items) => items,
                    Value::Null => Vec::new(),
                    other => {
                        return Err(InputError::Field {
                            file: file.to_path_buf(),
                            field: format!("List (line {line}) items"),
                            value: show(&other),
                            why: "a List's items must be a sequence of objects".into(),
                        });
                    }
                };
                for (i, item) in items.into_iter().enumerate() {
                    let line = item_lines.get(i).copied().unwrap_or(line);
                    if item.is_object() {
                        objects.push(Located { line, value: item });
                    } else {
                        skipped.push(not_object(line, "a List item that is not a mapping"));
                    }
                }
            }
            Body::Mapping { value, .. } => objects.push(Located { line, value }),
        }
    }
    Ok((objects, skipped))
}

fn is_list(v: &Value) -> bool {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.ends_with("List") && v.get("items").is_some()
}

fn line_of(location: &serde_saphyr::Location) -> u32 {
    u32::try_from(location.line()).unwrap_or(u32::MAX)
}

/// A YAML error as the kit reports it: the line, and the message without its position.
fn syntax(file: &Path, e: &serde_saphyr::Error) -> InputError {
    let message = e.to_string();
    let why = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    match e.location() {
        Some(location) => InputError::Syntax {
            file: file.to_path_buf(),
            line: line_of(&location),
            why,
        },
        None => InputError::Unreadable {
            file: file.to_path_buf(),
            why,
        },
    }
}

/// A document's top node: a mapping (with, for a List, each item's line) or anything else.
enum Body {
    Mapping { value: Value, item_lines: Vec<u32> },
    Other(&'static str),
}

/// Scalars met where a collection was wanted all read as one value.
macro_rules! scalars_as {
    ($value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut object = serde_json::Map::new();
        let mut item_lines = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // A List's items keep their lines, so that each object has its own.
            let value = if key == "items" {
                let items: Items = map.next_value()?;
                item_lines = items.lines;
                items.value
            } else {
                map.next_value()?
            };
            object.insert(key, value);
        }
        Ok(Body::Mapping {
            value: Value::Object(object),
            item_lines,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Body, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Body::Other("a sequence"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Body, E> {
        Ok(Body::Other("a null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<Body, E> {
        self.visit_unit()
    }

    scalars_as!(Body::Other("a scalar"));
}

/// A mapping's `items`: a sequence keeps each element's line; anything else reads as null.
struct Items {
    value: Value,
    lines: Vec<u32>,
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        let mut values = Vec::new();
        let mut lines = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Value>>()? {
            lines.push(line_of(&item.referenced));
            values.push(item.value);
        }
        Ok(Items {
            value: Value::Array(values),
            lines,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items::not_a_sequence())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items {
            value: Value::Null,
            lines: Vec::new(),
        })
    }

    fn visit_none<E: de::Error>(self) -> Result<Items, E> {
        self.visit_unit()
    }

    scalars_as!(Items::not_a_sequence());
}

impl Items {
    fn not_a_sequence() -> Self {
        Items {
            value: Value::String("(not a sequence)".into()),
            lines: Vec::new(),
        }
    }
}

// === Objects and their fields ===

static NULL: Value = Value::Null;

/// An object being read, and where it is: for sources, skips and errors.
struct Obj<'a> {
    file: &'a Path,
    line: u32,
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    name: &'a str,
    value: &'a Value,
}

impl<'a> Obj<'a> {
    fn new(file: &'a Path, l: &'a Located) -> Self {
        let text = |v: Option<&'a Value>| v.and_then(Value::as_str).unwrap_or("");
        let api = text(l.value.get("apiVersion"));
        let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
        let name = text(l.value.get("metadata").and_then(|m| m.get("name")));
        Obj {
            file,
            line: l.line,
            group,
            version,
            kind: text(l.value.get("kind")),
            name: if name.is_empty() { "(unnamed)" } else { name },
            value: &l.value,
        }
    }

    fn shown_kind(&self) -> &'a str {
        if self.kind.is_empty() {
            "(no kind)"
        } else {
            self.kind
        }
    }

    fn spec(&self) -> &'a Value {
        get(self.value, "spec").unwrap_or(&NULL)
    }

    fn source(&self, locator: String) -> Source {
        Source {
            file: self.file.to_path_buf(),
            line: Some(self.line),
            locator,
        }
    }

    fn skip(&self, why: impl Into<String>) -> Skipped {
        Skipped {
            file: self.file.to_path_buf(),
            what: format!("{} {} (line {})", self.shown_kind(), self.name, self.line),
            why: why.into(),
        }
    }

    /// A field with a value the kit will not read: the object, the field's path, the value.
    fn bad(&self, path: &str, value: impl Into<String>, why: impl fmt::Display) -> InputError {
        InputError::Field {
            file: self.file.to_path_buf(),
            field: format!("{} {} {path}", self.shown_kind(), self.name),
            value: cut(value.into()),
            why: format!("{why} (object at line {})", self.line),
        }
    }

    /// `v.key` that must be a mapping when present.
    fn mapping(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<&'a Value>, InputError> {
        match get(v, key) {
            Some(m) if !m.is_object() => {
                Err(self.bad(&join(at, key), show(m), "expected a mapping"))
            }
            m => Ok(m),
        }
    }

    /// `v.key` that must be a sequence when present; absent reads as empty.
    fn list(&self, v: &'a Value, at: &str, key: &str) -> Result<&'a [Value], InputError> {
        match get(v, key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(self.bad(&join(at, key), show(other), "expected a sequence")),
        }
    }

    fn string(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<&'a str>, InputError> {
        match get(v, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(&join(at, key), show(other), "expected a string")),
        }
    }

    fn int(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<i64>, InputError> {
        match get(v, key) {
            None => Ok(None),
            Some(x) => as_int(x)
                .map(Some)
                .ok_or_else(|| self.bad(&join(at, key), show(x), "expected an integer")),
        }
    }

    /// A count: an integer from 0 to 2^32-1.
    fn count(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<u32>, InputError> {
        match self.int(v, at, key)? {
            None => Ok(None),
            Some(n) => u32::try_from(n).map(Some).map_err(|_| {
                self.bad(
                    &join(at, key),
                    n.to_string(),
                    "expected a count from 0 to 2^32-1",
                )
            }),
        }
    }

    fn number(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<f64>, InputError> {
        match get(v, key) {
            None => Ok(None),
            Some(x) => x
                .as_f64()
                .filter(|f| f.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(&join(at, key), show(x), "expected a number")),
        }
    }

    fn boolean(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<bool>, InputError> {
        match get(v, key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(&join(at, key), show(other), "expected true or false")),
        }
    }

    /// A Go-style duration (`2s`, `300ms`, `1m30s`) in seconds.
    fn duration(&self, v: &'a Value, at: &str, key: &str) -> Result<Option<f64>, InputError> {
        match self.string(v, at, key)? {
            None => Ok(None),
            Some(s) => go_duration(s).map(Some).ok_or_else(|| {
                self.bad(
                    &join(at, key),
                    s,
                    "expected a duration like 2s, 300ms or 1m30s",
                )
            }),
        }
    }

    fn required<T>(&self, value: Option<T>, at: &str, key: &str) -> Result<T, InputError> {
        value.ok_or_else(|| self.bad(&join(at, key), "(absent)", "required"))
    }

    /// `metadata.annotations`, values unread until asked for.
    fn annotations(&self) -> BTreeMap<&'a str, &'a Value> {
        let annotations = self
            .value
            .get("metadata")
            .and_then(|m| get(m, "annotations"));
        match annotations {
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            _ => BTreeMap::new(),
        }
    }

    /// One annotation's value: Kubernetes takes strings only, and so does the kit.
    fn annotation(
        &self,
        annotations: &BTreeMap<&'a str, &'a Value>,
        key: &str,
    ) -> Result<Option<&'a str>, InputError> {
        match annotations.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(
                &format!("annotations[{key:?}]"),
                show(other),
                "annotation values must be strings: quote it",
            )),
        }
    }
}

/// `v.key`, null read as absent.
fn get<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn as_int(v: &Value) -> Option<i64> {
    let Value::Number(n) = v else { return None };
    n.as_i64().or_else(|| {
        // YAML may hand `3.0` as a float: a whole number is still a whole number.
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

/// A value as an error shows it: strings bare, anything else as JSON, long ones cut.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => cut(s.clone()),
        other => cut(other.to_string()),
    }
}

fn cut(s: String) -> String {
    if s.chars().count() <= 80 {
        return s;
    }
    let mut short: String = s.chars().take(77).collect();
    short.push_str("...");
    short
}

/// Seconds in a Go duration (`300ms`, `1m30s`, `1.5h`, `0`), the format of Istio's and Linkerd's
/// durations; Gateway API's (GEP-2257) is a subset. `None` if malformed or negative.
fn go_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if s == "0" {
        return Some(0.0);
    }
    let (mut rest, mut total) = (s, 0.0);
    if rest.is_empty() {
        return None;
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    while !rest.is_empty() {
        let end = rest.find(|c: char| !is_number(c)).unwrap_or(rest.len());
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let end = rest.find(is_number).unwrap_or(rest.len());
        let scale = match &rest[..end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[end..];
    }
    total.is_finite().then_some(total)
}

/// A Kubernetes quantity (`50`, `500m`, `1.5k`, `2Ki`, `1e3`), or a plain number.
fn quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64().filter(|f| f.is_finite()),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let number: f64 = number.parse().ok()?;
    let binary = |power: i32| 2f64.powi(power);
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            10f64.powi(digits.parse::<i32>().ok()?)
        }
    };
    Some(number * scale).filter(|x| x.is_finite())
}

fn new_layer(software: &str, tier: Tier, source: Source) -> Layer {
    Layer {
        software: software.to_string(),
        tier,
        source,
        tries: Tries::AtMost(1),
        retry_on: RetryOn::NOTHING,
        per_try_timeout_s: None,
        overall_timeout_s: None,
        budget: None,
        aborts_on_close: true,
        defaults: Vec::new(),
        notes: Vec::new(),
    }
}

fn default_used(setting: &str, value: &str, version: &str, reference: &str) -> DefaultUsed {
    DefaultUsed {
        setting: setting.to_string(),
        value: value.to_string(),
        version: version.to_string(),
        reference: reference.to_string(),
    }
}

/// Tries from a retry count, saturating.
fn retries(n: u32) -> Tries {
    Tries::AtMost(n.saturating_add(1))
}

/// `0` (or `0s`) means no timeout in every source read here.
fn timeout(seconds: Option<f64>) -> Option<f64> {
    seconds.filter(|s| *s > 0.0)
}

fn push_unique(notes: &mut Vec<String>, note: String) {
    if !notes.contains(&note) {
        notes.push(note);
    }
}

/// The budget that lets the most retries through (none beats any ratio), and whether the
/// destinations' budgets differ.
fn loosest(budgets: &[Option<Budget>]) -> (Option<Budget>, bool) {
    let differ = budgets.windows(2).any(|w| w[0] != w[1]);
    let ratio = |b: &Option<Budget>| match b {
        Some(Budget::Ratio { ratio }) => *ratio,
        Some(Budget::Quota { .. }) => 0.0,
        None => f64::INFINITY,
    };
    let loosest = budgets
        .iter()
        .copied()
        .max_by(|a, b| ratio(a).total_cmp(&ratio(b)))
        .flatten();
    (loosest, differ)
}

// === HorizontalPodAutoscaler ===

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

fn hpa(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
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
    let behavior = o.mapping(spec, "", "behavior")?;
    let down = behavior.map(|b| o.mapping(b, "behavior", "scaleDown"));
    let window = match down.transpose()?.flatten() {
        Some(d) => o.int(d, "behavior.scaleDown", "stabilizationWindowSeconds")?,
        None => None,
    };
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
    for (i, e) in o
        .list(selector, &at, "matchExpressions")?
        .iter()
        .enumerate()
    {
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

// === Istio ===

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

fn virtual_service(
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
            out.skipped.push(Skipped {
                file: o.file.to_path_buf(),
                what: format!("{locator} (line {})", o.line),
                why,
            });
            continue;
        }
        let mut layer = new_layer("istio", tier, o.source(locator));
        istio_retries(o, route, &at, &mut layer)?;
        match o.duration(route, &at, "timeout")? {
            Some(t) => layer.overall_timeout_s = timeout(Some(t)),
            None => layer.defaults.push(default_used(
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
        let d = default_used("retries.attempts", "2", ISTIO_DEFAULTS, ISTIO_RETRY_REF);
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
    layer.defaults.push(default_used(
        "retries.retryOn",
        ISTIO_RETRY_ON,
        ISTIO_DEFAULTS,
        ISTIO_RETRY_REF,
    ));
    layer.defaults.push(default_used(
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
struct DestinationRules<'o> {
    rules: Vec<(&'o Obj<'o>, &'o str, bool)>,
}

impl<'o> DestinationRules<'o> {
    fn collect(objects: &'o [Obj<'o>]) -> Result<Self, InputError> {
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

    fn attach(
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
            for d in read.defaults {
                if !layer.defaults.contains(&d) {
                    layer.defaults.push(d);
                }
            }
            for note in read.notes {
                push_unique(&mut layer.notes, note);
            }
        }
        let (budget, differ) = loosest(&budgets);
        layer.budget = budget;
        if differ {
            let note = "the route's destinations differ in retry budget: the loosest is used";
            push_unique(&mut layer.notes, note.into());
        }
        Ok(())
    }

    fn unused(&self, out: &mut Parsed) -> Result<(), InputError> {
        for (dr, host, _) in self.rules.iter().filter(|(_, _, used)| !used) {
            let read = dr_policy(dr, None)?;
            let mut why = format!("no VirtualService route to {host} in this file. It sets ");
            match read.budget {
                Some(Budget::Ratio { ratio }) => {
                    let percent = (ratio * 1e4).round() / 1e2;
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
struct PolicyRead {
    budget: Option<Budget>,
    defaults: Vec<DefaultUsed>,
    notes: Vec<String>,
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
            read.defaults.push(default_used(
                "retryBudget.percent",
                "20",
                version,
                reference,
            ));
            20.0
        }
    };
    read.budget = Some(Budget::Ratio {
        ratio: percent / 100.0,
    });
    let min = match o.count(b, at, "minRetryConcurrency")?.filter(|n| *n > 0) {
        Some(n) => n,
        None => {
            let setting = "retryBudget.minRetryConcurrency";
            read.defaults
                .push(default_used(setting, "3", "Istio 1.27+", reference));
            3
        }
    };
    o.duration(b, at, "budgetInterval")?;
    read.notes.push(format!(
        "retryBudget: Envoy lets the retries in flight reach {percent}% of the requests in \
         flight, and always allows {min}: read as a ratio of retries to requests"
    ));
    Ok(())
}

// === Gateway API ===

const GATEWAY_SPEC: &str = "Gateway API v1.6: implementation-specific";
const GATEWAY_REF: &str = "kubernetes-sigs/gateway-api apis/v1/httproute_types.go";

fn http_route(o: &Obj, policies: &mut BackendPolicies, out: &mut Parsed) -> Result<(), InputError> {
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
        let mut layer = new_layer("gateway-api", tier, o.source(locator));
        match o.mapping(rule, &at, "retry")? {
            Some(r) => gateway_retry(o, r, &join(&at, "retry"), &mut layer)?,
            None => layer.defaults.push(default_used(
                "rules[].retry",
                "absent: no retries (Istio 1.30 applies its own default instead: 2 retries on \
                 connect-failure, refused-stream)",
                GATEWAY_SPEC,
                GATEWAY_REF,
            )),
        }
        gateway_timeouts(o, rule, &at, &mut layer)?;
        policies.attach(&backend_services(o, rule, &at)?, &mut layer);
        layer.defaults.push(default_used(
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
            layer.defaults.push(default_used(
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
        let d = default_used("timeouts.request", "none assumed", GATEWAY_SPEC, reference);
        layer.defaults.push(d);
    }
    if backend.is_none() && layer.tries != Tries::AtMost(1) {
        let value = "none assumed: a try waits as long as the request";
        layer.defaults.push(default_used(
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
struct BackendPolicies<'o> {
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
    fn collect(objects: &'o [Obj<'o>]) -> Result<Self, InputError> {
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
            let budget = match o.mapping(o.spec(), "", "retryConstraint")? {
                Some(c) => Some(retry_constraint(o, c, &mut read)?),
                None => None,
            };
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

    fn attach(&mut self, services: &[&str], layer: &mut Layer) {
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
            for d in &policy.read.defaults {
                if !layer.defaults.contains(d) {
                    layer.defaults.push(d.clone());
                }
            }
            for note in &policy.read.notes {
                push_unique(&mut layer.notes, note.clone());
            }
        }
        let (budget, differ) = loosest(&budgets);
        layer.budget = budget;
        if differ {
            let note = "the rule's backends differ in retry budget: the loosest is used";
            push_unique(&mut layer.notes, note.into());
        }
    }

    fn unused(&self, out: &mut Parsed) {
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
            read.defaults.push(default_used(
                "retryConstraint.budget.percent",
                "20",
                version,
                reference,
            ));
            20
        }
    };
    o.duration(budget, "retryConstraint.budget", "interval")?;
    let rate = o.mapping(c, at, "minRetryRate")?;
    let count = match rate {
        Some(r) => o.count(r, "retryConstraint.minRetryRate", "count")?,
        None => None,
    };
    if count.is_none() {
        let setting = "retryConstraint.minRetryRate";
        read.defaults
            .push(default_used(setting, "10 per 1s", version, reference));
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

// === ingress-nginx ===

const NGINX_DEFAULTS: &str = "ingress-nginx controller v1.15.1 (the project retired in March 2026)";
const NGINX_REF: &str = "kubernetes/ingress-nginx \
    docs/user-guide/nginx-configuration/configmap.md; \
    internal/ingress/controller/config/config.go";
const NGINX_ANNOTATION: &str = "nginx.ingress.kubernetes.io/";

/// The controller ConfigMap's keys the kit reads; a ConfigMap with one of them, or with the
/// controller's name, sets the defaults of the Ingresses in the same input.
const NGINX_KEYS: [&str; 5] = [
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "proxy-next-upstream-timeout",
    "proxy-read-timeout",
    "retry-non-idempotent",
];

fn is_nginx_config(o: &Obj) -> bool {
    let data = get(o.value, "data").unwrap_or(&NULL);
    o.group.is_empty()
        && o.kind == "ConfigMap"
        && (o.name.ends_with("ingress-nginx-controller")
            || o.name == "nginx-configuration"
            || NGINX_KEYS.iter().any(|k| get(data, k).is_some()))
}

fn ingress(o: &Obj, config: Option<&Obj>, out: &mut Parsed) -> Result<(), InputError> {
    let annotations = o.annotations();
    if let Some(why) = not_ingress_nginx(o, &annotations, config.is_some())? {
        out.skipped.push(o.skip(why));
        return Ok(());
    }
    let mut layer = new_layer(
        "ingress-nginx",
        Tier::Edge,
        o.source(format!("Ingress {}", o.name)),
    );
    let mut from_config = Vec::new();
    let mut read = |key: &str, default: &str| {
        let setting = nginx_setting(o, &annotations, config, key, default)?;
        match &setting.1 {
            Origin::Default(..) => {
                let d = default_used(key, default, NGINX_DEFAULTS, NGINX_REF);
                layer.defaults.push(d);
            }
            Origin::Config(cm, _) => from_config.push(format!("{key} from ConfigMap {}", cm.name)),
            Origin::Annotation(..) => {}
        }
        Ok::<_, InputError>(setting)
    };
    let (tries, tries_at) = read("proxy-next-upstream-tries", "3")?;
    let (words, words_at) = read("proxy-next-upstream", "error timeout")?;
    let (read_timeout, read_at) = read("proxy-read-timeout", "60")?;
    let (overall, overall_at) = read("proxy-next-upstream-timeout", "0")?;
    let (non_idempotent, _) = read("retry-non-idempotent", "false")?;
    if !from_config.is_empty() {
        layer.notes.push(format!("read {}", from_config.join(", ")));
    }
    layer.tries = match whole(&tries, &tries_at)? {
        0 => {
            layer
                .notes
                .push("proxy-next-upstream-tries 0: no count limit".into());
            NO_COUNT_LIMIT
        }
        n => Tries::AtMost(u32::try_from(n).unwrap_or(u32::MAX)),
    };
    let (on, notes) = nginx_next_upstream(&words).map_err(|word| {
        words_at.bad(
            &words,
            format!("{word:?} is not a proxy_next_upstream case"),
        )
    })?;
    layer.retry_on = on;
    layer.notes.extend(notes);
    let read_s = whole(&read_timeout, &read_at)? as f64;
    layer.per_try_timeout_s =
        Some(nginx_read_timeout_s(read_s).map_err(|why| read_at.bad(&read_timeout, why))?);
    layer.overall_timeout_s = timeout(Some(whole(&overall, &overall_at)? as f64));
    nginx_notes(&words, &non_idempotent, &mut layer);
    out.layers.push(layer);
    Ok(())
}

/// Why an Ingress is not ingress-nginx's, if it is not: its class names another controller, or
/// nothing (class, nginx annotations, controller ConfigMap) says which serves it.
fn not_ingress_nginx(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    config: bool,
) -> Result<Option<String>, InputError> {
    if annotations.keys().any(|k| k.starts_with("nginx.org/")) {
        return Ok(Some(
            "F5 NGINX Ingress Controller annotations (nginx.org/): not read".into(),
        ));
    }
    let class = match o.string(o.spec(), "", "ingressClassName")? {
        Some(c) => Some(c),
        None => o.annotation(annotations, "kubernetes.io/ingress.class")?,
    };
    Ok(match class {
        Some(c) if c.contains("nginx") => None,
        Some(c) => Some(format!("ingress class {c}: not ingress-nginx")),
        None if config || annotations.keys().any(|k| k.starts_with(NGINX_ANNOTATION)) => None,
        None => Some(
            "no ingress class and no ingress-nginx annotation: its controller is unknown".into(),
        ),
    })
}

/// Where an ingress-nginx setting came from (the object and key), for its errors and defaults.
enum Origin<'o> {
    Annotation(&'o Obj<'o>, String),
    Config(&'o Obj<'o>, String),
    Default(&'o Obj<'o>, String),
}

impl Origin<'_> {
    fn bad(&self, value: &str, why: impl fmt::Display) -> InputError {
        match self {
            Origin::Annotation(o, key) => o.bad(&format!("annotations[{key:?}]"), value, why),
            Origin::Config(cm, key) => cm.bad(&format!("data[{key:?}]"), value, why),
            Origin::Default(o, key) => o.bad(&format!("(default) {key}"), value, why),
        }
    }
}

/// An ingress-nginx setting: the Ingress's annotation, else the controller ConfigMap's key,
/// else the controller's default.
fn nginx_setting<'o>(
    o: &'o Obj<'o>,
    annotations: &BTreeMap<&'o str, &'o Value>,
    config: Option<&'o Obj<'o>>,
    key: &str,
    default: &str,
) -> Result<(String, Origin<'o>), InputError> {
    let annotation = format!("{NGINX_ANNOTATION}{key}");
    if let Some(v) = o.annotation(annotations, &annotation)? {
        return Ok((v.to_string(), Origin::Annotation(o, annotation)));
    }
    if let Some(cm) = config {
        let data = get(cm.value, "data").unwrap_or(&NULL);
        if let Some(v) = cm.string(data, "data", key)? {
            return Ok((v.to_string(), Origin::Config(cm, key.to_string())));
        }
    }
    Ok((default.to_string(), Origin::Default(o, key.to_string())))
}

/// A whole number of seconds or tries, as ingress-nginx reads one (`strconv.Atoi`).
fn whole(value: &str, at: &Origin) -> Result<u64, InputError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| at.bad(value, "expected a whole number, no unit"))
}

/// ingress-nginx `proxy-next-upstream` cases (nginx `proxy_next_upstream`) as failure classes;
/// the `http_NNN` cases go through [`retried_codes`].
fn nginx_next_upstream(words: &str) -> Result<(RetryOn, Vec<String>), String> {
    let mut on = RetryOn::NOTHING;
    let (mut notes, mut codes) = (Vec::new(), Vec::new());
    for word in words.split_whitespace() {
        match word {
            // nginx `error`: a connection error, or one passing the request or reading the
            // response header.
            "error" => on.connect_failure = true,
            "timeout" => on.timeout = true,
            "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
            | "http_429" => codes.extend(word[5..].parse::<u32>().ok()),
            "invalid_header" => notes.push(format!("retries on {word}: not modelled")),
            "non_idempotent" | "off" => {}
            _ => return Err(word.to_string()),
        }
    }
    let (status_5xx, note) = retried_codes(&codes);
    on.status_5xx = status_5xx;
    notes.extend(note);
    Ok((on, notes))
}

fn nginx_notes(words: &str, non_idempotent: &str, layer: &mut Layer) {
    if words.split_whitespace().any(|w| w == "off") {
        layer.tries = Tries::AtMost(1);
        layer.retry_on = RetryOn::NOTHING;
        layer
            .notes
            .push("proxy-next-upstream off: no retries".into());
        return;
    }
    if words.split_whitespace().any(|w| w == "non_idempotent") || non_idempotent.trim() == "true" {
        layer
            .notes
            .push("non-idempotent requests (POST, LOCK, PATCH) are retried too".into());
    } else {
        layer
            .notes
            .push("POST, LOCK and PATCH requests are not retried once sent".into());
    }
    layer.notes.push(
        "proxy-read-timeout bounds the wait between two reads, not a whole response; the Lua \
         balancer picks a pod for each try, the same one possibly"
            .into(),
    );
}

// === Linkerd ===

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
enum Proto {
    Http,
    Grpc,
    Any,
}

fn is_linkerd(annotations: &BTreeMap<&str, &Value>) -> bool {
    annotations
        .keys()
        .any(|k| k.starts_with("retry.linkerd.io/") || k.starts_with("timeout.linkerd.io/"))
}

fn service(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
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

fn grpc_route(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
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
fn linkerd_route(
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
    let mut layer = new_layer("linkerd", Tier::Mesh, o.source(locator));
    linkerd_retries(o, annotations, proto, &mut layer)?;
    let request = match o.annotation(annotations, LINKERD_REQUEST)? {
        Some(v) => Some(go_duration(v).ok_or_else(|| {
            o.bad(
                &format!("annotations[{LINKERD_REQUEST:?}]"),
                v,
                "expected a duration with a unit, like 5s",
            )
        })?),
        None => request_timeout,
    };
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
    let at = |key: &str| format!("annotations[{key:?}]");
    // `limit: 0` reads as unset, as the policy controller does.
    let limit = match o.annotation(annotations, LINKERD_LIMIT)? {
        Some(v) => v.trim().parse::<u16>().map_err(|_| {
            o.bad(
                &at(LINKERD_LIMIT),
                v,
                "expected a whole number of retries up to 65535",
            )
        })?,
        None => 0,
    };
    let retry_timeout = match o.annotation(annotations, LINKERD_TIMEOUT)? {
        Some(v) => timeout(Some(go_duration(v).ok_or_else(|| {
            o.bad(
                &at(LINKERD_TIMEOUT),
                v,
                "expected a duration with a unit, like 300ms",
            )
        })?)),
        None => None,
    };
    let http = match o.annotation(annotations, LINKERD_HTTP)? {
        Some(v) if proto == Proto::Grpc => {
            layer
                .notes
                .push(format!("{LINKERD_HTTP} {v} is ignored on a GRPCRoute"));
            None
        }
        Some(v) => Some(linkerd_statuses(v).ok_or_else(|| {
            o.bad(
                &at(LINKERD_HTTP),
                v,
                "expected status codes, ranges, 5xx or gateway-error",
            )
        })?),
        None => None,
    };
    let grpc = linkerd_grpc(o, annotations, proto, layer)?;
    if !(limit > 0 || retry_timeout.is_some() || http.is_some() || grpc) {
        return Ok(());
    }
    if limit == 0 {
        let d = default_used(LINKERD_LIMIT, "1", LINKERD_DEFAULTS, LINKERD_REF);
        layer.defaults.push(d);
    }
    if http.is_none() && proto != Proto::Grpc {
        let value = "absent: no HTTP status is retried";
        let d = default_used(LINKERD_HTTP, value, LINKERD_DEFAULTS, LINKERD_REF);
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
fn service_profile(o: &Obj, out: &mut Parsed) -> Result<(), InputError> {
    if o.version != "v1alpha2" {
        out.skipped
            .push(o.skip(format!("linkerd.io/{} is not read", o.version)));
        return Ok(());
    }
    let spec = o.spec();
    let reference = "linkerd/linkerd2 controller/api/destination/profile_translator.go";
    let version = "Linkerd 2.20 (ServiceProfile)";
    let budget = o.mapping(spec, "", "retryBudget")?;
    let ratio = match budget {
        Some(b) => o.number(b, "retryBudget", "retryRatio")?,
        None => None,
    };
    if let Some(r) = ratio.filter(|r| *r < 0.0) {
        return Err(o.bad(
            "retryBudget.retryRatio",
            r.to_string(),
            "must not be negative",
        ));
    }
    let per_second = match budget {
        Some(b) => o.count(b, "retryBudget", "minRetriesPerSecond")?,
        None => None,
    };
    if let Some(b) = budget {
        o.duration(b, "retryBudget", "ttl")?;
    }
    for (i, route) in o.list(spec, "", "routes")?.iter().enumerate() {
        let at = format!("routes[{i}]");
        let name = o.string(route, &at, "name")?.unwrap_or("?");
        let locator = format!("ServiceProfile {} {at} ({name})", o.name);
        let mut layer = new_layer("linkerd", Tier::Mesh, o.source(locator));
        layer.overall_timeout_s = timeout(o.duration(route, &at, "timeout")?);
        if get(route, "timeout").is_none() {
            let value = "none (since Linkerd 2.9, linkerd/linkerd2#4958)";
            layer
                .defaults
                .push(default_used("timeout", value, version, reference));
        }
        if o.boolean(route, &at, "isRetryable")? == Some(true) {
            layer.tries = NO_COUNT_LIMIT;
            layer.retry_on.status_5xx = true;
            layer.budget = Some(Budget::Ratio {
                ratio: ratio.unwrap_or(0.2),
            });
            if ratio.is_none() {
                let d = default_used("retryBudget.retryRatio", "0.2", version, reference);
                layer.defaults.push(d);
            }
            if per_second.is_none() {
                let d = default_used("retryBudget.minRetriesPerSecond", "10", version, reference);
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

    macro_rules! data {
        ($name:literal) => {
            (
                $name,
                include_str!(concat!("../tests/data/kube/", $name)),
            )
        };
    }

    const ALL: [(&str, &str); 26] = [
        data!("gateway-api-budget.yaml"),
        data!("gateway-api-gep3388-backendtrafficpolicy.yaml"),
        data!("gateway-api-retry-with-timeouts.yaml"),
        data!("gateway-api-retry.yaml"),
        data!("gateway-api-timeout-example.yaml"),
        data!("hostile-bad-yaml.yaml"),
        data!("hostile-negative-attempts.yaml"),
        data!("hostile-unknown-kinds.yaml"),
        data!("hpa-php-apache.yaml"),
        data!("hpa-walkthrough-multiple-metrics.yaml"),
        data!("ingress-nginx-configmap-and-ingresses.yaml"),
        data!("ingress-nginx-configmap.yaml"),
        data!("ingress-nginx-docker-registry.yaml"),
        data!("istio-bookinfo-gateway.yaml"),
        data!("istio-destination-rule-reviews.yaml"),
        data!("istio-docs-retries.yaml"),
        data!("istio-docs-timeout.yaml"),
        data!("istio-dr-budget.yaml"),
        data!("istio-ratings-test-delay.yaml"),
        data!("kit-gateway-kustomize.yaml"),
        data!("kubectl-get-list.yaml"),
        data!("linkerd-grpcroute-retries.yaml"),
        data!("linkerd-httproute-retries.yaml"),
        data!("linkerd-httproute-timeouts.yaml"),
        data!("linkerd-service-annotations.yaml"),
        data!("linkerd-serviceprofile.yaml"),
    ];

    fn ok((name, text): (&str, &str)) -> Parsed {
        parse(Path::new(name), text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn text(text: &str) -> Result<Parsed, InputError> {
        parse(Path::new("t.yaml"), text)
    }

    fn field_error(result: Result<Parsed, InputError>) -> (String, String) {
        match result {
            Err(InputError::Field { field, value, .. }) => (field, value),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    fn on(timeout: bool, connect_failure: bool, status_5xx: bool) -> RetryOn {
        RetryOn {
            timeout,
            connect_failure,
            status_5xx,
        }
    }

    fn settings(layer: &Layer) -> Vec<&str> {
        layer.defaults.iter().map(|d| d.setting.as_str()).collect()
    }

    fn has_note(layer: &Layer, part: &str) -> bool {
        layer.notes.iter().any(|n| n.contains(part))
    }

    // --- the kit's own manifests ---

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

    // --- HorizontalPodAutoscaler ---

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
    fn flow_style_yaml_reads_like_block_style() {
        let parsed = ok(data!("hpa-php-apache.yaml"));
        let hpa = &parsed.autoscalers[0];
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (1, 10));
        assert_eq!(hpa.metrics[0].target, Target::Utilization(0.5));
        assert_eq!(hpa.source.line, Some(2));
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

    #[test]
    fn quantities_and_durations() {
        let q = |s: &str| quantity(&Value::String(s.into()));
        assert_eq!(q("50"), Some(50.0));
        assert_eq!(q("500m"), Some(0.5));
        assert_eq!(q("1k"), Some(1000.0));
        assert_eq!(q("2Ki"), Some(2048.0));
        assert_eq!(q("1.5M"), Some(1.5e6));
        assert_eq!(q("1e3"), Some(1000.0));
        for bad in ["", "5x", "k", "1e", "--1", "1e99999"] {
            assert_eq!(q(bad), None, "{bad}");
        }
        assert_eq!(quantity(&serde_json::json!(30)), Some(30.0));
        assert_eq!(go_duration("2s"), Some(2.0));
        assert_eq!(go_duration("300ms"), Some(0.3));
        assert_eq!(go_duration("1m30s"), Some(90.0));
        assert_eq!(go_duration("1.5h"), Some(5400.0));
        assert_eq!(go_duration("0"), Some(0.0));
        for bad in ["", "5", "-1s", "2 s", "1d", "s", "1..2s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    // --- Istio ---

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
        assert_eq!(jason.budget, Some(Budget::Ratio { ratio: 0.25 }));
        assert_eq!(settings(jason), ["retryBudget.minRetryConcurrency"]);
        assert!(has_note(jason, "maxRetries 3"));
        assert!(has_note(jason, "outlierDetection"));
        // A short and a full host name reach the same rule.
        assert_eq!(rest.budget, Some(Budget::Ratio { ratio: 0.1 }));
        assert_eq!(rest.retry_on, on(true, true, true));
        assert!(has_note(rest, "retries status 503"));
        assert!(has_note(rest, "always allows 5"));
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

    fn ok_err((name, text): (&str, &str)) -> Result<Parsed, InputError> {
        parse(Path::new(name), text)
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

    // --- Gateway API ---

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

    // --- ingress-nginx ---

    #[test]
    fn ingress_nginx_defaults_are_recorded() {
        let parsed = ok(data!("ingress-nginx-docker-registry.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(
            (layer.software.as_str(), layer.tier),
            ("ingress-nginx", Tier::Edge)
        );
        assert_eq!(layer.tries, Tries::AtMost(3));
        assert_eq!(layer.retry_on, on(true, true, false));
        assert_eq!(layer.per_try_timeout_s, Some(600.0));
        assert_eq!(layer.overall_timeout_s, None);
        let expected = [
            "proxy-next-upstream-tries",
            "proxy-next-upstream",
            "proxy-next-upstream-timeout",
            "retry-non-idempotent",
        ];
        assert_eq!(settings(layer), expected);
        assert!(layer.defaults[0].version.contains("v1.15"));
    }

    #[test]
    fn the_controller_configmap_sets_the_ingresses_defaults() {
        let parsed = ok(data!("ingress-nginx-configmap-and-ingresses.yaml"));
        let [registry, shop] = parsed.layers.as_slice() else {
            panic!()
        };
        // The annotation wins over the ConfigMap's 120.
        assert_eq!(registry.per_try_timeout_s, Some(600.0));
        assert_eq!(shop.per_try_timeout_s, Some(120.0));
        assert!(has_note(
            shop,
            "proxy-read-timeout from ConfigMap ingress-nginx-controller"
        ));
        assert_eq!(shop.tries, Tries::AtMost(5));
        assert_eq!(shop.overall_timeout_s, Some(30.0));
        assert_eq!(shop.retry_on, on(true, true, true));
        assert_eq!(settings(shop), ["retry-non-idempotent"]);
        assert!(parsed.skipped.is_empty());
        let alone = ok(data!("ingress-nginx-configmap.yaml"));
        assert!(alone.skipped[0].why.contains("no ingress-nginx Ingress"));
    }

    #[test]
    fn ingress_nginx_values() {
        let ingress = |annotations: &str, class: &str| {
            text(&format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\n  \
                 annotations: {{{annotations}}}\nspec: {{{class}}}\n"
            ))
        };
        let key = "nginx.ingress.kubernetes.io/proxy-next-upstream-tries";
        let unlimited = ingress(&format!("{key}: '0'"), "ingressClassName: nginx").unwrap();
        assert_eq!(unlimited.layers[0].tries, NO_COUNT_LIMIT);
        let (field, value) = field_error(ingress(&format!("{key}: 3s"), ""));
        assert_eq!(field, format!("Ingress i annotations[{key:?}]"));
        assert_eq!(value, "3s");
        let (field, _) = field_error(ingress(&format!("{key}: 3"), ""));
        assert_eq!(field, format!("Ingress i annotations[{key:?}]"));
        let words = "nginx.ingress.kubernetes.io/proxy-next-upstream";
        let (_, value) = field_error(ingress(&format!("{words}: 'error sometimes'"), ""));
        assert_eq!(value, "error sometimes");
        let off = ingress(&format!("{words}: 'off'"), "").unwrap();
        assert_eq!(off.layers[0].tries, Tries::AtMost(1));
        // A retried 500 alone is noted, not the 5xx class (as nginx's own reader says).
        let five = ingress(&format!("{words}: 'error http_500'"), "").unwrap();
        assert_eq!(five.layers[0].retry_on, on(false, true, false));
        assert!(has_note(&five.layers[0], "500 outside"));
        let gateway = ingress(&format!("{words}: 'http_500 http_504'"), "").unwrap();
        assert!(gateway.layers[0].retry_on.status_5xx);
        // proxy-read-timeout 0: nginx times every try out at once; refused as the nginx reader does.
        let read = "nginx.ingress.kubernetes.io/proxy-read-timeout";
        match ingress(&format!("{read}: '0'"), "") {
            Err(InputError::Field { value, why, .. }) => {
                assert_eq!(value, "0");
                assert!(
                    why.starts_with(crate::layer::NGINX_ZERO_READ_TIMEOUT),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        let traefik = ingress("", "ingressClassName: traefik").unwrap();
        assert!(traefik.skipped[0].why.contains("ingress class traefik"));
        let unknown = ingress("", "").unwrap();
        assert!(unknown.skipped[0].why.contains("controller is unknown"));
    }

    // --- Linkerd ---

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
        assert_eq!(head.tries, NO_COUNT_LIMIT);
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

    // --- hostile input ---

    #[test]
    fn bad_yaml_names_its_line() {
        match ok_err(data!("hostile-bad-yaml.yaml")) {
            Err(InputError::Syntax { line, why, .. }) => {
                assert_eq!(line, 10, "{why}");
                assert!(!why.contains(" at line "), "{why}");
            }
            other => panic!("{other:?}"),
        }
        for (yaml, line) in [("a: 1\na: 2\n", 2), ("a:\n\tb: 1\n", 2), ("x: .nan\n", 1)] {
            match text(yaml) {
                Err(InputError::Syntax { line: got, .. }) => assert_eq!(got, line, "{yaml:?}"),
                other => panic!("{yaml:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_kinds_and_documents_are_listed() {
        let parsed = ok(data!("hostile-unknown-kinds.yaml"));
        assert!(parsed.layers.is_empty() && parsed.autoscalers.is_empty());
        let what: Vec<&str> = parsed.skipped.iter().map(|s| s.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "document at line 14",
                "document at line 16",
                "CronJob nightly (line 2)",
                "Widget gizmo (line 9)",
                "(no kind) kindless (line 19)",
                "HorizontalPodAutoscaler old (line 22)",
                "Gateway example-gateway (line 29)",
            ]
        );
        assert!(parsed.skipped[5].why.contains("v2beta1"));
    }

    #[test]
    fn a_list_is_read_item_by_item() {
        let parsed = ok(data!("kubectl-get-list.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(layer.source.line, Some(4));
        assert_eq!(layer.tries, Tries::AtMost(4));
        assert_eq!(layer.retry_on, on(true, true, true));
        let hpa = &parsed.autoscalers[0];
        assert_eq!(hpa.source.line, Some(21));
        assert_eq!(hpa.min_replicas, 1);
        assert_eq!(
            hpa.metrics[0].name,
            "http_requests_per_second{service=checkout}"
        );
        assert_eq!(hpa.metrics[0].sees, Sees::EveryAttempt);
        assert_eq!(hpa.metrics[0].target, Target::AverageValue(0.5));
        assert_eq!(hpa.metrics[1].sees, Sees::Unknown("memory".into()));
        assert_eq!(hpa.metrics[1].target, Target::AverageValue(2048.0));
        assert_eq!(parsed.skipped[0].what, "Deployment checkout (line 49)");
        let (field, _) = field_error(text("kind: List\nitems: 5\n"));
        assert_eq!(field, "List (line 1) items");
        let odd = text("kind: List\nitems:\n- 5\n- null\n").unwrap();
        assert_eq!(odd.skipped.len(), 2);
        for empty in [
            "kind: List\nitems:\n",
            "kind: List\nitems: ~\n",
            "kind: List\nitems: []\n",
        ] {
            assert_eq!(text(empty).unwrap(), Parsed::default(), "{empty:?}");
        }
        let (_, value) = field_error(text("kind: List\nitems: {a: 1}\n"));
        assert_eq!(value, "(not a sequence)");
    }

    #[test]
    fn hostile_structure_is_refused_not_crashed_on() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let refs = vec![format!("*{prev}"); 9].join(", ");
            bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        assert!(matches!(text(&bomb), Err(InputError::Syntax { .. })));
        let deep = format!("a: {}{}\n", "[".repeat(500), "]".repeat(500));
        assert!(matches!(text(&deep), Err(InputError::Syntax { .. })));
        assert_eq!(text("").unwrap(), Parsed::default());
        assert_eq!(text("---\n---\n# nothing\n").unwrap(), Parsed::default());
        let many = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n".repeat(2000);
        assert_eq!(text(&many).unwrap().skipped.len(), 2000);
        let huge = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n\
                    metadata: {name: a}\n\
                    spec: {maxReplicas: 99999999999999999999999}\n";
        assert!(matches!(text(huge), Err(InputError::Field { .. })));
        let wrong_shapes = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
                            metadata: [1]\nspec: {http: 5}\n";
        assert!(matches!(text(wrong_shapes), Err(InputError::Field { .. })));
    }

    /// Every prefix of every input parses or fails cleanly: no panic on a cut file.
    #[test]
    fn truncated_inputs_never_panic() {
        for (name, full) in ALL {
            let cuts: Vec<usize> = (0..full.len())
                .filter(|i| full.is_char_boundary(*i))
                .collect();
            let step = (cuts.len() / 200).max(1);
            for cut in cuts.iter().step_by(step) {
                let _ = parse(Path::new(name), &full[..*cut]);
            }
        }
    }
}
