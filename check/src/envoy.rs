//! Envoy configuration reader (v3 API, YAML or JSON): one [`Layer`] per route that forwards to a
//! cluster, with its retry policy (the route's own, else its virtual host's), its timeouts, and
//! the retry budget of the cluster it names when that cluster is in the same file. It finds route
//! configurations (`virtual_hosts`) and clusters wherever they sit: a bootstrap's
//! `static_resources`, a bare RouteConfiguration or list of them, xDS `resources`, a config dump.
//! Field names may be snake_case or lowerCamelCase, as Envoy's JSON mapping takes both. Semantics
//! read against envoyproxy/data-plane-api 84e84367 (January 2026) and Envoy's router source.

use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use kit_defense::discipline::DisciplineKind;

use super::layer::{
    Budget, DefaultUsed, DisciplineSpec, InputError, Layer, Parsed, QueueDiscipline, RetryOn,
    Skipped, Source, Tier, Tries, envoy_retry_on, protobuf_duration_s,
};

const VERSION: &str = "Envoy v3 API (data-plane-api 84e84367, January 2026)";
const ROUTE_PROTO: &str = "api/envoy/config/route/v3/route_components.proto";
const BREAKER_PROTO: &str = "api/envoy/config/cluster/v3/circuit_breaker.proto";

/// YAML nested deeper than this is refused: serde_saphyr recurses once per level, and a debug
/// build on a 2 MiB thread overflows its stack a little past 50. Envoy configurations nest about
/// 20 deep (a config dump a few more).
const MAX_DEPTH: usize = 40;

/// Reads an Envoy configuration (YAML or JSON): routes' retry policies, clusters' retry budgets.
pub fn parse(file: &Path, text: &str) -> Result<Parsed, InputError> {
    let root = load(file, text)?;
    if let Some(v1) = root.get("cluster_manager") {
        let why = "the v1 API (removed in Envoy 1.10): check reads v3".to_string();
        return Err(InputError::field(
            file,
            "cluster_manager",
            &v1.summary(),
            why,
        ));
    }
    let mut found = Found::default();
    found.walk(file, &root, None);
    let nothing = found.route_configs.is_empty() && found.hosts.is_empty();
    let limits = found.limits.is_empty();
    if nothing && limits && found.clusters.is_empty() && found.skipped.is_empty() {
        return Err(InputError::UnknownKind {
            file: file.to_path_buf(),
            why: "no Envoy route configuration (virtual_hosts) or cluster in it".into(),
        });
    }
    let cx = Cx {
        file,
        clusters: &found.clusters,
    };
    let mut parsed = Parsed {
        skipped: std::mem::take(&mut found.skipped),
        ..Parsed::default()
    };
    for rc in &found.route_configs {
        let name = rc.get("name").and_then(Node::str);
        for vh in list(file, rc, "virtual_hosts")? {
            cx.virtual_host(name, vh, &mut parsed)?;
        }
    }
    for vh in &found.hosts {
        cx.virtual_host(None, vh, &mut parsed)?;
    }
    if nothing {
        for c in &found.clusters {
            parsed.skipped.push(cx.lone_cluster(c)?);
        }
    }
    for f in &found.limits {
        match adaptive_concurrency(file, f)? {
            Ok(d) => parsed.disciplines.push(d),
            Err(skipped) => parsed.skipped.push(skipped),
        }
    }
    Ok(parsed)
}

/// A YAML or JSON value with the 1-based line it starts on (YAML only).
#[derive(Debug)]
struct Node {
    line: Option<u32>,
    val: Val,
}

#[derive(Debug)]
enum Val {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl From<Spanned<Val>> for Node {
    fn from(s: Spanned<Val>) -> Node {
        Node {
            line: u32::try_from(s.referenced.line()).ok().filter(|l| *l > 0),
            val: s.value,
        }
    }
}

impl<'de> Deserialize<'de> for Val {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Val, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

struct ValVisitor;

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Val, E> {
        Ok(Val::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Val, E> {
        Ok(Val::Num(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Val, E> {
        Ok(Val::Num(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Val, E> {
        Ok(Val::Num(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Val, E> {
        Ok(Val::Str(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        let mut out = Vec::new();
        while let Some(e) = seq.next_element::<Spanned<Val>>()? {
            out.push(Node::from(e));
        }
        Ok(Val::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Spanned<Val>>()? {
            out.push((k, Node::from(v)));
        }
        Ok(Val::Map(out))
    }
}

/// JSON (by the `.json` extension) with serde_json (nesting limit 128), anything else as YAML with
/// serde_saphyr (limits on depth, aliases and size stand against hostile files).
fn load(file: &Path, text: &str) -> Result<Node, InputError> {
    let json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if json {
        serde_json::from_str::<Spanned<Val>>(text)
            .map(Node::from)
            .map_err(|e| {
                InputError::syntax(file, u32::try_from(e.line()).unwrap_or(0), e.to_string())
            })
    } else {
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! { max_depth: MAX_DEPTH },
        };
        serde_saphyr::from_str_with_options::<Spanned<Val>>(text, options)
            .map(Node::from)
            .map_err(|e| {
                let line = e.location().map_or(0, |l| l.line());
                let mut why = e.without_snippet().to_string();
                if why.contains("Depth") {
                    why = format!("nested deeper than {MAX_DEPTH} levels: {why}");
                }
                InputError::syntax(file, u32::try_from(line).unwrap_or(0), why)
            })
    }
}

/// `retry_policy` -> `retryPolicy`: Envoy's JSON mapping takes both spellings.
fn camel(key: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in key.chars() {
        match (c, upper) {
            ('_', _) => upper = true,
            (c, true) => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        let Val::Map(entries) = &self.val else {
            return None;
        };
        let camel = camel(key);
        entries
            .iter()
            .find(|(k, _)| k == key || *k == camel)
            .map(|(_, v)| v)
            .filter(|v| !matches!(v.val, Val::Null))
    }

    fn str(&self) -> Option<&str> {
        match &self.val {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as written, for an error message.
    fn summary(&self) -> String {
        match &self.val {
            Val::Null => "null".into(),
            Val::Bool(b) => b.to_string(),
            Val::Num(n) => n.to_string(),
            Val::Str(s) => s.clone(),
            Val::Seq(_) => "[...]".into(),
            Val::Map(_) => "{...}".into(),
        }
    }

    fn at(&self) -> String {
        self.line.map(|l| format!("line {l}: ")).unwrap_or_default()
    }

    /// This value of `field` refused, at its line.
    fn bad(&self, file: &Path, field: &str, why: &str) -> InputError {
        InputError::field(file, field, &self.summary(), format!("{}{why}", self.at()))
    }
}

fn list<'a>(file: &Path, node: &'a Node, key: &str) -> Result<&'a [Node], InputError> {
    let Some(v) = node.get(key) else {
        return Ok(&[]);
    };
    let Val::Seq(items) = &v.val else {
        // At the line of the mapping that holds it.
        let why = format!("{}expected a list", node.at());
        return Err(InputError::field(file, key, &v.summary(), why));
    };
    Ok(items)
}

/// Route configurations, bare virtual hosts, clusters and adaptive concurrency filters,
/// wherever they are in the file.
#[derive(Default)]
struct Found<'a> {
    route_configs: Vec<&'a Node>,
    hosts: Vec<&'a Node>,
    clusters: Vec<&'a Node>,
    /// `http_filters` entries of the adaptive concurrency filter.
    limits: Vec<&'a Node>,
    skipped: Vec<Skipped>,
}

impl<'a> Found<'a> {
    fn walk(&mut self, file: &Path, node: &'a Node, key: Option<&str>) {
        match &node.val {
            Val::Map(entries) => {
                // An HTTP connection manager's filters, before the branches that stop at its
                // routes.
                if let Some(Val::Seq(filters)) = node.get("http_filters").map(|f| &f.val) {
                    self.limits
                        .extend(filters.iter().filter(|f| is_adaptive_concurrency(f)));
                }
                if node.get("virtual_hosts").is_some() {
                    self.route_configs.push(node);
                } else if node.get("domains").is_some() && node.get("routes").is_some() {
                    self.hosts.push(node);
                } else if is_cluster(node, key) {
                    self.clusters.push(node);
                } else if let Some(rds) = node.get("rds") {
                    let name = rds
                        .get("route_config_name")
                        .and_then(Node::str)
                        .unwrap_or("");
                    let why = "routes come from RDS, not this file";
                    self.skipped
                        .push(Skipped::new(file, format!("rds {name}"), node.line, why));
                } else if node
                    .get("route_config")
                    .is_some_and(|r| r.get("virtual_hosts").is_none())
                {
                    // An HTTP connection manager whose route configuration has no virtual host.
                    let name = node.get("route_config").and_then(|r| r.get("name"));
                    let name = name.and_then(Node::str).unwrap_or("");
                    let what = format!("route_config {name}");
                    let why = "no virtual_hosts: routes nothing";
                    self.skipped.push(Skipped::new(file, what, node.line, why));
                } else {
                    for (k, v) in entries {
                        self.walk(file, v, Some(k));
                    }
                }
            }
            Val::Seq(items) => {
                for item in items {
                    self.walk(file, item, key);
                }
            }
            _ => {}
        }
    }
}

/// A Cluster: named in a `clusters` list, typed as one, or with fields only a cluster has.
fn is_cluster(node: &Node, key: Option<&str>) -> bool {
    let typed = node
        .get("@type")
        .and_then(Node::str)
        .is_some_and(|t| t.ends_with("envoy.config.cluster.v3.Cluster"));
    let in_list = key.is_some_and(|k| k == "clusters" || k == "static_clusters");
    let shaped = [
        "circuit_breakers",
        "load_assignment",
        "eds_cluster_config",
        "connect_timeout",
        "cluster_type",
    ]
    .iter()
    .any(|k| node.get(k).is_some());
    node.get("name").is_some() && (typed || in_list || shaped)
}

const ADAPTIVE_FILTER: &str = "envoy.filters.http.adaptive_concurrency";
const ADAPTIVE_TYPE: &str =
    "envoy.extensions.filters.http.adaptive_concurrency.v3.AdaptiveConcurrency";
const ADAPTIVE_PROTO: &str =
    "api/envoy/extensions/filters/http/adaptive_concurrency/v3/adaptive_concurrency.proto";

/// The adaptive concurrency filter, by its name or its config's type.
fn is_adaptive_concurrency(filter: &Node) -> bool {
    let named = filter.get("name").and_then(Node::str) == Some(ADAPTIVE_FILTER);
    let typed = filter
        .get("typed_config")
        .and_then(|c| c.get("@type"))
        .and_then(Node::str)
        .is_some_and(|t| t.ends_with(ADAPTIVE_TYPE));
    named || typed
}

/// The latency the gradient controller holds requests to, when it is fixed: `fixed_value x (1 +
/// buffer)` once minRTT is not sampled (its `interval` absent or zero); else none (Envoy
/// measures it). With the note's words for it.
fn rtt_latency(file: &Path, rtt: Option<&Node>) -> Result<(Option<f64>, String), InputError> {
    let get = |key: &str| rtt.and_then(|r| r.get(key));
    let interval = get("interval").map(|i| duration(file, "interval", i));
    let fixed = get("fixed_value").map(|f| duration(file, "fixed_value", f));
    let buffer = match get("buffer").and_then(|b| b.get("value")) {
        Some(v) => match v.val {
            Val::Num(x) if (0.0..=100.0).contains(&x) => x,
            _ => return Err(v.bad(file, "buffer", "a percentage from 0 to 100")),
        },
        None => 25.0,
    };
    Ok(
        match (interval.transpose()?.unwrap_or(0.0), fixed.transpose()?) {
            (0.0, Some(f)) => {
                let l = f * (1.0 + buffer / 100.0);
                (
                    Some(l),
                    format!("latency {l} s (fixed_value x (1 + buffer {buffer}%))"),
                )
            }
            _ => (
                None,
                "latency the kit's 20 service times (Envoy measures the minimum round trip)".into(),
            ),
        },
    )
}

/// The adaptive concurrency filter (`AdaptiveConcurrency`, its gradient controller) as the
/// kit's `adaptive` discipline: Envoy answers 503 past a concurrency limit it lowers while the
/// sampled latency rises above the minimum round trip, as the kit's AIMD limit does past its
/// latency. What corresponds is taken, the rest are the kit's defaults, and the note says which.
/// A filter turned off (`enabled.default_value: false`) is listed as skipped.
fn adaptive_concurrency(
    file: &Path,
    filter: &Node,
) -> Result<Result<QueueDiscipline, Skipped>, InputError> {
    let what = "adaptive_concurrency filter";
    let config = filter.get("typed_config");
    let off = config
        .and_then(|c| c.get("enabled"))
        .and_then(|e| e.get("default_value"))
        .is_some_and(|v| matches!(v.val, Val::Bool(false)));
    if off {
        let why = "enabled.default_value false: a pass-through unless its runtime key turns it on";
        return Ok(Err(Skipped::new(file, what, filter.line, why)));
    }
    let gradient = config.and_then(|c| c.get("gradient_controller_config"));
    let Some(gradient) = gradient else {
        let why = "no gradient_controller_config: Envoy requires it";
        return Err(filter.bad(file, "gradient_controller_config", why));
    };
    let limits = gradient.get("concurrency_limit_params");
    let rtt = gradient.get("min_rtt_calc_params");
    let count = |n: Option<&Node>, name: &str| n.map(|n| whole(file, name, n)).transpose();
    let max = count(
        limits.and_then(|l| l.get("max_concurrency_limit")),
        "max_concurrency_limit",
    )?;
    let min = count(
        limits.and_then(|l| l.get("min_concurrency_limit")),
        "min_concurrency_limit",
    )?;
    let min = match min {
        Some(m) => Some(m),
        None => count(
            rtt.and_then(|r| r.get("min_concurrency")),
            "min_concurrency",
        )?,
    };
    let (max, min) = (max.unwrap_or(1000), min.unwrap_or(3));
    let (latency_s, latency) = rtt_latency(file, rtt)?;
    let mut notes = vec![format!(
        "the kit's adaptive discipline: max {max} (max_concurrency_limit{}), min and initial \
         {min} (the limit while Envoy measures the minimum round trip), {latency}, backoff the \
         kit's 0.9 (Envoy's gradient may halve the limit each concurrency_update_interval); \
         defaults of {VERSION}, {ADAPTIVE_PROTO}",
        if limits
            .and_then(|l| l.get("max_concurrency_limit"))
            .is_some()
        {
            ""
        } else {
            ", default"
        }
    )];
    notes.push(
        "its limit covers every pod behind this Envoy: read as one pod's, the most wait it allows"
            .into(),
    );
    let status = config
        .and_then(|c| c.get("concurrency_limit_exceeded_status"))
        .and_then(|s| s.get("code"));
    if let Some(code) = status {
        notes.push(format!(
            "answers {} past the limit (503 unless set): retried only by a client that retries it",
            code.summary()
        ));
    }
    let spec = DisciplineSpec {
        initial: Some(min),
        min: Some(min),
        max: Some(max),
        latency_s,
        ..DisciplineSpec::of(DisciplineKind::Adaptive)
    };
    Ok(Ok(QueueDiscipline {
        source: Source::new(file, filter.line, what),
        spec,
        notes,
    }))
}

struct Cx<'a> {
    file: &'a Path,
    clusters: &'a [&'a Node],
}

/// What a route's retries come from.
struct Policy<'a> {
    retry: Option<&'a Node>,
    /// The retry policy is the virtual host's.
    inherited: bool,
    hedge_on_timeout: bool,
}

impl Cx<'_> {
    fn virtual_host(
        &self,
        rc: Option<&str>,
        vh: &Node,
        parsed: &mut Parsed,
    ) -> Result<(), InputError> {
        let vh_name = vh.get("name").and_then(Node::str).unwrap_or("?");
        let prefix = match rc {
            Some(rc) => format!("route_config {rc} virtual_host {vh_name}"),
            None => format!("virtual_host {vh_name}"),
        };
        for (i, route) in list(self.file, vh, "routes")?.iter().enumerate() {
            let locator = match route.get("name").and_then(Node::str) {
                Some(name) => format!("{prefix} route {name}"),
                None => format!("{prefix} route[{i}]"),
            };
            let Some(action) = route.get("route") else {
                let why = "no route action (redirect, direct response): forwards nothing";
                let skipped = Skipped::new(self.file, locator, route.line, why);
                parsed.skipped.push(skipped);
                continue;
            };
            let hedge = |n: &Node| {
                n.get("hedge_policy")
                    .and_then(|h| h.get("hedge_on_per_try_timeout"))
                    .is_some_and(|b| matches!(b.val, Val::Bool(true)))
            };
            let policy = Policy {
                retry: action.get("retry_policy").or(vh.get("retry_policy")),
                inherited: action.get("retry_policy").is_none() && vh.get("retry_policy").is_some(),
                hedge_on_timeout: match action.get("hedge_policy") {
                    Some(_) => hedge(action),
                    None => hedge(vh),
                },
            };
            parsed
                .layers
                .push(self.layer(route, action, &policy, locator)?);
        }
        Ok(())
    }

    fn layer(
        &self,
        route: &Node,
        action: &Node,
        policy: &Policy,
        locator: String,
    ) -> Result<Layer, InputError> {
        let mut defaults = Vec::new();
        let mut notes = Vec::new();
        let overall = match action.get("timeout") {
            Some(t) => duration(self.file, "timeout", t)?,
            None => {
                defaults.push(used("timeout", "15s", "RouteAction.timeout"));
                15.0
            }
        };
        let overall_timeout_s = (overall > 0.0).then_some(overall);
        let retry = match policy.retry {
            Some(p) => self.retry(p, overall_timeout_s, policy, &mut defaults, &mut notes)?,
            None => {
                notes.push("no retry_policy: Envoy retries only requests that carry x-envoy-retry-on or x-envoy-retry-grpc-on".into());
                Retry::NONE
            }
        };
        if action.get("max_grpc_timeout").is_some() {
            notes.push(
                "max_grpc_timeout: a gRPC request's grpc-timeout header sets its route timeout"
                    .into(),
            );
        }
        let budget = self.budget(action, retry.tries > 1, &mut defaults, &mut notes)?;
        notes.push(
            "Envoy resets the upstream request and cancels its retries when the downstream goes"
                .into(),
        );
        Ok(Layer {
            tries: Tries::AtMost(retry.tries),
            retry_on: retry.on,
            per_try_timeout_s: retry.per_try_s,
            overall_timeout_s,
            budget,
            defaults,
            notes,
            ..Layer::new(
                "envoy",
                Tier::Edge,
                Source::new(self.file, route.line, locator),
            )
        })
    }
}

/// A route's retrying, as read from its policy.
struct Retry {
    tries: u32,
    on: RetryOn,
    per_try_s: Option<f64>,
}

impl Retry {
    const NONE: Retry = Retry {
        tries: 1,
        on: RetryOn::NOTHING,
        per_try_s: None,
    };
}

fn used(setting: &str, value: &str, proto_field: &str) -> DefaultUsed {
    let proto = if proto_field.starts_with("CircuitBreakers") {
        BREAKER_PROTO
    } else {
        ROUTE_PROTO
    };
    DefaultUsed::new(setting, value, VERSION, format!("{proto} {proto_field}"))
}

impl Cx<'_> {
    fn retry(
        &self,
        p: &Node,
        overall: Option<f64>,
        policy: &Policy,
        defaults: &mut Vec<DefaultUsed>,
        notes: &mut Vec<String>,
    ) -> Result<Retry, InputError> {
        if policy.inherited {
            notes.push("retry_policy from the virtual host".into());
        }
        let codes = status_codes(self.file, p)?;
        let written = p.get("retry_on").and_then(Node::str).unwrap_or("");
        let (mut on, known, class_notes) = envoy_retry_on(written, &codes);
        notes.extend(class_notes);
        if !known {
            notes.push("retry_policy without a retry_on condition Envoy knows: no retries".into());
            return Ok(Retry::NONE);
        }
        let retries = match p.get("num_retries") {
            Some(n) => whole(self.file, "num_retries", n)?,
            None => {
                defaults.push(used("num_retries", "1", "RetryPolicy.num_retries"));
                1
            }
        };
        let tries = retries.checked_add(1).ok_or_else(|| {
            let why = "more retries than check counts".to_string();
            InputError::field(self.file, "num_retries", &retries.to_string(), why)
        })?;
        let per_try = p.get("per_try_timeout");
        let per_try = per_try.map(|t| duration(self.file, "per_try_timeout", t));
        let mut per_try_s = per_try.transpose()?.filter(|s| *s > 0.0);
        if let (Some(t), Some(o)) = (per_try_s, overall)
            && t >= o
        {
            notes.push(format!(
                "per_try_timeout {t}s is not below the route timeout {o}s: Envoy ignores it"
            ));
            per_try_s = None;
        }
        if policy.hedge_on_timeout {
            on.timeout = true;
            notes.push(
                "hedge_on_per_try_timeout: a try that times out is retried and left running".into(),
            );
        }
        if on.timeout && per_try_s.is_none() {
            notes.push(
                "no per_try_timeout: a try lasts until the route timeout, which is not retried"
                    .into(),
            );
        }
        if p.get("per_try_idle_timeout").is_some() {
            notes.push(
                "per_try_idle_timeout: a try idle that long is reset and retried like a timeout"
                    .into(),
            );
        }
        Ok(Retry {
            tries,
            on,
            per_try_s,
        })
    }
}

fn status_codes(file: &Path, p: &Node) -> Result<Vec<u32>, InputError> {
    list(file, p, "retriable_status_codes")?
        .iter()
        .map(|c| whole(file, "retriable_status_codes", c))
        .collect()
}

/// A uint32 (protobuf JSON takes a number or a string of digits).
fn whole(file: &Path, name: &str, n: &Node) -> Result<u32, InputError> {
    let bad = |why: &str| n.bad(file, name, why);
    match &n.val {
        Val::Num(x) if x.fract() == 0.0 && *x >= 0.0 && *x <= f64::from(u32::MAX) => Ok(*x as u32),
        Val::Num(_) => Err(bad("not a whole number from 0 to 4294967295")),
        Val::Str(s) => s
            .parse::<u32>()
            .map_err(|_| bad("not a whole number from 0 to 4294967295")),
        _ => Err(bad("expected a number")),
    }
}

/// A protobuf JSON Duration ([`protobuf_duration_s`]): "0.25s".
fn duration(file: &Path, name: &str, n: &Node) -> Result<f64, InputError> {
    let bad = |why: &str| n.bad(file, name, why);
    let s = n
        .str()
        .ok_or_else(|| bad("not a duration like \"0.25s\" (a string: seconds, with an s)"))?;
    protobuf_duration_s(s).map_err(bad)
}

impl Cx<'_> {
    fn cluster(&self, name: &str) -> Option<&Node> {
        self.clusters
            .iter()
            .find(|c| c.get("name").and_then(Node::str) == Some(name))
            .copied()
    }

    /// The route's cluster's retry budget (for the route's priority), or notes on what limits
    /// retries instead.
    fn budget(
        &self,
        action: &Node,
        retries: bool,
        defaults: &mut Vec<DefaultUsed>,
        notes: &mut Vec<String>,
    ) -> Result<Option<Budget>, InputError> {
        if !retries {
            return Ok(None);
        }
        let Some(name) = action.get("cluster").and_then(Node::str) else {
            notes.push("the cluster is chosen per request (weighted_clusters, cluster_header): its circuit breakers are not read".into());
            return Ok(None);
        };
        let Some(cluster) = self.cluster(name) else {
            notes.push(format!("cluster {name} is not in this file: its retry limits (by default at most 3 retries in flight) are not read"));
            return Ok(None);
        };
        let priority = action
            .get("priority")
            .and_then(Node::str)
            .unwrap_or("DEFAULT");
        let thresholds = match cluster.get("circuit_breakers") {
            Some(cb) => list(self.file, cb, "thresholds")?,
            None => &[],
        };
        let ours = thresholds
            .iter()
            .find(|t| t.get("priority").and_then(Node::str).unwrap_or("DEFAULT") == priority);
        match ours.and_then(|t| t.get("retry_budget")) {
            Some(rb) => {
                let (percent, min_retry_concurrency) = retry_budget(self.file, rb, defaults)?;
                Ok(Some(Budget::InFlight {
                    percent,
                    min_retry_concurrency,
                }))
            }
            None => {
                let max = match ours.and_then(|t| t.get("max_retries")) {
                    Some(n) => whole(self.file, "max_retries", n)?,
                    None => {
                        defaults.push(used(
                            "max_retries",
                            "3",
                            "CircuitBreakers.Thresholds.max_retries",
                        ));
                        3
                    }
                };
                notes.push(format!("cluster {name}: at most {max} retries in flight at once (max_retries circuit breaker), not modelled: at high load it lets few retries through"));
                Ok(None)
            }
        }
    }
}

/// A `retry_budget` (`CircuitBreakers.Thresholds.RetryBudget`: `budget_percent {value}`,
/// `min_retry_concurrency`): the percentage and the floor, with their defaults. What they allow
/// per request is [`in_flight_ratio`], which the report prints beside them.
fn retry_budget(
    file: &Path,
    rb: &Node,
    defaults: &mut Vec<DefaultUsed>,
) -> Result<(f64, u32), InputError> {
    let percent = match rb.get("budget_percent") {
        Some(p) => {
            let v = p
                .get("value")
                .ok_or_else(|| p.bad(file, "budget_percent", "expected {value: PERCENT}"))?;
            match v.val {
                Val::Num(x) if (0.0..=100.0).contains(&x) => x,
                _ => return Err(v.bad(file, "budget_percent", "a percentage from 0 to 100")),
            }
        }
        None => {
            defaults.push(used(
                "budget_percent",
                "20%",
                "CircuitBreakers.Thresholds.RetryBudget.budget_percent",
            ));
            20.0
        }
    };
    let min = match rb.get("min_retry_concurrency") {
        Some(n) => whole(file, "min_retry_concurrency", n)?,
        None => {
            defaults.push(used(
                "min_retry_concurrency",
                "3",
                "CircuitBreakers.Thresholds.RetryBudget.min_retry_concurrency",
            ));
            3
        }
    };
    Ok((percent, min))
}

impl Cx<'_> {
    /// A cluster in a file with no route: its retry limit, for the report.
    fn lone_cluster(&self, c: &Node) -> Result<Skipped, InputError> {
        let name = c.get("name").and_then(Node::str).unwrap_or("?");
        let mut defaults = Vec::new();
        let thresholds = match c.get("circuit_breakers") {
            Some(cb) => list(self.file, cb, "thresholds")?,
            None => &[],
        };
        let default = thresholds
            .iter()
            .find(|t| t.get("priority").and_then(Node::str).unwrap_or("DEFAULT") == "DEFAULT");
        let limit = match default.and_then(|t| t.get("retry_budget")) {
            Some(rb) => {
                let (percent, _) = retry_budget(self.file, rb, &mut defaults)?;
                format!("retry budget {percent}%")
            }
            None => match default.and_then(|t| t.get("max_retries")) {
                Some(n) => format!("max_retries {}", whole(self.file, "max_retries", n)?),
                None => "max_retries 3 (default)".to_string(),
            },
        };
        let built_in: Vec<String> = defaults
            .iter()
            .map(|d| format!("{} {}", d.setting, d.value))
            .collect();
        let limit = if built_in.is_empty() {
            limit
        } else {
            format!("{limit} (built-in {})", built_in.join(", "))
        };
        let why = format!("{limit}; no route in this file sends to it");
        Ok(Skipped::new(
            self.file,
            format!("cluster {name}"),
            c.line,
            why,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str, text: &str) -> Parsed {
        parse(Path::new(name), text).unwrap()
    }

    fn by<'a>(parsed: &'a Parsed, locator: &str) -> &'a Layer {
        let found: Vec<&Layer> = parsed
            .layers
            .iter()
            .filter(|l| l.source.locator == locator)
            .collect();
        assert_eq!(found.len(), 1, "{locator} in {:#?}", parsed.layers);
        found[0]
    }

    const ALL: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: true,
    };

    const CONNECT: RetryOn = RetryOn {
        timeout: false,
        connect_failure: true,
        status_5xx: false,
    };

    #[test]
    fn a_retry_policy_without_retry_on_does_not_retry() {
        let text = include_str!("../tests/data/envoy/retry-previous-hosts.yaml");
        let parsed = read("retry-previous-hosts.yaml", text);
        assert_eq!(parsed.layers.len(), 1);
        let l = by(
            &parsed,
            "route_config local_route virtual_host local_service route[0]",
        );
        assert_eq!(l.software, "envoy");
        assert_eq!(l.tier, Tier::Edge);
        assert_eq!(l.source.line, Some(25));
        assert_eq!(l.tries, Tries::AtMost(1));
        assert_eq!(l.retry_on, RetryOn::NOTHING);
        assert_eq!(l.overall_timeout_s, Some(15.0));
        assert!(l.aborts_on_close);
        assert_eq!(l.budget, None);
        assert_eq!(l.defaults.len(), 1);
        assert_eq!(l.defaults[0].setting, "timeout");
        assert!(l.notes.iter().any(|n| n.contains("no retries")));
    }

    #[test]
    fn the_demo_bootstrap_routes_once_and_skips_an_empty_route_config() {
        let text = include_str!("../tests/data/envoy/envoy-demo.yaml");
        let parsed = read("envoy-demo.yaml", text);
        let l = by(&parsed, "route_config proxy virtual_host app route[0]");
        assert_eq!(l.tries, Tries::AtMost(1));
        assert_eq!(l.overall_timeout_s, Some(15.0));
        assert_eq!(parsed.layers.len(), 1);
        assert_eq!(parsed.skipped.len(), 1);
        assert!(
            parsed.skipped[0]
                .what
                .starts_with("route_config local_route")
        );
    }

    #[test]
    fn gateway_generated_routes_in_camel_case() {
        let text = include_str!("../tests/data/envoy/retry.routes.yaml");
        let parsed = read("retry.routes.yaml", text);
        assert_eq!(parsed.layers.len(), 3);
        let first = by(
            &parsed,
            "route_config first-listener virtual_host first-listener/* route first-route",
        );
        assert_eq!(first.tries, Tries::AtMost(4));
        assert_eq!(first.retry_on, CONNECT);
        assert!(
            first
                .notes
                .iter()
                .any(|n| n.contains("retries status 500: 500 outside"))
        );
        assert!(first.notes.iter().any(|n| n.contains("unavailable")));
        assert!(
            first
                .notes
                .iter()
                .any(|n| n.contains("first-route-dest is not in this file"))
        );
        let second = by(
            &parsed,
            "route_config first-listener virtual_host first-listener/foo route second-route-defaults",
        );
        assert_eq!(second.tries, Tries::AtMost(3));
        assert_eq!(
            second.retry_on,
            RetryOn {
                timeout: false,
                connect_failure: true,
                status_5xx: true
            }
        );
        let third = by(
            &parsed,
            "route_config first-listener virtual_host first-listener/foo route third-route-only-triggers",
        );
        assert_eq!(third.tries, Tries::AtMost(6));
        assert_eq!(
            third.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: true,
                status_5xx: false
            }
        );
        assert_eq!(third.per_try_timeout_s, None);
        assert!(third.notes.iter().any(|n| n.contains("no per_try_timeout")));
        assert!(third.defaults.iter().any(|d| d.setting == "timeout"));
        assert!(!third.defaults.iter().any(|d| d.setting == "num_retries"));
    }

    #[test]
    fn a_per_try_timeout_of_a_quarter_second() {
        let text = include_str!("../tests/data/envoy/retry-partial-invalid.routes.yaml");
        let parsed = read("retry-partial-invalid.routes.yaml", text);
        assert_eq!(parsed.layers.len(), 2);
        let l = by(
            &parsed,
            "route_config first-listener virtual_host first-listener/* route first-route",
        );
        assert_eq!(l.tries, Tries::AtMost(6));
        assert_eq!(l.retry_on, ALL);
        assert_eq!(l.per_try_timeout_s, Some(0.25));
        assert_eq!(l.overall_timeout_s, Some(15.0));
        assert!(l.notes.iter().any(|n| n.contains("only 503")));
        assert!(l.notes.iter().any(|n| n.contains("429")));
    }

    #[test]
    fn route_timeouts_and_zero_for_none() {
        let text = include_str!("../tests/data/envoy/http-route-timeout.routes.yaml");
        let parsed = read("http-route-timeout.routes.yaml", text);
        assert_eq!(parsed.layers.len(), 8);
        let timeouts: Vec<Option<f64>> =
            parsed.layers.iter().map(|l| l.overall_timeout_s).collect();
        assert_eq!(
            timeouts,
            [
                Some(5.0),
                Some(4000.0),
                None,
                Some(10.0),
                Some(10.0),
                None,
                None,
                Some(5.0)
            ]
        );
        assert!(parsed.layers.iter().all(|l| l.defaults.is_empty()));
    }

    #[test]
    fn a_cluster_list_alone_reports_its_budget() {
        let text = include_str!("../tests/data/envoy/circuit-breaker.clusters.yaml");
        let parsed = read("circuit-breaker.clusters.yaml", text);
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped.len(), 1);
        assert_eq!(parsed.skipped[0].what, "cluster first-route-dest (line 1)");
        assert!(
            parsed.skipped[0].why.starts_with("retry budget 10%"),
            "{}",
            parsed.skipped[0].why
        );
        let routes = include_str!("../tests/data/envoy/circuit-breaker.routes.yaml");
        let l = &read("circuit-breaker.routes.yaml", routes).layers[0];
        assert_eq!(l.tries, Tries::AtMost(1));
    }

    #[test]
    fn a_config_dump_in_json_has_no_lines() {
        let text = include_str!("../tests/data/envoy/multiple-xds.route.json");
        let parsed = read("multiple-xds.route.json", text);
        assert_eq!(parsed.layers.len(), 2);
        assert!(parsed.layers.iter().all(|l| l.source.line.is_none()));
        assert_eq!(
            parsed.layers[0].source.locator,
            "route_config default/eg/http virtual_host default/eg/http/www_example_com route httproute/default/backend/rule/0/match/0/www_example_com"
        );
    }

    #[test]
    fn routes_from_rds_are_listed_as_skipped() {
        let text = "filters:\n- name: hcm\n  typed_config:\n    rds: {route_config_name: r}\n";
        let parsed = read("lds.yaml", text);
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped[0].what, "rds r (line 4)");
    }

    #[test]
    fn the_v1_api_is_refused() {
        let text = include_str!("../tests/data/envoy/google_com_proxy.v1.json");
        match parse(Path::new("google_com_proxy.json"), text).unwrap_err() {
            InputError::Field { field, .. } => assert_eq!(field, "cluster_manager"),
            other => panic!("{other:?}"),
        }
    }

    const BOOTSTRAP: &str = "
static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          route_config:
            name: rc
            virtual_hosts:
            - name: vh
              domains: ['*']
              retry_policy: {retry_on: '5xx', num_retries: 2, per_try_timeout: 0.5s}
              routes:
              - match: {prefix: /a}
                route: {cluster: app, timeout: 3s}
              - match: {prefix: /b}
                route:
                  cluster: app
                  priority: HIGH
                  retry_policy: {retry_on: connect-failure}
              - match: {prefix: /c}
                redirect: {path_redirect: /a}
              - match: {prefix: /d}
                route: {cluster: plain, timeout: 0.4s}
  clusters:
  - name: app
    circuit_breakers:
      thresholds:
      - retry_budget: {budget_percent: {value: 25}, min_retry_concurrency: 10}
      - priority: HIGH
        max_retries: 7
  - name: plain
";

    #[test]
    fn routes_inherit_the_virtual_hosts_policy_and_clusters_give_budgets() {
        let parsed = read("bootstrap.yaml", BOOTSTRAP);
        assert_eq!(parsed.layers.len(), 3);
        let a = by(&parsed, "route_config rc virtual_host vh route[0]");
        assert_eq!(a.tries, Tries::AtMost(3));
        assert_eq!(a.retry_on, ALL);
        assert_eq!(a.per_try_timeout_s, Some(0.5));
        assert_eq!(a.overall_timeout_s, Some(3.0));
        // 25% of the requests in flight: a third of a retry per request once tries time out.
        let budget = a.budget.unwrap();
        assert_eq!(
            budget,
            Budget::InFlight {
                percent: 25.0,
                min_retry_concurrency: 10
            }
        );
        assert!((budget.failed_ratio() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(a.source.line, Some(16));
        assert!(a.notes.iter().any(|n| n.contains("from the virtual host")));
        // Not merged: the route's own policy has Envoy's default count.
        let b = by(&parsed, "route_config rc virtual_host vh route[1]");
        assert_eq!(b.tries, Tries::AtMost(2));
        assert_eq!(b.retry_on, CONNECT);
        assert_eq!(b.per_try_timeout_s, None);
        assert_eq!(b.budget, None);
        assert!(
            b.notes
                .iter()
                .any(|n| n.contains("at most 7 retries in flight"))
        );
        let settings: Vec<&str> = b.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(settings, ["timeout", "num_retries"]);
        // A per-try timeout not below the route timeout is ignored.
        let d = by(&parsed, "route_config rc virtual_host vh route[3]");
        assert_eq!(d.per_try_timeout_s, None);
        assert!(d.notes.iter().any(|n| n.contains("Envoy ignores it")));
        assert!(
            d.notes
                .iter()
                .any(|n| n.contains("at most 3 retries in flight"))
        );
        assert!(d.defaults.iter().any(|x| x.setting == "max_retries"));
        assert_eq!(parsed.skipped.len(), 1);
    }

    #[test]
    fn a_clusters_retry_budget_is_a_share_of_the_requests_in_flight() {
        let text = include_str!("../tests/data/envoy/retry-budget.yaml");
        let parsed = read("retry-budget.yaml", text);
        let [route] = parsed.layers.as_slice() else {
            panic!("{parsed:#?}")
        };
        assert_eq!(
            (route.tries, route.per_try_timeout_s),
            (Tries::AtMost(3), Some(1.0))
        );
        let budget = route.budget.unwrap();
        assert_eq!(
            budget,
            Budget::InFlight {
                percent: 20.0,
                min_retry_concurrency: 10
            }
        );
        assert_eq!(budget.failed_ratio(), 0.25);
        assert!(parsed.disciplines.is_empty());
    }

    #[test]
    fn the_adaptive_concurrency_filter_is_the_adaptive_discipline() {
        let text = include_str!("../tests/data/envoy/adaptive-concurrency.yaml");
        let parsed = read("adaptive-concurrency.yaml", text);
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped[0].what, "rds inbound (line 12)");
        let [limit] = parsed.disciplines.as_slice() else {
            panic!("{parsed:#?}")
        };
        assert_eq!(limit.source.locator, "adaptive_concurrency filter");
        assert_eq!(limit.source.line, Some(16));
        // max_concurrency_limit 400; min_concurrency 5 is the minimum and the start; minRTT is
        // sampled, so the latency is the kit's default, in service times.
        let s = limit.spec;
        assert_eq!(s.kind, DisciplineKind::Adaptive);
        assert_eq!((s.max, s.min, s.initial), (Some(400), Some(5), Some(5)));
        assert_eq!((s.latency_s, s.backoff), (None, None));
        assert!(s.needs_service_time());
        assert!(
            limit.notes[0].contains("max 400 (max_concurrency_limit)"),
            "{:?}",
            limit.notes
        );
        let d = s.resolve(Some(0.01)).unwrap();
        assert_eq!(
            d.to_string(),
            "adaptive (AIMD limit 5..400 from 5, latency 200 ms, backoff 0.9)"
        );
    }

    #[test]
    fn a_fixed_minimum_round_trip_gives_the_latency_and_a_filter_turned_off_is_skipped() {
        let filter = |config: &str| {
            format!(
                "http_filters:\n- name: envoy.filters.http.adaptive_concurrency\n  typed_config:\n{config}"
            )
        };
        let fixed = filter(
            "    gradient_controller_config:\n      concurrency_limit_params: \
             {concurrency_update_interval: 0.1s}\n      min_rtt_calc_params: {fixed_value: 0.04s, \
             buffer: {value: 50}}\n",
        );
        let parsed = read("fixed.yaml", &fixed);
        let s = parsed.disciplines[0].spec;
        assert_eq!((s.max, s.min), (Some(1000), Some(3)));
        assert!((s.latency_s.unwrap() - 0.06).abs() < 1e-12);
        assert!(!s.needs_service_time());
        assert!(parsed.disciplines[0].notes[0].contains("max_concurrency_limit, default"));
        let off = filter(
            "    enabled: {default_value: false, runtime_key: ac}\n    \
             gradient_controller_config: {}\n",
        );
        let parsed = read("off.yaml", &off);
        assert!(parsed.disciplines.is_empty());
        assert!(parsed.skipped[0].why.contains("pass-through"));
        match parse(
            Path::new("bare.yaml"),
            &filter("    enabled: {default_value: true}\n"),
        ) {
            Err(InputError::Field { field, .. }) => assert_eq!(field, "gradient_controller_config"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_on_conditions_map_to_the_three_classes() {
        let on = |s: &str, codes: &[u32]| envoy_retry_on(s, codes).0;
        let known = |s: &str| envoy_retry_on(s, &[]).1;
        assert_eq!(on("gateway-error", &[]), ALL);
        assert!(on("reset", &[]).timeout);
        assert_eq!(on("reset-before-request", &[]), CONNECT);
        assert_eq!(on(" connect-failure , refused-stream", &[]), CONNECT);
        assert!(on("retriable-status-codes", &[502, 503, 504]).status_5xx);
        assert!(!on("retriable-status-codes", &[500]).status_5xx);
        assert_eq!(on("retriable-4xx", &[]), RetryOn::NOTHING);
        assert!(known("retriable-4xx"));
        assert!(!known("5xxx"));
        assert!(known("5xx,bogus"));
        assert!(!known(""));
    }

    /// Envoy ignores a word it does not know; a route whose words are all unknown does not
    /// retry, and the word is named in a note, not refused.
    #[test]
    fn unknown_retry_on_words_are_noted() {
        let text = "virtual_hosts:
- name: v
  domains: ['*']
  routes:
  - match: {prefix: /a}
    route: {cluster: c, retry_policy: {retry_on: '5xx,sometimes', num_retries: 2}}
  - match: {prefix: /b}
    route: {cluster: c, retry_policy: {retry_on: sometimes, num_retries: 2}}
";
        let parsed = read("rc.yaml", text);
        let (a, b) = (&parsed.layers[0], &parsed.layers[1]);
        assert_eq!((a.tries, a.retry_on), (Tries::AtMost(3), ALL));
        assert!(a.notes.iter().any(|n| n.contains("sometimes")));
        assert_eq!((b.tries, b.retry_on), (Tries::AtMost(1), RetryOn::NOTHING));
        assert!(b.notes.iter().any(|n| n.contains("sometimes")));
    }

    #[test]
    fn hedging_on_per_try_timeout_retries_timeouts() {
        let text = "virtual_hosts:
- name: v
  domains: ['*']
  hedge_policy: {hedge_on_per_try_timeout: true}
  routes:
  - match: {prefix: /}
    route:
      cluster: c
      retry_policy: {retry_on: connect-failure, num_retries: 1, per_try_timeout: 1s}
";
        let l = &read("rc.yaml", text).layers[0];
        assert!(l.retry_on.timeout);
        assert!(l.notes.iter().any(|n| n.contains("left running")));
    }

    #[test]
    fn durations_are_seconds_with_an_s() {
        let d = |s: &str| {
            duration(
                Path::new("t"),
                "timeout",
                &Node {
                    line: None,
                    val: Val::Str(s.into()),
                },
            )
        };
        assert_eq!(d("0.25s").unwrap(), 0.25);
        assert_eq!(d("15s").unwrap(), 15.0);
        assert_eq!(d("0.000000001s").unwrap(), 1e-9);
        for bad in [
            "0.25",
            "1x",
            "-1s",
            "s",
            ".5s",
            "1.s5",
            "1e3s",
            "0.0000000001s",
            "1 s",
            "999999999999999s",
        ] {
            assert!(d(bad).is_err(), "{bad}");
        }
    }

    fn refused(name: &str, text: &str) -> InputError {
        parse(Path::new(name), text).unwrap_err()
    }

    #[test]
    fn malformed_files_name_the_line_or_the_field() {
        match refused("bad.yaml", "virtual_hosts: [\n  {name: a\n") {
            InputError::Syntax { line, .. } => assert!(line >= 1),
            other => panic!("{other:?}"),
        }
        match refused("bad.json", "{\"virtual_hosts\": [}") {
            InputError::Syntax { line, .. } => assert_eq!(line, 1),
            other => panic!("{other:?}"),
        }
        let route = |policy: &str| {
            format!(
                "virtual_hosts:\n- name: v\n  domains: ['*']\n  routes:\n  - match: {{prefix: /}}\n    route: {{cluster: c, {policy}}}\n"
            )
        };
        let cases = [
            ("timeout: 1x", "timeout", "1x"),
            ("timeout: 5", "timeout", "5"),
            (
                "retry_policy: {retry_on: 5xx, per_try_timeout: 0.25}",
                "per_try_timeout",
                "0.25",
            ),
            (
                "retry_policy: {retry_on: 5xx, num_retries: -1}",
                "num_retries",
                "-1",
            ),
            (
                "retry_policy: {retry_on: 5xx, num_retries: 99999999999}",
                "num_retries",
                "99999999999",
            ),
            (
                "retry_policy: {retry_on: 5xx, num_retries: many}",
                "num_retries",
                "many",
            ),
            (
                "retry_policy: {retry_on: 5xx, num_retries: 4294967295}",
                "num_retries",
                "4294967295",
            ),
            (
                "retry_policy: {retry_on: retriable-status-codes, retriable_status_codes: [x]}",
                "retriable_status_codes",
                "x",
            ),
        ];
        for (policy, name, value) in cases {
            match refused("r.yaml", &route(policy)) {
                InputError::Field {
                    field,
                    value: v,
                    why,
                    ..
                } => {
                    assert_eq!(
                        (field.as_str(), v.as_str()),
                        (name, value),
                        "{policy}: {why}"
                    );
                }
                other => panic!("{policy}: {other:?}"),
            }
        }
        let budget = "clusters:\n- name: c\n  circuit_breakers:\n    thresholds:\n    - retry_budget: {budget_percent: {value: 150}}\n";
        match refused("c.yaml", budget) {
            InputError::Field {
                field, value, why, ..
            } => {
                assert_eq!((field.as_str(), value.as_str()), ("budget_percent", "150"));
                assert!(why.starts_with("line 5: "), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            refused("k.yaml", "kind: Deployment\nspec: {}\n"),
            InputError::UnknownKind { .. }
        ));
        match refused("v.yaml", "virtual_hosts: {}\n") {
            InputError::Field { field, .. } => assert_eq!(field, "virtual_hosts"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hostile_input_is_refused_or_read_without_panic() {
        let deep_yaml = "[".repeat(200) + &"]".repeat(200);
        let deep_json = "[".repeat(200) + &"]".repeat(200);
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
        for (name, text) in [
            ("a.yaml", deep_yaml.as_str()),
            ("a.json", deep_json.as_str()),
            ("b.yaml", bomb),
            ("c.yaml", ""),
            ("d.yaml", "\u{0}"),
            ("e.yaml", "---\na: 1\n---\nb: 2\n"),
            ("f.json", ""),
            ("g.yaml", "virtual_hosts: [{routes: 5, domains: x}]"),
            ("h.yaml", "virtual_hosts: [{name: v, routes: [{route: 7}]}]"),
            (
                "i.yaml",
                "clusters: [{name: c, circuit_breakers: {thresholds: [{retry_budget: {budget_percent: 3}}]}}]",
            ),
        ] {
            let _ = parse(Path::new(name), text);
        }
    }
}
